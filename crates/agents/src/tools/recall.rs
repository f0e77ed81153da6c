//! `recall`: the trust-weighted memory as evidence. When the run has a memory store, the
//! question searches the memories of its project (`input.project`; trust-weighted, with
//! superseded memories hidden); each hit is graded by the CRAG evaluator like a chunk;
//! CORRECT ones join the latest strips (cited as `mem:<id>`), and every hit with its
//! verdict goes to `recall.hits`, from which the loop sends trust signals once the
//! answer is known (cited: `used`; graded out or not cited: `ignored`).

use serde_json::json;

use crate::crag::{latest, run_input, write_rounded, Evidence, Recalled, Strip, Verdict};
use crate::grader::Grader;
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Memory recall.
pub struct RecallTool(ToolSpec);

impl Default for RecallTool {
    fn default() -> Self {
        RecallTool(ToolSpec {
            name: "recall",
            namespace: "recall",
            description: "searches the trust-weighted memory and grades what it finds like chunks",
            roles: &["recall"],
            reads: &["input.query", "input.project", "input.tenant", "*.strips"],
            writes: &["strips", "hits"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "k": {"type": "integer", "minimum": 1, "maximum": 100}}})
            },
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for RecallTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let Some(mem) = &ctx.services.memory else {
            return Ok(Output::skipped("no memory store for this run"));
        };
        let (question, collection, switches, iteration) = run_input(ctx.mind)?;
        if switches.no_retrieval {
            return Ok(Output::skipped("retrieval switched off"));
        }
        let project = ctx
            .mind
            .read("input.project")?
            .and_then(|e| e.value.as_str().map(str::to_string))
            .unwrap_or_default();
        // Only the asking tenant's memories (a run without one is the default tenant's).
        let tenant = ctx
            .mind
            .read("input.tenant")?
            .and_then(|e| e.value.as_str().map(str::to_string))
            .unwrap_or_else(|| "default".into());
        let k: usize = ctx.param("k", 5);
        let now = neuralcore_memory::now_ms();
        let engine = &ctx.services.engine;
        // Embedded once (the engine caches it; the vector retriever asked already).
        let qv = engine.query_vector(&question).ok();
        let opts = neuralcore_memory::MemorySearchOptions {
            query_vector: qv.clone(),
            ..engine.config().memory.search_options(
                k,
                neuralcore_memory::Filter {
                    tenant,
                    project,
                    ..Default::default()
                },
            )
        };
        let hits = engine
            .memory_search_cached(mem, &question, &opts, now)
            .map_err(|e| ToolError::Transient(format!("memory search: {e}")))?;
        if hits.is_empty() {
            ctx.write("hits", json!([]))?;
            return Ok(Output::skipped("no memory matches"));
        }
        let grader = Grader::new(engine, &collection);
        let texts: Vec<&str> = hits.iter().map(|h| h.memory.text.as_str()).collect();
        let cosines: Vec<Option<f32>> = hits
            .iter()
            .map(|h| {
                let (v, q) = (h.memory.embedding.as_ref()?, qv.as_ref()?);
                (v.len() == q.len()).then(|| neuralcore_core::dot(v, q))
            })
            .collect();
        let ranks: Vec<usize> = (0..hits.len()).collect();
        let scored = grader.score(&question, &texts, &cosines, &ranks)?;
        let mut strips: Vec<Strip> = latest::<Vec<Strip>>(ctx.mind, "strips")?
            .map(|r| r.data)
            .unwrap_or_default();
        let mut recalled = Vec::new();
        for (i, (h, s)) in hits.iter().zip(&scored).enumerate() {
            let verdict = if switches.no_grade {
                Verdict::Correct
            } else {
                grader.verdict(s.score)
            };
            if verdict == Verdict::Correct {
                strips.push(Strip {
                    evidence: Evidence::memory(h.memory.id.clone()),
                    title: format!("memory ({})", h.memory.kind.as_str()),
                    span: (0, h.memory.text.chars().count() as u64),
                    text: h.memory.text.clone(),
                    score: s.features.best_window.max(s.score * 0.5),
                    verdict,
                    chunk_rank: 1000 + i,
                });
            }
            recalled.push(Recalled {
                id: h.memory.id.clone(),
                verdict,
                score: s.score,
                trust: h.memory.trust,
                flags: h.flags.clone(),
                text: h.memory.text.clone(),
            });
        }
        let kept = recalled.iter().filter(|r| r.verdict == Verdict::Correct).count();
        let mut keys = vec![write_rounded(ctx, "strips", iteration, &strips)?];
        keys.push(
            ctx.write(
                "hits",
                serde_json::to_value(&recalled).map_err(|e| ToolError::Permanent(e.to_string()))?,
            )?
            .key,
        );
        Ok(Output::wrote(
            keys,
            format!("{} memories recalled, {kept} kept", recalled.len()),
        ))
    }
}

crate::register_tool!(RecallTool);
