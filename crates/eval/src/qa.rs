//! Question-answering evaluation: loading SQuAD 2.0 and HotpotQA into one model, and the
//! answer, abstention, citation and evidence metrics of `neuralcore eval qa`.
//!
//! Both datasets are read into a [`QaSet`]: the passages (which can be written as a
//! BEIR-style corpus with [`write_corpus_jsonl`] and ingested by the engine) and the
//! questions with their gold answers and supporting sentences. The caller runs each
//! question through the engine, records a [`QaOutcome`], and [`score`] turns the outcomes
//! into a [`QaReport`].
//!
//! All spans are `(start, end)` **character** offsets (Unicode scalar values, end
//! exclusive) into a passage's text, never byte offsets: SQuAD's `answer_start` counts
//! characters, and 84 of the 294 paragraphs of the bundled SQuAD slice are not ASCII.
//!
//! Answers are judged leniently, as is usual for generated (not extracted) answers: an
//! answer is correct when it *contains* a gold answer after SQuAD normalization
//! ([`answer_contains`]), not only when it equals one.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use neuralcore_core::sentence::{is_fragment, sentence_spans, Lines};

use crate::error::EvalError;
use crate::json::{join, json_kind, read_json, sample, Doc};
use crate::metrics::{mean, percentile_nearest_rank};

/// A passage of a QA dataset: one SQuAD paragraph or one HotpotQA context paragraph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QaPassage {
    /// Stable id: `squad2:<article>:<paragraph>` (0-based positions in the file's `data`
    /// and `paragraphs` arrays, independent of any article selection) or
    /// `hotpot:<title>`.
    pub id: String,
    /// The article title (SQuAD: with `_` replaced by spaces) or the paragraph title.
    pub title: String,
    /// The passage text, exactly as in the dataset (HotpotQA: the sentences joined with
    /// `""`, as the dataset does; they usually carry their own leading space).
    pub text: String,
    /// Character spans of the sentences of `text`, in order. They are contiguous and cover
    /// the whole text; whitespace between two sentences belongs to the second one (as in
    /// HotpotQA). HotpotQA gives them; for SQuAD the project's sentence splitter computes
    /// them ([`split_sentences`]). An empty HotpotQA sentence has an empty span.
    pub sentences: Vec<(usize, usize)>,
}

/// A supporting sentence of a question: a passage id and the character span of the
/// sentence in that passage's text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Support {
    /// The passage id ([`QaPassage::id`]).
    pub passage: String,
    /// Character span of the sentence in the passage text.
    pub span: (usize, usize),
}

/// One aspect of a question about several things ([`QaQuestion::aspects`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Aspect {
    /// The aspect as a question of its own.
    pub question: String,
    /// Its distinct gold answer texts.
    pub answers: Vec<String>,
    /// The passage that answers it, when the set names one that is loaded.
    pub passage: Option<String>,
}

/// A question with its gold data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct QaQuestion {
    /// The dataset's question id (HotpotQA without `_id`: `hotpotqa:<position in file>`).
    pub id: String,
    /// The question text.
    pub question: String,
    /// The distinct gold answer texts, in dataset order; empty when unanswerable.
    pub answers: Vec<String>,
    /// Whether the question has an answer in its passages.
    pub answerable: bool,
    /// The supporting sentences. SQuAD: the sentence(s) overlapping each gold answer;
    /// HotpotQA: the `supporting_facts`. Empty for unanswerable questions.
    pub supporting: Vec<Support>,
    /// Ids of the passages the question belongs to: its SQuAD paragraph (then, in derived
    /// sets, the further true sources and the passages of its aspects), or its HotpotQA
    /// context paragraphs (usually 10) in dataset order.
    pub passages: Vec<String>,
    /// HotpotQA `type` (`bridge` / `comparison`); SQuAD `answerable` / `unanswerable`.
    pub kind: String,
    /// Conflict sets ([`crate::derive`]): the false values planted in copies of the
    /// question's passage (SQuAD field `counterfactual`); empty for other questions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counterfactual: Vec<String>,
    /// Conflict sets: the ids of the passages holding a counterfactual value (SQuAD field
    /// `counterfactual_passages`, passages of the same file).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub counterfactual_passages: Vec<String>,
    /// Multi-aspect sets: the questions joined into this one, each with its own answers
    /// (SQuAD field `aspects`); empty for other questions.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aspects: Vec<Aspect>,
}

/// A loaded QA dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QaSet {
    /// `squad2` or `hotpotqa`.
    pub name: String,
    /// The passages, each id once, in first-seen order.
    pub passages: Vec<QaPassage>,
    /// The questions, in dataset order.
    pub questions: Vec<QaQuestion>,
    /// HotpotQA: number of titles that occur with different texts in different questions
    /// (the first text is kept). Always 0 for SQuAD.
    pub title_conflicts: usize,
    /// SQuAD: gold answers whose text differs from the context at `answer_start` (the
    /// answer is kept). Always 0 for HotpotQA.
    pub offset_mismatches: usize,
    /// Non-fatal problems found while loading, one message each.
    pub warnings: Vec<String>,
}

impl QaSet {
    /// The passage with id `id`, if any (linear search).
    pub fn passage(&self, id: &str) -> Option<&QaPassage> {
        self.passages.iter().find(|p| p.id == id)
    }

    /// Number of answerable questions.
    pub fn answerable(&self) -> usize {
        self.questions.iter().filter(|q| q.answerable).count()
    }

    /// Keeps only the questions numbered `first..=last` (1-based, in file order; a `last`
    /// past the end keeps to the end) and the passages they name: for HotpotQA, where
    /// every question brings its own paragraphs, a range of questions is what a range of
    /// articles is for SQuAD.
    ///
    /// # Errors
    /// [`EvalError::InvalidSelection`] (path `questions`) when `first` is 0 or past the
    /// last question, or `last < first`.
    pub fn keep_questions(&mut self, first: usize, last: usize) -> Result<(), EvalError> {
        if first == 0 || last < first || first > self.questions.len() {
            return Err(EvalError::InvalidSelection {
                path: PathBuf::from(&self.name),
                message: format!(
                    "questions {first}-{last} asked (1-based, first ≤ last), but the set has {}",
                    self.questions.len()
                ),
            });
        }
        self.questions.truncate(last);
        self.questions.drain(..first - 1);
        let named: HashSet<&str> = self
            .questions
            .iter()
            .flat_map(|q| q.passages.iter().map(String::as_str))
            .collect();
        let keep: Vec<bool> = self
            .passages
            .iter()
            .map(|p| named.contains(p.id.as_str()))
            .collect();
        let mut i = 0;
        self.passages.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        Ok(())
    }
}

/// File names [`load_qa`] looks for in a folder.
pub const KNOWN_QA_FILES: &[&str] = &[
    "dev-v2.0-articles-1-8.json",
    "dev-v2.0.json",
    "train-v2.0.json",
    "dev-distractor-100.json",
    "hotpot_dev_distractor_v1.json",
    "hotpot_dev_fullwiki_v1.json",
    "hotpot_train_v1.1.json",
];

/// Loads a SQuAD 2.0 (or 1.1) JSON file, optionally only the articles numbered `articles`
/// (1-based, inclusive).
///
/// Each paragraph becomes a passage, each question a [`QaQuestion`]; a question is
/// answerable when `is_impossible` is false (a missing `is_impossible`, as in SQuAD 1.1,
/// means false) and it has answers. Repeated answer texts are kept once. A gold answer
/// whose text differs from the context at `answer_start` is kept and counted in
/// [`QaSet::offset_mismatches`]; a repeated question id is skipped with a warning.
///
/// # Errors
/// [`EvalError::MissingFile`], [`EvalError::Io`], [`EvalError::InvalidJson`];
/// [`EvalError::BadShape`] naming the JSON location when a field is missing or of the
/// wrong type or an answer runs past the end of its context;
/// [`EvalError::InvalidSelection`] when `articles` is empty, starts at 0 or goes past the
/// last article.
pub fn load_squad2(
    path: &Path,
    articles: Option<RangeInclusive<usize>>,
) -> Result<QaSet, EvalError> {
    let root = read_json(path)?;
    squad_from_value(path, &root, articles)
}

/// Loads a HotpotQA JSON file (a list of questions), optionally only the first `limit`
/// questions.
///
/// Both shapes of the fields are accepted: the original (`context` a list of
/// `[title, [sentences]]`, `supporting_facts` a list of `[title, sent_id]`) and the
/// Hugging Face one (`context: {title: [..], sentences: [[..]]}`,
/// `supporting_facts: {title: [..], sent_id: [..]}`). The question id is `_id` (or `id`),
/// else `hotpotqa:<0-based position in the file>`.
///
/// Passages are shared between questions by title: the first text seen for a title is
/// kept, and titles seen again with another text are counted in
/// [`QaSet::title_conflicts`]. A supporting fact whose title is not among the question's
/// paragraphs, or whose sentence number is out of range, is skipped with a warning (the
/// full HotpotQA dev set has a few).
///
/// # Errors
/// [`EvalError::MissingFile`], [`EvalError::Io`], [`EvalError::InvalidJson`];
/// [`EvalError::BadShape`] naming the JSON location when a field is missing or of the
/// wrong type.
pub fn load_hotpotqa(path: &Path, limit: Option<usize>) -> Result<QaSet, EvalError> {
    let root = read_json(path)?;
    hotpot_from_value(path, &root, limit)
}

