//! The built-in tools, one file each; every file registers its tool with
//! [`crate::register_tool!`], and `build.rs` declares every file of this folder as a
//! module, so adding a tool is adding a file: nothing lists them.
//!
//! Chunk lists on the Mind (`<namespace>.chunks`) share one shape, [`ChunkList`], with a
//! `stage` saying where in the pipeline they come from; fusion takes every `retrieve`
//! list it finds, whoever wrote it.

use neuralcore_core::{doc_id, parse_doc_id};
use neuralcore_engine::{ScoredChunk, SearchMode, SearchOptions};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::{Output, ToolContext, ToolError};

// One module per file in this folder, declared by build.rs: a new tool is a new file.
include!(concat!(env!("OUT_DIR"), "/tools.rs"));

/// Stage of a list produced by retrieval tools.
pub const STAGE_RETRIEVE: &str = "retrieve";
/// Stage of a fused list.
pub const STAGE_FUSED: &str = "fused";
/// Stage of a reranked list.
pub const STAGE_RERANKED: &str = "reranked";

/// One chunk in a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Document id (16 hex digits).
    pub doc: String,
    /// Chunk ordinal.
    pub ordinal: u32,
    /// Score given by the producer.
    pub score: f32,
}

/// A ranked list of chunks, as every retrieval-like tool writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkList {
    /// `retrieve`, `fused` or `reranked`.
    pub stage: String,
    /// The query it answers.
    pub query: String,
    /// The collection searched.
    pub collection: String,
    /// Best first.
    pub chunks: Vec<ChunkRef>,
}

impl ChunkList {
    /// A list from engine hits.
    pub fn new(stage: &str, query: &str, collection: &str, hits: &[ScoredChunk]) -> Self {
        ChunkList {
            stage: stage.to_string(),
            query: query.to_string(),
            collection: collection.to_string(),
            chunks: hits
                .iter()
                .map(|h| ChunkRef {
                    doc: doc_id(h.doc),
                    ordinal: h.ordinal,
                    score: h.score,
                })
                .collect(),
        }
    }

    /// The list as engine hits (entries with a malformed id are an error).
    pub fn hits(&self) -> Result<Vec<ScoredChunk>, ToolError> {
        self.chunks
            .iter()
            .map(|c| {
                Ok(ScoredChunk {
                    doc: parse_doc_id(&c.doc).ok_or_else(|| {
                        ToolError::Permanent(format!("malformed document id {:?}", c.doc))
                    })?,
                    ordinal: c.ordinal,
                    score: c.score,
                })
            })
            .collect()
    }

    /// As a Mind value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("serializable")
    }
}

/// The query and collection of the run (`input.query`, `input.collection`).
pub fn input(ctx: &ToolContext<'_>) -> Result<Option<(String, String)>, ToolError> {
    let Some(q) = ctx.mind.read("input.query")? else {
        return Ok(None);
    };
    let query = q
        .value
        .as_str()
        .ok_or_else(|| ToolError::Permanent("input.query must be a string".into()))?
        .to_string();
    let collection = match ctx.mind.read("input.collection")? {
        Some(c) => c
            .value
            .as_str()
            .ok_or_else(|| ToolError::Permanent("input.collection must be a string".into()))?
            .to_string(),
        None => neuralcore_core::DEFAULT_COLLECTION.to_string(),
    };
    Ok(Some((query, collection)))
}

/// Every chunk list on the Mind at `stage`, by key (lists in other shapes are skipped
/// with a warning: another tool's business).
pub fn lists_at(ctx: &ToolContext<'_>, stage: &str) -> Result<Vec<(String, ChunkList)>, ToolError> {
    let mut out = Vec::new();
    for e in ctx.mind.read_name("chunks")? {
        match serde_json::from_value::<ChunkList>(e.value.clone()) {
            Ok(l) if l.stage == stage => out.push((e.key.clone(), l)),
            Ok(_) => {}
            Err(err) => tracing::warn!(key = %e.key, "not a chunk list: {err}"),
        }
    }
    Ok(out)
}

/// The parameters of a search tool: `k`, the number of chunks.
pub fn search_params() -> Value {
    serde_json::json!({"type": "object", "additionalProperties": false, "properties": {
        "k": {"type": "integer", "minimum": 1, "maximum": 10000}}})
}

/// The body of a search tool: the run's query through the engine in `mode`, the top `k`
/// (parameter, default 100) written to `<namespace>.chunks` at stage `retrieve`.
pub fn search_into_chunks(ctx: &ToolContext<'_>, mode: SearchMode) -> Result<Output, ToolError> {
    let Some((query, collection)) = input(ctx)? else {
        return Ok(Output::skipped("no input.query"));
    };
    let k: usize = ctx.param("k", 100);
    let opts = SearchOptions {
        mode: Some(mode),
        rerank: Some(0),
    };
    let hits = ctx
        .services
        .engine
        .search_keys(&collection, &query, k, opts)?
        .hits;
    let e = ctx.write(
        "chunks",
        ChunkList::new(STAGE_RETRIEVE, &query, &collection, &hits).to_value(),
    )?;
    Ok(Output::wrote(vec![e.key], format!("{} chunks", hits.len())))
}
