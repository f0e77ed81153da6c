//! The Mind: a generic, namespaced key-value blackboard that tools and agents share.
//!
//! Nothing here names an agent or a tool. A key is `namespace.name` (a tool owns its
//! namespace, e.g. `bm25.chunks`, `vector.chunks`); a value is JSON with metadata
//! ([`Entry`]: writer, version, written_at, TTL). Readers find what others wrote by name
//! across namespaces ([`Scope::read_name`]`("chunks")` returns every `*.chunks`) or by
//! pattern ([`Scope::list_keys`]), so adding a producer changes no consumer.
//!
//! # Scopes
//!
//! [`Mind::global`] is shared by everyone. [`Mind::run`] gives a run its own scope,
//! layered over the global one: reads, `read_name` and `list_keys` see the run's keys
//! plus the global keys the run has not shadowed; writes, deletes and compare-and-set
//! go to the run's layer only (a run cannot change or hide a global key: deleting a
//! shadowing key makes the global one visible again). One run never sees another's keys.
//! [`Mind::drop_run`] removes a run's layer; with [`MindConfig::run_ttl`] every entry a
//! run writes expires at most that long after it was written, so abandoned runs vanish.
//!
//! # Versions
//!
//! An entry's version is 1 on its first write and grows by one with every write, as seen
//! through the scope: a run's first write of a key it sees through from the global
//! scope gets the global version + 1, so [`Scope::cas`] always compares with the version
//! [`Scope::read`] returned (0 = must not exist). After a delete or expiry, counting
//! starts again. Each backend makes the check-and-bump atomic.
//!
//! # Backends
//!
//! Three backends behind one small internal contract (versioned records in layers);
//! naming rules, size limits, TTL arithmetic and layering are shared code, and one
//! [`conformance`] suite runs against all three:
//!
//! - [`Mind::memory`]: in-process, a `RwLock` over `BTreeMap`s (write + read ≈ 1 µs).
//! - [`Mind::open_redb`]: embedded and persistent, its own redb file (`mind.redb` in
//!   the data dir); crash-safe; one process at a time.
//! - [`Mind::redis`]: a Redis server shared by processes; Lua scripts for atomic
//!   versioning, pipelines for batches, real TTLs, pub/sub for watch, bounded timeouts
//!   (see `RedisConfig`; cargo feature `redis`, on by default).
//!
//! Expired entries are invisible at once on every backend. Watching ([`Scope::watch`])
//! yields a [`Change`] per write or delete in the scope's layers.
//!
//! ```
//! use neuralcore_mind::Mind;
//! use serde_json::json;
//!
//! let mind = Mind::memory();
//! mind.global().write("query.text", json!("what causes tides?"), "cli", None)?;
//! let run = mind.run("run-1")?;
//! run.write("bm25.chunks", json!([1, 2]), "bm25", None)?;
//! run.write("vector.chunks", json!([2, 3]), "vector", None)?;
//! let all = run.read_name("chunks")?;
//! assert_eq!(all.len(), 2);
//! assert_eq!(run.read("query.text")?.unwrap().value, json!("what causes tides?"));
//! assert!(mind.run("run-2")?.read("bm25.chunks")?.is_none());
//! # Ok::<(), neuralcore_mind::MindError>(())
//! ```

pub mod conformance;
mod error;
mod key;
mod memory;
mod notify;
mod raw;
mod redb_mind;
#[cfg(feature = "redis")]
mod redis_mind;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use error::{MindError, MindResult};
pub use key::{glob_match, validate_key, Pattern, MAX_KEY_BYTES};
pub use notify::{Change, ChangeKind, Watch};
pub use raw::Layer;
#[cfg(feature = "redis")]
pub use redis_mind::RedisConfig;

use raw::{Outcome, Put, RawMind, Record};

/// One value on the blackboard with its metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// `namespace.name`.
    pub key: String,
    /// The value.
    pub value: Value,
    /// Who wrote it (a tool or agent name; free text).
    pub writer: String,
    /// 1 on first write, +1 per write.
    pub version: u64,
    /// Milliseconds since the Unix epoch.
    pub written_at_ms: u64,
    /// Lifetime from `written_at_ms`, if any (a run's TTL caps it).
    pub ttl_ms: Option<u64>,
}

impl Entry {
    fn from_record(key: String, r: Record) -> Entry {
        Entry {
            key,
            value: r.value,
            writer: r.writer,
            version: r.version,
            written_at_ms: r.written_at_ms,
            ttl_ms: r.ttl_ms,
        }
    }

