//! The evidence model of the control loop and the scoring it shares.
//!
//! Every stage of the loop reads and writes these shapes on the Mind:
//! - the grader writes [`Graded`] chunks (`<ns>.verdicts`), each with a [`Verdict`], the
//!   evaluator's score and the reason;
//! - verification turns AMBIGUOUS ones into VERIFIED or DROPPED (same shape);
//! - refinement writes [`Strip`]s (`<ns>.strips`): sentences of kept chunks with their
//!   character spans in the document;
//! - generation writes an [`Answer`] (`<ns>.answer`): sentences, each citing strips.
//!
//! Scoring without a cross-encoder is lexical and semantic: [`QueryTerms`] weighs the
//! question's analyzed terms by their inverse document frequency in the collection (so
//! rare, telling words count and question words do not), and [`Features`] describe how
//! well a chunk answers a question; [`FeatureModel`] turns them into a score in [0, 1]
//! with weights fitted by `neuralcore calibrate`.

use std::collections::HashSet;

use neuralcore_engine::{Engine, EngineError};
use serde::{Deserialize, Serialize};

/// What the grader (and then verification) decided about a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    /// Relevant and answer-bearing: kept.
    Correct,
    /// Unsure: sent to verification.
    Ambiguous,
    /// Not relevant: never reaches generation.
    Incorrect,
    /// Was AMBIGUOUS; a second, independent source supports it: kept.
    Verified,
    /// Was AMBIGUOUS; no second source supports it (or one contradicts it): dropped.
    Dropped,
}

impl Verdict {
    /// Whether generation may use the chunk.
    pub fn kept(self) -> bool {
        matches!(self, Verdict::Correct | Verdict::Verified)
    }
}

/// A graded chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Graded {
    /// Document id (16 hex digits).
    pub doc: String,
    /// Chunk ordinal.
    pub ordinal: u32,
    /// Document title.
    pub title: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The evaluator's score in [0, 1].
    pub score: f32,
    /// The retrieval score it arrived with.
    pub retrieval_score: f32,
    /// Why: the evaluator, thresholds and the telling features.
    pub reason: String,
    /// The sub-query that retrieved it.
    pub query: String,
    /// Iteration (from 1).
    pub iteration: u32,
}

/// What a piece of evidence is: a chunk of a document, or a memory. The loop keeps
/// the two apart by type, never by the shape of an id.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Evidence {
    /// A chunk of a document in the collection.
    Chunk {
        /// Document id (16 hex digits).
        doc: String,
        /// Chunk ordinal.
        ordinal: u32,
    },
    /// A memory of the memory store.
    Memory {
        /// The memory's id.
        id: String,
    },
}

impl Evidence {
    /// The chunk `doc`#`ordinal`.
    pub fn chunk(doc: impl Into<String>, ordinal: u32) -> Self {
        Evidence::Chunk {
            doc: doc.into(),
            ordinal,
        }
    }

    /// The memory `id`.
    pub fn memory(id: impl Into<String>) -> Self {
        Evidence::Memory { id: id.into() }
    }

    /// The document and ordinal of a chunk.
    pub fn as_chunk(&self) -> Option<(&str, u32)> {
        match self {
            Evidence::Chunk { doc, ordinal } => Some((doc, *ordinal)),
            Evidence::Memory { .. } => None,
        }
    }

    /// The id of a memory.
    pub fn as_memory(&self) -> Option<&str> {
        match self {
            Evidence::Memory { id } => Some(id),
            Evidence::Chunk { .. } => None,
        }
    }

    /// The independent source it comes from: its document (any chunk of it), or the
    /// memory (`memory:<id>`).
    pub fn source(&self) -> String {
        match self {
            Evidence::Chunk { doc, .. } => doc.clone(),
            Evidence::Memory { id } => format!("memory:{id}"),
        }
    }
}

impl std::fmt::Display for Evidence {
    /// `<doc>#<ordinal>` for a chunk, `memory:<id>` for a memory.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Evidence::Chunk { doc, ordinal } => write!(f, "{doc}#{ordinal}"),
            Evidence::Memory { id } => write!(f, "memory:{id}"),
        }
    }
}

