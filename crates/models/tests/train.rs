//! Training an evaluator (`neuralcore train evaluator`) on the tiny random BERT of the
//! cross-encoder fixture: it learns a rule the base does not know, the same seed gives
//! the same bytes, an interrupted run resumes to the same result, and the artifact
//! loads as a cross-encoder that scores exactly as training did.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use neuralcore_models::train::{
    train_evaluator, training_logits, Progress, TrainOptions, TrainPair,
};
use neuralcore_models::CrossEncoder;

fn base() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-cross-encoder")
}

const WORDS: &[&str] = &[
    "tide", "sun", "earth", "ocean", "sea", "water", "rise", "fall", "gravity", "pull", "coast",
    "cell", "protein", "gene", "bread", "dough", "yeast", "cat", "dog", "lava", "rock",
];

/// Relevant when the passage names the moon — a rule the random base cannot know.
fn pairs(n: usize) -> Vec<TrainPair> {
    let mut s: u64 = 7;
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) as usize
    };
    (0..n)
        .map(|i| {
            let mut words: Vec<&str> = (0..6).map(|_| WORDS[next() % WORDS.len()]).collect();
            let relevant = i % 2 == 0;
            if relevant {
                let at = next() % words.len();
                words[at] = "moon";
            }
            TrainPair {
                question: format!("what causes the tides {}", WORDS[next() % WORDS.len()]),
                passage: words.join(" "),
                label: if relevant { 1.0 } else { 0.0 },
                source: String::new(),
            }
        })
        .collect()
}

fn opts() -> TrainOptions {
    TrainOptions {
        top_layers: 1,
        epochs: 10,
        batch: 8,
        lr: 3e-3,
        held_out: 0.25,
        max_length: 48,
        ..Default::default()
    }
}

fn quiet(_: Progress) -> ControlFlow<()> {
    ControlFlow::Continue(())
}

