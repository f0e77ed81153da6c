//! `vector_search`: embedding similarity over the collection's HNSW index →
//! `vector.chunks`. Skipped (not failed) when no embedding model is present.

use neuralcore_engine::{SearchMode, SearchOptions};
use serde_json::json;

use super::{input, ChunkList, STAGE_RETRIEVE};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Dense vector search.
pub struct VectorSearch(ToolSpec);

impl Default for VectorSearch {
    fn default() -> Self {
        VectorSearch(ToolSpec {
            name: "vector_search",
            namespace: "vector",
            description: "semantic search: sentence embeddings over an HNSW index",
            roles: &["retrieve"],
            reads: &["input.query", "input.collection"],
            writes: &["chunks"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "k": {"type": "integer", "minimum": 1, "maximum": 10000}}})
            },
            cost: CostClass::Moderate,
        })
    }
}

impl Tool for VectorSearch {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let Some((query, collection)) = input(ctx)? else {
            return Ok(Output::skipped("no input.query"));
        };
        if let Err(why) = ctx.services.engine.embedder_status() {
            return Ok(Output::skipped(why));
        }
        let k: usize = ctx.param("k", 100);
        let opts = SearchOptions {
            mode: Some(SearchMode::Vector),
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
}

crate::register_tool!(VectorSearch);
