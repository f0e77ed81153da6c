//! The operation cache in the engine, on the real embedded store and the real
//! all-MiniLM-L6-v2 model: a repeated search is a hit; any committed change (an ingest,
//! a source's removal, a dropped and recreated collection) is a miss, never a stale hit
//! (checked against an engine without a cache over a randomized run of changes and
//! searches); the cold tier outlives the process; tenants never share entries.

use std::path::{Path, PathBuf};

use neuralcore_core::{cosine, TextKind};
use neuralcore_engine::{ColdTierKind, Config, Engine, HotTierKind, SearchMode};

fn config() -> Config {
    let mut c = Config::default();
    c.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    c
}

fn uncached(mut c: Config) -> Config {
    c.cache.hot = HotTierKind::Off;
    c.cache.cold = ColdTierKind::Off;
    c
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, body).unwrap();
    p
}

fn ingest(e: &Engine, paths: &[PathBuf], c: &str) {
    let s = e.ingest(paths, c, &mut ()).unwrap();
    assert_eq!(s.failed, 0, "{:?}", s.errors);
}

/// (title, chunk ordinal, score bits) of each hit.
fn hits(e: &Engine, c: &str, q: &str, mode: SearchMode) -> Vec<(String, u32, u32)> {
    e.search(c, q, 5, Some(mode))
        .unwrap()
        .hits
        .into_iter()
        .map(|h| (h.document.title, h.chunk.ordinal, h.score.to_bits()))
        .collect()
}

fn search_stats(e: &Engine) -> (u64, u64, u64, u64) {
    let s = e.cache().stats();
    let o = s.ops.iter().find(|o| o.op == "search").unwrap();
    (o.hot_hits, o.cold_hits, o.misses, o.puts)
}

#[test]
fn a_repeated_search_is_a_hit_and_every_change_is_a_miss() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let cats = write(
        &src,
        "cats.md",
        "# Cats\n\nDomestic cats purr and hunt mice at night.",
    );
    let lava = write(
        &src,
        "lava.md",
        "# Lava\n\nVolcanoes erupt molten lava and ash.",
    );
    let e = Engine::open(&tmp.path().join("data"), config()).unwrap();
    ingest(&e, &[cats.clone(), lava], "docs");

    for mode in [SearchMode::Keyword, SearchMode::Vector, SearchMode::Hybrid] {
        let first = hits(&e, "docs", "what do cats hunt", mode);
        assert_eq!(first[0].0, "Cats", "{mode:?}");
        assert_eq!(
            hits(&e, "docs", "what do cats hunt", mode),
            first,
            "{mode:?}"
        );
    }
    let (hot, cold, misses, puts) = search_stats(&e);
    assert_eq!((hot, cold, misses, puts), (3, 0, 3, 3));
    // The query was embedded once for vector and hybrid alike.
    let qe = e
        .cache()
        .stats()
        .ops
        .into_iter()
        .find(|o| o.op == "query_embedding")
        .unwrap();
    assert_eq!(qe.puts, 1, "{qe:?}");

    // An ingest changes the collection: the next search sees the new document.
    let owls = write(
        &src,
        "owls.md",
        "# Owls\n\nBarn owls hunt mice at night, better than cats.",
    );
    ingest(&e, std::slice::from_ref(&owls), "docs");
    let after = hits(&e, "docs", "owls hunting mice", SearchMode::Keyword);
    assert_eq!(after[0].0, "Owls", "{after:?}");

    // Its removal too.
    e.remove("docs", &[owls.display().to_string()]).unwrap();
    let gone = hits(&e, "docs", "owls hunting mice", SearchMode::Keyword);
    assert!(gone.iter().all(|h| h.0 != "Owls"), "{gone:?}");

    // A collection dropped and made again at once (same name, same second).
    let before = hits(&e, "docs", "lava", SearchMode::Keyword);
    assert_eq!(before[0].0, "Lava");
    e.drop_collection("docs").unwrap();
    let other = write(
        &src,
        "other/lava2.md",
        "# Basalt\n\nCooled lava becomes basalt rock.",
    );
    ingest(&e, &[other], "docs");
    let again = hits(&e, "docs", "lava", SearchMode::Keyword);
    assert_eq!(again[0].0, "Basalt", "{again:?}");
    assert_eq!(again.len(), 1, "{again:?}");
}

