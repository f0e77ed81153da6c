//! The embedded persistent backend: one table in its own redb file (`mind.redb` in the
//! data dir). Every write is one redb transaction (copy-on-write B-trees with a
//! checksummed commit slot), so a `kill -9` never leaves half of a batch. A write to a
//! global key is durable at commit (an fsync), so a `kill -9` keeps every acknowledged
//! one. A run's keys are scratch: their commits skip the fsync and are made durable by
//! the next durable commit: a global write, the scratch commit after [`LAZY_COMMITS`]
//! of them or the first one [`LAZY_FOR`] after the last durable commit, or closing the
//! Mind. A `kill -9` may roll back those not yet durable (after the last write before
//! an idle spell, until the next write); the file stays consistent. An fsync per
//! scratch write (redb's `Eventual` is a full fsync on Linux) made every ask wait on the
//! disk many times. redb holds a file lock: a second process gets `Unavailable`, and
//! watchers are therefore in-process only.
//!
//! Layout: key `g:<key>` (global) or `r:<run id>:<key>`; value = version (u64 LE),
//! written_at_ms (u64 LE), ttl_ms (u64 LE, `u64::MAX` = none), writer length (u32 LE),
//! writer, then the value's JSON. Expired entries are skipped by reads and removed by
//! overwrites, deletes, `purge_expired` and at open.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redb::{ReadableTable, TableDefinition};

use crate::error::{MindError, MindResult};
use crate::notify::{poisoned, Change, ChangeKind, Hub, Watch};
use crate::raw::{decide, Layer, Outcome, Put, RawMind, Record};

const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = TableDefinition::new("mind");

fn be<E: std::fmt::Display>(e: E) -> MindError {
    MindError::Backend(e.to_string())
}

fn layer_prefix(layer: &Layer) -> String {
    match layer {
        Layer::Global => "g:".to_string(),
        Layer::Run(id) => format!("r:{id}:"),
    }
}

fn encode(r: &Put<'_>, version: u64) -> Vec<u8> {
    let mut b = Vec::with_capacity(28 + r.writer.len() + r.json.len());
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&r.now_ms.to_le_bytes());
    b.extend_from_slice(&r.ttl_ms.unwrap_or(u64::MAX).to_le_bytes());
    b.extend_from_slice(&(r.writer.len() as u32).to_le_bytes());
    b.extend_from_slice(r.writer.as_bytes());
    b.extend_from_slice(r.json.as_bytes());
    b
}

/// The metadata only (version and expiry), without parsing the value.
fn header(key: &str, b: &[u8]) -> MindResult<(u64, u64, Option<u64>)> {
    if b.len() < 28 {
        return Err(MindError::Corrupt(format!(
            "{key}: record of {} bytes",
            b.len()
        )));
    }
    let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let ttl = u(16);
    Ok((u(0), u(8), (ttl != u64::MAX).then_some(ttl)))
}

fn decode(key: &str, b: &[u8]) -> MindResult<Record> {
    let (version, written_at_ms, ttl_ms) = header(key, b)?;
    let wl = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")) as usize;
    let corrupt = |what: &str| MindError::Corrupt(format!("{key}: {what}"));
    let w = b
        .get(28..28 + wl)
        .ok_or_else(|| corrupt("truncated writer"))?;
    let writer = std::str::from_utf8(w)
        .map_err(|_| corrupt("writer is not UTF-8"))?
        .to_string();
    let value = serde_json::from_slice(&b[28 + wl..])
        .map_err(|e| corrupt(&format!("value is not JSON: {e}")))?;
    Ok(Record {
        version,
        writer,
        written_at_ms,
        ttl_ms,
        value,
    })
}

fn live_header(key: &str, b: &[u8], now: u64) -> MindResult<Option<u64>> {
    let (v, at, ttl) = header(key, b)?;
    Ok(match ttl {
        Some(t) if at.saturating_add(t) <= now => None,
        _ => Some(v),
    })
}

/// The redb backend (see [`crate::Mind::open_redb`]).
pub(crate) struct RedbMind {
    db: redb::Database,
    /// Held across a write transaction and its notifications, so watchers see changes in
    /// commit order; it counts the commits not yet durable.
    write: Mutex<Pending>,
    hub: Hub,
}

/// Scratch commits made without an fsync since the last durable commit, and when that
/// was.
struct Pending {
    commits: u32,
    since: Instant,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            commits: 0,
            since: Instant::now(),
        }
    }
}

/// redb's page cache for the blackboard: redb's default is 1 GiB per database, and a
/// long-running server's RSS grew toward it as `mind.redb` grew with kept runs (a
/// 30-minute soak, bench/README.md). A run's keys are read while they are fresh.
const PAGE_CACHE_BYTES: usize = 32 * 1024 * 1024;

/// At most this many scratch commits go without an fsync...
pub(crate) const LAZY_COMMITS: u32 = 64;
/// ...and for at most this long (redb frees pages only at durable commits, so they also
/// bound the file's growth).
pub(crate) const LAZY_FOR: Duration = Duration::from_millis(500);

