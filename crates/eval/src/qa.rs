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
    /// HotpotQA). HotpotQA gives them; for SQuAD a simple rule-based splitter computes
    /// them. An empty HotpotQA sentence has an empty span.
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

/// A question with its gold data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    /// Ids of the passages the question belongs to: its SQuAD paragraph, or its HotpotQA
    /// context paragraphs (usually 10) in dataset order.
    pub passages: Vec<String>,
    /// HotpotQA `type` (`bridge` / `comparison`); SQuAD `answerable` / `unanswerable`.
    pub kind: String,
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
    let file = qa_file(path)?;
    let root = read_json(&file)?;
    let is_squad = root.get("data").is_some_and(Value::is_array);
    let is_hotpot = root.as_array().is_some_and(|items| {
        items
            .first()
            .is_some_and(|q| q.get("supporting_facts").is_some() && q.get("context").is_some())
    });
    if is_squad {
        squad_from_value(&file, &root, None)
    } else if is_hotpot {
        hotpot_from_value(&file, &root, limit)
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

fn squad_from_value(
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
                let answerable = !answers.is_empty();
                set.questions.push(QaQuestion {
                    id,
                    question: question.to_string(),
                    answers,
                    answerable,
                    supporting,
                    passages: vec![passage_id.clone()],
                    kind: if answerable {
                        "answerable"
                    } else {
                        "unanswerable"
                    }
                    .to_string(),
                });
            }
            set.passages.push(QaPassage {
                id: passage_id,
                title: title.clone(),
                text: context.to_string(),
                sentences,
            });
        }
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

/// Abbreviations after which a period does not end a sentence (lower case, no period).
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "no", "nos", "mt", "ft", "inc",
    "ltd", "co", "corp", "gen", "col", "lt", "sgt", "capt", "gov", "sen", "rep", "rev", "est",
    "approx", "fig", "vol", "ca", "c", "cf", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec",
];

/// Splits `text` into sentences; returns contiguous character spans covering the text
/// (none for an empty text).
///
/// A sentence ends after `.`, `!` or `?` (plus any further terminators and closing quotes
/// or brackets) when whitespace follows and the next non-space character is not a
/// lower-case letter, unless the period ends an abbreviation: a single letter (an
/// initial), a word with an inner period (`U.S.`, `e.g.`) or one of a short list (`Mr.`,
/// `St.`, `Jan.`, ...). The whitespace goes to the next sentence.
pub fn split_sentences(text: &str) -> Vec<(usize, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let is_closer = |c: char| matches!(c, '"' | '\'' | ')' | ']' | '”' | '’' | '»');
    let mut spans = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < n {
        let c = chars[i];
        if !matches!(c, '.' | '!' | '?') {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < n && (matches!(chars[j], '.' | '!' | '?') || is_closer(chars[j])) {
            j += 1;
        }
        let mut k = j;
        while k < n && chars[k].is_whitespace() {
            k += 1;
        }
        if k > j
            && k < n
            && !chars[k].is_lowercase()
            && !(c == '.' && is_abbreviation(&chars[start..i]))
        {
            spans.push((start, j));
            start = j;
        }
        i = j;
    }
    if start < n {
        spans.push((start, n));
    }
    spans
}

/// Whether the word at the end of `before` (the text up to a period) is an abbreviation.
fn is_abbreviation(before: &[char]) -> bool {
    let word_start = before
        .iter()
        .rposition(|c| c.is_whitespace())
        .map_or(0, |p| p + 1);
    let word: String = before[word_start..]
        .iter()
        .skip_while(|c| !c.is_alphanumeric())
        .collect();
    let letters = word.chars().count();
    (letters == 1 && word.chars().all(char::is_alphabetic))
        || (word.contains('.') && !word.ends_with('.'))
        || ABBREVIATIONS.contains(&word.to_lowercase().as_str())
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
}

/// Scores of a set of [`QaOutcome`]s; see [`score`]. Rates are `None` (JSON `null`) when
/// their denominator is 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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
    r
}

impl QaReport {
    /// The table rows: (metric name, formatted value). Rates have 4 decimals, latencies 2,
    /// unknown values are `-`.
    fn rows(&self) -> Vec<(&'static str, String)> {
        let rate = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.4}"));
        let fixed2 = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        vec![
            ("questions", self.questions.to_string()),
            ("answerable", self.answerable.to_string()),
            ("unanswerable", self.unanswerable.to_string()),
            (
                "answered (answerable)",
                self.answered_answerable.to_string(),
            ),
            ("accuracy (answerable)", rate(self.accuracy_answerable)),
            (
                "accuracy (when answered)",
                rate(self.accuracy_when_answered),
            ),
            ("overall accuracy", rate(self.overall_accuracy)),
            ("abstention precision", rate(self.abstention_precision)),
            ("abstention recall", rate(self.abstention_recall)),
            (
                "unanswerable answered",
                rate(self.unanswerable_answered_rate),
            ),
            ("citations", self.citations.to_string()),
            ("citation precision", rate(self.citation_precision)),
            ("answers fully cited", rate(self.answers_fully_cited)),
            ("supporting recall", rate(self.supporting_recall)),
            ("mean iterations", fixed2(self.mean_iterations)),
            ("latency mean (ms)", fixed2(self.latency_mean_ms)),
            ("latency p50 (ms)", fixed2(self.latency_p50_ms)),
            ("latency p95 (ms)", fixed2(self.latency_p95_ms)),
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
/// columns separated by two spaces, the header underlined.
pub fn render_side_by_side(rows: &[(String, QaReport)]) -> String {
    let names: Vec<&str> = QaReport::default().rows().iter().map(|r| r.0).collect();
    let columns: Vec<(&str, Vec<String>)> = rows
        .iter()
        .map(|(l, r)| (l.as_str(), r.rows().into_iter().map(|x| x.1).collect()))
        .collect();
    crate::metrics::render_table(&names, &columns)
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
