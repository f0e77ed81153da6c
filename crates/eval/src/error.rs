//! The error type of this crate.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// What can go wrong while loading an evaluation dataset.
///
/// Every variant names the file (and, for parse errors, the line number or JSON location) so the
/// message can be shown to a user as-is.
#[derive(Debug, Error)]
pub enum EvalError {
    /// A required folder (the dataset folder itself, or its `qrels/` folder) does not exist
    /// or is not a directory.
    #[error("folder not found: {}", path.display())]
    MissingDir {
        /// The folder that was expected.
        path: PathBuf,
    },
    /// A required file (`corpus.jsonl`, `queries.jsonl`) does not exist.
    #[error("file not found: {}", path.display())]
    MissingFile {
        /// The file that was expected.
        path: PathBuf,
    },
    /// The requested split has no `qrels/<split>.tsv` file.
    #[error(
        "unknown split `{split}`: {} does not exist (available splits: {})",
        path.display(),
        list_or_none(available)
    )]
    UnknownSplit {
        /// The split that was asked for.
        split: String,
        /// The qrels file that would hold it.
        path: PathBuf,
        /// Splits that do exist (stems of the `*.tsv` files in `qrels/`), sorted.
        available: Vec<String>,
    },
    /// A line of a JSON-lines file is not valid JSON or lacks a required field.
    #[error("{}:{line}: malformed JSON line: {message}", path.display())]
    MalformedJson {
        /// The file being read.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// A line of a qrels TSV file has the wrong number of fields, an empty id or a
    /// non-integer score.
    #[error("{}:{line}: malformed TSV line: {message}", path.display())]
    MalformedTsv {
        /// The file being read.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// A whole-file JSON document is not valid JSON.
    #[error("{}:{line}:{column}: not valid JSON: {message}", path.display())]
    InvalidJson {
        /// The file being read.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser found wrong.
        message: String,
    },
    /// A JSON file is valid JSON but not shaped as the dataset format requires (a missing
    /// field, a wrong type, an answer offset past the end of its context, ...).
    #[error("{}: {at}: {message}", path.display())]
    BadShape {
        /// The file being read.
        path: PathBuf,
        /// Where in the document, e.g. `data[0].paragraphs[3].qas[1].answers[0]`, or
        /// `top level`.
        at: String,
        /// What is wrong there.
        message: String,
    },
    /// A file or folder is in none of the known dataset formats.
    #[error("{}: unknown QA dataset format: {message}", path.display())]
    UnknownFormat {
        /// The file or folder given.
        path: PathBuf,
        /// What was looked for and found.
        message: String,
    },
    /// A selection asked of a loader (such as a range of articles) does not fit the data.
    #[error("{}: {message}", path.display())]
    InvalidSelection {
        /// The file being read.
        path: PathBuf,
        /// What was asked and what the file has.
        message: String,
    },
    /// Reading a file or listing a folder failed (permissions, invalid UTF-8, ...).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or folder being read.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items.join(", ")
    }
}
