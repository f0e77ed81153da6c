//! Ingest jobs: uploads staged on disk and ingested in the background, with their state
//! persisted in `<data dir>/jobs.redb` so a server killed mid-job resumes it on restart.
//!
//! A job's files are written to `<data dir>/uploads/<job id>/` before the job is
//! recorded (queued), so an accepted upload is never lost. One worker thread takes
//! queued jobs oldest first: it moves the files to `<data dir>/sources/<collection>/`
//! (an upload of the same name replaces the earlier version, as re-ingesting a file
//! does) and ingests them, checkpointing the job after every file. States:
//! `queued → parsing → chunking → embedding → indexed`, or `failed` / `cancelled`.
//! On open, a job found in a running state was interrupted: it is queued again
//! (ingest skips what it already committed, by content hash), and failed after
//! [`MAX_ATTEMPTS`] interruptions rather than retried forever.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

use neuralcore_store::reopen::ReopeningDb;
use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use crate::pg_jobs::PgJobs;
use crate::{App, AppError, Tenant};
use neuralcore_memory::now_ms;

const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");

/// The version of the job shape.
pub const JOB_SCHEMA: &str = "neuralcore.job/v1";
/// Interruptions (a server killed mid-job) after which a job fails instead of resuming.
pub const MAX_ATTEMPTS: u32 = 3;
/// Files one job may hold.
pub const MAX_FILES: usize = 1000;
/// How long a finished job (indexed, failed, cancelled) is kept after its last change:
/// older ones are deleted at start and then hourly, so the job store stays small.
pub const JOB_RETENTION_MS: u64 = 7 * 24 * 3600 * 1000;
/// Finished jobs kept per tenant within their retention: the newest this many, so a
/// tenant uploading without pause (the soak: 5.5 a second) keeps a bounded job store.
pub const JOB_KEEP_PER_TENANT: usize = 10_000;
/// How often the worker prunes finished jobs.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Longest name of a text document (its `.json` source fits the 200 bytes of a file name).
pub const MAX_TEXT_NAME_CHARS: usize = 48;
/// How uploaded sources are named in every answer: `upload:<name>`.
pub const UPLOAD_SCHEME: &str = "upload:";

/// Where a job is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for the worker.
    Queued,
    /// Reading files.
    Parsing,
    /// Cutting documents into chunks.
    Chunking,
    /// Embedding chunks.
    Embedding,
    /// Done: every file was handled (some may have failed: see `errors`).
    Indexed,
    /// The job could not run.
    Failed,
    /// Cancelled by its tenant; the files done before are kept.
    Cancelled,
}

impl JobState {
    /// Whether the job is over.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Indexed | JobState::Failed | JobState::Cancelled
        )
    }
}

/// Counts of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobCounts {
    /// Files in the job.
    pub files: usize,
    /// Files handled so far.
    pub files_done: usize,
    /// Files stored.
    pub ingested: usize,
    /// Files unchanged since an earlier upload.
    pub skipped: usize,
    /// Files that failed.
    pub failed: usize,
    /// Documents the stored files produced.
    pub documents: usize,
    /// Chunks newly written.
    pub chunks: usize,
    /// Chunk texts embedded by the model.
    pub embedded: usize,
}

/// A message about one file of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobFileMessage {
    /// The file's name as uploaded.
    pub file: String,
    /// What happened.
    pub message: String,
}

/// An ingest job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Job {
    /// `neuralcore.job/v1`.
    #[serde(default = "job_schema")]
    pub schema: String,
    /// `job_` and 24 hex characters.
    pub id: String,
    /// The tenant that submitted it.
    pub tenant: String,
    /// The collection, by the tenant's name.
    pub collection: String,
    /// Where it is.
    pub state: JobState,
    /// The files' names.
    pub files: Vec<String>,
    /// Counts so far.
    pub counts: JobCounts,
    /// One message per failed file.
    pub errors: Vec<JobFileMessage>,
    /// Warnings (lossy UTF-8, split texts, ...).
    pub warnings: Vec<JobFileMessage>,
    /// Why the whole job failed, when it did.
    pub error: Option<String>,
    /// Times the job was started (more than one: it was interrupted).
    pub attempts: u32,
    /// The tenant asked to cancel it.
    pub cancel_requested: bool,
    /// When it was submitted, milliseconds since 1970.
    pub created_ms: u64,
    /// When it last changed.
    pub updated_ms: u64,
}

impl Job {
    /// A new job, queued, for `files`.
    fn queued(id: String, tenant: &Tenant, collection: &str, files: &[Upload]) -> Job {
        let now = now_ms();
        Job {
            schema: JOB_SCHEMA.into(),
            id,
            tenant: tenant.as_str().into(),
            collection: collection.into(),
            state: JobState::Queued,
            files: files.iter().map(|f| f.name.clone()).collect(),
            counts: JobCounts {
                files: files.len(),
                ..Default::default()
            },
            errors: Vec::new(),
            warnings: Vec::new(),
            error: None,
            attempts: 0,
            cancel_requested: false,
            created_ms: now,
            updated_ms: now,
        }
    }
}

fn job_schema() -> String {
    JOB_SCHEMA.into()
}

/// One file of an upload.
#[derive(Debug, Clone)]
pub struct Upload {
    /// Its name (a plain file name with a supported extension).
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// A text to ingest, with a title and metadata (what `POST …/documents` takes as JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TextDocument {
    /// The source's name (`<name>.json` is stored; default `text-<12 hex of its SHA-256>`).
    #[serde(default)]
    #[schema(
        min_length = 1,
        max_length = 48,
        pattern = "^[^./\\\\\\u0000-\\u001f\\u007f-\\u009f][^/\\\\\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: Option<String>,
    /// A title.
    #[serde(default)]
    pub title: Option<String>,
    /// The text.
    #[schema(min_length = 1, pattern = "\\S")]
    pub text: String,
    /// Metadata kept with the document (and shown with its hits).
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

impl TextDocument {
    /// The upload this text becomes: a JSON source the JSON loader reads back with its
    /// title and metadata.
    pub fn into_upload(self, n: usize) -> Result<Upload, AppError> {
        if crate::blank(&self.text) {
            return Err(AppError::InvalidInput(format!("document {n} has no text")));
        }
        // Unnamed texts are named by their content: two different texts never replace
        // each other, the same text uploaded twice is one source.
        let mut name = self.name.unwrap_or_else(|| {
            use sha2::Digest;
            let d = sha2::Sha256::digest(self.text.as_bytes());
            let hex: String = d[..6].iter().map(|b| format!("{b:02x}")).collect();
            format!("text-{hex}")
        });
        if name.chars().count() > MAX_TEXT_NAME_CHARS {
            return Err(AppError::InvalidInput(format!(
                "document {n}'s name is longer than {MAX_TEXT_NAME_CHARS} characters"
            )));
        }
        if !name.ends_with(".json") {
            name.push_str(".json");
        }
        let mut obj = serde_json::Map::new();
        if let Some(t) = self.title {
            obj.insert("title".into(), t.into());
        }
        obj.insert("text".into(), self.text.into());
        if !self.metadata.is_empty() {
            obj.insert(
                "metadata".into(),
                serde_json::Value::Object(self.metadata.into_iter().collect()),
            );
        }
        let bytes = serde_json::to_vec(&serde_json::Value::Object(obj))
            .map_err(|e| AppError::Internal(format!("cannot encode a text: {e}")))?;
        Ok(Upload { name, bytes })
    }
}

/// Check an uploaded file's name: a plain name (no folders, no `..`, no hidden files,
/// no control characters, at most 200 bytes) with an extension a loader reads.
pub fn check_upload_name(name: &str) -> Result<(), AppError> {
    let bad = |why: &str| Err(AppError::InvalidInput(format!("file name {name:?} {why}")));
    if name.is_empty() || name.len() > 200 {
        return bad("must be 1 to 200 bytes");
    }
    if name.contains(['/', '\\', '\0']) || name.chars().any(char::is_control) {
        return bad("must be a plain file name (no folders or control characters)");
    }
    if name.starts_with('.') {
        return bad("must not start with a dot");
    }
    if neuralcore_ingest::loaders::loader_for(Path::new(name)).is_none() {
        return bad(
            "has no supported extension (txt, md, markdown, html, htm, pdf, json, jsonl, csv, tsv)",
        );
    }
    Ok(())
}

fn internal(e: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("job store: {e}"))
}

