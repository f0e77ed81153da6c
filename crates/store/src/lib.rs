//! Document stores: [`InMemoryStore`] (the in-memory twin), [`RedbStore`] (embedded,
//! persistent, crash-safe) and [`PgStore`] (PostgreSQL, shared by many processes), all
//! implementing `neuralcore_core::DocStore`.
//!
//! Both backends are thin: they provide raw ordered byte tables with atomic batches
//! ([`raw`]), and one shared implementation ([`logic`]) maps documents, chunks, sources,
//! collection counters and index journals onto them. The [`conformance`] suite runs the
//! same checks against every backend.

pub mod conformance;
pub mod copy;
mod logic;
mod memory;
mod pg_store;
mod pg_vectors;
mod raw;
mod redb_store;
pub mod reopen;

pub use memory::InMemoryStore;
pub use pg_store::{Migrated, PgStore, PgStoreOptions, PG_SCHEMA_VERSION};
pub use pg_vectors::{PgVectorHit, PgVectors, VectorTxn, DEFAULT_BUILD_MEMORY_MB};
pub use redb_store::RedbStore;
