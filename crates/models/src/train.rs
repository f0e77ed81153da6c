//! Fine-tuning a cross-encoder relevance evaluator on CPU (`neuralcore train evaluator`).
//!
//! The base is a BERT encoder the model cache already holds (all-MiniLM-L6-v2). A
//! (question, passage) pair goes through it as `[CLS] question [SEP] passage [SEP]`; the
//! bottom layers stay frozen and run once per pair on the fast encoder
//! ([`crate::fastbert`]), their outputs kept in memory as f16; the top `top_layers`
//! layers, BERT's pooler and a one-logit classifier are trained with candle's autograd
//! (binary cross-entropy, AdamW with warm-up and linear decay). The last layer is computed
//! for the `[CLS]` token only — the only state the head reads — which makes a step about
//! six times cheaper than a whole layer.
//!
//! The artifact is small: the trained tensors alone (`evaluator.safetensors`, named as
//! in a `BertForSequenceClassification`), with `evaluator.json` naming the base model and
//! the SHA-256 of its weights, so [`crate::CrossEncoder::load_adapted`] can rebuild the
//! whole cross-encoder from base + artifact. Training is deterministic given the seed
//! (shuffles come from it; the math is single-threaded where order matters), keeps its
//! own held-out split (by question, so no question is on both sides), writes a
//! checkpoint after every epoch (weights, optimizer moments, step) and resumes from it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::VarBuilder;
use half::f16;
use neuralcore_core::ModelError;
use serde::{Deserialize, Serialize};
use tokenizers::{EncodeInput, Tokenizer, TruncationParams, TruncationStrategy};

use crate::bert::BertConfig;
use crate::fastbert::{FastBert, Workspace};

/// One labelled pair (the one type every trainer reads).
pub use neuralcore_core::pairs::Pair as TrainPair;

/// How to train.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainOptions {
    /// Layers trained at the top of the encoder (the rest stay frozen).
    pub top_layers: usize,
    /// Passes over the training pairs.
    pub epochs: usize,
    /// Pairs per step.
    pub batch: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Fraction of the steps spent warming the learning rate up.
    pub warmup: f64,
    /// Seed of the shuffles, the held-out split and the classifier's initial weights.
    pub seed: u64,
    /// Longest pair in tokens (the longer side is cut first).
    pub max_length: usize,
    /// Fraction of the questions held out for the loss curve.
    pub held_out: f64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            top_layers: 1,
            epochs: 3,
            batch: 16,
            lr: 1e-4,
            weight_decay: 0.01,
            warmup: 0.06,
            seed: 15,
            max_length: 256,
            held_out: 0.1,
        }
    }
}

/// One epoch's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochStats {
    /// From 1.
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Mean loss on the held-out pairs.
    pub held_out_loss: f64,
    /// Held-out accuracy at logit 0.
    pub held_out_accuracy: f64,
    /// Held-out ROC AUC.
    pub held_out_auc: f64,
    /// Seconds the epoch took (training and held-out scoring).
    pub seconds: f64,
}

/// `evaluator.json`: what the artifact is and how it was made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvaluatorManifest {
    /// [`FORMAT`].
    pub format: String,
    /// Base model name in the model cache.
    pub base: String,
    /// SHA-256 of the base's `model.safetensors`.
    pub base_sha256: String,
    /// Trained top layers.
    pub top_layers: usize,
    /// Options.
    pub options: TrainOptions,
    /// Training / held-out pairs.
    pub pairs: (usize, usize),
    /// Where the pairs came from (free text per source, with counts).
    #[serde(default)]
    pub data: Vec<String>,
    /// The held-out curve.
    pub curve: Vec<EpochStats>,
    /// Seconds spent on the frozen layers.
    pub frozen_seconds: f64,
}

/// Format tag of the artifact.
pub const FORMAT: &str = "neuralcore-evaluator/1";

