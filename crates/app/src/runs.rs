//! Recent runs: every ask [`App::ask`] finishes (answered or abstained) is kept for a
//! week with its whole report, so any front end can list a tenant's past asks and open
//! one's trace (`GET /v1/runs`, the console's Runs page).
//!
//! Where: on the Mind, in a scope of the tenant's own, `_runs-<tenant>` — not in the
//! global scope, which every run's OBSERVE step lists key by key (a week of runs there
//! would slow every ask and show one tenant how many runs the others made). No run id
//! of a tenant (`<tenant>-<id>`, a tenant id starting with a letter or digit) can be
//! that scope's id. In it, `summary.<id>` holds the [`RunSummary`] the list reads and
//! `run.<id>` the report with its timings, written together. Keys take `[a-z0-9_-]`
//! only, so a run id's `_` is written `__` and an upper-case letter `_` and the letter.
//! Each entry names its tenant too and is checked on the way out.
//!
//! Bounded: besides the week, a tenant keeps about `[mind] runs_kept` runs
//! ([`Retention`]); the oldest finished go first, with their blackboards (the run's own Mind
//! layer, which the loop leaves for `neuralcore mind keys --run`). Under steady load a
//! run with its blackboard took about 140 KB in a soak, so the week alone would not bound
//! the disk.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use neuralcore_agents::AskReport;
use neuralcore_mind::{Mind, MindError, Scope};
use serde::{Deserialize, Serialize};

use crate::{AppError, Tenant};

/// The schema of a [`RunSummary`].
pub const RUN_SCHEMA: &str = "neuralcore.run/v1";
/// How long a run is kept (as finished jobs are), unless the Mind's `run_ttl_secs` is
/// shorter.
pub const RUN_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Runs listed when the caller does not say.
pub const RUNS_DEFAULT_LIMIT: usize = 50;
/// The most runs one list holds.
pub const RUNS_MAX_LIMIT: usize = 200;
/// Characters of the answer a summary keeps.
const ANSWER_CHARS: usize = 300;
const WRITER: &str = "app.runs";

/// One past ask, as lists show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunSummary {
    /// [`RUN_SCHEMA`].
    pub schema: String,
    /// The run id (`GET /v1/runs/{run_id}` gives its report).
    pub run_id: String,
    /// The question.
    pub question: String,
    /// The collection asked.
    pub collection: String,
    /// When the ask began, in ms since the Unix epoch.
    pub started_ms: u64,
    /// When it finished, in ms since the Unix epoch.
    pub finished_ms: u64,
    /// How long it took, in ms (the whole ask, not only the loop).
    pub latency_ms: u64,
    /// Iterations of the loop.
    pub iterations: usize,
    /// The engine declined to answer.
    pub abstained: bool,
    /// How the answer was made (`extractive`, `llm`, `direct`, `model-only`, `abstain`).
    pub method: String,
    /// The answer's confidence in [0, 1].
    pub confidence: f32,
    /// Why the loop stopped.
    pub stopped: String,
    /// The answer (or the abstention), at most 300 characters (`…` when cut).
    pub answer: String,
}

/// What `run.<id>` holds.
#[derive(Serialize, Deserialize)]
struct StoredRun {
    schema: String,
    tenant: String,
    started_ms: u64,
    finished_ms: u64,
    latency_ms: u64,
    /// The trace (iterations, verdicts, finish) was dropped to fit the Mind's value
    /// limit.
    #[serde(default)]
    trimmed: bool,
    report: AskReport,
}

/// What `summary.<id>` holds.
#[derive(Serialize, Deserialize)]
struct StoredSummary {
    tenant: String,
    summary: RunSummary,
}

/// The Mind scope of the tenant's runs.
fn scope(mind: &Mind, tenant: &Tenant) -> Result<Scope, AppError> {
    Ok(mind.run(&format!("_runs-{}", tenant.as_str()))?)
}

