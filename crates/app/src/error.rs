//! One error type for every front end, in the categories a front end maps to its own
//! codes (an exit code, an HTTP status, an MCP error): the category is decided here,
//! once, from the error's kind — never by matching message text.

use neuralcore_agents::AgentError;
use neuralcore_engine::EngineError;
use neuralcore_memory::MemoryError;
use neuralcore_mind::MindError;

/// What went wrong, by category.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The caller asked for something malformed (a bad name, an empty question).
    #[error("{0}")]
    InvalidInput(String),
    /// What was asked for does not exist (for this tenant).
    #[error("{0}")]
    NotFound(String),
    /// A backend is down or busy; worth retrying.
    #[error("{0}")]
    Unavailable(String),
    /// The server's settings do not allow it (a feature that is off).
    #[error("{0}")]
    Forbidden(String),
    /// Something outside the server that the request named (a web page) failed or did
    /// not answer in time; the message says what, and names nothing of the server.
    #[error("{0}")]
    Upstream(String),
    /// The disk of the data dir is full (or over quota): nothing was written; worth
    /// retrying once space is freed. The message names no path: front ends show it.
    #[error("{0}")]
    StorageFull(String),
    /// A bug or a broken store: not the caller's fault.
    #[error("{0}")]
    Internal(String),
}

impl AppError {
    /// A short stable name of the category (`invalid_input`, `not_found`, `forbidden`,
    /// `upstream`, `unavailable`, `storage_full`, `internal`).
    pub fn kind(&self) -> &'static str {
        match self {
            AppError::InvalidInput(_) => "invalid_input",
            AppError::NotFound(_) => "not_found",
            AppError::Forbidden(_) => "forbidden",
            AppError::Upstream(_) => "upstream",
            AppError::Unavailable(_) => "unavailable",
            AppError::StorageFull(_) => "storage_full",
            AppError::Internal(_) => "internal",
        }
    }

    /// Log an internal error's detail (it may name a path of the server's disk, so no
    /// front end shows it) under a new id, and return the id the front end names instead.
    pub fn log_internal(detail: &str) -> u64 {
        let id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| (d.as_nanos() % 1_000_000_000_000) as u64)
            .unwrap_or(0);
        tracing::error!(error_id = %id, "internal error: {detail}");
        id
    }

    /// Cannot `what` (e.g. "store the upload") because the disk is full.
    pub fn storage_full(what: &str) -> Self {
        AppError::StorageFull(format!(
            "cannot {what}: the disk of the data dir is full (free some space, then try again)"
        ))
    }
}

/// Whether `e`, or an error under it, is an I/O error of a full disk (or quota).
pub(crate) fn is_disk_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let full = |io: &std::io::Error| {
        matches!(
            io.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
    };
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if full(io) {
                return true;
            }
        }
        if let Some(io) = e.downcast_ref::<std::sync::Arc<std::io::Error>>() {
            if full(io) {
                return true;
            }
        }
        next = e.source();
    }
    false
}

impl From<neuralcore_engine::ConfigError> for AppError {
    fn from(e: neuralcore_engine::ConfigError) -> Self {
        AppError::InvalidInput(e.0)
    }
}

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        if matches!(e, EngineError::Store(neuralcore_core::StoreError::Full(_))) || is_disk_full(&e)
        {
            return AppError::storage_full("write to the store or its indexes");
        }
        match e {
            EngineError::InvalidInput(m) => AppError::InvalidInput(m),
            EngineError::NotFound(m) => AppError::NotFound(m),
            EngineError::Config(m) => AppError::InvalidInput(m),
            EngineError::Format(m) => AppError::InvalidInput(m),
            EngineError::Store(neuralcore_core::StoreError::InvalidInput(m)) => {
                AppError::InvalidInput(m)
            }
            EngineError::Store(e) if e.is_transient() => AppError::Unavailable(e.to_string()),
            other => AppError::Internal(other.to_string()),
        }
    }
}

impl From<MindError> for AppError {
    fn from(e: MindError) -> Self {
        match e {
            MindError::Unavailable(_) => AppError::Unavailable(e.to_string()),
            MindError::InvalidKey { .. }
            | MindError::InvalidPattern { .. }
            | MindError::TooLarge { .. } => AppError::InvalidInput(e.to_string()),
            other => AppError::Internal(other.to_string()),
        }
    }
}

impl From<AgentError> for AppError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Invalid(m) => AppError::InvalidInput(m),
            AgentError::Cancelled => AppError::Unavailable("the run was cancelled".into()),
            AgentError::Mind(m) => m.into(),
            other => AppError::Internal(other.to_string()),
        }
    }
}

impl From<MemoryError> for AppError {
    fn from(e: MemoryError) -> Self {
        match e {
            MemoryError::Invalid(m) | MemoryError::Conflict(m) => AppError::InvalidInput(m),
            MemoryError::NotFound(_) => AppError::NotFound(e.to_string()),
            MemoryError::Unavailable(_) => AppError::Unavailable(e.to_string()),
            MemoryError::Backend(_) => AppError::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("wrapped")]
    struct Wrapped(#[source] std::io::Error);

    #[test]
    fn a_full_disk_is_its_own_category_and_names_no_path() {
        let e = AppError::from(EngineError::Store(neuralcore_core::StoreError::Full(
            "No space left on device (os error 28)".into(),
        )));
        assert!(matches!(e, AppError::StorageFull(_)), "{e:?}");
        assert_eq!(e.kind(), "storage_full");
        assert!(e.to_string().contains("disk") && !e.to_string().contains('/'));
        // Found under other errors too (an index's I/O error).
        let io = || std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert!(is_disk_full(&Wrapped(io())));
        assert!(is_disk_full(&Wrapped(std::io::Error::other(Wrapped(io())))));
        assert!(!is_disk_full(&Wrapped(std::io::Error::from(
            std::io::ErrorKind::NotFound
        ))));
        let other = AppError::from(EngineError::Store(neuralcore_core::StoreError::Backend(
            "x".into(),
        )));
        assert_eq!(other.kind(), "internal");
    }
}
