//! OpenTelemetry end to end against a real Arize Phoenix (`scripts/phoenix.sh`, started
//! by `scripts/test.sh`: `NEURALCORE_TEST_PHOENIX_URL`): an ask from the CLI and one over
//! HTTP are exported with `[telemetry]`, and their traces are read back from Phoenix's
//! REST API and checked span by span. Each test sends its spans to a Phoenix project of
//! its own. Skipped, saying so, without the variable.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use common::{model_cache, phoenix_trace as trace, provided, run_ok_env, start_server};

fn phoenix() -> Option<String> {
    provided("NEURALCORE_TEST_PHOENIX_URL", "scripts/phoenix.sh")
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// `neuralcore --data-dir DATA ARGS…` with the test model; its standard output, once it
/// has succeeded.
fn neuralcore(data: &Path, args: &[&str]) -> String {
    run_ok_env(
        data,
        args,
        &[("NEURALCORE_EMBEDDING_MODEL_DIR", &model_cache())],
    )
}

/// The JSON report of asking "What causes the tides?" over `data`.
fn ask_tides(data: &Path) -> Value {
    serde_json::from_str(&neuralcore(
        data,
        &["--json", "ask", "What causes the tides?"],
    ))
    .unwrap()
}

/// A Phoenix project name no other run uses.
fn project(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("nc-{test}-{}-{nanos}", std::process::id())
}

/// A data dir with the examples ingested and `[telemetry]` exporting to `project`
/// (plus `extra` settings) in its config file.
fn data_dir(tmp: &Path, phoenix: &str, project: &str, extra: &str) -> PathBuf {
    let data = tmp.join("data");
    neuralcore(&data, &["ingest", examples().to_str().unwrap()]);
    std::fs::write(
        data.join("neuralcore.toml"),
        format!(
            "[telemetry]\nenabled = true\nendpoint = \"{phoenix}/v1/traces\"\n\
             project = \"{project}\"\n{extra}"
        ),
    )
    .unwrap();
    data
}

/// The spans of one trace by id, with the tree's questions.
struct Tree<'a> {
    by_id: HashMap<&'a str, &'a Value>,
}

impl<'a> Tree<'a> {
    fn new(spans: &'a [Value]) -> Self {
        Tree {
            by_id: spans
                .iter()
                .map(|s| (s["context"]["span_id"].as_str().unwrap(), s))
                .collect(),
        }
    }

    fn named(&self, prefix: &str) -> Vec<&'a Value> {
        let mut v: Vec<&Value> = self
            .by_id
            .values()
            .copied()
            .filter(|s| s["name"].as_str().unwrap().starts_with(prefix))
            .collect();
        v.sort_by_key(|s| s["start_time"].as_str().unwrap().to_string());
        v
    }

    fn parent(&self, s: &Value) -> Option<&'a Value> {
        s["parent_id"]
            .as_str()
            .and_then(|p| self.by_id.get(p).copied())
    }

    /// The names of `s`'s ancestors, nearest first.
    fn ancestors(&self, s: &Value) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = self.parent(s);
        while let Some(p) = at {
            out.push(p["name"].as_str().unwrap().to_string());
            at = self.parent(p);
        }
        out
    }
}

fn attr<'v>(s: &'v Value, name: &str) -> &'v Value {
    // Phoenix serves the attributes flat, under their dotted names.
    &s["attributes"][name]
}