fn io(what: &str, e: std::io::Error) -> AppError {
    // A full disk or a read-only data dir is worth retrying later; say which, not where.
    match e.kind() {
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
            AppError::storage_full(what)
        }
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied => {
            AppError::Unavailable(format!("cannot {what}: the data dir is not writable"))
        }
        _ => AppError::Internal(format!("cannot {what}: {}", e.kind())),
    }
}

/// A redb error of the job store.
fn db_error(e: redb::Error) -> AppError {
    match e {
        redb::Error::Io(e) => io("update the job store", e),
        redb::Error::PreviousIo => {
            AppError::Unavailable("the job store is reopening after an I/O error".into())
        }
        redb::Error::DatabaseAlreadyOpen => AppError::Unavailable(
            "the job store is open in another process (a running server?)".into(),
        ),
        other => internal(other),
    }
}

/// A redb error inside a job store transaction (boxed: redb's is large).
fn bx(e: impl Into<redb::Error>) -> Box<redb::Error> {
    Box::new(e.into())
}

/// A job record that does not decode (as a redb error, inside a transaction).
fn bad_record(e: serde_json::Error) -> Box<redb::Error> {
    bx(redb::Error::Corrupted(format!(
        "a job record does not decode: {e}"
    )))
}

/// `jobs.redb`, reopened after an I/O error (a full disk) like the document store.
struct JobDb(ReopeningDb);

impl JobDb {
    fn open(path: &Path) -> Result<JobDb, AppError> {
        // A small page cache: redb's default is 1 GiB per database.
        let open = |p: &Path| redb::Builder::new().set_cache_size(8 << 20).create(p);
        let db = open(path).map_err(|e| db_error(e.into()))?;
        let path = path.to_path_buf();
        Ok(JobDb(ReopeningDb::new(db, Box::new(move || open(&path)))))
    }

    /// Run `f` in the database.
    fn with<T>(
        &self,
        f: impl FnOnce(&redb::Database) -> Result<T, Box<redb::Error>>,
    ) -> Result<T, AppError> {
        let db = self.0.get().map_err(|failed| match failed {
            Some(e) => db_error(e.into()),
            None => AppError::Unavailable("the job store is reopening after an I/O error".into()),
        })?;
        f(&db).map_err(|e| {
            if matches!(*e, redb::Error::Io(_) | redb::Error::PreviousIo) {
                self.0.broken().store(true, Ordering::SeqCst);
            }
            db_error(*e)
        })
    }
}

