//! The OpenAPI 3.1 document of the API, generated from the handlers' types
//! (`GET /openapi.json`), and a page that lists it for people (`GET /docs`).
//!
//! Every operation answers its documented bodies or a problem (`application/problem+json`;
//! OpenAI's error shape under `/v1/chat/completions` and `/v1/models`); the error
//! statuses are added to every operation here, once, rather than on each handler.

use std::sync::Arc;

use axum::response::Html;
use axum::{Extension, Json};
use utoipa::openapi::path::Operation;
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Doc, Ref, RefOr};
use utoipa::{Modify, OpenApi};

use crate::{compat, error, wire};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "neuralcore",
        description = "Retrieval and reasoning over your documents, with the evidence attached. Every /v1 route works on the tenant of its API key (Authorization: Bearer or X-API-Key); a server without keys listens on loopback only. See docs/api.md.",
        license(name = "MIT OR Apache-2.0")
    ),
    components(schemas(error::ProblemDoc, compat::OpenAiErrorBody, wire::StreamEvent)),
    security(("bearer" = []), ("api_key" = []))
)]
struct ApiDoc;

/// The document's frame: info, shared schemas, security (the paths come from the routes).
pub(crate) fn base() -> Doc {
    ApiDoc::openapi()
}

/// Add the security schemes and every operation's error answers.
pub(crate) fn finish(doc: &mut Doc) {
    Common.modify(doc);
}

/// The security schemes and the error answers every operation can give.
struct Common;

fn error_response(description: &str, openai: bool) -> RefOr<Response> {
    let (content_type, schema) = if openai {
        ("application/json", "OpenAiErrorBody")
    } else {
        ("application/problem+json", "ProblemDoc")
    };
    ResponseBuilder::new()
        .description(description)
        .content(
            content_type,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(schema)))
                .build(),
        )
        .into()
}

/// The errors any operation may answer (authentication only where keys apply).
fn add_errors(op: &mut Operation, path: &str, needs_key: bool) {
    let openai = path == "/v1/chat/completions" || path == "/v1/models";
    let mut errors = vec![
        ("400", "The request is malformed (the detail says how)"),
        ("404", "No such resource for this tenant"),
        ("405", "The route does not take this method"),
        ("413", "The body is larger than the server accepts"),
        ("415", "The body is not of a type the route takes"),
        ("429", "Over the key's rate limit (see Retry-After)"),
        (
            "500",
            "An internal error (its detail stays in the server's log)",
        ),
        (
            "503",
            "Busy, a backend is down, or the data dir's disk is full (see Retry-After)",
        ),
    ];
    if needs_key {
        errors.push(("401", "No valid API key"));
        errors.push(("403", "The key's scope does not allow this"));
    }
    for (code, description) in errors {
        op.responses
            .responses
            .entry(code.to_string())
            .or_insert_with(|| error_response(description, openai));
    }
}

impl Modify for Common {
    fn modify(&self, doc: &mut Doc) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("nck_<8 hex>_<48 hex>")
                    .build(),
            ),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-API-Key"))),
        );
        for (path, item) in doc.paths.paths.iter_mut() {
            let public = matches!(
                path.as_str(),
                "/healthz" | "/readyz" | "/" | "/health" | "/openapi.json" | "/docs"
            );
            for op in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                add_errors(op, path, !public);
            }
        }
    }
}

/// `GET /openapi.json`.
#[utoipa::path(get, path = "/openapi.json", tag = "health", security(()),
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object)))]
pub async fn openapi_json(Extension(doc): Extension<Arc<Doc>>) -> Json<Doc> {
    Json((*doc).clone())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `GET /docs`: the routes for people, from the same document (no scripts, nothing
/// fetched from elsewhere).
#[utoipa::path(get, path = "/docs", tag = "health", security(()),
    responses((status = 200, description = "The routes as a page", content_type = "text/html", body = String)))]
