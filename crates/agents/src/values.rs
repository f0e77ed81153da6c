//! The values sentences state — dates, numbers, names — read by simple rules: what two
//! conflicting statements differ in ([`crate::conflict`]), what kind of value a question
//! asks for ([`expected`]) and whether a sentence offers one ([`offers`]), so that the
//! strip chosen to answer "When was …?" states a date rather than only repeating the
//! question's words.

use std::collections::HashSet;

const NUMBER_WORDS: &[&str] = &[
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "twenty", "thirty", "forty", "fifty", "hundred", "thousand", "million", "billion",
    "first", "second", "third", "fourth", "fifth", "dozen",
];

/// A word for comparison: lower case, without surrounding punctuation, Latin accents
/// folded (`Beyoncé` and `Beyonce` are one name, as the keyword analyzer makes them).
pub fn norm(w: &str) -> String {
    let n = w
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    neuralcore_core::analysis::fold_accents(&n).unwrap_or(n)
}

/// What kind of value a run of words is, if it is one: a date (a month or a year), a
/// number (digits or a number word), or a name (a capitalised word; `lead` says the run
/// opens its sentence, where every word is capitalised).
pub fn value_kind(words: &[&str], lead: bool) -> Option<&'static str> {
    let lower: Vec<String> = words.iter().map(|w| norm(w)).collect();
    let year = |w: &str| w.len() == 4 && w.chars().all(|c| c.is_ascii_digit());
    if lower
        .iter()
        .any(|w| neuralcore_core::text::MONTHS.contains(&w.as_str()) || year(w))
    {
        return Some("date");
    }
    if lower
        .iter()
        .any(|w| w.chars().any(|c| c.is_ascii_digit()) || NUMBER_WORDS.contains(&w.as_str()))
    {
        return Some("number");
    }
    let capital = words.iter().enumerate().any(|(i, w)| {
        !(lead && i == 0)
            && w.trim_start_matches(|c: char| !c.is_alphanumeric())
                .chars()
                .next()
                .is_some_and(char::is_uppercase)
    });
    capital.then_some("name")
}

/// The kind of value a noun asks for ("what year", "which city", "… location").
fn kind_noun(w: &str) -> Option<&'static str> {
    match w {
        "year" | "years" | "date" | "century" | "decade" | "month" => Some("date"),
        "city" | "country" | "state" | "place" | "location" | "town" | "region" | "continent"
        | "nation" | "county" | "island" | "river" | "company" | "team" | "person" | "name"
        | "band" | "group" | "organization" | "university" | "school" | "album" | "film"
        | "song" | "book" | "language" | "stadium" => Some("name"),
        "number" | "percentage" | "percent" | "amount" | "population" => Some("number"),
        _ => None,
    }
}

/// The kind of value (`date`, `number` or `name`) a question asks for, when its form
/// says: "when" a date, "who"/"whom"/"whose"/"where" a name, "how many/much/old/long/
/// far" a number, "what/which" followed closely by a noun of a kind ("In what year",
/// "which city", "what percentage"); a keyword query that ends in such a noun ("Super
/// Bowl 2021 location") asks for that kind. `None` for every other question ("why",
/// "how does", "what is"): its answer is not one value.
pub fn expected(question: &str) -> Option<&'static str> {
    // "What's", "Who's": the question word without its "'s".
    let words: Vec<String> = question
        .split_whitespace()
        .map(norm)
        .map(|w| {
            w.strip_suffix("'s")
                .or_else(|| w.strip_suffix("’s"))
                .map(str::to_string)
                .unwrap_or(w)
        })
        .filter(|w| !w.is_empty())
        .collect();
    const WH: &[&str] = &[
        "what", "which", "who", "whom", "whose", "when", "where", "why", "how",
    ];
    const AUX: &[&str] = &[
        "is", "was", "are", "were", "did", "does", "do", "has", "have", "had", "can", "could",
        "will", "would",
    ];
    let Some(i) = words.iter().position(|w| WH.contains(&w.as_str())) else {
        return words.last().and_then(|w| kind_noun(w));
    };
    match words[i].as_str() {
        "when" => Some("date"),
        "who" | "whom" | "whose" | "where" => Some("name"),
        "how" => match words.get(i + 1).map(String::as_str) {
            Some("many" | "much" | "old" | "long" | "far") => Some("number"),
            _ => None,
        },
        // "What year …", "which city …"; after a verb only "the <noun> of" ("What is
        // the population of …"), not "What did the company do?".
        "what" | "which" => match words.get(i + 1) {
            Some(w) if AUX.contains(&w.as_str()) => match &words[i + 2..] {
                [the, noun, of, ..] if the == "the" && of == "of" => kind_noun(noun),
                _ => None,
            },
            _ => words[i + 1..].iter().take(3).find_map(|w| kind_noun(w)),
        },
        _ => None,
    }
}

