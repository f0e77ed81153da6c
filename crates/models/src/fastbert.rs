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
use crate::kernels::{self, grow, MatRef, Parallelism};

#[derive(Clone, Copy, Debug)]
enum Activation {
    Gelu,
    GeluTanh,
    Relu,
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
    /// The activations of a narrow product, padded to a vector per feature.
    pad: Vec<kernels::Padded>,
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

/// `dst = w · x` (`+=` with `accumulate`) for the `[rows, inp]` weight `w` and the
/// feature-major `[inp, t]` activations `x`, through `gemm` (which reads the weights in
/// place). `split` spreads the work over the thread pool.
///
/// A group of at most [`kernels::NARROW_MAX`] tokens (a query) goes through
/// [`kernels::narrow_matmul`] instead, on one thread.
#[allow(clippy::too_many_arguments)]
fn linear(
    dst: &mut [f32],
    w: &[f32],
    rows: usize,
    x: &[f32],
    t: usize,
    accumulate: bool,
    split: bool,
    pad: &mut Vec<kernels::Padded>,
) {
    if t <= kernels::NARROW_MAX && kernels::isa() != kernels::Isa::Portable {
        kernels::narrow_matmul(dst, w, rows, x, t, accumulate, pad);
        return;
    }
    let inp = w.len() / rows;
    let par = if split {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    kernels::matmul(
        dst,
        t,
        MatRef::rows(w, rows, inp, inp),
        MatRef::rows(x, inp, t, t),
        accumulate,
        par,
    );
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
        })
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
        self.forward_with(seqs, types, ws, None)
    }

    /// [`Self::forward_typed`]; `group_mode` forces one thread per group on or off.
    fn forward_with<'w>(
        &self,
        seqs: &[&[u32]],
        types: &[&[u32]],
        ws: &'w mut Workspace,
        group_mode: Option<bool>,
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
                self.encode(&group, out, &mut s, false);
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
            // A query's few tokens: waking other threads would cost more than it saves.
            let split = total > kernels::NARROW_MAX;
            self.encode(&all, &mut ws.out[..total * h], &mut s, split);
        }
        Ok(&ws.out[..total * h])
    }

    /// Encode the sequences of one group into `out` (token-major rows). With `split`,
    /// matrix products and attention heads are spread over the thread pool.
    fn encode(&self, group: &[Seq<'_>], out: &mut [f32], s: &mut Scratch, split: bool) {
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
                    row,
                    &self.word[id * h..(id + 1) * h],
                    &self.types[ty * h..(ty + 1) * h],
                );
                kernels::add_bias(row, &self.pos[p * h..(p + 1) * h]);
                let c = q.col + p;
                for (f, &v) in row.iter().enumerate() {
                    xs[f * t + c] = v;
                }
            }
        }
        let stats = grow(&mut s.stats, 2 * t);
        kernels::bias_layer_norm_cols(
            xs,
            t,
            &self.zeros,
            &self.emb_g,
            &self.emb_b,
            self.eps,
            stats,
        );
        for l in &self.layers {
            self.layer(l, group, xs, s, split);
        }
        for (c, o) in out.chunks_exact_mut(h).enumerate() {
            for (f, v) in o.iter_mut().enumerate() {
                *v = xs[f * t + c];
            }
        }
        s.x = x;
    }

    /// One transformer layer over the feature-major `[hidden, t]` states `x`, in place.
    fn layer(&self, l: &Layer, group: &[Seq<'_>], x: &mut [f32], s: &mut Scratch, split: bool) {
        let (h, ni) = (self.hidden, self.inter);
        let t = x.len() / h;
        // Query/key/value, feature-major like everything else.
        let qkv = grow(&mut s.qkv, 3 * h * t);
        linear(qkv, &l.wqkv, 3 * h, x, t, false, split, &mut s.pad);
        kernels::add_row_bias(qkv, t, &l.bqkv);
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
        linear(x, &l.wo, h, ctx, t, true, split, &mut s.pad);
        kernels::bias_layer_norm_cols(x, t, &l.bo, &l.ln1_g, &l.ln1_b, self.eps, stats);
        // Feed-forward.
        let inter = grow(&mut s.inter, ni * t);
        linear(inter, &l.w1, ni, x, t, false, split, &mut s.pad);
        match self.act {
            Activation::Gelu => kernels::bias_gelu_rows(inter, t, &l.b1),
            Activation::GeluTanh => kernels::bias_gelu_tanh_rows(inter, t, &l.b1),
            Activation::Relu => kernels::bias_relu_rows(inter, t, &l.b1),
        }
        linear(x, &l.w2, h, inter, t, true, split, &mut s.pad);
        kernels::bias_layer_norm_cols(x, t, &l.b2, &l.ln2_g, &l.ln2_b, self.eps, stats);
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
            if kernels::attention(qs, ks, vs, t, n, hd, scale, o, t, &mut att.fused) {
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
                scores,
                n,
                qm,
                MatRef::rows(ks, hd, n, t),
                false,
                Parallelism::None,
            );
            kernels::softmax_rows(scores, n, scale, inv);
            let pt = MatRef {
                data: scores,
                rows: n,
                cols: n,
                rs: 1,
                cs: n,
            };
            kernels::matmul(
                o,
                t,
                MatRef::rows(vs, hd, n, t),
                pt,
                false,
                Parallelism::None,
            );
            // Each token's column scaled by 1 / its softmax sum.
            for row in o.chunks_mut(t).take(hd) {
                kernels::mul_assign(&mut row[..n], inv);
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
            let fast = FastBert::load(vb, &cfg).unwrap();
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
            let mut ws = Workspace::default();
            // Each mode twice, so the second pass reuses (dirty) buffers.
            for mode in [false, false, true, true] {
                let got = fast.forward_with(&refs, &[], &mut ws, Some(mode)).unwrap();
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
                assert!(worst < 2e-5, "{act} {mode}: max |difference| {worst}");
            }
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