/// A sentence (or window) of a kept chunk or memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Strip {
    /// Where it comes from.
    pub evidence: Evidence,
    /// Document title.
    pub title: String,
    /// Character span `[start, end)` in the document's text.
    pub span: (u64, u64),
    /// The text.
    pub text: String,
    /// Relevance to the question, in [0, 1].
    pub score: f32,
    /// Verdict of its chunk (CORRECT or VERIFIED).
    pub verdict: Verdict,
    /// Rank of its chunk among kept chunks (for ordering).
    pub chunk_rank: usize,
}

/// One cited source of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Citation {
    /// Number shown in the answer (`[n]`), from 1.
    pub n: usize,
    /// What is cited.
    pub evidence: Evidence,
    /// Document title.
    pub title: String,
    /// Character span in the document's text.
    pub span: (u64, u64),
    /// The cited text.
    pub text: String,
}

/// One sentence of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AnswerSentence {
    /// The text (without citation markers).
    pub text: String,
    /// Citation numbers.
    pub citations: Vec<usize>,
    /// Claim-support score against the cited evidence, once checked.
    pub support: Option<f32>,
    /// `false` when the check found it unsupported (it is then left out of the text).
    pub supported: bool,
}

/// Kept evidence that disagrees on the fact an answer states (a place, a date, a number,
/// a name), or two memories linked CONTRADICTS: the sides, the stronger first, and how
/// they were weighed. The answer states it in words too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Conflict {
    /// What the sides disagree on: `number`, `date`, `name`, `value` (values of different
    /// kinds), or `statement` (memories).
    pub about: String,
    /// The sides, the one weighed stronger first.
    pub sides: Vec<ConflictSide>,
    /// How they were weighed, in a sentence (independent sources, trust, recency).
    pub weighing: String,
}

/// One side of a [`Conflict`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConflictSide {
    /// What this side states ("1889", "Levi's Stadium"), or the memory's text.
    pub value: String,
    /// The answer's citation numbers stating it.
    pub citations: Vec<usize>,
    /// Independent sources (documents or memories) stating it.
    pub sources: usize,
    /// Trust of its most trusted source, when known (memories).
    pub trust: Option<f32>,
    /// Its weight against the other sides, in [0, 1] (the sides' weights sum to 1).
    pub weight: f32,
}

/// Whether the answer covers one aspect of a question about several things.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AspectCoverage {
    /// The aspect, as a question of its own.
    pub aspect: String,
    /// Kept evidence answers it.
    pub covered: bool,
    /// The answer's citation numbers for it.
    pub citations: Vec<usize>,
}

/// An answer as generation writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Answer {
    /// Sentences, in order.
    pub sentences: Vec<AnswerSentence>,
    /// Cited sources.
    pub citations: Vec<Citation>,
    /// `extractive`, `llm`, `direct` (no retrieval needed) or `abstain`.
    pub method: String,
    /// Why the engine abstained, or degraded (LLM failures), if it did.
    pub note: Option<String>,
    /// LLM tokens used.
    pub tokens: u64,
    /// LLM cost in USD (when priced).
    pub cost_usd: f64,
    /// Kept evidence that disagrees on what the answer states.
    #[serde(default)]
    pub conflicts: Vec<Conflict>,
    /// Coverage of each aspect of a question about several things (empty for one).
    #[serde(default)]
    pub aspects: Vec<AspectCoverage>,
}

impl Answer {
    /// The answer text: supported sentences, each followed by its citation markers.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for s in self.sentences.iter().filter(|s| s.supported) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(s.text.trim());
            for c in &s.citations {
                out.push_str(&format!(" [{c}]"));
            }
        }
        out
    }
}

/// Words that make a question but say nothing about its topic.
const QUESTION_WORDS: &str = "what which who whom whose when where why how did does do done \
    was were is are been being has have had can could would should may might must shall \
    name named kind type many much one ones called known also";

