//! `nc-bench million`: a million chunk vectors in replica-local HNSW and in PostgreSQL
//! with pgvector, in one run (issue 19).
//!
//! `--data-dir DIR --queries FILE --pg URL [--collection C] [--model-dir DIR] [-n 300]
//! [--vectors 1000000] [--noise 0.02] [--mix 0.3] [--seed 19] [--ef 64,128,256]
//! [--only local|pgvector]`.
//!
//! The vectors are **sampled around real ones**: DIR's collection (as `neuralcore eval
//! beir` leaves SciFact) gives its chunks' MiniLM vectors from the embedding cache; each
//! synthetic vector is one of them moved toward another picked at random (by a weight
//! drawn from 0..`--mix`) plus Gaussian noise (`--noise` per dimension, so about
//! 0.02·√384 ≈ 0.39 of a unit vector), made unit length again. The queries are the
//! first `-n` queries of FILE embedded by the model (real query vectors). The truth is an
//! exact scan of the million for each query (the local index's exact search); recall@10
//! of both HNSW indexes is measured against it.
//!
//! Local: the graph built by the engine's `VectorIndex` (one thread, `[vector]`'s M
//! and ef_construction), its resident memory (the growth of this process's RSS while it
//! is built and held: what a replica pays), the snapshot written and read back (a
//! replica starting with its snapshot on disk), and queries at each `--ef`.
//!
//! pgvector: the engine's `PgVectors` in a new schema, filled in one rebuild transaction
//! as the engine does (rows inserted, then the HNSW index built with the
//! `maintenance_work_mem` it needs), the table's and index's size on the server, a fresh
//! replica's open and first search (its whole catch-up), and queries at each `--ef`. The
//! schema is dropped at the end.

use std::collections::HashSet;
use std::time::Instant;

use neuralcore_core::DocKey;
use neuralcore_engine::Engine;
use neuralcore_index::VectorIndex;
use neuralcore_store::{PgStore, PgVectors};
use serde_json::json;

use crate::cache::{ms, pct};
use crate::vectors::{chunk_vectors, ChunkKey, ChunkVectors};
use crate::workload::Workload;

/// One index's search: the 10 nearest chunks of a query at an ef_search.
type Searcher<'a> = dyn FnMut(&[f32], usize) -> Result<Vec<ChunkKey>, String> + 'a;

