//! A BERT cross-encoder reranker (`BertForSequenceClassification` with one label, as
//! cross-encoder/ms-marco-MiniLM-L-6-v2): the query and a passage go through the encoder
//! together (`[CLS] query [SEP] passage [SEP]`, token types 0 then 1), the `[CLS]` state
//! through BERT's pooler (dense + tanh) and the classifier gives one logit; the score is
//! its sigmoid, as sentence-transformers' `CrossEncoder` reports it.

use std::path::Path;
use std::sync::Mutex;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use neuralcore_core::{ModelError, Reranker};
use serde::Deserialize;
use tokenizers::{EncodeInput, Tokenizer, TruncationParams, TruncationStrategy};

use crate::bert::BertConfig;
use crate::fastbert::{FastBert, Workspace};

/// Pairs per forward pass.
const BATCH: usize = 16;

/// The tokenizer of `path`, cutting pairs to `max_length` tokens, longest side first.
fn pair_tokenizer(path: &Path, max_length: usize) -> Result<Tokenizer, ModelError> {
    let mut tokenizer = Tokenizer::from_file(path).map_err(|e| invalid(path, e))?;
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            ..Default::default()
        }))
        .map_err(|e| invalid(path, e))?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
}

/// A cross-encoder reranker.
pub struct CrossEncoder {
    id: String,
    bert: FastBert,
    ws: Mutex<Workspace>,
    tokenizer: Tokenizer,
    /// Pooler, `[in, out]`.
    pool_w: Vec<f32>,
    pool_b: Vec<f32>,
    /// Classifier of the one label.
    cls_w: Vec<f32>,
    cls_b: f32,
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    architectures: Vec<String>,
    #[serde(default)]
    id2label: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    num_labels: Option<usize>,
}

fn invalid(path: &Path, e: impl std::fmt::Display) -> ModelError {
    ModelError::Invalid(format!("{}: {e}", path.display()))
}

fn inf(e: impl std::fmt::Display) -> ModelError {
    ModelError::Inference(e.to_string())
}