fn new_job_id() -> Result<String, AppError> {
    let mut b = [0u8; 12];
    getrandom::getrandom(&mut b).map_err(|e| internal(format!("no randomness: {e}")))?;
    Ok(format!(
        "job_{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    ))
}

/// Whether `id` looks like a job id (anything else is not found without a lookup).
fn valid_job_id(id: &str) -> bool {
    id.len() == 28
        && id.starts_with("job_")
        && id[4..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Where the jobs are queued.
enum Queue {
    /// `<data dir>/jobs.redb`, run by this process's worker only.
    Local(JobDb),
    /// The PostgreSQL store's schema, shared by every process ([`crate::pg_jobs`]).
    Shared(PgJobs),
}

/// The jobs of a data dir (or of the shared PostgreSQL queue) and their worker.
pub struct Jobs {
    queue: Queue,
    /// Jobs whose last change the job store could not take (a full disk): what readers
    /// see, until the worker writes them.
    unsaved: Mutex<BTreeMap<String, Job>>,
    data_dir: PathBuf,
    /// Bumped on every submit (and on shutdown) to wake the worker.
    wake: (Mutex<u64>, Condvar),
    /// The running job's id and its stop flag.
    running: Mutex<Option<(String, Arc<AtomicBool>)>>,
    shutdown: AtomicBool,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Jobs {
    /// Open (or create) `<data dir>/jobs.redb`; jobs interrupted by a crash are queued
    /// again (or failed after [`MAX_ATTEMPTS`]).
    pub fn open(data_dir: &Path) -> Result<Jobs, AppError> {
        std::fs::create_dir_all(data_dir).map_err(|e| io("create the data dir", e))?;
        let db = JobDb::open(&data_dir.join("jobs.redb"))?;
        Jobs::with_queue(data_dir, Queue::Local(db))
    }

    /// The jobs `config` asks for: with `[store] backend = "postgres"` the queue in the
    /// store's schema that every process shares (leases of `store.job_lease_secs`),
    /// else [`Jobs::open`].
    pub fn open_with(
        data_dir: &Path,
        config: &neuralcore_engine::Config,
    ) -> Result<Jobs, AppError> {
        if config.store.backend != neuralcore_engine::StoreBackendKind::Postgres {
            return Jobs::open(data_dir);
        }
        std::fs::create_dir_all(data_dir).map_err(|e| io("create the data dir", e))?;
        let store = neuralcore_engine::Engine::postgres_store(config)?;
        let lease = Duration::from_secs(config.store.job_lease_secs);
        Jobs::with_queue(data_dir, Queue::Shared(PgJobs::new(store, lease)?))
    }

    /// Whether the queue is shared through PostgreSQL.
    pub fn is_shared(&self) -> bool {
        matches!(self.queue, Queue::Shared(_))
    }

    fn with_queue(data_dir: &Path, queue: Queue) -> Result<Jobs, AppError> {
        let jobs = Jobs {
            queue,
            unsaved: Mutex::new(BTreeMap::new()),
            data_dir: data_dir.to_path_buf(),
            wake: (Mutex::new(0), Condvar::new()),
            running: Mutex::new(None),
            shutdown: AtomicBool::new(false),
            worker: Mutex::new(None),
        };
        jobs.recover()?;
        jobs.prune(now_ms())?;
        Ok(jobs)
    }

    /// Deletes the finished jobs older than [`JOB_RETENTION_MS`] at `now`, and a
    /// tenant's beyond its newest [`JOB_KEEP_PER_TENANT`]; how many.
    pub fn prune(&self, now: u64) -> Result<usize, AppError> {
        self.prune_keeping(now, JOB_KEEP_PER_TENANT)
    }

    fn prune_keeping(&self, now: u64, keep: usize) -> Result<usize, AppError> {
        let cutoff = now.saturating_sub(JOB_RETENTION_MS);
        let db = match &self.queue {
            Queue::Local(db) => db,
            Queue::Shared(pg) => return pg.prune(cutoff, keep),
        };
        db.with(|db| {
            let txn = db.begin_write().map_err(bx)?;
            let mut old = Vec::new();
            {
                let mut t = txn.open_table(JOBS).map_err(bx)?;
                // Each tenant's finished jobs within retention: (last change, id).
                let mut finished: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
                for e in t.iter().map_err(bx)? {
                    let (k, v) = e.map_err(bx)?;
                    let job: Job = serde_json::from_slice(v.value()).map_err(bad_record)?;
                    if !job.state.is_terminal() {
                        continue;
                    }
                    if job.updated_ms < cutoff {
                        old.push(k.value().to_string());
                    } else {
                        finished
                            .entry(job.tenant)
                            .or_default()
                            .push((job.updated_ms, k.value().to_string()));
                    }
                }
                for mut jobs in finished.into_values() {
                    if jobs.len() > keep {
                        jobs.sort_unstable_by(|a, b| b.cmp(a));
                        old.extend(jobs.drain(keep..).map(|(_, id)| id));
                    }
                }
                for k in &old {
                    t.remove(k.as_str()).map_err(bx)?;
                }
            }
            txn.commit().map_err(bx)?;
            Ok(old.len())
        })
    }

    fn recover(&self) -> Result<(), AppError> {
        // A shared queue needs no recovery at start: a job whose worker died is taken
        // over by any worker once its lease runs out.
        let Queue::Local(db) = &self.queue else {
            return Ok(());
        };
        let over = db.with(|db| {
            let txn = db.begin_write().map_err(bx)?;
            let mut over = Vec::new();
            {
                let mut t = txn.open_table(JOBS).map_err(bx)?;
                let mut fix = Vec::new();
                for e in t.iter().map_err(bx)? {
                    let (k, v) = e.map_err(bx)?;
                    let mut job: Job = serde_json::from_slice(v.value()).map_err(bad_record)?;
                    if job.state.is_terminal() || job.state == JobState::Queued {
                        continue;
                    }
                    job.updated_ms = now_ms();
                    if job.cancel_requested {
                        job.state = JobState::Cancelled;
                    } else if job.attempts >= MAX_ATTEMPTS {
                        job.state = JobState::Failed;
                        job.error = Some(format!(
                            "interrupted {} times (the server stopped while it ran); upload again",
                            job.attempts
                        ));
                    } else {
                        tracing::info!("job {} was interrupted: queued again", job.id);
                        job.state = JobState::Queued;
                    }
                    fix.push((k.value().to_string(), job));
                }
                for (k, job) in fix {
                    if job.state.is_terminal() {
                        over.push(job.id.clone());
                    }
                    let bytes = serde_json::to_vec(&job).map_err(bad_record)?;
                    t.insert(k.as_str(), bytes.as_slice()).map_err(bx)?;
                }
            }
            txn.commit().map_err(bx)?;
            Ok(over)
        })?;
        for id in over {
            let _ = std::fs::remove_dir_all(self.staging(&id));
        }
        Ok(())
    }

    /// The source id of an uploaded file at `path` (in a collection's sources folder),
    /// when it is not the path: on the shared queue, `upload:<name>`, the same whichever
    /// worker (with whichever data dir) stored it, so a retry elsewhere or a new version
    /// through another worker finds it.
    fn upload_id(&self, path: &Path) -> Option<String> {
        match self.queue {
            Queue::Shared(_) => path
                .file_name()
                .map(|n| format!("{UPLOAD_SCHEME}{}", n.to_string_lossy())),
            Queue::Local(_) => None,
        }
    }

    /// The id an uploaded file at `path` is stored under.
    fn stored_id(&self, path: &Path) -> Option<String> {
        if let Some(id) = self.upload_id(path) {
            return Some(id);
        }
        let (dir, name) = (path.parent()?, path.file_name()?);
        let dir = std::fs::canonicalize(dir).ok()?;
        Some(dir.join(name).to_string_lossy().into_owned())
    }

    fn staging(&self, id: &str) -> PathBuf {
        self.data_dir.join("uploads").join(id)
    }

    /// Copy the job records into a new file at `dest`, as committed now; how many.
    pub fn backup_to(&self, dest: &Path) -> Result<u64, AppError> {
        let Queue::Local(db) = &self.queue else {
            return Err(AppError::InvalidInput(
                "the jobs are queued in PostgreSQL: back them up with pg_dump --schema".into(),
            ));
        };
        let db = db.0.get().map_err(|_| {
            AppError::Unavailable("the job store is reopening after an I/O error".into())
        })?;
        let mut copy = neuralcore_store::copy::RedbCopy::begin(&db, dest).map_err(internal)?;
        copy.table(JOBS).map_err(internal)?;
        copy.finish().map_err(internal)
    }

    /// Where the uploaded sources of a stored collection live.
    pub fn sources_dir(data_dir: &Path, stored_collection: &str) -> PathBuf {
        data_dir.join("sources").join(stored_collection)
    }

    fn put(&self, job: &Job) -> Result<(), AppError> {
        let db = match &self.queue {
            Queue::Local(db) => db,
            Queue::Shared(pg) => {
                // Only while this worker holds the job: one that lost it to another
                // changes nothing.
                if !pg.put_leased(job)? {
                    tracing::warn!("job {}: no longer this worker's; not written", job.id);
                }
                self.unsaved
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&job.id);
                return Ok(());
            }
        };
        let bytes = serde_json::to_vec(job).map_err(internal)?;
        db.with(|db| {
            let txn = db.begin_write().map_err(bx)?;
            {
                let mut t = txn.open_table(JOBS).map_err(bx)?;
                t.insert(job.id.as_str(), bytes.as_slice()).map_err(bx)?;
            }
            txn.commit().map_err(bx)
        })?;
        self.unsaved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&job.id);
        Ok(())
    }

    /// Write the end of a job; when the job store cannot take it (a full disk), readers
    /// see it all the same, and the worker writes it later.
    fn put_final(&self, job: &Job) -> Result<(), AppError> {
        self.put(job).inspect_err(|_| {
            self.unsaved
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(job.id.clone(), job.clone());
        })
    }

    /// Write the jobs the job store could not take before.
    fn flush_unsaved(&self) {
        let jobs: Vec<Job> = {
            let u = self.unsaved.lock().unwrap_or_else(PoisonError::into_inner);
            u.values().cloned().collect()
        };
        for job in jobs {
            if self.put(&job).is_ok() {
                tracing::info!("job {}: its end is saved now", job.id);
            }
        }
    }

    fn load(&self, id: &str) -> Result<Option<Job>, AppError> {
        if let Some(j) = self
            .unsaved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
        {
            return Ok(Some(j.clone()));
        }
        let db = match &self.queue {
            Queue::Local(db) => db,
            Queue::Shared(pg) => return pg.load(id),
        };
        let bytes = db.with(|db| {
            let txn = db.begin_read().map_err(bx)?;
            let t = match txn.open_table(JOBS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(bx(e)),
            };
            Ok(t.get(id).map_err(bx)?.map(|v| v.value().to_vec()))
        })?;
        bytes
            .map(|b| serde_json::from_slice(&b).map_err(internal))
            .transpose()
    }

    fn all(&self) -> Result<Vec<Job>, AppError> {
        let all = match &self.queue {
            Queue::Shared(pg) => pg.all()?,
            Queue::Local(db) => db.with(|db| {
                let txn = db.begin_read().map_err(bx)?;
                let t = match txn.open_table(JOBS) {
                    Ok(t) => t,
                    Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                    Err(e) => return Err(bx(e)),
                };
                let mut out = Vec::new();
                for e in t.iter().map_err(bx)? {
                    let (_, v) = e.map_err(bx)?;
                    out.push(serde_json::from_slice::<Job>(v.value()).map_err(bad_record)?);
                }
                Ok(out)
            })?,
        };
        let unsaved = self.unsaved.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<Job> = all
            .into_iter()
            .filter(|j| !unsaved.contains_key(&j.id))
            .collect();
        out.extend(unsaved.values().cloned());
        Ok(out)
    }

    /// Stage `files` and queue a job that ingests them into the tenant's `collection`
    /// (created when missing). Every name is checked before anything is written.
    pub fn submit(
        &self,
        tenant: &Tenant,
        collection: &str,
        files: Vec<Upload>,
    ) -> Result<Job, AppError> {
        tenant.stored(collection)?;
        if files.is_empty() {
            return Err(AppError::InvalidInput("the upload holds no files".into()));
        }
        if files.len() > MAX_FILES {
            return Err(AppError::InvalidInput(format!(
                "the upload holds {} files; at most {MAX_FILES} a job",
                files.len()
            )));
        }
        let mut names = std::collections::HashSet::new();
        for f in &files {
            check_upload_name(&f.name)?;
            if !names.insert(f.name.as_str()) {
                return Err(AppError::InvalidInput(format!(
                    "file name {:?} appears twice in one upload",
                    f.name
                )));
            }
        }
        let id = new_job_id()?;
        if let Queue::Shared(pg) = &self.queue {
            // The files go into the queue with the job, in one transaction: any
            // worker, on any machine, can run it.
            let job = Job::queued(id, tenant, collection, &files);
            pg.insert(&job, &files)?;
            self.notify();
            return Ok(job);
        }
        let dir = self.staging(&id);
        let staged = (|| {
            std::fs::create_dir_all(&dir)?;
            for f in &files {
                let p = dir.join(&f.name);
                let mut out = std::fs::File::create(&p)?;
                std::io::Write::write_all(&mut out, &f.bytes)?;
                out.sync_all()?;
            }
            Ok(())
        })();
        if let Err(e) = staged {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(io("store the upload", e));
        }
        let job = Job::queued(id, tenant, collection, &files);
        if let Err(e) = self.put(&job) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
        self.notify();
        Ok(job)
    }

    fn notify(&self) {
        let (m, c) = &self.wake;
        *m.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        c.notify_all();
    }

    /// One of the tenant's jobs; another tenant's is not found.
    pub fn get(&self, tenant: &Tenant, id: &str) -> Result<Job, AppError> {
        let not_found = || AppError::NotFound(format!("no job {id:?}"));
        if !valid_job_id(id) {
            return Err(not_found());
        }
        match self.load(id)? {
            Some(j) if j.tenant == tenant.as_str() => Ok(j),
            _ => Err(not_found()),
        }
    }

    /// The tenant's jobs, newest first, at most `limit`.
    pub fn list(&self, tenant: &Tenant, limit: usize) -> Result<Vec<Job>, AppError> {
        let mut jobs: Vec<Job> = self
            .all()?
            .into_iter()
            .filter(|j| j.tenant == tenant.as_str())
            .collect();
        jobs.sort_by(|a, b| b.created_ms.cmp(&a.created_ms).then(b.id.cmp(&a.id)));
        jobs.truncate(limit);
        Ok(jobs)
    }

    /// Counts of every tenant's jobs by state (for metrics).
    pub fn counts_by_state(&self) -> Result<BTreeMap<JobState, usize>, AppError> {
        let mut out = BTreeMap::new();
        for j in self.all()? {
            *out.entry(j.state).or_insert(0) += 1;
        }
        Ok(out)
    }

    /// Cancel one of the tenant's jobs: a queued one at once, a running one after the
    /// file it is on (the files done are kept). A finished job is returned as it is.
    pub fn cancel(&self, tenant: &Tenant, id: &str) -> Result<Job, AppError> {
        {
            // The worker picks jobs and clears `running` under this lock: the job read
            // here is the one it sees (a queued job cannot start, a running one cannot
            // finish unseen).
            let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            let mut job = self.get(tenant, id)?;
            if job.state.is_terminal() {
                return Ok(job);
            }
            if let Some((rid, flag)) = running.as_ref() {
                if rid == id {
                    // The worker's own copy takes this up at its next checkpoint.
                    flag.store(true, Ordering::SeqCst);
                }
            }
            if let Queue::Shared(pg) = &self.queue {
                // Queued: cancelled now (the row is locked against a claim); running,
                // here or in another process: its worker's next heartbeat reads it.
                drop(running);
                let job = pg
                    .cancel(id)?
                    .ok_or_else(|| AppError::NotFound(format!("no job {id:?}")))?;
                return Ok(job);
            }
            if let Some((rid, _)) = running.as_ref() {
                if rid == id {
                    job.cancel_requested = true;
                    job.updated_ms = now_ms();
                    self.put(&job)?;
                    return Ok(job);
                }
            }
            // Not running: the worker cannot pick it up while `running` is held.
            job.state = JobState::Cancelled;
            job.cancel_requested = true;
            job.updated_ms = now_ms();
            self.put(&job)?;
            drop(running);
            let _ = std::fs::remove_dir_all(self.staging(id));
            Ok(job)
        }
    }

    /// Mark a job failed.
    fn fail(&self, tenant: &str, id: &str, why: &str) -> Result<(), AppError> {
        let mut job = self.get(&Tenant::new(tenant)?, id)?;
        job.state = JobState::Failed;
        job.error = Some(why.into());
        job.updated_ms = now_ms();
        let _ = std::fs::remove_dir_all(self.staging(id));
        self.put_final(&job)
    }

    /// Tell the worker to stop after its current file (without waiting for it).
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.notify();
    }

    /// Whether the server is stopping (job event streams end then).
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Start the worker thread over `app` (once; later calls do nothing).
    pub fn start_worker(self: &Arc<Self>, app: Weak<App>) {
        let mut w = self.worker.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_some() {
            return;
        }
        let jobs = self.clone();
        *w = std::thread::Builder::new()
            .name("neuralcore-jobs".into())
            .spawn(move || jobs.work(app))
            .map_err(|e| tracing::error!("cannot start the job worker: {e}"))
            .ok();
    }

    /// Stop the worker: the running job stops after its current file and stays queued
    /// (it resumes on the next start); waits for the worker up to `wait`.
    pub fn shutdown(&self, wait: Duration) {
        // The running job sees this between files (its own stop flag is for cancels).
        self.shutdown.store(true, Ordering::SeqCst);
        self.notify();
        let handle = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = handle {
            let deadline = std::time::Instant::now() + wait;
            while !h.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if h.is_finished() {
                let _ = h.join();
            } else {
                tracing::warn!("the job worker is still busy; its job resumes on restart");
            }
        }
    }

    fn next_queued(&self) -> Result<Option<(Job, Arc<AtomicBool>)>, AppError> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Queue::Shared(pg) = &self.queue {
            let Some((job, files)) = pg.claim()? else {
                return Ok(None);
            };
            // The job's files into this worker's staging folder, where the embedded
            // queue keeps them: the run is then the same.
            let dir = self.staging(&job.id);
            let staged = (|| {
                std::fs::create_dir_all(&dir)?;
                for (name, bytes) in &files {
                    check_upload_name(name).map_err(std::io::Error::other)?;
                    std::fs::write(dir.join(name), bytes)?;
                }
                Ok::<_, std::io::Error>(())
            })();
            if let Err(e) = staged {
                let mut job = job;
                job.state = JobState::Failed;
                job.error = Some("this worker could not stage the job's files".into());
                job.updated_ms = now_ms();
                tracing::error!("job {}: staging its files: {e}", job.id);
                let _ = std::fs::remove_dir_all(&dir);
                self.put_final(&job)?;
                return Ok(None);
            }
            let flag = Arc::new(AtomicBool::new(job.cancel_requested));
            *running = Some((job.id.clone(), flag.clone()));
            return Ok(Some((job, flag)));
        }
        let mut queued: Vec<Job> = self
            .all()?
            .into_iter()
            .filter(|j| j.state == JobState::Queued)
            .collect();
        queued.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        let Some(mut job) = queued.into_iter().next() else {
            return Ok(None);
        };
        job.state = JobState::Parsing;
        job.attempts += 1;
        job.updated_ms = now_ms();
        self.put(&job)?;
        let flag = Arc::new(AtomicBool::new(false));
        *running = Some((job.id.clone(), flag.clone()));
        Ok(Some((job, flag)))
    }

    fn work(&self, app: Weak<App>) {
        let mut pruned = std::time::Instant::now();
        loop {
            if self.shutdown.load(Ordering::SeqCst) {
                return;
            }
            if pruned.elapsed() >= PRUNE_EVERY {
                pruned = std::time::Instant::now();
                match self.prune(now_ms()) {
                    Ok(0) => {}
                    Ok(n) => tracing::info!("{n} finished job(s) past their retention deleted"),
                    Err(e) => tracing::warn!("pruning old jobs: {e}"),
                }
            }
            let seen = *self.wake.0.lock().unwrap_or_else(|p| p.into_inner());
            self.flush_unsaved();
            match self.next_queued() {
                Ok(Some((job, flag))) => {
                    let Some(app) = app.upgrade() else { return };
                    let id = job.id.clone();
                    let tenant = job.tenant.clone();
                    // A panic in a loader or the model fails the job, not the worker.
                    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        self.run_leased(&app, job, &flag)
                    }));
                    let done = match done {
                        Ok(r) => r,
                        Err(_) => {
                            tracing::error!("job {id}: the worker panicked");
                            self.fail(&tenant, &id, "an internal error stopped the job")
                        }
                    };
                    *self.running.lock().unwrap_or_else(|p| p.into_inner()) = None;
                    if let Err(e) = done {
                        tracing::error!("job {id}: {e}");
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => tracing::error!("the job worker cannot read its jobs: {e}"),
            }
            let (m, c) = &self.wake;
            let g = m.lock().unwrap_or_else(|p| p.into_inner());
            if *g == seen {
                let _ = c.wait_timeout(g, Duration::from_secs(1));
            }
        }
    }

    /// Run one job to its end (or to a stop), checkpointing it after every file.
    ///
    /// Files move from the staging folder to the collection's sources folder one group
    /// at a time, right before the group is ingested. A file replacing an earlier upload
    /// of the same name keeps the earlier one aside until the new one is stored: a new
    /// version that fails, or is not reached before a cancel, gives the old one back.
    /// Run one job; on the shared queue, with a heartbeat renewing this worker's lease
    /// every third of it meanwhile (and passing on a cancel asked by another process).
    /// A lease found lost stops the job like a shutdown: another worker has it now.
    fn run_leased(&self, app: &App, job: Job, stop: &Arc<AtomicBool>) -> Result<(), AppError> {
        let lost = AtomicBool::new(false);
        let Queue::Shared(pg) = &self.queue else {
            return self.run(app, job, stop, &lost);
        };
        let id = job.id.clone();
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let every = pg.lease / 3;
                let mut last = std::time::Instant::now();
                while !done.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                    if last.elapsed() < every {
                        continue;
                    }
                    last = std::time::Instant::now();
                    match pg.heartbeat(&id) {
                        Ok(Some(cancel)) => {
                            if cancel {
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                        Ok(None) => {
                            tracing::warn!("job {id}: this worker's lease is gone; stopping");
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        // The database is away: the lease may run out meanwhile, and
                        // then the next heartbeat says so.
                        Err(e) => tracing::warn!("job {id}: heartbeat: {e}"),
                    }
                }
            });
            let r = self.run(app, job, stop, &lost);
            done.store(true, Ordering::SeqCst);
            r
        })
    }

    fn run(
        &self,
        app: &App,
        mut job: Job,
        stop: &Arc<AtomicBool>,
        lost: &AtomicBool,
    ) -> Result<(), AppError> {
        let tenant = Tenant::new(&job.tenant)?;
        let staging = self.staging(&job.id);
        let mut stopped = false;
        let outcome: Result<(), AppError> = (|| {
            let stored = tenant.stored(&job.collection)?;
            // The collection exists once a job for it ran, even if every file failed.
            app.create_collection(&tenant, &job.collection)?;
            let dest = Jobs::sources_dir(&self.data_dir, &stored);
            std::fs::create_dir_all(&dest).map_err(|e| io("store the sources", e))?;
            // Staged files, or (a job resumed after a crash) files already moved.
            let files: Vec<(String, u64)> = job
                .files
                .iter()
                .filter_map(|name| {
                    let size = |p: PathBuf| std::fs::metadata(p).ok().map(|m| m.len());
                    size(staging.join(name))
                        .or_else(|| size(dest.join(name)))
                        .map(|n| (name.clone(), n))
                })
                .collect();
            // Counts start over: a resumed job re-reads every file (the ones it had
            // committed are skipped as unchanged).
            job.counts = JobCounts {
                files: job.files.len(),
                ..Default::default()
            };
            job.errors.clear();
            job.warnings.clear();
            let collection = job.collection.clone();
            let mut obs = JobObserver {
                jobs: self,
                job: &mut job,
                stop,
                shutdown: &self.shutdown,
                lost,
                names: files
                    .iter()
                    .map(|(n, _)| (dest.join(n), n.clone()))
                    .collect(),
                done: Vec::new(),
            };
            let sizes: Vec<u64> = files.iter().map(|f| f.1).collect();
            // In groups of about GROUP_BYTES, each its own commit: the store's write lock
            // (which every other write of the server waits for) is held for one group's
            // embedding, not the whole job's, and a cancel lands between groups too.
            for range in groups(&sizes, GROUP_BYTES) {
                let mut moved: Vec<Placed> = Vec::new();
                for (name, _) in &files[range] {
                    match place(&staging, &dest, name) {
                        Ok(p) => moved.push(p),
                        Err(e) => {
                            settle(&moved, &obs.done, false);
                            return Err(e);
                        }
                    }
                }
                let paths: Vec<PathBuf> = moved.iter().map(|m| m.path.clone()).collect();
                let result = app.ingest(&tenant, &paths, &collection, &mut obs);
                if let Err(e) = &result {
                    // The group's commit failed: a file reported stored may not be.
                    obs.unstore(app, &stored, &paths, e);
                }
                let requeue = (self.shutdown.load(Ordering::SeqCst) || lost.load(Ordering::SeqCst))
                    && !stop.load(Ordering::SeqCst);
                settle(&moved, &obs.done, requeue);
                if let Err(e) =
                    undo_partial(self, app, &tenant, &collection, &stored, &moved, &obs.done)
                {
                    tracing::warn!("job {}: undoing a partial source failed: {e}", obs.job.id);
                }
                match result {
                    Ok(summary) if summary.cancelled => {
                        stopped = true;
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => return Err(e),
                }
                if neuralcore_engine::IngestObserver::cancelled(&obs) {
                    stopped = true;
                    break;
                }
            }
            Ok(())
        })();
        job.cancel_requested |= stop.load(Ordering::SeqCst);
        match outcome {
            Ok(()) if stopped && !job.cancel_requested => {
                // Shutting down: back in the queue with the files not yet read; the next
                // start resumes it.
                job.state = JobState::Queued;
                job.updated_ms = now_ms();
                return self.put_final(&job);
            }
            Ok(()) if stopped => job.state = JobState::Cancelled,
            Ok(()) => job.state = JobState::Indexed,
            Err(AppError::Unavailable(m)) if self.is_shared() && !job.cancel_requested => {
                // The shared store went away (PostgreSQL restarting, the network): the
                // job goes back to the queue, to resume (committed files skipped) once
                // the database is back, by this worker or another. Written when it can
                // be; meanwhile the lease runs out and any worker's claim takes it
                // (counted as an attempt: a store that keeps failing fails the job).
                tracing::warn!(
                    "job {}: the store is unavailable ({m}): queued again",
                    job.id
                );
                job.state = JobState::Queued;
                job.updated_ms = now_ms();
                return self.put_final(&job);
            }
            Err(e) => {
                job.state = JobState::Failed;
                job.error = Some(match &e {
                    AppError::Internal(m) => {
                        tracing::error!("job {}: {m}", job.id);
                        "an internal error stopped the job (the server's log has the detail)".into()
                    }
                    AppError::StorageFull(m) => {
                        tracing::warn!("job {}: {m}", job.id);
                        "the disk of the data dir is full: the files not stored by then were \
                         dropped (see `counts` and `errors`); free some space, then upload them \
                         again"
                            .into()
                    }
                    other => public_message(other, &self.data_dir),
                });
            }
        }
        let _ = std::fs::remove_dir_all(&staging);
        job.updated_ms = now_ms();
        self.put_final(&job)
    }
}

