//! The answer cache (`[cache] answer = true`) over a real embedded data dir and the real
//! embedding model: a repeated question is served from the cache, marked so with its
//! age; a change to the cited document, its removal or the collection's drop makes the
//! next ask fresh; a change elsewhere keeps the entry; tenants never share answers;
//! asks that recall memories are never cached; and a randomized run of changes and asks
//! never serves an answer different from what an app without a cache answers.

use std::path::{Path, PathBuf};

use neuralcore_app::{App, AskOptions, OpenOptions, Tenant};
use neuralcore_engine::{ColdTierKind, Config, HotTierKind};

mod support;
use support::{free_port, start_redis};

/// The default config with the test model.
fn config() -> Config {
    let mut config = Config::default();
    config.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    config
}

fn open_with(dir: &Path, config: Config) -> App {
    App::open(
        dir,
        config,
        OpenOptions {
            mind: Some(neuralcore_mind::Mind::memory()),
            ..Default::default()
        },
    )
    .unwrap()
}

fn open(dir: &Path, answer_cache: bool) -> App {
    let mut config = config();
    config.cache.answer = answer_cache;
    if !answer_cache {
        config.cache.hot = HotTierKind::Off;
        config.cache.cold = ColdTierKind::Off;
    }
    open_with(dir, config)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn opts(collection: &str) -> AskOptions {
    AskOptions {
        collection: collection.into(),
        ..Default::default()
    }
}

const TIDES: &str =
    "# Tides\n\nTides are caused by the gravitational pull of the Moon on the oceans.\n";
const TIDES2: &str =
    "# Tides\n\nTides are caused by the gravitational pull of the Sun and the Moon together.\n";

#[test]
fn a_repeated_question_is_served_from_the_cache_until_its_evidence_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let app = open(&tmp.path().join("data"), true);
    let t = Tenant::default_tenant();
    let src = tmp.path().join("src");
    let tides = write(&src, "tides.md", TIDES);
    write(
        &src,
        "ocean.md",
        "# Ocean\n\nThe Moon's gravity raises the tides of the oceans twice a day.\n",
    );
    let other = write(
        &tmp.path().join("other"),
        "rust.md",
        "# Rust\n\nThe borrow checker enforces ownership rules.\n",
    );
    app.ingest(&t, std::slice::from_ref(&src), "docs", &mut ())
        .unwrap();
    app.ingest(&t, std::slice::from_ref(&other), "code", &mut ())
        .unwrap();
    let q = "What causes the tides?";

    let first = app.ask(&t, "r1", q, &opts("docs"), false).unwrap();
    assert!(!first.abstained, "{}", first.answer);
    assert!(first.cached.is_none());
    let again = app.ask(&t, "r2", q, &opts("docs"), false).unwrap();
    let c = again.cached.clone().expect("served from the cache");
    assert_eq!(c.run_id, "r1");
    assert_eq!(again.run_id, "r2");
    assert_eq!(
        (&again.answer, &again.citations),
        (&first.answer, &first.citations)
    );

    // A change to another collection keeps the entry.
    write(
        &tmp.path().join("other"),
        "rust.md",
        "# Rust\n\nLifetimes name how long references live.\n",
    );
    app.ingest(&t, &[other], "code", &mut ()).unwrap();
    assert!(app
        .ask(&t, "r3", q, &opts("docs"), false)
        .unwrap()
        .cached
        .is_some());

    // Different options are another entry.
    let mut no_verify = opts("docs");
    no_verify.switches.no_verify = true;
    assert!(app
        .ask(&t, "r4", q, &no_verify, false)
        .unwrap()
        .cached
        .is_none());

    // The cited document changes: a fresh answer from the new text.
    std::fs::write(&tides, TIDES2).unwrap();
    app.ingest(&t, std::slice::from_ref(&src), "docs", &mut ())
        .unwrap();
    let fresh = app.ask(&t, "r5", q, &opts("docs"), false).unwrap();
    assert!(fresh.cached.is_none());
    assert!(app
        .ask(&t, "r6", q, &opts("docs"), false)
        .unwrap()
        .cached
        .is_some());

    // Its source removed: no cached answer.
    let id = app
        .sources(&t, "docs")
        .unwrap()
        .into_iter()
        .find(|s| s.id.ends_with("tides.md"))
        .unwrap()
        .id;
    app.remove_source(&t, "docs", &id).unwrap();
    let after = app.ask(&t, "r7", q, &opts("docs"), false).unwrap();
    assert!(after.cached.is_none());
    assert!(
        after
            .citations
            .iter()
            .all(|c| !c.source.as_deref().unwrap_or("").ends_with("tides.md")),
        "{:?}",
        after.citations
    );

    // Dropped and made again: nothing cached survives.
    app.drop_collection(&t, "docs").unwrap();
    app.ingest(&t, &[src], "docs", &mut ()).unwrap();
    assert!(app
        .ask(&t, "r8", q, &opts("docs"), false)
        .unwrap()
        .cached
        .is_none());

    // Asks that recall memories are never cached.
    assert!(app
        .ask(&t, "r9", q, &opts("docs"), true)
        .unwrap()
        .cached
        .is_none());
    assert!(app
        .ask(&t, "r10", q, &opts("docs"), true)
        .unwrap()
        .cached
        .is_none());

    let stats = app.engine().cache().stats();
    let answers = stats.ops.iter().find(|o| o.op == "answer").unwrap();
    assert!(answers.hot_hits >= 3, "{answers:?}");
}

