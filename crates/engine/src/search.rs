//! Search: keyword, vector and hybrid (fused) retrieval of chunks, then optional
//! reranking of the top of the list.

use std::collections::HashMap;

use neuralcore_core::DocKey;

use crate::{Engine, EngineError};
use neuralcore_config::{Fusion, SearchConfig, SearchMode};

/// A chunk found by search, before its text is read.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScoredChunk {
    /// Document key.
    pub doc: DocKey,
    /// Chunk ordinal.
    pub ordinal: u32,
    /// Score: BM25 (keyword), cosine similarity (vector), the fused score (hybrid) or
    /// the reranker's score.
    pub score: f32,
}

/// Ranked chunks and how they were found.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Ranked {
    /// Best first.
    pub hits: Vec<ScoredChunk>,
    /// The mode that ran (hybrid becomes keyword without an embedding model).
    pub mode: SearchMode,
    /// Why the mode asked for did not run, if it did not.
    pub fallback: Option<String>,
    /// How many of the first hits the reranker reordered (their scores are its scores).
    pub reranked: usize,
}

/// How to search: the mode (the configured default when `None`) and how many of the
/// top results to rerank (the configured `rerank.top_n` when `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchOptions {
    /// keyword, vector or hybrid.
    pub mode: Option<SearchMode>,
    /// Results to rerank with the cross-encoder (0 = none).
    pub rerank: Option<usize>,
}

impl From<Option<SearchMode>> for SearchOptions {
    fn from(mode: Option<SearchMode>) -> Self {
        SearchOptions { mode, rerank: None }
    }
}

/// Sort best first, ties by (document, ordinal) so results are deterministic.
fn sort_hits(hits: &mut [ScoredChunk]) {
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then((a.doc, a.ordinal).cmp(&(b.doc, b.ordinal)))
    });
}

/// Fuse a keyword and a vector list (each best first) into one, best first.
///
/// Convex: each list's scores are min-max normalized to [0, 1] over its candidates (a
/// list whose scores are all equal maps to 1), a chunk missing from a list gets 0 there,
/// and the fused score is `alpha * vector + (1 - alpha) * keyword`. RRF: the fused score
/// is the sum over lists of `1 / (rrf_k + rank)`, rank from 1.
pub fn fuse(
    keyword: &[ScoredChunk],
    vector: &[ScoredChunk],
    cfg: &SearchConfig,
) -> Vec<ScoredChunk> {
    // alpha weighs convex fusion only; RRF is the standard unweighted sum.
    let (wk, wv) = match cfg.fusion {
        Fusion::Convex => (1.0 - cfg.alpha, cfg.alpha),
        Fusion::Rrf => (1.0, 1.0),
    };
    fuse_lists(&[(keyword, wk), (vector, wv)], cfg.fusion, cfg.rrf_k)
}

/// Fuse any number of weighted lists (each best first): convex adds `weight *
/// minmax(score)`, RRF adds `weight / (rrf_k + rank)`.
pub fn fuse_lists(lists: &[(&[ScoredChunk], f64)], fusion: Fusion, rrf_k: f64) -> Vec<ScoredChunk> {
    let mut acc: HashMap<(DocKey, u32), f64> = HashMap::new();
    for &(list, weight) in lists {
        match fusion {
            Fusion::Convex => {
                let max = list
                    .iter()
                    .map(|h| h.score)
                    .fold(f32::NEG_INFINITY, f32::max);
                let min = list.iter().map(|h| h.score).fold(f32::INFINITY, f32::min);
                let span = f64::from(max - min);
                for h in list {
                    let norm = if span > 0.0 {
                        f64::from(h.score - min) / span
                    } else {
                        1.0
                    };
                    *acc.entry((h.doc, h.ordinal)).or_default() += weight * norm;
                }
            }
            Fusion::Rrf => {
                for (i, h) in list.iter().enumerate() {
                    *acc.entry((h.doc, h.ordinal)).or_default() +=
                        weight / (rrf_k + (i + 1) as f64);
                }
            }
        }
    }
    let mut out: Vec<ScoredChunk> = acc
        .into_iter()
        .map(|((doc, ordinal), s)| ScoredChunk {
            doc,
            ordinal,
            score: s as f32,
        })
        .collect();
    sort_hits(&mut out);
    out
}

