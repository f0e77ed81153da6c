//! `verify`: each AMBIGUOUS chunk is checked against a second, independent source —
//! kept evidence from another document that names the chunk's subject (a link, as a
//! bridge paragraph of a multi-hop question has), a chunk of a *different* document in
//! the knowledge base that says the same thing (found by searching for the chunk's best
//! sentence), or a web page from a SearxNG
//! instance (`[web] searxng_url`), fetched, cleaned and graded like a chunk. Supported
//! → VERIFIED (kept); disputed (another document makes the same statement with another
//! value: both sides stay, and the answer states the conflict) → VERIFIED, with the
//! dispute in the reason; unsupported → DROPPED, with the reason.

use neuralcore_core::parse_doc_id;
use neuralcore_engine::{SearchMode, SearchOptions};
use serde_json::json;

use crate::crag::{
    compared_side, kept_texts, latest, linked_by, names_found, run_input, sentences,
    write_rounded, Graded, Verdict,
};
use crate::grader::Grader;
use crate::tool::{CostClass, Output, Tool, ToolContext, ToolError, ToolSpec};

/// Share of the claim's weighted terms a second source must hold to support it.
const AGREEMENT: f32 = 0.6;

/// Verification of AMBIGUOUS chunks.
pub struct VerifyTool(ToolSpec);

impl Default for VerifyTool {
    fn default() -> Self {
        VerifyTool(ToolSpec {
            name: "verify",
            namespace: "verify",
            description:
                "checks AMBIGUOUS chunks against a second source (another document, the web)",
            roles: &["verify"],
            reads: &["input.query", "*.verdicts", "loop.switches"],
            writes: &["verdicts"],
            params: || {
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "web": {"type": "boolean"},
                    "corroborate": {"type": "boolean"}}})
            },
            cost: CostClass::Expensive,
        })
    }
}

