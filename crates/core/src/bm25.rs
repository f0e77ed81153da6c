//! BM25: the parameters and the term-weight formula of every keyword search (the
//! keyword index of documents and the memory search), as in Lucene:
//!
//! `score(d) = Σ_t qtf(t) · idf(t) · (k1 + 1) · tf / (tf + k1 · (1 − b + b · dl / avgdl))`
//!
//! with `idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))`, `tf` the term's count in the
//! document, `qtf` its count in the query, `dl` the document's length in terms and
//! `avgdl` the average length. The keyword index computes the same terms in a
//! tabulated form ([`Bm25Params::term_weight`] × [`saturation`] of
//! [`Bm25Params::length_norm`]); [`Bm25Params::score`] is the product in one call.

use serde::{Deserialize, Serialize};

/// BM25 parameters, applied at query time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f64,
    /// Length normalization (0 = none, 1 = full).
    pub b: f64,
    /// Weight of title matches relative to body matches (0 ignores titles). Only the
    /// keyword index of documents has titles; the memory search ignores it.
    pub title_weight: f64,
}

/// Defaults chosen on the SciFact train split (`bench/tuning/`): the fastest setting
/// within 0.002 nDCG@10 of the best one found. Scoring the separate title field
/// (title_weight 0.2, k1 0.9, b 0.5) gained 0.0012 on train and cost 18% of query
/// speed, so titles count through the body (`AnalyzerConfig::title_in_body`) and the
/// title field is left unscored.
impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params {
            k1: 1.2,
            b: 0.75,
            title_weight: 0.0,
        }
    }
}

/// The inverse document frequency `ln(1 + (N − df + 0.5) / (df + 0.5))` of a term
/// found in `df` of `n_docs` documents; always positive when `df ≤ n_docs`.
pub fn idf(n_docs: f32, df: f32) -> f32 {
    (1.0 + (n_docs - df + 0.5) / (df + 0.5)).ln()
}

/// The average document length, `total_terms / docs`, kept above 0 (an empty
/// collection, or one of empty documents, must not divide by 0).
pub fn average_length(total_terms: f64, docs: u64) -> f32 {
    ((total_terms / docs.max(1) as f64) as f32).max(1e-6)
}

/// The saturation `tf / (tf + norm)` of a term found `tf` times in a document whose
/// [`Bm25Params::length_norm`] is `norm`.
pub fn saturation(tf: f32, norm: f32) -> f32 {
    tf / (tf + norm)
}

impl Bm25Params {
    /// `k1 · (1 − b + b · dl / avgdl)`: what a document of `dl` terms adds to a term
    /// frequency in the saturation's denominator.
    pub fn length_norm(&self, dl: f32, avgdl: f32) -> f32 {
        let (k1, b) = (self.k1 as f32, self.b as f32);
        k1 * (1.0 - b + b * dl / avgdl)
    }

    /// `qtf · idf · (k1 + 1)`: a query term's weight, the most one occurrence in a
    /// document can score once multiplied by [`saturation`] (which is below 1).
    pub fn term_weight(&self, idf: f32, qtf: f32) -> f32 {
        qtf * idf * (self.k1 as f32 + 1.0)
    }

    /// The BM25 score one query term (`qtf` times in the query, inverse document
    /// frequency `idf`) gives a document of `dl` terms that holds it `tf` times.
    pub fn score(&self, idf: f32, qtf: f32, tf: f32, dl: f32, avgdl: f32) -> f32 {
        self.term_weight(idf, qtf) * saturation(tf, self.length_norm(dl, avgdl))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() <= 1e-5 * b.abs().max(1.0)
    }

    #[test]
    fn score_is_lucene_bm25() {
        let p = Bm25Params::default();
        // N = 10, df = 2: idf = ln(1 + 8.5 / 2.5).
        let idf = idf(10.0, 2.0);
        assert!(close(idf, (1.0f32 + 8.5 / 2.5).ln()));
        // tf 3 in a document of 12 terms, average 8.
        let want = idf * 2.2 * 3.0 / (3.0 + 1.2 * (0.25 + 0.75 * 12.0 / 8.0));
        assert!(close(p.score(idf, 1.0, 3.0, 12.0, 8.0), want));
        // A query term twice counts twice.
        assert!(close(p.score(idf, 2.0, 3.0, 12.0, 8.0), 2.0 * want));
    }

    #[test]
    fn parameters_do_what_they_say() {
        let idf = idf(100.0, 5.0);
        // b = 0: length does not matter.
        let flat = Bm25Params {
            b: 0.0,
            ..Bm25Params::default()
        };
        assert_eq!(
            flat.score(idf, 1.0, 2.0, 5.0, 10.0),
            flat.score(idf, 1.0, 2.0, 50.0, 10.0)
        );
        // b > 0: a longer document scores lower; an average one is normalized by k1.
        let p = Bm25Params::default();
        assert!(p.score(idf, 1.0, 2.0, 5.0, 10.0) > p.score(idf, 1.0, 2.0, 50.0, 10.0));
        assert!(close(p.length_norm(10.0, 10.0), 1.2));
        // More occurrences score more, saturating below (k1 + 1) · idf.
        let s: Vec<f32> = (1..=50)
            .map(|tf| p.score(idf, 1.0, tf as f32, 10.0, 10.0))
            .collect();
        assert!(s.windows(2).all(|w| w[0] < w[1]));
        assert!(s[49] < p.term_weight(idf, 1.0));
        // A rarer term weighs more, and idf stays positive even in every document.
        assert!(super::idf(100.0, 1.0) > super::idf(100.0, 50.0));
        assert!(super::idf(100.0, 100.0) > 0.0);
    }

    #[test]
    fn average_length_never_divides_by_zero() {
        assert_eq!(average_length(30.0, 3), 10.0);
        assert!(average_length(0.0, 0) > 0.0);
        assert!(average_length(0.0, 5) > 0.0);
    }

    #[test]
    fn defaults_and_config_names() {
        let p: Bm25Params = serde_json::from_str(r#"{"k1": 0.9}"#).unwrap();
        assert_eq!((p.k1, p.b, p.title_weight), (0.9, 0.75, 0.0));
        assert!(serde_json::from_str::<Bm25Params>(r#"{"k": 1}"#).is_err());
    }
}
