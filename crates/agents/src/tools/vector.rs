//! `vector_search`: embedding similarity over the collection's HNSW index →
//! `vector.chunks`. Skipped (not failed) when no embedding model is present.

use neuralcore_engine::SearchMode;

use super::{search_into_chunks, search_params};
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
            params: search_params,
            cost: CostClass::Moderate,
        })
    }
}

impl Tool for VectorSearch {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        if let Err(why) = ctx.services.engine.embedder_status() {
            return Ok(Output::skipped(why));
        }
        search_into_chunks(ctx, SearchMode::Vector)
    }
}

crate::register_tool!(VectorSearch);
