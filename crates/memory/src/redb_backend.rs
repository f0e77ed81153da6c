//! The embedded persistent backend: one redb file (`memory.redb` in the data dir).
//!
//! Every write is one redb write transaction, durable at commit (copy-on-write B-trees
//! with a checksummed commit slot): a `kill -9` keeps every acknowledged write and
//! nothing of a half-done one. redb runs one write transaction at a time, so
//! [`MemoryBackend::update`] reads, applies its closure and writes inside one transaction
//! and concurrent updates of a memory are serialized. redb locks the file: a second
//! opener (another process, or a second open in this one) gets
//! [`MemoryError::Unavailable`].
//!
//! Tables (values are JSON):
//!
//! - `memories`: id → [`Memory`];
//! - `audit`: (id, seq) → [`AuditEntry`], seq counting from 0 per memory;
//! - `relations`: (from, kind, to) → [`Relation`], with two key-only indexes,
//!   `relations_to` (to, kind, from) for [`MemoryBackend::relations`] and
//!   `relations_kind` (kind, from, to) for [`MemoryBackend::relations_of_kind`].

use std::path::{Path, PathBuf};

use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::backend::{apply_update, first_version, MemoryBackend, Update};
use crate::error::{MemResult, MemoryError};
use crate::types::{AuditEntry, Filter, Memory, RelKind, Relation};

/// Page cache (redb's default is 1 GiB).
const CACHE_BYTES: usize = 16 * 1024 * 1024;

type Triple = (&'static str, &'static str, &'static str);

const MEMORIES: TableDefinition<'static, &'static str, &'static [u8]> =
    TableDefinition::new("memories");
const AUDIT: TableDefinition<'static, (&'static str, u64), &'static [u8]> =
    TableDefinition::new("audit");
const RELATIONS: TableDefinition<'static, Triple, &'static [u8]> =
    TableDefinition::new("relations");
/// Memory id → its embedding (f32, little endian). Kept out of the memory's JSON so
/// reading a memory without its vector (search's fresh reads) parses a few hundred bytes,
/// not thousands; files written before this table hold the vector in the JSON, which
/// still reads, and moves here on the memory's next update.
const EMBEDDINGS: TableDefinition<'static, &'static str, &'static [u8]> =
    TableDefinition::new("embeddings");
const RELATIONS_TO: TableDefinition<'static, Triple, ()> = TableDefinition::new("relations_to");
const RELATIONS_KIND: TableDefinition<'static, Triple, ()> = TableDefinition::new("relations_kind");
/// Named counters: [`VERSION`].
const META: TableDefinition<'static, &'static str, u64> = TableDefinition::new("meta");
/// [`MemoryBackend::version`]: set by [`first_version`] when the file is created, bumped
/// in every committed write transaction.
const VERSION: &str = "version";

fn be<E: std::fmt::Display>(e: E) -> MemoryError {
    MemoryError::Backend(e.to_string())
}

fn to_json<T: Serialize>(v: &T) -> MemResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| MemoryError::Backend(format!("cannot encode: {e}")))
}

fn from_json<T: DeserializeOwned>(what: &str, b: &[u8]) -> MemResult<T> {
    serde_json::from_slice(b).map_err(|e| MemoryError::Backend(format!("corrupt {what}: {e}")))
}

/// A memory as stored: its JSON without the embedding, and the embedding's bytes.
fn encode_memory(m: &Memory) -> MemResult<(Vec<u8>, Option<Vec<u8>>)> {
    let bytes = m
        .embedding
        .as_ref()
        .map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect());
    let json = m
        .json_without_embedding()
        .map_err(|e| MemoryError::Backend(format!("cannot encode: {e}")))?;
    Ok((json.into_bytes(), bytes))
}

/// Give `m` its vector from the embeddings table `t`, unless its JSON held one (files
/// from before that table).
fn attach_vector<T: ReadableTable<&'static str, &'static [u8]>>(
    m: &mut Memory,
    t: &T,
) -> MemResult<()> {
    if m.embedding.is_none() {
        if let Some(v) = t.get(m.id.as_str()).map_err(be)? {
            m.embedding = Some(decode_vector(&m.id, v.value())?);
        }
    }
    Ok(())
}

