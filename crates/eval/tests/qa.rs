//! Question-answering evaluation: metrics on hand-made cases, loaders on small synthetic
//! files and bad input, and the loaders on the real SQuAD 2.0 / HotpotQA slices in
//! `../shared/data` (skipped with a message when that folder is absent).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use neuralcore_eval::{
    answer_contains, citation_correct, load_hotpotqa, load_qa, load_qa_selected, load_squad2,
    normalize_answer, render_side_by_side, score, write_corpus_jsonl, Citation, EvalError,
    QaOutcome, QaPassage, QaQuestion, QaReport, QaSet, Support,
};
use serde_json::{json, Value};
use tempfile::TempDir;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------
// normalize_answer / answer_contains
// ---------------------------------------------------------------------------------------

#[test]
fn normalize_answer_matches_the_official_script() {
    // Expected values produced by `normalize_answer` of the official evaluate-v2.0.py.
    let cases = [
        ("The Theatre", "theatre"),
        ("theatre", "theatre"),
        ("another", "another"),
        ("a-the b", "athe b"),
        ("Hello, World!", "hello world"),
        ("  The   quick\tbrown\nfox. ", "quick brown fox"),
        ("an apple a day", "apple day"),
        ("Élan Vital", "élan vital"),
        ("the café", "café"),
        ("L’été", "l’été"),
        ("“The” best", "“ ” best"),
        ("the_end", "theend"),
        ("thé", "thé"),
        ("ΣΑΣ ΟΔΟΣ", "σας οδος"),
        ("U.S.", "us"),
        ("1,000", "1000"),
        ("don't", "dont"),
        ("x\u{1c}y", "x y"),
        ("x\u{a0}y", "x y"),
        ("A", ""),
        ("a.n", ""),
        ("The\u{301} x", "\u{301} x"),
        ("İstanbul", "i\u{307}stanbul"),
        ("the1 the 1", "the1 1"),
        ("(the) [an] {a}", ""),
        ("naïve the", "naïve"),
        ("", ""),
    ];
    for (input, expected) in cases {
        assert_eq!(normalize_answer(input), expected, "input {input:?}");
    }
}

#[test]
fn answer_contains_on_token_boundaries() {
    let golds = strings(&["Denver Broncos"]);
    assert!(answer_contains("The answer is the Denver Broncos.", &golds));
    assert!(answer_contains("denver broncos", &golds));
    assert!(!answer_contains("Broncos", &golds));
    assert!(!answer_contains("The Denver Broncoses", &golds));

    assert!(!answer_contains("in 1990", &strings(&["1"])));
    assert!(!answer_contains("in 1990", &strings(&["199"])));
    assert!(answer_contains("in 1990", &strings(&["1990"])));
    assert!(answer_contains("It was in 1,990 BC", &strings(&["1990"])));
    assert!(!answer_contains("the 10th", &strings(&["10"])));
    assert!(answer_contains(
        "It's the Eiffel Tower!",
        &strings(&["eiffel tower"])
    ));
    // Any gold counts; golds empty after normalization never match.
    assert!(answer_contains("Paris", &strings(&["London", "paris"])));
    assert!(!answer_contains("the", &strings(&["The", "", "  ."])));
    assert!(!answer_contains("anything", &[]));
    assert!(!answer_contains("", &strings(&["x"])));
}

// ---------------------------------------------------------------------------------------
// citation_correct
// ---------------------------------------------------------------------------------------

const TEXT: &str = "Alpha beta. Gamma is Paris here. Delta epsilon zeta eta.";
//                  0         10        20        30        40        50

fn question(answers: &[&str], supporting: &[(&str, (usize, usize))]) -> QaQuestion {
    QaQuestion {
        id: "q".into(),
        question: "?".into(),
        answers: strings(answers),
        answerable: !answers.is_empty(),
        supporting: supporting
            .iter()
            .map(|(p, span)| Support {
                passage: p.to_string(),
                span: *span,
            })
            .collect(),
        passages: vec!["p1".into()],
        kind: "test".into(),
        ..QaQuestion::default()
    }
}

fn cite(passage: &str, span: (usize, usize)) -> Citation {
    Citation {
        passage: passage.into(),
        span,
    }
}

#[test]
fn citation_overlap_rule() {
    // Supporting sentence (11, 32) = " Gamma is Paris here.", 21 characters. No gold answer
    // to find in the text, so only the overlap rule applies.
    let q = question(&["Omega"], &[("p1", (11, 32))]);
    // Overlap 11 of the 21-character sentence (the shorter): at least half.
    assert!(citation_correct(&cite("p1", (21, 56)), &q, TEXT));
    // Overlap 10 < 21 / 2.
    assert!(!citation_correct(&cite("p1", (22, 56)), &q, TEXT));
    // Overlap 10 with a 19-character citation (now the shorter): at least half.
    assert!(citation_correct(&cite("p1", (22, 41)), &q, TEXT));
    // Exactly half of the shorter: a 4-character citation overlapping by 2.
    assert!(citation_correct(&cite("p1", (30, 34)), &q, TEXT));
    assert!(!citation_correct(&cite("p1", (31, 35)), &q, TEXT));
    // A citation covering the whole passage overlaps the whole sentence.
    assert!(citation_correct(&cite("p1", (0, 56)), &q, TEXT));
    // A short citation inside the sentence.
    assert!(citation_correct(&cite("p1", (15, 17)), &q, TEXT));
    // Same span, other passage; empty, reversed and out-of-range spans.
    assert!(!citation_correct(&cite("p2", (11, 32)), &q, TEXT));
    assert!(!citation_correct(&cite("p1", (20, 20)), &q, TEXT));
    assert!(!citation_correct(&cite("p1", (30, 20)), &q, TEXT));
    assert!(!citation_correct(&cite("p1", (500, 600)), &q, TEXT));
    // Clamped to the text: (20, 600) becomes (20, 56), overlap 12 >= 21 / 2.
    assert!(citation_correct(&cite("p1", (20, 600)), &q, TEXT));
    // Adjacent, not overlapping.
    assert!(!citation_correct(&cite("p1", (0, 11)), &q, TEXT));
}

