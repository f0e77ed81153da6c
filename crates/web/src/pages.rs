//! [`PageFetcher`]: one web page fetched, guarded against the server's own network, and
//! cleaned into text.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use ureq::unversioned::transport::DefaultConnector;
use ureq::ResponseExt;

use crate::guard::{Allowed, GuardedResolver};
use crate::http::{
    cache_lifetime, check_http_url, classify, content_type, decode, http_error, read_capped,
};
use crate::{WebConfig, WebError};

/// Redirects followed per request.
pub(crate) const MAX_REDIRECTS: u32 = 5;
/// `Accept` header of page fetches.
const PAGE_ACCEPT: &str = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.1";

/// A fetched page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// Where the page was read, after redirects.
    pub url: String,
    /// Its title (empty when it names none).
    pub title: String,
    /// Its cleaned text.
    pub text: String,
}

/// Fetches single pages: for the results of a web search, and for URL ingest.
///
/// Unless `allow_private_urls` is set, every connection (the first and each redirect)
/// goes only to public addresses: a URL whose host is, or resolves to, a loopback,
/// private, carrier-grade NAT, link-local, unique-local, reserved or multicast address
/// fails with [`WebError::Refused`] before anything is sent (see [`crate::refused_range`]).
/// With the guard on, pages are fetched directly, never through a proxy from
/// `HTTP(S)_PROXY`: a proxy would resolve names where the guard cannot see them.
#[derive(Clone)]
pub struct PageFetcher {
    agent: ureq::Agent,
    max_bytes: usize,
    /// Where fetched pages and search results are kept, and the partition
    /// ([`WebSearch::scoped`](crate::WebSearch::scoped)): none, not kept.
    pub(crate) cache: Option<Arc<dyn WebCache>>,
    pub(crate) scope: Option<String>,
}

impl std::fmt::Debug for PageFetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageFetcher")
            .field("max_bytes", &self.max_bytes)
            .field("cached", &self.cache.is_some())
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

/// A store of fetched pages and search results for
/// [`WebSearch::with_cache`](crate::WebSearch::with_cache): `key` names what was asked
/// (`page <url>`, `search <url>`), `scope` partitions entries (one tenant's never serve
/// another); a store must keep the partitions apart. `ttl` is the lifetime the page's
/// `Cache-Control` allows (`None`: it sets none, the store's own applies). Failures are
/// the store's to absorb: a `get` that fails is a miss.
pub trait WebCache: Send + Sync {
    /// The value stored for `key` in `scope`, if any.
    fn get(&self, scope: &str, key: &str) -> Option<Vec<u8>>;
    /// Store `value` for `key` in `scope`, for at most `ttl`.
    fn put(&self, scope: &str, key: &str, value: &[u8], ttl: Option<Duration>);
}

enum Kind {
    Html,
    Plain,
    Sniff,
}

