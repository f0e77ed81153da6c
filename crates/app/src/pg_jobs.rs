//! Ingest jobs in PostgreSQL (the store's schema, migration 5): a durable queue that any
//! process submits to and any process's worker runs, so `serve` replicas and
//! `neuralcore worker` processes share one.
//!
//! Why PostgreSQL and not Redis Streams: the job, its files and the documents it writes
//! live in the same database, so a job is queued in the same transaction that stores its
//! files, and every replica reads a job's state where it reads the documents; Redis
//! would be one more system whose loss loses queued work.
//!
//! - **Claim:** the oldest job that is queued, or running under an expired lease (its
//!   worker was killed), is taken with `FOR UPDATE SKIP LOCKED` — workers never wait on
//!   each other or take the same job — and leased to the worker until `now() + lease`
//!   (the server's clock, so workers' clocks do not matter).
//! - **Heartbeat:** the worker renews the lease every third of it, and reads a cancel
//!   another process asked for (`cancel_requested`). A worker that finds its lease gone
//!   stops: its later writes are refused (every write names the lease's owner).
//! - **Retry:** a job taken over from an expired lease runs again from the start; ingest
//!   skips what the first attempt committed (same content hash), so nothing is stored
//!   twice. After [`crate::jobs::MAX_ATTEMPTS`] it fails instead.
//! - **Files:** the uploaded files are rows until the job ends; the worker writes them to
//!   its own staging folder and runs the job as the embedded queue does.

use std::time::Duration;

use neuralcore_pg::postgres::{self, Transaction};
use neuralcore_store::PgStore;

use crate::jobs::{Job, JobState, Upload, MAX_ATTEMPTS};
use crate::AppError;
use neuralcore_memory::now_ms;

fn pg_error(e: neuralcore_pg::PgError) -> AppError {
    match e {
        neuralcore_pg::PgError::Unavailable(m) => AppError::Unavailable(format!("job queue: {m}")),
        other => AppError::Internal(format!("job queue: {other}")),
    }
}

fn unavailable(e: &AppError) -> bool {
    matches!(e, AppError::Unavailable(_))
}

fn state_name(s: JobState) -> &'static str {
    match s {
        JobState::Queued => "queued",
        JobState::Parsing => "parsing",
        JobState::Chunking => "chunking",
        JobState::Embedding => "embedding",
        JobState::Indexed => "indexed",
        JobState::Failed => "failed",
        JobState::Cancelled => "cancelled",
    }
}

fn decode(record: &[u8], cancel: bool) -> Result<Job, AppError> {
    let mut job: Job = serde_json::from_slice(record)
        .map_err(|e| AppError::Internal(format!("a job record does not decode: {e}")))?;
    job.cancel_requested |= cancel;
    Ok(job)
}

fn encode(job: &Job) -> Result<Vec<u8>, AppError> {
    serde_json::to_vec(job).map_err(|e| AppError::Internal(format!("job record: {e}")))
}

/// A file of a job: its name and bytes.
pub(crate) type JobFile = (String, Vec<u8>);

fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The queue: the store's pool and schema, and this process's name as a lease owner.
pub(crate) struct PgJobs {
    store: Box<PgStore>,
    /// `host:pid:random`, unique per process.
    pub owner: String,
    /// How long a claim holds without a heartbeat.
    pub lease: Duration,
}

