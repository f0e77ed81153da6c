//! The application core over a real embedded data dir and the real embedding model: two
//! tenants side by side never see each other's collections, hits or runs, and bad names
//! get clear errors of the right category.

use std::path::PathBuf;

use neuralcore_app::{App, AppError, AskOptions, OpenOptions, SearchRequest, Tenant};
use neuralcore_engine::Config;

fn app() -> (tempfile::TempDir, App) {
    app_with(|_| {})
}

/// The app over a fresh data dir, with the test model and `edit` applied to the config.
fn app_with(edit: impl FnOnce(&mut Config)) -> (tempfile::TempDir, App) {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    edit(&mut config);
    let app = App::open(
        &tmp.path().join("data"),
        config,
        OpenOptions {
            mind: Some(neuralcore_mind::Mind::memory()),
            ..Default::default()
        },
    )
    .unwrap();
    (tmp, app)
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn tenants_never_see_each_other() {
    let (tmp, app) = app();
    let acme = Tenant::new("acme").unwrap();
    let globex = Tenant::new("globex").unwrap();
    // Two documents say it, so the grader's corroboration keeps the evidence.
    let a = write(
        &tmp.path().join("a"),
        "secret.md",
        "# Launch\n\nThe acme rocket launches on the ninth of March from Kourou.\n",
    );
    write(
        &tmp.path().join("a"),
        "press.md",
        "# Press\n\nAcme confirms its rocket launches on the ninth of March, from Kourou.\n",
    );
    let a = a.parent().unwrap().to_path_buf();
    let g = write(
        &tmp.path().join("g"),
        "plan.md",
        "# Plan\n\nGlobex builds a volcano lair near the coast.\n",
    );
    app.ingest(&acme, &[a], "docs", &mut ()).unwrap();
    app.ingest(&globex, &[g], "docs", &mut ()).unwrap();

    // Each tenant lists only its own collection, under its own name.
    let names = |t: &Tenant| -> Vec<String> {
        app.collections(t)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect()
    };
    assert_eq!(names(&acme), ["docs"]);
    assert_eq!(names(&globex), ["docs"]);
    assert!(names(&Tenant::default_tenant()).is_empty());
    assert_eq!(app.collection(&acme, "docs").unwrap().documents, 2);

    // A search finds only the tenant's own text, whatever it asks for (vector search
    // always returns the nearest chunks: here, the tenant's own, however far).
    let texts = |t: &Tenant, q: &str| -> Vec<String> {
        let r = app.search(t, &SearchRequest::new(q, "docs")).unwrap();
        r.hits.into_iter().map(|h| h.text).collect()
    };
    let found = texts(&acme, "rocket launches Kourou");
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|t| t.contains("Kourou")));
    let found = texts(&globex, "rocket launches Kourou");
    assert!(found.iter().all(|t| !t.contains("Kourou")), "{found:?}");
    let found = texts(&acme, "volcano lair");
    assert!(found.iter().all(|t| !t.contains("volcano")), "{found:?}");
    let r = app
        .search(&acme, &SearchRequest::new("rocket", "docs"))
        .unwrap();
    assert_eq!(r.collection, "docs");
    assert_eq!(r.schema, "neuralcore.search/v1");

    // The stored name of another tenant's collection is not a name anyone can use.
    let e = app
        .search(&globex, &SearchRequest::new("rocket", "acme~docs"))
        .unwrap_err();
    assert!(matches!(e, AppError::InvalidInput(_)), "{e}");
    let e = app
        .collection(&Tenant::default_tenant(), "docs")
        .unwrap_err();
    assert!(matches!(e, AppError::NotFound(_)), "{e}");
    // Not found, and the message names only the tenant's own collections.
    app.create_collection(&globex, "notes").unwrap();
    let e = app
        .search(&globex, &SearchRequest::new("x", "nope"))
        .unwrap_err();
    assert!(matches!(e, AppError::NotFound(_)), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("docs") && msg.contains("notes"), "{msg}");
    assert!(!msg.contains("acme") && !msg.contains('~'), "{msg}");
    let e = app.drop_collection(&acme, "notes").unwrap_err();
    assert!(matches!(e, AppError::NotFound(_)), "{e}");
    assert!(!e.to_string().contains("globex"), "{e}");
    app.drop_collection(&globex, "notes").unwrap();
    assert_eq!(app.collections(&acme).unwrap().len(), 1);

    // Asking: the answer cites only the tenant's evidence, and the report names the
    // tenant's collection.
    let opts = AskOptions {
        collection: "docs".into(),
        ..Default::default()
    };
    let r = app
        .ask(
            &acme,
            "r1",
            "When does the acme rocket launch?",
            &opts,
            false,
        )
        .unwrap();
    assert_eq!(r.collection, "docs");
    assert!(r.answer.contains("ninth of March"), "{}", r.answer);
    let r = app
        .ask(
            &globex,
            "r1",
            "When does the acme rocket launch?",
            &opts,
            false,
        )
        .unwrap();
    assert!(!r.answer.contains("ninth of March"), "{}", r.answer);
    assert!(r.citations.iter().all(|c| !c.text.contains("Kourou")));
}

