//! `rerank`: the cross-encoder rescoring the top of the fused list → `rerank.chunks`.
//! Skipped (not failed) when no reranker model is present.

use serde_json::json;

use super::{lists_at, ChunkList, STAGE_FUSED, STAGE_RERANKED};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Cross-encoder reranking.
pub struct RerankTool(ToolSpec);

impl Default for RerankTool {
    fn default() -> Self {
        RerankTool(ToolSpec {
            name: "rerank",
            namespace: "rerank",
            description: "cross-encoder reranking of the top of the fused list",
            roles: &["rerank"],
            reads: &["*.chunks"],
            writes: &["chunks"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "top_n": {"type": "integer", "minimum": 1, "maximum": 1000}}})
            },
            cost: CostClass::Moderate,
        })
    }
}

impl Tool for RerankTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let Some((_, list)) = lists_at(ctx, STAGE_FUSED)?.into_iter().next() else {
            return Ok(Output::skipped("no fused list on the Mind"));
        };
        let engine = &ctx.services.engine;
        if let Err(why) = engine.reranker_status() {
            return Ok(Output::skipped(why));
        }
        let n: usize = ctx.param("top_n", 20);
        let mut hits = list.hits()?;
        let done = engine.rerank_hits(&list.collection, &list.query, &mut hits, n)?;
        let e = ctx.write(
            "chunks",
            ChunkList::new(STAGE_RERANKED, &list.query, &list.collection, &hits).to_value(),
        )?;
        Ok(Output::wrote(
            vec![e.key],
            format!("reranked the top {done}"),
        ))
    }
}

crate::register_tool!(RerankTool);
