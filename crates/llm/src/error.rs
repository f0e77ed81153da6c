//! [`LlmError`]: one error enum for the LLM layer, split into transient and permanent.

/// Why a chat request failed.
///
/// [`is_transient`](Self::is_transient) tells a caller whether trying again later may
/// help. The client has already retried transient failures (and malformed responses)
/// `max_retries` times before returning one of them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// No endpoint is configured (`base_url` is empty).
    #[error("no LLM configured (base_url is empty)")]
    NotConfigured,
    /// The configuration is unusable (a base URL that is not http(s), a zero timeout, an
    /// API key that cannot be sent as a header …).
    #[error("invalid LLM configuration: {0}")]
    InvalidConfig(String),
    /// The server could not be reached or dropped the connection (refused, DNS failure,
    /// reset), after retries.
    #[error("LLM server unavailable: {0}")]
    Unavailable(String),
    /// The connection or the whole request took longer than its budget, after retries.
    #[error("LLM request timed out: {0}")]
    Timeout(String),
    /// The server answered with a non-success status. `body` is the start of the
    /// response body (truncated to about 1 KiB).
    #[error("LLM server returned HTTP {status}: {body}")]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The start of the response body, truncated.
        body: String,
    },
    /// The response was not a chat completion: not JSON, no `choices`, no message content,
    /// a broken event stream, or larger than the body cap. Carries a short description and
    /// a truncated snippet of the body.
    #[error("malformed LLM response: {0}")]
    Malformed(String),
    /// A failure that retrying will not fix, below HTTP: a TLS certificate rejected, a
    /// redirect of the POST, an invalid header.
    #[error("LLM transport error: {0}")]
    Transport(String),
    /// The caller cancelled the request.
    #[error("LLM request cancelled")]
    Cancelled,
}

impl LlmError {
    /// Whether trying again later may succeed: `Unavailable`, `Timeout`, and HTTP 408, 429
    /// and 5xx. Everything else (other 4xx, `Malformed` after its retries, configuration,
    /// transport and cancellation) is permanent.
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::Unavailable(_) | LlmError::Timeout(_) => true,
            LlmError::Http { status, .. } => matches!(status, 408 | 429 | 500..=599),
            LlmError::NotConfigured
            | LlmError::InvalidConfig(_)
            | LlmError::Malformed(_)
            | LlmError::Transport(_)
            | LlmError::Cancelled => false,
        }
    }

    /// Whether the client retries after this error: the transient ones plus `Malformed`
    /// (a server that sent garbage once may recover).
    pub(crate) fn is_retryable(&self) -> bool {
        self.is_transient() || matches!(self, LlmError::Malformed(_))
    }
}

/// `s` cut to at most `max` bytes on a char boundary, with `…` appended when cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A short printable snippet of a body for error messages.
pub(crate) fn snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(&body[..body.len().min(400)]);
    let s = truncate(s.trim(), 200);
    if s.is_empty() {
        "<empty body>".to_owned()
    } else {
        format!("{s:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_classification() {
        let http = |status| LlmError::Http {
            status,
            body: String::new(),
        };
        assert!(LlmError::Unavailable("x".into()).is_transient());
        assert!(LlmError::Timeout("x".into()).is_transient());
        for s in [408, 429, 500, 502, 503, 599] {
            assert!(http(s).is_transient(), "{s}");
        }
        for s in [400, 401, 403, 404, 422] {
            assert!(!http(s).is_transient(), "{s}");
        }
        assert!(!LlmError::Malformed("x".into()).is_transient());
        assert!(LlmError::Malformed("x".into()).is_retryable());
        assert!(!LlmError::NotConfigured.is_retryable());
        assert!(!LlmError::Cancelled.is_retryable());
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 3), "abc");
        assert_eq!(snippet(b""), "<empty body>");
        assert_eq!(snippet(b" oops "), "\"oops\"");
    }
}