/// Loads a QA dataset whose format is detected: a folder is searched for one of
/// [`KNOWN_QA_FILES`] (or, failing that, its only `.json` file); a file is loaded as
/// SQuAD when it is an object with a `data` array, as HotpotQA when it is an array of
/// objects with `supporting_facts` and `context`. Everything is loaded (all articles, no
/// limit).
///
/// # Errors
/// [`EvalError::UnknownFormat`] when the folder holds no or several candidate files or
/// the JSON has neither shape, [`EvalError::MissingFile`] when `path` does not exist, and
/// the errors of [`load_squad2`] / [`load_hotpotqa`].
pub fn load_qa(path: &Path) -> Result<QaSet, EvalError> {
    load_qa_limited(path, None)
}

/// [`load_qa`], keeping only the first `limit` questions of a HotpotQA file (SQuAD files
/// are loaded whole: their selection is by article, see [`load_squad2`]).
///
/// # Errors
/// As [`load_qa`].
pub fn load_qa_limited(path: &Path, limit: Option<usize>) -> Result<QaSet, EvalError> {
    load_qa_selected(path, None, limit)
}

/// [`load_qa_limited`] with a 1-based, inclusive selection read from the file once: on
/// SQuAD a range of articles (as [`load_squad2`]), on HotpotQA a range of questions,
/// each bringing only its own paragraphs (as [`QaSet::keep_questions`]). `limit` caps
/// the questions of a HotpotQA file read when there is no selection.
///
/// # Errors
/// As [`load_qa`]; [`EvalError::InvalidSelection`] when the range is reversed, starts
/// at 0 or goes past the file.
pub fn load_qa_selected(
    path: &Path,
    selection: Option<RangeInclusive<usize>>,
    limit: Option<usize>,
) -> Result<QaSet, EvalError> {
    let file = qa_file(path)?;
    let root = read_json(&file)?;
    let is_squad = root.get("data").is_some_and(Value::is_array);
    let is_hotpot = root.as_array().is_some_and(|items| {
        items
            .first()
            .is_some_and(|q| q.get("supporting_facts").is_some() && q.get("context").is_some())
    });
    if is_squad {
        squad_from_value(&file, &root, selection)
    } else if is_hotpot {
        match selection {
            None => hotpot_from_value(&file, &root, limit),
            Some(r) => {
                let mut set = hotpot_from_value(&file, &root, Some(*r.end()))?;
                set.keep_questions(*r.start(), *r.end())?;
                Ok(set)
            }
        }
    } else {
        Err(EvalError::UnknownFormat {
            path: file,
            message: format!(
                "expected SQuAD (an object with a `data` array) or HotpotQA (an array of \
                 questions with `context` and `supporting_facts`), found {}",
                json_kind(&root)
            ),
        })
    }
}

/// The QA file `path` names: `path` itself, or in a folder the file [`load_qa`] picks.
///
/// # Errors
/// [`EvalError::UnknownFormat`] when the folder holds no or several candidate files,
/// [`EvalError::Io`] when it cannot be read.
pub fn qa_file(path: &Path) -> Result<PathBuf, EvalError> {
    if path.is_dir() {
        find_qa_file(path)
    } else {
        Ok(path.to_path_buf())
    }
}

