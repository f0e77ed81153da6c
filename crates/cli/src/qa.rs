//! `neuralcore eval qa` (answer quality over SQuAD 2.0 / HotpotQA and the sets derived
//! from SQuAD, ablations side by side; `--derive` writes a derived set, `--score`
//! re-scores a per-question file without the engine) and `neuralcore calibrate` (fit the
//! grader's weights and thresholds on a labelled set).

use std::collections::HashMap;
use std::io::Write;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use neuralcore_agents::crag::{FeatureModel, Features};
use neuralcore_agents::grader::{Evaluator, Grader};
use neuralcore_agents::{AskOptions, Orchestrator, Switches};
use neuralcore_core::{parse_doc_id, DocKey};
use neuralcore_engine::{Engine, SearchOptions};
use neuralcore_eval::{
    answer_contains, derive_aspects, derive_conflicts, load_qa_selected, qa_file, read_qa_lines,
    render_side_by_side, score, score_lines, BeirDataset, Citation, DeriveOptions, EngineAspect,
    QaLine, QaOutcome, QaReport, QaSet,
};

/// One configuration of the loop to evaluate.
#[derive(Debug, Clone)]
pub struct Ablation {
    pub label: String,
    pub switches: Switches,
    pub max_iterations: Option<u32>,
}

/// Parse `full`, `no-grade`, `no-verify`, `no-refine`, `no-reflect`, `no-retrieval`,
/// `max-iterations=N`, or several joined by `+` (`no-verify+max-iterations=1`).
pub fn parse_ablation(s: &str) -> Result<Ablation> {
    let mut a = Ablation {
        label: s.to_string(),
        switches: Switches::default(),
        max_iterations: None,
    };
    for part in s.split('+') {
        match part.trim() {
            "full" | "" => {}
            "no-grade" => a.switches.no_grade = true,
            "no-verify" => a.switches.no_verify = true,
            "no-refine" => a.switches.no_refine = true,
            "no-reflect" => a.switches.no_reflect = true,
            "no-retrieval" => a.switches.no_retrieval = true,
            p => match p.strip_prefix("max-iterations=") {
                Some(n) => {
                    a.max_iterations = Some(
                        n.parse()
                            .with_context(|| format!("max-iterations needs a number, got {n:?}"))?,
                    )
                }
                None => anyhow::bail!(
                    "unknown ablation {p:?} (full, no-grade, no-verify, no-refine, no-reflect, \
                     no-retrieval, max-iterations=N; join with +)"
                ),
            },
        }
    }
    Ok(a)
}

/// `1-4` → 1..=4; `3` → 3..=3.
pub fn parse_range(s: &str) -> Result<RangeInclusive<usize>> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: usize = a
        .trim()
        .parse()
        .with_context(|| format!("bad range {s:?}"))?;
    let b: usize = b
        .trim()
        .parse()
        .with_context(|| format!("bad range {s:?}"))?;
    Ok(a..=b)
}

