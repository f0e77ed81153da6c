//! `reflect`: how complete is the kept evidence, what is missing, and what to look for
//! next. Completeness blends the share of sub-queries with kept evidence and the
//! weighted share of the question's terms the kept strips contain; the gaps are the
//! uncovered sub-queries and the missing words. When the evidence falls short, the next
//! queries are keyword rewrites of uncovered sub-queries and second hops: names found
//! in the kept evidence (a bridge entity) joined with the words still missing.
//! Writes `reflect.report`.

use std::collections::HashSet;

use serde_json::json;

use crate::crag::{
    latest, run_input, term_set, write_rounded, Graded, Plan, QueryTerms, Reflection, Strip,
};
use crate::planner::{keywords, names_in};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Reflection on completeness and gaps.
pub struct ReflectTool(ToolSpec);

impl Default for ReflectTool {
    fn default() -> Self {
        ReflectTool(ToolSpec {
            name: "reflect",
            namespace: "reflect",
            description: "scores completeness, names the gaps, proposes the next queries",
            roles: &["reflect"],
            reads: &[
                "input.query",
                "*.plan",
                "*.verdicts",
                "*.strips",
                "loop.tried",
            ],
            writes: &["report"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "target": {"type": "number", "minimum": 0, "maximum": 1},
                    "hops": {"type": "integer", "minimum": 0, "maximum": 8}}})
            },
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for ReflectTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let (question, collection, _, iteration) = run_input(ctx.mind)?;
        let engine = &ctx.services.engine;
        let target: f32 = ctx.param("target", engine.config().control.completeness);
        let hops: usize = ctx.param("hops", 2);
        let plan = latest::<Plan>(ctx.mind, "plan")?.map(|r| r.data);
        let verdicts: Vec<Graded> = latest::<Vec<Graded>>(ctx.mind, "verdicts")?
            .map(|r| r.data)
            .unwrap_or_default();
        let strips: Vec<Strip> = latest::<Vec<Strip>>(ctx.mind, "strips")?
            .map(|r| r.data)
            .unwrap_or_default();
        let tried: HashSet<String> = ctx
            .mind
            .read("loop.tried")?
            .and_then(|e| serde_json::from_value::<Vec<String>>(e.value).ok())
            .unwrap_or_default()
            .into_iter()
            .collect();
        let kept: Vec<&Graded> = verdicts.iter().filter(|g| g.verdict.kept()).collect();

        // Sub-queries with kept evidence.
        // Coverage is of what the question asks (the first plan's aspects), not of the
        // loop's own follow-up queries.
        let several = plan.as_ref().is_some_and(|p| p.task == "multi-aspect");
        let queries: Vec<String> = plan
            .map(|p| {
                if p.aspects.is_empty() {
                    p.queries
                } else {
                    p.aspects
                }
            })
            .unwrap_or_default();
        // A sub-query is covered by kept evidence it found; an aspect of a question about
        // several things also by a kept strip that holds most of its terms (found by the
        // question itself or another aspect).
        let mut aspects = Vec::new();
        let mut uncovered: Vec<&String> = Vec::new();
        for q in queries.iter().filter(|q| **q != question) {
            let mut covered = kept.iter().any(|g| &g.query == q);
            if several {
                let t = QueryTerms::new(engine, &collection, q)?;
                for s in &strips {
                    if covered {
                        break;
                    }
                    let about = format!("{} {}", s.title, s.text);
                    covered = t.coverage(&term_set(engine, &collection, &about)?) >= 0.5;
                }
                aspects.push(crate::crag::AspectCoverage {
                    aspect: q.clone(),
                    covered,
                    citations: vec![],
                });
            }
            if !covered {
                uncovered.push(q);
            }
        }
        let sub_total = queries.iter().filter(|q| **q != question).count();

        // Question terms the kept strips hold.
        let q = QueryTerms::new(engine, &collection, &question)?;
        let mut have: HashSet<String> = HashSet::new();
        for s in &strips {
            have.extend(term_set(engine, &collection, &s.text)?);
        }
        let term_cov = if kept.is_empty() {
            0.0
        } else {
            q.coverage(&have)
        };
        let completeness = if sub_total > 0 {
            0.5 * term_cov + 0.5 * (sub_total - uncovered.len()) as f32 / sub_total as f32
        } else {
            term_cov
        };
        // Kept evidence only grows from one iteration to the next, so what it covers
        // cannot shrink: follow-up queries that find nothing (this iteration's plan) do not
        // lower the completeness an earlier iteration measured.
        let completeness = latest::<Reflection>(ctx.mind, "report")?
            .filter(|r| r.iteration < iteration)
            .map_or(completeness, |r| completeness.max(r.data.completeness));
        // Missing words, as the user wrote them.
        let missing_terms: HashSet<String> = q.missing(&have).into_iter().take(4).collect();
        let mut missing_words: Vec<String> = Vec::new();
        for (t, s, e) in engine.query_terms(&collection, &question)? {
            let w = question[s..e].to_string();
            if missing_terms.contains(&t) && !missing_words.contains(&w) {
                missing_words.push(w);
            }
        }
        let mut gaps: Vec<String> = uncovered
            .iter()
            .map(|q| format!("no evidence for {q:?}"))
            .collect();
        if kept.is_empty() {
            gaps.push("no kept evidence at all".into());
        } else if !missing_words.is_empty() {
            gaps.push(format!(
                "nothing kept mentions: {}",
                missing_words.join(", ")
            ));
        }
        let sufficient = !kept.is_empty() && completeness >= target;

        let mut next: Vec<String> = Vec::new();
        if !sufficient {
            for u in &uncovered {
                next.push(keywords(u));
            }
            if kept.is_empty() {
                next.push(keywords(&question));
            } else {
                // Second hop: names the evidence brings that the question does not, with
                // the words still missing (what the hop should find out about the name).
                // What a hop finds is only kept if linked to kept evidence (see grade
                // and verify), so a loose hop cannot smuggle in an off-topic chunk.
                let focus = if missing_words.is_empty() {
                    keywords(&question)
                } else {
                    missing_words.join(" ")
                };
                let qlower = question.to_lowercase();
                let mut names: Vec<String> = Vec::new();
                for s in &strips {
                    for n in names_in(&s.text) {
                        if !qlower.contains(&n.to_lowercase()) && !names.contains(&n) {
                            names.push(n);
                        }
                    }
                }
                for n in names.into_iter().take(hops) {
                    next.push(format!("{n} {focus}"));
                }
            }
            next.retain(|n| !n.trim().is_empty() && !tried.contains(n));
            next.dedup();
        }
        let reason = if sufficient {
            format!(
                "completeness {completeness:.2} >= {target:.2} with {} kept chunks",
                kept.len()
            )
        } else if next.is_empty() {
            format!("completeness {completeness:.2} < {target:.2}, and nothing new to look for")
        } else {
            format!(
                "completeness {completeness:.2} < {target:.2}: {} follow-up queries",
                next.len()
            )
        };
        let r = Reflection {
            completeness,
            gaps,
            sufficient,
            next_queries: next,
            kept: kept.len(),
            reason: reason.clone(),
            aspects,
        };
        let key = write_rounded(ctx, "report", iteration, &r)?;
        Ok(Output::wrote(vec![key], reason))
    }
}

crate::register_tool!(ReflectTool);
