//! `nc-bench ask`: latency of the whole control loop (no LLM) on a warm collection, next
//! to plain hybrid retrieval of the same questions in the same run (the loop's overhead
//! over one search). Target: p50 ≤ 30 ms on SciFact.
//!
//! With `--trace-endpoint URL` (an OTLP/HTTP traces endpoint, e.g. Phoenix's
//! `http://127.0.0.1:6016/v1/traces`) it measures what OpenTelemetry costs instead: each
//! question is asked once with every span recorded and exported (sampling 1.0) and once
//! without, in alternating order, every cache cleared before each (`--trace-endpoint sink`:
//! a receiver in this process that discards what it gets). Target: the traced
//! p50 within 5% of the untraced one.

use std::sync::Arc;
use std::time::Instant;

use neuralcore_agents::{AgentLoader, AskOptions, Orchestrator, Registry, Services};
use neuralcore_engine::{Engine, SearchOptions};
use neuralcore_mind::Mind;

use crate::workload::{parse_arg, Workload};

pub fn bench_ask(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let mut warm = 20usize;
    let mut trace_endpoint: Option<String> = None;
    for (a, v) in &w.rest {
        match a.as_str() {
            "--warm" => warm = parse_arg(a, v)?,
            "--trace-endpoint" => trace_endpoint = Some(v.clone()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let (n, collection) = (w.n, w.collection.clone());
    let texts = w.queries(n + warm)?;
    if texts.len() <= warm {
        return Err("not enough queries".into());
    }
    let engine = Arc::new(Engine::open(&w.data_dir, w.config).map_err(|e| e.to_string())?);
    let registry = Registry::discover()?;
    let o = Orchestrator {
        loader: Arc::new(AgentLoader::new(Vec::new(), registry.clone())),
        registry,
        mind: Mind::memory(),
        services: Services::new(engine.clone()),
    };
    let opts = AskOptions {
        collection: collection.clone(),
        ..Default::default()
    };
    engine
        .keyword_index(&collection)
        .map_err(|e| e.to_string())?;
    engine
        .vector_index(&collection)
        .map_err(|e| e.to_string())?;
    if let Some(endpoint) = trace_endpoint {
        return tracing_overhead(&o, &opts, &texts, warm, &endpoint);
    }
    let mut loop_ms = Vec::new();
    let mut search_ms = Vec::new();
    let (mut answered, mut iterations) = (0usize, 0u32);
    for (i, q) in texts.iter().enumerate() {
        // Alternate which goes first, and clear cached query vectors before each, so
        // both pay for embedding the question.
        engine.clear_query_cache();
        let t = Instant::now();
        engine
            .search_keys(&collection, q, 10, SearchOptions::default())
            .map_err(|e| e.to_string())?;
        let s = t.elapsed().as_secs_f64() * 1e3;
        engine.clear_query_cache();
        let t = Instant::now();
        let r = o
            .ask(&format!("bench-{i}"), q, &opts)
            .map_err(|e| e.to_string())?;
        let l = t.elapsed().as_secs_f64() * 1e3;
        o.mind
            .drop_run(&format!("bench-{i}"))
            .map_err(|e| e.to_string())?;
        if i >= warm {
            search_ms.push(s);
            loop_ms.push(l);
            answered += usize::from(!r.abstained);
            iterations += r.budget.iterations;
        }
    }
    let pct =
        |v: &[f64], p: f64| neuralcore_eval::percentile_nearest_rank(v, p).unwrap_or(f64::NAN);
    let m = loop_ms.len();
    let (lp50, lp95) = (pct(&loop_ms, 50.0), pct(&loop_ms, 95.0));
    let (sp50, sp95) = (pct(&search_ms, 50.0), pct(&search_ms, 95.0));
    println!(
        "{}",
        serde_json::json!({
            "questions": m, "warm_up": warm, "collection": collection,
            "ask_p50_ms": lp50, "ask_p95_ms": lp95,
            "hybrid_search_p50_ms": sp50, "hybrid_search_p95_ms": sp95,
            "ask_over_search_p50": lp50 / sp50,
            "answered": answered, "mean_iterations": iterations as f64 / m as f64,
            "isa": neuralcore_models::isa().name(),
        })
    );
    Ok(())
}

/// The loop's latency with every span exported against none, on the same questions.
fn tracing_overhead(
    o: &Orchestrator,
    opts: &AskOptions,
    texts: &[String],
    warm: usize,
    endpoint: &str,
) -> Result<(), String> {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // As the CLI installs it: the layer is always there, recording only when on.
    tracing_subscriber::registry()
        .with(neuralcore_telemetry::layer())
        .init();
    // `sink`: a receiver in this process that reads each export and answers 200, so the
    // figure is neuralcore's own cost, not a receiver's sharing the machine's cores.
    let endpoint = if endpoint == "sink" {
        sink()?
    } else {
        endpoint.to_string()
    };
    let cfg = neuralcore_telemetry::TelemetryConfig {
        enabled: true,
        endpoint: endpoint.clone(),
        project: format!("nc-bench-{}", std::process::id()),
        sampling: 1.0,
        ..Default::default()
    };
    let guard = neuralcore_telemetry::start(&cfg)?.ok_or("telemetry did not start")?;
    let engine = &o.services.engine;
    let ask = |i: usize, q: &str, traced: bool| -> Result<f64, String> {
        neuralcore_telemetry::set_recording(traced);
        engine.cache().clear();
        let run = format!("bench-{i}-{traced}");
        let t = Instant::now();
        {
            // The root App::ask makes in the server and the CLI.
            let _root = tracing::info_span!(target: "neuralcore_app", "ask").entered();
            o.ask(&run, q, opts).map_err(|e| e.to_string())?;
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        o.mind.drop_run(&run).map_err(|e| e.to_string())?;
        Ok(ms)
    };
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for (i, q) in texts.iter().enumerate() {
        let (a, b) = if i % 2 == 0 {
            let a = ask(i, q, true)?;
            (a, ask(i, q, false)?)
        } else {
            let b = ask(i, q, false)?;
            (ask(i, q, true)?, b)
        };
        if i >= warm {
            on.push(a);
            off.push(b);
        }
    }
    neuralcore_telemetry::set_recording(true);
    let flushed = guard.flush(std::time::Duration::from_secs(30));
    let pct =
        |v: &[f64], p: f64| neuralcore_eval::percentile_nearest_rank(v, p).unwrap_or(f64::NAN);
    let (on50, off50) = (pct(&on, 50.0), pct(&off, 50.0));
    // Each question against itself: the median of the traced/untraced ratios.
    let ratios: Vec<f64> = on.iter().zip(&off).map(|(a, b)| a / b).collect();
    let paired = pct(&ratios, 50.0) - 1.0;
    println!(
        "{}",
        serde_json::json!({
            "bench": "ask-tracing-overhead", "questions": on.len(), "warm_up": warm,
            "collection": opts.collection, "sampling": 1.0,
            "traced_p50_ms": on50, "traced_p95_ms": pct(&on, 95.0),
            "untraced_p50_ms": off50, "untraced_p95_ms": pct(&off, 95.0),
            "overhead_p50": on50 / off50 - 1.0,
            "overhead_paired_median": paired,
            "endpoint": endpoint,
            "spans_dropped": guard.dropped(), "flushed": flushed,
            "isa": neuralcore_models::isa().name(),
        })
    );
    Ok(())
}

/// A minimal OTLP/HTTP receiver on a loopback port: reads each request's head and body,
/// answers `200`, keeps nothing. Its traces URL.
fn sink() -> Result<String, String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let port = l.local_addr().map_err(|e| e.to_string())?.port();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn);
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let t = line.trim_end();
                        if t.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = t.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                len = v.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0u8; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = r
                        .get_mut()
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                }
            });
        }
    });
    Ok(format!("http://127.0.0.1:{port}/v1/traces"))
}
