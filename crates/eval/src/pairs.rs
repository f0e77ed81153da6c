//! Labelled `(question, passage, label)` pairs for training a relevance evaluator or a
//! reranker (a cross-encoder): built from SQuAD 2.0 ([`squad_pairs`]), from HotpotQA's
//! supporting and distractor paragraphs ([`hotpot_pairs`]) and from a BEIR
//! split's qrels with BM25 hard negatives ([`beir_pairs`]), or read from a JSON-lines
//! file of pairs such as `neuralcore feedback export` writes ([`read_pairs`]), and checked
//! before training ([`check_pairs`]).
//!
//! Hard negatives are ranked with the project's one BM25 ([`neuralcore_core::bm25`], the
//! default [`Bm25Params`]) over the terms of the project's analyzer
//! ([`Analyzer::english`]), the hardest (highest scoring) first. Everything is
//! deterministic given the seed: scores are summed in the query's term order, and equal
//! scores are ordered by a hash of the seed, the question id and the candidate. So a
//! question gets the same negatives whatever else is loaded, and the seed only changes
//! which of several equally hard passages are taken, and which passages fill the
//! negatives when too few share a term with the question.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

use neuralcore_core::analysis::Analyzer;
use neuralcore_core::bm25::{self, Bm25Params};

use crate::beir::{for_each_line, record_id, BeirDataset};
use crate::error::EvalError;
use crate::json::{json_kind, require_file};
use crate::qa::{load_hotpotqa, load_squad2, normalize_answer};

/// One labelled training pair (the one type every trainer reads).
pub use neuralcore_core::pairs::Pair;

/// Builds pairs from a SQuAD 2.0 file, optionally only the articles numbered `articles`
/// (1-based, inclusive; `None` = all).
///
/// For each question, in file order:
/// * its own paragraph, labelled 1 when the question is answerable and 0 when it is not
///   (`is_impossible`);
/// * then up to `negatives` other paragraphs of the same article, labelled 0: the ones
///   BM25 scores highest against the question, hardest first. A paragraph that contains
///   any gold answer text of the question is never taken (case-insensitively, or after
///   SQuAD normalization on word boundaries). When fewer than `negatives` paragraphs
///   share a term with the question, the rest are drawn (by the seed) from the other
///   eligible paragraphs; an article with too few eligible paragraphs gives fewer.
///
/// BM25 statistics are those of the article's paragraphs. The output is the same for the
/// same file, selection, `negatives` and `seed`.
///
/// # Errors
/// Those of [`load_squad2`] (missing file, invalid JSON, a bad shape, an article range
/// that does not fit the file).
pub fn squad_pairs(
    path: &Path,
    articles: Option<(usize, usize)>,
    negatives: usize,
    seed: u64,
) -> Result<Vec<Pair>, EvalError> {
    let set = load_squad2(path, articles.map(|(first, last)| first..=last))?;
    let prefix = squad_prefix(path);
    let analyzer = Analyzer::english();

    // Passages by article (`squad2:<article>:<paragraph>`, both 0-based).
    let mut where_is: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut by_article: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, p) in set.passages.iter().enumerate() {
        let (a, _) = squad_position(&p.id).ok_or_else(|| EvalError::BadShape {
            path: path.to_path_buf(),
            at: p.id.clone(),
            message: "a passage id of an unexpected form (not squad2:<article>:<paragraph>)"
                .to_string(),
        })?;
        let members = by_article.entry(a).or_default();
        where_is.insert(&p.id, (a, members.len()));
        members.push(i);
    }
    let articles: HashMap<usize, Article> = by_article
        .into_iter()
        .map(|(a, members)| {
            let texts: Vec<&str> = members
                .iter()
                .map(|&i| set.passages[i].text.as_str())
                .collect();
            let index = Bm25Index::build(&texts, analyzer);
            let lower = texts.iter().map(|t| t.to_lowercase()).collect();
            let normalized = texts
                .iter()
                .map(|t| format!(" {} ", normalize_answer(t)))
                .collect();
            let article = Article {
                members,
                index,
                lower,
                normalized,
            };
            (a, article)
        })
        .collect();

    let mut pairs = Vec::new();
    for q in &set.questions {
        let Some(own_id) = q.passages.first() else {
            continue;
        };
        let Some(&(a, _)) = where_is.get(own_id.as_str()) else {
            continue;
        };
        let article = &articles[&a];
        let source = |local: usize| {
            let p = &set.passages[article.members[local]];
            let (_, n) = squad_position(&p.id).unwrap_or_default();
            format!("{prefix}:{}:p{n}:{}", a + 1, q.id)
        };
        let own_local = where_is[own_id.as_str()].1;
        pairs.push(Pair {
            question: q.question.clone(),
            passage: set.passages[article.members[own_local]].text.clone(),
            label: if q.answerable { 1.0 } else { 0.0 },
            source: source(own_local),
        });
        if negatives == 0 {
            continue;
        }
        // The question's own passages (its paragraph, and in derived sets its other true
        // sources) are never negatives, nor is a paragraph holding a gold answer.
        let own: HashSet<usize> = q
            .passages
            .iter()
            .filter_map(|id| where_is.get(id.as_str()))
            .filter(|(pa, _)| *pa == a)
            .map(|&(_, local)| local)
            .collect();
        let golds_lower: Vec<String> = q
            .answers
            .iter()
            .map(|g| g.to_lowercase())
            .filter(|g| !g.trim().is_empty())
            .collect();
        let golds_norm: Vec<String> = q
            .answers
            .iter()
            .map(|g| normalize_answer(g))
            .filter(|g| !g.is_empty())
            .map(|g| format!(" {g} "))
            .collect();
        let excluded = |local: usize| {
            own.contains(&local)
                || golds_lower
                    .iter()
                    .any(|g| article.lower[local].contains(g.as_str()))
                || golds_norm
                    .iter()
                    .any(|g| article.normalized[local].contains(g.as_str()))
        };
        let tie = mix(seed, text_hash(&q.id));
        for local in article
            .index
            .hardest(&q.question, analyzer, negatives, excluded, tie)
        {
            pairs.push(Pair {
                question: q.question.clone(),
                passage: set.passages[article.members[local]].text.clone(),
                label: 0.0,
                source: source(local),
            });
        }
    }
    Ok(pairs)
}

