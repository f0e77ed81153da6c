//! W3C trace context on web search: the user's SearxNG gets a `traceparent` naming the
//! caller's trace, the pages its results point to never do. A fixture server plays
//! SearxNG, the pages and the OTLP receiver (the spans' content is checked against a
//! real Phoenix in crates/cli/tests/tracing.rs). Its own process (nextest), since
//! telemetry is started once per process.

use std::sync::{Arc, Mutex};

use neuralcore_web::fixture::{searxng_json, FixtureServer, Reply, Request};
use neuralcore_web::{WebConfig, WebSearch};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The path and `traceparent` of each request the fixture got.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

#[test]
fn fixture_searxng_gets_the_callers_traceparent_and_the_pages_do_not() {
    tracing_subscriber::registry()
        .with(neuralcore_telemetry::layer())
        .init();
    let receiver = FixtureServer::start(|_| Reply::status(200, "")).unwrap();
    let _guard = neuralcore_telemetry::start(&neuralcore_telemetry::TelemetryConfig {
        enabled: true,
        endpoint: format!("{}/v1/traces", receiver.url()),
        ..Default::default()
    })
    .unwrap();
    let seen: Seen = Arc::default();
    let s2 = Arc::clone(&seen);
    let site = FixtureServer::start(move |req: &Request| {
        s2.lock().unwrap().push((
            req.path.clone(),
            req.header("traceparent").map(str::to_string),
        ));
        if req.path == "/search" {
            Reply::json(searxng_json(
                &[("/page", "A page", "About boiling.")],
                &req.base,
            ))
        } else {
            Reply::html("<html><title>A page</title><p>Water boils at 100 C.</p></html>")
        }
    })
    .unwrap();
    let web = WebSearch::new(WebConfig {
        searxng_url: site.url(),
        timeout_ms: 2000,
        allow_private_urls: true,
        ..WebConfig::default()
    })
    .unwrap();
    let trace = {
        let _ask = tracing::info_span!(target: "neuralcore_app", "ask").entered();
        let trace = neuralcore_telemetry::trace_id().unwrap();
        let results = web.search("boiling").unwrap();
        assert_eq!(results.len(), 1, "{results:#?}");
        trace
    };
    let got = std::mem::take(&mut *seen.lock().unwrap());
    let search: Vec<_> = got.iter().filter(|(p, _)| p == "/search").collect();
    assert_eq!(search.len(), 1, "{got:?}");
    let tp = search[0].1.as_deref().expect("SearxNG got no traceparent");
    assert!(tp.starts_with(&format!("00-{trace}-")), "{tp} vs {trace}");
    assert!(tp.ends_with("-01"), "{tp}");
    let pages: Vec<_> = got.iter().filter(|(p, _)| p == "/page").collect();
    assert_eq!(pages.len(), 1, "{got:?}");
    assert_eq!(pages[0].1, None, "a fetched page got the trace context");
    // Outside any caller's span the search is a trace of its own.
    web.search("boiling again").unwrap();
    let got = seen.lock().unwrap().clone();
    let again = got.iter().find(|(p, _)| p == "/search").unwrap();
    let tp = again.1.as_deref().unwrap();
    assert!(!tp.contains(&trace), "{tp} continues {trace}");
}
