//! Web search against an in-process fixture server that speaks SearxNG's JSON format and
//! serves the pages its results point to. No network is needed.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use neuralcore_web::fixture::{searxng_json, FixtureServer, Reply, Request};
use neuralcore_web::{passages, WebConfig, WebError, WebSearch};

const ARTICLE: &str = r#"<!DOCTYPE html>
<html><head><title>Boiling point - Encyclopedia</title>
<script>var tracker = "SCRIPT-SECRET";</script>
<style>.x { color: red }</style></head>
<body>
<nav><ul><li><a href="/">NAV-HOME</a><li><a href="/about">NAV-ABOUT</a></ul></nav>
<main>
<h1>Boiling point</h1>
<p>Water boils at 100 &deg;C at sea level.</p>
<p>At higher altitude the boiling point is lower.</p>
<div style="display:none">HIDDEN-TEXT</div>
</main>
<footer>FOOTER-TEXT</footer>
</body></html>"#;

fn web(server: &FixtureServer, tweak: impl FnOnce(&mut WebConfig)) -> WebSearch {
    let mut cfg = WebConfig {
        searxng_url: server.url(),
        timeout_ms: 2000,
        // The fixture's pages are on 127.0.0.1, which the guard refuses by default
        // (tests/guard.rs).
        allow_private_urls: true,
        ..WebConfig::default()
    };
    tweak(&mut cfg);
    WebSearch::new(cfg).unwrap()
}

/// SearxNG at `/search` answering with `results`; pages from `pages` (path → reply).
fn site(
    results: &'static [(&'static str, &'static str, &'static str)],
    pages: impl Fn(&str) -> Option<Reply> + Send + Sync + 'static,
) -> FixtureServer {
    FixtureServer::start(move |req: &Request| {
        if req.path == "/search" {
            Reply::json(searxng_json(results, &req.base))
        } else {
            pages(&req.path).unwrap_or_else(|| Reply::status(404, "no such page"))
        }
    })
    .unwrap()
}

#[test]
fn fixture_searxng_results_are_fetched_and_cleaned() {
    let server = site(
        &[
            ("/boiling", "Boiling point", "Water boils at 100 °C."),
            ("/plain", "", "A plain text page."),
        ],
        |path| match path {
            "/boiling" => Some(Reply::html(ARTICLE)),
            "/plain" => Some(Reply::text("  Plain text,\nkept as is.\n")),
            _ => None,
        },
    );
    let results = web(&server, |_| {})
        .search("boiling point of water")
        .unwrap();
    assert_eq!(results.len(), 2, "{results:#?}");

    let r = &results[0];
    assert_eq!(r.url, format!("{}/boiling", server.url()));
    assert_eq!(r.title, "Boiling point");
    assert_eq!(r.snippet, "Water boils at 100 °C.");
    assert_eq!(r.engine.as_deref(), Some("fixture"));
    assert_eq!(r.score, Some(1.0));
    assert_eq!(r.fetch_error, None);
    let text = r.text.as_deref().unwrap();
    assert!(
        text.contains("Water boils at 100 °C at sea level."),
        "{text}"
    );
    assert!(text.contains("boiling point is lower"), "{text}");
    for junk in [
        "SCRIPT-SECRET",
        "color: red",
        "NAV-HOME",
        "HIDDEN-TEXT",
        "FOOTER-TEXT",
    ] {
        assert!(!text.contains(junk), "{junk} left in {text:?}");
    }

    // Plain text is used as is (trimmed); an empty title is filled from nothing.
    let p = &results[1];
    assert_eq!(p.text.as_deref(), Some("Plain text,\nkept as is."));
    assert_eq!(p.title, "");
    assert_eq!(p.score, Some(0.5));

    // The search request carries the JSON format, categories and language.
    let reqs = server.requests();
    let search = reqs.iter().find(|t| t.starts_with("/search")).unwrap();
    assert_eq!(
        search,
        "/search?q=boiling%20point%20of%20water&format=json&categories=general&language=en"
    );
    assert_eq!(reqs.len(), 3, "{reqs:?}");

    // The cleaned text splits into passages for grading.
    let ps = passages(text, 40);
    assert!(ps.len() >= 2, "{ps:?}");
    assert!(ps.iter().all(|p| p.chars().count() <= 40));
}

