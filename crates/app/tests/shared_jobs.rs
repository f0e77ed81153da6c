//! The ingest job queue shared through PostgreSQL (`[store] backend = "postgres"`):
//! two apps over one schema stand for two processes (each with its own data dir). A job
//! queued through one is run by the other's worker; a cancel through either reaches a
//! queued job at once and a running one through its worker's heartbeat; a lease that
//! runs out hands a job to another worker. The real PostgreSQL the suite starts; skipped,
//! saying so, when `NEURALCORE_TEST_PG_URL` is not set. (`crates/cli/tests/cli.rs` kills
//! a `neuralcore worker` process mid-job.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_app::jobs::{Job, JobState, Upload};
use neuralcore_app::{App, OpenOptions, Tenant};
use neuralcore_engine::{Config, StoreBackendKind};

struct Pg {
    url: String,
    schema: String,
}

impl Pg {
    fn new(test: &str) -> Option<Pg> {
        let url = match std::env::var("NEURALCORE_TEST_PG_URL") {
            Ok(u) if !u.is_empty() => u,
            _ => {
                eprintln!("skipped: NEURALCORE_TEST_PG_URL is not set (see scripts/postgres.sh)");
                return None;
            }
        };
        let pg = Pg {
            url,
            schema: format!("ncj_{test}_{}", std::process::id()),
        };
        pg.drop_schema();
        Some(pg)
    }

    fn drop_schema(&self) {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema
        ))
        .unwrap();
    }

    fn app(&self, dir: &std::path::Path) -> Arc<App> {
        let mut c = Config::default();
        c.store.backend = StoreBackendKind::Postgres;
        c.store.postgres_url = self.url.clone();
        c.store.postgres_schema = self.schema.clone();
        c.store.job_lease_secs = 3;
        c.embedding.model_dir = neuralcore_models::testing::model_cache()
            .display()
            .to_string();
        let opts = OpenOptions {
            mind: Some(neuralcore_mind::Mind::memory()),
            ..Default::default()
        };
        Arc::new(App::open(dir, c, opts).unwrap())
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.drop_schema();
    }
}

fn notes(n: usize) -> Vec<Upload> {
    (0..n)
        .map(|i| Upload {
            name: format!("note{i:03}.md"),
            bytes: format!(
                "# Note {i}\n\nThe lighthouse of cove {i} flashes {} times a minute; its \
                 keeper logs every ship that passes the cove at night.\n",
                3 + i
            )
            .into_bytes(),
        })
        .collect()
}