    /// When it expires (ms since the epoch), if it does.
    pub fn expires_at_ms(&self) -> Option<u64> {
        self.ttl_ms.map(|t| self.written_at_ms.saturating_add(t))
    }
}

/// Settings shared by every backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MindConfig {
    /// Largest value, in bytes of serialized JSON (default 1 MiB).
    pub max_value_bytes: usize,
    /// Longest life of any entry written in a run scope (default: none).
    pub run_ttl: Option<Duration>,
}

impl Default for MindConfig {
    fn default() -> Self {
        MindConfig {
            max_value_bytes: 1 << 20,
            run_ttl: None,
        }
    }
}

/// Longest writer name, in bytes.
pub const MAX_WRITER_BYTES: usize = 256;

/// A blackboard: a handle to one backend. Cheap to clone and share between threads.
#[derive(Clone)]
pub struct Mind {
    raw: Arc<dyn RawMind>,
    cfg: Arc<MindConfig>,
    backend: &'static str,
}

impl std::fmt::Debug for Mind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mind")
            .field("backend", &self.backend)
            .field("config", &self.cfg)
            .finish()
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn ms(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}

impl Mind {
    /// Copy the committed records into a new file at `dest` (the embedded backend;
    /// another says it has none); how many records.
    pub fn backup_to(&self, dest: &std::path::Path) -> MindResult<u64> {
        self.raw.backup_to(dest)
    }

    fn with(raw: Arc<dyn RawMind>, cfg: MindConfig, backend: &'static str) -> Mind {
        Mind {
            raw,
            cfg: Arc::new(cfg),
            backend,
        }
    }

    /// An empty in-memory blackboard with default settings.
    pub fn memory() -> Mind {
        Mind::memory_with(MindConfig::default())
    }

    /// An empty in-memory blackboard.
    pub fn memory_with(cfg: MindConfig) -> Mind {
        Mind::with(Arc::new(memory::MemoryMind::default()), cfg, "memory")
    }

    /// Opens (or creates) the persistent blackboard at `path` (conventionally
    /// `<data dir>/mind.redb`), dropping expired entries. `Unavailable` when another
    /// process has it open.
    pub fn open_redb(path: &Path, cfg: MindConfig) -> MindResult<Mind> {
        let m = redb_mind::RedbMind::open(path, now_ms())?;
        Ok(Mind::with(Arc::new(m), cfg, "redb"))
    }

    /// Connects to Redis (checked with a PING within the configured timeouts). Needs the
    /// `redis` feature (on by default).
    #[cfg(feature = "redis")]
    pub fn redis(redis: RedisConfig, cfg: MindConfig) -> MindResult<Mind> {
        let m = redis_mind::RedisMind::open(redis)?;
        Ok(Mind::with(Arc::new(m), cfg, "redis"))
    }

    /// `memory`, `redb` or `redis`.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// The settings.
    pub fn config(&self) -> &MindConfig {
        &self.cfg
    }

    /// The global scope.
    pub fn global(&self) -> Scope {
        Scope {
            mind: self.clone(),
            layer: Layer::Global,
        }
    }

    /// A run's scope (`[A-Za-z0-9_-]`, 1–64 characters), layered over the global one.
    pub fn run(&self, run_id: &str) -> MindResult<Scope> {
        key::validate_id(run_id, "run id")?;
        Ok(Scope {
            mind: self.clone(),
            layer: Layer::Run(Arc::from(run_id)),
        })
    }

    /// Deletes every key of a run; returns how many live entries it had.
    pub fn drop_run(&self, run_id: &str) -> MindResult<usize> {
        key::validate_id(run_id, "run id")?;
        self.raw
            .drop_layer(&Layer::Run(Arc::from(run_id)), now_ms())
    }

    /// Physically removes expired entries where the backend keeps them (memory, redb;
    /// on Redis it forgets stale index members of the global scope). Returns the count.
    pub fn purge_expired(&self) -> MindResult<usize> {
        self.raw.purge_expired(now_ms())
    }
}

/// A view of the blackboard: the global scope, or a run's layer over it.
#[derive(Clone, Debug)]
pub struct Scope {
    mind: Mind,
    layer: Layer,
}

impl Scope {
    /// Which layer writes go to.
    pub fn layer(&self) -> &Layer {
        &self.layer
    }