#[test]
fn the_cold_tier_outlives_the_process_and_tenants_never_share() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let doc = write(
        &src,
        "cats.md",
        "# Cats\n\nDomestic cats purr and hunt mice.",
    );
    let data = tmp.path().join("data");
    let first = {
        let e = Engine::open(&data, config()).unwrap();
        ingest(&e, std::slice::from_ref(&doc), "acme~docs");
        ingest(&e, std::slice::from_ref(&doc), "globex~docs");
        let a = hits(&e, "acme~docs", "cats", SearchMode::Hybrid);
        // Same content, same query, another tenant: its own miss.
        let g = hits(&e, "globex~docs", "cats", SearchMode::Hybrid);
        assert_eq!(a, g);
        assert_eq!(search_stats(&e), (0, 0, 2, 2));
        e.close().unwrap();
        a
    };
    let e = Engine::open(&data, config()).unwrap();
    assert_eq!(hits(&e, "acme~docs", "cats", SearchMode::Hybrid), first);
    assert_eq!(search_stats(&e), (0, 1, 0, 0));
    // Copied into the hot tier.
    hits(&e, "acme~docs", "cats", SearchMode::Hybrid);
    assert_eq!(search_stats(&e), (1, 1, 0, 0));
}

/// A small deterministic generator (no dependency for one test).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

#[test]
fn randomized_changes_and_searches_never_see_a_stale_result() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    // Keyword search only: this checks the cache's bookkeeping, not the model.
    let cached = Engine::open(&tmp.path().join("a"), Config::default()).unwrap();
    let plain = Engine::open(&tmp.path().join("b"), uncached(Config::default())).unwrap();
    assert!(!plain.cache().is_on());
    let words = [
        "tide", "moon", "orbit", "lava", "ash", "owl", "mouse", "river",
    ];
    let queries = ["tide moon", "lava", "owl mouse", "river orbit", "ash"];
    let mut rng = Lcg(7);
    let mut compared = 0;
    let mut version = 0;
    for step in 0..120 {
        match rng.next(4) {
            // Write (or rewrite) a file and ingest it into both.
            0 => {
                version += 1;
                let name = format!("f{}.md", rng.next(5));
                let body: Vec<&str> = (0..6).map(|_| words[rng.next(words.len())]).collect();
                let p = write(
                    &src,
                    &name,
                    &format!("# Doc {version}\n\n{}.", body.join(" ")),
                );
                ingest(&cached, std::slice::from_ref(&p), "c");
                ingest(&plain, &[p], "c");
            }
            // Remove a source, when there is one.
            1 => {
                let name = src
                    .join(format!("f{}.md", rng.next(5)))
                    .display()
                    .to_string();
                let a = cached.remove("c", std::slice::from_ref(&name)).is_ok();
                let b = plain.remove("c", &[name]).is_ok();
                assert_eq!(a, b, "step {step}");
            }
            // Drop the collection now and then.
            2 if rng.next(6) == 0 => {
                let a = cached.drop_collection("c").is_ok();
                let b = plain.drop_collection("c").is_ok();
                assert_eq!(a, b, "step {step}");
            }
            // Search both.
            _ => {
                let q = queries[rng.next(queries.len())];
                let a = cached.search("c", q, 5, Some(SearchMode::Keyword));
                let b = plain.search("c", q, 5, Some(SearchMode::Keyword));
                match (a, b) {
                    (Ok(a), Ok(b)) => {
                        let key = |r: neuralcore_engine::SearchResults| -> Vec<_> {
                            r.hits
                                .into_iter()
                                .map(|h| (h.document.title, h.chunk.text, h.score.to_bits()))
                                .collect()
                        };
                        assert_eq!(key(a), key(b), "step {step}: {q}");
                        compared += 1;
                    }
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("step {step}: {:?} vs {:?}", a.is_ok(), b.is_ok()),
                }
            }
        }
        // Repeat the searches often, so hits happen.
        if step % 3 == 0 {
            for q in queries {
                if let (Ok(a), Ok(b)) = (
                    cached.search("c", q, 5, Some(SearchMode::Keyword)),
                    plain.search("c", q, 5, Some(SearchMode::Keyword)),
                ) {
                    let ids = |r: &neuralcore_engine::SearchResults| -> Vec<_> {
                        r.hits
                            .iter()
                            .map(|h| (h.chunk.id(), h.score.to_bits()))
                            .collect()
                    };
                    assert_eq!(ids(&a), ids(&b), "step {step}: {q}");
                    compared += 1;
                }
            }
        }
    }
    let (hot, _, misses, _) = search_stats(&cached);
    assert!(compared > 100, "{compared}");
    assert!(hot > 20 && misses > 20, "hits {hot}, misses {misses}");
}