/// A question's words as [`offers`] compares them ([`norm`]).
pub fn words_of(question: &str) -> HashSet<String> {
    question.split_whitespace().map(norm).collect()
}

/// Whether `w` (lower case, as [`norm`] makes it) is a function word: one of the
/// English stop words of the analyzer's lists.
pub fn is_function_word(w: &str) -> bool {
    neuralcore_core::analysis::Language::English
        .stop_words()
        .contains(&w)
}

/// Words that open a sentence without naming anything: pronouns, determiners and
/// quantifiers, prepositions, conjunctions and sentence adverbs (beyond the stop words).
const OPENERS: &[&str] = &[
    "he",
    "she",
    "his",
    "her",
    "hers",
    "him",
    "we",
    "our",
    "us",
    "you",
    "your",
    "i",
    "my",
    "its",
    "them",
    "theirs",
    "one",
    "ones",
    "someone",
    "everyone",
    "nobody",
    "each",
    "every",
    "some",
    "many",
    "most",
    "much",
    "both",
    "all",
    "any",
    "few",
    "several",
    "other",
    "others",
    "another",
    "those",
    "during",
    "after",
    "before",
    "since",
    "until",
    "while",
    "although",
    "though",
    "because",
    "when",
    "where",
    "whereas",
    "unless",
    "once",
    "from",
    "without",
    "within",
    "among",
    "between",
    "under",
    "over",
    "above",
    "below",
    "through",
    "throughout",
    "despite",
    "following",
    "according",
    "upon",
    "about",
    "against",
    "along",
    "around",
    "behind",
    "beyond",
    "near",
    "toward",
    "towards",
    "unlike",
    "like",
    "via",
    "here",
    "now",
    "later",
    "earlier",
    "today",
    "yesterday",
    "tomorrow",
    "meanwhile",
    "afterwards",
    "afterward",
    "however",
    "thus",
    "hence",
    "therefore",
    "also",
    "still",
    "yet",
    "instead",
    "indeed",
    "moreover",
    "furthermore",
    "nevertheless",
    "nonetheless",
    "otherwise",
    "similarly",
    "likewise",
    "finally",
    "eventually",
    "initially",
    "originally",
    "currently",
    "recently",
    "previously",
    "subsequently",
    "consequently",
    "accordingly",
    "additionally",
    "alternatively",
    "namely",
    "perhaps",
    "probably",
    "possibly",
    "certainly",
    "clearly",
    "generally",
    "usually",
    "often",
    "sometimes",
    "always",
    "never",
    "already",
    "soon",
    "first",
    "second",
    "third",
    "next",
    "last",
    "again",
    "so",
    "nor",
    "either",
    "neither",
    "whether",
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "why",
    "how",
    "do",
    "does",
    "did",
    "has",
    "have",
    "had",
    "can",
    "could",
    "would",
    "should",
    "may",
    "might",
    "must",
    "shall",
];

/// Whether a sentence's first word opens it without naming anything: a function word
/// ([`is_function_word`]), one of [`OPENERS`], or a word set off by a comma
/// ("Consequently, …"). Any other capitalised first word may be a name ("Sweden
/// rationed …"), and so is an acronym ("US forces …", "WHO declared …").
pub fn is_opener(word: &str) -> bool {
    let n = norm(word);
    // An acronym ("US", "WHO") names something even when it spells a function word.
    let mut letters = word.chars().filter(|c| c.is_alphabetic());
    if letters.clone().nth(1).is_some() && letters.all(char::is_uppercase) {
        return false;
    }
    word.ends_with(',') || is_function_word(&n) || OPENERS.contains(&n.as_str())
}

