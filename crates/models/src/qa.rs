//! A BERT extractive question-answering reader with a no-answer head
//! (`BertForQuestionAnswering` trained on SQuAD 2.0, as deepset/minilm-uncased-squad2):
//! the question and a context go through the encoder together
//! (`[CLS] question [SEP] context [SEP]`, token types 0 then 1, only the context cut when
//! the pair is too long), and `qa_outputs` turns each token's hidden state into a start
//! and an end logit. Decoding is the SQuAD 2.0 reference post-processing on one window:
//! the null (no-answer) score is `start[CLS] + end[CLS]`, the best span maximises
//! `start[i] + end[j]` over context tokens `i <= j < i + max_answer_tokens`, and the
//! reader answers when the span beats the null score.

use std::path::Path;
use std::sync::Mutex;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use neuralcore_core::ModelError;
use serde::Deserialize;
use tokenizers::{EncodeInput, Encoding, Tokenizer, TruncationParams, TruncationStrategy};

use crate::fastbert::{FastBert, Workspace};

/// Pairs per forward pass.
const BATCH: usize = 16;

/// An extractive QA reader.
pub struct QaReader {
    id: String,
    bert: FastBert,
    ws: Mutex<Workspace>,
    tokenizer: Tokenizer,
    max_length: usize,
    /// `qa_outputs`, `[2, hidden]`: the start row, then the end row.
    qa_w: Vec<f32>,
    qa_b: [f32; 2],
}

/// The start and end logits of every token of one encoded (question, context) pair.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanLogits {
    /// Token ids of `[CLS] question [SEP] context [SEP]` (the context cut to fit).
    pub ids: Vec<u32>,
    /// Token types: 0 for `[CLS]`, the question and its `[SEP]`, 1 after.
    pub type_ids: Vec<u32>,
    /// Start logit of each token.
    pub start: Vec<f32>,
    /// End logit of each token.
    pub end: Vec<f32>,
}

/// What the reader found in one context.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// Byte range of the best span in the context, whether or not it beats the null
    /// score; `None` only when no context token was read (an empty context, or
    /// `max_answer_tokens` 0).
    pub span: Option<(usize, usize)>,
    /// The text of `span` (empty without one).
    pub answer: String,
    /// `start[i] + end[j]` of the best span (`-inf` without one).
    pub span_score: f32,
    /// `start[CLS] + end[CLS]`: the score of "no answer".
    pub null_score: f32,
    /// `span_score - null_score`: above 0 the context answers the question (the
    /// SQuAD 2.0 decision); a caller may set its own threshold.
    pub answerability: f32,
}

impl Reading {
    /// Whether the best span beats the null score (SQuAD 2.0's default threshold 0).
    pub fn answers(&self) -> bool {
        self.span.is_some() && self.answerability > 0.0
    }
}

#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    architectures: Vec<String>,
}

fn invalid(path: &Path, e: impl std::fmt::Display) -> ModelError {
    ModelError::Invalid(format!("{}: {e}", path.display()))
}

fn inf(e: impl std::fmt::Display) -> ModelError {
    ModelError::Inference(e.to_string())
}