/// A run id as a key segment (see the module's docs); `None` when it is no run id
/// (1–64 characters of `[A-Za-z0-9_-]`).
fn segment(run_id: &str) -> Option<String> {
    if run_id.is_empty() || run_id.len() > 64 {
        return None;
    }
    let mut out = String::with_capacity(run_id.len() + 4);
    for c in run_id.chars() {
        match c {
            'a'..='z' | '0'..='9' | '-' => out.push(c),
            '_' => out.push_str("__"),
            'A'..='Z' => {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            }
            _ => return None,
        }
    }
    Some(out)
}

fn bad_id(run_id: &str) -> AppError {
    AppError::InvalidInput(format!(
        "{:?} is not a run id (1-64 characters of A-Z a-z 0-9 _ -)",
        run_id.chars().take(80).collect::<String>()
    ))
}

fn not_found(run_id: &str) -> AppError {
    AppError::NotFound(format!("no run {run_id:?} (runs are kept for 7 days)"))
}

/// `text` cut to `max` characters, with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// The summary of a finished run.
fn summary(report: &AskReport, started_ms: u64, latency_ms: u64) -> RunSummary {
    RunSummary {
        schema: RUN_SCHEMA.into(),
        run_id: report.run_id.clone(),
        question: report.question.clone(),
        collection: report.collection.clone(),
        started_ms,
        finished_ms: started_ms.saturating_add(latency_ms),
        latency_ms,
        iterations: report.iterations.len(),
        abstained: report.abstained,
        method: report.method.clone(),
        confidence: report.confidence,
        stopped: report.budget.stopped.clone(),
        answer: cut(&report.answer, ANSWER_CHARS),
    }
}

/// Keep the tenant's finished run (`report.run_id`, in the caller's names) for
/// [`RUN_RETENTION`]. A report too large for the Mind is kept without its trace.
pub(crate) fn record(
    mind: &Mind,
    tenant: &Tenant,
    report: &AskReport,
    started_ms: u64,
    latency_ms: u64,
) -> Result<(), AppError> {
    let seg = segment(&report.run_id).ok_or_else(|| bad_id(&report.run_id))?;
    let scope = scope(mind, tenant)?;
    let summary = summary(report, started_ms, latency_ms);
    let indexed = serde_json::to_value(StoredSummary {
        tenant: tenant.as_str().into(),
        summary: summary.clone(),
    })
    .map_err(|e| AppError::Internal(format!("cannot serialize a run's summary: {e}")))?;
    let mut stored = StoredRun {
        schema: RUN_SCHEMA.into(),
        tenant: tenant.as_str().into(),
        started_ms,
        finished_ms: summary.finished_ms,
        latency_ms,
        trimmed: false,
        report: report.clone(),
    };
    let (run_key, summary_key) = (format!("run.{seg}"), format!("summary.{seg}"));
    loop {
        let value = serde_json::to_value(&stored)
            .map_err(|e| AppError::Internal(format!("cannot serialize a run: {e}")))?;
        let items = [
            (run_key.as_str(), value),
            (summary_key.as_str(), indexed.clone()),
        ];
        match scope.write_batch(&items, WRITER, Some(RUN_RETENTION)) {
            Err(MindError::TooLarge { .. }) if !stored.trimmed => {
                stored.trimmed = true;
                stored.report.iterations.clear();
                stored.report.verdicts.clear();
                stored.report.finish.clear();
            }
            other => return other.map(|_| ()).map_err(AppError::from),
        }
    }
}

/// How often expired Mind entries are removed from disk (they are invisible at once,
/// but the embedded Mind keeps their bytes until a purge).
const PURGE_EVERY: Duration = Duration::from_secs(3600);

/// Keeps each tenant's runs within `[mind] runs_kept`: after a tenant's run is recorded,
/// every `keep / 8`-th time (and the first time in this process) a background pass
/// deletes its oldest finished runs beyond the bound, at most `2 × keep / 8` (at least
/// 32) per pass, so a backlog (runs kept before the bound existed) goes over several
/// passes without holding the Mind's writes. A tenant thus holds about `keep + keep / 8`
/// runs per process writing them. The same pass purges expired Mind entries hourly, as
/// a server can outlive the week. Passes run on one thread at a time, never in the ask.
pub(crate) struct Retention {
    /// Runs kept per tenant (0 = no count bound).
    keep: usize,
    /// Runs recorded per tenant since its last pruning.
    since: Mutex<HashMap<String, usize>>,
    purged: Mutex<Instant>,
    work: Arc<Work>,
}

