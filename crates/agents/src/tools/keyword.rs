//! `keyword_search`: BM25 over the collection's keyword index → `keyword.chunks`.

use neuralcore_engine::SearchMode;

use super::{search_into_chunks, search_params};
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
            params: search_params,
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for KeywordSearch {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        search_into_chunks(ctx, SearchMode::Keyword)
    }
}

crate::register_tool!(KeywordSearch);
