//! [`PgBackend`]: connecting, creating the schema, and the [`MemoryBackend`] operations.

use std::fmt;
use std::time::Duration;

use neuralcore_memory::backend::{apply_update, Update};
use neuralcore_memory::{
    AuditEntry, Filter, MemResult, Memory, MemoryBackend, MemoryError, RelKind, Relation, Status,
};
use postgres::types::ToSql;
use postgres::Row;

use neuralcore_pg::{Conn, PgError, Pool};

use crate::sql::{self, Sql, Q};

/// Key of the advisory lock that serializes schema creation across clients (several
/// backends connecting at once would otherwise race on `CREATE ... IF NOT EXISTS`).
const SETUP_LOCK: i64 = 0x6e63_6d65_6d70_6700; // "ncmempg\0"

/// How to connect. `Default` gives the values below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// Most connections held open at once (default 4).
    pub pool_size: usize,
    /// Connect timeout, used when the URL sets none (default 5 s).
    pub connect_timeout: Duration,
    /// How long an operation waits for a free connection before `Unavailable`
    /// (default 30 s).
    pub pool_wait: Duration,
    /// Store embeddings in a pgvector `vector` column, creating the extension if it is
    /// missing and allowed (default true). Without it, or when the extension cannot be
    /// had, the column is `real[]`. Decided when the schema is created.
    pub pgvector: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            pool_size: 4,
            connect_timeout: Duration::from_secs(5),
            pool_wait: Duration::from_secs(30),
            pgvector: true,
        }
    }
}

/// Memories, audit log and relations in one PostgreSQL schema.
///
/// Updates are `SELECT ... FOR UPDATE`, the change applied in Rust, `UPDATE` and the
/// audit rows, in one transaction: concurrent updates of one memory, from threads or
/// from other processes, are serialized by the row lock and none is lost.
pub struct PgBackend {
    pool: Pool,
    schema: String,
    /// `schema` quoted as an identifier.
    quoted: String,
    sql: Sql,
    /// The pgvector type name when the embedding column is a `vector`.
    vector: Option<String>,
}

impl fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgBackend")
            .field("url", &self.pool.url)
            .field("schema", &self.schema)
            .field("vector", &self.vector)
            .finish()
    }
}

/// A PostgreSQL failure as a memory error; a value PostgreSQL cannot store is named.
fn mem(e: PgError) -> MemoryError {
    match e {
        PgError::Unavailable(m) => MemoryError::Unavailable(m),
        PgError::Invalid(m) => {
            MemoryError::Invalid(format!("{m} (no NUL in ids, scopes or nodes)"))
        }
        PgError::Backend(m) => MemoryError::Backend(m),
    }
}

fn unavailable(e: &MemoryError) -> bool {
    matches!(e, MemoryError::Unavailable(_))
}

fn corrupt(what: &str, e: impl fmt::Display) -> MemoryError {
    MemoryError::Backend(format!("unreadable {what} in PostgreSQL: {e}"))
}

impl PgBackend {
    /// Connect to `url` (`postgres://user[:password]@host:port/db`, or the key-value
    /// form) and use `schema`, creating it and its tables if missing. `schema` is a plain
    /// identifier (ASCII letters, digits, `_`). Default [`PgOptions`].
    ///
    /// Errors: a malformed URL or schema name is `Invalid`; a server that cannot be
    /// reached is `Unavailable` (the message names the URL without its password).
    pub fn connect(url: &str, schema: &str) -> MemResult<Self> {
        Self::connect_with(url, schema, PgOptions::default())
    }

    /// [`PgBackend::connect`] with options.
    pub fn connect_with(url: &str, schema: &str, opts: PgOptions) -> MemResult<Self> {
        let quoted = neuralcore_pg::quote_ident(schema).ok_or_else(|| {
            MemoryError::Invalid(format!(
                "schema name {schema:?} must be 1 to 63 ASCII letters, digits or '_', \
                 not starting with a digit"
            ))
        })?;
        let target =
            neuralcore_pg::config(url, "neuralcore-memory", opts.connect_timeout).map_err(mem)?;
        let pool = Pool::new(target, opts.pool_size, opts.pool_wait);
        let vector = Self::setup(&pool, &quoted, opts.pgvector)?;
        tracing::debug!(url = %pool.url, schema, vector = ?vector, "memory-pg connected");
        let sql = Sql::new(&quoted, vector.as_deref());
        Ok(PgBackend {
            pool,
            schema: schema.to_string(),
            quoted,
            sql,
            vector,
        })
    }

