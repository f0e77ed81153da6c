//! OpenTelemetry tracing for neuralcore.
//!
//! The code marks its work with ordinary `tracing` spans (a request, an ask, each loop
//! iteration and stage, each tool run, search, embedding batch and LLM call). This crate
//! turns those spans into OpenTelemetry spans: [`layer`] is a `tracing-subscriber` layer
//! that gives every span of a `neuralcore*` target a trace and span id (inherited from
//! its parent, taken from a W3C `traceparent` field, or new), keeps its fields as
//! attributes, and hands the finished span to an exporter thread that posts batches to an
//! OTLP/HTTP endpoint as protobuf (`/v1/traces` of Phoenix, Langfuse, Jaeger or a
//! collector). Until [`start`] is called (`[telemetry] enabled = true`) the layer does
//! nothing at all.
//!
//! Field conventions on spans: `otel.name` (the exported name), `otel.kind` (`server`,
//! `client`, `internal`), `otel.status_code` (`ok` / `error`) and
//! `otel.status_message`; a `traceparent` field (an incoming request's header) makes the
//! span a child of that remote span. Every other field is an attribute under its own
//! name (`gen_ai.request.model`, `neuralcore.stage`, …).
//!
//! [`current`], [`traceparent`] and [`trace_id`] read the current span's context: the
//! LLM and web clients send `traceparent` on their requests, the ask report and the HTTP
//! response carry the trace id.

mod export;
pub mod otlp;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::{Context, Filter, Layer};
use tracing_subscriber::registry::LookupSpan;

pub use export::Guard;
use otlp::{SpanRecord, Value};

/// `[telemetry]`: OpenTelemetry export (off by default).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Export spans over OTLP/HTTP.
    pub enabled: bool,
    /// The OTLP/HTTP traces endpoint (protobuf): Phoenix
    /// `http://127.0.0.1:6006/v1/traces`, Langfuse
    /// `https://cloud.langfuse.com/api/public/otel/v1/traces`, a collector
    /// `http://127.0.0.1:4318/v1/traces`.
    pub endpoint: String,
    /// Headers sent with every export, `name=value` pairs separated by commas (as
    /// `OTEL_EXPORTER_OTLP_HEADERS`), e.g. Langfuse's
    /// `Authorization=Basic <base64 of public:secret key>`. A secret: set it with
    /// `NEURALCORE_TELEMETRY_HEADERS(_FILE)`; it is never shown or logged.
    #[serde(skip_serializing)]
    pub headers: String,
    /// The share of traces kept (0.0–1.0), decided once per trace at its root; a trace
    /// that comes in with a `traceparent` follows the caller's sampled flag.
    pub sampling: f64,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// The project the spans go to in Phoenix (`openinference.project.name`).
    pub project: String,
    /// Most spans waiting for export; further spans are dropped (and counted) while the
    /// endpoint is slow or away.
    pub queue: usize,
    /// Timeout of one export request, milliseconds.
    pub timeout_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            enabled: false,
            endpoint: "http://127.0.0.1:6006/v1/traces".into(),
            headers: String::new(),
            sampling: 1.0,
            service_name: "neuralcore".into(),
            project: "neuralcore".into(),
            queue: 8192,
            timeout_ms: 5000,
        }
    }
}

// The headers are a secret: not in Debug either.
impl std::fmt::Debug for TelemetryConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryConfig")
            .field("enabled", &self.enabled)
            .field("endpoint", &self.endpoint)
            .field("headers", &if self.headers.is_empty() { "" } else { "***" })
            .field("sampling", &self.sampling)
            .field("service_name", &self.service_name)
            .field("project", &self.project)
            .field("queue", &self.queue)
            .field("timeout_ms", &self.timeout_ms)
            .finish()
    }
}

