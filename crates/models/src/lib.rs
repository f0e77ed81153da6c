//! Models run in Rust: a BERT encoder on candle, sentence embedders with
//! sentence-transformers' pooling and normalization, and the model cache that
//! `neuralcore models pull` fills.

pub mod bert;
pub mod cache;
pub mod cross;
pub mod fastbert;
pub mod hub;
pub mod hub_fixture;
pub mod kernels;
pub mod qa;
pub mod sentence;
pub mod testing;
pub mod train;

pub use cache::{
    known, local_name, CachedModel, KnownModel, ModelCache, PullOptions, Pulled, DEFAULT_EMBEDDER,
    KNOWN_MODELS,
};
pub use cross::CrossEncoder;
pub use fastbert::QueryWeights;
pub use hub::{Hub, HubConfig, Snapshot};
pub use kernels::{detected, isa, isa_from_env, Isa};
pub use qa::{QaReader, Reading};
pub use sentence::{Pooling, SentenceEmbedder};