    /// Create the schema and tables if missing, under an advisory lock; the pgvector
    /// type name when the embedding column is a `vector`.
    fn setup(pool: &Pool, schema: &str, pgvector: bool) -> MemResult<Option<String>> {
        let url = &pool.url;
        let map = |e| mem(neuralcore_pg::map(e, url));
        let mut conn = pool.get().map_err(mem)?;
        let mut tx = conn.client.transaction().map_err(map)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SETUP_LOCK])
            .map_err(map)?;
        let mut vector_type = None;
        if pgvector {
            // In a savepoint: without the extension or the right to create it, go on
            // with `real[]`.
            let mut sp = tx.transaction().map_err(map)?;
            match sp.batch_execute("CREATE EXTENSION IF NOT EXISTS vector") {
                Ok(()) => sp.commit().map_err(map)?,
                Err(e) => {
                    tracing::debug!(error = %e, "pgvector unavailable; embeddings as real[]");
                    sp.rollback().map_err(map)?;
                }
            }
            let row = tx
                .query_opt(
                    "SELECT quote_ident(n.nspname) || '.vector' FROM pg_extension e \
                     JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'",
                    &[],
                )
                .map_err(map)?;
            vector_type = row.map(|r| r.get::<_, String>(0));
        }
        let emb_type = vector_type.as_deref().unwrap_or("real[]");
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .map_err(map)?;
        tx.batch_execute(&sql::create_tables(schema, emb_type))
            .map_err(map)?;
        // What the column is, whatever this call wanted: an existing schema keeps its type.
        let row = tx
            .query_one(
                "SELECT t.typname::text, quote_ident(n.nspname) || '.' || quote_ident(t.typname) \
                 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
                 JOIN pg_namespace n ON n.oid = t.typnamespace \
                 WHERE a.attrelid = ($1::text)::regclass AND a.attname = 'embedding'",
                &[&format!("{schema}.memories")],
            )
            .map_err(map)?;
        tx.commit().map_err(map)?;
        let (typname, qualified): (String, String) = (row.get(0), row.get(1));
        Ok((typname == "vector").then_some(qualified))
    }

    /// The schema this backend uses.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The server URL, without its password.
    pub fn url(&self) -> &str {
        &self.pool.url
    }

    /// Whether embeddings are stored in a pgvector `vector` column.
    pub fn has_pgvector(&self) -> bool {
        self.vector.is_some()
    }

    /// Drop the schema and everything in it (for tests and cleanup). The backend is
    /// unusable afterwards.
    pub fn drop_schema(&self) -> MemResult<()> {
        let mut conn = self.pool.get().map_err(mem)?;
        conn.client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.quoted))
            .map_err(|e| self.err(e))
    }

    fn err(&self, e: postgres::Error) -> MemoryError {
        mem(neuralcore_pg::map(e, &self.pool.url))
    }

    /// A read on a pooled connection (retried once on a fresh connection when a used
    /// one had gone stale).
    fn read<T>(&self, f: impl Fn(&mut Conn) -> MemResult<T>) -> MemResult<T> {
        self.pool.read(mem, unavailable, f)
    }

    /// A write on a pooled connection (never retried).
    fn write<T>(&self, f: impl FnOnce(&mut Conn) -> MemResult<T>) -> MemResult<T> {
        self.pool.write(mem, unavailable, f)
    }

    /// The prepared statement for `q` on `c`.
    fn stmt(&self, c: &mut Conn, q: Q) -> MemResult<postgres::Statement> {
        c.stmt(self.sql.text(q), &self.pool.url).map_err(mem)
    }

    /// Rows of a prepared read.
    fn rows(&self, q: Q, params: &[&(dyn ToSql + Sync)]) -> MemResult<Vec<Row>> {
        self.read(|c| {
            let s = self.stmt(c, q)?;
            c.client.query(&s, params).map_err(|e| self.err(e))
        })
    }

    /// A memory's body (JSON without the embedding) and embedding columns.
    fn encode<'m>(&self, m: &'m Memory) -> MemResult<Encoded<'m>> {
        let body = m
            .json_without_embedding()
            .map_err(|e| MemoryError::Backend(format!("cannot encode memory {}: {e}", m.id)))?;
        let (embedding, other) = match m.embedding.as_deref() {
            None => (None, None),
            Some(e) if self.vector.is_none() || sql::fits_vector(e) => (Some(e), None),
            Some(e) => (None, Some(e)),
        };
        Ok(Encoded {
            m,
            status: m.status.as_str(),
            kind: m.kind.as_str(),
            body,
            embedding,
            other,
        })
    }
}