/// What the background pass has to do, and whether it runs.
#[derive(Default)]
struct Work {
    queue: Mutex<Queue>,
    idle: Condvar,
}

#[derive(Default)]
struct Queue {
    tenants: Vec<Tenant>,
    purge: bool,
    running: bool,
}

impl Retention {
    pub(crate) fn new(keep: usize) -> Retention {
        Retention {
            keep,
            since: Mutex::new(HashMap::new()),
            purged: Mutex::new(Instant::now()),
            work: Arc::default(),
        }
    }

    /// Runs a tenant may record between two prunings.
    fn step(&self) -> usize {
        (self.keep / 8).max(1)
    }

    /// Called after each recorded run of `tenant`: queues the pass when one is due.
    /// Failures are logged, never raised (the ask already succeeded).
    pub(crate) fn recorded(&self, mind: &Mind, tenant: &Tenant) {
        let prune = self.keep > 0 && {
            let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
            let n = since.entry(tenant.as_str().to_string()).or_insert(0);
            let due = *n == 0 || *n >= self.step();
            *n = if due { 1 } else { *n + 1 };
            due
        };
        let purge = {
            let mut at = self.purged.lock().unwrap_or_else(|p| p.into_inner());
            let due = at.elapsed() >= PURGE_EVERY;
            if due {
                *at = Instant::now();
            }
            due
        };
        if !prune && !purge {
            return;
        }
        let mut q = self.work.queue.lock().unwrap_or_else(|p| p.into_inner());
        if prune && !q.tenants.contains(tenant) {
            q.tenants.push(tenant.clone());
        }
        q.purge |= purge;
        if q.running {
            return;
        }
        q.running = true;
        drop(q);
        let (mind, work) = (mind.clone(), self.work.clone());
        let (keep, cap) = (self.keep, (2 * self.step()).max(32));
        let spawned = std::thread::Builder::new()
            .name("runs-retention".into())
            .spawn(move || work.run(mind, keep, cap));
        if let Err(e) = spawned {
            tracing::warn!("cannot start the runs' retention pass: {e}");
            let mut q = self.work.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.running = false;
            self.work.idle.notify_all();
        }
    }

