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
//! with `idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))` per field, as in Lucene.

mod analyzer;
mod keyword;
mod vector;

pub use analyzer::{AnalyzerConfig, Stopwords};
pub use keyword::{Bm25Params, IndexChunk, IndexError, IndexSession, KeywordHit, KeywordIndex};
pub use vector::{dot, normalize, HnswParams, VectorError, VectorHit, VectorIndex, VectorStats};