#[test]
fn an_ask_from_the_cli_is_one_trace_in_phoenix_from_the_loop_down_to_search_and_embedding() {
    let Some(phoenix) = phoenix() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let project = project("cli-ask");
    let data = data_dir(tmp.path(), &phoenix, &project, "");
    let report = ask_tides(&data);
    let id = report["trace_id"]
        .as_str()
        .expect("the report names its trace");
    assert_eq!(id.len(), 32, "{id}");
    let spans = trace(&phoenix, &project, id, "ask");
    let tree = Tree::new(&spans);

    // One root: the ask, with the outcome on it.
    let roots: Vec<_> = spans.iter().filter(|s| tree.parent(s).is_none()).collect();
    assert_eq!(roots.len(), 1, "{roots:#?}");
    let ask = roots[0];
    assert_eq!(ask["name"], "ask");
    assert!(ask["parent_id"].is_null(), "{ask:#}");
    assert_eq!(ask["span_kind"], "AGENT");
    assert_eq!(ask["status_code"], "OK", "{ask:#}");
    assert_eq!(
        attr(ask, "neuralcore.abstained"),
        &report["abstained"],
        "{ask:#}"
    );
    assert_eq!(attr(ask, "neuralcore.collection"), "default");
    assert_eq!(
        attr(ask, "neuralcore.iterations"),
        &report["budget"]["iterations"]
    );
    assert_eq!(
        attr(ask, "neuralcore.citations").as_u64(),
        report["citations"].as_array().map(|c| c.len() as u64)
    );
    let correct = report["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["verdict"] == "CORRECT")
        .count() as u64;
    assert_eq!(
        attr(ask, "neuralcore.verdicts.correct").as_u64(),
        Some(correct)
    );

    // The loop's iterations under the ask, its stages under an iteration (or the ask,
    // for the stages around the loop), tools under stages, searches and embeddings
    // under tools.
    let iterations = tree.named("iteration ");
    assert_eq!(
        iterations.len() as u64,
        report["budget"]["iterations"].as_u64().unwrap(),
        "{iterations:#?}"
    );
    for it in &iterations {
        assert_eq!(tree.ancestors(it), ["ask"], "{it:#}");
    }
    let stages = tree.named("stage ");
    let stage_names: Vec<&str> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    for want in ["stage retrieve", "stage grade", "stage generate"] {
        assert!(stage_names.contains(&want), "{want} not in {stage_names:?}");
    }
    for s in &stages {
        let up = tree.ancestors(s);
        assert_eq!(up.last().map(String::as_str), Some("ask"), "{s:#}");
        assert!(up.len() <= 2, "{s:#} under {up:?}");
        assert!(attr(s, "neuralcore.stage").is_string(), "{s:#}");
    }
    let tools = tree.named("tool ");
    assert!(!tools.is_empty(), "{spans:#?}");
    for t in &tools {
        assert_eq!(t["span_kind"], "TOOL");
        let parent = tree.parent(t).unwrap();
        assert!(
            ["stage ", "sub-query ", "tool "]
                .iter()
                .any(|p| parent["name"].as_str().unwrap().starts_with(p)),
            "{t:#} under {parent:#}"
        );
        assert!(attr(t, "neuralcore.tool.status").is_string(), "{t:#}");
    }
    let searches = tree.named("search");
    assert!(!searches.is_empty(), "no search span: {spans:#?}");
    for s in &searches {
        assert_eq!(s["span_kind"], "RETRIEVER");
        assert!(
            tree.ancestors(s).iter().any(|a| a.starts_with("tool ")),
            "{s:#}"
        );
        assert!(
            attr(s, "neuralcore.search.hits").as_u64().is_some(),
            "{s:#}"
        );
    }
    let embeds = tree.named("embed");
    assert!(!embeds.is_empty(), "no embedding span: {spans:#?}");
    for e in &embeds {
        assert_eq!(e["span_kind"], "EMBEDDING");
        assert!(attr(e, "embedding.model_name").is_string(), "{e:#}");
        assert!(
            tree.ancestors(e).last().is_some_and(|a| a == "ask"),
            "{e:#}"
        );
    }
    // Children start within their parents.
    for s in &spans {
        if let Some(p) = tree.parent(s) {
            assert!(
                p["start_time"].as_str() <= s["start_time"].as_str(),
                "{s:#} before {p:#}"
            );
        }
    }
}

#[test]
fn fixture_llm_gets_the_trace_context_and_its_call_is_a_genai_span_in_phoenix() {
    use neuralcore_web::fixture::{chat_completion, FixtureServer, Reply};
    use std::sync::{Arc, Mutex};
    let Some(phoenix) = phoenix() else { return };
    // An OpenAI-compatible endpoint played by a fixture (what it needs to show is the
    // headers it was sent), answering every call with a cited sentence.
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = Arc::clone(&seen);
    let llm = FixtureServer::start(move |req| {
        if let Some(tp) = req.header("traceparent") {
            s2.lock().unwrap().push(tp.to_string());
        }
        Reply::json(chat_completion(
            "fixture-model",
            "The Moon's gravity causes the tides [1].",
            50,
            12,
        ))
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let project = project("llm");
    let data = data_dir(
        tmp.path(),
        &phoenix,
        &project,
        &format!(
            "[llm]\nbase_url = \"{}/v1\"\nmodel = \"m\"\napi_key_env = \"\"\nmax_retries = 0\n",
            llm.url()
        ),
    );
    let report = ask_tides(&data);
    let id = report["trace_id"].as_str().unwrap().to_string();
    let sent = seen.lock().unwrap().clone();
    assert!(!sent.is_empty(), "the LLM got no traceparent: {report:#}");
    let spans = trace(&phoenix, &project, &id, "ask");
    let tree = Tree::new(&spans);
    let calls = tree.named("chat m");
    assert_eq!(calls.len(), sent.len(), "{calls:#?} {sent:?}");
    for tp in &sent {
        // 00-<this trace>-<the LLM call's own span>-01
        let parts: Vec<&str> = tp.split('-').collect();
        assert_eq!(parts.len(), 4, "{tp}");
        assert_eq!(
            (parts[0], parts[1], parts[3]),
            ("00", id.as_str(), "01"),
            "{tp}"
        );
        let call = tree
            .by_id
            .get(parts[2])
            .unwrap_or_else(|| panic!("{tp}: {spans:#?}"));
        assert_eq!(call["name"], "chat m");
        assert_eq!(call["span_kind"], "LLM");
        assert_eq!(attr(call, "gen_ai.request.model"), "m", "{call:#}");
        assert_eq!(attr(call, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(call, "gen_ai.usage.input_tokens"), 50, "{call:#}");
        assert_eq!(attr(call, "gen_ai.usage.output_tokens"), 12);
        assert_eq!(attr(call, "gen_ai.response.model"), "fixture-model");
        assert_eq!(tree.ancestors(call).last().map(String::as_str), Some("ask"));
    }
}

#[test]
fn an_http_ask_with_a_traceparent_continues_the_callers_trace_and_names_it_in_a_header() {
    let Some(phoenix) = phoenix() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let project = project("http");
    let data = data_dir(tmp.path(), &phoenix, &project, "");
    let (mut server, base) = start_server(&data);
    let caller_trace = format!("{:032x}", {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            ^ (u128::from(std::process::id()) << 96)
    });
    let caller_span = "00f067aa0ba902b7";
    let ask = |traceparent: Option<String>| {
        let mut req = ureq::post(&format!("{base}/v1/ask"));
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        let mut resp = req
            .send_json(serde_json::json!({"question": "What causes the tides?"}))
            .unwrap();
        let header = resp
            .headers()
            .get("x-trace-id")
            .map(|v| v.to_str().unwrap().to_string());
        let body: Value = resp.body_mut().read_json().unwrap();
        (header, body)
    };
    let (header, report) = ask(Some(format!("00-{caller_trace}-{caller_span}-01")));
    assert_eq!(header.as_deref(), Some(caller_trace.as_str()));
    assert_eq!(report["trace_id"], caller_trace.as_str(), "{report:#}");
    // Without one, a trace of its own; with an unsampled one, nothing is exported and no
    // trace is named.
    let (fresh, fresh_report) = ask(None);
    let fresh = fresh.expect("a trace id header");
    assert_ne!(fresh, caller_trace);
    assert_eq!(fresh_report["trace_id"], fresh.as_str());
    let unsampled = "4bf92f3577b34da6a3ce929d0e0e4736";
    let (none, none_report) = ask(Some(format!("00-{unsampled}-{caller_span}-00")));
    assert_eq!(none, None);
    assert!(none_report["trace_id"].is_null(), "{none_report:#}");
    // A traceparent that is not one starts a trace of its own.
    let (bad, _) = ask(Some("00-zz-nonsense-01".into()));
    assert!(bad.is_some_and(|b| b.len() == 32));

    let spans = trace(&phoenix, &project, &caller_trace, "POST /v1/ask");
    let tree = Tree::new(&spans);
    let request = tree.named("POST /v1/ask");
    assert_eq!(request.len(), 1, "{request:#?}");
    let request = request[0];
    assert_eq!(request["parent_id"], caller_span, "{request:#}");
    assert_eq!(
        attr(request, "http.response.status_code"),
        200,
        "{request:#}"
    );
    assert_eq!(attr(request, "http.route"), "/v1/ask");
    let asks = tree.named("ask");
    assert_eq!(asks.len(), 1);
    assert_eq!(tree.ancestors(asks[0]), ["POST /v1/ask"]);
    assert!(!tree.named("iteration ").is_empty(), "{spans:#?}");
    // Phoenix got the fresh trace too, and never the unsampled one.
    trace(&phoenix, &project, &fresh, "POST /v1/ask");
    let all: Value = ureq::get(&format!("{phoenix}/v1/projects/{project}/spans?limit=1000"))
        .call()
        .unwrap()
        .body_mut()
        .read_json()
        .unwrap();
    assert!(
        !all.to_string().contains(unsampled),
        "an unsampled trace was exported"
    );
    server.kill().unwrap();
    server.wait().unwrap();
}