impl PgJobs {
    pub fn new(store: PgStore, lease: Duration) -> Result<PgJobs, AppError> {
        let mut b = [0u8; 6];
        getrandom::getrandom(&mut b)
            .map_err(|e| AppError::Internal(format!("no randomness: {e}")))?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "host".into());
        let owner = format!(
            "{host}:{}:{}",
            std::process::id(),
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        );
        Ok(PgJobs {
            store: Box::new(store),
            owner,
            lease,
        })
    }

    fn lease_secs(&self) -> f64 {
        self.lease.as_secs_f64()
    }

    fn read<T>(
        &self,
        f: impl Fn(&mut postgres::Client, &str) -> Result<T, postgres::Error>,
    ) -> Result<T, AppError> {
        let (pool, s) = self.store.pool();
        pool.read(pg_error, unavailable, |c| {
            f(&mut c.client, s).map_err(|e| pg_error(neuralcore_pg::map(e, &pool.url)))
        })
    }

    fn write<T>(
        &self,
        f: impl FnOnce(&mut Transaction<'_>, &str) -> Result<T, AppError>,
    ) -> Result<T, AppError> {
        let (pool, s) = self.store.pool();
        let map = |e| pg_error(neuralcore_pg::map(e, &pool.url));
        pool.write(pg_error, unavailable, |c| {
            let mut tx = c.client.transaction().map_err(map)?;
            let out = f(&mut tx, s)?;
            tx.commit().map_err(map)?;
            Ok(out)
        })
    }

    fn map(&self, e: postgres::Error) -> AppError {
        pg_error(neuralcore_pg::map(e, &self.store.pool().0.url))
    }

    /// Queue `job` with its files, in one transaction.
    pub fn insert(&self, job: &Job, files: &[Upload]) -> Result<(), AppError> {
        let record = encode(job)?;
        self.write(|tx, s| {
            tx.execute(
                &format!(
                    "INSERT INTO {s}.jobs (id, tenant, state, record, created_ms, updated_ms) \
                     VALUES ($1, $2, $3, $4, $5, $6)"
                ),
                &[
                    &job.id,
                    &job.tenant,
                    &state_name(job.state),
                    &record,
                    &ms(job.created_ms),
                    &ms(job.updated_ms),
                ],
            )
            .map_err(|e| self.map(e))?;
            let stmt = tx
                .prepare(&format!(
                    "INSERT INTO {s}.job_files (job_id, name, bytes) VALUES ($1, $2, $3)"
                ))
                .map_err(|e| self.map(e))?;
            for f in files {
                tx.execute(&stmt, &[&job.id, &f.name, &f.bytes])
                    .map_err(|e| self.map(e))?;
            }
            Ok(())
        })
    }

    /// Write `job` as this process's worker sees it: only while it holds the lease (a
    /// worker that lost its job to another changes nothing). A job that ends gives the
    /// lease up and its files go.
    pub fn put_leased(&self, job: &Job) -> Result<bool, AppError> {
        let record = encode(job)?;
        let end = job.state.is_terminal();
        self.write(|tx, s| {
            let n = tx
                .execute(
                    &format!(
                        "UPDATE {s}.jobs SET record = $2, state = $3, updated_ms = $4, \
                         lease_owner = CASE WHEN $6::boolean THEN NULL ELSE lease_owner END, \
                         lease_until = CASE WHEN $6::boolean THEN NULL ELSE lease_until END \
                         WHERE id = $1 AND lease_owner = $5"
                    ),
                    &[
                        &job.id,
                        &record,
                        &state_name(job.state),
                        &ms(job.updated_ms),
                        &self.owner,
                        &end,
                    ],
                )
                .map_err(|e| self.map(e))?;
            if n == 1 && end {
                tx.execute(
                    &format!("DELETE FROM {s}.job_files WHERE job_id = $1"),
                    &[&job.id],
                )
                .map_err(|e| self.map(e))?;
            }
            Ok(n == 1)
        })
    }

    /// One job, with a cancel asked by any process.
    pub fn load(&self, id: &str) -> Result<Option<Job>, AppError> {
        let row = self.read(|c, s| {
            c.query_opt(
                &format!("SELECT record, cancel_requested FROM {s}.jobs WHERE id = $1"),
                &[&id],
            )
        })?;
        row.map(|r| decode(r.get(0), r.get(1))).transpose()
    }

    /// Every job.
    pub fn all(&self) -> Result<Vec<Job>, AppError> {
        let rows = self.read(|c, s| {
            c.query(
                &format!("SELECT record, cancel_requested FROM {s}.jobs"),
                &[],
            )
        })?;
        rows.iter().map(|r| decode(r.get(0), r.get(1))).collect()
    }

    /// Cancel `id` for its tenant: a queued job at once (no worker can claim it
    /// meanwhile: the row is locked), a running one by a flag its worker's next
    /// heartbeat reads. The job as it now stands.
    pub fn cancel(&self, id: &str) -> Result<Option<Job>, AppError> {
        self.write(|tx, s| {
            let Some(row) = tx
                .query_opt(
                    &format!(
                        "SELECT record, cancel_requested FROM {s}.jobs WHERE id = $1 FOR UPDATE"
                    ),
                    &[&id],
                )
                .map_err(|e| self.map(e))?
            else {
                return Ok(None);
            };
            let mut job = decode(row.get(0), row.get(1))?;
            if job.state.is_terminal() {
                return Ok(Some(job));
            }
            job.cancel_requested = true;
            job.updated_ms = now_ms();
            if job.state == JobState::Queued {
                job.state = JobState::Cancelled;
            }
            tx.execute(
                &format!(
                    "UPDATE {s}.jobs SET record = $2, state = $3, updated_ms = $4, \
                     cancel_requested = true WHERE id = $1"
                ),
                &[
                    &job.id,
                    &encode(&job)?,
                    &state_name(job.state),
                    &ms(job.updated_ms),
                ],
            )
            .map_err(|e| self.map(e))?;
            if job.state.is_terminal() {
                tx.execute(
                    &format!("DELETE FROM {s}.job_files WHERE job_id = $1"),
                    &[&job.id],
                )
                .map_err(|e| self.map(e))?;
            }
            Ok(Some(job))
        })
    }

    /// Take the next job for this worker, with its files: the oldest queued one, or
    /// one whose worker's lease ran out (that one fails instead after
    /// [`MAX_ATTEMPTS`] starts, or is cancelled when a cancel was asked).
    pub fn claim(&self) -> Result<Option<(Job, Vec<JobFile>)>, AppError> {
        loop {
            let claimed = self.write(|tx, s| {
                let Some(row) = tx
                    .query_opt(
                        &format!(
                            "SELECT record, cancel_requested, state <> 'queued' FROM {s}.jobs \
                             WHERE state = 'queued' OR (state IN ('parsing', 'chunking', \
                             'embedding') AND (lease_until IS NULL OR lease_until < now())) \
                             ORDER BY created_ms, id LIMIT 1 FOR UPDATE SKIP LOCKED"
                        ),
                        &[],
                    )
                    .map_err(|e| self.map(e))?
                else {
                    return Ok(None);
                };
                let mut job = decode(row.get(0), row.get(1))?;
                let taken_over: bool = row.get(2);
                job.updated_ms = now_ms();
                let run = if taken_over && job.cancel_requested {
                    job.state = JobState::Cancelled;
                    false
                } else if taken_over && job.attempts >= MAX_ATTEMPTS {
                    job.state = JobState::Failed;
                    job.error = Some(format!(
                        "interrupted {} times (its worker stopped while it ran); upload again",
                        job.attempts
                    ));
                    false
                } else {
                    if taken_over {
                        tracing::info!("job {}: its worker's lease ran out; resuming it", job.id);
                    }
                    job.state = JobState::Parsing;
                    job.attempts += 1;
                    true
                };
                let owner: Option<&str> = run.then_some(self.owner.as_str());
                tx.execute(
                    &format!(
                        "UPDATE {s}.jobs SET record = $2, state = $3, updated_ms = $4, \
                         lease_owner = $5::text, lease_until = CASE WHEN $5::text IS NULL THEN \
                         NULL ELSE now() + make_interval(secs => $6::float8) END WHERE id = $1"
                    ),
                    &[
                        &job.id,
                        &encode(&job)?,
                        &state_name(job.state),
                        &ms(job.updated_ms),
                        &owner,
                        &self.lease_secs(),
                    ],
                )
                .map_err(|e| self.map(e))?;
                if !run {
                    tx.execute(
                        &format!("DELETE FROM {s}.job_files WHERE job_id = $1"),
                        &[&job.id],
                    )
                    .map_err(|e| self.map(e))?;
                    return Ok(Some((job, None)));
                }
                let files = tx
                    .query(
                        &format!(
                            "SELECT name, bytes FROM {s}.job_files WHERE job_id = $1 ORDER BY name"
                        ),
                        &[&job.id],
                    )
                    .map_err(|e| self.map(e))?
                    .iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, Vec<u8>>(1)))
                    .collect();
                Ok(Some((job, Some(files))))
            })?;
            match claimed {
                None => return Ok(None),
                Some((job, Some(files))) => return Ok(Some((job, files))),
                // Ended without running (failed or cancelled): look for the next.
                Some((job, None)) => {
                    tracing::warn!("job {}: {:?} without running", job.id, job.state);
                }
            }
        }
    }

    /// Renew this worker's lease on `id`: `None` when it is no longer ours, else
    /// whether another process asked to cancel the job.
    pub fn heartbeat(&self, id: &str) -> Result<Option<bool>, AppError> {
        let row = self.write(|tx, s| {
            tx.query_opt(
                &format!(
                    "UPDATE {s}.jobs SET lease_until = now() + make_interval(secs => $3::float8) \
                     WHERE id = $1 AND lease_owner = $2 RETURNING cancel_requested"
                ),
                &[&id, &self.owner, &self.lease_secs()],
            )
            .map_err(|e| self.map(e))
        })?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Delete finished jobs changed before `cutoff_ms`, and each tenant's beyond its
    /// newest `keep`; how many.
    pub fn prune(&self, cutoff_ms: u64, keep: usize) -> Result<usize, AppError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.write(|tx, s| {
            tx.execute(
                &format!(
                    "DELETE FROM {s}.jobs WHERE id IN (SELECT id FROM (SELECT id, updated_ms, \
                     row_number() OVER (PARTITION BY tenant ORDER BY updated_ms DESC, id DESC) \
                     AS n FROM {s}.jobs WHERE state IN ('indexed', 'failed', 'cancelled')) t \
                     WHERE t.updated_ms < $1 OR t.n > $2)"
                ),
                &[&ms(cutoff_ms), &keep],
            )
            .map(|n| n as usize)
            .map_err(|e| self.map(e))
        })
    }
}
