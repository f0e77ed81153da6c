//! The CRAG evaluator: a relevance score in [0, 1] for a (question, passage) pair and
//! the two thresholds that turn it into CORRECT, AMBIGUOUS or INCORRECT.
//!
//! The evaluator is the cross-encoder when its model is present (as in CRAG), else the
//! feature model of [`crate::crag::Features`] (sentence-embedding cosine and weighted
//! term coverage, combined by weights `neuralcore calibrate` fits), or an LLM judge
//! when one is configured and chosen. The grading tool, verification (which grades web
//! passages and corroborating chunks the same way) and calibration all use this.

use std::sync::Arc;

use neuralcore_core::Reranker;
use neuralcore_engine::{Engine, EngineError, GradeConfig};

use crate::crag::{FeatureModel, Features, QueryTerms, Verdict};

/// Which evaluator scores passages.
#[derive(Clone)]
pub enum Evaluator {
    /// A cross-encoder's probability.
    Cross(Arc<dyn Reranker>),
    /// The evaluator `neuralcore train evaluator` fine-tuned (a cross-encoder too, with
    /// its own thresholds).
    Trained(Arc<dyn Reranker>),
    /// The logistic feature model.
    Features(FeatureModel),
}

impl Evaluator {
    /// Short name for reasons and traces.
    pub fn name(&self) -> &'static str {
        match self {
            Evaluator::Cross(_) => "cross-encoder",
            Evaluator::Trained(_) => "trained",
            Evaluator::Features(_) => "features",
        }
    }
}

/// A scored passage.
#[derive(Debug, Clone)]
pub struct Scored {
    /// Score in [0, 1].
    pub score: f32,
    /// Features (also computed under the cross-encoder, for reasons and reflection).
    pub features: Features,
    /// Index of the best sentence of the passage.
    pub best_sentence: usize,
}

/// An evaluator with its thresholds, for one collection.
pub struct Grader<'a> {
    engine: &'a Engine,
    collection: &'a str,
    /// The evaluator.
    pub evaluator: Evaluator,
    /// Score ≥ upper: CORRECT.
    pub upper: f32,
    /// Score < lower: INCORRECT.
    pub lower: f32,
    /// Why this evaluator (e.g. "no cross-encoder model: features").
    pub note: Option<String>,
}

impl<'a> Grader<'a> {
    /// The configured evaluator for `collection` (`auto`: the trained evaluator when
    /// present, else the cross-encoder when present, else features; `llm` is handled by
    /// the grading tool and falls back to this one).
    pub fn new(engine: &'a Engine, collection: &'a str) -> Self {
        let cfg: &GradeConfig = &engine.config().grade;
        let features = || {
            Evaluator::Features(FeatureModel {
                bias: cfg.bias,
                weights: cfg.weights.clone(),
            })
        };
        let cross = |want: &str, tried: Option<String>| match engine.reranker_status() {
            Ok(r) => (Evaluator::Cross(r), tried),
            Err(why) => (
                features(),
                Some(if want == "cross-encoder" {
                    format!("grade.evaluator is cross-encoder but {why}: using features")
                } else {
                    "no trained evaluator or cross-encoder model: grading with the feature evaluator"
                        .to_string()
                }),
            ),
        };
        let (evaluator, note) = match cfg.evaluator.as_str() {
            "features" | "llm" => (features(), None),
            "cross-encoder" => cross("cross-encoder", None),
            want => match engine.trained_evaluator_status() {
                Ok(r) => (Evaluator::Trained(r), None),
                Err(why) if want == "trained" => {
                    cross(want, Some(format!("grade.evaluator is trained but {why}")))
                }
                Err(_) => cross(want, None),
            },
        };
        let (upper, lower) = match evaluator {
            Evaluator::Cross(_) => (cfg.cross_upper, cfg.cross_lower),
            Evaluator::Trained(_) => (cfg.trained_upper, cfg.trained_lower),
            Evaluator::Features(_) => (cfg.upper, cfg.lower),
        };
        Grader {
            engine,
            collection,
            evaluator,
            upper,
            lower,
            note,
        }
    }

    /// The verdict for a score.
    pub fn verdict(&self, score: f32) -> Verdict {
        if score >= self.upper {
            Verdict::Correct
        } else if score < self.lower {
            Verdict::Incorrect
        } else {
            Verdict::Ambiguous
        }
    }

    /// The features of passages against `query` and each one's best sentence, without
    /// a score (no model runs): for callers that read only those. `cosines` (same
    /// length, or empty) are the embedding similarities when known, `ranks` (same
    /// length, or empty) the positions in the retrieval list.
    pub fn features(
        &self,
        query: &str,
        passages: &[&str],
        cosines: &[Option<f32>],
        ranks: &[usize],
    ) -> Result<Vec<(Features, usize)>, EngineError> {
        let q = QueryTerms::new(self.engine, self.collection, query)?;
        let mut out = Vec::with_capacity(passages.len());
        for (i, p) in passages.iter().enumerate() {
            let cos = cosines.get(i).copied().flatten();
            let (mut features, best_sentence) =
                Features::compute(self.engine, self.collection, &q, p, cos)?;
            features.rank = ranks.get(i).map_or(0.0, |r| 1.0 / (1.0 + *r as f32));
            out.push((features, best_sentence));
        }
        Ok(out)
    }

    /// Score passages against `query` (arguments as for [`Grader::features`]).
    pub fn score(
        &self,
        query: &str,
        passages: &[&str],
        cosines: &[Option<f32>],
        ranks: &[usize],
    ) -> Result<Vec<Scored>, EngineError> {
        let mut out: Vec<Scored> = self
            .features(query, passages, cosines, ranks)?
            .into_iter()
            .map(|(features, best_sentence)| Scored {
                score: 0.0,
                features,
                best_sentence,
            })
            .collect();
        match &self.evaluator {
            Evaluator::Features(m) => {
                for s in &mut out {
                    s.score = m.score(&s.features);
                }
            }
            Evaluator::Cross(r) | Evaluator::Trained(r) => {
                let tenant = neuralcore_engine::tenant_of(self.collection);
                let scores = self
                    .engine
                    .scores_cached(
                        neuralcore_engine::CacheOp::Grade,
                        tenant,
                        r.as_ref(),
                        query,
                        passages,
                    )
                    .map_err(|e| EngineError::Model(e.to_string()))?;
                for (s, v) in out.iter_mut().zip(scores) {
                    s.score = v.clamp(0.0, 1.0);
                }
            }
        }
        Ok(out)
    }

    /// A one-line reason for a verdict.
    pub fn reason(&self, s: &Scored) -> String {
        let v = self.verdict(s.score);
        let cmp = match v {
            Verdict::Correct => format!(">= upper {:.2}", self.upper),
            Verdict::Incorrect => format!("< lower {:.2}", self.lower),
            _ => format!("between {:.2} and {:.2}", self.lower, self.upper),
        };
        let f = &s.features;
        let mut why = format!(
            "{} score {:.2} {cmp}; best sentence covers {:.0}% of the question's weighted terms",
            self.evaluator.name(),
            s.score,
            f.best_window * 100.0
        );
        if f.rare_present < 0.5 {
            why.push_str("; the question's rarest term is absent");
        }
        if f.negation_mismatch > 0.0 {
            why.push_str("; the question is negated, the passage is not");
        }
        why
    }
}
