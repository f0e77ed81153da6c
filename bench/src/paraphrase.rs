//! `nc-bench paraphrase`: the data behind the answer cache's paraphrase threshold.
//!
//! A cached answer may be served for another wording of its question only when the
//! other wording has the same answer. SQuAD 2.0 gives both sides, written by people:
//! questions on the same paragraph with the same answer (one answer text holds the
//! other) are **positives** (serving the earlier report would be right: same answer,
//! same evidence); questions on the same paragraph whose answers differ (an unanswerable
//! question differs from every answerable one) are **negatives** (serving it would be
//! wrong). Pairs of the same article on different paragraphs with different answers are
//! counted apart: some are one question asked of two paragraphs ("How many Grammy
//! nominations does Beyoncé have?" answered as of two dates), which over one collection
//! would get one answer anyway. Each question is
//! embedded as the engine embeds queries (unit vectors: the cosine is their dot
//! product); for each threshold the run reports how many
//! positives and negatives reach it, with and without
//! [`neuralcore_app::paraphrase_compatible`] (question word, numbers and negation must
//! agree). Choose the threshold on the train split (`../shared/data/squad2-train`) and
//! report it on the dev split.
//!
//! `--squad FILE --model-dir D`

use std::collections::HashSet;
use std::path::PathBuf;

use neuralcore_core::{dot, Embedder};
use neuralcore_models::SentenceEmbedder;
use serde_json::{json, Value};

use crate::Result;

struct Question {
    text: String,
    article: usize,
    paragraph: usize,
    /// Normalized answer texts; empty when unanswerable.
    answers: HashSet<String>,
}

fn norm(s: &str) -> String {
    s.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !matches!(*w, "a" | "an" | "the"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn read(path: &PathBuf) -> Result<Vec<Question>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    let mut paragraph = 0;
    for (article, a) in v["data"].as_array().ok_or("no data[]")?.iter().enumerate() {
        for p in a["paragraphs"].as_array().ok_or("no paragraphs[]")? {
            paragraph += 1;
            for q in p["qas"].as_array().ok_or("no qas[]")? {
                let answers = if q["is_impossible"].as_bool().unwrap_or(false) {
                    HashSet::new()
                } else {
                    q["answers"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|a| a["text"].as_str().map(norm))
                        .filter(|a| !a.is_empty())
                        .collect()
                };
                out.push(Question {
                    text: q["question"]
                        .as_str()
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                    article,
                    paragraph,
                    answers,
                });
            }
        }
    }
    Ok(out)
}

/// Whether two questions have the same answer: one's answer text holds the other's
/// (annotators cut the same answer differently: "Dangerously in Love" and "Dangerously in
/// Love (2003)"); unanswerable questions have none.
fn same_answer(a: &Question, b: &Question) -> bool {
    a.answers.iter().any(|x| {
        b.answers
            .iter()
            .any(|y| x == y || x.contains(y.as_str()) || y.contains(x.as_str()))
    })
}

pub fn bench_paraphrase(args: &[String]) -> Result<()> {
    let (mut squad, mut model_dir) = (None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().ok_or(format!("{a} needs a value"))?;
        match a.as_str() {
            "--squad" => squad = Some(PathBuf::from(v)),
            "--model-dir" => model_dir = Some(PathBuf::from(v)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let squad = squad.ok_or("paraphrase needs --squad FILE")?;
    let qs = read(&squad)?;
    let e = SentenceEmbedder::load(&model_dir.ok_or("paraphrase needs --model-dir")?, "bench")
        .map_err(|e| e.to_string())?;
    let vectors: Vec<Vec<f32>> = qs
        .iter()
        .map(|q| e.embed_query(&q.text).map_err(|e| e.to_string()))
        .collect::<Result<_>>()?;
    // (cosine, compatible, i, j) of each positive and negative pair.
    let (mut pos, mut neg, mut far) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..qs.len() {
        for j in i + 1..qs.len() {
            let (a, b) = (&qs[i], &qs[j]);
            if a.article != b.article || norm(&a.text) == norm(&b.text) {
                continue;
            }
            let same = same_answer(a, b);
            let pair = || {
                (
                    dot(&vectors[i], &vectors[j]),
                    neuralcore_app::paraphrase_compatible(&a.text, &b.text),
                    i,
                    j,
                )
            };
            match (same, a.paragraph == b.paragraph) {
                (true, true) => pos.push(pair()),
                (false, true) => neg.push(pair()),
                (false, false) => far.push(pair()),
                (true, false) => {}
            }
        }
    }
    let file = squad.file_name().map(|f| f.to_string_lossy().to_string());
    for t in (80..=100).map(|t| t as f32 / 100.0) {
        let count = |v: &[(f32, bool, usize, usize)], guard: bool| {
            v.iter()
                .filter(|(c, ok, ..)| *c >= t && (*ok || !guard))
                .count()
        };
        // The closest negatives above the threshold with the guard, to read.
        let worst: Vec<String> = neg
            .iter()
            .filter(|(c, ok, ..)| t >= 0.9 && *c >= t && *ok)
            .take(3)
            .map(|&(_, _, i, j)| format!("{} | {}", qs[i].text, qs[j].text))
            .collect();
        println!(
            "{}",
            json!({"bench": "paraphrase", "file": file, "model": e.model_id(),
                "threshold": t, "positives": pos.len(), "negatives": neg.len(),
                "positives_matched": count(&pos, false), "negatives_matched": count(&neg, false),
                "positives_matched_guarded": count(&pos, true),
                "negatives_matched_guarded": count(&neg, true),
                "other_paragraph_pairs": far.len(),
                "other_paragraph_matched_guarded": count(&far, true),
                "recall_guarded": count(&pos, true) as f64 / pos.len().max(1) as f64,
                "false_matches_guarded_examples": worst})
        );
    }
    Ok(())
}