impl QaReader {
    /// Load the reader in `dir` (config.json, tokenizer.json, model.safetensors).
    /// Pairs longer than `max_length` tokens have their context cut (never the
    /// question).
    pub fn load(dir: &Path, name: &str, max_length: usize) -> Result<Self, ModelError> {
        let need = |f: &str| crate::bert::model_file(dir, f);
        let (config_path, text, cfg) = crate::bert::read_config(dir)?;
        let head: Head = serde_json::from_str(&text).map_err(|e| invalid(&config_path, e))?;
        // `[CLS]`, two `[SEP]` and at least one token of question and of context.
        let max_length = max_length.min(cfg.max_position_embeddings);
        if max_length < 5 {
            return Err(invalid(
                &config_path,
                format!("max_length {max_length} leaves no room for a question and a context"),
            ));
        }
        let tok_path = need("tokenizer.json")?;
        let mut tokenizer = Tokenizer::from_file(&tok_path).map_err(|e| invalid(&tok_path, e))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                strategy: TruncationStrategy::OnlySecond,
                ..Default::default()
            }))
            .map_err(|e| invalid(&tok_path, e))?;
        tokenizer.with_padding(None);
        let weights_path = need("model.safetensors")?;
        let bytes = std::fs::read(&weights_path).map_err(|e| invalid(&weights_path, e))?;
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &Device::Cpu)
            .map_err(|e| invalid(&weights_path, e))?;
        let is_qa = head
            .architectures
            .iter()
            .any(|a| a.ends_with("ForQuestionAnswering"));
        if !is_qa && !vb.contains_tensor("qa_outputs.weight") {
            return Err(invalid(
                dir,
                format!(
                    "architectures {:?} and no qa_outputs weights: not an extractive QA reader \
                     (BertForQuestionAnswering)",
                    head.architectures
                ),
            ));
        }
        let bert = FastBert::load(vb.clone(), &cfg).map_err(|e| invalid(&weights_path, e))?;
        let h = cfg.hidden_size;
        let get = |name: &str, shape: &[usize]| -> Result<Vec<f32>, ModelError> {
            vb.get(shape, name)
                .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
                .map_err(|e| invalid(&weights_path, e))
        };
        let qa_w = get("qa_outputs.weight", &[2, h])?;
        let qa_b = get("qa_outputs.bias", &[2])?;
        Ok(QaReader {
            id: format!("{name};qa-reader;max={max_length}"),
            bert,
            ws: Mutex::new(Workspace::default()),
            tokenizer,
            max_length,
            qa_w,
            qa_b: [qa_b[0], qa_b[1]],
        })
    }

    /// Identifies the model and its settings.
    pub fn model_id(&self) -> &str {
        &self.id
    }

    /// Longest pair read, in tokens (the context is cut to fit).
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The encoding and the start and end logits of each (question, context) pair.
    fn run(
        &self,
        question: &str,
        contexts: &[&str],
    ) -> Result<Vec<(Encoding, SpanLogits)>, ModelError> {
        let inputs: Vec<EncodeInput> = contexts
            .iter()
            .map(|c| EncodeInput::Dual(question.into(), (*c).into()))
            .collect();
        let enc = self.tokenizer.encode_batch(inputs, true).map_err(|e| {
            ModelError::Inference(format!(
                "cannot fit the question and its context in {} tokens by cutting the context \
                 (is the question too long?): {e}",
                self.max_length
            ))
        })?;
        let mut order: Vec<usize> = (0..enc.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(enc[i].get_ids().len()));
        let h = self.bert.hidden_size();
        let (w_start, w_end) = self.qa_w.split_at(h);
        let mut logits: Vec<(Vec<f32>, Vec<f32>)> = vec![Default::default(); enc.len()];
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
                let (start, end) = &mut logits[i];
                for t in row..row + s.len() {
                    let x = &hidden[t * h..(t + 1) * h];
                    let dot = |w: &[f32]| x.iter().zip(w).map(|(a, b)| a * b).sum::<f32>();
                    start.push(dot(w_start) + self.qa_b[0]);
                    end.push(dot(w_end) + self.qa_b[1]);
                }
                row += s.len();
            }
        }
        Ok(enc
            .into_iter()
            .zip(logits)
            .map(|(e, (start, end))| {
                let l = SpanLogits {
                    ids: e.get_ids().to_vec(),
                    type_ids: e.get_type_ids().to_vec(),
                    start,
                    end,
                };
                (e, l)
            })
            .collect())
    }

    /// The start and end logits of every token of each (question, context) pair.
    pub fn logits(&self, question: &str, contexts: &[&str]) -> Result<Vec<SpanLogits>, ModelError> {
        Ok(self
            .run(question, contexts)?
            .into_iter()
            .map(|(_, l)| l)
            .collect())
    }

    /// Read each context for the answer to `question`: the best span of at most
    /// `max_answer_tokens` tokens, its score and the null score.
    pub fn read(
        &self,
        question: &str,
        contexts: &[&str],
        max_answer_tokens: usize,
    ) -> Result<Vec<Reading>, ModelError> {
        self.run(question, contexts)?
            .iter()
            .zip(contexts)
            .map(|((e, l), context)| decode(e, l, context, max_answer_tokens))
            .collect()
    }
}

/// The SQuAD 2.0 decoding of one window (the first maximum, `i` then `j` ascending).
fn decode(
    e: &Encoding,
    logits: &SpanLogits,
    context: &str,
    max_answer_tokens: usize,
) -> Result<Reading, ModelError> {
    let (start, end) = (&logits.start, &logits.end);
    let null_score = start[0] + end[0];
    let seq = e.get_sequence_ids();
    // The context tokens are one run (their sequence id is 1; not the closing `[SEP]`).
    let first = seq.iter().position(|s| *s == Some(1));
    let ctx = match first {
        Some(a) => a..a + seq[a..].iter().take_while(|s| **s == Some(1)).count(),
        None => 0..0,
    };
    let mut best: Option<(f32, usize, usize)> = None;
    for i in ctx.clone() {
        let last = ctx.end.min(i.saturating_add(max_answer_tokens));
        for (j, e_j) in end.iter().enumerate().take(last).skip(i) {
            let score = start[i] + e_j;
            if best.is_none_or(|(b, _, _)| score > b) {
                best = Some((score, i, j));
            }
        }
    }
    let Some((span_score, i, j)) = best else {
        return Ok(Reading {
            span: None,
            answer: String::new(),
            span_score: f32::NEG_INFINITY,
            null_score,
            answerability: f32::NEG_INFINITY,
        });
    };
    let offsets = e.get_offsets();
    let (a, b) = (offsets[i].0, offsets[j].1);
    let answer = context.get(a..b).ok_or_else(|| {
        inf(format!(
            "token offsets {a}..{b} are not a span of the context"
        ))
    })?;
    Ok(Reading {
        span: Some((a, b)),
        answer: answer.to_string(),
        span_score,
        null_score,
        answerability: span_score - null_score,
    })
}
