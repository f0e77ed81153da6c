//! `plan`: the task type (factual, comparison, multi-hop, summary, procedural,
//! chit-chat), its complexity and the sub-queries to retrieve for. With an LLM
//! configured the first plan is the model's (falling back to the deterministic one when
//! it fails or answers out of format). Deterministic: a
//! comparison is split into one query per side, a question with a relative clause gets
//! the clause as its own query (the first hop), long questions a keyword variant. From
//! the second iteration on, the queries are reflection's `next_queries` (the gaps).

use serde_json::json;

use crate::crag::{latest, run_input, write_rounded, Plan, Reflection};
use crate::planner::plan;
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Query planning.
pub struct PlanTool(ToolSpec);

impl Default for PlanTool {
    fn default() -> Self {
        PlanTool(ToolSpec {
            name: "plan",
            namespace: "plan",
            description: "task type, complexity and sub-queries (decomposition, keyword variants, gaps)",
            roles: &["plan"],
            reads: &["input.query", "loop.iteration", "*.report"],
            writes: &["plan"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "max_queries": {"type": "integer", "minimum": 1, "maximum": 16},
                    "llm": {"type": "boolean"}}})
            },
            cost: CostClass::Free,
        })
    }
}

impl Tool for PlanTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let (query, _, switches, iteration) = run_input(ctx.mind)?;
        let max: usize = ctx.param("max_queries", 4);
        let use_llm: bool = ctx.param("llm", true);
        let mut plan = plan(&query);
        let mut spent = crate::llm_judge::Spent::default();
        let mut degraded = None;
        // With an LLM, the first plan is the model's (the deterministic one if it fails);
        // later iterations follow reflection either way.
        if let Some(client) = ctx
            .services
            .llm
            .as_deref()
            .filter(|_| use_llm && iteration == 1 && !switches.skip_expensive)
        {
            if plan.task != "chit-chat" {
                let (r, used) = crate::llm_judge::plan(client, &query, max);
                spent += used;
                match r {
                    Ok(p) => plan = p,
                    Err(e) => {
                        plan.reason = format!("{}; the LLM planner failed ({e})", plan.reason);
                        degraded = Some(format!("the LLM planner failed, rules planned ({e})"));
                    }
                }
            }
        }
        if iteration > 1 {
            if let Some(prev) = latest::<Plan>(ctx.mind, "plan")? {
                plan.aspects = prev.data.aspects;
            }
            if let Some(r) = latest::<Reflection>(ctx.mind, "report")? {
                plan.queries = r.data.next_queries.clone();
                plan.reason = format!("iteration {iteration}: the gaps of the last reflection");
            }
        }
        plan.queries.truncate(max);
        let msg = format!(
            "{} ({}), {} queries",
            plan.task,
            plan.complexity,
            plan.queries.len()
        );
        let key = write_rounded(ctx, "plan", iteration, &plan)?;
        let mut out = Output::wrote(vec![key], msg);
        out.tokens = spent.tokens;
        out.cost_usd = spent.usd;
        out.degraded = degraded;
        Ok(out)
    }
}

crate::register_tool!(PlanTool);