impl RedbMind {
    /// A write transaction. With `run_only` (a run's scratch keys) it commits without an
    /// fsync unless [`LAZY_COMMITS`] or [`LAZY_FOR`] says it is time for a durable one;
    /// a durable commit also makes every earlier one durable. Global keys are durable at
    /// once.
    fn begin_write(
        &self,
        pending: &mut Pending,
        run_only: bool,
    ) -> MindResult<(redb::WriteTransaction, bool)> {
        let mut txn = self.db.begin_write().map_err(be)?;
        let lazy = run_only && pending.commits < LAZY_COMMITS && pending.since.elapsed() < LAZY_FOR;
        if lazy {
            txn.set_durability(redb::Durability::None);
            // Counted even if it aborts: that only brings the next durable one closer.
            pending.commits += 1;
        }
        Ok((txn, !lazy))
    }

    /// Commit `txn`; a durable commit makes every earlier one durable, so the count
    /// starts again, but only once it has succeeded.
    fn commit(txn: redb::WriteTransaction, durable: bool, pending: &mut Pending) -> MindResult<()> {
        txn.commit().map_err(be)?;
        if durable {
            *pending = Pending::default();
        }
        Ok(())
    }

    pub(crate) fn open(path: &Path, now_ms: u64) -> MindResult<RedbMind> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| MindError::Unavailable(format!("{}: {e}", parent.display())))?;
        }
        let db = redb::Builder::new()
            .set_cache_size(PAGE_CACHE_BYTES)
            .create(path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => MindError::Unavailable(format!(
                    "{} is in use by another process",
                    path.display()
                )),
                other => MindError::Unavailable(format!("{}: {other}", path.display())),
            })?;
        let txn = db.begin_write().map_err(be)?;
        txn.open_table(TABLE).map_err(be)?;
        txn.commit().map_err(be)?;
        let m = RedbMind {
            db,
            write: Mutex::new(Pending::default()),
            hub: Hub::default(),
        };
        m.purge_expired(now_ms)?;
        Ok(m)
    }

    fn read_table(&self) -> MindResult<redb::ReadOnlyTable<&'static str, &'static [u8]>> {
        self.db
            .begin_read()
            .map_err(be)?
            .open_table(TABLE)
            .map_err(be)
    }

    fn get_in(
        table: &impl ReadableTable<&'static str, &'static [u8]>,
        layer: &Layer,
        key: &str,
        now: u64,
    ) -> MindResult<Option<Record>> {
        let full = format!("{}{key}", layer_prefix(layer));
        let Some(v) = table.get(full.as_str()).map_err(be)? else {
            return Ok(None);
        };
        let r = decode(key, v.value())?;
        Ok(r.live(now).then_some(r))
    }

    fn scan_raw(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        now_ms: u64,
        decode_values: bool,
    ) -> MindResult<Vec<(String, Option<Record>)>> {
        let lp = layer_prefix(layer);
        let start = format!("{lp}{prefix}");
        let table = self.read_table()?;
        let mut out = Vec::new();
        for item in table.range(start.as_str()..).map_err(be)? {
            let (k, v) = item.map_err(be)?;
            let full = k.value();
            if !full.starts_with(&start) {
                break;
            }
            let key = &full[lp.len()..];
            if !filter(key) || live_header(key, v.value(), now_ms)?.is_none() {
                continue;
            }
            let rec = if decode_values {
                Some(decode(key, v.value())?)
            } else {
                None
            };
            out.push((key.to_string(), rec));
        }
        Ok(out)
    }
}

impl Drop for RedbMind {
    /// Makes the scratch commits not yet durable so with an empty durable commit (not
    /// left to what redb does at close).
    fn drop(&mut self) {
        // Not while unwinding or after a writer panicked (redb's own close refuses then
        // too): a transaction dropped mid-panic was never aborted.
        if std::thread::panicking() {
            return;
        }
        let Ok(pending) = self.write.get_mut().map(|p| p.commits) else {
            return;
        };
        if pending > 0 {
            if let Ok(txn) = self.db.begin_write() {
                let _ = txn.commit();
            }
        }
    }
}

impl RawMind for RedbMind {
    fn backup_to(&self, dest: &std::path::Path) -> MindResult<u64> {
        use neuralcore_store::copy::RedbCopy;
        let be = |e: neuralcore_store::copy::CopyError| MindError::Backend(e.to_string());
        let mut copy = RedbCopy::begin(&self.db, dest).map_err(be)?;
        copy.table(TABLE).map_err(be)?;
        copy.finish().map_err(be)
    }

