//! `nc-bench vectors`: build time, recall@k against exact search, and query latency of
//! the HNSW vector index on the real chunk vectors of a collection (read from the data
//! dir's embedding cache) and real query embeddings.

use std::path::PathBuf;
use std::time::Instant;

use neuralcore_core::{embedding_key, DocKey, TextKind};
use neuralcore_engine::{embed_text, Config, Engine};
use neuralcore_index::{HnswParams, VectorIndex};
use serde_json::json;

use crate::{median, parse_num, read_jsonl, Query, Result};

pub fn bench_vectors(args: &[String]) -> Result<()> {
    let mut data_dir = None;
    let mut model_dir = None;
    let mut collection = "default".to_string();
    let mut queries = None;
    let mut params = HnswParams {
        exact_below: 0,
        ..HnswParams::default()
    };
    let mut efs: Vec<usize> = vec![16, 32, 48, 64, 96, 128, 200];
    let mut k = 10usize;
    let mut dump: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--data-dir" => data_dir = Some(PathBuf::from(v)),
            "--model-dir" => model_dir = Some(v.clone()),
            "--collection" => collection = v.clone(),
            "--queries" => queries = Some(PathBuf::from(v)),
            "--m" => params.m = parse_num(a, v)?,
            "--ef-construction" => params.ef_construction = parse_num(a, v)?,
            "--ef" => {
                efs = v
                    .split(',')
                    .map(|x| parse_num(a, x))
                    .collect::<Result<Vec<usize>>>()?
            }
            "--k" => k = parse_num(a, v)?,
            "--dump" => dump = Some(PathBuf::from(v)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let data_dir = data_dir.ok_or("vectors needs --data-dir")?;
    let queries: Vec<Query> = read_jsonl(&queries.ok_or("vectors needs --queries")?)?;
    let mut cfg = Config::default();
    if let Some(m) = model_dir {
        cfg.embedding.model_dir = m;
    }
    let engine = Engine::open(&data_dir, cfg).map_err(|e| e.to_string())?;
    let embedder = engine.embedder_status()?;
    let added = chunk_vectors(&engine, &collection)?.vectors;
    let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
    let qv = embedder
        .embed(&texts, TextKind::Query)
        .map_err(|e| e.to_string())?;
    if let Some(prefix) = dump {
        // Raw little-endian f32 rows, for comparing other HNSW libraries on the same data.
        let write = |name: &str, rows: &mut dyn Iterator<Item = &Vec<f32>>| -> Result<()> {
            let bytes: Vec<u8> = rows
                .flat_map(|v| v.iter().flat_map(|x| x.to_le_bytes()))
                .collect();
            let p = format!("{}.{name}.f32", prefix.display());
            std::fs::write(&p, bytes).map_err(|e| format!("{p}: {e}"))
        };
        write("base", &mut added.iter().map(|(_, v)| v))?;
        write("queries", &mut qv.iter())?;
        eprintln!(
            "wrote {} base and {} query vectors of {} dimensions",
            added.len(),
            qv.len(),
            embedder.dimension()
        );
    }
    let idx = VectorIndex::in_memory(embedder.model_id(), embedder.dimension(), params);
    let t = Instant::now();
    idx.apply(&[], &added, 1).map_err(|e| e.to_string())?;
    let build_s = t.elapsed().as_secs_f64();
    let mut exact_ms = Vec::new();
    let exact: Vec<Vec<(DocKey, u32)>> = qv
        .iter()
        .map(|q| {
            let t = Instant::now();
            let r = idx.search(q, k, true);
            exact_ms.push(t.elapsed().as_secs_f64() * 1e3);
            r.iter().map(|h| (h.doc, h.ordinal)).collect()
        })
        .collect();
    for ef in efs {
        idx.set_ef_search(ef);
        let mut ms = Vec::new();
        let mut hit = 0usize;
        let mut total = 0usize;
        for (q, ex) in qv.iter().zip(&exact) {
            let t = Instant::now();
            let r = idx.search(q, k, false);
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            hit += r
                .iter()
                .filter(|h| ex.contains(&(h.doc, h.ordinal)))
                .count();
            total += ex.len();
        }
        println!(
            "{}",
            json!({
                "bench": "vectors", "vectors": added.len(), "dim": embedder.dimension(),
                "queries": qv.len(), "k": k, "m": params.m,
                "ef_construction": params.ef_construction, "ef_search": ef,
                "build_s": build_s, "recall": hit as f64 / total.max(1) as f64,
                "p50_ms": median(&ms), "exact_p50_ms": median(&exact_ms),
            })
        );
    }
    Ok(())
}

/// A chunk: its document and ordinal.
pub(crate) type ChunkKey = (DocKey, u32);

/// A collection's chunk vectors and the model that made them.
pub(crate) struct ChunkVectors {
    pub model: String,
    pub dim: usize,
    pub vectors: Vec<(ChunkKey, Vec<f32>)>,
}

/// Every chunk vector of `collection`, read from the data dir's embedding cache (the
/// collection must have been ingested with the model).
pub(crate) fn chunk_vectors(engine: &Engine, collection: &str) -> Result<ChunkVectors> {
    let embedder = engine.embedder_status()?;
    let store = engine.store();
    let mut keys: Vec<(DocKey, u32)> = Vec::new();
    let mut ekeys = Vec::new();
    for d in store.document_keys(collection).map_err(|e| e.to_string())? {
        let doc = store
            .document(collection, d)
            .map_err(|e| e.to_string())?
            .ok_or("document vanished")?;
        for c in store.chunks(d).map_err(|e| e.to_string())? {
            keys.push((c.doc, c.ordinal));
            ekeys.push(embedding_key(
                embedder.model_id(),
                &embed_text(&doc.title, &c.text),
            ));
        }
    }
    let cached = store.embeddings(&ekeys).map_err(|e| e.to_string())?;
    let mut added = Vec::with_capacity(keys.len());
    for (key, v) in keys.iter().zip(cached) {
        added.push((
            *key,
            v.ok_or("a chunk has no cached vector: ingest with the model first")?,
        ));
    }
    Ok(ChunkVectors {
        model: embedder.model_id().to_string(),
        dim: embedder.dimension(),
        vectors: added,
    })
}