impl PageFetcher {
    /// A fetcher with `cfg`'s timeout, size limit, user agent and guard; fails with
    /// [`WebError::InvalidConfig`] on an unusable `allow_addresses` entry.
    pub fn new(cfg: &WebConfig) -> Result<PageFetcher, WebError> {
        let allowed = cfg
            .allow_addresses
            .iter()
            .map(|a| Allowed::parse(a))
            .collect::<Result<Vec<_>, _>>()
            .map_err(WebError::InvalidConfig)?;
        let builder = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_millis(cfg.timeout_ms.max(1))))
            .user_agent(cfg.user_agent.as_str())
            .max_redirects(MAX_REDIRECTS);
        let agent = if cfg.allow_private_urls {
            builder.build().new_agent()
        } else {
            ureq::Agent::with_parts(
                builder.proxy(None).build(),
                DefaultConnector::default(),
                GuardedResolver::new(allowed),
            )
        };
        Ok(PageFetcher {
            agent,
            max_bytes: cfg.max_page_bytes,
            cache: None,
            scope: None,
        })
    }

    /// [`PageFetcher::fetch`] through the cache of a scoped fetcher: a page kept and not
    /// expired is returned without a request; a fetched page is kept for as long as its
    /// `Cache-Control` allows (never with `no-store`, `no-cache` or `private`).
    pub(crate) fn fetch_cached(&self, url: &str) -> Result<Page, WebError> {
        let (Some(cache), Some(scope)) = (self.cache.as_deref(), self.scope.as_deref()) else {
            return self.fetch(url);
        };
        let key = format!("page {url}");
        if let Some(page) = cache
            .get(scope, &key)
            .and_then(|b| serde_json::from_slice::<Page>(&b).ok())
        {
            return Ok(page);
        }
        let (page, lifetime) = self.fetch_with_lifetime(url)?;
        if let (Some(ttl), Ok(bytes)) = (lifetime, serde_json::to_vec(&page)) {
            cache.put(scope, &key, &bytes, ttl);
        }
        Ok(page)
    }

    /// Fetch one page and clean it. HTML (`text/html`, `application/xhtml+xml`) is
    /// cleaned like the HTML loader cleans files (scripts, styles, navigation and hidden
    /// parts removed); `text/plain` is returned as is (trimmed); a response without a
    /// content type is read as HTML when it looks like HTML, else as text; other types
    /// fail with [`WebError::UnsupportedContent`] before their body is read. Bodies
    /// longer than `max_page_bytes` are cut there and cleaned as far as they go. A URL
    /// with credentials (`user:password@`) is refused, so none ends up in a document's
    /// metadata or a log.
    pub fn fetch(&self, url: &str) -> Result<Page, WebError> {
        self.fetch_with_lifetime(url).map(|(page, _)| page)
    }

    /// [`PageFetcher::fetch`], and how long a cache may keep the page (see
    /// [`cache_lifetime`]).
    fn fetch_with_lifetime(&self, url: &str) -> Result<(Page, Option<Option<Duration>>), WebError> {
        let target = check_http_url(url)?;
        if has_userinfo(&target) {
            return Err(WebError::InvalidUrl {
                url: redact_userinfo(url),
                reason: "URLs with credentials (user:password@) are not fetched".to_owned(),
            });
        }
        let resp = self
            .agent
            .get(&target)
            .header("Accept", PAGE_ACCEPT)
            .call()
            .map_err(|e| classify(e, url))?;
        if !resp.status().is_success() {
            return Err(http_error(resp, url));
        }
        let final_url = resp.get_uri().to_string();
        let lifetime = cache_lifetime(&resp);
        let (mime, charset) = content_type(&resp);
        let kind = match mime.as_deref() {
            Some("text/html" | "application/xhtml+xml") => Kind::Html,
            Some("text/plain") => Kind::Plain,
            None => Kind::Sniff,
            Some(other) => return Err(WebError::UnsupportedContent(other.to_owned())),
        };
        let (bytes, truncated) = read_capped(resp, self.max_bytes, url)?;
        if truncated {
            tracing::debug!(url, limit = self.max_bytes, "page cut at max_page_bytes");
        }
        let text = decode(&bytes, charset.as_deref());
        let no_text = || WebError::Malformed(format!("{url}: the page holds no text"));
        let html = match kind {
            Kind::Html => true,
            Kind::Plain => false,
            Kind::Sniff => looks_like_html(&text),
        };
        let (title, text) = if html {
            neuralcore_ingest::html_to_text(&text, "").map_err(|e| match e {
                neuralcore_ingest::LoadError::Empty => no_text(),
                other => WebError::Malformed(format!("{url}: {other}")),
            })?
        } else {
            if text.contains('\0') {
                return Err(WebError::UnsupportedContent(
                    "binary data (no content type)".to_owned(),
                ));
            }
            let trimmed = text.trim();
            if trimmed.is_empty() {
                return Err(no_text());
            }
            (String::new(), trimmed.to_owned())
        };
        Ok((
            Page {
                url: final_url,
                title,
                text,
            },
            lifetime,
        ))
    }
}

/// The authority of an `http(s)://` URL (already checked by [`check_http_url`]).
fn authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?', '#']).next().unwrap_or_default()
}

fn has_userinfo(url: &str) -> bool {
    authority(url).contains('@')
}

/// `url` with the user information of its authority replaced by `***`.
fn redact_userinfo(url: &str) -> String {
    let auth = authority(url);
    match auth.rsplit_once('@') {
        Some((_, host)) => url.replacen(auth, &format!("***@{host}"), 1),
        None => url.to_owned(),
    }
}

/// Whether a body without a content type looks like HTML.
fn looks_like_html(text: &str) -> bool {
    let start: String = text
        .trim_start()
        .chars()
        .take(256)
        .collect::<String>()
        .to_ascii_lowercase();
    start.starts_with("<!doctype html")
        || start.starts_with("<html")
        || start.starts_with("<?xml")
        || start.contains("<head")
        || start.contains("<body")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_sniffing() {
        assert!(looks_like_html("  <!DOCTYPE html><p>x"));
        assert!(looks_like_html("<html>"));
        assert!(!looks_like_html("plain words < and >"));
    }

    #[test]
    fn credentials_are_refused_and_never_echoed() {
        let f = PageFetcher::new(&WebConfig::default()).unwrap();
        let err = f.fetch("http://admin:hunter2@example.org/x").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("credentials"), "{msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
        assert!(msg.contains("***@example.org"), "{msg}");
        assert!(!has_userinfo("http://example.org/a@b"));
    }
}
