//! Retrieval indexes. Vector search: HNSW over normalized vectors ([`VectorIndex`]).
//!
//! Keyword retrieval: BM25 over a tantivy index, one index per collection.
//!
//! tantivy stores the postings, field norms and fast fields; scoring is our own
//! term-at-a-time BM25 over tantivy's postings, so `k1`, `b` and the title weight are
//! configurable at query time (tantivy's built-in BM25 fixes k1 = 1.2, b = 0.75). Each
//! chunk is one tantivy document with a `title` and a `body` field:
//!
//! `score(chunk) = Σ_t idf(t) · [bm25(tf_body) + title_weight · bm25(tf_title)]`
//!
//! with `idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))` per field, as in Lucene. The
//! formula, its parameters ([`Bm25Params`]) and the analyzer ([`AnalyzerConfig`]) live in
//! `neuralcore_core` (`bm25`, `analysis`), shared with the memory search.

mod analyzer;
mod keyword;
mod vector;

pub use analyzer::{AnalyzerConfig, Stopwords};
pub use keyword::{IndexChunk, IndexError, IndexSession, KeywordHit, KeywordIndex};
/// The BM25 parameters (one type for every keyword search, in `neuralcore_core`).
pub use neuralcore_core::bm25::Bm25Params;
pub use vector::{dot, normalize, HnswParams, VectorError, VectorHit, VectorIndex, VectorStats};
