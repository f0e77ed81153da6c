//! The one error type of the Mind.

/// What can go wrong with a Mind operation. `Unavailable` is the transient kind (retry
/// later); the others are permanent for the same input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MindError {
    /// A key, run id or tenant that breaks the naming rules; the message says which rule.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The offending input.
        key: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A `list_keys` pattern that breaks the pattern rules.
    #[error("invalid pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The offending pattern.
        pattern: String,
        /// The rule it breaks.
        reason: String,
    },
    /// A value whose serialized JSON is larger than the configured maximum.
    #[error("value for {key} is {size} bytes of JSON, more than the maximum of {max}")]
    TooLarge {
        /// The key written.
        key: String,
        /// Serialized size in bytes.
        size: usize,
        /// The configured maximum (`MindConfig::max_value_bytes`).
        max: usize,
    },
    /// A compare-and-set whose expected version is not the current one (0 = absent).
    #[error("version conflict on {key}: expected version {expected}, found {found}")]
    Conflict {
        /// The key.
        key: String,
        /// The version the caller expected.
        expected: u64,
        /// The version found (0 when the key does not exist).
        found: u64,
    },
    /// The backend cannot be reached or did not answer in time (transient).
    #[error("mind backend unavailable: {0}")]
    Unavailable(String),
    /// The backend refused or failed an operation.
    #[error("mind backend error: {0}")]
    Backend(String),
    /// Stored data that cannot be decoded.
    #[error("corrupt mind entry: {0}")]
    Corrupt(String),
}

impl MindError {
    /// True for errors worth retrying later (`Unavailable`).
    pub fn is_transient(&self) -> bool {
        matches!(self, MindError::Unavailable(_))
    }
}

/// Result of Mind operations.
pub type MindResult<T> = Result<T, MindError>;
