//! The one sentence splitter of neuralcore, and the tests of what a sentence is.
//!
//! Chunking (ingest), evidence strips (the loop), web passages and the QA evaluation all
//! split text with [`sentence_spans`], so a sentence means the same thing everywhere: a
//! strip the loop cites is a sentence the chunker kept whole, and the evaluation counts
//! sentences the way the generator writes them.
//!
//! A sentence ends after `.`, `!`, `?` or `…` (or a CJK full stop) (plus any further terminators and closing
//! quotes or brackets) when white space follows and the next word does not start in lower
//! case, unless the period ends an abbreviation: an initial (`J. R. R. Tolkien`), a word
//! with an inner period (`U.S.`, `e.g.`, `Ph.D.`) or a listed one (`Mr.`, `St.`, `Jan.`,
//! `approx.`). A decimal (`3.5`) never ends one: no white space follows its period. A
//! blank line always ends a sentence; a single line break ends one only with
//! [`Lines::Break`] (lists, code, tables) and is wrapping inside a sentence with
//! [`Lines::Wrap`] (wrapped prose).

/// Abbreviations whose period does not end a sentence (lower case, without the period).
pub const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "no", "nos", "mt", "ft", "inc",
    "ltd", "co", "corp", "gen", "col", "lt", "sgt", "capt", "gov", "sen", "rep", "rev", "est",
    "approx", "fig", "figs", "eq", "eqs", "vol", "pp", "ca", "cf", "resp", "ref", "refs", "dept",
    "univ", "al", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
    "dec",
];

/// What a single line break means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Every line break ends a sentence (lists, code, tables, web text).
    Break,
    /// A single line break is wrapping inside a sentence; a blank line ends one.
    Wrap,
}

/// Byte spans `(start, end)` of the sentences of `text`, trimmed of white space, in
/// order; empty sentences are left out.
pub fn sentence_spans(text: &str, lines: Lines) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let n = chars.len();
    let at = |k: usize| chars.get(k).map_or(text.len(), |c| c.0);
    let mut out = Vec::new();
    let mut start = 0usize; // byte offset
    let mut i = 0usize;
    let push = |a: usize, b: usize, out: &mut Vec<(usize, usize)>| {
        let piece = &text[a..b];
        let lead = piece.len() - piece.trim_start().len();
        let t = piece.trim();
        if !t.is_empty() {
            out.push((a + lead, a + lead + t.len()));
        }
    };
    while i < n {
        let (pos, c) = chars[i];
        if c == '\n' {
            let blank = {
                let mut k = i + 1;
                while k < n && chars[k].1 != '\n' && chars[k].1.is_whitespace() {
                    k += 1;
                }
                k < n && chars[k].1 == '\n'
            };
            if blank || lines == Lines::Break {
                push(start, pos, &mut out);
                start = pos + 1;
            }
            i += 1;
            continue;
        }
        if !is_terminator(c) {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < n && (is_terminator(chars[j].1) || is_closer(chars[j].1)) {
            j += 1;
        }
        // The next word: past white space, and past a line break that only wraps.
        let mut k = j;
        while k < n && chars[k].1.is_whitespace() && !(lines == Lines::Break && chars[k].1 == '\n')
        {
            k += 1;
        }
        // CJK full stops need no space after them.
        let spaced = k > j || k == n || chars[k].1 == '\n' || matches!(c, '。' | '！' | '？');
        let next_ok = k >= n || !chars[k].1.is_lowercase();
        if spaced && next_ok && k < n && !(c == '.' && is_abbreviation(&text[start..pos])) {
            push(start, at(j), &mut out);
            start = at(j);
        }
        i = j;
    }
    push(start, text.len(), &mut out);
    out
}

/// The sentences of `text` as string slices ([`sentence_spans`]).
pub fn sentences(text: &str, lines: Lines) -> Vec<&str> {
    sentence_spans(text, lines)
        .into_iter()
        .map(|(a, b)| &text[a..b])
        .collect()
}

fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？')
}

fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | ')' | ']' | '”' | '’' | '»')
}

/// Whether the word at the end of `before` (the text up to a period) is an abbreviation:
/// an initial, a word with an inner period, or a listed abbreviation.
pub fn is_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(|c: char| c.is_whitespace() || c == '(' || c == '"' || c == '“')
        .next()
        .unwrap_or("");
    let word = word.trim_start_matches(|c: char| !c.is_alphanumeric());
    let letters = word.chars().count();
    if letters == 0 {
        return false;
    }
    // The capitalized last part of a joined word, when a title before a name, counts
    // too: "Trinity-St. Paul's", but not "Sun Yat-sen." or "yes/no.".
    let last = word.rsplit(['-', '–', '/']).next().unwrap_or(word);
    (letters == 1 && word.chars().all(char::is_alphabetic))
        || (word.contains('.') && word.chars().any(char::is_alphabetic))
        || ABBREVIATIONS.contains(&word.to_lowercase().as_str())
        || (last.len() < word.len()
            && last.starts_with(char::is_uppercase)
            && NAME_TITLES.contains(&last.to_lowercase().as_str()))
}

