//! Requests and responses as callers see them (the wire format lives in `wire.rs`).

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model (`"system"`).
    System,
    /// The user's turn (`"user"`).
    User,
    /// The model's earlier turn (`"assistant"`).
    Assistant,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who wrote it.
    pub role: Role,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// One chat-completion request. `None` fields fall back to the client's [`LlmConfig`].
///
/// [`LlmConfig`]: crate::LlmConfig
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    pub messages: Vec<ChatMessage>,
    /// Cap on generated tokens (default: the config's `max_tokens`).
    pub max_tokens: Option<u32>,
    /// Sampling temperature (default: the config's `temperature`).
    pub temperature: Option<f32>,
    /// Sequences at which the server stops generating (not sent when empty).
    pub stop: Vec<String>,
}

impl ChatRequest {
    /// A request with these messages and every option at the config's default.
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        Self {
            messages,
            ..Self::default()
        }
    }

    /// A request of one user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(vec![ChatMessage::user(content)])
    }

    /// The same request with `max_tokens` set.
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// The same request with `temperature` set.
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }
}

/// Token counts of one completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt (all messages).
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
}

impl Usage {
    /// Prompt plus completion tokens.
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }
}

/// A completed chat request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The generated text (for a stream: all deltas concatenated).
    pub text: String,
    /// Token counts, as reported by the server, or estimated (see `usage_estimated`).
    pub usage: Usage,
    /// True when the server reported no usage and `usage` was estimated with
    /// [`estimate_tokens`](crate::estimate_tokens) (about 4 characters a token).
    pub usage_estimated: bool,
    /// The model the server says answered (the configured model if it did not say).
    pub model: String,
    /// Why generation stopped (`"stop"`, `"length"` …), if the server said.
    pub finish_reason: Option<String>,
    /// HTTP attempts made, the successful one included (1 = no retry).
    pub attempts: u32,
    /// Wall time of the whole call in milliseconds: every attempt and backoff wait.
    pub latency_ms: f64,
    /// For a stream: milliseconds from the start of the successful attempt to its first
    /// non-empty delta. `None` for a non-streamed response or a stream with no text.
    pub ttft_ms: Option<f64>,
    /// Cost in USD from the config's prices, `None` when unpriced.
    pub cost_usd: Option<f64>,
    /// True when the completion came from the client's completion cache
    /// ([`LlmClient::with_cache`](crate::LlmClient::with_cache)): no request was sent,
    /// `attempts` is 0 and nothing was spent (`usage` is zero, `cost_usd` 0 when priced).
    #[serde(default)]
    pub cached: bool,
}
