//! The operation cache of neuralcore.
//!
//! Costly operations (query embeddings, searches, reranker and grader scores, web pages,
//! LLM completions, memory searches, whole answers) are cached one by one, each under a
//! [`CacheKey`]: the SHA-256 of a canonical encoding of everything that changes its
//! result ([`KeyBuilder`]), the tenant first. A [`Cache`] has up to two [`Tier`]s:
//!
//! * **hot**: in this process ([`HotTier`], on `moka`, bounded by bytes) or shared
//!   between replicas;
//! * **cold**: persistent ([`RedbTier`], `<data dir>/cache.redb`, bounded by bytes).
//!
//! A read tries hot, then cold; a cold hit is copied into hot for the time it has left
//! (backfill). A write goes to both. Every stored value is sealed with its expiry,
//! creation time, tags and a digest, checked on every read: a damaged, truncated,
//! expired or future-dated entry is a miss, never an error or a wrong value.
//!
//! **A failing tier is bypassed**, never the request's failure: its error is counted and
//! logged once, the tier is skipped for [`RETRY_AFTER`], then tried again.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use neuralcore_cache::{Cache, HotTier, KeyBuilder, Op};
//!
//! let cache = Cache::new(Some(Arc::new(HotTier::new(1 << 20))), None);
//! let key = KeyBuilder::new("acme", Op::Llm).str("model").str("prompt").finish();
//! assert!(cache.get(&key).is_none());
//! cache.put(&key, b"completion", Some(Duration::from_secs(60)), &[]);
//! assert_eq!(cache.get(&key).unwrap().value, b"completion");
//! ```

#![warn(missing_docs)]

mod cold;
pub mod conformance;
mod envelope;
mod hot;
mod key;
mod memory;
#[cfg(feature = "postgres")]
mod pg_tier;
#[cfg(feature = "redis")]
mod redis_tier;
mod tier;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use cold::RedbTier;
pub use hot::HotTier;
pub use key::{CacheKey, KeyBuilder, Op};
pub use memory::MemoryTier;
pub use neuralcore_core::settings::redact_url;
#[cfg(feature = "postgres")]
pub use pg_tier::{PgTier, PgTierOptions};
#[cfg(feature = "redis")]
pub use redis_tier::{RedisTier, RedisTimeouts};
pub use tier::{Tier, TierError, TierUsage};

/// How long a tier that failed is skipped before it is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Largest value cached by default, in bytes (a larger one is not cached).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 4 * 1024 * 1024;

/// Milliseconds since the Unix epoch: what entries' expiry and age are kept in (they
/// outlive the process, and tiers are shared between processes).
pub(crate) fn now_ms() -> u64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    #[cfg(test)]
    let ms = ms.saturating_add_signed(wall_clock_shift::get());
    ms
}

/// Milliseconds on a monotonic clock since the process first asked (never 0): what a
/// failed tier's rest is measured with, so a jump of the wall clock neither keeps a
/// tier bypassed (a jump back) nor ends its rest early (a jump forward).
fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let elapsed = START.get_or_init(std::time::Instant::now).elapsed();
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX) + 1
}

/// Tests move this thread's wall clock (`now_ms`) to see what a clock jump does.
#[cfg(test)]
mod wall_clock_shift {
    use std::cell::Cell;

    thread_local! {
        static SHIFT_MS: Cell<i64> = const { Cell::new(0) };
    }

    pub(crate) fn get() -> i64 {
        SHIFT_MS.with(Cell::get)
    }

    pub(crate) fn set(ms: i64) {
        SHIFT_MS.with(|s| s.set(ms));
    }
}

/// The tag every entry of `tenant` carries.
pub fn tenant_tag(tenant: &str) -> String {
    format!("tenant:{tenant}")
}

/// The tag every entry drawn from `tenant`'s `collection` carries.
pub fn collection_tag(tenant: &str, collection: &str) -> String {
    format!("collection:{tenant}/{collection}")
}

/// The tag of every entry of `op` (added by [`Cache::put`]).
pub fn op_tag(op: Op) -> String {
    format!("op:{}", op.name())
}

thread_local! {
    /// Hits served on this thread, per operation (see [`Served`]).
    static SERVED: std::cell::Cell<[u64; Op::ALL.len()]> =
        const { std::cell::Cell::new([0; Op::ALL.len()]) };
}

/// Hits the cache served on this thread so far, per operation. Take one before a piece
/// of work and call [`Served::since`] after it to learn what that work got from the
/// cache (the loop's stages run on one thread: each stage's trace says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served([u64; Op::ALL.len()]);

