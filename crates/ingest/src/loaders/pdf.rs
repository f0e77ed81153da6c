//! PDF loader: the text layer of every page, pages separated by paragraph breaks.
//!
//! Extraction uses `pdf-extract`, which can panic on malformed files; it runs under
//! `catch_unwind` on a helper thread with a large stack (deeply nested objects recurse
//! deeply), so a bad PDF becomes [`LoadError::Parse`] instead of taking the process down.
//! A page tree whose `/Parent` chain loops, which pdf-extract would follow forever, is
//! refused before extraction.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use neuralcore_core::text::DocBuilder;

use super::{read_bytes, LoadError, LoadReport, LoadedDoc, Loader, Sink, SourceInput};

/// Reads `.pdf` files.
pub struct PdfLoader;

/// Stack for the extraction thread.
const EXTRACT_STACK_BYTES: usize = 64 * 1024 * 1024;

impl Loader for PdfLoader {
    fn name(&self) -> &'static str {
        "pdf"
    }

    fn extensions(&self) -> &'static [&'static str] {
        &["pdf"]
    }

    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError> {
        let bytes = read_bytes(input.path, input.options.max_file_bytes)?;
        let pages = extract_pages(bytes)?;

        let mut b = DocBuilder::new();
        for page in &pages {
            for line in page.lines() {
                // Leading spaces in extracted PDF text are layout, not content.
                b.push_line(line.trim());
            }
            b.end_paragraph();
        }
        let (text, sections) = b.finish();
        if text.is_empty() {
            return Err(LoadError::NoText);
        }
        let mut metadata = BTreeMap::new();
        metadata.insert("pages".to_owned(), serde_json::Value::from(pages.len()));
        sink(LoadedDoc {
            title: input.default_title.to_owned(),
            text,
            sections,
            metadata,
            external_id: None,
            locator: None,
        })?;
        Ok(LoadReport::default())
    }
}

/// Text of each page; a parser error or panic becomes [`LoadError::Parse`].
fn extract_pages(bytes: Vec<u8>) -> Result<Vec<String>, LoadError> {
    let run = move || catch_unwind(AssertUnwindSafe(|| extract_text(&bytes)));
    let outcome = match std::thread::Builder::new()
        .name("pdf-extract".into())
        .stack_size(EXTRACT_STACK_BYTES)
        .spawn(run)
    {
        Ok(handle) => handle.join().unwrap_or_else(Err),
        Err(e) => {
            return Err(LoadError::Io(format!(
                "cannot start the PDF extraction thread: {e}"
            )))
        }
    };
    match outcome {
        Ok(Ok(pages)) => Ok(pages),
        Ok(Err(e)) => Err(LoadError::Parse(format!("invalid PDF: {e}"))),
        Err(payload) => {
            let detail = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".to_owned());
            Err(LoadError::Parse(format!(
                "PDF text extraction failed (parser panicked: {detail})"
            )))
        }
    }
}

/// Why a PDF's text cannot be extracted.
enum ExtractError {
    Pdf(pdf_extract::OutputError),
    /// A structure the extractor would follow forever.
    Malformed(String),
}

impl std::fmt::Display for ExtractError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExtractError::Pdf(e) => write!(f, "{e}"),
            ExtractError::Malformed(m) => f.write_str(m),
        }
    }
}

