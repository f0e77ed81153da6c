//! Loaders: one per format. Each turns a file into one or more [`LoadedDoc`]s, built
//! through `neuralcore_core::text::DocBuilder` so all text is normalized alike.
//!
//! A loader hands documents to a sink one at a time, so formats with many records
//! (JSONL, CSV) and very large text files are read in bounded memory. A loader that
//! fails returns a [`LoadError`] naming the reason; the caller discards whatever the
//! sink received from that file, so a file is stored whole or not at all.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

use neuralcore_core::text::SectionMark;

mod csv;
mod html;
mod json;
mod markdown;
mod pdf;
mod txt;

pub use html::html_to_text;

/// One document produced by a loader.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedDoc {
    /// Title (file stem when the format has none).
    pub title: String,
    /// Normalized text.
    pub text: String,
    /// Section marks (character offsets into `text`).
    pub sections: Vec<SectionMark>,
    /// Metadata (front matter, JSON fields, CSV columns, ...).
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Id the source gives the document (BEIR `_id`, CSV id column), if any.
    pub external_id: Option<String>,
    /// Position in the source when it holds several documents (`line 3`, `row 7`, `part 2`).
    pub locator: Option<String>,
}

impl LoadedDoc {
    /// A document with just a title and text (already normalized).
    pub fn new(title: impl Into<String>, text: String) -> Self {
        LoadedDoc {
            title: title.into(),
            text,
            sections: Vec::new(),
            metadata: BTreeMap::new(),
            external_id: None,
            locator: None,
        }
    }
}

/// Settings that loaders honour.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoaderOptions {
    /// Largest file that formats read whole (md, html, pdf, json) may have, in bytes.
    /// Streamed formats (txt, jsonl, csv) have no limit.
    pub max_file_bytes: u64,
    /// Text files longer than this many characters are split into parts of about this
    /// size, each its own document, at paragraph breaks where possible.
    pub max_document_chars: usize,
    /// CSV: columns whose values make the text (empty: every column).
    pub csv_text_columns: Vec<String>,
    /// CSV: column that holds the row's id, if any.
    pub csv_id_column: Option<String>,
    /// CSV: column that holds the row's title, if any (default: `title` when present).
    pub csv_title_column: Option<String>,
    /// CSV: field delimiter (one ASCII character).
    pub csv_delimiter: char,
}

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            max_file_bytes: 64 * 1024 * 1024,
            max_document_chars: 2_000_000,
            csv_text_columns: Vec::new(),
            csv_id_column: None,
            csv_title_column: None,
            csv_delimiter: ',',
        }
    }
}

/// What a loader is given.
#[derive(Debug, Clone, Copy)]
pub struct SourceInput<'a> {
    /// The file.
    pub path: &'a Path,
    /// Title to use when the format gives none (the file stem).
    pub default_title: &'a str,
    /// Settings.
    pub options: &'a LoaderOptions,
}

/// Non-fatal findings of a loader (shown as warnings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Warnings, one line each.
    pub warnings: Vec<String>,
}

/// Why a file could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// The file could not be read.
    Io(String),
    /// The file holds binary data (NUL bytes) where text was expected.
    Binary,
    /// The file is empty, or holds only white space.
    Empty,
    /// A record of the file is malformed.
    Malformed {
        /// 1-based line (JSONL, JSON) or record (CSV) number.
        line: u64,
        /// What is wrong.
        reason: String,
    },
    /// The whole file could not be parsed.
    Parse(String),
    /// The file is larger than a format read whole allows.
    TooLarge {
        /// Size of the file.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// A PDF without a text layer (scanned images, say).
    NoText,
    /// No loader reads this kind of file.
    Unsupported(String),
    /// The sink refused a document (store error, say).
    Sink(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io(e) => write!(f, "cannot read: {e}"),
            LoadError::Binary => write!(f, "binary content (NUL bytes), not text"),
            LoadError::Empty => write!(f, "empty file (no text)"),
            LoadError::Malformed { line, reason } => write!(f, "malformed record at line {line}: {reason}"),
            LoadError::Parse(e) => write!(f, "cannot parse: {e}"),
            LoadError::TooLarge { size, limit } => write!(
                f,
                "file is {size} bytes, over the {limit}-byte limit for formats read whole (raise ingest.max_file_bytes)"
            ),
            LoadError::NoText => write!(f, "PDF has no extractable text layer (scanned or image-only?)"),
            LoadError::Unsupported(e) => write!(f, "unsupported format: {e}"),
            LoadError::Sink(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Receives each document a loader produces.
pub type Sink<'s> = dyn FnMut(LoadedDoc) -> Result<(), LoadError> + 's;

/// A format reader. Implementations keep no state between calls.
pub trait Loader: Send + Sync {
    /// Name recorded in provenance (`txt`, `markdown`, ...).
    fn name(&self) -> &'static str;
    /// File extensions (lowercase, without dot) it reads.
    fn extensions(&self) -> &'static [&'static str];
    /// Read the file, handing each document to `sink`.
    fn load(&self, input: &SourceInput<'_>, sink: &mut Sink<'_>) -> Result<LoadReport, LoadError>;
}

static LOADERS: &[&dyn Loader] = &[
    &txt::TxtLoader,
    &markdown::MarkdownLoader,
    &html::HtmlLoader,
    &pdf::PdfLoader,
    &json::JsonLoader,
    &json::JsonlLoader,
    &csv::CsvLoader,
];

/// Every built-in loader.
pub fn loaders() -> &'static [&'static dyn Loader] {
    LOADERS
}

/// The loader for a path, chosen by extension.
pub fn loader_for(path: &Path) -> Option<&'static dyn Loader> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    LOADERS
        .iter()
        .copied()
        .find(|l| l.extensions().contains(&ext.as_str()))
}