/// `path` itself, or the first `.json` file in the folder `path`.
pub fn json_file(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() {
        return Ok(path.to_path_buf());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .next()
        .with_context(|| format!("no .json file in {}", path.display()))
}

/// Document key → the ids its sources gave it (identical texts under two ids are
/// stored once).
pub fn external_ids(engine: &Engine, collection: &str) -> Result<HashMap<DocKey, Vec<String>>> {
    let store = engine.store();
    let mut ids: HashMap<DocKey, Vec<String>> = HashMap::new();
    for k in store.document_keys(collection)? {
        if let Some(d) = store.document(collection, k)? {
            let mut ext: Vec<String> = d
                .provenance
                .iter()
                .filter_map(|p| p.external_id.clone())
                .collect();
            ext.sort();
            ext.dedup();
            ids.insert(k, ext);
        }
    }
    Ok(ids)
}

/// Load a QA set: SQuAD 2.0 with an article range, HotpotQA with a question range (each
/// question brings its own paragraphs, so it is its own article) and a question limit.
pub fn load(path: &Path, articles: Option<&str>, limit: Option<usize>) -> Result<QaSet> {
    let selection = articles.map(parse_range).transpose()?;
    let mut set = load_qa_selected(path, selection, limit)?;
    if let Some(n) = limit {
        set.questions.truncate(n);
    }
    Ok(set)
}

/// Ingest a QA set's passages as a collection; map stored documents to passage ids.
pub fn prepare(
    engine: &Engine,
    data_dir: &Path,
    set: &QaSet,
    collection: &str,
    quiet: bool,
) -> Result<HashMap<DocKey, Vec<String>>> {
    std::fs::create_dir_all(data_dir)?;
    let corpus = data_dir.join(format!("{collection}.jsonl"));
    let mut w = std::io::BufWriter::new(
        std::fs::File::create(&corpus)
            .with_context(|| format!("cannot write {}", corpus.display()))?,
    );
    neuralcore_eval::write_corpus_jsonl(set, &mut w)?;
    w.flush()?;
    drop(w);
    let mut progress = crate::output::Progress::new(quiet);
    let summary = engine.ingest(std::slice::from_ref(&corpus), collection, &mut progress)?;
    progress.finish();
    if summary.failed > 0 {
        anyhow::bail!("cannot ingest {}", corpus.display());
    }
    let ids = external_ids(engine, collection)?;
    engine.keyword_index(collection)?;
    if engine.embedder().is_some() {
        engine.vector_index(collection)?;
    }
    Ok(ids)
}

/// The sets `eval qa --derive` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeriveKind {
    /// Conflicts, one true source against one false: each question's paragraph and a
    /// copy with the answer swapped.
    Conflicts,
    /// Conflicts, two true sources against one false: also an excerpt of the paragraph.
    #[value(name = "conflicts-2v1")]
    Conflicts2v1,
    /// Multi-aspect questions: two questions of different articles joined into one.
    Aspects,
}

/// What `eval qa --derive` was asked.
pub struct DeriveArgs<'a> {
    pub path: &'a Path,
    pub articles: Option<&'a str>,
    pub kind: DeriveKind,
    pub out: &'a Path,
    pub questions: Option<usize>,
    pub seed: u64,
}

/// `eval qa --derive KIND --out FILE`: write a derived set (SQuAD 2.0 JSON).
pub fn derive_set(json: bool, quiet: bool, a: DeriveArgs<'_>) -> Result<()> {
    let DeriveArgs {
        path,
        articles,
        kind,
        out,
        questions,
        seed,
    } = a;
    let file = qa_file(path)?;
    let opts = DeriveOptions {
        articles: articles.map(parse_range).transpose()?,
        questions: questions.unwrap_or(match kind {
            DeriveKind::Aspects => 100,
            _ => 150,
        }),
        seed,
        true_sources: if kind == DeriveKind::Conflicts2v1 {
            2
        } else {
            1
        },
    };
    let d = match kind {
        DeriveKind::Aspects => derive_aspects(&file, &opts)?,
        _ => derive_conflicts(&file, &opts)?,
    };
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(out, d.to_json_string())
        .with_context(|| format!("cannot write {}", out.display()))?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "out": out.display().to_string(),
                "derived": d.json["derived"],
                "questions": d.questions,
                "passages": d.passages,
                "skipped": d.skipped,
            }))?
        );
    } else if !quiet {
        let types = d
            .by_type
            .iter()
            .map(|(t, n)| format!("{n} {t}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "wrote {} questions{} and {} passages to {}",
            d.questions,
            if types.is_empty() {
                String::new()
            } else {
                format!(" ({types})")
            },
            d.passages,
            out.display()
        );
    }
    Ok(())
}