/// Negation words (the analyzer drops most as stop words, so they are looked for raw).
const NEGATIONS: &[&str] = &[
    "not", "never", "no", "none", "nobody", "nothing", "neither", "nor",
];

/// [`QUESTION_WORDS`] as the analyzer makes them, computed once per analyzer setting
/// (every grading and refining call needs them).
fn question_words(
    engine: &Engine,
    collection: &str,
) -> Result<std::sync::Arc<HashSet<String>>, EngineError> {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<HashSet<String>>>>> = OnceLock::new();
    let key = engine.config().analyzer.fingerprint();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(s) = cache.lock().expect("question words lock").get(&key) {
        return Ok(s.clone());
    }
    let set: Arc<HashSet<String>> = Arc::new(
        engine
            .query_terms(collection, QUESTION_WORDS)?
            .into_iter()
            .map(|t| t.0)
            .collect(),
    );
    cache
        .lock()
        .expect("question words lock")
        .insert(key, set.clone());
    Ok(set)
}

/// The question's telling terms with their weights in a collection.
#[derive(Debug, Clone, Default)]
pub struct QueryTerms {
    /// Analyzed term and idf, question words left out.
    pub terms: Vec<(String, f32)>,
    /// Sum of the weights.
    pub total: f32,
    /// Largest weight.
    pub max: f32,
    /// The question is negated.
    pub negated: bool,
}

impl QueryTerms {
    /// Analyze `query` with the collection's analyzer and weigh each term by its idf.
    pub fn new(engine: &Engine, collection: &str, query: &str) -> Result<Self, EngineError> {
        let stop = question_words(engine, collection)?;
        let terms: Vec<(String, f32)> = engine
            .term_weights(collection, query)?
            .into_iter()
            .filter(|(t, _)| !stop.contains(t))
            .collect();
        let total = terms.iter().map(|t| t.1).sum();
        let max = terms.iter().map(|t| t.1).fold(0.0, f32::max);
        Ok(QueryTerms {
            terms,
            total,
            max,
            negated: has_negation(query),
        })
    }

    /// Weighted fraction of the terms present in `set`, in [0, 1] (0 with no terms).
    pub fn coverage(&self, set: &HashSet<String>) -> f32 {
        if self.total <= 0.0 {
            return 0.0;
        }
        let hit: f32 = self
            .terms
            .iter()
            .filter(|(t, _)| set.contains(t))
            .map(|t| t.1)
            .sum();
        hit / self.total
    }

    /// The largest weight of a term missing from `set`, relative to the largest weight.
    pub fn missing_max(&self, set: &HashSet<String>) -> f32 {
        if self.max <= 0.0 {
            return 0.0;
        }
        self.terms
            .iter()
            .filter(|(t, _)| !set.contains(t))
            .map(|t| t.1)
            .fold(0.0, f32::max)
            / self.max
    }

    /// The terms missing from `set`, heaviest first.
    pub fn missing(&self, set: &HashSet<String>) -> Vec<String> {
        let mut m: Vec<&(String, f32)> = self
            .terms
            .iter()
            .filter(|(t, _)| !set.contains(t))
            .collect();
        m.sort_by(|a, b| b.1.total_cmp(&a.1));
        m.into_iter().map(|t| t.0.clone()).collect()
    }
}

/// Whether a text contains a negation word.
pub fn has_negation(text: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .any(|w| {
            let w = w.to_lowercase();
            NEGATIONS.contains(&w.as_str()) || w.ends_with("n't")
        })
}

/// The analyzed terms of a text, as a set.
pub fn term_set(
    engine: &Engine,
    collection: &str,
    text: &str,
) -> Result<HashSet<String>, EngineError> {
    Ok(engine
        .query_terms(collection, text)?
        .into_iter()
        .map(|t| t.0)
        .collect())
}

/// Sentences of a chunk: `(byte start, byte end)` in its text, by the project's one
/// splitter. A single line break is wrapping inside a sentence (markdown and text files
/// are wrapped), a blank line ends a paragraph. A long sentence stays whole: a strip cut
/// at a word boundary would be a fragment.
pub fn sentences(text: &str) -> Vec<(usize, usize)> {
    neuralcore_core::sentence::sentence_spans(text, neuralcore_core::sentence::Lines::Wrap)
}