fn find_qa_file(dir: &Path) -> Result<PathBuf, EvalError> {
    let known: Vec<PathBuf> = KNOWN_QA_FILES
        .iter()
        .map(|name| dir.join(name))
        .filter(|p| p.is_file())
        .collect();
    let candidates = if known.is_empty() {
        let entries = std::fs::read_dir(dir).map_err(|source| EvalError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let mut json: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "json"))
            .collect();
        json.sort();
        json
    } else {
        known
    };
    match candidates.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(EvalError::UnknownFormat {
            path: dir.to_path_buf(),
            message: format!(
                "no QA dataset file in this folder (looked for {} or a single .json file)",
                KNOWN_QA_FILES.join(", ")
            ),
        }),
        many => Err(EvalError::UnknownFormat {
            path: dir.to_path_buf(),
            message: format!(
                "several candidate files, name one: {}",
                many.iter()
                    .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// Writes the passages of `set` as a BEIR-style corpus, one JSON object per line:
/// `{"_id": id, "title": title, "text": text}`, in passage order.
///
/// The engine's `jsonl` loader takes `_id` (trimmed) as the document's external id,
/// `title` (whitespace collapsed) as its title and `text` as its text (line endings
/// normalized, control characters removed, trailing whitespace of each line trimmed);
/// passages of these datasets are single lines, so character offsets into the stored text
/// equal offsets into [`QaPassage::text`].
///
/// # Errors
/// Any error of `w`.
pub fn write_corpus_jsonl(set: &QaSet, mut w: impl Write) -> io::Result<()> {
    #[derive(Serialize)]
    struct Line<'a> {
        #[serde(rename = "_id")]
        id: &'a str,
        title: &'a str,
        text: &'a str,
    }
    for p in &set.passages {
        let line = Line {
            id: &p.id,
            title: &p.title,
            text: &p.text,
        };
        serde_json::to_writer(&mut w, &line)?;
        w.write_all(b"\n")?;
    }
    w.flush()
}

// ---------------------------------------------------------------------------------------
// JSON reading
// ---------------------------------------------------------------------------------------

impl Doc<'_> {
    fn index(&self, v: &Value, at: &str) -> Result<usize, EvalError> {
        v.as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.expected(at, "a non-negative integer", v))
    }

    /// A string or numeric id.
    fn id(&self, v: &Value, at: &str) -> Result<String, EvalError> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            other => Err(self.expected(at, "a string or a number", other)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// SQuAD
// ---------------------------------------------------------------------------------------

pub(crate) fn squad_from_value(
    path: &Path,
    root: &Value,
    articles: Option<RangeInclusive<usize>>,
) -> Result<QaSet, EvalError> {
    let d = Doc { path };
    let top = d.obj(root, "")?;
    let data = d.arr(d.field(top, "data", "")?, "data")?;
    let selected = match articles {
        None => 0..data.len(),
        Some(r) => {
            let (first, last) = (*r.start(), *r.end());
            if first == 0 || first > last || last > data.len() {
                return Err(EvalError::InvalidSelection {
                    path: path.to_path_buf(),
                    message: format!(
                        "articles {first}-{last} requested, but the file has {} articles \
                         (numbered from 1)",
                        data.len()
                    ),
                });
            }
            first - 1..last
        }
    };

    let mut set = empty_set("squad2");
    let mut seen = HashSet::new();
    let (mut duplicates, mut mismatches) = (Vec::new(), Vec::new());
    let mut pending_aspects: Vec<(usize, Vec<RawAspect>)> = Vec::new();
    for a in selected {
        let at_a = format!("data[{a}]");
        let article = d.obj(&data[a], &at_a)?;
        let title = d.str(d.field(article, "title", &at_a)?, &join(&at_a, "title"))?;
        let title = title.replace('_', " ");
        let at_ps = join(&at_a, "paragraphs");
        let paragraphs = d.arr(d.field(article, "paragraphs", &at_a)?, &at_ps)?;
        for (p, para) in paragraphs.iter().enumerate() {
            let at_p = format!("{at_ps}[{p}]");
            let para = d.obj(para, &at_p)?;
            let context = d.str(d.field(para, "context", &at_p)?, &join(&at_p, "context"))?;
            let ctx: Vec<char> = context.chars().collect();
            let sentences = split_sentences(context);
            let passage_id = format!("squad2:{a}:{p}");
            let at_qs = join(&at_p, "qas");
            for (i, qa) in d
                .arr(d.field(para, "qas", &at_p)?, &at_qs)?
                .iter()
                .enumerate()
            {
                let at_q = format!("{at_qs}[{i}]");
                let qa = d.obj(qa, &at_q)?;
                let id = d.id(d.field(qa, "id", &at_q)?, &join(&at_q, "id"))?;
                let question = d.str(d.field(qa, "question", &at_q)?, &join(&at_q, "question"))?;
                let impossible = match qa.get("is_impossible") {
                    None => false,
                    Some(v) => v
                        .as_bool()
                        .ok_or_else(|| d.expected(&join(&at_q, "is_impossible"), "a boolean", v))?,
                };
                let at_ans = join(&at_q, "answers");
                let mut answers: Vec<String> = Vec::new();
                let mut supporting: Vec<Support> = Vec::new();
                for (j, ans) in d
                    .arr(d.field(qa, "answers", &at_q)?, &at_ans)?
                    .iter()
                    .enumerate()
                {
                    let at = format!("{at_ans}[{j}]");
                    let ans = d.obj(ans, &at)?;
                    let text = d.str(d.field(ans, "text", &at)?, &join(&at, "text"))?;
                    let start_v = d.field(ans, "answer_start", &at)?;
                    let start = d.index(start_v, &join(&at, "answer_start"))?;
                    let len = text.chars().count();
                    if start + len > ctx.len() {
                        return Err(d.bad(
                            &join(&at, "answer_start"),
                            format!(
                                "answer_start {start} plus the {len} characters of {text:?} \
                                 runs past the end of the context ({} characters)",
                                ctx.len()
                            ),
                        ));
                    }
                    if !ctx[start..start + len].iter().copied().eq(text.chars()) {
                        mismatches.push(id.clone());
                    }
                    if !answers.iter().any(|x| x == text) {
                        answers.push(text.to_string());
                    }
                    for span in sentences_overlapping(&sentences, start, start + len) {
                        let s = Support {
                            passage: passage_id.clone(),
                            span,
                        };
                        if !supporting.contains(&s) {
                            supporting.push(s);
                        }
                    }
                }
                if !seen.insert(id.clone()) {
                    duplicates.push(id);
                    continue;
                }
                if impossible && !answers.is_empty() {
                    set.warnings.push(format!(
                        "{}: question {id} is marked impossible but has answers; treated as \
                         unanswerable",
                        path.display()
                    ));
                    answers.clear();
                    supporting.clear();
                }
                let extra = derived_fields(&d, qa, &at_q)?;
                let answerable = !answers.is_empty();
                set.questions.push(QaQuestion {
                    id,
                    question: question.to_string(),
                    answers,
                    answerable,
                    supporting,
                    passages: std::iter::once(passage_id.clone())
                        .chain(extra.true_passages)
                        .collect(),
                    kind: if answerable {
                        "answerable"
                    } else {
                        "unanswerable"
                    }
                    .to_string(),
                    counterfactual: extra.counterfactual,
                    counterfactual_passages: extra.counterfactual_passages,
                    aspects: extra.aspects.iter().map(|a| a.aspect.clone()).collect(),
                });
                if !extra.aspects.is_empty() {
                    pending_aspects.push((set.questions.len() - 1, extra.aspects));
                }
            }
            set.passages.push(QaPassage {
                id: passage_id,
                title: title.clone(),
                text: context.to_string(),
                sentences,
            });
        }
    }
    // Aspects answered in other passages: those passages and their answers' sentences
    // support the question too (when loaded).
    let mut unplaced = Vec::new();
    for (qi, aspects) in pending_aspects {
        for raw in aspects {
            let Some(pid) = raw.aspect.passage.as_deref() else {
                continue;
            };
            let Some(p) = set.passages.iter().find(|p| p.id == pid) else {
                unplaced.push(format!("{} ({pid})", set.questions[qi].id));
                continue;
            };
            let len_text = p.text.chars().count();
            let mut spans = Vec::new();
            for (start, len) in raw.starts {
                if start + len <= len_text {
                    spans.extend(sentences_overlapping(&p.sentences, start, start + len));
                }
            }
            let q = &mut set.questions[qi];
            if !q.passages.iter().any(|x| x == pid) {
                q.passages.push(pid.to_string());
            }
            for span in spans {
                let s = Support {
                    passage: pid.to_string(),
                    span,
                };
                if !q.supporting.contains(&s) {
                    q.supporting.push(s);
                }
            }
        }
    }
    if !unplaced.is_empty() {
        set.warnings.push(format!(
            "{}: {} aspect(s) name a passage that is not loaded (no supporting sentences \
             for them): {}",
            path.display(),
            unplaced.len(),
            sample(&unplaced)
        ));
    }
    set.offset_mismatches = mismatches.len();
    if !mismatches.is_empty() {
        set.warnings.push(format!(
            "{}: {} gold answer(s) differ from the context at answer_start (kept): {}",
            path.display(),
            mismatches.len(),
            sample(&mismatches)
        ));
    }
    if !duplicates.is_empty() {
        set.warnings.push(format!(
            "{}: {} repeated question id(s), first occurrence kept: {}",
            path.display(),
            duplicates.len(),
            sample(&duplicates)
        ));
    }
    Ok(set)
}

/// An aspect as read, with the `(answer_start, length)` of its answers that give one.
struct RawAspect {
    aspect: Aspect,
    starts: Vec<(usize, usize)>,
}

/// The fields of a derived set's question ([`crate::derive`]), all optional.
#[derive(Default)]
struct DerivedFields {
    counterfactual: Vec<String>,
    counterfactual_passages: Vec<String>,
    true_passages: Vec<String>,
    aspects: Vec<RawAspect>,
}

/// A list of non-empty strings at `at`.
fn string_list(d: &Doc<'_>, v: &Value, at: &str) -> Result<Vec<String>, EvalError> {
    let items = d
        .arr(v, at)
        .map_err(|_| d.expected(at, "an array of strings", v))?;
    let mut out: Vec<String> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let s = d.str(item, &format!("{at}[{i}]"))?;
        if s.trim().is_empty() {
            return Err(d.bad(&format!("{at}[{i}]"), "expected a non-empty string"));
        }
        if !out.iter().any(|x| x == s) {
            out.push(s.to_string());
        }
    }
    Ok(out)
}

/// Reads `counterfactual`, `counterfactual_passages`, `true_passages` (further passages
/// stating the true answer), `conflict` and `aspects` of a question object; absent fields
/// are empty.
fn derived_fields(
    d: &Doc<'_>,
    qa: &serde_json::Map<String, Value>,
    at_q: &str,
) -> Result<DerivedFields, EvalError> {
    let mut f = DerivedFields::default();
    if let Some(v) = qa.get("counterfactual") {
        let at = join(at_q, "counterfactual");
        f.counterfactual = string_list(d, v, &at)?;
        if f.counterfactual.is_empty() {
            return Err(d.bad(&at, "expected at least one counterfactual value"));
        }
    }
    if let Some(v) = qa.get("counterfactual_passages") {
        f.counterfactual_passages = string_list(d, v, &join(at_q, "counterfactual_passages"))?;
    }
    if let Some(v) = qa.get("true_passages") {
        f.true_passages = string_list(d, v, &join(at_q, "true_passages"))?;
    }
    if let Some(v) = qa.get("conflict") {
        let at = join(at_q, "conflict");
        let flag = v.as_bool().ok_or_else(|| d.expected(&at, "a boolean", v))?;
        if flag && f.counterfactual.is_empty() {
            return Err(d.bad(
                &at,
                "a conflict question needs a `counterfactual` list of false values",
            ));
        }
    }
    if let Some(v) = qa.get("aspects") {
        let at = join(at_q, "aspects");
        let items = d
            .arr(v, &at)
            .map_err(|_| d.expected(&at, "an array of {question, answers} objects", v))?;
        if items.len() < 2 {
            return Err(d.bad(
                &at,
                format!("expected at least two aspects, found {}", items.len()),
            ));
        }
        for (i, item) in items.iter().enumerate() {
            let at_i = format!("{at}[{i}]");
            let o = d.obj(item, &at_i)?;
            let question = d.str(d.field(o, "question", &at_i)?, &join(&at_i, "question"))?;
            let at_a = join(&at_i, "answers");
            let answers_v = d.arr(d.field(o, "answers", &at_i)?, &at_a)?;
            let (mut answers, mut starts): (Vec<String>, Vec<(usize, usize)>) = (vec![], vec![]);
            for (j, a) in answers_v.iter().enumerate() {
                let at_j = format!("{at_a}[{j}]");
                let text = match a {
                    Value::String(s) => s.as_str(),
                    Value::Object(ao) => {
                        let text = d.str(d.field(ao, "text", &at_j)?, &join(&at_j, "text"))?;
                        if let Some(sv) = ao.get("answer_start") {
                            let start = d.index(sv, &join(&at_j, "answer_start"))?;
                            starts.push((start, text.chars().count()));
                        }
                        text
                    }
                    other => {
                        return Err(d.expected(
                            &at_j,
                            "a string or a {text, answer_start} object",
                            other,
                        ))
                    }
                };
                if text.trim().is_empty() {
                    return Err(d.bad(&at_j, "expected a non-empty answer"));
                }
                if !answers.iter().any(|x| x == text) {
                    answers.push(text.to_string());
                }
            }
            if answers.is_empty() {
                return Err(d.bad(&at_a, "an aspect needs at least one answer"));
            }
            let passage = match o.get("passage") {
                None | Some(Value::Null) => None,
                Some(v) => Some(d.str(v, &join(&at_i, "passage"))?.to_string()),
            };
            f.aspects.push(RawAspect {
                aspect: Aspect {
                    question: question.to_string(),
                    answers,
                    passage,
                },
                starts,
            });
        }
    }
    Ok(f)
}

fn empty_set(name: &str) -> QaSet {
    QaSet {
        name: name.to_string(),
        passages: Vec::new(),
        questions: Vec::new(),
        title_conflicts: 0,
        offset_mismatches: 0,
        warnings: Vec::new(),
    }
}

/// The sentence spans overlapping `start..end` (the one containing `start` when the range
/// is empty).
fn sentences_overlapping(
    sentences: &[(usize, usize)],
    start: usize,
    end: usize,
) -> impl Iterator<Item = (usize, usize)> + '_ {
    let end = end.max(start + 1);
    sentences
        .iter()
        .copied()
        .filter(move |&(s, e)| s < end && start < e)
}

