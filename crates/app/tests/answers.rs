//! The answer cache (`[cache] answer = true`) over a real embedded data dir and the real
//! embedding model: a repeated question is served from the cache, marked so with its
//! age; a change to the cited document, its removal or the collection's drop makes the
//! next ask fresh; a change elsewhere keeps the entry; tenants never share answers;
//! asks that recall memories are never cached; and a randomized run of changes and asks
//! never serves an answer different from what an app without a cache answers.

use std::path::{Path, PathBuf};

use neuralcore_app::{App, AskOptions, OpenOptions, Tenant};
use neuralcore_engine::{ColdTierKind, Config, HotTierKind};

fn open(dir: &Path, answer_cache: bool) -> App {
    let mut config = Config::default();
    config.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    config.cache.answer = answer_cache;
    if !answer_cache {
        config.cache.hot = HotTierKind::Off;
        config.cache.cold = ColdTierKind::Off;
    }
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

#[test]
fn tenants_never_share_a_cached_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let app = open(&tmp.path().join("data"), true);
    let src = tmp.path().join("src");
    write(&src, "tides.md", TIDES);
    let acme = Tenant::new("acme").unwrap();
    let globex = Tenant::new("globex").unwrap();
    app.ingest(&acme, std::slice::from_ref(&src), "docs", &mut ())
        .unwrap();
    app.ingest(&globex, &[src], "docs", &mut ()).unwrap();
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
