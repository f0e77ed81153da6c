//! [`WebSearch`]: one SearxNG JSON query, then the result pages fetched and cleaned.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::{check_http_url, classify, encode_component, http_error, read_capped};
use crate::pages::{Page, PageFetcher, WebCache, MAX_REDIRECTS};
use crate::{WebConfig, WebError};

/// Pages fetched at the same time during one search.
const MAX_PARALLEL_FETCHES: usize = 4;

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebResult {
    /// The result's address; empty for results that have none (SearxNG's key-value
    /// results of offline engines).
    pub url: String,
    /// Title given by the search engine (else the page's own title once fetched).
    pub title: String,
    /// The engine's snippet, white space collapsed (key-value results: `key: value` pairs).
    pub snippet: String,
    /// Engine that found it, as SearxNG names it.
    pub engine: Option<String>,
    /// SearxNG's score (higher is better), when given.
    pub score: Option<f64>,
    /// The page's cleaned text, when it was fetched and read.
    pub text: Option<String>,
    /// Why the page could not be fetched or read, when that was tried and failed.
    pub fetch_error: Option<String>,
}

impl WebResult {
    /// The best text there is: the cleaned page, else the snippet.
    pub fn best_text(&self) -> &str {
        match &self.text {
            Some(t) if !t.trim().is_empty() => t,
            _ => &self.snippet,
        }
    }
}

/// A client for one SearxNG instance. Cheap to share between threads (`&WebSearch` is
/// enough to search); connections are pooled.
#[derive(Debug, Clone)]
pub struct WebSearch {
    cfg: WebConfig,
    /// `searxng_url` validated, without trailing `/`.
    base: String,
    /// Asks SearxNG (the configured instance is trusted: it may be on this network).
    agent: ureq::Agent,
    /// Fetches the result pages (guarded).
    pages: PageFetcher,
}

/// A page's title and text, or why it could not be had.
type Fetched = Result<Page, WebError>;

impl WebSearch {
    /// A client for `cfg.searxng_url`. Fails with [`WebError::NotConfigured`] when the URL
    /// is empty and [`WebError::InvalidUrl`] when it is not an `http(s)://host...` URL.
    /// Nothing is sent yet.
    pub fn new(cfg: WebConfig) -> Result<Self, WebError> {
        if !cfg.enabled() {
            return Err(WebError::NotConfigured);
        }
        let mut base = check_http_url(&cfg.searxng_url)?;
        if base.contains('?') {
            return Err(WebError::InvalidUrl {
                url: cfg.searxng_url.clone(),
                reason: "the base URL must not have a query".to_owned(),
            });
        }
        while base.ends_with('/') {
            base.pop();
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_millis(cfg.timeout_ms.max(1))))
            .user_agent(cfg.user_agent.as_str())
            .max_redirects(MAX_REDIRECTS)
            .build()
            .new_agent();
        let pages = PageFetcher::new(&cfg)?;
        Ok(WebSearch {
            cfg,
            base,
            agent,
            pages,
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &WebConfig {
        &self.cfg
    }

    /// The same client, keeping search results and fetched pages in `cache` when
    /// [scoped](Self::scoped): a repeated search is answered without asking SearxNG, a
    /// kept page without fetching it (pages for as long as their `Cache-Control`
    /// allows).
    pub fn with_cache(mut self, cache: Arc<dyn WebCache>) -> Self {
        self.pages.cache = Some(cache);
        self
    }

    /// A copy whose results and pages are cached under `scope` (a tenant): only scoped
    /// clients use the cache.
    pub fn scoped(&self, scope: &str) -> Self {
        let mut s = self.clone();
        s.pages.scope = Some(scope.to_owned());
        s
    }

    /// The cache and scope, when this client caches.
    fn cache(&self) -> Option<(&dyn WebCache, &str)> {
        Some((self.pages.cache.as_deref()?, self.pages.scope.as_deref()?))
    }

    /// The URL [`WebSearch::search`] requests for `query`.
    pub fn search_url(&self, query: &str) -> String {
        let mut url = format!(
            "{}/search?q={}&format=json",
            self.base,
            encode_component(query.trim())
        );
        for (key, value) in [
            ("categories", &self.cfg.categories),
            ("language", &self.cfg.language),
        ] {
            if !value.trim().is_empty() {
                url.push_str(&format!("&{key}={}", encode_component(value.trim())));
            }
        }
        url
    }

    /// Search SearxNG and return at most `max_results` results, duplicates (same URL)
    /// removed, in SearxNG's order. With `fetch_pages`, each result's page is then fetched
    /// and cleaned into [`WebResult::text`] (a few at a time); a page that fails sets
    /// [`WebResult::fetch_error`] and never fails the search. An empty query returns no
    /// results without a request.
    pub fn search(&self, query: &str) -> Result<Vec<WebResult>, WebError> {
        if query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let started = Instant::now();
        let url = self.search_url(query);
        // SearxNG's results are kept before their pages are fetched: each page is kept
        // on its own, for as long as its own Cache-Control allows.
        let key = format!("search {} {url}", self.cfg.max_results);
        let kept = self.cache().and_then(|(c, scope)| {
            serde_json::from_slice::<Vec<WebResult>>(&c.get(scope, &key)?).ok()
        });
        let mut results = match kept {
            Some(r) => r,
            None => {
                let r = self.ask_searxng(&url)?;
                if let (Some((c, scope)), Ok(bytes)) = (self.cache(), serde_json::to_vec(&r)) {
                    c.put(scope, &key, &bytes, None);
                }
                r
            }
        };
        if self.cfg.fetch_pages {
            self.fetch_all(&mut results);
        }
        tracing::debug!(
            results = results.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "web search done"
        );
        Ok(results)
    }

    /// SearxNG's results for the search URL `url`, at most `max_results`.
    fn ask_searxng(&self, url: &str) -> Result<Vec<WebResult>, WebError> {
        let what = format!("SearxNG search at {}", self.base);
        let _span = tracing::info_span!(
            "web.search",
            otel.kind = "client",
            openinference.span.kind = "RETRIEVER",
            server.address = %neuralcore_core::settings::redact_url(&self.base),
        )
        .entered();
        let mut req = self.agent.get(url).header("Accept", "application/json");
        // Trace context goes to the user's own SearxNG only, never to the pages fetched.
        if let Some(tp) = neuralcore_telemetry::traceparent() {
            req = req.header("traceparent", tp);
        }
        let resp = req.call().map_err(|e| classify(e, &what))?;
        let status = resp.status().as_u16();
        if status == 403 {
            return Err(WebError::JsonFormatDisabled {
                url: self.base.clone(),
            });
        }
        if !(200..300).contains(&status) {
            return Err(http_error(resp, &what));
        }
        let (bytes, truncated) = read_capped(resp, self.cfg.max_page_bytes, &what)?;
        if truncated {
            return Err(WebError::Malformed(format!(
                "{what}: answer larger than max_page_bytes ({} bytes)",
                self.cfg.max_page_bytes
            )));
        }
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| WebError::Malformed(format!("{what}: invalid JSON: {e}")))?;
        let mut results = parse_results(&value)?;
        results.truncate(self.cfg.max_results);
        if results.is_empty() {
            if let Some(engines) = value
                .get("unresponsive_engines")
                .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                tracing::warn!(%engines, "SearxNG returned no results; unresponsive engines");
            }
        }
        Ok(results)
    }

