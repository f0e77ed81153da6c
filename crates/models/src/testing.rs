//! Where tests find the real model weights: `NEURALCORE_TEST_MODEL_DIR` (a model
//! folder), else `<repo>/.models/models/all-minilm-l6-v2`, which `scripts/test.sh`
//! fills with `neuralcore models pull`. A missing model is a test failure that says how
//! to get it, never a silent skip.

use std::path::{Path, PathBuf};

use crate::DEFAULT_EMBEDDER;

/// The all-MiniLM-L6-v2 folder; panics with instructions when it is not there.
pub fn model_dir() -> PathBuf {
    let dir = std::env::var_os("NEURALCORE_TEST_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../.models/models")
                .join(DEFAULT_EMBEDDER)
        });
    assert!(
        dir.join("model.safetensors").is_file(),
        "no model at {}: run scripts/test.sh, which pulls it (neuralcore --data-dir .models models pull)",
        dir.display()
    );
    dir
}

/// The model cache holding it (what `embedding.model_dir` takes).
pub fn model_cache() -> PathBuf {
    model_dir()
        .parent()
        .expect("a model folder has a parent")
        .to_path_buf()
}
