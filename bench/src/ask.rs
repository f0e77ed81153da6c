//! `nc-bench ask`: latency of the whole control loop (no LLM) on a warm collection, next
//! to plain hybrid retrieval of the same questions in the same run (the loop's overhead
//! over one search). Target: p50 ≤ 30 ms on SciFact.

use std::sync::Arc;
use std::time::Instant;

use neuralcore_agents::{AgentLoader, AskOptions, Orchestrator, Registry, Services};
use neuralcore_engine::{Engine, SearchOptions};
use neuralcore_mind::Mind;

use crate::workload::{parse_arg, Workload};

pub fn bench_ask(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let mut warm = 20usize;
    for (a, v) in &w.rest {
        match a.as_str() {
            "--warm" => warm = parse_arg(a, v)?,
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
