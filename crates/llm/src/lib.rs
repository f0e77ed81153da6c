//! A blocking client for OpenAI-compatible chat-completions endpoints.
//!
//! One wire format reaches OpenAI, Ollama, vLLM, llama.cpp's server and LM Studio: `POST
//! {base_url}/chat/completions` with `model`, `messages`, `temperature`, `max_tokens` and
//! `stream`. [`LlmClient`] speaks it over one HTTP client (ureq, rustls for https) with no
//! async runtime, so the engine's worker threads can call it directly. An empty
//! `base_url` means no LLM: [`LlmClient::new`] returns [`LlmError::NotConfigured`] and
//! the caller carries on without one.
//!
//! # Retries: what counts as transient
//!
//! Each call makes at most `max_retries + 1` attempts. An attempt is retried when it
//! failed with something a later attempt may not meet:
//!
//! - the server was unreachable or dropped the connection ([`LlmError::Unavailable`]),
//! - the attempt ran out of time ([`LlmError::Timeout`]: `connect_timeout_ms` to connect,
//!   `timeout_ms` for the whole attempt, body included),
//! - HTTP 408, 429 or 5xx ([`LlmError::Http`]),
//! - a 2xx whose body is not a chat completion ([`LlmError::Malformed`]: not JSON, no
//!   `choices`, no content) — a server that sent garbage once may recover.
//!
//! Other 4xx (a bad key, an unknown model, a prompt too long), configuration errors and
//! cancellation return at once. Between attempts the client waits `backoff_ms · 2^(n-1)`
//! with equal jitter (half of it random, so many clients do not retry in step), or the
//! server's `Retry-After` (seconds) on 429 and 503; each wait is capped by
//! `max_backoff_ms`. After the last attempt [`LlmError::is_transient`] tells the caller
//! whether trying again later may help; `Malformed` then counts as permanent.
//!
//! # Streaming
//!
//! [`LlmClient::chat_stream`] asks for `"stream": true` with
//! `stream_options.include_usage` and reads the server-sent events (`data: {chunk}` …
//! `data: [DONE]`) incrementally, handing each text delta to a callback. The parser
//! tolerates lines split across reads, CRLF or CR line ends, `:` comments, `data:`
//! without a space and a stream that ends without `[DONE]`. A failed stream is retried
//! only while nothing has reached the callback, so a caller never sees text twice.
//! [`LlmClient::chat`] streams too when the config says `stream`, collecting the text.
//!
//! # Usage and cost
//!
//! Token counts come from the server's `usage` (for a stream, from its final chunk).
//! Servers that send none get an estimate of about four characters a token
//! ([`estimate_tokens`]), flagged by [`ChatResponse::usage_estimated`]. With prices set
//! in the config, [`ChatResponse::cost_usd`] is `tokens × price / 10⁶` for prompt and
//! completion tokens.
//!
//! # Hostile servers
//!
//! No response makes the client panic. Bodies are capped at [`MAX_BODY_BYTES`] (8 MiB,
//! streams included) and error bodies are truncated before they reach an error message.
//! Redirects are not followed (a 3xx comes back as [`LlmError::Http`]), and the API key
//! never appears in `Debug` output.
//!
//! ```no_run
//! use neuralcore_llm::{ChatMessage, ChatRequest, LlmClient, LlmConfig};
//!
//! let client = LlmClient::new(LlmConfig::new("http://127.0.0.1:8080/v1", "smollm2"))?;
//! let req = ChatRequest::new(vec![
//!     ChatMessage::system("Answer in one word."),
//!     ChatMessage::user("What is the capital of France?"),
//! ]);
//! let answer = client.chat(&req)?;
//! println!("{} ({} tokens)", answer.text, answer.usage.total());
//!
//! let streamed = client.chat_stream(&req, &mut |delta| print!("{delta}"))?;
//! assert!(!streamed.text.is_empty());
//! # Ok::<(), neuralcore_llm::LlmError>(())
//! ```
#![warn(missing_docs)]

mod client;
mod config;
mod error;
mod sse;
mod types;
mod wire;

pub use client::{CompletionCache, LlmClient, MAX_BODY_BYTES};
pub use config::LlmConfig;
pub use error::LlmError;
pub use types::{ChatMessage, ChatRequest, ChatResponse, Role, Usage};

/// Entry points for the fuzz targets under `fuzz/`: built only with `--cfg fuzzing`, as
/// `cargo fuzz` builds, so nothing here is part of the API.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Read `body` as a non-streamed chat-completion answer.
    pub fn completion(body: &[u8]) {
        let _ = crate::wire::parse_completion(body);
    }

    /// Read `body` as a completion stream arriving in pieces cut at `cuts` (offsets,
    /// any order): server-sent events, each event's data read as a stream chunk.
    pub fn stream(body: &[u8], cuts: &[usize]) {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        at.push(body.len());
        at.sort_unstable();
        let (mut parser, mut events, mut from) = (crate::sse::SseParser::new(), Vec::new(), 0);
        for to in at {
            parser.feed(&body[from..to], &mut events);
            from = to;
        }
        parser.finish(&mut events);
        for e in &events {
            if e.data != "[DONE]" {
                let _ = crate::wire::parse_chunk(&e.data);
            }
        }
    }
}

/// A rough token count for budgeting: characters / 4, rounded up (0 for empty text).
///
/// Real tokenizers give about 4 characters a token for English prose; code, numbers and
/// other scripts take more tokens than this says.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::estimate_tokens;

    #[test]
    fn estimate_tokens_rounds_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
        assert_eq!(estimate_tokens("éééé"), 1);
    }
}