#[test]
fn citation_containing_the_answer() {
    // No supporting sentences: only the gold answer can make a citation correct.
    let q = question(&["Paris"], &[]);
    assert!(citation_correct(&cite("any", (12, 32)), &q, TEXT));
    assert!(citation_correct(&cite("any", (21, 26)), &q, TEXT));
    // "Pari" is cut.
    assert!(!citation_correct(&cite("any", (12, 25)), &q, TEXT));
    assert!(!citation_correct(&cite("any", (33, 56)), &q, TEXT));
    // yes / no answers are not looked for in the text.
    let yes = "Yes, and no.";
    let q = question(&["no"], &[]);
    assert!(!citation_correct(&cite("p1", (0, 12)), &q, yes));
    // Spans are in characters, not bytes.
    let text = "Éé. Ça à Zürich.";
    let q = question(&["Zürich"], &[]);
    assert!(citation_correct(&cite("p1", (9, 16)), &q, text));
    assert!(!citation_correct(&cite("p1", (10, 16)), &q, text));
    // Unanswerable question without support: never correct.
    assert!(!citation_correct(
        &cite("p1", (0, 56)),
        &question(&[], &[]),
        TEXT
    ));
}

// ---------------------------------------------------------------------------------------
// score / render_side_by_side
// ---------------------------------------------------------------------------------------

fn tiny_set() -> QaSet {
    let passage = |id: &str, text: &str| QaPassage {
        id: id.into(),
        title: id.into(),
        text: text.into(),
        sentences: vec![(0, text.chars().count())],
    };
    let q = |id: &str, answers: &[&str], sup: &[(&str, (usize, usize))]| QaQuestion {
        id: id.into(),
        kind: if answers.is_empty() {
            "unanswerable"
        } else {
            "answerable"
        }
        .into(),
        ..question(answers, sup)
    };
    QaSet {
        name: "tiny".into(),
        passages: vec![
            passage("p1", "The capital of France is Paris."),
            passage("p2", "Forty-two. The sky is blue."),
        ],
        questions: vec![
            q("q1", &["Paris"], &[("p1", (0, 31))]),
            q("q2", &["42"], &[("p2", (0, 10))]),
            q("q3", &[], &[]),
            q("q4", &[], &[]),
            q("q5", &["blue"], &[("p2", (10, 27)), ("p1", (0, 31))]),
            q("q6", &["red"], &[("p2", (0, 10))]),
        ],
        title_conflicts: 0,
        offset_mismatches: 0,
        warnings: Vec::new(),
    }
}

fn outcome(
    q: &str,
    answer: Option<&str>,
    citations: &[(&str, (usize, usize))],
    retrieved: &[&str],
    iterations: u32,
    latency_ms: f64,
) -> QaOutcome {
    QaOutcome {
        question: q.into(),
        abstained: answer.is_none(),
        answer: answer.unwrap_or("").into(),
        citations: citations.iter().map(|(p, s)| cite(p, *s)).collect(),
        retrieved_passages: strings(retrieved),
        iterations,
        latency_ms,
        ..QaOutcome::default()
    }
}

fn tiny_outcomes() -> Vec<QaOutcome> {
    vec![
        // Correct; one correct citation (the supporting sentence), one wrong.
        outcome(
            "q1",
            Some("It is Paris."),
            &[("p1", (0, 31)), ("p2", (11, 27))],
            &["p1", "p2"],
            1,
            10.0,
        ),
        // Abstains on an answerable question; its supporting passage was not retrieved.
        outcome("q2", None, &[], &["p1"], 2, 20.0),
        // Abstains on an unanswerable question.
        outcome("q3", None, &[], &[], 3, 30.0),
        // Answers an unanswerable question, citing something.
        outcome("q4", Some("Berlin"), &[("p1", (0, 5))], &[], 2, 40.0),
        // q5 has no outcome. q6: wrong answer with a correct citation.
        outcome("q6", Some("green"), &[("p2", (0, 10))], &["p2"], 0, 50.0),
        // Ignored: unknown question, and a second outcome for q1.
        outcome("zzz", Some("Paris"), &[], &[], 9, 999.0),
        outcome("q1", None, &[], &[], 9, 999.0),
    ]
}