fn decode_vector(id: &str, b: &[u8]) -> MemResult<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return Err(MemoryError::Backend(format!(
            "corrupt embedding of {id}: {} bytes, not a whole number of f32",
            b.len()
        )));
    }
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Write memory `m` (its JSON and its embedding, or no embedding row) in `txn`.
fn put_memory(txn: &redb::WriteTransaction, m: &Memory) -> MemResult<()> {
    let (json, vector) = encode_memory(m)?;
    txn.open_table(MEMORIES)
        .map_err(be)?
        .insert(m.id.as_str(), json.as_slice())
        .map_err(be)?;
    let mut emb = txn.open_table(EMBEDDINGS).map_err(be)?;
    match vector {
        Some(v) => {
            emb.insert(m.id.as_str(), v.as_slice()).map_err(be)?;
        }
        None => {
            emb.remove(m.id.as_str()).map_err(be)?;
        }
    }
    Ok(())
}

/// Memories in one redb file.
pub struct RedbBackend {
    db: redb::Database,
    path: PathBuf,
}

impl std::fmt::Debug for RedbBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbBackend")
            .field("path", &self.path)
            .finish()
    }
}

impl RedbBackend {
    /// Open (or create) the store at `path`, creating its directory. `Unavailable` when
    /// the file is held by another process (or already open in this one) or cannot be
    /// read; `Backend` when it is not a usable redb file.
    pub fn open(path: &Path) -> MemResult<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|e| MemoryError::Unavailable(format!("{}: {e}", parent.display())))?;
        }
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => MemoryError::Unavailable(format!(
                    "{} is in use by another process (one process at a time may open an \
                     embedded memory store; use the postgres backend to share one)",
                    path.display()
                )),
                redb::DatabaseError::Storage(redb::StorageError::Io(io)) => {
                    MemoryError::Unavailable(format!("{}: {io}", path.display()))
                }
                other => MemoryError::Backend(format!("{}: {other}", path.display())),
            })?;
        let txn = db.begin_write().map_err(be)?;
        txn.open_table(MEMORIES).map_err(be)?;
        txn.open_table(EMBEDDINGS).map_err(be)?;
        txn.open_table(AUDIT).map_err(be)?;
        txn.open_table(RELATIONS).map_err(be)?;
        txn.open_table(RELATIONS_TO).map_err(be)?;
        txn.open_table(RELATIONS_KIND).map_err(be)?;
        {
            let mut meta = txn.open_table(META).map_err(be)?;
            if meta.get(VERSION).map_err(be)?.is_none() {
                meta.insert(VERSION, first_version()).map_err(be)?;
            }
        }
        txn.commit().map_err(be)?;
        Ok(RedbBackend {
            db,
            path: path.to_path_buf(),
        })
    }

    /// The file it lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Check the file's invariants: every memory decodes under its own id, every vector
    /// belongs to a memory and is whole f32s, every audit
    /// log belongs to a memory and numbers its entries 0, 1, 2, …, and every relation is
    /// in both indexes and nothing else is. Returns what is wrong as `Backend`.
    pub fn verify(&self) -> MemResult<()> {
        let txn = self.db.begin_read().map_err(be)?;
        let mems = txn.open_table(MEMORIES).map_err(be)?;
        for item in mems.iter().map_err(be)? {
            let (k, v) = item.map_err(be)?;
            let m: Memory = from_json("memory", v.value())?;
            if m.id != k.value() {
                return Err(MemoryError::Backend(format!(
                    "memory {} is stored under {}",
                    m.id,
                    k.value()
                )));
            }
        }
        let emb = txn.open_table(EMBEDDINGS).map_err(be)?;
        for item in emb.iter().map_err(be)? {
            let (k, v) = item.map_err(be)?;
            if mems.get(k.value()).map_err(be)?.is_none() {
                return Err(MemoryError::Backend(format!(
                    "embedding of missing memory {}",
                    k.value()
                )));
            }
            decode_vector(k.value(), v.value())?;
        }
        let audit = txn.open_table(AUDIT).map_err(be)?;
        let mut last: Option<(String, u64)> = None;
        for item in audit.iter().map_err(be)? {
            let (k, v) = item.map_err(be)?;
            let (id, seq) = k.value();
            from_json::<AuditEntry>("audit entry", v.value())?;
            let expected = match &last {
                Some((l, s)) if l == id => s + 1,
                _ => 0,
            };
            if seq != expected {
                return Err(MemoryError::Backend(format!(
                    "audit of {id}: entry {seq} where {expected} was expected"
                )));
            }
            if expected == 0 && mems.get(id).map_err(be)?.is_none() {
                return Err(MemoryError::Backend(format!(
                    "audit entries for missing memory {id}"
                )));
            }
            last = Some((id.to_string(), seq));
        }
        let rel = txn.open_table(RELATIONS).map_err(be)?;
        let to = txn.open_table(RELATIONS_TO).map_err(be)?;
        let kind = txn.open_table(RELATIONS_KIND).map_err(be)?;
        for item in rel.iter().map_err(be)? {
            let (k, v) = item.map_err(be)?;
            let (f, kd, t) = k.value();
            let r: Relation = from_json("relation", v.value())?;
            if (r.from.as_str(), r.kind.as_str(), r.to.as_str()) != (f, kd, t) {
                return Err(MemoryError::Backend(format!(
                    "relation {f} {kd} {t} holds {r:?}"
                )));
            }
            if to.get((t, kd, f)).map_err(be)?.is_none()
                || kind.get((kd, f, t)).map_err(be)?.is_none()
            {
                return Err(MemoryError::Backend(format!(
                    "relation {f} {kd} {t} is missing from an index"
                )));
            }
        }
        let n = rel.len().map_err(be)?;
        if to.len().map_err(be)? != n || kind.len().map_err(be)? != n {
            return Err(MemoryError::Backend(
                "relation indexes hold entries without a relation".into(),
            ));
        }
        Ok(())
    }

    /// Run `f` in a write transaction; commit (with the version bumped) when it returns
    /// `(_, true)`, abort when it returns `(_, false)` or an error.
    fn write<T>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> MemResult<(T, bool)>,
    ) -> MemResult<T> {
        let txn = self.db.begin_write().map_err(be)?;
        match f(&txn) {
            Ok((v, true)) => {
                {
                    let mut meta = txn.open_table(META).map_err(be)?;
                    let version = meta.get(VERSION).map_err(be)?.map_or(0, |v| v.value());
                    meta.insert(VERSION, version.wrapping_add(1)).map_err(be)?;
                }
                txn.commit().map_err(be)?;
                Ok(v)
            }
            Ok((v, false)) => {
                txn.abort().map_err(be)?;
                Ok(v)
            }
            Err(e) => {
                // Nothing was committed; an error aborting changes nothing for the caller.
                let _ = txn.abort();
                Err(e)
            }
        }
    }

    fn read(&self) -> MemResult<redb::ReadTransaction> {
        self.db.begin_read().map_err(be)
    }

    /// The relations that start or end at `node`, read in `txn`.
    fn relations_in(txn: &redb::ReadTransaction, node: &str) -> MemResult<Vec<Relation>> {
        let mut out = Vec::new();
        {
            let rel = txn.open_table(RELATIONS).map_err(be)?;
            for item in rel.range((node, "", "")..).map_err(be)? {
                let (k, v) = item.map_err(be)?;
                if k.value().0 != node {
                    break;
                }
                out.push(from_json("relation", v.value())?);
            }
        }
        // Incoming ones; a relation from `node` to itself was listed above.
        out.extend(Self::relations_via(
            txn,
            RELATIONS_TO,
            node,
            |to, kind, from| {
                (from != to).then(|| (from.to_string(), kind.to_string(), to.to_string()))
            },
        )?);
        Ok(out)
    }

    /// The relations behind the entries of `index` whose first part is `first`, read
    /// from the `relations` table; `key` turns an index key into a relation key (`None`:
    /// skip it).
    fn relations_via(
        txn: &redb::ReadTransaction,
        index: TableDefinition<'static, Triple, ()>,
        first: &str,
        key: impl Fn(&str, &str, &str) -> Option<(String, String, String)>,
    ) -> MemResult<Vec<Relation>> {
        let idx = txn.open_table(index).map_err(be)?;
        let rel = txn.open_table(RELATIONS).map_err(be)?;
        let mut out = Vec::new();
        for item in idx.range((first, "", "")..).map_err(be)? {
            let (k, _) = item.map_err(be)?;
            let (a, b, c) = k.value();
            if a != first {
                break;
            }
            let Some((f, kd, t)) = key(a, b, c) else {
                continue;
            };
            let v = rel
                .get((f.as_str(), kd.as_str(), t.as_str()))
                .map_err(be)?
                .ok_or_else(|| {
                    MemoryError::Backend(format!("index entry without relation: {f} {kd} {t}"))
                })?;
            out.push(from_json("relation", v.value())?);
        }
        Ok(out)
    }
}

