//! LoCoMo memory evaluation: the loader on a small synthetic file and on bad input, the
//! evidence-recall metrics on hand-made cases, and the loader on the real LoCoMo slice in
//! `../shared/data` (skipped with a message when that folder is absent).

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use neuralcore_eval::{
    evidence_recall, load_locomo, render_memory_side_by_side, score_memory_retrieval, turn_key,
    EvalError, EvidenceStats, LocomoSet, MemQuestion, MemRetrievalReport, Turn, CATEGORY_NAMES,
};
use serde_json::{json, Value};
use tempfile::TempDir;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn close(a: Option<f64>, b: f64) {
    let a = a.expect("a value");
    assert!((a - b).abs() < 1e-12, "{a} != {b}");
}

fn write_json(dir: &TempDir, name: &str, v: &Value) -> PathBuf {
    let path = dir.path().join(name);
    fs::write(&path, serde_json::to_string_pretty(v).unwrap()).unwrap();
    path
}

// ---------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------

fn synthetic() -> Value {
    json!([
        {
            "sample_id": "c1",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bob",
                "session_1_date_time": "1:00 pm on 1 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob!"},
                    {
                        "speaker": "Bob", "dia_id": "D1:2", "text": "Look at this.",
                        "img_url": ["https://example.invalid/cat.jpg"],
                        "blip_caption": "a photo of a cat", "query": "cat"
                    },
                    {"speaker": "Ann", "dia_id": "D1:3", "text": "Nice.", "blip_caption": null}
                ],
                "session_2_date_time": "2:00 pm on 2 May, 2023",
                "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "Back again."}],
                "session_10_date_time": "3:00 pm on 9 June, 2023",
                "session_10": [{"speaker": "Ann", "dia_id": "D10:1", "text": "Later."}],
                "session_11_date_time": "4:00 pm on 10 June, 2023"
            },
            "qa": [
                {
                    "question": " What did Bob share? ", "answer": "a cat photo",
                    "evidence": ["D1:2"], "category": 4
                },
                {
                    "question": "When?", "answer": 2023,
                    "evidence": ["D1:1; D2:1", "D:10:1", "D", "D9:9", "D1:1"], "category": 2
                },
                {
                    "question": "Is Bob a dog?", "adversarial_answer": "Yes",
                    "evidence": [], "category": 5
                }
            ],
            "event_summary": {}
        },
        {
            "sample_id": "c2",
            "conversation": {
                "speaker_a": "Cy",
                "speaker_b": "Di",
                "session_1_date_time": "5:00 pm on 1 July, 2023",
                "session_1": [{"speaker": "Cy", "dia_id": "D1:1", "text": "Yo."}]
            },
            "qa": [{"question": "Q?", "answer": "A", "evidence": ["D1:1"], "category": 1}]
        }
    ])
}

#[test]
fn loads_turns_in_session_order_with_captions_and_dates() {
    let dir = TempDir::new().unwrap();
    let path = write_json(&dir, "locomo.json", &synthetic());
    let set = load_locomo(&path, None).unwrap();

    let ids: Vec<String> = set.turns.iter().map(Turn::key).collect();
    // Sessions by number (10 after 2), not by key order.
    assert_eq!(
        ids,
        ["c1:D1:1", "c1:D1:2", "c1:D1:3", "c1:D2:1", "c1:D10:1", "c2:D1:1"]
    );
    assert_eq!(set.conversations(), ["c1", "c2"]);
    assert_eq!(
        set.turns[1],
        Turn {
            conversation: "c1".into(),
            dia_id: "D1:2".into(),
            session: 1,
            speaker: "Bob".into(),
            text: "Look at this. [shares a photo of: a photo of a cat]".into(),
            session_date: "1:00 pm on 1 May, 2023".into(),
        }
    );
    // A null caption adds nothing.
    assert_eq!(set.turns[2].text, "Nice.");
    assert_eq!(set.turns[4].session, 10);
    assert_eq!(set.turns[4].session_date, "3:00 pm on 9 June, 2023");
    assert_eq!(set.turn("c2", "D1:1").unwrap().speaker, "Cy");
    assert!(set.turn("c2", "D1:2").is_none());
    assert_eq!(turn_key("c2", "D1:1"), set.turns[5].key());
}

