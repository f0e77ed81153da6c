//! Text normalization, token counting and hashing shared by every loader.
//!
//! Every loader builds its document text through a [`DocBuilder`], so all formats are
//! normalized the same way and character spans (of chunks and section marks) are exact
//! offsets into the stored, normalized text.

use sha2::{Digest, Sha256};

/// Month names and their abbreviations, lower case: what marks a date in text (the
/// conflict test of the loop and the QA eval's answer types read dates alike).
pub const MONTHS: &[&str] = &[
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "jan",
    "feb",
    "mar",
    "apr",
    "jun",
    "jul",
    "aug",
    "sep",
    "sept",
    "oct",
    "nov",
    "dec",
];

/// Weekday names, lower case: capitalised in text, but no names.
pub const WEEKDAYS: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

/// SHA-256 of bytes, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Count tokens the way chunk sizes are measured: every run of letters or digits is a
/// token, and so is every other non-space character. This tracks word-piece counts of
/// BERT-style tokenizers closely for English prose without needing a vocabulary.
pub fn count_tokens(text: &str) -> usize {
    let mut n = 0;
    let mut in_word = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if !in_word {
                n += 1;
                in_word = true;
            }
        } else {
            in_word = false;
            if !c.is_whitespace() {
                n += 1;
            }
        }
    }
    n
}

/// A section boundary inside a document: from `start` (character offset in the
/// normalized text) on, text belongs to the section `path` (outermost heading first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionMark {
    /// Character offset where the section starts.
    pub start: usize,
    /// Heading path.
    pub path: Vec<String>,
}

/// Builds the normalized text of one document line by line.
///
/// Normalization: `\r\n` and `\r` become `\n`; control characters other than tab are
/// dropped; trailing white space on each line is removed; runs of blank lines collapse to
/// one; leading and trailing blank lines are dropped. The result is stable: normalizing a
/// normalized text changes nothing.
#[derive(Debug, Default, Clone)]
pub struct DocBuilder {
    text: String,
    chars: usize,
    pending_blank: bool,
    sections: Vec<SectionMark>,
}

impl DocBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Append text that may span several lines.
    pub fn push_text(&mut self, text: &str) {
        for line in split_lines(text) {
            self.push_line(line);
        }
    }

    /// Append one line (any line break inside is treated as a break).
    pub fn push_line(&mut self, line: &str) {
        if line.contains(['\n', '\r']) {
            self.push_text(line);
            return;
        }
        let cleaned: String = line
            .chars()
            .filter(|c| !c.is_control() || *c == '\t')
            .collect();
        let cleaned = cleaned.trim_end();
        if cleaned.is_empty() {
            if !self.text.is_empty() {
                self.pending_blank = true;
            }
            return;
        }
        if !self.text.is_empty() {
            self.text.push('\n');
            self.chars += 1;
            if self.pending_blank {
                self.text.push('\n');
                self.chars += 1;
            }
        }
        self.pending_blank = false;
        self.text.push_str(cleaned);
        self.chars += cleaned.chars().count();
    }

    /// End the current paragraph (a blank line follows unless nothing does).
    pub fn end_paragraph(&mut self) {
        if !self.text.is_empty() {
            self.pending_blank = true;
        }
    }

    /// Start a section at the current position. Text pushed from here on belongs to it.
    pub fn mark_section(&mut self, path: Vec<String>) {
        // The section starts where the next line will start.
        let start = if self.text.is_empty() {
            0
        } else if self.pending_blank {
            self.chars + 2
        } else {
            self.chars + 1
        };
        if let Some(last) = self.sections.last_mut() {
            if last.start == start {
                last.path = path;
                return;
            }
        }
        self.sections.push(SectionMark { start, path });
    }

    /// Length of the text so far, in characters.
    pub fn char_len(&self) -> usize {
        self.chars
    }

    /// Length of the text so far, in bytes.
    pub fn byte_len(&self) -> usize {
        self.text.len()
    }

    /// True when nothing but white space was pushed.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The normalized text and its section marks (marks past the end are dropped).
    pub fn finish(self) -> (String, Vec<SectionMark>) {
        let chars = self.chars;
        let sections = self
            .sections
            .into_iter()
            .filter(|s| s.start < chars)
            .collect();
        (self.text, sections)
    }
}

/// Split on `\n`, `\r\n` and lone `\r`.
fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split('\n')
        .flat_map(|l| l.strip_suffix('\r').unwrap_or(l).split('\r'))
}

/// Normalize a whole text at once (see [`DocBuilder`]).
pub fn normalize(text: &str) -> String {
    let mut b = DocBuilder::new();
    b.push_text(text);
    b.finish().0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn normalizes_line_endings_blank_runs_and_controls() {
        let t = normalize("\r\n\n a\u{0}b  \r\n\r\n\r\n\tc\rd\n\n");
        assert_eq!(t, " ab\n\n\tc\nd");
    }

    #[test]
    fn counts_tokens() {
        assert_eq!(count_tokens("Hello, world! 42 x"), 6);
        assert_eq!(count_tokens(""), 0);
        assert_eq!(count_tokens("état-civil"), 3);
    }

    #[test]
    fn section_marks_point_at_next_line() {
        let mut b = DocBuilder::new();
        b.mark_section(vec!["A".into()]);
        b.push_line("first");
        b.end_paragraph();
        b.mark_section(vec!["A".into(), "B".into()]);
        b.push_line("second");
        let (text, marks) = b.finish();
        assert_eq!(text, "first\n\nsecond");
        assert_eq!(marks[0].start, 0);
        assert_eq!(marks[1].start, 7);
        assert_eq!(&text[7..], "second");
    }

    proptest! {
        #[test]
        fn normalize_is_idempotent(s in "(?s).{0,200}") {
            let once = normalize(&s);
            prop_assert_eq!(normalize(&once), once.clone());
            prop_assert_eq!(DocBuilder::new().char_len(), 0);
            let mut b = DocBuilder::new();
            b.push_text(&s);
            let n = b.char_len();
            prop_assert_eq!(n, b.finish().0.chars().count());
        }
    }
}