/// Splits `text` into sentences; returns contiguous character spans covering the text
/// (none for an empty text).
///
/// The sentences are those of the project's one splitter,
/// [`neuralcore_core::sentence::sentence_spans`] with [`Lines::Wrap`] (byte spans of
/// trimmed sentences), turned into character spans that tile the text: the white space
/// before a sentence belongs to it, the white space after the last one to the last one.
/// A text of white space only is one span.
pub fn split_sentences(text: &str) -> Vec<(usize, usize)> {
    if text.is_empty() {
        return Vec::new();
    }
    let n = text.chars().count();
    // Byte offset -> character offset, walking the text once.
    let mut ends: Vec<usize> = sentence_spans(text, Lines::Wrap)
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    ends.pop(); // the last sentence runs to the end of the text
    let mut spans = Vec::with_capacity(ends.len() + 1);
    let (mut start, mut chars, mut next) = (0usize, 0usize, ends.iter().peekable());
    for (b, _) in text.char_indices() {
        while next.peek().is_some_and(|&&e| e == b) {
            next.next();
            if chars > start {
                spans.push((start, chars));
                start = chars;
            }
        }
        chars += 1;
    }
    spans.push((start, n));
    spans
}

// ---------------------------------------------------------------------------------------
// HotpotQA
// ---------------------------------------------------------------------------------------

/// A list of pairs `[[a, b], ...]` or a dict of two parallel lists `{ka: [..], kb: [..]}`.
fn pairs<'v>(
    d: &Doc<'_>,
    v: &'v Value,
    at: &str,
    (ka, kb): (&str, &str),
) -> Result<Vec<(&'v Value, &'v Value)>, EvalError> {
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item.as_array().map(Vec::as_slice) {
                Some([a, b]) => Ok((a, b)),
                _ => Err(d.bad(
                    &format!("{at}[{i}]"),
                    format!("expected a pair [{ka}, {kb}]"),
                )),
            })
            .collect(),
        Value::Object(o) => {
            let a = d.arr(d.field(o, ka, at)?, &join(at, ka))?;
            let b = d.arr(d.field(o, kb, at)?, &join(at, kb))?;
            if a.len() != b.len() {
                return Err(d.bad(
                    at,
                    format!("`{ka}` has {} items but `{kb}` has {}", a.len(), b.len()),
                ));
            }
            Ok(a.iter().zip(b).collect())
        }
        other => Err(d.expected(
            at,
            &format!("a list of [{ka}, {kb}] pairs or an object with `{ka}` and `{kb}` lists"),
            other,
        )),
    }
}

fn hotpot_from_value(path: &Path, root: &Value, limit: Option<usize>) -> Result<QaSet, EvalError> {
    let d = Doc { path };
    let items = d.arr(root, "")?;
    let n = limit.map_or(items.len(), |l| l.min(items.len()));
    let mut set = empty_set("hotpotqa");
    let mut by_title: HashMap<String, usize> = HashMap::new();
    let mut conflicts: Vec<String> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    let mut duplicates = Vec::new();
    for (i, item) in items[..n].iter().enumerate() {
        let at = format!("[{i}]");
        let o = d.obj(item, &at)?;
        let id = match o.get("_id").or_else(|| o.get("id")) {
            Some(v) => d.id(v, &join(&at, "_id"))?,
            None => format!("hotpotqa:{i}"),
        };
        let question = d.str(d.field(o, "question", &at)?, &join(&at, "question"))?;
        let answer = d.str(d.field(o, "answer", &at)?, &join(&at, "answer"))?;
        let kind = match o.get("type") {
            Some(v) => d.str(v, &join(&at, "type"))?,
            None => "unknown",
        };

        let at_c = join(&at, "context");
        let mut passages: Vec<String> = Vec::new();
        for (j, (title, sents)) in pairs(
            &d,
            d.field(o, "context", &at)?,
            &at_c,
            ("title", "sentences"),
        )?
        .into_iter()
        .enumerate()
        {
            let at_j = format!("{at_c}[{j}]");
            let title = d.str(title, &at_j)?;
            let mut text = String::new();
            let mut sentences = Vec::new();
            let mut pos = 0;
            for (k, s) in d.arr(sents, &at_j)?.iter().enumerate() {
                let s = d.str(s, &format!("{at_j}.sentences[{k}]"))?;
                let len = s.chars().count();
                sentences.push((pos, pos + len));
                pos += len;
                text.push_str(s);
            }
            let pid = format!("hotpot:{title}");
            match by_title.get(title) {
                Some(&p) => {
                    if set.passages[p].text != text && !conflicts.iter().any(|t| t == title) {
                        conflicts.push(title.to_string());
                    }
                }
                None => {
                    by_title.insert(title.to_string(), set.passages.len());
                    set.passages.push(QaPassage {
                        id: pid.clone(),
                        title: title.to_string(),
                        text,
                        sentences,
                    });
                }
            }
            if !passages.contains(&pid) {
                passages.push(pid);
            }
        }

        let at_s = join(&at, "supporting_facts");
        let mut supporting = Vec::new();
        let facts = pairs(
            &d,
            d.field(o, "supporting_facts", &at)?,
            &at_s,
            ("title", "sent_id"),
        )?;
        for (j, (title, sent)) in facts.into_iter().enumerate() {
            let title = d.str(title, &format!("{at_s}[{j}]"))?;
            let sent = d.index(sent, &format!("{at_s}[{j}]"))?;
            let pid = format!("hotpot:{title}");
            let span = by_title
                .get(title)
                .filter(|_| passages.contains(&pid))
                .and_then(|&p| set.passages[p].sentences.get(sent).copied());
            match span {
                Some(span) => {
                    let s = Support { passage: pid, span };
                    if !supporting.contains(&s) {
                        supporting.push(s);
                    }
                }
                None => skipped.push(format!("{id} ({title:?}, {sent})")),
            }
        }
        if !seen.insert(id.clone()) {
            duplicates.push(id);
            continue;
        }
        let answers = if answer.is_empty() {
            Vec::new()
        } else {
            vec![answer.to_string()]
        };
        set.questions.push(QaQuestion {
            id,
            question: question.to_string(),
            answerable: !answers.is_empty(),
            answers,
            supporting,
            passages,
            kind: kind.to_string(),
            ..QaQuestion::default()
        });
    }
    set.title_conflicts = conflicts.len();
    let p = path.display();
    if !conflicts.is_empty() {
        set.warnings.push(format!(
            "{p}: {} title(s) appear with different texts, first text kept: {}",
            conflicts.len(),
            sample(&conflicts)
        ));
    }
    if !skipped.is_empty() {
        set.warnings.push(format!(
            "{p}: {} supporting fact(s) point to no sentence of the question's paragraphs \
             (skipped): {}",
            skipped.len(),
            sample(&skipped)
        ));
    }
    if !duplicates.is_empty() {
        set.warnings.push(format!(
            "{p}: {} repeated question id(s), first occurrence kept: {}",
            duplicates.len(),
            sample(&duplicates)
        ));
    }
    Ok(set)
}

// ---------------------------------------------------------------------------------------
// Answer and citation checks
// ---------------------------------------------------------------------------------------

/// Normalizes an answer exactly as the official SQuAD 2.0 evaluation script
/// (`normalize_answer` in `evaluate-v2.0.py`): lower-case; remove ASCII punctuation
/// (Python's `string.punctuation`); replace the whole words `a`, `an`, `the` by a space
/// (word characters as Python's `\w`: letters, digits and `_`); split on whitespace and
/// join with single spaces.
///
/// Non-ASCII punctuation (`’`, `–`, `“`) is kept, as in the script.
pub fn normalize_answer(s: &str) -> String {
    let lowered = s.to_lowercase();
    let no_punct: String = lowered
        .chars()
        .filter(|c| !c.is_ascii_punctuation())
        .collect();
    // `\b(a|an|the)\b`: a maximal run of word characters equal to an article.
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut no_articles = String::with_capacity(no_punct.len());
    let mut rest = no_punct.as_str();
    while let Some(c) = rest.chars().next() {
        let word = is_word(c);
        let end = rest
            .find(|c: char| is_word(c) != word)
            .unwrap_or(rest.len());
        let run = &rest[..end];
        if word && matches!(run, "a" | "an" | "the") {
            no_articles.push(' ');
        } else {
            no_articles.push_str(run);
        }
        rest = &rest[end..];
    }
    // Python's str.split() also splits on the separators U+001C..U+001F.
    no_articles
        .split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `answer` contains one of `golds`: some gold whose normalized form is not empty
/// occurs in the normalized answer on token boundaries (`" " + gold + " "` in
/// `" " + answer + " "`), so `1` is not found in `1990`.
pub fn answer_contains(answer: &str, golds: &[String]) -> bool {
    let answer = format!(" {} ", normalize_answer(answer));
    golds.iter().any(|g| {
        let g = normalize_answer(g);
        !g.is_empty() && answer.contains(&format!(" {g} "))
    })
}

/// A citation of a generated answer: a passage id and a character span of its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Citation {
    /// The cited passage ([`QaPassage::id`]).
    pub passage: String,
    /// Character span `(start, end)` in the passage text, end exclusive.
    pub span: (usize, usize),
}