/// A document title without its parenthesised qualifier ("Big Stone Gap (film)" → "Big
/// Stone Gap"): the name other documents use for the subject.
pub fn subject_of(title: &str) -> &str {
    match title.find(" (") {
        Some(i) => title[..i].trim(),
        None => title.trim(),
    }
}

/// Kept evidence as text: (document id, title, chunk text) of every verdict `keep`
/// chooses whose chunk is in the store.
pub fn kept_texts(
    store: &dyn neuralcore_core::DocStore,
    verdicts: &[Graded],
    keep: impl Fn(&Graded) -> bool,
) -> neuralcore_core::StoreResult<Vec<(String, String, String)>> {
    let mut out = Vec::new();
    for g in verdicts.iter().filter(|g| keep(g)) {
        if let Some(k) = neuralcore_core::parse_doc_id(&g.doc) {
            if let Some(c) = store.chunk(k, g.ordinal)? {
                out.push((g.doc.clone(), g.title.clone(), c.text));
            }
        }
    }
    Ok(out)
}

/// The title of kept evidence from another document that names `g`'s subject (at least
/// four characters), and that subject: the link of a multi-hop question's bridge.
pub fn linked_by<'a>(
    kept: &'a [(String, String, String)],
    g: &'a Graded,
) -> Option<(&'a str, &'a str)> {
    let subject = subject_of(&g.title);
    if subject.chars().count() < 4 {
        return None;
    }
    kept.iter()
        .find(|(d, t, text)| d != &g.doc && t != &g.title && text.contains(subject))
        .map(|(_, t, _)| (t.as_str(), subject))
}

/// The title of a CORRECT verdict among `verdicts`, of another document, whose subject
/// (at least four characters) `text` names as a whole phrase while `question` does not,
/// and that subject: the bridge entity the first hop of a multi-hop question found ("the
/// university whose main campus is in Lawrence" → *University of Kansas*), named by the
/// paragraph that answers the second hop (*Kansas Song*: "the fight song of the University
/// of Kansas"). The converse of [`linked_by`]; only titles are read, so no chunk is
/// loaded. A subject the question names is no finding: every chunk matching the question
/// names it.
pub fn names_found<'a>(
    verdicts: &'a [Graded],
    g: &Graded,
    text: &str,
    question: &str,
) -> Option<(&'a str, &'a str)> {
    let question = question.to_lowercase();
    verdicts
        .iter()
        .filter(|v| v.verdict == Verdict::Correct && v.doc != g.doc && v.title != g.title)
        .map(|v| (v.title.as_str(), subject_of(&v.title)))
        .find(|(_, s)| {
            s.chars().count() >= 4 && !question.contains(&s.to_lowercase()) && names(text, s)
        })
}

/// The side of a comparison (`sides`, from [`crate::planner::comparison_sides`]) that
/// `title`'s subject (at least four characters) is about: such a chunk is what the user
/// asked for, whatever its score.
pub fn compared_side<'a>(sides: Option<&(String, String)>, title: &'a str) -> Option<&'a str> {
    let subject = subject_of(title);
    let (a, b) = sides?;
    let named = |side: &str| {
        side.eq_ignore_ascii_case(subject) || side.to_lowercase().contains(&subject.to_lowercase())
    };
    (subject.chars().count() >= 4 && (named(a) || named(b))).then_some(subject)
}