impl TelemetryConfig {
    /// The problems of the settings, in words.
    pub fn check(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sampling) || self.sampling.is_nan() {
            return Err(format!(
                "telemetry.sampling must be between 0 and 1, not {}",
                self.sampling
            ));
        }
        if self.enabled
            && !(self.endpoint.starts_with("http://") || self.endpoint.starts_with("https://"))
        {
            return Err(format!(
                "telemetry.endpoint must be an http:// or https:// URL of an OTLP/HTTP traces \
                 endpoint, not {:?}",
                self.endpoint
            ));
        }
        export::parse_headers(&self.headers).map(|_| ())
    }
}

/// A span's OpenTelemetry context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl SpanContext {
    /// The trace id, 32 lowercase hex digits.
    pub fn trace_hex(&self) -> String {
        hex(&self.trace_id)
    }

    /// The span id, 16 lowercase hex digits.
    pub fn span_hex(&self) -> String {
        hex(&self.span_id)
    }

    /// The W3C `traceparent` header value naming this span as the parent.
    pub fn traceparent(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_hex(),
            self.span_hex(),
            u8::from(self.sampled)
        )
    }
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2
        || !s
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(out)
}

/// Parses a W3C `traceparent` (`00-<trace>-<span>-<flags>`); `None` when it is not a
/// valid one (an all-zero id, a wrong length, upper-case hex, version `ff`).
pub fn parse_traceparent(s: &str) -> Option<SpanContext> {
    let s = s.trim();
    let mut parts = s.split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    // Version 00 has exactly four parts; later versions may append more.
    if version.len() != 2 || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    unhex::<1>(version)?;
    let trace_id = unhex::<16>(trace)?;
    let span_id = unhex::<8>(span)?;
    let flags = unhex::<1>(flags)?[0];
    if trace_id == [0; 16] || span_id == [0; 8] {
        return None;
    }
    Some(SpanContext {
        trace_id,
        span_id,
        sampled: flags & 1 == 1,
    })
}

static ON: AtomicBool = AtomicBool::new(false);
static STARTED: OnceLock<export::Exporter> = OnceLock::new();

/// Whether spans are being exported (after [`start`]).
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Starts exporting with `cfg` (when `cfg.enabled`); the layer must be installed in the
/// global subscriber ([`layer`]). Once per process: a second call returns the first's
/// state. Keep the guard until the process ends: dropping it sends what is queued.
pub fn start(cfg: &TelemetryConfig) -> Result<Option<Guard>, String> {
    cfg.check()?;
    if !cfg.enabled {
        return Ok(None);
    }
    if STARTED.get().is_some() {
        return Ok(Some(Guard::new(STARTED.get().expect("set"))));
    }
    let exporter = export::Exporter::spawn(cfg)?;
    let _ = STARTED.set(exporter);
    let _ = RATIO.set(cfg.sampling);
    ON.store(true, Ordering::Relaxed);
    // Callsites decided before now (the filter said no) are asked again.
    tracing::callsite::rebuild_interest_cache();
    Ok(Some(Guard::new(STARTED.get().expect("set"))))
}

/// Stops (`false`) or resumes (`true`) recording spans after [`start`], the exporter
/// running on; what was recorded is still sent. Before `start` it does nothing. For
/// measuring what tracing costs within one process (`nc-bench ask --trace-endpoint`).
pub fn set_recording(on: bool) {
    if STARTED.get().is_some() {
        ON.store(on, Ordering::Relaxed);
    }
}

/// Spans dropped so far because the export queue was full (0 before [`start`]).
pub fn dropped() -> u64 {
    STARTED
        .get()
        .map_or(0, |e| e.dropped.load(Ordering::Relaxed))
}

/// Posts every span finished so far (when telemetry was started); whether that was done
/// within `timeout`. Call it before the process exits.
pub fn flush(timeout: Duration) -> bool {
    STARTED.get().is_none_or(|e| e.flush(timeout))
}

static RATIO: OnceLock<f64> = OnceLock::new();

