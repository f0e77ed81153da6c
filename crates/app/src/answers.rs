//! The answer cache (`[cache] answer`): an answer report kept under a key holding the
//! question, the caller's options and the creation time and generation of the collection
//! it drew on, so any ingest, removal or drop of that collection makes the next ask a
//! miss — an answer whose evidence has changed or gone is never served.
//!
//! Not cached (the answer depends on more than the documents): asks that recall
//! memories or continue a session, and every ask while web verification is on or the
//! LLM samples (`temperature > 0`). The key also holds the settings' fingerprint, the
//! agents' definitions and the LLM endpoint and model, so a changed setting or agent is
//! a miss too.

use std::time::Duration;

use neuralcore_agents::{AskOptions, AskReport, CachedAnswer};
use neuralcore_cache::{collection_tag, tenant_tag, CacheKey, KeyBuilder, Op};
use neuralcore_core::CollectionInfo;

use crate::{App, Tenant};

impl App {
    /// The answer cache's key for this ask over the stored collection `stored`, with the
    /// collection as it is now, or `None` when it must not be cached (the collection is
    /// read only then).
    pub(crate) fn answer_key(
        &self,
        tenant: &Tenant,
        stored: &str,
        question: &str,
        opts: &AskOptions,
        recall: bool,
    ) -> Option<(CacheKey, CollectionInfo)> {
        let engine = self.engine();
        let cfg = engine.config();
        let cache = engine.cache();
        if !cfg.cache.answer || !cache.is_on() || recall || opts.session.is_some() {
            return None;
        }
        if cfg.web.enabled() || (cfg.llm.is_configured() && cfg.llm.temperature > 0.0) {
            return None;
        }
        let info = engine.collection(stored).ok()?;
        let agents = serde_json::to_string(&self.orchestrator().loader.definitions()).ok()?;
        let s = &opts.switches;
        let key = KeyBuilder::new(tenant.as_str(), Op::Answer)
            .str(engine.settings_fingerprint())
            .str(&agents)
            .str(&info.name)
            .str(&info.created_at)
            .u64(info.generation)
            .str(question.trim())
            .opt_str(opts.project.as_deref())
            .u64(u64::from(opts.max_iterations.unwrap_or(0)))
            .u64(opts.deadline_ms.unwrap_or(u64::MAX))
            .bool(s.no_retrieval)
            .bool(s.no_grade)
            .bool(s.no_verify)
            .bool(s.no_refine)
            .bool(s.no_reflect)
            .bool(s.skip_expensive)
            .finish();
        Some((key, info))
    }

    /// The cached report under `key`, marked as cached and renamed to this run.
    pub(crate) fn cached_answer(&self, key: &CacheKey, run_id: &str) -> Option<AskReport> {
        let (mut report, hit) = self.engine().cache().get_json::<AskReport>(key)?;
        report.cached = Some(CachedAnswer {
            run_id: std::mem::replace(&mut report.run_id, run_id.to_string()),
            age_ms: hit.age_ms,
            tier: hit.tier.to_string(),
        });
        Some(report)
    }

    /// Keep `report` under `key` when the collection is still as it was when the ask
    /// began (an ingest that raced the ask keeps it out), and it did not abstain for a
    /// reason that may pass (a budget, a failing tool).
    pub(crate) fn keep_answer(
        &self,
        key: &CacheKey,
        tenant: &Tenant,
        before: &CollectionInfo,
        report: &AskReport,
    ) {
        let engine = self.engine();
        let unchanged = engine
            .store()
            .collection(&before.name)
            .ok()
            .flatten()
            .is_some_and(|now| {
                now.generation == before.generation && now.created_at == before.created_at
            });
        if !unchanged || !report.failures.is_empty() || !report.budget.skipped.is_empty() {
            return;
        }
        let ttl = engine.config().cache.answer_ttl_s;
        engine.cache().put_json(
            key,
            report,
            (ttl > 0).then(|| Duration::from_secs(ttl)),
            &[
                tenant_tag(tenant.as_str()),
                collection_tag(tenant.as_str(), &before.name),
            ],
        );
    }
}
