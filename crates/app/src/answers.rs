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

/// The answer cache's keys for one ask: its own, and its family's (every question over
/// the same collection state with the same options), under which the questions already
/// answered are listed for paraphrase matching.
pub(crate) struct AnswerKey {
    pub(crate) key: CacheKey,
    family: CacheKey,
    info: CollectionInfo,
    agents: String,
}

/// A question kept in a family's list, with its embedding.
#[derive(serde::Serialize, serde::Deserialize)]
struct Asked {
    question: String,
    vector: Vec<f32>,
}

/// Questions listed per family (the most recent).
const FAMILY_MAX: usize = 256;

impl App {
    /// The answer cache's keys for this ask over the stored collection `stored`, with the
    /// collection as it is now, or `None` when it must not be cached (the collection is
    /// read only then).
    pub(crate) fn answer_key(
        &self,
        tenant: &Tenant,
        stored: &str,
        question: &str,
        opts: &AskOptions,
        recall: bool,
    ) -> Option<AnswerKey> {
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
        let key = self.answer_key_for(tenant, &info, &agents, opts, Some(&normalized(question)));
        let family = self.answer_key_for(tenant, &info, &agents, opts, None);
        Some(AnswerKey {
            key,
            family,
            info,
            agents,
        })
    }

    /// The key of `question`'s answer, or with `None` the key of the family's list.
    fn answer_key_for(
        &self,
        tenant: &Tenant,
        info: &CollectionInfo,
        agents: &str,
        opts: &AskOptions,
        question: Option<&str>,
    ) -> CacheKey {
        let s = &opts.switches;
        KeyBuilder::new(tenant.as_str(), Op::Answer)
            .str(self.engine().settings_fingerprint())
            .str(agents)
            .str(&info.name)
            .str(&info.created_at)
            .u64(info.generation)
            .opt_str(question)
            .opt_str(opts.project.as_deref())
            .u64(u64::from(opts.max_iterations.unwrap_or(0)))
            .u64(opts.deadline_ms.unwrap_or(u64::MAX))
            .bool(s.no_retrieval)
            .bool(s.no_grade)
            .bool(s.no_verify)
            .bool(s.no_refine)
            .bool(s.no_reflect)
            .bool(s.skip_expensive)
            .finish()
    }

    /// The cached answer to another wording of `question` in its family, when one was
    /// asked whose embedding is at least `[cache] answer_paraphrase` similar and whose
    /// question word, numbers and negation agree ([`paraphrase_compatible`]).
    pub(crate) fn paraphrased_answer(
        &self,
        tenant: &Tenant,
        ak: &AnswerKey,
        question: &str,
        opts: &AskOptions,
        run_id: &str,
    ) -> Option<AskReport> {
        let engine = self.engine();
        let threshold = engine.config().cache.answer_paraphrase;
        if threshold <= 0.0 {
            return None;
        }
        let (asked, _) = engine.cache().get_json::<Vec<Asked>>(&ak.family)?;
        let q = engine.query_vector(question.trim()).ok()?;
        let (similarity, earlier) = asked
            .iter()
            .filter(|a| a.vector.len() == q.len())
            .map(|a| (neuralcore_core::dot(&a.vector, &q), a))
            .filter(|(sim, a)| *sim >= threshold && paraphrase_compatible(question, &a.question))
            .max_by(|x, y| x.0.total_cmp(&y.0))?;
        let key = self.answer_key_for(
            tenant,
            &ak.info,
            &ak.agents,
            opts,
            Some(&normalized(&earlier.question)),
        );
        let mut report = self.cached_answer(&key, question, run_id)?;
        if let Some(c) = &mut report.cached {
            c.similarity = Some(similarity);
        }
        Some(report)
    }