/// `eval qa FILE --score PER_QUESTION.jsonl`: score the per-question lines of a run (of
/// this build or an older one) against a set, one column per configuration; with
/// `relabelled`, write the lines again with this build's labels (correct, fragments,
/// conflict outcome, aspects answered).
pub fn score_file(
    json: bool,
    quiet: bool,
    path: &Path,
    articles: Option<&str>,
    limit: Option<usize>,
    per_question: &Path,
    relabelled: Option<&Path>,
) -> Result<()> {
    let set = load(path, articles, limit)?;
    if !quiet && !json {
        for w in &set.warnings {
            eprintln!("warning: {w}");
        }
    }
    let lines = read_qa_lines(per_question)?;
    let rows = score_lines(&set, &lines);
    if rows.is_empty() {
        anyhow::bail!("{} holds no per-question lines", per_question.display());
    }
    if let Some(out) = relabelled {
        let by_id: HashMap<&str, &neuralcore_eval::QaQuestion> =
            set.questions.iter().map(|q| (q.id.as_str(), q)).collect();
        let mut w = std::io::BufWriter::new(
            std::fs::File::create(out)
                .with_context(|| format!("cannot write {}", out.display()))?,
        );
        for l in &lines {
            let Some(q) = by_id.get(l.id.as_str()) else {
                continue;
            };
            let mut fresh = QaLine::new(&l.ablation, q, &l.outcome());
            fresh.citations.clone_from(&l.citations);
            fresh.verdicts = l.verdicts.clone();
            fresh.engine_conflicts = l.engine_conflicts.clone();
            writeln!(w, "{}", serde_json::to_string(&fresh)?)?;
        }
        w.flush()?;
    }
    let no_citations = lines.iter().any(|l| l.citations.is_none());
    if json {
        let v = serde_json::json!({
            "dataset": path.display().to_string(),
            "set": set.name,
            "articles": articles,
            "questions": set.questions.len(),
            "scored_from": per_question.display().to_string(),
            "runs": rows.iter().map(|(l, r)| serde_json::json!({"ablation": l, "report": r})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} ({}): {} questions, {} passages; scored from {}",
            set.name,
            path.display(),
            set.questions.len(),
            set.passages.len(),
            per_question.display()
        );
        print!("{}", render_side_by_side(&rows));
        if no_citations && !quiet {
            println!("(citations not recorded in some lines: citation metrics unknown there)");
        }
    }
    Ok(())
}

/// What `eval qa` was asked.
pub struct QaArgs {
    pub path: PathBuf,
    pub articles: Option<String>,
    pub limit: Option<usize>,
    pub ablations: Vec<String>,
    pub per_question: Option<PathBuf>,
}

/// `eval qa`.
pub fn eval_qa(
    json: bool,
    quiet: bool,
    o: &Orchestrator,
    data_dir: &Path,
    args: QaArgs,
) -> Result<()> {
    let set = load(&args.path, args.articles.as_deref(), args.limit)?;
    let engine = &o.services.engine;
    // A derived set is named after its file, so it never shares a collection with the
    // set it was derived from (or another derived set) in one data dir.
    let derived = set
        .questions
        .iter()
        .any(|q| !q.counterfactual.is_empty() || !q.aspects.is_empty());
    let name = match args.path.file_stem() {
        Some(stem) if derived && !args.path.is_dir() => stem.to_string_lossy().into_owned(),
        _ => set.name.clone(),
    };
    let collection = format!(
        "qa-{}",
        name.chars()
            .map(|c| if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            })
            .collect::<String>()
    );
    let ids = prepare(engine, data_dir, &set, &collection, json || quiet)?;
    let ablations: Vec<Ablation> = if args.ablations.is_empty() {
        vec![parse_ablation("full")?]
    } else {
        args.ablations
            .iter()
            .map(|a| parse_ablation(a))
            .collect::<Result<_>>()?
    };
    let mut out = match &args.per_question {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?,
        )),
        None => None,
    };
    let pid = |doc: &str| -> Vec<String> {
        parse_doc_id(doc)
            .and_then(|k| ids.get(&k).cloned())
            .unwrap_or_default()
    };
    let mut rows: Vec<(String, QaReport)> = Vec::new();
    for ab in &ablations {
        let mut outcomes = Vec::with_capacity(set.questions.len());
        let t0 = Instant::now();
        for (i, q) in set.questions.iter().enumerate() {
            let run_id = format!("qa-{}-{i}", std::process::id());
            let start = Instant::now();
            let opts = AskOptions {
                collection: collection.clone(),
                switches: ab.switches,
                max_iterations: ab.max_iterations,
                deadline_ms: None,
                session: None,
                project: None,
                ..Default::default()
            };
            let r = o.ask(&run_id, &q.question, &opts)?;
            let latency_ms = start.elapsed().as_secs_f64() * 1e3;
            o.mind.drop_run(&run_id)?;
            // A multi-aspect question's aspects, each asked alone: the joined question
            // is judged against what the engine can answer at all.
            let mut aspects_alone = None;
            if !q.aspects.is_empty() {
                let mut alone = Vec::with_capacity(q.aspects.len());
                for (k, a) in q.aspects.iter().enumerate() {
                    let run_id = format!("{run_id}-aspect-{k}");
                    let ra = o.ask(&run_id, &a.question, &opts)?;
                    o.mind.drop_run(&run_id)?;
                    alone.push(!ra.abstained && answer_contains(&ra.answer, &a.answers));
                }
                aspects_alone = Some(alone);
            }
            let answer: String = r
                .sentences
                .iter()
                .filter(|s| s.supported)
                .map(|s| s.text.as_str())
                .collect::<Vec<_>>()
                .join(" ");
            let citations: Vec<Citation> = r
                .citations
                .iter()
                .filter_map(|c| {
                    pid(&c.doc).into_iter().next().map(|p| Citation {
                        passage: p,
                        span: (c.span.0 as usize, c.span.1 as usize),
                    })
                })
                .collect();
            let mut retrieved: Vec<String> = r
                .verdicts
                .iter()
                .filter(|g| g.verdict.kept())
                .flat_map(|g| pid(&g.doc))
                .collect();
            retrieved.sort();
            retrieved.dedup();
            let outcome = QaOutcome {
                question: q.id.clone(),
                abstained: r.abstained,
                answer,
                citations,
                retrieved_passages: retrieved,
                iterations: r.budget.iterations,
                latency_ms,
                conflicts_reported: Some(r.conflicts.len()),
                aspects_reported: Some(
                    r.aspects
                        .iter()
                        .map(|a| EngineAspect {
                            aspect: a.aspect.clone(),
                            covered: a.covered,
                        })
                        .collect(),
                ),
                aspects_alone,
            };
            if let Some(f) = out.as_mut() {
                let mut line = QaLine::new(&ab.label, q, &outcome);
                line.verdicts = serde_json::Value::Array(
                    r.verdicts
                        .iter()
                        .map(|g| {
                            serde_json::json!({
                                "passage": pid(&g.doc), "verdict": g.verdict, "score": g.score,
                                "query": g.query,
                            })
                        })
                        .collect(),
                );
                if !r.conflicts.is_empty() {
                    line.engine_conflicts = serde_json::to_value(&r.conflicts)?;
                }
                writeln!(f, "{}", serde_json::to_string(&line)?)?;
            }
            outcomes.push(outcome);
        }
        if !quiet && !json {
            eprintln!(
                "{}: {} questions in {:.1} s",
                ab.label,
                outcomes.len(),
                t0.elapsed().as_secs_f64()
            );
        }
        rows.push((ab.label.clone(), score(&set, &outcomes)));
    }
    if let Some(mut f) = out {
        f.flush()?;
    }
    if json {
        let v = serde_json::json!({
            "dataset": args.path.display().to_string(),
            "set": set.name,
            "articles": args.articles,
            "questions": set.questions.len(),
            "grade": engine.config().grade,
            "loop": engine.config().control,
            "runs": rows.iter().map(|(l, r)| serde_json::json!({"ablation": l, "report": r})).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} ({}): {} questions, {} passages",
            set.name,
            args.path.display(),
            set.questions.len(),
            set.passages.len()
        );
        print!("{}", render_side_by_side(&rows));
    }
    Ok(())
}

