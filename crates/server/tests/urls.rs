//! URL ingest over HTTP (`POST /v1/collections/{name}/urls`): off by default; when on, a
//! page is fetched, cleaned and ingested with its URL in the hits' metadata, and every
//! way into the server's own network is refused (a literal address, a name resolving to
//! one, a redirect into one). An in-process fixture server on 127.0.0.1 stands in for the
//! web page (the live web cannot be reached here), allowed by its address and port.

mod common;

use common::*;
use neuralcore_app::Scope;
use neuralcore_web::fixture::{FixtureServer, Reply};
use serde_json::json;

const PAGE: &str = "<!DOCTYPE html><html><head><title>Tides explained</title></head><body>\
    <nav>NAV-LINKS</nav><main><h1>Tides</h1><p>Tides are caused by the gravitational pull \
    of the Moon on the oceans.</p></main></body></html>";

fn page_server() -> FixtureServer {
    FixtureServer::start(|req| match req.path.as_str() {
        "/tides" => Reply::html(PAGE),
        "/pdf" => Reply::with_type("application/pdf", b"%PDF-1.4".to_vec()),
        _ => Reply::status(404, "no such page"),
    })
    .unwrap()
}

#[test]
fn fixture_url_ingest_is_off_unless_configured() {
    let s = server(loopback(), |_| {});
    let r = req(
        s.addr,
        "POST",
        "/v1/collections/web/urls",
        None,
        Some(&json!({"url": "https://example.org/"})),
    );
    let p = r.problem(403, "forbidden");
    assert!(
        p["detail"].as_str().unwrap().contains("ingest_urls = true"),
        "{p}"
    );
}

#[test]
fn fixture_a_page_is_fetched_cleaned_and_searchable_with_its_url() {
    let pages = page_server();
    let port = pages.port();
    let s = server_configured(
        loopback(),
        |c| {
            c.web.ingest_urls = true;
            c.web.allow_addresses = vec![format!("127.0.0.1:{port}")];
        },
        |_| {},
    );
    let url = format!("{}/tides", pages.url());
    let r = req(
        s.addr,
        "POST",
        "/v1/collections/web/urls",
        None,
        Some(&json!({"url": url, "metadata": {"team": "ocean"}})),
    );
    assert_eq!(r.status, 202, "{}", String::from_utf8_lossy(&r.body));
    let job = r.json();
    assert_eq!(
        r.headers["location"],
        format!("/v1/jobs/{}", job["id"].as_str().unwrap())
    );
    let done = wait_job(s.addr, None, job["id"].as_str().unwrap());
    assert_eq!(done["state"], "indexed", "{done}");
    assert_eq!(done["counts"]["ingested"], 1, "{done}");

    let hits = req(
        s.addr,
        "POST",
        "/v1/search",
        None,
        Some(&json!({"query": "what causes tides", "collection": "web", "k": 3})),
    )
    .json();
    let top = &hits["hits"][0];
    assert!(
        top["text"].as_str().unwrap().contains("gravitational pull"),
        "{hits}"
    );
    assert_eq!(top["title"], "Tides explained", "{hits}");
    assert_eq!(top["metadata"]["url"], url, "{hits}");
    assert_eq!(top["metadata"]["team"], "ocean", "{hits}");
    assert!(!hits.to_string().contains("NAV-LINKS"), "{hits}");

    // The same URL again replaces its source: still one source.
    let again = req(
        s.addr,
        "POST",
        "/v1/collections/web/urls",
        None,
        Some(&json!({"url": url})),
    );
    assert_eq!(again.status, 202);
    wait_job(s.addr, None, again.json()["id"].as_str().unwrap());
    let sources = req(s.addr, "GET", "/v1/collections/web/sources", None, None).json();
    assert_eq!(sources["sources"].as_array().unwrap().len(), 1, "{sources}");

    // Pages that cannot be read are this request's error, and queue nothing.
    for (path, want) in [
        ("/missing", "HTTP 404"),
        ("/pdf", "unsupported content type `application/pdf`"),
    ] {
        let r = req(
            s.addr,
            "POST",
            "/v1/collections/web/urls",
            None,
            Some(&json!({"url": format!("{}{path}", pages.url())})),
        );
        let p = r.problem(400, "invalid_input");
        assert!(p["detail"].as_str().unwrap().contains(want), "{p}");
    }
}