/// Progress of a run.
#[derive(Debug, Clone)]
pub enum Progress {
    /// Frozen layers: pairs done of total.
    Frozen(usize, usize),
    /// Training: epoch (from 1), step within it, steps per epoch, running loss.
    Step(usize, usize, usize, f64),
    /// An epoch ended.
    Epoch(EpochStats),
    /// Resumed from a checkpoint after this many epochs.
    Resumed(usize),
}

fn inv(e: impl std::fmt::Display) -> ModelError {
    ModelError::Invalid(e.to_string())
}

fn ce(e: candle_core::Error) -> ModelError {
    ModelError::Inference(e.to_string())
}

use neuralcore_core::rng::SplitMix64 as Rng;

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Clear errors for pairs a classifier cannot learn from:
/// [`neuralcore_core::pairs::check_pairs`].
pub fn check_pairs(pairs: &[TrainPair]) -> Result<(usize, usize), ModelError> {
    neuralcore_core::pairs::check_pairs(pairs).map_err(ModelError::Invalid)
}

/// The trained tensors of one full layer.
struct LayerVars {
    q: (Var, Var),
    k: (Var, Var),
    v: (Var, Var),
    o: (Var, Var),
    ln1: (Var, Var),
    i: (Var, Var),
    out: (Var, Var),
    ln2: (Var, Var),
}

const LAYER_PARTS: [&str; 8] = [
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "attention.output.LayerNorm",
    "intermediate.dense",
    "output.dense",
    "output.LayerNorm",
];

impl LayerVars {
    fn parts(&self) -> [&(Var, Var); 8] {
        [
            &self.q, &self.k, &self.v, &self.o, &self.ln1, &self.i, &self.out, &self.ln2,
        ]
    }
}

/// Everything trained: the top layers, the pooler and the classifier.
struct Trainable {
    first: usize,
    layers: Vec<LayerVars>,
    pooler: (Var, Var),
    classifier: (Var, Var),
    heads: usize,
    eps: f64,
}

fn param_name(part: &str, w: bool) -> String {
    let kind = if part.ends_with("LayerNorm") {
        if w {
            "weight"
        } else {
            "bias"
        }
    } else if w {
        "weight"
    } else {
        "bias"
    };
    format!("{part}.{kind}")
}

impl Trainable {
    /// Named tensors as a `BertForSequenceClassification` names them.
    fn named(&self) -> Vec<(String, &Var)> {
        let mut out = Vec::new();
        for (n, l) in self.layers.iter().enumerate() {
            for (part, (w, b)) in LAYER_PARTS.iter().zip(l.parts()) {
                let p = format!("bert.encoder.layer.{}.", self.first + n);
                out.push((format!("{p}{}", param_name(part, true)), w));
                out.push((format!("{p}{}", param_name(part, false)), b));
            }
        }
        out.push(("bert.pooler.dense.weight".into(), &self.pooler.0));
        out.push(("bert.pooler.dense.bias".into(), &self.pooler.1));
        out.push(("classifier.weight".into(), &self.classifier.0));
        out.push(("classifier.bias".into(), &self.classifier.1));
        out
    }
}

fn linear(x: &Tensor, (w, b): &(Var, Var)) -> candle_core::Result<Tensor> {
    // x: (n, in); w: (out, in).
    x.matmul(&w.as_tensor().t()?)?.broadcast_add(b.as_tensor())
}

fn layer_norm(x: &Tensor, (g, b): &(Var, Var), eps: f64) -> candle_core::Result<Tensor> {
    let h = x.dim(D::Minus1)? as f64;
    let mean = (x.sum_keepdim(D::Minus1)? / h)?;
    let x = x.broadcast_sub(&mean)?;
    let var = (x.sqr()?.sum_keepdim(D::Minus1)? / h)?;
    let x = x.broadcast_div(&(var + eps)?.sqrt()?)?;
    x.broadcast_mul(g.as_tensor())?.broadcast_add(b.as_tensor())
}

fn softmax(x: &Tensor) -> candle_core::Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

