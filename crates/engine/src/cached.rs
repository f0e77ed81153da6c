//! The operation cache in the engine: query embeddings (and those of the sentences
//! compared with queries) and ranked search results, under
//! keys holding everything that changes them — the tenant (from the stored collection
//! name), the engine's settings and version, the model, and for search the collection's
//! creation time and generation, so any committed change (ingest, a source's removal, a
//! dropped and recreated collection) makes the next search a miss, never a stale hit.

use std::sync::Arc;
use std::time::Duration;

use neuralcore_cache::{
    collection_tag, tenant_tag, Cache, HotTier, KeyBuilder, Op, RedbTier, Tier, TierError,
};
use sha2::Digest;

use crate::search::{Ranked, SearchOptions};
use crate::{Engine, EngineError};
use neuralcore_config::{ColdTierKind, Config, HotTierKind};
use neuralcore_core::TextKind;

/// The tenant part of a stored collection name (`acme~docs` → `acme`; `docs` →
/// `default`).
pub fn tenant_of(stored: &str) -> &str {
    stored
        .split_once(neuralcore_core::TENANT_SEP)
        .map_or(DEFAULT_TENANT, |(t, _)| t)
}

/// The tenant of collections stored without a tenant part.
pub(crate) const DEFAULT_TENANT: &str = "default";