fn close(a: Option<f64>, b: f64) {
    let a = a.expect("a value");
    assert!((a - b).abs() < 1e-12, "{a} != {b}");
}

#[test]
fn score_tiny_set() {
    let r = score(&tiny_set(), &tiny_outcomes());
    assert_eq!(r.questions, 5);
    assert_eq!(r.answerable, 3);
    assert_eq!(r.unanswerable, 2);
    assert_eq!(r.missing_outcomes, 1);
    assert_eq!(r.ignored_outcomes, 2);
    assert_eq!(r.answered_answerable, 2);
    assert_eq!(r.answered_unanswerable, 1);
    assert_eq!(r.correct_answers, 1);
    close(r.accuracy_answerable, 1.0 / 3.0);
    close(r.accuracy_when_answered, 0.5);
    // (1 correct + 1 abstention on an unanswerable question) / 5.
    close(r.overall_accuracy, 0.4);
    // Abstentions: q2 (answerable) and q3 (unanswerable).
    close(r.abstention_precision, 0.5);
    close(r.abstention_recall, 0.5);
    close(r.unanswerable_answered_rate, 0.5);
    // Citations on answered questions: q1 2 (1 correct), q4 1 (0), q6 1 (1).
    assert_eq!(r.citations, 4);
    assert_eq!(r.correct_citations, 2);
    close(r.citation_precision, 0.5);
    assert_eq!(r.uncited_answers, 0);
    // Answered: q1, q4, q6; only q6 has all its citations correct.
    close(r.answers_fully_cited, 1.0 / 3.0);
    // Supporting recall: q1 1, q2 0, q6 1 (q3, q4 have no support; q5 no outcome).
    assert_eq!(r.supporting_questions, 3);
    close(r.supporting_recall, 2.0 / 3.0);
    close(r.mean_iterations, 1.6);
    close(r.latency_mean_ms, 30.0);
    close(r.latency_p50_ms, 30.0);
    close(r.latency_p95_ms, 50.0);
}

#[test]
fn score_zero_denominators_are_null() {
    let r = score(&tiny_set(), &[]);
    assert_eq!(r.questions, 0);
    assert_eq!(r.missing_outcomes, 6);
    assert_eq!(r.accuracy_answerable, None);
    assert_eq!(r.supporting_recall, None);
    assert_eq!(r.latency_p95_ms, None);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["citation_precision"], Value::Null);
    assert_eq!(json["abstention_recall"], Value::Null);
    // Answered everything, no unanswerable question, no citation.
    let set = QaSet {
        questions: tiny_set().questions[..1].to_vec(),
        ..tiny_set()
    };
    let r = score(&set, &[outcome("q1", Some("Paris"), &[], &[], 1, 1.0)]);
    close(r.accuracy_answerable, 1.0);
    assert_eq!(r.abstention_precision, None);
    assert_eq!(r.abstention_recall, None);
    assert_eq!(r.citation_precision, None);
    assert_eq!(r.uncited_answers, 1);
    close(r.answers_fully_cited, 0.0);
    close(r.supporting_recall, 0.0);
    // No NaN anywhere: the report round-trips through JSON.
    let back: QaReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back, r);
}

#[test]
fn side_by_side_table() {
    let r = score(&tiny_set(), &tiny_outcomes());
    let rows = vec![
        ("bm25".to_string(), r.clone()),
        ("hybrid+agent-ünïcode".to_string(), r),
        ("none".to_string(), QaReport::default()),
    ];
    let t = render_side_by_side(&rows);
    let lines: Vec<&str> = t.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["metric", "bm25", "hybrid+agent-ünïcode", "none"]);
    assert!(lines[1].chars().all(|c| c == '-'));
    let row = |name: &str| -> Vec<String> {
        let line = lines.iter().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..]
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(row("accuracy (answerable)"), ["0.3333", "0.3333", "-"]);
    assert_eq!(row("citation precision"), ["0.5000", "0.5000", "-"]);
    assert_eq!(row("questions"), ["5", "5", "0"]);
    assert_eq!(row("latency p95 (ms)"), ["50.00", "50.00", "-"]);
    assert_eq!(row("mean iterations"), ["1.60", "1.60", "-"]);
    // All lines have the same width in characters (values right-aligned under labels).
    let w = lines[0].chars().count();
    for l in &lines {
        assert_eq!(l.chars().count(), w, "{l:?}");
    }
    assert!(t.ends_with('\n'));
    let single = render_side_by_side(&[]);
    assert!(single.starts_with("metric\n------"));
    assert!(QaReport::default().table("x").contains("supporting recall"));
}

// ---------------------------------------------------------------------------------------
// Loaders on synthetic files
// ---------------------------------------------------------------------------------------

fn write(dir: &TempDir, name: &str, body: &str) -> PathBuf {
    let path = dir.path().join(name);
    fs::write(&path, body).unwrap();
    path
}

