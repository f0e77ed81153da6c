//! [`Tier`]: one place entries live (in process, redb, Redis, PostgreSQL), holding sealed
//! bytes under string keys with tags. Expiry is also in the bytes (checked by
//! [`crate::Cache`] on every read); a tier's own TTL only lets it forget sooner.

use std::time::Duration;

use thiserror::Error;

/// A tier failed (down, slow, full, damaged): the cache treats it as a miss.
#[derive(Debug, Clone, Error)]
#[error("{tier}: {message}")]
pub struct TierError {
    /// The tier's name.
    pub tier: &'static str,
    /// What went wrong.
    pub message: String,
}

impl TierError {
    /// An error of `tier`.
    pub fn new(tier: &'static str, message: impl ToString) -> TierError {
        TierError {
            tier,
            message: message.to_string(),
        }
    }
}

/// What a tier holds, as far as it knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TierUsage {
    /// Entries held (expired ones not yet forgotten may count).
    pub entries: u64,
    /// Bytes of keys and values held.
    pub bytes: u64,
    /// Entries it dropped to stay within its bounds.
    pub evictions: u64,
}

/// One tier of the cache. Implementations are cheap to share between threads.
pub trait Tier: Send + Sync + 'static {
    /// Its name in stats and errors (`memory`, `moka`, `redb`, `redis`, `postgres`).
    fn name(&self) -> &'static str;
    /// The bytes under `key`.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TierError>;
    /// Store `value` under `key` (replacing what was there) with `tags`; `ttl` lets the
    /// tier forget it after that long.
    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
        tags: &[String],
    ) -> Result<(), TierError>;
    /// Forget `key`; whether it was there.
    fn delete(&self, key: &str) -> Result<bool, TierError>;
    /// Forget every entry tagged `tag`; how many.
    fn delete_tag(&self, tag: &str) -> Result<usize, TierError>;
    /// Forget everything; how many.
    fn clear(&self) -> Result<usize, TierError>;
    /// What it holds.
    fn usage(&self) -> Result<TierUsage, TierError>;
}
