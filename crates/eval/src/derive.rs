//! Sets derived from SQuAD 2.0 that show the loop's reasoning failures: **conflict sets**
//! (a question's paragraph beside a copy that states a false answer) and **multi-aspect
//! sets** (two questions from different articles joined into one).
//!
//! Both are written as SQuAD 2.0 JSON, so any SQuAD loader (an older build's included)
//! reads them: the derived data sits in extra fields of the question objects, which such
//! loaders ignore, and [`load_squad2`](crate::load_squad2) reads into
//! [`QaQuestion::counterfactual`](crate::QaQuestion::counterfactual) and
//! [`QaQuestion::aspects`](crate::QaQuestion::aspects). Everything is deterministic: the
//! same source file, articles, size and seed give the same bytes.
//!
//! **Conflicts** ([`derive_conflicts`]). The candidates are the answerable questions whose
//! gold answer (its shortest variant, the *core*, contained in every other variant) is a
//! year, a date, a number or a name ([`answer_type`]), at most one per paragraph (so no
//! copy of a paragraph is a second true source for another question). They are shuffled
//! with the seed; each takes as its counterfactual value the core of another candidate of
//! the same type (and, when one fits, of the same shape — a name asked for by the same
//! kind of question, `who` / `where`; a number with the same `$`, `%` or `million`; a date
//! with a day and a year alike — and number of words), one that neither contains nor is
//! contained in a gold answer, nor starts with one or one with it after normalization,
//! and does not occur in the paragraph. The copy replaces every occurrence (on word
//! boundaries) of every gold variant, the core in it swapped for the counterfactual value;
//! a copy that still contains a gold answer (SQuAD-normalized) is dropped with its
//! question. Originals stay where they are (all
//! paragraphs of the selected articles are kept, the others as distractors); the copies
//! go into an article `<title> (another account)` after them. With two true sources an
//! excerpt of the original (the answer's sentence and its neighbours) goes into an
//! article `<title> (excerpt)`: two true sources against one false.
//!
//! **Aspects** ([`derive_aspects`]). Answerable questions with short answers are shuffled
//! and paired with a question of another article, neither answer found in the other's
//! paragraph nor contained in the other's answer; the pair is joined in one of four ways
//! (`A, and b?`, `A; also, b?`, `A? And b?`, `A? Also, b?`) and placed in the first
//! question's paragraph with the first question's answers, so a plain SQuAD loader scores
//! it as the first question.

use std::collections::{HashMap, HashSet};
use std::ops::RangeInclusive;
use std::path::Path;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::error::EvalError;
use crate::json::read_json;
use crate::qa::{answer_contains, normalize_answer, squad_from_value, QaQuestion, QaSet};

/// The type of a short answer, as [`answer_type`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerType {
    /// A year: `1066`, `1990s`, `300 BC`.
    Year,
    /// A date with a month: `June 1, 2014`, `5 May 1812`, `March 2003`.
    Date,
    /// A number: `42`, `1,500`, `3.5`, `12%`, `7 million`.
    Number,
    /// Capitalized words: a person, a place, an organization (`Rollo`, `Levi's Stadium`,
    /// `University of Chicago`).
    Name,
}

impl AnswerType {
    /// `year`, `date`, `number` or `name`.
    pub fn as_str(self) -> &'static str {
        match self {
            AnswerType::Year => "year",
            AnswerType::Date => "date",
            AnswerType::Number => "number",
            AnswerType::Name => "name",
        }
    }
}

/// Lower-case words a name may hold between capitalized ones.
const NAME_JOINERS: &[&str] = &[
    "of", "the", "de", "du", "des", "la", "le", "von", "van", "der", "den", "and", "&", "for",
    "da", "di", "del", "y", "al", "bin", "el", "on", "upon",
];

/// Capitalized single words that are no names.
const NOT_NAMES: &[&str] = &[
    "none",
    "all",
    "yes",
    "no",
    "both",
    "neither",
    "either",
    "some",
    "many",
    "most",
    "few",
    "other",
    "others",
    "nothing",
    "everything",
    "everyone",
    "nobody",
    "one",
    "i",
];

const SCALES: &[&str] = &[
    "hundred", "thousand", "million", "billion", "trillion", "percent",
];

fn is_year(token: &str) -> bool {
    let t = token.strip_suffix('s').unwrap_or(token);
    (3..=4).contains(&t.len())
        && t.chars().all(|c| c.is_ascii_digit())
        && t.parse::<u32>().is_ok_and(|y| (100..=2099).contains(&y))
}