    /// Fetch one page and clean it: returns its title (empty when it names none) and
    /// text; see [`PageFetcher::fetch`], whose guard against addresses on the server's
    /// own network applies.
    pub fn fetch(&self, url: &str) -> Result<(String, String), WebError> {
        self.pages.fetch_cached(url).map(|p| (p.title, p.text))
    }

    /// Fetch the pages of `results` that have a URL, up to [`MAX_PARALLEL_FETCHES`] at a
    /// time, recording the text or the error in each.
    fn fetch_all(&self, results: &mut [WebResult]) {
        let todo: Vec<(usize, String)> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.url.is_empty())
            .map(|(i, r)| (i, r.url.clone()))
            .collect();
        if todo.is_empty() {
            return;
        }
        let next = AtomicUsize::new(0);
        let workers = todo.len().min(MAX_PARALLEL_FETCHES);
        let outcomes: Vec<(usize, Fetched)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut out = Vec::new();
                        loop {
                            let n = next.fetch_add(1, Ordering::Relaxed);
                            let Some((index, url)) = todo.get(n) else {
                                break;
                            };
                            out.push((*index, self.pages.fetch_cached(url)));
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        });
        for (index, outcome) in outcomes {
            let result = &mut results[index];
            match outcome {
                Ok(page) => {
                    if result.title.is_empty() {
                        result.title = page.title;
                    }
                    result.text = Some(page.text);
                }
                Err(e) => {
                    tracing::debug!(url = %result.url, error = %e, "page not fetched");
                    result.fetch_error = Some(e.to_string());
                }
            }
        }
    }
}

/// The results of a SearxNG JSON answer: entries that are not objects, or have neither a
/// URL nor any text, are skipped; missing or mistyped optional fields become empty or
/// `None`; repeated URLs keep their first result.
pub(crate) fn parse_results(value: &Value) -> Result<Vec<WebResult>, WebError> {
    let Some(obj) = value.as_object() else {
        return Err(WebError::Malformed(
            "search answer is not a JSON object".to_owned(),
        ));
    };
    let Some(entries) = obj.get("results").and_then(Value::as_array) else {
        return Err(WebError::Malformed(
            "search answer has no `results` array (is this a SearxNG /search endpoint?)".to_owned(),
        ));
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for entry in entries {
        let Some(r) = entry.as_object() else {
            continue;
        };
        let text_of = |key: &str| r.get(key).and_then(Value::as_str).map(collapse_ws);
        let url = text_of("url").unwrap_or_default();
        let mut title = text_of("title").unwrap_or_default();
        let mut snippet = text_of("content").unwrap_or_default();
        if snippet.is_empty() {
            snippet = r.get("kvmap").map(kv_text).unwrap_or_default();
        }
        if title.is_empty() {
            title = text_of("caption").unwrap_or_default();
        }
        if url.is_empty() && title.is_empty() && snippet.is_empty() {
            continue;
        }
        if !url.is_empty() && !seen.insert(url_key(&url)) {
            continue;
        }
        let engine = text_of("engine").filter(|e| !e.is_empty()).or_else(|| {
            r.get("engines")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find_map(Value::as_str))
                .map(str::to_owned)
        });
        let score = match r.get("score") {
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
            _ => None,
        }
        .filter(|s| s.is_finite());
        out.push(WebResult {
            url,
            title,
            snippet,
            engine,
            score,
            text: None,
            fetch_error: None,
        });
    }
    Ok(out)
}

fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `key: value; key: value` of a key-value result's map.
fn kv_text(map: &Value) -> String {
    let Some(map) = map.as_object() else {
        return String::new();
    };
    map.iter()
        .filter_map(|(k, v)| {
            let v = match v {
                Value::String(s) => collapse_ws(s),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            (!v.is_empty()).then(|| format!("{k}: {v}"))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The identity of a URL for duplicate removal: scheme and host lowercased, fragment and
/// trailing slashes dropped.
fn url_key(url: &str) -> String {
    let url = url.split('#').next().unwrap_or_default();
    let (head, tail) = match url.find("://") {
        Some(i) => {
            let after = i + 3;
            let end = url[after..]
                .find(['/', '?'])
                .map_or(url.len(), |j| after + j);
            (url[..end].to_ascii_lowercase(), &url[end..])
        }
        None => (String::new(), url),
    };
    format!("{head}{}", tail.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_searxng_results_tolerantly() {
        let v = json!({
            "query": "q",
            "results": [
                {"url": "https://a.example/x", "title": " A\n title ", "content": "snip",
                 "engine": "wikipedia", "score": 2.5},
                {"url": "HTTPS://A.example/x/#top", "title": "dup"},
                {"url": "https://b.example/", "engines": ["ddg", "bing"], "score": "0.5"},
                {"url": null, "title": "", "content": "", "caption": "Demo #1",
                 "kvmap": {"value": "first item", "n": 3, "x": null}},
                {"title": "", "content": ""},
                "not an object",
                {"url": "https://c.example", "score": "NaN"}
            ]
        });
        let r = parse_results(&v).unwrap();
        assert_eq!(r.len(), 4, "{r:?}");
        assert_eq!(r[0].title, "A title");
        assert_eq!(r[0].engine.as_deref(), Some("wikipedia"));
        assert_eq!(r[0].score, Some(2.5));
        assert_eq!(r[1].url, "https://b.example/");
        assert_eq!(r[1].title, "");
        assert_eq!(r[1].engine.as_deref(), Some("ddg"));
        assert_eq!(r[1].score, Some(0.5));
        assert_eq!(r[2].url, "");
        assert_eq!(r[2].title, "Demo #1");
        assert_eq!(r[2].snippet, "n: 3; value: first item");
        assert_eq!(r[3].score, None);
    }

    #[test]
    fn refuses_answers_that_are_not_searxng() {
        for v in [json!([]), json!({"answers": []}), json!({"results": {}})] {
            assert!(matches!(parse_results(&v), Err(WebError::Malformed(_))));
        }
        assert!(parse_results(&json!({"results": []})).unwrap().is_empty());
    }

    #[test]
    fn url_keys() {
        assert_eq!(url_key("HTTP://Ex.ORG/Path/#x"), "http://ex.org/Path");
        assert_eq!(url_key("http://ex.org"), url_key("http://EX.org/"));
        assert_ne!(
            url_key("http://ex.org/a?b=1"),
            url_key("http://ex.org/a?b=2")
        );
    }

    #[test]
    fn search_url_is_encoded() {
        let ws = WebSearch::new(WebConfig {
            searxng_url: "http://127.0.0.1:1/searx/".into(),
            categories: "general,science".into(),
            language: String::new(),
            ..WebConfig::default()
        })
        .unwrap();
        assert_eq!(
            ws.search_url(" a&b c "),
            "http://127.0.0.1:1/searx/search?q=a%26b%20c&format=json\
             &categories=general%2Cscience"
        );
    }

    #[test]
    fn new_validates_the_url() {
        let with = |url: &str| {
            WebSearch::new(WebConfig {
                searxng_url: url.into(),
                ..WebConfig::default()
            })
        };
        assert!(matches!(with(""), Err(WebError::NotConfigured)));
        assert!(matches!(with("  "), Err(WebError::NotConfigured)));
        assert!(matches!(
            with("localhost:8888"),
            Err(WebError::InvalidUrl { .. })
        ));
        assert!(matches!(
            with("http://h/?x=1"),
            Err(WebError::InvalidUrl { .. })
        ));
        assert!(with("http://localhost:8888/").is_ok());
    }
}
