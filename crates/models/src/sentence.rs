//! Sentence embeddings from a sentence-transformers folder: `config.json`,
//! `tokenizer.json`, `model.safetensors`, and the optional `modules.json`,
//! `<pooling>/config.json`, `sentence_bert_config.json` and
//! `config_sentence_transformers.json`, which decide pooling, normalization, the
//! maximum length and query/document prefixes exactly as sentence-transformers does.

use std::path::{Path, PathBuf};

use std::sync::Mutex;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use neuralcore_core::{Embedder, ModelError, TextKind};
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationParams};

use crate::bert::BertConfig;
use crate::fastbert::{FastBert, QueryWeights, Workspace};
use crate::kernels::Isa;

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
    bert: FastBert,
    /// Buffers of the forward pass, reused across batches.
    workspace: Mutex<Workspace>,
    tokenizer: Tokenizer,
    /// The same vocabulary without truncation, for counting tokens.
    counter: Tokenizer,
    pooling: Pooling,
    normalize: bool,
    dim: usize,
    query_prefix: String,
    document_prefix: String,
    batch_size: usize,
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
        let mut counter = tokenizer.clone();
        counter
            .with_truncation(None)
            .map_err(|e| invalid(&tok_path, e))?;
        counter.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..Default::default()
            }))
            .map_err(|e| invalid(&tok_path, e))?;
        // No padding: the encoder packs the real tokens of a batch (tokenizer.json may
        // ask for padding to a fixed length, as MiniLM's does).
        tokenizer.with_padding(None);
        let weights_path = require(dir, "model.safetensors")?;
        let weights = std::fs::read(&weights_path).map_err(|e| invalid(&weights_path, e))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| invalid(&weights_path, e))?;
        let bert = FastBert::load(vb, &cfg).map_err(|e| invalid(&weights_path, e))?;
        let pooling_name = match pooling {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Max => "max",
        };
        let id = format!("{name};pool={pooling_name};norm={normalize};max={max_len}");
        Ok(SentenceEmbedder {
            id,
            bert,
            workspace: Mutex::new(Workspace::default()),
            tokenizer,
            counter,
            pooling,
            normalize,
            dim: cfg.hidden_size,
            query_prefix: st.prompts.get("query").cloned().unwrap_or_default(),
            document_prefix: st.prompts.get("document").cloned().unwrap_or_default(),
            batch_size: 32,
        })
    }

    /// The instruction set the encoder's kernels run with.
    pub fn isa(&self) -> Isa {
        self.bert.isa()
    }

    /// Run the encoder's kernels with `isa` instead of the default ([`crate::isa`]);
    /// one this CPU does not run is an error.
    pub fn set_isa(&mut self, isa: Isa) -> Result<(), ModelError> {
        self.bert.set_isa(isa).map_err(ModelError::Invalid)
    }

    /// How the query path holds its weights ([`QueryWeights`]).
    pub fn query_weights(&self) -> QueryWeights {
        self.bert.query_weights()
    }

    /// Hold the query path's weights as `format`: one query of up to 32 word pieces
    /// then runs on compact copies of the weights (documents keep the f32 ones).
    pub fn set_query_weights(&mut self, format: QueryWeights) {
        self.bert.set_query_weights(format);
    }

    /// Split a query's matrix products over two threads (on by default).
    pub fn set_query_split(&mut self, on: bool) {
        self.bert.set_query_split(on);
    }

    /// Texts per forward pass (at least 1).
    pub fn set_batch_size(&mut self, n: usize) {
        self.batch_size = n.max(1);
    }

    /// Pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Vectors of already tokenized texts (one forward pass); `query`: one query, on
    /// the query path.
    fn embed_batch(&self, seqs: &[&[u32]], query: bool) -> Result<Vec<Vec<f32>>, ModelError> {
        // A second caller while a batch runs gets its own buffers instead of waiting.
        let mut own = None;
        let mut guard = self.workspace.try_lock().ok();
        let ws = match guard.as_deref_mut() {
            Some(ws) => ws,
            None => own.insert(Workspace::default()),
        };
        let hidden = match seqs {
            [one] if query => self.bert.forward_query(one, ws),
            _ => self.bert.forward(seqs, ws),
        }
        .map_err(ModelError::Inference)?;
        let h = self.dim;
        let mut out = Vec::with_capacity(seqs.len());
        let mut start = 0;
        for s in seqs {
            let rows = &hidden[start * h..(start + s.len()) * h];
            start += s.len();
            out.push(pool(rows, h, self.pooling, self.normalize));
        }
        Ok(out)
    }
}

/// One vector from the `[tokens, h]` states of one sequence.
fn pool(rows: &[f32], h: usize, pooling: Pooling, normalize: bool) -> Vec<f32> {
    let n = rows.len() / h;
    let mut v = vec![0f32; h];
    match pooling {
        Pooling::Mean => {
            for r in rows.chunks_exact(h) {
                for (a, &x) in v.iter_mut().zip(r) {
                    *a += x;
                }
            }
            let count = (n as f32).max(1e-9);
            for a in &mut v {
                *a /= count;
            }
        }
        Pooling::Cls => {
            if n > 0 {
                v.copy_from_slice(&rows[..h]);
            }
        }
        Pooling::Max => {
            if n > 0 {
                v.fill(f32::NEG_INFINITY);
                for r in rows.chunks_exact(h) {
                    for (a, &x) in v.iter_mut().zip(r) {
                        *a = a.max(x);
                    }
                }
            }
        }
    }
    if normalize {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        for a in &mut v {
            *a /= norm;
        }
    }
    v
}

impl Embedder for SentenceEmbedder {
    fn model_id(&self) -> &str {
        &self.id
    }

    fn dimension(&self) -> usize {
        self.dim
    }

    fn count_tokens(&self, text: &str) -> Option<usize> {
        self.counter.encode(text, false).ok().map(|e| e.len())
    }

    fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Vec<Vec<f32>>, ModelError> {
        let _span = tracing::info_span!(
            "embed",
            openinference.span.kind = "EMBEDDING",
            embedding.model_name = self.model_id(),
            neuralcore.embed.texts = texts.len(),
            neuralcore.embed.query = matches!(kind, TextKind::Query),
        )
        .entered();
        let prefix = match kind {
            TextKind::Query => &self.query_prefix,
            TextKind::Document => &self.document_prefix,
        };
        // Similar lengths share a batch, so its sequences make groups of even size.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(texts[i].len()));
        let mut out = vec![Vec::new(); texts.len()];
        for group in order.chunks(self.batch_size) {
            let batch: Vec<String> = group
                .iter()
                .map(|&i| format!("{prefix}{}", texts[i]))
                .collect();
            // One text (a query): encoded on this thread, no pool to wake.
            let enc = if let [one] = &batch[..] {
                self.tokenizer.encode(one.as_str(), true).map(|e| vec![e])
            } else {
                self.tokenizer.encode_batch(batch, true)
            }
            .map_err(|e| ModelError::Inference(e.to_string()))?;
            let seqs: Vec<&[u32]> = enc.iter().map(|e| e.get_ids()).collect();
            let query = kind == TextKind::Query && texts.len() == 1;
            for (&i, v) in group.iter().zip(self.embed_batch(&seqs, query)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