/// Whether citation `c` supports an answer to `q`. `passage_text` is the text of the cited
/// passage.
///
/// It does when either
/// * it overlaps a supporting sentence of `q` in the same passage by at least half the
///   length of the shorter of the two spans (and by at least one character), or
/// * the cited text contains a gold answer of `q` ([`answer_contains`]). The HotpotQA
///   answers `yes` / `no` are not looked for, since they are not spans of the text.
///
/// The span is clamped to the passage text first.
pub fn citation_correct(c: &Citation, q: &QaQuestion, passage_text: &str) -> bool {
    let chars = passage_text.chars().count();
    let (start, end) = (c.span.0.min(chars), c.span.1.min(chars));
    if start >= end {
        return false;
    }
    let overlaps = q.supporting.iter().any(|s| {
        if s.passage != c.passage {
            return false;
        }
        let overlap = end.min(s.span.1).saturating_sub(start.max(s.span.0));
        let shorter = (end - start).min(s.span.1.saturating_sub(s.span.0));
        overlap > 0 && 2 * overlap >= shorter
    });
    if overlaps {
        return true;
    }
    let golds: Vec<String> = q
        .answers
        .iter()
        .filter(|a| !matches!(normalize_answer(a).as_str(), "yes" | "no"))
        .cloned()
        .collect();
    let cited: String = passage_text.chars().skip(start).take(end - start).collect();
    answer_contains(&cited, &golds)
}

// ---------------------------------------------------------------------------------------
// Scoring
// ---------------------------------------------------------------------------------------

/// An aspect the engine reported for a question about several things, as recorded in an
/// outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineAspect {
    /// The aspect, as the engine phrased it.
    pub aspect: String,
    /// Whether the engine said its kept evidence answers it.
    pub covered: bool,
}

/// What the engine did with one question.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QaOutcome {
    /// The question id ([`QaQuestion::id`]).
    pub question: String,
    /// Whether the engine declined to answer.
    pub abstained: bool,
    /// The answer text (ignored when abstained).
    pub answer: String,
    /// The citations given with the answer.
    pub citations: Vec<Citation>,
    /// Passage ids of all evidence kept for generation.
    pub retrieved_passages: Vec<String>,
    /// Retrieve/reason iterations used.
    pub iterations: u32,
    /// Wall-clock time for the question, in milliseconds.
    pub latency_ms: f64,
    /// How many conflicts the engine reported with its answer; `None` when not recorded
    /// (outcomes of a build whose report has no conflicts).
    #[serde(default)]
    pub conflicts_reported: Option<usize>,
    /// The aspects the engine split the question into and whether it said it covered
    /// each; `None` when not recorded.
    #[serde(default)]
    pub aspects_reported: Option<Vec<EngineAspect>>,
    /// Multi-aspect questions: whether the engine answers each aspect when asked it
    /// alone (a gold answer contained), in aspect order; `None` when not run.
    #[serde(default)]
    pub aspects_alone: Option<Vec<bool>>,
}

/// How an answer to a conflict question ([`QaQuestion::counterfactual`]) treats the two
/// sides, by SQuAD-normalized containment ([`answer_contains`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictOutcome {
    /// The answer states both the true and a counterfactual value: the conflict surfaced.
    Surfaced,
    /// A counterfactual value and no true value: misled.
    Misled,
    /// The true value only.
    TrueOnly,
    /// Neither value.
    Neither,
    /// No answer.
    Abstained,
}

/// The [`ConflictOutcome`] of an answer to `q`, or `None` when `q` is no conflict
/// question (no counterfactual values).
pub fn conflict_outcome(q: &QaQuestion, abstained: bool, answer: &str) -> Option<ConflictOutcome> {
    if q.counterfactual.is_empty() {
        return None;
    }
    if abstained {
        return Some(ConflictOutcome::Abstained);
    }
    let truth = answer_contains(answer, &q.answers);
    let lie = answer_contains(answer, &q.counterfactual);
    Some(match (truth, lie) {
        (true, true) => ConflictOutcome::Surfaced,
        (false, true) => ConflictOutcome::Misled,
        (true, false) => ConflictOutcome::TrueOnly,
        (false, false) => ConflictOutcome::Neither,
    })
}

/// How many aspects of `q` ([`QaQuestion::aspects`]) the answer contains a gold answer of
/// (0 when abstained), or `None` when `q` has no aspects.
pub fn aspects_answered(q: &QaQuestion, abstained: bool, answer: &str) -> Option<usize> {
    if q.aspects.is_empty() {
        return None;
    }
    if abstained {
        return Some(0);
    }
    Some(
        q.aspects
            .iter()
            .filter(|a| answer_contains(answer, &a.answers))
            .count(),
    )
}

