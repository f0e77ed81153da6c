//! The BERT encoder of [`crate::bert`] as fused CPU code over plain f32 buffers, without
//! padding: the real tokens of the sequences in a batch are packed side by side, so the
//! linear layers, layer norms and activations never see a padding token, and attention
//! runs per sequence over exactly its own tokens (no mask).
//!
//! Activations are kept feature-major (`[features, tokens]`, one row per feature), so a
//! linear layer is `y = W · x` with the weight in the `[out, in]` layout of the file;
//! `gemm` then reads the weights in place instead of repacking them on every call, and
//! the element-wise passes (bias, GELU, layer norm statistics) run along contiguous
//! token rows. Matrix products go through `gemm`; softmax, GELU and layer norm are
//! single fused passes from [`crate::kernels`].
//!
//! Work is split across threads by groups of whole sequences: each worker takes a group
//! through all layers on its own (no synchronization between steps, intermediates in its
//! own cache). With too few groups for that, one group holds everything and the matrix
//! products and attention heads are split across threads instead. Buffers live in a
//! [`Workspace`] reused from batch to batch, so a warm forward pass allocates nothing.
//!
//! Weights are read with candle (`model.safetensors`, with or without the `bert.`
//! prefix); query, key and value are fused into one `[3·hidden, hidden]` matrix.

use std::sync::Mutex;

use candle_core::Tensor;
use candle_nn::VarBuilder;
use rayon::prelude::*;

use crate::bert::BertConfig;
use crate::kernels::{self, grow, Isa, MatRef, Parallelism, Weights};

#[derive(Clone, Copy, Debug)]
enum Activation {
    Gelu,
    GeluTanh,
    Relu,
}

pub use neuralcore_core::settings::QueryWeights;

/// A compact copy of one weight matrix.
enum Compact {
    Bf16(Vec<u16>),
    Int8 { q: Vec<i8>, scales: Vec<f32> },
}

impl Compact {
    fn new(format: QueryWeights, w: &[f32], rows: usize) -> Option<Self> {
        match format {
            QueryWeights::F32 => None,
            QueryWeights::Bf16 => Some(Compact::Bf16(kernels::to_bf16(w))),
            QueryWeights::Int8 => {
                let (q, scales) = kernels::to_int8(w, rows);
                Some(Compact::Int8 { q, scales })
            }
        }
    }

    fn weights(&self) -> Weights<'_> {
        match self {
            Compact::Bf16(w) => Weights::Bf16(w),
            Compact::Int8 { q, scales } => Weights::Int8 { q, scales },
        }
    }
}

/// The compact copies of one layer's four matrices.
struct CompactLayer {
    wqkv: Compact,
    wo: Compact,
    w1: Compact,
    w2: Compact,
}

/// One transformer layer; every weight is `[out, in]`.
struct Layer {
    /// `[3·hidden, hidden]`: query, key, value stacked.
    wqkv: Vec<f32>,
    bqkv: Vec<f32>,
    wo: Vec<f32>,
    bo: Vec<f32>,
    ln1_g: Vec<f32>,
    ln1_b: Vec<f32>,
    /// `[intermediate, hidden]`.
    w1: Vec<f32>,
    b1: Vec<f32>,
    /// `[hidden, intermediate]`.
    w2: Vec<f32>,
    b2: Vec<f32>,
    ln2_g: Vec<f32>,
    ln2_b: Vec<f32>,
    /// The query path's copies ([`QueryWeights`]), when not f32.
    compact: Option<CompactLayer>,
}

/// The encoder: packed token ids in, one hidden state per real token out.
pub struct FastBert {
    hidden: usize,
    head_dim: usize,
    inter: usize,
    vocab: usize,
    eps: f32,
    act: Activation,
    /// `[vocab, hidden]`.
    word: Vec<f32>,
    /// `[max_positions, hidden]`.
    pos: Vec<f32>,
    /// `[type_vocab, hidden]`.
    types: Vec<f32>,
    emb_g: Vec<f32>,
    emb_b: Vec<f32>,
    zeros: Vec<f32>,
    layers: Vec<Layer>,
    /// Longest input the position embeddings allow.
    pub max_positions: usize,
    /// The instruction set the kernels run with (capped at what the CPU runs).
    isa: Isa,
    /// The query path's weight format.
    query_weights: QueryWeights,
    /// Whether a query's products are split over two threads.
    query_split: bool,
}

