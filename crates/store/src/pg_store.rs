//! The document store on PostgreSQL: the same ordered key → value tables as the
//! embedded store ([`crate::raw`]), one PostgreSQL table each, in a schema of their own,
//! so the one mapping of documents, chunks, sources, counters, journals and embeddings
//! ([`crate::logic`]) and the one conformance suite serve it too.
//!
//! Why it is built this way:
//!
//! - **The raw tables, not a second mapping.** Each table is `key bytea PRIMARY KEY,
//!   value bytea`; `bytea` compares byte by byte, so `ORDER BY key` is the order redb
//!   keeps and a prefix scan is a range on the primary key. Values are the same bytes the
//!   embedded store holds (JSON records, little-endian vectors): `bytea` keeps them
//!   exactly (a `jsonb` column would refuse a NUL character in a chunk's text and
//!   reorder a record's fields). What SQL would filter on later gets a column through a
//!   migration.
//! - **One writer at a time, across processes.** A batch is a transaction that first
//!   takes a transaction-level advisory lock named after the schema, so batches from
//!   any number of processes are serialized as the embedded store serializes them in
//!   one, and the collection counters and journal generations they read and bump stay
//!   exact. Readers never wait: they see the last committed batch.
//! - **Versioned migrations, applied on connect.** `store_schema` holds the schema's
//!   version; [`PgStore::connect`] applies the missing migrations in order under the
//!   same lock (so replicas starting together migrate once), and refuses a schema newer
//!   than this binary knows with an error that says so.
//! - **Crash safety is PostgreSQL's.** A batch commits whole or not at all; a client
//!   killed mid-batch leaves an open transaction the server rolls back.
//!
//! Errors: an unreachable server, a timeout, a deadlock or serialization failure are
//! `Unavailable` (retry; the URL is shown without its password); a malformed URL or
//! schema name is `InvalidInput`; anything else is `Backend`.

use std::cell::RefCell;
use std::time::Duration;

use neuralcore_core::{
    Chunk, CollectionInfo, DocKey, DocStore, DocumentRecord, EmbeddingKey, IndexJournal,
    SourceRecord, StoreBatch, StoreError, StoreResult,
};
use neuralcore_pg::postgres::types::ToSql;
use neuralcore_pg::{Conn, PgError, Pool, PooledConn};

use crate::logic::{Batch, Reader};
use crate::raw::{RawRead, RawWrite, Table, Visitor};