/// Builds pairs from a HotpotQA file (distractor setting), optionally only the questions
/// numbered `questions` (1-based, inclusive, in file order; `None` = all).
///
/// For each question, in file order:
/// * each paragraph holding one of its supporting facts, in context order, labelled 1;
/// * then up to `negatives` of its other context paragraphs (HotpotQA's distractors,
///   already chosen by the data set to look relevant), labelled 0: the ones BM25 scores
///   highest against the question among the question's own paragraphs, hardest first,
///   the rest drawn by the seed when fewer share a term with it.
///
/// A question none of whose supporting facts names one of its paragraphs gives no pair
/// (nothing says what is relevant to it). A passage is the paragraph's sentences joined,
/// as `eval qa` ingests it (the title is the document's, not the text's). The source
/// names the question's number in the file, its id and the paragraph's title:
/// `hotpotqa:<n>:<id>:<title>`. The output is the same for the same file, selection,
/// `negatives` and `seed`.
///
/// # Errors
/// Those of [`load_hotpotqa`] (missing file, invalid JSON, a bad shape);
/// [`EvalError::InvalidSelection`] when the range starts past the file's last question.
pub fn hotpot_pairs(
    path: &Path,
    questions: Option<(usize, usize)>,
    negatives: usize,
    seed: u64,
) -> Result<Vec<Pair>, EvalError> {
    let set = load_hotpotqa(path, questions.map(|(_, last)| last))?;
    let first = match questions {
        Some((first, last)) if first > set.questions.len() => {
            return Err(EvalError::InvalidSelection {
                path: path.to_path_buf(),
                message: format!(
                    "questions {first}-{last} asked, but the file has {} question(s)",
                    set.questions.len()
                ),
            })
        }
        Some((first, _)) => first,
        None => 1,
    };
    let analyzer = Analyzer::english();
    let by_id: HashMap<&str, usize> = set
        .passages
        .iter()
        .enumerate()
        .map(|(i, p)| (p.id.as_str(), i))
        .collect();
    let mut pairs = Vec::new();
    for (n, q) in set.questions.iter().enumerate().skip(first - 1) {
        let context: Vec<usize> = q
            .passages
            .iter()
            .filter_map(|id| by_id.get(id.as_str()).copied())
            .collect();
        let supporting: HashSet<&str> = q.supporting.iter().map(|s| s.passage.as_str()).collect();
        let is_supporting =
            |local: usize| supporting.contains(set.passages[context[local]].id.as_str());
        if !(0..context.len()).any(is_supporting) {
            continue;
        }
        let pair = |local: usize, label: f32| {
            let p = &set.passages[context[local]];
            Pair {
                question: q.question.clone(),
                passage: p.text.clone(),
                label,
                source: format!("hotpotqa:{}:{}:{}", n + 1, q.id, p.title),
            }
        };
        pairs.extend(
            (0..context.len())
                .filter(|&l| is_supporting(l))
                .map(|l| pair(l, 1.0)),
        );
        if negatives == 0 {
            continue;
        }
        let texts: Vec<&str> = context
            .iter()
            .map(|&i| set.passages[i].text.as_str())
            .collect();
        let index = Bm25Index::build(&texts, analyzer);
        let tie = mix(seed, text_hash(&q.id));
        let hardest = index.hardest(&q.question, analyzer, negatives, is_supporting, tie);
        pairs.extend(hardest.into_iter().map(|l| pair(l, 0.0)));
    }
    Ok(pairs)
}

/// Builds pairs from the BEIR folder `dir` (`corpus.jsonl`, `queries.jsonl`,
/// `qrels/<split>.tsv`).
///
/// For each query with a relevant judgment in the split, in `queries.jsonl` order:
/// * each relevant document (score > 0), in corpus order, labelled 1;
/// * then the `negatives` documents BM25 ranks highest for the query over the whole
///   corpus among those not judged relevant (to it or to a query of the same text),
///   hardest first, labelled 0. Should fewer than `negatives` share a term with the
///   query, the rest are drawn by the seed.
///
/// A document's passage is `"<title>. <text>"` (just `"<title> <text>"` when the title
/// already ends in `.`, `?` or `!`, and just the text when there is no title); BM25
/// indexes the title and the text together, as the keyword index does
/// (`title_in_body`). One index is built over the corpus, once. Documents with neither
/// title nor text are never negatives, nor are later copies of a repeated `_id` (the
/// first copy is the document).
///
/// Hard negatives are *unjudged*, not judged non-relevant: a few may in fact be relevant
/// (the usual risk of BM25 hard-negative mining).
///
/// # Errors
/// Those of [`BeirDataset::open`]; [`EvalError::MalformedJson`] naming the line of
/// `corpus.jsonl` that is not a JSON object with an `_id` and a string `text` (`title`
/// may be missing or null); [`EvalError::BadShape`] when a relevant judgment names a
/// document missing from the corpus or one with neither title nor text.
pub fn beir_pairs(
    dir: &Path,
    split: &str,
    negatives: usize,
    seed: u64,
) -> Result<Vec<Pair>, EvalError> {
    let ds = BeirDataset::open(dir, split)?;
    let corpus = read_corpus(&ds.corpus_path)?;
    let analyzer = Analyzer::english();
    let name = dir
        .canonicalize()
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "beir".to_string());

    let mut by_id: HashMap<&str, usize> = HashMap::with_capacity(corpus.len());
    for (i, d) in corpus.iter().enumerate() {
        // A repeated id keeps its first document.
        by_id.entry(d.id.as_str()).or_insert(i);
    }
    let repeated: Vec<bool> = corpus
        .iter()
        .enumerate()
        .map(|(i, d)| by_id[d.id.as_str()] != i)
        .collect();
    let indexed: Vec<String> = corpus
        .iter()
        .map(|d| format!("{} {}", d.title, d.text))
        .collect();
    let index = Bm25Index::build(&indexed, analyzer);
    drop(indexed);
    let passages: Vec<String> = corpus.iter().map(|d| d.passage()).collect();
    let qrels_path = dir.join("qrels").join(format!("{split}.tsv"));
    // Queries of the same text (SciFact has two such pairs of claims) share their
    // relevant documents: a document relevant to one is never a negative of the other.
    let mut relevant_by_text: HashMap<&str, HashSet<usize>> = HashMap::new();
    for q in &ds.queries {
        let docs = relevant_by_text.entry(q.text.as_str()).or_default();
        for did in ds.qrels.get(&q.id).into_iter().flat_map(|j| j.keys()) {
            if let Some(&i) = by_id.get(did.as_str()) {
                docs.insert(i);
            }
        }
    }

    let mut pairs = Vec::new();
    for q in &ds.queries {
        let Some(judged) = ds.qrels.get(&q.id) else {
            continue;
        };
        let mut relevant: Vec<usize> = Vec::with_capacity(judged.len());
        let mut missing: Vec<&str> = Vec::new();
        for did in judged.keys() {
            match by_id.get(did.as_str()) {
                Some(&i) => relevant.push(i),
                None => missing.push(did),
            }
        }
        if !missing.is_empty() {
            missing.sort_unstable();
            return Err(EvalError::BadShape {
                path: qrels_path,
                at: format!("query {}", q.id),
                message: format!(
                    "judges relevant {} {}, missing from {}",
                    if missing.len() == 1 {
                        "document"
                    } else {
                        "documents"
                    },
                    missing.join(", "),
                    ds.corpus_path.display()
                ),
            });
        }
        relevant.sort_unstable();
        for &d in &relevant {
            if passages[d].trim().is_empty() {
                return Err(EvalError::BadShape {
                    path: ds.corpus_path.clone(),
                    at: format!("document {}", corpus[d].id),
                    message: format!(
                        "has neither title nor text, but is judged relevant to query {} in {}",
                        q.id,
                        qrels_path.display()
                    ),
                });
            }
            pairs.push(Pair {
                question: q.text.clone(),
                passage: passages[d].clone(),
                label: 1.0,
                source: format!("{name}-{split}:{}:{}", q.id, corpus[d].id),
            });
        }
        if negatives == 0 {
            continue;
        }
        let relevant = &relevant_by_text[q.text.as_str()];
        let excluded =
            |d: usize| relevant.contains(&d) || repeated[d] || passages[d].trim().is_empty();
        for d in index.hardest(
            &q.text,
            analyzer,
            negatives,
            excluded,
            mix(seed, text_hash(&q.id)),
        ) {
            pairs.push(Pair {
                question: q.text.clone(),
                passage: passages[d].clone(),
                label: 0.0,
                source: format!("{name}-{split}:{}:{}", q.id, corpus[d].id),
            });
        }
    }
    Ok(pairs)
}

