//! The in-memory twin: memories, audit logs and relations in `BTreeMap`s behind one
//! lock. An update holds the write lock across its read-modify-write, so concurrent
//! signals on one memory are serialized and none is lost. Gone when the process ends;
//! for tests and ephemeral use.

use std::collections::BTreeMap;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::backend::{apply_update, first_version, MemoryBackend, Update};
use crate::error::{MemResult, MemoryError};
use crate::types::{AuditEntry, Filter, Memory, RelKind, Relation};

struct Inner {
    memories: BTreeMap<String, Memory>,
    audit: BTreeMap<String, Vec<AuditEntry>>,
    /// Keyed by (from, kind, to).
    relations: BTreeMap<(String, RelKind, String), Relation>,
    /// [`MemoryBackend::version`], bumped under the write lock by every write.
    version: u64,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            memories: BTreeMap::new(),
            audit: BTreeMap::new(),
            relations: BTreeMap::new(),
            version: first_version(),
        }
    }
}

/// Memories held in memory.
#[derive(Default)]
pub struct InMemoryBackend {
    inner: RwLock<Inner>,
}

fn poisoned<T>(_: T) -> MemoryError {
    MemoryError::Backend("in-memory backend lock poisoned".into())
}

impl InMemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }

    fn read(&self) -> MemResult<RwLockReadGuard<'_, Inner>> {
        self.inner.read().map_err(poisoned)
    }

    fn write(&self) -> MemResult<RwLockWriteGuard<'_, Inner>> {
        self.inner.write().map_err(poisoned)
    }
}

impl MemoryBackend for InMemoryBackend {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn insert(&self, m: &Memory, audit: &[AuditEntry]) -> MemResult<()> {
        let mut g = self.write()?;
        if g.memories.contains_key(&m.id) {
            return Err(MemoryError::Conflict(format!(
                "memory {} already exists",
                m.id
            )));
        }
        g.memories.insert(m.id.clone(), m.clone());
        g.audit
            .entry(m.id.clone())
            .or_default()
            .extend_from_slice(audit);
        g.version += 1;
        Ok(())
    }

    fn get(&self, id: &str) -> MemResult<Option<Memory>> {
        Ok(self.read()?.memories.get(id).cloned())
    }

    fn list(&self, filter: &Filter) -> MemResult<Vec<Memory>> {
        Ok(self
            .read()?
            .memories
            .values()
            .filter(|m| filter.matches(m))
            .cloned()
            .collect())
    }

    fn ids(&self) -> MemResult<Vec<String>> {
        Ok(self.read()?.memories.keys().cloned().collect())
    }

    fn update(&self, id: &str, f: Update<'_>) -> MemResult<Memory> {
        let mut g = self.write()?;
        let current = g
            .memories
            .get(id)
            .ok_or_else(|| MemoryError::NotFound(id.to_string()))?;
        let (m, Some(entries)) = apply_update(id, current, f)? else {
            return Ok(current.clone());
        };
        g.memories.insert(id.to_string(), m.clone());
        g.audit.entry(id.to_string()).or_default().extend(entries);
        g.version += 1;
        Ok(m)
    }

    fn audit(&self, id: &str) -> MemResult<Vec<AuditEntry>> {
        Ok(self.read()?.audit.get(id).cloned().unwrap_or_default())
    }

    fn insert_relation(&self, r: &Relation) -> MemResult<bool> {
        let mut g = self.write()?;
        let key = (r.from.clone(), r.kind, r.to.clone());
        if g.relations.contains_key(&key) {
            return Ok(false);
        }
        g.relations.insert(key, r.clone());
        g.version += 1;
        Ok(true)
    }

    fn remove_relation(&self, from: &str, kind: RelKind, to: &str) -> MemResult<bool> {
        let key = (from.to_string(), kind, to.to_string());
        let mut g = self.write()?;
        let removed = g.relations.remove(&key).is_some();
        if removed {
            g.version += 1;
        }
        Ok(removed)
    }

    fn relations(&self, node: &str) -> MemResult<Vec<Relation>> {
        Ok(self
            .read()?
            .relations
            .values()
            .filter(|r| r.from == node || r.to == node)
            .cloned()
            .collect())
    }

    fn relations_of_kind(&self, kind: RelKind) -> MemResult<Vec<Relation>> {
        Ok(self
            .read()?
            .relations
            .values()
            .filter(|r| r.kind == kind)
            .cloned()
            .collect())
    }

    fn version(&self) -> MemResult<u64> {
        Ok(self.read()?.version)
    }
}