#[test]
fn bad_input_gets_the_right_category() {
    let (_tmp, app) = app();
    let t = Tenant::default_tenant();
    for (req, want) in [
        (SearchRequest::new("x", "nope"), "not_found"),
        (SearchRequest::new("x", "bad name"), "invalid_input"),
        (SearchRequest::new("   ", "default"), "invalid_input"),
        (SearchRequest::new("x", ".hidden"), "invalid_input"),
    ] {
        let e = app.search(&t, &req).unwrap_err();
        assert_eq!(e.kind(), want, "{req:?}: {e}");
    }
    for bad in ["", "Acme", "a~b", "-x", "a-b"] {
        assert_eq!(Tenant::new(bad).unwrap_err().kind(), "invalid_input");
    }
    // An unknown backend in the config is an error at load, naming the choices.
    let e = Config::load(
        None,
        vec![("NEURALCORE_MIND_BACKEND".to_string(), "mongo".to_string())],
    )
    .unwrap_err();
    assert!(e.to_string().contains("redis"), "{e}");
    let e = Config::load(
        None,
        vec![(
            "NEURALCORE_MEMORY_BACKEND".to_string(),
            "sqlite".to_string(),
        )],
    )
    .unwrap_err();
    assert!(e.to_string().contains("postgres"), "{e}");
}

/// An LLM that accepts connections and never answers (a fixture: a listener that reads
/// and stays silent) costs an ask no more than its deadline, though the client would wait
/// 30 s per attempt and retry twice: the ask answers extractively from its evidence,
/// says the LLM failed, and returns in time.
#[test]
fn hanging_llm_fixture_never_holds_an_ask_past_its_deadline() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            // Keep every connection open, read nothing back.
            held.push(conn);
        }
    });
    let (tmp, app) = app_with(|config| {
        config.llm.base_url = format!("http://127.0.0.1:{port}/v1");
        config.llm.timeout_ms = 30_000;
        config.llm.max_retries = 2;
    });
    let t = Tenant::default_tenant();
    let src = write(
        &tmp.path().join("src"),
        "tides.md",
        "# Tides\n\nTides are caused by the gravitational pull of the Moon on the oceans.\n",
    );
    app.ingest(&t, &[src], "docs", &mut ()).unwrap();
    let opts = AskOptions {
        collection: "docs".into(),
        deadline_ms: Some(3_000),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let r = app
        .ask(&t, "hang1", "What causes the tides?", &opts, false)
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(6),
        "the ask took {took:?} with a 3 s deadline"
    );
    assert!(!r.abstained, "{}", r.answer);
    assert!(r.answer.contains("Moon"), "{}", r.answer);
    let said = serde_json::to_string(&r).unwrap();
    assert!(
        said.contains("timed out") || said.contains("deadline"),
        "the report says why the LLM gave nothing: {said:.3000}"
    );
}

/// A tenant's collection `docs` with two documents that agree, so asks answer.
fn rocket_docs(app: &App, tmp: &std::path::Path, tenant: &Tenant) {
    let dir = tmp.join(format!("docs-{tenant}"));
    write(
        &dir,
        "launch.md",
        "# Launch\n\nThe rocket launches on the ninth of March from Kourou.\n",
    );
    write(
        &dir,
        "press.md",
        "# Press\n\nThe rocket launches on the ninth of March, from Kourou.\n",
    );
    app.ingest(tenant, &[dir], "docs", &mut ()).unwrap();
}

fn ask_docs(app: &App, tenant: &Tenant, run_id: &str) {
    let opts = AskOptions {
        collection: "docs".into(),
        ..Default::default()
    };
    app.ask(tenant, run_id, "When does the rocket launch?", &opts, false)
        .unwrap();
}