impl Tool for VerifyTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn run(&self, ctx: &ToolContext<'_>) -> Result<Output, ToolError> {
        let (question, collection, switches, iteration) = run_input(ctx.mind)?;
        let Some(mut verdicts) = latest::<Vec<Graded>>(ctx.mind, "verdicts")?.map(|r| r.data)
        else {
            return Ok(Output::skipped("no verdicts on the Mind"));
        };
        let pending: Vec<usize> = (0..verdicts.len())
            .filter(|&i| verdicts[i].verdict == Verdict::Ambiguous)
            .collect();
        if pending.is_empty() {
            return Ok(Output::skipped("no AMBIGUOUS chunk"));
        }
        let engine = &ctx.services.engine;
        let store = engine.store();
        let grader = Grader::new(engine, &collection);
        let use_web: bool = ctx.param("web", true) && !switches.skip_expensive;
        let corroborate: bool = ctx.param("corroborate", true);
        // Web passages graded against the question, fetched once for all chunks.
        let mut web: Vec<(String, String)> = Vec::new();
        let mut web_note = None;
        if use_web {
            if let Some(w) = &ctx.services.web {
                match w.search(&question) {
                    Ok(results) => {
                        for r in results {
                            let text = r.text.clone().unwrap_or_else(|| r.snippet.clone());
                            for p in neuralcore_web::passages(&text, 700) {
                                web.push((r.url.clone(), p));
                            }
                        }
                        let refs: Vec<&str> = web.iter().map(|w| w.1.as_str()).collect();
                        let scored = grader.score(&question, &refs, &[], &[])?;
                        let mut keep = Vec::new();
                        for (w, s) in web.into_iter().zip(scored) {
                            if s.score >= grader.lower {
                                keep.push(w);
                            }
                        }
                        web = keep;
                    }
                    Err(e) => web_note = Some(format!("web search failed: {e}")),
                }
            }
        }
        // Kept evidence of other documents, for links: a kept chunk that names this
        // chunk's subject (its document's title) vouches that it is on topic — the
        // bridge paragraph of a multi-hop question.
        let kept = kept_texts(store, &verdicts, |g| g.verdict.kept())?;
        let sides = crate::planner::comparison_sides(&question);
        let (mut verified, mut dropped, mut revived) = (0, 0, 0);
        for &i in &pending {
            ctx.check()?;
            let g = verdicts[i].clone();
            let key = parse_doc_id(&g.doc).ok_or_else(|| {
                ToolError::Permanent(format!("malformed document id {:?}", g.doc))
            })?;
            let Some(chunk) = store.chunk(key, g.ordinal)? else {
                continue;
            };
            // The claim: the chunk's sentence that best answers the question.
            let best = grader.features(&question, &[chunk.text.as_str()], &[], &[])?[0].1;
            let claim = sentences(&chunk.text)
                .get(best)
                .map(|&(s, e)| chunk.text[s..e].to_string())
                .unwrap_or_else(|| chunk.text.clone());
            let mut outcome: Option<(Verdict, String)> = None;
            let subject = crate::crag::subject_of(&g.title);
            if subject.chars().count() >= 4 {
                if let Some((t, subject)) = linked_by(&kept, &g) {
                    outcome = Some((
                        Verdict::Verified,
                        format!("linked: kept evidence from {t:?} names {subject:?}"),
                    ));
                }
                // A comparison names its sides: a chunk about one of them is what the
                // user asked for.
                if outcome.is_none() {
                    if let Some(subject) = compared_side(sides.as_ref(), &g.title) {
                        outcome = Some((
                            Verdict::Verified,
                            format!("linked: the question compares {subject:?}"),
                        ));
                    }
                }
            }
            // The other way round: a chunk that names what CORRECT evidence of another
            // document is about, when the question does not name it, answers the next
            // hop. Only CORRECT evidence counts (no pending chunk is CORRECT, so settling
            // them changes nothing here), so links do not chain through verified ones.
            if outcome.is_none() {
                if let Some((t, found)) = names_found(&verdicts, &g, &chunk.text, &question) {
                    outcome = Some((
                        Verdict::Verified,
                        format!(
                            "linked: names {found:?}, which kept evidence from {t:?} is about \
                             and the question does not name"
                        ),
                    ));
                }
            }
            if outcome.is_none() && corroborate {
                let hits = engine
                    .search_keys(
                        &collection,
                        &claim,
                        10,
                        SearchOptions {
                            mode: Some(SearchMode::Keyword),
                            rerank: Some(0),
                        },
                    )?
                    .hits;
                for h in hits.into_iter().filter(|h| h.doc != key) {
                    let Some(other) = store.chunk(h.doc, h.ordinal)? else {
                        continue;
                    };
                    let (agree, agree_sentence) = grader
                        .features(&claim, &[other.text.as_str()], &[], &[])?
                        .remove(0);
                    let other_sent = sentences(&other.text)
                        .get(agree_sentence)
                        .map(|&(s, e)| other.text[s..e].to_string())
                        .unwrap_or_default();
                    // A disputing sentence shares the claim's words but its value, and a
                    // value is a rare term: weighted coverage would miss the dispute.
                    let disputes = crate::conflict::disagreement(&claim, &other_sent).is_some();
                    if agree.best_window < AGREEMENT && !disputes {
                        continue;
                    }
                    // On topic: as graded in this run when it was (with its embedding
                    // cosine and rank), else scored now without them.
                    let other_id = neuralcore_core::doc_id(h.doc);
                    let graded = verdicts
                        .iter()
                        .position(|v| v.doc == other_id && v.ordinal == h.ordinal);
                    let on_topic = match graded {
                        Some(j) => verdicts[j].score,
                        None => {
                            grader
                                .score(&question, &[other.text.as_str()], &[], &[])?
                                .remove(0)
                                .score
                        }
                    };
                    // A chunk this run retrieved that makes the claim's statement with
                    // another value is as much on topic as the claim: its lower grade
                    // comes from its rank and wording, and dropping it would leave one
                    // side of the disagreement to be stated as fact.
                    // (Not far below, though: a paraphrase with other figures about
                    // something else is no side of this statement.)
                    let partner = disputes && graded.is_some() && on_topic >= grader.lower / 2.0;
                    if on_topic < grader.lower && !partner {
                        continue;
                    }
                    let title = store
                        .document(&collection, h.doc)?
                        .map(|d| d.title)
                        .unwrap_or_default();
                    let id = format!("{}#{}", neuralcore_core::doc_id(h.doc), h.ordinal);
                    // Another document making the same statement with another value: the
                    // chunk is on topic and disputed; both sides stay, and the answer
                    // states the conflict (crate::conflict).
                    outcome = Some(
                        if let Some(d) = crate::conflict::disagreement(&claim, &other_sent) {
                            // The other side stays too, when it was graded out or
                            // dropped (a pending one is checked in its turn), settled in
                            // this iteration.
                            if let Some(j) = graded.filter(|&j| {
                                matches!(verdicts[j].verdict, Verdict::Incorrect | Verdict::Dropped)
                            }) {
                                let this = format!("{}#{}", g.doc, g.ordinal);
                                if pending.contains(&j) {
                                    dropped -= 1;
                                }
                                verdicts[j].verdict = Verdict::Verified;
                                verdicts[j].iteration = iteration;
                                verdicts[j].reason = format!(
                                    "{}; disputes {:?} ({this}): the same statement with another {} ({:?} against {:?})",
                                    verdicts[j].reason, g.title, d.about, d.theirs, d.mine
                                );
                                revived += 1;
                            }
                            (
                            Verdict::Verified,
                            format!(
                                "disputed by {title:?} ({id}): the same statement with another {} ({:?} against {:?})",
                                d.about, d.mine, d.theirs
                            ),
                        )
                        } else {
                            (
                            Verdict::Verified,
                            format!(
                                "corroborated by another document, {title:?} ({id}): agreement {:.2}",
                                agree.best_window
                            ),
                        )
                        },
                    );
                    break;
                }
            }
            if outcome.is_none() && !web.is_empty() {
                let refs: Vec<&str> = web.iter().map(|w| w.1.as_str()).collect();
                let agree = grader.features(&claim, &refs, &[], &[])?;
                if let Some((j, (a, _))) = agree
                    .iter()
                    .enumerate()
                    .max_by(|x, y| x.1 .0.best_window.total_cmp(&y.1 .0.best_window))
                {
                    if a.best_window >= AGREEMENT {
                        outcome = Some((
                            Verdict::Verified,
                            format!(
                                "supported by the web: {} (agreement {:.2})",
                                web[j].0, a.best_window
                            ),
                        ));
                    }
                }
            }
            let (v, why) = outcome.unwrap_or((
                Verdict::Dropped,
                "unsupported: no other document or web page says the same".to_string(),
            ));
            if v == Verdict::Verified {
                verified += 1;
            } else {
                dropped += 1;
            }
            verdicts[i].verdict = v;
            verdicts[i].reason = format!("{}; {why}", g.reason);
        }
        let key = write_rounded(ctx, "verdicts", iteration, &verdicts)?;
        let mut msg = format!("{verified} verified, {dropped} dropped");
        if revived > 0 {
            msg.push_str(&format!("; {revived} graded lower kept as the other side of a dispute"));
        }
        if let Some(n) = &web_note {
            msg.push_str(&format!("; {n}"));
        }
        Ok(Output {
            degraded: web_note,
            ..Output::wrote(vec![key], msg)
        })
    }
}

crate::register_tool!(VerifyTool);
