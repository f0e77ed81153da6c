//! Plain text. Read line by line, so any size fits in bounded memory: a text longer than
//! `max_document_chars` becomes several documents ("parts"), split at a paragraph break
//! once the limit is reached (or at a line break at 1.25 times the limit).

use neuralcore_core::text::DocBuilder;

use super::{LineReader, LoadError, LoadReport, LoadedDoc, Loader, Sink, SourceInput};

/// Reads `.txt` files (and `.text`, `.log`).
pub struct TxtLoader;

impl Loader for TxtLoader {
    fn name(&self) -> &'static str {
        "txt"
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["txt", "text", "log"]
    }

    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError> {
        let mut report = LoadReport::default();
        let mut reader = LineReader::open(input.path)?;
        let limit = input.options.max_document_chars.max(1000);
        let hard_limit = limit + limit / 4;
        let mut part = 1u32;
        let mut parts_emitted = 0u32;
        let mut b = DocBuilder::new();
        let mut split = false;
        while let Some(line) = reader.next_line()? {
            let at_break = line.trim().is_empty();
            if (b.char_len() >= limit && at_break) || b.char_len() >= hard_limit {
                emit(input, std::mem::take(&mut b), part, true, sink)?;
                parts_emitted += 1;
                part += 1;
                split = true;
            }
            b.push_line(&line);
        }
        reader.finish(&mut report)?;
        if !b.is_empty() {
            emit(input, b, part, split, sink)?;
            parts_emitted += 1;
        }
        if parts_emitted > 1 {
            report.warnings.push(format!(
                "long text split into {parts_emitted} parts of about {limit} characters (ingest.max_document_chars)"
            ));
        }
        Ok(report)
    }
}

fn emit(
    input: &SourceInput<'_>,
    b: DocBuilder,
    part: u32,
    split: bool,
    sink: &mut Sink<'_>,
) -> Result<(), LoadError> {
    let (text, _) = b.finish();
    if text.is_empty() {
        return Ok(());
    }
    let mut doc = LoadedDoc::new(input.default_title, text);
    if split {
        doc.title = format!("{} (part {part})", input.default_title);
        doc.locator = Some(format!("part {part}"));
    }
    sink(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loaders::LoaderOptions;
    use std::path::Path;

    fn load(path: &Path, opts: &LoaderOptions) -> Result<(Vec<LoadedDoc>, LoadReport), LoadError> {
        let mut docs = Vec::new();
        let input = SourceInput {
            path,
            default_title: "t",
            options: opts,
        };
        let r = TxtLoader.load(&input, &mut |d| {
            docs.push(d);
            Ok(())
        })?;
        Ok((docs, r))
    }

    #[test]
    fn reads_text_and_normalizes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        std::fs::write(&p, "Hello\r\nworld  \n\n\n\nbye\n").unwrap();
        let (docs, r) = load(&p, &LoaderOptions::default()).unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].text, "Hello\nworld\n\nbye");
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn bad_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LoaderOptions::default();
        let empty = dir.path().join("e.txt");
        std::fs::write(&empty, " \n\n ").unwrap();
        assert_eq!(load(&empty, &opts).unwrap_err(), LoadError::Empty);
        let bin = dir.path().join("b.txt");
        std::fs::write(&bin, b"abc\x00\x01\x02").unwrap();
        assert_eq!(load(&bin, &opts).unwrap_err(), LoadError::Binary);
        let missing = dir.path().join("missing.txt");
        assert!(matches!(
            load(&missing, &opts).unwrap_err(),
            LoadError::Io(_)
        ));
        let bad = dir.path().join("u.txt");
        std::fs::write(&bad, b"caf\xe9 au lait\n").unwrap();
        let (docs, r) = load(&bad, &opts).unwrap();
        assert_eq!(docs[0].text, "caf\u{fffd} au lait");
        assert!(r.warnings[0].contains("invalid UTF-8"), "{:?}", r.warnings);
    }

    #[test]
    fn long_text_is_split_into_parts_at_paragraphs() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("long.txt");
        let para = "word ".repeat(100);
        let body: String = (0..50).map(|i| format!("{i} {para}\n\n")).collect();
        std::fs::write(&p, &body).unwrap();
        let opts = LoaderOptions {
            max_document_chars: 2000,
            ..Default::default()
        };
        let (docs, r) = load(&p, &opts).unwrap();
        assert!(docs.len() > 5, "{}", docs.len());
        for (i, d) in docs.iter().enumerate() {
            assert_eq!(
                d.locator.as_deref(),
                Some(format!("part {}", i + 1).as_str())
            );
            assert!(d.text.chars().count() <= 2600);
        }
        let joined: Vec<&str> = docs.iter().map(|d| d.text.as_str()).collect();
        assert_eq!(joined.join("\n\n"), neuralcore_core::text::normalize(&body));
        assert!(r.warnings[0].contains("parts"));
    }
}
