//! The text analyzer of keyword search: how a text becomes the terms BM25 counts.
//!
//! One analyzer serves the keyword index of documents (`neuralcore-index` wraps it as a
//! tantivy tokenizer) and the memory search (`neuralcore-memory`), so a query and a text
//! are cut into the same terms everywhere. For a text, in order:
//!
//! 1. split into runs of alphanumeric characters (`char::is_alphanumeric`; everything
//!    else separates);
//! 2. drop a run of [`MAX_TOKEN_BYTES`] bytes or more (UTF-8, before lower-casing);
//! 3. lower-case character by character (`char::to_lowercase`, without the final-sigma
//!    rule of `str::to_lowercase`);
//! 4. drop a token shorter than `min_token_len` characters;
//! 5. drop stop words (see [`crate::stopwords`]; with `fold_accents` and the English
//!    stemmer or none, a listed stop word's spelling without accents too);
//! 6. with `fold_accents` (the default) and the English stemmer or none: fold Latin
//!    letters with diacritics to their ASCII base ([`fold_accents`]: `fiancée` →
//!    `fiancee`, `Gödel` → `godel`, `straße` → `strasse`), so a query typed without
//!    accents finds the text that has them and the other way round;
//! 7. stem with the Snowball stemmer of the language, if any;
//! 8. with `fold_accents` and a stemmer of another language: fold the stem — those
//!    stemmers read the accents (French `-ée`, German `-ä`), so they see the word
//!    first.
//!
//! Without folding this is exactly what the index's tantivy chain did
//! (`SimpleTokenizer`, `RemoveLongFilter::limit(40)`, `LowerCaser`, the minimum
//! length, `StopWordFilter`, the Snowball `Stemmer`); with it, that chain with
//! tantivy's `AsciiFoldingFilter` before the stemmer (English, and the stop words'
//! folded spellings) or after it (the others), on accented Latin letters (a test in
//! `neuralcore-index` compares them; tantivy also folds compatibility forms such as
//! ligatures, which this keeps). With folding, the combining marks of decomposed text
//! stay inside their word (step 1), which is composed (NFC) before anything else.
//!
//! With another language's stemmer, a word typed without its accents meets the
//! accented one only when the two stem alike (French `étudiées` and `etudiees` do not).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::str::CharIndices;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use unicode_normalization::UnicodeNormalization;

use crate::stopwords;

/// Raised when the same settings make other terms (2: accent folding), so indexes
/// built before are rebuilt ([`AnalyzerConfig::fingerprint`]).
pub const ANALYZER_REVISION: u32 = 2;

/// Tokens this long in bytes, or longer, are dropped (tantivy's `RemoveLongFilter`
/// limit the index always used).
pub const MAX_TOKEN_BYTES: usize = 40;

/// Which stop words to drop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stopwords {
    /// `"english"` (Lucene's 33-word English list), another [`Language`] (Snowball's
    /// list), or `"none"`.
    Named(String),
    /// An explicit list (lower-cased).
    List(Vec<String>),
}

/// Analyzer settings. Changing them re-indexes a collection on its next use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnalyzerConfig {
    /// Snowball stemmer language (`english`, `french`, `german`, ...) or `none`.
    pub stemmer: String,
    /// Stop words.
    pub stopwords: Stopwords,
    /// Drop tokens shorter than this many characters (1 keeps everything).
    pub min_token_len: usize,
    /// Index each chunk's body with its document title in front, so a chunk matches
    /// on what its document is about (the title field is indexed as well). Read by the
    /// keyword index only; the analyzer itself ignores it.
    pub title_in_body: bool,
    /// Fold Latin letters with diacritics to ASCII (`é` → `e`, `ß` → `ss`), so `cafe`
    /// and `café` are one term.
    pub fold_accents: bool,
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        AnalyzerConfig {
            stemmer: "english".into(),
            stopwords: Stopwords::Named("english".into()),
            min_token_len: 1,
            title_in_body: true,
            fold_accents: true,
        }
    }
}

impl AnalyzerConfig {
    /// A short fingerprint: an index built with another fingerprint is rebuilt. The
    /// settings and [`ANALYZER_REVISION`], so a change of what the same settings make
    /// rebuilds too.
    pub fn fingerprint(&self) -> String {
        format!(
            "{} r{ANALYZER_REVISION}",
            serde_json::to_string(self).expect("serializable")
        )
    }
}

