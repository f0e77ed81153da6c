//! A BERT encoder (the architecture of MiniLM, bge, e5 and most sentence-transformers
//! checkpoints) on candle: embeddings, N post-norm transformer layers, no pooler.
//! Weights are read from a Hugging Face `model.safetensors` with its usual names, with
//! or without the `bert.` prefix.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{embedding, layer_norm, linear, Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

/// The fields of `config.json` the encoder needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Activation of the feed-forward layer (`gelu`, `gelu_new`, `relu`).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Longest input, in tokens.
    pub max_position_embeddings: usize,
    /// Token type vocabulary (segment ids).
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// Layer-norm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Model type as written by transformers (must be BERT-like).
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_act() -> String {
    "gelu".into()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
}

/// The encoder: token ids in, one hidden state per token out.
pub struct Bert {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    emb_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    act: Activation,
    /// Longest input the position embeddings allow.
    pub max_positions: usize,
}

#[derive(Clone, Copy)]
enum Activation {
    Gelu,
    GeluTanh,
    Relu,
}

impl Bert {
    /// Build from weights and configuration.
    pub fn load(vb: VarBuilder<'_>, cfg: &BertConfig) -> candle_core::Result<Self> {
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let h = cfg.hidden_size;
        let e = vb.pp("embeddings");
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for i in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{i}"));
            layers.push(Layer {
                query: linear(h, h, l.pp("attention.self.query"))?,
                key: linear(h, h, l.pp("attention.self.key"))?,
                value: linear(h, h, l.pp("attention.self.value"))?,
                attn_out: linear(h, h, l.pp("attention.output.dense"))?,
                attn_norm: layer_norm(h, cfg.layer_norm_eps, l.pp("attention.output.LayerNorm"))?,
                intermediate: linear(h, cfg.intermediate_size, l.pp("intermediate.dense"))?,
                output: linear(cfg.intermediate_size, h, l.pp("output.dense"))?,
                out_norm: layer_norm(h, cfg.layer_norm_eps, l.pp("output.LayerNorm"))?,
            });
        }
        let act = match cfg.hidden_act.as_str() {
            "gelu" => Activation::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => Activation::GeluTanh,
            "relu" => Activation::Relu,
            other => {
                return Err(candle_core::Error::Msg(format!(
                    "unsupported hidden_act {other:?}"
                )))
            }
        };
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            return Err(candle_core::Error::Msg(
                "hidden_size is not a multiple of num_attention_heads".into(),
            ));
        }
        Ok(Bert {
            word: embedding(cfg.vocab_size, h, e.pp("word_embeddings"))?,
            position: embedding(cfg.max_position_embeddings, h, e.pp("position_embeddings"))?,
            token_type: embedding(cfg.type_vocab_size, h, e.pp("token_type_embeddings"))?,
            emb_norm: layer_norm(h, cfg.layer_norm_eps, e.pp("LayerNorm"))?,
            layers,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
            act,
            max_positions: cfg.max_position_embeddings,
        })
    }

    /// Hidden states `(batch, seq, hidden)` for `ids` and `mask` (both `(batch, seq)`,
    /// u32; mask 1 for real tokens, 0 for padding). Token types are all 0.
    pub fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let device = ids.device();
        let positions = Tensor::arange(0u32, t as u32, device)?
            .unsqueeze(0)?
            .broadcast_as((b, t))?;
        let types = ids.zeros_like()?;
        let x = self
            .word
            .forward(ids)?
            .add(&self.position.forward(&positions)?)?
            .add(&self.token_type.forward(&types)?)?;
        let mut x = self.emb_norm.forward(&x)?;
        // Additive attention bias: 0 for tokens, a large negative number for padding.
        let bias = ((mask.to_dtype(DType::F32)? - 1.0)? * 1e9)?.reshape((b, 1, 1, t))?;
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        for l in &self.layers {
            let split = |y: Tensor| -> candle_core::Result<Tensor> {
                y.reshape((b, t, self.heads, self.head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = split(l.query.forward(&x)?)?;
            let k = split(l.key.forward(&x)?)?;
            let v = split(l.value.forward(&x)?)?;
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&bias)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            let ctx =
                probs
                    .matmul(&v)?
                    .transpose(1, 2)?
                    .reshape((b, t, self.heads * self.head_dim))?;
            let attn = l.attn_norm.forward(&(l.attn_out.forward(&ctx)? + &x)?)?;
            let inner = l.intermediate.forward(&attn)?;
            let inner = match self.act {
                Activation::Gelu => inner.gelu_erf()?,
                Activation::GeluTanh => inner.gelu()?,
                Activation::Relu => inner.relu()?,
            };
            x = l.out_norm.forward(&(l.output.forward(&inner)? + &attn)?)?;
        }
        Ok(x)
    }
}

/// Mean of the token states over real tokens: `(batch, hidden)`.
pub fn mean_pool(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let m = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    let sum = hidden.broadcast_mul(&m)?.sum(1)?;
    let count = m.sum(1)?.clamp(1e-9, f64::MAX)?;
    sum.broadcast_div(&count)
}

/// The first token's state (`[CLS]`): `(batch, hidden)`.
pub fn cls_pool(hidden: &Tensor) -> candle_core::Result<Tensor> {
    hidden.narrow(1, 0, 1)?.squeeze(1)
}

/// Maximum over real tokens: `(batch, hidden)`.
pub fn max_pool(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let m = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    let penalty = ((m - 1.0)? * 1e9)?;
    hidden.broadcast_add(&penalty)?.max(1)
}

/// L2-normalize each row.
pub fn l2_normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    x.broadcast_div(&norm)
}

/// The CPU device.
pub fn cpu() -> Device {
    Device::Cpu
}
