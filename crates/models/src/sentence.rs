//! Sentence embeddings from a sentence-transformers folder: `config.json`,
//! `tokenizer.json`, `model.safetensors`, and the optional `modules.json`,
//! `<pooling>/config.json`, `sentence_bert_config.json` and
//! `config_sentence_transformers.json`, which decide pooling, normalization, the
//! maximum length and query/document prefixes exactly as sentence-transformers does.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use neuralcore_core::{Embedder, ModelError, TextKind};
use serde::Deserialize;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use crate::bert::{self, Bert, BertConfig};

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Mean over real tokens.
    Mean,
    /// The `[CLS]` token.
    Cls,
    /// Maximum over real tokens.
    Max,
}

/// A BERT-family sentence embedder.
pub struct SentenceEmbedder {
    id: String,
    bert: Bert,
    tokenizer: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    dim: usize,
    query_prefix: String,
    document_prefix: String,
    batch_size: usize,
    device: Device,
}

#[derive(Deserialize)]
struct Module {
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
}

#[derive(Deserialize)]
struct SbertConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize, Default)]
struct StConfig {
    #[serde(default)]
    prompts: std::collections::HashMap<String, String>,
}

fn invalid(path: &Path, e: impl std::fmt::Display) -> ModelError {
    ModelError::Invalid(format!("{}: {e}", path.display()))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, ModelError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| invalid(path, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(invalid(path, e)),
    }
}

fn require(dir: &Path, name: &str) -> Result<PathBuf, ModelError> {
    let p = dir.join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(ModelError::NotFound(format!(
            "{} has no {name}",
            dir.display()
        )))
    }
}

impl SentenceEmbedder {
    /// Load the model in `dir`. `name` becomes part of the model id.
    pub fn load(dir: &Path, name: &str) -> Result<Self, ModelError> {
        let config_path = require(dir, "config.json")?;
        let cfg: BertConfig = read_json(&config_path)?.expect("file exists");
        if let Some(t) = &cfg.model_type {
            if t != "bert" {
                return Err(invalid(
                    &config_path,
                    format!("model_type {t:?} is not BERT"),
                ));
            }
        }
        let tok_path = require(dir, "tokenizer.json")?;
        let mut tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| invalid(&tok_path, e))?;
        // Modules: pooling and normalization as sentence-transformers would apply them.
        let modules: Option<Vec<Module>> = read_json(&dir.join("modules.json"))?;
        let (pooling, normalize) = match &modules {
            Some(mods) => {
                let normalize = mods.iter().any(|m| m.kind.ends_with("Normalize"));
                let pooling = match mods.iter().find(|m| m.kind.ends_with("Pooling")) {
                    Some(m) => {
                        let p = dir.join(&m.path).join("config.json");
                        let pc: PoolingConfig = read_json(&p)?.ok_or_else(|| {
                            ModelError::NotFound(format!("{} is missing", p.display()))
                        })?;
                        if pc.pooling_mode_mean_sqrt_len_tokens {
                            return Err(invalid(&p, "mean_sqrt_len pooling is not supported"));
                        }
                        match (
                            pc.pooling_mode_cls_token,
                            pc.pooling_mode_mean_tokens,
                            pc.pooling_mode_max_tokens,
                        ) {
                            (true, false, false) => Pooling::Cls,
                            (false, true, false) => Pooling::Mean,
                            (false, false, true) => Pooling::Max,
                            _ => return Err(invalid(&p, "exactly one pooling mode must be set")),
                        }
                    }
                    None => Pooling::Mean,
                };
                (pooling, normalize)
            }
            None => (Pooling::Mean, true),
        };
        let sbert: Option<SbertConfig> = read_json(&dir.join("sentence_bert_config.json"))?;
        let max_len = sbert
            .and_then(|s| s.max_seq_length)
            .unwrap_or(cfg.max_position_embeddings)
            .min(cfg.max_position_embeddings);
        let st: StConfig =
            read_json(&dir.join("config_sentence_transformers.json"))?.unwrap_or_default();
        let pad_id = tokenizer.token_to_id("[PAD]").unwrap_or(0);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| invalid(&tok_path, e))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            pad_id,
            pad_token: "[PAD]".into(),
            ..Default::default()
        }));
        let weights_path = require(dir, "model.safetensors")?;
        let weights = std::fs::read(&weights_path).map_err(|e| invalid(&weights_path, e))?;
        let device = Device::Cpu;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(|e| invalid(&weights_path, e))?;
        let bert = Bert::load(vb, &cfg).map_err(|e| invalid(&weights_path, e))?;
        let pooling_name = match pooling {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Max => "max",
        };
        let id = format!("{name};pool={pooling_name};norm={normalize};max={max_len}");
        Ok(SentenceEmbedder {
            id,
            bert,
            tokenizer,
            pooling,
            normalize,
            dim: cfg.hidden_size,
            query_prefix: st.prompts.get("query").cloned().unwrap_or_default(),
            document_prefix: st.prompts.get("document").cloned().unwrap_or_default(),
            batch_size: 32,
            device,
        })
    }

    /// Pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    fn embed_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, ModelError> {
        let inf = |e: &dyn std::fmt::Display| ModelError::Inference(e.to_string());
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| inf(&e))?;
        let t = enc.first().map(|e| e.get_ids().len()).unwrap_or(0);
        let b = enc.len();
        let mut ids = Vec::with_capacity(b * t);
        let mut mask = Vec::with_capacity(b * t);
        for e in &enc {
            ids.extend_from_slice(e.get_ids());
            mask.extend_from_slice(e.get_attention_mask());
        }
        let ids = Tensor::from_vec(ids, (b, t), &self.device).map_err(|e| inf(&e))?;
        let mask = Tensor::from_vec(mask, (b, t), &self.device).map_err(|e| inf(&e))?;
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let hidden = self.bert.forward(&ids, &mask)?;
            let pooled = match self.pooling {
                Pooling::Mean => bert::mean_pool(&hidden, &mask)?,
                Pooling::Cls => bert::cls_pool(&hidden)?,
                Pooling::Max => bert::max_pool(&hidden, &mask)?,
            };
            let out = if self.normalize {
                bert::l2_normalize(&pooled)?
            } else {
                pooled
            };
            out.to_vec2::<f32>()
        };
        run().map_err(|e| inf(&e))
    }
}

impl Embedder for SentenceEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Vec<Vec<f32>>, ModelError> {
        let prefix = match kind {
            TextKind::Query => &self.query_prefix,
            TextKind::Document => &self.document_prefix,
        };
        // Similar lengths share a batch, so little compute goes to padding.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
        let mut out = vec![Vec::new(); texts.len()];
        for group in order.chunks(self.batch_size) {
            let batch: Vec<String> = group
                .iter()
                .map(|&i| format!("{prefix}{}", texts[i]))
                .collect();
            for (&i, v) in group.iter().zip(self.embed_batch(&batch)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