    /// Waits until no pass runs (tests, and closing the data dir).
    pub(crate) fn settle(&self) {
        let mut q = self.work.queue.lock().unwrap_or_else(|p| p.into_inner());
        while q.running {
            q = self.work.idle.wait(q).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Retention {
    /// A pass holds the Mind open (the embedded one locks its file): let it end first.
    fn drop(&mut self) {
        self.settle();
    }
}

impl Work {
    /// The background pass: until nothing is queued. The Mind is let go before the pass
    /// says it is done, so a closed app's data dir can be opened again at once.
    fn run(&self, mind: Mind, keep: usize, cap: usize) {
        loop {
            let (tenant, purge) = {
                let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                match q.tenants.pop() {
                    Some(t) => (Some(t), false),
                    None if q.purge => {
                        q.purge = false;
                        (None, true)
                    }
                    None => {
                        drop(mind);
                        q.running = false;
                        self.idle.notify_all();
                        return;
                    }
                }
            };
            if let Some(t) = tenant {
                match prune(&mind, &t, keep, cap) {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!("{n} run(s) of {t} beyond the bound deleted"),
                    Err(e) => tracing::warn!("pruning the runs of {t}: {e}"),
                }
            }
            if purge {
                match mind.purge_expired() {
                    Ok(0) => {}
                    Ok(n) => tracing::info!("{n} expired blackboard entries removed"),
                    Err(e) => tracing::warn!("removing expired blackboard entries: {e}"),
                }
            }
        }
    }
}

/// Deletes the tenant's oldest finished runs beyond the newest `keep`, at most `cap`:
/// report, summary and the run's blackboard. Returns how many runs went. Only the
/// tenant's own readable summaries count (as in the list).
pub(crate) fn prune(
    mind: &Mind,
    tenant: &Tenant,
    keep: usize,
    cap: usize,
) -> Result<usize, AppError> {
    let scope = scope(mind, tenant)?;
    let mut runs = summaries(&scope, tenant)?;
    if runs.len() <= keep {
        return Ok(0);
    }
    // Newest finished first: a long ask just recorded is among the kept.
    runs.sort_by(|a, b| {
        b.finished_ms
            .cmp(&a.finished_ms)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    let mut doomed = runs.split_off(keep);
    // The oldest first, when the cap leaves some for the next pass.
    doomed.reverse();
    doomed.truncate(cap);
    for run in &doomed {
        let Some(seg) = segment(&run.run_id) else {
            continue;
        };
        // The summary last: a run whose deletion fails half-way is found again next time.
        scope.delete(&format!("run.{seg}"))?;
        match mind.drop_run(&tenant.run_id(&run.run_id)) {
            // No blackboard was written under an id the Mind refuses.
            Ok(_) | Err(MindError::InvalidKey { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        scope.delete(&format!("summary.{seg}"))?;
    }
    Ok(doomed.len())
}

/// The summaries of the tenant's runs kept, in no order; unreadable ones are skipped
/// (and logged), as are any not the tenant's.
fn summaries(scope: &Scope, tenant: &Tenant) -> Result<Vec<RunSummary>, AppError> {
    Ok(scope
        .read_pattern("summary.*")?
        .into_iter()
        .filter_map(|e| match serde_json::from_value::<StoredSummary>(e.value) {
            Ok(s) if s.tenant == tenant.as_str() => Some(s.summary),
            Ok(_) => None,
            Err(err) => {
                tracing::warn!("skipping the unreadable run summary {}: {err}", e.key);
                None
            }
        })
        .collect())
}

/// The tenant's runs kept, newest first, at most `limit` (1 to [`RUNS_MAX_LIMIT`]).
pub(crate) fn list(
    mind: &Mind,
    tenant: &Tenant,
    limit: usize,
) -> Result<Vec<RunSummary>, AppError> {
    if limit == 0 || limit > RUNS_MAX_LIMIT {
        return Err(AppError::InvalidInput(format!(
            "limit must be 1 to {RUNS_MAX_LIMIT}"
        )));
    }
    let mut runs = summaries(&scope(mind, tenant)?, tenant)?;
    runs.sort_by(|a, b| {
        b.started_ms
            .cmp(&a.started_ms)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    runs.truncate(limit);
    Ok(runs)
}

/// One of the tenant's runs kept: its report. Another tenant's run is not found, as
/// an unknown one.
pub(crate) fn get(mind: &Mind, tenant: &Tenant, run_id: &str) -> Result<AskReport, AppError> {
    let seg = segment(run_id).ok_or_else(|| bad_id(run_id))?;
    let Some(entry) = scope(mind, tenant)?.read(&format!("run.{seg}"))? else {
        return Err(not_found(run_id));
    };
    match serde_json::from_value::<StoredRun>(entry.value) {
        Ok(s) if s.tenant == tenant.as_str() && s.report.run_id == run_id => Ok(s.report),
        Ok(_) => Err(not_found(run_id)),
        Err(e) => Err(AppError::Internal(format!(
            "the stored run {run_id:?} cannot be read: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_map_to_distinct_key_segments() {
        assert_eq!(segment("api-1733-42").as_deref(), Some("api-1733-42"));
        assert_eq!(segment("My_Run").as_deref(), Some("_my___run"));
        // `_` doubles, so an escaped upper-case letter never meets a plain id.
        assert_ne!(segment("Ab"), segment("_ab"));
        assert_ne!(segment("a_b"), segment("aB"));
        for bad in ["", "a.b", "a b", "ü", "x/y", &"x".repeat(65)] {
            assert_eq!(segment(bad), None, "{bad:?}");
        }
        // The longest id of the longest tenant still makes a valid key.
        let long = segment(&"A".repeat(64)).unwrap();
        neuralcore_mind::validate_key(&format!("summary.{long}")).unwrap();
        assert!(format!("_runs-{}", "t".repeat(32)).len() <= 64);
    }

    #[test]
    fn answers_are_cut_on_characters() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("äöüß", 2), "äö…");
    }
}
