//! `refine` (CRAG's decompose-then-recompose): kept chunks (CORRECT or VERIFIED) are
//! split into strips (sentences), each strip is scored against the question (and the
//! sub-query that found its chunk), the best are kept and put back in document order,
//! in `refine.strips`. With `--no-refine` every sentence of every kept chunk is kept.

use std::collections::{BTreeMap, HashSet};

use neuralcore_core::parse_doc_id;
use serde_json::json;

use crate::crag::{
    char_offset, latest, run_input, sentences, term_set, write_rounded, Evidence, Graded, QueryTerms,
    Strip,
};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Strip refinement.
pub struct RefineTool(ToolSpec);

impl Default for RefineTool {
    fn default() -> Self {
        RefineTool(ToolSpec {
            name: "refine",
            namespace: "refine",
            description: "splits kept chunks into strips, keeps the best, recomposes them in order",
            roles: &["refine"],
            reads: &["input.query", "*.verdicts", "loop.switches"],
            writes: &["strips"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "strips": {"type": "integer", "minimum": 1, "maximum": 200},
                    "min_relative": {"type": "number", "minimum": 0, "maximum": 1},
                    "type_miss": {"type": "number", "minimum": 0, "maximum": 1}}})
            },
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for RefineTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let (question, collection, switches, iteration) = run_input(ctx.mind)?;
        let verdicts: Vec<Graded> = latest::<Vec<Graded>>(ctx.mind, "verdicts")?
            .map(|r| r.data)
            .unwrap_or_default();
        let mut kept: Vec<&Graded> = verdicts.iter().filter(|g| g.verdict.kept()).collect();
        kept.sort_by(|a, b| b.score.total_cmp(&a.score));
        let engine = &ctx.services.engine;
        let cfg = &engine.config().control;
        let limit: usize = ctx.param("strips", cfg.strips);
        let min_rel: f32 = ctx.param("min_relative", 0.35);
        // Chosen on SQuAD 2.0 train (a conflict set derived from articles 1–10 and the
        // first 500 questions): 0.6 over 1.0 and 0.4.
        let type_miss: f32 = ctx.param("type_miss", 0.6);
        let wants = crate::values::expected;
        let mut terms: BTreeMap<String, QueryTerms> = BTreeMap::new();
        terms.insert(
            question.clone(),
            QueryTerms::new(engine, &collection, &question)?,
        );
        let mut strips: Vec<Strip> = Vec::new();
        for (rank, g) in kept.iter().enumerate() {
            ctx.check()?;
            if !terms.contains_key(&g.query) {
                terms.insert(g.query.clone(), QueryTerms::new(engine, &collection, &g.query)?);
            }
            let key = parse_doc_id(&g.doc)
                .ok_or_else(|| ToolError::Permanent(format!("malformed document id {:?}", g.doc)))?;
            let Some(chunk) = engine.store().chunk(key, g.ordinal)? else {
                continue;
            };
            let spans = sentences(&chunk.text);
            let sets: Vec<HashSet<String>> = spans
                .iter()
                .map(|&(s, e)| term_set(engine, &collection, &chunk.text[s..e]))
                .collect::<Result<_, _>>()?;
            // A question that asks for a date, a number or a name is answered by a
            // sentence that states one: the others only share its words.
            let want = wants(&g.query).or(wants(&question)).map(|kind| {
                let words = crate::values::words_of;
                (kind, words(&g.query), words(&question))
            });
            let asked: HashSet<&str> = [&question, &g.query]
                .iter()
                .filter_map(|q| terms.get(q.as_str()))
                .flat_map(|t| t.terms.iter().map(|x| x.0.as_str()))
                .collect();
            for (i, &(s, e)) in spans.iter().enumerate() {
                // A heading names a topic; it answers nothing.
                if is_heading(&chunk.text[s..e], &chunk.section) {
                    continue;
                }
                let mut window = sets[i].clone();
                if i > 0 {
                    window.extend(sets[i - 1].iter().cloned());
                }
                // Against the question first; a sub-query (a side, a hop) counts a little
                // less, so a strip that only matches a hop never outranks the question.
                let relevance = [(&question, 1.0f32), (&g.query, 0.8)]
                    .iter()
                    .filter_map(|(q, w)| terms.get(q.as_str()).map(|t| (t, w)))
                    .map(|(t, w)| w * t.coverage(&sets[i]).max(0.85 * t.coverage(&window)))
                    .fold(0.0f32, f32::max);
                // A sentence that only repeats the question's words adds nothing: the
                // answer is in what is new.
                let new = sets[i].iter().filter(|t| !asked.contains(t.as_str())).count();
                let novelty = new as f32 / sets[i].len().max(1) as f32;
                let mut score = relevance * (0.5 + 0.5 * (novelty / 0.3).min(1.0));
                if let Some((kind, by_query, by_question)) = &want {
                    let text = &chunk.text[s..e];
                    let offers = |asked| crate::values::offers(text, kind, asked);
                    if !offers(by_query) && !offers(by_question) {
                        score *= type_miss;
                    }
                }
                let base = chunk.span.0;
                strips.push(Strip {
                    evidence: Evidence::chunk(g.doc.clone(), g.ordinal),
                    title: g.title.clone(),
                    span: (
                        base + char_offset(&chunk.text, s),
                        base + char_offset(&chunk.text, e),
                    ),
                    text: chunk.text[s..e].to_string(),
                    score,
                    verdict: g.verdict,
                    chunk_rank: rank,
                });
            }
        }
        let total = strips.len();
        if !switches.no_refine && !strips.is_empty() {
            let max = strips.iter().map(|s| s.score).fold(0.0f32, f32::max);
            let mut order: Vec<usize> = (0..strips.len()).collect();
            order.sort_by(|&a, &b| strips[b].score.total_cmp(&strips[a].score));
            let keep: HashSet<usize> = order
                .into_iter()
                .filter(|&i| strips[i].score > 0.0 && strips[i].score >= min_rel * max)
                .take(limit)
                .collect();
            strips = strips
                .into_iter()
                .enumerate()
                .filter(|(i, _)| keep.contains(i))
                .map(|(_, s)| s)
                .collect();
        }
        // Recompose: chunks by rank, strips in document order within each.
        strips.sort_by_key(|a| (a.chunk_rank, a.span.0));
        let msg = format!("kept {} of {total} strips from {} chunks", strips.len(), kept.len());
        let key = write_rounded(ctx, "strips", iteration, &strips)?;
        Ok(Output::wrote(vec![key], msg))
    }
}

crate::register_tool!(RefineTool);

/// A markdown heading line, or a line that is the chunk's own section title.
fn is_heading(text: &str, section: &[String]) -> bool {
    let t = text.trim();
    t.starts_with('#') || section.iter().any(|h| h.trim() == t)
}
