//! `nc-bench cache`: what the operation cache buys, measured side by side in one run.
//!
//! * **search**: each query's hybrid search cold (its cached embedding and results
//!   dropped first) and then warm (the same search again), paired; the ratio of medians.
//! * **miss**: the cost of a lookup that finds nothing, per tier set: the in-process hot
//!   tier alone, hot over the embedded cold tier (`cache.redb`), the embedded cold tier
//!   alone, Redis (`--redis URL`) and the PostgreSQL cold tier (`--pg URL`); and of a
//!   hit in each (from the hot tier where there is one).
//! * **ask**: the whole control loop through the application core with `[cache] answer`
//!   on: each question asked cold (every cached operation dropped first) and then again,
//!   paired; with `--llm URL` (an OpenAI-compatible endpoint, e.g. the test llama.cpp
//!   server) the loop writes its answer with the LLM. **ask-operations**: the same with
//!   the answer cache off, so a repeat reuses only the operations (query embeddings,
//!   searches, reranker and evaluator scores, LLM completions).
//!
//! The mixed workload (repeats and paraphrases over SciFact and SQuAD) is `nc-bench
//! cache-replay` (`replay.rs`).
//!
//! `--data-dir D --collection C --queries Q [-n N] [--asks M] [--redis URL] [--pg URL]
//! [--llm URL --llm-model NAME]`; the data dir must hold the collection, ingested.

use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_app::{App, AskOptions, Tenant};
use neuralcore_cache::{op_tag, Cache, HotTier, KeyBuilder, Op, PgTier, RedbTier, RedisTier, Tier};
use neuralcore_engine::{SearchMode, SearchOptions};
use serde_json::json;

use crate::workload::{open_app, parse_arg, Workload};

/// The `p` quantile of `v` (nearest rank), sorting it.
pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Milliseconds since `t`.
pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn forget(app: &App, ops: &[Op]) {
    for op in ops {
        app.engine().cache().delete_tag(&op_tag(*op));
    }
}