/// A labelled (features, score-if-cross, relevant) sample.
struct Sample {
    features: Features,
    cross: Option<f32>,
    label: bool,
    /// Index of its question.
    question: usize,
}

/// A candidate chunk of a labelled question: key, ordinal, text, relevant.
type Labelled = (DocKey, u32, String, bool);

/// What `calibrate` was asked.
pub struct CalibrateArgs {
    pub data: PathBuf,
    pub articles: Option<String>,
    pub limit: Option<usize>,
    pub target_precision: f32,
    pub incorrect_precision: f32,
    pub config_path: PathBuf,
    pub dry_run: bool,
}

/// `calibrate`: label the graded candidates of a labelled set, fit the feature model
/// (unless the evaluator is a cross-encoder), choose the thresholds for the target
/// precision, print the table and write the config.
pub fn calibrate(
    json: bool,
    quiet: bool,
    engine: &Engine,
    data_dir: &Path,
    a: CalibrateArgs,
) -> Result<()> {
    let top_k = engine.config().grade.top_k;
    let beir = a.data.join("corpus.jsonl").exists();
    // (question, collection, label function over chunk text / doc ids)
    let mut pairs: Vec<(String, Vec<Labelled>)> = Vec::new();
    // Per question: is it answerable (BEIR: has a relevant document)?
    let mut answerable: Vec<bool> = Vec::new();
    let collection;
    let source;
    if beir {
        let ds = BeirDataset::open(&a.data, "train")?;
        collection = crate::beir_collection(&a.data);
        let mut progress = crate::output::Progress::new(json || quiet);
        engine.ingest(
            std::slice::from_ref(&ds.corpus_path),
            &collection,
            &mut progress,
        )?;
        progress.finish();
        let store = engine.store();
        let ext = external_ids(engine, &collection)?;
        let limit = a.limit.unwrap_or(usize::MAX);
        for q in ds.queries.iter().take(limit) {
            let rel = ds.qrels_for(&q.id).cloned().unwrap_or_default();
            let hits = engine
                .search_keys(&collection, &q.text, top_k, SearchOptions::default())?
                .hits;
            let mut c = Vec::new();
            for h in hits {
                if let Some(ch) = store.chunk(h.doc, h.ordinal)? {
                    let label = ext
                        .get(&h.doc)
                        .is_some_and(|ids| ids.iter().any(|i| rel.get(i).is_some_and(|g| *g > 0)));
                    c.push((h.doc, h.ordinal, ch.text, label));
                }
            }
            pairs.push((q.text.clone(), c));
            answerable.push(!rel.is_empty());
        }
        source = format!("{} train qrels", a.data.display());
    } else {
        let set = load(&a.data, a.articles.as_deref(), a.limit)?;
        collection = format!(
            "calibrate-{}",
            set.name
                .replace(|c: char| !c.is_ascii_alphanumeric(), "-")
                .to_lowercase()
        );
        prepare(engine, data_dir, &set, &collection, json || quiet)?;
        let store = engine.store();
        for q in &set.questions {
            let hits = engine
                .search_keys(&collection, &q.question, top_k, SearchOptions::default())?
                .hits;
            let mut c = Vec::new();
            for h in hits {
                if let Some(ch) = store.chunk(h.doc, h.ordinal)? {
                    let label = q.answerable && answer_contains(&ch.text, &q.answers);
                    c.push((h.doc, h.ordinal, ch.text, label));
                }
            }
            pairs.push((q.question.clone(), c));
            answerable.push(q.answerable);
        }
        source = format!(
            "{}{}",
            a.data.display(),
            a.articles
                .as_ref()
                .map(|r| format!(" articles {r}"))
                .unwrap_or_default()
        );
    }
    // The evaluator the loop's grader would use: its scores (cross-encoder) or its
    // features (to fit the feature model).
    let grader = Grader::new(engine, &collection);
    let cross = matches!(
        grader.evaluator,
        Evaluator::Cross(_) | Evaluator::Trained(_)
    );
    let mut samples = Vec::new();
    for (qi, (q, cands)) in pairs.iter().enumerate() {
        let keys: Vec<(DocKey, u32)> = cands.iter().map(|c| (c.0, c.1)).collect();
        let cos = engine
            .chunk_similarities(&collection, q, &keys)
            .unwrap_or_else(|_| vec![None; keys.len()]);
        let texts: Vec<&str> = cands.iter().map(|c| c.2.as_str()).collect();
        let ranks: Vec<usize> = (0..texts.len()).collect();
        let scored: Vec<(Features, Option<f32>)> = if cross {
            grader
                .score(q, &texts, &cos, &ranks)?
                .into_iter()
                .map(|s| (s.features, Some(s.score)))
                .collect()
        } else {
            grader
                .features(q, &texts, &cos, &ranks)?
                .into_iter()
                .map(|(f, _)| (f, None))
                .collect()
        };
        for ((features, cross), c) in scored.into_iter().zip(cands) {
            samples.push(Sample {
                features,
                cross,
                label: c.3,
                question: qi,
            });
        }
    }
    let positives = samples.iter().filter(|s| s.label).count();
    if positives == 0 || positives == samples.len() {
        anyhow::bail!(
            "the labelled set gives {positives} relevant of {} candidates: nothing to calibrate",
            samples.len()
        );
    }
    let model = (!cross).then(|| {
        FeatureModel::fit(
            &samples
                .iter()
                .map(|s| (s.features.to_vec(), s.label))
                .collect::<Vec<_>>(),
            3000,
        )
    });
    let scores: Vec<(f32, bool)> = samples
        .iter()
        .map(|s| {
            let v = match (&model, s.cross) {
                (Some(m), _) => m.score(&s.features),
                (None, Some(c)) => c,
                (None, None) => 0.0,
            };
            (v, s.label)
        })
        .collect();
    let target = a.target_precision;
    let table = threshold_table(&scores);
    // Question level (QA sets with unanswerable questions): a question is answered when
    // its best candidate reaches the upper threshold.
    let mut best = vec![0f32; pairs.len()];
    for (sm, (v, _)) in samples.iter().zip(&scores) {
        best[sm.question] = best[sm.question].max(*v);
    }
    let q_table: Vec<serde_json::Value> = if answerable.iter().any(|a| !a) {
        (1..20)
            .map(|i| {
                let t = i as f32 * 0.05;
                let (mut ans, mut ans_n, mut abst, mut un_n) = (0, 0, 0, 0);
                for (b, ok) in best.iter().zip(&answerable) {
                    if *ok {
                        ans_n += 1;
                        ans += usize::from(*b >= t);
                    } else {
                        un_n += 1;
                        abst += usize::from(*b < t);
                    }
                }
                serde_json::json!({
                    "upper": t,
                    "answerable_answered": ans as f64 / ans_n.max(1) as f64,
                    "unanswerable_abstained": abst as f64 / un_n.max(1) as f64,
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    // upper: the lowest threshold whose CORRECT set reaches the target precision.
    let upper = table
        .iter()
        .find(|r| r.precision_above.is_some_and(|p| p >= target as f64))
        .map(|r| r.t)
        .unwrap_or(0.95);
    // lower: the highest threshold below which the INCORRECT set is still at least
    // `incorrect_precision` irrelevant.
    let lower = table
        .iter()
        .rev()
        .filter(|r| r.t <= upper)
        .find(|r| {
            r.npv_below
                .is_some_and(|p| p >= a.incorrect_precision as f64)
        })
        .map(|r| r.t)
        .unwrap_or(0.0);
    let evaluator = grader.evaluator.name();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "source": source, "evaluator": evaluator, "candidates": samples.len(),
                "relevant": positives, "target_precision": target, "upper": upper, "lower": lower,
                "model": model, "table": table, "question_table": q_table,
                "config": a.config_path.display().to_string(),
                "written": !a.dry_run,
            }))?
        );
    } else {
        println!(
            "calibrated the {evaluator} evaluator on {source}: {} candidates, {positives} relevant",
            samples.len()
        );
        if let Some(m) = &model {
            println!(
                "weights: bias {:.3}, {}",
                m.bias,
                neuralcore_agents::crag::FEATURE_NAMES
                    .iter()
                    .zip(&m.weights)
                    .map(|(n, w)| format!("{n} {w:.3}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        println!(
            "{:>9} {:>10} {:>8} {:>9} {:>12}",
            "threshold", "precision", "recall", "kept", "incorrect-ok"
        );
        for r in &table {
            println!(
                "{:>9.2} {:>10} {:>8} {:>9} {:>12}",
                r.t,
                fmt(r.precision_above),
                fmt(Some(r.recall_above)),
                r.above,
                fmt(r.npv_below)
            );
        }
        println!(
            "target precision {target:.2} (CORRECT), {:.2} (INCORRECT): upper {upper:.2}, lower {lower:.2}",
            a.incorrect_precision
        );
        if !q_table.is_empty() {
            println!("question level: answer when the best candidate scores >= upper");
            println!(
                "{:>6} {:>20} {:>24}",
                "upper", "answerable answered", "unanswerable abstained"
            );
            for r in &q_table {
                println!(
                    "{:>6.2} {:>20.3} {:>24.3}",
                    r["upper"].as_f64().unwrap_or(0.0),
                    r["answerable_answered"].as_f64().unwrap_or(0.0),
                    r["unanswerable_abstained"].as_f64().unwrap_or(0.0)
                );
            }
        }
    }
    if !a.dry_run {
        write_grade_config(&a.config_path, evaluator, model.as_ref(), upper, lower)?;
        if !quiet && !json {
            println!("wrote [grade] to {}", a.config_path.display());
        }
    }
    Ok(())
}

fn fmt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into())
}

/// One row of the precision/recall table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub t: f32,
    /// Precision of score ≥ t.
    pub precision_above: Option<f64>,
    /// Recall of score ≥ t.
    pub recall_above: f64,
    /// Candidates with score ≥ t.
    pub above: usize,
    /// Share of irrelevant candidates among score < t.
    pub npv_below: Option<f64>,
}

