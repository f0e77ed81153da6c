//! `nc-bench replica`: search through a replica whose documents live in PostgreSQL,
//! against the embedded default, in one run.
//!
//! `--data-dir DIR --queries FILE --corpus FILE --pg URL [--collection C]
//! [--model-dir DIR] [-n 300]`: DIR holds the collection ingested from `--corpus` (as
//! `neuralcore eval beir` leaves it). The corpus is ingested again by a writer engine
//! into a new schema at `--pg` (timed), then a fresh replica (its own empty data dir)
//! builds its indexes from PostgreSQL on its first search (timed: the catch-up of a new
//! replica). Then each query runs on the embedded engine and on the replica in turn,
//! hybrid, k = 10, each with the query caches cleared first (so each embeds the query):
//! `search_keys` (ranking only) and `search` (with every hit's chunk and document read
//! from the store); p50/p99 of each and the ratios. Last, the writer
//! ingests one small file at a time and the replica's next search, which catches up
//! from the journal, is timed and must find it. The schema is dropped at the end.
//!
//! The writer keeps the collection's vectors in pgvector too (`[index] vector =
//! "pgvector"`), so a second replica searches them there: its search is timed beside
//! the others, and for both vector indexes the vector search alone (recall@10 of the
//! HNSW search against an exact scan of the same index, p50 of each).

use std::path::PathBuf;
use std::time::Instant;

use neuralcore_engine::{
    Engine, IngestObserver, SearchMode, SearchOptions, StoreBackendKind, VectorBackendKind,
};
use serde_json::json;

use crate::cache::{ms, pct};
use crate::workload::Workload;

struct Quiet;
impl IngestObserver for Quiet {}

