//! A collection's vector index in PostgreSQL (pgvector), next to the documents of a
//! [`crate::PgStore`]: one table per collection (`vec_<id>`: doc, ordinal, embedding)
//! with an HNSW index (inner product on unit vectors, so the score is the cosine
//! similarity the local index gives), and one row per collection in `vector_sets`
//! naming its table, model, dimension and the store generation the table reflects.
//!
//! Every replica searches the same index, so none keeps a graph in memory or rebuilds
//! one when it starts. Whoever finds the index behind the store (a replica searching,
//! the writer after its batch) brings it up inside [`PgVectors::update`]: a transaction
//! holding the collection's `vector_sets` row, so two processes never apply the same
//! batch twice, and a search never sees half a batch. The engine decides what to apply
//! (from the store's journal log), as it does for the local index.
//!
//! The `vector` extension is created when missing (that needs the right to); without
//! it, opening fails with an error that says so.

use neuralcore_core::settings::HnswParams;
use neuralcore_core::{DocKey, StoreError, StoreResult};
use neuralcore_pg::postgres::SimpleQueryMessage;
use neuralcore_pg::Pool;

use crate::pg_store::{se, unavailable};

/// Rows per insert statement.
const INSERT_ROWS: usize = 500;
/// pgvector's largest `hnsw.ef_search`.
const MAX_EF_SEARCH: usize = 1000;

/// A vector as pgvector's text form (`[0.1,-2,...]`): `{}` prints each float exactly.
fn literal(v: &[f32]) -> String {
    let mut s = String::with_capacity(v.len() * 11 + 2);
    s.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&x.to_string());
    }
    s.push(']');
    s
}

/// One collection's vectors in PostgreSQL.
pub struct PgVectors {
    pool: Pool,
    /// The collection.
    collection: String,
    /// The quoted store schema.
    schema: String,
    /// The collection's table, schema-qualified and quoted.
    table: String,
    /// The extension's schema, quoted (operators and types are qualified with it).
    ns: String,
    dim: usize,
    params: HnswParams,
    /// The most `maintenance_work_mem` a rebuild's HNSW build may take, in MiB.
    build_memory_mb: u64,
}

/// The default of [`PgVectors::with_build_memory_mb`]: room for about a million
/// 384-dimensional vectors at M 16.
pub const DEFAULT_BUILD_MEMORY_MB: u64 = 2048;

/// What pgvector's HNSW build holds in memory for `rows` vectors of `dim` dimensions at
/// `m` links per node, in MiB, with a quarter to spare: the vector (4 bytes a
/// dimension and a header), its element (~100 bytes) and its neighbour lists (2M on
/// layer 0, about M/(M-1) more above, 8 bytes each with their distances). When the graph
/// outgrows `maintenance_work_mem` pgvector goes on inserting tuple by tuple into the
/// index on disk, many times slower (measured in `nc-bench million`).
fn build_memory_mb(rows: u64, dim: usize, m: usize) -> u64 {
    let per_vector = (dim as u64 * 4 + 8) + 100 + (2 * m as u64 + m as u64 / 8 + 1) * 8;
    (rows.saturating_mul(per_vector) / (1 << 20)) * 5 / 4 + 1
}

impl std::fmt::Debug for PgVectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgVectors")
            .field("url", &self.pool.url)
            .field("table", &self.table)
            .finish()
    }
}

/// What a search found: a chunk and its cosine similarity to the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PgVectorHit {
    /// The chunk's document.
    pub doc: DocKey,
    /// The chunk's ordinal.
    pub ordinal: u32,
    /// Cosine similarity.
    pub score: f32,
}

/// The collection's table inside [`PgVectors::update`]'s transaction.
pub struct VectorTxn<'t, 'c> {
    tx: &'t mut neuralcore_pg::postgres::Transaction<'c>,
    v: &'t PgVectors,
    generation: u64,
}