/// A language of the stemmer and the stop word lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// English.
    English,
    /// French.
    French,
    /// German.
    German,
    /// Spanish.
    Spanish,
    /// Italian.
    Italian,
    /// Portuguese.
    Portuguese,
    /// Dutch.
    Dutch,
    /// Swedish.
    Swedish,
    /// Norwegian.
    Norwegian,
    /// Danish.
    Danish,
    /// Finnish.
    Finnish,
    /// Russian.
    Russian,
}

impl Language {
    /// Every language, in declaration order.
    pub const ALL: [Language; 12] = [
        Language::English,
        Language::French,
        Language::German,
        Language::Spanish,
        Language::Italian,
        Language::Portuguese,
        Language::Dutch,
        Language::Swedish,
        Language::Norwegian,
        Language::Danish,
        Language::Finnish,
        Language::Russian,
    ];

    /// The language of a name (`english` or `en`, any case); `None` for `none` or `""`.
    pub fn parse(name: &str) -> Result<Option<Language>, String> {
        Ok(Some(match name.to_ascii_lowercase().as_str() {
            "none" | "" => return Ok(None),
            "english" | "en" => Language::English,
            "french" | "fr" => Language::French,
            "german" | "de" => Language::German,
            "spanish" | "es" => Language::Spanish,
            "italian" | "it" => Language::Italian,
            "portuguese" | "pt" => Language::Portuguese,
            "dutch" | "nl" => Language::Dutch,
            "swedish" | "sv" => Language::Swedish,
            "norwegian" | "no" => Language::Norwegian,
            "danish" | "da" => Language::Danish,
            "finnish" | "fi" => Language::Finnish,
            "russian" | "ru" => Language::Russian,
            other => {
                return Err(format!(
                    "unknown language {other:?} for the stemmer or stop words"
                ))
            }
        }))
    }

    /// Its stop words.
    pub fn stop_words(self) -> &'static [&'static str] {
        match self {
            Language::English => stopwords::ENGLISH,
            Language::French => stopwords::FRENCH,
            Language::German => stopwords::GERMAN,
            Language::Spanish => stopwords::SPANISH,
            Language::Italian => stopwords::ITALIAN,
            Language::Portuguese => stopwords::PORTUGUESE,
            Language::Dutch => stopwords::DUTCH,
            Language::Swedish => stopwords::SWEDISH,
            Language::Norwegian => stopwords::NORWEGIAN,
            Language::Danish => stopwords::DANISH,
            Language::Finnish => stopwords::FINNISH,
            Language::Russian => stopwords::RUSSIAN,
        }
    }

    fn algorithm(self) -> rust_stemmers::Algorithm {
        use rust_stemmers::Algorithm as A;
        match self {
            Language::English => A::English,
            Language::French => A::French,
            Language::German => A::German,
            Language::Spanish => A::Spanish,
            Language::Italian => A::Italian,
            Language::Portuguese => A::Portuguese,
            Language::Dutch => A::Dutch,
            Language::Swedish => A::Swedish,
            Language::Norwegian => A::Norwegian,
            Language::Danish => A::Danish,
            Language::Finnish => A::Finnish,
            Language::Russian => A::Russian,
        }
    }
}

/// Whether `c` is a combining diacritical mark (the blocks canonical decomposition
/// puts accents in).
fn is_combining_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// Latin letters with no canonical decomposition that still fold to ASCII (lower case:
/// the analyzer folds after lower-casing).
fn fold_letter(c: char) -> Option<&'static str> {
    Some(match c {
        'ß' => "ss",
        'æ' => "ae",
        'œ' => "oe",
        'ø' => "o",
        'đ' | 'ð' => "d",
        'ł' => "l",
        'ħ' => "h",
        'ı' => "i",
        'ŧ' => "t",
        'þ' => "th",
        'ŀ' => "l",
        'ĸ' => "q",
        'ŋ' => "n",
        'ĳ' => "ij",
        'ſ' => "s",
        'ə' => "e",
        _ => return None,
    })
}