fn is_numeral(token: &str) -> bool {
    let t = token.trim_start_matches('$').trim_end_matches('%');
    let mut chars = t.chars();
    chars.next().is_some_and(|c| c.is_ascii_digit())
        && t.chars()
            .all(|c| c.is_ascii_digit() || c == ',' || c == '.')
        && !t.ends_with(['.', ','])
}

fn is_day(token: &str) -> bool {
    let t = token.trim_end_matches(',');
    let t = ["st", "nd", "rd", "th"]
        .iter()
        .find_map(|s| t.strip_suffix(s))
        .unwrap_or(t);
    !t.is_empty() && t.len() <= 2 && t.chars().all(|c| c.is_ascii_digit())
}

/// The type of a short answer by simple rules, or `None` when it is none of them (or
/// longer than six words): a year (3–4 digits between 100 and 2099, optionally `…s` or
/// with `AD` / `BC`), a date (a month name with a day and/or a year), a number (a numeral
/// with `,` `.` `%` `$`, optionally followed by `million`, `percent`, …), or a name (every
/// word capitalized but joiners such as `of`, `de`, `and`; no digits; not a month or a
/// weekday; at least two letters).
pub fn answer_type(text: &str) -> Option<AnswerType> {
    let t = text.trim().trim_end_matches(['.', ',', ';', ':']);
    let words: Vec<&str> = t.split_whitespace().collect();
    if words.is_empty() || words.len() > 6 {
        return None;
    }
    let lower: Vec<String> = words.iter().map(|w| w.to_lowercase()).collect();
    if t.chars().any(|c| c.is_ascii_digit()) {
        let era = |w: &str| matches!(w, "ad" | "bc" | "bce" | "ce");
        if is_year(words[0]) && lower[1..].iter().all(|w| era(w)) && words.len() <= 2 {
            return Some(AnswerType::Year);
        }
        let month = lower
            .iter()
            .filter(|w| neuralcore_core::text::MONTHS.contains(&w.trim_end_matches(['.', ','])))
            .count();
        if month == 1
            && words.len() <= 4
            && words.iter().zip(&lower).all(|(w, l)| {
                neuralcore_core::text::MONTHS.contains(&l.trim_end_matches(['.', ',']))
                    || is_day(w)
                    || is_year(w.trim_end_matches(','))
            })
        {
            return Some(AnswerType::Date);
        }
        if is_numeral(words[0])
            && words.len() <= 2
            && lower[1..].iter().all(|w| SCALES.contains(&w.as_str()))
        {
            return Some(AnswerType::Number);
        }
        return None;
    }
    let ok_chars = t
        .chars()
        .all(|c| c.is_alphabetic() || matches!(c, ' ' | '.' | '\'' | '’' | '-' | '&'));
    let capital = |w: &str| w.chars().next().is_some_and(char::is_uppercase);
    let bare = |l: &str| l.trim_matches(|c: char| !c.is_alphanumeric()).to_string();
    if ok_chars
        && t.chars().filter(|c| c.is_alphabetic()).count() >= 2
        && capital(words[0])
        && capital(words[words.len() - 1])
        && words
            .iter()
            .zip(&lower)
            .all(|(w, l)| capital(w) || NAME_JOINERS.contains(&l.as_str()))
        && !lower.iter().any(|l| {
            neuralcore_core::text::MONTHS.contains(&bare(l).as_str())
                || neuralcore_core::text::WEEKDAYS.contains(&bare(l).as_str())
        })
        && !(words.len() == 1
            && (NAME_JOINERS.contains(&lower[0].as_str())
                || NOT_NAMES.contains(&bare(&lower[0]).as_str())))
    {
        return Some(AnswerType::Name);
    }
    None
}

use neuralcore_core::rng::SplitMix64 as Rng;

/// What a derivation is asked for.
#[derive(Debug, Clone)]
pub struct DeriveOptions {
    /// SQuAD articles to draw from (1-based, inclusive); all when `None`.
    pub articles: Option<RangeInclusive<usize>>,
    /// How many questions to derive (fewer when the articles do not have enough).
    pub questions: usize,
    /// The seed of the shuffle.
    pub seed: u64,
    /// Conflict sets: true sources per question, 1 (the paragraph) or 2 (and an excerpt
    /// of it). Ignored by [`derive_aspects`].
    pub true_sources: usize,
}

impl Default for DeriveOptions {
    fn default() -> Self {
        DeriveOptions {
            articles: None,
            questions: 150,
            seed: 15,
            true_sources: 1,
        }
    }
}