/// SHA-256 (hex) of the settings that change results (every section but `[cache]`) and
/// of this build's version.
pub(crate) fn settings_fingerprint(config: &Config) -> String {
    let mut c = config.clone();
    c.cache = Default::default();
    let json = serde_json::to_string(&c).unwrap_or_default();
    let d = sha2::Sha256::new()
        .chain_update(env!("CARGO_PKG_VERSION"))
        .chain_update([0])
        .chain_update(json)
        .finalize();
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn ttl(seconds: u64) -> Option<Duration> {
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

/// The cache `[cache]` asks for: the in-process or Redis hot tier, the embedded
/// (`<data_dir>/cache.redb`; none without a data dir) or PostgreSQL cold tier. A tier
/// that cannot be opened is left out with a warning: a cache is never worth failing to
/// start for.
pub fn open_cache(config: &Config, data_dir: Option<&std::path::Path>) -> Cache {
    let c = &config.cache;
    let hot: Option<Arc<dyn Tier>> = match c.hot {
        HotTierKind::Memory => Some(Arc::new(HotTier::new(c.hot_max_bytes))),
        HotTierKind::Redis => open_or_warn("redis", redis_tier(c)),
        HotTierKind::Off => None,
    };
    let cold: Option<Arc<dyn Tier>> = match (c.cold, data_dir) {
        (ColdTierKind::Embedded, Some(dir)) => open_or_warn(
            "embedded",
            RedbTier::open(&dir.join("cache.redb"), c.cold_max_bytes)
                .map(|t| Arc::new(t) as Arc<dyn Tier>),
        ),
        (ColdTierKind::Embedded, None) | (ColdTierKind::Off, _) => None,
        (ColdTierKind::Postgres, _) => open_or_warn("postgres", postgres_tier(c)),
    };
    Cache::new(hot, cold).with_max_value_bytes(c.max_value_bytes)
}

fn open_or_warn(what: &str, tier: Result<Arc<dyn Tier>, TierError>) -> Option<Arc<dyn Tier>> {
    match tier {
        Ok(t) => Some(t),
        Err(e) => {
            tracing::warn!("the {what} cache tier is left out: {e}");
            None
        }
    }
}

/// The Redis hot tier: short timeouts (a down or slow Redis costs little; it is bypassed
/// and reconnected by itself).
fn redis_tier(c: &neuralcore_config::CacheSettings) -> Result<Arc<dyn Tier>, TierError> {
    neuralcore_cache::RedisTier::open(
        &c.redis_url,
        &c.redis_prefix,
        neuralcore_cache::RedisTimeouts::default(),
    )
    .map(|t| Arc::new(t) as Arc<dyn Tier>)
}

/// The PostgreSQL cold tier, bounded by `cold_max_bytes`.
fn postgres_tier(c: &neuralcore_config::CacheSettings) -> Result<Arc<dyn Tier>, TierError> {
    neuralcore_cache::PgTier::open(
        &c.postgres_url,
        &c.postgres_table,
        neuralcore_cache::PgTierOptions {
            max_bytes: Some(c.cold_max_bytes),
            ..Default::default()
        },
    )
    .map(|t| Arc::new(t) as Arc<dyn Tier>)
}

impl Engine {
    /// The operation cache.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// SHA-256 (hex) of the settings that change results and of this build's version:
    /// part of every cache key.
    pub fn settings_fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Use `cache` instead of the one `[cache]` describes (benchmarks, tests).
    pub fn set_cache(&mut self, cache: Arc<Cache>) {
        self.cache = cache;
    }

    /// A query's vector, cached per (tenant, model, settings, text).
    pub(crate) fn query_vector_in(
        &self,
        tenant: &str,
        query: &str,
    ) -> Result<Vec<f32>, EngineError> {
        let mut v = self.text_vectors_in(tenant, &[query], TextKind::Query)?;
        v.pop()
            .ok_or_else(|| EngineError::Model("no vector returned".into()))
    }

    /// The vectors of `texts` embedded as `kind`, each cached per (tenant, model,
    /// settings, kind, text); the sentences not cached are embedded in one call, the
    /// queries one by one.
    pub(crate) fn text_vectors_in(
        &self,
        tenant: &str,
        texts: &[&str],
        kind: TextKind,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let embedder = self.embedder_status().map_err(EngineError::NotFound)?;
        let on = self.config.cache.query_embedding && self.cache.is_on();
        let key = |text: &str| {
            let k = KeyBuilder::new(tenant, Op::QueryEmbedding)
                .str(&self.fingerprint)
                .str(embedder.model_id())
                .u64(embedder.dimension() as u64);
            // A query's key is as it always was; other kinds say theirs (a model may
            // embed a query and a passage differently).
            match kind {
                TextKind::Query => k,
                TextKind::Document => k.str("document"),
            }
            .str(text)
            .finish()
        };
        let keys: Vec<Option<_>> = texts.iter().map(|t| on.then(|| key(t))).collect();
        let mut out: Vec<Option<Vec<f32>>> = keys
            .iter()
            .map(|k| {
                k.as_ref()
                    .and_then(|k| self.cache.get(k))
                    .and_then(|hit| f32s(&hit.value, embedder.dimension()))
            })
            .collect();
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| out[i].is_none()).collect();
        if !missing.is_empty() {
            let batch: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
            // A query one at a time, as search embeds it (a model may take another path
            // for a lone query): its cached vector must not depend on who asked first.
            let vs = match kind {
                TextKind::Query => batch.iter().map(|q| embedder.embed_query(q)).collect(),
                TextKind::Document => embedder.embed(&batch, kind),
            }
            .map_err(|e| EngineError::Model(e.to_string()))?;
            crate::vectors::one_each(vs.len(), batch.len())?;
            for (&i, v) in missing.iter().zip(vs) {
                if let Some(key) = &keys[i] {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    self.cache.put(
                        key,
                        &bytes,
                        ttl(self.config.cache.query_embedding_ttl_s),
                        &[tenant_tag(tenant)],
                    );
                }
                out[i] = Some(v);
            }
        }
        Ok(out.into_iter().map(|v| v.unwrap_or_default()).collect())
    }

    /// [`Engine::search_keys`] through the cache: the key holds the collection's creation
    /// time and generation, read before the search and checked again after it (results
    /// of a search that raced a commit are not kept). Results that fell back from the
    /// mode asked for (no embedding model) are not kept either.
    pub(crate) fn search_keys_cached(
        &self,
        collection: &str,
        query: &str,
        k: usize,
        opts: SearchOptions,
    ) -> Result<Ranked, EngineError> {
        if !(self.config.cache.search && self.cache.is_on()) {
            return self.search_keys_uncached(collection, query, k, opts);
        }
        let before = self.collection(collection)?;
        let tenant = tenant_of(collection);
        let key = KeyBuilder::new(tenant, Op::Search)
            .str(&self.fingerprint)
            .str(collection)
            .str(&before.created_at)
            .u64(before.generation)
            .str(query)
            .u64(k as u64)
            .opt_str(opts.mode.map(|m| format!("{m:?}")).as_deref())
            .u64(opts.rerank.map_or(u64::MAX, |n| n as u64))
            .finish();
        if let Some((ranked, _)) = self.cache.get_json::<Ranked>(&key) {
            return Ok(ranked);
        }
        let ranked = self.search_keys_uncached(collection, query, k, opts)?;
        let unchanged = self.store.collection(collection)?.is_some_and(|after| {
            after.generation == before.generation && after.created_at == before.created_at
        }) && self.indexes_at(collection, before.generation);
        if ranked.fallback.is_none() && unchanged {
            self.cache.put_json(
                &key,
                &ranked,
                ttl(self.config.cache.search_ttl_s),
                &[tenant_tag(tenant), collection_tag(tenant, collection)],
            );
        }
        Ok(ranked)
    }
}

impl Engine {
    /// Whether this process's loaded indexes of `collection` (keyword, vector) are at
    /// `generation`. An ingest commits the store before it applies the batch to the
    /// indexes, so a search in between reads the store's new generation and the indexes'
    /// old contents: what it found must not be kept under the new generation (by the
    /// search cache or the answer cache).
    pub fn indexes_at(&self, collection: &str, generation: u64) -> bool {
        let keyword = self
            .indexes
            .lock()
            .expect("index map lock")
            .get(collection)
            .map(|i| i.generation());
        let vector = self
            .vectors
            .lock()
            .expect("vector map lock")
            .get(collection)
            .cloned()
            // A pgvector index's generation is read from the server (not under the lock);
            // one that cannot be read is not taken as current.
            .map(|i| i.generation().ok());
        keyword.is_none_or(|g| g == generation) && vector.is_none_or(|g| g == Some(generation))
    }

    /// `scorer`'s scores of `passages` against `query` (a reranker: `op` is
    /// [`Op::Rerank`]; an evaluator's model: [`Op::Grade`]), each cached per (tenant,
    /// settings, model, query, passage text) when `[cache]` turns that operation on. Only
    /// the misses are scored, in one batch.
    pub fn scores_cached(
        &self,
        op: Op,
        tenant: &str,
        scorer: &dyn neuralcore_core::Reranker,
        query: &str,
        passages: &[&str],
    ) -> Result<Vec<f32>, neuralcore_core::ModelError> {
        let (on, ttl_s) = match op {
            Op::Rerank => (self.config.cache.rerank, self.config.cache.rerank_ttl_s),
            Op::Grade => (self.config.cache.grade, self.config.cache.grade_ttl_s),
            _ => (false, 0),
        };
        if !(on && self.cache.is_on()) || passages.is_empty() {
            return scorer.score(query, passages);
        }
        let keys: Vec<_> = passages
            .iter()
            .map(|p| {
                KeyBuilder::new(tenant, op)
                    .str(&self.fingerprint)
                    .str(scorer.model_id())
                    .str(query)
                    .str(p)
                    .finish()
            })
            .collect();
        let mut scores: Vec<Option<f32>> = keys
            .iter()
            .map(|k| {
                self.cache
                    .get(k)
                    .and_then(|hit| f32s(&hit.value, 1))
                    .map(|v| v[0])
            })
            .collect();
        let missing: Vec<usize> = (0..passages.len())
            .filter(|&i| scores[i].is_none())
            .collect();
        if !missing.is_empty() {
            let batch: Vec<&str> = missing.iter().map(|&i| passages[i]).collect();
            let fresh = scorer.score(query, &batch)?;
            if fresh.len() != batch.len() {
                return Err(neuralcore_core::ModelError::Inference(format!(
                    "{} scores for {} passages",
                    fresh.len(),
                    batch.len()
                )));
            }
            let tags = [tenant_tag(tenant)];
            for (&i, v) in missing.iter().zip(fresh) {
                self.cache
                    .put(&keys[i], &v.to_le_bytes(), ttl(ttl_s), &tags);
                scores[i] = Some(v);
            }
        }
        Ok(scores.into_iter().map(|s| s.unwrap_or(0.0)).collect())
    }
}

impl Engine {
    /// `searcher`'s search of `query`, cached per (tenant, settings, embedding model,
    /// query, options, memory-store version) when `[cache] memory_search` is on and the
    /// search is one tenant's (`opts.filter.tenant` set). The store's version is read
    /// before the search and again after it: results of a search that raced a write are
    /// not kept, and any write makes the next search a miss.
    pub fn memory_search_cached(
        &self,
        searcher: &neuralcore_memory::MemorySearcher,
        query: &str,
        opts: &neuralcore_memory::MemorySearchOptions,
        now_ms: u64,
    ) -> neuralcore_memory::MemResult<Vec<neuralcore_memory::MemHit>> {
        let tenant = opts.filter.tenant.as_str();
        if !(self.config.cache.memory_search && self.cache.is_on()) || tenant.is_empty() {
            return searcher.search(query, opts, now_ms);
        }
        let store = searcher.store();
        let before = store.version()?;
        let qv: Vec<u8> = opts
            .query_vector
            .iter()
            .flatten()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let shape = neuralcore_memory::MemorySearchOptions {
            query_vector: None,
            ..opts.clone()
        };
        let key = KeyBuilder::new(tenant, Op::MemorySearch)
            .str(&self.fingerprint)
            .str(store.backend().name())
            .u64(before)
            .str(searcher.embedder().map_or("", |e| e.model_id()))
            .str(query)
            // Every option, f32s at full precision (`Debug` round-trips them).
            .str(&format!("{shape:?}"))
            .bool(opts.query_vector.is_some())
            .bytes(&qv)
            .finish();
        if let Some((hits, _)) = self.cache.get_json::<Vec<neuralcore_memory::MemHit>>(&key) {
            return Ok(hits);
        }
        let hits = searcher.search(query, opts, now_ms)?;
        if store.version()? == before {
            self.cache.put_json(
                &key,
                &hits,
                ttl(self.config.cache.memory_search_ttl_s),
                &[tenant_tag(tenant)],
            );
        }
        Ok(hits)
    }
}

/// Little-endian f32s of exactly `dim` values.
fn f32s(bytes: &[u8], dim: usize) -> Option<Vec<f32>> {
    if bytes.len() != dim * 4 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}