/// Buffers of the forward pass, kept between batches (they only grow).
#[derive(Default)]
pub struct Workspace {
    /// The hidden states of all tokens, token-major (the output).
    out: Vec<f32>,
    /// One set of intermediates per worker thread (plus one for callers outside the
    /// thread pool).
    scratch: Vec<Mutex<Scratch>>,
}

/// Intermediates of one group of sequences, feature-major (`[features, tokens]`) unless
/// noted.
#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    /// `[3·hidden, t]`: queries, keys, values.
    qkv: Vec<f32>,
    /// Attention output.
    ctx: Vec<f32>,
    inter: Vec<f32>,
    /// Per-token layer norm statistics.
    stats: Vec<f32>,
    /// One token's embedding.
    row: Vec<f32>,
    /// Attention scores of one head of one sequence, and their inverse row sums.
    att: Attn,
    /// Scratch of the linear layers' narrow products.
    lin: kernels::LinearScratch,
}

#[derive(Default)]
struct Attn {
    scores: Vec<f32>,
    inv_sums: Vec<f32>,
    /// Scratch of the fused kernel.
    fused: kernels::AttnScratch,
}

/// A group (the unit of work of one thread) is consecutive sequences with at least this
/// many tokens in all, so each matrix product still has enough columns to run at full
/// speed.
const MIN_GROUP_TOKENS: usize = 192;

fn vec_of(t: Tensor) -> candle_core::Result<Vec<f32>> {
    t.flatten_all()?.to_vec1::<f32>()
}

fn weight(vb: &VarBuilder<'_>, out: usize, inp: usize) -> candle_core::Result<Vec<f32>> {
    vec_of(vb.get((out, inp), "weight")?)
}

fn bias(vb: &VarBuilder<'_>, n: usize) -> candle_core::Result<Vec<f32>> {
    vec_of(vb.get(n, "bias")?)
}

fn norm(vb: &VarBuilder<'_>, n: usize) -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
    Ok((vec_of(vb.get(n, "weight")?)?, vec_of(vb.get(n, "bias")?)?))
}

/// How one forward pass runs.
#[derive(Clone, Copy)]
struct Pass {
    /// Matrix products and attention heads spread over the thread pool.
    split: bool,
    /// A query: compact weights when the encoder has them, and the narrow products
    /// split in two over the pool when `query_split` is on.
    query: bool,
}

/// `dst = w · x` (`+=` with `accumulate`) for the `[rows, inp]` weight `w` (or its
/// compact copy on the query path) and the feature-major `[inp, t]` activations `x`
/// ([`kernels::linear`]).
#[allow(clippy::too_many_arguments)]
fn linear(
    isa: Isa,
    dst: &mut [f32],
    w: &[f32],
    compact: Option<&Compact>,
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    par: bool,
    scratch: &mut kernels::LinearScratch,
) {
    let par = if par {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    let w = match compact {
        Some(c) if t <= kernels::NARROW_MAX => c.weights(),
        _ => Weights::F32(w),
    };
    kernels::linear(isa, dst, w, rows, x, t, accumulate, par, scratch);
}

/// A sequence's place in its group: its token ids and types, and its first column.
#[derive(Clone, Copy)]
struct Seq<'a> {
    ids: &'a [u32],
    types: Option<&'a [u32]>,
    col: usize,
}