/// The text of each page, as `pdf_extract::extract_text_from_mem_by_pages` gives it, but
/// refusing first what would make it run forever: a page whose `/Parent` chain comes
/// back to itself (pdf-extract looks inherited attributes up that chain with no end; a
/// file fuzzing found, kept in fuzz/regressions/load_pdf).
fn extract_text(bytes: &[u8]) -> Result<Vec<String>, ExtractError> {
    use pdf_extract::{Document, Object, OutputError, PlainTextOutput};
    let mut doc = Document::load_mem(bytes).map_err(|e| ExtractError::Pdf(e.into()))?;
    if doc.is_encrypted() {
        // What pdf-extract does: the empty user password opens most "protected" files.
        doc.decrypt("")
            .map_err(|e| ExtractError::Pdf(OutputError::PdfError(e)))?;
    }
    for (n, id) in doc.get_pages() {
        let mut seen = std::collections::HashSet::from([id]);
        let mut at = id;
        while let Ok(Object::Reference(parent)) = doc
            .get_dictionary(at)
            .and_then(|d| d.get(b"Parent"))
            .cloned()
        {
            if !seen.insert(parent) {
                return Err(ExtractError::Malformed(format!(
                    "malformed PDF: the page tree loops back on itself above page {n}"
                )));
            }
            at = parent;
        }
    }
    let mut pages = Vec::new();
    for n in 1.. {
        let mut text = String::new();
        let done = {
            let mut out = PlainTextOutput::new(&mut text);
            pdf_extract::output_doc_page(&doc, &mut out, n).is_err()
        };
        if done {
            break;
        }
        pages.push(text);
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::super::LoaderOptions;
    use super::*;

    use crate::testdata::pdf_from_streams as make_pdf;

    fn run(name: &str, bytes: &[u8], options: &LoaderOptions) -> Result<Vec<LoadedDoc>, LoadError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let input = SourceInput {
            path: &path,
            default_title: "paper",
            options,
        };
        let mut docs = Vec::new();
        let report = PdfLoader.load(&input, &mut |d| {
            docs.push(d);
            Ok(())
        })?;
        assert!(report.warnings.is_empty());
        Ok(docs)
    }

    fn words(text: &str) -> Vec<&str> {
        text.split_whitespace().collect()
    }

    #[test]
    fn extracts_text_of_a_one_page_pdf() {
        let pdf = make_pdf(&["BT /F1 24 Tf 72 700 Td (Hello PDF world) Tj ET"]);
        let docs = run("hello.pdf", &pdf, &LoaderOptions::default()).unwrap();
        assert_eq!(docs.len(), 1);
        let d = &docs[0];
        assert_eq!(words(&d.text), ["Hello", "PDF", "world"]);
        assert_eq!(d.text.trim(), d.text);
        assert_eq!(d.title, "paper");
        assert_eq!(d.metadata.get("pages"), Some(&serde_json::json!(1)));
    }

    #[test]
    fn pages_are_separated_by_paragraph_breaks() {
        let pdf = make_pdf(&[
            "BT /F1 12 Tf 72 700 Td (First page) Tj ET",
            "0 0 m 100 100 l S",
            "BT /F1 12 Tf 72 700 Td (Third page) Tj ET",
        ]);
        let docs = run("three.pdf", &pdf, &LoaderOptions::default()).unwrap();
        let d = &docs[0];
        assert_eq!(d.metadata.get("pages"), Some(&serde_json::json!(3)));
        let paragraphs: Vec<Vec<&str>> = d.text.split("\n\n").map(words).collect();
        assert_eq!(paragraphs, [vec!["First", "page"], vec!["Third", "page"]]);
    }

    #[test]
    fn page_without_text_is_no_text() {
        let pdf = make_pdf(&["0 0 m 200 200 l S"]);
        assert_eq!(
            run("scan.pdf", &pdf, &LoaderOptions::default()).unwrap_err(),
            LoadError::NoText
        );
        let pdf = make_pdf(&["BT /F1 12 Tf 72 700 Td (   ) Tj ET"]);
        assert_eq!(
            run("blank.pdf", &pdf, &LoaderOptions::default()).unwrap_err(),
            LoadError::NoText
        );
    }

    #[test]
    fn garbage_is_a_parse_error_not_a_panic() {
        let err = run(
            "junk.pdf",
            b"this is not a PDF at all, just text\n",
            &LoaderOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(err, LoadError::Parse(_)), "{err:?}");
        // A valid header with a truncated body.
        let mut pdf = make_pdf(&["BT /F1 24 Tf 72 700 Td (Hello) Tj ET"]);
        pdf.truncate(120);
        let err = run("cut.pdf", &pdf, &LoaderOptions::default()).unwrap_err();
        assert!(matches!(err, LoadError::Parse(_)), "{err:?}");
        let garbage: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let err = run("noise.pdf", &garbage, &LoaderOptions::default()).unwrap_err();
        assert!(matches!(err, LoadError::Parse(_)), "{err:?}");
    }

    #[test]
    fn parser_panic_becomes_a_parse_error() {
        // Showing text before selecting a font makes pdf-extract unwrap a `None`.
        let pdf = make_pdf(&["BT 72 700 Td (Hello) Tj ET"]);
        match run("nofont.pdf", &pdf, &LoaderOptions::default()) {
            Err(LoadError::Parse(m)) => assert!(m.contains("panicked"), "{m}"),
            other => panic!("expected Parse, got {other:?}"),
        }
    }

    #[test]
    fn empty_and_oversized_files() {
        assert_eq!(
            run("e.pdf", b"", &LoaderOptions::default()).unwrap_err(),
            LoadError::Empty
        );
        let pdf = make_pdf(&["BT /F1 24 Tf 72 700 Td (Hello PDF world) Tj ET"]);
        let small = LoaderOptions {
            max_file_bytes: 100,
            ..LoaderOptions::default()
        };
        assert_eq!(
            run("big.pdf", &pdf, &small).unwrap_err(),
            LoadError::TooLarge {
                size: pdf.len() as u64,
                limit: 100
            }
        );
    }
}
