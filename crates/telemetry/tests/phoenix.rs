//! Spans exported to a real Arize Phoenix (`scripts/phoenix.sh`, started by
//! `scripts/test.sh`: `NEURALCORE_TEST_PHOENIX_URL`) and read back from its REST API:
//! the tree, the remote parent of a `traceparent`, attributes, kinds and status. Skipped,
//! saying so, without the variable.

use std::time::{Duration, Instant};

use serde_json::Value;
use tracing_subscriber::layer::SubscriberExt;

// Spans of neuralcore's targets only are exported: the test's own carry one.

/// Every span of `project` in Phoenix, once there are at least `n` (60 s at most).
pub fn spans(phoenix: &str, project: &str, n: usize) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let url = format!("{phoenix}/v1/projects/{project}/spans?limit=1000");
        if let Ok(mut r) = ureq::get(&url).call() {
            let v: Value = r.body_mut().read_json().unwrap();
            let data = v["data"].as_array().cloned().unwrap_or_default();
            if data.len() >= n {
                return data;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "Phoenix never showed {n} spans of {project}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn spans_reach_phoenix_with_their_tree_attributes_and_remote_parent() {
    let Ok(phoenix) = std::env::var("NEURALCORE_TEST_PHOENIX_URL") else {
        eprintln!("skipped: NEURALCORE_TEST_PHOENIX_URL is not set (see scripts/phoenix.sh)");
        return;
    };
    let project = format!("nc-telemetry-{}", std::process::id());
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(neuralcore_telemetry::layer()),
    )
    .unwrap();
    // Before start: nothing is recorded, and there is no context.
    {
        let _s = tracing::info_span!(target: "neuralcore::test", "before").entered();
        assert_eq!(neuralcore_telemetry::current(), None);
    }
    let cfg = neuralcore_telemetry::TelemetryConfig {
        enabled: true,
        endpoint: format!("{phoenix}/v1/traces"),
        project: project.clone(),
        ..Default::default()
    };
    let guard = neuralcore_telemetry::start(&cfg).unwrap().unwrap();
    // A trace id of this run's own: Phoenix files a trace under the project it first
    // came with.
    let remote_trace = format!("{:016x}{:016x}", std::process::id(), now_nanos());
    let remote = format!("00-{remote_trace}-b7ad6b7169203331-01");
    let (trace, root_id) = {
        let root = tracing::info_span!(
            target: "neuralcore::test",
            "request",
            otel.name = "POST /v1/ask",
            otel.kind = "server",
            openinference.span.kind = "CHAIN",
            traceparent = remote.as_str(),
            http.response.status_code = tracing::field::Empty,
        );
        let _r = root.enter();
        let ctx = neuralcore_telemetry::current().unwrap();
        assert_eq!(ctx.trace_hex(), remote_trace);
        {
            let _child = tracing::info_span!(
                target: "neuralcore::test",
                "llm",
                otel.kind = "client",
                openinference.span.kind = "LLM",
                gen_ai.request.model = "smollm2",
                gen_ai.usage.input_tokens = 12u64,
                ratio = 0.5f64,
                cached = false,
            )
            .entered();
            let tp = neuralcore_telemetry::traceparent().unwrap();
            assert!(tp.starts_with(&format!("00-{remote_trace}-")), "{tp}");
            assert!(tp.ends_with("-01"));
            let _grandchild = tracing::info_span!(
                target: "neuralcore::test",
                "failing",
                otel.status_code = "error",
                otel.status_message = "it broke"
            )
            .entered();
        }
        root.record("http.response.status_code", 200u64);
        (ctx.trace_hex(), ctx.span_hex())
    };
    assert!(guard.flush(Duration::from_secs(10)));
    let got = spans(&phoenix, &project, 3);
    assert_eq!(got.len(), 3, "{got:#?}");
    let by_name = |n: &str| {
        got.iter()
            .find(|s| s["name"] == n)
            .unwrap_or_else(|| panic!("no span {n}: {got:#?}"))
    };
    let root = by_name("POST /v1/ask");
    let llm = by_name("llm");
    let failing = by_name("failing");
    for s in [root, llm, failing] {
        assert_eq!(s["context"]["trace_id"], trace.as_str(), "{s:#}");
    }
    assert_eq!(root["context"]["span_id"], root_id.as_str());
    assert_eq!(root["parent_id"], "b7ad6b7169203331", "{root:#}");
    assert_eq!(llm["parent_id"], root["context"]["span_id"], "{llm:#}");
    assert_eq!(failing["parent_id"], llm["context"]["span_id"]);
    // Phoenix shows OpenInference's kinds (the OTLP kind is kept but not served).
    assert_eq!(root["span_kind"], "CHAIN", "{root:#}");
    assert_eq!(llm["span_kind"], "LLM");
    assert_eq!(failing["status_code"], "ERROR", "{failing:#}");
    assert_eq!(failing["status_message"], "it broke");
    let attrs = llm["attributes"].to_string();
    for want in ["smollm2", "input_tokens", "12", "0.5", "cached"] {
        assert!(attrs.contains(want), "{want} not in {attrs}");
    }
    assert!(root["attributes"].to_string().contains("200"), "{root:#}");
    assert!(
        root["start_time"].as_str().unwrap() <= llm["start_time"].as_str().unwrap(),
        "{root:#} {llm:#}"
    );
}