fn squad_doc() -> Value {
    let context = "Ça commence. The Normans lived in Normandy. They spoke French.";
    json!({
        "version": "v2.0",
        "data": [
            {"title": "Normans_Article", "paragraphs": [
                {"context": context, "qas": [
                    // "Normandy" is at character 34 (byte 35, because of "Ç").
                    {"id": "a1", "question": "Where?", "is_impossible": false, "answers": [
                        {"text": "Normandy", "answer_start": 34},
                        {"text": "Normandy", "answer_start": 34},
                        {"text": "in Normandy", "answer_start": 31}
                    ]},
                    {"id": "a2", "question": "Who?", "is_impossible": true, "answers": [],
                     "plausible_answers": [{"text": "French", "answer_start": 55}]},
                    {"id": "a3", "question": "Span?", "answers": [
                        {"text": "Normandy. They", "answer_start": 34}
                    ]}
                ]}
            ]},
            {"title": "Second", "paragraphs": [
                {"context": "Short one.", "qas": [
                    {"id": "b1", "question": "?", "is_impossible": false,
                     "answers": [{"text": "Short", "answer_start": 0}]}
                ]}
            ]}
        ]
    })
}

#[test]
fn squad_loader_on_a_small_file() {
    let tmp = TempDir::new().unwrap();
    let path = write(&tmp, "s.json", &squad_doc().to_string());
    let set = load_squad2(&path, None).unwrap();
    assert_eq!(set.name, "squad2");
    assert_eq!(set.passages.len(), 2);
    let p = &set.passages[0];
    assert_eq!(p.id, "squad2:0:0");
    assert_eq!(p.title, "Normans Article");
    assert_eq!(p.sentences, [(0, 12), (12, 43), (43, 62)]);
    assert_eq!(set.passages[1].id, "squad2:1:0");
    assert_eq!(set.questions.len(), 4);
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    assert_eq!(set.offset_mismatches, 0);

    let a1 = &set.questions[0];
    assert_eq!(a1.answers, ["Normandy", "in Normandy"]);
    assert!(a1.answerable);
    assert_eq!(a1.kind, "answerable");
    assert_eq!(a1.passages, ["squad2:0:0"]);
    assert_eq!(
        a1.supporting,
        [Support {
            passage: "squad2:0:0".into(),
            span: (12, 43)
        }]
    );
    let a2 = &set.questions[1];
    assert!(!a2.answerable && a2.answers.is_empty() && a2.supporting.is_empty());
    assert_eq!(a2.kind, "unanswerable");
    // No `is_impossible` (SQuAD 1.1 style): answerable. An answer across two sentences
    // supports with both.
    let a3 = &set.questions[2];
    assert!(a3.answerable);
    let spans: Vec<_> = a3.supporting.iter().map(|s| s.span).collect();
    assert_eq!(spans, [(12, 43), (43, 62)]);

    // Article selection (1-based, inclusive); ids do not change.
    let second = load_squad2(&path, Some(2..=2)).unwrap();
    assert_eq!(second.passages.len(), 1);
    assert_eq!(second.passages[0].id, "squad2:1:0");
    assert_eq!(second.questions.len(), 1);
    for bad in [0..=1, 2..=3, RangeInclusive::new(2, 1)] {
        let err = load_squad2(&path, Some(bad.clone())).unwrap_err();
        assert!(
            matches!(err, EvalError::InvalidSelection { .. }),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains("has 2 articles"), "{err}");
    }
}

/// One read of the file, the format detected, the selection by article on SQuAD and by
/// question on HotpotQA (each question with only its own paragraphs); bad ranges name
/// what the file has.
#[test]
fn selection_is_by_article_on_squad_and_by_question_on_hotpotqa() {
    let tmp = TempDir::new().unwrap();
    let squad = write(&tmp, "s.json", &squad_doc().to_string());
    let second = load_qa_selected(&squad, Some(2..=2), None).unwrap();
    assert_eq!(second.name, "squad2");
    let ids: Vec<&str> = second.passages.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["squad2:1:0"]);
    assert_eq!(second.questions.len(), 1);
    assert_eq!(
        load_qa_selected(&squad, None, None).unwrap().passages.len(),
        2
    );
    let err = load_qa_selected(&squad, Some(2..=3), None).unwrap_err();
    assert!(err.to_string().contains("has 2 articles"), "{err}");

    let hotpot = json!([
        {"_id": "h1", "question": "Q1?", "answer": "x", "type": "bridge",
         "supporting_facts": [["A", 0]], "context": [["A", ["A one."]], ["B", ["B one."]]]},
        {"_id": "h2", "question": "Q2?", "answer": "y", "type": "bridge",
         "supporting_facts": [["C", 0]], "context": [["B", ["B one."]], ["C", ["C one."]]]},
        {"_id": "h3", "question": "Q3?", "answer": "z", "type": "bridge",
         "supporting_facts": [["D", 0]], "context": [["D", ["D one."]]]}
    ]);
    let hotpot = write(&tmp, "h.json", &hotpot.to_string());
    let two = load_qa_selected(&hotpot, Some(2..=2), None).unwrap();
    assert_eq!(two.name, "hotpotqa");
    assert_eq!(two.questions.len(), 1);
    assert_eq!(two.questions[0].id, "h2");
    let ids: Vec<&str> = two.passages.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["hotpot:B", "hotpot:C"]);
    assert_eq!(
        load_qa_selected(&hotpot, None, Some(2))
            .unwrap()
            .questions
            .len(),
        2
    );
    for bad in [0..=1, 4..=5, RangeInclusive::new(2, 1)] {
        let err = load_qa_selected(&hotpot, Some(bad.clone()), None).unwrap_err();
        assert!(
            matches!(err, EvalError::InvalidSelection { .. }),
            "{bad:?}: {err}"
        );
        assert!(err.to_string().contains("the set has"), "{bad:?}: {err}");
    }
    let err = load_qa_selected(&write(&tmp, "o.json", "{}"), Some(1..=1), None).unwrap_err();
    assert!(matches!(err, EvalError::UnknownFormat { .. }), "{err}");
}

