//! The in-memory backend: one `RwLock` over a map of layers, each a `BTreeMap` so
//! prefix listings come out sorted. Expired entries are invisible at once and removed
//! when overwritten, deleted or purged.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::RwLock;

use crate::error::MindResult;
use crate::notify::{poisoned, Change, ChangeKind, Hub, Watch};
use crate::raw::{decide, Layer, Outcome, Put, RawMind, Record};

type Layers = HashMap<Layer, BTreeMap<String, Record>>;

/// The in-memory backend (see [`crate::Mind::memory`]).
#[derive(Default)]
pub(crate) struct MemoryMind {
    layers: RwLock<Layers>,
    hub: Hub,
}

fn live<'a>(layers: &'a Layers, layer: &Layer, key: &str, now: u64) -> Option<&'a Record> {
    layers
        .get(layer)
        .and_then(|m| m.get(key))
        .filter(|r| r.live(now))
}

impl RawMind for MemoryMind {
    fn put(&self, puts: &[Put<'_>]) -> MindResult<Vec<Outcome>> {
        let mut layers = self.layers.write().map_err(poisoned)?;
        let mut out = Vec::with_capacity(puts.len());
        let mut changes = Vec::new();
        for p in puts {
            let current = live(&layers, p.layer, p.key, p.now_ms).map(|r| r.version);
            let base = match p.layer {
                Layer::Run(_) => live(&layers, &Layer::Global, p.key, p.now_ms).map(|r| r.version),
                Layer::Global => None,
            };
            let o = decide(current, base, p.expect);
            if let Outcome::Written(v) = o {
                let m = match layers.get_mut(p.layer) {
                    Some(m) => m,
                    None => layers.entry(p.layer.clone()).or_default(),
                };
                match m.get_mut(p.key) {
                    Some(r) => *r = p.record(v),
                    None => {
                        m.insert(p.key.to_string(), p.record(v));
                    }
                }
                if self.hub.active() {
                    changes.push(Change {
                        layer: p.layer.clone(),
                        key: p.key.to_string(),
                        kind: ChangeKind::Written(v),
                    });
                }
            }
            out.push(o);
        }
        self.hub.publish(changes);
        Ok(out)
    }

    fn get(&self, layers: &[&Layer], key: &str, now_ms: u64) -> MindResult<Option<Record>> {
        let map = self.layers.read().map_err(poisoned)?;
        Ok(layers
            .iter()
            .find_map(|l| live(&map, l, key, now_ms))
            .cloned())
    }

    fn scan(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        now_ms: u64,
    ) -> MindResult<Vec<(String, Record)>> {
        let map = self.layers.read().map_err(poisoned)?;
        let Some(m) = map.get(layer) else {
            return Ok(Vec::new());
        };
        Ok(
            m.range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix))
                .filter(|(k, r)| r.live(now_ms) && filter(k))
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect(),
        )
    }

    fn delete(&self, layer: &Layer, key: &str, now_ms: u64) -> MindResult<bool> {
        let mut map = self.layers.write().map_err(poisoned)?;
        let Some(m) = map.get_mut(layer) else {
            return Ok(false);
        };
        let was_live = m.remove(key).is_some_and(|r| r.live(now_ms));
        if m.is_empty() {
            map.remove(layer);
        }
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
        let mut map = self.layers.write().map_err(poisoned)?;
        let n = map
            .remove(layer)
            .map_or(0, |m| m.values().filter(|r| r.live(now_ms)).count());
        self.hub.publish([Change {
            layer: layer.clone(),
            key: String::new(),
            kind: ChangeKind::Dropped,
        }]);
        Ok(n)
    }

    fn purge_expired(&self, now_ms: u64) -> MindResult<usize> {
        let mut map = self.layers.write().map_err(poisoned)?;
        let mut n = 0;
        for m in map.values_mut() {
            let before = m.len();
            m.retain(|_, r| r.live(now_ms));
            n += before - m.len();
        }
        map.retain(|_, m| !m.is_empty());
        Ok(n)
    }

    fn watch(&self, layers: &[Layer]) -> MindResult<Watch> {
        Ok(self.hub.subscribe(layers))
    }
}