/// Whether `text` holds `phrase` with no letter or digit on either side.
fn names(text: &str, phrase: &str) -> bool {
    text.match_indices(phrase).any(|(i, m)| {
        let before = text[..i].chars().next_back();
        let after = text[i + m.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// The numbers in a text, thousands separators removed ("21,196 km" → "21196"): a
/// sentence and its evidence, or two sources, that disagree on them contradict.
pub fn numbers(text: &str) -> std::collections::HashSet<String> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .map(|t| t.trim_matches(['.', ',']).replace(',', ""))
        .filter(|t| t.chars().any(|c| c.is_ascii_digit()))
        .collect()
}

/// Runs of white space collapsed to one space (answer sentences read as prose).
pub fn collapse_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Character offset of byte offset `b` in `text`.
pub fn char_offset(text: &str, b: usize) -> u64 {
    text[..b.min(text.len())].chars().count() as u64
}

/// What the feature evaluator sees of a (question, chunk) pair; every value in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Features {
    /// Cosine similarity of the sentence embeddings (0 without a model).
    pub cosine: f32,
    /// Weighted coverage of the question's terms by the best sentence with its neighbours.
    pub best_window: f32,
    /// Weighted coverage by the whole chunk.
    pub chunk: f32,
    /// 1 − (weight of the heaviest question term missing from the chunk) / (heaviest).
    pub rare_present: f32,
    /// 1 when the question is negated and the best sentence is not.
    pub negation_mismatch: f32,
    /// `1 / (1 + rank)` in the retrieval list that found it (0 when unknown).
    pub rank: f32,
}

impl Features {
    /// As a vector, in [`FEATURE_NAMES`] order.
    pub fn to_vec(self) -> [f32; N_FEATURES] {
        [
            self.cosine,
            self.best_window,
            self.chunk,
            self.rare_present,
            self.negation_mismatch,
            self.rank,
        ]
    }

    /// Compute the features of `chunk_text` for `q` (`cosine` from the vector index).
    pub fn compute(
        engine: &Engine,
        collection: &str,
        q: &QueryTerms,
        chunk_text: &str,
        cosine: Option<f32>,
    ) -> Result<(Features, usize), EngineError> {
        let sents = sentences(chunk_text);
        let sets: Vec<HashSet<String>> = sents
            .iter()
            .map(|&(s, e)| term_set(engine, collection, &chunk_text[s..e]))
            .collect::<Result<_, _>>()?;
        let mut best = (0.0f32, 0usize);
        for i in 0..sets.len() {
            // A sentence with its neighbours: answers often sit next to the sentence
            // that names the subject.
            let mut window: HashSet<String> = sets[i].clone();
            if i > 0 {
                window.extend(sets[i - 1].iter().cloned());
            }
            let own = q.coverage(&sets[i]);
            let with = q.coverage(&window);
            let v = own.max(0.85 * with);
            if v > best.0 {
                best = (v, i);
            }
        }
        let all: HashSet<String> = sets.iter().flatten().cloned().collect();
        let neg_best = sents
            .get(best.1)
            .map(|&(s, e)| has_negation(&chunk_text[s..e]))
            .unwrap_or(false);
        Ok((
            Features {
                cosine: cosine.unwrap_or(0.0).clamp(0.0, 1.0),
                best_window: best.0,
                chunk: q.coverage(&all),
                rare_present: 1.0 - q.missing_max(&all),
                negation_mismatch: if q.negated && !neg_best { 1.0 } else { 0.0 },
                rank: 0.0,
            },
            best.1,
        ))
    }
}

/// Number of features.
pub const N_FEATURES: usize = 6;

/// Names of the features, in vector order.
pub const FEATURE_NAMES: [&str; N_FEATURES] = [
    "cosine",
    "best_window",
    "chunk",
    "rare_present",
    "negation_mismatch",
    "rank",
];

/// A logistic model over [`Features`]: `sigmoid(bias + Σ wᵢ·fᵢ)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureModel {
    /// Intercept.
    pub bias: f32,
    /// One weight per feature ([`FEATURE_NAMES`] order).
    pub weights: Vec<f32>,
}

impl FeatureModel {
    /// The score of `f`, in [0, 1].
    pub fn score(&self, f: &Features) -> f32 {
        let z = self.bias
            + f.to_vec()
                .iter()
                .zip(&self.weights)
                .map(|(x, w)| x * w)
                .sum::<f32>();
        1.0 / (1.0 + (-z).exp())
    }

    /// Fit by logistic regression (the project's one fitter, Newton's method with a
    /// little L2) on labelled feature vectors; features are already in [0, 1], so no
    /// scaling is needed.
    pub fn fit(samples: &[([f32; N_FEATURES], bool)], epochs: usize) -> FeatureModel {
        // The project's one fitter (`neuralcore_core::logistic`): Newton's method on the
        // class-balanced log loss (a rare positive class is not ignored) plus L2 1e-3 on
        // the mean loss, i.e. `1e-3 × n` on the summed loss; features are in [0, 1], so
        // not standardised. It converges in a few dozen steps, so `epochs` only caps the
        // steps (at 100). No samples, or one label only: the zero model (0.5 for all).
        let opts = neuralcore_core::logistic::FitOptions {
            l2: 1e-3 * samples.len() as f64,
            balance_classes: true,
            standardize: false,
            max_iter: epochs.min(100),
        };
        match neuralcore_core::logistic::fit(samples, &opts) {
            Some(m) => FeatureModel {
                bias: m.bias as f32,
                weights: m.weights.iter().map(|w| *w as f32).collect(),
            },
            None => FeatureModel {
                bias: 0.0,
                weights: vec![0.0; N_FEATURES],
            },
        }
    }
}

/// Jaccard similarity of two term sets (redundancy for MMR).
pub fn jaccard(a: &HashSet<String>, b: &HashSet<String>) -> f32 {
    if a.is_empty() && b.is_empty() {
        return 0.0;
    }
    let inter = a.intersection(b).count() as f32;
    inter / ((a.len() + b.len()) as f32 - inter).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_about_a_compared_side_is_named_by_the_question() {
        let sides = crate::planner::comparison_sides(
            "Which act has a higher instrument to person ratio, Badly Drawn Boy or Wolf Alice?",
        );
        assert!(sides.is_some());
        assert_eq!(
            compared_side(sides.as_ref(), "Badly Drawn Boy (musician)"),
            Some("Badly Drawn Boy")
        );
        assert_eq!(
            compared_side(sides.as_ref(), "Wolf Alice"),
            Some("Wolf Alice")
        );
        assert_eq!(compared_side(sides.as_ref(), "Mercury Prize"), None);
        // Too short a subject, or no comparison at all.
        assert_eq!(compared_side(sides.as_ref(), "Boy"), None);
        assert_eq!(compared_side(None, "Wolf Alice"), None);
    }

    #[test]
    fn a_chunk_naming_what_correct_evidence_is_about_is_linked_unless_the_question_names_it() {
        let g = Graded {
            doc: "d2".into(),
            ordinal: 0,
            title: "Kansas Song".into(),
            verdict: Verdict::Ambiguous,
            score: 0.6,
            retrieval_score: 1.0,
            reason: String::new(),
            query: String::new(),
            iteration: 1,
        };
        let correct_of = |docs: &[(&str, &str)]| -> Vec<Graded> {
            docs.iter()
                .map(|(d, t)| Graded {
                    doc: d.to_string(),
                    title: t.to_string(),
                    verdict: Verdict::Correct,
                    ..g.clone()
                })
                .collect()
        };
        let correct = correct_of(&[("d1", "University of Kansas"), ("d3", "Lawrence, Kansas")]);
        let text = "Kansas Song is a fight song of the University of Kansas.";
        let q = "What is the fight song of the university whose campus is in Lawrence, Kansas?";
        assert_eq!(
            names_found(&correct, &g, text, q),
            Some(("University of Kansas", "University of Kansas"))
        );
        // Named by the question: no finding.
        let q2 = "What is the fight song of the University of Kansas?";
        assert_eq!(names_found(&correct, &g, text, q2), None);
        // Inside a longer word it is not named; nor is the chunk's own document.
        assert_eq!(
            names_found(&correct, &g, "The University of Kansasville song.", q),
            None
        );
        let own = correct_of(&[("d2", "Kaiser")]);
        assert_eq!(names_found(&own, &g, "Kaiser Kaiser", q), None);
        // A title's parenthetical is not part of the subject; short subjects never link.
        let films = correct_of(&[("d4", "Ed Wood (film)"), ("d5", "Ayr")]);
        assert_eq!(
            names_found(&films, &g, "Ed Wood, the director, was from Ayr.", q),
            Some(("Ed Wood (film)", "Ed Wood"))
        );
    }

    #[test]
    fn wrapped_lines_are_one_sentence() {
        let t = "Tides rise. They are caused by the\ngravitational pull.\n\nNext part.";
        let s: Vec<&str> = sentences(t).iter().map(|&(a, b)| &t[a..b]).collect();
        assert_eq!(
            s,
            vec![
                "Tides rise.",
                "They are caused by the\ngravitational pull.",
                "Next part."
            ]
        );
    }

    #[test]
    fn negation_is_found_raw() {
        assert!(has_negation("What did Tesla not invent?"));
        assert!(has_negation("Why didn't it work"));
        assert!(!has_negation("Notre-Dame was built when?"));
    }

    #[test]
    fn logistic_fit_separates_a_clear_signal() {
        let mut s = Vec::new();
        for i in 0..200 {
            let x = (i % 100) as f32 / 100.0;
            s.push(([0.0, x, 0.0, 1.0, 0.0, 0.0], x > 0.5));
        }
        let m = FeatureModel::fit(&s, 2000);
        let hi = Features {
            best_window: 0.9,
            rare_present: 1.0,
            ..Default::default()
        };
        let lo = Features {
            best_window: 0.1,
            rare_present: 1.0,
            ..Default::default()
        };
        assert!(m.score(&hi) > 0.8, "{}", m.score(&hi));
        assert!(m.score(&lo) < 0.2, "{}", m.score(&lo));
    }

    #[test]
    fn answer_text_leaves_out_unsupported_sentences() {
        let a = Answer {
            sentences: vec![
                AnswerSentence {
                    text: "A is B.".into(),
                    citations: vec![1],
                    support: Some(0.9),
                    supported: true,
                },
                AnswerSentence {
                    text: "C is D.".into(),
                    citations: vec![2],
                    support: Some(0.1),
                    supported: false,
                },
            ],
            ..Default::default()
        };
        assert_eq!(a.text(), "A is B. [1]");
    }
}

/// A value some stage derived, with its derivation round: a stage that reads lists of
/// a kind writes its own with a round one higher than the highest it read, so readers
/// take the highest round ("the latest word") without knowing which tool wrote what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rounded<T> {
    /// Derivation round (1 for a first list).
    pub round: u64,
    /// The iteration that wrote it.
    pub iteration: u32,
    /// The value.
    pub data: T,
}

