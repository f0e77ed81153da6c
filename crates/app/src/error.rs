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
    /// A bug or a broken store: not the caller's fault.
    #[error("{0}")]
    Internal(String),
}

impl AppError {
    /// A short stable name of the category (`invalid_input`, `not_found`,
    /// `unavailable`, `internal`).
    pub fn kind(&self) -> &'static str {
        match self {
            AppError::InvalidInput(_) => "invalid_input",
            AppError::NotFound(_) => "not_found",
            AppError::Unavailable(_) => "unavailable",
            AppError::Internal(_) => "internal",
        }
    }
}

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::InvalidInput(m) => AppError::InvalidInput(m),
            EngineError::NotFound(m) => AppError::NotFound(m),
            EngineError::Config(m) => AppError::InvalidInput(m),
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