pub fn bench_cache(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let (mut asks, mut redis, mut pg, mut llm, mut llm_model) = (
        30usize,
        None::<String>,
        None::<String>,
        None::<String>,
        String::from("smollm2"),
    );
    for (a, v) in &w.rest {
        match a.as_str() {
            "--asks" => asks = parse_arg(a, v)?,
            "--redis" => redis = Some(v.clone()),
            "--pg" => pg = Some(v.clone()),
            "--llm" => llm = Some(v.clone()),
            "--llm-model" => llm_model = v.clone(),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let isa = neuralcore_models::isa().name();
    let texts = w.queries(w.n)?;
    let config = w.cache_config(llm.as_deref().map(|u| (u, llm_model.as_str())));
    let collection = w.collection.clone();
    let open = |config| open_app(&w.data_dir, config, &[&collection]);
    let app = open(config.clone())?;
    let engine = app.engine().clone();
    let opts = SearchOptions {
        mode: Some(SearchMode::Hybrid),
        rerank: None,
    };

    // Search: cold then warm, paired.
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for q in &texts {
        forget(&app, &[Op::Search, Op::QueryEmbedding]);
        let t = Instant::now();
        let a = engine
            .search_keys(&collection, q, 10, opts)
            .map_err(|e| e.to_string())?;
        cold.push(ms(t));
        let t = Instant::now();
        let b = engine
            .search_keys(&collection, q, 10, opts)
            .map_err(|e| e.to_string())?;
        warm.push(ms(t));
        if a.hits.len() != b.hits.len() {
            return Err(format!("warm hits differ for {q:?}"));
        }
    }
    let (c50, w50) = (pct(&mut cold, 0.5), pct(&mut warm, 0.5));
    println!(
        "{}",
        json!({"bench": "cache-search", "isa": isa, "n": texts.len(), "mode": "hybrid",
            "tiers": "hot(memory)+cold(redb)",
            "cold_p50_ms": c50, "warm_p50_ms": w50, "speedup_p50": c50 / w50,
            "cold_p99_ms": pct(&mut cold, 0.99), "warm_p99_ms": pct(&mut warm, 0.99)})
    );

    // Miss cost per tier set.
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut sets: Vec<(&str, Cache)> = vec![
        (
            "hot(memory)",
            Cache::new(Some(Arc::new(HotTier::new(64 << 20))), None),
        ),
        (
            "hot(memory)+cold(redb)",
            Cache::new(
                Some(Arc::new(HotTier::new(64 << 20))),
                Some(Arc::new(
                    RedbTier::open(&dir.path().join("c.redb"), 1 << 30)
                        .map_err(|e| e.to_string())?,
                ) as Arc<dyn Tier>),
            ),
        ),
    ];
    sets.push((
        "cold(redb)",
        Cache::new(
            None,
            Some(Arc::new(
                RedbTier::open(&dir.path().join("cold.redb"), 1 << 30)
                    .map_err(|e| e.to_string())?,
            ) as Arc<dyn Tier>),
        ),
    ));
    if let Some(url) = &redis {
        let prefix = format!("nc-bench-{}:", std::process::id());
        let t = RedisTier::open(url, &prefix, Default::default()).map_err(|e| e.to_string())?;
        sets.push(("hot(redis)", Cache::new(Some(Arc::new(t)), None)));
    }
    let mut pg_tier = None;
    if let Some(url) = &pg {
        let table = format!("nc_bench_cache_{}", std::process::id());
        let t = Arc::new(PgTier::open(url, &table, Default::default()).map_err(|e| e.to_string())?);
        pg_tier = Some(t.clone());
        sets.push(("cold(postgres)", Cache::new(None, Some(t))));
    }
    for (name, cache) in &sets {
        // Some entries, so the tiers are not empty.
        for i in 0..1000u64 {
            let k = KeyBuilder::new("bench", Op::Search).u64(i).finish();
            cache.put(&k, &[7u8; 512], Some(Duration::from_secs(600)), &[]);
        }
        let mut v = Vec::new();
        for i in 0..2000u64 {
            let k = KeyBuilder::new("bench", Op::Search)
                .str("absent")
                .u64(i)
                .finish();
            let t = Instant::now();
            let hit = cache.get(&k);
            v.push(t.elapsed().as_secs_f64() * 1e6);
            if hit.is_some() {
                return Err("a miss hit".into());
            }
        }
        let mut h = Vec::new();
        for i in 0..2000u64 {
            let k = KeyBuilder::new("bench", Op::Search).u64(i % 1000).finish();
            let t = Instant::now();
            let hit = cache.get(&k);
            h.push(t.elapsed().as_secs_f64() * 1e6);
            if hit.is_none() {
                return Err(format!("{name}: an entry put was not found"));
            }
        }
        println!(
            "{}",
            json!({"bench": "cache-miss", "isa": isa, "tiers": name, "n": v.len(),
                "miss_p50_us": pct(&mut v, 0.5), "miss_p99_us": pct(&mut v, 0.99),
                "hit_p50_us": pct(&mut h, 0.5), "hit_p99_us": pct(&mut h, 0.99)})
        );
        cache.clear();
    }
    if let Some(t) = pg_tier {
        t.drop_table().map_err(|e| e.to_string())?;
    }

    // Ask: cold then warm, paired; with the answer cache, then with the operation
    // caches alone (searches, scores, completions), as the seed caches.
    let tenant = Tenant::default_tenant();
    let ask_opts = AskOptions {
        collection: collection.clone(),
        ..Default::default()
    };
    let questions: Vec<&String> = texts.iter().take(asks).collect();
    let ask_pairs = |app: &App, bench: &str| -> Result<(), String> {
        let (mut cold, mut warm, mut cached, mut llm_hits, mut cut_short) =
            (Vec::new(), Vec::new(), 0usize, 0u64, 0usize);
        for (i, q) in questions.iter().enumerate() {
            forget(app, &Op::ALL);
            let t = Instant::now();
            let a = app
                .ask(&tenant, &format!("bench-c{i}"), q, &ask_opts, false)
                .map_err(|e| e.to_string())?;
            cold.push(ms(t));
            let t = Instant::now();
            let b = app
                .ask(&tenant, &format!("bench-w{i}"), q, &ask_opts, false)
                .map_err(|e| e.to_string())?;
            warm.push(ms(t));
            cached += usize::from(b.cached.is_some());
            llm_hits += b
                .iterations
                .iter()
                .flat_map(|it| &it.stages)
                .filter_map(|s| s.cache_hits.get("llm"))
                .sum::<u64>();
            // A cold ask a budget cut short may be answered better by its faster repeat;
            // any other difference is a cache bug.
            if a.answer != b.answer {
                if a.budget.skipped.is_empty() && a.failures.is_empty() {
                    return Err(format!("the warm answer differs for {q:?}"));
                }
                cut_short += 1;
            }
        }
        let (c50, w50) = (pct(&mut cold, 0.5), pct(&mut warm, 0.5));
        println!(
            "{}",
            json!({"bench": bench, "isa": isa, "n": questions.len(),
                "llm": llm.as_ref().map(|_| llm_model.clone()),
                "served_from_cache": cached, "llm_completions_from_cache": llm_hits,
                "cold_cut_short_and_answered_otherwise": cut_short,
                "cold_p50_ms": c50, "warm_p50_ms": w50, "speedup_p50": c50 / w50,
                "cold_mean_ms": cold.iter().sum::<f64>() / cold.len().max(1) as f64,
                "warm_mean_ms": warm.iter().sum::<f64>() / warm.len().max(1) as f64})
        );
        Ok(())
    };
    ask_pairs(&app, "cache-ask")?;
    app.engine().cache().clear();
    drop(engine);
    drop(app);
    let mut ops_only = config.clone();
    ops_only.cache.answer = false;
    let app = open(ops_only)?;
    ask_pairs(&app, "cache-ask-operations")?;

    Ok(())
}