/// A derived set: the SQuAD 2.0 JSON to write, and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DerivedSet {
    /// The SQuAD 2.0 document (`version`, `derived`, `data`).
    pub json: Value,
    /// Questions derived.
    pub questions: usize,
    /// Passages (paragraphs) in the file.
    pub passages: usize,
    /// Conflict sets: questions per answer type (`year`, `date`, `number`, `name`).
    pub by_type: Vec<(String, usize)>,
    /// Candidates that had to be passed over (no counterfactual of the same type fit, or
    /// the copy kept a gold answer).
    pub skipped: usize,
}

impl DerivedSet {
    /// The JSON document as text, pretty-printed, ending with a line break.
    pub fn to_json_string(&self) -> String {
        let mut s = serde_json::to_string_pretty(&self.json).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// Where a SQuAD question sits in its file, with its JSON.
struct Raw<'v> {
    article: usize,
    paragraph: usize,
    qa: &'v Map<String, Value>,
}

/// The articles `range` of a SQuAD file as they are, each paragraph carrying the derived
/// questions `placed` on it (taken out of `placed`), and how many paragraphs they hold.
fn original_articles(
    data: &[Value],
    range: RangeInclusive<usize>,
    placed: &mut HashMap<(usize, usize), Vec<Value>>,
) -> (Vec<Value>, usize) {
    let mut out = Vec::new();
    let mut passages = 0;
    for a in range {
        let paras = data[a]["paragraphs"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        passages += paras.len();
        let paragraphs: Vec<Value> = paras
            .iter()
            .enumerate()
            .map(|(p, para)| {
                json!({
                    "context": para["context"],
                    "qas": placed.remove(&(a, p)).unwrap_or_default(),
                })
            })
            .collect();
        out.push(json!({"title": data[a]["title"], "paragraphs": paragraphs}));
    }
    (out, passages)
}

/// The selected articles of `root` (validated by the loader) and the raw question objects
/// by id.
fn raw_questions(root: &Value, range: RangeInclusive<usize>) -> HashMap<String, Raw<'_>> {
    let mut out = HashMap::new();
    let data = root["data"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    for a in range {
        let paras = data
            .get(a)
            .and_then(|x| x["paragraphs"].as_array())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for (p, para) in paras.iter().enumerate() {
            for qa in para["qas"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
                let Some(o) = qa.as_object() else { continue };
                let id = match o.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => continue,
                };
                out.entry(id).or_insert(Raw {
                    article: a,
                    paragraph: p,
                    qa: o,
                });
            }
        }
    }
    out
}

/// Loads the source and returns (set, root, 0-based article range).
fn load_source(
    path: &Path,
    articles: Option<RangeInclusive<usize>>,
) -> Result<(QaSet, Value, RangeInclusive<usize>), EvalError> {
    let root = read_json(path)?;
    let set = squad_from_value(path, &root, articles.clone())?;
    let n = root["data"].as_array().map_or(0, Vec::len);
    let range = match articles {
        Some(r) => *r.start() - 1..=*r.end() - 1,
        None => 0..=n.saturating_sub(1),
    };
    if n == 0 {
        return Err(EvalError::InvalidSelection {
            path: path.to_path_buf(),
            message: "the file has no articles".to_string(),
        });
    }
    Ok((set, root, range))
}

/// The shortest gold answer when every other gold answer contains it as whole words
/// (`P` is not the core of `NP`).
fn core(q: &QaQuestion) -> Option<&str> {
    let c = q.answers.iter().min_by_key(|a| a.chars().count())?;
    q.answers
        .iter()
        .all(|a| {
            a.match_indices(c.as_str())
                .any(|(i, m)| word_boundary(a, i, i + m.len()))
        })
        .then_some(c.as_str())
}

fn word_boundary(text: &str, start: usize, end: usize) -> bool {
    let before = text[..start].chars().next_back();
    let after = text[end..].chars().next();
    !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
}

/// Abbreviations whose period is their own, not the sentence's.
const ABBREVIATIONS: &[&str] = &[
    "jr", "sr", "st", "mt", "inc", "co", "ltd", "corp", "dr", "mr", "mrs", "ms", "no", "vs",
    "bros", "gen", "col", "lt", "sgt", "capt", "prof", "rev", "ft", "ave",
];

/// `text` without the sentence's closing period it ends with, if it does: a final `.`
/// after a word that is no abbreviation (not `U.S.`, `Jr.`, a single letter). `!` and
/// `?` stay: they belong to names (`Jeopardy!`).
fn sentence_body(text: &str) -> &str {
    let Some(body) = text.strip_suffix('.') else {
        return text;
    };
    let last = body
        .rsplit(|c: char| !c.is_alphanumeric() && c != '.')
        .next()
        .unwrap_or("");
    let abbreviation = last.contains('.')
        || last.chars().count() <= 1
        || ABBREVIATIONS.contains(&last.to_lowercase().as_str());
    if abbreviation {
        text
    } else {
        body
    }
}

/// What `core` is swapped for: `value`, with the sentence's closing period when the
/// core ends with one and the value does not (gold `Book of Isaiah.` → `The Wind
/// Waker.`, or the copy's sentence would run into the next).
fn swapped_value(core: &str, value: &str) -> String {
    let body = sentence_body(core);
    let tail = &core[body.len()..];
    if tail.is_empty() || value.ends_with(tail) {
        value.to_string()
    } else {
        format!("{value}{tail}")
    }
}

/// `context` with every occurrence (on word boundaries) of every gold variant replaced by
/// the variant with `core` swapped for `value` (keeping the core's closing period);
/// `None` when nothing was replaced.
pub fn replace_answer(context: &str, golds: &[String], core: &str, value: &str) -> Option<String> {
    let value = swapped_value(core, value);
    let mut hits: Vec<(usize, usize, String)> = Vec::new();
    for g in golds {
        if g.is_empty() {
            continue;
        }
        let mut from = 0;
        while let Some(i) = context[from..].find(g.as_str()) {
            let (s, e) = (from + i, from + i + g.len());
            if word_boundary(context, s, e) {
                hits.push((s, e, g.replacen(core, &value, 1)));
            }
            from = s + context[s..].chars().next().map_or(1, char::len_utf8);
        }
    }
    if hits.is_empty() {
        return None;
    }
    hits.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let mut out = String::with_capacity(context.len());
    let mut at = 0;
    for (s, e, r) in hits {
        if s < at {
            continue;
        }
        out.push_str(&context[at..s]);
        out.push_str(&r);
        at = e;
    }
    out.push_str(&context[at..]);
    Some(out)
}

/// Whether an occurrence of `value` in `text` is followed by a period that does not end
/// a sentence (`Texas. was`): the rest of an abbreviation the value replaced.
fn stray_period(text: &str, value: &str) -> bool {
    text.match_indices(value).any(|(i, m)| {
        let rest = &text[i + m.len()..];
        rest.strip_prefix('.').is_some_and(|r| {
            r.starts_with(char::is_whitespace)
                && r.trim_start()
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_lowercase())
        })
    })
}

