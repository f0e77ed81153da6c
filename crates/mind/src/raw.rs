//! The raw backend contract: versioned records in layers. Everything else (naming rules,
//! size limits, TTL arithmetic, run-over-global layering, patterns, `read_name`) is the
//! shared logic in `lib.rs`, so backends cannot drift apart.

use std::sync::Arc;

use serde_json::Value;

use crate::error::MindResult;
use crate::notify::Watch;

/// A layer of keys: the global one or one run's. A run *scope* reads its own layer over
/// the global layer; a layer on its own is just a namespace of keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    /// Shared by every run.
    Global,
    /// One run's keys (the run id).
    Run(Arc<str>),
}

impl std::fmt::Display for Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layer::Global => f.write_str("global"),
            Layer::Run(id) => write!(f, "run {id}"),
        }
    }
}

/// A stored value with its metadata (the key lives beside it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Record {
    pub(crate) version: u64,
    pub(crate) writer: String,
    pub(crate) written_at_ms: u64,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) value: Value,
}

impl Record {
    pub(crate) fn live(&self, now_ms: u64) -> bool {
        match self.ttl_ms {
            Some(ttl) => self.written_at_ms.saturating_add(ttl) > now_ms,
            None => true,
        }
    }
}

/// One write. The new version is the current live version in `layer` + 1; when `layer`
/// has no live entry and is a run layer, counting continues from the live global entry
/// (so a run's write of a key it sees through from global bumps the version it read).
/// With `expect`, the write happens only if that current version equals it (0 = absent).
pub(crate) struct Put<'a> {
    pub(crate) layer: &'a Layer,
    pub(crate) key: &'a str,
    pub(crate) value: &'a Value,
    /// `value` serialized (computed once by the logic for the size check).
    pub(crate) json: &'a str,
    pub(crate) writer: &'a str,
    pub(crate) now_ms: u64,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) expect: Option<u64>,
    /// The run TTL when `layer` is a run with one (backends with native expiry keep the
    /// layer's bookkeeping alive that long after its latest write).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) layer_ttl_ms: Option<u64>,
}

impl Put<'_> {
    pub(crate) fn record(&self, version: u64) -> Record {
        Record {
            version,
            writer: self.writer.to_string(),
            written_at_ms: self.now_ms,
            ttl_ms: self.ttl_ms,
            value: self.value.clone(),
        }
    }
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Written with this version.
    Written(u64),
    /// `expect` did not match; the current version.
    Conflict(u64),
}

/// Version arithmetic shared by the in-process backends: `(current, outcome)`.
pub(crate) fn decide(current: Option<u64>, base: Option<u64>, expect: Option<u64>) -> Outcome {
    let cur = current.or(base).unwrap_or(0);
    match expect {
        Some(e) if e != cur => Outcome::Conflict(cur),
        _ => Outcome::Written(cur + 1),
    }
}

/// What a backend provides. Reads return live records only (`now_ms` decides expiry for
/// backends without native TTLs). Changes are announced to watchers by the backend.
pub(crate) trait RawMind: Send + Sync {
    /// Copy what is committed now into a new file at `dest`; how many records. Only a
    /// backend with a file of its own can.
    fn backup_to(&self, dest: &std::path::Path) -> MindResult<u64> {
        let _ = dest;
        Err(crate::MindError::Backend(
            "this Mind backend has no file to back up (Redis is backed up with its own tools)"
                .into(),
        ))
    }
    /// Applies the puts in order, atomically as a group where the backend can.
    fn put(&self, puts: &[Put<'_>]) -> MindResult<Vec<Outcome>>;
    /// The live record of the first layer in `layers` that has one.
    fn get(&self, layers: &[&Layer], key: &str, now_ms: u64) -> MindResult<Option<Record>>;
    /// Live records of many keys in one layer.
    fn get_many(
        &self,
        layer: &Layer,
        keys: &[&str],
        now_ms: u64,
    ) -> MindResult<Vec<Option<Record>>> {
        keys.iter().map(|k| self.get(&[layer], k, now_ms)).collect()
    }
    /// Live keys of a layer that start with `prefix` and pass `filter`, sorted. By
    /// default the keys of [`RawMind::scan`]; backends that can list keys without
    /// reading values override it.
    fn keys(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        now_ms: u64,
    ) -> MindResult<Vec<String>> {
        Ok(self
            .scan(layer, prefix, filter, now_ms)?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }
    /// Live records of a layer whose keys start with `prefix` and pass `filter`, sorted.
    fn scan(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        now_ms: u64,
    ) -> MindResult<Vec<(String, Record)>>;
    /// Removes a key from a layer; true when a live entry was removed.
    fn delete(&self, layer: &Layer, key: &str, now_ms: u64) -> MindResult<bool>;
    /// Removes every key of a layer; how many live entries went.
    fn drop_layer(&self, layer: &Layer, now_ms: u64) -> MindResult<usize>;
    /// Physically removes expired entries (a no-op where the backend expires them).
    fn purge_expired(&self, now_ms: u64) -> MindResult<usize>;
    /// A stream of the changes to these layers from now on.
    fn watch(&self, layers: &[Layer]) -> MindResult<Watch>;
}