/// A file of a job put in its collection's sources folder.
struct Placed {
    /// Where it is now.
    path: PathBuf,
    /// Where it was staged, when this run moved it.
    staged: Option<PathBuf>,
    /// The earlier upload of the same name, kept aside until this one is stored.
    previous: Option<PathBuf>,
}

/// Move `name` from `staging` to `dest` (the earlier file of that name aside).
fn place(staging: &Path, dest: &Path, name: &str) -> Result<Placed, AppError> {
    let staged = staging.join(name);
    let path = dest.join(name);
    // `.previous` is no extension a loader reads: no upload can be named so.
    let aside = staging.join(format!("{name}.previous"));
    if !staged.exists() {
        // Moved by an earlier attempt that was killed: the earlier version it set aside
        // is still there, to come back if this one is not stored.
        return Ok(Placed {
            path,
            staged: None,
            previous: aside.exists().then_some(aside),
        });
    }
    let previous = if path.exists() {
        std::fs::rename(&path, &aside).map_err(|e| io("set an earlier source aside", e))?;
        Some(aside)
    } else {
        None
    };
    if let Err(e) = std::fs::rename(&staged, &path) {
        if let Some(p) = &previous {
            let _ = std::fs::rename(p, &path);
        }
        return Err(io("store a source", e));
    }
    Ok(Placed {
        path,
        staged: Some(staged),
        previous,
    })
}

