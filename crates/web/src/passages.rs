//! Splitting cleaned page text into passages of about a given size, for grading.

/// A piece of text that is not cut further unless it is too long: a paragraph, a
/// sentence or line of a long paragraph, or part of a long sentence.
#[derive(Debug, Clone, Copy)]
struct Unit {
    /// Byte range in the text.
    start: usize,
    end: usize,
    /// Characters in the range.
    chars: usize,
    /// Index of its paragraph.
    para: usize,
    /// Whether it is its whole paragraph.
    whole: bool,
}

/// Split cleaned text into passages of at most `max_chars` characters (at least 1), cut
/// at paragraph breaks (blank lines) where possible, else at sentence ends or line
/// breaks, else between words; only a single word longer than `max_chars` is cut inside.
/// Consecutive short paragraphs are packed together, and so are the pieces of one long
/// paragraph, but a passage never holds part of a long paragraph and part of another
/// paragraph. Passages keep the text's own
/// line breaks, are trimmed, and are never empty; blank text gives no passages.
///
/// ```
/// let text = "First paragraph. It has two sentences.\n\nSecond one.";
/// assert_eq!(
///     neuralcore_web::passages(text, 40),
///     ["First paragraph. It has two sentences.", "Second one."]
/// );
/// assert_eq!(neuralcore_web::passages(text, 1000), [text]);
/// ```
pub fn passages(text: &str, max_chars: usize) -> Vec<String> {
    let max = max_chars.max(1);
    let mut units = Vec::new();
    for (para, (start, end)) in paragraphs(text).into_iter().enumerate() {
        push_units(text, para, start, end, max, &mut units);
    }

    let mut out = Vec::new();
    // The passage being built, as a unit whose `para`/`whole` are those of its last unit.
    let mut current: Option<Unit> = None;
    for u in units {
        current = Some(match current {
            None => u,
            Some(cur) => {
                let joined = cur.chars + text[cur.end..u.start].chars().count() + u.chars;
                let may_join = u.para == cur.para || (u.whole && cur.whole);
                if may_join && joined <= max {
                    Unit {
                        start: cur.start,
                        end: u.end,
                        chars: joined,
                        ..u
                    }
                } else {
                    out.push(text[cur.start..cur.end].to_owned());
                    u
                }
            }
        });
    }
    if let Some(cur) = current {
        out.push(text[cur.start..cur.end].to_owned());
    }
    out
}

/// Byte ranges of the paragraphs (runs of non-blank lines), trimmed.
fn paragraphs(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut para: Option<(usize, usize)> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        if line.trim().is_empty() {
            out.extend(para.take());
        } else {
            let (s, _) = para.unwrap_or((start, start));
            para = Some((s, offset));
        }
    }
    out.extend(para);
    out.into_iter()
        .filter_map(|(s, e)| trim_range(text, s, e))
        .collect()
}

/// The range without leading and trailing white space; `None` when nothing is left.
fn trim_range(text: &str, start: usize, end: usize) -> Option<(usize, usize)> {
    let slice = &text[start..end];
    let lead = slice.len() - slice.trim_start().len();
    let trimmed = slice.trim();
    (!trimmed.is_empty()).then(|| (start + lead, start + lead + trimmed.len()))
}

/// Units of the paragraph `text[start..end]`: the whole paragraph when it fits, else its
/// sentences and lines, each cut between words when still too long.
fn push_units(text: &str, para: usize, start: usize, end: usize, max: usize, out: &mut Vec<Unit>) {
    let chars = text[start..end].chars().count();
    if chars <= max {
        out.push(Unit {
            start,
            end,
            chars,
            para,
            whole: true,
        });
        return;
    }
    for (s, e) in sentences(text, start, end) {
        let chars = text[s..e].chars().count();
        if chars <= max {
            out.push(Unit {
                start: s,
                end: e,
                chars,
                para,
                whole: false,
            });
        } else {
            push_word_pieces(text, para, s, e, max, out);
        }
    }
}