impl PgVectors {
    /// The vectors of `collection` in the store at `url` / `schema` (whose migrations
    /// have run: open the [`crate::PgStore`] first), for `model` of `dim` dimensions.
    /// Creates the extension, the collection's row and table when missing; a table
    /// written by another model or dimension is emptied and set to generation 0, so the
    /// next catch-up fills it again.
    pub fn open(
        url: &str,
        schema: &str,
        pool_size: usize,
        collection: &str,
        model: &str,
        dim: usize,
        params: HnswParams,
    ) -> StoreResult<Self> {
        let quoted = neuralcore_pg::quote_ident(schema).ok_or_else(|| {
            StoreError::InvalidInput(format!("schema name {schema:?} is not an identifier"))
        })?;
        if dim == 0 || dim > 2000 {
            return Err(StoreError::InvalidInput(format!(
                "pgvector indexes vectors of 1 to 2000 dimensions with HNSW, not {dim}"
            )));
        }
        let target =
            neuralcore_pg::config(url, "neuralcore-vectors", std::time::Duration::from_secs(5))
                .map_err(se)?;
        let pool = Pool::new(target, pool_size.max(1), std::time::Duration::from_secs(30));
        let url = pool.url.clone();
        let map = |e| se(neuralcore_pg::map(e, &url));
        let (ns, id) = pool.write(se, unavailable, |c| {
            let mut tx = c.client.transaction().map_err(map)?;
            // Opens serialized among themselves (DDL), never with the store's writers: an
            // update holds a set's row while it writes the embedding cache under the
            // store's lock, so taking that lock here and then the row could deadlock
            // unseen (the two are on different connections).
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                &[&format!("neuralcore-vectors:{schema}")],
            )
            .map_err(map)?;
            let mut sp = tx.transaction().map_err(map)?;
            if let Err(e) = sp.batch_execute("CREATE EXTENSION IF NOT EXISTS vector") {
                sp.rollback().map_err(map)?;
                let e = neuralcore_pg::map(e, &url);
                return Err(StoreError::Backend(format!(
                    "index.vector = \"pgvector\" needs the `vector` extension in the \
                     database at {url}, which could not be created ({e}): install pgvector \
                     on the server, or have its owner run CREATE EXTENSION vector"
                )));
            }
            sp.commit().map_err(map)?;
            let ns: String = tx
                .query_one(
                    "SELECT quote_ident(n.nspname) FROM pg_extension e \
                     JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'vector'",
                    &[],
                )
                .map_err(map)?
                .get(0);
            let row = tx
                .query_opt(
                    &format!(
                        "SELECT id, model, dim FROM {quoted}.vector_sets WHERE collection = $1 \
                         FOR UPDATE"
                    ),
                    &[&collection],
                )
                .map_err(map)?;
            let id: i64 = match row {
                Some(r) => {
                    let (id, m, d): (i64, String, i32) = (r.get(0), r.get(1), r.get(2));
                    if m != model || d as usize != dim {
                        tracing::info!(
                            collection,
                            was = m,
                            model,
                            "pgvector index emptied for another model"
                        );
                        tx.batch_execute(&format!("DROP TABLE IF EXISTS {quoted}.vec_{id}"))
                            .map_err(map)?;
                        tx.execute(
                            &format!(
                                "UPDATE {quoted}.vector_sets SET model = $2, dim = $3, \
                                 generation = 0 WHERE id = $1"
                            ),
                            &[&id, &model, &(dim as i32)],
                        )
                        .map_err(map)?;
                    }
                    id
                }
                None => tx
                    .query_one(
                        &format!(
                            "INSERT INTO {quoted}.vector_sets (collection, model, dim) \
                             VALUES ($1, $2, $3) RETURNING id"
                        ),
                        &[&collection, &model, &(dim as i32)],
                    )
                    .map_err(map)?
                    .get(0),
            };
            let made: bool = tx
                .query_one(
                    "SELECT to_regclass($1) IS NOT NULL",
                    &[&format!("{quoted}.vec_{id}_hnsw")],
                )
                .map_err(map)?
                .get(0);
            // Already there (every open but the first): no DDL, which would wait behind
            // a rebuild's lock on the table.
            if !made {
                tx.batch_execute(&format!(
                    "CREATE TABLE IF NOT EXISTS {quoted}.vec_{id} (
                     doc bigint NOT NULL,
                     ordinal integer NOT NULL,
                     embedding {ns}.vector({dim}) NOT NULL,
                     PRIMARY KEY (doc, ordinal));
                 CREATE INDEX IF NOT EXISTS vec_{id}_hnsw ON {quoted}.vec_{id}
                     USING hnsw (embedding {ns}.vector_ip_ops)
                     WITH (m = {m}, ef_construction = {ef});",
                    m = params.m.clamp(2, 100),
                    ef = params.ef_construction.clamp(4, 1000),
                ))
                .map_err(map)?;
            }
            tx.commit().map_err(map)?;
            Ok((ns, id))
        })?;
        Ok(PgVectors {
            pool,
            collection: collection.to_string(),
            table: format!("{quoted}.vec_{id}"),
            schema: quoted,
            ns,
            dim,
            params,
            build_memory_mb: DEFAULT_BUILD_MEMORY_MB,
        })
    }

    /// Let a rebuild's HNSW build take up to `mb` MiB of `maintenance_work_mem` (it asks
    /// for what the table's rows need, at least 64 MiB, at most this): a graph that does
    /// not fit is built many times slower.
    pub fn with_build_memory_mb(mut self, mb: u64) -> Self {
        self.build_memory_mb = mb.max(64);
        self
    }

    fn map(&self, e: neuralcore_pg::postgres::Error) -> StoreError {
        se(neuralcore_pg::map(e, &self.pool.url))
    }

    /// The store generation the table reflects.
    pub fn generation(&self) -> StoreResult<u64> {
        let sql = format!(
            "SELECT generation FROM {}.vector_sets WHERE collection = $1",
            self.schema
        );
        self.pool.read(se, unavailable, |c| {
            let st = c.stmt(&sql, &self.pool.url).map_err(se)?;
            let row = c
                .client
                .query_opt(&st, &[&self.collection])
                .map_err(|e| self.map(e))?;
            Ok(row.map(|r| r.get::<_, i64>(0) as u64).unwrap_or(0))
        })
    }

    /// The dimension of the vectors.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// How many vectors the table holds.
    pub fn len(&self) -> StoreResult<u64> {
        let sql = format!("SELECT count(*) FROM {}", self.table);
        self.pool.read(se, unavailable, |c| {
            let n: i64 = c
                .client
                .query_one(&sql, &[])
                .map_err(|e| self.map(e))?
                .get(0);
            Ok(n as u64)
        })
    }

    /// Whether the table holds no vectors.
    pub fn is_empty(&self) -> StoreResult<bool> {
        Ok(self.len()? == 0)
    }

    /// The bytes the server keeps for the table (with its TOAST) and for its HNSW index.
    pub fn disk_bytes(&self) -> StoreResult<(u64, u64)> {
        let sql = format!(
            "SELECT pg_table_size('{t}'), coalesce(pg_relation_size(to_regclass('{t}_hnsw')), 0)",
            t = self.table.replace('\'', "''")
        );
        self.pool.read(se, unavailable, |c| {
            let r = c.client.query_one(&sql, &[]).map_err(|e| self.map(e))?;
            Ok((r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
        })
    }

    /// The `k` chunks nearest `query` (unit length), best first: through the HNSW
    /// index (`ef_search` candidates, at least `k`), or with `exact` by scanning every
    /// vector.
    pub fn search(&self, query: &[f32], k: usize, exact: bool) -> StoreResult<Vec<PgVectorHit>> {
        if query.len() != self.dim {
            return Err(StoreError::InvalidInput(format!(
                "a query vector of {} dimensions for an index of {}",
                query.len(),
                self.dim
            )));
        }
        if k == 0 {
            return Ok(Vec::new());
        }
        // One round trip: the settings and the query in one simple-protocol message,
        // run as one transaction (so SET LOCAL holds for the query alone).
        let q = literal(query);
        let ns = &self.ns;
        let ef = self.params.ef_search.max(k).min(MAX_EF_SEARCH);
        // pgvector's HNSW scan returns at most ef_search rows: deeper, scan exactly.
        let exact = exact || k > MAX_EF_SEARCH;
        let plan = if exact {
            "SET LOCAL enable_indexscan = off;"
        } else {
            ""
        };
        let sql = format!(
            "SET LOCAL hnsw.ef_search = {ef}; {plan}
             SELECT doc, ordinal, embedding OPERATOR({ns}.<#>) '{q}'::{ns}.vector AS d
             FROM {t} ORDER BY d LIMIT {k}",
            t = self.table
        );
        self.pool.read(se, unavailable, |c| {
            let msgs = c.client.simple_query(&sql).map_err(|e| self.map(e))?;
            let mut hits = Vec::with_capacity(k);
            for m in msgs {
                if let SimpleQueryMessage::Row(r) = m {
                    let field = |i: usize| -> StoreResult<&str> {
                        r.get(i).ok_or_else(|| {
                            StoreError::Corrupt(format!("a NULL in {} column {i}", self.table))
                        })
                    };
                    let bad = |what: &str| {
                        StoreError::Corrupt(format!(
                            "a {what} in {} that does not parse",
                            self.table
                        ))
                    };
                    let doc: i64 = field(0)?.parse().map_err(|_| bad("doc"))?;
                    let ordinal: i32 = field(1)?.parse().map_err(|_| bad("ordinal"))?;
                    let d: f64 = field(2)?.parse().map_err(|_| bad("distance"))?;
                    hits.push(PgVectorHit {
                        doc: doc as u64,
                        ordinal: ordinal as u32,
                        // `<#>` is the negated inner product.
                        score: -d as f32,
                    });
                }
            }
            Ok(hits)
        })
    }

    /// The cosine similarity of a chunk's vector to `query`; `None` when the table holds
    /// none for it.
    pub fn similarity(&self, doc: DocKey, ordinal: u32, query: &[f32]) -> StoreResult<Option<f32>> {
        let sql = format!(
            "SELECT -(embedding OPERATOR({ns}.<#>) $3::real[]::{ns}.vector) FROM {t} \
             WHERE doc = $1 AND ordinal = $2",
            ns = self.ns,
            t = self.table
        );
        let q = query.to_vec();
        self.pool.read(se, unavailable, |c| {
            let st = c.stmt(&sql, &self.pool.url).map_err(se)?;
            let row = c
                .client
                .query_opt(&st, &[&(doc as i64), &(ordinal as i32), &q])
                .map_err(|e| self.map(e))?;
            Ok(row.map(|r| r.get::<_, f64>(0) as f32))
        })
    }

    /// Run `f` on the table in one transaction holding the collection's row: with
    /// `wait`, after whoever holds it now; without, `Ok(None)` at once when another
    /// process holds it (a search then goes on with the index as it is). What `f` did
    /// commits when it returns `Ok`, with the generation it set.
    pub fn update<T, E: From<StoreError>>(
        &self,
        wait: bool,
        f: impl FnOnce(&mut VectorTxn<'_, '_>) -> Result<T, E>,
    ) -> Result<Option<T>, E> {
        let sql = format!(
            "SELECT generation FROM {}.vector_sets WHERE collection = $1 FOR UPDATE{}",
            self.schema,
            if wait { "" } else { " SKIP LOCKED" }
        );
        let mut conn = self.pool.get().map_err(se)?;
        let r = (|| {
            let mut tx = conn.client.transaction().map_err(|e| self.map(e))?;
            let Some(row) = tx
                .query_opt(&sql, &[&self.collection])
                .map_err(|e| self.map(e))?
            else {
                // Locked by another process (SKIP LOCKED), or gone.
                let there = tx
                    .query_opt(
                        &format!(
                            "SELECT 1 FROM {}.vector_sets WHERE collection = $1",
                            self.schema
                        ),
                        &[&self.collection],
                    )
                    .map_err(|e| self.map(e))?
                    .is_some();
                if there && !wait {
                    return Ok(None);
                }
                return Err(StoreError::Backend(format!(
                    "the pgvector index of collection {:?} is gone from {} (its schema was \
                     dropped or changed meanwhile): restart to recreate it",
                    self.collection, self.table
                ))
                .into());
            };
            let was = row.get::<_, i64>(0) as u64;
            let mut vt = VectorTxn {
                tx: &mut tx,
                v: self,
                generation: was,
            };
            let out = f(&mut vt)?;
            let now = vt.generation;
            if now != was {
                tx.execute(
                    &format!(
                        "UPDATE {}.vector_sets SET generation = $2 WHERE collection = $1",
                        self.schema
                    ),
                    &[&self.collection, &(now as i64)],
                )
                .map_err(|e| self.map(e))?;
            }
            tx.commit().map_err(|e| self.map(e))?;
            Ok(Some(out))
        })();
        // A connection the server closed is dropped when returned.
        r
    }
}

impl VectorTxn<'_, '_> {
    /// The generation the table reflects (as of this transaction, or as set).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Set the generation the table reflects once this transaction commits.
    pub fn set_generation(&mut self, generation: u64) {
        self.generation = generation;
    }

    fn map(&self, e: neuralcore_pg::postgres::Error) -> StoreError {
        self.v.map(e)
    }

    /// Remove every vector (a rebuild; the HNSW index is built again by
    /// [`VectorTxn::finish_rebuild`] after the inserts, faster than inserting into it).
    pub fn clear(&mut self) -> StoreResult<()> {
        let t = &self.v.table;
        self.tx
            .batch_execute(&format!(
                "DROP INDEX IF EXISTS {s}.{name}_hnsw;
                 TRUNCATE {t};",
                s = self.v.schema,
                name = t.rsplit('.').next().unwrap_or(t),
            ))
            .map_err(|e| self.map(e))
    }

    /// Build the HNSW index again after [`VectorTxn::clear`] and the inserts, with
    /// the `maintenance_work_mem` the rows need (within the configured most).
    pub fn finish_rebuild(&mut self) -> StoreResult<()> {
        let t = &self.v.table;
        let p = self.v.params;
        let rows: i64 = self
            .tx
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .map_err(|e| self.map(e))?
            .get(0);
        let mb = build_memory_mb(rows.max(0) as u64, self.v.dim, p.m.clamp(2, 100))
            .clamp(64, self.v.build_memory_mb);
        self.tx
            .batch_execute(&format!(
                "SET LOCAL maintenance_work_mem = '{mb}MB';
                 CREATE INDEX IF NOT EXISTS {name}_hnsw ON {t}
                     USING hnsw (embedding {ns}.vector_ip_ops)
                     WITH (m = {m}, ef_construction = {ef});",
                name = t.rsplit('.').next().unwrap_or(t),
                ns = self.v.ns,
                m = p.m.clamp(2, 100),
                ef = p.ef_construction.clamp(4, 1000),
            ))
            .map_err(|e| self.map(e))
    }

    /// Remove every vector of `docs`.
    pub fn remove_docs(&mut self, docs: &[DocKey]) -> StoreResult<u64> {
        if docs.is_empty() {
            return Ok(0);
        }
        let keys: Vec<i64> = docs.iter().map(|d| *d as i64).collect();
        self.tx
            .execute(
                &format!("DELETE FROM {} WHERE doc = ANY($1::bigint[])", self.v.table),
                &[&keys],
            )
            .map_err(|e| self.map(e))
    }

    /// Insert (or replace) vectors, each unit length and of the index's dimension.
    pub fn insert(&mut self, vectors: &[((DocKey, u32), Vec<f32>)]) -> StoreResult<()> {
        if let Some(((d, o), v)) = vectors.iter().find(|(_, v)| v.len() != self.v.dim) {
            return Err(StoreError::InvalidInput(format!(
                "a vector of {} dimensions for chunk {d}/{o} of an index of {}",
                v.len(),
                self.v.dim
            )));
        }
        let sql = format!(
            "INSERT INTO {t} (doc, ordinal, embedding)
             SELECT d, o, e::{ns}.vector FROM unnest($1::bigint[], $2::int[], $3::text[]) AS x(d, o, e)
             ON CONFLICT (doc, ordinal) DO UPDATE SET embedding = EXCLUDED.embedding",
            t = self.v.table,
            ns = self.v.ns
        );
        let st = self.tx.prepare(&sql).map_err(|e| self.map(e))?;
        for part in vectors.chunks(INSERT_ROWS) {
            let docs: Vec<i64> = part.iter().map(|((d, _), _)| *d as i64).collect();
            let ords: Vec<i32> = part.iter().map(|((_, o), _)| *o as i32).collect();
            let vecs: Vec<String> = part.iter().map(|(_, v)| literal(v)).collect();
            self.tx
                .execute(&st, &[&docs, &ords, &vecs])
                .map_err(|e| self.map(e))?;
        }
        Ok(())
    }
}
