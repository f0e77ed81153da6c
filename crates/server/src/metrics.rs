//! Prometheus metrics (`GET /metrics`, text format 0.0.4): requests by route, method and
//! status, request latency histograms by route, the control loop's stage timings, and
//! ingest jobs by state. Counted in process by a small registry (no exporter crate):
//! labels are route templates (`/v1/jobs/{id}`), never ids or tenants, so nothing of a
//! tenant's data reaches a scrape.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State as AxumState};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use neuralcore_app::{AskReport, Scope};

use crate::auth::Caller;
use crate::State;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (c, le) in self.counts.iter_mut().zip(BUCKETS) {
            if secs <= le {
                *c += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (c, le) in self.counts.iter().zip(BUCKETS) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {c}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    /// (route, method, status) → count.
    requests: BTreeMap<(String, String, u16), u64>,
    /// route → latency (to the response's head; a stream's body is not counted).
    latency: BTreeMap<String, Histogram>,
    /// loop stage → duration.
    stages: BTreeMap<String, Histogram>,
    /// asks by how they ended (method: extractive, llm, abstain, ...).
    asks: BTreeMap<String, u64>,
    /// requests refused for want of a place (a full queue, or none free in time).
    shed: u64,
}

/// The server's metrics.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One request done.
    pub fn request(&self, route: &str, method: &str, status: u16, secs: f64) {
        let mut m = self.lock();
        *m.requests
            .entry((route.to_string(), method.to_string(), status))
            .or_insert(0) += 1;
        m.latency
            .entry(route.to_string())
            .or_default()
            .observe(secs);
    }

    /// One request refused for want of a place to run (a 503).
    pub fn shed(&self) {
        self.lock().shed += 1;
    }

    /// The stage timings of one ask.
    pub fn ask(&self, report: &AskReport) {
        let mut m = self.lock();
        for it in &report.iterations {
            for s in it.stages.iter().filter(|s| s.skipped.is_none()) {
                m.stages
                    .entry(s.stage.clone())
                    .or_default()
                    .observe(s.ms / 1000.0);
            }
        }
        for s in report.finish.iter().filter(|s| s.skipped.is_none()) {
            m.stages
                .entry(s.stage.clone())
                .or_default()
                .observe(s.ms / 1000.0);
        }
        *m.asks.entry(report.method.clone()).or_insert(0) += 1;
    }

    /// The text exposition, with the jobs counted by state.
    pub fn render(&self, jobs: &BTreeMap<String, usize>) -> String {
        let m = self.lock();
        let mut out = String::new();
        out.push_str("# HELP neuralcore_build_info The running version.\n# TYPE neuralcore_build_info gauge\n");
        let _ = writeln!(
            out,
            "neuralcore_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        out.push_str("# HELP neuralcore_http_requests_total HTTP requests by route template, method and status.\n# TYPE neuralcore_http_requests_total counter\n");
        for ((route, method, status), n) in &m.requests {
            let _ = writeln!(
                out,
                "neuralcore_http_requests_total{{route=\"{}\",method=\"{method}\",status=\"{status}\"}} {n}",
                escape(route)
            );
        }
        out.push_str("# HELP neuralcore_http_request_duration_seconds Time to the response's head, by route template.\n# TYPE neuralcore_http_request_duration_seconds histogram\n");
        for (route, h) in &m.latency {
            h.render(
                &mut out,
                "neuralcore_http_request_duration_seconds",
                &format!("route=\"{}\"", escape(route)),
            );
        }
        out.push_str("# HELP neuralcore_loop_stage_duration_seconds Time of each stage of the control loop, per run of the stage.\n# TYPE neuralcore_loop_stage_duration_seconds histogram\n");
        for (stage, h) in &m.stages {
            h.render(
                &mut out,
                "neuralcore_loop_stage_duration_seconds",
                &format!("stage=\"{}\"", escape(stage)),
            );
        }
        out.push_str("# HELP neuralcore_asks_total Asks answered, by how (extractive, llm, direct, abstain, ...).\n# TYPE neuralcore_asks_total counter\n");
        for (method, n) in &m.asks {
            let _ = writeln!(
                out,
                "neuralcore_asks_total{{method=\"{}\"}} {n}",
                escape(method)
            );
        }
        out.push_str("# HELP neuralcore_requests_shed_total Requests refused with a 503 because every place was taken and the wait queue was full or did not move in time.\n# TYPE neuralcore_requests_shed_total counter\n");
        let _ = writeln!(out, "neuralcore_requests_shed_total {}", m.shed);
        out.push_str(
            "# HELP neuralcore_jobs Ingest jobs by state.\n# TYPE neuralcore_jobs gauge\n",
        );
        for (state, n) in jobs {
            let _ = writeln!(out, "neuralcore_jobs{{state=\"{state}\"}} {n}");
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Middleware: count every request by its route template.
pub async fn track(AxumState(st): AxumState<Arc<State>>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().as_str().to_string();
    // The request's span (OpenTelemetry, when `[telemetry]` exports): a child of the
    // caller's span when the request carries a W3C `traceparent`. It ends when the
    // response's head is ready (a stream's body goes on after it).
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let span = tracing::info_span!(
        "request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        openinference.span.kind = "CHAIN",
        http.request.method = %method,
        http.route = %route,
        http.response.status_code = tracing::field::Empty,
        traceparent = traceparent.as_str(),
    );
    let start = Instant::now();
    let mut resp = tracing::Instrument::instrument(next.run(req), span.clone()).await;
    let status = resp.status().as_u16();
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "error");
    }
    if let Some(id) = span.in_scope(neuralcore_telemetry::trace_id) {
        if let Ok(v) = header::HeaderValue::from_str(&id) {
            resp.headers_mut().insert("x-trace-id", v);
        }
    }
    st.metrics
        .request(&route, &method, status, start.elapsed().as_secs_f64());
    resp
}

/// `GET /metrics` (an admin key of the default tenant when the server has keys).
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String)))]
pub async fn metrics(AxumState(st): AxumState<Arc<State>>, caller: Caller) -> Response {
    // Counts span every tenant: an operator's (the default tenant's admin) to read.
    if let Err(e) = caller.require(Scope::Admin) {
        return e.into_response();
    }
    if !caller.tenant().is_default() {
        return crate::error::ApiError::forbidden("admin of the default tenant").into_response();
    }
    let jobs = st.jobs.clone();
    let counts = match st
        .blocking(move |app| Ok((jobs.counts_by_state()?, app.engine().cache().stats())))
        .await
    {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let (counts, cache) = counts;
    let by_state = counts
        .into_iter()
        .map(|(s, n)| {
            (
                serde_json::to_value(s)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                n,
            )
        })
        .collect();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        st.metrics.render(&by_state) + &render_cache(&cache),
    )
        .into_response()
}