/// After a group: a stored file stays and its earlier version goes; a file that failed
/// (or was not reached) gives the earlier version back, or leaves nothing behind; with
/// `requeue` (shutting down) a file not reached goes back to the staging folder.
fn settle(placed: &[Placed], done: &[Done], requeue: bool) {
    for p in placed {
        let outcome = done.iter().find(|d| d.path == p.path).map(|d| d.stored);
        match outcome {
            Some(true) => {
                if let Some(prev) = &p.previous {
                    let _ = std::fs::remove_file(prev);
                }
                continue;
            }
            None if requeue => {
                if let Some(staged) = &p.staged {
                    let _ = std::fs::rename(&p.path, staged);
                }
            }
            _ => {
                if p.staged.is_some() {
                    let _ = std::fs::remove_file(&p.path);
                }
            }
        }
        if let Some(prev) = &p.previous {
            let _ = std::fs::rename(prev, &p.path);
        }
    }
}

/// A file that failed after some of its batches had committed left its source partial
/// (the engine keeps what it stored). An upload that failed changes nothing, so the
/// collection goes back to what it held: the earlier version, which [`settle`] put back,
/// is ingested again (it replaces the partial one and embeds nothing it had not), or,
/// without one, the source is removed.
fn undo_partial(
    jobs: &Jobs,
    app: &App,
    tenant: &Tenant,
    collection: &str,
    stored: &str,
    moved: &[Placed],
    done: &[Done],
) -> Result<(), AppError> {
    for p in moved {
        if !done.iter().any(|d| d.path == p.path && !d.stored) {
            continue;
        }
        let Some(id) = jobs.stored_id(&p.path) else {
            continue;
        };
        let partial = app
            .engine()
            .store()
            .source(stored, &id)
            .map_err(neuralcore_engine::EngineError::from)?
            .is_some_and(|s| s.partial.is_some());
        if !partial {
            continue;
        }
        if p.previous.is_some() && p.path.exists() {
            // `settle` put the earlier version back: it replaces the partial one.
            app.ingest(
                tenant,
                std::slice::from_ref(&p.path),
                collection,
                &mut UploadIds(jobs),
            )?;
        } else {
            // No earlier version (or a resumed job's, already gone): the source goes, and
            // the failing file with it.
            {
                let _writing = app.writing();
                app.engine().remove(stored, &[id])?;
            }
            let _ = std::fs::remove_file(&p.path);
        }
    }
    Ok(())
}