/// `word` with every Latin letter that carries diacritics replaced by its ASCII base:
/// a character whose canonical decomposition is an ASCII letter (or a letter of
/// [`fold_letter`]) followed by combining marks only (`é` = `e` + U+0301, `ǣ` = `æ` +
/// U+0304), the Latin letters of [`fold_letter`], and a combining mark that follows
/// an ASCII letter (decomposed text, `e` + U+0301). Every other character is kept, so
/// Greek, Cyrillic, Hangul and CJK text is unchanged and no new token boundary
/// appears. Compatibility forms (ligatures such as `ǆ`, fullwidth letters,
/// superscripts), which tantivy's `AsciiFoldingFilter` also folds, are kept. `None`
/// when nothing changes.
pub fn fold_accents(word: &str) -> Option<String> {
    if word.is_ascii() {
        return None;
    }
    let mut out = String::with_capacity(word.len());
    let mut changed = false;
    for c in word.chars() {
        if c.is_ascii() {
            out.push(c);
            continue;
        }
        if let Some(f) = fold_letter(c) {
            out.push_str(f);
            changed = true;
            continue;
        }
        let mut parts = ['\0'; 4];
        let mut n = 0;
        let mut fits = true;
        unicode_normalization::char::decompose_canonical(c, |p| {
            if n < parts.len() {
                parts[n] = p;
                n += 1;
            } else {
                fits = false;
            }
        });
        let base = parts[0];
        let marks_only = fits && n > 1 && parts[1..n].iter().all(|&m| is_combining_mark(m));
        if marks_only && base.is_ascii_alphabetic() {
            out.push(base);
            changed = true;
        } else if let Some(f) = fold_letter(base).filter(|_| marks_only) {
            out.push_str(f);
            changed = true;
        } else if is_combining_mark(c) && out.ends_with(|p: char| p.is_ascii_alphabetic()) {
            changed = true;
        } else {
            out.push(c);
        }
    }
    changed.then_some(out)
}

/// Entries a thread's stem cache holds before it is cleared.
const STEM_CACHE_MAX: usize = 200_000;

thread_local! {
    /// Stems already computed, per language: Snowball stemming dominates analysis time
    /// and word frequencies are Zipfian, so most tokens hit the cache.
    static STEMS: RefCell<HashMap<(Language, String), String>> = RefCell::new(HashMap::new());
}

/// A Snowball stemmer with a per-thread cache.
#[derive(Clone)]
struct CachedStemmer {
    lang: Language,
    stemmer: Arc<rust_stemmers::Stemmer>,
}

impl CachedStemmer {
    /// Replace `word` by its stem.
    fn stem(&self, word: &mut String, key: &mut (Language, String)) {
        key.0 = self.lang;
        key.1.clear();
        key.1.push_str(word);
        STEMS.with(|cache| {
            let mut cache = cache.borrow_mut();
            if let Some(stemmed) = cache.get(&*key) {
                word.clear();
                word.push_str(stemmed);
                return;
            }
            let stemmed = self.stemmer.stem(word).into_owned();
            if cache.len() >= STEM_CACHE_MAX {
                cache.clear();
            }
            cache.insert(key.clone(), stemmed.clone());
            *word = stemmed;
        });
    }
}

/// The analyzer (see the module documentation). Cheap to clone.
#[derive(Clone)]
pub struct Analyzer {
    stop: Arc<HashSet<String>>,
    stemmer: Option<CachedStemmer>,
    min_len: usize,
    /// Fold accents before the stem (English or no stemmer), after it (another
    /// language), or not at all.
    fold: Fold,
}

/// Where the analyzer folds accents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    Never,
    BeforeStem,
    AfterStem,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzer")
            .field("stop_words", &self.stop.len())
            .field("stemmer", &self.stemmer.as_ref().map(|s| s.lang))
            .field("min_len", &self.min_len)
            .field("fold", &self.fold)
            .finish()
    }
}

/// Where a token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Byte offset of its first character in the text.
    pub from: usize,
    /// Byte offset just past it.
    pub to: usize,
    /// Its position among all the runs of the text, dropped ones included (from 0).
    pub position: usize,
}