/// Whether `sentence` states a value of `kind` that the question (its [`words_of`],
/// `asked`) does not already hold:
/// a candidate answer, where a sentence that only repeats the question's own date or
/// name is none. A name is a capitalised word (not a weekday, and not a function word
/// opening the sentence); a date a month or a year; a number a numeral or number word
/// that is not a date. A capitalised common noun opening a sentence ("Motorists …")
/// passes for a name: the test errs towards offering.
pub fn offers(sentence: &str, kind: &str, asked: &HashSet<String>) -> bool {
    let words: Vec<&str> = sentence.split_whitespace().collect();
    words.iter().enumerate().any(|(i, &w)| {
        let n = norm(w);
        // "the 1990s", "the 19th century": dates, though not a year or a month.
        if kind == "date"
            && (n
                .strip_suffix('s')
                .is_some_and(|y| y.len() == 4 && y.chars().all(|c| c.is_ascii_digit()))
                || (matches!(n.as_str(), "century" | "centuries")
                    && i > 0
                    && norm(words[i - 1])
                        .chars()
                        .next()
                        .is_some_and(|c| c.is_ascii_digit())))
        {
            return !asked.contains(&n);
        }
        // The first word is capitalised whatever it is: it may be the name ("Sweden
        // rationed gasoline"), unless it is a function word ("The", "In", "It").
        let lead = i == 0 && is_function_word(&n);
        // "one of the largest" states no count.
        !n.is_empty()
            && n != "one"
            && !asked.contains(&n)
            && n != "i"
            && !neuralcore_core::text::WEEKDAYS.contains(&n.as_str())
            && value_kind(&[w], lead) == Some(kind)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_asks_for_the_kind_its_form_names() {
        for (q, want) in [
            ("When did Beyoncé start becoming popular?", Some("date")),
            ("In what year did the tower open?", Some("date")),
            ("Who founded the company?", Some("name")),
            ("Where was the game played?", Some("name")),
            ("Which city hosted Super Bowl 50?", Some("name")),
            ("How many people live in Paris?", Some("number")),
            ("What percentage of voters agreed?", Some("number")),
            ("Super Bowl 2021 location", Some("name")),
            ("What causes the tides?", None),
            ("Why is the sky blue?", None),
            ("How does the borrow checker work?", None),
            ("What happened when the war ended?", None),
            ("What did the company do?", None),
            ("What is the population of Paris?", Some("number")),
            ("What's the name of the band?", Some("name")),
            ("Who's the mayor?", Some("name")),
            ("", None),
            ("?!", None),
        ] {
            assert_eq!(expected(q), want, "{q}");
        }
    }

    #[test]
    fn a_sentence_offers_a_value_the_question_does_not_hold() {
        let q = "When did the tower in Paris open?";
        assert!(offers(
            "The tower in Paris opened in 1889.",
            "date",
            &words_of(q)
        ));
        assert!(offers("It opened on 31 March.", "date", &words_of(q)));
        assert!(!offers(
            "The tower in Paris is a landmark.",
            "date",
            &words_of(q)
        ));
        assert!(offers(
            "It rose to fame in the late 1990s.",
            "date",
            &words_of(q)
        ));
        assert!(offers(
            "It dates from the 19th century.",
            "date",
            &words_of(q)
        ));
        let q = "Where was Super Bowl 2021 played?";
        assert!(offers(
            "It was played at Raymond James Stadium in Tampa.",
            "name",
            &words_of(q)
        ));
        assert!(!offers(
            "Super Bowl 2021 was played on a Sunday.",
            "name",
            &words_of(q)
        ));
        assert!(!offers("The tickets were sold out.", "name", &words_of(q)));
        assert!(offers(
            "Sweden rationed gasoline.",
            "name",
            &words_of("Which country rationed gasoline?")
        ));
        let q = "How many people live in Paris?";
        assert!(offers(
            "About 2,100,000 people live there.",
            "number",
            &words_of(q)
        ));
        assert!(offers(
            "Two million people live there.",
            "number",
            &words_of(q)
        ));
        assert!(!offers(
            "Paris grew fastest in 1850.",
            "number",
            &words_of(q)
        ));
    }
}