impl Trainable {
    /// Logits `(b,)` of a padded batch of frozen hidden states `x` `(b, t, h)` with
    /// `bias` `(b, 1, 1, t)` (0 for tokens, -1e9 for padding).
    fn forward(&self, x: &Tensor, bias: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let heads = self.heads;
        let hd = h / heads;
        let scale = 1.0 / (hd as f64).sqrt();
        let mut x = x.clone();
        let last = self.layers.len() - 1;
        for (n, l) in self.layers.iter().enumerate() {
            let flat = x.reshape((b * t, h))?;
            let split = |y: Tensor, rows: usize| -> candle_core::Result<Tensor> {
                y.reshape((b, rows, heads, hd))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let k = split(linear(&flat, &l.k)?, t)?;
            let v = split(linear(&flat, &l.v)?, t)?;
            // The last layer: the [CLS] row only (all the head reads).
            let (rows, xq) = if n == last {
                (1, x.narrow(1, 0, 1)?.contiguous()?)
            } else {
                (t, x.clone())
            };
            let xq_flat = xq.reshape((b * rows, h))?;
            let q = split(linear(&xq_flat, &l.q)?, rows)?;
            let scores = (q.matmul(&k.t()?.contiguous()?)? * scale)?.broadcast_add(bias)?;
            let ctx = softmax(&scores)?
                .matmul(&v)?
                .transpose(1, 2)?
                .reshape((b * rows, h))?;
            let attn = layer_norm(&(linear(&ctx, &l.o)? + &xq_flat)?, &l.ln1, self.eps)?;
            let inner = linear(&attn, &l.i)?.gelu_erf()?;
            let y = layer_norm(&(linear(&inner, &l.out)? + &attn)?, &l.ln2, self.eps)?;
            x = y.reshape((b, rows, h))?;
        }
        let cls = x.narrow(1, 0, 1)?.reshape((b, h))?;
        let pooled = linear(&cls, &self.pooler)?.tanh()?;
        linear(&pooled, &self.classifier)?.reshape(b)
    }
}

/// Mean binary cross-entropy of logits against 0/1 labels, stable for any logit:
/// `max(x, 0) - x·y + ln(1 + e^-|x|)`.
fn bce(logits: &Tensor, labels: &Tensor) -> candle_core::Result<Tensor> {
    let pos = logits.relu()?;
    let soft = ((logits.abs()?.neg()?.exp()? + 1.0)?).log()?;
    ((pos - (logits * labels)?)? + soft)?.mean_all()
}

/// AdamW with moments kept for the checkpoint.
struct AdamW {
    m: Vec<Tensor>,
    v: Vec<Tensor>,
    step: usize,
}

impl AdamW {
    fn new(vars: &[&Var]) -> candle_core::Result<Self> {
        let z = |v: &&Var| v.as_tensor().zeros_like();
        Ok(AdamW {
            m: vars.iter().map(z).collect::<Result<_, _>>()?,
            v: vars.iter().map(z).collect::<Result<_, _>>()?,
            step: 0,
        })
    }

    fn apply(
        &mut self,
        vars: &[&Var],
        grads: &candle_core::backprop::GradStore,
        lr: f64,
        wd: f64,
    ) -> candle_core::Result<()> {
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8f64);
        self.step += 1;
        let c1 = 1.0 - b1.powi(self.step as i32);
        let c2 = 1.0 - b2.powi(self.step as i32);
        for (i, var) in vars.iter().enumerate() {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            self.m[i] = ((&self.m[i] * b1)? + (g * (1.0 - b1))?)?;
            self.v[i] = ((&self.v[i] * b2)? + (g.sqr()? * (1.0 - b2))?)?;
            let mhat = (&self.m[i] / c1)?;
            let vhat = (&self.v[i] / c2)?;
            let update = (mhat / (vhat.sqrt()? + eps)?)?;
            let decayed = (var.as_tensor() * (1.0 - lr * wd))?;
            var.set(&(decayed - (update * lr)?)?)?;
        }
        Ok(())
    }
}

/// One pair after the frozen layers.
struct Frozen {
    hidden: Vec<f16>,
    len: usize,
    label: f32,
}

