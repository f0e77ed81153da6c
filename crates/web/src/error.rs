//! The error type of this crate.

use thiserror::Error;

/// Why a search or a page fetch failed.
///
/// [`WebError::is_transient`] tells the errors worth retrying later (server down, timeout,
/// overload) from those that will not go away by themselves (configuration, bad answers).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WebError {
    /// `searxng_url` is empty: web search is disabled.
    #[error("web search is disabled: no SearxNG URL is configured (searxng_url)")]
    NotConfigured,
    /// A URL (the SearxNG base URL, or a page to fetch) is not usable.
    #[error("invalid URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The page is on an address the guard refuses (loopback, private, link-local...),
    /// directly, through its name's DNS answer, or through a redirect.
    #[error(
        "refused to fetch `{url}`: {reason}; pages are fetched only from public addresses \
         (allow more with [web] allow_addresses or allow_private_urls)"
    )]
    Refused {
        /// The URL as given.
        url: String,
        /// Which address and why.
        reason: String,
    },
    /// A setting of `[web]` is not usable.
    #[error("[web] in the config: {0}")]
    InvalidConfig(String),
    /// The server could not be reached (connection refused, DNS, TLS, redirect loop...).
    #[error("unreachable: {0}")]
    Unavailable(String),
    /// The request did not finish within `timeout_ms`.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The server answered with a status other than 2xx.
    #[error("HTTP {status}: {body}")]
    Http {
        /// Status code.
        status: u16,
        /// Start of the response body (at most 512 characters).
        body: String,
    },
    /// SearxNG answered `403 Forbidden` to `format=json`: its settings do not enable the
    /// JSON output format.
    #[error(
        "SearxNG at {url} refused the JSON format (HTTP 403): enable `json` in search.formats \
         of settings.yml (search: formats: [html, json])"
    )]
    JsonFormatDisabled {
        /// The SearxNG base URL.
        url: String,
    },
    /// The answer could not be understood (invalid JSON, wrong shape, too large, broken
    /// HTTP, a page with no text).
    #[error("malformed response: {0}")]
    Malformed(String),
    /// A page's content type is neither HTML nor plain text (PDF, image...); not read.
    #[error("unsupported content type `{0}` (only HTML and plain text are read)")]
    UnsupportedContent(String),
}

impl WebError {
    /// True for errors that may go away when retried later: [`WebError::Unavailable`],
    /// [`WebError::Timeout`], and HTTP 408, 429 and 5xx.
    pub fn is_transient(&self) -> bool {
        match self {
            WebError::Unavailable(_) | WebError::Timeout(_) => true,
            WebError::Http { status, .. } => matches!(status, 408 | 429 | 500..=599),
            WebError::NotConfigured
            | WebError::InvalidUrl { .. }
            | WebError::Refused { .. }
            | WebError::InvalidConfig(_)
            | WebError::JsonFormatDisabled { .. }
            | WebError::Malformed(_)
            | WebError::UnsupportedContent(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors() {
        assert!(WebError::Timeout("x".into()).is_transient());
        assert!(WebError::Unavailable("x".into()).is_transient());
        let http = |status| WebError::Http {
            status,
            body: String::new(),
        };
        assert!(http(503).is_transient());
        assert!(http(429).is_transient());
        assert!(!http(404).is_transient());
        assert!(!WebError::NotConfigured.is_transient());
        assert!(!WebError::Malformed("x".into()).is_transient());
    }

    #[test]
    fn json_disabled_message_says_what_to_change() {
        let msg = WebError::JsonFormatDisabled {
            url: "http://127.0.0.1:8888".into(),
        }
        .to_string();
        assert!(
            msg.contains("enable `json` in search.formats of settings.yml"),
            "{msg}"
        );
    }
}