/// The highest-round value of every `*.<name>` key that has the [`Rounded`] shape
/// (other shapes are another tool's business and are skipped).
pub fn latest<T: serde::de::DeserializeOwned>(
    scope: &neuralcore_mind::Scope,
    name: &str,
) -> Result<Option<Rounded<T>>, neuralcore_mind::MindError> {
    let mut best: Option<Rounded<T>> = None;
    for e in scope.read_name(name)? {
        match serde_json::from_value::<Rounded<T>>(e.value) {
            Ok(r) if best.as_ref().is_none_or(|b| r.round > b.round) => best = Some(r),
            Ok(_) => {}
            Err(err) => tracing::debug!(key = %e.key, "not a rounded {name}: {err}"),
        }
    }
    Ok(best)
}

/// Switches of a run (`loop.switches`), the ablations of `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Switches {
    /// Answer from the model alone.
    pub no_retrieval: bool,
    /// Keep every retrieved chunk (each labelled CORRECT, reason "grading off").
    pub no_grade: bool,
    /// Do not verify AMBIGUOUS chunks (they then never reach generation).
    pub no_verify: bool,
    /// Keep every sentence of kept chunks, in order.
    pub no_refine: bool,
    /// One iteration, no completeness check.
    pub no_reflect: bool,
    /// Budget ran short: skip network and LLM stages (web search, LLM calls).
    pub skip_expensive: bool,
}

