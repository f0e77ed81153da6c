//! The second stage of memory search: a logistic model over features of the top
//! candidates of the fused (BM25 + cosine) ranking, fitted to labelled questions.
//!
//! The fused score alone misses what the neighbourhood of a memory says: a conversation
//! turn whose neighbours in its session also match, a session that matches as a whole,
//! a turn long enough to carry a fact. The model weighs these against the fused score
//! and the rank. It is fitted by [`MemoryRanker::fit`] (Newton's method on the
//! L2-penalised log loss, features standardised while fitting: the project's one fitter,
//! [`neuralcore_core::logistic`]); [`MemoryRanker::BUILT_IN`] (searches with
//! a query vector) and [`MemoryRanker::BUILT_IN_KEYWORD`] (without one) were fitted on LoCoMo
//! conversations 1–2 (`neuralcore eval locomo --fit 1-2`), never on the conversations
//! they are reported on.

use serde::Serialize;

/// How many features a candidate has.
pub const FEATURES: usize = 10;

/// The features' names, in order.
pub const FEATURE_NAMES: [&str; FEATURES] = [
    "fused",
    "keyword",
    "cosine",
    "neighbour",
    "session",
    "rank",
    "length",
    "speaker_named",
    "speaker_other",
    "time_words",
];

/// Words that place an event in time (`time_words` feature), with the weekdays
/// (`neuralcore_core::text::WEEKDAYS`).
const TIME_WORDS: &[&str] = &[
    "yesterday",
    "today",
    "tomorrow",
    "last",
    "next",
    "ago",
    "week",
    "weekend",
    "month",
    "year",
    "morning",
    "night",
    "since",
    "recently",
    "just",
];

/// One candidate's features, as [`FEATURE_NAMES`] lists them.
pub type Features = [f32; FEATURES];

/// What is known of a candidate when its features are computed.
#[derive(Debug, Clone, Copy, Default)]
pub struct Candidate {
    /// Fused score: `(1 − alpha) × keyword + alpha × max(cosine, 0)`, after the speaker
    /// rule.
    pub fused: f32,
    /// BM25 scaled by the best score of the query (0 when no term matches).
    pub keyword: f32,
    /// Cosine with the query (0 without embeddings).
    pub cosine: f32,
    /// Best fused score of the memories just before and after it in its session.
    pub neighbour: f32,
    /// Best fused score in its session (its own when it has no session).
    pub session: f32,
    /// Position in the fused ranking, from 0.
    pub rank: usize,
    /// Whether the query names its speaker / names speakers but not its.
    pub speaker_named: bool,
    /// See `speaker_named`.
    pub speaker_other: bool,
}

impl Candidate {
    /// The feature vector of a candidate whose text is `text`.
    pub fn features(&self, text: &str) -> Features {
        let time = text.split(|c: char| !c.is_alphanumeric()).any(|w| {
            TIME_WORDS
                .iter()
                .chain(neuralcore_core::text::WEEKDAYS)
                .any(|t| t.eq_ignore_ascii_case(w))
        });
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        [
            self.fused,
            self.keyword,
            self.cosine,
            self.neighbour,
            self.session,
            (self.rank as f32).ln_1p(),
            (text.chars().count() as f32).ln_1p(),
            flag(self.speaker_named),
            flag(self.speaker_other),
            flag(time),
        ]
    }
}

/// A logistic model: `p = σ(w · x + b)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryRanker {
    /// One weight per feature.
    pub weights: Features,
    /// The intercept.
    pub bias: f32,
}

impl MemoryRanker {
    /// Fitted on LoCoMo conversations 1–2 (`neuralcore eval locomo --fit 1-2`).
    pub const BUILT_IN: MemoryRanker = MemoryRanker {
        weights: [
            -8.3921, 4.5300, 2.0129, 2.9111, 3.2255, -1.0594, 1.1083, 0.5667, -1.2048, 0.6001,
        ],
        bias: -10.2529,
    };

    /// For searches without a query vector (no embedding model, or `alpha = 0`): fitted
    /// the same way with `NEURALCORE_MEMORY_ALPHA=0` (the hybrid weights would read a
    /// fused score that is BM25 alone, and turn it upside down).
    pub const BUILT_IN_KEYWORD: MemoryRanker = MemoryRanker {
        weights: [
            -2.8340, 1.4091, 0.0, 2.9926, 2.9909, -1.1533, 0.9871, 0.6843, -0.4891, 0.6331,
        ],
        bias: -10.2146,
    };