#[test]
fn fixture_fetch_returns_title_and_text() {
    let server = site(&[], |path| (path == "/a").then(|| Reply::html(ARTICLE)));
    let ws = web(&server, |_| {});
    let (title, text) = ws.fetch(&format!("{}/a", server.url())).unwrap();
    assert_eq!(title, "Boiling point - Encyclopedia");
    assert!(text.starts_with("Boiling point"), "{text}");
    // Only http(s) URLs are fetched.
    assert!(matches!(
        ws.fetch("file:///etc/passwd"),
        Err(WebError::InvalidUrl { .. })
    ));
}

#[test]
fn fixture_snippet_only_mode_fetches_nothing() {
    let server = site(&[("/boiling", "Boiling point", "Snippet only.")], |_| {
        Some(Reply::html(ARTICLE))
    });
    let results = web(&server, |c| c.fetch_pages = false)
        .search("boiling")
        .unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].text, None);
    assert_eq!(results[0].fetch_error, None);
    assert_eq!(results[0].best_text(), "Snippet only.");
    assert_eq!(server.requests().len(), 1, "{:?}", server.requests());
}

#[test]
fn fixture_page_that_404s_sets_fetch_error_and_others_are_fine() {
    let server = site(
        &[
            ("/gone", "Gone", "was here"),
            ("/boiling", "Boiling", "ok"),
            ("/file.pdf", "A PDF", "pdf snippet"),
        ],
        |path| match path {
            "/boiling" => Some(Reply::html(ARTICLE)),
            "/file.pdf" => Some(Reply::with_type("application/pdf", "%PDF-1.4 ...")),
            _ => None,
        },
    );
    let results = web(&server, |_| {}).search("q").unwrap();
    assert_eq!(results.len(), 3);
    let gone = &results[0];
    assert_eq!(gone.text, None);
    let err = gone.fetch_error.as_deref().unwrap();
    assert!(
        err.contains("HTTP 404") && err.contains("no such page"),
        "{err}"
    );
    assert_eq!(gone.best_text(), "was here");
    assert!(results[1].text.as_deref().unwrap().contains("Water boils"));
    assert_eq!(results[1].fetch_error, None);
    let pdf = results[2].fetch_error.as_deref().unwrap();
    assert!(pdf.contains("application/pdf"), "{pdf}");
}

#[test]
fn fixture_malformed_json_is_malformed() {
    for body in [
        "{\"results\": [",
        "<html>not json</html>",
        "[1, 2]",
        "{\"answers\": []}",
        "\u{0}\u{1}\u{2}",
    ] {
        let server = FixtureServer::start(move |_| Reply::json(body)).unwrap();
        let err = web(&server, |_| {}).search("q").unwrap_err();
        assert!(matches!(err, WebError::Malformed(_)), "{body:?}: {err:?}");
        assert!(!err.is_transient());
    }
}

#[test]
fn fixture_403_says_to_enable_the_json_format() {
    let server = FixtureServer::start(|_| Reply::status(403, "Forbidden")).unwrap();
    let err = web(&server, |_| {}).search("q").unwrap_err();
    assert_eq!(err, WebError::JsonFormatDisabled { url: server.url() });
    let msg = err.to_string();
    assert!(
        msg.contains("enable `json` in search.formats of settings.yml"),
        "{msg}"
    );
}

#[test]
fn fixture_other_statuses_are_http_errors() {
    let server = FixtureServer::start(|_| Reply::status(503, "  busy\n\n  try later ")).unwrap();
    let err = web(&server, |_| {}).search("q").unwrap_err();
    assert_eq!(
        err,
        WebError::Http {
            status: 503,
            body: "busy try later".into()
        }
    );
    assert!(err.is_transient());
}