/// The answer's sentence with its neighbours (or alone, when with them it would be the
/// whole paragraph), trimmed: a second, shorter true source.
fn excerpt(set: &QaSet, q: &QaQuestion) -> Option<String> {
    let p = set.passage(q.passages.first()?)?;
    let span = q.supporting.first()?.span;
    let i = p.sentences.iter().position(|s| *s == span)?;
    let chars: Vec<char> = p.text.chars().collect();
    let take = |a: usize, b: usize| -> String {
        chars[p.sentences[a].0..p.sentences[b].1]
            .iter()
            .collect::<String>()
            .trim()
            .to_string()
    };
    let whole = p.text.trim();
    let wide = take(i.saturating_sub(1), (i + 1).min(p.sentences.len() - 1));
    let text = if wide != whole { wide } else { take(i, i) };
    (text != whole && answer_contains(&text, &q.answers)).then_some(text)
}

/// Words of a question asking for a person (besides `who`, `whom`, `whose`).
const PERSON_WORDS: &[&str] = &[
    "king",
    "queen",
    "emperor",
    "leader",
    "president",
    "ruler",
    "pope",
    "successor",
    "founder",
    "author",
    "scientist",
    "person",
    "man",
    "woman",
    "general",
    "minister",
    "duke",
    "prince",
    "princess",
    "architect",
    "inventor",
    "engineer",
    "son",
    "daughter",
    "father",
    "mother",
    "wife",
    "husband",
    "brother",
    "sister",
    "player",
    "coach",
    "quarterback",
    "singer",
    "writer",
    "poet",
    "philosopher",
    "physicist",
    "chemist",
    "mathematician",
    "bishop",
];

