//! `grade` (CRAG): every retrieved chunk gets a verdict — CORRECT, AMBIGUOUS or
//! INCORRECT — with the evaluator's score and the reason, in `grade.verdicts` (earlier
//! iterations' verdicts are carried over; a chunk is graded once). A chunk found by a
//! sub-query is graded against that sub-query and against the question, and keeps the
//! better score. With `--no-grade` every chunk is kept (CORRECT, "grading off").

use std::collections::{BTreeMap, HashSet};

use neuralcore_core::parse_doc_id;
use serde_json::json;

use crate::crag::{latest, run_input, write_rounded, Candidate, Graded, Verdict};
use crate::grader::Grader;
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// CRAG grading.
pub struct GradeTool(ToolSpec);

impl Default for GradeTool {
    fn default() -> Self {
        GradeTool(ToolSpec {
            name: "grade",
            namespace: "grade",
            description: "labels every retrieved chunk CORRECT, AMBIGUOUS or INCORRECT (CRAG)",
            roles: &["grade"],
            reads: &["input.query", "*.candidates", "*.verdicts", "loop.switches"],
            writes: &["verdicts"],
            params: || json!({"type": "object", "additionalProperties": false, "properties": {}}),
            cost: CostClass::Moderate,
        })
    }
}

impl Tool for GradeTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let (question, collection, switches, iteration) = run_input(ctx.mind)?;
        let mut cands: Vec<Candidate> = Vec::new();
        for e in ctx.mind.read_name("candidates")? {
            match serde_json::from_value::<Vec<Candidate>>(e.value) {
                Ok(c) => cands.extend(c),
                Err(err) => tracing::warn!(key = %e.key, "not a candidate list: {err}"),
            }
        }
        let mut verdicts: Vec<Graded> = latest::<Vec<Graded>>(ctx.mind, "verdicts")?
            .map(|r| r.data)
            .unwrap_or_default();
        let mut seen: HashSet<(String, u32)> =
            verdicts.iter().map(|g| (g.doc.clone(), g.ordinal)).collect();
        let mut by_query: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
        for c in cands {
            if seen.insert((c.doc.clone(), c.ordinal)) {
                by_query.entry(c.query.clone()).or_default().push(c);
            }
        }
        let engine = &ctx.services.engine;
        let grader = Grader::new(engine, &collection);
        let store = engine.store();
        let mut counts = [0usize; 3];
        for (query, group) in by_query {
            ctx.check()?;
            let mut texts = Vec::new();
            let mut titles = Vec::new();
            let mut keys = Vec::new();
            let mut kept = Vec::new();
            for c in group {
                let Some(key) = parse_doc_id(&c.doc) else {
                    return Err(ToolError::Permanent(format!("malformed document id {:?}", c.doc)));
                };
                let Some(chunk) = store.chunk(key, c.ordinal)? else {
                    continue;
                };
                let title = store
                    .document(&collection, key)?
                    .map(|d| d.title)
                    .unwrap_or_default();
                texts.push(chunk.text);
                titles.push(title);
                keys.push((key, c.ordinal));
                kept.push(c);
            }
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let cos = |q: &str| {
                engine
                    .chunk_similarities(&collection, q, &keys)
                    .unwrap_or_else(|_| vec![None; keys.len()])
            };
            let ranks: Vec<usize> = kept.iter().map(|c| c.rank).collect();
            let mut scored = grader.score(&query, &refs, &cos(&query), &ranks)?;
            if query != question {
                let again = grader.score(&question, &refs, &cos(&question), &ranks)?;
                for (s, a) in scored.iter_mut().zip(again) {
                    if a.score > s.score {
                        *s = a;
                    }
                }
            }
            for ((c, s), title) in kept.into_iter().zip(scored).zip(titles) {
                let (verdict, reason) = if switches.no_grade {
                    (
                        Verdict::Correct,
                        format!("grading off (--no-grade); {}", grader.reason(&s)),
                    )
                } else {
                    (grader.verdict(s.score), grader.reason(&s))
                };
                counts[match verdict {
                    Verdict::Correct => 0,
                    Verdict::Ambiguous => 1,
                    _ => 2,
                }] += 1;
                verdicts.push(Graded {
                    doc: c.doc,
                    ordinal: c.ordinal,
                    title,
                    verdict,
                    score: s.score,
                    retrieval_score: c.score,
                    reason,
                    query: c.query,
                    iteration,
                });
            }
        }
        let key = write_rounded(ctx, "verdicts", iteration, &verdicts)?;
        let mut msg = format!(
            "{} correct, {} ambiguous, {} incorrect ({})",
            counts[0],
            counts[1],
            counts[2],
            grader.evaluator.name()
        );
        if let Some(n) = &grader.note {
            msg.push_str(&format!("; {n}"));
        }
        Ok(Output::wrote(vec![key], msg))
    }
}

crate::register_tool!(GradeTool);
