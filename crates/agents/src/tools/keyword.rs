//! `keyword_search`: BM25 over the collection's keyword index → `keyword.chunks`.

use neuralcore_engine::{SearchMode, SearchOptions};
use serde_json::json;

use super::{input, ChunkList, STAGE_RETRIEVE};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// BM25 keyword search.
pub struct KeywordSearch(ToolSpec);

impl Default for KeywordSearch {
    fn default() -> Self {
        KeywordSearch(ToolSpec {
            name: "keyword_search",
            namespace: "keyword",
            description: "BM25 keyword search of the collection",
            roles: &["retrieve"],
            reads: &["input.query", "input.collection"],
            writes: &["chunks"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "k": {"type": "integer", "minimum": 1, "maximum": 10000}}})
            },
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for KeywordSearch {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let Some((query, collection)) = input(ctx)? else {
            return Ok(Output::skipped("no input.query"));
        };
        let k: usize = ctx.param("k", 100);
        let opts = SearchOptions {
            mode: Some(SearchMode::Keyword),
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

crate::register_tool!(KeywordSearch);