pub async fn docs_page(Extension(doc): Extension<Arc<Doc>>) -> Html<String> {
    let mut rows = String::new();
    for (path, item) in &doc.paths.paths {
        for (method, op) in [
            ("GET", &item.get),
            ("POST", &item.post),
            ("PUT", &item.put),
            ("DELETE", &item.delete),
            ("PATCH", &item.patch),
        ] {
            let Some(op) = op else { continue };
            let summary = op
                .summary
                .clone()
                .or_else(|| op.description.clone())
                .unwrap_or_default();
            rows.push_str(&format!(
                "<tr><td><code>{method}</code></td><td><code>{}</code></td><td>{}</td></tr>\n",
                escape(path),
                escape(&summary)
            ));
        }
    }
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>neuralcore API</title>\
         <style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}td{{padding:.3em .8em;vertical-align:top}}</style>\
         </head><body><h1>neuralcore API {}</h1><p>The machine-readable document is \
         <a href=\"/openapi.json\">/openapi.json</a> (OpenAPI 3.1).</p><table>{rows}</table></body></html>",
        escape(&doc.info.version)
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_is_openapi_3_1_with_every_route_and_its_errors() {
        let doc = crate::openapi_document();
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["openapi"], "3.1.0");
        let mut ops = Vec::new();
        for (path, item) in v["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops.push(format!("{} {path}", method.to_uppercase()));
                let responses = op["responses"].as_object().unwrap();
                assert!(responses.contains_key("400"), "{method} {path}");
                assert!(responses.contains_key("500"), "{method} {path}");
                let public = [
                    "/",
                    "/health",
                    "/healthz",
                    "/readyz",
                    "/openapi.json",
                    "/docs",
                ]
                .contains(&path.as_str());
                assert_eq!(responses.contains_key("401"), !public, "{method} {path}");
            }
        }
        ops.sort();
        let want = [
            "DELETE /v1/collections/{name}",
            "DELETE /v1/collections/{name}/sources/{source}",
            "GET /",
            "GET /docs",
            "GET /health",
            "GET /healthz",
            "GET /metrics",
            "GET /openapi.json",
            "GET /readyz",
            "GET /v1/agents",
            "GET /v1/collections",
            "GET /v1/collections/{name}",
            "GET /v1/collections/{name}/documents/{id}",
            "GET /v1/collections/{name}/documents/{id}/chunks/{ordinal}",
            "GET /v1/collections/{name}/sources",
            "GET /v1/collections/{name}/sources/{source}",
            "GET /v1/feedback",
            "GET /v1/jobs",
            "GET /v1/jobs/{id}",
            "GET /v1/jobs/{id}/events",
            "GET /v1/marks",
            "GET /v1/memories",
            "GET /v1/memories/{id}",
            "GET /v1/memories/{id}/audit",
            "GET /v1/memory/graph",
            "GET /v1/memory/tiers",
            "GET /v1/models",
            "GET /v1/runs",
            "GET /v1/runs/{run_id}",
            "GET /v1/tools",
            "POST /api/chat",
            "POST /v1/admin/backup",
            "POST /v1/ask",
            "POST /v1/chat/completions",
            "POST /v1/collections",
            "POST /v1/collections/{name}/documents",
            "POST /v1/collections/{name}/urls",
            "POST /v1/jobs/{id}/cancel",
            "POST /v1/memories",
            "POST /v1/memories/search",
            "POST /v1/memories/{id}/forget",
            "POST /v1/memories/{id}/links",
            "POST /v1/memories/{id}/restore",
            "POST /v1/memories/{id}/signal",
            "POST /v1/runs/{run_id}/mark",
            "POST /v1/search",
        ];
        assert_eq!(ops, want);
        let schemes = &v["components"]["securitySchemes"];
        assert_eq!(schemes["bearer"]["scheme"], "bearer");
        assert_eq!(schemes["api_key"]["name"], "X-API-Key");
    }
}