/// The migrations, in order: migration `i` takes the schema from version `i` to `i + 1`.
/// `{s}` is the quoted schema name. Never edit one that has shipped: add another.
const MIGRATIONS: &[&str] = &[
    // 1: the raw tables.
    r#"
CREATE TABLE {s}.collections (key bytea PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE {s}.sources (key bytea PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE {s}.documents (key bytea PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE {s}.chunks (key bytea PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE {s}.journal (key bytea PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE {s}.embeddings (key bytea PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE {s}.embedding_models (key bytea PRIMARY KEY, value bytea NOT NULL);
"#,
    // 2: the journal log (collection \0 generation → the batch's journal), so a replica
    // catches its indexes up batch by batch.
    r#"
CREATE TABLE {s}.journal_log (key bytea PRIMARY KEY, value bytea NOT NULL);
"#,
    // 3: the pgvector indexes (`[index] vector = "pgvector"`, crate::pg_vectors): one
    // row per collection naming its table `vec_<id>`, the model and dimension of its
    // vectors, and the store generation it reflects.
    r#"
CREATE TABLE {s}.vector_sets (
    id bigserial PRIMARY KEY,
    collection text NOT NULL UNIQUE,
    model text NOT NULL,
    dim integer NOT NULL,
    generation bigint NOT NULL DEFAULT 0);
"#,
    // 4: the server's tenants and API keys (neuralcore_app::KeyStore), so that every
    // replica over this schema knows the same ones. Keys as SHA-256 only.
    r#"
CREATE TABLE {s}.auth_tenants (
    id text PRIMARY KEY,
    created_ms bigint NOT NULL);
CREATE TABLE {s}.auth_keys (
    prefix text PRIMARY KEY,
    tenant text NOT NULL,
    scope text NOT NULL,
    name text NOT NULL,
    sha256 text NOT NULL,
    created_ms bigint NOT NULL,
    revoked_ms bigint);
"#,
    // 5: ingest jobs (neuralcore_app::Jobs), queued by any process and run by any
    // worker: the job as JSON (`record`, its state also a column to claim by), the
    // worker holding it and until when (a lease, renewed while it runs), a cancel asked
    // by another process; the uploaded files, until the job ends.
    r#"
CREATE TABLE {s}.jobs (
    id text PRIMARY KEY,
    tenant text NOT NULL,
    state text NOT NULL,
    record bytea NOT NULL,
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false,
    lease_owner text,
    lease_until timestamptz);
CREATE INDEX ON {s}.jobs (state, created_ms);
CREATE TABLE {s}.job_files (
    job_id text NOT NULL REFERENCES {s}.jobs (id) ON DELETE CASCADE,
    name text NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (job_id, name));
"#,
    // 6: users' marks on answers (neuralcore_app::marks), kept as training data after
    // the runs they mark expire: the mark as JSON, one per (tenant, run).
    r#"
CREATE TABLE {s}.answer_marks (
    tenant text NOT NULL,
    run_id text NOT NULL,
    record bytea NOT NULL,
    marked_ms bigint NOT NULL,
    PRIMARY KEY (tenant, run_id));
"#,
];

/// The schema version this binary writes and reads.
pub const PG_SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// How to connect. `Default` gives the values below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgStoreOptions {
    /// Most connections held open at once (default 4, at least 2: a batch holds one
    /// while it reads through another).
    pub pool_size: usize,
    /// Connect timeout, used when the URL sets none (default 5 s).
    pub connect_timeout: Duration,
    /// How long an operation waits for a free connection before `Unavailable`
    /// (default 30 s).
    pub pool_wait: Duration,
}

impl Default for PgStoreOptions {
    fn default() -> Self {
        PgStoreOptions {
            pool_size: 4,
            connect_timeout: Duration::from_secs(5),
            pool_wait: Duration::from_secs(30),
        }
    }
}

/// A document store in one schema of a PostgreSQL database, shared by every process
/// that connects to it.
pub struct PgStore {
    pool: Pool,
    schema: String,
    /// `schema` quoted as an identifier.
    quoted: String,
    /// The name of the advisory lock that serializes writers (and migrations).
    lock: String,
    /// Serializes this process's batches before they take a connection.
    writer: std::sync::Mutex<()>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.pool.url)
            .field("schema", &self.schema)
            .finish()
    }
}

/// A pool or driver error as the store's.
pub(crate) fn se(e: PgError) -> StoreError {
    match e {
        PgError::Unavailable(m) => StoreError::Unavailable(m),
        PgError::Invalid(m) => StoreError::InvalidInput(m),
        PgError::Backend(m) => StoreError::Backend(m),
    }
}

/// Whether a store error means the connection is gone (retry on a fresh one).
pub(crate) fn unavailable(e: &StoreError) -> bool {
    matches!(e, StoreError::Unavailable(_))
}

/// The first key after every key starting with `prefix` (`None`: no such key).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// How a schema's version compares with this binary's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The version found (0: a new schema).
    pub from: i32,
    /// The version now.
    pub to: i32,
}

impl PgStore {
    /// Connect to `url` (`postgres://user[:password]@host:port/db`, or the key-value
    /// form) and use `schema`, creating it and applying the missing migrations. `schema`
    /// is a plain identifier (ASCII letters, digits, `_`). Default [`PgStoreOptions`].
    pub fn connect(url: &str, schema: &str) -> StoreResult<Self> {
        Self::connect_with(url, schema, PgStoreOptions::default())
    }

    /// [`PgStore::connect`] with options.
    pub fn connect_with(url: &str, schema: &str, opts: PgStoreOptions) -> StoreResult<Self> {
        let store = Self::pool_only(url, schema, &opts)?;
        let m = store.migrate()?;
        tracing::debug!(url = %store.pool.url, schema, from = m.from, to = m.to, "pg store connected");
        Ok(store)
    }

    fn pool_only(url: &str, schema: &str, opts: &PgStoreOptions) -> StoreResult<Self> {
        let quoted = neuralcore_pg::quote_ident(schema).ok_or_else(|| {
            StoreError::InvalidInput(format!(
                "schema name {schema:?} must be 1 to 63 ASCII letters, digits or '_', \
                 not starting with a digit"
            ))
        })?;
        let target =
            neuralcore_pg::config(url, "neuralcore-store", opts.connect_timeout).map_err(se)?;
        Ok(PgStore {
            // A batch holds one connection while it reads through another.
            pool: Pool::new(target, opts.pool_size.max(2), opts.pool_wait),
            writer: std::sync::Mutex::new(()),
            lock: format!("neuralcore-store:{schema}"),
            schema: schema.to_string(),
            quoted,
        })
    }

    /// Bring the schema to [`PG_SCHEMA_VERSION`] (creating it when missing), under the
    /// writers' lock; what it was and is. A schema newer than this binary knows is an
    /// error and is left untouched.
    pub fn migrate(&self) -> StoreResult<Migrated> {
        // Current already (every start but the first): no DDL, no lock, so a start never
        // waits for another replica's batch and a role without DDL rights can run.
        let now = self.version()?;
        if now == PG_SCHEMA_VERSION {
            return Ok(Migrated { from: now, to: now });
        }
        let s = &self.quoted;
        let url = self.pool.url.clone();
        let map = |e| se(neuralcore_pg::map(e, &url));
        self.pool.write(se, unavailable, |c| {
            let mut tx = c.client.transaction().map_err(map)?;
            tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&self.lock])
                .map_err(map)?;
            tx.batch_execute(&format!(
                "CREATE SCHEMA IF NOT EXISTS {s};
                 CREATE TABLE IF NOT EXISTS {s}.store_schema (
                     one boolean PRIMARY KEY DEFAULT true CHECK (one),
                     version integer NOT NULL,
                     migrated_at timestamptz NOT NULL DEFAULT now());"
            ))
            .map_err(map)?;
            let from: i32 = tx
                .query_opt(&format!("SELECT version FROM {s}.store_schema"), &[])
                .map_err(map)?
                .map(|r| r.get(0))
                .unwrap_or(0);
            if from > PG_SCHEMA_VERSION {
                return Err(StoreError::Backend(format!(
                    "the document store in schema {:?} of {} is at version {from}, newer \
                     than this neuralcore knows ({PG_SCHEMA_VERSION}): upgrade neuralcore, \
                     or use another schema",
                    self.schema, self.pool.url
                )));
            }
            for m in &MIGRATIONS[from.max(0) as usize..] {
                tx.batch_execute(&m.replace("{s}", s)).map_err(map)?;
            }
            if from < PG_SCHEMA_VERSION {
                tx.execute(
                    &format!(
                        "INSERT INTO {s}.store_schema (version) VALUES ($1)
                         ON CONFLICT (one) DO UPDATE SET version = $1, migrated_at = now()"
                    ),
                    &[&PG_SCHEMA_VERSION],
                )
                .map_err(map)?;
            }
            tx.commit().map_err(map)?;
            Ok(Migrated {
                from,
                to: PG_SCHEMA_VERSION,
            })
        })
    }

    /// The version of the schema at `url` / `schema` without changing anything (0: no
    /// store there yet).
    pub fn schema_version(url: &str, schema: &str) -> StoreResult<i32> {
        Self::pool_only(url, schema, &PgStoreOptions::default())?.version()
    }

    /// The schema's version as it is (0: not created).
    fn version(&self) -> StoreResult<i32> {
        let store = self;
        let s = &store.quoted;
        store.pool.read(se, unavailable, |c| {
            let map = |e| se(neuralcore_pg::map(e, &store.pool.url));
            let exists: bool = c
                .client
                .query_one(
                    "SELECT to_regclass($1) IS NOT NULL",
                    &[&format!("{s}.store_schema")],
                )
                .map_err(map)?
                .get(0);
            if !exists {
                return Ok(0);
            }
            Ok(c.client
                .query_opt(&format!("SELECT version FROM {s}.store_schema"), &[])
                .map_err(map)?
                .map(|r| r.get(0))
                .unwrap_or(0))
        })
    }

    /// The connection pool and the quoted schema, for the tables other crates keep in
    /// this schema (the server's keys: migration 4).
    pub fn pool(&self) -> (&Pool, &str) {
        (&self.pool, &self.quoted)
    }

    /// The schema this store uses.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The server URL, without its password.
    pub fn url(&self) -> &str {
        &self.pool.url
    }

    /// Drop the schema and everything in it (for tests and cleanup). The store is
    /// unusable afterwards.
    pub fn drop_schema(&self) -> StoreResult<()> {
        self.pool.write(se, unavailable, |c| {
            c.client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.quoted))
                .map_err(|e| se(neuralcore_pg::map(e, &self.pool.url)))
        })
    }

    fn reader(&self) -> PgRead<'_> {
        PgRead { store: self }
    }
}

