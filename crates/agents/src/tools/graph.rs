//! `graph_search`: retrieval by the knowledge graph over documents. It starts from the
//! question's entities (the rule-based extractor of `neuralcore_memory::graph`) and
//! walks: entity → the chunks that mention it (found through the keyword index, kept
//! only when the chunk really names it) → their neighbouring chunks in the same document
//! (PART_OF) → the entities those chunks name most → their chunks (one more hop).
//! Writes `graph.chunks` at stage `retrieve`, so it joins fusion like any retriever.
//! Runs only with `[loop] graph = true`.

use std::collections::HashMap;

use neuralcore_core::DocKey;
use neuralcore_engine::{ScoredChunk, SearchMode, SearchOptions};
use neuralcore_memory::graph::{extract, EntityKind};
use serde_json::json;

use super::{input, ChunkList, STAGE_RETRIEVE};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Graph retrieval.
pub struct GraphSearchTool(ToolSpec);

impl Default for GraphSearchTool {
    fn default() -> Self {
        GraphSearchTool(ToolSpec {
            name: "graph_search",
            namespace: "graph",
            description: "entity graph walk: the question's entities → chunks naming them → neighbours → related entities",
            roles: &["retrieve"],
            reads: &["input.query", "input.collection"],
            writes: &["chunks"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "k": {"type": "integer", "minimum": 1, "maximum": 1000},
                    "hops": {"type": "integer", "minimum": 0, "maximum": 2},
                    "per_entity": {"type": "integer", "minimum": 1, "maximum": 100}}})
            },
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for GraphSearchTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        if !ctx.services.engine.config().control.graph {
            return Ok(Output::skipped("loop.graph is off"));
        }
        let Some((query, collection)) = input(ctx)? else {
            return Ok(Output::skipped("no input.query"));
        };
        let k: usize = ctx.param("k", 50);
        let hops: usize = ctx.param("hops", 1);
        let per_entity: usize = ctx.param("per_entity", 10);
        let start: Vec<String> = extract(&query)
            .into_iter()
            .filter(|e| e.kind != EntityKind::Skill)
            .map(|e| e.name)
            .take(4)
            .collect();
        if start.is_empty() {
            return Ok(Output::skipped("no entities in the question"));
        }
        let engine = &ctx.services.engine;
        let store = engine.store();
        let mut scores: HashMap<(DocKey, u32), f32> = HashMap::new();
        let mut frontier = start.clone();
        let mut visited: Vec<String> = start.iter().map(|s| s.to_lowercase()).collect();
        let mut weight = 1.0f32;
        for hop in 0..=hops {
            let mut next: HashMap<String, usize> = HashMap::new();
            for name in &frontier {
                ctx.check()?;
                let hits = engine
                    .search_keys(
                        &collection,
                        name,
                        per_entity * 3,
                        SearchOptions {
                            mode: Some(SearchMode::Keyword),
                            rerank: Some(0),
                        },
                    )?
                    .hits;
                let lname = name.to_lowercase();
                let mut found = 0;
                for h in hits {
                    let Some(c) = store.chunk(h.doc, h.ordinal)? else {
                        continue;
                    };
                    if !c.text.to_lowercase().contains(&lname) {
                        continue; // the index matched words, not the name
                    }
                    found += 1;
                    let s = scores.entry((h.doc, h.ordinal)).or_default();
                    *s = s.max(weight * (1.0 - 0.02 * found as f32));
                    // Neighbours in the same document.
                    for o in [c.ordinal.checked_sub(1), Some(c.ordinal + 1)].into_iter().flatten() {
                        if store.chunk(h.doc, o)?.is_some() {
                            let s = scores.entry((h.doc, o)).or_default();
                            *s = s.max(0.5 * weight);
                        }
                    }
                    if hop < hops {
                        for e in extract(&c.text) {
                            let l = e.name.to_lowercase();
                            if !visited.contains(&l) && e.kind != EntityKind::Skill {
                                *next.entry(e.name).or_default() += 1;
                            }
                        }
                    }
                    if found >= per_entity {
                        break;
                    }
                }
            }
            let mut related: Vec<(String, usize)> = next.into_iter().collect();
            related.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            frontier = related.into_iter().take(3).map(|r| r.0).collect();
            visited.extend(frontier.iter().map(|s| s.to_lowercase()));
            weight *= 0.4;
            if frontier.is_empty() {
                break;
            }
        }
        let mut hits: Vec<ScoredChunk> = scores
            .into_iter()
            .map(|((doc, ordinal), score)| ScoredChunk { doc, ordinal, score })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc)).then(a.ordinal.cmp(&b.ordinal)));
        hits.truncate(k);
        let e = ctx.write(
            "chunks",
            ChunkList::new(STAGE_RETRIEVE, &query, &collection, &hits).to_value(),
        )?;
        Ok(Output::wrote(
            vec![e.key],
            format!("{} chunks from entities {}", hits.len(), start.join(", ")),
        ))
    }
}

crate::register_tool!(GraphSearchTool);