/// Bytes inspected for NUL to tell binary from text.
const SNIFF_BYTES: usize = 8192;

/// Read a whole file as text: refuses files over `limit`, binary files (NUL bytes in the
/// first 8 KiB) and empty ones; decodes invalid UTF-8 lossily and says so in `report`.
pub(crate) fn read_text(
    path: &Path,
    limit: u64,
    report: &mut LoadReport,
) -> Result<String, LoadError> {
    let bytes = read_bytes(path, limit)?;
    if bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) {
        return Err(LoadError::Binary);
    }
    Ok(decode_lossy(bytes, report))
}

/// Read a whole file as bytes, refusing files over `limit` and empty ones.
/// Open a file for reading; a folder is an error.
pub(crate) fn open_file(path: &Path) -> Result<std::fs::File, LoadError> {
    let file = std::fs::File::open(path).map_err(|e| LoadError::Io(e.to_string()))?;
    if file
        .metadata()
        .map_err(|e| LoadError::Io(e.to_string()))?
        .is_dir()
    {
        return Err(LoadError::Io("is a directory".into()));
    }
    Ok(file)
}

pub(crate) fn read_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, LoadError> {
    let file = open_file(path)?;
    let size = file
        .metadata()
        .map_err(|e| LoadError::Io(e.to_string()))?
        .len();
    if size > limit {
        return Err(LoadError::TooLarge { size, limit });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| LoadError::Io(e.to_string()))?;
    if bytes.len() as u64 > limit {
        return Err(LoadError::TooLarge {
            size: bytes.len() as u64,
            limit,
        });
    }
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(LoadError::Empty);
    }
    Ok(bytes)
}

/// Decode UTF-8, replacing invalid sequences and warning once with their count.
pub(crate) fn decode_lossy(bytes: Vec<u8>, report: &mut LoadReport) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s.strip_prefix('\u{feff}').map(str::to_owned).unwrap_or(s),
        Err(e) => {
            let s = String::from_utf8_lossy(e.as_bytes()).into_owned();
            let n = s.matches('\u{fffd}').count();
            report.warnings.push(format!(
                "invalid UTF-8: decoded lossily ({n} replacement character{})",
                if n == 1 { "" } else { "s" }
            ));
            s
        }
    }
}

/// A streaming line reader over a file: yields lines as text, decoding invalid UTF-8
/// lossily (counted for one warning at the end) and refusing NUL bytes.
pub(crate) struct LineReader {
    inner: std::io::BufReader<std::fs::File>,
    buf: Vec<u8>,
    /// 1-based number of the last line returned.
    pub line_no: u64,
    invalid_lines: u64,
    any_text: bool,
}

impl LineReader {
    pub(crate) fn open(path: &Path) -> Result<Self, LoadError> {
        let file = open_file(path)?;
        Ok(LineReader {
            inner: std::io::BufReader::with_capacity(1 << 16, file),
            buf: Vec::new(),
            line_no: 0,
            invalid_lines: 0,
            any_text: false,
        })
    }

    /// The next line without its line break, or `None` at the end.
    pub(crate) fn next_line(&mut self) -> Result<Option<String>, LoadError> {
        use std::io::BufRead;
        self.buf.clear();
        let n = self
            .inner
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| LoadError::Io(e.to_string()))?;
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        if self.buf.contains(&0) {
            return Err(LoadError::Binary);
        }
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        let mut s = match std::str::from_utf8(&self.buf) {
            Ok(s) => s.to_owned(),
            Err(_) => {
                self.invalid_lines += 1;
                String::from_utf8_lossy(&self.buf).into_owned()
            }
        };
        if self.line_no == 1 {
            if let Some(rest) = s.strip_prefix('\u{feff}') {
                s = rest.to_owned();
            }
        }
        if !s.trim().is_empty() {
            self.any_text = true;
        }
        Ok(Some(s))
    }

    /// Add the lossy-decoding warning, if any, and fail when no line held text.
    pub(crate) fn finish(self, report: &mut LoadReport) -> Result<(), LoadError> {
        if self.invalid_lines > 0 {
            report.warnings.push(format!(
                "invalid UTF-8 on {} line{}: decoded lossily",
                self.invalid_lines,
                if self.invalid_lines == 1 { "" } else { "s" }
            ));
        }
        if !self.any_text {
            return Err(LoadError::Empty);
        }
        Ok(())
    }
}