/// Reads a JSON-lines file of [`Pair`]s (`question`, `passage`, `label`, optional
/// `source`; other fields are ignored), skipping blank lines.
///
/// Each pair is checked as it is read: a question or passage that is empty or only
/// whitespace, or a label other than 0 or 1, is an error naming the line. Whether the set
/// has both classes is [`check_pairs`]'s business.
///
/// # Errors
/// [`EvalError::MissingFile`], [`EvalError::Io`]; [`EvalError::MalformedJson`] naming
/// the line (1-based) that is not JSON, lacks a field, has one of the wrong type, or
/// holds an invalid pair.
pub fn read_pairs(path: &Path) -> Result<Vec<Pair>, EvalError> {
    let mut pairs = Vec::new();
    require_file(path)?;
    for_each_line(path, |line_no, line| {
        let bad = |message: String| EvalError::MalformedJson {
            path: path.to_path_buf(),
            line: line_no,
            message,
        };
        let pair: Pair = serde_json::from_str(line).map_err(|e| bad(serde_message(&e)))?;
        if let Some(problem) = pair.problem() {
            return Err(bad(format!("{problem}{}", source_note(&pair))));
        }
        pairs.push(pair);
        Ok(())
    })?;
    Ok(pairs)
}

/// Checks pairs before training and counts them: `(positives, negatives)`.
///
/// # Errors
/// [`EvalError::InvalidSelection`] when there are no pairs or they are all of one class
/// (a classifier needs both); [`EvalError::BadShape`] naming the first pair (its number
/// from 1, its index from 0, and its source) whose question or passage is empty or only
/// whitespace, or whose label is neither 0 nor 1. The path of these errors is
/// `training pairs`, as there is no file.
pub fn check_pairs(pairs: &[Pair]) -> Result<(usize, usize), EvalError> {
    neuralcore_core::pairs::check_pairs(pairs).map_err(|message| EvalError::InvalidSelection {
        path: PathBuf::from("training pairs"),
        message,
    })
}

// ---------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------

/// ` (source "…")` for a pair that names its source.
fn source_note(p: &Pair) -> String {
    if p.source.is_empty() {
        String::new()
    } else {
        format!(" (source {:?})", p.source)
    }
}

/// A serde_json message without its `at line 1 column N` (the file's line is given
/// separately), keeping the column.
fn serde_message(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match message.strip_suffix(&suffix) {
        Some(m) if e.column() > 0 => format!("{m} (column {})", e.column()),
        Some(m) => m.to_string(),
        None => message,
    }
}

// ---------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------

/// Calls `f(line_number, line)` for every non-blank line of `path` (1-based numbers, a
/// leading UTF-8 BOM and trailing `\r` removed).
/// A document of a BEIR corpus.
struct CorpusDoc {
    id: String,
    title: String,
    text: String,
}

impl CorpusDoc {
    /// `"<title>. <text>"` (see [`beir_pairs`]).
    fn passage(&self) -> String {
        let title = self.title.trim();
        let text = self.text.trim();
        if title.is_empty() {
            text.to_string()
        } else if text.is_empty() {
            title.to_string()
        } else if title.ends_with(['.', '?', '!']) {
            format!("{title} {text}")
        } else {
            format!("{title}. {text}")
        }
    }
}

fn read_corpus(path: &Path) -> Result<Vec<CorpusDoc>, EvalError> {
    let mut docs = Vec::new();
    require_file(path)?;
    for_each_line(path, |line_no, line| {
        let bad = |message: String| EvalError::MalformedJson {
            path: path.to_path_buf(),
            line: line_no,
            message,
        };
        let value: Value = serde_json::from_str(line).map_err(|e| bad(serde_message(&e)))?;
        let Value::Object(obj) = value else {
            return Err(bad(format!(
                "expected a JSON object, found {}",
                json_kind(&value)
            )));
        };
        let id = record_id(&obj).map_err(bad)?;
        let title = match obj.get("title") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "`title` of document `{id}` must be a string, found {}",
                    json_kind(other)
                )))
            }
        };
        let text = match obj.get("text") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "`text` of document `{id}` must be a string, found {}",
                    json_kind(other)
                )))
            }
            None => return Err(bad(format!("document `{id}` has no field `text`"))),
        };
        docs.push(CorpusDoc { id, title, text });
        Ok(())
    })?;
    Ok(docs)
}

// ---------------------------------------------------------------------------------------
// SQuAD helpers
// ---------------------------------------------------------------------------------------

/// The article and paragraph (both 0-based) of a SQuAD passage id `squad2:<a>:<p>`.
fn squad_position(id: &str) -> Option<(usize, usize)> {
    let rest = id.strip_prefix("squad2:")?;
    let (a, p) = rest.split_once(':')?;
    Some((a.parse().ok()?, p.parse().ok()?))
}

/// `squad2-train` for a train file, `squad2-dev` for a dev file, else `squad2`.
fn squad_prefix(path: &Path) -> &'static str {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if name.starts_with("train") {
        "squad2-train"
    } else if name.starts_with("dev") {
        "squad2-dev"
    } else {
        "squad2"
    }
}

/// The paragraphs of one article and their BM25 index.
struct Article {
    /// Positions in the set's passages, in article order.
    members: Vec<usize>,
    index: Bm25Index,
    /// Lower-cased texts.
    lower: Vec<String>,
    /// SQuAD-normalized texts with a space on each side.
    normalized: Vec<String>,
}

// ---------------------------------------------------------------------------------------
// BM25
// ---------------------------------------------------------------------------------------

/// An in-memory inverted index scored with the project's BM25 ([`Bm25Params`] defaults),
/// in the tabulated form of the keyword index: `term_weight(idf, qtf) · saturation(tf,
/// length_norm(dl, avgdl))`, which is [`Bm25Params::score`].
struct Bm25Index {
    /// Term → its id.
    vocab: HashMap<String, u32>,
    /// Term id → (document, term frequency), documents in increasing order.
    postings: Vec<Vec<(u32, u32)>>,
    /// Each document's `length_norm`.
    norms: Vec<f32>,
    params: Bm25Params,
}

impl Bm25Index {
    fn build<S: AsRef<str>>(texts: &[S], analyzer: &Analyzer) -> Bm25Index {
        let params = Bm25Params::default();
        let mut vocab: HashMap<String, u32> = HashMap::new();
        let mut postings: Vec<Vec<(u32, u32)>> = Vec::new();
        let mut lengths: Vec<u32> = Vec::with_capacity(texts.len());
        // Per document: the count of each term id, and the ids seen, in order.
        let mut counts: Vec<u32> = Vec::new();
        let mut seen: Vec<u32> = Vec::new();
        let mut term = String::new();
        for (d, text) in texts.iter().enumerate() {
            let mut len = 0u32;
            let mut tokens = analyzer.tokens(text.as_ref());
            while tokens.next_into(&mut term).is_some() {
                let id = match vocab.get(term.as_str()) {
                    Some(&id) => id,
                    None => {
                        let id = postings.len() as u32;
                        vocab.insert(term.clone(), id);
                        postings.push(Vec::new());
                        counts.push(0);
                        id
                    }
                };
                if counts[id as usize] == 0 {
                    seen.push(id);
                }
                counts[id as usize] += 1;
                len += 1;
            }
            lengths.push(len);
            // Each document adds one entry per term, in document order: the postings
            // stay sorted.
            for id in seen.drain(..) {
                postings[id as usize].push((d as u32, counts[id as usize]));
                counts[id as usize] = 0;
            }
        }
        let total: f64 = lengths.iter().map(|&l| f64::from(l)).sum();
        let avgdl = bm25::average_length(total, lengths.len() as u64);
        let norms = lengths
            .iter()
            .map(|&l| params.length_norm(l as f32, avgdl))
            .collect();
        Bm25Index {
            vocab,
            postings,
            norms,
            params,
        }
    }