/// splitmix64: a seeded, dependency-free stream of 64-bit values.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Standard normal (Box–Muller).
    fn normal(&mut self) -> f64 {
        let u = self.unit().max(f64::MIN_POSITIVE);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// This process's resident memory in MiB.
fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// Recall@k of `found` against `truth`, summed over queries.
fn hits(found: &[(DocKey, u32)], truth: &[(DocKey, u32)]) -> usize {
    let t: HashSet<_> = truth.iter().collect();
    found.iter().filter(|h| t.contains(h)).count()
}

pub fn bench_million(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let (mut pg, mut total, mut noise, mut mix, mut seed) =
        (None::<String>, 1_000_000usize, 0.02f64, 0.3f64, 19u64);
    let mut efs: Vec<usize> = vec![64, 128, 256];
    let mut only: Option<String> = None;
    for (a, v) in &w.rest {
        let num = |v: &str| v.parse::<f64>().map_err(|e| format!("{a}: {e}"));
        match a.as_str() {
            "--pg" => pg = Some(v.clone()),
            "--vectors" => total = num(v)? as usize,
            "--noise" => noise = num(v)?,
            "--mix" => mix = num(v)?,
            "--seed" => seed = num(v)? as u64,
            "--ef" => {
                efs = v
                    .split(',')
                    .map(|x| x.parse().map_err(|e| format!("--ef {x}: {e}")))
                    .collect::<Result<_, String>>()?
            }
            "--only" if v == "local" || v == "pgvector" => only = Some(v.clone()),
            other => return Err(format!("unknown argument {other} {v}")),
        }
    }
    let run_local = only.as_deref() != Some("pgvector");
    let run_pg = only.as_deref() != Some("local");
    let pg = match (run_pg, pg) {
        (true, None) => return Err("--pg URL is required (or --only local)".into()),
        (_, pg) => pg,
    };
    let isa = neuralcore_models::isa().name();
    let err = |e: neuralcore_engine::EngineError| e.to_string();
    let engine = Engine::open(&w.data_dir, w.config.clone()).map_err(err)?;
    let ChunkVectors {
        model,
        dim,
        vectors: base,
    } = chunk_vectors(&engine, &w.collection)?;
    let texts = w.queries(w.n)?;
    let queries: Vec<Vec<f32>> = texts
        .iter()
        .map(|q| engine.query_vector(q).map_err(err))
        .collect::<Result<_, _>>()?;
    let params = w.config.vector;
    drop(engine);

    // The million, around the real vectors.
    let t = Instant::now();
    let mut rng = Rng(seed);
    let mut synth: Vec<((DocKey, u32), Vec<f32>)> = Vec::with_capacity(total);
    for i in 0..total {
        let a = &base[(rng.next() % base.len() as u64) as usize].1;
        let b = &base[(rng.next() % base.len() as u64) as usize].1;
        let t = rng.unit() * mix;
        let mut v: Vec<f32> = a
            .iter()
            .zip(b)
            .map(|(x, y)| ((1.0 - t) * *x as f64 + t * *y as f64 + noise * rng.normal()) as f32)
            .collect();
        neuralcore_index::normalize(&mut v);
        // Ten chunks a document, as a corpus of 100,000 documents would have.
        synth.push((((i / 10) as DocKey + 1, (i % 10) as u32), v));
    }
    println!(
        "{}",
        json!({"bench": "million-vectors", "isa": isa, "vectors": total, "dim": dim,
            "model": model, "base_vectors": base.len(), "noise_per_dim": noise, "mix": mix,
            "seed": seed, "queries": queries.len(), "seconds": t.elapsed().as_secs_f64()})
    );
    drop(base);

    // The truth: every vector scored against each query.
    let t = Instant::now();
    let truth: Vec<Vec<(DocKey, u32)>> = queries
        .iter()
        .map(|q| {
            let mut top: Vec<(f32, (DocKey, u32))> = Vec::with_capacity(11);
            for (key, v) in &synth {
                let s = neuralcore_core::dot(q, v);
                if top.len() < 10 || s > top[top.len() - 1].0 {
                    let at = top.partition_point(|(x, _)| *x >= s);
                    top.insert(at, (s, *key));
                    top.truncate(10);
                }
            }
            top.into_iter().map(|(_, k)| k).collect()
        })
        .collect();
    println!(
        "{}",
        json!({"bench": "million-exact", "isa": isa, "vectors": total, "queries": queries.len(),
            "what": "the truth for recall: every vector scored against each query",
            "seconds": t.elapsed().as_secs_f64()})
    );
    let sweep = |name: &str, search: &mut Searcher<'_>| -> Result<(), String> {
        for &ef in &efs {
            let (mut lat, mut found) = (Vec::new(), 0usize);
            for (q, tr) in queries.iter().zip(&truth) {
                let t = Instant::now();
                let r = search(q, ef)?;
                lat.push(ms(t));
                found += hits(&r, tr);
            }
            println!(
                "{}",
                json!({"bench": "million-search", "isa": isa, "index": name, "vectors": total,
                    "queries": queries.len(), "k": 10, "ef_search": ef,
                    "recall_at_10": found as f64 / (10 * queries.len()) as f64,
                    "p50_ms": pct(&mut lat, 0.5), "p99_ms": pct(&mut lat, 0.99)})
            );
        }
        Ok(())
    };

    if run_local {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let snapshot = tmp.path().join("million.vectors");
        let rss0 = rss_mb();
        let idx = VectorIndex::open(&snapshot, &model, dim, params);
        let t = Instant::now();
        idx.apply_unsaved(&[], &synth, 1)
            .map_err(|e| e.to_string())?;
        let build_s = t.elapsed().as_secs_f64();
        let rss1 = rss_mb();
        let heap = idx.heap_bytes();
        sweep("local", &mut |q, ef| {
            idx.set_ef_search(ef);
            Ok(idx
                .search(q, 10, false)
                .iter()
                .map(|h| (h.doc, h.ordinal))
                .collect())
        })?;
        let t = Instant::now();
        idx.save().map_err(|e| e.to_string())?;
        let save_s = t.elapsed().as_secs_f64();
        let bytes = std::fs::metadata(&snapshot).map_or(0, |m| m.len());
        drop(idx);
        let rss2 = rss_mb();
        let t = Instant::now();
        let fresh = VectorIndex::open(&snapshot, &model, dim, params);
        let first = fresh.search(&queries[0], 10, false);
        let load_s = t.elapsed().as_secs_f64();
        if fresh.stats().live != total || first.is_empty() {
            return Err(format!(
                "the snapshot read back holds {} vectors, not {total}",
                fresh.stats().live
            ));
        }
        println!(
            "{}",
            json!({"bench": "million-local", "isa": isa, "vectors": total,
                "m": params.m, "ef_construction": params.ef_construction, "threads": 1,
                "build_s": build_s, "graph_heap_mb": heap as f64 / (1 << 20) as f64,
                "rss_growth_while_built_mb": rss1 - rss0,
                "snapshot_mb": bytes as f64 / (1 << 20) as f64, "snapshot_write_s": save_s,
                "fresh_replica_from_snapshot_s": load_s,
                "rss_growth_fresh_replica_mb": rss_mb() - rss2,
                "what": "build: one thread from vectors in memory; a replica without a snapshot also reads the vectors from the store's embedding cache first"})
        );
    }

    if let (true, Some(pg)) = (run_pg, pg) {
        let schema = format!("ncbench_million_{}", std::process::id());
        let store = PgStore::connect(&pg, &schema).map_err(|e| e.to_string())?;
        let result = (|| -> Result<(), String> {
            let se = |e: neuralcore_core::StoreError| e.to_string();
            let open = |ef: usize| {
                let mut p = params;
                p.ef_search = ef;
                PgVectors::open(&pg, &schema, 2, "million", &model, dim, p)
                    .map(|v| v.with_build_memory_mb(w.config.index.pgvector_build_memory_mb))
            };
            let v = open(params.ef_search).map_err(se)?;
            let (mut insert_s, mut index_s) = (0.0, 0.0);
            let t = Instant::now();
            v.update(true, |tx| {
                tx.clear()?;
                tx.insert(&synth)?;
                insert_s = t.elapsed().as_secs_f64();
                let t = Instant::now();
                tx.finish_rebuild()?;
                index_s = t.elapsed().as_secs_f64();
                tx.set_generation(1);
                Ok::<_, neuralcore_core::StoreError>(())
            })
            .map_err(se)?;
            let commit_s = t.elapsed().as_secs_f64();
            drop(synth);
            let sizes = v.disk_bytes().map_err(se)?;
            let rss0 = rss_mb();
            let t = Instant::now();
            let fresh = open(params.ef_search).map_err(se)?;
            let first = fresh.search(&queries[0], 10, false).map_err(se)?;
            let catch_up_s = t.elapsed().as_secs_f64();
            if first.len() != 10 || fresh.generation().map_err(se)? != 1 {
                return Err("the fresh replica's pgvector search found too little".into());
            }
            println!(
                "{}",
                json!({"bench": "million-pgvector", "isa": isa, "vectors": total,
                    "m": params.m, "ef_construction": params.ef_construction,
                    "insert_s": insert_s, "index_build_s": index_s, "rebuild_total_s": commit_s,
                    "table_mb": sizes.0 as f64 / (1 << 20) as f64,
                    "index_mb": sizes.1 as f64 / (1 << 20) as f64,
                    "maintenance_work_mem_cap_mb": w.config.index.pgvector_build_memory_mb,
                    "fresh_replica_open_and_first_search_s": catch_up_s,
                    "what": "the server's build (its parallel maintenance workers on the same cores); a replica keeps no graph"})
            );
            let mut by_ef = std::collections::HashMap::new();
            sweep("pgvector", &mut |q, ef| {
                let v = match by_ef.entry(ef) {
                    std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                    std::collections::hash_map::Entry::Vacant(e) => e.insert(open(ef).map_err(se)?),
                };
                Ok(v.search(q, 10, false)
                    .map_err(se)?
                    .iter()
                    .map(|h| (h.doc, h.ordinal))
                    .collect())
            })?;
            println!(
                "{}",
                json!({"bench": "million-pgvector-client", "isa": isa,
                    "rss_replica_mb": rss_mb() - rss0,
                    "what": "this process's growth over the pgvector replicas' pools and every search"})
            );
            Ok(())
        })();
        let _ = store.drop_schema();
        result?;
    }
    Ok(())
}
