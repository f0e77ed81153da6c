//! What a storage backend provides: atomic operations on memories, their audit log and
//! relations. The trust rules live above, in [`crate::MemoryStore`], so backends cannot
//! drift apart; [`crate::conformance`] checks each against the same suite.

use crate::error::{MemResult, MemoryError};
use crate::types::{AuditEntry, Filter, Memory, RelKind, Relation};

/// A change to one memory: edit it in place and return the audit entries that explain
/// the change (written in the same transaction).
pub type Update<'a> = &'a mut dyn FnMut(&mut Memory) -> MemResult<Vec<AuditEntry>>;

/// The part of [`MemoryBackend::update`] every backend shares: apply `f` to a copy of
/// `current` (memory `id`), refuse a changed id, and say whether anything is to be
/// written (`None`: nothing changed and nothing to audit).
pub fn apply_update(
    id: &str,
    current: &Memory,
    f: Update<'_>,
) -> MemResult<(Memory, Option<Vec<AuditEntry>>)> {
    let mut m = current.clone();
    let entries = f(&mut m)?;
    if m.id != id {
        return Err(MemoryError::Invalid(format!(
            "an update cannot change a memory's id ({id} → {})",
            m.id
        )));
    }
    if entries.is_empty() && m == *current {
        return Ok((m, None));
    }
    Ok((m, Some(entries)))
}

/// Storage of memories, audit entries and relations.
pub trait MemoryBackend: Send + Sync {
    /// Short name (`memory`, `embedded`, `postgres`).
    fn name(&self) -> &'static str;
    /// Insert a new memory and its audit entries atomically; `Conflict` if the id
    /// exists.
    fn insert(&self, m: &Memory, audit: &[AuditEntry]) -> MemResult<()>;
    /// One memory.
    fn get(&self, id: &str) -> MemResult<Option<Memory>>;
    /// Many memories in one read, in the order of `ids` (`None`: no such memory); with
    /// `embeddings` false their `embedding` is left `None` (search holds the vectors in
    /// its index and reads only the rest fresh).
    fn get_many(&self, ids: &[&str], embeddings: bool) -> MemResult<Vec<Option<Memory>>> {
        ids.iter()
            .map(|id| {
                let mut m = self.get(id)?;
                if !embeddings {
                    if let Some(m) = m.as_mut() {
                        m.embedding = None;
                    }
                }
                Ok(m)
            })
            .collect()
    }
    /// Memories passing `filter`, in id order.
    fn list(&self, filter: &Filter) -> MemResult<Vec<Memory>>;
    /// Every memory id, in order.
    fn ids(&self) -> MemResult<Vec<String>>;
    /// Atomically read `id`, apply `f`, write the memory and the audit entries `f`
    /// returns. Concurrent updates of one memory are serialized, so none is lost.
    /// `NotFound` when missing; an error from `f` aborts with nothing written.
    fn update(&self, id: &str, f: Update<'_>) -> MemResult<Memory>;
    /// The audit log of a memory, oldest first.
    fn audit(&self, id: &str) -> MemResult<Vec<AuditEntry>>;
    /// Add a relation; `false` when the same (from, kind, to) already exists.
    fn insert_relation(&self, r: &Relation) -> MemResult<bool>;
    /// Remove a relation (by from, kind, to); `false` when there was none.
    fn remove_relation(&self, from: &str, kind: RelKind, to: &str) -> MemResult<bool>;
    /// Relations that start or end at `node`.
    fn relations(&self, node: &str) -> MemResult<Vec<Relation>>;
    /// [`MemoryBackend::relations`] of many nodes in one read, in the order of `nodes`.
    fn relations_many(&self, nodes: &[&str]) -> MemResult<Vec<Vec<Relation>>> {
        nodes.iter().map(|n| self.relations(n)).collect()
    }
    /// Every relation of a kind.
    fn relations_of_kind(&self, kind: RelKind) -> MemResult<Vec<Relation>>;
    /// The store's version: a number that every committed write (a memory inserted or
    /// updated, a relation added or removed) changes, in the same transaction as the
    /// write, and that no other store (nor this one recreated) starts from. Reading the
    /// same version before and after a read means the read saw one state: what caches
    /// of memory searches key by.
    fn version(&self) -> MemResult<u64>;
    /// Copy what is committed now, consistently (writers go on), into a new file at
    /// `dest`; how many records it holds. A backend without a file of its own (in
    /// memory, or a database server backed up by its own tools) says so.
    fn backup_to(&self, dest: &std::path::Path) -> MemResult<u64> {
        let _ = dest;
        Err(MemoryError::Invalid(format!(
            "the {} memory backend has no file to back up (a database server is \
             backed up with its own tools, such as pg_dump)",
            self.name()
        )))
    }
}

/// Where a new store's version starts: the clock in nanoseconds, so a store recreated
/// (a file deleted, a schema dropped, a process restarted over an in-memory store) does
/// not count up through versions an earlier store had and a cache still holds.
pub fn first_version() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}
