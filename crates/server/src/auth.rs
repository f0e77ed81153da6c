//! Who is calling: the API key of a request (`Authorization: Bearer` or `X-API-Key`),
//! looked up in the data dir's key store, and its per-key rate limit. A server without
//! keys (loopback only) treats every caller as the default tenant's administrator.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use neuralcore_app::{Principal, Scope, Tenant};

use crate::error::ApiError;
use crate::State;

/// The caller of a request, authenticated and within its rate limit.
pub struct Caller(pub Principal);

impl Caller {
    /// The caller's tenant.
    pub fn tenant(&self) -> &Tenant {
        &self.0.tenant
    }

    /// An error unless the key's scope is at least `need`.
    pub fn require(&self, need: Scope) -> Result<(), ApiError> {
        if self.0.scope >= need {
            Ok(())
        } else {
            Err(ApiError::forbidden(need.name()))
        }
    }
}

/// The key a request carries, if any.
fn presented_key(parts: &Parts) -> Option<String> {
    if let Some(v) = parts.headers.get("x-api-key") {
        return v.to_str().ok().map(|s| s.trim().to_string());
    }
    let v = parts.headers.get(axum::http::header::AUTHORIZATION)?;
    let v = v.to_str().ok()?.trim();
    let (scheme, rest) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| rest.trim().to_string())
}

impl FromRequestParts<Arc<State>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Self, ApiError> {
        let Some(keys) = &state.keys else {
            return Ok(Caller(Principal {
                tenant: Tenant::default_tenant(),
                scope: Scope::Admin,
                key: None,
            }));
        };
        let key = presented_key(parts).ok_or_else(ApiError::unauthorized)?;
        // A longer value is no key of ours: refuse it before any lookup.
        if key.len() > 128 {
            return Err(ApiError::unauthorized());
        }
        let found = if keys.in_postgres() {
            // A query on the synchronous PostgreSQL client, which must not run on the
            // async runtime's threads.
            let keys = keys.clone();
            tokio::task::spawn_blocking(move || keys.authenticate(&key))
                .await
                .map_err(|e| {
                    ApiError::from(neuralcore_app::AppError::Internal(format!(
                        "the key lookup failed: {e}"
                    )))
                })?
        } else {
            // A read of a local redb file: quick, done in place.
            keys.authenticate(&key)
        };
        let principal = found
            .map_err(ApiError::from)?
            .ok_or_else(ApiError::unauthorized)?;
        if let Some(prefix) = &principal.key {
            state.limiter.take(prefix)?;
        }
        Ok(Caller(principal))
    }
}

/// The authentication of `/mcp`: the caller's key is checked (and rate-limited) as for
/// every route, and its [`Principal`] goes into the request for the MCP handler; a
/// missing or wrong key is a 401 problem before any MCP message is read.
pub async fn mcp_caller(
    caller: Result<Caller, ApiError>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match caller {
        Ok(Caller(p)) => {
            req.extensions_mut().insert(p);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

/// A token bucket per key: `per_minute` requests a minute, bursts up to that many.
pub struct RateLimiter {
    per_minute: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// `per_minute` 0 means no limit.
    pub fn new(per_minute: u32) -> Self {
        RateLimiter {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one request's token for `key`, or a 429 saying when the next one comes.
    pub fn take(&self, key: &str) -> Result<(), ApiError> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let cap = f64::from(self.per_minute);
        let per_sec = cap / 60.0;
        let now = Instant::now();
        let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last) = b.entry(key.to_string()).or_insert((cap, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * per_sec).min(cap);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - *tokens) / per_sec).ceil().max(1.0) as u64;
        Err(ApiError {
            retry_after: Some(wait),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "this key's limit is {} requests a minute; retry in {wait} s",
                    self.per_minute
                ),
            )
        })
    }
}
