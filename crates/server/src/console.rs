//! The web console: a page for people, served at `/` from assets embedded in the binary
//! (`crates/server/console/`: plain HTML, CSS and JavaScript, no build step).
//!
//! The console is one more front end of the same core: its script calls only the
//! documented `/v1` routes, with the key the user signs in with (kept in the tab's
//! `sessionStorage`, sent as `Authorization: Bearer`). The page and its assets are
//! public — they hold no data — so they need no key; every data call does.
//!
//! `GET /` is also ACAI's status route (`{"name", "version", "status"}`): a request
//! that asks for HTML (`Accept: text/html`, as a browser's navigation does) gets the
//! console, any other keeps ACAI's JSON. The console is not in the OpenAPI document.
//!
//! Every console response carries a strict Content-Security-Policy (scripts, styles and
//! connections from this origin only, no inline code, no framing) and
//! `X-Content-Type-Options: nosniff`; the script builds the page with `textContent`
//! only, so a document holding markup shows it as text.

use axum::extract::{Path, Request};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The policy of every console response.
pub(crate) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'self'";

/// An embedded file: its name under `/console/`, content type and bytes.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_str!("../console/index.html"),
};

/// The files the page loads.
const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../console/app.css"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../console/app.js"),
    },
    Asset {
        name: "dom.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../console/dom.js"),
    },
    Asset {
        name: "ask.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../console/ask.js"),
    },
    Asset {
        name: "library.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../console/library.js"),
    },
    Asset {
        name: "search.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../console/search.js"),
    },
    Asset {
        name: "memory.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../console/memory.js"),
    },
    Asset {
        name: "runs.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../console/runs.js"),
    },
];

/// The console's own routes: `/console` (the page) and `/console/{file}` (its assets).
/// `/` is answered by [`root_page`] in front of ACAI's route.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/{file}", get(asset))
}

/// Middleware: `GET /` asking for HTML gets the console; anything else goes on (to
/// ACAI's JSON status).
pub(crate) async fn root_page(req: Request, next: Next) -> Response {
    if req.uri().path() == "/"
        && (req.method() == Method::GET || req.method() == Method::HEAD)
        && wants_html(req.headers())
    {
        return serve(&INDEX, req.headers());
    }
    next.run(req).await
}

/// Whether the client asks for HTML (a browser's navigation does; API clients send
/// `application/json`, `*/*` or nothing).
fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let mut parts = t.split(';');
            let kind = parts.next().unwrap_or("").trim();
            // `text/html;q=0` means "not HTML".
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            kind.eq_ignore_ascii_case("text/html") && !refused
        })
}

async fn index(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().chain([&INDEX]).find(|a| a.name == file) {
        Some(a) => serve(a, &headers),
        None => crate::routes::not_found().await.into_response(),
    }
}

/// The asset with its headers; 304 when the client's copy is current. Assets are
/// revalidated on every load (`no-cache`): they change with the binary, and their
/// names carry no version.
fn serve(a: &Asset, req: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", fnv1a(a.body.as_bytes()));
    let fresh = req
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut res = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, a.content_type)], a.body).into_response()
    };
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    res
}

/// FNV-1a, 64 bits: a content tag for `ETag` (not a security hash).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn browsers_get_the_page_and_api_clients_the_json() {
        assert!(wants_html(&accept(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        )));
        assert!(!wants_html(&accept("application/json")));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("text/html;q=0, application/json")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn every_asset_the_page_names_is_served() {
        for a in ASSETS {
            if a.name.ends_with(".js") && a.name != "app.js" {
                // Modules are imported by app.js, not named in the page.
                assert!(
                    ASSETS
                        .iter()
                        .any(|b| b.body.contains(&format!("./{}", a.name))),
                    "{} is imported by no module",
                    a.name
                );
            }
        }
        for name in ["app.css", "app.js"] {
            assert!(INDEX.body.contains(&format!("/console/{name}")), "{name}");
        }
        // No inline script or style: the policy would block them.
        assert!(!INDEX.body.contains("<script>") && !INDEX.body.contains("style="));
    }
}
