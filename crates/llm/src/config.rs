//! [`LlmConfig`]: where the endpoint is, how long to wait, how often to retry, what it costs.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How to reach an OpenAI-compatible chat-completions endpoint.
///
/// Every field has a default (see [`LlmConfig::default`]), so a config file needs only the
/// fields it changes; unknown fields are rejected so a typo does not pass silently.
///
/// ```
/// let cfg: neuralcore_llm::LlmConfig = serde_json::from_str(
///     r#"{"base_url": "http://127.0.0.1:8080/v1", "model": "smollm2"}"#,
/// )?;
/// assert_eq!(cfg.max_retries, 2);
/// assert!(cfg.is_configured());
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// `Debug` never prints the API key.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL of the API, e.g. `http://127.0.0.1:8080/v1` (llama.cpp, vLLM, LM Studio),
    /// `http://127.0.0.1:11434/v1` (Ollama) or `https://api.openai.com/v1`; requests go to
    /// `{base_url}/chat/completions`. Empty means no LLM is configured.
    pub base_url: String,
    /// Model name sent in every request (`model`); omitted from the request when empty,
    /// which single-model servers such as llama.cpp accept.
    pub model: String,
    /// API key sent as `Authorization: Bearer <key>`. When `None`, the key is read from the
    /// environment variable named by [`api_key_env`](Self::api_key_env) (if set and
    /// non-empty); local servers need none. Never serialized, so a dumped config does not
    /// leak it (keep keys in the environment).
    #[serde(skip_serializing)]
    pub api_key: Option<String>,
    /// Environment variable holding the API key when `api_key` is `None`
    /// (default `OPENAI_API_KEY`; empty = never read the environment).
    pub api_key_env: String,
    /// Budget for one attempt, from connecting until the last byte of the response
    /// (streamed responses included), in milliseconds. Default 30000.
    pub timeout_ms: u64,
    /// Budget for establishing the TCP (and TLS) connection, in milliseconds. Default 2000.
    pub connect_timeout_ms: u64,
    /// Retries after the first attempt for transient failures (default 2: at most 3
    /// attempts).
    pub max_retries: u32,
    /// Base of the exponential backoff between attempts, in milliseconds (default 200:
    /// about 200, 400, 800 ms … with jitter).
    pub backoff_ms: u64,
    /// Upper bound of one wait between attempts, in milliseconds, for both the exponential
    /// backoff and a server's `Retry-After` (default 10000).
    pub max_backoff_ms: u64,
    /// Sampling temperature (default 0.0: as deterministic as the server allows).
    pub temperature: f32,
    /// Default cap on generated tokens per request (default 512; 0 = let the server
    /// decide, `max_tokens` is then not sent).
    pub max_tokens: u32,
    /// Whether [`LlmClient::chat`](crate::LlmClient::chat) streams (server-sent events) and
    /// collects the text. Default false.
    pub stream: bool,
    /// Price in USD per million prompt tokens; 0 = unpriced (no cost reported).
    pub price_input_per_mtok: f64,
    /// Price in USD per million completion tokens; 0 = unpriced.
    pub price_output_per_mtok: f64,
}

impl Default for LlmConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            model: String::new(),
            api_key: None,
            api_key_env: "OPENAI_API_KEY".to_owned(),
            timeout_ms: 30_000,
            connect_timeout_ms: 2_000,
            max_retries: 2,
            backoff_ms: 200,
            max_backoff_ms: 10_000,
            temperature: 0.0,
            max_tokens: 512,
            stream: false,
            price_input_per_mtok: 0.0,
            price_output_per_mtok: 0.0,
        }
    }
}

impl LlmConfig {
    /// A config for `base_url` and `model`, every other field at its default.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            ..Self::default()
        }
    }

    /// Whether an endpoint is set at all (`base_url` is not blank).
    pub fn is_configured(&self) -> bool {
        !self.base_url.trim().is_empty()
    }

    /// Whether either price is set, so responses carry a cost.
    pub fn is_priced(&self) -> bool {
        self.price_input_per_mtok > 0.0 || self.price_output_per_mtok > 0.0
    }

    /// The cost in USD of `prompt_tokens` in and `completion_tokens` out, or `None` when
    /// the config is unpriced.
    pub fn cost_usd(&self, prompt_tokens: u64, completion_tokens: u64) -> Option<f64> {
        self.is_priced().then(|| {
            (prompt_tokens as f64 * self.price_input_per_mtok
                + completion_tokens as f64 * self.price_output_per_mtok)
                / 1e6
        })
    }
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("api_key_env", &self.api_key_env)
            .field("timeout_ms", &self.timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("max_retries", &self.max_retries)
            .field("backoff_ms", &self.backoff_ms)
            .field("max_backoff_ms", &self.max_backoff_ms)
            .field("temperature", &self.temperature)
            .field("max_tokens", &self.max_tokens)
            .field("stream", &self.stream)
            .field("price_input_per_mtok", &self.price_input_per_mtok)
            .field("price_output_per_mtok", &self.price_output_per_mtok)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documentation() {
        let c = LlmConfig::default();
        assert_eq!(c.api_key_env, "OPENAI_API_KEY");
        assert_eq!((c.timeout_ms, c.connect_timeout_ms), (30_000, 2_000));
        assert_eq!((c.max_retries, c.backoff_ms), (2, 200));
        assert_eq!((c.max_tokens, c.stream), (512, false));
        assert!(!c.is_configured());
        assert_eq!(c.cost_usd(1000, 1000), None);
    }

    #[test]
    fn unknown_fields_are_rejected_and_missing_ones_default() {
        let err = serde_json::from_str::<LlmConfig>(r#"{"base_ur": "x"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let c: LlmConfig = serde_json::from_str(r#"{"model": "m", "stream": true}"#).unwrap();
        assert_eq!((c.model.as_str(), c.stream, c.max_retries), ("m", true, 2));
    }

    #[test]
    fn cost_is_tokens_times_price_per_million() {
        let c = LlmConfig {
            price_input_per_mtok: 2.0,
            price_output_per_mtok: 10.0,
            ..LlmConfig::default()
        };
        let cost = c.cost_usd(1_000, 500).unwrap();
        assert!((cost - (0.002 + 0.005)).abs() < 1e-12, "{cost}");
    }

    #[test]
    fn debug_and_serialize_never_show_the_api_key() {
        let c = LlmConfig {
            api_key: Some("sk-secret".into()),
            ..LlmConfig::default()
        };
        let s = format!("{c:?}");
        assert!(!s.contains("sk-secret") && s.contains("<redacted>"), "{s}");
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("sk-secret"), "{json}");
        // What is serialized reads back.
        let back: LlmConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back.api_key, None);
    }
}