/// A memory's row values.
struct Encoded<'m> {
    m: &'m Memory,
    status: &'static str,
    kind: &'static str,
    body: String,
    embedding: Option<&'m [f32]>,
    other: Option<&'m [f32]>,
}

impl Encoded<'_> {
    /// Parameters $1..$9 of `Insert` and `Write`.
    fn params(&self) -> [&(dyn ToSql + Sync); 9] {
        [
            &self.m.id,
            &self.status,
            &self.m.scope.tenant,
            &self.m.scope.project,
            &self.m.scope.session,
            &self.kind,
            &self.body,
            &self.embedding,
            &self.other,
        ]
    }
}

/// A memory from a row of `body, embedding, embedding_other`.
fn decode(row: &Row) -> MemResult<Memory> {
    let body: String = row.try_get(0).map_err(|e| corrupt("memory", e))?;
    let emb: Option<Vec<f32>> = row.try_get(1).map_err(|e| corrupt("embedding", e))?;
    let other: Option<Vec<f32>> = row.try_get(2).map_err(|e| corrupt("embedding", e))?;
    let mut m: Memory = serde_json::from_str(&body).map_err(|e| corrupt("memory", e))?;
    m.embedding = emb.or(other);
    Ok(m)
}

fn encode_audit(entries: &[AuditEntry]) -> MemResult<Vec<String>> {
    entries
        .iter()
        .map(|a| {
            serde_json::to_string(a)
                .map_err(|e| MemoryError::Backend(format!("cannot encode audit entry: {e}")))
        })
        .collect()
}

fn decode_relations(rows: Vec<Row>) -> MemResult<Vec<Relation>> {
    let mut v = rows
        .iter()
        .map(|r| {
            let body: String = r.try_get(0).map_err(|e| corrupt("relation", e))?;
            serde_json::from_str::<Relation>(&body).map_err(|e| corrupt("relation", e))
        })
        .collect::<MemResult<Vec<_>>>()?;
    // (from, kind, to) with kinds in declaration order, as the other backends give.
    v.sort_by(|a, b| (&a.from, a.kind, &a.to).cmp(&(&b.from, b.kind, &b.to)));
    Ok(v)
}

