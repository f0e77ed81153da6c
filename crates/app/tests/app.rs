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
    let app = open_app(&tmp.path().join("data"), edit);
    (tmp, app)
}

/// The app over `data` (made or reopened), with the test model and `edit` applied.
fn open_app(data: &std::path::Path, edit: impl FnOnce(&mut Config)) -> App {
    let mut config = Config::default();
    config.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    edit(&mut config);
    let opts = OpenOptions {
        mind: Some(neuralcore_mind::Mind::memory()),
        ..Default::default()
    };
    App::open(data, config, opts).unwrap()
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

/// Marks on answers (issue 16): a user's `good` or `bad` on a past answer turns its
/// cited passages into labelled pairs of that tenant's feedback (the latest mark on a
/// run deciding), gives a cited memory the matching signal about the question, and
/// outlives the run; a bad mark changes nothing, and another tenant's run is not found.
#[test]
fn marked_answers_become_training_pairs_and_signal_their_memories() {
    use neuralcore_app::{AnswerVerdict, MarkRequest};
    let (tmp, app) = app();
    let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
    rocket_docs(&app, tmp.path(), &acme);
    let add = serde_json::json!({"text": "The rocket launches on the ninth of March."});
    let memory = app
        .memory_add(&acme, serde_json::from_value(add).unwrap())
        .unwrap()
        .memory;
    let opts = AskOptions {
        collection: "docs".into(),
        ..Default::default()
    };
    let q = "When does the rocket launch?";
    // Without recall the documents are cited; with it, the memory saying the same.
    let report = app.ask(&acme, "acme-m1", q, &opts, false).unwrap();
    assert!(!report.abstained, "{report:?}");
    let chunks: Vec<_> = report
        .citations
        .iter()
        .filter(|c| c.chunk.contains('#'))
        .collect();
    assert!(
        !chunks.is_empty(),
        "no document cited: {:?}",
        report.citations
    );
    let recalled = app.ask(&acme, "acme-m2", q, &opts, true).unwrap();
    assert!(
        recalled.citations.iter().any(|c| c.doc == memory.id),
        "the memory was not cited: {:?}",
        recalled.citations
    );
    let mark = |verdict, citations: Option<Vec<usize>>, note: Option<String>| MarkRequest {
        verdict,
        citations,
        note,
    };

    // Bad marks are clear errors that keep nothing.
    let invalid = [
        (mark(AnswerVerdict::Good, Some(vec![]), None), "empty"),
        (
            mark(AnswerVerdict::Bad, None, Some("é".repeat(16 * 1024 + 1))),
            "note",
        ),
    ];
    for (req, says) in invalid {
        match app.mark_run(&acme, &report.run_id, &req) {
            Err(AppError::InvalidInput(m)) => assert!(m.contains(says), "{m}"),
            other => panic!("{req:?}: {other:?}"),
        }
    }
    match app.mark_run(
        &acme,
        &report.run_id,
        &mark(AnswerVerdict::Good, Some(vec![99]), None),
    ) {
        Err(AppError::NotFound(m)) => assert!(m.contains("no citation [99]"), "{m}"),
        other => panic!("{other:?}"),
    }
    let hidden = app.mark_run(
        &globex,
        &report.run_id,
        &mark(AnswerVerdict::Bad, None, None),
    );
    assert!(matches!(hidden, Err(AppError::NotFound(_))), "{hidden:?}");
    assert!(app.answer_marks(&acme).unwrap().is_empty());
    assert_eq!(app.feedback(&acme).unwrap().marked_answers, 0);

    // Good: every cited passage is relevant, the memory is confirmed about the question.
    let m = app
        .mark_run(
            &acme,
            &report.run_id,
            &mark(AnswerVerdict::Good, None, Some(" ok ".into())),
        )
        .unwrap();
    assert_eq!(m.schema, "neuralcore.mark/v1");
    assert_eq!((m.question.as_str(), m.note.as_deref()), (q, Some("ok")));
    assert_eq!(m.passages.len(), chunks.len());
    let good = MarkRequest::new(AnswerVerdict::Good);
    let r = app.mark_run(&acme, &recalled.run_id, &good).unwrap();
    assert_eq!(r.memories, std::slice::from_ref(&memory.id));
    // The same mark again (a second click) signals the memory once.
    let r = app.mark_run(&acme, &recalled.run_id, &good).unwrap();
    assert_eq!(r.memories, std::slice::from_ref(&memory.id));
    let confirmations = app
        .memory_audit(&acme, &memory.id)
        .unwrap()
        .iter()
        .filter(|e| e.event.contains("confirmed"))
        .count();
    assert_eq!(confirmations, 1);
    let f = app.feedback(&acme).unwrap();
    assert_eq!(f.marked_answers, 2);
    for c in &chunks {
        assert!(
            f.pairs.iter().any(|p| p.question == q
                && p.passage == c.text
                && p.label == 1.0
                && p.source.starts_with("feedback:answer:")),
            "{c:?} not a relevant pair: {f:?}"
        );
    }
    let confirmed = app.memory_audit(&acme, &memory.id).unwrap();
    assert!(
        confirmed
            .iter()
            .any(|e| e.event.contains("confirmed") && e.query.as_deref() == Some(q)),
        "{confirmed:?}"
    );
    assert!(f
        .pairs
        .iter()
        .any(|p| p.passage == memory.text && p.label == 1.0));

    // Marked again, bad, on the first citation only: the latest mark decides.
    let first = chunks[0].n;
    let m = app
        .mark_run(
            &acme,
            &report.run_id,
            &mark(AnswerVerdict::Bad, Some(vec![first, first]), None),
        )
        .unwrap();
    assert_eq!((m.passages.len(), m.memories.len()), (1, 0), "{m:?}");
    let marks = app.answer_marks(&acme).unwrap();
    // Listed by mark time, ties (both marks in the same millisecond) by run id.
    assert!(r.marked_ms <= m.marked_ms, "{r:?} {m:?}");
    let expected = if r.marked_ms < m.marked_ms || r.run_id < m.run_id {
        [r.clone(), m.clone()]
    } else {
        [m.clone(), r.clone()]
    };
    assert_eq!(marks, expected);
    let f = app.feedback(&acme).unwrap();
    let from_marks: Vec<_> = f
        .pairs
        .iter()
        .filter(|p| p.source.starts_with("feedback:answer:"))
        .collect();
    assert_eq!(from_marks.len(), m.passages.len(), "{f:?}");
    assert!(from_marks.iter().all(|p| p.label == 0.0));

    // The other tenant has none of it.
    let theirs = app.feedback(&globex).unwrap();
    assert_eq!((theirs.pairs.len(), theirs.marked_answers), (0, 0));
    assert!(app.answer_marks(&globex).unwrap().is_empty());

    // Kept in the data dir, and by a backup.
    drop(app);
    let reopened = open_app(&tmp.path().join("data"), |_| {});
    assert_eq!(reopened.answer_marks(&acme).unwrap(), [r, m]);
    let backup = reopened.backup(&tmp.path().join("backup"), None).unwrap();
    assert!(
        backup
            .parts
            .iter()
            .any(|p| p.path == "marks.redb" && p.items == 2),
        "{:?}",
        backup.parts
    );
}