impl FastBert {
    /// Build from weights and configuration (the same checks as [`crate::bert::Bert::load`]).
    pub fn load(vb: VarBuilder<'_>, cfg: &BertConfig) -> candle_core::Result<Self> {
        let vb = if vb.contains_tensor("bert.embeddings.word_embeddings.weight") {
            vb.pp("bert")
        } else {
            vb
        };
        let h = cfg.hidden_size;
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
        if cfg.num_attention_heads == 0 || !h.is_multiple_of(cfg.num_attention_heads) {
            return Err(candle_core::Error::Msg(
                "hidden_size is not a multiple of num_attention_heads".into(),
            ));
        }
        let e = vb.pp("embeddings");
        let word = weight(&e.pp("word_embeddings"), cfg.vocab_size, h)?;
        let pos = weight(&e.pp("position_embeddings"), cfg.max_position_embeddings, h)?;
        let types = weight(&e.pp("token_type_embeddings"), cfg.type_vocab_size, h)?;
        let (emb_g, emb_b) = norm(&e.pp("LayerNorm"), h)?;
        let i = cfg.intermediate_size;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for n in 0..cfg.num_hidden_layers {
            let l = vb.pp(format!("encoder.layer.{n}"));
            let s = l.pp("attention.self");
            let mut wqkv = Vec::with_capacity(3 * h * h);
            let mut bqkv = Vec::with_capacity(3 * h);
            for p in ["query", "key", "value"] {
                wqkv.extend(weight(&s.pp(p), h, h)?);
                bqkv.extend(bias(&s.pp(p), h)?);
            }
            let o = l.pp("attention.output");
            let (ln1_g, ln1_b) = norm(&o.pp("LayerNorm"), h)?;
            let (ln2_g, ln2_b) = norm(&l.pp("output.LayerNorm"), h)?;
            layers.push(Layer {
                wqkv,
                bqkv,
                wo: weight(&o.pp("dense"), h, h)?,
                bo: bias(&o.pp("dense"), h)?,
                ln1_g,
                ln1_b,
                w1: weight(&l.pp("intermediate.dense"), i, h)?,
                b1: bias(&l.pp("intermediate.dense"), i)?,
                w2: weight(&l.pp("output.dense"), h, i)?,
                b2: bias(&l.pp("output.dense"), h)?,
                ln2_g,
                ln2_b,
                compact: None,
            });
        }
        Ok(FastBert {
            hidden: h,
            head_dim: h / cfg.num_attention_heads,
            inter: i,
            vocab: cfg.vocab_size,
            eps: cfg.layer_norm_eps as f32,
            act,
            word,
            pos,
            types,
            emb_g,
            emb_b,
            zeros: vec![0.0; h],
            layers,
            max_positions: cfg.max_position_embeddings,
            isa: kernels::isa(),
            query_weights: QueryWeights::F32,
            query_split: true,
        })
    }

    /// The instruction set the kernels run with.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Run the kernels with `isa` instead of the default ([`kernels::isa`]); one the CPU
    /// does not run is an error.
    pub fn set_isa(&mut self, isa: Isa) -> Result<(), String> {
        if isa > kernels::detected() {
            return Err(format!(
                "this CPU does not run {isa} (it runs at most {})",
                kernels::detected()
            ));
        }
        self.isa = isa;
        Ok(())
    }

    /// The query path's weight format.
    pub fn query_weights(&self) -> QueryWeights {
        self.query_weights
    }

    /// Hold the query path's weights as `format` (compact copies are made, or dropped
    /// for f32).
    pub fn set_query_weights(&mut self, format: QueryWeights) {
        let (h, i) = (self.hidden, self.inter);
        for l in &mut self.layers {
            l.compact = match format {
                QueryWeights::F32 => None,
                _ => Some(CompactLayer {
                    wqkv: Compact::new(format, &l.wqkv, 3 * h).expect("compact"),
                    wo: Compact::new(format, &l.wo, h).expect("compact"),
                    w1: Compact::new(format, &l.w1, i).expect("compact"),
                    w2: Compact::new(format, &l.w2, h).expect("compact"),
                }),
            };
        }
        self.query_weights = format;
    }

    /// Split a query's matrix products in two over the thread pool (on by default):
    /// each thread streams half of the weights.
    pub fn set_query_split(&mut self, on: bool) {
        self.query_split = on;
    }