/// Abbreviated titles that stand before a name ("St. Paul", "Mt. Hood", "Dr. Jones").
const NAME_TITLES: &[&str] = &[
    "st", "mt", "ft", "dr", "mr", "mrs", "ms", "prof", "gen", "col", "lt", "sgt", "capt", "gov",
    "sen", "rep", "rev",
];

/// Words that stand for a subject named earlier: a sentence that opens with one needs the
/// sentence before it (or its document's title) to be understood.
pub const PRONOUNS: &[&str] = &[
    "he",
    "she",
    "it",
    "they",
    "this",
    "that",
    "these",
    "those",
    "his",
    "her",
    "its",
    "their",
    "there",
    "such",
    "both",
    "however",
    "also",
    "thus",
    "therefore",
    "then",
    "here",
];

/// Whether `sentence` opens with a word that refers back ([`PRONOUNS`]): "They are caused
/// by the gravitational pull of the Moon."
pub fn opens_with_reference(sentence: &str) -> bool {
    let first = sentence
        .split_whitespace()
        .next()
        .unwrap_or("")
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    PRONOUNS.contains(&first.as_str())
}

/// Finite verbs and auxiliaries common enough to be listed (forms that no suffix rule
/// finds: irregular pasts, the present of frequent verbs).
const FINITE: &[&str] = &[
    "is",
    "are",
    "was",
    "were",
    "am",
    "has",
    "have",
    "had",
    "do",
    "does",
    "did",
    "will",
    "would",
    "can",
    "could",
    "shall",
    "should",
    "may",
    "might",
    "must",
    "ran",
    "went",
    "came",
    "made",
    "became",
    "began",
    "took",
    "gave",
    "found",
    "won",
    "led",
    "held",
    "built",
    "wrote",
    "said",
    "saw",
    "told",
    "left",
    "grew",
    "knew",
    "fell",
    "rose",
    "brought",
    "bought",
    "thought",
    "taught",
    "fought",
    "sold",
    "sent",
    "spent",
    "stood",
    "met",
    "lost",
    "paid",
    "kept",
    "felt",
    "meant",
    "heard",
    "chose",
    "drew",
    "drove",
    "ate",
    "flew",
    "froze",
    "hid",
    "lay",
    "rode",
    "rang",
    "sang",
    "sank",
    "spoke",
    "stole",
    "swam",
    "threw",
    "wore",
    "woke",
    "broke",
    "struck",
    "hung",
    "shot",
    "spread",
    "caught",
    "fed",
    "fled",
    "forgave",
    "got",
    "hit",
    "let",
    "lent",
    "sought",
    "stuck",
    "swept",
    "swung",
    "wept",
    "wound",
    "set",
    "put",
    "cut",
    "read",
    "beat",
    "bore",
    "tore",
    "slew",
    "shone",
    "became",
    "overcame",
    "undertook",
    "rise",
    "fall",
    "lie",
    "live",
    "remain",
    "include",
    "contain",
    "consist",
    "mean",
    "use",
    "cause",
    "make",
    "give",
    "take",
    "show",
    "become",
    "refer",
    "seem",
    "appear",
    "provide",
    "require",
    "allow",
    "produce",
    "occur",
    "serve",
    "stand",
    "run",
    "work",
    "hold",
    "lead",
    "begin",
    "end",
    "cover",
    "describe",
    "depend",
    "affect",
    "follow",
    "play",
    "say",
    "state",
    "own",
    "keep",
    "go",
    "come",
    "get",
    "know",
    "need",
    "want",
    "like",
    "call",
    "form",
    "exist",
    "differ",
    "consider",
    "note",
    "suppose",
    "assume",
    "imagine",
    "compare",
    "disagree",
    "agree",
    "vary",
    "change",
    "move",
    "grow",
    "help",
    "feed",
    "eat",
    "flow",
    "orbit",
    "pull",
];

/// Whether `word` (lower case) is a listed finite verb or a regular past (`-ed`).
fn can_be_finite(word: &str) -> bool {
    if FINITE.contains(&word) {
        return true;
    }
    let n = word.chars().count();
    if n >= 4 && word.ends_with("ed") {
        return true;
    }
    false
}