thread_local! {
    static RNG: Cell<u64> = Cell::new({
        let mut b = [0u8; 8];
        let _ = getrandom::getrandom(&mut b);
        u64::from_le_bytes(b) | 1
    });
}

/// 64 random bits (SplitMix64 seeded per thread from the OS).
fn random_u64() -> u64 {
    RNG.with(|r| {
        let mut x = r.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        r.set(x);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    })
}

fn new_span_id() -> [u8; 8] {
    loop {
        let v = random_u64();
        if v != 0 {
            return v.to_be_bytes();
        }
    }
}

fn new_trace_id() -> [u8; 16] {
    let mut t = [0u8; 16];
    t[..8].copy_from_slice(&new_span_id());
    t[8..].copy_from_slice(&random_u64().to_be_bytes());
    t
}

/// The ratio sampler of the OpenTelemetry spec: the trace id's low 8 bytes against the
/// ratio, so every process decides a trace the same way.
fn sampled(trace_id: &[u8; 16], ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    if ratio <= 0.0 {
        return false;
    }
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    let v = u64::from_be_bytes(low) >> 1;
    (v as f64) < ratio * (u64::MAX >> 1) as f64
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_nanos() as u64
}

/// What the layer keeps in a span's extensions.
struct SpanData {
    ctx: SpanContext,
    parent: Option<[u8; 8]>,
    name: String,
    kind: i32,
    start: u64,
    attributes: Vec<(String, Value)>,
    status_code: i32,
    status_message: String,
}

/// The current span's context, when telemetry is on and the current span is one of
/// neuralcore's.
pub fn current() -> Option<SpanContext> {
    if !enabled() {
        return None;
    }
    tracing::Span::current()
        .with_subscriber(|(id, dispatch)| {
            let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
            let span = registry.span(id)?;
            let ext = span.extensions();
            ext.get::<SpanData>().map(|d| d.ctx)
        })
        .flatten()
}

/// The `traceparent` header value for an outgoing request made inside the current span.
pub fn traceparent() -> Option<String> {
    current().map(|c| c.traceparent())
}

/// The current trace's id (32 hex digits), when the trace is sampled (exported): an id
/// that names nothing a trace viewer holds is not handed out.
pub fn trace_id() -> Option<String> {
    current().filter(|c| c.sampled).map(|c| c.trace_hex())
}

/// The layer: install it once in the global subscriber, e.g.
/// `tracing_subscriber::registry().with(neuralcore_telemetry::layer())`. It records
/// nothing until [`start`].
pub fn layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    OtelLayer.with_filter(OursWhenOn)
}

/// Spans of neuralcore's own crates, while telemetry is on.
struct OursWhenOn;

impl<S> Filter<S> for OursWhenOn {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        meta.is_span() && enabled() && meta.target().starts_with("neuralcore")
    }

    fn callsite_enabled(
        &self,
        meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if meta.is_span() && meta.target().starts_with("neuralcore") {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::never()
        }
    }
}

struct OtelLayer;

/// Fields into attributes, with the `otel.*` and `traceparent` conventions.
struct Fields<'a> {
    data: &'a mut SpanData,
    remote: Option<SpanContext>,
}

impl Fields<'_> {
    fn put(&mut self, name: &str, v: Value) {
        match (name, &v) {
            ("otel.name", Value::Str(s)) => self.data.name = s.clone(),
            ("otel.kind", Value::Str(s)) => {
                self.data.kind = match s.as_str() {
                    "server" => 2,
                    "client" => 3,
                    "producer" => 4,
                    "consumer" => 5,
                    _ => 1,
                }
            }
            ("otel.status_code", Value::Str(s)) => {
                self.data.status_code = match s.to_ascii_lowercase().as_str() {
                    "ok" => 1,
                    "error" => 2,
                    _ => 0,
                }
            }
            ("otel.status_message", Value::Str(s)) => self.data.status_message = s.clone(),
            ("traceparent", Value::Str(s)) => self.remote = parse_traceparent(s),
            _ => {
                if let Some(slot) = self.data.attributes.iter_mut().find(|(k, _)| k == name) {
                    slot.1 = v;
                } else {
                    self.data.attributes.push((name.to_string(), v));
                }
            }
        }
    }
}

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field.name(), Value::Str(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field.name(), Value::Str(value.to_string()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field.name(), Value::Bool(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field.name(), Value::Int(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field.name(), Value::Int(value.min(i64::MAX as u64) as i64));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field.name(), Value::Double(value));
    }
}

