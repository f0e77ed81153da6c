//! Rendering: progress bars, summaries, search results, dumps.

use std::io::IsTerminal;
use std::path::Path;

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use neuralcore_app::SearchResponse;
use neuralcore_engine::{Engine, FileOutcome, IngestObserver, IngestSummary};

/// Ingest progress: a bar on a terminal (never with --json or -q), error lines always.
pub struct Progress {
    bar: Option<ProgressBar>,
    docs: u64,
    embedded: u64,
    /// When the first group of embeddings finished, and its size.
    embed_start: Option<(std::time::Instant, u64)>,
    quiet: bool,
}

impl Progress {
    pub fn new(silent: bool) -> Self {
        let bar = (!silent && std::io::stderr().is_terminal()).then(|| {
            let b = ProgressBar::new(0);
            b.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} files  {msg}",
                )
                .expect("valid template"),
            );
            b
        });
        Progress {
            bar,
            docs: 0,
            embedded: 0,
            embed_start: None,
            quiet: silent,
        }
    }

    fn line(&self, s: String) {
        match &self.bar {
            Some(b) => b.println(s),
            None => eprintln!("{s}"),
        }
    }

    fn message(&self) {
        let Some(b) = &self.bar else {
            return;
        };
        let secs = b.elapsed().as_secs_f64().max(1e-3);
        let mut m = format!("{} documents ({:.0}/s)", self.docs, self.docs as f64 / secs);
        if let Some((t, first)) = self.embed_start {
            // The clock starts when the first group is done, so it is not counted.
            let rate = (self.embedded - first) as f64 / t.elapsed().as_secs_f64().max(1e-3);
            m.push_str(&format!(", {} chunks embedded", self.embedded));
            if t.elapsed().as_secs_f64() > 1.0 {
                m.push_str(&format!(" ({rate:.0}/s)"));
            }
        }
        b.set_message(m);
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl IngestObserver for Progress {
    fn planned(&mut self, files: usize) {
        if let Some(b) = &self.bar {
            b.set_length(files as u64);
        }
    }
    fn document(&mut self) {
        self.docs += 1;
        if self.docs % 256 == 1 {
            self.message();
        }
    }
    fn embedded(&mut self, texts: usize) {
        self.embed_start
            .get_or_insert_with(|| (std::time::Instant::now(), texts as u64));
        self.embedded += texts as u64;
        self.message();
    }
    fn file_done(&mut self, path: &Path, outcome: &FileOutcome) {
        if let FileOutcome::Failed { reason } = outcome {
            self.line(format!("error: {}: {reason}", path.display()));
        }
        if let Some(b) = &self.bar {
            b.inc(1);
        }
    }
    fn resumed(&mut self, path: &Path, documents: usize) {
        if !self.quiet {
            self.line(format!(
                "resuming {}: {documents} documents stored by an unfinished ingest are kept",
                path.display()
            ));
        }
    }
    fn checkpoint(&mut self, path: &Path, documents: usize) {
        tracing::info!(
            path = %path.display(),
            documents,
            "checkpoint: committed"
        );
    }
    fn warning(&mut self, path: &Path, message: &str) {
        if !self.quiet {
            self.line(format!("warning: {}: {message}", path.display()));
        }
    }
}

pub fn print_ingest(json: bool, quiet: bool, s: &IngestSummary) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(s)?);
    } else if !quiet {
        println!(
            "{}: files seen {}, ingested {}, skipped {}, failed {}; documents {}, new chunks {}, removed documents {}; elapsed {:.2} s",
            s.collection,
            s.files_seen,
            s.ingested,
            s.skipped,
            s.failed,
            s.documents,
            s.chunks,
            s.removed_documents,
            s.elapsed_ms as f64 / 1000.0
        );
    }
    Ok(())
}