impl CrossEncoder {
    /// Load the cross-encoder in `dir` (config.json, tokenizer.json, model.safetensors).
    /// Pairs longer than `max_length` tokens are cut, longest side first.
    pub fn load(dir: &Path, name: &str, max_length: usize) -> Result<Self, ModelError> {
        let need = |f: &str| crate::bert::model_file(dir, f);
        let (config_path, text, cfg) = crate::bert::read_config(dir)?;
        let head: Head = serde_json::from_str(&text).map_err(|e| invalid(&config_path, e))?;
        if !head.architectures.is_empty()
            && !head
                .architectures
                .iter()
                .any(|a| a.ends_with("ForSequenceClassification"))
        {
            return Err(invalid(
                &config_path,
                format!(
                    "architectures {:?}: not a cross-encoder (BertForSequenceClassification)",
                    head.architectures
                ),
            ));
        }
        let labels = head
            .num_labels
            .or(head.id2label.as_ref().map(|m| m.len()))
            .unwrap_or(1);
        if labels != 1 {
            return Err(invalid(
                &config_path,
                format!("{labels} labels: only one-label (relevance score) cross-encoders are supported"),
            ));
        }
        let tok_path = need("tokenizer.json")?;
        let tokenizer = pair_tokenizer(&tok_path, max_length.min(cfg.max_position_embeddings))?;
        let weights_path = need("model.safetensors")?;
        let bytes = std::fs::read(&weights_path).map_err(|e| invalid(&weights_path, e))?;
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu)
            .map_err(|e| invalid(&weights_path, e))?;
        Self::from_parts(
            format!("{name};cross-encoder;max={max_length}"),
            &cfg,
            tokenizer,
            vb,
            &weights_path,
        )
    }

    /// A cross-encoder trained by `neuralcore train evaluator`: the base encoder in
    /// `base_dir` with the trained tensors of `artifact` (a folder holding
    /// `evaluator.safetensors` and `evaluator.json`) in place of its own. The base must
    /// be the one it was trained on (its SHA-256 is checked).
    pub fn load_adapted(
        base_dir: &Path,
        artifact: &Path,
        max_length: usize,
    ) -> Result<Self, ModelError> {
        let mpath = artifact.join("evaluator.json");
        let manifest: crate::train::EvaluatorManifest = serde_json::from_slice(
            &std::fs::read(&mpath)
                .map_err(|e| ModelError::NotFound(format!("{}: {e}", mpath.display())))?,
        )
        .map_err(|e| invalid(&mpath, e))?;
        if manifest.format != crate::train::FORMAT {
            return Err(invalid(
                &mpath,
                format!(
                    "format {:?} is not {}",
                    manifest.format,
                    crate::train::FORMAT
                ),
            ));
        }
        let base_weights = base_dir.join("model.safetensors");
        let sha = crate::cache::sha256_file(&base_weights)?;
        if sha != manifest.base_sha256 {
            return Err(invalid(
                &mpath,
                format!(
                    "trained on base {} with weights {}, but {} holds {sha}",
                    manifest.base,
                    manifest.base_sha256,
                    base_dir.display()
                ),
            ));
        }
        let (_, _, cfg) = crate::bert::read_config(base_dir)?;
        let tokenizer = pair_tokenizer(
            &base_dir.join("tokenizer.json"),
            max_length.min(cfg.max_position_embeddings),
        )?;
        let mut tensors = crate::bert::load_bert_tensors(&base_weights)?;
        let apath = artifact.join("evaluator.safetensors");
        let trained =
            candle_core::safetensors::load(&apath, &Device::Cpu).map_err(|e| invalid(&apath, e))?;
        for (k, t) in trained {
            if !(k.starts_with("bert.") || k.starts_with("classifier.")) {
                return Err(invalid(&apath, format!("unexpected tensor {k}")));
            }
            tensors.insert(k, t);
        }
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let sha = crate::cache::sha256_file(&apath)?;
        Self::from_parts(
            format!(
                "neuralcore-evaluator;{};{};max={max_length}",
                manifest.base,
                &sha[..12]
            ),
            &cfg,
            tokenizer,
            vb,
            &apath,
        )
    }

    fn from_parts(
        id: String,
        cfg: &BertConfig,
        tokenizer: Tokenizer,
        vb: VarBuilder<'_>,
        weights_path: &Path,
    ) -> Result<Self, ModelError> {
        let bert = FastBert::load(vb.clone(), cfg).map_err(|e| invalid(weights_path, e))?;
        let h = cfg.hidden_size;
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>, ModelError> {
            vb.get(shape, name)
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| invalid(weights_path, e))
        };
        let pw = get("bert.pooler.dense.weight", &[h, h])?;
        // `[out, in]` in the file; keep `[in, out]` for a row-vector product.
        let mut pool_w = vec![0f32; h * h];
        for o in 0..h {
            for i in 0..h {
                pool_w[i * h + o] = pw[o * h + i];
            }
        }
        Ok(CrossEncoder {
            id,
            bert,
            ws: Mutex::new(Workspace::default()),
            tokenizer,
            pool_w,
            pool_b: get("bert.pooler.dense.bias", &[h])?,
            cls_w: get("classifier.weight", &[1, h])?,
            cls_b: get("classifier.bias", &[1])?[0],
        })
    }

    /// The raw logit of each (query, passage) pair.
    pub fn logits(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, ModelError> {
        let inputs: Vec<EncodeInput> = passages
            .iter()
            .map(|p| EncodeInput::Dual(query.into(), (*p).into()))
            .collect();
        let enc = self.tokenizer.encode_batch(inputs, true).map_err(inf)?;
        let mut order: Vec<usize> = (0..enc.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(enc[i].get_ids().len()));
        let h = self.bert.hidden_size();
        let mut out = vec![0f32; enc.len()];
        let mut ws = self.ws.lock().map_err(|_| inf("poisoned workspace"))?;
        for group in order.chunks(BATCH) {
            let ids: Vec<&[u32]> = group.iter().map(|&i| enc[i].get_ids()).collect();
            let types: Vec<&[u32]> = group.iter().map(|&i| enc[i].get_type_ids()).collect();
            let hidden = self
                .bert
                .forward_typed(&ids, &types, &mut ws)
                .map_err(inf)?;
            let mut row = 0;
            for (&i, s) in group.iter().zip(&ids) {
                let cls = &hidden[row * h..(row + 1) * h];
                row += s.len();
                let mut logit = self.cls_b;
                for o in 0..h {
                    let mut acc = self.pool_b[o];
                    for (k, x) in cls.iter().enumerate() {
                        acc += x * self.pool_w[k * h + o];
                    }
                    logit += acc.tanh() * self.cls_w[o];
                }
                out[i] = logit;
            }
        }
        Ok(out)
    }
}

impl Reranker for CrossEncoder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn score(&self, query: &str, passages: &[&str]) -> Result<Vec<f32>, ModelError> {
        Ok(self
            .logits(query, passages)?
            .into_iter()
            .map(|l| 1.0 / (1.0 + (-l).exp()))
            .collect())
    }
}
