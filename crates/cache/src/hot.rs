//! [`HotTier`]: the in-process hot tier on `moka` — bounded by bytes (TinyLFU admission,
//! LRU eviction), each entry expiring after its own TTL.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::notification::RemovalCause;
use moka::sync::Cache as Moka;
use moka::Expiry;

use crate::{Tier, TierError, TierUsage};

#[derive(Clone)]
struct Held {
    value: Arc<Vec<u8>>,
    tags: Arc<[String]>,
    ttl: Option<Duration>,
}

struct PerEntry;

impl Expiry<String, Held> for PerEntry {
    fn expire_after_create(&self, _k: &String, v: &Held, _at: Instant) -> Option<Duration> {
        v.ttl
    }

    fn expire_after_update(
        &self,
        _k: &String,
        v: &Held,
        _at: Instant,
        _left: Option<Duration>,
    ) -> Option<Duration> {
        v.ttl
    }
}

/// An in-process cache of at most `max_bytes` of keys and values.
pub struct HotTier {
    moka: Moka<String, Held>,
    evictions: Arc<AtomicU64>,
}

impl HotTier {
    /// A tier holding at most `max_bytes` (entries larger than a quarter of it are not
    /// kept).
    pub fn new(max_bytes: u64) -> HotTier {
        let evictions = Arc::new(AtomicU64::new(0));
        let counted = evictions.clone();
        let moka = Moka::builder()
            .max_capacity(max_bytes)
            .weigher(|k: &String, v: &Held| {
                u32::try_from(k.len() + v.value.len() + 64).unwrap_or(u32::MAX)
            })
            .expire_after(PerEntry)
            .support_invalidation_closures()
            .eviction_listener(move |_k, _v, cause| {
                if cause == RemovalCause::Size {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            })
            .build();
        HotTier { moka, evictions }
    }
}

impl Tier for HotTier {
    fn name(&self) -> &'static str {
        "hot"
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TierError> {
        Ok(self.moka.get(key).map(|h| h.value.as_ref().clone()))
    }

    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
        tags: &[String],
    ) -> Result<(), TierError> {
        self.moka.insert(
            key.to_string(),
            Held {
                value: Arc::new(value),
                tags: tags.into(),
                ttl,
            },
        );
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<bool, TierError> {
        Ok(self.moka.remove(key).is_some())
    }

    fn delete_tag(&self, tag: &str) -> Result<usize, TierError> {
        let tag = tag.to_string();
        let n = self
            .moka
            .iter()
            .filter(|(_, h)| h.tags.contains(&tag))
            .count();
        self.moka
            .invalidate_entries_if(move |_, h| h.tags.contains(&tag))
            .map_err(|e| TierError::new("hot", e))?;
        self.moka.run_pending_tasks();
        Ok(n)
    }

    fn clear(&self) -> Result<usize, TierError> {
        let n = self.moka.iter().count();
        self.moka.invalidate_all();
        self.moka.run_pending_tasks();
        Ok(n)
    }

    fn usage(&self) -> Result<TierUsage, TierError> {
        self.moka.run_pending_tasks();
        Ok(TierUsage {
            entries: self.moka.entry_count(),
            bytes: self.moka.weighted_size(),
            evictions: self.evictions.load(Ordering::Relaxed),
        })
    }
}