#[test]
fn squad_offset_mismatch_is_counted_not_fatal() {
    let tmp = TempDir::new().unwrap();
    let mut doc = squad_doc();
    // Byte offset of "Normandy" instead of its character offset.
    doc["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = json!(35);
    let set = load_squad2(&write(&tmp, "s.json", &doc.to_string()), None).unwrap();
    assert_eq!(set.offset_mismatches, 1);
    assert_eq!(set.warnings.len(), 1);
    assert!(set.warnings[0].contains("a1"), "{:?}", set.warnings);
}

/// Loads `doc` written to a temporary file and returns the error message.
fn squad_error(doc: &Value) -> (EvalError, String) {
    let tmp = TempDir::new().unwrap();
    let path = write(&tmp, "bad.json", &doc.to_string());
    let err = load_squad2(&path, None).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("bad.json"), "{msg}");
    (err, msg)
}

#[test]
fn squad_bad_input() {
    let tmp = TempDir::new().unwrap();
    // Missing file.
    let err = load_squad2(&tmp.path().join("nope.json"), None).unwrap_err();
    assert!(matches!(err, EvalError::MissingFile { .. }), "{err}");
    assert!(err.to_string().contains("nope.json"));
    // A folder is not a file.
    let err = load_squad2(tmp.path(), None).unwrap_err();
    assert!(matches!(err, EvalError::MissingFile { .. }), "{err}");
    // Not JSON.
    let path = write(&tmp, "x.json", "{\"data\": [\n  oops\n]}");
    let err = load_squad2(&path, None).unwrap_err();
    match &err {
        EvalError::InvalidJson { line, .. } => assert_eq!(*line, 2),
        other => panic!("expected InvalidJson, got {other:?}"),
    }
    assert!(
        err.to_string().contains("x.json:2:3: not valid JSON"),
        "{err}"
    );
    let err = load_squad2(&write(&tmp, "e.json", ""), None).unwrap_err();
    assert!(matches!(err, EvalError::InvalidJson { .. }), "{err}");

    // Wrong shapes.
    let (_, msg) = squad_error(&json!([1, 2]));
    assert!(
        msg.contains("top level: expected an object, found an array"),
        "{msg}"
    );
    let (_, msg) = squad_error(&json!({"data": {"title": "x"}}));
    assert!(
        msg.contains("data: expected an array, found an object"),
        "{msg}"
    );
    let mut doc = squad_doc();
    doc["data"][0]["paragraphs"][0]["qas"][1]
        .as_object_mut()
        .unwrap()
        .remove("question");
    let (err, msg) = squad_error(&doc);
    assert!(matches!(err, EvalError::BadShape { .. }));
    assert!(
        msg.contains("data[0].paragraphs[0].qas[1]: missing field `question`"),
        "{msg}"
    );
    let mut doc = squad_doc();
    doc["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"] = json!("no");
    let (_, msg) = squad_error(&doc);
    assert!(msg.contains("is_impossible: expected a boolean"), "{msg}");
    let mut doc = squad_doc();
    doc["data"][0]["paragraphs"][0]["qas"][0]["answers"][1]["answer_start"] = json!(-3);
    let (_, msg) = squad_error(&doc);
    assert!(
        msg.contains("answers[1].answer_start: expected a non-negative integer, found a number"),
        "{msg}"
    );

    // answer_start out of range (the context has 62 characters but 64 bytes).
    let mut doc = squad_doc();
    doc["data"][0]["paragraphs"][0]["qas"][2]["answers"][0] =
        json!({"text": "French.", "answer_start": 56});
    let (err, msg) = squad_error(&doc);
    assert!(matches!(err, EvalError::BadShape { .. }));
    assert!(
        msg.contains("data[0].paragraphs[0].qas[2].answers[0].answer_start")
            && msg.contains("past the end of the context (62 characters)"),
        "{msg}"
    );
    let mut doc = squad_doc();
    doc["data"][1]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = json!(1000);
    let (_, msg) = squad_error(&doc);
    assert!(msg.contains("answer_start 1000"), "{msg}");
}

fn hotpot_original() -> Value {
    json!([
        {"_id": "h1", "question": "Q1?", "answer": "Paris", "type": "bridge", "level": "hard",
         "supporting_facts": [["A", 1], ["B", 0], ["A", 7]],
         "context": [["A", ["A one.", " A two."]], ["B", ["B one."]]]},
        {"_id": "h2", "question": "Q2?", "answer": "yes", "type": "comparison",
         "supporting_facts": [["A", 0], ["Z", 0]],
         "context": [["C", ["C one.", "", " C three."]], ["A", ["A one.", " A two."]],
                     ["B", ["B changed."]]]}
    ])
}