/// The statements on one table, by what they do.
fn sql_get(s: &str, t: Table) -> String {
    format!("SELECT value FROM {s}.{} WHERE key = $1", t.name())
}

fn sql_scan(s: &str, t: Table, bounded: bool) -> String {
    let upper = if bounded { " AND key < $2" } else { "" };
    format!(
        "SELECT key, value FROM {s}.{} WHERE key >= $1{upper} ORDER BY key",
        t.name()
    )
}

/// A prefix scan's statement and parameters.
fn scan_args(s: &str, t: Table, prefix: &[u8]) -> (String, Option<Vec<u8>>) {
    let end = prefix_end(prefix);
    (sql_scan(s, t, end.is_some()), end)
}

/// The raw operations on one connection (in a transaction or not).
struct Ops<'c, 's> {
    conn: &'c mut Conn,
    store: &'s PgStore,
}

impl Ops<'_, '_> {
    fn err(&self, e: neuralcore_pg::postgres::Error) -> StoreError {
        se(neuralcore_pg::map(e, &self.store.pool.url))
    }

    fn stmt(&mut self, sql: &str) -> StoreResult<neuralcore_pg::postgres::Statement> {
        self.conn.stmt(sql, &self.store.pool.url).map_err(se)
    }

    fn get(&mut self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let st = self.stmt(&sql_get(&self.store.quoted, t))?;
        let row = self
            .conn
            .client
            .query_opt(&st, &[&key])
            .map_err(|e| self.err(e))?;
        Ok(row.map(|r| r.get(0)))
    }

