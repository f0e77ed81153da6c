//! [`MemoryStore`]: the trust rules over a backend — adding memories, signals with decay
//! and the audit log, archiving, restoring, purging by sweep, and relations with their
//! rules (no self-relations, no cycles of SUPERSEDES, PARTIAL_UPDATE or DERIVED_FROM).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::backend::MemoryBackend;
use crate::error::{MemResult, MemoryError};
use crate::trust::{self, TrustConfig};
use crate::types::{AuditEntry, Filter, Kind, MemScope, Memory, RelKind, Relation, Signal, Status};

/// Milliseconds since the Unix epoch (the clock memories are stamped with).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Longest memory text, in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// Longest question a signal may name, in bytes (as long as the loop accepts).
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

/// Trust changes smaller than this are not written as decay.
const EPS: f64 = 1e-9;

/// What to remember.
#[derive(Debug, Clone, Default)]
pub struct NewMemory {
    /// The text.
    pub text: String,
    /// Kind (default: fact).
    pub kind: Option<Kind>,
    /// Scope.
    pub scope: MemScope,
    /// Where it came from.
    pub source: String,
    /// When what it says happened.
    pub occurred_at: Option<String>,
    /// Anything else.
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Its embedding, if computed.
    pub embedding: Option<Vec<f32>>,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Memories looked at.
    pub seen: usize,
    /// Whose decayed trust was written.
    pub decayed: usize,
    /// Archived (trust below the threshold).
    pub archived: usize,
    /// Purged (archived longer than the grace period).
    pub purged: usize,
}

/// The memory layer.
pub struct MemoryStore {
    backend: Arc<dyn MemoryBackend>,
    cfg: TrustConfig,
    /// Relation checks (cycles) read then write: one linker at a time per process.
    link_lock: Mutex<()>,
}

/// Makes ids unique within a process, across stores: two stores over one backend adding
/// the same text in the same millisecond must not collide.
static ID_COUNTER: AtomicU64 = AtomicU64::new(0);

fn audit(m: &Memory, event: &str, before: f64, by: &str, now_ms: u64, note: String) -> AuditEntry {
    AuditEntry {
        memory: m.id.clone(),
        event: event.to_string(),
        trust_before: before,
        trust_after: m.trust,
        by: by.to_string(),
        at_ms: now_ms,
        note,
        query: None,
    }
}

/// Memory ids are bare (16 hex digits); node ids may carry a `mem:` prefix.
pub fn memory_id(node: &str) -> Option<&str> {
    let id = node.strip_prefix("mem:").unwrap_or(node);
    (id.len() == 16 && id.bytes().all(|c| c.is_ascii_hexdigit())).then_some(id)
}

/// A node as relations store it: a memory's bare id, any other node as given.
fn node_id(node: &str) -> String {
    memory_id(node).unwrap_or(node).to_string()
}

impl MemoryStore {
    /// Copy the committed memories, relations and audit into a new file at `dest`
    /// (see [`MemoryBackend::backup_to`]); how many records it holds.
    pub fn backup_to(&self, dest: &std::path::Path) -> MemResult<u64> {
        self.backend.backup_to(dest)
    }

    /// A store over `backend` with trust settings `cfg`.
    pub fn new(backend: Arc<dyn MemoryBackend>, cfg: TrustConfig) -> MemResult<Self> {
        cfg.validate().map_err(MemoryError::Invalid)?;
        Ok(MemoryStore {
            backend,
            cfg,
            link_lock: Mutex::new(()),
        })
    }