/// Raw bytes of files one commit of a job takes (a file larger than this is a group of its
/// own).
const GROUP_BYTES: u64 = 128 * 1024;

/// Index ranges of files in runs of about `max` bytes each (by `sizes`), in order.
fn groups(sizes: &[u64], max: u64) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, size) in sizes.iter().enumerate() {
        if i > start && bytes + size > max {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

/// Whether the store holds `path` as it is on disk (its source has the file's hash); not
/// when that cannot be told.
fn in_store(jobs: &Jobs, app: &App, stored_collection: &str, path: &Path) -> bool {
    use sha2::Digest;
    let Some(id) = jobs.stored_id(path) else {
        return false;
    };
    let Ok(Some(source)) = app.engine().store().source(stored_collection, &id) else {
        return false;
    };
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let hex: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    source.raw_sha256 == hex && source.partial.is_none()
}

/// An error's message without the server's paths.
fn public_message(e: &AppError, data_dir: &Path) -> String {
    let mut m = e.to_string();
    for dir in [
        std::fs::canonicalize(data_dir).ok(),
        Some(data_dir.to_path_buf()),
    ]
    .into_iter()
    .flatten()
    {
        m = m.replace(&*dir.to_string_lossy(), "<data dir>");
    }
    m
}

/// Follows an ingest and checkpoints its job.
struct JobObserver<'a> {
    jobs: &'a Jobs,
    job: &'a mut Job,
    stop: &'a AtomicBool,
    shutdown: &'a AtomicBool,
    /// This worker lost the job's lease (shared queue): stop as for a shutdown.
    lost: &'a AtomicBool,
    names: BTreeMap<PathBuf, String>,
    /// Files handled, and whether each was stored (or unchanged).
    done: Vec<Done>,
}

/// A file an ingest handled.
struct Done {
    path: PathBuf,
    /// Stored (or unchanged).
    stored: bool,
    /// Documents and new chunks it counted, when it was ingested.
    ingested: Option<(usize, usize)>,
}

impl JobObserver<'_> {
    fn name(&self, path: &Path) -> String {
        self.names.get(path).cloned().unwrap_or_else(|| {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        })
    }

    /// After a failed ingest of `paths` (its last commit did not happen): the files the
    /// store does not hold count as failed, with why (those reported stored, and those it
    /// did not reach).
    fn unstore(&mut self, app: &App, stored_collection: &str, paths: &[PathBuf], e: &AppError) {
        let why = match e {
            AppError::StorageFull(_) => "not stored: the disk of the data dir is full",
            _ => "not stored: the job failed before it was committed",
        };
        for path in paths {
            let c = &mut self.job.counts;
            match self.done.iter_mut().find(|d| d.path == *path) {
                Some(d) if !d.stored => continue,
                Some(d) => {
                    if in_store(self.jobs, app, stored_collection, path) {
                        continue;
                    }
                    d.stored = false;
                    if let Some((documents, chunks)) = d.ingested {
                        c.ingested -= 1;
                        c.documents -= documents;
                        c.chunks -= chunks;
                    } else {
                        c.skipped -= 1;
                    }
                }
                None => {
                    c.files_done += 1;
                    self.done.push(Done {
                        path: path.clone(),
                        stored: false,
                        ingested: None,
                    });
                }
            }
            self.job.counts.failed += 1;
            let file = self.name(path);
            self.job.errors.push(JobFileMessage {
                file,
                message: why.into(),
            });
        }
    }

    fn set_state(&mut self, state: JobState) {
        if self.job.state != state {
            self.job.state = state;
            self.checkpoint();
        }
    }

    fn checkpoint(&mut self) {
        self.job.cancel_requested |= self.stop.load(Ordering::SeqCst);
        self.job.updated_ms = now_ms();
        if let Err(e) = self.jobs.put(self.job) {
            tracing::warn!("job {}: cannot checkpoint: {e}", self.job.id);
        }
    }
}