/// Words after which a word in `-s` is a plural noun, not a verb ("the rules", "of tides").
const NOUN_BEFORE: &[&str] = &[
    "the", "a", "an", "of", "in", "on", "for", "with", "by", "to", "from", "at", "and", "or",
    "its", "their", "his", "her", "our", "your", "my", "these", "those", "many", "some", "all",
    "few", "several", "most", "more", "other", "such", "no", "two", "three", "four", "five",
    "into", "about", "between", "among", "as", "than", "both", "each", "whose", "which",
];

/// Whether the word at `i` of `words` (lower case) can be a finite verb: listed in
/// [`FINITE`], a regular past (`-ed`), or a word in `-s` (not `-ss`, `-us`, `-is`) that
/// does not follow a determiner or a preposition ("the checker enforces", not "the rules").
fn verb_at(words: &[String], i: usize) -> bool {
    let w = words[i].as_str();
    if can_be_finite(w) {
        return true;
    }
    let third_person = w.chars().count() >= 3
        && w.ends_with('s')
        && !w.ends_with("ss")
        && !w.ends_with("us")
        && !w.ends_with("is")
        && !w.ends_with("'s");
    if third_person && i > 0 && !NOUN_BEFORE.contains(&words[i - 1].as_str()) {
        return true;
    }
    // The present after a plural subject ("plants turn", "tides rise"): a plain word
    // after a word in -s that is not itself after a determiner's noun phrase boundary.
    let plural_before = i > 0 && {
        let p = words[i - 1].as_str();
        p.chars().count() >= 3
            && p.ends_with('s')
            && !p.ends_with("ss")
            && !p.ends_with("us")
            && !p.ends_with("is")
            && !p.ends_with("'s")
    };
    plural_before
        && w.chars().all(|c| c.is_ascii_lowercase())
        && w.len() >= 3
        && !NOUN_BEFORE.contains(&w)
        && !NOT_VERBS.contains(&w)
        && !w.ends_with("ly")
        && !w.ends_with("ing")
}

/// Function words and frequent modifiers that follow a plural noun without being verbs.
const NOT_VERBS: &[&str] = &[
    "that", "who", "whom", "whose", "which", "where", "when", "while", "than", "then", "but",
    "nor", "yet", "not", "also", "only", "even", "just", "over", "under", "after", "before",
    "during", "through", "within", "without", "across", "along", "around", "against", "like",
    "near", "per", "via", "since", "until", "upon", "toward", "towards", "onto", "off", "out",
    "up", "down", "here", "there", "now", "very", "too", "much", "many", "new", "old", "own",
    "same", "other", "first", "last", "next", "each", "every", "any", "all", "both", "one", "two",
    "three", "four", "five", "six", "seven", "eight", "nine", "ten", "hundred", "thousand",
    "million", "billion", "percent",
];

/// Whether `sentence` is a fragment rather than a sentence a reader can take alone: it
/// opens in lower case (cut from the middle of a sentence), or no word of it can be a
/// finite verb ("set the record for most medals at a single Winter Olympics", "Super Bowl
/// LVIII ticket packages"). A heuristic without a part-of-speech model: it lists frequent
/// verbs and reads regular suffixes, so a rare verb in the present tense can be missed.
pub fn is_fragment(sentence: &str) -> bool {
    let t = sentence.trim_start_matches(|c: char| !c.is_alphanumeric());
    let Some(first) = t.chars().next() else {
        return true;
    };
    first.is_lowercase() || first_verb(t).is_none()
}

