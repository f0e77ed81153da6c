//! Trust-weighted memory.
//!
//! Every memory is a hypothesis until it proves useful: it starts at trust 0.5; being
//! used (cited in an answer) or confirmed raises it, being ignored or corrected lowers
//! it, disuse decays it exponentially; below 0.3 it is archived (left out of search,
//! restorable) and after a grace period purged. Every change is in an audit log, so a
//! user can see why a memory has its score. Relations (SUPERSEDES, PARTIAL_UPDATE,
//! RELATED_TO, CONTRADICTS, DERIVED_FROM, MENTIONS, PART_OF) link memories, documents
//! and entities.
//!
//! - [`types`]: records, signals, audit entries, relations.
//! - [`trust`]: the arithmetic, pure.
//! - [`backend`]: what a storage backend provides; [`MemoryStore`] puts the rules on top.

#![warn(missing_docs)]

pub mod backend;
pub mod conformance;
pub mod error;
pub mod feedback;
pub mod graph;
pub mod memory_backend;
pub mod redb_backend;
pub mod rerank;
pub mod search;
pub mod store;
pub mod tiers;
pub mod trust;
pub mod types;

pub use backend::MemoryBackend;
pub use error::{MemResult, MemoryError};
pub use feedback::Feedback;
pub use memory_backend::InMemoryBackend;
pub use redb_backend::RedbBackend;
pub use rerank::MemoryRanker;
pub use search::{MemHit, MemorySearchOptions, MemorySearcher};
pub use store::{
    memory_id, now_ms, MemoryStore, NewMemory, SweepReport, MAX_QUERY_BYTES, MAX_TEXT_BYTES,
};
pub use trust::TrustConfig;
pub use types::{AuditEntry, Filter, Kind, MemScope, Memory, RelKind, Relation, Signal, Status};
