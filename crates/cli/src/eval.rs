//! `neuralcore eval beir`.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use neuralcore_engine::{Engine, SearchMode, SearchOptions};
use neuralcore_eval::{side_by_side, BeirDataset, QueryMetrics, Summary};

/// Documents to rank per query (Recall@100 needs 100).
const DEPTH_DOCS: usize = 100;

/// What `eval beir` was asked to do.
pub struct BeirArgs<'a> {
    pub dir: &'a Path,
    pub split: &'a str,
    pub collection: Option<String>,
    pub per_query: Option<&'a Path>,
    pub modes: &'a [SearchMode],
    pub reranks: &'a [usize],
}

pub fn beir(json: bool, quiet: bool, engine: &Engine, args: BeirArgs<'_>) -> Result<()> {
    let BeirArgs {
        dir,
        split,
        collection,
        per_query,
        modes,
        reranks,
    } = args;
    let ds = BeirDataset::open(dir, split)?;
    for w in &ds.warnings {
        if !quiet {
            eprintln!("warning: {w}");
        }
    }
    let collection = collection.unwrap_or_else(|| crate::beir_collection(dir));
    let mut progress = crate::output::Progress::new(json || quiet);
    let t0 = Instant::now();
    let summary = engine.ingest(
        std::slice::from_ref(&ds.corpus_path),
        &collection,
        &mut progress,
    )?;
    progress.finish();
    if summary.failed > 0 {
        anyhow::bail!(
            "cannot ingest {}: {}",
            ds.corpus_path.display(),
            summary
                .errors
                .first()
                .map(|e| e.message.as_str())
                .unwrap_or("failed")
        );
    }
    let ingest_ms = t0.elapsed().as_millis() as u64;
    let reused = summary.skipped == 1;
    // Document key → BEIR ids (identical texts under two ids are stored once).
    let ids = crate::qa::external_ids(engine, &collection)?;
    engine.keyword_index(&collection)?; // open and sync before timing
    let want_vectors = modes.iter().any(|m| *m != SearchMode::Keyword);
    if want_vectors {
        match engine.embedder_status() {
            Ok(_) => {
                let t = Instant::now();
                engine.vector_index(&collection)?;
                if !quiet && t.elapsed().as_secs_f64() > 1.0 {
                    eprintln!("vector index ready in {:.1} s", t.elapsed().as_secs_f64());
                }
            }
            Err(why) => anyhow::bail!("cannot evaluate vector or hybrid search: {why}"),
        }
    }
    let mut out = match per_query {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        )),
        None => None,
    };
    if reranks.iter().any(|&n| n > 0) {
        if let Err(why) = engine.reranker_status() {
            anyhow::bail!("cannot evaluate reranking: {why}");
        }
    }
    let runs: Vec<(SearchMode, usize)> = modes
        .iter()
        .flat_map(|&m| reranks.iter().map(move |&r| (m, r)))
        .collect();
    let mut rows: Vec<(String, Summary)> = Vec::new();
    for (mode, rerank) in runs {
        let opts = SearchOptions {
            mode: Some(mode),
            rerank: Some(rerank),
        };
        let label = if rerank > 0 {
            format!("{mode}+rerank{rerank}")
        } else {
            mode.to_string()
        };
        // Each configuration embeds its queries itself: latencies include that.
        engine.clear_query_cache();
        let mut metrics = Vec::with_capacity(ds.queries.len());
        let mut latencies = Vec::with_capacity(ds.queries.len());
        for q in &ds.queries {
            let start = Instant::now();
            let mut depth = DEPTH_DOCS;
            let ranked = loop {
                let hits = engine.search_keys(&collection, &q.text, depth, opts)?.hits;
                let mut ranked: Vec<String> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                for h in &hits {
                    if seen.insert(h.doc) {
                        if let Some(ext) = ids.get(&h.doc) {
                            ranked.extend(ext.iter().cloned());
                        }
                    }
                }
                if ranked.len() >= DEPTH_DOCS || hits.len() < depth {
                    ranked.truncate(DEPTH_DOCS);
                    break ranked;
                }
                depth *= 3;
            };
            let ms = start.elapsed().as_secs_f64() * 1000.0;
            let qrels = ds.qrels_for(&q.id).cloned().unwrap_or_default();
            let m = QueryMetrics::compute(&ranked, &qrels);
            if let Some(f) = out.as_mut() {
                let line = serde_json::json!({
                    "mode": label, "query_id": q.id, "metrics": m, "latency_ms": ms,
                    "top10": ranked.iter().take(10).collect::<Vec<_>>(),
                    "relevant": qrels,
                });
                writeln!(f, "{line}")?;
            }
            metrics.push(m);
            latencies.push(ms);
        }
        rows.push((label, Summary::from(&metrics, &latencies)));
    }
    if let Some(mut f) = out {
        f.flush()?;
    }
    let cfg = engine.config();
    if json {
        let v = serde_json::json!({
            "dataset": dir.display().to_string(),
            "split": split,
            "collection": collection,
            "corpus_reused": reused,
            "ingest_ms": ingest_ms,
            "config": {
                "rerank": cfg.rerank,
                "keyword": cfg.keyword, "analyzer": cfg.analyzer, "search": cfg.search,
                "embedding_model": if want_vectors { engine.embedder().map(|e| e.model_id().to_string()) } else { None },
                "embedding_query_weights": cfg.embedding.query_weights,
                "isa": neuralcore_models::isa().name(),
                "vector": cfg.vector,
                "chunk_tokens": cfg.ingest.chunk_tokens, "chunk_overlap": cfg.ingest.chunk_overlap,
            },
            "runs": rows.iter().map(|(l, s)| serde_json::json!({"mode": l, "summary": s})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if !quiet {
            let how = if reused {
                "corpus unchanged, index reused".to_string()
            } else {
                match &summary {
                    s if s.ingested > 0 => format!(
                        "corpus ingested: {} documents in {:.2} s",
                        s.documents,
                        ingest_ms as f64 / 1000.0
                    ),
                    _ => "corpus ready".into(),
                }
            };
            let n = rows.first().map(|r| r.1.queries).unwrap_or(0);
            println!(
                "{} ({split}): {n} queries; {how}; encoder on {} (query weights {})",
                dir.display(),
                neuralcore_models::isa(),
                cfg.embedding.query_weights
            );
        }
        print!("{}", side_by_side(&rows));
    }
    Ok(())
}
