//! `nc-bench memory`: memory search latency at LoCoMo size and the supersede rule under
//! adversarial pairs.
//!
//! - `--locomo FILE`: every LoCoMo turn becomes a memory (speaker, session; plus
//!   generated filler memories up to `--total`), then search latency p50/p95 over the QA
//!   questions, warm. `--backend redb` stores them in the embedded default (a redb file in
//!   a temporary folder) instead of in memory, `--backend postgres` in a fresh schema of
//!   the server at `--pg-url` (default: `NEURALCORE_TEST_PG_URL`), dropped at the end:
//!   search reads its candidates' fresh records and relations from the backend.
//! - Supersede: `--pairs N` generated pairs where the old memory is the closer match to
//!   the query and the new one SUPERSEDES it; counts how often the old one ranks above
//!   the new (target 0), and how often the new one is found at all.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use neuralcore_memory::{
    Filter, InMemoryBackend, Kind, MemScope, MemorySearchOptions, MemorySearcher, MemoryStore,
    NewMemory, RelKind, TrustConfig,
};

fn embedder(dir: &Option<PathBuf>) -> Result<Option<Arc<dyn neuralcore_core::Embedder>>, String> {
    match dir {
        Some(d) => {
            let mut e = neuralcore_models::SentenceEmbedder::load(d, "all-minilm-l6-v2")
                .map_err(|e| e.to_string())?;
            // As the embedded default holds it ([embedding] query_weights).
            e.set_query_weights(neuralcore_engine::Config::default().embedding.query_weights);
            Ok(Some(Arc::new(e)))
        }
        None => Ok(None),
    }
}

/// Nearest-rank percentile `p` (0–100); `None` (JSON null) when nothing was timed.
fn pct(v: &[f64], p: f64) -> Option<f64> {
    neuralcore_eval::percentile_nearest_rank(v, p)
}