/// Precision, recall and negative predictive value at thresholds 0.05, 0.10, … 0.95.
pub fn threshold_table(scores: &[(f32, bool)]) -> Vec<Row> {
    let pos = scores.iter().filter(|s| s.1).count().max(1) as f64;
    (1..20)
        .map(|i| {
            let t = i as f32 * 0.05;
            let above: Vec<&(f32, bool)> = scores.iter().filter(|s| s.0 >= t).collect();
            let below: Vec<&(f32, bool)> = scores.iter().filter(|s| s.0 < t).collect();
            let tp = above.iter().filter(|s| s.1).count() as f64;
            let tn = below.iter().filter(|s| !s.1).count() as f64;
            Row {
                t,
                precision_above: (!above.is_empty()).then(|| tp / above.len() as f64),
                recall_above: tp / pos,
                above: above.len(),
                npv_below: (!below.is_empty()).then(|| tn / below.len() as f64),
            }
        })
        .collect()
}

/// Write the fitted `[grade]` keys into the config file, keeping everything else.
fn write_grade_config(
    path: &Path,
    evaluator: &str,
    model: Option<&FeatureModel>,
    upper: f32,
    lower: f32,
) -> Result<()> {
    let mut table: toml::Table = match std::fs::read_to_string(path) {
        Ok(t) => t
            .parse()
            .with_context(|| format!("{} is not valid TOML", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let grade = table
        .entry("grade")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .context("[grade] in the config is not a table")?;
    let round = |x: f32| (x as f64 * 1000.0).round() / 1000.0;
    if let Some(m) = model {
        grade.insert("bias".into(), toml::Value::Float(round(m.bias)));
        grade.insert(
            "weights".into(),
            toml::Value::Array(
                m.weights
                    .iter()
                    .map(|w| toml::Value::Float(round(*w)))
                    .collect(),
            ),
        );
    }
    let (u, l) = match evaluator {
        "cross-encoder" => ("cross_upper", "cross_lower"),
        "trained" => ("trained_upper", "trained_lower"),
        _ => ("upper", "lower"),
    };
    grade.insert(u.into(), toml::Value::Float(round(upper)));
    grade.insert(l.into(), toml::Value::Float(round(lower)));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension("toml.tmp");
    std::fs::write(&tmp, toml::to_string_pretty(&table)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}