#[test]
fn hotpot_loader_both_shapes() {
    let tmp = TempDir::new().unwrap();
    let original = write(&tmp, "orig.json", &hotpot_original().to_string());
    // The same data in the Hugging Face shape (dicts of parallel lists, no ids).
    let hf = json!([
        {"question": "Q1?", "answer": "Paris", "type": "bridge",
         "supporting_facts": {"title": ["A", "B", "A"], "sent_id": [1, 0, 7]},
         "context": {"title": ["A", "B"], "sentences": [["A one.", " A two."], ["B one."]]}},
        {"question": "Q2?", "answer": "yes", "type": "comparison",
         "supporting_facts": {"title": ["A", "Z"], "sent_id": [0, 0]},
         "context": {"title": ["C", "A", "B"],
                     "sentences": [["C one.", "", " C three."], ["A one.", " A two."],
                                   ["B changed."]]}}
    ]);
    let hf = write(&tmp, "hf.json", &hf.to_string());

    for (path, ids) in [
        (&original, ["h1", "h2"]),
        (&hf, ["hotpotqa:0", "hotpotqa:1"]),
    ] {
        let set = load_hotpotqa(path, None).unwrap();
        assert_eq!(set.name, "hotpotqa");
        let passage_ids: Vec<&str> = set.passages.iter().map(|p| p.id.as_str()).collect();
        assert_eq!(passage_ids, ["hotpot:A", "hotpot:B", "hotpot:C"]);
        let a = &set.passages[0];
        assert_eq!(a.text, "A one. A two.");
        assert_eq!(a.sentences, [(0, 6), (6, 13)]);
        // The first text of "B" is kept; the second question's differs.
        assert_eq!(set.passages[1].text, "B one.");
        assert_eq!(set.title_conflicts, 1);
        assert_eq!(set.passages[2].sentences, [(0, 6), (6, 6), (6, 15)]);

        let q: Vec<&str> = set.questions.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(q, ids);
        let q1 = &set.questions[0];
        assert_eq!(q1.answers, ["Paris"]);
        assert!(q1.answerable);
        assert_eq!(q1.kind, "bridge");
        assert_eq!(q1.passages, ["hotpot:A", "hotpot:B"]);
        let sup: Vec<(&str, (usize, usize))> = q1
            .supporting
            .iter()
            .map(|s| (s.passage.as_str(), s.span))
            .collect();
        assert_eq!(sup, [("hotpot:A", (6, 13)), ("hotpot:B", (0, 6))]);
        let q2 = &set.questions[1];
        assert_eq!(q2.kind, "comparison");
        assert_eq!(q2.passages, ["hotpot:C", "hotpot:A", "hotpot:B"]);
        assert_eq!(q2.supporting.len(), 1);
        // Warnings: the conflict, and the skipped facts ("A" 7 and "Z" 0).
        assert_eq!(set.warnings.len(), 2, "{:?}", set.warnings);
        assert!(
            set.warnings[1].contains("2 supporting fact(s)"),
            "{:?}",
            set.warnings
        );

        let first = load_hotpotqa(path, Some(1)).unwrap();
        assert_eq!(first.questions.len(), 1);
        assert_eq!(first.passages.len(), 2);
        assert_eq!(first.title_conflicts, 0);
        assert_eq!(load_hotpotqa(path, Some(0)).unwrap().questions.len(), 0);
        assert_eq!(load_hotpotqa(path, Some(99)).unwrap().questions.len(), 2);
    }
}

