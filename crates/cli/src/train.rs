//! `neuralcore train evaluator|reranker`: labelled pairs from public sets and the user's
//! own feedback, then [`neuralcore_models::train::train_evaluator`] over the base model
//! in the model cache. The two are one trainer; they differ in where the result goes
//! and what reads it (`grade.evaluator = "auto"`, or `rerank.model`).

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use neuralcore_eval::pairs::{
    beir_pairs, check_pairs, hotpot_pairs, read_pairs, squad_pairs, Pair,
};
use neuralcore_models::train::{train_evaluator, Progress, TrainOptions, TrainPair};

/// What is trained: the relevance evaluator or the search reranker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trained {
    Evaluator,
    Reranker,
}

impl Trained {
    /// Its folder in the model cache, where what uses it looks.
    fn dir(self) -> &'static str {
        match self {
            Trained::Evaluator => neuralcore_engine::TRAINED_EVALUATOR,
            Trained::Reranker => neuralcore_engine::TRAINED_RERANKER,
        }
    }

    /// How it is put to use, for the closing line.
    fn used_by(self) -> &'static str {
        match self {
            Trained::Evaluator => "`grade.evaluator = \"auto\"` uses it",
            Trained::Reranker => {
                "`rerank.model = \"neuralcore-reranker\"` reranks with it (`--rerank N`)"
            }
        }
    }
}

#[derive(Args, Debug)]
pub struct TrainEvaluatorArgs {
    /// SQuAD 2.0 JSON, optionally with an article range: FILE or FILE:1-4. The answer's
    /// paragraph is relevant; an unanswerable question's own paragraph and BM25-nearest
    /// other paragraphs of the article (without the answer) are not. Repeatable.
    #[arg(long, value_name = "FILE[:A-B]")]
    pub squad: Vec<String>,
    /// HotpotQA JSON (distractor setting), optionally with a question range: FILE or
    /// FILE:1-50. A question's supporting paragraphs are relevant; its BM25-hardest
    /// distractor paragraphs are not. Repeatable.
    #[arg(long, value_name = "FILE[:A-B]")]
    pub hotpotqa: Vec<String>,
    /// A BEIR folder, optionally with a split (default train): DIR or DIR:train. Judged
    /// documents are relevant, BM25's best unjudged ones are not. Repeatable.
    #[arg(long, value_name = "DIR[:SPLIT]")]
    pub beir: Vec<String>,
    /// JSON lines of {question, passage, label} (what `feedback export` writes).
    /// Repeatable.
    #[arg(long, value_name = "FILE")]
    pub pairs: Vec<PathBuf>,
    /// Negatives per question from BM25.
    #[arg(long, default_value_t = 2)]
    pub negatives: usize,
    /// Base model in the model cache.
    #[arg(long, default_value = neuralcore_models::DEFAULT_EMBEDDER)]
    pub base: String,
    /// Output folder (default: <model dir>/neuralcore-evaluator, where `grade.evaluator
    /// = "auto"` finds it; for a reranker <model dir>/neuralcore-reranker). Holds
    /// checkpoints: run again to resume.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Top layers trained (the rest stay frozen).
    #[arg(long, default_value_t = 1)]
    pub top_layers: usize,
    /// Epochs.
    #[arg(long, default_value_t = 3)]
    pub epochs: usize,
    /// Pairs per step.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Peak learning rate.
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f64,
    /// Longest pair in tokens.
    #[arg(long, default_value_t = 256)]
    pub max_length: usize,
    /// Fraction of questions held out for the loss curve.
    #[arg(long, default_value_t = 0.1)]
    pub held_out: f64,
    /// Seed (split, shuffles, initial head).
    #[arg(long, default_value_t = 15)]
    pub seed: u64,
    /// Build and count the pairs, do not train.
    #[arg(long)]
    pub dry_run: bool,
}

