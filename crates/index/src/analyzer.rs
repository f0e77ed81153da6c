//! The text analyzer shared by indexing and querying: the project's one analyzer
//! ([`neuralcore_core::analysis`], also used by the memory search) as a tantivy
//! tokenizer.

use neuralcore_core::analysis::{Analyzer, Tokens};
pub use neuralcore_core::analysis::{AnalyzerConfig, Stopwords};
use tantivy::tokenizer::{TextAnalyzer, Token, TokenStream, Tokenizer};

/// The tantivy analyzer of `cfg` (an error names an unknown language).
pub fn build(cfg: &AnalyzerConfig) -> Result<TextAnalyzer, String> {
    Ok(TextAnalyzer::from(CoreTokenizer {
        analyzer: Analyzer::new(cfg)?,
        token: Token::default(),
    }))
}

/// [`Analyzer`] as a tantivy tokenizer: its terms, offsets and positions.
#[derive(Clone)]
struct CoreTokenizer {
    analyzer: Analyzer,
    token: Token,
}

impl Tokenizer for CoreTokenizer {
    type TokenStream<'a> = CoreTokenStream<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> CoreTokenStream<'a> {
        self.token.reset();
        CoreTokenStream {
            tokens: self.analyzer.tokens(text),
            token: &mut self.token,
        }
    }
}

struct CoreTokenStream<'a> {
    tokens: Tokens<'a>,
    token: &'a mut Token,
}

