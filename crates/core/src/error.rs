//! Errors of the storage layer. Categories follow the usual split so callers can decide
//! whether to retry: invalid input and not-found are permanent, unavailable is transient.

use thiserror::Error;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// What can go wrong in a document store.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The caller asked for something malformed (empty collection name, ...).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The store could not be opened or is held by another process (transient).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The disk holding the store is full (or over quota): nothing of the write was
    /// committed; it may succeed once space is freed (transient).
    #[error("the disk holding the store is full: {0}")]
    Full(String),
    /// The data on disk could not be decoded.
    #[error("store data corrupt: {0}")]
    Corrupt(String),
    /// Any other backend failure.
    #[error("store backend error: {0}")]
    Backend(String),
}

impl StoreError {
    /// True when retrying the same call later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_) | StoreError::Full(_))
    }
}