/// Keys a run's scope sees beyond the global ones: its own blackboard.
fn blackboard_keys(app: &App, tenant: &Tenant, run_id: &str) -> usize {
    let run = app.mind().run(&tenant.run_id(run_id)).unwrap();
    let global = app.mind().global().list_keys("*").unwrap().len();
    run.list_keys("*").unwrap().len() - global
}

fn run_ids(app: &App, t: &Tenant) -> Vec<String> {
    app.runs(t, 200)
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect()
}

#[test]
fn each_tenant_keeps_its_newest_runs_kept_and_the_oldest_go_with_their_blackboards() {
    let (tmp, app) = app_with(|c| c.mind.runs_kept = 5);
    let acme = Tenant::new("acme").unwrap();
    let globex = Tenant::new("globex").unwrap();
    rocket_docs(&app, tmp.path(), &acme);
    rocket_docs(&app, tmp.path(), &globex);
    ask_docs(&app, &globex, "g0");
    ask_docs(&app, &globex, "g1");
    for i in 0..9 {
        ask_docs(&app, &acme, &format!("a{i}"));
    }
    // Pruning runs in the background.
    app.settle_runs();
    // With 5 kept, every run recorded prunes (every 5/8-th, at least each).
    assert_eq!(run_ids(&app, &acme), ["a8", "a7", "a6", "a5", "a4"]);
    // Another tenant's runs are not counted against acme's, nor pruned with them.
    assert_eq!(run_ids(&app, &globex), ["g1", "g0"]);
    for old in ["a0", "a3"] {
        let e = app.run(&acme, old).unwrap_err();
        assert!(matches!(e, AppError::NotFound(_)), "{e}");
        assert_eq!(blackboard_keys(&app, &acme, old), 0, "{old}");
    }
    for kept in ["a4", "a8"] {
        assert_eq!(app.run(&acme, kept).unwrap().run_id, kept);
        assert!(blackboard_keys(&app, &acme, kept) > 0, "{kept}");
    }
    assert!(blackboard_keys(&app, &globex, "g0") > 0);
}

#[test]
fn runs_are_pruned_every_eighth_of_the_bound() {
    // 16 kept: a pass after the first run and every 2nd after (r0, r2, ..., r18).
    let (tmp, app) = app_with(|c| c.mind.runs_kept = 16);
    let acme = Tenant::new("acme").unwrap();
    rocket_docs(&app, tmp.path(), &acme);
    // Each pass settled before the next ask: a pass still running when a later run is
    // recorded would see that run too (the count then depends on the machine's load).
    for i in 0..20 {
        ask_docs(&app, &acme, &format!("r{i:02}"));
        app.settle_runs();
    }
    // r18's pass left 16 of 19; r19 came after it.
    let ids = run_ids(&app, &acme);
    assert_eq!(ids.len(), 17, "{ids:?}");
    assert_eq!(ids.last().map(String::as_str), Some("r03"), "{ids:?}");
}

/// mind.redb's size after 30, 60 and 90 asks, with `runs_kept`.
fn mind_file_sizes(runs_kept: usize) -> Vec<u64> {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    config.mind.runs_kept = runs_kept;
    let data = tmp.path().join("data");
    // The configured Mind: `<data dir>/mind.redb`.
    let app = App::open(&data, config, OpenOptions::default()).unwrap();
    let acme = Tenant::new("acme").unwrap();
    rocket_docs(&app, tmp.path(), &acme);
    let mut sizes = Vec::new();
    for i in 0..90 {
        ask_docs(&app, &acme, &format!("r{i}"));
        if i % 30 == 29 {
            app.settle_runs();
            sizes.push(std::fs::metadata(data.join("mind.redb")).unwrap().len());
        }
    }
    if runs_kept > 0 {
        assert_eq!(app.runs(&acme, 50).unwrap().len(), runs_kept);
    }
    sizes
}

#[test]
fn the_embedded_minds_file_stops_growing_once_runs_are_pruned() {
    let bounded = mind_file_sizes(8);
    let unbounded = mind_file_sizes(0);
    eprintln!(
        "mind.redb after 30, 60 and 90 runs: {bounded:?} bytes with 8 kept, {unbounded:?} with all"
    );
    let growth = |s: &[u64]| s[2].saturating_sub(s[0]);
    // Without the bound the file grows with the runs (it doubled here); with it, redb
    // reuses the pruned runs' pages.
    assert!(growth(&unbounded) > 0, "{unbounded:?}");
    assert!(
        growth(&bounded) <= growth(&unbounded) / 4,
        "{bounded:?} against {unbounded:?}"
    );
}