/// A retrieved chunk waiting for its grade (`loop.candidates`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Document id.
    pub doc: String,
    /// Chunk ordinal.
    pub ordinal: u32,
    /// Fused retrieval score.
    pub score: f32,
    /// Position in its sub-query's list, from 0.
    #[serde(default)]
    pub rank: usize,
    /// The sub-query that found it.
    pub query: String,
    /// Iteration.
    pub iteration: u32,
}

/// One memory the question recalled (`recall.hits`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recalled {
    /// Memory id.
    pub id: String,
    /// The grader's verdict.
    pub verdict: Verdict,
    /// The grader's score.
    pub score: f32,
    /// Its trust when recalled.
    pub trust: f64,
    /// Relation flags from the search (`contradicts <id> (lower trust: flagged)`, ...).
    #[serde(default)]
    pub flags: Vec<String>,
    /// Its text.
    #[serde(default)]
    pub text: String,
}

/// The loop's decision to retrieve or not (`<ns>.decision`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Decision {
    /// Retrieve?
    pub retrieve: bool,
    /// `retrieve`, `greeting`, `arithmetic`, `conversation`, `enough_evidence`,
    /// `disabled`.
    pub kind: String,
    /// Why.
    pub reason: String,
    /// An answer that needs no evidence (arithmetic, greetings), if any.
    pub direct_answer: Option<String>,
}