    /// The BM25 score of every document for `query` (0 for documents sharing no term).
    /// Terms are summed in their order of first appearance in the query, so the scores
    /// do not depend on any hash order.
    fn scores(&self, query: &str, analyzer: &Analyzer) -> Vec<f32> {
        let mut terms: Vec<(u32, f32)> = Vec::new();
        for t in analyzer.terms(query) {
            let Some(&id) = self.vocab.get(&t) else {
                continue;
            };
            match terms.iter_mut().find(|(x, _)| *x == id) {
                Some((_, qtf)) => *qtf += 1.0,
                None => terms.push((id, 1.0)),
            }
        }
        let n = self.norms.len() as f32;
        let mut scores = vec![0.0f32; self.norms.len()];
        for &(id, qtf) in &terms {
            let list = &self.postings[id as usize];
            let w = self
                .params
                .term_weight(bm25::idf(n, list.len() as f32), qtf);
            for &(d, tf) in list {
                let d = d as usize;
                scores[d] += w * bm25::saturation(tf as f32, self.norms[d]);
            }
        }
        scores
    }

    /// Up to `k` documents not `excluded`, highest BM25 score for `query` first, equal
    /// scores in the order of a hash seeded by `tie`. Documents sharing a term with the
    /// query come first; documents sharing none fill the rest in that hash order.
    fn hardest(
        &self,
        query: &str,
        analyzer: &Analyzer,
        k: usize,
        excluded: impl Fn(usize) -> bool,
        tie: u64,
    ) -> Vec<usize> {
        if k == 0 {
            return Vec::new();
        }
        let scores = self.scores(query, analyzer);
        // Equal scores in the order of `mix`, a bijection of the document for a fixed
        // `tie`: no two keys are equal, so the order is total.
        let key = |d: usize| mix(tie, d as u64);
        let mut ranked: Vec<(f32, usize)> = scores
            .iter()
            .enumerate()
            .filter(|&(_, &s)| s > 0.0)
            .map(|(d, &s)| (s, d))
            .collect();
        let order = |a: &(f32, usize), b: &(f32, usize)| {
            b.0.total_cmp(&a.0).then_with(|| key(a.1).cmp(&key(b.1)))
        };
        // Sort only as much of the ranking as is walked: the best `m`, then the next
        // best, doubling, until `k` documents that are not excluded are found.
        let mut out = Vec::with_capacity(k);
        let (mut done, mut m) = (0, (2 * k + 16).min(ranked.len()));
        while done < ranked.len() && out.len() < k {
            if m < ranked.len() {
                ranked[done..].select_nth_unstable_by(m - done - 1, order);
            }
            ranked[done..m].sort_unstable_by(order);
            for &(_, d) in &ranked[done..m] {
                if !excluded(d) {
                    out.push(d);
                    if out.len() == k {
                        break;
                    }
                }
            }
            done = m;
            m = (2 * m).min(ranked.len());
        }
        if out.len() < k {
            let mut rest: Vec<(u64, usize)> = scores
                .iter()
                .enumerate()
                .filter(|&(d, &s)| s <= 0.0 && !excluded(d))
                .map(|(d, _)| (key(d), d))
                .collect();
            rest.sort_unstable();
            out.extend(rest.into_iter().take(k - out.len()).map(|(_, d)| d));
        }
        out
    }
}

/// A seeded hash of a question id: the tie order of a question's negatives does not
/// depend on which other questions are loaded.
fn text_hash(s: &str) -> u64 {
    s.bytes()
        .fold(0xCBF2_9CE4_8422_2325, |h, b| mix(h, u64::from(b)))
}