/// `text` without citation markers (`[1]`, `[2, 3]`) and the white space before them.
pub fn strip_citation_markers(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let close = after.find(']');
        let marker = close.filter(|&c| {
            c > 0
                && after[..c].chars().any(|ch| ch.is_ascii_digit())
                && after[..c]
                    .chars()
                    .all(|ch| ch.is_ascii_digit() || ch == ',' || ch == ' ')
        });
        match marker {
            Some(c) => {
                out.push_str(rest[..open].trim_end());
                rest = &after[c + 1..];
            }
            None => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The sentences of an answer text as the evaluation counts them: citation markers
/// removed ([`strip_citation_markers`]), split by the project's splitter with every line
/// break ending a sentence ([`sentence_spans`] with [`Lines::Break`]).
pub fn answer_sentences(answer: &str) -> Vec<String> {
    let text = strip_citation_markers(answer);
    sentence_spans(&text, Lines::Break)
        .into_iter()
        .map(|(a, b)| text[a..b].to_string())
        .collect()
}

/// The sentences of an answer ([`answer_sentences`]) that are fragments
/// ([`is_fragment`]): cut from the middle of a sentence, or without a finite verb.
pub fn answer_fragments(answer: &str) -> Vec<String> {
    answer_sentences(answer)
        .into_iter()
        .filter(|s| is_fragment(s))
        .collect()
}

/// Scores of a set of [`QaOutcome`]s; see [`score`]. Rates are `None` (JSON `null`) when
/// their denominator is 0. Fields missing from a report read as their default, so
/// reports written before a field existed still load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QaReport {
    /// Questions scored (questions of the set that have an outcome).
    pub questions: usize,
    /// Scored answerable questions.
    pub answerable: usize,
    /// Scored unanswerable questions.
    pub unanswerable: usize,
    /// Questions of the set without an outcome (not scored).
    pub missing_outcomes: usize,
    /// Outcomes for unknown question ids or repeating a question (ignored).
    pub ignored_outcomes: usize,
    /// Answerable questions that were answered (not abstained).
    pub answered_answerable: usize,
    /// Unanswerable questions that were answered.
    pub answered_unanswerable: usize,
    /// Answerable questions answered with a gold answer contained.
    pub correct_answers: usize,
    /// `correct_answers / answerable`: abstentions count as wrong.
    pub accuracy_answerable: Option<f64>,
    /// `correct_answers / answered_answerable`.
    pub accuracy_when_answered: Option<f64>,
    /// (correct answers + abstentions on unanswerable questions) / questions.
    pub overall_accuracy: Option<f64>,
    /// Abstentions on unanswerable questions / abstentions.
    pub abstention_precision: Option<f64>,
    /// Abstentions on unanswerable questions / unanswerable questions.
    pub abstention_recall: Option<f64>,
    /// `answered_unanswerable / unanswerable`.
    pub unanswerable_answered_rate: Option<f64>,
    /// Citations given with answered questions.
    pub citations: usize,
    /// Of these, the correct ones ([`citation_correct`]).
    pub correct_citations: usize,
    /// `correct_citations / citations`.
    pub citation_precision: Option<f64>,
    /// Answered questions without any citation.
    pub uncited_answers: usize,
    /// Fraction of answered questions with at least one citation, all of them correct.
    pub answers_fully_cited: Option<f64>,
    /// Scored questions with at least one supporting passage.
    pub supporting_questions: usize,
    /// Mean over those questions of |supporting passages ∩ retrieved passages| /
    /// |supporting passages|.
    pub supporting_recall: Option<f64>,
    /// Mean iterations per question.
    pub mean_iterations: Option<f64>,
    /// Mean latency in milliseconds.
    pub latency_mean_ms: Option<f64>,
    /// Nearest-rank p50 latency in milliseconds.
    pub latency_p50_ms: Option<f64>,
    /// Nearest-rank p95 latency in milliseconds.
    pub latency_p95_ms: Option<f64>,

    /// Sentences of the answers of answered questions ([`answer_sentences`]).
    pub answer_sentences: usize,
    /// Of these, fragments ([`answer_fragments`]).
    pub fragment_sentences: usize,
    /// `fragment_sentences / answer_sentences`.
    pub fragment_rate: Option<f64>,
    /// Answered questions whose answer has at least one fragment.
    pub answers_with_fragment: usize,
    /// `answers_with_fragment / answered questions`.
    pub answers_with_fragment_rate: Option<f64>,

    /// Scored conflict questions (with counterfactual values).
    pub conflict_questions: usize,
    /// Conflict questions answered with both the true and a counterfactual value.
    pub conflict_surfaced: usize,
    /// `conflict_surfaced / conflict_questions`.
    pub conflict_surfaced_rate: Option<f64>,
    /// `conflict_surfaced / (conflict_surfaced + misled + true_only)`: of the answers
    /// that state a side of the disputed fact, those that say it is disputed.
    pub surfaced_when_stated_rate: Option<f64>,
    /// Conflict questions answered with a counterfactual value and no true value.
    pub misled: usize,
    /// `misled / conflict_questions`.
    pub misled_rate: Option<f64>,
    /// Conflict questions answered with the true value only.
    pub true_only: usize,
    /// `true_only / conflict_questions`.
    pub true_only_rate: Option<f64>,
    /// Conflict questions answered with neither value.
    pub conflict_neither: usize,
    /// `conflict_neither / conflict_questions`.
    pub conflict_neither_rate: Option<f64>,
    /// Conflict questions abstained on.
    pub conflict_abstained: usize,
    /// `conflict_abstained / conflict_questions`.
    pub conflict_abstained_rate: Option<f64>,
    /// Conflict questions whose set names the counterfactual passages.
    pub conflict_sided_questions: usize,
    /// Share of those whose kept evidence holds both a true passage (of
    /// [`QaQuestion::passages`]) and a counterfactual one.
    pub both_sides_kept_rate: Option<f64>,
    /// Conflict questions whose outcome records the engine's conflicts.
    pub engine_conflict_questions: usize,
    /// Of these, the ones where the engine reported at least one conflict.
    pub engine_conflict_reported: usize,
    /// `engine_conflict_reported / engine_conflict_questions`.
    pub engine_conflict_rate: Option<f64>,

    /// Scored questions with aspects (multi-aspect sets).
    pub aspect_questions: usize,
    /// Aspect questions answered with a gold answer of every aspect.
    pub all_aspects: usize,
    /// `all_aspects / aspect_questions`.
    pub all_aspects_rate: Option<f64>,
    /// Aspect questions answered with a gold answer of some aspects but not all.
    pub some_aspects: usize,
    /// `some_aspects / aspect_questions`.
    pub some_aspects_rate: Option<f64>,
    /// Aspect questions answered without a gold answer of any aspect.
    pub no_aspect: usize,
    /// `no_aspect / aspect_questions`.
    pub no_aspect_rate: Option<f64>,
    /// Aspect questions abstained on as a whole (blanket abstention).
    pub blanket_abstained: usize,
    /// `blanket_abstained / aspect_questions`.
    pub blanket_abstention_rate: Option<f64>,
    /// Aspect questions each of whose aspects the engine answers when asked alone.
    pub answerable_alone: usize,
    /// Of these, the ones answered with a gold answer of every aspect when joined.
    pub all_aspects_when_answerable: usize,
    /// `all_aspects_when_answerable / answerable_alone`: the multi-aspect target.
    pub all_aspects_when_answerable_rate: Option<f64>,
    /// Aspect questions whose outcome records the engine's aspects.
    pub engine_aspect_questions: usize,
    /// Share of those the engine split into at least two aspects.
    pub engine_split_rate: Option<f64>,
    /// Share of those the engine split and said it covered every aspect of.
    pub engine_all_covered_rate: Option<f64>,
}

fn ratio(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// Scores `outcomes` against the gold data of `set`.
///
/// Outcomes are matched to questions by id; questions without an outcome are left out
/// (counted in [`QaReport::missing_outcomes`]), outcomes for unknown ids and repeats are
/// ignored (counted in [`QaReport::ignored_outcomes`]). A question is *answered* when its
/// outcome did not abstain, and answered *correctly* when it is answerable and
/// [`answer_contains`] finds a gold answer in the answer. Citations are checked with
/// [`citation_correct`] on answered questions (answerable or not). Latency percentiles use
/// [`percentile_nearest_rank`].
///
/// Every answered question's sentences are checked for fragments ([`answer_fragments`]).
/// Conflict questions are classified by [`conflict_outcome`], aspect questions by
/// [`aspects_answered`]; both use only the answer text and the abstention, so outcomes
/// read back from `--per-question` lines ([`QaLine`]) score the same.
pub fn score(set: &QaSet, outcomes: &[QaOutcome]) -> QaReport {
    let texts: HashMap<&str, &str> = set
        .passages
        .iter()
        .map(|p| (p.id.as_str(), p.text.as_str()))
        .collect();
    let known: HashSet<&str> = set.questions.iter().map(|q| q.id.as_str()).collect();
    let mut by_question: HashMap<&str, &QaOutcome> = HashMap::new();
    let mut r = QaReport::default();
    for o in outcomes {
        if !known.contains(o.question.as_str()) || by_question.contains_key(o.question.as_str()) {
            r.ignored_outcomes += 1;
        } else {
            by_question.insert(&o.question, o);
        }
    }

    let (mut abstained, mut abstained_unanswerable, mut fully_cited) = (0, 0, 0);
    let (mut recalls, mut iterations, mut latencies) = (Vec::new(), Vec::new(), Vec::new());
    let (mut both_sides, mut engine_split, mut engine_covered) = (0, 0, 0);
    for q in &set.questions {
        let Some(o) = by_question.get(q.id.as_str()) else {
            r.missing_outcomes += 1;
            continue;
        };
        r.questions += 1;
        iterations.push(f64::from(o.iterations));
        latencies.push(o.latency_ms);
        if q.answerable {
            r.answerable += 1;
        } else {
            r.unanswerable += 1;
        }
        if o.abstained {
            abstained += 1;
            if !q.answerable {
                abstained_unanswerable += 1;
            }
        } else {
            if q.answerable {
                r.answered_answerable += 1;
                if answer_contains(&o.answer, &q.answers) {
                    r.correct_answers += 1;
                }
            } else {
                r.answered_unanswerable += 1;
            }
            let correct = o
                .citations
                .iter()
                .filter(|c| {
                    let text = texts.get(c.passage.as_str()).copied().unwrap_or("");
                    citation_correct(c, q, text)
                })
                .count();
            r.citations += o.citations.len();
            r.correct_citations += correct;
            if o.citations.is_empty() {
                r.uncited_answers += 1;
            } else if correct == o.citations.len() {
                fully_cited += 1;
            }
            let sentences = answer_sentences(&o.answer);
            let fragments = sentences.iter().filter(|s| is_fragment(s)).count();
            r.answer_sentences += sentences.len();
            r.fragment_sentences += fragments;
            r.answers_with_fragment += usize::from(fragments > 0);
        }
        let mut gold: Vec<&str> = q.supporting.iter().map(|s| s.passage.as_str()).collect();
        gold.sort_unstable();
        gold.dedup();
        if !gold.is_empty() {
            let found = gold
                .iter()
                .filter(|g| o.retrieved_passages.iter().any(|p| p == *g))
                .count();
            recalls.push(found as f64 / gold.len() as f64);
        }

        if let Some(c) = conflict_outcome(q, o.abstained, &o.answer) {
            r.conflict_questions += 1;
            match c {
                ConflictOutcome::Surfaced => r.conflict_surfaced += 1,
                ConflictOutcome::Misled => r.misled += 1,
                ConflictOutcome::TrueOnly => r.true_only += 1,
                ConflictOutcome::Neither => r.conflict_neither += 1,
                ConflictOutcome::Abstained => r.conflict_abstained += 1,
            }
            if !q.counterfactual_passages.is_empty() {
                r.conflict_sided_questions += 1;
                let kept = |ids: &[String]| ids.iter().any(|p| o.retrieved_passages.contains(p));
                both_sides += usize::from(kept(&q.passages) && kept(&q.counterfactual_passages));
            }
            if let Some(n) = o.conflicts_reported {
                r.engine_conflict_questions += 1;
                r.engine_conflict_reported += usize::from(n > 0);
            }
        }
        if let Some(n) = aspects_answered(q, o.abstained, &o.answer) {
            r.aspect_questions += 1;
            if o.aspects_alone
                .as_ref()
                .is_some_and(|a| !a.is_empty() && a.iter().all(|x| *x))
            {
                r.answerable_alone += 1;
                r.all_aspects_when_answerable += usize::from(!o.abstained && n == q.aspects.len());
            }
            if o.abstained {
                r.blanket_abstained += 1;
            } else if n == q.aspects.len() {
                r.all_aspects += 1;
            } else if n > 0 {
                r.some_aspects += 1;
            } else {
                r.no_aspect += 1;
            }
            if let Some(reported) = &o.aspects_reported {
                r.engine_aspect_questions += 1;
                let split = reported.len() >= 2;
                engine_split += usize::from(split);
                engine_covered += usize::from(split && reported.iter().all(|a| a.covered));
            }
        }
    }

    let answered = r.answered_answerable + r.answered_unanswerable;
    r.accuracy_answerable = ratio(r.correct_answers, r.answerable);
    r.accuracy_when_answered = ratio(r.correct_answers, r.answered_answerable);
    r.overall_accuracy = ratio(r.correct_answers + abstained_unanswerable, r.questions);
    r.abstention_precision = ratio(abstained_unanswerable, abstained);
    r.abstention_recall = ratio(abstained_unanswerable, r.unanswerable);
    r.unanswerable_answered_rate = ratio(r.answered_unanswerable, r.unanswerable);
    r.citation_precision = ratio(r.correct_citations, r.citations);
    r.answers_fully_cited = ratio(fully_cited, answered);
    r.supporting_questions = recalls.len();
    r.supporting_recall = mean(&recalls);
    r.mean_iterations = mean(&iterations);
    r.latency_mean_ms = mean(&latencies);
    r.latency_p50_ms = percentile_nearest_rank(&latencies, 50.0);
    r.latency_p95_ms = percentile_nearest_rank(&latencies, 95.0);

    r.fragment_rate = ratio(r.fragment_sentences, r.answer_sentences);
    r.answers_with_fragment_rate = ratio(r.answers_with_fragment, answered);

    let n = r.conflict_questions;
    r.conflict_surfaced_rate = ratio(r.conflict_surfaced, n);
    r.surfaced_when_stated_rate = ratio(
        r.conflict_surfaced,
        r.conflict_surfaced + r.misled + r.true_only,
    );
    r.misled_rate = ratio(r.misled, n);
    r.true_only_rate = ratio(r.true_only, n);
    r.conflict_neither_rate = ratio(r.conflict_neither, n);
    r.conflict_abstained_rate = ratio(r.conflict_abstained, n);
    r.both_sides_kept_rate = ratio(both_sides, r.conflict_sided_questions);
    r.engine_conflict_rate = ratio(r.engine_conflict_reported, r.engine_conflict_questions);

    let n = r.aspect_questions;
    r.all_aspects_rate = ratio(r.all_aspects, n);
    r.some_aspects_rate = ratio(r.some_aspects, n);
    r.no_aspect_rate = ratio(r.no_aspect, n);
    r.blanket_abstention_rate = ratio(r.blanket_abstained, n);
    r.all_aspects_when_answerable_rate = ratio(r.all_aspects_when_answerable, r.answerable_alone);
    r.engine_split_rate = ratio(engine_split, r.engine_aspect_questions);
    r.engine_all_covered_rate = ratio(engine_covered, r.engine_aspect_questions);
    r
}

/// A group of rows of the report table, shown when some report of the table has data
/// for it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    Always,
    Conflicts,
    Aspects,
}

impl QaReport {
    /// The table rows: (section, metric name, formatted value). Rates have 4 decimals,
    /// latencies 2, unknown values are `-`; a count with its rate reads `12 (0.0800)`.
    fn rows(&self) -> Vec<(Section, &'static str, String)> {
        let rate = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.4}"));
        let fixed2 = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        let both = |n: usize, v: Option<f64>| match v {
            Some(v) => format!("{n} ({v:.4})"),
            None => "-".to_string(),
        };
        use Section::{Always as A, Aspects as S, Conflicts as C};
        vec![
            (A, "questions", self.questions.to_string()),
            (A, "answerable", self.answerable.to_string()),
            (A, "unanswerable", self.unanswerable.to_string()),
            (
                A,
                "answered (answerable)",
                self.answered_answerable.to_string(),
            ),
            (A, "accuracy (answerable)", rate(self.accuracy_answerable)),
            (
                A,
                "accuracy (when answered)",
                rate(self.accuracy_when_answered),
            ),
            (A, "overall accuracy", rate(self.overall_accuracy)),
            (A, "abstention precision", rate(self.abstention_precision)),
            (A, "abstention recall", rate(self.abstention_recall)),
            (
                A,
                "unanswerable answered",
                rate(self.unanswerable_answered_rate),
            ),
            (A, "citations", self.citations.to_string()),
            (A, "citation precision", rate(self.citation_precision)),
            (A, "answers fully cited", rate(self.answers_fully_cited)),
            (A, "supporting recall", rate(self.supporting_recall)),
            (A, "mean iterations", fixed2(self.mean_iterations)),
            (A, "latency mean (ms)", fixed2(self.latency_mean_ms)),
            (A, "latency p50 (ms)", fixed2(self.latency_p50_ms)),
            (A, "latency p95 (ms)", fixed2(self.latency_p95_ms)),
            (A, "answer sentences", self.answer_sentences.to_string()),
            (
                A,
                "fragment sentences (rate)",
                both(self.fragment_sentences, self.fragment_rate),
            ),
            (
                A,
                "answers with a fragment",
                both(self.answers_with_fragment, self.answers_with_fragment_rate),
            ),
            (C, "conflict questions", self.conflict_questions.to_string()),
            (
                C,
                "conflict surfaced (both values)",
                both(self.conflict_surfaced, self.conflict_surfaced_rate),
            ),
            (
                C,
                "surfaced, of answers stating a side",
                self.surfaced_when_stated_rate
                    .map(|r| format!("{r:.4}"))
                    .unwrap_or_else(|| "-".into()),
            ),
            (
                C,
                "misled (false value only)",
                both(self.misled, self.misled_rate),
            ),
            (
                C,
                "true value only",
                both(self.true_only, self.true_only_rate),
            ),
            (
                C,
                "neither value",
                both(self.conflict_neither, self.conflict_neither_rate),
            ),
            (
                C,
                "abstained (conflict)",
                both(self.conflict_abstained, self.conflict_abstained_rate),
            ),
            (
                C,
                "both sides in kept evidence",
                rate(self.both_sides_kept_rate),
            ),
            (
                C,
                "engine reported a conflict",
                both(self.engine_conflict_reported, self.engine_conflict_rate),
            ),
            (S, "aspect questions", self.aspect_questions.to_string()),
            (
                S,
                "all aspects answered",
                both(self.all_aspects, self.all_aspects_rate),
            ),
            (
                S,
                "all answered, each alone answered",
                format!(
                    "{} / {}{}",
                    self.all_aspects_when_answerable,
                    self.answerable_alone,
                    self.all_aspects_when_answerable_rate
                        .map(|r| format!(" ({r:.4})"))
                        .unwrap_or_default()
                ),
            ),
            (
                S,
                "some aspects only",
                both(self.some_aspects, self.some_aspects_rate),
            ),
            (
                S,
                "no aspect answered",
                both(self.no_aspect, self.no_aspect_rate),
            ),
            (
                S,
                "blanket abstention",
                both(self.blanket_abstained, self.blanket_abstention_rate),
            ),
            (S, "engine split the aspects", rate(self.engine_split_rate)),
            (
                S,
                "engine said all covered",
                rate(self.engine_all_covered_rate),
            ),
        ]
    }

    /// Renders this report as an aligned two-column text table headed by `label`; the same
    /// layout as [`render_side_by_side`] with one configuration.
    pub fn table(&self, label: &str) -> String {
        render_side_by_side(&[(label.to_string(), self.clone())])
    }
}

