//! The search request and response every front end uses (`neuralcore --json search`,
//! `POST /v1/search`): schema `neuralcore.search/v1`.

use std::collections::BTreeMap;

use neuralcore_core::Provenance;
use neuralcore_engine::{SearchHit, SearchMode, SearchResults};
use serde::{Deserialize, Serialize};

/// Longest search query or question any front end accepts, in characters (at most 16
/// KiB of UTF-8, the loop's own limit).
pub const MAX_TEXT_CHARS: usize = 4096;

/// An error unless `text` (the `what`: "query", "question") is at most
/// [`MAX_TEXT_CHARS`] characters.
pub fn check_text_len(what: &str, text: &str) -> Result<(), crate::AppError> {
    let n = text.chars().count();
    if n > MAX_TEXT_CHARS {
        return Err(crate::AppError::InvalidInput(format!(
            "the {what} is {n} characters; the longest accepted is {MAX_TEXT_CHARS}"
        )));
    }
    Ok(())
}

/// The version of [`SearchResponse`].
pub const SEARCH_SCHEMA: &str = "neuralcore.search/v1";

/// A search.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// The query.
    #[schema(min_length = 1, max_length = 4096, pattern = "\\S")]
    pub query: String,
    /// The collection (default `default`).
    #[serde(default = "default_collection")]
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = "^[A-Za-z0-9_-][A-Za-z0-9_.-]*$"
    )]
    pub collection: String,
    /// keyword, vector or hybrid (default: `search.mode`).
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Chunks to return (default: `search.k`).
    #[serde(default, deserialize_with = "de_opt_uint")]
    #[schema(minimum = 1, maximum = 1000)]
    pub k: Option<usize>,
    /// Rerank the first N with the cross-encoder (default: `rerank.top_n`).
    #[serde(default, deserialize_with = "de_opt_uint")]
    #[schema(maximum = 1000)]
    pub rerank: Option<usize>,
}

/// An optional whole number that JSON may spell `12` or `12.0` (JSON Schema's `integer`
/// allows both; serde alone takes only the first).
pub fn de_opt_uint<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64>,
{
    use serde::de::Error;
    let Some(v) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    let n = v
        .as_u64()
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
                .map(|f| f as u64)
        })
        .ok_or_else(|| D::Error::custom(format!("{v} is not a whole number ≥ 0")))?;
    T::try_from(n)
        .map(Some)
        .map_err(|_| D::Error::custom(format!("{n} is too large")))
}

fn default_collection() -> String {
    neuralcore_core::DEFAULT_COLLECTION.into()
}

impl SearchRequest {
    /// A request for `query` in `collection` with every option at its default.
    pub fn new(query: impl Into<String>, collection: impl Into<String>) -> Self {
        SearchRequest {
            query: query.into(),
            collection: collection.into(),
            mode: None,
            k: None,
            rerank: None,
        }
    }
}

/// Ranked chunks with their provenance.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SearchResponse {
    /// [`SEARCH_SCHEMA`].
    pub schema: String,
    /// The query.
    pub query: String,
    /// The collection, as the caller names it.
    pub collection: String,
    /// The mode that ran.
    pub mode: SearchMode,
    /// Why the mode asked for did not run (no embedding model), if it did not.
    pub fallback: Option<String>,
    /// How many of the first hits the cross-encoder reordered.
    pub reranked: usize,
    /// Best first.
    pub hits: Vec<Hit>,
}

/// One ranked chunk.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Hit {
    /// 1-based rank.
    pub rank: usize,
    /// BM25 (keyword), cosine (vector) or fused (hybrid) score.
    pub score: f32,
    /// `<doc id>#<ordinal>`.
    pub chunk_id: String,
    /// The document's id.
    pub doc_id: String,
    /// The chunk's place in its document.
    pub ordinal: u32,
    /// The document's title.
    pub title: String,
    /// Where the document came from (its first provenance).
    pub path: Option<String>,
    /// Where in the source (a page, a row), when the loader knows.
    pub locator: Option<String>,
    /// The id the source gave it (a BEIR `_id`), when it had one.
    pub external_id: Option<String>,
    /// Headings above the chunk.
    pub section: Vec<String>,
    /// Character span in the document's normalized text.
    pub span: [u64; 2],
    /// Tokens in the chunk.
    pub tokens: u32,
    /// The chunk's text.
    pub text: String,
    /// Every source that holds the document.
    pub provenance: Vec<Provenance>,
    /// The document's metadata (a text's `metadata`, a web page's `url`...); left out
    /// when it has none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

impl Hit {
    fn from_hit(h: &SearchHit) -> Hit {
        let p = h.document.provenance.first();
        Hit {
            rank: h.rank,
            score: h.score,
            chunk_id: h.chunk.id(),
            doc_id: h.document.id(),
            ordinal: h.chunk.ordinal,
            title: h.document.title.clone(),
            path: p.map(|p| p.uri.clone()),
            locator: p.and_then(|p| p.locator.clone()),
            external_id: p.and_then(|p| p.external_id.clone()),
            section: h.chunk.section.clone(),
            span: [h.chunk.span.0, h.chunk.span.1],
            tokens: h.chunk.tokens,
            text: h.chunk.text.clone(),
            provenance: h.document.provenance.clone(),
            metadata: h.document.metadata.clone(),
        }
    }
}

impl SearchResponse {
    /// The response for `results` of `query` in the caller's `collection`.
    pub fn new(query: &str, collection: &str, results: &SearchResults) -> Self {
        SearchResponse {
            schema: SEARCH_SCHEMA.into(),
            query: query.to_string(),
            collection: collection.to_string(),
            mode: results.mode,
            fallback: results.fallback.clone(),
            reranked: results.reranked,
            hits: results.hits.iter().map(Hit::from_hit).collect(),
        }
    }
}
