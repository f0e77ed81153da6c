//! Marks on answers: a user's word that one of their past answers was right or wrong
//! (`POST /v1/runs/{run_id}/mark`), kept for good as training data — runs expire after a
//! week, a mark does not.
//!
//! A mark copies what it is about out of the run's report: the question and the
//! passages the answer cited (all of them, or the citations the user names). `good`
//! says each of those passages answered the question, `bad` that it did not;
//! [`App::feedback`] turns them into labelled pairs beside the memories' signals, so
//! `neuralcore feedback export` and `GET /v1/feedback` give both. A cited memory gets the
//! matching trust signal about the question instead (`confirmed` or `corrected`), which
//! its pair then comes from. A run marked again is marked anew: the latest mark is the
//! one kept. An abstention cites nothing, so its mark is kept but gives no pair.
//!
//! Where: `<data dir>/marks.redb`, or (with the documents on PostgreSQL) the store's
//! `answer_marks` table (its migration 6), where every replica finds the same ones. Each
//! mark is keyed by its tenant and run and names its tenant, checked on the way out.

use std::collections::BTreeMap;
use std::path::Path;

use neuralcore_agents::{AskReport, Evidence};
use neuralcore_core::pairs::Pair;
use neuralcore_memory::{now_ms, Signal};
use redb::TableDefinition;
use serde::{Deserialize, Serialize};

use crate::{App, AppError, Tenant};

/// The schema of an [`AnswerMark`].
pub const MARK_SCHEMA: &str = "neuralcore.mark/v1";
/// The longest note a mark takes, in characters.
pub const MAX_NOTE_CHARS: usize = 16 * 1024;

/// `tenant \0 run id` → the [`Stored`] mark as JSON.
const MARKS: TableDefinition<&str, &[u8]> = TableDefinition::new("answer_marks");

/// What the user says of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnswerVerdict {
    /// The answer was right: the passages it cited answer the question.
    Good,
    /// The answer was wrong: the passages it cited do not answer the question.
    Bad,
}

impl AnswerVerdict {
    /// `good` or `bad`.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerVerdict::Good => "good",
            AnswerVerdict::Bad => "bad",
        }
    }
}

/// A cited passage of a document that a mark is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MarkedPassage {
    /// The citation's number in the answer.
    pub n: usize,
    /// `<doc>#<ordinal>`.
    pub chunk: String,
    /// The document's title.
    pub title: String,
    /// The cited text.
    pub text: String,
}

/// A user's mark on one of their answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AnswerMark {
    /// [`MARK_SCHEMA`].
    pub schema: String,
    /// The run marked.
    pub run_id: String,
    /// Its question.
    pub question: String,
    /// The collection it asked.
    pub collection: String,
    /// `good` or `bad`.
    pub verdict: AnswerVerdict,
    /// The cited passages of documents the mark is about.
    pub passages: Vec<MarkedPassage>,
    /// The cited memories the mark is about; each got the matching signal about the
    /// question (`confirmed` for good, `corrected` for bad).
    pub memories: Vec<String>,
    /// Cited memories that no longer exist, so got no signal.
    #[serde(default)]
    pub memories_gone: Vec<String>,
    /// The answer abstained: nothing was cited, so the mark gives no pair.
    pub abstained: bool,
    /// The user's note, if any.
    pub note: Option<String>,
    /// When it was marked, in ms since the Unix epoch.
    pub marked_ms: u64,
}

/// What a mark asks.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkRequest {
    /// `good` or `bad`.
    pub verdict: AnswerVerdict,
    /// The citations (their numbers in the answer) the mark is about; all of them when
    /// absent.
    #[serde(default, deserialize_with = "de_opt_uints")]
    #[schema(min_items = 1)]
    pub citations: Option<Vec<usize>>,
    /// A note, at most 16,384 characters.
    #[serde(default)]
    #[schema(max_length = 16384)]
    pub note: Option<String>,
}