#[test]
fn hotpot_bad_input() {
    let tmp = TempDir::new().unwrap();
    let err = load_hotpotqa(&tmp.path().join("missing.json"), None).unwrap_err();
    assert!(matches!(err, EvalError::MissingFile { .. }), "{err}");
    let err = load_hotpotqa(&write(&tmp, "t.json", "[{\"a\": 1"), None).unwrap_err();
    assert!(matches!(err, EvalError::InvalidJson { .. }), "{err}");

    let cases = [
        (
            json!({"data": []}),
            "top level: expected an array, found an object",
        ),
        (json!([1]), "[0]: expected an object, found a number"),
        (
            json!([{"question": "q", "answer": "a", "supporting_facts": [], "context": [["A"]]}]),
            "[0].context[0]: expected a pair [title, sentences]",
        ),
        (
            json!([{"question": "q", "answer": "a", "supporting_facts": [],
                    "context": {"title": ["A", "B"], "sentences": [["x"]]}}]),
            "[0].context: `title` has 2 items but `sentences` has 1",
        ),
        (
            json!([{"question": "q", "answer": "a", "supporting_facts": [["A", "one"]],
                    "context": [["A", ["x"]]]}]),
            "[0].supporting_facts[0]: expected a non-negative integer, found a string",
        ),
        (
            json!([{"question": "q", "answer": 3, "supporting_facts": [], "context": []}]),
            "[0].answer: expected a string, found a number",
        ),
        (
            json!([{"question": "q", "answer": "a", "context": []}]),
            "[0]: missing field `supporting_facts`",
        ),
        (
            json!([{"question": "q", "answer": "a", "supporting_facts": [],
                    "context": [["A", [1]]]}]),
            "[0].context[0].sentences[0]: expected a string",
        ),
    ];
    for (doc, expected) in cases {
        let path = write(&tmp, "h.json", &doc.to_string());
        let err = load_hotpotqa(&path, None).unwrap_err();
        assert!(matches!(err, EvalError::BadShape { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("h.json") && msg.contains(expected), "{msg}");
    }
}

#[test]
fn load_qa_sniffs_the_format() {
    let tmp = TempDir::new().unwrap();
    let squad = write(&tmp, "a.json", &squad_doc().to_string());
    let hotpot = write(&tmp, "b.json", &hotpot_original().to_string());
    assert_eq!(load_qa(&squad).unwrap().name, "squad2");
    assert_eq!(load_qa(&hotpot).unwrap().name, "hotpotqa");
    // Two candidate files, none with a known name.
    let err = load_qa(tmp.path()).unwrap_err();
    assert!(matches!(err, EvalError::UnknownFormat { .. }), "{err}");
    assert!(err.to_string().contains("a.json, b.json"), "{err}");
    // A known name wins.
    fs::copy(&hotpot, tmp.path().join("dev-distractor-100.json")).unwrap();
    assert_eq!(load_qa(tmp.path()).unwrap().name, "hotpotqa");
    // A single .json file in a folder.
    let one = TempDir::new().unwrap();
    write(&one, "mine.json", &squad_doc().to_string());
    write(&one, "notes.txt", "x");
    assert_eq!(load_qa(one.path()).unwrap().name, "squad2");
    // Empty folder, unknown shape, missing path.
    let empty = TempDir::new().unwrap();
    let err = load_qa(empty.path()).unwrap_err();
    assert!(err.to_string().contains("no QA dataset file"), "{err}");
    let err = load_qa(&write(&tmp, "c.json", "{\"rows\": []}")).unwrap_err();
    assert!(matches!(err, EvalError::UnknownFormat { .. }), "{err}");
    assert!(err.to_string().contains("c.json"), "{err}");
    let err = load_qa(&write(&tmp, "d.json", "[]")).unwrap_err();
    assert!(matches!(err, EvalError::UnknownFormat { .. }), "{err}");
    let err = load_qa(&tmp.path().join("none.json")).unwrap_err();
    assert!(matches!(err, EvalError::MissingFile { .. }), "{err}");
}

#[test]
fn corpus_jsonl_lines() {
    let tmp = TempDir::new().unwrap();
    let set = load_squad2(&write(&tmp, "s.json", &squad_doc().to_string()), None).unwrap();
    let mut out = Vec::new();
    write_corpus_jsonl(&set, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0],
        json!({"_id": "squad2:0:0", "title": "Normans Article",
               "text": "Ça commence. The Normans lived in Normandy. They spoke French."})
    );
    assert!(text.starts_with("{\"_id\":"), "{text}");
    assert!(text.ends_with("}\n"));
}

// ---------------------------------------------------------------------------------------
// The real data
// ---------------------------------------------------------------------------------------

fn data_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: QA data not found at {} (see shared/data/README.md)",
            dir.display()
        );
        None
    }
}

/// Whether the engine's jsonl loader would store `text` unchanged (no line breaks or
/// control characters, no trailing whitespace) — then citation offsets agree.
fn engine_keeps(text: &str) -> bool {
    !text.chars().any(|c| c.is_control() && c != '\t') && text.trim_end() == text
}