impl neuralcore_engine::IngestObserver for JobObserver<'_> {
    fn document(&mut self) {
        self.set_state(JobState::Chunking);
    }

    fn file_done(&mut self, path: &Path, outcome: &neuralcore_engine::FileOutcome) {
        use neuralcore_engine::FileOutcome;
        let c = &mut self.job.counts;
        c.files_done += 1;
        let mut ingested = None;
        let stored = match outcome {
            FileOutcome::Ingested {
                documents,
                new_chunks,
            } => {
                c.ingested += 1;
                c.documents += documents;
                c.chunks += new_chunks;
                ingested = Some((*documents, *new_chunks));
                true
            }
            FileOutcome::Skipped { .. } => {
                c.skipped += 1;
                true
            }
            FileOutcome::Failed { reason } => {
                c.failed += 1;
                let file = self.name(path);
                let message = public_message(&AppError::InvalidInput(reason.clone()), {
                    &self.jobs.data_dir
                });
                self.job.errors.push(JobFileMessage { file, message });
                false
            }
        };
        self.done.push(Done {
            path: path.to_path_buf(),
            stored,
            ingested,
        });
        self.job.state = JobState::Parsing;
        self.checkpoint();
    }

    fn warning(&mut self, path: &Path, message: &str) {
        let file = self.name(path);
        self.job.warnings.push(JobFileMessage {
            file,
            message: message.to_string(),
        });
    }

    fn embedded(&mut self, texts: usize) {
        self.job.counts.embedded += texts;
        self.set_state(JobState::Embedding);
    }

    fn cancelled(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
            || self.shutdown.load(Ordering::SeqCst)
            || self.lost.load(Ordering::SeqCst)
    }

    fn source_id(&self, path: &Path) -> Option<String> {
        self.jobs.upload_id(path)
    }
}

/// An ingest of uploads outside a job's run (giving an earlier version back): only the
/// sources' ids, as the job's observer gives them.
struct UploadIds<'a>(&'a Jobs);