impl Served {
    /// The counts now.
    pub fn now() -> Served {
        Served(SERVED.with(std::cell::Cell::get))
    }

    /// Hits served on this thread since `self` was taken, by operation name; operations
    /// without one are left out.
    pub fn since(&self) -> std::collections::BTreeMap<String, u64> {
        let now = Served::now();
        Op::ALL
            .iter()
            .filter_map(|op| {
                let n = now.0[op.index()].saturating_sub(self.0[op.index()]);
                (n > 0).then(|| (op.name().to_string(), n))
            })
            .collect()
    }
}

/// A cached value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    /// The value.
    pub value: Vec<u8>,
    /// How long ago it was stored, in milliseconds.
    pub age_ms: u64,
    /// The tier that had it.
    pub tier: &'static str,
}

/// One tier and its breaker.
struct Guarded {
    tier: Arc<dyn Tier>,
    /// Skip the tier until this time ([`mono_ms`]; 0 = up).
    down_until_ms: AtomicU64,
    errors: AtomicU64,
    bypassed: AtomicU64,
}

impl Guarded {
    fn new(tier: Arc<dyn Tier>) -> Guarded {
        Guarded {
            tier,
            down_until_ms: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
        }
    }

    /// Run `f` on the tier unless it is resting after a failure; `None` when skipped or
    /// failed.
    fn call<T>(&self, f: impl FnOnce(&dyn Tier) -> Result<T, TierError>) -> Option<T> {
        let until = self.down_until_ms.load(Ordering::Relaxed);
        if until != 0 && mono_ms() < until {
            self.bypassed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        match f(self.tier.as_ref()) {
            Ok(v) => {
                if until != 0 {
                    self.down_until_ms.store(0, Ordering::Relaxed);
                    tracing::info!("cache tier {} answers again", self.tier.name());
                }
                Some(v)
            }
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                let next = mono_ms() + RETRY_AFTER.as_millis() as u64;
                if self.down_until_ms.swap(next, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        "cache tier failed, bypassed for {}s: {e}",
                        RETRY_AFTER.as_secs()
                    );
                }
                None
            }
        }
    }
}

#[derive(Default)]
struct OpCounters {
    hot_hits: AtomicU64,
    cold_hits: AtomicU64,
    misses: AtomicU64,
    puts: AtomicU64,
    too_large: AtomicU64,
    corrupt: AtomicU64,
}

/// Counters of one operation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OpStats {
    /// The operation.
    pub op: &'static str,
    /// Reads the hot tier answered.
    pub hot_hits: u64,
    /// Reads the cold tier answered.
    pub cold_hits: u64,
    /// Reads no tier answered.
    pub misses: u64,
    /// Values stored.
    pub puts: u64,
    /// Values not stored: larger than the limit.
    pub too_large: u64,
    /// Stored bytes that failed their check (read as misses).
    pub corrupt: u64,
}

/// Counters of one tier.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TierStats {
    /// `hot` or `cold`.
    pub role: &'static str,
    /// The tier's name.
    pub name: &'static str,
    /// What it holds (absent when it could not say).
    pub usage: Option<TierUsage>,
    /// Calls that failed.
    pub errors: u64,
    /// Calls skipped while it rested after a failure.
    pub bypassed: u64,
}

/// The cache's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Per operation.
    pub ops: Vec<OpStats>,
    /// Per tier.
    pub tiers: Vec<TierStats>,
}

/// A two-tier cache; cheap to share (`Arc<Cache>`). With no tier it caches nothing.
pub struct Cache {
    hot: Option<Guarded>,
    cold: Option<Guarded>,
    max_value_bytes: usize,
    counters: [OpCounters; 8],
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("hot", &self.hot.as_ref().map(|g| g.tier.name()))
            .field("cold", &self.cold.as_ref().map(|g| g.tier.name()))
            .finish()
    }
}

impl Cache {
    /// A cache over these tiers.
    pub fn new(hot: Option<Arc<dyn Tier>>, cold: Option<Arc<dyn Tier>>) -> Cache {
        Cache {
            hot: hot.map(Guarded::new),
            cold: cold.map(Guarded::new),
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            counters: Default::default(),
        }
    }

    /// A cache that caches nothing.
    pub fn off() -> Cache {
        Cache::new(None, None)
    }

    /// The same, caching values of at most `n` bytes.
    pub fn with_max_value_bytes(mut self, n: usize) -> Cache {
        self.max_value_bytes = n;
        self
    }