/// Sentence and line ranges of `text[start..end]`, by the project's one splitter
/// ([`neuralcore_core::sentence`]; a line break always ends one here).
fn sentences(text: &str, start: usize, end: usize) -> Vec<(usize, usize)> {
    use neuralcore_core::sentence::{sentence_spans, Lines};
    sentence_spans(&text[start..end], Lines::Break)
        .into_iter()
        .map(|(s, e)| (start + s, start + e))
        .collect()
}

/// Pieces of at most `max` characters of `text[start..end]`, cut between words; a word
/// longer than `max` is cut at character boundaries.
fn push_word_pieces(
    text: &str,
    para: usize,
    start: usize,
    end: usize,
    max: usize,
    out: &mut Vec<Unit>,
) {
    let unit = |start, end, chars| Unit {
        start,
        end,
        chars,
        para,
        whole: false,
    };
    let mut piece: Option<Unit> = None;
    let mut offset = start;
    for word in text[start..end].split_whitespace() {
        let ws = offset + text[offset..end].find(word).unwrap_or(0);
        let we = ws + word.len();
        offset = we;
        let wchars = word.chars().count();
        if wchars > max {
            out.extend(piece.take());
            let mut s = ws;
            let mut n = 0;
            for (i, _) in word.char_indices() {
                if n == max {
                    out.push(unit(s, ws + i, n));
                    s = ws + i;
                    n = 0;
                }
                n += 1;
            }
            piece = Some(unit(s, we, n));
            continue;
        }
        piece = Some(match piece {
            None => unit(ws, we, wchars),
            Some(p) => {
                let joined = p.chars + text[p.end..ws].chars().count() + wchars;
                if joined <= max {
                    unit(p.start, we, joined)
                } else {
                    out.push(p);
                    unit(ws, we, wchars)
                }
            }
        });
    }
    out.extend(piece);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, max: usize) -> Vec<String> {
        let p = passages(text, max);
        for s in &p {
            assert!(!s.is_empty());
            assert_eq!(s.trim(), s);
            assert!(s.chars().count() <= max.max(1), "{s:?} longer than {max}");
        }
        // Nothing is lost: the words come out in order.
        let words_in: Vec<&str> = text.split_whitespace().collect();
        let joined = p.join(" ");
        let words_out: Vec<&str> = joined.split_whitespace().collect();
        if max
            >= text
                .split_whitespace()
                .map(|w| w.chars().count())
                .max()
                .unwrap_or(0)
        {
            assert_eq!(words_in, words_out);
        }
        p
    }

    #[test]
    fn empty_and_short_texts() {
        assert!(passages("", 100).is_empty());
        assert!(passages(" \n\n \t", 100).is_empty());
        assert_eq!(check("  one line  ", 100), ["one line"]);
    }

    #[test]
    fn packs_paragraphs_and_cuts_at_sentences() {
        let text = "Alpha one. Alpha two is longer.\n\nBeta.\n\nGamma one! Gamma two? Gamma three.";
        assert_eq!(
            check(text, 40),
            [
                "Alpha one. Alpha two is longer.\n\nBeta.",
                "Gamma one! Gamma two? Gamma three."
            ]
        );
        assert_eq!(
            check(text, 20),
            [
                "Alpha one.",
                "Alpha two is longer.",
                "Beta.",
                "Gamma one!",
                "Gamma two?",
                "Gamma three."
            ]
        );
        assert_eq!(
            check("Short.\n\nAlso short.", 100),
            ["Short.\n\nAlso short."]
        );
    }

    #[test]
    fn abbreviations_and_lines() {
        let text = "Use tools, e.g. a hammer. Then stop.\nNext line here";
        assert_eq!(
            check(text, 30),
            ["Use tools, e.g. a hammer.", "Then stop.\nNext line here"]
        );
    }

    #[test]
    fn long_sentences_and_words_are_cut() {
        let text = "aaaa bbbb cccc dddd eeee";
        assert_eq!(check(text, 9), ["aaaa bbbb", "cccc dddd", "eeee"]);
        assert_eq!(check("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(check("x ééééé y", 2), ["x", "éé", "éé", "é", "y"]);
        assert_eq!(check("abc", 0), ["a", "b", "c"]);
    }

    #[test]
    fn unicode_sentence_ends() {
        assert_eq!(check("第一句。第二句。", 4), ["第一句。", "第二句。"]);
    }
}