    fn put(&self, puts: &[Put<'_>]) -> MindResult<Vec<Outcome>> {
        let mut w = self.write.lock().map_err(poisoned)?;
        let (txn, durable) = self.begin_write(
            &mut w,
            puts.iter().all(|p| matches!(p.layer, Layer::Run(_))),
        )?;
        let mut out = Vec::with_capacity(puts.len());
        let mut changes = Vec::new();
        {
            let mut t = txn.open_table(TABLE).map_err(be)?;
            for p in puts {
                let full = format!("{}{}", layer_prefix(p.layer), p.key);
                let current = match t.get(full.as_str()).map_err(be)? {
                    Some(v) => live_header(p.key, v.value(), p.now_ms)?,
                    None => None,
                };
                let base = match p.layer {
                    Layer::Run(_) => {
                        let g = format!("g:{}", p.key);
                        match t.get(g.as_str()).map_err(be)? {
                            Some(v) => live_header(p.key, v.value(), p.now_ms)?,
                            None => None,
                        }
                    }
                    Layer::Global => None,
                };
                let o = decide(current, base, p.expect);
                if let Outcome::Written(v) = o {
                    t.insert(full.as_str(), encode(p, v).as_slice())
                        .map_err(be)?;
                    changes.push(Change {
                        layer: p.layer.clone(),
                        key: p.key.to_string(),
                        kind: ChangeKind::Written(v),
                    });
                }
                out.push(o);
            }
        }
        if changes.is_empty() {
            txn.abort().map_err(be)?;
        } else {
            Self::commit(txn, durable, &mut w)?;
        }
        self.hub.publish(changes);
        Ok(out)
    }

    fn get(&self, layers: &[&Layer], key: &str, now_ms: u64) -> MindResult<Option<Record>> {
        let table = self.read_table()?;
        for l in layers {
            if let Some(r) = Self::get_in(&table, l, key, now_ms)? {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    fn get_many(
        &self,
        layer: &Layer,
        keys: &[&str],
        now_ms: u64,
    ) -> MindResult<Vec<Option<Record>>> {
        let table = self.read_table()?;
        keys.iter()
            .map(|k| Self::get_in(&table, layer, k, now_ms))
            .collect()
    }

    fn keys(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        now_ms: u64,
    ) -> MindResult<Vec<String>> {
        Ok(self
            .scan_raw(layer, prefix, filter, now_ms, false)?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    fn scan(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        now_ms: u64,
    ) -> MindResult<Vec<(String, Record)>> {
        Ok(self
            .scan_raw(layer, prefix, filter, now_ms, true)?
            .into_iter()
            .filter_map(|(k, r)| r.map(|r| (k, r)))
            .collect())
    }

    fn delete(&self, layer: &Layer, key: &str, now_ms: u64) -> MindResult<bool> {
        let mut w = self.write.lock().map_err(poisoned)?;
        let full = format!("{}{key}", layer_prefix(layer));
        let (txn, durable) = self.begin_write(&mut w, matches!(layer, Layer::Run(_)))?;
        let was_live = {
            let mut t = txn.open_table(TABLE).map_err(be)?;
            let removed = t.remove(full.as_str()).map_err(be)?;
            match removed {
                Some(v) => live_header(key, v.value(), now_ms)?.is_some(),
                None => false,
            }
        };
        Self::commit(txn, durable, &mut w)?;
        if was_live {
            self.hub.publish([Change {
                layer: layer.clone(),
                key: key.to_string(),
                kind: ChangeKind::Deleted,
            }]);
        }
        Ok(was_live)
    }

    fn drop_layer(&self, layer: &Layer, now_ms: u64) -> MindResult<usize> {
        let mut w = self.write.lock().map_err(poisoned)?;
        let lp = layer_prefix(layer);
        let (txn, durable) = self.begin_write(&mut w, matches!(layer, Layer::Run(_)))?;
        let mut n = 0;
        {
            let mut t = txn.open_table(TABLE).map_err(be)?;
            let mut doomed = Vec::new();
            for item in t.range(lp.as_str()..).map_err(be)? {
                let (k, v) = item.map_err(be)?;
                if !k.value().starts_with(&lp) {
                    break;
                }
                if live_header(k.value(), v.value(), now_ms)?.is_some() {
                    n += 1;
                }
                doomed.push(k.value().to_string());
            }
            for k in doomed {
                t.remove(k.as_str()).map_err(be)?;
            }
        }
        Self::commit(txn, durable, &mut w)?;
        self.hub.publish([Change {
            layer: layer.clone(),
            key: String::new(),
            kind: ChangeKind::Dropped,
        }]);
        Ok(n)
    }

    fn purge_expired(&self, now_ms: u64) -> MindResult<usize> {
        let mut w = self.write.lock().map_err(poisoned)?;
        let txn = self.db.begin_write().map_err(be)?;
        let n;
        {
            let mut t = txn.open_table(TABLE).map_err(be)?;
            let mut doomed = Vec::new();
            for item in t.iter().map_err(be)? {
                let (k, v) = item.map_err(be)?;
                if live_header(k.value(), v.value(), now_ms)?.is_none() {
                    doomed.push(k.value().to_string());
                }
            }
            n = doomed.len();
            for k in doomed {
                t.remove(k.as_str()).map_err(be)?;
            }
        }
        if n == 0 {
            txn.abort().map_err(be)?;
        } else {
            Self::commit(txn, true, &mut w)?;
        }
        Ok(n)
    }

    fn watch(&self, layers: &[Layer]) -> MindResult<Watch> {
        Ok(self.hub.subscribe(layers))
    }
}
