//! Loading of datasets in the BEIR folder layout.
//!
//! A BEIR dataset folder looks like this:
//!
//! ```text
//! <dir>/corpus.jsonl      {"_id": "...", "title": "...", "text": "..."} per line
//! <dir>/queries.jsonl     {"_id": "...", "text": "...", ...} per line
//! <dir>/qrels/<split>.tsv query-id <TAB> corpus-id <TAB> score, after a header line
//! ```
//!
//! [`BeirDataset::open`] reads the queries and one split of qrels. The corpus is not read
//! (it can be large and the caller ingests it its own way); its path is checked and exposed
//! as [`BeirDataset::corpus_path`].

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::error::EvalError;
use crate::json::{json_kind, require_file, sample};

/// Relevance judgments: query id → (corpus id → graded relevance score).
///
/// Only judgments with a score > 0 are kept, so every entry is a relevant document and the
/// score is its graded gain for nDCG.
pub type Qrels = HashMap<String, HashMap<String, u32>>;

/// One query of a BEIR dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Query {
    /// The query id (`_id`). Numeric ids in the JSON are converted to their decimal text.
    pub id: String,
    /// The query text.
    pub text: String,
}

/// A BEIR dataset with one split of relevance judgments loaded.
#[derive(Debug, Clone)]
pub struct BeirDataset {
    /// The dataset folder.
    pub dir: PathBuf,
    /// The split whose qrels were loaded (e.g. `test`).
    pub split: String,
    /// Path of `corpus.jsonl` (checked to exist, not read).
    pub corpus_path: PathBuf,
    /// The queries that have at least one relevant (score > 0) judgment in the split, in
    /// the order in which they appear in `queries.jsonl`.
    pub queries: Vec<Query>,
    /// The relevant judgments of exactly the queries in [`BeirDataset::queries`]: every
    /// returned query has an entry, and every entry has at least one document.
    pub qrels: Qrels,
    /// Non-fatal problems found while loading (qrels for queries missing from
    /// `queries.jsonl`, duplicate query ids, duplicate judgments), one message each.
    pub warnings: Vec<String>,
}

impl BeirDataset {
    /// Opens the BEIR folder `dir` and loads its queries and the qrels of `split`
    /// (`qrels/<split>.tsv`).
    ///
    /// Loading rules:
    /// * `queries.jsonl`: one JSON object per line with a string or numeric `_id` and a
    ///   string `text`; other fields are ignored, blank lines are skipped. A repeated id
    ///   keeps its first occurrence and adds a warning.
    /// * `qrels/<split>.tsv`: exactly three tab-separated fields per line
    ///   (`query-id`, `corpus-id`, integer `score`); fields are trimmed and blank lines
    ///   skipped. The first line is the header and is skipped when its score field is not an
    ///   integer (so a header-less file loses no judgment). Judgments with score ≤ 0 are
    ///   dropped. A repeated (query, document) pair keeps the last score and adds a warning.
    /// * Queries without any relevant judgment are left out; qrels for query ids missing
    ///   from `queries.jsonl` are left out and reported in [`BeirDataset::warnings`].
    ///
    /// # Errors
    /// [`EvalError::MissingDir`] / [`EvalError::MissingFile`] if the folder, `qrels/`,
    /// `corpus.jsonl` or `queries.jsonl` is missing; [`EvalError::UnknownSplit`] (listing
    /// the existing splits) if `qrels/<split>.tsv` is missing;
    /// [`EvalError::MalformedJson`] / [`EvalError::MalformedTsv`] with file and line for a
    /// bad line; [`EvalError::Io`] if a file cannot be read.
    pub fn open(dir: &Path, split: &str) -> Result<BeirDataset, EvalError> {
        if !dir.is_dir() {
            return Err(EvalError::MissingDir {
                path: dir.to_path_buf(),
            });
        }
        let corpus_path = dir.join("corpus.jsonl");
        require_file(&corpus_path)?;
        let queries_path = dir.join("queries.jsonl");
        require_file(&queries_path)?;
        let qrels_path = dir.join("qrels").join(format!("{split}.tsv"));
        if !qrels_path.is_file() {
            // Reports a missing qrels/ folder as MissingDir before listing splits.
            let available = available_splits(dir)?;
            return Err(EvalError::UnknownSplit {
                split: split.to_string(),
                path: qrels_path,
                available,
            });
        }

        let mut warnings = Vec::new();
        let all_queries = read_queries(&queries_path, &mut warnings)?;
        let mut qrels = read_qrels(&qrels_path, &mut warnings)?;

        let queries: Vec<Query> = all_queries
            .into_iter()
            .filter(|q| qrels.contains_key(&q.id))
            .collect();
        let kept: HashSet<&str> = queries.iter().map(|q| q.id.as_str()).collect();
        let mut missing: Vec<String> = qrels
            .keys()
            .filter(|id| !kept.contains(id.as_str()))
            .cloned()
            .collect();
        if !missing.is_empty() {
            missing.sort();
            for id in &missing {
                qrels.remove(id);
            }
            warnings.push(format!(
                "{}: {} {} with relevant judgments missing from {} (skipped): {}",
                qrels_path.display(),
                missing.len(),
                if missing.len() == 1 {
                    "query"
                } else {
                    "queries"
                },
                queries_path.display(),
                sample(&missing),
            ));
        }

        Ok(BeirDataset {
            dir: dir.to_path_buf(),
            split: split.to_string(),
            corpus_path,
            queries,
            qrels,
            warnings,
        })
    }