    fn get_many(&mut self, t: Table, keys: &[&[u8]]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        let st = self.stmt(&format!(
            "SELECT key, value FROM {}.{} WHERE key = ANY($1)",
            self.store.quoted,
            t.name()
        ))?;
        let rows = self
            .conn
            .client
            .query(&st, &[&keys])
            .map_err(|e| self.err(e))?;
        let found: std::collections::HashMap<Vec<u8>, Vec<u8>> = rows
            .into_iter()
            .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, Vec<u8>>(1)))
            .collect();
        Ok(keys.iter().map(|k| found.get(*k).cloned()).collect())
    }

    /// Every entry under `prefix`, streamed to `f` in key order.
    fn visit(&mut self, t: Table, prefix: &[u8], f: &mut Visitor<'_>) -> StoreResult<()> {
        use neuralcore_pg::postgres::fallible_iterator::FallibleIterator;
        let (sql, end) = scan_args(&self.store.quoted, t, prefix);
        let st = self.stmt(&sql)?;
        let params: Vec<&(dyn ToSql + Sync)> = match &end {
            Some(e) => vec![&prefix, e],
            None => vec![&prefix],
        };
        let url = &self.store.pool.url;
        let map = |e| se(neuralcore_pg::map(e, url));
        let mut rows = self.conn.client.query_raw(&st, params).map_err(map)?;
        while let Some(r) = rows.next().map_err(map)? {
            let (k, v): (&[u8], &[u8]) = (r.get(0), r.get(1));
            f(k, v)?;
        }
        Ok(())
    }

    fn range(
        &mut self,
        t: Table,
        start: &[u8],
        end: &[u8],
    ) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let st = self.stmt(&sql_scan(&self.store.quoted, t, true))?;
        let rows = self
            .conn
            .client
            .query(&st, &[&start, &end])
            .map_err(|e| self.err(e))?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn scan(&mut self, t: Table, prefix: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let (sql, end) = scan_args(&self.store.quoted, t, prefix);
        let st = self.stmt(&sql)?;
        let rows = match &end {
            Some(e) => self.conn.client.query(&st, &[&prefix, e]),
            None => self.conn.client.query(&st, &[&prefix]),
        }
        .map_err(|e| self.err(e))?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    fn len(&mut self, t: Table) -> StoreResult<u64> {
        let st = self.stmt(&format!(
            "SELECT count(*) FROM {}.{}",
            self.store.quoted,
            t.name()
        ))?;
        let n: i64 = self
            .conn
            .client
            .query_one(&st, &[])
            .map_err(|e| self.err(e))?
            .get(0);
        Ok(n as u64)
    }
}

/// Reads outside a batch: each on a pooled connection, retried once on a fresh one when
/// a used connection had gone stale.
struct PgRead<'s> {
    store: &'s PgStore,
}

impl PgRead<'_> {
    fn with<T>(&self, f: impl Fn(&mut Ops<'_, '_>) -> StoreResult<T>) -> StoreResult<T> {
        self.store.pool.read(se, unavailable, |conn| {
            f(&mut Ops {
                conn,
                store: self.store,
            })
        })
    }

    fn get_many(&self, t: Table, keys: &[&[u8]]) -> StoreResult<Vec<Option<Vec<u8>>>> {
        self.with(|o| o.get_many(t, keys))
    }
}

