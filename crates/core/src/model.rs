//! The model contracts: embedders and rerankers (and, later, LLMs).

use thiserror::Error;

/// What a text is, for models that embed queries and documents differently
/// (instruction prefixes such as bge's query instruction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// A search query.
    Query,
    /// A passage to be searched.
    Document,
}

/// What can go wrong with a model.
#[derive(Debug, Error)]
pub enum ModelError {
    /// The model files are not there.
    #[error("model not found: {0}")]
    NotFound(String),
    /// The files are there but are not a model this code can run.
    #[error("invalid model: {0}")]
    Invalid(String),
    /// A file did not match its expected checksum.
    #[error("checksum mismatch: {0}")]
    Checksum(String),
    /// Fetching the model failed (network, pip, ...).
    #[error("cannot fetch model: {0}")]
    Fetch(String),
    /// Running the model failed.
    #[error("inference failed: {0}")]
    Inference(String),
}

/// Turns texts into dense vectors. Implementations are stateless between calls and
/// safe to share between threads.
pub trait Embedder: Send + Sync {
    /// Identifies the model and its settings; part of every embedding cache key.
    fn model_id(&self) -> &str;
    /// Length of each vector.
    fn dimension(&self) -> usize;
    /// Tokens of `text` by the model's own tokenizer (no truncation), if it has one.
    fn count_tokens(&self, _text: &str) -> Option<usize> {
        None
    }
    /// One vector per text, in order.
    fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Vec<Vec<f32>>, ModelError>;
    /// The vector of one query.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, ModelError> {
        self.embed(&[text], TextKind::Query)?
            .pop()
            .ok_or_else(|| ModelError::Inference("no vector returned".into()))
    }
}

/// Scores how well passages answer a query, reading both together (a cross-encoder),
/// to reorder the top of a result list. Stateless between calls; shareable.
pub trait Reranker: Send + Sync {
    /// Identifies the model and its settings.
    fn model_id(&self) -> &str;
    /// One relevance score per passage, in order; higher is more relevant. Cross-encoders
    /// with one output give a probability in [0, 1] (the sigmoid of the logit).
    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, ModelError>;
}

/// Cosine similarity (0 when either vector is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let n = (dot(a, a) * dot(b, b)).sqrt();
    if n > 0.0 {
        dot(a, b) / n
    } else {
        0.0
    }
}

/// Dot product, written so the compiler vectorizes it (16 independent sums).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let ca = a.chunks_exact(16);
    let cb = b.chunks_exact(16);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}
