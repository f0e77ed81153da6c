//! `nc-bench agents-reload`: how long after an agent file changes its new version is
//! live in a loader that watches its folder (target: 500 ms).

use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_agents::{AgentLoader, Registry};
use serde_json::json;

pub fn bench_reload(args: &[String]) -> Result<(), String> {
    let mut n = 20usize;
    let mut every_ms = 100u64;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "-n" => n = v.parse().map_err(|e| format!("-n: {e}"))?,
            "--every-ms" => every_ms = v.parse().map_err(|e| format!("--every-ms: {e}"))?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let dir = std::env::temp_dir().join(format!("nc-bench-agents-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("k.md");
    let text = |k: usize| {
        format!("---\nname: k\nrole: retrieve\ntools: [keyword_search]\nparameters:\n  keyword_search:\n    k: {k}\n---\n")
    };
    std::fs::write(&file, text(1)).map_err(|e| e.to_string())?;
    let loader = Arc::new(AgentLoader::new(vec![dir.clone()], Registry::discover()?));
    loader.watch(Duration::from_millis(every_ms));
    let mut ms = Vec::with_capacity(n);
    for i in 0..n {
        let k = i + 2;
        // Edits land at random points of the polling cycle.
        std::thread::sleep(Duration::from_millis(37 * (i as u64 % 5)));
        let t = Instant::now();
        std::fs::write(&file, text(k)).map_err(|e| e.to_string())?;
        loop {
            let live = loader
                .agents()
                .first()
                .map(|a| a.def().parameters["keyword_search"]["k"] == json!(k))
                .unwrap_or(false);
            if live {
                break;
            }
            if t.elapsed() > Duration::from_secs(10) {
                return Err("an edit was not picked up within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let pct = |p: f64| neuralcore_eval::percentile_nearest_rank(&ms, p);
    println!(
        "{}",
        json!({"bench": "agents-reload", "edits": n, "poll_ms": every_ms,
               "p50_ms": pct(50.0), "max_ms": pct(100.0), "target_ms": 500})
    );
    Ok(())
}
