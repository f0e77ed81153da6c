//! Dump LoCoMo turns, questions and MiniLM embeddings for the reranker prototype in
//! `bench/tuning/locomo` (see its README).
//!
//! `cargo run --release -p neuralcore-bench --example locomo_dump -- LOCOMO.json MODEL_DIR OUT_DIR`
//!
//! Writes `meta.json` (turns, questions, the indexed texts), `turns_ctx.f32` (each turn
//! embedded as memory search indexes it: speaker, text, the turns around it, the date),
//! `turns_alone.f32` (speaker and text only) and `questions.f32`, little-endian f32 rows
//! of the model's dimension.

use std::io::Write;
use std::path::Path;

use neuralcore_core::{Embedder, TextKind};

fn write_rows(path: &Path, rows: Vec<Vec<f32>>) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for v in rows {
        for x in v {
            f.write_all(&x.to_le_bytes()).unwrap();
        }
    }
}

fn embed(e: &dyn Embedder, texts: &[String]) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    for c in texts.chunks(64) {
        let r: Vec<&str> = c.iter().map(String::as_str).collect();
        out.extend(e.embed(&r, TextKind::Document).unwrap());
    }
    out
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    assert_eq!(
        a.len(),
        4,
        "usage: locomo_dump LOCOMO.json MODEL_DIR OUT_DIR"
    );
    let out = Path::new(&a[3]);
    std::fs::create_dir_all(out).unwrap();
    let set = neuralcore_eval::load_locomo(Path::new(&a[1]), None).unwrap();
    let e = neuralcore_models::SentenceEmbedder::load(Path::new(&a[2]), "m").unwrap();
    let same = |x: &neuralcore_eval::locomo::Turn, y: &neuralcore_eval::locomo::Turn| {
        x.conversation == y.conversation && x.session == y.session
    };
    let mut meta = Vec::new();
    let (mut ctx, mut alone) = (Vec::new(), Vec::new());
    for (i, t) in set.turns.iter().enumerate() {
        let mut s = format!("{}: {}", t.speaker, t.text);
        alone.push(s.clone());
        if let Some(p) = i
            .checked_sub(1)
            .map(|j| &set.turns[j])
            .filter(|p| same(p, t))
        {
            s.push_str(&format!(" [in reply to: {}: {}]", p.speaker, p.text));
        }
        if let Some(n) = set.turns.get(i + 1).filter(|n| same(n, t)) {
            s.push_str(&format!(" [answered by: {}: {}]", n.speaker, n.text));
        }
        s.push_str(&format!(" ({})", t.session_date));
        ctx.push(s);
        meta.push(serde_json::json!({"conv": t.conversation, "dia": t.dia_id,
            "session": t.session, "speaker": t.speaker, "text": t.text, "date": t.session_date}));
    }
    write_rows(&out.join("turns_ctx.f32"), embed(&e, &ctx));
    write_rows(&out.join("turns_alone.f32"), embed(&e, &alone));
    let questions: Vec<Vec<f32>> = set
        .questions
        .iter()
        .map(|q| e.embed_query(&q.question).unwrap())
        .collect();
    write_rows(&out.join("questions.f32"), questions);
    let qm: Vec<_> = set
        .questions
        .iter()
        .map(|q| {
            serde_json::json!({"conv": q.conversation, "q": q.question,
            "cat": q.category, "ev": q.evidence})
        })
        .collect();
    let all = serde_json::json!({"turns": meta, "questions": qm, "ctx_texts": ctx});
    std::fs::write(out.join("meta.json"), all.to_string()).unwrap();
}