fn wait_for(app: &App, id: &str, what: impl Fn(&Job) -> bool, secs: u64) -> Job {
    let t = Tenant::default_tenant();
    let start = Instant::now();
    loop {
        let j = app.jobs().unwrap().get(&t, id).unwrap();
        if what(&j) {
            return j;
        }
        assert!(start.elapsed() < Duration::from_secs(secs), "{j:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_job_queued_through_one_process_is_run_by_another_and_cancels_reach_either() {
    let Some(pg) = Pg::new("run") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (pg.app(&tmp.path().join("a")), pg.app(&tmp.path().join("b")));
    let t = Tenant::default_tenant();
    assert!(a.jobs().unwrap().is_shared());

    // Queued with no worker anywhere: cancelled through the other process at once.
    let queued = a.jobs().unwrap().submit(&t, "cove", notes(3)).unwrap();
    let cancelled = b.jobs().unwrap().cancel(&t, &queued.id).unwrap();
    assert_eq!(cancelled.state, JobState::Cancelled);
    assert_eq!(
        a.jobs().unwrap().get(&t, &queued.id).unwrap().state,
        JobState::Cancelled
    );
    // Another tenant sees no such job, on either side.
    let other = Tenant::new("globex").unwrap();
    assert!(b.jobs().unwrap().get(&other, &queued.id).is_err());

    // Run by b's worker; a sees it end and searches what b stored.
    b.jobs().unwrap().start_worker(Arc::downgrade(&b));
    let job = a.jobs().unwrap().submit(&t, "cove", notes(20)).unwrap();
    let done = wait_for(&a, &job.id, |j| j.state.is_terminal(), 120);
    assert_eq!(done.state, JobState::Indexed, "{done:?}");
    assert_eq!(done.counts.ingested, 20, "{done:?}");
    let sources = a.sources(&t, "cove").unwrap();
    assert_eq!(sources.len(), 20);
    assert!(sources.iter().all(|s| s.id.starts_with("upload:note")));

    // A long job cancelled through a while b runs it: b's heartbeat passes it on.
    let long = a.jobs().unwrap().submit(&t, "cove", notes(300)).unwrap();
    wait_for(&a, &long.id, |j| j.counts.files_done > 0, 120);
    a.jobs().unwrap().cancel(&t, &long.id).unwrap();
    let end = wait_for(&a, &long.id, |j| j.state.is_terminal(), 60);
    assert_eq!(end.state, JobState::Cancelled, "{end:?}");
    assert!(end.counts.files_done < 300, "{end:?}");
    b.jobs().unwrap().begin_shutdown();
    b.jobs().unwrap().shutdown(Duration::from_secs(30));
}

#[path = "../../memory-pg/tests/support/private_pg.rs"]
mod private_pg;

/// PostgreSQL killed (`kill -9`, a crash) and started again while a worker runs a job:
/// the job goes back to the queue, resumes once the server is back, and ends with every
/// file stored once. A private server of its own (`NEURALCORE_TEST_PG_BIN`), so the
/// shared one is never touched.
#[test]
fn postgres_restarted_mid_job_the_job_resumes_and_nothing_is_lost_or_stored_twice() {
    let Some(bin) = private_pg::bin() else { return };
    // Started by init.
    let mut server = private_pg::Private::init(bin);
    let pg = Pg {
        url: server.url(),
        schema: format!("ncj_restart_{}", std::process::id()),
    };
    let tmp = tempfile::tempdir().unwrap();
    let a = pg.app(&tmp.path().join("a"));
    let t = Tenant::default_tenant();
    a.jobs().unwrap().start_worker(Arc::downgrade(&a));
    let job = a.jobs().unwrap().submit(&t, "cove", notes(300)).unwrap();
    let seen = wait_for(
        &a,
        &job.id,
        |j| j.counts.files_done > 0 || j.state.is_terminal(),
        120,
    );
    assert!(
        !seen.state.is_terminal(),
        "the job ended before the crash: {seen:?}"
    );
    server.kill();
    std::thread::sleep(Duration::from_millis(500));
    server.start();
    // Read until the database answers again and the job has ended.
    let start = Instant::now();
    let end = loop {
        match a.jobs().unwrap().get(&t, &job.id) {
            Ok(j) if j.state.is_terminal() => break j,
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the job never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let said = format!(
        "{:?} after {} attempts, {:?}, error {:?}",
        end.state, end.attempts, end.counts, end.error
    );
    assert_eq!(end.state, JobState::Indexed, "{said}");
    assert!(end.attempts >= 2, "{said}");
    let sources = a.sources(&t, "cove").unwrap();
    assert_eq!(sources.len(), 300);
    assert!(sources.iter().all(|s| !s.partial), "{sources:?}");
    let info = a
        .collections(&t)
        .unwrap()
        .into_iter()
        .find(|c| c.name == "cove")
        .unwrap();
    assert_eq!(info.documents, 300, "{info:?}");
    a.jobs().unwrap().begin_shutdown();
    a.jobs().unwrap().shutdown(Duration::from_secs(30));
}

/// Marks on answers live in the shared schema (its migration 6): a mark made through
/// one app is read, as a training pair of its tenant only, through another.
#[test]
fn a_mark_made_through_one_app_is_a_pair_through_another() {
    use neuralcore_app::{AnswerVerdict, AskOptions, MarkRequest};
    let Some(pg) = Pg::new("marks") else { return };
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (pg.app(d1.path()), pg.app(d2.path()));
    let (t, other) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
    let docs = d1.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("launch.md"),
        "# Launch\n\nThe rocket launches on the ninth of March from Kourou.\n",
    )
    .unwrap();
    a.ingest(&t, &[docs], "docs", &mut ()).unwrap();
    let opts = AskOptions {
        collection: "docs".into(),
        ..Default::default()
    };
    let q = "When does the rocket launch?";
    let report = a.ask(&t, "acme-pg1", q, &opts, false).unwrap();
    assert!(!report.citations.is_empty(), "{report:?}");
    let req = MarkRequest::new(AnswerVerdict::Bad);
    let m = a.mark_run(&t, &report.run_id, &req).unwrap();
    assert_eq!(b.answer_marks(&t).unwrap(), std::slice::from_ref(&m));
    // Marked again through the same app: one row, the latest.
    let again = MarkRequest::new(AnswerVerdict::Good);
    let m = a.mark_run(&t, &report.run_id, &again).unwrap();
    let marks = b.marks().unwrap();
    assert!(marks.in_postgres());
    assert_eq!(marks.get(&t, &report.run_id).unwrap().as_ref(), Some(&m));
    assert_eq!(marks.get(&other, &report.run_id).unwrap(), None);
    assert_eq!(b.answer_marks(&t).unwrap(), [m]);
    let f = b.feedback(&t).unwrap();
    assert_eq!(f.marked_answers, 1);
    assert!(
        f.pairs
            .iter()
            .any(|p| p.question == q && p.passage == report.citations[0].text && p.label == 1.0),
        "{f:?}"
    );
    assert!(b.answer_marks(&other).unwrap().is_empty());
    assert!(b.feedback(&other).unwrap().pairs.is_empty());
}
