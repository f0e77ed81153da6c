//! What the fuzz targets share: a loader run on bytes as a file of its format.

use std::path::PathBuf;
use std::sync::OnceLock;

use neuralcore_ingest::{loader_for, Chunker, LoaderOptions, SentenceChunker, SourceInput};

/// A folder of this process's own for the files the loaders read (under /dev/shm when
/// there is one, so inputs never touch a disk).
fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = ["/dev/shm", "/tmp"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_dir())
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!("neuralcore-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("fuzz scratch folder");
        dir
    })
}

/// Load `data` as a file with extension `ext` (small limits, so a huge input is refused
/// the way a real one is) and chunk each document as ingest does: every document and
/// error must come back without a panic, and every chunk must be a span of its text.
pub fn load(ext: &str, data: &[u8]) {
    let path = scratch().join(format!("input.{ext}"));
    std::fs::write(&path, data).expect("write fuzz input");
    let loader = loader_for(&path).expect("a loader for the extension");
    let options = LoaderOptions {
        max_file_bytes: 1 << 20,
        max_document_chars: 4096,
        ..LoaderOptions::default()
    };
    let input = SourceInput {
        path: &path,
        default_title: "input",
        options: &options,
    };
    let chunker = SentenceChunker {
        target_tokens: 64,
        overlap_tokens: 8,
    };
    let _ = loader.load(&input, &mut |d| {
        let chars = d.text.chars().count();
        for s in &d.sections {
            assert!(s.start <= chars, "section mark past the text's end");
        }
        for c in chunker.chunk(&d.text, &d.sections) {
            assert!(c.start <= c.end && c.end <= chars, "chunk outside the text");
            assert!(
                d.text.get(c.bytes.0..c.bytes.1).is_some(),
                "chunk bytes not a span"
            );
        }
        Ok(())
    });
}