    /// The cached report under `key`, marked as cached and renamed to this run and to
    /// `question` (the question it answered is kept when it was worded otherwise).
    pub(crate) fn cached_answer(
        &self,
        key: &CacheKey,
        question: &str,
        run_id: &str,
    ) -> Option<AskReport> {
        let (mut report, hit) = self.engine().cache().get_json::<AskReport>(key)?;
        let earlier = std::mem::replace(&mut report.question, question.to_string());
        report.cached = Some(CachedAnswer {
            run_id: std::mem::replace(&mut report.run_id, run_id.to_string()),
            age_ms: hit.age_ms,
            tier: hit.tier.to_string(),
            paraphrase_of: (earlier.trim() != question.trim()).then_some(earlier),
            similarity: None,
        });
        Some(report)
    }

    /// Keep `report` under `key` when the collection is still as it was when the ask
    /// began and this process's indexes had caught up with it (an ingest that raced the
    /// ask keeps it out), and it did not abstain for a
    /// reason that may pass (a budget, a failing tool).
    pub(crate) fn keep_answer(&self, ak: &AnswerKey, tenant: &Tenant, report: &AskReport) {
        let before = &ak.info;
        let engine = self.engine();
        let unchanged = engine
            .store()
            .collection(&before.name)
            .ok()
            .flatten()
            .is_some_and(|now| {
                now.generation == before.generation && now.created_at == before.created_at
            })
            && engine.indexes_at(&before.name, before.generation);
        if !unchanged || !report.failures.is_empty() || !report.budget.skipped.is_empty() {
            return;
        }
        let ttl = engine.config().cache.answer_ttl_s;
        let ttl = (ttl > 0).then(|| Duration::from_secs(ttl));
        let tags = [
            tenant_tag(tenant.as_str()),
            collection_tag(tenant.as_str(), &before.name),
        ];
        engine.cache().put_json(&ak.key, report, ttl, &tags);
        // Listed in its family for paraphrase matching (a race between two asks may
        // lose one of them from the list: a later miss, never a wrong answer).
        if engine.config().cache.answer_paraphrase <= 0.0 {
            return;
        }
        let Ok(vector) = engine.query_vector(report.question.trim()) else {
            return;
        };
        let mut asked = engine
            .cache()
            .get_json::<Vec<Asked>>(&ak.family)
            .map(|(a, _)| a)
            .unwrap_or_default();
        let this = normalized(&report.question);
        asked.retain(|a| normalized(&a.question) != this);
        asked.push(Asked {
            question: report.question.trim().to_string(),
            vector,
        });
        let drop = asked.len().saturating_sub(FAMILY_MAX);
        asked.drain(..drop);
        engine.cache().put_json(&ak.family, &asked, ttl, &tags);
    }
}

/// A question as the answer cache keys it: lower case, words only (punctuation gone,
/// `what's` as `what is`), without `a`, `an` and `the`: rewordings that differ only so
/// share an answer.
pub fn normalized(question: &str) -> String {
    let lower = question.to_lowercase().replace(['’', '‘'], "'");
    let mut out: Vec<&str> = Vec::new();
    for w in lower.split(|c: char| !(c.is_alphanumeric() || c == '\'')) {
        let w = w.trim_matches('\'');
        match w {
            "" | "a" | "an" | "the" => {}
            _ => match w.strip_suffix("'s") {
                Some(
                    stem @ ("what" | "who" | "where" | "when" | "how" | "why" | "which" | "that"
                    | "it" | "there"),
                ) => {
                    out.push(stem);
                    out.push("is");
                }
                _ => match w.strip_suffix("'re") {
                    Some(stem) if !stem.is_empty() => {
                        out.push(stem);
                        out.push("are");
                    }
                    _ => out.push(w),
                },
            },
        }
    }
    out.join(" ")
}

/// Whether two questions could ask the same thing, judged by what an embedding is
/// known to blur: the question word (`when` against `where`), the numbers they name and
/// negation. Paraphrase matching in the answer cache serves an earlier answer only when
/// this holds *and* the embeddings are close.
pub fn paraphrase_compatible(a: &str, b: &str) -> bool {
    Shape::of(a) == Shape::of(b)
}