pub fn bench_memory(args: &[String]) -> Result<(), String> {
    let mut locomo: Option<PathBuf> = None;
    let mut model: Option<PathBuf> = None;
    let mut total = 6000usize;
    let mut pairs = 1000usize;
    let mut backend = "memory".to_string();
    let mut pg_url = std::env::var("NEURALCORE_TEST_PG_URL").unwrap_or_default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--locomo" => locomo = Some(v.into()),
            "--model" => model = Some(v.into()),
            "--total" => total = v.parse().map_err(|e| format!("--total: {e}"))?,
            "--pairs" => pairs = v.parse().map_err(|e| format!("--pairs: {e}"))?,
            "--backend" => backend = v.clone(),
            "--pg-url" => pg_url = v.clone(),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let emb = embedder(&model)?;
    let now = 1_800_000_000_000u64;

    // Latency at LoCoMo size.
    if let Some(path) = &locomo {
        let set = neuralcore_eval::load_locomo(path, None).map_err(|e| e.to_string())?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let mut pg: Option<Arc<neuralcore_memory_pg::PgBackend>> = None;
        let store_backend: Arc<dyn neuralcore_memory::MemoryBackend> = match backend.as_str() {
            "memory" => Arc::new(InMemoryBackend::new()),
            "redb" => Arc::new(
                neuralcore_memory::RedbBackend::open(&dir.path().join("memory.redb"))
                    .map_err(|e| e.to_string())?,
            ),
            "postgres" => {
                if pg_url.is_empty() {
                    return Err(
                        "--backend postgres needs --pg-url (or NEURALCORE_TEST_PG_URL)".into(),
                    );
                }
                let schema = format!("nc_bench_{}", std::process::id());
                let b = Arc::new(
                    neuralcore_memory_pg::PgBackend::connect(&pg_url, &schema)
                        .map_err(|e| e.to_string())?,
                );
                pg = Some(b.clone());
                b
            }
            other => {
                return Err(format!(
                    "--backend must be memory, redb or postgres (got {other})"
                ))
            }
        };
        let store = Arc::new(
            MemoryStore::new(store_backend, TrustConfig::default()).map_err(|e| e.to_string())?,
        );
        let s = MemorySearcher::new(store, emb.clone());
        let mut news: Vec<NewMemory> = set
            .turns
            .iter()
            .map(|t| NewMemory {
                text: t.text.clone(),
                kind: Some(Kind::Episode),
                scope: MemScope {
                    project: t.conversation.clone(),
                    session: format!("{}-s{}", t.conversation, t.session),
                    ..Default::default()
                },
                occurred_at: Some(t.session_date.clone()),
                metadata: [("speaker".to_string(), serde_json::json!(t.speaker))].into(),
                ..Default::default()
            })
            .collect();
        let mut i = 0;
        while news.len() < total {
            news.push(NewMemory {
                text: format!(
                    "Filler note {i}: the build of component {} took {} minutes on runner {}.",
                    i % 97,
                    i % 13 + 2,
                    i % 7
                ),
                scope: MemScope {
                    project: format!("filler-{}", i % 5),
                    ..Default::default()
                },
                ..Default::default()
            });
            i += 1;
        }
        let t0 = Instant::now();
        s.add_many(&mut news, "bench", now)
            .map_err(|e| e.to_string())?;
        s.refresh().map_err(|e| e.to_string())?;
        let load_s = t0.elapsed().as_secs_f64();
        let qs: Vec<&neuralcore_eval::MemQuestion> = set.questions.iter().collect();
        // Warm up, then time every question (scoped to its conversation).
        for q in qs.iter().take(20) {
            let _ = s.search(&q.question, &MemorySearchOptions::default(), now);
        }
        let mut ms = Vec::new();
        let mut kw = Vec::new();
        let mut emb_ms = Vec::new();
        for q in &qs {
            let f = Filter {
                project: q.conversation.clone(),
                ..Default::default()
            };
            let t = Instant::now();
            s.search(
                &q.question,
                &MemorySearchOptions {
                    filter: f.clone(),
                    ..Default::default()
                },
                now,
            )
            .map_err(|e| e.to_string())?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            s.search(
                &q.question,
                &MemorySearchOptions {
                    filter: f,
                    alpha: 0.0,
                    ..Default::default()
                },
                now,
            )
            .map_err(|e| e.to_string())?;
            kw.push(t.elapsed().as_secs_f64() * 1e3);
            // The part no index can speed up: embedding the question.
            if let Some(e) = s.embedder() {
                let t = Instant::now();
                e.embed_query(&q.question).map_err(|e| e.to_string())?;
                emb_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        println!(
            "{}",
            serde_json::json!({
                "bench": "memory-search", "backend": backend, "memories": news.len(), "questions": qs.len(),
                "load_s": load_s, "model": model.is_some(),
                "hybrid_p50_ms": pct(&ms, 50.0), "hybrid_p95_ms": pct(&ms, 95.0),
                "bm25_only_p50_ms": pct(&kw, 50.0), "bm25_only_p95_ms": pct(&kw, 95.0),
                "embed_query_p50_ms": pct(&emb_ms, 50.0),
                "isa": neuralcore_models::isa().name(),
                "query_weights": neuralcore_engine::Config::default().embedding.query_weights,
            })
        );
        if let Some(pg) = pg {
            pg.drop_schema().map_err(|e| e.to_string())?;
        }
    }

    // Adversarial supersede pairs.
    let store = Arc::new(
        MemoryStore::new(Arc::new(InMemoryBackend::new()), TrustConfig::default())
            .map_err(|e| e.to_string())?,
    );
    let s = MemorySearcher::new(store.clone(), emb);
    let services = [
        "billing", "search", "auth", "mail", "upload", "reports", "gateway", "cache",
    ];
    let mut found_new = 0;
    let mut old_above_new = 0;
    let mut old_shown = 0;
    let mut old_above_new_included = 0;
    // Pairs where the old memory is the better match before the rule applies.
    let mut old_closer = 0;
    let mut queries = Vec::new();
    for i in 0..pairs {
        let svc = format!("{}-{i}", services[i % services.len()]);
        let project = format!("p{i}");
        let scope = MemScope {
            project: project.clone(),
            ..Default::default()
        };
        // The old memory repeats the query's words; the new one says it differently.
        let old = s
            .add(
                NewMemory {
                    text: format!("The deploy key for service {svc} is stored in vault path secret/{svc}/deploy."),
                    scope: scope.clone(),
                    ..Default::default()
                },
                "bench",
                now,
            )
            .map_err(|e| e.to_string())?;
        let new = s
            .add(
                NewMemory {
                    text: format!("Since the migration, {svc} credentials live in the new secrets manager under kms/{svc}."),
                    kind: Some(Kind::Decision),
                    scope,
                    ..Default::default()
                },
                "bench",
                now + 1,
            )
            .map_err(|e| e.to_string())?;
        store
            .link(&new.id, RelKind::Supersedes, &old.id, "bench", now + 2)
            .map_err(|e| e.to_string())?;
        queries.push((
            format!("Where is the deploy key for service {svc} stored?"),
            project,
            old.id,
            new.id,
        ));
    }
    s.refresh().map_err(|e| e.to_string())?;
    for (q, project, old, new) in &queries {
        for include in [false, true] {
            let hits = s
                .search(
                    q,
                    &MemorySearchOptions {
                        filter: Filter {
                            project: project.clone(),
                            ..Default::default()
                        },
                        include_superseded: include,
                        ..Default::default()
                    },
                    now + 10,
                )
                .map_err(|e| e.to_string())?;
            let pos = |id: &str| hits.iter().position(|h| h.memory.id == id);
            let (po, pn) = (pos(old), pos(new));
            if include {
                let rel = |id: &str| hits.iter().find(|h| h.memory.id == id).map(|h| h.relevance);
                if matches!((rel(old), rel(new)), (Some(a), Some(b)) if a > b) {
                    old_closer += 1;
                }
                if matches!((po, pn), (Some(a), Some(b)) if a < b) || (po.is_some() && pn.is_none())
                {
                    old_above_new_included += 1;
                }
            } else {
                found_new += usize::from(pn.is_some());
                old_shown += usize::from(po.is_some());
                if matches!((po, pn), (Some(a), Some(b)) if a < b) {
                    old_above_new += 1;
                }
            }
        }
    }
    println!(
        "{}",
        serde_json::json!({
            "bench": "supersede", "pairs": pairs,
            "old_ranked_above_new": old_above_new,
            "old_shown_by_default": old_shown,
            "old_above_new_with_include_superseded": old_above_new_included,
            "new_found": found_new,
            "old_was_the_closer_match": old_closer,
        })
    );
    Ok(())
}