impl MemoryBackend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn insert(&self, m: &Memory, audit: &[AuditEntry]) -> MemResult<()> {
        let enc = self.encode(m)?;
        let entries = encode_audit(audit)?;
        self.write(|c| {
            let insert = self.stmt(c, Q::Insert)?;
            let add = self.stmt(c, Q::AuditAdd)?;
            let mut tx = c.client.transaction().map_err(|e| self.err(e))?;
            if tx
                .execute(&insert, &enc.params())
                .map_err(|e| self.err(e))?
                == 0
            {
                // Dropping `tx` rolls back.
                return Err(MemoryError::Conflict(format!(
                    "memory {} already exists",
                    m.id
                )));
            }
            if !entries.is_empty() {
                tx.execute(&add, &[&m.id, &entries])
                    .map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))
        })
    }

    fn get(&self, id: &str) -> MemResult<Option<Memory>> {
        let rows = self.rows(Q::Get, &[&id])?;
        rows.first().map(decode).transpose()
    }

    fn get_many(&self, ids: &[&str], embeddings: bool) -> MemResult<Vec<Option<Memory>>> {
        let q = if embeddings {
            Q::GetMany
        } else {
            Q::GetManyBodies
        };
        let rows = self.rows(q, &[&ids])?;
        let by_id: std::collections::HashMap<String, Memory> = rows
            .iter()
            .map(|r| decode(r).map(|m| (m.id.clone(), m)))
            .collect::<MemResult<_>>()?;
        Ok(ids.iter().map(|id| by_id.get(*id).cloned()).collect())
    }

    fn list(&self, filter: &Filter) -> MemResult<Vec<Memory>> {
        let statuses: Vec<&str> = if filter.statuses.is_empty() {
            vec![Status::Active.as_str()]
        } else {
            filter.statuses.iter().map(|s| s.as_str()).collect()
        };
        let kinds: Vec<&str> = filter.kinds.iter().map(|k| k.as_str()).collect();
        let mut q = format!("{} WHERE status = ANY($1)", self.sql.select_memories);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&statuses];
        for (col, val) in [
            ("tenant", &filter.tenant),
            ("project", &filter.project),
            ("session", &filter.session),
        ] {
            if !val.is_empty() {
                params.push(val);
                q.push_str(&format!(" AND {col} = ${}", params.len()));
            }
        }
        if !kinds.is_empty() {
            params.push(&kinds);
            q.push_str(&format!(" AND kind = ANY(${})", params.len()));
        }
        q.push_str(" ORDER BY id");
        let rows = self.read(|c| c.client.query(q.as_str(), &params).map_err(|e| self.err(e)))?;
        rows.iter().map(decode).collect()
    }

    fn ids(&self) -> MemResult<Vec<String>> {
        self.rows(Q::Ids, &[])?
            .iter()
            .map(|r| r.try_get(0).map_err(|e| corrupt("id", e)))
            .collect()
    }

    fn update(&self, id: &str, f: Update<'_>) -> MemResult<Memory> {
        self.write(|c| {
            let lock = self.stmt(c, Q::Lock)?;
            let write = self.stmt(c, Q::Write)?;
            let add = self.stmt(c, Q::AuditAdd)?;
            // Every early return below drops `tx`, which rolls back and releases the lock.
            let mut tx = c.client.transaction().map_err(|e| self.err(e))?;
            let row = tx
                .query_opt(&lock, &[&id])
                .map_err(|e| self.err(e))?
                .ok_or_else(|| MemoryError::NotFound(id.to_string()))?;
            let current = decode(&row)?;
            let (m, Some(entries)) = apply_update(id, &current, f)? else {
                return Ok(current);
            };
            let enc = self.encode(&m)?;
            tx.execute(&write, &enc.params()).map_err(|e| self.err(e))?;
            if !entries.is_empty() {
                let entries = encode_audit(&entries)?;
                tx.execute(&add, &[&id, &entries])
                    .map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))?;
            Ok(m)
        })
    }

    fn audit(&self, id: &str) -> MemResult<Vec<AuditEntry>> {
        self.rows(Q::AuditGet, &[&id])?
            .iter()
            .map(|r| {
                let body: String = r.try_get(0).map_err(|e| corrupt("audit entry", e))?;
                serde_json::from_str(&body).map_err(|e| corrupt("audit entry", e))
            })
            .collect()
    }

    fn insert_relation(&self, r: &Relation) -> MemResult<bool> {
        let body = serde_json::to_string(r)
            .map_err(|e| MemoryError::Backend(format!("cannot encode relation: {e}")))?;
        let n = self.write(|c| {
            let s = self.stmt(c, Q::RelAdd)?;
            c.client
                .execute(&s, &[&r.from, &r.kind.as_str(), &r.to, &body])
                .map_err(|e| self.err(e))
        })?;
        Ok(n == 1)
    }

    fn remove_relation(&self, from: &str, kind: RelKind, to: &str) -> MemResult<bool> {
        let n = self.write(|c| {
            let s = self.stmt(c, Q::RelRemove)?;
            c.client
                .execute(&s, &[&from, &kind.as_str(), &to])
                .map_err(|e| self.err(e))
        })?;
        Ok(n == 1)
    }

    fn relations(&self, node: &str) -> MemResult<Vec<Relation>> {
        decode_relations(self.rows(Q::RelNode, &[&node])?)
    }

    fn relations_many(&self, nodes: &[&str]) -> MemResult<Vec<Vec<Relation>>> {
        let all = decode_relations(self.rows(Q::RelNodes, &[&nodes])?)?;
        Ok(nodes
            .iter()
            .map(|n| {
                all.iter()
                    .filter(|r| r.from == *n || r.to == *n)
                    .cloned()
                    .collect()
            })
            .collect())
    }

    fn relations_of_kind(&self, kind: RelKind) -> MemResult<Vec<Relation>> {
        decode_relations(self.rows(Q::RelKind, &[&kind.as_str()])?)
    }

    fn version(&self) -> MemResult<u64> {
        let rows = self.rows(Q::Version, &[])?;
        let v: i64 = rows
            .first()
            .ok_or_else(|| MemoryError::Backend("the version row is missing".into()))?
            .try_get(0)
            .map_err(|e| corrupt("version", e))?;
        Ok(v as u64)
    }
}
