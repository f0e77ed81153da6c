//! The engine's operation cache behind the seams of the LLM client
//! ([`CompletionCache`], `[cache] llm`) and of web search ([`WebCache`], `[cache] web`):
//! each tenant's entries under its own keys.

use std::sync::Arc;
use std::time::Duration;

use neuralcore_cache::{tenant_tag, Cache, KeyBuilder, Op};
use neuralcore_engine::Engine;
use neuralcore_llm::{CompletionCache, LlmClient};
use neuralcore_web::{WebCache, WebSearch};

/// One operation's entries in the operation cache, keyed by (tenant, what was asked).
struct OpCache {
    cache: Arc<Cache>,
    op: Op,
    ttl: Option<Duration>,
}

impl OpCache {
    fn new(engine: &Engine, op: Op, ttl_s: u64) -> OpCache {
        OpCache {
            cache: engine.cache().clone(),
            op,
            ttl: (ttl_s > 0).then(|| Duration::from_secs(ttl_s)),
        }
    }

    fn lookup(&self, scope: &str, request: &[u8]) -> Option<Vec<u8>> {
        let key = KeyBuilder::new(scope, self.op).bytes(request).finish();
        self.cache.get(&key).map(|hit| hit.value)
    }

    /// Kept for the shorter of the configured TTL and `limit`.
    fn keep(&self, scope: &str, request: &[u8], value: &[u8], limit: Option<Duration>) {
        let key = KeyBuilder::new(scope, self.op).bytes(request).finish();
        let ttl = match (self.ttl, limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.cache.put(&key, value, ttl, &[tenant_tag(scope)]);
    }
}

impl CompletionCache for OpCache {
    fn get(&self, scope: &str, request: &[u8]) -> Option<Vec<u8>> {
        self.lookup(scope, request)
    }

    fn put(&self, scope: &str, request: &[u8], response: &[u8]) {
        self.keep(scope, request, response, None);
    }
}

impl WebCache for OpCache {
    fn get(&self, scope: &str, key: &str) -> Option<Vec<u8>> {
        self.lookup(scope, key.as_bytes())
    }

    fn put(&self, scope: &str, key: &str, value: &[u8], ttl: Option<Duration>) {
        self.keep(scope, key.as_bytes(), value, ttl);
    }
}

/// `client` caching its completions as `[cache]` says (unchanged when `llm` is off).
pub(crate) fn cached_llm(engine: &Engine, client: LlmClient) -> LlmClient {
    let c = &engine.config().cache;
    if !c.llm || !engine.cache().is_on() {
        return client;
    }
    let store = OpCache::new(engine, Op::Llm, c.llm_ttl_s);
    client.with_cache(Arc::new(store), c.llm_sampled)
}

/// `web` caching its results and pages as `[cache]` says (unchanged when `web` is off).
pub(crate) fn cached_web(engine: &Engine, web: WebSearch) -> WebSearch {
    let c = &engine.config().cache;
    if !c.web || !engine.cache().is_on() {
        return web;
    }
    web.with_cache(Arc::new(OpCache::new(engine, Op::Web, c.web_ttl_s)))
}
