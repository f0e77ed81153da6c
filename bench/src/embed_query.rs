//! `nc-bench embed-query`: the query path's latency. Each query is embedded alone (the
//! way a search embeds its question), one after another on a warm embedder, once per
//! instruction set asked for, so the paths are compared in one run on one machine.

use std::path::PathBuf;
use std::time::Instant;

use neuralcore_core::Embedder;
use neuralcore_models::{Isa, QueryWeights, SentenceEmbedder};
use serde_json::json;

use crate::{parse_num, read_jsonl, Query, Result};

/// The instruction sets `spec` names: `all` (every one this CPU runs), or a
/// comma-separated list. Without `--isa`: the default one (`NEURALCORE_ISA` or the
/// widest).
pub fn isas(spec: Option<&str>) -> Result<Vec<Isa>> {
    match spec {
        None => Ok(vec![neuralcore_models::isa()]),
        Some("all") => Ok(Isa::supported()),
        Some(list) => list
            .split(',')
            .map(|s| {
                let isa: Isa = s.parse()?;
                if isa > neuralcore_models::detected() {
                    return Err(format!(
                        "this CPU does not run {isa} (at most {})",
                        neuralcore_models::detected()
                    ));
                }
                Ok(isa)
            })
            .collect(),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `nc-bench embed-query --queries FILE --model-dir DIR [-n 300] [--warm 20] [--isa all|LIST]
/// [--query-weights f32,bf16,int8] [--split on,off]`
pub fn bench_embed_query(args: &[String]) -> Result<()> {
    let mut queries = None;
    let mut model_dir = None;
    let mut n = 300usize;
    let mut warm = 20usize;
    let mut isa_spec = None;
    let mut formats = vec![QueryWeights::F32];
    let mut splits = vec![true];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--queries" => queries = Some(PathBuf::from(v)),
            "--model-dir" => model_dir = Some(PathBuf::from(v)),
            "-n" => n = parse_num(a, v)?,
            "--warm" => warm = parse_num(a, v)?,
            "--isa" => isa_spec = Some(v.clone()),
            "--query-weights" => {
                formats = v.split(',').map(str::parse).collect::<Result<_>>()?;
            }
            "--split" => {
                splits = v
                    .split(',')
                    .map(|s| match s {
                        "on" => Ok(true),
                        "off" => Ok(false),
                        other => Err(format!("--split: {other:?} is not on or off")),
                    })
                    .collect::<Result<_>>()?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let queries: Vec<Query> = read_jsonl(&queries.ok_or("embed-query needs --queries")?)?;
    let texts: Vec<&str> = queries.iter().take(n).map(|q| q.text.as_str()).collect();
    let mut e = SentenceEmbedder::load(&model_dir.ok_or("embed-query needs --model-dir")?, "bench")
        .map_err(|e| e.to_string())?;
    // Word pieces per query, [CLS] and [SEP] included.
    let mut tokens: Vec<f64> = texts
        .iter()
        .map(|t| e.count_tokens(t).unwrap_or(0) as f64 + 2.0)
        .collect();
    tokens.sort_by(f64::total_cmp);
    let mut runs = Vec::new();
    for isa in isas(isa_spec.as_deref())? {
        for &f in &formats {
            for &s in &splits {
                runs.push((isa, f, s));
            }
        }
    }
    for (isa, format, split) in runs {
        e.set_isa(isa).map_err(|e| e.to_string())?;
        e.set_query_weights(format);
        e.set_query_split(split);
        for t in texts.iter().cycle().take(warm) {
            e.embed_query(t).map_err(|e| e.to_string())?;
        }
        let mut ms = Vec::with_capacity(texts.len());
        // By length: up to 16 word pieces, 17-32, longer.
        let mut by_len: [Vec<f64>; 3] = Default::default();
        for t in &texts {
            let n = e.count_tokens(t).unwrap_or(0) + 2;
            let start = Instant::now();
            e.embed_query(t).map_err(|e| e.to_string())?;
            let took = start.elapsed().as_secs_f64() * 1e3;
            ms.push(took);
            by_len[usize::from(n > 16) + usize::from(n > 32)].push(took);
        }
        let mean = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
        ms.sort_by(f64::total_cmp);
        for v in &mut by_len {
            v.sort_by(f64::total_cmp);
        }
        println!(
            "{}",
            json!({
                "bench": "embed-query", "impl": "neuralcore", "isa": isa.name(),
                "query_weights": format.name(), "split": split,
                "cpu_isa": neuralcore_models::detected().name(),
                "model": e.model_id(), "queries": texts.len(),
                "tokens_p50": percentile(&tokens, 50.0), "tokens_max": tokens.last(),
                "p50_ms": percentile(&ms, 50.0), "p90_ms": percentile(&ms, 90.0),
                "p99_ms": percentile(&ms, 99.0), "mean_ms": mean,
                "p50_ms_by_tokens": {
                    "1-16": [by_len[0].len(), percentile(&by_len[0], 50.0)],
                    "17-32": [by_len[1].len(), percentile(&by_len[1], 50.0)],
                    "33+": [by_len[2].len(), percentile(&by_len[2], 50.0)],
                },
            })
        );
    }
    Ok(())
}
