//! Errors of the memory layer.

/// Why a memory operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MemoryError {
    /// No memory (or node) with this id.
    #[error("no memory with id {0:?}")]
    NotFound(String),
    /// The request cannot be done as asked (empty text, a self-relation, a cycle, ...).
    #[error("{0}")]
    Invalid(String),
    /// It already exists.
    #[error("{0}")]
    Conflict(String),
    /// The backend is unreachable or timed out (worth retrying).
    #[error("memory store unavailable: {0}")]
    Unavailable(String),
    /// The backend failed.
    #[error("memory store: {0}")]
    Backend(String),
}

/// Results of the memory layer.
pub type MemResult<T> = Result<T, MemoryError>;
