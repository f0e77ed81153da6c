//! The SSRF guard of page fetches, against in-process fixture servers on 127.0.0.1 that
//! stand in for web pages (and for services on the server's own network). One test per
//! way into that network: a literal address, a name resolving to one, a redirect, other
//! spellings of an address, and search results pointing there.

use std::time::{Duration, Instant};

use neuralcore_web::fixture::{searxng_json, FixtureServer, Reply, Request};
use neuralcore_web::{PageFetcher, WebConfig, WebError, WebSearch};

const PAGE: &str =
    "<html><head><title>Inner</title></head><body><p>INTERNAL-SECRET</p></body></html>";

fn fetcher(tweak: impl FnOnce(&mut WebConfig)) -> PageFetcher {
    let mut cfg = WebConfig {
        timeout_ms: 2000,
        ..WebConfig::default()
    };
    tweak(&mut cfg);
    PageFetcher::new(&cfg).unwrap()
}

fn inner_service() -> FixtureServer {
    FixtureServer::start(|_| Reply::html(PAGE)).unwrap()
}

fn assert_refused(got: Result<neuralcore_web::Page, WebError>, want: &str) {
    match got {
        Err(e @ WebError::Refused { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(want), "{msg}");
            assert!(msg.contains("allow_addresses"), "{msg}");
            assert!(!e.is_transient());
        }
        other => panic!("expected a refusal naming {want:?}, got {other:?}"),
    }
}

#[test]
fn fixture_loopback_address_is_refused_before_anything_is_sent() {
    let inner = inner_service();
    let f = fetcher(|_| {});
    assert_refused(
        f.fetch(&format!("{}/admin", inner.url())),
        "127.0.0.1 is a loopback address",
    );
    // A Redis on its usual port: refused without connecting.
    assert_refused(
        f.fetch("http://127.0.0.1:6379/"),
        "127.0.0.1 is a loopback address",
    );
    assert_refused(
        f.fetch(&format!("http://[::1]:{}/", inner.port())),
        "::1 is a loopback address",
    );
    assert!(inner.requests().is_empty(), "{:?}", inner.requests());
}

#[test]
fn fixture_private_link_local_and_unique_local_addresses_are_refused_without_a_connection() {
    let f = fetcher(|_| {});
    let started = Instant::now();
    for (url, want) in [
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254 is a link-local address",
        ),
        ("http://10.0.0.1/", "10.0.0.1 is a private address"),
        (
            "http://192.168.1.1:8080/",
            "192.168.1.1 is a private address",
        ),
        ("http://172.20.0.1/", "172.20.0.1 is a private address"),
        ("http://100.64.0.1/", "carrier-grade NAT"),
        ("http://0.0.0.0:80/", "unspecified"),
        ("https://[fd00::1]/", "fd00::1 is a unique-local address"),
        ("http://[fe80::1]/", "link-local"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),
    ] {
        assert_refused(f.fetch(url), want);
    }
    // Refused at resolution: no connection was tried (these would time out).
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[test]
fn fixture_a_name_resolving_to_loopback_is_refused() {
    let inner = inner_service();
    let f = fetcher(|_| {});
    assert_refused(
        f.fetch(&format!("http://localhost:{}/", inner.port())),
        "localhost resolves to",
    );
    assert!(inner.requests().is_empty());
}

#[test]
fn fixture_other_spellings_of_loopback_are_refused() {
    let inner = inner_service();
    let f = fetcher(|_| {});
    // Integer, hexadecimal and short forms that resolvers read as 127.0.0.1.
    for host in ["2130706433", "0x7f000001", "127.1", "0177.0.0.1"] {
        let got = f.fetch(&format!("http://{host}:{}/", inner.port()));
        assert!(
            matches!(
                got,
                Err(WebError::Refused { .. } | WebError::Unavailable(_))
            ),
            "{host}: {got:?}"
        );
    }
    assert!(inner.requests().is_empty(), "{:?}", inner.requests());
}

#[test]
fn fixture_redirect_into_a_refused_address_is_refused() {
    let inner = inner_service();
    let target = format!("http://127.0.0.1:{}/secret", inner.port());
    let front = FixtureServer::start(move |_| {
        Reply::raw(format!(
            "HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ))
    })
    .unwrap();
    // The front page is allowed by its address and port; what it redirects to is not.
    let f = fetcher(|c| c.allow_addresses = vec![format!("127.0.0.1:{}", front.port())]);
    assert_refused(
        f.fetch(&format!("{}/start", front.url())),
        "127.0.0.1 is a loopback address",
    );
    assert_eq!(front.requests(), vec!["/start"]);
    assert!(inner.requests().is_empty(), "{:?}", inner.requests());

    // Allowed, the same redirect is followed.
    let open = fetcher(|c| {
        c.allow_addresses = vec![
            format!("127.0.0.1:{}", front.port()),
            format!("127.0.0.1:{}", inner.port()),
        ]
    });
    let page = open.fetch(&format!("{}/start", front.url())).unwrap();
    assert!(page.text.contains("INTERNAL-SECRET"));
    assert!(page.url.ends_with("/secret"), "{}", page.url);
}

#[test]
fn fixture_allowed_ranges_and_the_switch_open_the_guard() {
    let inner = inner_service();
    let url = format!("{}/", inner.url());
    for f in [
        fetcher(|c| c.allow_addresses = vec!["127.0.0.0/8".into()]),
        fetcher(|c| c.allow_addresses = vec!["127.0.0.1".into()]),
        fetcher(|c| c.allow_private_urls = true),
    ] {
        let page = f.fetch(&url).unwrap();
        assert_eq!(page.title, "Inner");
    }
    // Another port of an allowed address is still refused.
    let one_port = fetcher(|c| c.allow_addresses = vec!["127.0.0.1:1".into()]);
    assert_refused(one_port.fetch(&url), "loopback");

    let bad = PageFetcher::new(&WebConfig {
        allow_addresses: vec!["intranet".into()],
        ..WebConfig::default()
    })
    .unwrap_err();
    assert!(matches!(bad, WebError::InvalidConfig(_)), "{bad}");
    assert!(
        bad.to_string().contains("`intranet` in allow_addresses"),
        "{bad}"
    );
}

#[test]
fn fixture_search_results_pointing_at_the_local_network_are_not_fetched() {
    // SearxNG itself is configured by the operator and may be local; the pages its
    // results name are guarded.
    let searx = FixtureServer::start(|req: &Request| {
        if req.path == "/search" {
            Reply::json(searxng_json(
                &[("/inner", "Inner", "The snippet stays usable.")],
                &req.base,
            ))
        } else {
            Reply::html(PAGE)
        }
    })
    .unwrap();
    let web = WebSearch::new(WebConfig {
        searxng_url: searx.url(),
        timeout_ms: 2000,
        ..WebConfig::default()
    })
    .unwrap();
    let results = web.search("inner").unwrap();
    assert_eq!(results.len(), 1);
    let err = results[0].fetch_error.as_deref().unwrap_or_default();
    assert!(err.contains("refused to fetch"), "{err}");
    assert_eq!(results[0].best_text(), "The snippet stays usable.");
    assert_eq!(
        searx.requests().len(),
        1,
        "only the search: {:?}",
        searx.requests()
    );
}