/// `FILE:1-4` → (FILE, Some((1, 4))); a bare path stays whole.
fn split_range(spec: &str) -> Result<(PathBuf, Option<(usize, usize)>)> {
    if let Some((path, range)) = spec.rsplit_once(':') {
        if let Some((a, b)) = range.split_once('-') {
            if let (Ok(a), Ok(b)) = (a.trim().parse(), b.trim().parse()) {
                if a == 0 || b < a {
                    bail!("bad range {range:?} (1-based, first ≤ last)");
                }
                return Ok((PathBuf::from(path), Some((a, b))));
            }
        }
    }
    Ok((PathBuf::from(spec), None))
}

pub fn run(
    model_dir: &Path,
    what: Trained,
    a: TrainEvaluatorArgs,
    quiet: bool,
    json: bool,
) -> Result<()> {
    if a.squad.is_empty() && a.hotpotqa.is_empty() && a.beir.is_empty() && a.pairs.is_empty() {
        bail!(
            "no training data: name --squad FILE[:A-B], --hotpotqa FILE[:A-B], --beir DIR[:SPLIT] \
             or --pairs FILE.jsonl"
        );
    }
    let mut all: Vec<Pair> = Vec::new();
    let mut data = Vec::new();
    let mut add = |what: String, v: Vec<Pair>| {
        let pos = v.iter().filter(|p| p.label == 1.0).count();
        let line = format!("{what}: {} pairs ({pos} relevant)", v.len());
        if !quiet {
            eprintln!("{line}");
        }
        data.push(line);
        all.extend(v);
    };
    for s in &a.squad {
        let (path, range) = split_range(s)?;
        let v = squad_pairs(&path, range, a.negatives, a.seed)
            .with_context(|| format!("SQuAD pairs from {}", path.display()))?;
        add(format!("squad {s}"), v);
    }
    for s in &a.hotpotqa {
        let (path, range) = split_range(s)?;
        let v = hotpot_pairs(&path, range, a.negatives, a.seed)
            .with_context(|| format!("HotpotQA pairs from {}", path.display()))?;
        add(format!("hotpotqa {s}"), v);
    }
    for s in &a.beir {
        let (dir, split) = match s.rsplit_once(':') {
            Some((d, sp)) if !sp.contains('/') && Path::new(d).is_dir() => (PathBuf::from(d), sp),
            _ => (PathBuf::from(s), "train"),
        };
        let v = beir_pairs(&dir, split, a.negatives, a.seed)
            .with_context(|| format!("BEIR pairs from {}", dir.display()))?;
        add(format!("beir {s}"), v);
    }
    for p in &a.pairs {
        let v = read_pairs(p).with_context(|| format!("pairs from {}", p.display()))?;
        add(format!("pairs {}", p.display()), v);
    }
    let (pos, neg) = check_pairs(&all)?;
    if !quiet {
        eprintln!("{} pairs: {pos} relevant, {neg} not", all.len());
    }
    if a.dry_run {
        if json {
            println!(
                "{}",
                serde_json::json!({"pairs": all.len(), "relevant": pos, "data": data})
            );
        }
        return Ok(());
    }
    let base_dir = model_dir.join(neuralcore_models::local_name(&a.base));
    let out = a.out.unwrap_or_else(|| model_dir.join(what.dir()));
    let opts = TrainOptions {
        top_layers: a.top_layers,
        epochs: a.epochs,
        batch: a.batch,
        lr: a.lr,
        seed: a.seed,
        max_length: a.max_length,
        held_out: a.held_out,
        ..Default::default()
    };
    let pairs: Vec<TrainPair> = all;
    let bar = if quiet {
        None
    } else {
        let b = indicatif::ProgressBar::new(pairs.len() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {pos}/{len} {elapsed} (eta {eta})",
            )
            .expect("template")
            .progress_chars("=> "),
        );
        b.set_message("frozen layers");
        Some(b)
    };
    let started = std::time::Instant::now();
    let manifest = train_evaluator(&base_dir, &a.base, &pairs, data, &opts, &out, &mut |p| {
        let line = match &p {
            Progress::Epoch(s) => Some(format!(
                "epoch {}: train loss {:.4}, held-out loss {:.4}, accuracy {:.3}, AUC {:.3} ({:.0} s)",
                s.epoch, s.train_loss, s.held_out_loss, s.held_out_accuracy, s.held_out_auc, s.seconds
            )),
            Progress::Resumed(n) => Some(format!("resumed after epoch {n}")),
            _ => None,
        };
        if let Some(b) = &bar {
            match p {
                Progress::Frozen(done, total) => {
                    b.set_length(total as u64);
                    b.set_position(done as u64);
                }
                Progress::Step(epoch, step, steps, loss) => {
                    if step == 1 {
                        b.set_length(steps as u64);
                        b.reset_elapsed();
                    }
                    b.set_message(format!("epoch {epoch} loss {loss:.4}"));
                    b.set_position(step as u64);
                }
                _ => {}
            }
            if let Some(l) = line {
                // A bar drawn on a terminal prints above itself; else a plain line.
                if b.is_hidden() {
                    eprintln!("{l}");
                } else {
                    b.println(l);
                }
            }
        }
        ControlFlow::Continue(())
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let bytes = std::fs::metadata(out.join("evaluator.safetensors"))?.len();
    let sha = sha256_hex(&std::fs::read(out.join("evaluator.safetensors"))?);
    if json {
        println!(
            "{}",
            serde_json::json!({"out": out, "bytes": bytes, "sha256": sha, "seconds": started.elapsed().as_secs_f64(), "manifest": manifest})
        );
    } else if !quiet {
        eprintln!(
            "{}: {} ({:.1} MB, sha256 {sha}) in {:.0} s; {}",
            what.dir(),
            out.display(),
            bytes as f64 / 1e6,
            started.elapsed().as_secs_f64(),
            what.used_by()
        );
    }
    Ok(())
}

/// `feedback export`: the pairs as JSON lines to `out` (written beside it, then renamed
/// over it, so a failed export leaves the old file whole) or to standard output, and
/// what was found on standard error (or, with `--json` and a file, standard output).
pub fn export_feedback(
    f: &neuralcore_memory::Feedback,
    out: Option<&Path>,
    quiet: bool,
    json: bool,
) -> Result<()> {
    let mut text = String::new();
    for p in &f.pairs {
        text.push_str(&serde_json::to_string(p)?);
        text.push('\n');
    }
    let relevant = f.pairs.iter().filter(|p| p.label == 1.0).count();
    let summary = format!(
        "{} pairs ({relevant} relevant, {} not) from {} memories and {} marked answers; {} \
         signals named no question{}",
        f.pairs.len(),
        f.pairs.len() - relevant,
        f.memories,
        f.marked_answers,
        f.without_question,
        if f.pairs.is_empty() {
            " (signals about a question come from asks with memory recall, and from \
             `memory signal ID SIGNAL --query QUESTION`; marks from `POST \
             /v1/runs/{run_id}/mark`)"
        } else {
            ""
        }
    );
    match out {
        None => {
            use std::io::Write;
            std::io::stdout().write_all(text.as_bytes())?;
        }
        Some(path) => {
            let name = path
                .file_name()
                .with_context(|| format!("{} names no file", path.display()))?;
            let tmp = path.with_file_name(format!(".{}.partial", name.to_string_lossy()));
            std::fs::write(&tmp, &text)
                .and_then(|()| std::fs::rename(&tmp, path))
                .inspect_err(|_| {
                    let _ = std::fs::remove_file(&tmp);
                })
                .with_context(|| format!("cannot write the pairs to {}", path.display()))?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({"out": path, "pairs": f.pairs.len(), "relevant": relevant,
                        "memories": f.memories, "signals": f.signals,
                        "without_question": f.without_question,
                        "marked_answers": f.marked_answers})
                );
                return Ok(());
            }
        }
    }
    if !quiet {
        eprintln!("{summary}");
    }
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    neuralcore_models::hub::sha256_hex(bytes)
}