/// Tenants `acme` and `globex`, each with the same tides document in its `docs`.
fn two_tenants_with_tides(app: &App, tmp: &Path) -> (Tenant, Tenant) {
    let src = tmp.join("src");
    write(&src, "tides.md", TIDES);
    let acme = Tenant::new("acme").unwrap();
    let globex = Tenant::new("globex").unwrap();
    app.ingest(&acme, std::slice::from_ref(&src), "docs", &mut ())
        .unwrap();
    app.ingest(&globex, &[src], "docs", &mut ()).unwrap();
    (acme, globex)
}

#[test]
fn tenants_never_share_a_cached_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let app = open(&tmp.path().join("data"), true);
    let (acme, globex) = two_tenants_with_tides(&app, tmp.path());
    let q = "What causes the tides?";
    assert!(app
        .ask(&acme, "a1", q, &opts("docs"), false)
        .unwrap()
        .cached
        .is_none());
    assert!(app
        .ask(&acme, "a2", q, &opts("docs"), false)
        .unwrap()
        .cached
        .is_some());
    // The same question over the same text, asked by another tenant: its own run.
    let g = app.ask(&globex, "g1", q, &opts("docs"), false).unwrap();
    assert!(g.cached.is_none());
    assert_eq!(g.run_id, "g1");
}

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
fn randomized_changes_and_asks_never_serve_a_stale_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let cached = open(&tmp.path().join("a"), true);
    let plain = open(&tmp.path().join("b"), false);
    let t = Tenant::default_tenant();
    let src = tmp.path().join("src");
    let facts = [
        "Tides are caused by the gravitational pull of the Moon.",
        "Tides are caused by winds blowing over the sea.",
        "Lava is molten rock that erupts from volcanoes.",
        "Lava cools into basalt on the ocean floor.",
        "Barn owls hunt mice at night.",
        "Barn owls hunt beetles at dawn.",
    ];
    let questions = [
        "What causes the tides?",
        "What is lava?",
        "What do barn owls hunt?",
    ];
    let mut rng = Lcg(11);
    let (mut asked, mut hits) = (0, 0);
    // Start with something in the collection.
    let p = write(&src, "f0.md", &format!("# Doc\n\n{}\n", facts[0]));
    cached
        .ingest(&t, std::slice::from_ref(&p), "c", &mut ())
        .unwrap();
    plain.ingest(&t, &[p], "c", &mut ()).unwrap();
    for step in 0..45 {
        match rng.next(5) {
            0 | 1 => {
                let name = format!("f{}.md", rng.next(4));
                let text = format!(
                    "# Doc {step}\n\n{} {}\n",
                    facts[rng.next(6)],
                    facts[rng.next(6)]
                );
                let p = write(&src, &name, &text);
                cached
                    .ingest(&t, std::slice::from_ref(&p), "c", &mut ())
                    .unwrap();
                plain.ingest(&t, &[p], "c", &mut ()).unwrap();
            }
            2 => {
                let ids: Vec<String> = cached
                    .sources(&t, "c")
                    .unwrap()
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
                if ids.len() > 1 {
                    let id = &ids[rng.next(ids.len())];
                    cached.remove_source(&t, "c", id).unwrap();
                    plain.remove_source(&t, "c", id).unwrap();
                }
            }
            _ => {
                for _ in 0..2 {
                    let q = questions[rng.next(questions.len())];
                    let a = cached
                        .ask(&t, &format!("a{step}"), q, &opts("c"), false)
                        .unwrap();
                    let b = plain
                        .ask(&t, &format!("b{step}"), q, &opts("c"), false)
                        .unwrap();
                    assert_eq!(
                        (&a.answer, &a.citations, a.abstained),
                        (&b.answer, &b.citations, b.abstained),
                        "step {step}: {q} (cached: {:?})",
                        a.cached
                    );
                    asked += 1;
                    hits += usize::from(a.cached.is_some());
                }
            }
        }
    }
    assert!(asked >= 20, "{asked}");
    assert!(
        hits >= 5,
        "{hits} of {asked} asks were served from the cache"
    );
}

