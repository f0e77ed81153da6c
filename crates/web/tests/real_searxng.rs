//! Web search against a real SearxNG, when `NEURALCORE_TEST_SEARXNG_URL` names one.
//!
//! `scripts/searxng.sh` installs and starts one on 127.0.0.1:8892 with only the offline
//! `demo_offline` engine (no internet needed):
//!
//! ```text
//! eval "$(scripts/searxng.sh | tail -n1)"
//! cargo test -p neuralcore-web --test real_searxng
//! ```
//!
//! Without the variable the test says so on stderr and passes.

use neuralcore_web::{WebConfig, WebSearch};

fn searxng_url() -> Option<String> {
    match std::env::var("NEURALCORE_TEST_SEARXNG_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipped: NEURALCORE_TEST_SEARXNG_URL is not set (start one with \
                 `eval \"$(scripts/searxng.sh | tail -n1)\"`)"
            );
            None
        }
    }
}

#[test]
fn real_searxng_json_search_returns_parsed_results() {
    let Some(url) = searxng_url() else {
        return;
    };
    let ws = WebSearch::new(WebConfig {
        searxng_url: url.clone(),
        timeout_ms: 10_000,
        max_results: 10,
        language: "all".into(),
        ..WebConfig::default()
    })
    .unwrap();
    // Spaces, `&`, `#`, `+` and non-ASCII must reach SearxNG intact.
    let query = "neuralcore test & more #1 +café 水";
    let results = ws
        .search(query)
        .unwrap_or_else(|e| panic!("search at {url} failed: {e}"));
    eprintln!("{} results from {url}:", results.len());
    for r in &results {
        eprintln!(
            "  url={:?} title={:?} snippet={:?} engine={:?} score={:?} fetch_error={:?}",
            r.url, r.title, r.snippet, r.engine, r.score, r.fetch_error
        );
    }
    // The offline demo engine answers every query with key-value results (no URLs);
    // other engines give results with URLs. Either way each result carries some text.
    assert!(!results.is_empty(), "no results from {url}");
    for r in &results {
        assert!(
            !(r.url.is_empty() && r.title.is_empty() && r.snippet.is_empty()),
            "{r:?}"
        );
        if let Some(score) = r.score {
            assert!(score.is_finite());
        }
        // The demo engine echoes the query it received in its key-value map.
        if r.engine.as_deref() == Some("demo offline") {
            assert!(r.snippet.contains(&format!("query: {query}")), "{r:?}");
        }
    }
}
