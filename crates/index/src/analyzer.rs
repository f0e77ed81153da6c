//! The text analyzer shared by indexing and querying.

use serde::{Deserialize, Serialize};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
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
            b = b.filter_dynamic(Stemmer::new(lang));
        }
        Ok(b.build())
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