    /// The trust settings.
    pub fn config(&self) -> &TrustConfig {
        &self.cfg
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn MemoryBackend> {
        &self.backend
    }

    /// The backend's version ([`MemoryBackend::version`]): changed by every write.
    pub fn version(&self) -> MemResult<u64> {
        self.backend.version()
    }

    /// Remember something: trust starts at `initial`; the creation is audited.
    pub fn add(&self, new: NewMemory, by: &str, now_ms: u64) -> MemResult<Memory> {
        let text = new.text.trim();
        if text.is_empty() {
            return Err(MemoryError::Invalid("a memory needs text".into()));
        }
        if text.len() > MAX_TEXT_BYTES {
            return Err(MemoryError::Invalid(format!(
                "a memory's text is at most {MAX_TEXT_BYTES} bytes (got {}); split it or ingest it as a document",
                text.len()
            )));
        }
        if new
            .embedding
            .as_ref()
            .is_some_and(|e| e.iter().any(|x| !x.is_finite()))
        {
            return Err(MemoryError::Invalid(
                "a memory's embedding must be finite numbers".into(),
            ));
        }
        let mut h = Sha256::new();
        h.update(text.as_bytes());
        h.update(now_ms.to_le_bytes());
        h.update(ID_COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        h.update(std::process::id().to_le_bytes());
        let id = hex::encode(&h.finalize()[..8]);
        let mut scope = new.scope;
        if scope.tenant.is_empty() {
            scope.tenant = "default".into();
        }
        let m = Memory {
            id,
            text: text.to_string(),
            kind: new.kind.unwrap_or(Kind::Fact),
            scope,
            source: new.source,
            created_at_ms: now_ms,
            last_used_at_ms: now_ms,
            use_counts: BTreeMap::new(),
            trust: self.cfg.initial,
            trust_at_ms: now_ms,
            status: Status::Active,
            archived_at_ms: None,
            occurred_at: new.occurred_at,
            metadata: new.metadata,
            embedding: new.embedding,
        };
        let a = audit(
            &m,
            "create",
            m.trust,
            by,
            now_ms,
            format!("{} memory", m.kind.as_str()),
        );
        self.backend.insert(&m, &[a])?;
        Ok(m)
    }

    /// Apply decay up to `now` to `m` (in place), with the audit entry when it changed.
    fn decay_into(&self, m: &mut Memory, by: &str, now_ms: u64, out: &mut Vec<AuditEntry>) {
        let before = m.trust;
        let t = trust::effective(m, now_ms, &self.cfg);
        // Only a written decay moves `trust_at_ms`: moving it without writing would
        // drop the decay so far, and frequent sweeps would keep trust from ever decaying.
        if (before - t).abs() > EPS {
            m.trust = t;
            m.trust_at_ms = now_ms.max(m.trust_at_ms);
            out.push(audit(
                m,
                "decay",
                before,
                by,
                now_ms,
                format!("unused since {} ms", m.last_used_at_ms),
            ));
        }
    }

    /// Status transitions (archive, purge) for `m` at `now`, audited.
    fn transition(&self, m: &mut Memory, by: &str, now_ms: u64, out: &mut Vec<AuditEntry>) {
        let next = trust::next_status(m.status, m.trust, m.archived_at_ms, now_ms, &self.cfg);
        if next == m.status {
            return;
        }
        let before = m.trust;
        match next {
            Status::Archived => {
                m.status = Status::Archived;
                m.archived_at_ms = Some(now_ms);
                out.push(audit(
                    m,
                    "archive",
                    before,
                    by,
                    now_ms,
                    format!("trust {:.3} < {}", m.trust, self.cfg.archive_below),
                ));
            }
            Status::Purged => {
                purge(m);
                out.push(audit(
                    m,
                    "purge",
                    before,
                    by,
                    now_ms,
                    "grace period over".into(),
                ));
            }
            Status::Active => {}
        }
    }

    /// One memory, its trust as of `now` (decay included); `NotFound` when unknown.
    pub fn get(&self, id: &str, now_ms: u64) -> MemResult<Memory> {
        let mut m = self
            .backend
            .get(id)?
            .ok_or_else(|| MemoryError::NotFound(id.to_string()))?;
        m.trust = trust::effective(&m, now_ms, &self.cfg);
        Ok(m)
    }

    /// Memories passing `filter`, trust as of `now`.
    pub fn list(&self, filter: &Filter, now_ms: u64) -> MemResult<Vec<Memory>> {
        let mut v = self.backend.list(filter)?;
        for m in &mut v {
            m.trust = trust::effective(m, now_ms, &self.cfg);
        }
        Ok(v)
    }

    /// Apply a signal: decay to now, then the signal's step, clamped to [0, 1]; every
    /// change audited; archived when trust falls below the threshold. Signals on an
    /// archived memory still count (a `confirmed` can lift it, but only `restore`
    /// reactivates it); on a purged one they are an error.
    pub fn signal(&self, id: &str, s: Signal, by: &str, now_ms: u64) -> MemResult<Memory> {
        self.signal_about(id, s, by, None, now_ms)
    }

    /// [`MemoryStore::signal`] about the question `query` (kept in the audit entry, for
    /// [`crate::feedback::pairs`]); a blank one counts as none, a longer one than
    /// [`MAX_QUERY_BYTES`] is an error.
    pub fn signal_about(
        &self,
        id: &str,
        s: Signal,
        by: &str,
        query: Option<&str>,
        now_ms: u64,
    ) -> MemResult<Memory> {
        let query = query.map(str::trim).filter(|q| !q.is_empty());
        if let Some(q) = query.filter(|q| q.len() > MAX_QUERY_BYTES) {
            return Err(MemoryError::Invalid(format!(
                "the signal's question is {} bytes, more than {MAX_QUERY_BYTES}",
                q.len()
            )));
        }
        self.backend.update(id, &mut |m| {
            if m.status == Status::Purged {
                return Err(MemoryError::Invalid(format!("memory {id} was purged")));
            }
            let mut out = Vec::new();
            self.decay_into(m, by, now_ms, &mut out);
            let before = m.trust;
            m.trust = trust::after_signal(m.trust, s, &self.cfg);
            m.trust_at_ms = now_ms.max(m.trust_at_ms);
            *m.use_counts.entry(s.as_str().to_string()).or_default() += 1;
            if s != Signal::Ignored {
                m.last_used_at_ms = now_ms.max(m.last_used_at_ms);
            }
            out.push(AuditEntry {
                query: query.map(str::to_string),
                ..audit(
                    m,
                    s.as_str(),
                    before,
                    by,
                    now_ms,
                    format!("step {:+.2}", self.cfg.step(s)),
                )
            });
            // A signal may archive; only a sweep purges (a `confirmed` never erases).
            if m.status == Status::Active {
                self.transition(m, by, now_ms, &mut out);
            }
            Ok(out)
        })
    }

    /// Archive a memory on request (left out of search, restorable until purged).
    pub fn forget(&self, id: &str, by: &str, now_ms: u64) -> MemResult<Memory> {
        self.backend.update(id, &mut |m| {
            match m.status {
                Status::Purged => {
                    return Err(MemoryError::Invalid(format!("memory {id} was purged")))
                }
                Status::Archived => return Ok(Vec::new()),
                Status::Active => {}
            }
            m.status = Status::Archived;
            m.archived_at_ms = Some(now_ms);
            Ok(vec![audit(
                m,
                "forget",
                m.trust,
                by,
                now_ms,
                "archived on request".into(),
            )])
        })
    }

    /// Bring an archived memory back; its trust is raised to the initial trust if it is
    /// below, so decay does not archive it again at once.
    pub fn restore(&self, id: &str, by: &str, now_ms: u64) -> MemResult<Memory> {
        self.backend.update(id, &mut |m| {
            match m.status {
                Status::Purged => {
                    return Err(MemoryError::Invalid(format!(
                        "memory {id} was purged and cannot be restored"
                    )))
                }
                Status::Active => return Ok(Vec::new()),
                Status::Archived => {}
            }
            let mut out = Vec::new();
            self.decay_into(m, by, now_ms, &mut out);
            let before = m.trust;
            m.trust = m.trust.max(self.cfg.initial.max(self.cfg.archive_below));
            m.trust_at_ms = now_ms.max(m.trust_at_ms);
            m.status = Status::Active;
            m.archived_at_ms = None;
            m.last_used_at_ms = now_ms.max(m.last_used_at_ms);
            out.push(audit(m, "restore", before, by, now_ms, "restored".into()));
            Ok(out)
        })
    }

    /// Write decay, archive and purge for every memory (what reads apply lazily).
    pub fn sweep(&self, by: &str, now_ms: u64) -> MemResult<SweepReport> {
        let mut r = SweepReport::default();
        for id in self.backend.ids()? {
            r.seen += 1;
            let mut decayed = false;
            let mut status = None;
            let res = self.backend.update(&id, &mut |m| {
                if m.status == Status::Purged {
                    return Ok(Vec::new());
                }
                let mut out = Vec::new();
                self.decay_into(m, by, now_ms, &mut out);
                decayed = !out.is_empty();
                let was = m.status;
                self.transition(m, by, now_ms, &mut out);
                if m.status != was {
                    status = Some(m.status);
                }
                Ok(out)
            });
            match res {
                Ok(_) | Err(MemoryError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
            r.decayed += usize::from(decayed);
            match status {
                Some(Status::Archived) => r.archived += 1,
                Some(Status::Purged) => r.purged += 1,
                _ => {}
            }
        }
        Ok(r)
    }

    /// The audit log of a memory.
    pub fn audit(&self, id: &str) -> MemResult<Vec<AuditEntry>> {
        if self.backend.get(id)?.is_none() {
            return Err(MemoryError::NotFound(id.to_string()));
        }
        self.backend.audit(id)
    }

    /// Relate two nodes. Memory ids (bare or `mem:`) must exist; a node cannot relate to
    /// itself; SUPERSEDES, PARTIAL_UPDATE and DERIVED_FROM may not form a cycle (A
    /// supersedes B supersedes A is refused). CONTRADICTS is stored once per pair.
    pub fn link(
        &self,
        from: &str,
        kind: RelKind,
        to: &str,
        by: &str,
        now_ms: u64,
    ) -> MemResult<Relation> {
        let (from, to) = (node_id(from), node_id(to));
        if from.is_empty() || to.is_empty() {
            return Err(MemoryError::Invalid("a relation needs two nodes".into()));
        }
        if from == to {
            return Err(MemoryError::Invalid(format!(
                "{from} cannot have a {} relation to itself",
                kind.as_str()
            )));
        }
        for n in [&from, &to] {
            // A `mem:` node that is not a memory id (valid ones were made bare above)
            // names no memory either.
            let unknown =
                n.starts_with("mem:") || (memory_id(n).is_some() && self.backend.get(n)?.is_none());
            if unknown {
                return Err(MemoryError::NotFound(n.clone()));
            }
        }
        let _g = self
            .link_lock
            .lock()
            .map_err(|_| MemoryError::Backend("link lock poisoned".into()))?;
        if kind == RelKind::Contradicts {
            let back = self.backend.relations(&to)?;
            if back
                .iter()
                .any(|r| r.kind == kind && r.from == to && r.to == from)
            {
                return Err(MemoryError::Conflict(format!(
                    "{to} already CONTRADICTS {from}"
                )));
            }
        }
        if matches!(
            kind,
            RelKind::Supersedes | RelKind::PartialUpdate | RelKind::DerivedFrom
        ) {
            // Would `to` reach `from` along this kind?
            let edges = self.backend.relations_of_kind(kind)?;
            let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
            for e in &edges {
                next.entry(e.from.as_str()).or_default().push(e.to.as_str());
            }
            let mut stack = vec![to.as_str()];
            let mut seen = HashSet::new();
            while let Some(n) = stack.pop() {
                if n == from {
                    return Err(MemoryError::Invalid(format!(
                        "{from} {} {to} would make a cycle",
                        kind.as_str()
                    )));
                }
                if seen.insert(n) {
                    stack.extend(next.get(n).into_iter().flatten().copied());
                }
            }
        }
        let r = Relation {
            from,
            kind,
            to,
            by: by.to_string(),
            at_ms: now_ms,
        };
        if !self.backend.insert_relation(&r)? {
            return Err(MemoryError::Conflict(format!(
                "{} {} {} already exists",
                r.from,
                kind.as_str(),
                r.to
            )));
        }
        Ok(r)
    }

    /// Remove a relation.
    pub fn unlink(&self, from: &str, kind: RelKind, to: &str) -> MemResult<bool> {
        self.backend
            .remove_relation(&node_id(from), kind, &node_id(to))
    }

    /// Relations at a node.
    pub fn relations(&self, node: &str) -> MemResult<Vec<Relation>> {
        self.backend.relations(&node_id(node))
    }
}

/// Erase a memory's content (its id and audit log stay).
fn purge(m: &mut Memory) {
    m.status = Status::Purged;
    m.text.clear();
    m.embedding = None;
    m.metadata.clear();
}
