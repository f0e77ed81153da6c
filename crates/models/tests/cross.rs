//! The cross-encoder against Hugging Face transformers on a tiny random
//! `BertForSequenceClassification` (made by `bench/embed/make_cross_encoder_fixture.py`;
//! no real cross-encoder weights can be fetched here), and bad model folders.

use std::path::{Path, PathBuf};

use neuralcore_core::{ModelError, Reranker};
use neuralcore_models::CrossEncoder;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-cross-encoder")
}

#[test]
fn logits_match_transformers() {
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("reference.json")).unwrap())
            .unwrap();
    let max_len = reference["max_length"].as_u64().unwrap() as usize;
    let ce = CrossEncoder::load(&fixture(), "tiny", max_len).unwrap();
    let pairs = reference["pairs"].as_array().unwrap();
    // Each pair alone, then all pairs of the first query in one call (batched, padded
    // and sorted internally): the same logits.
    let mut worst = 0f32;
    for p in pairs {
        let q = p["query"].as_str().unwrap();
        let passage = p["passage"].as_str().unwrap();
        let want = p["logit"].as_f64().unwrap() as f32;
        let got = ce.logits(q, &[passage]).unwrap()[0];
        worst = worst.max((got - want).abs());
    }
    assert!(worst < 1e-4, "largest logit difference {worst}");
    let q0 = pairs[0]["query"].as_str().unwrap();
    let same: Vec<&serde_json::Value> = pairs.iter().filter(|p| p["query"] == q0).collect();
    let passages: Vec<&str> = same
        .iter()
        .map(|p| p["passage"].as_str().unwrap())
        .collect();
    let got = ce.logits(q0, &passages).unwrap();
    for (g, p) in got.iter().zip(&same) {
        assert!((g - p["logit"].as_f64().unwrap() as f32).abs() < 1e-4);
    }
    // Scores are the sigmoid of the logits, in [0, 1], in order.
    let s = ce.score(q0, &passages).unwrap();
    for (s, l) in s.iter().zip(&got) {
        assert!((s - 1.0 / (1.0 + (-l).exp())).abs() < 1e-6 && (0.0..=1.0).contains(s));
    }
    assert!(ce.score(q0, &[]).unwrap().is_empty());
    assert!(ce.model_id().starts_with("tiny;"));
}

#[test]
fn bad_folders_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let err = CrossEncoder::load(tmp.path(), "x", 64).err().unwrap();
    assert!(matches!(err, ModelError::NotFound(_)), "{err}");
    // A bi-encoder is not a cross-encoder.
    let d = tmp.path().join("bi");
    std::fs::create_dir(&d).unwrap();
    for f in ["tokenizer.json", "model.safetensors"] {
        std::fs::copy(fixture().join(f), d.join(f)).unwrap();
    }
    let cfg = std::fs::read_to_string(fixture().join("config.json")).unwrap();
    std::fs::write(
        d.join("config.json"),
        cfg.replace("BertForSequenceClassification", "BertModel"),
    )
    .unwrap();
    let err = CrossEncoder::load(&d, "x", 64).err().unwrap().to_string();
    assert!(err.contains("not a cross-encoder"), "{err}");
    // Two labels: not a relevance score.
    std::fs::write(
        d.join("config.json"),
        cfg.replace(
            "\"num_attention_heads\"",
            "\"num_labels\": 2, \"num_attention_heads\"",
        ),
    )
    .unwrap();
    let err = CrossEncoder::load(&d, "x", 64).err().unwrap().to_string();
    assert!(err.contains("2 labels"), "{err}");
    // Truncated weights.
    std::fs::copy(fixture().join("config.json"), d.join("config.json")).unwrap();
    let w = std::fs::read(fixture().join("model.safetensors")).unwrap();
    std::fs::write(d.join("model.safetensors"), &w[..w.len() / 2]).unwrap();
    let err = CrossEncoder::load(&d, "x", 64).err().unwrap();
    assert!(matches!(err, ModelError::Invalid(_)), "{err}");
}