#[test]
fn loads_questions_and_cleans_evidence() {
    let dir = TempDir::new().unwrap();
    let path = write_json(&dir, "locomo.json", &synthetic());
    let set = load_locomo(&path, None).unwrap();

    assert_eq!(set.questions.len(), 4);
    assert_eq!(
        set.questions[0],
        MemQuestion {
            conversation: "c1".into(),
            question: "What did Bob share?".into(),
            answer: Some("a cat photo".into()),
            adversarial_answer: None,
            evidence: strings(&["D1:2"]),
            category: 4,
        }
    );
    // Numeric answer as text; "D1:1; D2:1" split, "D:10:1" repaired, "D" unreadable,
    // "D9:9" names no turn, the second "D1:1" repeats.
    let q = &set.questions[1];
    assert_eq!(q.answer.as_deref(), Some("2023"));
    assert_eq!(q.evidence, strings(&["D1:1", "D2:1", "D10:1"]));
    let q = &set.questions[2];
    assert_eq!(
        (q.answer.as_deref(), q.adversarial_answer.as_deref()),
        (None, Some("Yes"))
    );
    assert!(q.evidence.is_empty());
    assert_eq!(q.category, 5);
    assert_eq!(set.questions[3].conversation, "c2");
    assert_eq!(
        set.evidence,
        EvidenceStats {
            kept: 5,
            split_entries: 1,
            repaired: 1,
            malformed: 1,
            missing: 1,
            duplicates: 1,
        }
    );

    let w = set.warnings.join("\n");
    assert_eq!(set.warnings.len(), 5, "{w}");
    assert!(w.contains("locomo.json"), "{w}");
    assert!(w.contains(r#"c1 qa[1] "D1:1; D2:1""#), "{w}");
    assert!(w.contains(r#"c1 qa[1] "D:10:1" -> D10:1"#), "{w}");
    assert!(
        w.contains(r#"could not be read (dropped): c1 qa[1] "D""#),
        "{w}"
    );
    assert!(
        w.contains("no turn of their conversation (dropped): c1 qa[1] D9:9"),
        "{w}"
    );
    assert!(
        w.contains("without a session (ignored): c1 session_11_date_time"),
        "{w}"
    );
}

#[test]
fn selects_conversations() {
    let dir = TempDir::new().unwrap();
    let path = write_json(&dir, "locomo.json", &synthetic());
    let set = load_locomo(&path, Some(2..=2)).unwrap();
    assert_eq!(set.conversations(), ["c2"]);
    assert_eq!(set.turns.len(), 1);
    assert_eq!(set.questions.len(), 1);
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    assert_eq!(load_locomo(&path, Some(1..=2)).unwrap().turns.len(), 6);
    #[allow(clippy::reversed_empty_ranges)]
    for bad in [0..=1, 2..=3, 2..=1] {
        let err = load_locomo(&path, Some(bad.clone())).unwrap_err();
        assert!(
            matches!(err, EvalError::InvalidSelection { .. }),
            "{bad:?}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains("the file has 2 conversations"), "{msg}");
    }
}

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

#[test]
fn missing_file_is_named() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("nope.json");
    let err = load_locomo(&path, None).unwrap_err();
    assert!(matches!(err, EvalError::MissingFile { .. }), "{err}");
    assert!(err.to_string().contains("nope.json"), "{err}");
}

#[test]
fn invalid_json_names_file_and_line() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("broken.json");
    fs::write(&path, "[\n  {\"sample_id\": \"c1\",\n").unwrap();
    let err = load_locomo(&path, None).unwrap_err();
    match &err {
        EvalError::InvalidJson { line, .. } => assert_eq!(*line, 3, "{err}"),
        other => panic!("expected InvalidJson, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("broken.json:3:"), "{msg}");
}

/// Loads `v` and returns the error's JSON location and its message.
fn shape_error(v: &Value) -> (String, String) {
    let dir = TempDir::new().unwrap();
    let path = write_json(&dir, "shape.json", v);
    match load_locomo(&path, None) {
        Err(EvalError::BadShape {
            path: p,
            at,
            message,
        }) => {
            assert_eq!(p, path);
            let shown = EvalError::BadShape {
                path: p,
                at: at.clone(),
                message: message.clone(),
            }
            .to_string();
            assert!(
                shown.contains("shape.json") && shown.contains(&at),
                "{shown}"
            );
            (at, message)
        }
        Err(other) => panic!("expected BadShape, got {other}"),
        Ok(_) => panic!("expected BadShape, loaded fine"),
    }
}

/// The synthetic data with `edit` applied to its first conversation.
fn edited(edit: impl FnOnce(&mut Value)) -> Value {
    let mut v = synthetic();
    edit(&mut v[0]);
    v
}

#[test]
fn wrong_shapes_are_located() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"data": []}),
            "top level",
            "expected an array of conversations, found an object",
        ),
        (json!([3]), "[0]", "expected an object, found a number"),
        (
            edited(|c| {
                c.as_object_mut().unwrap().remove("qa");
            }),
            "[0]",
            "missing field `qa`",
        ),
        (
            edited(|c| {
                c.as_object_mut().unwrap().remove("sample_id");
            }),
            "[0]",
            "missing field `sample_id`",
        ),
        (
            edited(|c| c["conversation"] = json!([])),
            "[0].conversation",
            "expected an object, found an array",
        ),
        (
            edited(|c| c["conversation"]["session_2"] = json!({"a": 1})),
            "[0].conversation.session_2",
            "expected an array, found an object",
        ),
        (
            edited(|c| {
                c["conversation"]["session_1"][1]
                    .as_object_mut()
                    .unwrap()
                    .remove("dia_id");
            }),
            "[0].conversation.session_1[1]",
            "missing field `dia_id`",
        ),
        (
            edited(|c| c["conversation"]["session_10"][0]["text"] = json!(7)),
            "[0].conversation.session_10[0].text",
            "expected a string, found a number",
        ),
        (
            edited(|c| c["conversation"]["session_1"][0]["blip_caption"] = json!(["x"])),
            "[0].conversation.session_1[0].blip_caption",
            "expected a string, found an array",
        ),
        (
            edited(|c| c["conversation"]["session_2_date_time"] = json!(null)),
            "[0].conversation.session_2_date_time",
            "expected a string, found null",
        ),
        (
            edited(|c| c["qa"] = json!({})),
            "[0].qa",
            "expected an array, found an object",
        ),
        (
            edited(|c| c["qa"][1]["category"] = json!(7)),
            "[0].qa[1].category",
            "expected 1 to 5, found 7",
        ),
        (
            edited(|c| c["qa"][1]["category"] = json!("2")),
            "[0].qa[1].category",
            "expected a category number from 1 to 5, found a string",
        ),
        (
            edited(|c| {
                c["qa"][0].as_object_mut().unwrap().remove("question");
            }),
            "[0].qa[0]",
            "missing field `question`",
        ),
        (
            edited(|c| c["qa"][0]["evidence"] = json!("D1:2")),
            "[0].qa[0].evidence",
            "expected an array, found a string",
        ),
        (
            edited(|c| c["qa"][1]["evidence"][2] = json!(12)),
            "[0].qa[1].evidence[2]",
            "expected a string, found a number",
        ),
        (
            edited(|c| c["qa"][0]["answer"] = json!(["a"])),
            "[0].qa[0].answer",
            "expected a string or a number, found an array",
        ),
        (
            {
                let mut v = synthetic();
                v[1]["sample_id"] = json!("c1");
                v
            },
            "[1].sample_id",
            "sample_id `c1` is also the id of conversation [0]",
        ),
    ];
    for (v, at, message) in cases {
        let (got_at, got_message) = shape_error(&v);
        assert_eq!((got_at.as_str(), got_message.as_str()), (at, message));
    }
}

#[test]
fn null_session_is_skipped_and_missing_date_warned() {
    let v = edited(|c| {
        c["conversation"]["session_2"] = json!(null);
        c["conversation"]
            .as_object_mut()
            .unwrap()
            .remove("session_10_date_time");
    });
    let dir = TempDir::new().unwrap();
    let path = write_json(&dir, "locomo.json", &v);
    let set = load_locomo(&path, None).unwrap();
    assert!(set.turn("c1", "D2:1").is_none());
    assert_eq!(set.turn("c1", "D10:1").unwrap().session_date, "");
    // D2:1 is now missing too.
    assert_eq!(set.questions[1].evidence, strings(&["D1:1", "D10:1"]));
    assert_eq!(set.evidence.missing, 2);
    let w = set.warnings.join("\n");
    assert!(
        w.contains("session(s) without a date (session_date left empty): c1 session_10"),
        "{w}"
    );
    assert!(w.contains("2 session date(s) without a session (ignored): c1 session_2_date_time, c1 session_11_date_time"), "{w}");
}

#[test]
fn repeated_turn_ids_are_skipped() {
    let v = edited(|c| {
        c["conversation"]["session_2"][0]["dia_id"] = json!("D1:1");
    });
    let dir = TempDir::new().unwrap();
    let path = write_json(&dir, "locomo.json", &v);
    let set = load_locomo(&path, None).unwrap();
    assert_eq!(set.turns.len(), 5);
    let w = set.warnings.join("\n");
    assert!(
        w.contains("1 turn(s) repeat a dia_id of their conversation (skipped): c1 D1:1"),
        "{w}"
    );
}

// ---------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------

#[test]
fn evidence_recall_cases() {
    let ev = strings(&["D1:1", "D1:2"]);
    let r = strings(&["x", "D1:2", "y", "D1:1"]);
    close(evidence_recall(&r, &ev, 1), 0.0);
    close(evidence_recall(&r, &ev, 2), 0.5);
    close(evidence_recall(&r, &ev, 3), 0.5);
    close(evidence_recall(&r, &ev, 4), 1.0);
    close(evidence_recall(&r, &ev, 100), 1.0);
    close(evidence_recall(&r, &ev, 0), 0.0);
    close(evidence_recall(&[], &ev, 10), 0.0);
    // A retrieved id repeated counts once; repeated evidence counts once.
    let r = strings(&["D1:1", "D1:1"]);
    close(evidence_recall(&r, &ev, 10), 0.5);
    close(evidence_recall(&r, &strings(&["D1:1", "D1:1"]), 10), 1.0);
    // No evidence: not scored.
    assert_eq!(evidence_recall(&r, &[], 10), None);
}

fn question(conversation: &str, category: u8, evidence: &[&str]) -> MemQuestion {
    MemQuestion {
        conversation: conversation.into(),
        question: format!("q{category}"),
        answer: None,
        adversarial_answer: None,
        evidence: strings(evidence),
        category,
    }
}

fn scoring_set() -> LocomoSet {
    LocomoSet {
        questions: vec![
            question("a", 1, &["D1:1", "D1:2"]),
            question("a", 4, &["D2:5"]),
            question("a", 5, &["D3:1"]),
            question("a", 3, &[]),
            question("b", 2, &["D1:1"]),
            question("b", 4, &["D1:9"]),
        ],
        ..LocomoSet::default()
    }
}

fn scoring_runs() -> Vec<(usize, Vec<String>, f64)> {
    vec![
        // D1:2 at rank 5, D1:1 at rank 8.
        (
            0,
            strings(&["x1", "x2", "x3", "x4", "D1:2", "x5", "x6", "D1:1"]),
            10.0,
        ),
        // A key of the question's own conversation matches.
        (1, strings(&["a:D2:5"]), 20.0),
        (2, strings(&["D9:9"]), 30.0),
        // No evidence: latency only.
        (3, strings(&["D1:1"]), 40.0),
        // A key of another conversation never matches; the own key at rank 6 does.
        (
            4,
            strings(&["a:D1:1", "x1", "x2", "x3", "x4", "b:D1:1"]),
            50.0,
        ),
        // Unknown question, repeated question: ignored.
        (99, Vec::new(), 1.0),
        (1, Vec::new(), 1.0),
    ]
}

#[test]
fn scores_by_category() {
    let report = score_memory_retrieval(&scoring_set(), &scoring_runs());
    assert_eq!(report.runs, 5);
    assert_eq!(report.missing_runs, 1);
    assert_eq!(report.ignored_runs, 2);
    assert_eq!(report.categories.len(), 5);
    for (c, name) in (1u8..).zip(CATEGORY_NAMES) {
        let cat = report.category(c).unwrap();
        assert_eq!(cat.name, name);
    }

    let s = &report.category(1).unwrap().stats;
    assert_eq!((s.questions, s.without_evidence), (1, 0));
    close(s.recall_at_5, 0.5);
    close(s.recall_at_10, 1.0);
    close(s.complete_at_10, 1.0);
    close(s.latency_mean_ms, 10.0);

    let s = &report.category(2).unwrap().stats;
    close(s.recall_at_5, 0.0);
    close(s.recall_at_10, 1.0);

    let s = &report.category(3).unwrap().stats;
    assert_eq!((s.questions, s.without_evidence), (0, 1));
    assert_eq!(
        (s.recall_at_5, s.recall_at_10, s.complete_at_10),
        (None, None, None)
    );
    close(s.latency_mean_ms, 40.0);

    let s = &report.category(4).unwrap().stats;
    assert_eq!(s.questions, 1);
    close(s.recall_at_5, 1.0);

    let s = &report.category(5).unwrap().stats;
    assert_eq!(s.questions, 1);
    close(s.recall_at_10, 0.0);
    close(s.complete_at_10, 0.0);

    // Overall: categories 1-4 pooled over questions, category 5 left out.
    let o = &report.overall;
    assert_eq!((o.questions, o.without_evidence), (3, 1));
    close(o.recall_at_5, 0.5);
    close(o.recall_at_10, 1.0);
    close(o.complete_at_10, 1.0);
    close(o.latency_mean_ms, 30.0);

    close(report.latency_mean_ms, 30.0);
    close(report.latency_p50_ms, 30.0);
    close(report.latency_p95_ms, 50.0);

    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["categories"][0]["name"], "multi-hop");
    assert_eq!(json["categories"][0]["recall_at_10"], 1.0);
    assert_eq!(json["categories"][2]["recall_at_10"], Value::Null);
    assert_eq!(json["overall"]["questions"], 3);
    let back: MemRetrievalReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
}

