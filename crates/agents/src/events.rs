//! What the control loop reports as it runs: one typed [`LoopEvent`] per step, sent to
//! the caller's sink ([`crate::AskOptions::events`]) the moment it happens. Every front
//! end renders these same events: the CLI's `ask --trace` prints them, the HTTP API
//! streams them as server-sent events (`neuralcore.events/v1`, see `docs/api.md`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::consciousness::{CitationOut, StageTrace};
use crate::crag::{Decision, Evidence, Graded, Plan, Reflection, Verdict};

/// Where a run's events go. Called on the thread running the loop: it must not block
/// for long (a front end hands the event to its own queue).
pub type EventSink = Arc<dyn Fn(&LoopEvent) + Send + Sync>;

/// A hit one sub-query retrieved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RetrievedHit {
    /// The chunk.
    pub evidence: Evidence,
    /// The fused retrieval score.
    pub score: f32,
    /// Rank among the sub-query's hits, from 0.
    pub rank: usize,
}

/// A sentence (or window) of kept evidence that refinement passed to generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RefinedStrip {
    /// Where it comes from.
    pub evidence: Evidence,
    /// Character span `[start, end)` in the document's text.
    pub span: (u64, u64),
    /// The text.
    pub text: String,
    /// Relevance to the question, in [0, 1].
    pub score: f32,
    /// Verdict of its chunk (CORRECT or VERIFIED).
    pub verdict: Verdict,
}

/// One step of the control loop. Serialized with its name in `kind` (snake case).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LoopEvent {
    /// An iteration begins: what the blackboard holds (key count per namespace).
    Observe {
        /// From 1.
        iteration: u32,
        /// Key count per namespace.
        observed: BTreeMap<String, usize>,
    },
    /// The retrieve-or-not decision.
    Decision {
        /// From 1.
        iteration: u32,
        /// The decision.
        decision: Decision,
    },
    /// The plan of this iteration.
    Plan {
        /// From 1.
        iteration: u32,
        /// The plan (task, complexity, queries, aspects, why).
        plan: Plan,
    },
    /// A sub-query about to be retrieved for (ones tried before are not repeated).
    SubQuery {
        /// From 1.
        iteration: u32,
        /// Its position in the iteration, from 0.
        index: usize,
        /// The query.
        query: String,
    },
    /// What a sub-query retrieved (the hits passed to grading).
    Retrieved {
        /// From 1.
        iteration: u32,
        /// The sub-query.
        query: String,
        /// The hits, best first.
        hits: Vec<RetrievedHit>,
    },
    /// The grader's verdict on one chunk, with its score and reason.
    Verdict {
        /// From 1.
        iteration: u32,
        /// The graded chunk.
        graded: Graded,
    },
    /// Verification settled an AMBIGUOUS chunk: VERIFIED (kept) or DROPPED.
    Verification {
        /// From 1.
        iteration: u32,
        /// The chunk with its new verdict and the reason.
        graded: Graded,
    },
    /// The strips of kept evidence refinement passed on.
    Refined {
        /// From 1.
        iteration: u32,
        /// The strips, in the order generation reads them.
        strips: Vec<RefinedStrip>,
    },
    /// Reflection on completeness: the gaps, and whether to look again.
    Reflection {
        /// From 1.
        iteration: u32,
        /// The findings.
        reflection: Reflection,
    },
    /// A stage finished (or was skipped): its timing and what each tool said.
    Stage {
        /// The iteration, or none for the stages after the loop (recall, generate,
        /// check).
        iteration: Option<u32>,
        /// The stage.
        stage: StageTrace,
    },
    /// A tool failed; the run went on without it.
    Failure {
        /// The iteration, or none after the loop.
        iteration: Option<u32>,
        /// The tool.
        tool: String,
        /// What went wrong.
        message: String,
        /// Worth retrying later.
        transient: bool,
    },
    /// A piece of an LLM answer's draft, as it streams (the checked answer follows in
    /// `answer`).
    Delta {
        /// The text.
        text: String,
    },
    /// The loop stopped looking: why.
    Stopped {
        /// Why (e.g. `evidence sufficient`, `max iterations reached`).
        reason: String,
    },
    /// The answer, checked, with its citations.
    Answer {
        /// The answer text with `[n]` markers.
        answer: String,
        /// `extractive`, `llm`, `direct` or `model-only`.
        method: String,
        /// Confidence in [0, 1].
        confidence: f32,
        /// The cited sources.
        citations: Vec<CitationOut>,
    },
    /// The engine declined to answer for lack of evidence.
    Abstention {
        /// Why, as the answer states it.
        reason: String,
        /// What is missing (reflection's gaps).
        missing: Vec<String>,
    },
    /// The run failed and ends here (cancelled, a store error, bad input).
    Error {
        /// What went wrong.
        message: String,
    },
}