/// SplitMix64's finalizer of `a` combined with `b`: a seeded, well-mixed hash with no
/// state (the tie-break and fill order of negatives).
fn mix(a: u64, b: u64) -> u64 {
    neuralcore_core::rng::SplitMix64(a.wrapping_add(b.wrapping_mul(0x9E37_79B9_7F4A_7C15))).next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::time::Instant;
    use tempfile::TempDir;

    // -----------------------------------------------------------------------------------
    // Fixtures
    // -----------------------------------------------------------------------------------

    /// A SQuAD question: (question, answers; empty = unanswerable).
    type Q<'a> = (&'a str, &'a [&'a str]);
    /// A SQuAD article: (title, [(context, questions)]).
    type A<'a> = (&'a str, Vec<(&'a str, Vec<Q<'a>>)>);

    /// A SQuAD 2.0 file of `articles`.
    fn squad_json(articles: &[A]) -> String {
        let mut n = 0;
        let data: Vec<Value> = articles
            .iter()
            .map(|(title, paragraphs)| {
                let paragraphs: Vec<Value> = paragraphs
                    .iter()
                    .map(|(context, qs)| {
                        let qas: Vec<Value> = qs
                            .iter()
                            .map(|(question, answers)| {
                                n += 1;
                                let answers: Vec<Value> = answers
                                    .iter()
                                    .map(|a| {
                                        let start = context
                                            .find(a)
                                            .map_or(0, |b| context[..b].chars().count());
                                        serde_json::json!({"text": a, "answer_start": start})
                                    })
                                    .collect();
                                serde_json::json!({
                                    "id": format!("q{n}"),
                                    "question": question,
                                    "is_impossible": answers.is_empty(),
                                    "answers": answers,
                                })
                            })
                            .collect();
                        serde_json::json!({"context": context, "qas": qas})
                    })
                    .collect();
                serde_json::json!({"title": title, "paragraphs": paragraphs})
            })
            .collect();
        serde_json::json!({"version": "v2.0", "data": data}).to_string()
    }

    const NILE_0: &str = "The Nile is the longest river in Africa. It flows north through \
                          Egypt into the Mediterranean Sea.";
    const NILE_1: &str = "The Nile delta is fertile. Farmers along the Nile river grow \
                          cotton and wheat, and the Nile floods every summer.";
    const NILE_2: &str = "Ships cross the Mediterranean Sea to reach Egypt. Which sea the \
                          Nile flows into is taught in every school.";
    const NILE_3: &str = "The Amazon carries more water than any other river.";
    const NILE_4: &str = "Tourists from EGYPT rarely visit the penguins of Antarctica.";
    const NILE_5: &str = "Penguins cannot fly, but they swim well.";
    const DESERT_0: &str = "The Sahara is a hot desert in Africa.";
    const DESERT_1: &str = "The Gobi desert lies in Asia and is cold in winter.";

    fn squad_fixture(dir: &Path) -> PathBuf {
        let json = squad_json(&[
            (
                "Rivers_of_the_world",
                vec![
                    (
                        NILE_0,
                        vec![
                            (
                                "Which sea does the Nile flow into?",
                                &["Mediterranean Sea"][..],
                            ),
                            (
                                "Through which country does the Nile flow north?",
                                &["Egypt"],
                            ),
                        ],
                    ),
                    (
                        NILE_1,
                        vec![(
                            "What do farmers grow along the Nile?",
                            &["cotton and wheat"],
                        )],
                    ),
                    (NILE_2, vec![]),
                    (
                        NILE_3,
                        vec![("How long is the Amazon river in miles?", &[][..])],
                    ),
                    (NILE_4, vec![]),
                    (NILE_5, vec![]),
                ],
            ),
            (
                "Deserts",
                vec![
                    (DESERT_0, vec![]),
                    (DESERT_1, vec![("Where is the Gobi desert?", &["Asia"][..])]),
                ],
            ),
        ]);
        let path = dir.join("train-tiny.json");
        fs::write(&path, json).unwrap();
        path
    }

    fn beir_fixture(dir: &Path, extra_qrels: &str) -> PathBuf {
        let root = dir.join("scifact-mini");
        fs::create_dir_all(root.join("qrels")).unwrap();
        let corpus = [
            r#"{"_id": "d1", "title": "Vitamin D and bones", "text": "Vitamin D improves bone density in adults."}"#,
            r#"{"_id": "d2", "title": "Vitamin D deficiency.", "text": "Deficiency of vitamin D is common in winter."}"#,
            r#"{"_id": "d3", "title": "", "text": "Bone density declines with age."}"#,
            r#"{"_id": "d4", "title": "Coffee", "text": "Coffee consumption and sleep."}"#,
            r#"{"_id": 5, "text": "Exercise improves mood."}"#,
            r#"{"_id": "d6", "title": "", "text": "  "}"#,
            r#"{"_id": "d1", "title": "Copy", "text": "Vitamin D improves bone density."}"#,
        ];
        fs::write(root.join("corpus.jsonl"), corpus.join("\n") + "\n").unwrap();
        let queries = [
            r#"{"_id": "q1", "text": "Vitamin D improves bone density"}"#,
            r#"{"_id": "q2", "text": "Coffee disrupts sleep"}"#,
            r#"{"_id": "q3", "text": "Only in the test split"}"#,
            r#"{"_id": "q4", "text": "Vitamin D improves bone density"}"#,
        ];
        fs::write(root.join("queries.jsonl"), queries.join("\n") + "\n").unwrap();
        fs::write(
            root.join("qrels/train.tsv"),
            format!("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td4\t2\nq2\t5\t0\n{extra_qrels}"),
        )
        .unwrap();
        fs::write(
            root.join("qrels/test.tsv"),
            "query-id\tcorpus-id\tscore\nq3\td3\t1\n",
        )
        .unwrap();
        root
    }

    fn of<'a>(pairs: &'a [Pair], question: &str) -> Vec<&'a Pair> {
        pairs.iter().filter(|p| p.question == question).collect()
    }

    fn pair(question: &str, passage: &str, label: f32, source: &str) -> Pair {
        Pair {
            question: question.into(),
            passage: passage.into(),
            label,
            source: source.into(),
        }
    }

    // -----------------------------------------------------------------------------------
    // HotpotQA
    // -----------------------------------------------------------------------------------

    /// Two HotpotQA questions (original shape): the first with two supporting paragraphs
    /// and three distractors, the second whose only supporting fact names a title that
    /// is not among its paragraphs.
    fn hotpot_fixture(dir: &Path) -> PathBuf {
        let q = serde_json::json!([
            {
                "_id": "h1",
                "question": "Which river flows through the capital where the Louvre stands?",
                "answer": "Seine",
                "type": "bridge",
                "supporting_facts": [["Louvre", 0], ["Paris", 1]],
                "context": [
                    ["Rhine", ["The Rhine is a river of Europe.", " It flows north."]],
                    ["Louvre", ["The Louvre is a museum in Paris."]],
                    ["Tea", ["Tea is a drink."]],
                    ["Paris", ["Paris is the capital of France.", " The Seine river flows through it."]],
                    ["Museum", ["A museum keeps objects; the capital has many."]]
                ]
            },
            {
                "_id": "h2",
                "question": "Who wrote it?",
                "answer": "nobody",
                "type": "bridge",
                "supporting_facts": [["Missing", 0]],
                "context": [["Tea", ["Tea is a drink."]]]
            }
        ]);
        let path = dir.join("hotpot.json");
        fs::write(&path, q.to_string()).unwrap();
        path
    }

    #[test]
    fn hotpot_pairs_supporting_paragraphs_then_the_hardest_distractors() {
        let tmp = TempDir::new().unwrap();
        let path = hotpot_fixture(tmp.path());
        let pairs = hotpot_pairs(&path, None, 2, 7).unwrap();
        let got: Vec<(&str, f32)> = pairs.iter().map(|p| (p.source.as_str(), p.label)).collect();
        // Supporting in context order; then the two distractors sharing most with the
        // question ("river", "capital", "museum"), never Tea; h2 names no paragraph of
        // its own as supporting, so it gives nothing.
        assert_eq!(
            got[..2],
            [("hotpotqa:1:h1:Louvre", 1.0), ("hotpotqa:1:h1:Paris", 1.0)]
        );
        let negatives: HashSet<&str> = got[2..].iter().map(|(s, _)| *s).collect();
        assert_eq!(
            negatives,
            HashSet::from(["hotpotqa:1:h1:Rhine", "hotpotqa:1:h1:Museum"])
        );
        assert!(got[2..].iter().all(|(_, l)| *l == 0.0));
        assert_eq!(pairs.len(), 4);
        assert_eq!(pairs[0].passage, "The Louvre is a museum in Paris.");
        assert_eq!(
            pairs[1].passage,
            "Paris is the capital of France. The Seine river flows through it."
        );

        // More negatives than distractors: all three, the one sharing no term last.
        let all = hotpot_pairs(&path, None, 10, 7).unwrap();
        assert_eq!(all.len(), 5);
        assert_eq!(all[4].source, "hotpotqa:1:h1:Tea");
        // No negatives: positives only, which check_pairs refuses as one class.
        let only = hotpot_pairs(&path, None, 0, 7).unwrap();
        assert_eq!(only.len(), 2);
        assert!(check_pairs(&only).is_err());
        // Deterministic.
        assert_eq!(hotpot_pairs(&path, None, 2, 7).unwrap(), pairs);
    }

    #[test]
    fn hotpot_pairs_honour_the_question_range_and_refuse_bad_input() {
        let tmp = TempDir::new().unwrap();
        let path = hotpot_fixture(tmp.path());
        assert_eq!(hotpot_pairs(&path, Some((1, 1)), 2, 7).unwrap().len(), 4);
        assert!(hotpot_pairs(&path, Some((2, 2)), 2, 7).unwrap().is_empty());
        let e = hotpot_pairs(&path, Some((3, 4)), 2, 7).unwrap_err();
        assert!(matches!(e, EvalError::InvalidSelection { .. }), "{e}");
        assert!(e.to_string().contains("the file has 2 question(s)"), "{e}");

        let missing = tmp.path().join("none.json");
        assert!(matches!(
            hotpot_pairs(&missing, None, 2, 7).unwrap_err(),
            EvalError::MissingFile { .. }
        ));
        let bad = tmp.path().join("bad.json");
        fs::write(
            &bad,
            r#"[{"_id": "x", "answer": "a", "supporting_facts": [], "context": []}]"#,
        )
        .unwrap();
        let e = hotpot_pairs(&bad, None, 2, 7).unwrap_err();
        assert!(e.to_string().contains("question"), "{e}");
        fs::write(&bad, "[{").unwrap();
        assert!(hotpot_pairs(&bad, None, 2, 7).is_err());
    }

    // -----------------------------------------------------------------------------------
    // SQuAD
    // -----------------------------------------------------------------------------------

    #[test]
    fn squad_pairs_positives_hard_negatives_and_no_gold_in_negatives() {
        let tmp = TempDir::new().unwrap();
        let path = squad_fixture(tmp.path());
        let pairs = squad_pairs(&path, None, 2, 7).unwrap();

        // Answerable: own paragraph relevant, then the hardest paragraph without the
        // answer (NILE_2 shares most words but holds "Mediterranean Sea": never taken).
        let q = of(&pairs, "Which sea does the Nile flow into?");
        assert_eq!(q.len(), 3);
        assert_eq!((q[0].passage.as_str(), q[0].label), (NILE_0, 1.0));
        assert_eq!(q[0].source, "squad2-train:1:p0:q1");
        assert_eq!((q[1].passage.as_str(), q[1].label), (NILE_1, 0.0));
        assert_eq!(q[1].source, "squad2-train:1:p1:q1");
        assert_eq!(q[2].label, 0.0);
        assert!(![NILE_0, NILE_2].contains(&q[2].passage.as_str()));

        // "Egypt" is in NILE_2 and, upper-cased, in NILE_4: neither is a negative.
        let q = of(&pairs, "Through which country does the Nile flow north?");
        assert_eq!(q.len(), 3);
        assert_eq!(q[0].label, 1.0);
        for n in &q[1..] {
            assert_eq!(n.label, 0.0);
            assert!(![NILE_0, NILE_2, NILE_4].contains(&n.passage.as_str()));
        }
        assert_eq!(q[1].passage, NILE_1, "the hardest first");

        // Unanswerable: its own paragraph is not relevant, and gets negatives too.
        let q = of(&pairs, "How long is the Amazon river in miles?");
        assert_eq!(q.len(), 3);
        assert_eq!((q[0].passage.as_str(), q[0].label), (NILE_3, 0.0));
        assert!(q[1..].iter().all(|p| p.label == 0.0 && p.passage != NILE_3));
        // The two other paragraphs with "river" beat the rest.
        let hard: HashSet<&str> = q[1..].iter().map(|p| p.passage.as_str()).collect();
        assert_eq!(hard, HashSet::from([NILE_0, NILE_1]));

        // Negatives come from the same article only (Deserts has 2 paragraphs).
        let q = of(&pairs, "Where is the Gobi desert?");
        assert_eq!(q.len(), 2);
        assert_eq!((q[0].passage.as_str(), q[0].label), (DESERT_1, 1.0));
        assert_eq!((q[1].passage.as_str(), q[1].label), (DESERT_0, 0.0));
        assert_eq!(q[1].source, "squad2-train:2:p0:q5");

        // Every question once relevant-or-not on its own paragraph.
        assert_eq!(pairs.iter().filter(|p| p.label == 1.0).count(), 4);
        assert_eq!(check_pairs(&pairs).unwrap(), (4, pairs.len() - 4));
    }

    #[test]
    fn squad_negatives_never_hold_a_gold_answer_however_many_are_asked() {
        let tmp = TempDir::new().unwrap();
        let path = squad_fixture(tmp.path());
        let set = load_squad2(&path, None).unwrap();
        let pairs = squad_pairs(&path, None, 50, 1).unwrap();
        for q in &set.questions {
            let mine = of(&pairs, &q.question);
            let negatives = &mine[1..];
            // Each other paragraph at most once.
            let distinct: HashSet<&str> = negatives.iter().map(|p| p.passage.as_str()).collect();
            assert_eq!(distinct.len(), negatives.len(), "{}", q.question);
            for n in negatives {
                assert_eq!(n.label, 0.0);
                for g in &q.answers {
                    assert!(
                        !n.passage.to_lowercase().contains(&g.to_lowercase()),
                        "{:?} holds {g:?}",
                        n.passage
                    );
                }
            }
        }
        // Rivers has 6 paragraphs: "Which sea" loses its own and the two with its answer.
        assert_eq!(
            of(&pairs, "Which sea does the Nile flow into?").len(),
            1 + 4
        );
        assert_eq!(
            of(&pairs, "Through which country does the Nile flow north?").len(),
            1 + 3
        );
        assert_eq!(
            of(&pairs, "How long is the Amazon river in miles?").len(),
            1 + 5
        );
        // No negatives asked: one pair per question.
        assert_eq!(squad_pairs(&path, None, 0, 1).unwrap().len(), 5);
    }

    #[test]
    fn squad_pairs_are_deterministic_and_honour_the_article_range() {
        let tmp = TempDir::new().unwrap();
        let path = squad_fixture(tmp.path());
        for negatives in [1, 3, 50] {
            let a = squad_pairs(&path, None, negatives, 42).unwrap();
            let b = squad_pairs(&path, None, negatives, 42).unwrap();
            assert_eq!(a, b);
        }
        // The seed orders equal scores only: the BM25-ranked part does not change.
        let a = squad_pairs(&path, None, 1, 1).unwrap();
        let b = squad_pairs(&path, None, 1, 2).unwrap();
        assert_eq!(
            of(&a, "Which sea does the Nile flow into?"),
            of(&b, "Which sea does the Nile flow into?")
        );

        let second = squad_pairs(&path, Some((2, 2)), 3, 0).unwrap();
        assert_eq!(second.len(), 2);
        // A question's pairs do not depend on the other articles loaded.
        let all = squad_pairs(&path, None, 3, 0).unwrap();
        assert_eq!(&all[all.len() - 2..], &second[..]);
        let first = squad_pairs(&path, Some((1, 1)), 50, 9).unwrap();
        assert_eq!(
            &squad_pairs(&path, None, 50, 9).unwrap()[..first.len()],
            &first[..]
        );
        assert!(second
            .iter()
            .all(|p| p.source.starts_with("squad2-train:2:")));
        let err = squad_pairs(&path, Some((2, 3)), 3, 0).unwrap_err();
        assert!(matches!(err, EvalError::InvalidSelection { .. }), "{err}");
        let err = squad_pairs(&tmp.path().join("nope.json"), None, 3, 0).unwrap_err();
        assert!(matches!(err, EvalError::MissingFile { .. }), "{err}");
    }

    // -----------------------------------------------------------------------------------
    // BEIR
    // -----------------------------------------------------------------------------------

    #[test]
    fn beir_pairs_relevant_docs_and_bm25_negatives() {
        let tmp = TempDir::new().unwrap();
        let dir = beir_fixture(tmp.path(), "");
        let pairs = beir_pairs(&dir, "train", 2, 3).unwrap();

        let q = of(&pairs, "Vitamin D improves bone density");
        assert_eq!(q.len(), 3);
        assert_eq!(
            q[0],
            &pair(
                "Vitamin D improves bone density",
                "Vitamin D and bones. Vitamin D improves bone density in adults.",
                1.0,
                "scifact-mini-train:q1:d1"
            )
        );
        // The two documents sharing terms, hardest first, never the relevant one; a title
        // ending in "." is not doubled, a missing title leaves the text. The later copy
        // of d1 (the best match of all) is not a negative.
        let negs: Vec<&str> = q[1..].iter().map(|p| p.passage.as_str()).collect();
        assert_eq!(
            negs,
            [
                "Vitamin D deficiency. Deficiency of vitamin D is common in winter.",
                "Bone density declines with age."
            ]
        );
        assert_eq!(q[1].source, "scifact-mini-train:q1:d2");
        assert!(q[1..].iter().all(|p| p.label == 0.0));

        // Score 0 judgments are not relevant; too few lexical matches are filled by the
        // seed, never with the relevant or the empty document.
        let q = of(&pairs, "Coffee disrupts sleep");
        assert_eq!(q.len(), 3);
        assert_eq!(
            (q[0].passage.as_str(), q[0].label),
            ("Coffee. Coffee consumption and sleep.", 1.0)
        );
        for n in &q[1..] {
            assert_eq!(n.label, 0.0);
            assert!(!n.passage.starts_with("Coffee") && !n.passage.trim().is_empty());
        }
        // The test-split query is not there.
        assert!(of(&pairs, "Only in the test split").is_empty());
        assert_eq!(pairs.len(), 6);

        // Deterministic; all documents asked: all but the relevant, empty and repeated ones.
        assert_eq!(pairs, beir_pairs(&dir, "train", 2, 3).unwrap());
        let all = beir_pairs(&dir, "train", 100, 3).unwrap();
        assert_eq!(of(&all, "Coffee disrupts sleep").len(), 1 + 4);
        assert_eq!(
            beir_pairs(&dir, "test", 0, 3).unwrap(),
            vec![pair(
                "Only in the test split",
                "Bone density declines with age.",
                1.0,
                "scifact-mini-test:q3:d3"
            )]
        );
    }

    #[test]
    fn beir_queries_of_the_same_text_share_their_relevant_documents() {
        let tmp = TempDir::new().unwrap();
        let dir = beir_fixture(tmp.path(), "q4\td2\t1\n");
        let pairs = beir_pairs(&dir, "train", 10, 0).unwrap();
        let q = of(&pairs, "Vitamin D improves bone density");
        let labels: HashMap<&str, HashSet<u32>> = q.iter().fold(HashMap::new(), |mut m, p| {
            m.entry(p.passage.as_str())
                .or_default()
                .insert(p.label as u32);
            m
        });
        // d1 is relevant to q1 and d2 to q4: neither is a negative of the other query.
        assert!(labels.values().all(|l| l.len() == 1), "{labels:?}");
        assert_eq!(q.iter().filter(|p| p.label == 1.0).count(), 2);
        assert_eq!(q[0].source, "scifact-mini-train:q1:d1");
        assert!(q
            .iter()
            .any(|p| p.source == "scifact-mini-train:q4:d2" && p.label == 1.0));
        // 7 documents: 2 relevant, 1 empty, 1 repeated id, so 3 negatives each.
        assert_eq!(q.len(), 2 * (1 + 3));
    }

    #[test]
    fn beir_pairs_bad_input_errors() {
        let tmp = TempDir::new().unwrap();
        let dir = beir_fixture(tmp.path(), "q1\td9\t1\n");
        let err = beir_pairs(&dir, "train", 2, 0).unwrap_err().to_string();
        assert!(err.contains("d9") && err.contains("query q1"), "{err}");

        let dir = beir_fixture(&tmp.path().join("b"), "q1\td6\t1\n");
        let err = beir_pairs(&dir, "train", 2, 0).unwrap_err().to_string();
        assert!(
            err.contains("d6") && err.contains("neither title nor text"),
            "{err}"
        );

        let err = beir_pairs(&dir, "dev", 2, 0).unwrap_err().to_string();
        assert!(err.contains("unknown split `dev`"), "{err}");

        let corpus = dir.join("corpus.jsonl");
        let text = fs::read_to_string(&corpus).unwrap();
        fs::write(
            &corpus,
            text.replacen("\"text\": \"Coffee", "\"txt\": \"Coffee", 1),
        )
        .unwrap();
        let err = beir_pairs(&dir, "train", 2, 0).unwrap_err();
        assert!(
            matches!(&err, EvalError::MalformedJson { line: 4, message, .. }
                if message.contains("`text`") && message.contains("d4")),
            "{err}"
        );
    }

    #[test]
    fn index_scores_are_the_core_bm25() {
        let a = Analyzer::english();
        let docs = [
            "Vitamin D improves bone density; vitamin D is cheap.",
            "Bone density declines with age.",
            "Coffee and sleep.",
            "",
        ];
        let index = Bm25Index::build(&docs, a);
        let query = "vitamin D and bone density, bone";
        let got = index.scores(query, a);
        // Brute force with Bm25Params::score over the analyzer's terms.
        let terms: Vec<Vec<String>> = docs.iter().map(|d| a.terms(d)).collect();
        let avgdl = bm25::average_length(
            terms.iter().map(|t| t.len() as f64).sum(),
            docs.len() as u64,
        );
        let q = a.terms(query);
        let mut distinct: Vec<&String> = Vec::new();
        for t in &q {
            if !distinct.contains(&t) {
                distinct.push(t);
            }
        }
        let p = Bm25Params::default();
        for (d, dt) in terms.iter().enumerate() {
            let mut want = 0.0f32;
            for t in &distinct {
                let tf = dt.iter().filter(|x| x == t).count() as f32;
                let df = terms.iter().filter(|x| x.contains(t)).count() as f32;
                let qtf = q.iter().filter(|x| x == t).count() as f32;
                if tf > 0.0 {
                    want += p.score(bm25::idf(4.0, df), qtf, tf, dt.len() as f32, avgdl);
                }
            }
            assert!(
                (got[d] - want).abs() <= 1e-5 * want.max(1.0),
                "doc {d}: {} vs {want}",
                got[d]
            );
        }
        assert!(got[0] > got[1] && got[1] > 0.0 && got[2] == 0.0 && got[3] == 0.0);
        // Hardest first, exclusions honoured, zero-score fill by the seed.
        assert_eq!(index.hardest(query, a, 2, |_| false, 0), [0, 1]);
        let two = index.hardest(query, a, 2, |d| d == 0, 0);
        assert!(
            two.len() == 2 && two[0] == 1 && [2, 3].contains(&two[1]),
            "{two:?}"
        );
        let all = index.hardest(query, a, 10, |d| d == 1, 5);
        assert_eq!(all.len(), 3);
        assert_eq!(all[0], 0);
        assert!(index.hardest(query, a, 0, |_| false, 0).is_empty());
    }

    // -----------------------------------------------------------------------------------
    // Reading and checking
    // -----------------------------------------------------------------------------------

    #[test]
    fn read_pairs_round_trips_and_names_the_line() {
        let tmp = TempDir::new().unwrap();
        let path = squad_fixture(tmp.path());
        let pairs = squad_pairs(&path, None, 2, 0).unwrap();
        let file = tmp.path().join("pairs.jsonl");
        let mut text: String = pairs
            .iter()
            .map(|p| serde_json::to_string(p).unwrap() + "\n")
            .collect();
        // Blank lines, CRLF, a missing source and an unknown field are fine.
        text.push_str(
            "\r\n{\"question\": \"q\", \"passage\": \"p\", \"label\": 0, \"by\": \"me\"}\r\n",
        );
        fs::write(&file, &text).unwrap();
        let read = read_pairs(&file).unwrap();
        assert_eq!(&read[..pairs.len()], &pairs[..]);
        assert_eq!(read.last().unwrap(), &pair("q", "p", 0.0, ""));

        let bad = |content: &str| {
            fs::write(&file, content).unwrap();
            read_pairs(&file).unwrap_err()
        };
        let good = r#"{"question": "q", "passage": "p", "label": 1}"#;
        let line_of = |e: &EvalError| match e {
            EvalError::MalformedJson { line, .. } => *line,
            other => panic!("not MalformedJson: {other}"),
        };
        let e = bad(&format!("{good}\n\n{{\"question\": \"q\", \"passage\n"));
        assert_eq!(line_of(&e), 3, "{e}");
        assert!(e.to_string().contains("pairs.jsonl:3:"), "{e}");
        let e = bad(&format!(
            "{good}\n{{\"question\": \"q\", \"passage\": \"p\"}}\n"
        ));
        assert_eq!(line_of(&e), 2);
        assert!(e.to_string().contains("missing field `label`"), "{e}");
        let e = bad(&format!("{good}\n{{\"question\": \"q\", \"label\": 1}}\n"));
        assert!(e.to_string().contains("missing field `passage`"), "{e}");
        let e = bad(&format!(
            "{good}\n{good}\n{{\"question\": \"q\", \"passage\": \" \\n\", \"label\": 1, \"source\": \"memory:7\"}}\n"
        ));
        assert_eq!(line_of(&e), 3);
        assert!(
            e.to_string().contains("passage is only whitespace")
                && e.to_string().contains("memory:7"),
            "{e}"
        );
        let e = bad(r#"{"question": "q", "passage": "p", "label": 0.5}"#);
        assert!(e.to_string().contains("label 0.5 is neither 0"), "{e}");
        let e = bad(r#"{"question": "q", "passage": "p", "label": "yes"}"#);
        assert_eq!(line_of(&e), 1);
        let e = read_pairs(&tmp.path().join("missing.jsonl")).unwrap_err();
        assert!(matches!(e, EvalError::MissingFile { .. }), "{e}");
    }

    #[test]
    fn check_pairs_counts_and_rejects_bad_sets() {
        let ok = [
            pair("q", "a", 1.0, "s:1"),
            pair("q", "b", 0.0, "s:2"),
            pair("r", "c", 0.0, ""),
        ];
        assert_eq!(check_pairs(&ok).unwrap(), (1, 2));

        let e = check_pairs(&[]).unwrap_err().to_string();
        assert!(e.contains("no pairs"), "{e}");

        let mut bad = ok.to_vec();
        bad[1].question = " \t".into();
        let e = check_pairs(&bad).unwrap_err().to_string();
        assert!(
            e.contains("pair 2 of 3")
                && e.contains("s:2")
                && e.contains("question is only whitespace"),
            "{e}"
        );
        let mut bad = ok.to_vec();
        bad[2].passage = String::new();
        let e = check_pairs(&bad).unwrap_err().to_string();
        assert!(
            e.contains("pair 3 of 3") && e.contains("passage is empty"),
            "{e}"
        );
        let mut bad = ok.to_vec();
        bad[0].label = 2.0;
        let e = check_pairs(&bad).unwrap_err().to_string();
        assert!(
            e.contains("pair 1 of 3") && e.contains("label 2 is neither"),
            "{e}"
        );
        bad[0].label = f32::NAN;
        assert!(check_pairs(&bad).is_err());

        let all_pos = vec![pair("q", "a", 1.0, ""); 3];
        let e = check_pairs(&all_pos).unwrap_err().to_string();
        assert!(
            e.contains("all 3 pairs are relevant") && e.contains("needs both"),
            "{e}"
        );
        let all_neg = vec![pair("q", "a", 0.0, ""); 2];
        let e = check_pairs(&all_neg).unwrap_err().to_string();
        assert!(e.contains("all 2 pairs are not relevant"), "{e}");
    }

    // -----------------------------------------------------------------------------------
    // Real data (../shared/data): skipped with a message when it is missing, as
    // ../shared/data/README.md asks (CI has it).
    // -----------------------------------------------------------------------------------

    fn shared_data(rel: &str) -> Option<PathBuf> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data")
            .join(rel);
        if !path.exists() {
            eprintln!(
                "skipping: training data not found at {} (see ../shared/data/README.md)",
                path.display()
            );
            return None;
        }
        Some(path)
    }

    #[test]
    fn real_squad2_train_articles_1_10() {
        let Some(path) = shared_data("squad2-train/train-v2.0-articles-1-10.json") else {
            return;
        };
        let negatives = 3;
        let start = Instant::now();
        let pairs = squad_pairs(&path, None, negatives, 0).unwrap();
        let took = start.elapsed();
        let set = load_squad2(&path, None).unwrap();
        assert_eq!(set.questions.len(), 4719);
        assert_eq!(set.questions.len() - set.answerable(), 348);

        let (pos, neg) = check_pairs(&pairs).unwrap();
        assert_eq!(pos, 4371);
        let bm25_negatives = neg - 348;
        assert!(bm25_negatives <= negatives * 4719);
        assert!(
            bm25_negatives >= negatives * 4719 * 95 / 100,
            "{bm25_negatives}"
        );
        // No negative holds a gold answer of its question.
        let answers: HashMap<&str, &[String]> = set
            .questions
            .iter()
            .map(|q| (q.id.as_str(), q.answers.as_slice()))
            .collect();
        for p in pairs.iter().filter(|p| p.label == 0.0) {
            let qid = p.source.rsplit(':').next().unwrap();
            for g in answers[qid] {
                assert!(
                    !p.passage.to_lowercase().contains(&g.to_lowercase()),
                    "{}",
                    p.source
                );
            }
        }
        assert!(pairs.iter().all(|p| p.source.starts_with("squad2-train:")));
        assert_eq!(pairs, squad_pairs(&path, None, negatives, 0).unwrap());
        println!(
            "squad2-train articles 1-10, {negatives} negatives: {} pairs ({pos} relevant, {neg} \
             not: 348 unanswerable own paragraphs + {bm25_negatives} BM25 negatives) in {:.2} s",
            pairs.len(),
            took.as_secs_f64()
        );
    }

    #[test]
    fn real_beir_scifact_train() {
        let Some(dir) = shared_data("beir/scifact") else {
            return;
        };
        let negatives = 3;
        let start = Instant::now();
        let pairs = beir_pairs(&dir, "train", negatives, 0).unwrap();
        let took = start.elapsed();
        let (pos, neg) = check_pairs(&pairs).unwrap();
        let queries: HashSet<&str> = pairs
            .iter()
            .map(|p| p.source.split(':').nth(1).unwrap())
            .collect();
        assert_eq!(queries.len(), 809);
        assert_eq!(pos, 919);
        assert_eq!(neg, 809 * negatives);
        assert!(pairs.iter().all(|p| p.source.starts_with("scifact-train:")));
        // The index is a sound BM25: nDCG@10 on the test split within the published
        // BM25 range for SciFact (0.665-0.690; see ../shared/data/README.md).
        let test = BeirDataset::open(&dir, "test").unwrap();
        let corpus = read_corpus(&test.corpus_path).unwrap();
        let texts: Vec<String> = corpus
            .iter()
            .map(|d| format!("{} {}", d.title, d.text))
            .collect();
        let index = Bm25Index::build(&texts, Analyzer::english());
        let ndcg: f64 = test
            .queries
            .iter()
            .map(|q| {
                let ranked: Vec<String> = index
                    .hardest(&q.text, Analyzer::english(), 10, |_| false, 0)
                    .into_iter()
                    .map(|d| corpus[d].id.clone())
                    .collect();
                crate::metrics::ndcg_at_k(&ranked, &test.qrels[&q.id], 10)
            })
            .sum::<f64>()
            / test.queries.len() as f64;
        println!("scifact test, this BM25 index: nDCG@10 {ndcg:.4}");
        assert!((0.64..0.72).contains(&ndcg), "nDCG@10 {ndcg}");
        // A negative is never one of its query's relevant documents.
        let relevant: HashSet<(&str, &str)> = pairs
            .iter()
            .filter(|p| p.label == 1.0)
            .map(|p| (p.question.as_str(), p.passage.as_str()))
            .collect();
        assert!(pairs
            .iter()
            .filter(|p| p.label == 0.0)
            .all(|p| !relevant.contains(&(p.question.as_str(), p.passage.as_str()))));
        println!(
            "scifact train, {negatives} negatives: {} pairs ({pos} relevant, {neg} BM25 \
             negatives) for {} queries over 5,183 documents in {:.2} s",
            pairs.len(),
            queries.len(),
            took.as_secs_f64()
        );
    }
}
