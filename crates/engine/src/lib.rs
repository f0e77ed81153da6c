//! The neuralcore engine: a data dir holding the document store and one keyword index
//! per collection, the ingestion pipeline that keeps them in step, and search.
//!
//! Consistency: the store is the source of truth. Each ingest batch commits to the store
//! first (bumping the collection's generation and recording what changed), then to the
//! keyword index with that generation in its commit payload. When the process dies
//! between the two, the next open finds the index one generation behind and replays the
//! store's journal; any other gap rebuilds the index from the store.

mod config;
mod engine;
mod ingest;

pub use config::{Config, IngestConfig, KeywordConfig, SearchConfig, TEMPLATE};
pub use engine::{Engine, SearchHit};
pub use ingest::{FileOutcome, IngestObserver, IngestSummary, RemoveSummary};

/// Errors of the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Bad configuration.
    #[error("configuration error: {0}")]
    Config(String),
    /// Bad argument from the caller.
    #[error("{0}")]
    InvalidInput(String),
    /// Something named does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The document store failed.
    #[error(transparent)]
    Store(#[from] neuralcore_core::StoreError),
    /// The keyword index failed.
    #[error(transparent)]
    Index(#[from] neuralcore_index::IndexError),
    /// File system failure.
    #[error("{0}")]
    Io(String),
}

/// Current time as RFC 3339 (seconds).
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