/// The base model's files.
struct Base {
    cfg: BertConfig,
    tokenizer: Tokenizer,
    tensors: HashMap<String, Tensor>,
    sha256: String,
}

fn load_base(dir: &Path, max_length: usize) -> Result<Base, ModelError> {
    let need = |f: &str| {
        crate::bert::model_file(dir, f).map_err(|e| {
            ModelError::NotFound(format!(
                "{} (run `neuralcore models pull`)",
                e.to_string().trim_start_matches("model not found: ")
            ))
        })
    };
    let (_, _, cfg) = crate::bert::read_config(dir).map_err(|e| match e {
        ModelError::NotFound(m) => {
            ModelError::NotFound(format!("{m} (run `neuralcore models pull`)"))
        }
        e => e,
    })?;
    let tp = need("tokenizer.json")?;
    let mut tokenizer =
        Tokenizer::from_file(&tp).map_err(|e| inv(format!("{}: {e}", tp.display())))?;
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: max_length.min(cfg.max_position_embeddings),
            strategy: TruncationStrategy::LongestFirst,
            ..Default::default()
        }))
        .map_err(inv)?;
    tokenizer.with_padding(None);
    let wp = need("model.safetensors")?;
    let sha256 = crate::cache::sha256_file(&wp)?;
    let tensors = crate::bert::load_bert_tensors(&wp)?;
    Ok(Base {
        cfg,
        tokenizer,
        tensors,
        sha256,
    })
}

fn checkpoint_path(dir: &Path) -> PathBuf {
    dir.join("checkpoint.safetensors")
}