    /// The relevant judgments of query `query_id`, if it is part of the dataset.
    pub fn qrels_for(&self, query_id: &str) -> Option<&HashMap<String, u32>> {
        self.qrels.get(query_id)
    }
}

/// Lists the splits of the BEIR folder `dir`: the stems of the `*.tsv` files in
/// `dir/qrels/`, sorted.
///
/// # Errors
/// [`EvalError::MissingDir`] if `dir/qrels` is not a folder, [`EvalError::Io`] if it
/// cannot be listed.
pub fn available_splits(dir: &Path) -> Result<Vec<String>, EvalError> {
    let qrels_dir = dir.join("qrels");
    if !qrels_dir.is_dir() {
        return Err(EvalError::MissingDir { path: qrels_dir });
    }
    let io_err = |source| EvalError::Io {
        path: qrels_dir.clone(),
        source,
    };
    let mut splits = Vec::new();
    for entry in std::fs::read_dir(&qrels_dir).map_err(io_err)? {
        let path = entry.map_err(io_err)?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "tsv") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                splits.push(stem.to_string());
            }
        }
    }
    splits.sort();
    Ok(splits)
}

/// A BEIR record's `_id` (a string, or a number written as one).
pub(crate) fn record_id(obj: &serde_json::Map<String, Value>) -> Result<String, String> {
    match obj.get("_id") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        Some(other) => Err(format!(
            "`_id` must be a string or a number, found {}",
            json_kind(other)
        )),
        None => Err("missing field `_id`".to_string()),
    }
}

/// Calls `f(line_number, line)` for every non-blank line of `path` (1-based numbers, a
/// leading UTF-8 BOM and trailing `\r` removed).
pub(crate) fn for_each_line(
    path: &Path,
    mut f: impl FnMut(usize, &str) -> Result<(), EvalError>,
) -> Result<(), EvalError> {
    let file = File::open(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    for (idx, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| EvalError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut line = line.as_str();
        if idx == 0 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        f(idx + 1, line)?;
    }
    Ok(())
}

fn read_queries(path: &Path, warnings: &mut Vec<String>) -> Result<Vec<Query>, EvalError> {
    let mut queries = Vec::new();
    let mut seen = HashSet::new();
    let mut duplicates = Vec::new();
    for_each_line(path, |line_no, line| {
        let bad = |message: String| EvalError::MalformedJson {
            path: path.to_path_buf(),
            line: line_no,
            message,
        };
        let value: Value = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let Value::Object(obj) = value else {
            return Err(bad("expected a JSON object".to_string()));
        };
        let id = record_id(&obj).map_err(bad)?;
        let text = match obj.get("text") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => {
                return Err(bad(format!(
                    "`text` must be a string, found {}",
                    json_kind(other)
                )))
            }
            None => return Err(bad(format!("query `{id}` has no field `text`"))),
        };
        if seen.insert(id.clone()) {
            queries.push(Query { id, text });
        } else {
            duplicates.push(id);
        }
        Ok(())
    })?;
    if !duplicates.is_empty() {
        warnings.push(format!(
            "{}: {} duplicate query id(s), first occurrence kept: {}",
            path.display(),
            duplicates.len(),
            sample(&duplicates)
        ));
    }
    Ok(queries)
}