/// The operation cache's counters (this process's since it started) and its tiers' size.
fn render_cache(c: &neuralcore_cache::CacheStats) -> String {
    let mut out = String::new();
    out.push_str("# HELP neuralcore_cache_lookups_total Cache lookups by operation and outcome (hot_hit, cold_hit, miss).\n# TYPE neuralcore_cache_lookups_total counter\n");
    for o in &c.ops {
        for (outcome, n) in [
            ("hot_hit", o.hot_hits),
            ("cold_hit", o.cold_hits),
            ("miss", o.misses),
        ] {
            let _ = writeln!(
                out,
                "neuralcore_cache_lookups_total{{op=\"{}\",outcome=\"{outcome}\"}} {n}",
                o.op
            );
        }
    }
    out.push_str("# HELP neuralcore_cache_stores_total Values stored, or not stored (too_large), and entries that failed their check on read (corrupt), by operation.\n# TYPE neuralcore_cache_stores_total counter\n");
    for o in &c.ops {
        for (what, n) in [
            ("stored", o.puts),
            ("too_large", o.too_large),
            ("corrupt", o.corrupt),
        ] {
            let _ = writeln!(
                out,
                "neuralcore_cache_stores_total{{op=\"{}\",result=\"{what}\"}} {n}",
                o.op
            );
        }
    }
    out.push_str("# HELP neuralcore_cache_tier Entries, bytes and evictions of each cache tier, and its failed and bypassed calls.\n# TYPE neuralcore_cache_tier gauge\n");
    for t in &c.tiers {
        let labels = format!("role=\"{}\",tier=\"{}\"", t.role, t.name);
        if let Some(u) = &t.usage {
            for (what, n) in [
                ("entries", u.entries),
                ("bytes", u.bytes),
                ("evictions", u.evictions),
            ] {
                let _ = writeln!(
                    out,
                    "neuralcore_cache_tier{{{labels},measure=\"{what}\"}} {n}"
                );
            }
        }
        for (what, n) in [("errors", t.errors), ("bypassed", t.bypassed)] {
            let _ = writeln!(
                out,
                "neuralcore_cache_tier{{{labels},measure=\"{what}\"}} {n}"
            );
        }
    }
    out
}

/// `POST /v1/admin/backup`: a consistent copy of the data dir, taken while the server
/// runs, written to `<data dir>/backups/<name>` on the server's machine (an admin key
/// of the default tenant when the server has keys: a backup holds every tenant's data).
#[utoipa::path(post, path = "/v1/admin/backup", tag = "admin",
    request_body = crate::wire::BackupRequest,
    responses(
        (status = 200, description = "The backup's manifest", body = neuralcore_app::backup::BackupManifest),
        (status = 403, description = "Not an admin key of the default tenant"),
        (status = 409, description = "A backup of that name exists"),
    ))]
pub async fn backup(
    AxumState(st): AxumState<Arc<State>>,
    caller: Caller,
    crate::wire::ApiJson(req): crate::wire::ApiJson<crate::wire::BackupRequest>,
) -> Result<axum::Json<neuralcore_app::backup::BackupManifest>, crate::error::ApiError> {
    caller.require(Scope::Admin)?;
    if !caller.tenant().is_default() {
        return Err(crate::error::ApiError::forbidden(
            "admin of the default tenant",
        ));
    }
    if !neuralcore_app::backup::backup_name_ok(&req.name) {
        return Err(crate::error::ApiError::invalid(
            "name: 1-64 of A-Z, a-z, 0-9, _, . and -, not starting with .",
        ));
    }
    let taken = st
        .app
        .data_dir()
        .join(neuralcore_app::backup::BACKUPS_DIR)
        .join(&req.name)
        .exists();
    if taken {
        return Err(crate::error::ApiError::new(
            axum::http::StatusCode::CONFLICT,
            "conflict",
            format!("a backup named {:?} exists", req.name),
        ));
    }
    let keys = st.keys.clone();
    let name = req.name;
    let manifest = st
        .blocking(move |app| app.backup_named(&name, keys.as_deref()))
        .await?;
    Ok(axum::Json(manifest))
}