/// Train an evaluator from `base_dir` (named `base` in the cache) on `pairs`; writes the
/// artifact and checkpoints into `out`. A checkpoint in `out` from the same options is
/// resumed. Returns the manifest written.
pub fn train_evaluator(
    base_dir: &Path,
    base: &str,
    pairs: &[TrainPair],
    data: Vec<String>,
    opts: &TrainOptions,
    out: &Path,
    progress: &mut dyn FnMut(Progress) -> std::ops::ControlFlow<()>,
) -> Result<EvaluatorManifest, ModelError> {
    check_pairs(pairs)?;
    if opts.top_layers == 0 || opts.epochs == 0 || opts.batch == 0 {
        return Err(inv("top_layers, epochs and batch must be at least 1"));
    }
    if !(0.0..1.0).contains(&opts.held_out) {
        return Err(inv("held_out must be in [0, 1)"));
    }
    let b = load_base(base_dir, opts.max_length)?;
    let n_layers = b.cfg.num_hidden_layers;
    if opts.top_layers > n_layers {
        return Err(inv(format!(
            "top_layers {} exceeds the base's {n_layers} layers",
            opts.top_layers
        )));
    }
    std::fs::create_dir_all(out).map_err(|e| inv(format!("{}: {e}", out.display())))?;
    let first = n_layers - opts.top_layers;
    let h = b.cfg.hidden_size;

    // The held-out split, by question.
    let cut = (opts.held_out * 10_000.0) as u64;
    let held = |q: &str| (fnv(q) ^ opts.seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) % 10_000 < cut;

    // Frozen layers, once per pair.
    let t0 = Instant::now();
    let mut frozen_cfg = b.cfg.clone();
    frozen_cfg.num_hidden_layers = first;
    let vb = VarBuilder::from_tensors(b.tensors.clone(), DType::F32, &Device::Cpu);
    let bottom = FastBert::load(vb, &frozen_cfg).map_err(ce)?;
    let mut ws = Workspace::default();
    let mut train: Vec<Frozen> = Vec::new();
    let mut test: Vec<Frozen> = Vec::new();
    const CHUNK: usize = 16;
    for (ci, chunk) in pairs.chunks(CHUNK).enumerate() {
        let inputs: Vec<EncodeInput> = chunk
            .iter()
            .map(|p| EncodeInput::Dual(p.question.as_str().into(), p.passage.as_str().into()))
            .collect();
        let enc = b.tokenizer.encode_batch(inputs, true).map_err(inv)?;
        let ids: Vec<&[u32]> = enc.iter().map(|e| e.get_ids()).collect();
        let types: Vec<&[u32]> = enc.iter().map(|e| e.get_type_ids()).collect();
        let hidden = bottom
            .forward_typed(&ids, &types, &mut ws)
            .map_err(ModelError::Inference)?;
        let mut row = 0;
        for (p, s) in chunk.iter().zip(&ids) {
            let f = Frozen {
                hidden: hidden[row * h..(row + s.len()) * h]
                    .iter()
                    .map(|&x| f16::from_f32(x))
                    .collect(),
                len: s.len(),
                label: p.label,
            };
            row += s.len();
            if held(&p.question) {
                test.push(f);
            } else {
                train.push(f);
            }
        }
        let _ = progress(Progress::Frozen(
            ((ci + 1) * CHUNK).min(pairs.len()),
            pairs.len(),
        ));
    }
    let frozen_seconds = t0.elapsed().as_secs_f64();
    check_split(&train, "training")?;

    let model = trainable(&b.tensors, &b.cfg, first, Some(opts.seed))?;
    let named = model.named();
    let vars: Vec<&Var> = named.iter().map(|(_, v)| *v).collect();
    let mut opt = AdamW::new(&vars).map_err(ce)?;

    // Resume.
    let ck = checkpoint_path(out);
    let mut curve: Vec<EpochStats> = Vec::new();
    // The pairs themselves, not only their number: a checkpoint of other data of the
    // same size (another conversation's pairs, a re-export) is not resumed.
    let pairs_sha = crate::hub::sha256_hex(&serde_json::to_vec(pairs).expect("serializable"));
    let fingerprint =
        serde_json::to_string(&(opts, &b.sha256, pairs.len(), pairs_sha)).expect("serializable");
    if ck.is_file() {
        let saved = candle_core::safetensors::load(&ck, &Device::Cpu)
            .map_err(|e| inv(format!("{}: {e}", ck.display())))?;
        let meta: serde_json::Value = serde_json::from_slice(
            &std::fs::read(out.join("checkpoint.json"))
                .map_err(|e| inv(format!("checkpoint.json: {e}")))?,
        )
        .map_err(|e| inv(format!("checkpoint.json: {e}")))?;
        if meta["fingerprint"].as_str() == Some(fingerprint.as_str()) {
            for (i, (name, v)) in named.iter().enumerate() {
                let t = |k: String| {
                    saved
                        .get(&k)
                        .cloned()
                        .ok_or_else(|| inv(format!("checkpoint lacks {k}")))
                };
                v.set(&t(name.clone())?).map_err(ce)?;
                opt.m[i] = t(format!("adam.m.{name}"))?;
                opt.v[i] = t(format!("adam.v.{name}"))?;
            }
            opt.step = meta["step"].as_u64().unwrap_or(0) as usize;
            curve = serde_json::from_value(meta["curve"].clone()).map_err(inv)?;
            let _ = progress(Progress::Resumed(curve.len()));
        }
    }

    let steps_per_epoch = train.len().div_ceil(opts.batch);
    let total_steps = (steps_per_epoch * opts.epochs) as f64;
    let warm = (total_steps * opts.warmup).max(1.0);
    for epoch in curve.len() + 1..=opts.epochs {
        let t = Instant::now();
        let mut order: Vec<usize> = (0..train.len()).collect();
        Rng(opts.seed ^ (epoch as u64).wrapping_mul(0xA24B_AED4_963E_E407)).shuffle(&mut order);
        let mut sum = 0.0;
        for (si, idx) in order.chunks(opts.batch).enumerate() {
            let (x, bias, labels) = batch(&train, idx, h).map_err(ce)?;
            let logits = model.forward(&x, &bias).map_err(ce)?;
            let loss = bce(&logits, &labels).map_err(ce)?;
            let grads = loss.backward().map_err(ce)?;
            let s = opt.step as f64;
            let lr = if s < warm {
                opts.lr * (s + 1.0) / warm
            } else {
                opts.lr * ((total_steps - s) / (total_steps - warm).max(1.0)).max(0.0)
            };
            opt.apply(&vars, &grads, lr, opts.weight_decay)
                .map_err(ce)?;
            let l = loss.to_scalar::<f32>().map_err(ce)? as f64;
            sum += l;
            let _ = progress(Progress::Step(
                epoch,
                si + 1,
                steps_per_epoch,
                sum / (si + 1) as f64,
            ));
        }
        let (held_out_loss, held_out_accuracy, held_out_auc) = evaluate(&model, &test, h)?;
        let stats = EpochStats {
            epoch,
            train_loss: sum / steps_per_epoch.max(1) as f64,
            held_out_loss,
            held_out_accuracy,
            held_out_auc,
            seconds: t.elapsed().as_secs_f64(),
        };
        let flow = progress(Progress::Epoch(stats.clone()));
        curve.push(stats);
        // Checkpoint: weights, moments, step, curve; written whole, then renamed.
        let mut save: HashMap<String, Tensor> = HashMap::new();
        for (i, (name, v)) in named.iter().enumerate() {
            save.insert(name.clone(), v.as_tensor().clone());
            save.insert(format!("adam.m.{name}"), opt.m[i].clone());
            save.insert(format!("adam.v.{name}"), opt.v[i].clone());
        }
        let tmp = out.join("checkpoint.safetensors.tmp");
        candle_core::safetensors::save(&save, &tmp).map_err(ce)?;
        let meta =
            serde_json::json!({ "fingerprint": fingerprint, "step": opt.step, "curve": curve });
        std::fs::write(out.join("checkpoint.json.tmp"), meta.to_string()).map_err(inv)?;
        std::fs::rename(&tmp, &ck).map_err(inv)?;
        std::fs::rename(out.join("checkpoint.json.tmp"), out.join("checkpoint.json"))
            .map_err(inv)?;
        if flow.is_break() {
            return Err(ModelError::Inference(format!(
                "training interrupted after epoch {epoch}: run it again to resume from the checkpoint"
            )));
        }
    }

    // The artifact.
    let tensors: HashMap<String, Tensor> = named
        .iter()
        .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
        .collect();
    let tmp = out.join("evaluator.safetensors.tmp");
    candle_core::safetensors::save(&tensors, &tmp).map_err(ce)?;
    std::fs::rename(&tmp, out.join("evaluator.safetensors")).map_err(inv)?;
    let manifest = EvaluatorManifest {
        format: FORMAT.into(),
        base: base.into(),
        base_sha256: b.sha256.clone(),
        top_layers: opts.top_layers,
        options: opts.clone(),
        pairs: (train.len(), test.len()),
        data,
        curve,
        frozen_seconds,
    };
    std::fs::write(
        out.join("evaluator.json"),
        serde_json::to_vec_pretty(&manifest).expect("serializable"),
    )
    .map_err(inv)?;
    Ok(manifest)
}

