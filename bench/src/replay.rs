//! `nc-bench cache-replay`: a mixed workload of SciFact's claims and SQuAD 2.0's
//! questions, each asked of its own collection, with 30% repeats and 10% paraphrases of
//! earlier ones, replayed through the application core with the cache on and off: hit
//! ratio and mean latency, overall and per kind of ask.
//!
//! The replay is drawn slot by slot: 30% a repeat of an earlier ask (the same text),
//! 10% a paraphrase of one, else the next fresh question (SciFact and SQuAD in turn).
//! Half the paraphrases (while an earlier SQuAD question has one) are **another
//! question people wrote on the same paragraph with the same answer** (the `nc-bench
//! paraphrase` positives), the others a **surface rewording** (case, end punctuation,
//! articles, `what is` ↔ `what's`). With the default `[cache] answer_paraphrase = 0`,
//! surface rewordings share the answer's normalized key and people's paraphrases are
//! asked afresh (they reuse only what their operations share).
//!
//! Runs in the order on, off, off, on (an LLM server's own prompt cache favours whichever
//! run comes second), after an untimed pass with the cache off when there is an LLM (the
//! server's cold start); each on run starts from an empty cache. Every answer of an on run
//! is compared with the off run's answer to the same slot: a difference not explained
//! by a budget cutting one of them short is reported (`answers_differing`).
//!
//! `--data-dir D --collection C --queries Q --squad FILE [-n N] [--llm URL --llm-model
//! NAME]`: the data dir must hold SciFact's collection `C`, ingested; SQuAD's passages
//! are ingested into `bench-squad2` on first use. `-n` fresh questions of each set.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use neuralcore_app::{App, AskOptions, Tenant};
use neuralcore_engine::{ColdTierKind, HotTierKind};
use serde_json::json;

use crate::workload::{open_app, Workload};

const SQUAD_COLLECTION: &str = "bench-squad2";

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Kind {
    Fresh,
    Repeat,
    Surface,
    Human,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Fresh => "fresh",
            Kind::Repeat => "repeat",
            Kind::Surface => "paraphrase_surface",
            Kind::Human => "paraphrase_human",
        }
    }
}

/// One ask of the replay.
struct Slot<'a> {
    text: String,
    collection: &'a str,
    kind: Kind,
}

struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

/// A rewording of `q` in case, end punctuation, articles or a contraction only.
fn surface(q: &str, variant: usize) -> String {
    let q = q.trim();
    let lower_first = |s: &str| {
        let mut c = s.chars();
        c.next()
            .map(|f| f.to_lowercase().chain(c).collect())
            .unwrap_or_default()
    };
    let v = match variant % 3 {
        0 => lower_first(q.trim_end_matches(['?', '.'])),
        1 if q.starts_with("What is ") => q.replacen("What is ", "What's ", 1),
        1 if q.contains(" the ") => q.replacen(" the ", " ", 1),
        _ => q.to_uppercase(),
    };
    if v == q {
        format!("{q} ")
    } else {
        v
    }
}

fn norm(s: &str) -> String {
    neuralcore_app::normalized_question(s)
}