#[test]
fn real_squad2() {
    let Some(dir) = data_dir() else { return };
    let path = dir.join("squad2/dev-v2.0-articles-1-8.json");
    let set = load_squad2(&path, None).unwrap();
    assert_eq!(set.passages.len(), 294);
    assert_eq!(set.questions.len(), 2805);
    let unanswerable = set.questions.iter().filter(|q| !q.answerable).count();
    assert_eq!(unanswerable, 1527);
    assert_eq!(set.answerable(), 1278);
    assert_eq!(set.offset_mismatches, 0, "{:?}", set.warnings);
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);

    // Independent check of the offsets on the raw JSON: character offsets match, byte
    // offsets would not.
    let raw: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let (mut answers, mut char_bad, mut byte_bad) = (0, 0, 0);
    for article in raw["data"].as_array().unwrap() {
        for para in article["paragraphs"].as_array().unwrap() {
            let context = para["context"].as_str().unwrap();
            for qa in para["qas"].as_array().unwrap() {
                for a in qa["answers"].as_array().unwrap() {
                    let text = a["text"].as_str().unwrap();
                    let start = a["answer_start"].as_u64().unwrap() as usize;
                    answers += 1;
                    let by_chars: String = context
                        .chars()
                        .skip(start)
                        .take(text.chars().count())
                        .collect();
                    char_bad += usize::from(by_chars != text);
                    byte_bad += usize::from(context.get(start..start + text.len()) != Some(text));
                }
            }
        }
    }
    eprintln!(
        "squad2: {answers} gold answers; {char_bad} differ from context[answer_start..] in \
         characters, {byte_bad} would differ in bytes"
    );
    assert_eq!(answers, 4190);
    assert_eq!(char_bad, 0);
    assert!(byte_bad > 0);

    // Every answerable question has supporting sentences containing a gold answer.
    let passages: HashMap<&str, &QaPassage> =
        set.passages.iter().map(|p| (p.id.as_str(), p)).collect();
    for q in &set.questions {
        assert_eq!(q.answerable, !q.supporting.is_empty(), "{}", q.id);
        for s in &q.supporting {
            let p = passages[s.passage.as_str()];
            assert!(p.sentences.contains(&s.span), "{}", q.id);
        }
        if q.answerable {
            let p = passages[q.passages[0].as_str()];
            let start = q.supporting.iter().map(|s| s.span.0).min().unwrap();
            let end = q.supporting.iter().map(|s| s.span.1).max().unwrap();
            let cited = Citation {
                passage: p.id.clone(),
                span: (start, end),
            };
            assert!(citation_correct(&cited, q, &p.text), "{}", q.id);
        }
    }
    let sentences: usize = set.passages.iter().map(|p| p.sentences.len()).sum();
    let changed = set
        .passages
        .iter()
        .filter(|p| !engine_keeps(&p.text))
        .count();
    let texts: HashSet<&str> = set.passages.iter().map(|p| p.text.as_str()).collect();
    eprintln!(
        "squad2: {} passages, {sentences} sentences ({:.1} per passage); {changed} passage(s) \
         the jsonl loader would alter; {} duplicate text(s)",
        set.passages.len(),
        sentences as f64 / set.passages.len() as f64,
        set.passages.len() - texts.len()
    );

    let first = load_squad2(&path, Some(1..=1)).unwrap();
    assert_eq!(first.passages[0].title, "Normans");
    assert!(first.passages.len() < 294);
    let err = load_squad2(&path, Some(1..=9)).unwrap_err();
    assert!(err.to_string().contains("has 8 articles"), "{err}");

    let sniffed = load_qa(&dir.join("squad2")).unwrap();
    assert_eq!(sniffed, set);
}

#[test]
fn real_hotpotqa() {
    let Some(dir) = data_dir() else { return };
    let path = dir.join("hotpotqa/dev-distractor-100.json");
    let set = load_hotpotqa(&path, None).unwrap();
    assert_eq!(set.questions.len(), 100);
    assert!(set.questions.iter().all(|q| q.answerable));
    let kinds: Vec<&str> = set.questions.iter().map(|q| q.kind.as_str()).collect();
    let bridge = kinds.iter().filter(|k| **k == "bridge").count();
    let comparison = kinds.iter().filter(|k| **k == "comparison").count();
    assert_eq!(bridge + comparison, 100);
    let context_sizes: usize = set.questions.iter().map(|q| q.passages.len()).sum();
    let supporting: usize = set.questions.iter().map(|q| q.supporting.len()).sum();
    let ten = set
        .questions
        .iter()
        .filter(|q| q.passages.len() == 10)
        .count();
    let gold_passages: Vec<usize> = set
        .questions
        .iter()
        .map(|q| {
            q.supporting
                .iter()
                .map(|s| &s.passage)
                .collect::<HashSet<_>>()
                .len()
        })
        .collect();
    assert!(gold_passages.iter().all(|&n| n == 2));
    let changed = set
        .passages
        .iter()
        .filter(|p| !engine_keeps(&p.text))
        .count();
    let texts: HashSet<&str> = set.passages.iter().map(|p| p.text.as_str()).collect();
    eprintln!(
        "hotpotqa: {} questions ({bridge} bridge, {comparison} comparison), {ten} with 10 \
         paragraphs; {context_sizes} paragraphs -> {} passages; {} title conflict(s); \
         {supporting} supporting sentences; {changed} passage(s) the jsonl loader would \
         alter; {} duplicate text(s); warnings: {:?}",
        set.questions.len(),
        set.passages.len(),
        set.title_conflicts,
        set.passages.len() - texts.len(),
        set.warnings
    );
    assert_eq!(set.title_conflicts, 0);
    assert_eq!(supporting, 243);
    assert_eq!(set.passages.len(), 991);
    // Supporting spans are sentences of their passages; sentences tile the text.
    for p in &set.passages {
        assert_eq!(p.sentences.first().map(|s| s.0), Some(0), "{}", p.id);
        assert_eq!(
            p.sentences.last().map(|s| s.1),
            Some(p.text.chars().count())
        );
        assert!(p.sentences.windows(2).all(|w| w[0].1 == w[1].0));
    }
    for q in &set.questions {
        for s in &q.supporting {
            let p = set.passage(&s.passage).unwrap();
            assert!(p.sentences.contains(&s.span), "{}", q.id);
            assert!(q.passages.contains(&s.passage));
        }
    }
    let sniffed = load_qa(&dir.join("hotpotqa")).unwrap();
    assert_eq!(sniffed, set);
    assert_eq!(load_hotpotqa(&path, Some(10)).unwrap().questions.len(), 10);

    let mut out = Vec::new();
    write_corpus_jsonl(&set, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 991);
    let ids: HashSet<String> = text
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(ids.len(), 991);
    assert!(ids.iter().all(|id| id.trim() == id));
}