/// The trained part over `tensors` (the base's, or base + artifact). With `fresh` (a
/// seed), the classifier starts from small random weights (and the pooler too when the
/// base has none); without, both are read from `tensors`.
fn trainable(
    tensors: &HashMap<String, Tensor>,
    cfg: &BertConfig,
    first: usize,
    fresh: Option<u64>,
) -> Result<Trainable, ModelError> {
    let h = cfg.hidden_size;
    let get = |name: &str| -> Result<Tensor, ModelError> {
        tensors
            .get(name)
            .cloned()
            .ok_or_else(|| inv(format!("the base has no {name}")))
    };
    let var = |t: Tensor| Var::from_tensor(&t).map_err(ce);
    let mut layers = Vec::new();
    for n in first..cfg.num_hidden_layers {
        let mut parts = Vec::new();
        for part in LAYER_PARTS {
            let p = format!("bert.encoder.layer.{n}.{part}");
            parts.push((
                var(get(&format!("{p}.weight"))?)?,
                var(get(&format!("{p}.bias"))?)?,
            ));
        }
        let mut it = parts.into_iter();
        let mut next = || it.next().expect("eight parts");
        layers.push(LayerVars {
            q: next(),
            k: next(),
            v: next(),
            o: next(),
            ln1: next(),
            i: next(),
            out: next(),
            ln2: next(),
        });
    }
    let cpu = &Device::Cpu;
    let (pooler, classifier) = match fresh {
        Some(seed) => {
            let mut rng = Rng(seed);
            let mut small =
                |n: usize| -> Vec<f32> { (0..n).map(|_| 0.02 * rng.normal()).collect() };
            let pooler = match (
                tensors.get("bert.pooler.dense.weight"),
                tensors.get("bert.pooler.dense.bias"),
            ) {
                (Some(w), Some(b)) => (var(w.clone())?, var(b.clone())?),
                _ => (
                    var(Tensor::from_vec(small(h * h), (h, h), cpu).map_err(ce)?)?,
                    var(Tensor::zeros(h, DType::F32, cpu).map_err(ce)?)?,
                ),
            };
            let classifier = (
                var(Tensor::from_vec(small(h), (1, h), cpu).map_err(ce)?)?,
                var(Tensor::zeros(1, DType::F32, cpu).map_err(ce)?)?,
            );
            (pooler, classifier)
        }
        None => (
            (
                var(get("bert.pooler.dense.weight")?)?,
                var(get("bert.pooler.dense.bias")?)?,
            ),
            (
                var(get("classifier.weight")?)?,
                var(get("classifier.bias")?)?,
            ),
        ),
    };
    Ok(Trainable {
        first,
        layers,
        pooler,
        classifier,
        heads: cfg.num_attention_heads,
        eps: cfg.layer_norm_eps,
    })
}