impl<S> Layer<S> for OtelLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut data = SpanData {
            ctx: SpanContext {
                trace_id: [0; 16],
                span_id: new_span_id(),
                sampled: false,
            },
            parent: None,
            name: attrs.metadata().name().to_string(),
            kind: 1,
            start: now_nanos(),
            attributes: Vec::new(),
            status_code: 0,
            status_message: String::new(),
        };
        let mut fields = Fields {
            data: &mut data,
            remote: None,
        };
        attrs.record(&mut fields);
        let remote = fields.remote;
        let local_parent = span
            .parent()
            .and_then(|p| p.extensions().get::<SpanData>().map(|d| d.ctx));
        match (local_parent, remote) {
            (Some(p), _) => {
                data.ctx.trace_id = p.trace_id;
                data.ctx.sampled = p.sampled;
                data.parent = Some(p.span_id);
            }
            (None, Some(r)) => {
                data.ctx.trace_id = r.trace_id;
                data.ctx.sampled = r.sampled;
                data.parent = Some(r.span_id);
            }
            (None, None) => {
                data.ctx.trace_id = new_trace_id();
                data.ctx.sampled = sampled(&data.ctx.trace_id, *RATIO.get().unwrap_or(&1.0));
            }
        }
        span.extensions_mut().insert(data);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        if let Some(data) = ext.get_mut::<SpanData>() {
            let mut fields = Fields { data, remote: None };
            values.record(&mut fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(data) = span.extensions_mut().remove::<SpanData>() else {
            return;
        };
        if !data.ctx.sampled {
            return;
        }
        if let Some(exporter) = STARTED.get() {
            exporter.send(SpanRecord {
                trace_id: data.ctx.trace_id,
                span_id: data.ctx.span_id,
                parent_span_id: data.parent,
                name: data.name,
                kind: data.kind,
                start_unix_nano: data.start,
                end_unix_nano: now_nanos(),
                attributes: data.attributes,
                status_code: data.status_code,
                status_message: data.status_message,
                flags: 1,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_bad_ones_are_refused() {
        let t = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let c = parse_traceparent(t).unwrap();
        assert!(c.sampled);
        assert_eq!(c.traceparent(), t);
        assert!(
            !parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .unwrap()
                .sampled
        );
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_ratio_sampler_keeps_about_the_ratio() {
        let kept = (0..20_000)
            .filter(|_| sampled(&new_trace_id(), 0.25))
            .count();
        assert!((4_000..6_000).contains(&kept), "{kept}");
        assert!(sampled(&new_trace_id(), 1.0));
        assert!(!sampled(&new_trace_id(), 0.0));
    }

    #[test]
    fn settings_are_checked_and_headers_never_shown() {
        let mut c = TelemetryConfig {
            headers: "Authorization=Basic c2VjcmV0".into(),
            ..Default::default()
        };
        assert!(!format!("{c:?}").contains("c2VjcmV0"));
        c.sampling = 1.5;
        assert!(c.check().unwrap_err().contains("sampling"));
        c.sampling = 1.0;
        c.enabled = true;
        c.endpoint = "127.0.0.1:6006".into();
        assert!(c.check().unwrap_err().contains("endpoint"));
        c.endpoint = "http://127.0.0.1:6006/v1/traces".into();
        c.headers = "no equals sign".into();
        assert!(c.check().unwrap_err().contains("headers"));
    }
}