impl LoopEvent {
    /// The event's name: its `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            LoopEvent::Observe { .. } => "observe",
            LoopEvent::Decision { .. } => "decision",
            LoopEvent::Plan { .. } => "plan",
            LoopEvent::SubQuery { .. } => "sub_query",
            LoopEvent::Retrieved { .. } => "retrieved",
            LoopEvent::Verdict { .. } => "verdict",
            LoopEvent::Verification { .. } => "verification",
            LoopEvent::Refined { .. } => "refined",
            LoopEvent::Reflection { .. } => "reflection",
            LoopEvent::Stage { .. } => "stage",
            LoopEvent::Failure { .. } => "failure",
            LoopEvent::Delta { .. } => "delta",
            LoopEvent::Stopped { .. } => "stopped",
            LoopEvent::Answer { .. } => "answer",
            LoopEvent::Abstention { .. } => "abstention",
            LoopEvent::Error { .. } => "error",
        }
    }

    /// One line for a person (what `ask --trace` prints), or none for a draft piece.
    pub fn render(&self) -> Option<String> {
        let it = |n: &Option<u32>| n.map(|n| format!("{n}")).unwrap_or_else(|| "-".into());
        Some(match self {
            LoopEvent::Observe {
                iteration,
                observed,
            } => {
                let o: Vec<String> = observed.iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!(
                    "── iteration {iteration}\n   observe      blackboard keys {}",
                    if o.is_empty() {
                        "(none)".into()
                    } else {
                        o.join(" ")
                    }
                )
            }
            LoopEvent::Decision { decision, .. } => format!(
                "   decide       {} ({}): {}",
                if decision.retrieve {
                    "retrieve"
                } else {
                    "no retrieval"
                },
                decision.kind,
                decision.reason
            ),
            LoopEvent::Plan { plan, .. } => format!(
                "   plan         {} ({}), {} queries: {}",
                plan.task,
                plan.complexity,
                plan.queries.len(),
                plan.reason
            ),
            LoopEvent::SubQuery { index, query, .. } => {
                format!("   sub-query {index:<2} {query}")
            }
            LoopEvent::Retrieved { query, hits, .. } => {
                let top: Vec<String> = hits
                    .iter()
                    .take(5)
                    .map(|h| format!("{} {:.3}", h.evidence, h.score))
                    .collect();
                format!(
                    "   retrieved    {} hits for {query:?}: {}{}",
                    hits.len(),
                    top.join(", "),
                    if hits.len() > 5 { ", …" } else { "" }
                )
            }
            LoopEvent::Verdict { graded, .. } | LoopEvent::Verification { graded, .. } => {
                format!(
                    "   {:<12} {:<9} {:.2}  {}#{}  {}\n                {}",
                    if matches!(self, LoopEvent::Verdict { .. }) {
                        "verdict"
                    } else {
                        "verification"
                    },
                    format!("{:?}", graded.verdict).to_uppercase(),
                    graded.score,
                    graded.doc,
                    graded.ordinal,
                    graded.title.chars().take(60).collect::<String>(),
                    graded.reason
                )
            }
            LoopEvent::Refined { strips, .. } => {
                let mut s = format!("   refined      {} strips", strips.len());
                for x in strips.iter().take(5) {
                    let text: String = x.text.chars().take(80).collect();
                    s.push_str(&format!(
                        "\n                {} {:.2} \"{}\"",
                        x.evidence,
                        x.score,
                        text.trim()
                    ));
                }
                s
            }
            LoopEvent::Reflection { reflection: r, .. } => {
                let mut s = format!(
                    "   reflect      completeness {:.2}, {}: {}",
                    r.completeness,
                    if r.sufficient {
                        "sufficient"
                    } else {
                        "insufficient"
                    },
                    r.reason
                );
                for a in &r.aspects {
                    s.push_str(&format!(
                        "\n   aspect       {} {}",
                        if a.covered { "covered" } else { "NOT covered" },
                        a.aspect
                    ));
                }
                for g in &r.gaps {
                    s.push_str(&format!("\n   gap          {g}"));
                }
                s
            }
            LoopEvent::Stage { iteration, stage } => {
                let msg: Vec<String> = stage
                    .results
                    .iter()
                    .map(|x| format!("{}: {}", x.tool, x.message))
                    .collect();
                match &stage.skipped {
                    Some(why) => format!(
                        "   stage        {} (iteration {}) skipped: {why}",
                        stage.stage,
                        it(iteration)
                    ),
                    None => format!(
                        "   stage        {} (iteration {}) {:.1} ms  {}",
                        stage.stage,
                        it(iteration),
                        stage.ms,
                        msg.join(" | ")
                    ),
                }
            }
            LoopEvent::Failure {
                tool,
                message,
                transient,
                ..
            } => format!(
                "   failure      {tool}: {message}{}",
                if *transient { " (transient)" } else { "" }
            ),
            LoopEvent::Delta { .. } => return None,
            LoopEvent::Stopped { reason } => format!("── stop: {reason}"),
            LoopEvent::Answer {
                method,
                confidence,
                citations,
                ..
            } => format!(
                "── answer       {method}, confidence {confidence:.2}, {} citation(s)",
                citations.len()
            ),
            LoopEvent::Abstention { reason, missing } => {
                let mut s = format!("── abstention   {reason}");
                for m in missing {
                    s.push_str(&format!("\n   missing      {m}"));
                }
                s
            }
            LoopEvent::Error { message } => format!("── error        {message}"),
        })
    }
}