/// Append `entries` to the audit log of `id`, numbering on from its last entry.
fn append_audit(
    t: &mut redb::Table<'_, (&'static str, u64), &'static [u8]>,
    id: &str,
    entries: &[AuditEntry],
) -> MemResult<()> {
    if entries.is_empty() {
        return Ok(());
    }
    let first = {
        let last = t.range((id, 0)..=(id, u64::MAX)).map_err(be)?.next_back();
        match last {
            Some(item) => item.map_err(be)?.0.value().1 + 1,
            None => 0,
        }
    };
    for (seq, e) in (first..).zip(entries) {
        t.insert((id, seq), to_json(e)?.as_slice()).map_err(be)?;
    }
    Ok(())
}

impl MemoryBackend for RedbBackend {
    fn name(&self) -> &'static str {
        "embedded"
    }

    fn backup_to(&self, dest: &Path) -> MemResult<u64> {
        use neuralcore_store::copy::RedbCopy;
        let be = |e: neuralcore_store::copy::CopyError| MemoryError::Backend(e.to_string());
        let mut copy = RedbCopy::begin(&self.db, dest).map_err(be)?;
        copy.table(MEMORIES)
            .and_then(|c| c.table(AUDIT))
            .and_then(|c| c.table(RELATIONS))
            .and_then(|c| c.table(EMBEDDINGS))
            .and_then(|c| c.table(RELATIONS_TO))
            .and_then(|c| c.table(RELATIONS_KIND))
            .and_then(|c| c.table(META))
            .map_err(be)?;
        copy.finish().map_err(be)
    }

    fn insert(&self, m: &Memory, audit: &[AuditEntry]) -> MemResult<()> {
        self.write(|txn| {
            let exists = txn
                .open_table(MEMORIES)
                .map_err(be)?
                .get(m.id.as_str())
                .map_err(be)?
                .is_some();
            if exists {
                return Err(MemoryError::Conflict(format!(
                    "memory {} already exists",
                    m.id
                )));
            }
            put_memory(txn, m)?;
            let mut log = txn.open_table(AUDIT).map_err(be)?;
            append_audit(&mut log, &m.id, audit)?;
            Ok(((), true))
        })
    }

    fn get(&self, id: &str) -> MemResult<Option<Memory>> {
        Ok(self.get_many(&[id], true)?.pop().flatten())
    }

    fn get_many(&self, ids: &[&str], embeddings: bool) -> MemResult<Vec<Option<Memory>>> {
        let txn = self.read()?;
        let t = txn.open_table(MEMORIES).map_err(be)?;
        let emb = txn.open_table(EMBEDDINGS).map_err(be)?;
        ids.iter()
            .map(|id| {
                let Some(v) = t.get(*id).map_err(be)? else {
                    return Ok(None);
                };
                let mut m: Memory = from_json("memory", v.value())?;
                if embeddings {
                    attach_vector(&mut m, &emb)?;
                } else {
                    m.embedding = None;
                }
                Ok(Some(m))
            })
            .collect()
    }

    fn list(&self, filter: &Filter) -> MemResult<Vec<Memory>> {
        let txn = self.read()?;
        let t = txn.open_table(MEMORIES).map_err(be)?;
        let emb = txn.open_table(EMBEDDINGS).map_err(be)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(be)? {
            let (_, v) = item.map_err(be)?;
            let mut m: Memory = from_json("memory", v.value())?;
            // Filter before reading the vector.
            if filter.matches(&m) {
                attach_vector(&mut m, &emb)?;
                out.push(m);
            }
        }
        Ok(out)
    }

    fn ids(&self) -> MemResult<Vec<String>> {
        let txn = self.read()?;
        let t = txn.open_table(MEMORIES).map_err(be)?;
        let mut out = Vec::new();
        for item in t.iter().map_err(be)? {
            out.push(item.map_err(be)?.0.value().to_string());
        }
        Ok(out)
    }

    fn update(&self, id: &str, f: Update<'_>) -> MemResult<Memory> {
        self.write(|txn| {
            let current: Memory = {
                let mems = txn.open_table(MEMORIES).map_err(be)?;
                let emb = txn.open_table(EMBEDDINGS).map_err(be)?;
                let body = mems.get(id).map_err(be)?;
                let Some(body) = body else {
                    return Err(MemoryError::NotFound(id.to_string()));
                };
                let mut m: Memory = from_json("memory", body.value())?;
                attach_vector(&mut m, &emb)?;
                m
            };
            let (m, Some(entries)) = apply_update(id, &current, f)? else {
                return Ok((current, false));
            };
            put_memory(txn, &m)?;
            let mut log = txn.open_table(AUDIT).map_err(be)?;
            append_audit(&mut log, id, &entries)?;
            Ok((m, true))
        })
    }

    fn audit(&self, id: &str) -> MemResult<Vec<AuditEntry>> {
        let txn = self.read()?;
        let t = txn.open_table(AUDIT).map_err(be)?;
        let mut out = Vec::new();
        for item in t.range((id, 0)..=(id, u64::MAX)).map_err(be)? {
            let (_, v) = item.map_err(be)?;
            out.push(from_json("audit entry", v.value())?);
        }
        Ok(out)
    }

    fn insert_relation(&self, r: &Relation) -> MemResult<bool> {
        let json = to_json(r)?;
        let (f, k, t) = (r.from.as_str(), r.kind.as_str(), r.to.as_str());
        self.write(|txn| {
            let mut rel = txn.open_table(RELATIONS).map_err(be)?;
            if rel.get((f, k, t)).map_err(be)?.is_some() {
                return Ok((false, false));
            }
            rel.insert((f, k, t), json.as_slice()).map_err(be)?;
            txn.open_table(RELATIONS_TO)
                .map_err(be)?
                .insert((t, k, f), ())
                .map_err(be)?;
            txn.open_table(RELATIONS_KIND)
                .map_err(be)?
                .insert((k, f, t), ())
                .map_err(be)?;
            Ok((true, true))
        })
    }

    fn remove_relation(&self, from: &str, kind: RelKind, to: &str) -> MemResult<bool> {
        let k = kind.as_str();
        self.write(|txn| {
            let mut rel = txn.open_table(RELATIONS).map_err(be)?;
            if rel.remove((from, k, to)).map_err(be)?.is_none() {
                return Ok((false, false));
            }
            txn.open_table(RELATIONS_TO)
                .map_err(be)?
                .remove((to, k, from))
                .map_err(be)?;
            txn.open_table(RELATIONS_KIND)
                .map_err(be)?
                .remove((k, from, to))
                .map_err(be)?;
            Ok((true, true))
        })
    }

    fn relations(&self, node: &str) -> MemResult<Vec<Relation>> {
        Ok(self.relations_many(&[node])?.pop().unwrap_or_default())
    }

    fn relations_many(&self, nodes: &[&str]) -> MemResult<Vec<Vec<Relation>>> {
        let txn = self.read()?;
        nodes
            .iter()
            .map(|node| Self::relations_in(&txn, node))
            .collect()
    }

    fn relations_of_kind(&self, kind: RelKind) -> MemResult<Vec<Relation>> {
        let txn = self.read()?;
        Self::relations_via(&txn, RELATIONS_KIND, kind.as_str(), |kind, from, to| {
            Some((from.to_string(), kind.to_string(), to.to_string()))
        })
    }

    fn version(&self) -> MemResult<u64> {
        let txn = self.read()?;
        let meta = txn.open_table(META).map_err(be)?;
        let v = meta.get(VERSION).map_err(be)?.map_or(0, |v| v.value());
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(id: &str, embedding: Option<Vec<f32>>) -> Memory {
        Memory {
            id: id.into(),
            text: "t".into(),
            kind: crate::Kind::Fact,
            scope: Default::default(),
            source: String::new(),
            created_at_ms: 1,
            last_used_at_ms: 1,
            use_counts: Default::default(),
            trust: 0.5,
            trust_at_ms: 1,
            status: crate::Status::Active,
            archived_at_ms: None,
            occurred_at: None,
            metadata: Default::default(),
            embedding,
        }
    }

    /// Files from before the embeddings table hold the vector in the memory's JSON: it
    /// still reads (also without vectors, and in `list`), and moves to the table on the
    /// memory's next update. New memories keep their JSON free of vectors.
    #[test]
    fn vectors_in_old_records_read_and_move_on_update() {
        let dir = tempfile::tempdir().unwrap();
        let b = RedbBackend::open(&dir.path().join("m.redb")).unwrap();
        let old = memory("00000000000000aa", Some(vec![1.0, -2.5]));
        b.write(|txn| {
            let json = to_json(&old)?;
            txn.open_table(MEMORIES)
                .map_err(be)?
                .insert(old.id.as_str(), json.as_slice())
                .map_err(be)?;
            Ok(((), true))
        })
        .unwrap();
        assert_eq!(b.get(&old.id).unwrap().unwrap(), old);
        assert_eq!(
            b.get_many(&[old.id.as_str()], false).unwrap()[0]
                .as_ref()
                .unwrap()
                .embedding,
            None
        );
        assert_eq!(b.list(&Filter::default()).unwrap(), vec![old.clone()]);
        let body = |id: &str| -> String {
            let txn = b.read().unwrap();
            let t = txn.open_table(MEMORIES).unwrap();
            let v = t.get(id).unwrap().unwrap();
            String::from_utf8(v.value().to_vec()).unwrap()
        };
        assert!(body(&old.id).contains("-2.5"));
        let updated = b
            .update(&old.id, &mut |m| {
                m.trust = 0.6;
                Ok(Vec::new())
            })
            .unwrap();
        assert_eq!(updated.embedding, old.embedding);
        assert!(!body(&old.id).contains("-2.5"), "{}", body(&old.id));
        assert_eq!(b.get(&old.id).unwrap().unwrap().embedding, old.embedding);
        let new = memory("00000000000000bb", Some(vec![0.5]));
        b.insert(&new, &[]).unwrap();
        assert!(body(&new.id).contains("\"embedding\":null"));
        assert_eq!(b.get(&new.id).unwrap().unwrap(), new);
        b.verify().unwrap();
        // A vector whose length is not whole f32s is a clear error.
        b.write(|txn| {
            txn.open_table(EMBEDDINGS)
                .map_err(be)?
                .insert(new.id.as_str(), [1u8, 2, 3].as_slice())
                .map_err(be)?;
            Ok(((), true))
        })
        .unwrap();
        let err = b.get(&new.id).unwrap_err().to_string();
        assert!(err.contains("corrupt embedding"), "{err}");
        assert!(b.verify().is_err());
    }
}
