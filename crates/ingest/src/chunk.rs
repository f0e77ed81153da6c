//! Chunkers split a document's normalized text into spans for retrieval.
//!
//! [`SentenceChunker`] (the default) is sentence- and paragraph-aware: it cuts the text
//! into units (sentences, and lines for lists or hard-wrapped text), packs whole units
//! into chunks of at most `target_tokens` tokens, prefers to end a chunk at a paragraph
//! break, repeats up to `overlap_tokens` tokens of whole trailing units at the start of
//! the next chunk, and never lets a chunk cross a section (heading) boundary.

use neuralcore_core::sentence::{sentence_spans, Lines};
use neuralcore_core::text::{count_tokens, SectionMark};

/// One chunk as a span of the document text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSpan {
    /// First character (offset in characters).
    pub start: usize,
    /// One past the last character.
    pub end: usize,
    /// The same span in bytes, for slicing the text.
    pub bytes: (usize, usize),
    /// Section path of the text it sits in.
    pub section: Vec<String>,
    /// Token count of the span's text.
    pub tokens: usize,
}

/// Splits a normalized document text into chunk spans.
pub trait Chunker: Send + Sync {
    /// Name, recorded in the ingest settings fingerprint.
    fn name(&self) -> String;
    /// The spans, in document order, covering every non-blank part of the text.
    fn chunk(&self, text: &str, sections: &[SectionMark]) -> Vec<ChunkSpan>;
}

/// Sentence- and paragraph-aware packing chunker (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentenceChunker {
    /// Largest chunk, in tokens (a single longer sentence is cut at word boundaries).
    pub target_tokens: usize,
    /// Tokens of whole trailing units repeated at the start of the next chunk.
    pub overlap_tokens: usize,
}

