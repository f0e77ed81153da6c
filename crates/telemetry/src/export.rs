//! The exporter thread: finished spans arrive on a bounded channel and leave in batches,
//! one OTLP/HTTP protobuf POST each, at most every half second (or at 512 spans).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use crate::otlp::{encode_request, SpanRecord, Value};
use crate::TelemetryConfig;

const BATCH: usize = 512;
const LINGER: Duration = Duration::from_millis(500);

enum Msg {
    Span(Box<SpanRecord>),
    Flush(mpsc::Sender<()>),
}

pub(crate) struct Exporter {
    tx: SyncSender<Msg>,
    pub(crate) dropped: AtomicU64,
}

/// `name=value,name2=value2` (as `OTEL_EXPORTER_OTLP_HEADERS`); the error never repeats
/// a value (they are secrets).
pub(crate) fn parse_headers(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, pair) in s.split(',').enumerate() {
        if pair.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!(
                "telemetry.headers: pair {} has no '=' (name=value,name2=value2)",
                i + 1
            ));
        };
        let k = k.trim();
        if k.is_empty()
            || !k
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        {
            return Err(format!(
                "telemetry.headers: pair {} has no valid header name",
                i + 1
            ));
        }
        out.push((k.to_string(), v.trim().to_string()));
    }
    Ok(out)
}

/// The endpoint as it may be logged: scheme, host and path, no user, password or query.
fn shown(endpoint: &str) -> String {
    let (scheme, rest) = endpoint.split_once("://").unwrap_or(("", endpoint));
    let rest = rest.rsplit_once('@').map(|x| x.1).unwrap_or(rest);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest);
    format!("{scheme}://{rest}")
}

impl Exporter {
    pub(crate) fn spawn(cfg: &TelemetryConfig) -> Result<Exporter, String> {
        let headers = parse_headers(&cfg.headers)?;
        let (tx, rx) = mpsc::sync_channel(cfg.queue.max(1));
        let resource = vec![
            (
                "service.name".to_string(),
                Value::Str(cfg.service_name.clone()),
            ),
            (
                "service.version".to_string(),
                Value::Str(env!("CARGO_PKG_VERSION").to_string()),
            ),
            (
                "openinference.project.name".to_string(),
                Value::Str(cfg.project.clone()),
            ),
            (
                "telemetry.sdk.name".to_string(),
                Value::Str("neuralcore".into()),
            ),
            (
                "telemetry.sdk.language".to_string(),
                Value::Str("rust".into()),
            ),
        ];
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_millis(cfg.timeout_ms.max(1))))
            .http_status_as_error(false)
            .build()
            .into();
        let endpoint = cfg.endpoint.clone();
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || run(rx, agent, endpoint, headers, resource))
            .map_err(|e| format!("cannot start the telemetry exporter: {e}"))?;
        Ok(Exporter {
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    pub(crate) fn send(&self, span: SpanRecord) {
        match self.tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends what is queued and waits (at most `timeout`) until it has been posted.
    pub(crate) fn flush(&self, timeout: Duration) -> bool {
        let (done, wait) = mpsc::channel();
        if self.tx.send(Msg::Flush(done)).is_err() {
            return false;
        }
        wait.recv_timeout(timeout).is_ok()
    }
}

/// Kept by the process that started telemetry; dropping it flushes (2 s at most).
pub struct Guard {
    exporter: &'static Exporter,
}

impl Guard {
    pub(crate) fn new(exporter: &'static Exporter) -> Guard {
        Guard { exporter }
    }

    /// Posts every span finished so far; whether that was done within `timeout`.
    pub fn flush(&self, timeout: Duration) -> bool {
        self.exporter.flush(timeout)
    }

    /// Spans dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.exporter.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.exporter.flush(Duration::from_secs(2));
    }
}

fn run(
    rx: Receiver<Msg>,
    agent: ureq::Agent,
    endpoint: String,
    headers: Vec<(String, String)>,
    resource: Vec<(String, Value)>,
) {
    let mut batch: Vec<SpanRecord> = Vec::new();
    let mut first_at: Option<Instant> = None;
    let mut last_warning: Option<Instant> = None;
    let post = |batch: &mut Vec<SpanRecord>, last_warning: &mut Option<Instant>| {
        if batch.is_empty() {
            return;
        }
        let body = encode_request(&resource, ("neuralcore", env!("CARGO_PKG_VERSION")), batch);
        let mut req = agent
            .post(&endpoint)
            .header("content-type", "application/x-protobuf");
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let problem = match req.send(&body[..]) {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("HTTP {}", r.status().as_u16())),
            Err(e) => Some(e.to_string()),
        };
        if let Some(p) = problem {
            // At most once a minute: a collector that is away must not flood the log.
            if last_warning.is_none_or(|t| t.elapsed() > Duration::from_secs(60)) {
                tracing::warn!(
                    "telemetry: {} spans not exported to {}: {p}",
                    batch.len(),
                    shown(&endpoint)
                );
                *last_warning = Some(Instant::now());
            }
        }
        batch.clear();
    };
    loop {
        let wait = first_at.map_or(Duration::from_secs(3600), |t| {
            LINGER.saturating_sub(t.elapsed())
        });
        match rx.recv_timeout(wait) {
            Ok(Msg::Span(s)) => {
                batch.push(*s);
                first_at.get_or_insert_with(Instant::now);
                if batch.len() >= BATCH {
                    post(&mut batch, &mut last_warning);
                    first_at = None;
                }
            }
            Ok(Msg::Flush(done)) => {
                post(&mut batch, &mut last_warning);
                first_at = None;
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                post(&mut batch, &mut last_warning);
                first_at = None;
            }
            Err(RecvTimeoutError::Disconnected) => {
                post(&mut batch, &mut last_warning);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_and_errors_never_show_values() {
        assert_eq!(
            parse_headers("Authorization=Basic abc==, x-team = a").unwrap(),
            vec![
                ("Authorization".to_string(), "Basic abc==".to_string()),
                ("x-team".to_string(), "a".to_string())
            ]
        );
        assert!(parse_headers("").unwrap().is_empty());
        let e = parse_headers("Authorization Bearer sekrit").unwrap_err();
        assert!(!e.contains("sekrit"), "{e}");
        assert!(parse_headers("=sekrit").unwrap_err().contains("name"));
    }

    #[test]
    fn the_endpoint_is_shown_without_credentials() {
        assert_eq!(
            shown("https://user:pw@otel.example/v1/traces?token=t"),
            "https://otel.example/v1/traces"
        );
    }
}
