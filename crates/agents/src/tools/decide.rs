//! `decide` (Self-RAG): is retrieval needed? No for greetings, arithmetic, questions
//! about the conversation itself, when retrieval is switched off, and when reflection
//! already found the evidence sufficient; yes otherwise. Writes `decide.decision` with
//! the reason (and the answer, when one needs no evidence).

use serde_json::json;

use crate::crag::{latest, run_input, write_rounded, Decision, Reflection};
use crate::intent::classify;
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Self-RAG's retrieve-or-not decision.
pub struct DecideTool(ToolSpec);

impl Default for DecideTool {
    fn default() -> Self {
        DecideTool(ToolSpec {
            name: "decide",
            namespace: "decide",
            description: "decides whether the question needs retrieval (Self-RAG)",
            roles: &["decide"],
            reads: &["input.query", "loop.switches", "loop.iteration", "*.report"],
            writes: &["decision"],
            params: || json!({"type": "object", "additionalProperties": false, "properties": {}}),
            cost: CostClass::Free,
        })
    }
}

impl Tool for DecideTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let (query, _, switches, iteration) = run_input(ctx.mind)?;
        let d = if switches.no_retrieval {
            Decision {
                retrieve: false,
                kind: "disabled".into(),
                reason: "retrieval switched off (--no-retrieval)".into(),
                direct_answer: None,
            }
        } else if let Some(d) = classify(&query) {
            d
        } else if let Some(r) = latest::<Reflection>(ctx.mind, "report")?
            .filter(|r| r.data.sufficient && r.iteration < iteration)
        {
            Decision {
                retrieve: false,
                kind: "enough_evidence".into(),
                reason: format!(
                    "the blackboard already holds enough kept evidence (completeness {:.2})",
                    r.data.completeness
                ),
                direct_answer: None,
            }
        } else {
            Decision {
                retrieve: true,
                kind: "retrieve".into(),
                reason: "a question about the documents: evidence is needed".into(),
                direct_answer: None,
            }
        };
        let msg = format!("{}: {}", d.kind, d.reason);
        let key = write_rounded(ctx, "decision", iteration, &d)?;
        Ok(Output::wrote(vec![key], msg))
    }
}

crate::register_tool!(DecideTool);
