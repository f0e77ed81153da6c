//! `grade` (CRAG): every retrieved chunk gets a verdict — CORRECT, AMBIGUOUS or
//! INCORRECT — with the evaluator's score and the reason, in `grade.verdicts` (earlier
//! iterations' verdicts are carried over; a chunk is graded once). A chunk found by a
//! sub-query is graded against that sub-query and against the question, and keeps the
//! better score. With `--no-grade` every chunk is kept (CORRECT, "grading off").

use std::collections::{BTreeMap, HashMap, HashSet};

use neuralcore_core::parse_doc_id;
use serde_json::json;

use crate::crag::{
    compared_side, kept_texts, latest, linked_by, run_input, write_rounded, Candidate, Graded,
    Verdict,
};
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
        // A chunk is graded once per sub-query: found again by a new sub-query (a second
        // hop, a rewrite), it is graded against that one too and keeps the better verdict
        // — a bridge paragraph scores low against the question and high against the hop.
        let mut known: HashMap<(String, u32), usize> = verdicts
            .iter()
            .enumerate()
            .map(|(i, g)| ((g.doc.clone(), g.ordinal), i))
            .collect();
        let mut graded_for: HashSet<(String, u32, String)> = verdicts
            .iter()
            .map(|g| (g.doc.clone(), g.ordinal, g.query.clone()))
            .collect();
        let mut by_query: BTreeMap<String, Vec<Candidate>> = BTreeMap::new();
        for c in cands {
            let upgradable = known
                .get(&(c.doc.clone(), c.ordinal))
                .is_none_or(|&i| !verdicts[i].verdict.kept());
            if upgradable && graded_for.insert((c.doc.clone(), c.ordinal, c.query.clone())) {
                by_query.entry(c.query.clone()).or_default().push(c);
            }
        }
        let engine = &ctx.services.engine;
        let grader = Grader::new(engine, &collection);
        let llm = ctx
            .services
            .llm
            .as_deref()
            .filter(|_| engine.config().grade.evaluator == "llm" && !switches.skip_expensive);
        let mut spent = crate::llm_judge::Spent::default();
        let (mut llm_failures, mut last_llm_error) = (0usize, None::<String>);
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
            // Reflection's follow-ups (iteration 2 on) are loose: what only they find
            // stays AMBIGUOUS at best, and verification keeps it only when kept evidence
            // links to it. The question itself, and the planner's first sub-queries,
            // grade fully.
            let follow_up = query != question && iteration > 1;
            let mut capped = vec![follow_up; scored.len()];
            if query != question {
                let again = grader.score(&question, &refs, &cos(&question), &ranks)?;
                for ((s, a), cap) in scored.iter_mut().zip(again).zip(capped.iter_mut()) {
                    if a.score >= s.score || grader.verdict(a.score) == Verdict::Correct {
                        *s = a;
                        *cap = false;
                    }
                }
            }
            // The LLM judge, when chosen: yes / partly / no per passage; a failure keeps the
            // feature evaluator's verdict for that passage, saying so.
            let mut judged: Vec<Option<(Verdict, String)>> = vec![None; scored.len()];
            if let Some(client) = llm.filter(|_| !switches.no_grade) {
                for (i, (text, s)) in texts.iter().zip(scored.iter_mut()).enumerate() {
                    ctx.check()?;
                    let (r, used) = crate::llm_judge::grade(client, &query, text);
                    spent += used;
                    match r {
                        Ok(score) => {
                            s.score = score;
                            let v = match score {
                                x if x >= 0.9 => Verdict::Correct,
                                x if x >= 0.5 => Verdict::Ambiguous,
                                _ => Verdict::Incorrect,
                            };
                            judged[i] = Some((v, format!("LLM grader: {v:?} ({score:.2})")));
                        }
                        Err(e) => {
                            llm_failures += 1;
                            last_llm_error = Some(e);
                        }
                    }
                }
            }
            for ((((c, s), title), cap), judged) in kept
                .into_iter()
                .zip(scored)
                .zip(titles)
                .zip(capped)
                .zip(judged)
            {
                let (verdict, reason) = if let (Some(j), false) = (judged, switches.no_grade) {
                    if cap && j.0 == Verdict::Correct {
                        (Verdict::Ambiguous, format!("{}; found only by a follow-up", j.1))
                    } else {
                        j
                    }
                } else if switches.no_grade {
                    (
                        Verdict::Correct,
                        format!("grading off (--no-grade); {}", grader.reason(&s)),
                    )
                } else if cap && grader.verdict(s.score) == Verdict::Correct {
                    (
                        Verdict::Ambiguous,
                        format!(
                            "{}; found only by the follow-up {:?}: needs a link to kept evidence",
                            grader.reason(&s),
                            c.query
                        ),
                    )
                } else {
                    (grader.verdict(s.score), grader.reason(&s))
                };
                counts[match verdict {
                    Verdict::Correct => 0,
                    Verdict::Ambiguous => 1,
                    _ => 2,
                }] += 1;
                let key = (c.doc.clone(), c.ordinal);
                if let Some(&i) = known.get(&key) {
                    let old = &mut verdicts[i];
                    if s.score > old.score || rank_of(verdict) > rank_of(old.verdict) {
                        old.reason = format!(
                            "{reason} (regraded for {:?}; was {:?} {:.2})",
                            c.query, old.verdict, old.score
                        );
                        old.verdict = verdict;
                        old.score = s.score;
                        old.query = c.query;
                        old.iteration = iteration;
                    }
                    continue;
                }
                known.insert(key, verdicts.len());
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
        // A chunk the scores rejected, about a subject that kept evidence from another
        // document names (the bridge of a multi-hop question) or about a side of the
        // comparison the question asks for, is not rejected outright: it goes to
        // verification, which checks that link.
        if !switches.no_grade {
            let kept = kept_texts(store, &verdicts, |g| g.verdict == Verdict::Correct)?;
            let sides = crate::planner::comparison_sides(&question);
            for g in verdicts
                .iter_mut()
                .filter(|g| g.verdict == Verdict::Incorrect && g.iteration == iteration)
            {
                let why = match linked_by(&kept, g) {
                    Some((t, subject)) => Some(format!("kept evidence from {t:?} names {subject:?}")),
                    None => compared_side(sides.as_ref(), &g.title)
                        .map(|side| format!("the question compares {side:?}")),
                };
                if let Some(why) = why {
                    let reason = format!("{}; but {why}", g.reason);
                    g.verdict = Verdict::Ambiguous;
                    g.reason = reason;
                    counts[1] += 1;
                    counts[2] = counts[2].saturating_sub(1);
                }
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
            if llm.is_none() {
                msg.push_str(&format!("; {n}"));
            }
        }
        if llm.is_some() {
            msg.push_str("; LLM grader");
        } else if engine.config().grade.evaluator == "llm" {
            msg.push_str("; grade.evaluator is llm but no LLM is available: features used");
        }
        if let Some(e) = &last_llm_error {
            msg.push_str(&format!(
                "; the LLM grader failed on {llm_failures} chunk(s), features used for them ({e})"
            ));
        }
        let mut out = Output::wrote(vec![key], msg);
        out.tokens = spent.tokens;
        out.cost_usd = spent.usd;
        out.degraded = last_llm_error.map(|e| {
            format!("the LLM grader failed on {llm_failures} chunk(s), features used ({e})")
        });
        Ok(out)
    }
}

/// Order of verdicts for upgrades (a later, better grade replaces an earlier one).
fn rank_of(v: Verdict) -> u8 {
    match v {
        Verdict::Incorrect | Verdict::Dropped => 0,
        Verdict::Ambiguous => 1,
        Verdict::Verified => 2,
        Verdict::Correct => 3,
    }
}

crate::register_tool!(GradeTool);
