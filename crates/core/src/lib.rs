//! Core types of neuralcore: documents, chunks and their provenance, the errors of the
//! storage layer, text normalization, and the traits that every store implements; and
//! the primitives several crates share, one implementation each: the keyword analyzer
//! ([`analysis`]), BM25 ([`bm25`]) and the logistic-regression fitter ([`logistic`]).
//!
//! This crate does no I/O and picks no runtime; everything above it (stores, loaders,
//! indexes, the engine, the CLI) speaks in these types.

pub mod analysis;
pub mod bm25;
pub mod error;
pub mod logistic;
pub mod model;
pub mod pairs;
pub mod rng;
pub mod sentence;
pub mod settings;
pub mod stopwords;
pub mod store;
pub mod text;
pub mod types;

pub use error::{StoreError, StoreResult};
pub use model::{cosine, dot, Embedder, ModelError, Reranker, TextKind};
pub use store::{embedding_key, DocStore, EmbeddingKey, IndexJournal, StoreBatch};
pub use types::*;