impl Analyzer {
    /// The analyzer of `cfg`; an error names an unknown language.
    pub fn new(cfg: &AnalyzerConfig) -> Result<Analyzer, String> {
        let stop: HashSet<String> = match &cfg.stopwords {
            Stopwords::Named(n) => Language::parse(n)?
                .map(|l| l.stop_words().iter().map(|w| w.to_string()).collect())
                .unwrap_or_default(),
            Stopwords::List(words) => words.iter().map(|w| w.to_lowercase()).collect(),
        };
        let lang = Language::parse(&cfg.stemmer)?;
        let fold = match (lang, cfg.fold_accents) {
            (_, false) => Fold::Never,
            (None | Some(Language::English), true) => Fold::BeforeStem,
            (Some(_), true) => Fold::AfterStem,
        };
        // Folding before the stem, a stop word typed without its accents ("cafe" for a
        // listed "café") is one too. Not after another language's stemmer: its folded
        // stop words are often words (Swedish "är" → "ar", as "år" folds), and its
        // users type the accents.
        let mut stop = stop;
        if fold == Fold::BeforeStem {
            let folded: Vec<String> = stop.iter().filter_map(|w| fold_accents(w)).collect();
            stop.extend(folded);
        }
        let stemmer = lang.map(|lang| CachedStemmer {
            lang,
            stemmer: Arc::new(rust_stemmers::Stemmer::create(lang.algorithm())),
        });
        Ok(Analyzer {
            stop: Arc::new(stop),
            stemmer,
            min_len: cfg.min_token_len,
            fold,
        })
    }

    /// The analyzer of [`AnalyzerConfig::default`] (English stems and stop words), built
    /// once.
    pub fn english() -> &'static Analyzer {
        static DEFAULT: OnceLock<Analyzer> = OnceLock::new();
        DEFAULT.get_or_init(|| Analyzer::new(&AnalyzerConfig::default()).expect("valid default"))
    }

    /// The tokens of `text`, one at a time ([`Tokens::next_into`]).
    pub fn tokens<'a>(&'a self, text: &'a str) -> Tokens<'a> {
        Tokens {
            analyzer: self,
            text,
            chars: text.char_indices(),
            position: usize::MAX,
            key: (Language::English, String::new()),
        }
    }

    /// The terms of `text`, in order, with where each came from.
    pub fn analyze(&self, text: &str) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        let mut tokens = self.tokens(text);
        let mut term = String::new();
        while let Some(span) = tokens.next_into(&mut term) {
            out.push((term.clone(), span));
        }
        out
    }

    /// The terms of `text`, in order.
    pub fn terms(&self, text: &str) -> Vec<String> {
        self.analyze(text).into_iter().map(|(t, _)| t).collect()
    }
}

/// The tokens of one text (see [`Analyzer::tokens`]).
pub struct Tokens<'a> {
    analyzer: &'a Analyzer,
    text: &'a str,
    chars: CharIndices<'a>,
    position: usize,
    key: (Language, String),
}