impl Engine {
    fn keyword_hits(
        &self,
        collection: &str,
        query: &str,
        k: usize,
    ) -> Result<Vec<ScoredChunk>, EngineError> {
        let idx = self.keyword_index(collection)?;
        Ok(idx
            .search(query, k, &self.config.keyword)?
            .into_iter()
            .map(|h| ScoredChunk {
                doc: h.doc,
                ordinal: h.ordinal,
                score: h.score,
            })
            .collect())
    }

    fn vector_hits(
        &self,
        collection: &str,
        query: &str,
        k: usize,
    ) -> Result<Option<Vec<ScoredChunk>>, EngineError> {
        let Some(idx) = self.vector_index(collection)? else {
            return Ok(None);
        };
        let q = self.query_vector_in(crate::cached::tenant_of(collection), query)?;
        Ok(Some(
            idx.search(&q, k, false)?
                .into_iter()
                .map(|h| ScoredChunk {
                    doc: h.doc,
                    ordinal: h.ordinal,
                    score: h.score,
                })
                .collect(),
        ))
    }

    /// The `k` best chunks of `collection` for `query`, found by `opts.mode` (the
    /// configured default when `None`), the first `opts.rerank` of them reordered by
    /// the cross-encoder. Hybrid without an embedding model runs keyword-only and says
    /// why in [`Ranked::fallback`]; vector without one is an error, and so is reranking
    /// without a reranker model.
    pub fn search_keys(
        &self,
        collection: &str,
        query: &str,
        k: usize,
        opts: impl Into<SearchOptions>,
    ) -> Result<Ranked, EngineError> {
        let opts = opts.into();
        let span = tracing::info_span!(
            "search",
            openinference.span.kind = "RETRIEVER",
            neuralcore.collection = collection,
            neuralcore.search.k = k,
            neuralcore.search.mode = tracing::field::Empty,
            neuralcore.search.hits = tracing::field::Empty,
            neuralcore.search.reranked = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            otel.status_message = tracing::field::Empty,
        );
        let _entered = span.enter();
        let r = self.search_keys_cached(collection, query, k, opts);
        match &r {
            Ok(ranked) => {
                span.record(
                    "neuralcore.search.mode",
                    format!("{:?}", ranked.mode).as_str(),
                );
                span.record("neuralcore.search.hits", ranked.hits.len());
                span.record("neuralcore.search.reranked", ranked.reranked);
            }
            Err(e) => {
                span.record("otel.status_code", "error");
                span.record("otel.status_message", e.to_string().as_str());
            }
        }
        r
    }

    pub(crate) fn search_keys_uncached(
        &self,
        collection: &str,
        query: &str,
        k: usize,
        opts: SearchOptions,
    ) -> Result<Ranked, EngineError> {
        let n = opts.rerank.unwrap_or(self.config.rerank.top_n);
        let mut ranked = self.retrieve(collection, query, k.max(n), opts.mode)?;
        if n > 0 {
            self.rerank(collection, query, &mut ranked, n)?;
        }
        ranked.hits.truncate(k);
        Ok(ranked)
    }

    /// Reorder the first `n` hits by the reranker's score.
    fn rerank(
        &self,
        collection: &str,
        query: &str,
        ranked: &mut Ranked,
        n: usize,
    ) -> Result<(), EngineError> {
        ranked.reranked = self.rerank_hits(collection, query, &mut ranked.hits, n)?;
        Ok(())
    }