/// A scorer that counts the passages it is asked to score (word overlap; the cache in
/// front of it is what is tested, the model behind the seam does not matter).
struct CountingScorer {
    id: &'static str,
    scored: std::sync::atomic::AtomicUsize,
}

impl neuralcore_core::Reranker for CountingScorer {
    fn model_id(&self) -> &str {
        self.id
    }

    fn score(
        &self,
        query: &str,
        passages: &[&str],
    ) -> Result<Vec<f32>, neuralcore_core::ModelError> {
        self.scored
            .fetch_add(passages.len(), std::sync::atomic::Ordering::SeqCst);
        Ok(passages
            .iter()
            .map(|p| {
                let words = query.split_whitespace().filter(|w| p.contains(w)).count();
                words as f32 / (1 + query.split_whitespace().count()) as f32
            })
            .collect())
    }
}

#[test]
fn scores_are_cached_per_tenant_model_query_and_passage_in_front_of_a_counting_scorer() {
    use neuralcore_engine::CacheOp;
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let e = Engine::open(&tmp.path().join("data"), config()).unwrap();
    let scorer = CountingScorer {
        id: "counting-a",
        scored: Default::default(),
    };
    let passages = ["cats purr at night", "dogs bark", "cats hunt mice"];
    let first = e
        .scores_cached(CacheOp::Rerank, "acme", &scorer, "cats night", &passages)
        .unwrap();
    assert_eq!(scorer.scored.load(Ordering::SeqCst), 3);
    let served = neuralcore_engine::CacheServed::now();
    let again = e
        .scores_cached(CacheOp::Rerank, "acme", &scorer, "cats night", &passages)
        .unwrap();
    assert_eq!(again, first, "cached scores are the scores");
    assert_eq!(scorer.scored.load(Ordering::SeqCst), 3, "nothing rescored");
    assert_eq!(served.since().get("rerank"), Some(&3));
    // Only the new passage is scored, in order with the kept ones.
    let more = e
        .scores_cached(
            CacheOp::Rerank,
            "acme",
            &scorer,
            "cats night",
            &["dogs bark", "night owls", "cats purr at night"],
        )
        .unwrap();
    assert_eq!(scorer.scored.load(Ordering::SeqCst), 4);
    assert_eq!((more[0], more[2]), (first[1], first[0]));
    // Another tenant, query, operation or model: scored again.
    for (op, tenant, query) in [
        (CacheOp::Rerank, "globex", "cats night"),
        (CacheOp::Rerank, "acme", "cats"),
        (CacheOp::Grade, "acme", "cats night"),
    ] {
        let before = scorer.scored.load(Ordering::SeqCst);
        e.scores_cached(op, tenant, &scorer, query, &passages[..1])
            .unwrap();
        assert_eq!(
            scorer.scored.load(Ordering::SeqCst),
            before + 1,
            "{op} {tenant} {query}"
        );
    }
    let other = CountingScorer {
        id: "counting-b",
        scored: Default::default(),
    };
    e.scores_cached(CacheOp::Rerank, "acme", &other, "cats night", &passages)
        .unwrap();
    assert_eq!(other.scored.load(Ordering::SeqCst), 3);

    // Switched off: every call scores.
    let mut c = config();
    c.cache.rerank = false;
    let off = Engine::open(&tmp.path().join("off"), c).unwrap();
    for _ in 0..2 {
        off.scores_cached(CacheOp::Rerank, "acme", &other, "cats night", &passages)
            .unwrap();
    }
    assert_eq!(other.scored.load(Ordering::SeqCst), 9);
}