/// What the planner made of the question (`<ns>.plan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Plan {
    /// factual, comparison, multi-hop, summary, procedural, chit-chat.
    pub task: String,
    /// low, medium, high.
    pub complexity: String,
    /// Sub-queries to retrieve for, the question first on the first iteration.
    pub queries: Vec<String>,
    /// What the question asks: the first iteration's question and sides or hops (not
    /// rewrites), carried into later plans; reflection measures coverage against these.
    #[serde(default)]
    pub aspects: Vec<String>,
    /// How they were made.
    pub reason: String,
}

/// What reflection found (`<ns>.report`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Reflection {
    /// Share of the question's aspects the kept evidence covers, in [0, 1].
    pub completeness: f32,
    /// Aspects not covered (sub-queries without kept evidence, missing terms).
    pub gaps: Vec<String>,
    /// Enough to answer.
    pub sufficient: bool,
    /// The next iteration's queries (rewrites of the gaps, second hops), if any.
    pub next_queries: Vec<String>,
    /// Kept chunks so far.
    pub kept: usize,
    /// Why.
    pub reason: String,
    /// Coverage of each aspect of a question about several things (empty otherwise).
    #[serde(default)]
    pub aspects: Vec<AspectCoverage>,
}

/// The run's query, collection and switches.
pub fn run_input(
    scope: &neuralcore_mind::Scope,
) -> Result<(String, String, Switches, u32), crate::ToolError> {
    let s = |k: &str| -> Result<Option<String>, crate::ToolError> {
        Ok(scope
            .read(k)?
            .and_then(|e| e.value.as_str().map(str::to_string)))
    };
    let query = s("input.query")?
        .ok_or_else(|| crate::ToolError::Permanent("no input.query on the Mind".into()))?;
    let collection =
        s("input.collection")?.unwrap_or_else(|| neuralcore_core::DEFAULT_COLLECTION.to_string());
    let switches = scope
        .read("loop.switches")?
        .and_then(|e| serde_json::from_value(e.value).ok())
        .unwrap_or_default();
    let iteration = scope
        .read("loop.iteration")?
        .and_then(|e| e.value.as_u64())
        .unwrap_or(1) as u32;
    Ok((query, collection, switches, iteration))
}

/// Write a [`Rounded`] value one round above the highest `*.<name>` on the Mind.
pub fn write_rounded<T: Serialize + serde::de::DeserializeOwned>(
    ctx: &crate::ToolContext<'_>,
    name: &str,
    iteration: u32,
    data: &T,
) -> Result<String, crate::ToolError> {
    let round = latest::<serde_json::Value>(ctx.mind, name)?
        .map(|r| r.round)
        .unwrap_or(0)
        + 1;
    let v = serde_json::to_value(Rounded {
        round,
        iteration,
        data,
    })
    .map_err(|e| crate::ToolError::Permanent(e.to_string()))?;
    Ok(ctx.write(name, v)?.key)
}