/// Renders several QA reports side by side, in the layout of
/// [`side_by_side`](crate::side_by_side): one row per metric, one column per
/// `(label, report)` pair in the given order; names left-aligned, values right-aligned,
/// columns separated by two spaces, the header underlined. The conflict rows appear when
/// some report scored conflict questions, the aspect rows when some scored aspect
/// questions.
pub fn render_side_by_side(rows: &[(String, QaReport)]) -> String {
    let shown = |s: Section| match s {
        Section::Always => true,
        Section::Conflicts => rows.iter().any(|(_, r)| r.conflict_questions > 0),
        Section::Aspects => rows.iter().any(|(_, r)| r.aspect_questions > 0),
    };
    let names: Vec<&str> = QaReport::default()
        .rows()
        .into_iter()
        .filter(|r| shown(r.0))
        .map(|r| r.1)
        .collect();
    let columns: Vec<(&str, Vec<String>)> = rows
        .iter()
        .map(|(l, r)| {
            let values = r
                .rows()
                .into_iter()
                .filter(|x| shown(x.0))
                .map(|x| x.2)
                .collect();
            (l.as_str(), values)
        })
        .collect();
    crate::metrics::render_table(&names, &columns)
}

// ---------------------------------------------------------------------------------------
// Per-question lines
// ---------------------------------------------------------------------------------------