/// The byte offset in `sentence` of its first word that can be a finite verb (the
/// heuristic of [`is_fragment`]), or `None` when no word can be: what comes before it is
/// the sentence's subject ("The 2006–07 Wigan Athletic F.C. season" in "The 2006–07 Wigan
/// Athletic F.C. season was the club's 29th season").
pub fn first_verb(sentence: &str) -> Option<usize> {
    // Each word lower case without its punctuation, with its offset; punctuation alone
    // is no word.
    let (offsets, words): (Vec<usize>, Vec<String>) = sentence
        .split_whitespace()
        .map(|w| {
            let at = w.as_ptr() as usize - sentence.as_ptr() as usize;
            let word = w
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            (at, word)
        })
        .filter(|(_, w)| !w.is_empty())
        .unzip();
    (0..words.len())
        .find(|&i| verb_at(&words, i))
        .map(|i| offsets[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(t: &str) -> Vec<&str> {
        sentences(t, Lines::Break)
    }

    #[test]
    fn abbreviations_initials_decimals_and_quotes_do_not_end_sentences() {
        assert_eq!(
            split("She's leaving as the 2021 U.S. Open champion. She won 3.5 million."),
            vec![
                "She's leaving as the 2021 U.S. Open champion.",
                "She won 3.5 million."
            ]
        );
        assert_eq!(
            split("J. R. R. Tolkien wrote it. Mr. Smith met Dr. Jones in St. Louis on Jan. 5."),
            vec![
                "J. R. R. Tolkien wrote it.",
                "Mr. Smith met Dr. Jones in St. Louis on Jan. 5."
            ]
        );
        assert_eq!(
            split("It is now Trinity-St. Paul's Episcopal Church. It has a bell."),
            vec![
                "It is now Trinity-St. Paul's Episcopal Church.",
                "It has a bell."
            ]
        );
        assert_eq!(
            split("It was founded by Sun Yat-sen. Answer yes/no. It is next-gen. Done."),
            vec![
                "It was founded by Sun Yat-sen.",
                "Answer yes/no.",
                "It is next-gen.",
                "Done."
            ]
        );
        assert_eq!(
            split("He said \"Stop.\" Then he left. (It was late.) Next."),
            vec![
                "He said \"Stop.\"",
                "Then he left.",
                "(It was late.)",
                "Next."
            ]
        );
        assert_eq!(
            split("Use e.g. this one. Or i.e. that. Wait... What?! Yes."),
            vec![
                "Use e.g. this one.",
                "Or i.e. that.",
                "Wait...",
                "What?!",
                "Yes."
            ]
        );
        // A lower-case word after a period continues the sentence.
        assert_eq!(
            split("It costs approx. ten. Done."),
            vec!["It costs approx. ten.", "Done."]
        );
    }

    #[test]
    fn line_breaks_end_sentences_or_wrap() {
        let t = "Tides rise. They are caused by the\ngravitational pull.\n\nNext part";
        assert_eq!(
            sentences(t, Lines::Wrap),
            vec![
                "Tides rise.",
                "They are caused by the\ngravitational pull.",
                "Next part"
            ]
        );
        assert_eq!(
            sentences(t, Lines::Break),
            vec![
                "Tides rise.",
                "They are caused by the",
                "gravitational pull.",
                "Next part"
            ]
        );
        assert!(sentence_spans("", Lines::Wrap).is_empty());
        assert!(sentence_spans(" \n\n ", Lines::Wrap).is_empty());
    }

    #[test]
    fn spans_are_byte_offsets_of_trimmed_sentences() {
        let t = "  Ünïcode first.  Second — with dash. ";
        let s = sentence_spans(t, Lines::Break);
        assert_eq!(s.len(), 2);
        assert_eq!(&t[s[0].0..s[0].1], "Ünïcode first.");
        assert_eq!(&t[s[1].0..s[1].1], "Second — with dash.");
    }

    #[test]
    fn fragments_and_references_are_recognized() {
        assert!(is_fragment(
            "set the record for most total medals at a single Winter Olympics"
        ));
        assert!(is_fragment("Levi's Stadium in Santa Clara, California"));
        assert!(is_fragment("Tides"));
        assert!(is_fragment(""));
        assert!(!is_fragment("Tides rise and fall twice a day."));
        assert!(!is_fragment("The borrow checker enforces ownership rules."));
        assert!(!is_fragment("The game was played at Levi's Stadium."));
        assert!(!is_fragment("Beyoncé released her debut album in 2003."));
        assert!(!is_fragment("Tides are caused by the Moon."));
        assert!(!is_fragment("Plants turn light into sugar."));
        assert!(!is_fragment("Most coasts see two high tides a day."));
        assert!(is_fragment("Rules of thumb for bakers"));
        assert!(opens_with_reference(
            "They are caused by the gravitational pull."
        ));
        assert!(opens_with_reference("\"It was late,\" he said."));
        assert!(!opens_with_reference("Tides are caused by the Moon."));
    }

    #[test]
    fn the_first_verb_ends_the_subject() {
        let s = "The 2006–07 Wigan Athletic F.C. season was the club's 29th season.";
        assert_eq!(&s[first_verb(s).unwrap()..], "was the club's 29th season.");
        let s = "Gustave Eiffel's company finished the tower in 1889.";
        assert_eq!(&s[first_verb(s).unwrap()..], "finished the tower in 1889.");
        // "rules" after a determiner is a noun; "enforces" is the verb.
        let s = "The rules of the checker enforces ownership.";
        assert_eq!(&s[first_verb(s).unwrap()..], "enforces ownership.");
        assert_eq!(first_verb("Levi's Stadium in Santa Clara"), None);
        assert_eq!(first_verb(""), None);
    }
}