/// Words of a question asking for a place.
const PLACE_WORDS: &[&str] = &[
    "where",
    "country",
    "countries",
    "city",
    "cities",
    "state",
    "region",
    "town",
    "river",
    "continent",
    "island",
    "place",
    "location",
    "county",
    "province",
    "area",
    "nation",
    "territory",
    "village",
    "capital",
    "kingdom",
    "sea",
    "ocean",
    "mountain",
    "valley",
];

/// The *shape* of a typed answer, so a counterfactual value is taken from an answer of the
/// same shape when one fits: names by what the question asks for (1 a person — `who`,
/// `king` —, 2 a place — `where`, `province` —, 0 anything else), numbers by their
/// marks (`$`, `%` / `percent`, a scale word such as `million`), dates by whether they
/// have a day and a year. Years have one shape.
fn shape(kind: AnswerType, question: &str, core: &str) -> u8 {
    match kind {
        AnswerType::Year => 0,
        AnswerType::Name => {
            let words: Vec<String> = question
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect();
            let any = |list: &[&str]| words.iter().any(|w| list.contains(&w.as_str()));
            if any(&["who", "whom", "whose"]) || any(PERSON_WORDS) {
                1
            } else if any(PLACE_WORDS) {
                2
            } else {
                0
            }
        }
        AnswerType::Number => {
            let l = core.to_lowercase();
            u8::from(l.contains('$'))
                | u8::from(l.contains('%') || l.contains("percent")) << 1
                | u8::from(SCALES[..SCALES.len() - 1].iter().any(|s| l.contains(s))) << 2
        }
        AnswerType::Date => {
            let words: Vec<&str> = core.split_whitespace().collect();
            u8::from(words.iter().any(|w| is_day(w)))
                | u8::from(words.iter().any(|w| is_year(w.trim_end_matches(',')))) << 1
        }
    }
}

/// A conflict candidate: a question with a typed core answer.
struct Candidate<'a> {
    q: &'a QaQuestion,
    core: &'a str,
    kind: AnswerType,
    shape: u8,
    words: usize,
    context: &'a str,
    excerpt: Option<String>,
}