fn read_qrels(path: &Path, warnings: &mut Vec<String>) -> Result<Qrels, EvalError> {
    let mut qrels: Qrels = HashMap::new();
    // Every judgment seen (including score <= 0), to detect repeated pairs.
    let mut seen: HashSet<(String, String)> = HashSet::new();
    let mut duplicates = 0usize;
    let mut first = true;
    for_each_line(path, |line_no, line| {
        let is_first = std::mem::take(&mut first);
        let bad = |message: String| EvalError::MalformedTsv {
            path: path.to_path_buf(),
            line: line_no,
            message,
        };
        let fields: Vec<&str> = line.split('\t').map(str::trim).collect();
        if fields.len() != 3 {
            return Err(bad(format!(
                "expected 3 tab-separated fields (query-id, corpus-id, score), found {}",
                fields.len()
            )));
        }
        let (qid, did, score) = (fields[0], fields[1], fields[2]);
        let score: i64 = match score.parse() {
            Ok(s) => s,
            // The header line ("query-id corpus-id score").
            Err(_) if is_first => return Ok(()),
            Err(_) => return Err(bad(format!("score `{score}` is not an integer"))),
        };
        if qid.is_empty() || did.is_empty() {
            return Err(bad("empty query-id or corpus-id".to_string()));
        }
        let score = u32::try_from(score.max(0))
            .map_err(|_| bad(format!("score {score} is out of range")))?;
        if !seen.insert((qid.to_string(), did.to_string())) {
            duplicates += 1;
        }
        if score > 0 {
            qrels
                .entry(qid.to_string())
                .or_default()
                .insert(did.to_string(), score);
        } else if let Some(docs) = qrels.get_mut(qid) {
            // A later non-positive judgment overrides an earlier positive one.
            docs.remove(did);
        }
        Ok(())
    })?;
    qrels.retain(|_, docs| !docs.is_empty());
    if duplicates > 0 {
        warnings.push(format!(
            "{}: {duplicates} repeated (query-id, corpus-id) pair(s), last score kept",
            path.display()
        ));
    }
    Ok(qrels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use tempfile::TempDir;

    const CORPUS: &str = r#"{"_id": "d1", "title": "t", "text": "x"}
"#;
    const QUERIES: &str = r#"{"_id": "q1", "text": "first query", "metadata": {}}
{"_id": 2, "text": "numeric id"}
{"_id": "q3", "text": "no relevant docs in split"}

{"_id": "q4", "text": "only zero scores"}
"#;
    const QRELS_TEST: &str = "query-id\tcorpus-id\tscore\n\
        q1\td1\t1\n\
        q1\td2\t2\n\
        2\td3\t1\n\
        q4\td1\t0\n";

    /// Writes a BEIR folder with the given file contents (None = file absent).
    fn make(corpus: Option<&str>, queries: Option<&str>, qrels: &[(&str, &str)]) -> TempDir {
        let tmp = TempDir::new().unwrap();
        if let Some(c) = corpus {
            fs::write(tmp.path().join("corpus.jsonl"), c).unwrap();
        }
        if let Some(q) = queries {
            fs::write(tmp.path().join("queries.jsonl"), q).unwrap();
        }
        if !qrels.is_empty() {
            fs::create_dir(tmp.path().join("qrels")).unwrap();
            for (split, body) in qrels {
                fs::write(tmp.path().join("qrels").join(format!("{split}.tsv")), body).unwrap();
            }
        }
        tmp
    }

    fn valid() -> TempDir {
        make(
            Some(CORPUS),
            Some(QUERIES),
            &[
                ("test", QRELS_TEST),
                ("dev", "query-id\tcorpus-id\tscore\n"),
            ],
        )
    }

    #[test]
    fn loads_valid_dataset() {
        let tmp = valid();
        let ds = BeirDataset::open(tmp.path(), "test").unwrap();
        assert_eq!(ds.split, "test");
        assert_eq!(ds.corpus_path, tmp.path().join("corpus.jsonl"));
        assert_eq!(
            ds.queries,
            vec![
                Query {
                    id: "q1".into(),
                    text: "first query".into()
                },
                Query {
                    id: "2".into(),
                    text: "numeric id".into()
                },
            ]
        );
        assert_eq!(ds.qrels.len(), 2);
        let q1 = ds.qrels_for("q1").unwrap();
        assert_eq!(q1.get("d1"), Some(&1));
        assert_eq!(q1.get("d2"), Some(&2));
        assert_eq!(ds.qrels_for("2").unwrap().get("d3"), Some(&1));
        assert!(ds.qrels_for("q3").is_none());
        assert!(ds.qrels_for("q4").is_none(), "score 0 is not relevant");
        assert!(ds.warnings.is_empty(), "{:?}", ds.warnings);
    }

    #[test]
    fn query_order_follows_queries_file() {
        let queries = "{\"_id\": \"b\", \"text\": \"B\"}\n{\"_id\": \"a\", \"text\": \"A\"}\n\
                       {\"_id\": \"c\", \"text\": \"C\"}\n";
        let qrels = "query-id\tcorpus-id\tscore\nc\td\t1\na\td\t1\nb\td\t1\n";
        let tmp = make(Some(CORPUS), Some(queries), &[("test", qrels)]);
        let ds = BeirDataset::open(tmp.path(), "test").unwrap();
        let ids: Vec<&str> = ds.queries.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["b", "a", "c"]);
    }

    #[test]
    fn available_splits_are_sorted_tsv_stems() {
        let tmp = valid();
        fs::write(tmp.path().join("qrels").join("notes.txt"), "x").unwrap();
        assert_eq!(available_splits(tmp.path()).unwrap(), ["dev", "test"]);
    }

    #[test]
    fn header_less_qrels_keep_first_line_and_crlf_is_accepted() {
        let qrels = "q1\td1\t1\r\nq1\td2\t3\r\n";
        let tmp = make(Some(CORPUS), Some(QUERIES), &[("test", qrels)]);
        let ds = BeirDataset::open(tmp.path(), "test").unwrap();
        let q1 = ds.qrels_for("q1").unwrap();
        assert_eq!(q1.len(), 2);
        assert_eq!(q1["d2"], 3);
    }

    #[test]
    fn missing_folder() {
        let tmp = TempDir::new().unwrap();
        let dir = tmp.path().join("nope");
        let err = BeirDataset::open(&dir, "test").unwrap_err();
        assert!(
            matches!(&err, EvalError::MissingDir { path } if *path == dir),
            "{err}"
        );
        assert!(err.to_string().contains("nope"));
    }

    #[test]
    fn missing_corpus_file() {
        let tmp = make(None, Some(QUERIES), &[("test", QRELS_TEST)]);
        let err = BeirDataset::open(tmp.path(), "test").unwrap_err();
        assert!(
            matches!(&err, EvalError::MissingFile { path } if path.ends_with("corpus.jsonl")),
            "{err}"
        );
        assert!(err.to_string().contains("corpus.jsonl"));
    }

    #[test]
    fn missing_queries_file() {
        let tmp = make(Some(CORPUS), None, &[("test", QRELS_TEST)]);
        let err = BeirDataset::open(tmp.path(), "test").unwrap_err();
        assert!(
            matches!(&err, EvalError::MissingFile { path } if path.ends_with("queries.jsonl")),
            "{err}"
        );
    }

    #[test]
    fn missing_qrels_folder() {
        let tmp = make(Some(CORPUS), Some(QUERIES), &[]);
        let err = BeirDataset::open(tmp.path(), "test").unwrap_err();
        assert!(
            matches!(&err, EvalError::MissingDir { path } if path.ends_with("qrels")),
            "{err}"
        );
    }

    #[test]
    fn unknown_split_lists_existing_ones() {
        let tmp = valid();
        let err = BeirDataset::open(tmp.path(), "train").unwrap_err();
        match &err {
            EvalError::UnknownSplit {
                split,
                path,
                available,
            } => {
                assert_eq!(split, "train");
                assert!(path.ends_with("qrels/train.tsv"));
                assert_eq!(available, &["dev", "test"]);
            }
            other => panic!("unexpected error {other}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("train.tsv"), "{msg}");
        assert!(msg.contains("available splits: dev, test"), "{msg}");
    }

    fn json_error(queries: &str) -> (usize, String) {
        let tmp = make(Some(CORPUS), Some(queries), &[("test", QRELS_TEST)]);
        match BeirDataset::open(tmp.path(), "test").unwrap_err() {
            err @ EvalError::MalformedJson { .. } => {
                let msg = err.to_string();
                let EvalError::MalformedJson { path, line, .. } = err else {
                    unreachable!()
                };
                assert!(path.ends_with("queries.jsonl"));
                assert!(msg.contains(&format!("queries.jsonl:{line}:")), "{msg}");
                (line, msg)
            }
            other => panic!("expected MalformedJson, got {other}"),
        }
    }

    #[test]
    fn malformed_json_line_reports_file_and_line() {
        let (line, _) =
            json_error("{\"_id\": \"q1\", \"text\": \"ok\"}\n\n{\"_id\": \"q2\", \"text\": \n");
        assert_eq!(line, 3, "blank lines still count");
    }

    #[test]
    fn json_line_without_id_or_text_or_with_bad_types() {
        let (line, msg) = json_error("{\"text\": \"no id\"}\n");
        assert_eq!(line, 1);
        assert!(msg.contains("missing field `_id`"), "{msg}");

        let (_, msg) = json_error("{\"_id\": \"q1\"}\n");
        assert!(msg.contains("no field `text`"), "{msg}");

        let (_, msg) = json_error("{\"_id\": [1], \"text\": \"t\"}\n");
        assert!(msg.contains("`_id` must be a string or a number"), "{msg}");

        let (_, msg) = json_error("[\"not\", \"an object\"]\n");
        assert!(msg.contains("expected a JSON object"), "{msg}");
    }

    fn tsv_error(qrels: &str) -> (usize, String) {
        let tmp = make(Some(CORPUS), Some(QUERIES), &[("test", qrels)]);
        match BeirDataset::open(tmp.path(), "test").unwrap_err() {
            EvalError::MalformedTsv {
                path,
                line,
                message,
            } => {
                assert!(path.ends_with("qrels/test.tsv"));
                (line, message)
            }
            other => panic!("expected MalformedTsv, got {other}"),
        }
    }

    #[test]
    fn tsv_wrong_field_count() {
        let (line, msg) = tsv_error("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1 d2 1\n");
        assert_eq!(line, 3);
        assert!(msg.contains("expected 3 tab-separated fields"), "{msg}");
        assert!(msg.contains("found 1"), "{msg}");

        let (line, msg) = tsv_error("query-id\tcorpus-id\tscore\nq1\td1\t1\textra\n");
        assert_eq!(line, 2);
        assert!(msg.contains("found 4"), "{msg}");
    }

    #[test]
    fn tsv_non_integer_score() {
        let (line, msg) = tsv_error("query-id\tcorpus-id\tscore\nq1\td1\t1.5\n");
        assert_eq!(line, 2);
        assert!(msg.contains("score `1.5` is not an integer"), "{msg}");

        let (line, _) = tsv_error("query-id\tcorpus-id\tscore\nq1\td1\thigh\n");
        assert_eq!(line, 2);
    }

    #[test]
    fn tsv_error_display_names_file_and_line() {
        let tmp = make(
            Some(CORPUS),
            Some(QUERIES),
            &[("test", "query-id\tcorpus-id\tscore\nq1\td1\tx\n")],
        );
        let msg = BeirDataset::open(tmp.path(), "test")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("test.tsv:2: malformed TSV line"), "{msg}");
    }

    #[test]
    fn qrels_for_unknown_queries_are_warnings() {
        let qrels = "query-id\tcorpus-id\tscore\nq1\td1\t1\nghost\td1\t1\nghost2\td1\t2\n\
                     ghost3\td1\t0\n";
        let tmp = make(Some(CORPUS), Some(QUERIES), &[("test", qrels)]);
        let ds = BeirDataset::open(tmp.path(), "test").unwrap();
        assert_eq!(ds.queries.len(), 1);
        assert_eq!(ds.qrels.len(), 1, "qrels only cover returned queries");
        assert_eq!(ds.warnings.len(), 1);
        let w = &ds.warnings[0];
        assert!(w.contains("2 queries"), "{w}");
        assert!(w.contains("ghost, ghost2"), "{w}");
        assert!(
            !w.contains("ghost3"),
            "score-0 only queries are not relevant: {w}"
        );
    }

    #[test]
    fn duplicates_are_warnings() {
        let queries =
            "{\"_id\": \"q1\", \"text\": \"first\"}\n{\"_id\": \"q1\", \"text\": \"second\"}\n";
        let qrels = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t2\nq1\td2\t1\nq1\td2\t0\n";
        let tmp = make(Some(CORPUS), Some(queries), &[("test", qrels)]);
        let ds = BeirDataset::open(tmp.path(), "test").unwrap();
        assert_eq!(ds.queries.len(), 1);
        assert_eq!(ds.queries[0].text, "first");
        let q1 = ds.qrels_for("q1").unwrap();
        assert_eq!(q1.get("d1"), Some(&2), "last score wins");
        assert_eq!(q1.get("d2"), None, "later score 0 removes the judgment");
        assert_eq!(ds.warnings.len(), 2, "{:?}", ds.warnings);
    }

    #[test]
    fn negative_scores_are_not_relevant() {
        let qrels = "query-id\tcorpus-id\tscore\nq1\td1\t-1\nq1\td2\t1\n";
        let tmp = make(Some(CORPUS), Some(QUERIES), &[("test", qrels)]);
        let ds = BeirDataset::open(tmp.path(), "test").unwrap();
        let q1 = ds.qrels_for("q1").unwrap();
        assert_eq!(q1.len(), 1);
        assert!(q1.contains_key("d2"));
    }
}