    /// Whether any tier is configured.
    pub fn is_on(&self) -> bool {
        self.hot.is_some() || self.cold.is_some()
    }

    fn tiers(&self) -> impl Iterator<Item = &Guarded> {
        self.hot.iter().chain(self.cold.iter())
    }

    /// The value under `key`, from the hot tier, else the cold one (copied into the hot
    /// tier for the time it has left).
    pub fn get(&self, key: &CacheKey) -> Option<Cached> {
        if !self.is_on() {
            return None;
        }
        let c = &self.counters[key.op().index()];
        let sk = key.storage_key();
        let now = now_ms();
        for (i, g) in self.tiers().enumerate() {
            let Some(Some(bytes)) = g.call(|t| t.get(&sk)) else {
                continue;
            };
            let opened = match envelope::open(&bytes, now) {
                Ok(o) => o,
                Err(why) => {
                    if why == envelope::Unusable::Corrupt {
                        c.corrupt.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(key = %sk, tier = g.tier.name(), "damaged cache entry dropped");
                    }
                    g.call(|t| t.delete(&sk));
                    continue;
                }
            };
            let found = Cached {
                value: opened.value.to_vec(),
                age_ms: now.saturating_sub(opened.created_ms),
                tier: g.tier.name(),
            };
            if i == 0 && self.hot.is_some() {
                c.hot_hits.fetch_add(1, Ordering::Relaxed);
            } else {
                c.cold_hits.fetch_add(1, Ordering::Relaxed);
                if let Some(hot) = &self.hot {
                    let left = opened
                        .expires_ms
                        .map(|e| Duration::from_millis(e.saturating_sub(now)));
                    hot.call(|t| t.put(&sk, bytes.clone(), left, &opened.tags));
                }
            }
            SERVED.with(|s| {
                let mut n = s.get();
                n[key.op().index()] += 1;
                s.set(n);
            });
            return Some(found);
        }
        c.misses.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Store `value` under `key` in every tier, for `ttl` (`None`: until evicted), with
    /// `tags` (and `op:<op>`). A value over the size limit is not stored.
    pub fn put(&self, key: &CacheKey, value: &[u8], ttl: Option<Duration>, tags: &[String]) {
        if !self.is_on() {
            return;
        }
        let c = &self.counters[key.op().index()];
        if value.len() > self.max_value_bytes {
            c.too_large.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let now = now_ms();
        let expires = ttl.map(|t| {
            now.saturating_add(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))
                .max(now + 1)
        });
        let mut all = Vec::with_capacity(tags.len() + 1);
        all.push(op_tag(key.op()));
        all.extend(tags.iter().filter(|t| !t.contains('\0')).cloned());
        let sealed = envelope::seal(value, &all, now, expires);
        let sk = key.storage_key();
        for g in self.tiers() {
            g.call(|t| t.put(&sk, sealed.clone(), ttl, &all));
        }
        c.puts.fetch_add(1, Ordering::Relaxed);
    }

    /// [`Cache::get`] of a JSON value; a value that does not parse as `T` is a miss.
    pub fn get_json<T: serde::de::DeserializeOwned>(&self, key: &CacheKey) -> Option<(T, Cached)> {
        let hit = self.get(key)?;
        match serde_json::from_slice(&hit.value) {
            Ok(v) => Some((v, hit)),
            Err(_) => {
                self.counters[key.op().index()]
                    .corrupt
                    .fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// [`Cache::put`] of a JSON value.
    pub fn put_json<T: Serialize>(
        &self,
        key: &CacheKey,
        value: &T,
        ttl: Option<Duration>,
        tags: &[String],
    ) {
        if !self.is_on() {
            return;
        }
        if let Ok(bytes) = serde_json::to_vec(value) {
            self.put(key, &bytes, ttl, tags);
        }
    }

    /// Forget `key` in every tier.
    pub fn delete(&self, key: &CacheKey) {
        let sk = key.storage_key();
        for g in self.tiers() {
            g.call(|t| t.delete(&sk));
        }
    }

    /// Forget every entry tagged `tag` in every tier; how many entries went (summed
    /// over the tiers).
    pub fn delete_tag(&self, tag: &str) -> usize {
        self.tiers()
            .map(|g| g.call(|t| t.delete_tag(tag)).unwrap_or(0))
            .sum()
    }

    /// Forget everything; how many entries went (summed over the tiers).
    pub fn clear(&self) -> usize {
        self.tiers()
            .map(|g| g.call(|t| t.clear()).unwrap_or(0))
            .sum()
    }

    /// The counters.
    pub fn stats(&self) -> CacheStats {
        let ops = Op::ALL
            .iter()
            .map(|op| {
                let c = &self.counters[op.index()];
                let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
                OpStats {
                    op: op.name(),
                    hot_hits: l(&c.hot_hits),
                    cold_hits: l(&c.cold_hits),
                    misses: l(&c.misses),
                    puts: l(&c.puts),
                    too_large: l(&c.too_large),
                    corrupt: l(&c.corrupt),
                }
            })
            .collect();
        let tier = |role: &'static str, g: &Guarded| TierStats {
            role,
            name: g.tier.name(),
            usage: g.tier.usage().ok(),
            errors: g.errors.load(Ordering::Relaxed),
            bypassed: g.bypassed.load(Ordering::Relaxed),
        };
        let tiers = self
            .hot
            .iter()
            .map(|g| tier("hot", g))
            .chain(self.cold.iter().map(|g| tier("cold", g)))
            .collect();
        CacheStats { ops, tiers }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A tier that fails every call, counting them.
    struct Failing(AtomicUsize);

    impl Failing {
        fn fail<T>(&self) -> Result<T, TierError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Err(TierError::new("failing", "connection refused"))
        }
    }

    impl Tier for Failing {
        fn name(&self) -> &'static str {
            "failing"
        }
        fn get(&self, _: &str) -> Result<Option<Vec<u8>>, TierError> {
            self.fail()
        }
        fn put(
            &self,
            _: &str,
            _: Vec<u8>,
            _: Option<Duration>,
            _: &[String],
        ) -> Result<(), TierError> {
            self.fail()
        }
        fn delete(&self, _: &str) -> Result<bool, TierError> {
            self.fail()
        }
        fn delete_tag(&self, _: &str) -> Result<usize, TierError> {
            self.fail()
        }
        fn clear(&self) -> Result<usize, TierError> {
            self.fail()
        }
        fn usage(&self) -> Result<TierUsage, TierError> {
            self.fail()
        }
    }

    #[test]
    fn a_failed_tier_rests_for_retry_after_whatever_the_wall_clock_does() {
        let failing = Arc::new(Failing(AtomicUsize::new(0)));
        let cache = Cache::new(Some(failing.clone()), None);
        let key = KeyBuilder::new("acme", Op::Search).str("q").finish();
        let calls = || failing.0.load(Ordering::Relaxed);
        assert!(cache.get(&key).is_none());
        assert_eq!(calls(), 1);
        // The wall clock jumps an hour back while the tier rests: the rest still ends.
        wall_clock_shift::set(-3_600_000);
        assert!(cache.get(&key).is_none());
        assert_eq!(calls(), 1, "tried while resting");
        std::thread::sleep(RETRY_AFTER + Duration::from_millis(150));
        assert!(cache.get(&key).is_none());
        assert_eq!(calls(), 2, "still bypassed after its rest, by a clock jump");
        // And an hour forward does not end the rest that just began.
        wall_clock_shift::set(3_600_000);
        assert!(cache.get(&key).is_none());
        assert_eq!(calls(), 2, "a clock jump ended the rest early");
        wall_clock_shift::set(0);
    }

    #[test]
    fn entries_expire_by_the_wall_clock_and_a_jump_back_never_serves_a_wrong_age() {
        let cache = Cache::new(Some(Arc::new(MemoryTier::new())), None);
        let key = KeyBuilder::new("acme", Op::Search).str("q").finish();
        cache.put(&key, b"hits", Some(Duration::from_secs(60)), &[]);
        // A second back (within the skew allowed between machines): served, aged 0,
        // not a wrapped-around age.
        wall_clock_shift::set(-1_000);
        let c = cache.get(&key).expect("served after a small jump back");
        assert_eq!(c.age_ms, 0);
        // Two minutes on, past its 60 s: gone, though the tier's own clock says live.
        wall_clock_shift::set(120_000);
        assert!(cache.get(&key).is_none(), "served past its expiry");
        // Written "in the future" of an hour-back clock: not trusted, a miss.
        cache.put(&key, b"hits", Some(Duration::from_secs(60)), &[]);
        wall_clock_shift::set(-3_600_000);
        assert!(
            cache.get(&key).is_none(),
            "an entry from the future was served"
        );
        wall_clock_shift::set(0);
    }
}