/// Logits of `pairs` by the training-time computation (frozen layers on the fast
/// encoder, the trained ones in candle, the last for `[CLS]` only) over base + artifact:
/// what the tests hold [`crate::CrossEncoder::load_adapted`] to.
pub fn training_logits(
    base_dir: &Path,
    artifact: &Path,
    pairs: &[(&str, &str)],
    max_length: usize,
) -> Result<Vec<f32>, ModelError> {
    let mut b = load_base(base_dir, max_length)?;
    let m: EvaluatorManifest =
        serde_json::from_slice(&std::fs::read(artifact.join("evaluator.json")).map_err(inv)?)
            .map_err(inv)?;
    let trained =
        candle_core::safetensors::load(artifact.join("evaluator.safetensors"), &Device::Cpu)
            .map_err(ce)?;
    b.tensors.extend(trained);
    let first = b.cfg.num_hidden_layers - m.top_layers;
    let model = trainable(&b.tensors, &b.cfg, first, None)?;
    let mut frozen_cfg = b.cfg.clone();
    frozen_cfg.num_hidden_layers = first;
    let vb = VarBuilder::from_tensors(b.tensors.clone(), DType::F32, &Device::Cpu);
    let bottom = FastBert::load(vb, &frozen_cfg).map_err(ce)?;
    let h = b.cfg.hidden_size;
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    for (q, p) in pairs {
        let enc = b
            .tokenizer
            .encode(EncodeInput::Dual((*q).into(), (*p).into()), true)
            .map_err(inv)?;
        let hidden = bottom
            .forward_typed(&[enc.get_ids()], &[enc.get_type_ids()], &mut ws)
            .map_err(ModelError::Inference)?;
        let f = Frozen {
            hidden: hidden.iter().map(|&x| f16::from_f32(x)).collect(),
            len: enc.get_ids().len(),
            label: 0.0,
        };
        let (x, bias, _) = batch(std::slice::from_ref(&f), &[0], h).map_err(ce)?;
        out.push(
            model
                .forward(&x, &bias)
                .map_err(ce)?
                .to_vec1::<f32>()
                .map_err(ce)?[0],
        );
    }
    Ok(out)
}

fn check_split(v: &[Frozen], what: &str) -> Result<(), ModelError> {
    let pos = v.iter().filter(|f| f.label == 1.0).count();
    if pos == 0 || pos == v.len() {
        return Err(inv(format!(
            "the {what} split has {} pairs, {pos} relevant: it needs both classes",
            v.len()
        )));
    }
    Ok(())
}