#[test]
fn scores_nothing() {
    let report = score_memory_retrieval(&scoring_set(), &[]);
    assert_eq!((report.runs, report.missing_runs), (0, 6));
    assert_eq!(report.overall.recall_at_10, None);
    assert_eq!(report.latency_p50_ms, None);
    assert_eq!(report.categories.len(), 5);
}

#[test]
fn side_by_side_table() {
    let memory = score_memory_retrieval(&scoring_set(), &scoring_runs());
    let rows = vec![
        ("memory".to_string(), memory.clone()),
        ("bm25".to_string(), MemRetrievalReport::default()),
        ("vector-long-label".to_string(), memory),
    ];
    let t = render_memory_side_by_side(&rows);
    let lines: Vec<&str> = t.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["metric", "memory", "bm25", "vector-long-label"]);
    assert!(lines[1].chars().all(|c| c == '-'));
    let row = |prefix: &str| -> Vec<&str> {
        let line = lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix:?} in\n{t}"));
        line[prefix.len()..].split_whitespace().collect()
    };
    assert_eq!(row("questions (1-4)"), ["3", "0", "3"]);
    assert_eq!(row("recall@10 multi-hop (1)"), ["1.0000", "-", "1.0000"]);
    assert_eq!(row("recall@10 temporal (2)"), ["1.0000", "-", "1.0000"]);
    assert_eq!(row("recall@10 open-domain (3)"), ["-", "-", "-"]);
    assert_eq!(row("recall@10 single-hop (4)"), ["1.0000", "-", "1.0000"]);
    assert_eq!(row("recall@5 overall (1-4)"), ["0.5000", "-", "0.5000"]);
    assert_eq!(row("recall@10 overall (1-4)"), ["1.0000", "-", "1.0000"]);
    assert_eq!(row("questions (5)"), ["1", "0", "1"]);
    assert_eq!(row("recall@10 adversarial (5)"), ["0.0000", "-", "0.0000"]);
    assert_eq!(row("latency p50 (ms)"), ["30.00", "-", "30.00"]);
    assert_eq!(row("latency p95 (ms)"), ["50.00", "-", "50.00"]);
    assert_eq!(lines.len(), 2 + 11);
    // Category 5 comes after the overall rows.
    let pos = |p: &str| lines.iter().position(|l| l.starts_with(p)).unwrap();
    assert!(pos("recall@10 adversarial") > pos("recall@10 overall"));
    let w = lines[0].len();
    for l in &lines {
        assert_eq!(l.len(), w, "{l:?}");
    }
    assert!(t.ends_with('\n'));
    // One system: the same layout.
    let one = rows[0].1.table("memory");
    assert_eq!(one.lines().count(), 13);
    assert!(render_memory_side_by_side(&[]).starts_with("metric"));
}