#[test]
fn fixture_missing_optional_fields_are_tolerated() {
    let server = FixtureServer::start(|req: &Request| {
        if req.path != "/search" {
            return Reply::html("<p>page text</p>");
        }
        let b = &req.base;
        Reply::json(format!(
            r#"{{"results": [
                {{"url": "{b}/only-url"}},
                {{"url": "{b}/only-url/", "title": "duplicate"}},
                {{"url": "{b}/typed", "title": 7, "content": null, "score": "0.25",
                  "engines": ["a", "b"]}},
                {{"url": null, "caption": "Offline #1", "kvmap": {{"value": "first item"}}}},
                {{"url": "ftp://files.example/x", "title": "ftp"}},
                42,
                {{}}
            ]}}"#
        ))
    })
    .unwrap();
    let results = web(&server, |c| c.max_results = 10).search("q").unwrap();
    assert_eq!(results.len(), 4, "{results:#?}");

    assert_eq!(results[0].title, "");
    assert_eq!(results[0].snippet, "");
    assert_eq!(results[0].engine, None);
    assert_eq!(results[0].score, None);
    assert_eq!(results[0].text.as_deref(), Some("page text"));

    assert_eq!(results[1].title, "");
    assert_eq!(results[1].engine.as_deref(), Some("a"));
    assert_eq!(results[1].score, Some(0.25));

    // A key-value result without URL keeps its text and is not fetched.
    assert_eq!(results[2].url, "");
    assert_eq!(results[2].title, "Offline #1");
    assert_eq!(results[2].snippet, "value: first item");
    assert_eq!((&results[2].text, &results[2].fetch_error), (&None, &None));

    // Non-http URLs are not fetched.
    let ftp = results[3].fetch_error.as_deref().unwrap();
    assert!(ftp.contains("only http:// and https://"), "{ftp}");

    // max_results cuts after duplicates are removed.
    let two = web(&server, |c| c.max_results = 2).search("q").unwrap();
    assert_eq!(two.len(), 2);
    assert!(two[1].url.ends_with("/typed"));
}

#[test]
fn fixture_server_down_is_unavailable() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ws = WebSearch::new(WebConfig {
        searxng_url: format!("http://127.0.0.1:{port}"),
        ..WebConfig::default()
    })
    .unwrap();
    let started = Instant::now();
    let err = ws.search("q").unwrap_err();
    assert!(matches!(err, WebError::Unavailable(_)), "{err:?}");
    assert!(err.is_transient());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn fixture_slow_server_times_out_within_bounded_time() {
    let server = FixtureServer::start(|req: &Request| {
        if req.path == "/search" {
            Reply::json(searxng_json(
                &[("/slow", "s", "x"), ("/fast", "f", "y")],
                &req.base,
            ))
        } else if req.path == "/slow" {
            Reply::html("<p>late</p>").delayed(Duration::from_secs(5))
        } else if req.path == "/slow-search/search" {
            Reply::json("{\"results\": []}").delayed(Duration::from_secs(5))
        } else {
            Reply::html("<p>fast page</p>")
        }
    })
    .unwrap();

    // A slow search fails with Timeout well before the server answers.
    let ws = WebSearch::new(WebConfig {
        searxng_url: format!("{}/slow-search", server.url()),
        timeout_ms: 300,
        ..WebConfig::default()
    })
    .unwrap();
    let started = Instant::now();
    let err = ws.search("q").unwrap_err();
    assert!(matches!(err, WebError::Timeout(_)), "{err:?}");
    assert!(err.is_transient());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // A slow page times out alone; the search and the other page succeed.
    let started = Instant::now();
    let results = web(&server, |c| c.timeout_ms = 300).search("q").unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let slow = results[0].fetch_error.as_deref().unwrap();
    assert!(slow.starts_with("timed out"), "{slow}");
    assert_eq!(results[1].text.as_deref(), Some("fast page"));
}