/// Wrap analyzed query terms found in `text` in ANSI bold yellow.
fn highlight(engine: &Engine, collection: &str, text: &str, terms: &[String]) -> String {
    let Ok(tokens) = engine.query_terms(collection, text) else {
        return text.to_string();
    };
    let mut out = String::with_capacity(text.len() + 64);
    let mut pos = 0;
    for (t, from, to) in tokens {
        if terms.contains(&t)
            && from >= pos
            && text.is_char_boundary(from)
            && text.is_char_boundary(to)
        {
            out.push_str(&text[pos..from]);
            out.push_str("\x1b[1;33m");
            out.push_str(&text[from..to]);
            out.push_str("\x1b[0m");
            pos = to;
        }
    }
    out.push_str(&text[pos..]);
    out
}

/// Search results: the versioned JSON (`neuralcore.search/v1`), or one block per hit.
pub fn print_search(
    json: bool,
    engine: Option<&Engine>,
    terms: &[String],
    res: &SearchResponse,
    full: bool,
) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(res)?);
        return Ok(());
    }
    let (query, collection) = (&res.query, &res.collection);
    if res.hits.is_empty() {
        println!("no results for {query:?} in collection {collection}");
        return Ok(());
    }
    let color = std::io::stdout().is_terminal();
    for h in &res.hits {
        let path = h.path.as_deref().unwrap_or("");
        let loc = h
            .locator
            .as_deref()
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        let section = if h.section.is_empty() {
            String::new()
        } else {
            format!(" › {}", h.section.join(" › "))
        };
        println!(
            "{:>2}. {:.3}  {}  [{}]",
            h.rank, h.score, h.title, h.chunk_id
        );
        println!("    {path}{loc}{section}");
        let mut text: String = if full || h.text.chars().count() <= 400 {
            h.text.clone()
        } else {
            let mut t: String = h.text.chars().take(400).collect();
            t.push('…');
            t
        };
        if let Some(engine) = engine.filter(|_| color) {
            text = highlight(engine, collection, &text, terms);
        }
        for line in text.lines() {
            println!("    {line}");
        }
        println!();
    }
    Ok(())
}

/// A canonical dump of a collection without timestamps: what an interrupted-and-resumed
/// ingest must reproduce exactly.
pub fn dump(engine: &Engine, collection: &str) -> Result<serde_json::Value> {
    let info = engine.collection(collection)?;
    let store = engine.store();
    let mut sources = Vec::new();
    for s in store.sources(collection)? {
        sources.push(serde_json::json!({
            "source_id": s.source_id, "raw_sha256": s.raw_sha256, "docs": s.docs.iter().map(|d| neuralcore_core::doc_id(*d)).collect::<Vec<_>>(),
            "loader": s.loader, "byte_size": s.byte_size,
        }));
    }
    let mut docs = Vec::new();
    for k in store.document_keys(collection)? {
        let Some(d) = store.document(collection, k)? else {
            continue;
        };
        let chunks = store.chunks(k)?;
        docs.push(serde_json::json!({
            "id": d.id(), "title": d.title, "sha256": d.content_sha256, "chars": d.char_len, "n_chunks": d.n_chunks,
            "metadata": d.metadata,
            "provenance": d.provenance.iter().map(|p| serde_json::json!({
                "source_id": p.source_id, "locator": p.locator, "external_id": p.external_id, "title": p.title,
                "sha256": p.content_sha256, "bytes": p.byte_size, "loader": p.loader,
            })).collect::<Vec<_>>(),
            "chunks": chunks.iter().map(|c| serde_json::json!({
                "ordinal": c.ordinal, "span": [c.span.0, c.span.1], "section": c.section, "tokens": c.tokens,
                "sha256": neuralcore_core::text::sha256_hex(c.text.as_bytes()),
            })).collect::<Vec<_>>(),
        }));
    }
    let idx = engine.keyword_index(collection)?;
    Ok(serde_json::json!({
        "collection": info.name,
        "counts": { "sources": info.sources, "documents": info.documents, "chunks": info.chunks },
        "indexed_chunks": idx.num_chunks(),
        "sources": sources,
        "documents": docs,
    }))
}