/// Derives a conflict set from the SQuAD 2.0 file `path` (see the module docs).
///
/// # Errors
/// The errors of [`load_squad2`](crate::load_squad2); [`EvalError::InvalidSelection`]
/// when `true_sources` is not 1 or 2 or no question qualifies.
pub fn derive_conflicts(path: &Path, opts: &DeriveOptions) -> Result<DerivedSet, EvalError> {
    if !(1..=2).contains(&opts.true_sources) {
        return Err(EvalError::InvalidSelection {
            path: path.to_path_buf(),
            message: format!("true sources must be 1 or 2, not {}", opts.true_sources),
        });
    }
    let (set, root, range) = load_source(path, opts.articles.clone())?;
    let raw = raw_questions(&root, range.clone());
    let texts: HashMap<&str, &str> = set
        .passages
        .iter()
        .map(|p| (p.id.as_str(), p.text.as_str()))
        .collect();
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for q in set.questions.iter().filter(|q| q.answerable) {
        let (Some(core), Some(context)) = (
            core(q),
            q.passages.first().and_then(|p| texts.get(p.as_str())),
        ) else {
            continue;
        };
        // An abbreviation cut before its last period ("U.S" of "U.S."): a copy would
        // keep the period after the new value ("the Texas. was").
        let cut_abbreviation = {
            let mut rev = core.chars().rev();
            matches!((rev.next(), rev.next()), (Some(c), Some('.')) if c.is_alphabetic())
        };
        let Some(kind) = answer_type(core).filter(|_| !cut_abbreviation) else {
            continue;
        };
        if !raw.contains_key(&q.id) || normalize_answer(core).is_empty() {
            continue;
        }
        // Both variants share the questions: every candidate needs an excerpt.
        let Some(excerpt) = excerpt(&set, q) else {
            continue;
        };
        candidates.push(Candidate {
            q,
            core,
            kind,
            shape: shape(kind, &q.question, core),
            words: core.split_whitespace().count(),
            context,
            excerpt: Some(excerpt),
        });
    }
    // The pool of values per type: the candidates' cores, distinct after normalization,
    // in file order.
    let mut pool: HashMap<AnswerType, Vec<(&str, usize, &str, u8)>> = HashMap::new();
    let mut seen = HashSet::new();
    for c in &candidates {
        if seen.insert((c.kind, normalize_answer(c.core))) {
            // A value goes mid-sentence: without the core's closing period.
            pool.entry(c.kind).or_default().push((
                sentence_body(c.core),
                c.words,
                c.q.id.as_str(),
                c.shape,
            ));
        }
    }
    let mut rng = Rng(opts.seed);
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    rng.shuffle(&mut order);

    struct Chosen {
        cand: usize,
        value: String,
        copy: String,
    }
    let mut chosen: Vec<Chosen> = Vec::new();
    let mut used_paragraphs = HashSet::new();
    let mut texts_seen: HashSet<String> = set.passages.iter().map(|p| p.text.clone()).collect();
    let mut skipped = 0;
    for &ci in &order {
        if chosen.len() >= opts.questions {
            break;
        }
        let c = &candidates[ci];
        if used_paragraphs.contains(&c.q.passages[0]) {
            continue;
        }
        let values = &pool[&c.kind];
        let start = rng.below(values.len());
        // Not the same value in another form: neither contains the other, nor starts
        // with it after normalization ("Catholic" / "Catholics", "1990" / "1990s").
        let fits = |v: &str| {
            let vn = normalize_answer(v);
            !vn.is_empty()
                && !c.context.contains(v)
                && !answer_contains(c.context, &[v.to_string()])
                && !answer_contains(v, &c.q.answers)
                && c.q.answers.iter().all(|g| {
                    let gn = normalize_answer(g);
                    !answer_contains(g, &[v.to_string()])
                        && !gn.starts_with(&vn)
                        && !vn.starts_with(&gn)
                })
        };
        let rotated = || (0..values.len()).map(|k| values[(start + k) % values.len()]);
        // The same shape and number of words, then the same shape, then any.
        let pick = [(true, true), (true, false), (false, false)]
            .into_iter()
            .find_map(|(same_shape, same_words)| {
                rotated().find(|(v, w, id, shape)| {
                    *id != c.q.id
                        && (!same_shape || *shape == c.shape)
                        && (!same_words || *w == c.words)
                        && fits(v)
                })
            });
        let made = pick.and_then(|(v, _, _, _)| {
            let copy = replace_answer(c.context, &c.q.answers, c.core, v)?;
            let clean = copy != c.context
                && !stray_period(&copy, v)
                && !answer_contains(&copy, &c.q.answers)
                && answer_contains(&copy, &[v.to_string()])
                && copy.replace(&swapped_value(c.core, v), c.core) == c.context
                && !texts_seen.contains(&copy)
                && c.excerpt.as_ref().is_some_and(|e| !texts_seen.contains(e));
            clean.then(|| (v.to_string(), copy))
        });
        match made {
            Some((value, copy)) => {
                used_paragraphs.insert(c.q.passages[0].clone());
                texts_seen.insert(copy.clone());
                if let Some(e) = &c.excerpt {
                    texts_seen.insert(e.clone());
                }
                chosen.push(Chosen {
                    cand: ci,
                    value,
                    copy,
                });
            }
            None => skipped += 1,
        }
    }
    if chosen.is_empty() {
        return Err(EvalError::InvalidSelection {
            path: path.to_path_buf(),
            message: "no answerable question with a year, date, number or name answer \
                      qualifies for a conflict set"
                .to_string(),
        });
    }
    // File order.
    chosen.sort_by_key(|c| {
        let r = &raw[&candidates[c.cand].q.id];
        (r.article, r.paragraph, c.cand)
    });

    let data = root["data"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let first = *range.start();
    let selected = range.clone().count();
    // Articles (source index) that get copies, in order; copy and excerpt positions.
    let mut copy_articles: Vec<usize> = Vec::new();
    for c in &chosen {
        let a = raw[&candidates[c.cand].q.id].article;
        if !copy_articles.contains(&a) {
            copy_articles.push(a);
        }
    }
    let title = |a: usize| data[a]["title"].as_str().unwrap_or("").to_string();
    let mut copies: Vec<Vec<Value>> = vec![Vec::new(); copy_articles.len()];
    let mut excerpts: Vec<Vec<Value>> = vec![Vec::new(); copy_articles.len()];
    let mut placed: HashMap<(usize, usize), Vec<Value>> = HashMap::new();
    let mut by_type: HashMap<AnswerType, usize> = HashMap::new();
    for c in &chosen {
        let cand = &candidates[c.cand];
        let r = &raw[&cand.q.id];
        let k = copy_articles
            .iter()
            .position(|&a| a == r.article)
            .unwrap_or(0);
        let copy_id = format!("squad2:{}:{}", selected + k, copies[k].len());
        copies[k].push(json!({"context": c.copy, "qas": []}));
        let mut qa = r.qa.clone();
        qa.insert("conflict".into(), json!(true));
        qa.insert("counterfactual".into(), json!([c.value]));
        qa.insert("answer_type".into(), json!(cand.kind.as_str()));
        if opts.true_sources == 2 {
            let excerpt_id = format!(
                "squad2:{}:{}",
                selected + copy_articles.len() + k,
                excerpts[k].len()
            );
            excerpts[k].push(json!({"context": cand.excerpt, "qas": []}));
            qa.insert("true_passages".into(), json!([excerpt_id]));
        }
        qa.insert("counterfactual_passages".into(), json!([copy_id]));
        placed
            .entry((r.article, r.paragraph))
            .or_default()
            .push(Value::Object(qa));
        *by_type.entry(cand.kind).or_default() += 1;
    }
    let (mut out_data, _) = original_articles(data, range.clone(), &mut placed);
    for (k, &a) in copy_articles.iter().enumerate() {
        out_data.push(json!({
            "title": format!("{} (another account)", title(a)),
            "paragraphs": copies[k],
        }));
    }
    if opts.true_sources == 2 {
        for (k, &a) in copy_articles.iter().enumerate() {
            out_data.push(json!({
                "title": format!("{} (excerpt)", title(a)),
                "paragraphs": excerpts[k],
            }));
        }
    }
    let passages = out_data
        .iter()
        .map(|a| a["paragraphs"].as_array().map_or(0, Vec::len))
        .sum();
    let mut by_type: Vec<(AnswerType, usize)> = by_type.into_iter().collect();
    by_type.sort();
    let derived = json!({
        "kind": "conflicts",
        "source": path.display().to_string(),
        "articles": format!("{}-{}", first + 1, range.end() + 1),
        "seed": opts.seed,
        "true_sources": opts.true_sources,
        "questions": chosen.len(),
        "by_type": by_type.iter().map(|(t, n)| (t.as_str().to_string(), json!(n))).collect::<Map<_, _>>(),
    });
    Ok(DerivedSet {
        json: json!({"version": "v2.0", "derived": derived, "data": out_data}),
        questions: chosen.len(),
        passages,
        by_type: by_type
            .into_iter()
            .map(|(t, n)| (t.as_str().to_string(), n))
            .collect(),
        skipped,
    })
}

/// First words of a question that are lower-cased when it is joined after another.
const LOWER_WHEN_JOINED: &[&str] = &[
    "what",
    "which",
    "who",
    "whom",
    "whose",
    "when",
    "where",
    "why",
    "how",
    "in",
    "on",
    "at",
    "for",
    "by",
    "from",
    "to",
    "during",
    "after",
    "before",
    "the",
    "a",
    "an",
    "is",
    "are",
    "was",
    "were",
    "did",
    "does",
    "do",
    "can",
    "could",
    "of",
    "with",
    "about",
    "according",
    "since",
    "until",
    "as",
    "approximately",
    "roughly",
    "around",
    "name",
    "list",
    "give",
    "these",
    "this",
    "that",
    "those",
    "it",
    "its",
    "their",
    "there",
    "many",
    "most",
    "some",
    "one",
    "two",
    "three",
    "if",
    "besides",
    "other",
    "under",
    "along",
    "between",
    "apart",
    "despite",
    "due",
    "following",
    "upon",
    "while",
    "into",
    "within",
    "over",
    "through",
    "against",
    "among",
    "like",
    "unlike",
    "because",
    "although",
    "not",
    "no",
    "each",
    "every",
    "all",
    "any",
    "both",
    "either",
    "neither",
    "such",
    "he",
    "she",
    "they",
    "his",
    "her",
    "besides",
];

/// The four ways [`derive_aspects`] joins two questions, in turn.
pub const JOINS: &[&str] = &[", and", "; also,", "? And", "? Also,"];

/// Joins two questions in way `k` of [`JOINS`] (modulo 4).
pub fn join_questions(a: &str, b: &str, k: usize) -> String {
    let strip = |s: &str| {
        s.trim()
            .trim_end_matches(|c: char| c == '?' || c == '.' || c.is_whitespace())
            .to_string()
    };
    let (a, b) = (strip(a), strip(b));
    let lower_first = |s: &str| -> String {
        let first = s.split_whitespace().next().unwrap_or("").to_lowercase();
        if LOWER_WHEN_JOINED.contains(&first.as_str()) {
            let mut cs = s.chars();
            cs.next()
                .map(|c| c.to_lowercase().chain(cs).collect())
                .unwrap_or_default()
        } else {
            s.to_string()
        }
    };
    match k % JOINS.len() {
        0 => format!("{a}, and {}?", lower_first(&b)),
        1 => format!("{a}; also, {}?", lower_first(&b)),
        2 => format!("{a}? And {}?", lower_first(&b)),
        _ => format!("{a}? Also, {}?", lower_first(&b)),
    }
}

/// Derives a multi-aspect set from the SQuAD 2.0 file `path` (see the module docs).
///
/// # Errors
/// The errors of [`load_squad2`](crate::load_squad2); [`EvalError::InvalidSelection`]
/// when fewer than two articles are selected or no pair qualifies.
pub fn derive_aspects(path: &Path, opts: &DeriveOptions) -> Result<DerivedSet, EvalError> {
    let (set, root, range) = load_source(path, opts.articles.clone())?;
    if range.clone().count() < 2 {
        return Err(EvalError::InvalidSelection {
            path: path.to_path_buf(),
            message: "a multi-aspect set joins questions of different articles: select at \
                      least two"
                .to_string(),
        });
    }
    let raw = raw_questions(&root, range.clone());
    let texts: HashMap<&str, &str> = set
        .passages
        .iter()
        .map(|p| (p.id.as_str(), p.text.as_str()))
        .collect();
    let mut pool: Vec<&QaQuestion> = set
        .questions
        .iter()
        .filter(|q| {
            q.answerable
                && raw.contains_key(&q.id)
                && !q.question.trim().is_empty()
                && core(q).is_some_and(|c| {
                    c.split_whitespace().count() <= 5 && !normalize_answer(c).is_empty()
                })
        })
        .collect();
    let mut rng = Rng(opts.seed);
    rng.shuffle(&mut pool);
    let text_of = |q: &QaQuestion| texts.get(q.passages[0].as_str()).copied().unwrap_or("");
    let mut used = vec![false; pool.len()];
    let mut pairs: Vec<(&QaQuestion, &QaQuestion)> = Vec::new();
    for i in 0..pool.len() {
        if pairs.len() >= opts.questions {
            break;
        }
        if used[i] {
            continue;
        }
        let q1 = pool[i];
        let a1 = raw[&q1.id].article;
        let partner = (i + 1..pool.len()).find(|&j| {
            let q2 = pool[j];
            !used[j]
                && raw[&q2.id].article != a1
                && !answer_contains(text_of(q1), &q2.answers)
                && !answer_contains(text_of(q2), &q1.answers)
                && q1.answers.iter().all(|g| !answer_contains(g, &q2.answers))
                && q2.answers.iter().all(|g| !answer_contains(g, &q1.answers))
        });
        if let Some(j) = partner {
            used[i] = true;
            used[j] = true;
            pairs.push((q1, pool[j]));
        }
    }
    if pairs.is_empty() {
        return Err(EvalError::InvalidSelection {
            path: path.to_path_buf(),
            message: "no pair of answerable questions from different articles qualifies"
                .to_string(),
        });
    }
    let first = *range.start();
    let pid = |r: &Raw<'_>| format!("squad2:{}:{}", r.article - first, r.paragraph);
    let mut placed: HashMap<(usize, usize), Vec<Value>> = HashMap::new();
    for (k, (q1, q2)) in pairs.iter().enumerate() {
        let (r1, r2) = (&raw[&q1.id], &raw[&q2.id]);
        let aspect = |q: &QaQuestion, r: &Raw<'_>| json!({"question": q.question.trim(), "answers": r.qa["answers"], "passage": pid(r)});
        let qa = json!({
            "id": format!("{}+{}", q1.id, q2.id),
            "question": join_questions(&q1.question, &q2.question, k),
            "is_impossible": false,
            "answers": r1.qa["answers"],
            "join": JOINS[k % JOINS.len()].trim(),
            "aspects": [aspect(q1, r1), aspect(q2, r2)],
        });
        placed
            .entry((r1.article, r1.paragraph))
            .or_default()
            .push(qa);
    }
    let data = root["data"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let (out_data, passages) = original_articles(data, range.clone(), &mut placed);
    let derived = json!({
        "kind": "aspects",
        "source": path.display().to_string(),
        "articles": format!("{}-{}", first + 1, range.end() + 1),
        "seed": opts.seed,
        "questions": pairs.len(),
    });
    Ok(DerivedSet {
        json: json!({"version": "v2.0", "derived": derived, "data": out_data}),
        questions: pairs.len(),
        passages,
        by_type: Vec::new(),
        skipped: 0,
    })
}