    /// Rescore the first `n` of `hits` with the reranker (blended with their first-stage
    /// score by `rerank.blend`) and reorder them by that score (stable: ties keep their
    /// order); the rest stay behind them. Returns how many were
    /// reranked. Without a reranker model: an error naming how to get one.
    pub fn rerank_hits(
        &self,
        collection: &str,
        query: &str,
        hits: &mut [ScoredChunk],
        n: usize,
    ) -> Result<usize, EngineError> {
        let reranker = self.reranker_status().map_err(EngineError::NotFound)?;
        let n = n.min(hits.len());
        let mut passages = Vec::with_capacity(n);
        let mut titles: HashMap<DocKey, String> = HashMap::new();
        for h in &hits[..n] {
            let chunk = self.store.chunk(h.doc, h.ordinal)?;
            if let std::collections::hash_map::Entry::Vacant(e) = titles.entry(h.doc) {
                let t = self
                    .store
                    .document(collection, h.doc)?
                    .map(|d| d.title)
                    .unwrap_or_default();
                e.insert(t);
            }
            passages.push(crate::vectors::embed_text(
                &titles[&h.doc],
                chunk.as_ref().map(|c| c.text.as_str()).unwrap_or(""),
            ));
        }
        let refs: Vec<&str> = passages.iter().map(String::as_str).collect();
        let scores = self
            .scores_cached(
                neuralcore_cache::Op::Rerank,
                crate::cached::tenant_of(collection),
                reranker.as_ref(),
                query,
                &refs,
            )
            .map_err(|e| EngineError::Model(e.to_string()))?;
        blend_scores(&mut hits[..n], &scores, self.config.rerank.blend as f32);
        // Stable: equal scores keep the first-stage order.
        hits[..n].sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(n)
    }

    fn retrieve(
        &self,
        collection: &str,
        query: &str,
        k: usize,
        mode: Option<SearchMode>,
    ) -> Result<Ranked, EngineError> {
        let mode = mode.unwrap_or(self.config.search.mode);
        let keyword_only = |fallback| -> Result<Ranked, EngineError> {
            Ok(Ranked {
                hits: self.keyword_hits(collection, query, k)?,
                mode: SearchMode::Keyword,
                fallback,
                reranked: 0,
            })
        };
        match mode {
            SearchMode::Keyword => keyword_only(None),
            SearchMode::Vector => match self.vector_hits(collection, query, k)? {
                Some(hits) => Ok(Ranked {
                    hits,
                    mode,
                    fallback: None,
                    reranked: 0,
                }),
                None => Err(EngineError::NotFound(format!(
                    "vector search needs an embedding model: {}",
                    self.embedder_status().err().unwrap_or_default()
                ))),
            },
            SearchMode::Hybrid => {
                let n = self.config.search.candidates.max(k);
                let Some(vector) = self.vector_hits(collection, query, n)? else {
                    return keyword_only(self.embedder_status().err());
                };
                let keyword = self.keyword_hits(collection, query, n)?;
                let mut hits = fuse(&keyword, &vector, &self.config.search);
                hits.truncate(k);
                Ok(Ranked {
                    hits,
                    mode,
                    fallback: None,
                    reranked: 0,
                })
            }
        }
    }
}

/// Give each hit `(1 − blend) · reranker + blend · first stage`, the first-stage scores
/// scaled to [0, 1] over these hits (all equal: each counts 1).
fn blend_scores(hits: &mut [ScoredChunk], reranker: &[f32], blend: f32) {
    let first: Vec<f32> = hits.iter().map(|h| h.score).collect();
    for (h, s) in hits.iter_mut().zip(blended(&first, reranker, blend)) {
        h.score = s;
    }
}