/// Hits served from the operation cache over the whole run, by operation.
fn served(r: &neuralcore_app::AskReport) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for s in r.iterations.iter().flat_map(|i| &i.stages) {
        for (op, n) in &s.cache_hits {
            *out.entry(op.clone()).or_insert(0) += n;
        }
    }
    out
}

/// With the real llama.cpp server (`NEURALCORE_TEST_LLM_URL`, started by
/// `scripts/test.sh`) and the answer cache off: a repeated ask gets its searches and its
/// LLM completions from the operation cache, says so in its stages' traces and spends
/// no tokens; another tenant asking the same gets none of it.
#[test]
fn repeated_asks_reuse_searches_and_completions_per_tenant_and_the_trace_says_so() {
    let Ok(url) = std::env::var("NEURALCORE_TEST_LLM_URL") else {
        eprintln!("skipped: NEURALCORE_TEST_LLM_URL is not set (see scripts/llm-server.sh)");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut config = config();
    config.llm.base_url = url;
    config.llm.model =
        std::env::var("NEURALCORE_TEST_LLM_MODEL").unwrap_or_else(|_| "smollm2".into());
    config.llm.timeout_ms = 120_000;
    config.llm.max_tokens = 64;
    // A loaded test server can be slow: no deadline cuts these LLM calls short.
    config.control.deadline_ms = 120_000;
    config.cache.cold = ColdTierKind::Off;
    let app = open_with(&tmp.path().join("data"), config);
    let (acme, globex) = two_tenants_with_tides(&app, tmp.path());
    let q = "What causes the tides?";

    let first = app.ask(&acme, "a1", q, &opts("docs"), false).unwrap();
    assert!(first.cost.tokens > 0, "the LLM was asked: {first:#?}");
    let first_served = served(&first);
    let again = app.ask(&acme, "a2", q, &opts("docs"), false).unwrap();
    assert!(again.cached.is_none(), "the answer cache is off");
    let again_served = served(&again);
    assert_eq!(again.answer, first.answer);
    assert_eq!(again.cost.tokens, 0, "every completion came from the cache");
    assert!(
        again_served.get("llm").copied().unwrap_or(0)
            > first_served.get("llm").copied().unwrap_or(0),
        "{first_served:?} then {again_served:?}"
    );
    assert!(
        again_served.get("search").copied().unwrap_or(0) > 0,
        "{again_served:?}"
    );
    let retrieve = again.iterations[0]
        .stages
        .iter()
        .find(|s| s.stage == "retrieve")
        .unwrap();
    assert!(retrieve.cache_hits.contains_key("search"), "{retrieve:?}");

    // The same question over the same text, by another tenant: its own LLM calls.
    let other = app.ask(&globex, "g1", q, &opts("docs"), false).unwrap();
    assert_eq!(other.cost.tokens, first.cost.tokens, "{other:#?}");
    assert_eq!(
        served(&other).get("llm").copied().unwrap_or(0),
        first_served.get("llm").copied().unwrap_or(0)
    );
}

/// A private `redis-server` on a free port, and an app whose only tier is it (hot, no
/// cold tier) with the answer cache on.
fn app_on_private_redis(tmp: &Path) -> (std::process::Child, u16, App) {
    let port = free_port();
    let redis = start_redis(port, tmp);
    let mut config = config();
    config.cache.answer = true;
    config.cache.hot = HotTierKind::Redis;
    config.cache.redis_url = format!("redis://127.0.0.1:{port}/");
    config.cache.cold = ColdTierKind::Off;
    (redis, port, open_with(&tmp.join("data"), config))
}

/// With the hot tier on Redis and no cold tier: Redis stopped in the middle of a run of
/// asks costs nothing but the cache (every ask answers, within a bounded time, counted
/// as tier errors and bypasses); once it is back, the cache is used again by itself.
#[test]
fn redis_stopped_during_asks_is_bypassed_and_used_again_once_back() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut redis, port, app) = app_on_private_redis(tmp.path());
    let t = Tenant::default_tenant();
    let src = tmp.path().join("src");
    write(&src, "tides.md", TIDES);
    app.ingest(&t, &[src], "docs", &mut ()).unwrap();
    let q = "What causes the tides?";
    let first = app.ask(&t, "r1", q, &opts("docs"), false).unwrap();
    let hit = app.ask(&t, "r2", q, &opts("docs"), false).unwrap();
    assert_eq!(hit.cached.as_ref().map(|c| c.tier.as_str()), Some("redis"));

    redis.kill().unwrap();
    redis.wait().unwrap();
    for i in 0..3 {
        let started = std::time::Instant::now();
        let r = app
            .ask(&t, &format!("down{i}"), q, &opts("docs"), false)
            .unwrap();
        assert!(r.cached.is_none());
        assert_eq!(r.answer, first.answer);
        // The first failing call waits at most for the tier's timeouts; the next ones
        // skip the resting tier.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    let tiers = app.engine().cache().stats().tiers;
    let hot = tiers.iter().find(|t| t.role == "hot").unwrap();
    assert!(hot.errors >= 1 && hot.bypassed >= 1, "{hot:?}");

    let mut redis = start_redis(port, tmp.path());
    std::thread::sleep(neuralcore_cache::RETRY_AFTER + std::time::Duration::from_millis(200));
    let fresh = app.ask(&t, "back1", q, &opts("docs"), false).unwrap();
    assert!(fresh.cached.is_none(), "the new Redis is empty");
    let again = app.ask(&t, "back2", q, &opts("docs"), false).unwrap();
    assert_eq!(
        again.cached.as_ref().map(|c| c.tier.as_str()),
        Some("redis")
    );
    redis.kill().unwrap();
    let _ = redis.wait();
}