#[test]
fn fixture_url_ingest_refuses_the_servers_own_network_and_bad_input() {
    let pages = page_server();
    let port = pages.port();
    let front = FixtureServer::start(move |_| {
        Reply::raw(format!(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{port}/tides\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        ))
    })
    .unwrap();
    let front_port = front.port();
    let s = server_configured(
        loopback(),
        |c| {
            c.web.ingest_urls = true;
            c.web.allow_addresses = vec![format!("127.0.0.1:{front_port}")];
        },
        |_| {},
    );
    let post = |body: serde_json::Value| {
        req(
            s.addr,
            "POST",
            "/v1/collections/web/urls",
            None,
            Some(&body),
        )
    };
    for (url, want) in [
        (
            "http://127.0.0.1:6379/".to_string(),
            "127.0.0.1 is a loopback address",
        ),
        (
            format!("http://localhost:{port}/tides"),
            "localhost resolves to",
        ),
        (format!("{}/tides", pages.url()), "loopback"),
        // Allowed front page, redirecting into a refused address.
        (
            format!("{}/go", front.url()),
            "127.0.0.1 is a loopback address",
        ),
        (
            "http://169.254.169.254/latest/meta-data/".into(),
            "link-local",
        ),
        ("http://10.0.0.1/".into(), "private"),
        ("http://[fd00::1]/".into(), "unique-local"),
        ("file:///etc/passwd".into(), "only http:// and https://"),
        (
            "gopher://127.0.0.1:6379/_INFO".into(),
            "only http:// and https://",
        ),
        ("http://".into(), "no host"),
    ] {
        let p = post(json!({ "url": url })).problem(400, "invalid_input");
        assert!(p["detail"].as_str().unwrap().contains(want), "{url}: {p}");
    }
    assert!(pages.requests().is_empty(), "{:?}", pages.requests());

    // Credentials in the URL are refused and never echoed.
    let p = post(json!({"url": "http://admin:hunter2@example.org/"})).problem(400, "invalid_input");
    assert!(!p.to_string().contains("hunter2"), "{p}");

    for bad in [
        json!({}),
        json!({"url": ""}),
        json!({"url": 7}),
        json!({"url": "https://example.org/", "extra": 1}),
        json!({"url": format!("https://example.org/{}", "a".repeat(3000))}),
        json!({"url": "https://example.org/", "name": "n".repeat(60)}),
    ] {
        let r = post(bad.clone());
        assert_eq!(r.status, 400, "{bad}: {}", String::from_utf8_lossy(&r.body));
    }
    let r = req(
        s.addr,
        "POST",
        "/v1/collections/bad%20name/urls",
        None,
        Some(&json!({"url": "https://example.org/"})),
    );
    assert_eq!(r.status, 400);
    // Nothing was queued by any of it.
    let jobs = req(s.addr, "GET", "/v1/jobs", None, None).json();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 0, "{jobs}");
}

#[test]
fn fixture_url_ingest_needs_a_write_key() {
    let mut read = String::new();
    let s = server_configured(
        loopback(),
        |c| c.web.ingest_urls = true,
        |ks| {
            ks.create_tenant("acme").unwrap();
            read = ks.create_key("acme", Scope::Read, "").unwrap().0;
        },
    );
    let r = req(
        s.addr,
        "POST",
        "/v1/collections/web/urls",
        Some(&read),
        Some(&json!({"url": "https://example.org/"})),
    );
    r.problem(403, "forbidden");
    let r = req(
        s.addr,
        "POST",
        "/v1/collections/web/urls",
        None,
        Some(&json!({"url": "https://example.org/"})),
    );
    assert_eq!(r.status, 401);
}