#[test]
fn fixture_query_is_url_encoded() {
    let server = FixtureServer::start(|req: &Request| {
        let q = req.param("q").unwrap_or_default();
        Reply::json(format!(
            r#"{{"results": [{{"url": "http://x.invalid/", "title": {}}}]}}"#,
            serde_json::Value::String(q.to_owned())
        ))
    })
    .unwrap();
    let query = "water & salt = brine? 100% café/Zürich #1 +plus 水";
    let results = web(&server, |c| c.fetch_pages = false)
        .search(query)
        .unwrap();
    // The server decoded exactly the query that was sent.
    assert_eq!(results[0].title, query);
    let target = server.requests().remove(0);
    assert!(target.is_ascii(), "{target}");
    assert!(!target.contains(' '), "{target}");
    assert!(
        target.starts_with(
            "/search?q=water%20%26%20salt%20%3D%20brine%3F%20100%25%20caf%C3%A9%2FZ%C3%BCrich\
             %20%231%20%2Bplus%20%E6%B0%B4&format=json"
        ),
        "{target}"
    );
}

#[test]
fn fixture_huge_bodies_are_capped() {
    const LIMIT: usize = 64 * 1024;
    let server = FixtureServer::start(|req: &Request| match req.path.as_str() {
        "/search" => Reply::json(searxng_json(&[("/huge", "Huge", "big")], &req.base)),
        "/huge" => {
            let mut page = String::from("<html><body><p>");
            while page.len() < 8 * 1024 * 1024 {
                page.push_str("lots of words in a very long page ");
            }
            Reply::html(page)
        }
        _ => {
            // A search answer far over the limit.
            let mut body = String::from("{\"results\": [");
            while body.len() < 8 * 1024 * 1024 {
                body.push_str("{\"url\": \"http://x.invalid/\", \"title\": \"t\"},");
            }
            Reply::json(body)
        }
    })
    .unwrap();

    let started = Instant::now();
    let results = web(&server, |c| c.max_page_bytes = LIMIT)
        .search("q")
        .unwrap();
    let text = results[0].text.as_deref().unwrap();
    assert!(text.len() <= LIMIT, "{} bytes", text.len());
    assert!(text.len() > LIMIT / 2, "{} bytes", text.len());
    assert!(text.starts_with("lots of words"));

    let ws = WebSearch::new(WebConfig {
        searxng_url: format!("{}/big", server.url()),
        max_page_bytes: LIMIT,
        ..WebConfig::default()
    })
    .unwrap();
    let err = ws.search("q").unwrap_err();
    assert!(
        matches!(&err, WebError::Malformed(m) if m.contains("max_page_bytes")),
        "{err:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn fixture_hostile_responses_do_not_panic() {
    let replies: Vec<Vec<u8>> = vec![
        b"garbage\r\n\r\n".to_vec(),
        b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n{\"results\": []".to_vec(),
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"results\":[]}".to_vec(),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nbad\r\n".to_vec(),
        b"".to_vec(),
        vec![0xff; 200],
    ];
    for raw in replies {
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let server = FixtureServer::start(move |req: &Request| {
            if req.path == "/search" {
                Reply::raw(raw.clone())
            } else {
                Reply::html("<p>x</p>")
            }
        })
        .unwrap();
        let ws = web(&server, |_| {});
        // Errors of any kind are fine; a panic or a hang is not.
        let _ = ws.search("q");
        let err = ws.fetch(&format!("{}/search", server.url()));
        assert!(
            err.is_err() || shown.contains("200 OK"),
            "{shown:?}: {err:?}"
        );
    }

    // Pages with binary bodies, empty bodies and invalid UTF-8.
    let server = site(
        &[
            ("/bin", "b", "s"),
            ("/empty", "e", "s"),
            ("/latin", "l", "s"),
        ],
        |path| match path {
            "/bin" => Some(Reply::with_type("", vec![0u8, 1, 2, 3, 0, 0xff])),
            "/empty" => Some(Reply::html("<html><script>x()</script></html>")),
            "/latin" => Some(Reply::with_type(
                "text/html; charset=ISO-8859-1",
                b"<p>caf\xe9 \xff</p>".to_vec(),
            )),
            _ => None,
        },
    );
    let results = web(&server, |_| {}).search("q").unwrap();
    assert!(results[0].fetch_error.is_some());
    assert!(results[1]
        .fetch_error
        .as_deref()
        .unwrap()
        .contains("no text"));
    assert_eq!(results[2].text.as_deref(), Some("café ÿ"));
}

#[test]
fn fixture_empty_query_sends_nothing() {
    let server = FixtureServer::start(|_| Reply::json("{\"results\": []}")).unwrap();
    assert!(web(&server, |_| {}).search("  \n").unwrap().is_empty());
    assert!(server.requests().is_empty());
}

/// What [`MapCache`] holds: (scope, key) → (value, TTL).
type Entries = std::collections::HashMap<(String, String), (Vec<u8>, Option<Duration>)>;

/// A store for the cache seam: a map (the engine's operation cache sits behind this seam
/// in the app; its own tests cover it), recording each put's TTL.
#[derive(Default)]
struct MapCache(std::sync::Mutex<Entries>);

impl neuralcore_web::WebCache for MapCache {
    fn get(&self, scope: &str, key: &str) -> Option<Vec<u8>> {
        let m = self.0.lock().unwrap();
        m.get(&(scope.to_owned(), key.to_owned()))
            .map(|(v, _)| v.clone())
    }

    fn put(&self, scope: &str, key: &str, value: &[u8], ttl: Option<Duration>) {
        let mut m = self.0.lock().unwrap();
        m.insert((scope.to_owned(), key.to_owned()), (value.to_vec(), ttl));
    }
}

#[test]
fn fixture_server_cached_search_and_pages_respect_cache_control_and_scopes() {
    let server = site(
        &[
            ("/fresh", "Fresh", "Kept for a minute."),
            ("/nostore", "No store", "Never kept."),
            ("/private", "Private", "Never kept by a shared cache."),
            ("/plain", "Plain", "No Cache-Control."),
        ],
        |path| match path {
            "/fresh" => Some(
                Reply::text("Fresh page text.")
                    .with_header("Cache-Control", "public, max-age=600, s-maxage=60"),
            ),
            "/nostore" => {
                Some(Reply::text("No-store page text.").with_header("Cache-Control", "no-store"))
            }
            "/private" => Some(
                Reply::text("Private page text.")
                    .with_header("Cache-Control", "private, max-age=60"),
            ),
            "/plain" => Some(Reply::text("Plain page text.")),
            _ => None,
        },
    );
    let store = std::sync::Arc::new(MapCache::default());
    let client = web(&server, |_| {}).with_cache(store.clone());
    let count = |path: &str| {
        server
            .requests()
            .iter()
            .filter(|r| r.split('?').next() == Some(path))
            .count()
    };

    // Unscoped: nothing is kept.
    client.search("pages").unwrap();
    assert!(store.0.lock().unwrap().is_empty());
    assert_eq!(count("/search"), 1);

    let acme = client.scoped("acme");
    let first = acme.search("pages").unwrap();
    assert_eq!(count("/search"), 2);
    let second = acme.search("pages").unwrap();
    assert_eq!(
        first, second,
        "a kept search answers as the fetched one did"
    );
    // SearxNG was not asked again; the kept pages were not fetched again, the others
    // were.
    assert_eq!(count("/search"), 2);
    assert_eq!(count("/fresh"), 2, "fetched unscoped, then once for acme");
    assert_eq!(count("/plain"), 2);
    assert_eq!(count("/nostore"), 3);
    assert_eq!(count("/private"), 3);
    {
        let m = store.0.lock().unwrap();
        let ttl = |key: &str| m.get(&("acme".to_owned(), key.to_owned())).map(|(_, t)| *t);
        // s-maxage wins over max-age for a shared cache; no header: the store's own TTL.
        assert_eq!(
            ttl(&format!("page {}/fresh", server.url())),
            Some(Some(Duration::from_secs(60)))
        );
        assert_eq!(ttl(&format!("page {}/plain", server.url())), Some(None));
        assert_eq!(ttl(&format!("page {}/nostore", server.url())), None);
        assert_eq!(ttl(&format!("page {}/private", server.url())), None);
    }

    // Another scope shares nothing.
    client.scoped("globex").search("pages").unwrap();
    assert_eq!(count("/search"), 3);
    assert_eq!(count("/fresh"), 3);

    // A damaged entry is a miss, not an error.
    for v in store.0.lock().unwrap().values_mut() {
        v.0.truncate(3);
    }
    let again = acme.search("pages").unwrap();
    assert_eq!(again, first);
    assert_eq!(count("/search"), 4);
}
