//! Errors as `application/problem+json` (RFC 9457): a stable `type` per category, a
//! title, the status and a detail for people. Internal errors never carry their detail
//! to the client (it may hold a path of the server's disk): it is logged with an id the
//! response names.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use neuralcore_app::AppError;
use serde::Serialize;

/// The `type` of every problem this server answers, by kind.
pub fn problem_type(kind: &str) -> String {
    format!("urn:neuralcore:problem:{kind}")
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable kind (`invalid_input`, `not_found`, ...): the `type` is built from it.
    pub kind: &'static str,
    /// For people.
    pub detail: String,
    /// Seconds to wait before retrying (429, 503).
    pub retry_after: Option<u64>,
}

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
}

/// An error (`application/problem+json`, RFC 9457), as the OpenAPI document shows it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ProblemDoc {
    /// `urn:neuralcore:problem:<kind>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The kind, for people.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong.
    pub detail: String,
}

impl ApiError {
    /// A problem of `kind` with `status`.
    pub fn new(status: StatusCode, kind: &'static str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// 400.
    pub fn invalid(detail: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", detail)
    }

    /// 404.
    pub fn not_found(detail: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", detail)
    }

    /// 401 (a missing, malformed, unknown or revoked key: all alike).
    pub fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "an API key is required (Authorization: Bearer nck_... or X-API-Key)",
        )
    }

    /// 403: the key's scope does not allow this.
    pub fn forbidden(need: &str) -> Self {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("this key's scope does not allow it (needs {need})"),
        )
    }

    /// 503 with a retry hint.
    pub fn busy(detail: impl Into<String>, retry_after: u64) -> Self {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", detail)
        }
    }

    fn title(&self) -> &'static str {
        match self.kind {
            "invalid_input" => "Invalid input",
            "not_found" => "Not found",
            "unauthorized" => "Unauthorized",
            "forbidden" => "Forbidden",
            "rate_limited" => "Too many requests",
            "unavailable" => "Unavailable",
            "storage_full" => "Storage full",
            "upstream" => "Upstream failed",
            "payload_too_large" => "Payload too large",
            "unsupported_media_type" => "Unsupported media type",
            "method_not_allowed" => "Method not allowed",
            "timeout" => "Timed out",
            "conflict" => "Conflict",
            _ => "Internal error",
        }
    }
}

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        match e {
            AppError::InvalidInput(m) => ApiError::invalid(m),
            AppError::NotFound(m) => ApiError::not_found(m),
            AppError::Forbidden(m) => ApiError::new(StatusCode::FORBIDDEN, "forbidden", m),
            AppError::Upstream(m) => ApiError::new(StatusCode::BAD_GATEWAY, "upstream", m),
            AppError::Unavailable(m) => {
                tracing::warn!("unavailable: {m}");
                ApiError::busy("a backend is unavailable; try again", 5)
            }
            AppError::StorageFull(m) => {
                // The message names no path: the client learns the disk is full.
                tracing::warn!("storage full: {m}");
                ApiError {
                    retry_after: Some(60),
                    ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage_full", m)
                }
            }
            AppError::Internal(m) => {
                let id = AppError::log_internal(&m);
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("internal error {id} (the server's log has the detail)"),
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::to_vec(&Problem {
            kind: problem_type(self.kind),
            title: self.title(),
            status: self.status.as_u16(),
            detail: &self.detail,
        })
        .unwrap_or_default();
        let mut r = (self.status, body).into_response();
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(s) = self.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_is_a_503_storage_full_problem_with_its_detail() {
        let detail = "cannot store the upload: the disk of the data dir is full";
        let e = ApiError::from(AppError::StorageFull(detail.into()));
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.kind, "storage_full");
        assert_eq!(e.detail, detail);
        assert_eq!(e.title(), "Storage full");
        let r = e.into_response();
        assert_eq!(
            r.headers()[header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert!(r.headers().contains_key(header::RETRY_AFTER));
    }
}
