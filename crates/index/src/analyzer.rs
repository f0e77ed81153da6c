//! The text analyzer shared by indexing and querying.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, StopWordFilter, TextAnalyzer, Token,
    TokenFilter, TokenStream, Tokenizer,
};

/// Which stop words to drop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stopwords {
    /// `"english"` (Lucene's 33-word English list) or `"none"`.
    Named(String),
    /// An explicit list.
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
    /// on what its document is about (the title field is indexed as well).
    pub title_in_body: bool,
}

impl Default for AnalyzerConfig {
    fn default() -> Self {
        AnalyzerConfig {
            stemmer: "english".into(),
            stopwords: Stopwords::Named("english".into()),
            min_token_len: 1,
            title_in_body: true,
        }
    }
}

fn language(name: &str) -> Result<Option<Language>, String> {
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

impl AnalyzerConfig {
    /// A short fingerprint: an index built with another fingerprint is rebuilt.
    pub fn fingerprint(&self) -> String {
        serde_json::to_string(self).expect("serializable")
    }

    /// Build the tantivy analyzer.
    pub fn build(&self) -> Result<TextAnalyzer, String> {
        let mut b = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .dynamic();
        if self.min_token_len > 1 {
            b = b.filter_dynamic(MinLen(self.min_token_len));
        }
        match &self.stopwords {
            Stopwords::Named(n) => {
                if let Some(lang) = language(n)? {
                    let f = StopWordFilter::new(lang)
                        .ok_or_else(|| format!("no stop word list for {n:?}"))?;
                    b = b.filter_dynamic(f);
                }
            }
            Stopwords::List(words) => {
                b = b.filter_dynamic(StopWordFilter::remove(
                    words.iter().map(|w| w.to_lowercase()),
                ));
            }
        }
        if let Some(lang) = language(&self.stemmer)? {
            b = b.filter_dynamic(CachedStemmer::new(lang));
        }
        Ok(b.build())
    }
}

/// rust-stemmers algorithm for a tantivy language.
fn algorithm(lang: Language) -> rust_stemmers::Algorithm {
    use rust_stemmers::Algorithm as A;
    match lang {
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
        _ => A::English,
    }
}

/// Entries a thread's stem cache holds before it is cleared.
const STEM_CACHE_MAX: usize = 200_000;

thread_local! {
    /// Stems already computed, per language: Snowball stemming dominates analysis time
    /// and word frequencies are Zipfian, so most tokens hit the cache.
    static STEMS: RefCell<HashMap<(u8, String), String>> = RefCell::new(HashMap::new());
}

/// A Snowball stemmer (the same algorithm as tantivy's `Stemmer`) with a per-thread cache.
#[derive(Clone)]
struct CachedStemmer {
    lang: Language,
    stemmer: Arc<rust_stemmers::Stemmer>,
}

impl CachedStemmer {
    fn new(lang: Language) -> Self {
        CachedStemmer {
            lang,
            stemmer: Arc::new(rust_stemmers::Stemmer::create(algorithm(lang))),
        }
    }
}

impl TokenFilter for CachedStemmer {
    type Tokenizer<T: Tokenizer> = CachedStemmerTokenizer<T>;
    fn transform<T: Tokenizer>(self, tokenizer: T) -> CachedStemmerTokenizer<T> {
        CachedStemmerTokenizer {
            inner: tokenizer,
            stem: self,
            key: (0, String::new()),
        }
    }
}

#[derive(Clone)]
struct CachedStemmerTokenizer<T> {
    inner: T,
    stem: CachedStemmer,
    key: (u8, String),
}

impl<T: Tokenizer> Tokenizer for CachedStemmerTokenizer<T> {
    type TokenStream<'a> = CachedStemmerStream<'a, T::TokenStream<'a>>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        CachedStemmerStream {
            inner: self.inner.token_stream(text),
            stem: &self.stem,
            key: &mut self.key,
        }
    }
}

struct CachedStemmerStream<'a, S> {
    inner: S,
    stem: &'a CachedStemmer,
    key: &'a mut (u8, String),
}