/// A padded batch: hidden states `(b, t, h)`, attention bias `(b, 1, 1, t)`, labels.
fn batch(
    data: &[Frozen],
    idx: &[usize],
    h: usize,
) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
    let t = idx.iter().map(|&i| data[i].len).max().unwrap_or(1);
    let b = idx.len();
    let mut x = vec![0f32; b * t * h];
    let mut bias = vec![-1e9f32; b * t];
    let mut labels = Vec::with_capacity(b);
    for (r, &i) in idx.iter().enumerate() {
        let f = &data[i];
        for (j, v) in f.hidden.iter().enumerate() {
            x[r * t * h + j] = v.to_f32();
        }
        bias[r * t..r * t + f.len].fill(0.0);
        labels.push(f.label);
    }
    Ok((
        Tensor::from_vec(x, (b, t, h), &Device::Cpu)?,
        Tensor::from_vec(bias, (b, 1, 1, t), &Device::Cpu)?,
        Tensor::from_vec(labels, b, &Device::Cpu)?,
    ))
}

/// Held-out loss, accuracy at logit 0 and ROC AUC.
fn evaluate(model: &Trainable, data: &[Frozen], h: usize) -> Result<(f64, f64, f64), ModelError> {
    if data.is_empty() {
        return Ok((f64::NAN, f64::NAN, f64::NAN));
    }
    let mut scored: Vec<(f32, f32)> = Vec::with_capacity(data.len());
    let mut loss = 0.0;
    let idx: Vec<usize> = (0..data.len()).collect();
    for chunk in idx.chunks(32) {
        let (x, bias, labels) = batch(data, chunk, h).map_err(ce)?;
        let logits = model.forward(&x, &bias).map_err(ce)?.detach();
        loss += bce(&logits, &labels)
            .map_err(ce)?
            .to_scalar::<f32>()
            .map_err(ce)? as f64
            * chunk.len() as f64;
        for (l, &i) in logits.to_vec1::<f32>().map_err(ce)?.iter().zip(chunk) {
            scored.push((*l, data[i].label));
        }
    }
    let acc = scored
        .iter()
        .filter(|(l, y)| (*l > 0.0) == (*y == 1.0))
        .count() as f64
        / scored.len() as f64;
    Ok((loss / data.len() as f64, acc, auc(&mut scored)))
}

/// ROC AUC of (score, 0/1 label) pairs (ties count half).
fn auc(scored: &mut [(f32, f32)]) -> f64 {
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pos = scored.iter().filter(|s| s.1 == 1.0).count() as f64;
    let neg = scored.len() as f64 - pos;
    if pos == 0.0 || neg == 0.0 {
        return f64::NAN;
    }
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < scored.len() {
        let mut j = i;
        while j < scored.len() && scored[j].0 == scored[i].0 {
            j += 1;
        }
        let avg = (i + j + 1) as f64 / 2.0; // ranks from 1
        rank_sum += avg * scored[i..j].iter().filter(|s| s.1 == 1.0).count() as f64;
        i = j;
    }
    (rank_sum - pos * (pos + 1.0) / 2.0) / (pos * neg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_counts_ordered_pairs() {
        let mut s = vec![(0.1, 0.0), (0.4, 1.0), (0.5, 0.0), (0.8, 1.0)];
        assert!((auc(&mut s) - 0.75).abs() < 1e-9);
        let mut s = vec![(0.5, 0.0), (0.5, 1.0)];
        assert!((auc(&mut s) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_bce_is_stable_for_large_logits() {
        let l = Tensor::new(&[100f32, -100.0, 0.0], &Device::Cpu).unwrap();
        let y = Tensor::new(&[1f32, 0.0, 1.0], &Device::Cpu).unwrap();
        let v = bce(&l, &y).unwrap().to_scalar::<f32>().unwrap();
        assert!((v - (2f32).ln() / 3.0).abs() < 1e-6, "{v}");
    }
}
