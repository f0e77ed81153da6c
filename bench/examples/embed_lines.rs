//! Embed a JSON list of texts as documents, for the reranker prototype in
//! `bench/tuning/locomo` (the ±3-turn windows).
//!
//! `cargo run --release -p neuralcore-bench --example embed_lines -- MODEL_DIR IN.json OUT.f32`

use std::io::Write;
use std::path::Path;

use neuralcore_core::{Embedder, TextKind};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    assert_eq!(a.len(), 4, "usage: embed_lines MODEL_DIR IN.json OUT.f32");
    let e = neuralcore_models::SentenceEmbedder::load(Path::new(&a[1]), "m").unwrap();
    let texts: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(&a[2]).unwrap()).unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(&a[3]).unwrap());
    for c in texts.chunks(64) {
        let r: Vec<&str> = c.iter().map(String::as_str).collect();
        for v in e.embed(&r, TextKind::Document).unwrap() {
            for x in v {
                f.write_all(&x.to_le_bytes()).unwrap();
            }
        }
    }
}