impl Default for SentenceChunker {
    fn default() -> Self {
        SentenceChunker {
            target_tokens: 512,
            overlap_tokens: 64,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Unit {
    start: usize, // byte offsets
    end: usize,
    tokens: usize,
    para_end: bool,
}

impl Chunker for SentenceChunker {
    fn name(&self) -> String {
        format!(
            "sentence(target={},overlap={})",
            self.target_tokens, self.overlap_tokens
        )
    }

    fn chunk(&self, text: &str, sections: &[SectionMark]) -> Vec<ChunkSpan> {
        let target = self.target_tokens.max(8);
        let overlap = self.overlap_tokens.min(target / 2);
        // Section boundaries in bytes.
        let char_starts: Vec<usize> = sections.iter().map(|s| s.start).collect();
        let byte_starts = chars_to_bytes(text, &char_starts);
        let mut segments: Vec<(usize, usize, Vec<String>)> = Vec::new();
        let mut prev = 0;
        let mut path: Vec<String> = Vec::new();
        for (s, b) in sections.iter().zip(&byte_starts) {
            if *b > prev {
                segments.push((prev, *b, path.clone()));
            }
            prev = *b;
            path = s.path.clone();
        }
        if prev < text.len() {
            segments.push((prev, text.len(), path));
        }
        let mut spans: Vec<(usize, usize, Vec<String>)> = Vec::new();
        for (s, e, path) in segments {
            let units = split_units(text, s, e, target);
            for (a, b) in pack(&units, target, overlap) {
                spans.push((a, b, path.clone()));
            }
        }
        // Convert byte spans to character spans in one pass.
        let mut bounds: Vec<usize> = spans.iter().flat_map(|(a, b, _)| [*a, *b]).collect();
        bounds.sort_unstable();
        bounds.dedup();
        let chars = bytes_to_chars(text, &bounds);
        let lookup = |b: usize| chars[bounds.binary_search(&b).expect("bound present")];
        spans
            .into_iter()
            .map(|(a, b, section)| ChunkSpan {
                start: lookup(a),
                end: lookup(b),
                bytes: (a, b),
                tokens: count_tokens(&text[a..b]),
                section,
            })
            .collect()
    }
}

/// Greedy packing of units into `(start, end)` byte spans.
fn pack(units: &[Unit], target: usize, overlap: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < units.len() {
        let mut j = i;
        let mut tok = 0;
        let mut last_para: Option<usize> = None;
        while j < units.len() && (j == i || tok + units[j].tokens <= target) {
            tok += units[j].tokens;
            j += 1;
            if units[j - 1].para_end && tok * 10 >= target * 6 {
                last_para = Some(j);
            }
        }
        if j < units.len() {
            if let Some(p) = last_para {
                j = p;
            }
        }
        out.push((units[i].start, units[j - 1].end));
        if j >= units.len() {
            break;
        }
        let mut s = j;
        let mut ov = 0;
        // Repeat whole trailing units up to `overlap` tokens, but never so many that
        // the next chunk could not also take the unit after them: every chunk must
        // bring new text.
        while s > i + 1
            && ov + units[s - 1].tokens <= overlap
            && ov + units[s - 1].tokens + units[j].tokens <= target
            && !units[s - 1].para_end
        {
            s -= 1;
            ov += units[s].tokens;
        }
        i = s;
    }
    out
}

/// Split `text[s..e]` into sentence/line units with the project's one splitter
/// ([`neuralcore_core::sentence`]: every line break ends a unit here, so lists, tables
/// and code stay line by line); units over `target` tokens are cut at word boundaries.
/// A unit followed by a blank line ends a paragraph.
fn split_units(text: &str, s: usize, e: usize, target: usize) -> Vec<Unit> {
    let seg = &text[s..e];
    let spans = sentence_spans(seg, Lines::Break);
    let mut units = Vec::new();
    for (k, &(a, b)) in spans.iter().enumerate() {
        let next = spans.get(k + 1).map_or(seg.len(), |n| n.0);
        let para_end = k + 1 == spans.len() || seg[b..next].matches('\n').count() >= 2;
        let piece = &seg[a..b];
        let tokens = count_tokens(piece);
        if tokens <= target {
            units.push(Unit {
                start: s + a,
                end: s + b,
                tokens,
                para_end,
            });
            continue;
        }
        // Cut at word boundaries into windows of `target` tokens.
        let mut ws = a;
        let mut tok = 0;
        let mut last_end = a;
        for (off, w) in word_spans(piece) {
            let wt = count_tokens(w);
            if tok + wt > target && tok > 0 {
                units.push(Unit {
                    start: s + ws,
                    end: s + last_end,
                    tokens: tok,
                    para_end: false,
                });
                ws = a + off;
                tok = 0;
            }
            tok += wt;
            last_end = a + off + w.len();
        }
        units.push(Unit {
            start: s + ws,
            end: s + last_end,
            tokens: tok,
            para_end,
        });
    }
    units
}

/// `(byte offset, word)` of each white-space separated word.
fn word_spans(s: &str) -> impl Iterator<Item = (usize, &str)> {
    s.split_whitespace()
        .map(move |w| (w.as_ptr() as usize - s.as_ptr() as usize, w))
}

/// Map ascending character offsets to byte offsets.
fn chars_to_bytes(text: &str, chars: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(chars.len());
    let mut it = text.char_indices().enumerate();
    let mut cur = (0usize, (0usize, ' '));
    for &c in chars {
        while cur.0 < c {
            match it.next() {
                Some(x) => cur = x,
                None => {
                    cur = (c, (text.len(), ' '));
                    break;
                }
            }
            if cur.0 == c {
                break;
            }
        }
        out.push(if cur.0 == c { cur.1 .0 } else { text.len() });
    }
    out
}

/// Map ascending byte offsets (on char boundaries) to character offsets.
fn bytes_to_chars(text: &str, bytes: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut chars = 0;
    let mut pos = 0;
    for &b in bytes {
        chars += text[pos..b].chars().count();
        pos = b;
        out.push(chars);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn spans_text(text: &str, spans: &[ChunkSpan]) -> Vec<String> {
        spans
            .iter()
            .map(|s| text.chars().skip(s.start).take(s.end - s.start).collect())
            .collect()
    }

    #[test]
    fn packs_sentences_and_respects_abbreviations() {
        let text = "Dr. Smith et al. found it. The effect was large, e.g. in mice. Third sentence here!\n\nNew paragraph starts.";
        let c = SentenceChunker {
            target_tokens: 12,
            overlap_tokens: 0,
        };
        let spans = c.chunk(text, &[]);
        let t = spans_text(text, &spans);
        assert_eq!(t[0], "Dr. Smith et al. found it.");
        assert!(
            t.iter().any(|s| s == "The effect was large, e.g. in mice."),
            "{t:?}"
        );
        assert_eq!(
            t.last().unwrap(),
            "Third sentence here!\n\nNew paragraph starts."
        );
    }

    #[test]
    fn overlap_repeats_whole_sentences() {
        let text = "One two three. Four five six. Seven eight nine. Ten eleven twelve.";
        let c = SentenceChunker {
            target_tokens: 8,
            overlap_tokens: 4,
        };
        let t = spans_text(text, &c.chunk(text, &[]));
        assert_eq!(t[0], "One two three. Four five six.");
        assert_eq!(t[1], "Four five six. Seven eight nine.");
    }

    #[test]
    fn every_chunk_brings_new_text_when_overlapping() {
        // A3 B3 C3 then two 10-token windows: overlap must not produce a chunk that
        // only repeats the end of the previous one.
        let text = format!(
            "aa bb cc. dd ee ff. gg hh ii. {}",
            "w ".repeat(20).trim_end()
        );
        let c = SentenceChunker {
            target_tokens: 10,
            overlap_tokens: 5,
        };
        let spans = c.chunk(&text, &[]);
        for w in spans.windows(2) {
            assert!(
                w[1].end > w[0].end,
                "chunk {:?} adds nothing after {:?}",
                w[1],
                w[0]
            );
        }
    }

    #[test]
    fn never_crosses_sections_and_keeps_paths() {
        let text = "# A\nalpha beta.\n\n# B\ngamma delta.";
        let marks = vec![
            SectionMark {
                start: 0,
                path: vec!["A".into()],
            },
            SectionMark {
                start: 17,
                path: vec!["B".into()],
            },
        ];
        let c = SentenceChunker {
            target_tokens: 100,
            overlap_tokens: 10,
        };
        let spans = c.chunk(text, &marks);
        let t = spans_text(text, &spans);
        assert_eq!(t, vec!["# A\nalpha beta.", "# B\ngamma delta."]);
        assert_eq!(spans[1].section, vec!["B".to_string()]);
    }

    #[test]
    fn long_sentence_is_cut_and_unicode_spans_are_characters() {
        let text = format!("é {}", "mot ".repeat(50).trim_end());
        let c = SentenceChunker {
            target_tokens: 10,
            overlap_tokens: 0,
        };
        let spans = c.chunk(&text, &[]);
        assert!(spans.len() >= 5);
        assert!(spans.iter().all(|s| s.tokens <= 10));
        assert_eq!(
            spans_text(&text, &spans)[0],
            "é mot mot mot mot mot mot mot mot mot"
        );
    }

    proptest! {
        #[test]
        fn spans_are_ordered_in_bounds_and_cover_all_words(
            words in proptest::collection::vec("[a-zé]{1,8}[.!?,]?", 1..200),
            breaks in proptest::collection::vec(0u8..10, 200),
            target in 8usize..60, overlap in 0usize..20,
        ) {
            let mut text = String::new();
            for (i, w) in words.iter().enumerate() {
                if i > 0 {
                    text.push_str(match breaks[i] { 0 => "\n\n", 1 => "\n", _ => " " });
                }
                text.push_str(w);
            }
            let c = SentenceChunker { target_tokens: target, overlap_tokens: overlap };
            let spans = c.chunk(&text, &[]);
            let n = text.chars().count();
            let mut covered = vec![false; n];
            let mut last_start = 0;
            for s in &spans {
                prop_assert!(s.start < s.end && s.end <= n);
                prop_assert!(s.start >= last_start);
                last_start = s.start;
                for c in covered.iter_mut().take(s.end).skip(s.start) { *c = true; }
            }
            for (i, ch) in text.chars().enumerate() {
                if !ch.is_whitespace() { prop_assert!(covered[i], "char {} not covered", i); }
            }
        }
    }
}