/// `(1 − blend) · reranker + blend · first stage` per candidate, the first-stage scores
/// min-max scaled to [0, 1] over these candidates (all equal: each counts 1): how
/// `rerank.blend` weighs a reranked list, for documents and for memories alike. One
/// reranker score per candidate (a shorter list leaves the rest out).
pub fn blended(first: &[f32], reranker: &[f32], blend: f32) -> Vec<f32> {
    debug_assert_eq!(first.len(), reranker.len(), "one score per candidate");
    let (lo, hi) = first
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &s| {
            (lo.min(s), hi.max(s))
        });
    first
        .iter()
        .zip(reranker)
        .map(|(&f, &r)| {
            let scaled = if hi > lo { (f - lo) / (hi - lo) } else { 1.0 };
            (1.0 - blend) * r + blend * scaled
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(doc: u64, score: f32) -> ScoredChunk {
        ScoredChunk {
            doc,
            ordinal: 0,
            score,
        }
    }

    #[test]
    fn convex_fusion_normalizes_each_list() {
        let cfg = SearchConfig {
            alpha: 0.5,
            ..Default::default()
        };
        // Keyword: 1 best (norm 1), 2 worst (0). Vector: 2 best (1), 3 worst (0).
        let kw = [hit(1, 20.0), hit(2, 10.0)];
        let vec = [hit(2, 0.9), hit(3, 0.5)];
        let f = fuse(&kw, &vec, &cfg);
        let got: Vec<(u64, f32)> = f.iter().map(|h| (h.doc, h.score)).collect();
        // 1: 0.5*1 = 0.5; 2: 0.5*0 + 0.5*1 = 0.5; 3: 0. Tie 1/2 broken by doc key.
        assert_eq!(got, vec![(1, 0.5), (2, 0.5), (3, 0.0)]);
        let only_vec = fuse(
            &kw,
            &vec,
            &SearchConfig {
                alpha: 1.0,
                ..cfg.clone()
            },
        );
        assert_eq!(only_vec[0].doc, 2);
        // A list of equal scores counts fully.
        let f = fuse(&[hit(7, 3.0)], &[], &cfg);
        assert_eq!((f[0].doc, f[0].score), (7, 0.5));
    }

    #[test]
    fn rrf_adds_reciprocal_ranks() {
        let cfg = SearchConfig {
            fusion: Fusion::Rrf,
            rrf_k: 60.0,
            ..Default::default()
        };
        let kw = [hit(1, 9.0), hit(2, 8.0)];
        let vec = [hit(2, 0.9), hit(1, 0.1), hit(3, 0.0)];
        let f = fuse(&kw, &vec, &cfg);
        let s = |d| f.iter().find(|h| h.doc == d).unwrap().score;
        assert!((s(1) - (1.0 / 61.0 + 1.0 / 62.0) as f32).abs() < 1e-7);
        assert!((s(3) - (1.0 / 63.0) as f32).abs() < 1e-7);
        assert_eq!(f.len(), 3);
        assert!(fuse(&[], &[], &cfg).is_empty());
    }

    #[test]
    fn a_blend_weighs_the_first_stage_scaled_to_the_reranked_hits() {
        // First stage: 1 > 2 > 3 (scaled 1, 0.5, 0); the reranker prefers 3 then 2.
        let first = || vec![hit(1, 0.8), hit(2, 0.6), hit(3, 0.4)];
        let rr = [0.1, 0.5, 0.6];
        let mut h = first();
        blend_scores(&mut h, &rr, 0.0);
        assert_eq!(h.iter().map(|h| h.score).collect::<Vec<_>>(), rr);
        let close = |h: &[ScoredChunk], want: &[f32]| {
            let got: Vec<f32> = h.iter().map(|h| h.score).collect();
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-6, "{got:?} against {want:?}");
            }
        };
        let mut h = first();
        blend_scores(&mut h, &rr, 0.5);
        close(&h, &[0.55, 0.5, 0.3]);
        let mut h = first();
        blend_scores(&mut h, &rr, 1.0);
        close(&h, &[1.0, 0.5, 0.0]);
        // Equal first-stage scores each count fully.
        let mut h = vec![hit(1, 0.3), hit(2, 0.3)];
        blend_scores(&mut h, &[0.2, 0.4], 0.5);
        close(&h, &[0.6, 0.7]);
    }
}