impl RawRead for PgRead<'_> {
    fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        self.with(|o| o.get(t, key))
    }
    fn scan(&self, t: Table, prefix: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.with(|o| o.scan(t, prefix))
    }
    fn visit(&self, t: Table, prefix: &[u8], f: &mut Visitor<'_>) -> StoreResult<()> {
        // Fetched whole, then visited: a retried read must not visit an entry twice.
        for (k, v) in self.scan(t, prefix)? {
            f(&k, &v)?;
        }
        Ok(())
    }
    fn visit_range(
        &self,
        t: Table,
        start: &[u8],
        end: &[u8],
        f: &mut Visitor<'_>,
    ) -> StoreResult<()> {
        for (k, v) in self.with(|o| o.range(t, start, end))? {
            f(&k, &v)?;
        }
        Ok(())
    }
    fn len(&self, t: Table) -> StoreResult<u64> {
        self.with(|o| o.len(t))
    }
}

/// A batch: one transaction on one connection, holding the writers' lock.
struct PgTxn<'s> {
    conn: RefCell<PooledConn<'s>>,
    store: &'s PgStore,
    done: bool,
    /// A statement failed: the transaction is aborted, and PostgreSQL would answer its
    /// `COMMIT` with a silent rollback.
    failed: std::cell::Cell<bool>,
    /// This process's writers wait here, not each on a connection of the pool.
    _one: std::sync::MutexGuard<'s, ()>,
}

impl PgTxn<'_> {
    fn ops<T>(&self, f: impl FnOnce(&mut Ops<'_, '_>) -> StoreResult<T>) -> StoreResult<T> {
        let mut conn = self.conn.borrow_mut();
        let r = f(&mut Ops {
            conn: &mut conn,
            store: self.store,
        });
        if let Err(e) = &r {
            self.failed.set(true);
            if matches!(e, StoreError::Unavailable(_)) {
                conn.broken = true;
            }
        }
        r
    }

    fn exec(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<u64> {
        self.ops(|o| {
            let st = o.stmt(sql)?;
            o.conn.client.execute(&st, params).map_err(|e| o.err(e))
        })
    }
}

impl Drop for PgTxn<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let conn = self.conn.get_mut();
        if conn.client.batch_execute("ROLLBACK").is_err() {
            conn.broken = true;
        }
    }
}

impl RawRead for PgTxn<'_> {
    fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        self.ops(|o| o.get(t, key))
    }
    fn scan(&self, t: Table, prefix: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        self.ops(|o| o.scan(t, prefix))
    }
    fn visit(&self, t: Table, prefix: &[u8], f: &mut Visitor<'_>) -> StoreResult<()> {
        self.ops(|o| o.visit(t, prefix, f))
    }
    fn visit_range(
        &self,
        t: Table,
        start: &[u8],
        end: &[u8],
        f: &mut Visitor<'_>,
    ) -> StoreResult<()> {
        for (k, v) in self.ops(|o| o.range(t, start, end))? {
            f(&k, &v)?;
        }
        Ok(())
    }
    fn len(&self, t: Table) -> StoreResult<u64> {
        self.ops(|o| o.len(t))
    }
}

impl RawWrite for PgTxn<'_> {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> StoreResult<bool> {
        // Both parts of the statement see the table as it was before it: `old` says
        // whether the key existed.
        let sql = format!(
            "WITH old AS (SELECT 1 FROM {s}.{t} WHERE key = $1),
                  up AS (INSERT INTO {s}.{t} (key, value) VALUES ($1, $2)
                         ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value)
             SELECT EXISTS (SELECT 1 FROM old)",
            s = self.store.quoted,
            t = t.name()
        );
        self.ops(|o| {
            let st = o.stmt(&sql)?;
            let row = o
                .conn
                .client
                .query_one(&st, &[&key, &value])
                .map_err(|e| o.err(e))?;
            Ok(row.get(0))
        })
    }
    fn del(&mut self, t: Table, key: &[u8]) -> StoreResult<bool> {
        let sql = format!(
            "DELETE FROM {}.{} WHERE key = $1",
            self.store.quoted,
            t.name()
        );
        Ok(self.exec(&sql, &[&key])? > 0)
    }
    fn retain(&mut self, t: Table, keep: &mut dyn FnMut(&[u8]) -> bool) -> StoreResult<u64> {
        let mut gone: Vec<Vec<u8>> = Vec::new();
        self.visit(t, b"", &mut |k, _| {
            if !keep(k) {
                gone.push(k.to_vec());
            }
            Ok(())
        })?;
        let sql = format!(
            "DELETE FROM {}.{} WHERE key = ANY($1)",
            self.store.quoted,
            t.name()
        );
        let mut n = 0;
        for part in gone.chunks(10_000) {
            let keys: Vec<&[u8]> = part.iter().map(Vec::as_slice).collect();
            n += self.exec(&sql, &[&keys])?;
        }
        Ok(n)
    }
    fn commit(mut self: Box<Self>) -> StoreResult<()> {
        if self.failed.get() {
            // Dropping rolls back.
            return Err(StoreError::Backend(
                "a statement of this batch failed earlier: nothing of it was committed".into(),
            ));
        }
        self.done = true;
        let r = self.ops(|o| o.conn.client.batch_execute("COMMIT").map_err(|e| o.err(e)));
        if r.is_err() {
            // Whether it committed is unknown; this connection is not reused.
            self.conn.get_mut().broken = true;
        }
        r
    }
}