/// Sentences compared with a question (`refine`'s semantic score) are embedded once:
/// asked again, every vector is a hit and the same; the sentence that answers is nearer
/// the question than the one that only shares its subject; a text cached as a sentence
/// is not taken for the same text as a query, nor one tenant's for another's; and a
/// cache turned off changes no vector.
#[test]
fn sentence_vectors_are_embedded_once_and_score_meaning() {
    let tmp = tempfile::tempdir().unwrap();
    let e = Engine::open(&tmp.path().join("data"), config()).unwrap();
    let q = ["Why did the old mill bridge collapse?"];
    let texts = [
        "The old mill bridge appeared on many postcards of the town.",
        "The old mill bridge fell into the river after floodwater undermined it.",
    ];
    let qe = |e: &Engine| {
        e.cache()
            .stats()
            .ops
            .into_iter()
            .find(|o| o.op == "query_embedding")
            .map(|o| (o.hot_hits + o.cold_hits, o.misses, o.puts))
            .unwrap()
    };
    let vectors =
        |e: &Engine, texts: &[&str], kind| e.text_vectors("docs", texts, kind).unwrap().unwrap();
    let question = vectors(&e, &q, TextKind::Query);
    let first = vectors(&e, &texts, TextKind::Document);
    let sim: Vec<f32> = first.iter().map(|v| cosine(&question[0], v)).collect();
    assert!(sim[1] > sim[0], "{sim:?}");
    assert_eq!(qe(&e), (0, 3, 3));
    assert_eq!(vectors(&e, &texts, TextKind::Document), first);
    assert_eq!(vectors(&e, &q, TextKind::Query), question);
    assert_eq!(qe(&e), (3, 3, 3));
    // The first sentence asked as a query is its own entry.
    vectors(&e, &texts[..1], TextKind::Query);
    assert_eq!(qe(&e), (3, 4, 4));
    // Another tenant's collection: its own misses.
    let other = e
        .text_vectors("acme~docs", &texts, TextKind::Document)
        .unwrap()
        .unwrap();
    assert_eq!(other, first);
    assert_eq!(qe(&e), (3, 6, 6));
    assert!(e
        .text_vectors("docs", &[], TextKind::Query)
        .unwrap()
        .is_none());

    // Without a cache: the same vectors; and a query among others is embedded as search
    // embeds it alone (the model may take another path for a lone query).
    let plain = Engine::open(&tmp.path().join("plain"), uncached(config())).unwrap();
    let near = |a: &[f32], b: &[f32]| {
        let d = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        assert!(a.len() == b.len() && d < 1e-6, "differ by {d}");
    };
    for (a, b) in vectors(&plain, &texts, TextKind::Document)
        .iter()
        .zip(&first)
    {
        near(a, b);
    }
    let asked = vectors(&plain, &[q[0], texts[0]], TextKind::Query);
    near(&asked[0], &plain.query_vector(q[0]).unwrap());
    near(&asked[0], &question[0]);
}