// ---------------------------------------------------------------------------------------
// The real data
// ---------------------------------------------------------------------------------------

fn real_file() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/locomo/locomo-conversations-1-5.json");
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "skipping: LoCoMo data not found at {} (see shared/data/README.md)",
            path.display()
        );
        None
    }
}

#[test]
fn real_locomo_counts() {
    let Some(path) = real_file() else {
        return;
    };
    let set = load_locomo(&path, None).unwrap();
    for w in &set.warnings {
        eprintln!("warning: {w}");
    }
    assert_eq!(
        set.conversations(),
        ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    );
    assert_eq!(set.turns.len(), 2760);
    let mut turns_per_conv: BTreeMap<&str, usize> = BTreeMap::new();
    for t in &set.turns {
        *turns_per_conv.entry(&t.conversation).or_default() += 1;
    }
    assert_eq!(
        turns_per_conv.into_iter().collect::<Vec<_>>(),
        [
            ("conv-26", 419),
            ("conv-30", 369),
            ("conv-41", 663),
            ("conv-42", 629),
            ("conv-43", 680)
        ]
    );
    let captioned = set
        .turns
        .iter()
        .filter(|t| t.text.contains(" [shares a photo of: "))
        .count();
    assert_eq!(captioned, 602);
    assert!(set.turns.iter().all(|t| !t.session_date.is_empty()));

    assert_eq!(set.questions.len(), 999);
    let mut per_category = [0usize; 5];
    for q in &set.questions {
        per_category[usize::from(q.category - 1)] += 1;
    }
    assert_eq!(per_category, [142, 156, 46, 418, 237]);
    let with_evidence = set
        .questions
        .iter()
        .filter(|q| !q.evidence.is_empty())
        .count();
    assert_eq!(with_evidence, 997);
    // Every non-adversarial question has an answer; two adversarial ones have one too.
    let answered = set.questions.iter().filter(|q| q.answer.is_some()).count();
    assert_eq!(answered, 764);
    assert!(set
        .questions
        .iter()
        .filter(|q| q.category != 5)
        .all(|q| q.answer.is_some() && q.adversarial_answer.is_none()));
    assert!(set
        .questions
        .iter()
        .filter(|q| q.category == 5)
        .all(|q| q.adversarial_answer.is_some()));
    // conv-26 qa[1] has the number 2022 as its answer.
    assert_eq!(set.questions[1].answer.as_deref(), Some("2022"));

    // The evidence quirks of the file.
    assert_eq!(
        set.evidence,
        EvidenceStats {
            kept: 1349,
            split_entries: 1,
            repaired: 1,
            malformed: 1,
            missing: 1,
            duplicates: 0,
        }
    );
    let w = set.warnings.join("\n");
    assert!(w.contains(r#"conv-26 qa[37] "D8:6; D9:17""#), "{w}");
    assert!(w.contains(r#"conv-43 qa[18] "D:11:26" -> D11:26"#), "{w}");
    assert!(w.contains(r#"conv-42 qa[88] "D""#), "{w}");
    assert!(w.contains("conv-42 qa[58] D10:19"), "{w}");
    // conv-26 has dates for sessions 20-35 but no such sessions.
    assert!(w.contains("16 session date(s) without a session"), "{w}");
    assert_eq!(set.warnings.len(), 5, "{w}");

    // After cleaning, every evidence id names a turn of its conversation.
    let keys: HashSet<String> = set.turns.iter().map(Turn::key).collect();
    assert_eq!(keys.len(), set.turns.len());
    let dangling: Vec<String> = set
        .questions
        .iter()
        .flat_map(|q| q.evidence.iter().map(|e| turn_key(&q.conversation, e)))
        .filter(|k| !keys.contains(k))
        .collect();
    assert!(dangling.is_empty(), "{dangling:?}");

    // A perfect retriever (the evidence itself) has recall 1 everywhere.
    let runs: Vec<(usize, Vec<String>, f64)> = set
        .questions
        .iter()
        .enumerate()
        .map(|(i, q)| (i, q.evidence.clone(), 1.0))
        .collect();
    let report = score_memory_retrieval(&set, &runs);
    assert_eq!(report.runs, 999);
    assert_eq!(report.overall.questions, 142 + 156 + 44 + 418);
    close(report.overall.recall_at_10, 1.0);
    let longest = set
        .questions
        .iter()
        .map(|q| q.evidence.len())
        .max()
        .unwrap();
    assert!(longest > 5, "longest evidence list {longest}");
    assert!(report.overall.recall_at_5.unwrap() < 1.0);
}

#[test]
fn real_locomo_selection() {
    let Some(path) = real_file() else {
        return;
    };
    let set = load_locomo(&path, Some(2..=3)).unwrap();
    assert_eq!(set.conversations(), ["conv-30", "conv-41"]);
    assert_eq!(set.turns.len(), 369 + 663);
    assert_eq!(set.questions.len(), 105 + 193);
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
}