impl DocStore for PgStore {
    fn collections(&self) -> StoreResult<Vec<CollectionInfo>> {
        Reader(&self.reader()).collections()
    }
    fn collection(&self, name: &str) -> StoreResult<Option<CollectionInfo>> {
        Reader(&self.reader()).collection(name)
    }
    fn source(&self, c: &str, s: &str) -> StoreResult<Option<SourceRecord>> {
        Reader(&self.reader()).source(c, s)
    }
    fn sources(&self, c: &str) -> StoreResult<Vec<SourceRecord>> {
        Reader(&self.reader()).sources(c)
    }
    fn document(&self, c: &str, key: DocKey) -> StoreResult<Option<DocumentRecord>> {
        Reader(&self.reader()).document(c, key)
    }
    fn document_keys(&self, c: &str) -> StoreResult<Vec<DocKey>> {
        Reader(&self.reader()).document_keys(c)
    }
    fn chunks(&self, key: DocKey) -> StoreResult<Vec<Chunk>> {
        Reader(&self.reader()).chunks(key)
    }
    fn chunk(&self, key: DocKey, ordinal: u32) -> StoreResult<Option<Chunk>> {
        Reader(&self.reader()).chunk(key, ordinal)
    }
    fn index_journal(&self, c: &str) -> StoreResult<IndexJournal> {
        Reader(&self.reader()).journal(c)
    }
    fn index_journals(
        &self,
        c: &str,
        after: u64,
        upto: u64,
    ) -> StoreResult<Option<Vec<IndexJournal>>> {
        Reader(&self.reader()).journals(c, after, upto)
    }
    fn embeddings(&self, keys: &[EmbeddingKey]) -> StoreResult<Vec<Option<Vec<f32>>>> {
        // One round trip for the lot, not one per key.
        let raw: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        let found = self.reader().get_many(Table::Embeddings, &raw)?;
        found
            .into_iter()
            .map(|v| v.map(|b| crate::logic::decode_vector(&b)).transpose())
            .collect()
    }
    fn embedding_models(&self) -> StoreResult<Vec<String>> {
        Reader(&self.reader()).embedding_models()
    }
    fn embedding_count(&self) -> StoreResult<u64> {
        self.reader().len(Table::Embeddings)
    }
    fn shared(&self) -> bool {
        true
    }
    fn begin(&self) -> StoreResult<Box<dyn StoreBatch + '_>> {
        let one = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut conn = self.pool.get().map_err(se)?;
        let map = |e| se(neuralcore_pg::map(e, &self.pool.url));
        let begun = conn
            .client
            .batch_execute("BEGIN")
            .map_err(map)
            .and_then(|()| {
                conn.client
                    .execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&self.lock])
                    .map_err(map)
            });
        if let Err(e) = begun {
            conn.broken = true;
            return Err(e);
        }
        Ok(Box::new(Batch::new(PgTxn {
            conn: RefCell::new(conn),
            store: self,
            done: false,
            failed: std::cell::Cell::new(false),
            _one: one,
        })))
    }
    fn backup_to(&self, _dest: &std::path::Path) -> StoreResult<u64> {
        Err(StoreError::InvalidInput(format!(
            "the document store is on PostgreSQL ({}, schema {:?}): back it up with the \
             server's own tools (pg_dump --schema {})",
            self.pool.url, self.schema, self.schema
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }
}
