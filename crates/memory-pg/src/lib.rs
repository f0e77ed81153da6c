//! A PostgreSQL backend for [`neuralcore_memory`]: memories, their audit log and typed
//! relations in one schema of a PostgreSQL database, so several processes can share one
//! memory.
//!
//! [`PgBackend`] implements [`MemoryBackend`]; the trust rules stay in
//! [`neuralcore_memory::MemoryStore`] above it, and the same conformance suite as the
//! in-memory and embedded backends checks it (`tests/pg.rs`, against a real server).
//!
//! Why it is built this way:
//!
//! - **Rows, not a key-value blob.** The fields `list` filters on (status, tenant,
//!   project, session, kind) are columns, so filtering happens in SQL; the whole record
//!   is also kept as JSON so new fields need no migration (tables below).
//! - **Row locks for updates.** `update` is `SELECT ... FOR UPDATE`, the change applied
//!   in Rust, `UPDATE`, the audit rows, `COMMIT`, all in one transaction; an error from
//!   the change rolls everything back. Many threads or processes signalling one memory
//!   lose nothing.
//! - **pgvector when present.** Embeddings go into a `vector` column when the `vector`
//!   extension is installed or can be created, so vector search in SQL is possible
//!   later; else into `real[]`. Either way they round-trip exactly.
//! - **The synchronous `postgres` client** (tokio-postgres on a private current-thread
//!   runtime), because [`MemoryBackend`] is synchronous; a small pool
//!   ([`PgOptions::pool_size`]) lets threads work in parallel. The pool, the error
//!   classification and URL redaction are `neuralcore-pg`'s, shared with the document
//!   store on PostgreSQL. No TLS: the server is expected on loopback or a private
//!   network.
//!
//! Errors: an unreachable server, a timeout, a server shutting down, a deadlock or a
//! serialization failure are [`MemoryError::Unavailable`] (retry), with the URL shown
//! without its password; a malformed URL or schema name, or a NUL character in an id, a
//! scope's tenant, project or session, or a relation's node (text columns, which cannot
//! hold NUL), are [`MemoryError::Invalid`]; anything else is [`MemoryError::Backend`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use neuralcore_memory::{MemoryStore, NewMemory, TrustConfig};
//! use neuralcore_memory_pg::PgBackend;
//!
//! let pg = PgBackend::connect("postgres://postgres@127.0.0.1:5439/postgres", "memory")?;
//! let store = MemoryStore::new(Arc::new(pg), TrustConfig::default())?;
//! let m = store.add(
//!     NewMemory { text: "The deploy runs on Fridays.".into(), ..Default::default() },
//!     "user",
//!     1_700_000_000_000,
//! )?;
//! println!("{} trust {}", m.id, m.trust);
//! # Ok::<(), neuralcore_memory::MemoryError>(())
//! ```
//!
//! # Tables
//!
//! In the backend's own schema (one per tenant, deployment or test):
//!
//! - `memories`: `id` (primary key), the filter columns `status`, `tenant`, `project`,
//!   `session`, `kind`, the record as `body json` (without its embedding), and the
//!   embedding in `embedding` (`vector` or `real[]`), or, for the few that pgvector
//!   cannot hold (empty, over 16,000 dimensions, NaN or infinite components), in
//!   `embedding_other real[]`.
//!
//!   The record is `json`, not `jsonb`: `jsonb` refuses `\u0000` (NUL) in strings and
//!   turns numbers into `numeric` (losing the sign of a zero), while `json` keeps the
//!   text as written, so every memory reads back exactly. Nothing queries inside it.
//! - `audit`: `seq bigserial` (the order), `memory`, `entry json`; indexed on
//!   `(memory, seq)`.
//! - `relations`: `(src, kind, dst)` primary key, `body json`; indexed on `dst` and
//!   `kind`.
//! - `version`: one row, [`MemoryBackend::version`], started from the clock when the
//!   schema is created and bumped by a statement-level trigger on `memories` and
//!   `relations` in the writing transaction, so a reader that sees the same version
//!   before and after a read saw one state (what caches of memory searches rely on),
//!   whichever process wrote.
//!
//! Keys use the `C` collation, so `ORDER BY id` is byte order, the order Rust sorts
//! `String`s in, whatever the database's locale. Schema creation runs under an advisory
//! lock, so many clients may connect to a new schema at once.
//!
//! `scripts/postgres.sh` starts a local PostgreSQL 16 with pgvector for the tests.

#![warn(missing_docs)]

mod backend;
mod sql;

pub use backend::{PgBackend, PgOptions};
pub use neuralcore_memory::{MemResult, MemoryBackend, MemoryError};