impl<S: TokenStream> TokenStream for CachedStemmerStream<'_, S> {
    fn advance(&mut self) -> bool {
        if !self.inner.advance() {
            return false;
        }
        let token = self.inner.token_mut();
        self.key.0 = self.stem.lang as u8;
        self.key.1.clear();
        self.key.1.push_str(&token.text);
        STEMS.with(|cache| {
            let mut cache = cache.borrow_mut();
            if let Some(stemmed) = cache.get(&*self.key) {
                token.text.clear();
                token.text.push_str(stemmed);
                return;
            }
            let stemmed = self.stem.stemmer.stem(&token.text).into_owned();
            if cache.len() >= STEM_CACHE_MAX {
                cache.clear();
            }
            cache.insert(self.key.clone(), stemmed.clone());
            token.text = stemmed;
        });
        true
    }
    fn token(&self) -> &Token {
        self.inner.token()
    }
    fn token_mut(&mut self) -> &mut Token {
        self.inner.token_mut()
    }
}

/// Drops tokens shorter than N characters.
#[derive(Clone)]
struct MinLen(usize);

impl tantivy::tokenizer::TokenFilter for MinLen {
    type Tokenizer<T: tantivy::tokenizer::Tokenizer> = MinLenTokenizer<T>;
    fn transform<T: tantivy::tokenizer::Tokenizer>(self, tokenizer: T) -> MinLenTokenizer<T> {
        MinLenTokenizer {
            inner: tokenizer,
            min: self.0,
        }
    }
}

#[derive(Clone)]
struct MinLenTokenizer<T> {
    inner: T,
    min: usize,
}

impl<T: tantivy::tokenizer::Tokenizer> tantivy::tokenizer::Tokenizer for MinLenTokenizer<T> {
    type TokenStream<'a> = MinLenStream<T::TokenStream<'a>>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> Self::TokenStream<'a> {
        MinLenStream {
            inner: self.inner.token_stream(text),
            min: self.min,
        }
    }
}

struct MinLenStream<S> {
    inner: S,
    min: usize,
}

impl<S: tantivy::tokenizer::TokenStream> tantivy::tokenizer::TokenStream for MinLenStream<S> {
    fn advance(&mut self) -> bool {
        while self.inner.advance() {
            if self.inner.token().text.chars().count() >= self.min {
                return true;
            }
        }
        false
    }
    fn token(&self) -> &tantivy::tokenizer::Token {
        self.inner.token()
    }
    fn token_mut(&mut self) -> &mut tantivy::tokenizer::Token {
        self.inner.token_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(cfg: &AnalyzerConfig, text: &str) -> Vec<String> {
        let mut a = cfg.build().unwrap();
        let mut s = a.token_stream(text);
        let mut out = Vec::new();
        while s.advance() {
            out.push(s.token().text.clone());
        }
        out
    }

    #[test]
    fn cached_stemmer_agrees_with_tantivy_stemmer() {
        use tantivy::tokenizer::Stemmer;
        let text = "running runner runs ran easily fairly generously relational conditional \
                    universities university organizations organization running runs";
        for lang in ["english", "french", "german"] {
            let cfg = AnalyzerConfig {
                stemmer: lang.into(),
                stopwords: Stopwords::Named("none".into()),
                ..Default::default()
            };
            let mut reference = TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(RemoveLongFilter::limit(40))
                .filter(LowerCaser)
                .filter(Stemmer::new(language(lang).unwrap().unwrap()))
                .build();
            let mut s = reference.token_stream(text);
            let mut expect = Vec::new();
            while s.advance() {
                expect.push(s.token().text.clone());
            }
            // Twice: the second pass is served from the cache.
            assert_eq!(tokens(&cfg, text), expect, "{lang}");
            assert_eq!(tokens(&cfg, text), expect, "{lang} (cached)");
        }
    }

    #[test]
    fn english_default_stems_and_drops_stop_words() {
        let t = tokens(&AnalyzerConfig::default(), "The running Mice are in a Cell");
        assert_eq!(t, vec!["run", "mice", "cell"]);
        let none = AnalyzerConfig {
            stemmer: "none".into(),
            stopwords: Stopwords::List(vec!["Mice".into()]),
            min_token_len: 2,
            title_in_body: true,
        };
        assert_eq!(
            tokens(&none, "The running Mice a b"),
            vec!["the", "running"]
        );
        let bad = AnalyzerConfig {
            stemmer: "klingon".into(),
            ..Default::default()
        };
        assert!(bad.build().err().unwrap().contains("klingon"));
    }
}
