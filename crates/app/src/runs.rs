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
//! Bounded: besides the week, a tenant keeps at most `[mind] runs_kept` runs
//! ([`Retention`]); the oldest go first, with their blackboards (the run's own Mind
//! layer, which the loop leaves for `neuralcore mind keys --run`). Under steady load a
//! run with its blackboard took about 140 KB in a soak, so the week alone would not bound
//! the disk.

use std::collections::HashMap;
use std::sync::Mutex;
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
/// every `keep / 8`-th time (and the first time in this process) its oldest runs beyond
/// the bound are deleted, so a tenant holds at most `keep + keep / 8` runs. Also purges
/// expired Mind entries hourly, since a server can outlive the week.
pub(crate) struct Retention {
    /// Runs kept per tenant (0 = only the week bounds them).
    keep: usize,
    /// Runs recorded per tenant since its last pruning.
    since: Mutex<HashMap<String, usize>>,
    purged: Mutex<Instant>,
}

impl Retention {
    pub(crate) fn new(keep: usize) -> Retention {
        Retention {
            keep,
            since: Mutex::new(HashMap::new()),
            purged: Mutex::new(Instant::now()),
        }
    }

    /// Called after each recorded run of `tenant`; failures are logged, never raised
    /// (the ask already succeeded).
    pub(crate) fn recorded(&self, mind: &Mind, tenant: &Tenant) {
        if self.keep > 0 {
            let due = {
                let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
                let n = since.entry(tenant.as_str().to_string()).or_insert(0);
                let due = *n == 0 || *n >= (self.keep / 8).max(1);
                *n = if due { 1 } else { *n + 1 };
                due
            };
            if due {
                match prune(mind, tenant, self.keep) {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(
                        "{n} run(s) of {} beyond the bound deleted",
                        tenant.as_str()
                    ),
                    Err(e) => tracing::warn!("pruning the runs of {}: {e}", tenant.as_str()),
                }
            }
        }
        let purge = {
            let mut at = self.purged.lock().unwrap_or_else(|p| p.into_inner());
            let due = at.elapsed() >= PURGE_EVERY;
            if due {
                *at = Instant::now();
            }
            due
        };
        if purge {
            match mind.purge_expired() {
                Ok(0) => {}
                Ok(n) => tracing::info!("{n} expired blackboard entries removed"),
                Err(e) => tracing::warn!("removing expired blackboard entries: {e}"),
            }
        }
    }
}

/// Deletes the tenant's runs beyond the newest `keep`: summary, report and the run's
/// blackboard. Returns how many runs went.
pub(crate) fn prune(mind: &Mind, tenant: &Tenant, keep: usize) -> Result<usize, AppError> {
    let scope = scope(mind, tenant)?;
    let mut runs: Vec<(u64, String, String)> = scope
        .read_pattern("summary.*")?
        .into_iter()
        .map(|e| {
            // An unreadable summary sorts oldest, so it goes first.
            let (started, id) = match serde_json::from_value::<StoredSummary>(e.value) {
                Ok(s) => (s.summary.started_ms, s.summary.run_id),
                Err(_) => (0, String::new()),
            };
            (started, id, e.key)
        })
        .collect();
    if runs.len() <= keep {
        return Ok(0);
    }
    runs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    let doomed = runs.split_off(keep);
    for (_, run_id, key) in &doomed {
        let seg = key.strip_prefix("summary.").unwrap_or(key);
        // The summary last: a run whose deletion fails half-way is found again next time.
        scope.delete(&format!("run.{seg}"))?;
        if !run_id.is_empty() {
            match mind.drop_run(&tenant.run_id(run_id)) {
                // No blackboard was written under an id the Mind refuses.
                Ok(_) | Err(MindError::InvalidKey { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        scope.delete(key)?;
    }
    Ok(doomed.len())
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
    let mut runs: Vec<RunSummary> = scope(mind, tenant)?
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
        .collect();
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
