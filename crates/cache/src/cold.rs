//! [`RedbTier`]: the embedded cold tier, a redb file (`<data dir>/cache.redb`) bounded by
//! bytes: past its bound the oldest entries go first, and expired ones as they are met.
//!
//! Most commits skip the disk flush (a cache may lose its last writes in a crash, never
//! its consistency: redb rolls back to the last flushed commit); every
//! [`FLUSH_EVERY`]-th commit flushes, which also lets redb reuse freed pages.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::{Tier, TierError, TierUsage};

/// key → seq (8) | expires ms (8, 0 = never) | tags joined by `\0` length (4) | tags | value.
const ENTRIES: TableDefinition<&str, &[u8]> = TableDefinition::new("entries");
/// seq → key: insertion order, for eviction.
const ORDER: TableDefinition<u64, &str> = TableDefinition::new("order");
/// `tag \0 key` → ().
const TAGS: TableDefinition<&str, ()> = TableDefinition::new("tags");
/// `bytes`, `seq`, `evictions` → counters.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Commits between two flushed ones.
pub const FLUSH_EVERY: u64 = 32;

/// A redb file of at most `max_bytes` of keys and values.
pub struct RedbTier {
    db: Database,
    max_bytes: u64,
    commits: AtomicU64,
}

fn err(e: impl std::fmt::Display) -> TierError {
    TierError::new("redb", e)
}

struct Record<'a> {
    seq: u64,
    expires_ms: u64,
    tags: Vec<&'a str>,
    value: &'a [u8],
}

fn encode(seq: u64, expires_ms: u64, tags: &[String], value: &[u8]) -> Vec<u8> {
    let joined = tags.join("\0");
    let mut out = Vec::with_capacity(20 + joined.len() + value.len());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&expires_ms.to_le_bytes());
    out.extend_from_slice(&(joined.len() as u32).to_le_bytes());
    out.extend_from_slice(joined.as_bytes());
    out.extend_from_slice(value);
    out
}

fn decode(b: &[u8]) -> Option<Record<'_>> {
    let seq = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
    let expires_ms = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    let n = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?) as usize;
    let joined = std::str::from_utf8(b.get(20..20 + n)?).ok()?;
    let tags = if joined.is_empty() {
        Vec::new()
    } else {
        joined.split('\0').collect()
    };
    Some(Record {
        seq,
        expires_ms,
        tags,
        value: b.get(20 + n..)?,
    })
}

fn now_ms() -> u64 {
    crate::now_ms()
}

/// redb's page cache for the cache file: redb's default is 1 GiB per database, and a
/// long-running server's RSS grew toward it as the file grew (a 30-minute soak,
/// bench/README.md). Hits are mostly hot-tier ones; the cold tier is read on a miss.
const PAGE_CACHE_BYTES: usize = 32 * 1024 * 1024;

fn open_db(path: &Path) -> Result<Database, redb::DatabaseError> {
    redb::Builder::new()
        .set_cache_size(PAGE_CACHE_BYTES)
        .create(path)
}

impl RedbTier {
    /// Open (or create) the cache file at `path`. A file that is not a cache (or is
    /// damaged beyond redb's repair) is moved aside to `<path>.broken` and a fresh one
    /// made: a cache is never worth failing to start for.
    pub fn open(path: &Path, max_bytes: u64) -> Result<RedbTier, TierError> {
        // redb 2.6 panics on some truncated files rather than returning an error: that
        // is a damaged cache too.
        let create = || {
            std::panic::catch_unwind(|| open_db(path)).unwrap_or_else(|_| {
                Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(
                    "the file is damaged (redb panicked opening it)".into(),
                )))
            })
        };
        let db = match create() {
            Ok(db) => db,
            Err(e @ redb::DatabaseError::DatabaseAlreadyOpen) => return Err(err(e)),
            Err(e) => {
                tracing::warn!(
                    "the cache file {} cannot be opened ({e}): starting an empty one",
                    path.display()
                );
                let aside = path.with_extension("redb.broken");
                std::fs::rename(path, &aside).map_err(err)?;
                open_db(path).map_err(err)?
            }
        };
        let tier = RedbTier {
            db,
            max_bytes,
            commits: AtomicU64::new(0),
        };
        tier.write(|_| Ok(()))?;
        Ok(tier)
    }

    /// Run `f` in a write transaction and commit it (flushed every [`FLUSH_EVERY`]).
    fn write<T>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, TierError>,
    ) -> Result<T, TierError> {
        let mut tx = self.db.begin_write().map_err(err)?;
        let n = self.commits.fetch_add(1, Ordering::Relaxed);
        if !n.is_multiple_of(FLUSH_EVERY) {
            tx.set_durability(Durability::None);
        }
        {
            // Every table exists from the first transaction on.
            tx.open_table(ENTRIES).map_err(err)?;
            tx.open_table(ORDER).map_err(err)?;
            tx.open_table(TAGS).map_err(err)?;
            tx.open_table(META).map_err(err)?;
        }
        let out = f(&tx)?;
        tx.commit().map_err(err)?;
        Ok(out)
    }
}