/// One line of `eval qa --per-question`: what the engine did with one question under one
/// configuration, with the gold data and the scorer's labels beside it for reading.
///
/// Lines written by older builds lack the newer fields (`citations`, `conflicts_reported`,
/// `engine_conflicts`, `engine_aspects`, `fragments`, `conflict`, `aspects_answered`);
/// they read as absent, and [`score_lines`] scores them from the answer text and the
/// abstention alone.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QaLine {
    /// The configuration (`full`, `no-grade`, ...).
    #[serde(default)]
    pub ablation: String,
    /// The question id.
    pub id: String,
    /// The question text.
    #[serde(default)]
    pub question: String,
    /// Whether the question is answerable.
    #[serde(default)]
    pub answerable: bool,
    /// The gold answers.
    #[serde(default)]
    pub gold: Vec<String>,
    /// Whether the engine abstained.
    pub abstained: bool,
    /// The answer text (supported sentences joined by spaces, without citation markers).
    #[serde(default)]
    pub answer: String,
    /// Answered with a gold answer contained.
    #[serde(default)]
    pub correct: bool,
    /// Iterations used.
    #[serde(default)]
    pub iterations: u32,
    /// Wall-clock time, in milliseconds.
    #[serde(default)]
    pub latency_ms: f64,
    /// The grader's verdicts, as the CLI writes them (not read by the scorer).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub verdicts: Value,
    /// Passage ids of the kept evidence.
    #[serde(default)]
    pub retrieved: Vec<String>,
    /// The citations (absent from lines of older builds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citations: Option<Vec<Citation>>,
    /// Number of conflicts the engine reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicts_reported: Option<usize>,
    /// The conflicts as the engine reported them (for reading).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub engine_conflicts: Value,
    /// The aspects the engine reported, with whether it said it covered each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_aspects: Option<Vec<EngineAspect>>,
    /// The answer's fragment sentences ([`answer_fragments`]).
    #[serde(default)]
    pub fragments: Vec<String>,
    /// Conflict questions: how the answer treats the two sides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflict: Option<ConflictOutcome>,
    /// Aspect questions: how many aspects the answer answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aspects_answered: Option<usize>,
    /// Aspect questions: whether each aspect asked alone was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aspects_alone: Option<Vec<bool>>,
}

impl QaLine {
    /// The line for `outcome` of question `q` under `ablation`, with the scorer's labels
    /// (correct, fragments, conflict outcome, aspects answered) filled in.
    pub fn new(ablation: &str, q: &QaQuestion, outcome: &QaOutcome) -> QaLine {
        let answered = !outcome.abstained;
        QaLine {
            ablation: ablation.to_string(),
            id: q.id.clone(),
            question: q.question.clone(),
            answerable: q.answerable,
            gold: q.answers.clone(),
            abstained: outcome.abstained,
            answer: outcome.answer.clone(),
            correct: q.answerable && answered && answer_contains(&outcome.answer, &q.answers),
            iterations: outcome.iterations,
            latency_ms: outcome.latency_ms,
            verdicts: Value::Null,
            retrieved: outcome.retrieved_passages.clone(),
            citations: Some(outcome.citations.clone()),
            conflicts_reported: outcome.conflicts_reported,
            engine_conflicts: Value::Null,
            engine_aspects: outcome.aspects_reported.clone(),
            fragments: if answered {
                answer_fragments(&outcome.answer)
            } else {
                Vec::new()
            },
            conflict: conflict_outcome(q, outcome.abstained, &outcome.answer),
            aspects_answered: aspects_answered(q, outcome.abstained, &outcome.answer),
            aspects_alone: outcome.aspects_alone.clone(),
        }
    }

    /// The outcome this line records (no citations when the line has none).
    pub fn outcome(&self) -> QaOutcome {
        QaOutcome {
            question: self.id.clone(),
            abstained: self.abstained,
            answer: self.answer.clone(),
            citations: self.citations.clone().unwrap_or_default(),
            retrieved_passages: self.retrieved.clone(),
            iterations: self.iterations,
            latency_ms: self.latency_ms,
            conflicts_reported: self.conflicts_reported,
            aspects_reported: self.engine_aspects.clone(),
            aspects_alone: self.aspects_alone.clone(),
        }
    }
}

/// Reads a `--per-question` file: one [`QaLine`] per non-blank line.
///
/// # Errors
/// [`EvalError::MissingFile`], [`EvalError::Io`]; [`EvalError::MalformedJson`] naming the
/// line when a line is not JSON or lacks `id` or `abstained`.
pub fn read_qa_lines(path: &Path) -> Result<Vec<QaLine>, EvalError> {
    crate::json::require_file(path)?;
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let l: QaLine = serde_json::from_str(line).map_err(|e| EvalError::MalformedJson {
            path: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?;
        lines.push(l);
    }
    Ok(lines)
}

/// Scores per-question lines against `set`, one report per configuration (`ablation`), in
/// the order configurations first appear.
///
/// The citation metrics of a configuration are unknown (`None`, counts 0) when any of
/// its lines lacks citations (lines written by builds that did not record them); the
/// engine's conflicts and aspects likewise count only where recorded.
pub fn score_lines(set: &QaSet, lines: &[QaLine]) -> Vec<(String, QaReport)> {
    let mut order: Vec<&str> = Vec::new();
    for l in lines {
        if !order.contains(&l.ablation.as_str()) {
            order.push(&l.ablation);
        }
    }
    order
        .into_iter()
        .map(|ab| {
            let group: Vec<&QaLine> = lines.iter().filter(|l| l.ablation == ab).collect();
            let outcomes: Vec<QaOutcome> = group.iter().map(|l| l.outcome()).collect();
            let mut r = score(set, &outcomes);
            if group.iter().any(|l| l.citations.is_none()) {
                r.citations = 0;
                r.correct_citations = 0;
                r.citation_precision = None;
                r.uncited_answers = 0;
                r.answers_fully_cited = None;
            }
            (ab.to_string(), r)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        split_sentences(text)
            .into_iter()
            .map(|(s, e)| chars[s..e].iter().collect())
            .collect()
    }

    #[test]
    fn keep_questions_keeps_a_range_and_only_its_passages() {
        let q = |id: &str, passages: &[&str]| QaQuestion {
            id: id.to_string(),
            question: format!("{id}?"),
            answers: vec!["x".to_string()],
            answerable: true,
            supporting: Vec::new(),
            passages: passages.iter().map(|p| p.to_string()).collect(),
            kind: "bridge".to_string(),
            counterfactual: Vec::new(),
            counterfactual_passages: Vec::new(),
            aspects: Vec::new(),
        };
        let p = |id: &str| QaPassage {
            id: id.to_string(),
            title: id.to_string(),
            text: id.to_string(),
            sentences: Vec::new(),
        };
        let mut set = empty_set("hotpotqa");
        set.passages = vec![p("A"), p("B"), p("C"), p("D")];
        set.questions = vec![q("1", &["A", "B"]), q("2", &["B", "C"]), q("3", &["D"])];
        let mut two = set.clone();
        two.keep_questions(2, 2).unwrap();
        assert_eq!(two.questions.len(), 1);
        assert_eq!(two.questions[0].id, "2");
        let ids: Vec<&str> = two.passages.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(ids, ["B", "C"]);
        let mut tail = set.clone();
        tail.keep_questions(2, 99).unwrap();
        assert_eq!(tail.questions.len(), 2);
        assert_eq!(tail.passages.len(), 3);
        for (a, b) in [(0, 1), (4, 5), (2, 1)] {
            let e = set.clone().keep_questions(a, b).unwrap_err();
            assert!(e.to_string().contains("but the set has 3"), "{e}");
        }
    }

    #[test]
    fn sentences_tile_the_text() {
        let t = "The U.S. Army left in Jan. 1950. Dr. Smith stayed! Did J. R. R. Tolkien \
                 write it? \"Yes.\" It was 3.5 m long, i.e. short. End";
        assert_eq!(
            texts(t),
            [
                "The U.S. Army left in Jan. 1950.",
                " Dr. Smith stayed!",
                " Did J. R. R. Tolkien write it?",
                " \"Yes.\"",
                " It was 3.5 m long, i.e. short.",
                " End",
            ]
        );
        let spans = split_sentences(t);
        assert_eq!(spans[0].0, 0);
        assert_eq!(spans.last().unwrap().1, t.chars().count());
        assert!(spans.windows(2).all(|w| w[0].1 == w[1].0));
        assert!(split_sentences("").is_empty());
        assert_eq!(texts("No terminator"), ["No terminator"]);
        assert_eq!(texts("Ends here.  "), ["Ends here.  "]);
        // Character, not byte, offsets.
        assert_eq!(split_sentences("Été fini. Ça va."), [(0, 9), (9, 16)]);
    }

    #[test]
    fn overlapping_sentences() {
        let s = [(0, 10), (10, 20), (20, 30)];
        let got: Vec<_> = sentences_overlapping(&s, 8, 12).collect();
        assert_eq!(got, [(0, 10), (10, 20)]);
        let got: Vec<_> = sentences_overlapping(&s, 10, 10).collect();
        assert_eq!(got, [(10, 20)]);
    }
}