    /// The run id, for a run scope.
    pub fn run_id(&self) -> Option<&str> {
        match &self.layer {
            Layer::Run(id) => Some(id),
            Layer::Global => None,
        }
    }

    /// The layers reads consult, in precedence order.
    fn read_layers(&self) -> Vec<&Layer> {
        match self.layer {
            Layer::Global => vec![&Layer::Global],
            Layer::Run(_) => vec![&self.layer, &Layer::Global],
        }
    }

    fn effective_ttl(&self, ttl: Option<Duration>) -> (Option<u64>, Option<u64>) {
        let run_ttl = match self.layer {
            Layer::Run(_) => self.mind.cfg.run_ttl.map(ms),
            Layer::Global => None,
        };
        let ttl = match (ttl.map(ms), run_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (ttl, run_ttl)
    }

    fn check_value(&self, key: &str, value: &Value, writer: &str) -> MindResult<String> {
        validate_key(key)?;
        if writer.len() > MAX_WRITER_BYTES {
            return Err(MindError::InvalidKey {
                key: key.to_string(),
                reason: format!("writer name longer than {MAX_WRITER_BYTES} bytes"),
            });
        }
        let json = serde_json::to_string(value)
            .map_err(|e| MindError::Backend(format!("cannot serialize value: {e}")))?;
        let max = self.mind.cfg.max_value_bytes;
        if json.len() > max {
            return Err(MindError::TooLarge {
                key: key.to_string(),
                size: json.len(),
                max,
            });
        }
        Ok(json)
    }

    fn put_one(
        &self,
        key: &str,
        value: Value,
        writer: &str,
        ttl: Option<Duration>,
        expect: Option<u64>,
    ) -> MindResult<Entry> {
        let json = self.check_value(key, &value, writer)?;
        let (ttl_ms, layer_ttl_ms) = self.effective_ttl(ttl);
        let now = now_ms();
        let put = Put {
            layer: &self.layer,
            key,
            value: &value,
            json: &json,
            writer,
            now_ms: now,
            ttl_ms,
            expect,
            layer_ttl_ms,
        };
        let outcome = self.mind.raw.put(std::slice::from_ref(&put))?;
        match outcome.first() {
            Some(Outcome::Written(version)) => Ok(Entry {
                key: key.to_string(),
                value,
                writer: writer.to_string(),
                version: *version,
                written_at_ms: now,
                ttl_ms,
            }),
            Some(Outcome::Conflict(found)) => Err(MindError::Conflict {
                key: key.to_string(),
                expected: expect.unwrap_or(0),
                found: *found,
            }),
            None => Err(MindError::Backend("backend returned no outcome".into())),
        }
    }

    /// Writes `value` under `key` (a new version), expiring after `ttl` if given.
    pub fn write(
        &self,
        key: &str,
        value: Value,
        writer: &str,
        ttl: Option<Duration>,
    ) -> MindResult<Entry> {
        self.put_one(key, value, writer, ttl, None)
    }

    /// Writes only if the current version is `expected` (0 = the key must not exist);
    /// otherwise `Conflict` with the version found.
    pub fn cas(
        &self,
        key: &str,
        expected: u64,
        value: Value,
        writer: &str,
        ttl: Option<Duration>,
    ) -> MindResult<Entry> {
        self.put_one(key, value, writer, ttl, Some(expected))
    }

    /// Writes several keys in one round trip, atomically on every backend (all are
    /// checked before any is written).
    pub fn write_batch(
        &self,
        items: &[(&str, Value)],
        writer: &str,
        ttl: Option<Duration>,
    ) -> MindResult<Vec<Entry>> {
        let jsons = items
            .iter()
            .map(|(k, v)| self.check_value(k, v, writer))
            .collect::<MindResult<Vec<_>>>()?;
        let (ttl_ms, layer_ttl_ms) = self.effective_ttl(ttl);
        let now = now_ms();
        let puts: Vec<Put<'_>> = items
            .iter()
            .zip(&jsons)
            .map(|((key, value), json)| Put {
                layer: &self.layer,
                key,
                value,
                json,
                writer,
                now_ms: now,
                ttl_ms,
                expect: None,
                layer_ttl_ms,
            })
            .collect();
        let outcomes = self.mind.raw.put(&puts)?;
        items
            .iter()
            .zip(outcomes)
            .map(|((key, value), o)| match o {
                Outcome::Written(version) => Ok(Entry {
                    key: key.to_string(),
                    value: value.clone(),
                    writer: writer.to_string(),
                    version,
                    written_at_ms: now,
                    ttl_ms,
                }),
                Outcome::Conflict(_) => Err(MindError::Backend("conflict without cas".into())),
            })
            .collect()
    }

    /// The live entry under `key`: the run's own, else the global one.
    pub fn read(&self, key: &str) -> MindResult<Option<Entry>> {
        validate_key(key)?;
        Ok(self
            .mind
            .raw
            .get(&self.read_layers(), key, now_ms())?
            .map(|r| Entry::from_record(key.to_string(), r)))
    }

    /// Live entries of several keys (one round trip per layer on Redis), in order.
    pub fn read_many(&self, keys: &[&str]) -> MindResult<Vec<Option<Entry>>> {
        for k in keys {
            validate_key(k)?;
        }
        let now = now_ms();
        let mut out = self.mind.raw.get_many(&self.layer, keys, now)?;
        if matches!(self.layer, Layer::Run(_)) {
            let (idx, missing): (Vec<usize>, Vec<&str>) = out
                .iter()
                .enumerate()
                .filter(|(_, r)| r.is_none())
                .map(|(i, _)| (i, keys[i]))
                .unzip();
            if !missing.is_empty() {
                let global = self.mind.raw.get_many(&Layer::Global, &missing, now)?;
                for (i, r) in idx.into_iter().zip(global) {
                    out[i] = r;
                }
            }
        }
        Ok(keys
            .iter()
            .zip(out)
            .map(|(k, r)| r.map(|r| Entry::from_record(k.to_string(), r)))
            .collect())
    }

    /// Every live entry whose name is `name`, in any namespace (`read_name("chunks")`
    /// returns `bm25.chunks`, `vector.chunks`, ...), sorted by key.
    pub fn read_name(&self, name: &str) -> MindResult<Vec<Entry>> {
        key::validate_name(name)?;
        let filter = |k: &str| k.split_once('.').is_some_and(|(_, n)| n == name);
        self.merged(|layer, now| self.mind.raw.scan(layer, "", &filter, now))
            .map(|m| {
                m.into_iter()
                    .map(|(k, r)| Entry::from_record(k, r))
                    .collect()
            })
    }

    /// Every live entry matching a `*` glob (a pattern without `*` is one exact key; see
    /// [`glob_match`]), sorted by key.
    pub fn read_pattern(&self, pattern: &str) -> MindResult<Vec<Entry>> {
        let p = Pattern::parse(pattern)?;
        self.merged(|layer, now| {
            self.mind
                .raw
                .scan(layer, p.prefix(), &|k| p.matches(k), now)
        })
        .map(|m| {
            m.into_iter()
                .map(|(k, r)| Entry::from_record(k, r))
                .collect()
        })
    }

    /// Live keys matching a `*` glob (`retrieval.*`, `*.chunks`, `*` for all; a pattern
    /// without `*` is one exact key; see [`glob_match`]), sorted.
    pub fn list_keys(&self, pattern: &str) -> MindResult<Vec<String>> {
        let p = Pattern::parse(pattern)?;
        let now = now_ms();
        let mut keys = std::collections::BTreeSet::new();
        for layer in self.read_layers() {
            keys.extend(
                self.mind
                    .raw
                    .keys(layer, p.prefix(), &|k| p.matches(k), now)?,
            );
        }
        Ok(keys.into_iter().collect())
    }

    /// Run layer over global, the run's entries winning.
    fn merged(
        &self,
        scan: impl Fn(&Layer, u64) -> MindResult<Vec<(String, Record)>>,
    ) -> MindResult<BTreeMap<String, Record>> {
        let now = now_ms();
        let mut out = BTreeMap::new();
        for layer in self.read_layers().into_iter().rev() {
            out.extend(scan(layer, now)?);
        }
        Ok(out)
    }

    /// Deletes `key` from this scope's own layer; true when a live entry went.
    pub fn delete(&self, key: &str) -> MindResult<bool> {
        validate_key(key)?;
        self.mind.raw.delete(&self.layer, key, now_ms())
    }

    /// Changes to this scope from now on (a run scope: its own layer and the global
    /// one). Expiry is not reported.
    pub fn watch(&self) -> MindResult<Watch> {
        let layers: Vec<Layer> = self.read_layers().into_iter().cloned().collect();
        self.mind.raw.watch(&layers)
    }
}