/// One answerable SQuAD question per paragraph (one that has people's paraphrases when
/// the paragraph has any), in dataset order, with its paraphrases: the other questions
/// on its paragraph with the same answer (one answer text holds the other) and another
/// wording. One per paragraph, so no paraphrase is also asked as a fresh question.
fn squad_questions(set: &neuralcore_eval::QaSet) -> Vec<(String, Vec<String>)> {
    let answers = |q: &neuralcore_eval::QaQuestion| -> HashSet<String> {
        q.answers.iter().map(|a| norm(a)).collect()
    };
    let qs = &set.questions;
    let all: Vec<(&neuralcore_eval::QaQuestion, Vec<String>)> = qs
        .iter()
        .filter(|q| q.answerable)
        .map(|q| {
            let (mine, text) = (answers(q), norm(&q.question));
            let paraphrases = qs
                .iter()
                .filter(|o| o.answerable && o.passages.first() == q.passages.first())
                .filter(|o| norm(&o.question) != text)
                .filter(|o| {
                    answers(o).iter().any(|y| {
                        mine.iter()
                            .any(|x| x == y || x.contains(y.as_str()) || y.contains(x.as_str()))
                    })
                })
                .map(|o| o.question.clone())
                .collect();
            (q, paraphrases)
        })
        .collect();
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for (q, _) in &all {
        let Some(passage) = q.passages.first() else {
            continue;
        };
        if !seen.insert(passage) {
            continue;
        }
        let same = || {
            all.iter()
                .filter(|(o, _)| o.passages.first() == Some(passage))
        };
        let (best, paraphrases) = same()
            .find(|(_, p)| !p.is_empty())
            .or_else(|| same().next())
            .expect("the paragraph's first question");
        out.push((best.question.clone(), paraphrases.clone()));
    }
    out
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

pub fn bench_replay(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let (mut squad, mut llm, mut llm_model) =
        (None::<PathBuf>, None::<String>, "smollm2".to_string());
    for (a, v) in &w.rest {
        match a.as_str() {
            "--squad" => squad = Some(v.into()),
            "--llm" => llm = Some(v.clone()),
            "--llm-model" => llm_model = v.clone(),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let squad = squad.ok_or("cache-replay needs --squad FILE (SQuAD 2.0 json)")?;
    let isa = neuralcore_models::isa().name();
    let scifact = w.queries(w.n)?;
    let set = neuralcore_eval::load_qa(&squad).map_err(|e| e.to_string())?;
    let squad_qs: Vec<(String, Vec<String>)> =
        squad_questions(&set).into_iter().take(w.n).collect();
    let config = w.cache_config(llm.as_deref().map(|u| (u, llm_model.as_str())));
    let scifact_collection = w.collection.as_str();
    let open = |config| open_app(&w.data_dir, config, &[scifact_collection, SQUAD_COLLECTION]);
    let tenant = Tenant::default_tenant();
    {
        // SQuAD's passages, once per data dir.
        let app = App::open(&w.data_dir, config.clone(), Default::default())
            .map_err(|e| e.to_string())?;
        if app.engine().collection(SQUAD_COLLECTION).is_err() {
            let corpus = w.data_dir.join(format!("{SQUAD_COLLECTION}.jsonl"));
            let mut out = Vec::new();
            neuralcore_eval::write_corpus_jsonl(&set, &mut out).map_err(|e| e.to_string())?;
            std::fs::write(&corpus, out).map_err(|e| e.to_string())?;
            let s = app
                .ingest(&tenant, &[corpus], SQUAD_COLLECTION, &mut ())
                .map_err(|e| e.to_string())?;
            eprintln!(
                "ingested {} SQuAD passages into {SQUAD_COLLECTION}",
                s.ingested
            );
        }
    }

    // The replay: fresh questions in turn from each set, with repeats and paraphrases.
    let mut fresh: Vec<(String, &str, Vec<String>)> = Vec::new();
    for i in 0..w.n {
        if let Some(q) = scifact.get(i) {
            fresh.push((q.clone(), scifact_collection, Vec::new()));
        }
        if let Some((q, p)) = squad_qs.get(i) {
            fresh.push((q.clone(), SQUAD_COLLECTION, p.clone()));
        }
    }
    let mut rng = Lcg(23);
    let mut slots: Vec<Slot> = Vec::new();
    // Indexes into `fresh` of the questions asked so far.
    let mut asked: Vec<usize> = Vec::new();
    let mut fresh_iter = 0..fresh.len();
    loop {
        let r = rng.next(10);
        if !asked.is_empty() && r < 3 {
            let (q, c, _) = &fresh[asked[rng.next(asked.len())]];
            slots.push(Slot {
                text: q.clone(),
                collection: c,
                kind: Kind::Repeat,
            });
        } else if !asked.is_empty() && r == 3 {
            // Half of them people's paraphrases, while an earlier question has any.
            let with_people: Vec<usize> = asked
                .iter()
                .copied()
                .filter(|&i| !fresh[i].2.is_empty())
                .collect();
            let (text, c, kind) = if !with_people.is_empty() && rng.next(2) == 0 {
                let (_, c, people) = &fresh[with_people[rng.next(with_people.len())]];
                let text = people[rng.next(people.len())].clone();
                // The same paraphrase a second time is a repeat of it.
                let seen = slots.iter().any(|s| norm(&s.text) == norm(&text));
                (text, c, if seen { Kind::Repeat } else { Kind::Human })
            } else {
                let (q, c, _) = &fresh[asked[rng.next(asked.len())]];
                (surface(q, rng.next(3)), c, Kind::Surface)
            };
            slots.push(Slot {
                text,
                collection: c,
                kind,
            });
        } else {
            let Some(i) = fresh_iter.next() else { break };
            asked.push(i);
            let (q, c, _) = &fresh[i];
            slots.push(Slot {
                text: q.clone(),
                collection: c,
                kind: Kind::Fresh,
            });
        }
    }

    // On, off, off, on.
    let n = slots.len();
    let mut on_ms = vec![Vec::new(); n];
    let mut off_ms = vec![Vec::new(); n];
    let mut hits = vec![0usize; n];
    let mut answers_on: Vec<Vec<(String, bool)>> = vec![Vec::new(); n];
    let mut answers_off: Vec<Vec<(String, bool)>> = vec![Vec::new(); n];
    // Each run's mean, in run order. With an LLM, a first pass with the cache off is not
    // timed: the first run of a replay would otherwise pay the server's cold start and
    // its empty prompt cache (measured: 5.0 s a mean ask against 2.3 s for the same
    // replay's last on run).
    let mut run_means = Vec::new();
    let passes: &[Option<bool>] = if llm.is_some() {
        &[None, Some(true), Some(false), Some(false), Some(true)]
    } else {
        &[Some(true), Some(false), Some(false), Some(true)]
    };
    for &pass in passes {
        let (on, timed) = (pass.unwrap_or(false), pass.is_some());
        let mut c = config.clone();
        if !on {
            c.cache.hot = HotTierKind::Off;
            c.cache.cold = ColdTierKind::Off;
        }
        let app = open(c)?;
        app.engine().cache().clear();
        for (i, s) in slots.iter().enumerate() {
            let opts = AskOptions {
                collection: s.collection.to_string(),
                ..Default::default()
            };
            let t = Instant::now();
            let r = app
                .ask(&tenant, &format!("bench-r{i}"), &s.text, &opts, false)
                .map_err(|e| e.to_string())?;
            let took = t.elapsed().as_secs_f64() * 1e3;
            if !timed {
                continue;
            }
            // A run a budget cut short is not compared.
            let whole = r.budget.skipped.is_empty() && r.failures.is_empty();
            if on {
                on_ms[i].push(took);
                hits[i] += usize::from(r.cached.is_some());
                answers_on[i].push((r.answer, whole));
            } else {
                off_ms[i].push(took);
                answers_off[i].push((r.answer, whole));
            }
        }
        if !timed {
            continue;
        }
        let this = if on { &on_ms } else { &off_ms };
        let run: Vec<f64> = this.iter().filter_map(|v| v.last().copied()).collect();
        run_means.push(json!({"cache": if on { "on" } else { "off" }, "mean_ms": mean(&run)}));
        app.engine().cache().clear();
    }
    let mut differing: BTreeMap<&str, usize> = BTreeMap::new();
    for i in 0..n {
        for (a, b) in answers_on[i].iter().zip(&answers_off[i]) {
            if a.1 && b.1 && a.0 != b.0 {
                *differing.entry(slots[i].kind.name()).or_default() += 1;
                eprintln!(
                    "differs ({}): {:?}\n  on:  {:.160}\n  off: {:.160}",
                    slots[i].kind.name(),
                    slots[i].text,
                    a.0,
                    b.0
                );
            }
        }
    }
    let mut per_kind = BTreeMap::new();
    for kind in [Kind::Fresh, Kind::Repeat, Kind::Surface, Kind::Human] {
        let idx: Vec<usize> = (0..n).filter(|&i| slots[i].kind == kind).collect();
        let on: Vec<f64> = idx.iter().flat_map(|&i| on_ms[i].clone()).collect();
        let off: Vec<f64> = idx.iter().flat_map(|&i| off_ms[i].clone()).collect();
        let h: usize = idx.iter().map(|&i| hits[i]).sum();
        per_kind.insert(
            kind.name(),
            json!({"asks": idx.len(), "answer_hits": h,
                "hit_ratio": h as f64 / on.len().max(1) as f64,
                "on_mean_ms": mean(&on), "off_mean_ms": mean(&off),
                "mean_speedup": mean(&off) / mean(&on)}),
        );
    }
    let all_on: Vec<f64> = on_ms.iter().flatten().copied().collect();
    let all_off: Vec<f64> = off_ms.iter().flatten().copied().collect();
    let total_hits: usize = hits.iter().sum();
    println!(
        "{}",
        json!({"bench": "cache-replay", "isa": isa, "asks": n, "runs_each": 2,
            "sets": {"scifact": scifact_collection, "squad2": SQUAD_COLLECTION},
            "llm": llm.as_ref().map(|_| llm_model.clone()),
            "answer_paraphrase": config.cache.answer_paraphrase,
            "hit_ratio": total_hits as f64 / all_on.len().max(1) as f64,
            "on_mean_ms": mean(&all_on), "off_mean_ms": mean(&all_off),
            "mean_speedup": mean(&all_off) / mean(&all_on),
            "answers_differing": differing, "per_kind": per_kind, "runs": run_means})
    );
    Ok(())
}
