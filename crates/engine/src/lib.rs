//! The neuralcore engine: a data dir holding the document store, one keyword index and
//! one vector index per collection, the ingestion pipeline that keeps them in step, and
//! search (keyword, vector, hybrid).
//!
//! Consistency: the store is the source of truth. Each ingest batch commits to the store
//! first (bumping the collection's generation and recording what changed), then to the
//! keyword index with that generation in its commit payload. When the process dies
//! between the two, the next open finds the index one generation behind and replays the
//! store's journal; any other gap rebuilds the index from the store. The vector index
//! works the same way; its vectors come from the store's embedding cache, written in
//! the same batch as the chunks they belong to.

mod cached;
mod engine;
mod format;
mod ingest;
mod search;
mod vectors;

pub use cached::{open_cache, tenant_of};
pub use engine::{Engine, SearchHit, SearchResults};
pub use format::{check as check_data_dir_format, DATA_DIR_FORMAT, FORMAT_FILE};
pub use ingest::{FileOutcome, IngestObserver, IngestSummary, RemoveSummary};
pub use neuralcore_cache::{Op as CacheOp, Served as CacheServed};
pub use neuralcore_config::{
    AgentsConfig, CacheSettings, ColdTierKind, Config, ConfigError, EmbeddingConfig, Fusion,
    GradeConfig, HotTierKind, IndexSettings, IngestConfig, KeywordConfig, LoopConfig,
    MemoryBackendKind, MemorySettings, MindBackend, MindSettings, RerankConfig, SearchConfig,
    SearchMode, StoreBackendKind, StoreSettings, VectorBackendKind, VectorConfig, TEMPLATE,
};
pub use search::{blended, fuse, fuse_lists, Ranked, ScoredChunk, SearchOptions};
pub use vectors::{embed_text, Vectors, TRAINED_EVALUATOR, TRAINED_MODELS, TRAINED_RERANKER};

impl From<ConfigError> for EngineError {
    fn from(e: ConfigError) -> Self {
        EngineError::Config(e.0)
    }
}

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
    /// The vector index failed.
    #[error(transparent)]
    Vector(#[from] neuralcore_index::VectorError),
    /// The embedding model failed.
    #[error("embedding model: {0}")]
    Model(String),
    /// File system failure.
    #[error("{0}")]
    Io(String),
    /// The data dir's format is newer than this release's, or its stamp is damaged.
    #[error("{0}")]
    Format(String),
}

/// Current time as RFC 3339 (seconds).
pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}