pub fn bench_replica(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let (mut pg, mut corpus) = (None::<String>, None::<PathBuf>);
    for (a, v) in &w.rest {
        match a.as_str() {
            "--pg" => pg = Some(v.clone()),
            "--corpus" => corpus = Some(v.into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let pg = pg.ok_or("--pg URL is required")?;
    let corpus = corpus.ok_or("--corpus FILE is required (the collection's corpus.jsonl)")?;
    let isa = neuralcore_models::isa().name();
    let texts = w.queries(w.n)?;
    let c = w.collection.clone();
    let err = |e: neuralcore_engine::EngineError| e.to_string();

    let embedded = Engine::open(&w.data_dir, w.config.clone()).map_err(err)?;
    embedded.collection(&c).map_err(err)?;
    let schema = format!("ncbench_replica_{}", std::process::id());
    let mut pg_config = w.config.clone();
    pg_config.store.backend = StoreBackendKind::Postgres;
    pg_config.store.postgres_url = pg.clone();
    pg_config.store.postgres_schema = schema.clone();
    let mut pgv_config = pg_config.clone();
    pgv_config.index.vector = VectorBackendKind::Pgvector;
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let result = (|| {
        let writer = Engine::open(&tmp.path().join("writer"), pgv_config.clone()).map_err(err)?;
        let t = Instant::now();
        let s = writer
            .ingest(std::slice::from_ref(&corpus), &c, &mut Quiet)
            .map_err(err)?;
        let ingest_s = t.elapsed().as_secs_f64();
        let info = writer.collection(&c).map_err(err)?;
        let local = embedded.collection(&c).map_err(err)?;
        if (info.documents, info.chunks) != (local.documents, local.chunks) {
            return Err(format!(
                "the PostgreSQL copy holds {} documents / {} chunks, the data dir {} / {}",
                info.documents, info.chunks, local.documents, local.chunks
            ));
        }
        println!(
            "{}",
            json!({"bench": "replica-ingest", "isa": isa, "documents": info.documents,
                "chunks": info.chunks, "new_chunks": s.chunks, "seconds": ingest_s})
        );

        let replica = Engine::open(&tmp.path().join("replica"), pg_config.clone()).map_err(err)?;
        let opts = SearchOptions {
            mode: Some(SearchMode::Hybrid),
            rerank: None,
        };
        let t = Instant::now();
        replica.search_keys(&c, &texts[0], 10, opts).map_err(err)?;
        println!(
            "{}",
            json!({"bench": "replica-first-search", "isa": isa, "chunks": info.chunks,
                "what": "a new replica builds its keyword and vector indexes from PostgreSQL (vectors from the store's cache)",
                "seconds": t.elapsed().as_secs_f64()})
        );
        // Warm both (query embeddings are cached per data dir: the same work on each).
        embedded.search_keys(&c, &texts[0], 10, opts).map_err(err)?;
        let pgv = Engine::open(&tmp.path().join("pgvector"), pgv_config.clone()).map_err(err)?;
        pgv.search_keys(&c, &texts[0], 10, opts).map_err(err)?;

        let (mut ek, mut rk, mut ef, mut rf) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut vk, mut vf) = (Vec::new(), Vec::new());
        let mut same = 0usize;
        // Every timed search is a first one: the query vector and search caches are
        // cleared before it, so each embeds the query and searches the indexes.
        let timed = |e: &Engine, full: bool, q: &str| -> Result<(f64, Vec<(u64, u32)>), String> {
            e.clear_query_cache();
            let t = Instant::now();
            let keys = if full {
                e.search(&c, q, 10, opts)
                    .map_err(err)?
                    .hits
                    .iter()
                    .map(|h| (h.chunk.doc, h.chunk.ordinal))
                    .collect()
            } else {
                e.search_keys(&c, q, 10, opts)
                    .map_err(err)?
                    .hits
                    .iter()
                    .map(|h| (h.doc, h.ordinal))
                    .collect()
            };
            Ok((ms(t), keys))
        };
        for q in &texts {
            let (t, a) = timed(&embedded, false, q)?;
            ek.push(t);
            let (t, b) = timed(&replica, false, q)?;
            rk.push(t);
            same += usize::from(a == b);
            ef.push(timed(&embedded, true, q)?.0);
            rf.push(timed(&replica, true, q)?.0);
            vk.push(timed(&pgv, false, q)?.0);
            vf.push(timed(&pgv, true, q)?.0);
        }
        let (ek50, rk50, ef50, rf50) = (
            pct(&mut ek, 0.5),
            pct(&mut rk, 0.5),
            pct(&mut ef, 0.5),
            pct(&mut rf, 0.5),
        );
        println!(
            "{}",
            json!({"bench": "replica-search", "isa": isa, "n": texts.len(), "mode": "hybrid", "k": 10,
                "same_ranking": same,
                "keys_embedded_p50_ms": ek50, "keys_replica_p50_ms": rk50, "keys_ratio_p50": rk50 / ek50,
                "keys_embedded_p99_ms": pct(&mut ek, 0.99), "keys_replica_p99_ms": pct(&mut rk, 0.99),
                "full_embedded_p50_ms": ef50, "full_replica_p50_ms": rf50, "full_ratio_p50": rf50 / ef50,
                "full_embedded_p99_ms": pct(&mut ef, 0.99), "full_replica_p99_ms": pct(&mut rf, 0.99)})
        );
        let (vk50, vf50) = (pct(&mut vk, 0.5), pct(&mut vf, 0.5));
        println!(
            "{}",
            json!({"bench": "replica-search-pgvector", "isa": isa, "n": texts.len(), "mode": "hybrid", "k": 10,
                "keys_pgvector_p50_ms": vk50, "keys_ratio_p50": vk50 / ek50,
                "keys_pgvector_p99_ms": pct(&mut vk, 0.99),
                "full_pgvector_p50_ms": vf50, "full_ratio_p50": vf50 / ef50,
                "full_pgvector_p99_ms": pct(&mut vf, 0.99)})
        );
        // The vector indexes alone: HNSW against an exact scan of the same vectors.
        for (name, e) in [("local", &replica), ("pgvector", &pgv)] {
            let idx = e
                .vector_index(&c)
                .map_err(err)?
                .ok_or("no embedding model")?;
            let (mut hnsw, mut exact, mut found) = (Vec::new(), Vec::new(), 0usize);
            for q in &texts {
                let v = e.query_vector(q).map_err(err)?;
                let t = Instant::now();
                let a = idx.search(&v, 10, false).map_err(err)?;
                hnsw.push(ms(t));
                let t = Instant::now();
                let b = idx.search(&v, 10, true).map_err(err)?;
                exact.push(ms(t));
                let truth: std::collections::HashSet<_> =
                    b.iter().map(|h| (h.doc, h.ordinal)).collect();
                found += a
                    .iter()
                    .filter(|h| truth.contains(&(h.doc, h.ordinal)))
                    .count();
            }
            println!(
                "{}",
                json!({"bench": "replica-vector-index", "isa": isa, "index": name, "n": texts.len(),
                    "vectors": idx.stats().map_err(err)?.live,
                    "recall_at_10": found as f64 / (10 * texts.len()) as f64,
                    "hnsw_p50_ms": pct(&mut hnsw, 0.5), "hnsw_p99_ms": pct(&mut hnsw, 0.99),
                    "exact_p50_ms": pct(&mut exact, 0.5)})
            );
        }

        // A batch through the writer, then the replica's next search.
        let docs = tmp.path().join("new");
        std::fs::create_dir_all(&docs).map_err(|e| e.to_string())?;
        let mut follow = Vec::new();
        for i in 0..10 {
            let word = format!("zqxnote{i}");
            let p = docs.join(format!("{word}.md"));
            std::fs::write(&p, format!("# Note {i}\n\nA fresh finding about {word}."))
                .map_err(|e| e.to_string())?;
            writer.ingest(&[p], &c, &mut Quiet).map_err(err)?;
            let t = Instant::now();
            let r = replica
                .search_keys(&c, &word, 1, SearchOptions::from(Some(SearchMode::Keyword)))
                .map_err(err)?;
            follow.push(ms(t));
            if r.hits.is_empty() {
                return Err(format!("the replica did not find {word} after the batch"));
            }
        }
        println!(
            "{}",
            json!({"bench": "replica-follow", "isa": isa, "batches": follow.len(),
                "what": "keyword search on the replica right after a one-file batch through another engine (includes replaying the journal)",
                "p50_ms": pct(&mut follow, 0.5), "max_ms": pct(&mut follow, 1.0)})
        );
        Ok(())
    })();
    if let Ok(s) = neuralcore_store::PgStore::connect(&pg, &schema) {
        let _ = s.drop_schema();
    }
    result
}