/// Remove `key`'s entry (and its order and tag rows) inside `tx`; its byte size, if any.
fn remove_in(tx: &redb::WriteTransaction, key: &str) -> Result<Option<u64>, TierError> {
    let mut entries = tx.open_table(ENTRIES).map_err(err)?;
    let Some(old) = entries.remove(key).map_err(err)? else {
        return Ok(None);
    };
    let bytes = old.value().to_vec();
    drop(old);
    let size = (key.len() + bytes.len()) as u64;
    if let Some(r) = decode(&bytes) {
        tx.open_table(ORDER)
            .map_err(err)?
            .remove(r.seq)
            .map_err(err)?;
        let mut tags = tx.open_table(TAGS).map_err(err)?;
        for t in r.tags {
            tags.remove(format!("{t}\0{key}").as_str()).map_err(err)?;
        }
    }
    add_meta(tx, "bytes", -(size as i64))?;
    Ok(Some(size))
}

fn meta(tx: &redb::WriteTransaction, name: &str) -> Result<u64, TierError> {
    Ok(tx
        .open_table(META)
        .map_err(err)?
        .get(name)
        .map_err(err)?
        .map(|v| v.value())
        .unwrap_or(0))
}

fn add_meta(tx: &redb::WriteTransaction, name: &str, delta: i64) -> Result<u64, TierError> {
    let v = meta(tx, name)?.saturating_add_signed(delta);
    tx.open_table(META)
        .map_err(err)?
        .insert(name, v)
        .map_err(err)?;
    Ok(v)
}

impl Tier for RedbTier {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TierError> {
        let tx = self.db.begin_read().map_err(err)?;
        let entries = match tx.open_table(ENTRIES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(err(e)),
        };
        let Some(v) = entries.get(key).map_err(err)? else {
            return Ok(None);
        };
        let bytes = v.value();
        match decode(bytes) {
            Some(r) if r.expires_ms == 0 || r.expires_ms > now_ms() => Ok(Some(r.value.to_vec())),
            // Expired or unreadable: a miss (the next write of it replaces it).
            _ => Ok(None),
        }
    }

    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
        tags: &[String],
    ) -> Result<(), TierError> {
        if tags.iter().any(|t| t.contains('\0')) || key.contains('\0') {
            return Err(err("keys and tags must not hold NUL"));
        }
        let size = (key.len() + value.len() + 20) as u64;
        if size > self.max_bytes {
            return Ok(());
        }
        let expires_ms = ttl.map_or(0, |t| {
            now_ms()
                .saturating_add(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
                .max(1)
        });
        self.write(|tx| {
            remove_in(tx, key)?;
            let seq = add_meta(tx, "seq", 1)?;
            let record = encode(seq, expires_ms, tags, &value);
            let stored = (key.len() + record.len()) as u64;
            tx.open_table(ENTRIES)
                .map_err(err)?
                .insert(key, record.as_slice())
                .map_err(err)?;
            tx.open_table(ORDER)
                .map_err(err)?
                .insert(seq, key)
                .map_err(err)?;
            {
                let mut t = tx.open_table(TAGS).map_err(err)?;
                for tag in tags {
                    t.insert(format!("{tag}\0{key}").as_str(), ())
                        .map_err(err)?;
                }
            }
            let mut total = add_meta(tx, "bytes", stored as i64)?;
            // Past the bound: the oldest go until 90% of it is left.
            let target = self.max_bytes / 10 * 9;
            let over = total > self.max_bytes;
            while over && total > target {
                let oldest = {
                    let order = tx.open_table(ORDER).map_err(err)?;
                    let first = order.first().map_err(err)?;
                    first.map(|(_, k)| k.value().to_string())
                };
                let Some(k) = oldest else { break };
                if k == key {
                    break;
                }
                remove_in(tx, &k)?;
                add_meta(tx, "evictions", 1)?;
                total = meta(tx, "bytes")?;
            }
            Ok(())
        })
    }

    fn delete(&self, key: &str) -> Result<bool, TierError> {
        self.write(|tx| Ok(remove_in(tx, key)?.is_some()))
    }

    fn delete_tag(&self, tag: &str) -> Result<usize, TierError> {
        let prefix = format!("{tag}\0");
        self.write(|tx| {
            let keys: Vec<String> = {
                let tags = tx.open_table(TAGS).map_err(err)?;
                let mut keys = Vec::new();
                for row in tags.range(prefix.as_str()..).map_err(err)? {
                    let (k, _) = row.map_err(err)?;
                    let Some(key) = k.value().strip_prefix(prefix.as_str()) else {
                        break;
                    };
                    keys.push(key.to_string());
                }
                keys
            };
            let mut n = 0;
            for k in keys {
                if remove_in(tx, &k)?.is_some() {
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    fn clear(&self) -> Result<usize, TierError> {
        self.write(|tx| {
            let n = tx.open_table(ENTRIES).map_err(err)?.len().map_err(err)? as usize;
            tx.delete_table(ENTRIES).map_err(err)?;
            tx.delete_table(ORDER).map_err(err)?;
            tx.delete_table(TAGS).map_err(err)?;
            tx.open_table(ENTRIES).map_err(err)?;
            tx.open_table(ORDER).map_err(err)?;
            tx.open_table(TAGS).map_err(err)?;
            tx.open_table(META)
                .map_err(err)?
                .insert("bytes", 0)
                .map_err(err)?;
            Ok(n)
        })
    }

    fn usage(&self) -> Result<TierUsage, TierError> {
        let tx = self.db.begin_read().map_err(err)?;
        let entries = tx.open_table(ENTRIES).map_err(err)?.len().map_err(err)?;
        let m = tx.open_table(META).map_err(err)?;
        let get = |k: &str| -> Result<u64, TierError> {
            Ok(m.get(k).map_err(err)?.map(|v| v.value()).unwrap_or(0))
        };
        Ok(TierUsage {
            entries,
            bytes: get("bytes")?,
            evictions: get("evictions")?,
        })
    }
}