impl TokenStream for CoreTokenStream<'_> {
    fn advance(&mut self) -> bool {
        match self.tokens.next_into(&mut self.token.text) {
            Some(span) => {
                self.token.offset_from = span.from;
                self.token.offset_to = span.to;
                self.token.position = span.position;
                true
            }
            None => false,
        }
    }
    fn token(&self) -> &Token {
        self.token
    }
    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use neuralcore_core::analysis::Language;
    use tantivy::tokenizer::{
        AsciiFoldingFilter, Language as TantivyLanguage, LowerCaser, RemoveLongFilter,
        SimpleTokenizer, Stemmer, StopWordFilter,
    };

    fn tokens(mut a: TextAnalyzer, text: &str) -> Vec<(String, usize, usize, usize)> {
        let mut s = a.token_stream(text);
        let mut out = Vec::new();
        while s.advance() {
            let t = s.token();
            out.push((t.text.clone(), t.offset_from, t.offset_to, t.position));
        }
        out
    }

    fn tantivy_language(lang: Language) -> TantivyLanguage {
        match lang {
            Language::English => TantivyLanguage::English,
            Language::French => TantivyLanguage::French,
            Language::German => TantivyLanguage::German,
            Language::Spanish => TantivyLanguage::Spanish,
            Language::Italian => TantivyLanguage::Italian,
            Language::Portuguese => TantivyLanguage::Portuguese,
            Language::Dutch => TantivyLanguage::Dutch,
            Language::Swedish => TantivyLanguage::Swedish,
            Language::Norwegian => TantivyLanguage::Norwegian,
            Language::Danish => TantivyLanguage::Danish,
            Language::Finnish => TantivyLanguage::Finnish,
            Language::Russian => TantivyLanguage::Russian,
        }
    }

    /// Without accent folding the analyzer gives exactly the terms, offsets and
    /// positions of the tantivy chain the index used before it moved to
    /// `neuralcore_core` (`SimpleTokenizer`, `RemoveLongFilter::limit(40)`,
    /// `LowerCaser`, `StopWordFilter`, `Stemmer`), for every language's stemmer and
    /// stop words. With it (the default), the chain with tantivy's `AsciiFoldingFilter`
    /// before the stemmer (English, with the stop words' folded spellings added) or
    /// after it (the others), on the accented Latin letters of this text (tantivy also folds
    /// compatibility forms, such as ligatures, which the analyzer keeps).
    #[test]
    fn analyzer_agrees_with_the_tantivy_chain_in_every_language() {
        let long = "Pneumonoultramicroscopicsilicovolcanoconiosis";
        for lang in Language::ALL {
            let name = format!("{lang:?}").to_lowercase();
            let text = format!(
                "The RUNNING runner ran easily; universities, organizations & Ünïcödé \
                 Straße fiancées Œuvre ΣΟΦΟΣ {long} x-ray 3.14 {} {}",
                lang.stop_words().join(" "),
                lang.stop_words().join(", ").to_uppercase()
            );
            for fold in [false, true] {
                let cfg = AnalyzerConfig {
                    stemmer: name.clone(),
                    stopwords: Stopwords::Named(name.clone()),
                    fold_accents: fold,
                    ..Default::default()
                };
                let t = tantivy_language(lang);
                // Folding before the (English) stemmer, a stop word's folded spelling is
                // a stop word too (Lucene's English list is ASCII: the same list).
                let folded_stop = || {
                    let mut words: Vec<String> =
                        lang.stop_words().iter().map(|w| w.to_string()).collect();
                    words.extend(
                        lang.stop_words()
                            .iter()
                            .filter_map(|w| neuralcore_core::analysis::fold_accents(w)),
                    );
                    StopWordFilter::remove(words)
                };
                let chain = TextAnalyzer::builder(SimpleTokenizer::default())
                    .filter(RemoveLongFilter::limit(40))
                    .filter(LowerCaser);
                let reference = match (fold, lang) {
                    (false, _) => chain
                        .filter(StopWordFilter::new(t).unwrap())
                        .filter(Stemmer::new(t))
                        .dynamic()
                        .build(),
                    (true, Language::English) => chain
                        .filter(folded_stop())
                        .filter(AsciiFoldingFilter)
                        .filter(Stemmer::new(t))
                        .dynamic()
                        .build(),
                    (true, _) => chain
                        .filter(StopWordFilter::new(t).unwrap())
                        .filter(Stemmer::new(t))
                        .filter(AsciiFoldingFilter)
                        .dynamic()
                        .build(),
                };
                let want = tokens(reference, &text);
                assert!(want.len() > 5, "{name}");
                // Twice: the second pass is served from the stem cache.
                assert_eq!(tokens(build(&cfg).unwrap(), &text), want, "{name} {fold}");
                assert_eq!(
                    tokens(build(&cfg).unwrap(), &text),
                    want,
                    "{name} {fold} (cached)"
                );
            }
        }
        // No stemmer, an explicit stop list.
        let cfg = AnalyzerConfig {
            stemmer: "none".into(),
            stopwords: Stopwords::List(vec!["Mice".into(), "the".into()]),
            ..Default::default()
        };
        let reference = TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(RemoveLongFilter::limit(40))
            .filter(LowerCaser)
            .filter(StopWordFilter::remove(["mice".into(), "the".into()]))
            .build();
        let text = "The running Mice are in a Cell";
        assert_eq!(tokens(build(&cfg).unwrap(), text), tokens(reference, text));
    }

    #[test]
    fn english_default_stems_and_drops_stop_words() {
        let terms = |cfg: &AnalyzerConfig, text: &str| -> Vec<String> {
            tokens(build(cfg).unwrap(), text)
                .into_iter()
                .map(|t| t.0)
                .collect()
        };
        let t = terms(&AnalyzerConfig::default(), "The running Mice are in a Cell");
        assert_eq!(t, vec!["run", "mice", "cell"]);
        let none = AnalyzerConfig {
            stemmer: "none".into(),
            stopwords: Stopwords::List(vec!["Mice".into()]),
            min_token_len: 2,
            title_in_body: true,
            fold_accents: true,
        };
        assert_eq!(terms(&none, "The running Mice a b"), vec!["the", "running"]);
        let bad = AnalyzerConfig {
            stemmer: "klingon".into(),
            ..Default::default()
        };
        assert!(build(&bad).err().unwrap().contains("klingon"));
    }
}