/// `FLUSHALL` sent to the Redis at `port`.
fn flush_redis(port: u16) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"*1\r\n$8\r\nFLUSHALL\r\n").unwrap();
    let mut reply = [0u8; 5];
    c.read_exact(&mut reply).unwrap();
    assert_eq!(&reply, b"+OK\r\n");
}

/// With the hot tier on Redis: Redis flushed again and again while three threads ask
/// costs nothing but hits — every ask answers, and answers as a cold ask does (no entry
/// is ever read half gone: a flushed entry is a miss); once the flushing stops, repeats
/// are hits again.
#[test]
fn redis_flushed_under_load_costs_only_hits() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut redis, port, app) = app_on_private_redis(tmp.path());
    let t = Tenant::default_tenant();
    let src = tmp.path().join("src");
    write(&src, "tides.md", TIDES);
    write(
        &src,
        "lava.md",
        "# Lava\n\nLava is molten rock that erupts from volcanoes.\n",
    );
    write(
        &src,
        "owls.md",
        "# Owls\n\nBarn owls hunt mice at night over open fields.\n",
    );
    app.ingest(&t, &[src], "docs", &mut ()).unwrap();
    let questions = [
        "What causes the tides?",
        "What is lava?",
        "What do barn owls hunt?",
    ];
    let expected: Vec<String> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            app.ask(&t, &format!("e{i}"), q, &opts("docs"), false)
                .unwrap()
                .answer
        })
        .collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    let flushes = std::sync::atomic::AtomicUsize::new(0);
    let hits = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                flush_redis(port);
                flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(15));
            }
        });
        let askers: Vec<_> = (0..3)
            .map(|w| {
                let (app, t, questions, expected, hits) = (&app, &t, &questions, &expected, &hits);
                s.spawn(move || {
                    for i in 0..12 {
                        let k = (w + i) % questions.len();
                        let r = app
                            .ask(t, &format!("w{w}-{i}"), questions[k], &opts("docs"), false)
                            .unwrap();
                        assert_eq!(r.answer, expected[k], "{}", questions[k]);
                        if r.cached.is_some() {
                            hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        for a in askers {
            a.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert!(
        flushes.into_inner() >= 3,
        "Redis was flushed during the asks"
    );
    let hot = app.engine().cache().stats().tiers;
    let hot = hot.iter().find(|t| t.role == "hot").unwrap();
    assert_eq!(hot.errors, 0, "a flush is not an error: {hot:?}");
    eprintln!(
        "{} of 36 asks hit while Redis was flushed",
        hits.into_inner()
    );
    // Flushing over: a repeat is a hit again.
    app.ask(&t, "after1", questions[0], &opts("docs"), false)
        .unwrap();
    let again = app
        .ask(&t, "after2", questions[0], &opts("docs"), false)
        .unwrap();
    assert_eq!(
        again.cached.as_ref().map(|c| c.tier.as_str()),
        Some("redis")
    );
    assert_eq!(again.answer, expected[0]);
    redis.kill().unwrap();
    let _ = redis.wait();
}

/// Rewordings in case, punctuation, articles and contractions share an answer by
/// default; with `[cache] answer_paraphrase` set, another wording whose embedding is
/// close enough and whose question word, numbers and negation agree is served the
/// earlier answer, marked with the question it answered; a question with another
/// question word is not; a change to the collection ends both.
#[test]
fn rewordings_and_paraphrases_are_served_the_earlier_answer_and_a_different_question_is_not() {
    let tmp = tempfile::tempdir().unwrap();
    let app = open(&tmp.path().join("data"), true);
    let t = Tenant::default_tenant();
    let src = tmp.path().join("src");
    write(&src, "tides.md", TIDES);
    app.ingest(&t, std::slice::from_ref(&src), "docs", &mut ())
        .unwrap();
    let q = "What causes the tides?";
    let first = app.ask(&t, "p1", q, &opts("docs"), false).unwrap();
    assert!(first.cached.is_none());
    let reworded = app
        .ask(&t, "p2", "  what causes tides", &opts("docs"), false)
        .unwrap();
    let c = reworded
        .cached
        .clone()
        .expect("a rewording shares the answer");
    assert_eq!(c.paraphrase_of.as_deref(), Some(q));
    assert_eq!(c.similarity, None);
    assert_eq!(reworded.question, "  what causes tides");
    assert_eq!(reworded.answer, first.answer);
    // Embedding matching is off by default.
    let para = "What is the cause of tides?";
    assert!(app
        .ask(&t, "p3", para, &opts("docs"), false)
        .unwrap()
        .cached
        .is_none());
    // On, at a threshold just below this pair's similarity (unit vectors: the cosine is
    // their dot product).
    let cos = |a: &str, b: &str| {
        let e = app.engine();
        neuralcore_core::dot(&e.query_vector(a).unwrap(), &e.query_vector(b).unwrap())
    };
    let sim = cos(q, "What is the cause of the tides?");
    drop(app);
    let mut config = config();
    config.cache.answer = true;
    config.cache.answer_paraphrase = sim - 0.001;
    let app = open_with(&tmp.path().join("data2"), config);
    app.ingest(&t, std::slice::from_ref(&src), "docs", &mut ())
        .unwrap();
    let first = app.ask(&t, "e1", q, &opts("docs"), false).unwrap();
    let para = app
        .ask(
            &t,
            "e2",
            "What is the cause of the tides?",
            &opts("docs"),
            false,
        )
        .unwrap();
    let c = para.cached.clone().expect("served for the paraphrase");
    assert_eq!(c.paraphrase_of.as_deref(), Some(q));
    assert!(c.similarity.unwrap() >= sim - 0.001);
    assert_eq!(para.answer, first.answer);
    // Another question word: asked afresh (the guard's cases: the unit tests).
    assert!(app
        .ask(&t, "e3", "When do the tides happen?", &opts("docs"), false)
        .unwrap()
        .cached
        .is_none());
    // A change to the document: neither wording is served.
    std::fs::write(src.join("tides.md"), TIDES2).unwrap();
    app.ingest(&t, std::slice::from_ref(&src), "docs", &mut ())
        .unwrap();
    assert!(app
        .ask(
            &t,
            "e4",
            "What is the cause of the tides?",
            &opts("docs"),
            false
        )
        .unwrap()
        .cached
        .is_none());
}

/// The tenant's memories matching `q` as (text, trust), sorted: what a stale cached
/// search would get wrong (a memory missing or forgotten, a trust from before a signal).
fn memory_search(app: &App, t: &Tenant, q: &str) -> Vec<(String, String)> {
    let req: neuralcore_app::MemorySearch =
        serde_json::from_value(serde_json::json!({"query": q, "k": 50})).unwrap();
    let mut v: Vec<(String, String)> = app
        .memory_search(t, &req)
        .unwrap()
        .into_iter()
        .map(|h| (h.memory.text, format!("{}", h.memory.trust)))
        .collect();
    v.sort();
    v
}

fn memory_add(app: &App, t: &Tenant, text: &str) -> String {
    let req: neuralcore_app::MemoryAdd =
        serde_json::from_value(serde_json::json!({ "text": text })).unwrap();
    app.memory_add(t, req).unwrap().memory.id
}

/// Reads of memory searches the cache answered.
fn memory_hits(app: &App) -> u64 {
    let stats = app.engine().cache().stats();
    let s = stats.ops.iter().find(|o| o.op == "memory_search").unwrap();
    s.hot_hits + s.cold_hits
}

/// A config without trust decay, so two apps' trusts compare exactly.
fn no_decay(cache: bool) -> Config {
    let mut c = config();
    c.memory.half_life_days = 0.0;
    if !cache {
        c.cache.hot = HotTierKind::Off;
        c.cache.cold = ColdTierKind::Off;
    }
    c
}

#[test]
fn memory_searches_are_cached_until_any_memory_write_and_never_across_tenants() {
    let tmp = tempfile::tempdir().unwrap();
    let app = open_with(&tmp.path().join("data"), no_decay(true));
    let acme = Tenant::new("acme").unwrap();
    let globex = Tenant::new("globex").unwrap();
    let q = "when does the deploy run";
    let fridays = memory_add(&app, &acme, "The deploy runs on Fridays.");
    let first = memory_search(&app, &acme, q);
    assert_eq!(first.len(), 1, "{first:?}");
    let h = memory_hits(&app);
    assert_eq!(memory_search(&app, &acme, q), first);
    assert_eq!(memory_hits(&app), h + 1, "a repeated search is a hit");

    // Another tenant's same search is its own (and sees none of acme's memories).
    assert!(memory_search(&app, &globex, q).is_empty());
    assert_eq!(memory_hits(&app), h + 1);
    memory_add(&app, &globex, "The deploy runs on Sundays.");
    let g = memory_search(&app, &globex, q);
    assert_eq!(g.len(), 1);
    assert!(g[0].0.contains("Sundays"), "{g:?}");
    // Globex's write moved the store's version: acme's next search is fresh, and right.
    let h = memory_hits(&app);
    assert_eq!(memory_search(&app, &acme, q), first);
    assert_eq!(memory_hits(&app), h);

    // A signal changes the trust a search shows.
    app.memory_signal(&acme, &fridays, neuralcore_memory::Signal::Confirmed, None)
        .unwrap();
    let after = memory_search(&app, &acme, q);
    assert_ne!(after, first, "the trust before the signal was served");
    assert_eq!(memory_hits(&app), h);
    // A signal about a question is acme's feedback, never globex's.
    app.memory_signal(&acme, &fridays, neuralcore_memory::Signal::Used, Some(q))
        .unwrap();
    let fb = app.feedback(&acme).unwrap();
    assert_eq!(fb.pairs.len(), 1, "{fb:?}");
    assert_eq!((fb.pairs[0].question.as_str(), fb.pairs[0].label), (q, 1.0));
    assert!(app.feedback(&globex).unwrap().pairs.is_empty());

    // A new memory appears; a forgotten one goes.
    memory_add(&app, &acme, "The deploy runs on Mondays since March.");
    assert_eq!(memory_search(&app, &acme, q).len(), 2);
    app.memory_forget(&acme, &fridays).unwrap();
    let left = memory_search(&app, &acme, q);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].0.contains("Mondays"));
    assert_eq!(memory_hits(&app), h, "no write was followed by a hit");
}

/// Interleaved memory writes (adds, signals, forgets, restores), memory searches and
/// asks that recall memories, on an app with the cache and one without: every search
/// and every answer agrees, so no write was ever followed by a stale hit.
#[test]
fn randomized_memory_writes_and_searches_never_serve_a_stale_result() {
    let tmp = tempfile::tempdir().unwrap();
    let cached = open_with(&tmp.path().join("a"), no_decay(true));
    let plain = open_with(&tmp.path().join("b"), no_decay(false));
    let t = Tenant::default_tenant();
    let src = write(&tmp.path().join("src"), "tides.md", TIDES);
    cached
        .ingest(&t, std::slice::from_ref(&src), "c", &mut ())
        .unwrap();
    plain.ingest(&t, &[src], "c", &mut ()).unwrap();
    // Each added once: which of two equal memories a recall cites (and so signals)
    // depends on their ids, which the two apps draw differently.
    let mut facts = vec![
        "The deploy runs on Fridays after the standup.",
        "The billing service deploys on Mondays.",
        "Tides are raised by the Moon's gravity twice a day.",
        "Spring tides follow the new and the full Moon.",
        "Our office is in Lisbon, near the river.",
        "The office moved to Porto in May.",
        "The search team deploys every night at two.",
        "Neap tides come when the Sun and the Moon pull at right angles.",
        "The Berlin office opens in June.",
        "A deploy freeze holds during the holidays.",
    ];
    let queries = [
        "when does the deploy run",
        "what causes the tides",
        "where is the office",
    ];
    let signals = [
        neuralcore_memory::Signal::Used,
        neuralcore_memory::Signal::Confirmed,
        neuralcore_memory::Signal::Ignored,
        neuralcore_memory::Signal::Corrected,
    ];
    // The same memory in both apps, by position.
    let mut ids: Vec<(String, String)> = Vec::new();
    let mut rng = Lcg(7);
    let (mut searched, mut asked) = (0, 0);
    let start = memory_hits(&cached);
    for step in 0..60 {
        match rng.next(8) {
            0 | 1 if !facts.is_empty() => {
                let f = facts.swap_remove(rng.next(facts.len()));
                ids.push((memory_add(&cached, &t, f), memory_add(&plain, &t, f)));
            }
            2 if !ids.is_empty() => {
                let (a, b) = &ids[rng.next(ids.len())];
                let s = signals[rng.next(signals.len())];
                // Both fail alike on a forgotten memory.
                let ra = cached.memory_signal(&t, a, s, None).map(|m| m.trust);
                let rb = plain.memory_signal(&t, b, s, None).map(|m| m.trust);
                assert_eq!(ra.is_ok(), rb.is_ok(), "step {step}");
            }
            3 if !ids.is_empty() => {
                let (a, b) = &ids[rng.next(ids.len())];
                if rng.next(2) == 0 {
                    assert_eq!(
                        cached.memory_forget(&t, a).is_ok(),
                        plain.memory_forget(&t, b).is_ok()
                    );
                } else {
                    assert_eq!(
                        cached.memory_restore(&t, a).is_ok(),
                        plain.memory_restore(&t, b).is_ok()
                    );
                }
            }
            4 => {
                let q = queries[rng.next(queries.len())];
                let a = cached
                    .ask(&t, &format!("a{step}"), q, &opts("c"), true)
                    .unwrap();
                let b = plain
                    .ask(&t, &format!("b{step}"), q, &opts("c"), true)
                    .unwrap();
                assert_eq!(
                    (&a.answer, a.abstained, a.citations.len()),
                    (&b.answer, b.abstained, b.citations.len()),
                    "step {step}: {q}"
                );
                asked += 1;
            }
            _ => {
                // Searched twice: the second is a hit (nothing was written between).
                let q = queries[rng.next(queries.len())];
                for _ in 0..2 {
                    assert_eq!(
                        memory_search(&cached, &t, q),
                        memory_search(&plain, &t, q),
                        "step {step}: {q}"
                    );
                    searched += 1;
                }
            }
        }
    }
    let hits = memory_hits(&cached) - start;
    assert!(
        searched >= 20 && asked >= 3,
        "{searched} searches, {asked} asks"
    );
    assert!(hits >= 5, "{hits} of {searched} searches were hits");
}
