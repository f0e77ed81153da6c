//! `nc-bench mind [-n 100000] [--keys 1000] [--redis URL] [--redis-n 50000] [--batch 100]`:
//! the Mind blackboard (`crates/mind`).
//!
//! - In-memory: latency of one `write` followed by one `read` of the same key (a JSON
//!   object of three fields, keys cycling over `--keys` names), timed per pair over `-n`
//!   pairs after a warm-up, in the global scope and in a run scope (layered reads).
//!   Prints p50/p90/p99 in nanoseconds.
//! - Redis (`--redis URL`, a server on loopback): operations per second, pipelined:
//!   `write_batch` of `--batch` keys (one MULTI/EXEC round trip of Lua scripts) and
//!   `read_many` of the same keys (one pipeline of HMGETs), plus one-at-a-time
//!   write + read for comparison. Keys go under a fresh prefix that is deleted after.

use std::time::Instant;

use neuralcore_mind::{Mind, MindConfig, RedisConfig, Scope};
use serde_json::{json, Value};

fn num<T: std::str::FromStr>(arg: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{arg}: cannot parse {v:?} as a number"))
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn value(i: usize) -> Value {
    json!({"doc": i, "score": 0.5, "text": "a short chunk of text"})
}

fn latency(scope: &Scope, keys: &[String], n: usize) -> Result<Vec<u64>, String> {
    let e = |e: neuralcore_mind::MindError| e.to_string();
    for (i, k) in keys.iter().enumerate() {
        scope.write(k, value(i), "bench", None).map_err(e)?;
        scope.read(k).map_err(e)?;
    }
    let mut ns = Vec::with_capacity(n);
    for i in 0..n {
        let k = &keys[i % keys.len()];
        let v = value(i);
        let t = Instant::now();
        scope.write(k, v, "bench", None).map_err(e)?;
        let got = scope.read(k).map_err(e)?;
        ns.push(t.elapsed().as_nanos() as u64);
        std::hint::black_box(got);
    }
    ns.sort_unstable();
    Ok(ns)
}

fn bench_memory(n: usize, keys: &[String]) -> Result<(), String> {
    let mind = Mind::memory();
    let global = mind.global();
    mind.global()
        .write("q.text", json!("query"), "bench", None)
        .map_err(|e| e.to_string())?;
    let run = mind.run("bench-run").map_err(|e| e.to_string())?;
    for (scope, name) in [(&global, "global"), (&run, "run")] {
        let t = Instant::now();
        let ns = latency(scope, keys, n)?;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{}",
            json!({
                "bench": "mind", "backend": "memory", "scope": name, "op": "write+read",
                "pairs": n, "keys": keys.len(),
                "p50_ns": pct(&ns, 50.0), "p90_ns": pct(&ns, 90.0), "p99_ns": pct(&ns, 99.0),
                "pairs_per_s": n as f64 / secs,
            })
        );
    }
    Ok(())
}

fn bench_redis(url: &str, n: usize, batch: usize, keys: &[String]) -> Result<(), String> {
    let e = |e: neuralcore_mind::MindError| e.to_string();
    let prefix = format!("ncbench-{}", std::process::id());
    let cfg = RedisConfig {
        prefix: prefix.clone(),
        ..RedisConfig::new(url)
    };
    let mind = Mind::redis(cfg, MindConfig::default()).map_err(e)?;
    let run = mind.run("bench").map_err(e)?;
    let batch = batch.clamp(1, keys.len());
    let rounds = n.div_ceil(batch);
    let mut chunks = keys.chunks(batch).cycle();
    // Pipelined writes and reads.
    let (mut wsecs, mut rsecs, mut ops) = (0.0, 0.0, 0usize);
    for round in 0..rounds {
        let ks = chunks.next().expect("cycle");
        let items: Vec<(&str, Value)> = ks
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), value(round * batch + i)))
            .collect();
        let t = Instant::now();
        run.write_batch(&items, "bench", None).map_err(e)?;
        wsecs += t.elapsed().as_secs_f64();
        let refs: Vec<&str> = ks.iter().map(String::as_str).collect();
        let t = Instant::now();
        let got = run.read_many(&refs).map_err(e)?;
        rsecs += t.elapsed().as_secs_f64();
        if got.iter().any(Option::is_none) {
            return Err("a key written was not read back".into());
        }
        ops += ks.len();
    }
    println!(
        "{}",
        json!({
            "bench": "mind", "backend": "redis", "mode": "pipelined", "batch": batch,
            "ops": ops * 2, "write_ops_per_s": ops as f64 / wsecs,
            "read_ops_per_s": ops as f64 / rsecs,
            "ops_per_s": (2 * ops) as f64 / (wsecs + rsecs),
        })
    );
    // One operation per round trip, for comparison.
    let single = (n / 10).max(100);
    let t = Instant::now();
    let mut lat = Vec::with_capacity(single);
    for i in 0..single {
        let k = &keys[i % keys.len()];
        let t1 = Instant::now();
        run.write(k, value(i), "bench", None).map_err(e)?;
        run.read(k).map_err(e)?;
        lat.push(t1.elapsed().as_nanos() as u64);
    }
    let secs = t.elapsed().as_secs_f64();
    lat.sort_unstable();
    println!(
        "{}",
        json!({
            "bench": "mind", "backend": "redis", "mode": "single", "ops": 2 * single,
            "ops_per_s": (2 * single) as f64 / secs,
            "write+read_p50_us": pct(&lat, 50.0) as f64 / 1000.0,
        })
    );
    mind.drop_run("bench").map_err(e)?;
    Ok(())
}

pub fn bench_mind(args: &[String]) -> Result<(), String> {
    let mut n = 100_000usize;
    let mut nkeys = 1000usize;
    let mut redis = None;
    let mut redis_n = 50_000usize;
    let mut batch = 100usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "-n" => n = num(a, v)?,
            "--keys" => nkeys = num::<usize>(a, v)?.max(1),
            "--redis" => redis = Some(v.clone()),
            "--redis-n" => redis_n = num(a, v)?,
            "--batch" => batch = num(a, v)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let keys: Vec<String> = (0..nkeys).map(|i| format!("ns{}.key{i}", i % 10)).collect();
    bench_memory(n, &keys)?;
    if let Some(url) = redis {
        bench_redis(&url, redis_n, batch, &keys)?;
    }
    Ok(())
}
