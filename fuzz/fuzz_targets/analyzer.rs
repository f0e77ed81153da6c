//! The keyword analyzer (queries and documents) and the sentence primitives on any text:
//! every token's span must slice the text, every sentence must be a span of it.
#![no_main]

use neuralcore_core::analysis::Analyzer;
use neuralcore_core::sentence::{is_fragment, opens_with_reference, sentence_spans, Lines};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for (_, span) in Analyzer::english().analyze(text) {
        assert!(
            text.get(span.from..span.to).is_some(),
            "token span not in the text"
        );
    }
    for lines in [Lines::Break, Lines::Wrap] {
        for (s, e) in sentence_spans(text, lines) {
            let sentence = text.get(s..e).expect("sentence span not in the text");
            let _ = (is_fragment(sentence), opens_with_reference(sentence));
        }
    }
});
