//! Web search for neuralcore: queries a [SearxNG](https://docs.searxng.org) instance
//! through its JSON API, fetches the result pages and cleans them into plain text.
//!
//! The control loop's VERIFY stage uses it to check an AMBIGUOUS chunk against a second,
//! independent source: the chunk's claim becomes a query, [`WebSearch::search`] returns
//! the top results with their pages' cleaned text, [`passages`] cuts that text into
//! pieces of chunk size, and the pieces are graded like chunks (grading is not done here).
//!
//! Why SearxNG: it is a self-hostable metasearch engine with one stable JSON format, so
//! neuralcore needs no API keys and no per-engine code, and a deployment chooses (and
//! can restrict) the engines it trusts. Its JSON format must be enabled in its
//! `settings.yml` (`search: formats: [html, json]`); without it SearxNG answers `403`,
//! reported as [`WebError::JsonFormatDisabled`] with that advice.
//!
//! What it guarantees:
//!
//! * **Bounded time.** Every request (the search, and each page) has `timeout_ms` from
//!   connecting to the last body byte; pages are fetched a few at a time.
//! * **Bounded memory.** No body longer than `max_page_bytes` is read: a page is cut
//!   there and cleaned as far as it goes, a search answer that long is an error, and
//!   pages that are neither HTML nor plain text are refused before their body is read.
//! * **Partial failure stays partial.** A page that fails (404, timeout, PDF...) records
//!   its reason in [`WebResult::fetch_error`]; the other results are unaffected.
//! * **No requests into the server's own network.** Pages (search results, URL ingest)
//!   are fetched only from public addresses, checked where the client resolves names, so
//!   literal addresses, names resolving to private ones and redirects are all covered;
//!   `allow_private_urls` or `allow_addresses` opens it up (see [`PageFetcher`]). The
//!   configured SearxNG itself is trusted and may be local.
//! * **No panics on hostile answers.** Malformed JSON, wrong shapes, mistyped fields,
//!   broken HTTP and invalid UTF-8 become errors or are skipped.
//!
//! HTML is cleaned by the HTML loader of `neuralcore-ingest`
//! ([`neuralcore_ingest::html_to_text`]), so web pages and ingested files become text the
//! same way (scripts, styles, navigation and hidden parts removed; `<main>`/`<article>`
//! preferred). The only HTTP client is `ureq` (blocking, rustls for `https`).
//!
//! ```no_run
//! use neuralcore_web::{passages, WebConfig, WebSearch};
//!
//! let web = WebSearch::new(WebConfig {
//!     searxng_url: "http://127.0.0.1:8888".into(),
//!     ..WebConfig::default()
//! })?;
//! for result in web.search("boiling point of water at sea level")? {
//!     if let Some(err) = &result.fetch_error {
//!         eprintln!("{}: {err} (using the snippet)", result.url);
//!     }
//!     for passage in passages(result.best_text(), 1200) {
//!         println!("{} | {passage}", result.url);
//!     }
//! }
//! # Ok::<(), neuralcore_web::WebError>(())
//! ```
//!
//! Tests: `tests/fixture.rs` runs everything against [`fixture::FixtureServer`], a small
//! in-process HTTP server playing SearxNG and the pages; `tests/real_searxng.rs` talks to
//! a real SearxNG when `NEURALCORE_TEST_SEARXNG_URL` is set (`scripts/searxng.sh` installs
//! and starts one with the offline demo engine).

#![warn(missing_docs)]

mod config;
mod error;
pub mod fixture;
mod guard;
mod http;
mod pages;
mod passages;
mod search;

pub use config::WebConfig;

/// Entry points for the fuzz targets under `fuzz/`: built only with `--cfg fuzzing`, as
/// `cargo fuzz` builds, so nothing here is part of the API.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Read `body` as a SearxNG JSON answer, then cut each result's text into passages.
    pub fn search_answer(body: &[u8]) {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            return;
        };
        if let Ok(results) = crate::search::parse_results(&value) {
            for r in &results {
                let _ = crate::passages(r.best_text(), 400);
            }
        }
    }
}
pub use error::WebError;
pub use guard::{refused_range, Allowed};
pub use pages::{Page, PageFetcher, WebCache};
pub use passages::passages;
pub use search::{WebResult, WebSearch};
