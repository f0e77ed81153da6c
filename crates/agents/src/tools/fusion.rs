//! `fusion`: every retrieval list on the Mind (`*.chunks` at stage `retrieve`, whoever
//! wrote it) fused into `fusion.chunks` by convex combination of min-max-normalized
//! scores or by reciprocal rank fusion. Weights per namespace come from parameters
//! (an agent's markdown), so a new retrieval tool joins without any change here.

use std::collections::BTreeMap;

use neuralcore_engine::{fuse_lists, Fusion, ScoredChunk};
use serde_json::json;

use super::{lists_at, ChunkList, STAGE_FUSED, STAGE_RETRIEVE};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Fusion of retrieval lists.
pub struct FusionTool(ToolSpec);

impl Default for FusionTool {
    fn default() -> Self {
        FusionTool(ToolSpec {
            name: "fusion",
            namespace: "fusion",
            description: "fuses every retrieval list (convex min-max or reciprocal rank fusion)",
            roles: &["fuse"],
            reads: &["*.chunks"],
            writes: &["chunks"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "method": {"enum": ["convex", "rrf"]},
                    "rrf_k": {"type": "number", "minimum": 0},
                    "weights": {"type": "object"},
                    "default_weight": {"type": "number", "minimum": 0},
                    "k": {"type": "integer", "minimum": 1, "maximum": 10000}}})
            },
            cost: CostClass::Free,
        })
    }
}

impl Tool for FusionTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let lists = lists_at(ctx, STAGE_RETRIEVE)?;
        if lists.is_empty() {
            return Ok(Output::skipped("no retrieval lists on the Mind"));
        }
        let cfg = &ctx.services.engine.config().search;
        let method = match ctx.param::<String>("method", String::new()).as_str() {
            "rrf" => Fusion::Rrf,
            "convex" => Fusion::Convex,
            _ => cfg.fusion,
        };
        let rrf_k: f64 = ctx.param("rrf_k", cfg.rrf_k);
        // Without weights (no agent file says), the engine's own hybrid weighting:
        // keyword 1 - alpha, vector alpha (search.alpha, chosen on SciFact train).
        // The entity-graph walk is a supplement: it adds chunks, it does not outvote.
        let engine_weights: BTreeMap<String, f64> = [
            ("keyword".to_string(), 1.0 - cfg.alpha),
            ("vector".to_string(), cfg.alpha),
            ("graph".to_string(), 0.3),
        ]
        .into();
        let weights: BTreeMap<String, f64> = ctx.param("weights", engine_weights);
        let default_weight: f64 = ctx.param("default_weight", 0.5);
        let k: usize = ctx.param("k", 100);
        let mut hits: Vec<(Vec<ScoredChunk>, f64)> = Vec::new();
        let mut names = Vec::new();
        for (key, l) in &lists {
            let ns = key.split('.').next().unwrap_or_default();
            let w = weights.get(ns).copied().unwrap_or(default_weight);
            names.push(format!("{ns}×{w}"));
            hits.push((l.hits()?, w));
        }
        let refs: Vec<(&[ScoredChunk], f64)> =
            hits.iter().map(|(h, w)| (h.as_slice(), *w)).collect();
        let mut fused = fuse_lists(&refs, method, rrf_k);
        fused.truncate(k);
        let first = &lists[0].1;
        let e = ctx.write(
            "chunks",
            ChunkList::new(STAGE_FUSED, &first.query, &first.collection, &fused).to_value(),
        )?;
        Ok(Output::wrote(
            vec![e.key],
            format!("{} chunks from {}", fused.len(), names.join(" + ")),
        ))
    }
}

crate::register_tool!(FusionTool);