/// Optional whole numbers that JSON may spell `12` or `12.0`, as [`crate::de_opt_uint`].
fn de_opt_uints<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<usize>>, D::Error> {
    #[derive(Deserialize)]
    struct Whole(#[serde(deserialize_with = "crate::de_opt_uint")] Option<usize>);
    let Some(v) = Option::<Vec<Whole>>::deserialize(d)? else {
        return Ok(None);
    };
    v.into_iter()
        .map(|w| {
            w.0.ok_or_else(|| serde::de::Error::custom("a citation number is null"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

impl MarkRequest {
    /// A mark of every citation, without a note.
    pub fn new(verdict: AnswerVerdict) -> MarkRequest {
        MarkRequest {
            verdict,
            citations: None,
            note: None,
        }
    }
}

/// A mark as stored: with its tenant, checked on the way out.
#[derive(Serialize, Deserialize)]
struct Stored {
    tenant: String,
    mark: AnswerMark,
}

/// The marks of a data dir, or of the PostgreSQL schema every replica shares.
pub struct MarkStore {
    backend: Backend,
}

enum Backend {
    /// `<data dir>/marks.redb`.
    Redb(redb::Database),
    /// `answer_marks` in the document store's schema (its migration 6).
    Pg(Box<neuralcore_store::PgStore>),
}

fn internal(e: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("mark store: {e}"))
}

fn pg_error(e: neuralcore_pg::PgError) -> AppError {
    match e {
        neuralcore_pg::PgError::Unavailable(m) => AppError::Unavailable(format!("mark store: {m}")),
        other => internal(other),
    }
}

fn unavailable(e: &AppError) -> bool {
    matches!(e, AppError::Unavailable(_))
}

fn key(tenant: &Tenant, run_id: &str) -> String {
    format!("{}\0{run_id}", tenant.as_str())
}

fn decode(tenant: &Tenant, bytes: &[u8]) -> Result<Option<AnswerMark>, AppError> {
    let s: Stored = serde_json::from_slice(bytes)
        .map_err(|e| internal(format!("a stored mark cannot be read: {e}")))?;
    Ok((s.tenant == tenant.as_str()).then_some(s.mark))
}

impl MarkStore {
    /// Open (or create) `<data dir>/marks.redb`.
    pub fn open(data_dir: &Path) -> Result<MarkStore, AppError> {
        let db = crate::keys::open_small_redb(data_dir, "marks.redb", "mark store")?;
        let txn = db.begin_write().map_err(internal)?;
        txn.open_table(MARKS).map_err(internal)?;
        txn.commit().map_err(internal)?;
        Ok(MarkStore {
            backend: Backend::Redb(db),
        })
    }

    /// The mark store `config` asks for: with `[store] backend = "postgres"` the marks
    /// live in the store's schema, shared by every replica; else `<data dir>/marks.redb`.
    pub fn open_with(
        data_dir: &Path,
        config: &neuralcore_engine::Config,
    ) -> Result<MarkStore, AppError> {
        if config.store.backend != neuralcore_engine::StoreBackendKind::Postgres {
            return MarkStore::open(data_dir);
        }
        let store = neuralcore_engine::Engine::postgres_store(config)?;
        Ok(MarkStore {
            backend: Backend::Pg(Box::new(store)),
        })
    }

    /// Whether the marks live in PostgreSQL (backed up with `pg_dump`).
    pub fn in_postgres(&self) -> bool {
        matches!(self.backend, Backend::Pg(_))
    }

    /// Keep `mark` as the tenant's mark on its run, in place of any earlier one.
    pub fn put(&self, tenant: &Tenant, mark: &AnswerMark) -> Result<(), AppError> {
        let bytes = serde_json::to_vec(&Stored {
            tenant: tenant.as_str().into(),
            mark: mark.clone(),
        })
        .map_err(internal)?;
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_write().map_err(internal)?;
                {
                    let mut t = txn.open_table(MARKS).map_err(internal)?;
                    t.insert(key(tenant, &mark.run_id).as_str(), bytes.as_slice())
                        .map_err(internal)?;
                }
                txn.commit().map_err(internal)
            }
            Backend::Pg(store) => {
                let (pool, s) = store.pool();
                let ms = i64::try_from(mark.marked_ms).unwrap_or(i64::MAX);
                // An upsert: running it twice (a retry) leaves the same row.
                pool.write(pg_error, unavailable, |c| {
                    c.client
                        .execute(
                            &format!(
                                "INSERT INTO {s}.answer_marks (tenant, run_id, record, marked_ms) \
                                 VALUES ($1, $2, $3, $4) ON CONFLICT (tenant, run_id) DO UPDATE \
                                 SET record = EXCLUDED.record, marked_ms = EXCLUDED.marked_ms"
                            ),
                            &[&tenant.as_str(), &mark.run_id, &bytes, &ms],
                        )
                        .map_err(|e| pg_error(neuralcore_pg::map(e, &pool.url)))
                })?;
                Ok(())
            }
        }
    }

    /// The tenant's mark on one run, if it made one.
    pub fn get(&self, tenant: &Tenant, run_id: &str) -> Result<Option<AnswerMark>, AppError> {
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_read().map_err(internal)?;
                let t = txn.open_table(MARKS).map_err(internal)?;
                let got = t.get(key(tenant, run_id).as_str()).map_err(internal)?;
                match got {
                    Some(v) => decode(tenant, v.value()),
                    None => Ok(None),
                }
            }
            Backend::Pg(store) => {
                let (pool, s) = store.pool();
                let row = pool.read(pg_error, unavailable, |c| {
                    c.client
                        .query_opt(
                            &format!(
                                "SELECT record FROM {s}.answer_marks WHERE tenant = $1 AND \
                                 run_id = $2"
                            ),
                            &[&tenant.as_str(), &run_id],
                        )
                        .map_err(|e| pg_error(neuralcore_pg::map(e, &pool.url)))
                })?;
                match row {
                    Some(r) => decode(tenant, r.get::<_, &[u8]>(0)),
                    None => Ok(None),
                }
            }
        }
    }

    /// The tenant's marks, oldest first.
    pub fn list(&self, tenant: &Tenant) -> Result<Vec<AnswerMark>, AppError> {
        let mut out = Vec::new();
        match &self.backend {
            Backend::Redb(db) => {
                let txn = db.begin_read().map_err(internal)?;
                let t = txn.open_table(MARKS).map_err(internal)?;
                let from = format!("{}\0", tenant.as_str());
                let to = format!("{}\u{1}", tenant.as_str());
                for e in t.range(from.as_str()..to.as_str()).map_err(internal)? {
                    let (_, v) = e.map_err(internal)?;
                    out.extend(decode(tenant, v.value())?);
                }
            }
            Backend::Pg(store) => {
                let (pool, s) = store.pool();
                let rows = pool.read(pg_error, unavailable, |c| {
                    c.client
                        .query(
                            &format!(
                                "SELECT record FROM {s}.answer_marks WHERE tenant = $1 \
                                 ORDER BY marked_ms, run_id"
                            ),
                            &[&tenant.as_str()],
                        )
                        .map_err(|e| pg_error(neuralcore_pg::map(e, &pool.url)))
                })?;
                for r in rows {
                    out.extend(decode(tenant, r.get::<_, &[u8]>(0))?);
                }
            }
        }
        out.sort_by(|a, b| (a.marked_ms, &a.run_id).cmp(&(b.marked_ms, &b.run_id)));
        Ok(out)
    }

    /// Copy the marks into a new file at `dest`, as committed now; how many. Marks in
    /// PostgreSQL are backed up with `pg_dump`.
    pub fn backup_to(&self, dest: &Path) -> Result<u64, AppError> {
        let Backend::Redb(db) = &self.backend else {
            return Err(AppError::InvalidInput(
                "the marks live in PostgreSQL: back them up with pg_dump --schema".into(),
            ));
        };
        let mut copy = neuralcore_store::copy::RedbCopy::begin(db, dest).map_err(internal)?;
        copy.table(MARKS).map_err(internal)?;
        copy.finish().map_err(internal)
    }
}

/// The mark `req` makes of `report` (the tenant's run), before any memory is signalled.
fn mark_of(report: &AskReport, req: &MarkRequest, now: u64) -> Result<AnswerMark, AppError> {
    let invalid = |m: String| AppError::InvalidInput(m);
    let verdict = req.verdict;
    let note = match req.note.as_deref().map(str::trim) {
        Some(n) if n.chars().count() > MAX_NOTE_CHARS => {
            return Err(invalid(format!(
                "the note is {} characters; at most {MAX_NOTE_CHARS}",
                n.chars().count()
            )))
        }
        Some("") | None => None,
        Some(n) => Some(n.to_string()),
    };
    let chosen = match &req.citations {
        None => report.citations.iter().collect::<Vec<_>>(),
        Some(ns) if ns.is_empty() => {
            return Err(invalid(
                "\"citations\" is empty: name at least one, or leave it out to mark them all"
                    .into(),
            ))
        }
        Some(ns) => {
            let mut out = Vec::new();
            for n in ns {
                let c = report.citations.iter().find(|c| c.n == *n).ok_or_else(|| {
                    AppError::NotFound(format!(
                        "the answer of run {:?} has no citation [{n}] (it has {})",
                        report.run_id,
                        report.citations.len()
                    ))
                })?;
                if !out.iter().any(|o: &&_| std::ptr::eq(*o, c)) {
                    out.push(c);
                }
            }
            out
        }
    };
    let mut mark = AnswerMark {
        schema: MARK_SCHEMA.into(),
        run_id: report.run_id.clone(),
        question: report.question.clone(),
        collection: report.collection.clone(),
        verdict,
        passages: Vec::new(),
        memories: Vec::new(),
        memories_gone: Vec::new(),
        abstained: report.abstained,
        note,
        marked_ms: now,
    };
    for c in chosen {
        match &c.evidence {
            Evidence::Chunk { .. } => mark.passages.push(MarkedPassage {
                n: c.n,
                chunk: c.chunk.clone(),
                title: c.title.clone(),
                text: c.text.clone(),
            }),
            Evidence::Memory { id } => mark.memories.push(id.clone()),
        }
    }
    Ok(mark)
}

/// The labelled pairs of `marks` (oldest first): one per (question, cited chunk), the
/// latest mark deciding.
pub(crate) fn pairs(marks: &[AnswerMark]) -> Vec<Pair> {
    let mut best: BTreeMap<(String, String), (usize, Pair)> = BTreeMap::new();
    let mut seq = 0usize;
    for m in marks {
        let q = m.question.trim();
        if q.is_empty() {
            continue;
        }
        for p in m.passages.iter().filter(|p| !p.text.trim().is_empty()) {
            seq += 1;
            let pair = Pair {
                question: q.to_string(),
                passage: p.text.clone(),
                label: if m.verdict == AnswerVerdict::Good {
                    1.0
                } else {
                    0.0
                },
                source: format!(
                    "feedback:answer:{}:{}:{}",
                    m.run_id,
                    m.verdict.as_str(),
                    p.chunk
                ),
            };
            best.insert((q.to_lowercase(), p.chunk.clone()), (seq, pair));
        }
    }
    let mut chosen: Vec<_> = best.into_values().collect();
    chosen.sort_by_key(|(s, _)| *s);
    chosen.into_iter().map(|(_, p)| p).collect()
}

impl App {
    /// The marks of this data dir (`marks.redb`, or the PostgreSQL schema), opened on
    /// first use.
    pub fn marks(&self) -> Result<std::sync::Arc<MarkStore>, AppError> {
        self.marks
            .get_or_init(|| {
                MarkStore::open_with(&self.data_dir, self.config())
                    .map(std::sync::Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(AppError::Unavailable)
    }

    /// Mark one of the tenant's recent runs good or bad (see the module's docs): its
    /// cited memories get the matching signal about the question (once: marking a run
    /// again with the same verdict signals no memory twice), and the mark is kept.
    /// Another tenant's run is not found, as an unknown one; a bad request changes
    /// nothing.
    pub fn mark_run(
        &self,
        tenant: &Tenant,
        run_id: &str,
        req: &MarkRequest,
    ) -> Result<AnswerMark, AppError> {
        let report = self.run(tenant, run_id)?;
        let now = now_ms();
        let mut mark = mark_of(&report, req, now)?;
        let marks = self.marks()?;
        if !mark.memories.is_empty() {
            let signal = match mark.verdict {
                AnswerVerdict::Good => Signal::Confirmed,
                AnswerVerdict::Bad => Signal::Corrected,
            };
            // The same word on the same memory again (a retry, a second click) moves its
            // trust once.
            let said = marks
                .get(tenant, run_id)?
                .filter(|m| m.verdict == mark.verdict)
                .map(|m| m.memories)
                .unwrap_or_default();
            let mut kept = Vec::new();
            for id in std::mem::take(&mut mark.memories) {
                if said.contains(&id) {
                    kept.push(id);
                    continue;
                }
                match self.memory_signal(tenant, &id, signal, Some(&mark.question)) {
                    Ok(_) => kept.push(id),
                    Err(AppError::NotFound(_)) => mark.memories_gone.push(id),
                    Err(e) => return Err(e),
                }
            }
            mark.memories = kept;
        }
        marks.put(tenant, &mark)?;
        Ok(mark)
    }

    /// The tenant's marks on answers, oldest first.
    pub fn answer_marks(&self, tenant: &Tenant) -> Result<Vec<AnswerMark>, AppError> {
        self.marks()?.list(tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(run: &str, q: &str, verdict: AnswerVerdict, chunks: &[(&str, &str)]) -> AnswerMark {
        AnswerMark {
            schema: MARK_SCHEMA.into(),
            run_id: run.into(),
            question: q.into(),
            collection: "c".into(),
            verdict,
            passages: chunks
                .iter()
                .enumerate()
                .map(|(i, (chunk, text))| MarkedPassage {
                    n: i + 1,
                    chunk: chunk.to_string(),
                    title: String::new(),
                    text: text.to_string(),
                })
                .collect(),
            memories: Vec::new(),
            memories_gone: Vec::new(),
            abstained: false,
            note: None,
            marked_ms: 0,
        }
    }

    #[test]
    fn the_latest_mark_on_a_question_and_chunk_decides_its_pair() {
        use AnswerVerdict::{Bad, Good};
        let marks = [
            mark(
                "r1",
                "Who?",
                Good,
                &[("a#0", "A did it."), ("b#1", "B did.")],
            ),
            mark("r2", "who? ", Bad, &[("a#0", "A did it.")]),
            mark("r3", "When?", Good, &[("a#0", "In 1900."), ("c#0", "  ")]),
        ];
        let p = pairs(&marks);
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.question.as_str(), p.passage.as_str(), p.label))
            .collect();
        assert_eq!(
            got,
            [
                ("Who?", "B did.", 1.0),
                ("who?", "A did it.", 0.0),
                ("When?", "In 1900.", 1.0)
            ]
        );
        assert_eq!(p[1].source, "feedback:answer:r2:bad:a#0");
    }

    #[test]
    fn marks_are_kept_per_tenant_and_replaced_by_a_new_mark_on_the_same_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = MarkStore::open(dir.path()).unwrap();
        let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
        let mut m = mark("acme-1", "Who?", AnswerVerdict::Good, &[("a#0", "A.")]);
        store.put(&acme, &m).unwrap();
        m.verdict = AnswerVerdict::Bad;
        m.marked_ms = 5;
        store.put(&acme, &m).unwrap();
        store
            .put(&globex, &mark("globex-1", "Q", AnswerVerdict::Good, &[]))
            .unwrap();
        assert_eq!(store.list(&acme).unwrap(), [m.clone()]);
        assert_eq!(store.list(&globex).unwrap().len(), 1);
        assert!(store
            .list(&Tenant::new("initech").unwrap())
            .unwrap()
            .is_empty());
        drop(store);
        // Durable: a reopened store has it, and a backup copies it.
        let store = MarkStore::open(dir.path()).unwrap();
        assert_eq!(store.list(&acme).unwrap(), [m]);
        let copy = dir.path().join("copy.redb");
        assert_eq!(store.backup_to(&copy).unwrap(), 2);
    }
}
