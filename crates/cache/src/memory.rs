//! [`MemoryTier`]: the in-memory twin — a map with exact semantics and no eviction, for
//! tests and as the reference the conformance suite holds every tier to.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::{Tier, TierError, TierUsage};

struct Held {
    value: Vec<u8>,
    tags: Vec<String>,
    until: Option<Instant>,
}

/// A map in this process.
#[derive(Default)]
pub struct MemoryTier {
    map: Mutex<HashMap<String, Held>>,
}

impl MemoryTier {
    /// An empty tier.
    pub fn new() -> MemoryTier {
        MemoryTier::default()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Tier for MemoryTier {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TierError> {
        let mut map = self.map();
        match map.get(key) {
            Some(h) if h.until.is_some_and(|u| Instant::now() >= u) => {
                map.remove(key);
                Ok(None)
            }
            Some(h) => Ok(Some(h.value.clone())),
            None => Ok(None),
        }
    }

    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
        tags: &[String],
    ) -> Result<(), TierError> {
        let until = ttl.and_then(|t| Instant::now().checked_add(t));
        self.map().insert(
            key.to_string(),
            Held {
                value,
                tags: tags.to_vec(),
                until,
            },
        );
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<bool, TierError> {
        Ok(self.map().remove(key).is_some())
    }

    fn delete_tag(&self, tag: &str) -> Result<usize, TierError> {
        let mut map = self.map();
        let before = map.len();
        map.retain(|_, h| !h.tags.iter().any(|t| t == tag));
        Ok(before - map.len())
    }

    fn clear(&self) -> Result<usize, TierError> {
        let mut map = self.map();
        let n = map.len();
        map.clear();
        Ok(n)
    }

    fn usage(&self) -> Result<TierUsage, TierError> {
        let map = self.map();
        Ok(TierUsage {
            entries: map.len() as u64,
            bytes: map
                .iter()
                .map(|(k, h)| (k.len() + h.value.len()) as u64)
                .sum(),
            evictions: 0,
        })
    }
}