/// What [`paraphrase_compatible`] compares.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    /// The first question word (`how many`, `how much` and `how long` apart from `how`).
    wh: Option<String>,
    /// Tokens with a digit, in order of first appearance, without repeats.
    numbers: Vec<String>,
    negated: bool,
    /// Words that set apart otherwise alike questions: ordinals, superlatives and
    /// before/after ("the first album" against "the second album").
    contrasts: Vec<String>,
}

impl Shape {
    fn of(q: &str) -> Shape {
        let lower = q.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '.' || c == ','))
            .map(|w| w.trim_matches(|c: char| c == '.' || c == ',' || c == '\''))
            .filter(|w| !w.is_empty())
            .collect();
        const WH: [&str; 9] = [
            "what", "which", "who", "whom", "whose", "when", "where", "why", "how",
        ];
        let wh = words.iter().enumerate().find_map(|(i, w)| {
            let w = match *w {
                "what's" => "what",
                "who's" => "who",
                "where's" => "where",
                "how's" => "how",
                w => w,
            };
            WH.contains(&w)
                .then(|| match (w, words.get(i + 1).copied()) {
                    ("how", Some(n @ ("many" | "much" | "long" | "old" | "far" | "often"))) => {
                        format!("how {n}")
                    }
                    // "whom" and "who" ask the same.
                    ("whom", _) => "who".to_string(),
                    (w, _) => w.to_string(),
                })
        });
        let mut numbers: Vec<String> = Vec::new();
        for w in &words {
            if w.chars().any(|c| c.is_ascii_digit()) && !numbers.iter().any(|n| n == w) {
                numbers.push((*w).to_string());
            }
        }
        numbers.sort();
        let negated = words.iter().any(|w| {
            matches!(*w, "not" | "never" | "no" | "none" | "nor" | "without") || w.ends_with("n't")
        });
        const CONTRASTS: [&str; 34] = [
            "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
            "tenth", "last", "final", "next", "previous", "latest", "earliest", "before", "after",
            "most", "least", "largest", "smallest", "biggest", "highest", "lowest", "oldest",
            "youngest", "newest", "best", "worst", "more", "less", "longest", "shortest",
        ];
        let mut contrasts: Vec<String> = words
            .iter()
            .filter(|w| CONTRASTS.contains(w))
            .map(|w| (*w).to_string())
            .collect();
        contrasts.sort();
        contrasts.dedup();
        Shape {
            wh,
            numbers,
            negated,
            contrasts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{normalized, paraphrase_compatible as ok};

    #[test]
    fn rewordings_in_case_punctuation_articles_and_contractions_normalize_alike() {
        assert_eq!(normalized("What causes the tides?"), "what causes tides");
        assert_eq!(normalized("  what causes tides "), "what causes tides");
        assert_eq!(normalized("What's a tide?"), normalized("what is the tide"));
        assert_eq!(normalized("Who’re they?"), "who are they");
        assert_ne!(normalized("Who sold it?"), normalized("Who bought it?"));
        assert_ne!(normalized("Is it safe?"), normalized("Isn't it safe?"));
        assert_eq!(normalized("Beyoncé's album"), "beyoncé's album");
    }

    #[test]
    fn question_word_numbers_and_negation_must_agree() {
        assert!(ok(
            "When did Beyonce start becoming popular?",
            "when did beyoncé rise to fame"
        ));
        assert!(ok("Who wrote Hamlet?", "Whom was Hamlet written by?"));
        assert!(!ok(
            "When was the bridge built?",
            "Where was the bridge built?"
        ));
        assert!(!ok(
            "How many people live there?",
            "How do people live there?"
        ));
        assert!(!ok("Who won in 2004?", "Who won in 2008?"));
        assert!(ok("Who won in 2004?", "In 2004, who was the winner?"));
        assert!(!ok("Which drugs are safe?", "Which drugs are not safe?"));
        assert!(!ok("Why isn't it safe?", "Why is it safe?"));
        assert!(!ok(
            "What was the name of Beyoncé's first solo album?",
            "What was the name of Beyoncé's second solo album?"
        ));
    }
}
