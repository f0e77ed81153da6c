//! The extractive QA reader against Hugging Face transformers on a tiny random
//! `BertForQuestionAnswering` (made by `bench/embed/make_qa_fixture.py`; no real QA
//! weights can be fetched here): logits, spans decoded the SQuAD 2.0 way, batching, and
//! bad model folders.

use std::path::{Path, PathBuf};

use neuralcore_core::ModelError;
use neuralcore_models::{QaReader, Reading};
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qa")
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("reference.json")).unwrap())
        .unwrap()
}

fn reader(reference: &Value) -> QaReader {
    let max_len = reference["max_length"].as_u64().unwrap() as usize;
    QaReader::load(&fixture(), "tiny", max_len).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn ints(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The byte offset of character `c` of `s` (Python's offsets count characters).
fn byte_of(s: &str, c: usize) -> usize {
    s.char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(s.len()))
        .nth(c)
        .unwrap()
}

#[test]
fn logits_match_transformers() {
    let reference = reference();
    let qa = reader(&reference);
    assert!(qa.model_id().starts_with("tiny;"));
    let pairs = reference["pairs"].as_array().unwrap();
    assert!(pairs.iter().any(|p| p["truncated"] == true));
    let mut worst = 0f32;
    for p in pairs {
        let q = p["question"].as_str().unwrap();
        let c = p["context"].as_str().unwrap();
        let got = qa.logits(q, &[c]).unwrap();
        assert_eq!(got.len(), 1);
        let got = &got[0];
        assert_eq!(got.ids, ints(&p["input_ids"]), "{q:?} / {c:?}");
        assert_eq!(got.type_ids, ints(&p["token_type_ids"]), "{q:?} / {c:?}");
        worst = worst
            .max(max_diff(&got.start, &floats(&p["start_logits"])))
            .max(max_diff(&got.end, &floats(&p["end_logits"])));
    }
    eprintln!("largest start/end logit difference from transformers: {worst:e}");
    assert!(worst < 1e-4, "largest logit difference {worst}");
    assert!(qa.logits("what", &[]).unwrap().is_empty());
}

fn check_reading(got: &Reading, want: &Value, null_score: f32, context: &str, what: &str) {
    assert!(
        (got.null_score - null_score).abs() < 2e-4,
        "{what}: null score {} against {null_score}",
        got.null_score
    );
    if want.is_null() {
        assert_eq!(got.span, None, "{what}");
        assert_eq!(got.answer, "", "{what}");
        assert_eq!(got.span_score, f32::NEG_INFINITY, "{what}");
        assert!(!got.answers(), "{what}");
        return;
    }
    let a = byte_of(context, want["char_start"].as_u64().unwrap() as usize);
    let b = byte_of(context, want["char_end"].as_u64().unwrap() as usize);
    assert_eq!(got.span, Some((a, b)), "{what}");
    assert_eq!(got.answer, want["answer"].as_str().unwrap(), "{what}");
    assert_eq!(&context[a..b], got.answer, "{what}");
    let span_score = want["span_score"].as_f64().unwrap() as f32;
    assert!(
        (got.span_score - span_score).abs() < 2e-4,
        "{what}: span score {} against {span_score}",
        got.span_score
    );
    assert!((got.answerability - (got.span_score - got.null_score)).abs() < 1e-6);
    // The SQuAD 2.0 decision (every margin in the fixture is far above the tolerance).
    assert_eq!(got.answers(), span_score > null_score, "{what}");
}

#[test]
fn spans_match_reference() {
    let reference = reference();
    let qa = reader(&reference);
    let pairs = reference["pairs"].as_array().unwrap();
    let (mut answered, mut abstained, mut multibyte) = (0, 0, 0);
    for p in pairs {
        let q = p["question"].as_str().unwrap();
        let c = p["context"].as_str().unwrap();
        let null_score = p["null_score"].as_f64().unwrap() as f32;
        for want in p["best"].as_array().unwrap() {
            let max_answer = if want.is_null() {
                30
            } else {
                want["max_answer_len"].as_u64().unwrap() as usize
            };
            let got = qa.read(q, &[c], max_answer).unwrap();
            assert_eq!(got.len(), 1);
            let what = format!("{q:?} / {c:?}, at most {max_answer} tokens");
            check_reading(&got[0], want, null_score, c, &what);
            if let Some((a, _)) = got[0].span {
                if a != want["char_start"].as_u64().unwrap() as usize {
                    multibyte += 1;
                }
                if got[0].answers() {
                    answered += 1;
                } else {
                    abstained += 1;
                }
            }
        }
        // No span can be read with no tokens allowed.
        let none = qa.read(q, &[c], 0).unwrap();
        assert_eq!(none[0].span, None);
        assert!(!none[0].answers());
    }
    // The fixture covers both decisions and spans after multi-byte characters.
    assert!(answered > 0 && abstained > 0 && multibyte > 0);
}

#[test]
fn batched_equals_one_by_one() {
    let reference = reference();
    let qa = reader(&reference);
    let pairs = reference["pairs"].as_array().unwrap();
    // Every context twice: more than one batch, of mixed lengths (sorted internally).
    let contexts: Vec<&str> = pairs
        .iter()
        .chain(pairs)
        .map(|p| p["context"].as_str().unwrap())
        .collect();
    for (k, p) in pairs.iter().enumerate() {
        let q = p["question"].as_str().unwrap();
        let batched = qa.logits(q, &contexts).unwrap();
        assert_eq!(batched.len(), contexts.len());
        for (c, b) in contexts.iter().zip(&batched) {
            let one = &qa.logits(q, &[c]).unwrap()[0];
            assert_eq!(one.ids, b.ids);
            assert!(max_diff(&one.start, &b.start) < 1e-5);
            assert!(max_diff(&one.end, &b.end) < 1e-5);
        }
        // The pair's own context, read among the others, matches transformers.
        for own in [&batched[k], &batched[k + pairs.len()]] {
            assert!(max_diff(&own.start, &floats(&p["start_logits"])) < 1e-4);
            assert!(max_diff(&own.end, &floats(&p["end_logits"])) < 1e-4);
        }
        let readings = qa.read(q, &contexts, 30).unwrap();
        assert_eq!(readings.len(), contexts.len());
        for (c, r) in contexts.iter().zip(&readings) {
            let one = &qa.read(q, &[c], 30).unwrap()[0];
            assert_eq!(one.span, r.span);
            assert_eq!(one.answer, r.answer);
            assert!((one.null_score - r.null_score).abs() < 1e-5);
            assert!(one.span.is_none() || (one.answerability - r.answerability).abs() < 1e-5);
        }
        let null_score = p["null_score"].as_f64().unwrap() as f32;
        let c = p["context"].as_str().unwrap();
        check_reading(&readings[k], &p["best"][2], null_score, c, q);
    }
    assert!(qa.read("what", &[], 30).unwrap().is_empty());
}

#[test]
fn too_long_a_question_is_an_error() {
    let reference = reference();
    let qa = reader(&reference);
    let q = "what causes the tides ".repeat(30);
    let err = qa.read(&q, &["The moon."], 30).err().unwrap();
    assert!(matches!(err, ModelError::Inference(_)), "{err}");
    assert!(err.to_string().contains("question"), "{err}");
}

#[test]
fn bad_folders_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let err = QaReader::load(tmp.path(), "x", 64).err().unwrap();
    assert!(matches!(err, ModelError::NotFound(_)), "{err}");
    let d = tmp.path().join("m");
    std::fs::create_dir(&d).unwrap();
    let copy = |from: &Path, f: &str| std::fs::copy(from.join(f), d.join(f)).unwrap();
    // No tokenizer.
    copy(&fixture(), "config.json");
    copy(&fixture(), "model.safetensors");
    let err = QaReader::load(&d, "x", 64).err().unwrap();
    assert!(
        matches!(&err, ModelError::NotFound(m) if m.contains("tokenizer.json")),
        "{err}"
    );
    copy(&fixture(), "tokenizer.json");
    assert!(QaReader::load(&d, "x", 64).is_ok());
    // A cross-encoder (BertForSequenceClassification, a classifier and no qa_outputs)
    // is not a QA reader.
    let cross = fixture().with_file_name("tiny-cross-encoder");
    let err = QaReader::load(&cross, "x", 64).err().unwrap();
    assert!(matches!(err, ModelError::Invalid(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("not an extractive QA reader")
            && msg.contains("BertForSequenceClassification"),
        "{msg}"
    );
    // A config that claims BertForQuestionAnswering over weights without qa_outputs.
    let cross_cfg = std::fs::read_to_string(cross.join("config.json")).unwrap();
    std::fs::write(
        d.join("config.json"),
        cross_cfg.replace("BertForSequenceClassification", "BertForQuestionAnswering"),
    )
    .unwrap();
    copy(&cross, "model.safetensors");
    let err = QaReader::load(&d, "x", 64).err().unwrap();
    assert!(matches!(err, ModelError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("qa_outputs"), "{err}");
    // Weights with qa_outputs are a reader whatever the architectures say.
    let cfg = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    std::fs::write(
        d.join("config.json"),
        cfg.replace("BertForQuestionAnswering", "BertModel"),
    )
    .unwrap();
    copy(&fixture(), "model.safetensors");
    assert!(QaReader::load(&d, "x", 64).is_ok());
    // Not BERT.
    std::fs::write(
        d.join("config.json"),
        cfg.replace("\"model_type\": \"bert\"", "\"model_type\": \"gpt2\""),
    )
    .unwrap();
    let err = QaReader::load(&d, "x", 64).err().unwrap().to_string();
    assert!(err.contains("not BERT"), "{err}");
    // Unreadable config.
    std::fs::write(d.join("config.json"), "{ not json").unwrap();
    let err = QaReader::load(&d, "x", 64).err().unwrap();
    assert!(matches!(err, ModelError::Invalid(_)), "{err}");
    // Truncated weights.
    copy(&fixture(), "config.json");
    let w = std::fs::read(fixture().join("model.safetensors")).unwrap();
    std::fs::write(d.join("model.safetensors"), &w[..w.len() / 2]).unwrap();
    let err = QaReader::load(&d, "x", 64).err().unwrap();
    assert!(matches!(err, ModelError::Invalid(_)), "{err}");
    // No room for a question and a context.
    copy(&fixture(), "model.safetensors");
    let err = QaReader::load(&d, "x", 4).err().unwrap();
    assert!(matches!(err, ModelError::Invalid(_)), "{err}");
}