impl neuralcore_engine::IngestObserver for UploadIds<'_> {
    fn source_id(&self, path: &Path) -> Option<String> {
        self.0.upload_id(path)
    }
}

/// The names front ends show for one collection's sources: `upload:<name>` for an
/// uploaded one, else the source id as stored (a path or URI the tenant's own CLI
/// ingested). Made once per answer: the folder is resolved once, not per source.
pub struct PublicNames {
    prefixes: Vec<String>,
}

impl PublicNames {
    /// The names of `stored_collection`'s sources in `data_dir`.
    pub fn new(data_dir: &Path, stored_collection: &str) -> PublicNames {
        let dir = Jobs::sources_dir(data_dir, stored_collection);
        let prefixes = [std::fs::canonicalize(&dir).ok(), Some(dir)]
            .into_iter()
            .flatten()
            .map(|d| format!("{}/", d.to_string_lossy()))
            .collect();
        PublicNames { prefixes }
    }

    /// The public name of `source_id`.
    pub fn of(&self, source_id: &str) -> String {
        self.prefixes
            .iter()
            .find_map(|p| source_id.strip_prefix(p.as_str()))
            .map(|rest| format!("{UPLOAD_SCHEME}{rest}"))
            .unwrap_or_else(|| source_id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_job_gives_back_the_earlier_version_of_a_file_it_could_not_store() {
        let tmp = tempfile::tempdir().unwrap();
        let (staging, dest) = (tmp.path().join("uploads/job"), tmp.path().join("sources/c"));
        std::fs::create_dir_all(&staging).unwrap();
        std::fs::create_dir_all(&dest).unwrap();
        std::fs::write(dest.join("a.md"), "old").unwrap();
        std::fs::write(staging.join("a.md"), "new").unwrap();
        // The first attempt moves the new version in, the old one aside, and is killed.
        let p = place(&staging, &dest, "a.md").unwrap();
        assert!(p.previous.is_some());
        drop(p);
        // The resumed attempt finds the file moved; it fails to store it.
        let p = place(&staging, &dest, "a.md").unwrap();
        assert_eq!(p.previous, Some(staging.join("a.md.previous")));
        let failed = Done {
            path: dest.join("a.md"),
            stored: false,
            ingested: None,
        };
        settle(&[p], &[failed], false);
        assert_eq!(std::fs::read_to_string(dest.join("a.md")).unwrap(), "old");
        assert!(!staging.join("a.md.previous").exists());
        // Stored on the resumed attempt instead: the earlier version goes.
        std::fs::write(staging.join("a.md"), "new").unwrap();
        drop(place(&staging, &dest, "a.md").unwrap());
        let p = place(&staging, &dest, "a.md").unwrap();
        let stored = Done {
            path: dest.join("a.md"),
            stored: true,
            ingested: Some((1, 1)),
        };
        settle(&[p], &[stored], false);
        assert_eq!(std::fs::read_to_string(dest.join("a.md")).unwrap(), "new");
        assert!(!staging.join("a.md.previous").exists());
    }

    #[test]
    fn finished_jobs_past_their_retention_are_pruned_and_others_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let jobs = Jobs::open(tmp.path()).unwrap();
        let now = now_ms();
        let old = now - JOB_RETENTION_MS - 1;
        let job = |id: &str, state: JobState, updated_ms: u64| Job {
            schema: JOB_SCHEMA.into(),
            id: id.into(),
            tenant: "default".into(),
            collection: "c".into(),
            state,
            files: Vec::new(),
            counts: JobCounts::default(),
            errors: Vec::new(),
            warnings: Vec::new(),
            error: None,
            attempts: 1,
            cancel_requested: false,
            created_ms: updated_ms,
            updated_ms,
        };
        for (id, state, at) in [
            ("job_old_indexed", JobState::Indexed, old),
            ("job_old_failed", JobState::Failed, old),
            ("job_old_cancelled", JobState::Cancelled, old),
            ("job_old_queued", JobState::Queued, old),
            ("job_new_indexed", JobState::Indexed, now),
        ] {
            jobs.put(&job(id, state, at)).unwrap();
        }
        assert_eq!(jobs.prune(now).unwrap(), 3);
        let mut left: Vec<String> = jobs.all().unwrap().into_iter().map(|j| j.id).collect();
        left.sort();
        // A job still waiting is never pruned, however old.
        assert_eq!(left, ["job_new_indexed", "job_old_queued"]);
        assert_eq!(jobs.prune(now).unwrap(), 0);

        // Past the count: each tenant keeps its newest finished jobs, whoever else
        // uploads; running and queued ones are never counted or pruned.
        for (id, tenant, state, at) in [
            ("job_a1", "a", JobState::Indexed, now - 30),
            ("job_a2", "a", JobState::Failed, now - 20),
            ("job_a3", "a", JobState::Cancelled, now - 10),
            ("job_a4", "a", JobState::Embedding, now - 40),
            ("job_b1", "b", JobState::Indexed, now - 50),
        ] {
            let mut j = job(id, state, at);
            j.tenant = tenant.into();
            jobs.put(&j).unwrap();
        }
        assert_eq!(jobs.prune_keeping(now, 2).unwrap(), 1);
        let mut left: Vec<String> = jobs.all().unwrap().into_iter().map(|j| j.id).collect();
        left.sort();
        assert_eq!(
            left,
            [
                "job_a2",
                "job_a3",
                "job_a4",
                "job_b1",
                "job_new_indexed",
                "job_old_queued"
            ]
        );
    }

    #[test]
    fn a_full_disk_while_staging_is_storage_full_without_a_path() {
        let e = io(
            "store the upload",
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        );
        assert!(matches!(e, AppError::StorageFull(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "cannot store the upload: the disk of the data dir is full (free some space, then \
             try again)"
        );
        let e = db_error(redb::Error::Io(std::io::Error::from(
            std::io::ErrorKind::StorageFull,
        )));
        assert!(matches!(e, AppError::StorageFull(_)), "{e:?}");
        let e = io(
            "store the upload",
            std::io::Error::from(std::io::ErrorKind::ReadOnlyFilesystem),
        );
        assert!(matches!(e, AppError::Unavailable(_)), "{e:?}");
    }

    #[test]
    fn files_are_grouped_by_size_in_order() {
        let sizes = [10u64, 50, 30, 200, 5, 5];
        // 10+50 | 30 (+200 is over) | 200 alone | 5+5
        assert_eq!(groups(&sizes, 64), [0..2, 2..3, 3..4, 4..6]);
        assert!(groups(&[], 64).is_empty());
    }

    #[test]
    fn upload_names_are_plain_with_a_loader() {
        for ok in ["a.md", "notes 2.txt", "Ünïcode.json", "x.y.csv"] {
            assert!(check_upload_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../a.md",
            "a/b.md",
            "a\\b.md",
            ".env.md",
            "a.exe",
            "a\u{7}.md",
        ] {
            assert!(check_upload_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_upload_name(&format!("{}.md", "a".repeat(200))).is_err());
    }
}
