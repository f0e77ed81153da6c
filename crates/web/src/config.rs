//! Settings of the web search.

use serde::{Deserialize, Serialize};

/// Where to search and how much to fetch.
///
/// Every field has a default, so a configuration file needs only `searxng_url`:
///
/// ```
/// let cfg: neuralcore_web::WebConfig =
///     serde_json::from_str(r#"{"searxng_url": "http://127.0.0.1:8888"}"#).unwrap();
/// assert_eq!(cfg.max_results, 5);
/// assert!(cfg.enabled());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// Base URL of a SearxNG instance (`http://127.0.0.1:8888`, or with a path prefix such
    /// as `https://host/searx`). Empty: web search is disabled.
    pub searxng_url: String,
    /// Budget of one request (search or page), from connecting to the last body byte, in
    /// milliseconds.
    pub timeout_ms: u64,
    /// Results kept per search (after removing duplicate URLs).
    pub max_results: usize,
    /// Fetch each result's page and clean it into [`WebResult::text`](crate::WebResult);
    /// when false, only SearxNG's snippets are returned.
    pub fetch_pages: bool,
    /// Largest response body read, in bytes: a longer page is cut at this size (and cleaned
    /// as far as it goes); a longer search answer is an error.
    pub max_page_bytes: usize,
    /// SearxNG categories (comma-separated), sent as `categories=`. Empty: not sent.
    pub categories: String,
    /// Search language (`en`, `de`, `all`...), sent as `language=`. Empty: not sent.
    pub language: String,
    /// `User-Agent` header of every request.
    pub user_agent: String,
    /// Let users add web pages by URL (the MCP tool `ingest_url`, `POST
    /// /v1/collections/{name}/urls`). Off by default: a server that fetches what its
    /// callers name must be meant to.
    pub ingest_urls: bool,
    /// Fetch pages on this machine's own network too (loopback, private, link-local,
    /// unique-local... addresses). Off by default: a URL to ingest, a search result or a
    /// redirect naming such an address, or a name resolving to one, is refused.
    pub allow_private_urls: bool,
    /// Addresses let through although not public: `10.0.0.5`, ranges (`10.1.0.0/16`,
    /// `fd00::/8`) or one port of an address (`127.0.0.1:8081`).
    pub allow_addresses: Vec<String>,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            searxng_url: String::new(),
            timeout_ms: 3000,
            max_results: 5,
            fetch_pages: true,
            max_page_bytes: 2 * 1024 * 1024,
            categories: "general".to_owned(),
            language: "en".to_owned(),
            user_agent: concat!("neuralcore/", env!("CARGO_PKG_VERSION")).to_owned(),
            ingest_urls: false,
            allow_private_urls: false,
            allow_addresses: Vec::new(),
        }
    }
}

impl WebConfig {
    /// Whether a SearxNG URL is set.
    pub fn enabled(&self) -> bool {
        !self.searxng_url.trim().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_partial_config() {
        let d = WebConfig::default();
        assert!(!d.enabled());
        assert_eq!(d.timeout_ms, 3000);
        assert_eq!(d.max_page_bytes, 2 * 1024 * 1024);
        assert!(d.fetch_pages);
        assert_eq!(d.categories, "general");
        assert_eq!(d.language, "en");
        assert!(d.user_agent.starts_with("neuralcore/"));
        assert!(!d.ingest_urls && !d.allow_private_urls && d.allow_addresses.is_empty());

        let c: WebConfig =
            serde_json::from_str(r#"{"searxng_url":"http://x:1","fetch_pages":false}"#).unwrap();
        assert!(c.enabled());
        assert!(!c.fetch_pages);
        assert_eq!(c.max_results, 5);
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = serde_json::from_str::<WebConfig>(r#"{"searx_url":"http://x"}"#).unwrap_err();
        assert!(e.to_string().contains("searx_url"), "{e}");
    }
}