    /// The hidden states of one query's tokens (token types 0): the query path, with
    /// the compact weights of [`Self::set_query_weights`] when it has at most
    /// [`kernels::NARROW_MAX`] tokens.
    pub fn forward_query<'w>(
        &self,
        ids: &[u32],
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], String> {
        self.forward_with(&[ids], &[], ws, None, true)
    }

    /// Width of the hidden states.
    pub fn hidden_size(&self) -> usize {
        self.hidden
    }

    /// Hidden states of every token of every sequence (token types all 0), packed:
    /// sequence `s` owns rows `sum(len[..s]) .. sum(len[..=s])` of the returned
    /// `[total tokens, hidden]` matrix.
    pub fn forward<'w>(&self, seqs: &[&[u32]], ws: &'w mut Workspace) -> Result<&'w [f32], String> {
        self.forward_typed(seqs, &[], ws)
    }

    /// [`Self::forward`] with token type ids (segment ids): `types[s][i]` for token `i`
    /// of sequence `s`; `types` empty means all 0.
    pub fn forward_typed<'w>(
        &self,
        seqs: &[&[u32]],
        types: &[&[u32]],
        ws: &'w mut Workspace,
    ) -> Result<&'w [f32], String> {
        self.forward_with(seqs, types, ws, None, false)
    }

    /// [`Self::forward_typed`]; `group_mode` forces one thread per group on or off;
    /// `query` takes the query path.
    fn forward_with<'w>(
        &self,
        seqs: &[&[u32]],
        types: &[&[u32]],
        ws: &'w mut Workspace,
        group_mode: Option<bool>,
        query: bool,
    ) -> Result<&'w [f32], String> {
        let h = self.hidden;
        if !types.is_empty() {
            if types.len() != seqs.len() || types.iter().zip(seqs).any(|(t, s)| t.len() != s.len())
            {
                return Err("token types do not match the token ids".into());
            }
            let n_types = self.types.len() / h;
            if let Some(&bad) = types
                .iter()
                .flat_map(|t| t.iter())
                .find(|&&t| t as usize >= n_types)
            {
                return Err(format!("token type {bad} is outside the {n_types} types"));
            }
        }
        for s in seqs {
            if s.len() > self.max_positions {
                return Err(format!(
                    "sequence of {} tokens is longer than the model's {} positions",
                    s.len(),
                    self.max_positions
                ));
            }
            if let Some(&bad) = s.iter().find(|&&id| id as usize >= self.vocab) {
                return Err(format!(
                    "token id {bad} is outside the vocabulary ({})",
                    self.vocab
                ));
            }
        }
        let total: usize = seqs.iter().map(|s| s.len()).sum();
        let seq = |i: usize, col: usize| Seq {
            ids: seqs[i],
            types: types.get(i).copied(),
            col,
        };
        let threads = rayon::current_num_threads().max(1);
        while ws.scratch.len() < threads + 1 {
            ws.scratch.push(Default::default());
        }
        let out = grow(&mut ws.out, total * h);
        // Groups of consecutive sequences, each with its rows of the output.
        let mut groups: Vec<(Vec<Seq<'_>>, &mut [f32])> = Vec::new();
        let mut rest: &mut [f32] = out;
        let mut group = Vec::new();
        let mut tokens = 0;
        for (i, s) in seqs.iter().enumerate() {
            group.push(seq(i, tokens));
            tokens += s.len();
            if tokens >= MIN_GROUP_TOKENS || i + 1 == seqs.len() {
                let (mine, tail) = rest.split_at_mut(tokens * h);
                groups.push((std::mem::take(&mut group), mine));
                rest = tail;
                tokens = 0;
            }
        }
        let scratch = &ws.scratch;
        if group_mode.unwrap_or(groups.len() >= 2 * threads) {
            // Longest first, so the stragglers are short.
            groups.sort_by_key(|g| std::cmp::Reverse(g.1.len()));
            groups.into_par_iter().for_each(|(group, out)| {
                let slot = rayon::current_thread_index().map_or(threads, |i| i.min(threads));
                let mut s = scratch[slot].lock().unwrap_or_else(|e| e.into_inner());
                let pass = Pass {
                    split: false,
                    query: false,
                };
                self.encode(&group, out, &mut s, pass);
            });
        } else {
            let all: Vec<Seq<'_>> = {
                let mut col = 0;
                (0..seqs.len())
                    .map(|i| {
                        let s = seq(i, col);
                        col += seqs[i].len();
                        s
                    })
                    .collect()
            };
            let mut s = scratch[threads].lock().unwrap_or_else(|e| e.into_inner());
            // A few tokens: their products are narrow, split in two when this is a
            // query (each thread streams half the weights), else on this thread.
            let pass = Pass {
                split: total > kernels::NARROW_MAX,
                query,
            };
            self.encode(&all, &mut ws.out[..total * h], &mut s, pass);
        }
        Ok(&ws.out[..total * h])
    }

    /// Encode the sequences of one group into `out` (token-major rows). With `split`,
    /// matrix products and attention heads are spread over the thread pool.
    fn encode(&self, group: &[Seq<'_>], out: &mut [f32], s: &mut Scratch, pass: Pass) {
        let h = self.hidden;
        let t = out.len() / h;
        if t == 0 {
            return;
        }
        let mut x = std::mem::take(&mut s.x);
        let xs = grow(&mut x, h * t);
        // Embeddings: word + type + position, written as columns, then layer norm.
        let row = grow(&mut s.row, h);
        for q in group {
            for (p, &id) in q.ids.iter().enumerate() {
                let (id, ty) = (id as usize, q.types.map_or(0, |ty| ty[p] as usize));
                kernels::add_into(
                    self.isa,
                    row,
                    &self.word[id * h..(id + 1) * h],
                    &self.types[ty * h..(ty + 1) * h],
                );
                kernels::add_bias(self.isa, row, &self.pos[p * h..(p + 1) * h]);
                let c = q.col + p;
                for (f, &v) in row.iter().enumerate() {
                    xs[f * t + c] = v;
                }
            }
        }
        let stats = grow(&mut s.stats, 2 * t);
        kernels::bias_layer_norm_cols(
            self.isa,
            xs,
            t,
            &self.zeros,
            &self.emb_g,
            &self.emb_b,
            self.eps,
            stats,
        );
        for l in &self.layers {
            self.layer(l, group, xs, s, pass);
        }
        for (c, o) in out.chunks_exact_mut(h).enumerate() {
            for (f, v) in o.iter_mut().enumerate() {
                *v = xs[f * t + c];
            }
        }
        s.x = x;
    }

    /// One transformer layer over the feature-major `[hidden, t]` states `x`, in place.
    fn layer(&self, l: &Layer, group: &[Seq<'_>], x: &mut [f32], s: &mut Scratch, pass: Pass) {
        let (h, ni) = (self.hidden, self.inter);
        let t = x.len() / h;
        let split = pass.split;
        let compact = l.compact.as_ref().filter(|_| pass.query);
        let par = split || (pass.query && self.query_split);
        // Query/key/value, feature-major like everything else.
        let qkv = grow(&mut s.qkv, 3 * h * t);
        linear(
            self.isa,
            qkv,
            &l.wqkv,
            compact.map(|c| &c.wqkv),
            3 * h,
            x,
            t,
            false,
            par,
            &mut s.lin,
        );
        kernels::add_row_bias(self.isa, qkv, t, &l.bqkv);
        // Attention, each head into its `head_dim` rows of `ctx`.
        let hd = self.head_dim;
        let ctx = grow(&mut s.ctx, h * t);
        if split {
            ctx.par_chunks_mut(hd * t)
                .enumerate()
                .for_each_init(Attn::default, |att, (head, c)| {
                    self.attention_head(head, group, qkv, c, att)
                });
        } else {
            for (head, c) in ctx.chunks_mut(hd * t).enumerate() {
                self.attention_head(head, group, qkv, c, &mut s.att);
            }
        }
        let stats = grow(&mut s.stats, 2 * t);
        // Output projection added onto the residual, then bias + layer norm.
        linear(
            self.isa,
            x,
            &l.wo,
            compact.map(|c| &c.wo),
            h,
            ctx,
            t,
            true,
            par,
            &mut s.lin,
        );
        kernels::bias_layer_norm_cols(self.isa, x, t, &l.bo, &l.ln1_g, &l.ln1_b, self.eps, stats);
        // Feed-forward.
        let inter = grow(&mut s.inter, ni * t);
        linear(
            self.isa,
            inter,
            &l.w1,
            compact.map(|c| &c.w1),
            ni,
            x,
            t,
            false,
            par,
            &mut s.lin,
        );
        match self.act {
            Activation::Gelu => kernels::bias_gelu_rows(self.isa, inter, t, &l.b1),
            Activation::GeluTanh => kernels::bias_gelu_tanh_rows(self.isa, inter, t, &l.b1),
            Activation::Relu => kernels::bias_relu_rows(self.isa, inter, t, &l.b1),
        }
        linear(
            self.isa,
            x,
            &l.w2,
            compact.map(|c| &c.w2),
            h,
            inter,
            t,
            true,
            par,
            &mut s.lin,
        );
        kernels::bias_layer_norm_cols(self.isa, x, t, &l.b2, &l.ln2_g, &l.ln2_b, self.eps, stats);
    }

    /// Scaled dot-product attention of head `head` for each sequence of the group over
    /// its own tokens. `qkv` is `[3·hidden, t]`; `out` gets this head's `[head_dim, t]`.
    fn attention_head(
        &self,
        head: usize,
        group: &[Seq<'_>],
        qkv: &[f32],
        out: &mut [f32],
        att: &mut Attn,
    ) {
        let (h, hd) = (self.hidden, self.head_dim);
        let t = qkv.len() / (3 * h);
        let scale = 1.0 / (hd as f32).sqrt();
        for q in group {
            let (n, c0) = (q.ids.len(), q.col);
            if n == 0 {
                continue;
            }
            // This head's rows of q, k and v, from the sequence's first column.
            let part = |row: usize| &qkv[(row + head * hd) * t + c0..];
            let (qs, ks, vs) = (part(0), part(h), part(2 * h));
            let o = &mut out[c0..];
            if kernels::attention(self.isa, qs, ks, vs, t, n, hd, scale, o, t, &mut att.fused) {
                continue;
            }
            // Fallback: scores = q · kᵀ (`[n, n]`), softmax, then outᵀ = v · pᵀ.
            let scores = grow(&mut att.scores, n * n);
            let inv = grow(&mut att.inv_sums, n);
            let qm = MatRef {
                data: qs,
                rows: n,
                cols: hd,
                rs: 1,
                cs: t,
            };
            kernels::matmul(
                self.isa,
                scores,
                n,
                qm,
                MatRef::rows(ks, hd, n, t),
                false,
                Parallelism::None,
            );
            kernels::softmax_rows(self.isa, scores, n, scale, inv);
            let pt = MatRef {
                data: scores,
                rows: n,
                cols: n,
                rs: 1,
                cs: n,
            };
            kernels::matmul(
                self.isa,
                o,
                t,
                MatRef::rows(vs, hd, n, t),
                pt,
                false,
                Parallelism::None,
            );
            // Each token's column scaled by 1 / its softmax sum.
            for row in o.chunks_mut(t).take(hd) {
                kernels::mul_assign(self.isa, &mut row[..n], inv);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::{DType, Device, Tensor};
    use candle_nn::VarBuilder;

    use super::{FastBert, Workspace};
    use crate::bert::{Bert, BertConfig};
    use crate::kernels::Isa;

    /// A small random BERT with odd sizes (not multiples of the vector width).
    fn random_model(act: &str) -> (BertConfig, HashMap<String, Tensor>) {
        let cfg: BertConfig = serde_json::from_str(&format!(
            r#"{{"vocab_size": 50, "hidden_size": 36, "num_hidden_layers": 2,
                "num_attention_heads": 3, "intermediate_size": 70,
                "max_position_embeddings": 40, "hidden_act": "{act}"}}"#
        ))
        .unwrap();
        let dev = Device::Cpu;
        let mut seed = 12345u64;
        let mut rnd = |shape: &[usize], scale: f32, offset: f32| {
            let n: usize = shape.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale + offset
                })
                .collect();
            Tensor::from_vec(v, shape, &dev).unwrap()
        };
        let (h, i) = (36, 70);
        let mut t = HashMap::new();
        t.insert(
            "embeddings.word_embeddings.weight".into(),
            rnd(&[50, h], 2.0, 0.0),
        );
        t.insert(
            "embeddings.position_embeddings.weight".into(),
            rnd(&[40, h], 1.0, 0.0),
        );
        t.insert(
            "embeddings.token_type_embeddings.weight".into(),
            rnd(&[2, h], 1.0, 0.0),
        );
        for p in ["embeddings.LayerNorm".to_string()]
            .into_iter()
            .chain((0..2).flat_map(|l| {
                [
                    format!("encoder.layer.{l}.attention.output.LayerNorm"),
                    format!("encoder.layer.{l}.output.LayerNorm"),
                ]
            }))
        {
            t.insert(format!("{p}.weight"), rnd(&[h], 0.5, 1.0));
            t.insert(format!("{p}.bias"), rnd(&[h], 0.2, 0.0));
        }
        for l in 0..2 {
            let pre = format!("encoder.layer.{l}");
            for (name, out, inp) in [
                ("attention.self.query", h, h),
                ("attention.self.key", h, h),
                ("attention.self.value", h, h),
                ("attention.output.dense", h, h),
                ("intermediate.dense", i, h),
                ("output.dense", h, i),
            ] {
                t.insert(format!("{pre}.{name}.weight"), rnd(&[out, inp], 0.6, 0.0));
                t.insert(format!("{pre}.{name}.bias"), rnd(&[out], 0.2, 0.0));
            }
        }
        (cfg, t)
    }

    #[test]
    fn matches_the_candle_encoder_on_a_padded_batch() {
        for act in ["gelu", "gelu_new", "relu"] {
            let (cfg, tensors) = random_model(act);
            let dev = Device::Cpu;
            let vb = VarBuilder::from_tensors(tensors, DType::F32, &dev);
            let reference = Bert::load(vb.clone(), &cfg).unwrap();
            let mut fast = FastBert::load(vb, &cfg).unwrap();
            let mut seqs: Vec<Vec<u32>> = vec![
                (0..37).map(|i| (i * 7 + 3) % 50).collect(),
                vec![1, 2, 3],
                vec![49],
                (0..17).map(|i| (i * 11 + 5) % 50).collect(),
            ];
            // Enough tokens for several groups in group mode.
            for k in 0..14u32 {
                seqs.push((0..25 + k).map(|i| (i * 13 + k) % 50).collect());
            }
            let t = seqs.iter().map(Vec::len).max().unwrap();
            let mut ids = Vec::new();
            let mut mask = Vec::new();
            for s in &seqs {
                for p in 0..t {
                    ids.push(s.get(p).copied().unwrap_or(0));
                    mask.push(u32::from(p < s.len()));
                }
            }
            let ids = Tensor::from_vec(ids, (seqs.len(), t), &dev).unwrap();
            let mask = Tensor::from_vec(mask, (seqs.len(), t), &dev).unwrap();
            let want: Vec<Vec<Vec<f32>>> =
                reference.forward(&ids, &mask).unwrap().to_vec3().unwrap();
            let refs: Vec<&[u32]> = seqs.iter().map(Vec::as_slice).collect();
            for isa in Isa::supported() {
                fast.set_isa(isa).unwrap();
                let mut ws = Workspace::default();
                // Each mode twice, so the second pass reuses (dirty) buffers.
                for mode in [false, false, true, true] {
                    let got = fast
                        .forward_with(&refs, &[], &mut ws, Some(mode), false)
                        .unwrap();
                    let mut row = 0;
                    let mut worst = 0f32;
                    for (b, s) in seqs.iter().enumerate() {
                        for want_row in want[b].iter().take(s.len()) {
                            let got_row = &got[row * 36..(row + 1) * 36];
                            for (g, w) in got_row.iter().zip(want_row) {
                                worst = worst.max((g - w).abs());
                            }
                            row += 1;
                        }
                    }
                    assert_eq!(row * 36, got.len());
                    assert!(worst < 2e-5, "{act} {isa} {mode}: max |difference| {worst}");
                }
                // One sequence at a time: the narrow product of a query (up to 32
                // tokens), and the general one past it.
                for (b, s) in seqs.iter().enumerate().take(4) {
                    let got = fast.forward(&[s.as_slice()], &mut ws).unwrap();
                    let mut worst = 0f32;
                    for (p, want_row) in want[b].iter().take(s.len()).enumerate() {
                        for (g, w) in got[p * 36..(p + 1) * 36].iter().zip(want_row) {
                            worst = worst.max((g - w).abs());
                        }
                    }
                    assert!(
                        worst < 2e-5,
                        "{act} {isa} alone, {} tokens: max |difference| {worst}",
                        s.len()
                    );
                }
            }
        }
    }

    /// The query path (one sequence of at most 32 tokens, products split over the pool)
    /// in each weight format is exactly the candle encoder run on the weights as that
    /// format holds them.
    #[test]
    fn the_query_path_in_every_format_matches_the_candle_encoder() {
        use crate::fastbert::QueryWeights;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let (cfg, tensors) = random_model("gelu");
        let dev = Device::Cpu;
        let linear = |k: &str| {
            k.contains("attention.self.")
                || k.contains("attention.output.dense")
                || k.contains("intermediate.dense")
                || k.contains("output.dense")
        };
        let seqs: Vec<Vec<u32>> = vec![
            vec![7],
            (0..5).map(|i| (i * 3 + 1) % 50).collect(),
            (0..17).map(|i| (i * 11 + 5) % 50).collect(),
            (0..32).map(|i| (i * 13 + 2) % 50).collect(),
        ];
        for format in [QueryWeights::F32, QueryWeights::Bf16, QueryWeights::Int8] {
            // The reference gets each linear weight as the format holds it.
            let held: HashMap<String, Tensor> = tensors
                .iter()
                .map(|(k, t)| {
                    if !(linear(k) && k.ends_with(".weight")) || format == QueryWeights::F32 {
                        return (k.clone(), t.clone());
                    }
                    let (rows, _) = t.dims2().unwrap();
                    let w: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
                    let v: Vec<f32> = match format {
                        QueryWeights::Bf16 => crate::kernels::to_bf16(&w)
                            .iter()
                            .map(|&h| f32::from_bits(u32::from(h) << 16))
                            .collect(),
                        _ => {
                            let (q, sc) = crate::kernels::to_int8(&w, rows);
                            let inp = w.len() / rows;
                            q.iter()
                                .enumerate()
                                .map(|(i, &x)| f32::from(x) * sc[i / inp])
                                .collect()
                        }
                    };
                    (k.clone(), Tensor::from_vec(v, t.dims(), &dev).unwrap())
                })
                .collect();
            let reference =
                Bert::load(VarBuilder::from_tensors(held, DType::F32, &dev), &cfg).unwrap();
            let mut fast = FastBert::load(
                VarBuilder::from_tensors(tensors.clone(), DType::F32, &dev),
                &cfg,
            )
            .unwrap();
            fast.set_query_weights(format);
            for isa in Isa::supported() {
                fast.set_isa(isa).unwrap();
                for split in [false, true] {
                    fast.set_query_split(split);
                    let mut ws = Workspace::default();
                    for s in &seqs {
                        let ids = Tensor::from_vec(s.clone(), (1, s.len()), &dev).unwrap();
                        let mask = Tensor::ones((1, s.len()), DType::U32, &dev).unwrap();
                        let want: Vec<Vec<Vec<f32>>> =
                            reference.forward(&ids, &mask).unwrap().to_vec3().unwrap();
                        let got = pool.install(|| fast.forward_query(s, &mut ws).unwrap().to_vec());
                        let worst = want[0]
                            .iter()
                            .flatten()
                            .zip(&got)
                            .map(|(w, g)| (w - g).abs())
                            .fold(0f32, f32::max);
                        assert!(
                            worst < 2e-5,
                            "{format} {isa} split {split}, {} tokens: max |difference| {worst}",
                            s.len()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn an_isa_the_cpu_lacks_is_refused() {
        let (cfg, tensors) = random_model("gelu");
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let mut fast = FastBert::load(vb, &cfg).unwrap();
        assert_eq!(fast.isa(), crate::kernels::isa());
        for isa in Isa::ALL {
            let r = fast.set_isa(isa);
            assert_eq!(r.is_ok(), isa <= crate::kernels::detected(), "{isa}: {r:?}");
        }
    }

    #[test]
    fn zero_token_types_are_the_default_and_type_one_differs() {
        let (cfg, tensors) = random_model("gelu");
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let fast = FastBert::load(vb, &cfg).unwrap();
        let mut ws = Workspace::default();
        let ids: &[u32] = &[4, 8, 15, 16, 23, 42];
        let plain = fast.forward(&[ids], &mut ws).unwrap().to_vec();
        let zeros = fast
            .forward_typed(&[ids], &[&[0; 6]], &mut ws)
            .unwrap()
            .to_vec();
        assert_eq!(plain, zeros);
        let ones = fast
            .forward_typed(&[ids], &[&[0, 0, 0, 1, 1, 1]], &mut ws)
            .unwrap();
        // Attention is bidirectional, so every token's state changes.
        assert!(ones.iter().zip(&plain).all(|(a, b)| a != b));
        assert!(fast.forward_typed(&[ids], &[&[0; 5]], &mut ws).is_err());
        assert!(fast.forward_typed(&[ids], &[&[2; 6]], &mut ws).is_err());
    }

    #[test]
    fn rejects_out_of_range_ids_and_lengths() {
        let (cfg, tensors) = random_model("gelu");
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let fast = FastBert::load(vb, &cfg).unwrap();
        let mut ws = Workspace::default();
        assert!(fast.forward(&[&[50]], &mut ws).is_err());
        assert!(fast.forward(&[&[1; 41]], &mut ws).is_err());
        assert_eq!(fast.forward(&[&[]], &mut ws).unwrap().len(), 0);
    }
}