    /// A model from `weights` followed by the bias (as the config writes it).
    pub fn from_slice(v: &[f32]) -> Result<MemoryRanker, String> {
        if v.len() != FEATURES + 1 {
            return Err(format!(
                "a reranker needs {} numbers ({}, then the bias), got {}",
                FEATURES + 1,
                FEATURE_NAMES.join(", "),
                v.len()
            ));
        }
        if let Some(x) = v.iter().find(|x| !x.is_finite()) {
            return Err(format!("reranker weights must be finite numbers (got {x})"));
        }
        let mut weights = [0.0; FEATURES];
        weights.copy_from_slice(&v[..FEATURES]);
        Ok(MemoryRanker {
            weights,
            bias: v[FEATURES],
        })
    }

    /// The weights then the bias.
    pub fn to_vec(&self) -> Vec<f32> {
        let mut v = self.weights.to_vec();
        v.push(self.bias);
        v
    }

    /// Probability that a candidate with features `x` is what the query looks for.
    pub fn score(&self, x: &Features) -> f32 {
        let z: f32 = self.bias + self.weights.iter().zip(x).map(|(w, x)| w * x).sum::<f32>();
        1.0 / (1.0 + (-z).exp())
    }

    /// Fit to labelled candidates (`true`: the query's evidence), minimising the log
    /// loss plus `l2 / 2 × |w|²` over standardised features (the bias is not
    /// penalised), with the project's one fitter ([`neuralcore_core::logistic`]).
    /// `None` when there is nothing to learn from: no samples, or only one label.
    pub fn fit(samples: &[(Features, bool)], l2: f64) -> Option<MemoryRanker> {
        let opts = neuralcore_core::logistic::FitOptions {
            l2,
            balance_classes: false,
            standardize: true,
            max_iter: 100,
        };
        let m = neuralcore_core::logistic::fit(samples, &opts)?;
        let mut weights = [0f32; FEATURES];
        for (w, v) in weights.iter_mut().zip(&m.weights) {
            *w = *v as f32;
        }
        Some(MemoryRanker {
            weights,
            bias: m.bias as f32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_learns_which_feature_predicts_the_label() {
        // The label follows `keyword` (feature 1) with some noise; `cosine` (2) is noise.
        let mut samples = Vec::new();
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as f32 / (1u64 << 31) as f32
        };
        for i in 0..2000 {
            let mut x = [0f32; FEATURES];
            x[1] = next();
            x[2] = next();
            x[6] = 3.0 + next(); // a feature far from 0, to exercise the intercept
            let y = x[1] + 0.3 * (next() - 0.5) > 0.6 || i % 97 == 0;
            samples.push((x, y));
        }
        let m = MemoryRanker::fit(&samples, 1.0).unwrap();
        assert!(m.weights[1] > 5.0, "{m:?}");
        assert!(m.weights[2].abs() < 1.0, "{m:?}");
        let mut hi = [0f32; FEATURES];
        hi[1] = 0.9;
        hi[6] = 3.5;
        let mut lo = hi;
        lo[1] = 0.1;
        assert!(m.score(&hi) > 0.8 && m.score(&lo) < 0.2, "{m:?}");
        // Nothing to learn from.
        assert!(MemoryRanker::fit(&[], 1.0).is_none());
        assert!(MemoryRanker::fit(&[([0.0; FEATURES], true)], 1.0).is_none());
    }

    #[test]
    fn weights_round_trip_and_bad_lengths_are_clear_errors() {
        let m = MemoryRanker::BUILT_IN;
        assert_eq!(MemoryRanker::from_slice(&m.to_vec()).unwrap(), m);
        let err = MemoryRanker::from_slice(&[1.0, 2.0]).unwrap_err();
        assert!(err.contains("needs 11 numbers"), "{err}");
        let mut v = m.to_vec();
        v[3] = f32::NAN;
        assert!(MemoryRanker::from_slice(&v).unwrap_err().contains("finite"));
    }

    #[test]
    fn time_words_and_length_features() {
        let c = Candidate::default();
        assert_eq!(c.features("We went camping last Weekend")[9], 1.0);
        assert_eq!(c.features("We went camping")[9], 0.0);
        assert!(c.features("a much longer sentence")[6] > c.features("short")[6]);
    }
}