impl Tokens<'_> {
    /// The next token's term written into `term` (its previous content is replaced),
    /// and its span; `None` at the end of the text.
    pub fn next_into(&mut self, term: &mut String) -> Option<Span> {
        loop {
            let (from, to) = self.next_run()?;
            self.position = self.position.wrapping_add(1);
            let mut run = &self.text[from..to];
            // Decomposed text (`e` + U+0301), kept in one run when folding: composed
            // first, so it is the same word as the composed spelling from here on.
            let composed: String;
            if self.analyzer.fold != Fold::Never
                && !run.is_ascii()
                && run.chars().any(is_combining_mark)
            {
                composed = run.nfc().collect();
                run = &composed;
            }
            if run.len() >= MAX_TOKEN_BYTES {
                continue;
            }
            term.clear();
            if run.is_ascii() {
                term.push_str(run);
                term.make_ascii_lowercase();
            } else {
                term.extend(run.chars().flat_map(char::to_lowercase));
            }
            let a = self.analyzer;
            if a.min_len > 1 && term.chars().count() < a.min_len {
                continue;
            }
            if a.stop.contains(term.as_str()) {
                continue;
            }
            if a.fold == Fold::BeforeStem {
                if let Some(f) = fold_accents(term) {
                    *term = f;
                }
            }
            if let Some(s) = &a.stemmer {
                s.stem(term, &mut self.key);
            }
            if a.fold == Fold::AfterStem {
                if let Some(f) = fold_accents(term) {
                    *term = f;
                }
            }
            return Some(Span {
                from,
                to,
                position: self.position,
            });
        }
    }

    /// The byte range of the next run of alphanumeric characters (and, folding, the
    /// combining marks of decomposed text within it: `fiance\u{301}e` is one run).
    fn next_run(&mut self) -> Option<(usize, usize)> {
        let (from, _) = self.chars.find(|(_, c)| c.is_alphanumeric())?;
        let marks = self.analyzer.fold != Fold::Never;
        let to = self
            .chars
            .find(|&(_, c)| !(c.is_alphanumeric() || (marks && is_combining_mark(c))))
            .map_or(self.text.len(), |(i, _)| i);
        Some((from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(stemmer: &str, stopwords: Stopwords, min_token_len: usize) -> AnalyzerConfig {
        AnalyzerConfig {
            stemmer: stemmer.into(),
            stopwords,
            min_token_len,
            title_in_body: true,
            fold_accents: true,
        }
    }

    #[test]
    fn english_default_stems_and_drops_stop_words() {
        let a = Analyzer::english();
        assert_eq!(
            a.terms("The running Mice are in a Cell"),
            vec!["run", "mice", "cell"]
        );
        // Lucene's list: question words and pronouns are terms.
        assert_eq!(
            a.terms("What did she do?"),
            vec!["what", "did", "she", "do"]
        );
    }

    #[test]
    fn explicit_list_and_minimum_length() {
        let a = Analyzer::new(&cfg("none", Stopwords::List(vec!["Mice".into()]), 2)).unwrap();
        assert_eq!(a.terms("The running Mice a b"), vec!["the", "running"]);
        let bad = Analyzer::new(&cfg("klingon", Stopwords::Named("none".into()), 1));
        assert!(bad.unwrap_err().contains("klingon"));
        let bad = Analyzer::new(&cfg("none", Stopwords::Named("klingon".into()), 1));
        assert!(bad.unwrap_err().contains("klingon"));
    }

    #[test]
    fn spans_positions_long_runs_and_unicode() {
        let a = Analyzer::new(&cfg("none", Stopwords::Named("english".into()), 1)).unwrap();
        let long = "x".repeat(MAX_TOKEN_BYTES);
        let text = format!("Über the {long} ΣΟΦΟΣ, x-ray");
        let got = a.analyze(&text);
        let terms: Vec<&str> = got.iter().map(|(t, _)| t.as_str()).collect();
        // No final sigma: lower-cased one character at a time.
        assert_eq!(terms, vec!["uber", "σοφοσ", "x", "ray"]);
        let spans: Vec<Span> = got.iter().map(|(_, s)| *s).collect();
        assert_eq!(&text[spans[0].from..spans[0].to], "Über");
        assert_eq!(&text[spans[1].from..spans[1].to], "ΣΟΦΟΣ");
        // Positions count the dropped stop word and the long run.
        assert_eq!(
            spans.iter().map(|s| s.position).collect::<Vec<_>>(),
            vec![0, 3, 4, 5]
        );
        let shorter = "x".repeat(MAX_TOKEN_BYTES - 1);
        assert_eq!(a.terms(&shorter), vec![shorter.clone()]);
        assert!(a.terms("").is_empty() && a.terms(" ,.; ").is_empty());
    }

    #[test]
    fn accents_fold_to_ascii_in_latin_text_only() {
        let fold = |w: &str| fold_accents(w).unwrap_or_else(|| w.to_string());
        assert_eq!(fold("fiancée"), "fiancee");
        assert_eq!(fold("gödel"), "godel");
        assert_eq!(fold("straße"), "strasse");
        assert_eq!(fold("søren"), "soren");
        assert_eq!(fold("łódź"), "lodz");
        assert_eq!(fold("ærøskøbing"), "aeroskobing");
        assert_eq!(fold("erdős"), "erdos");
        assert_eq!(fold("ǣ"), "ae");
        assert_eq!(fold("ĳssel"), "ijssel");
        assert_eq!(fold("fiance\u{301}e"), "fiancee", "decomposed text");
        assert_eq!(fold("ǅ"), "ǅ", "compatibility forms are kept");
        // Other scripts are left alone: Greek accents, Cyrillic й, Hangul syllables.
        for w in ["σοφός", "йод", "한국어", "東京"] {
            assert_eq!(fold_accents(w), None, "{w}");
        }
        assert_eq!(fold_accents("plain"), None);
        // A query typed without accents meets the text that has them, both ways, in
        // the default (English) analyzer and without a stemmer.
        let en = Analyzer::english();
        assert_eq!(
            en.terms("His fiancée, Berengaria"),
            en.terms("his fiancee berengaria")
        );
        assert_eq!(en.terms("Kurt Gödel's café"), en.terms("kurt godel's cafe"));
        let none = Analyzer::new(&cfg("none", Stopwords::Named("none".into()), 1)).unwrap();
        assert_eq!(none.terms("Naïve Résumé"), vec!["naive", "resume"]);
        // Decomposed (NFD) text is one token, folded like the composed one.
        assert_eq!(en.terms("fiance\u{301}e"), en.terms("fiancée"));
        // A stop word typed without its accent is dropped too (folding before the stem);
        // another language's folded stop words are left alone: they are often words.
        let listed = Analyzer::new(&cfg("none", Stopwords::List(vec!["café".into()]), 1)).unwrap();
        assert!(listed.terms("café cafe").is_empty());
        let de = Analyzer::new(&cfg("german", Stopwords::Named("german".into()), 1)).unwrap();
        assert_eq!(de.terms("für"), Vec::<String>::new());
        assert_eq!(de.terms("fur"), vec!["fur"]);
        // Decomposed text is composed first: with another language's stemmer too.
        let fr = Analyzer::new(&cfg("french", Stopwords::Named("french".into()), 1)).unwrap();
        assert_eq!(fr.terms("e\u{301}tudie\u{301}es"), fr.terms("étudiées"));
        // Off: the accents stay, as before.
        let off = Analyzer::new(&AnalyzerConfig {
            fold_accents: false,
            ..AnalyzerConfig::default()
        })
        .unwrap();
        assert_ne!(off.terms("fiancée"), off.terms("fiancee"));
        // Another language's stemmer sees the accents, then the stem is folded: French
        // `étudiées` and `etudiees` stem apart, but `étudiées` and `étudiée` still meet.
        let fr = Analyzer::new(&cfg("french", Stopwords::Named("french".into()), 1)).unwrap();
        assert_eq!(fr.terms("étudiées"), fr.terms("étudiée"));
        assert!(fr.terms("étudiées")[0].is_ascii());
        // Spans still point at the original, accented text.
        let text = "Zoë's naïveté";
        let spans: Vec<&str> = en
            .analyze(text)
            .iter()
            .map(|(_, s)| &text[s.from..s.to])
            .collect();
        assert_eq!(spans, vec!["Zoë", "s", "naïveté"]);
    }

    #[test]
    fn stems_are_the_snowball_stems_cached_or_not() {
        let words = "running runner runs easily universities organizations";
        for lang in Language::ALL {
            let a = Analyzer::new(&AnalyzerConfig {
                stemmer: format!("{lang:?}"),
                stopwords: Stopwords::Named("none".into()),
                ..AnalyzerConfig::default()
            })
            .unwrap();
            let s = rust_stemmers::Stemmer::create(lang.algorithm());
            let want: Vec<String> = words.split(' ').map(|w| s.stem(w).into_owned()).collect();
            // Twice: the second pass is served from the cache.
            assert_eq!(a.terms(words), want, "{lang:?}");
            assert_eq!(a.terms(words), want, "{lang:?} (cached)");
        }
    }

    #[test]
    fn every_language_has_stop_words_that_it_drops() {
        for lang in Language::ALL {
            let name = format!("{lang:?}").to_lowercase();
            assert_eq!(Language::parse(&name).unwrap(), Some(lang));
            let a = Analyzer::new(&cfg("none", Stopwords::Named(name.clone()), 1)).unwrap();
            let words = lang.stop_words();
            assert!(words.len() >= 33, "{name}");
            // Every listed word that is one run of alphanumerics is dropped.
            for w in words
                .iter()
                .filter(|w| w.chars().all(char::is_alphanumeric))
            {
                assert!(a.terms(w).is_empty(), "{name}: {w}");
            }
        }
        assert_eq!(Language::parse("None").unwrap(), None);
        assert_eq!(Language::parse("EN").unwrap(), Some(Language::English));
    }
}