#[test]
fn the_evaluator_learns_a_rule_and_held_out_loss_falls() {
    let tmp = tempfile::tempdir().unwrap();
    let m = train_evaluator(
        &base(),
        "tiny",
        &pairs(240),
        vec![],
        &opts(),
        tmp.path(),
        &mut quiet,
    )
    .unwrap();
    assert_eq!(m.curve.len(), 10);
    let first = &m.curve[0];
    let last = m.curve.last().unwrap();
    assert!(last.held_out_loss < first.held_out_loss, "{:?}", m.curve);
    assert!(last.held_out_accuracy >= 0.9, "{:?}", m.curve);
    assert!(last.held_out_auc >= 0.95, "{:?}", m.curve);
    assert!(m.pairs.1 > 20, "held out {}", m.pairs.1);
    // The artifact is the trained tensors only: the top layer, pooler and classifier.
    let names: Vec<String> = candle_core::safetensors::load(
        tmp.path().join("evaluator.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap()
    .into_keys()
    .collect();
    assert!(
        names.iter().all(|n| n.starts_with("bert.encoder.layer.1.")
            || n.starts_with("bert.pooler.")
            || n.starts_with("classifier.")),
        "{names:?}"
    );
}

#[test]
fn the_artifact_scores_as_training_did_and_is_deterministic_and_resumable() {
    let a = tempfile::tempdir().unwrap();
    let data = pairs(160);
    let mut o = opts();
    o.epochs = 2;
    train_evaluator(&base(), "tiny", &data, vec![], &o, a.path(), &mut quiet).unwrap();

    // Loaded as a cross-encoder (the fast encoder computes the whole last layer), it
    // gives the logits training computed (the last layer for [CLS] only, in candle).
    let ce = CrossEncoder::load_adapted(&base(), a.path(), 48).unwrap();
    let probe: Vec<(&str, &str)> = data
        .iter()
        .take(12)
        .map(|p| (p.question.as_str(), p.passage.as_str()))
        .collect();
    let want = training_logits(&base(), a.path(), &probe, 48).unwrap();
    for ((q, p), w) in probe.iter().zip(&want) {
        let got = ce.logits(q, &[p]).unwrap()[0];
        assert!((got - w).abs() < 2e-3, "{got} vs {w}");
    }

    // The same seed: the same bytes.
    let b = tempfile::tempdir().unwrap();
    train_evaluator(&base(), "tiny", &data, vec![], &o, b.path(), &mut quiet).unwrap();
    let bytes = |d: &Path| std::fs::read(d.join("evaluator.safetensors")).unwrap();
    assert_eq!(bytes(a.path()), bytes(b.path()));

    // Interrupted after the first epoch, then run again: it resumes, to the same bytes.
    let c = tempfile::tempdir().unwrap();
    let e = train_evaluator(
        &base(),
        "tiny",
        &data,
        vec![],
        &o,
        c.path(),
        &mut |p| match p {
            Progress::Epoch(_) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("interrupted after epoch 1"), "{e}");
    assert!(!c.path().join("evaluator.safetensors").exists());
    let mut resumed = None;
    let m = train_evaluator(&base(), "tiny", &data, vec![], &o, c.path(), &mut |p| {
        if let Progress::Resumed(n) = p {
            resumed = Some(n);
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(resumed, Some(1));
    assert_eq!(m.curve.len(), 2);
    assert_eq!(bytes(a.path()), bytes(c.path()));

    // Other pairs of the same number are other data: trained afresh, not resumed
    // (the checkpoint once knew only the count, and took another set's for its own).
    let mut other = data.clone();
    other[0].passage.push_str(" Changed.");
    let mut resumed = None;
    train_evaluator(&base(), "tiny", &other, vec![], &o, c.path(), &mut |p| {
        if let Progress::Resumed(n) = p {
            resumed = Some(n);
        }
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(resumed, None);
}

#[test]
fn bad_training_input_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let one_class: Vec<TrainPair> = pairs(10).into_iter().filter(|p| p.label == 1.0).collect();
    let e = train_evaluator(
        &base(),
        "tiny",
        &one_class,
        vec![],
        &opts(),
        tmp.path(),
        &mut quiet,
    )
    .unwrap_err();
    assert!(e.to_string().contains("needs both"), "{e}");
    let mut empty = pairs(4);
    empty[2].passage = "  ".into();
    let e = train_evaluator(
        &base(),
        "tiny",
        &empty,
        vec![],
        &opts(),
        tmp.path(),
        &mut quiet,
    )
    .unwrap_err();
    assert!(e.to_string().contains("pair 3 of 4"), "{e}");
    let e = train_evaluator(
        &tmp.path().join("nowhere"),
        "tiny",
        &pairs(4),
        vec![],
        &opts(),
        tmp.path(),
        &mut quiet,
    )
    .unwrap_err();
    assert!(e.to_string().contains("config.json"), "{e}");
    let mut o = opts();
    o.top_layers = 9;
    let e = train_evaluator(
        &base(),
        "tiny",
        &pairs(8),
        vec![],
        &o,
        tmp.path(),
        &mut quiet,
    )
    .unwrap_err();
    assert!(e.to_string().contains("top_layers"), "{e}");
    // An artifact over another base is refused.
    let a = tempfile::tempdir().unwrap();
    let mut o = opts();
    o.epochs = 1;
    train_evaluator(
        &base(),
        "tiny",
        &pairs(40),
        vec![],
        &o,
        a.path(),
        &mut quiet,
    )
    .unwrap();
    let other = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(base().join(f), other.path().join(f)).unwrap();
    }
    let mut w = std::fs::read(other.path().join("model.safetensors")).unwrap();
    let n = w.len();
    w[n - 1] ^= 1;
    std::fs::write(other.path().join("model.safetensors"), w).unwrap();
    let e = CrossEncoder::load_adapted(other.path(), a.path(), 48)
        .err()
        .unwrap();
    assert!(e.to_string().contains("trained on base"), "{e}");
}
