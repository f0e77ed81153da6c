//! `check`: the claim-support check. Every answer sentence must be supported by the
//! evidence it cites: the share of the sentence's weighted terms found in the cited
//! text (or the cross-encoder's score of the pair, when that model is present). A
//! sentence below `loop.support_threshold`, or citing nothing, is flagged unsupported
//! (with `grade.evaluator = "llm"` and an LLM, the LLM judges each sentence instead);
//! and left out of the answer text; so is a sentence stating a figure (a number) that
//! none of its cited evidence holds (support 0: "completed in 1925" is not supported by
//! "completed in 1889", however many words they share). An LLM answer left with no
//! supported sentence degrades to the extractive answer from the kept evidence (checked
//! the same way); an answer still without one becomes an abstention. Writes
//! `check.answer`.

use std::collections::HashSet;

use serde_json::json;

use crate::crag::{latest, numbers, run_input, term_set, write_rounded, Answer, QueryTerms};
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Claim-support check.
pub struct CheckTool(ToolSpec);

impl Default for CheckTool {
    fn default() -> Self {
        CheckTool(ToolSpec {
            name: "support_check",
            namespace: "check",
            description: "checks that every answer sentence is supported by the evidence it cites",
            roles: &["check"],
            reads: &["*.answer"],
            writes: &["answer"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "threshold": {"type": "number", "minimum": 0, "maximum": 1}}})
            },
            cost: CostClass::Cheap,
        })
    }
}

impl Tool for CheckTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let (_, collection, switches, iteration) = run_input(ctx.mind)?;
        let Some(mut a) = latest::<Answer>(ctx.mind, "answer")?.map(|r| r.data) else {
            return Ok(Output::skipped("no answer on the Mind"));
        };
        if !matches!(a.method.as_str(), "extractive" | "llm") {
            return Ok(Output::skipped(format!(
                "a {} answer cites nothing to check",
                a.method
            )));
        }
        let engine = &ctx.services.engine;
        let threshold: f32 = ctx.param("threshold", engine.config().control.support_threshold);
        let cross = engine.reranker_status().ok();
        // The LLM judge when the LLM evaluator is chosen (and time allows); the lexical or
        // cross-encoder check for any sentence it fails on.
        let judge = ctx
            .services
            .llm
            .as_deref()
            .filter(|_| engine.config().grade.evaluator == "llm" && !switches.skip_expensive);
        let mut spent = crate::llm_judge::Spent::default();
        let mut judge_error = None;
        // Scores every sentence of `a` against what it cites; how many are unsupported.
        let mut check = |a: &mut Answer| -> Result<usize, ToolError> {
            let mut flagged = 0;
            for s in &mut a.sentences {
                let cited: Vec<&str> = s
                    .citations
                    .iter()
                    .filter_map(|n| a.citations.iter().find(|c| c.n == *n))
                    .map(|c| c.text.as_str())
                    .collect();
                let mut judged = None;
                if let Some(client) = judge.filter(|_| !cited.is_empty()) {
                    let (r, used) = crate::llm_judge::supports(client, &s.text, &cited.join("\n"));
                    spent += used;
                    match r {
                        Ok(v) => judged = Some(v),
                        Err(e) => judge_error = Some(e),
                    }
                }
                let support = if cited.is_empty() {
                    0.0
                } else if let Some(v) = judged {
                    v
                } else if let Some(r) = &cross {
                    r.score(&s.text, &cited)
                        .map_err(|e| ToolError::Transient(e.to_string()))?
                        .into_iter()
                        .fold(0.0f32, f32::max)
                } else {
                    let q = QueryTerms::new(engine, &collection, &s.text)?;
                    let mut best = 0.0f32;
                    for c in &cited {
                        best = best.max(q.coverage(&term_set(engine, &collection, c)?));
                    }
                    // A sentence with no telling term (e.g. "Yes.") is judged by its citation.
                    if q.terms.is_empty() {
                        1.0
                    } else {
                        best
                    }
                };
                // A figure the evidence does not state is not supported by it.
                let have: HashSet<String> = cited.iter().flat_map(|c| numbers(c)).collect();
                let support = if numbers(&s.text).is_subset(&have) {
                    support
                } else {
                    0.0
                };
                s.support = Some(support);
                s.supported = support >= threshold;
                if !s.supported {
                    flagged += 1;
                }
            }
            Ok(flagged)
        };
        let mut flagged = check(&mut a)?;
        if !a.sentences.iter().any(|s| s.supported) {
            let why = format!(
                "no sentence of the {} answer is supported by the evidence it cites",
                a.method
            );
            // An LLM draft the evidence does not bear out degrades to the extractive
            // answer from the same kept evidence (checked the same way), as an LLM that
            // fails does; the engine abstains only when that is unsupported too.
            let mut fallback = None;
            if a.method == "llm" {
                if let Some(mut e) = super::tool_generate::extractive_from_kept(ctx, &collection)? {
                    let n = check(&mut e)?;
                    if e.sentences.iter().any(|s| s.supported) {
                        e.note = Some(format!("{why}; degraded to an extractive answer"));
                        e.tokens += a.tokens;
                        e.cost_usd += a.cost_usd;
                        fallback = Some((e, n));
                    }
                }
            }
            match fallback {
                Some((e, n)) => {
                    a = e;
                    flagged = n;
                }
                None => {
                    a.note = Some(why);
                    a.method = "abstain".into();
                }
            }
        }
        let mut msg = format!("{} sentences, {flagged} unsupported", a.sentences.len());
        if judge.is_some() {
            msg.push_str("; LLM judge");
        }
        if let Some(e) = judge_error {
            msg.push_str(&format!("; the LLM judge failed, lexical check used ({e})"));
        }
        let key = write_rounded(ctx, "answer", iteration, &a)?;
        let mut out = Output::wrote(vec![key], msg);
        out.tokens = spent.tokens;
        out.cost_usd = spent.usd;
        Ok(out)
    }
}

crate::register_tool!(CheckTool);

#[cfg(test)]
mod tests {
    use crate::crag::numbers;

    #[test]
    fn numbers_are_found_without_separators_or_sentence_ends() {
        let n = numbers("It is 21,196 km long, built from 1889 to 1.5 years.");
        let want: Vec<&str> = vec!["21196", "1889", "1.5"];
        assert_eq!(n, want.into_iter().map(String::from).collect());
        assert!(numbers("No figures here.").is_empty());
    }
}
