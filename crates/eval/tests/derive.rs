//! Derived sets (conflicts, multi-aspect) and their metrics: answer typing, the copies'
//! invariants, determinism, the loader's new fields and their bad input, and the scorer's
//! conflict / aspect / fragment metrics on hand-made outcomes, also read back from
//! per-question lines. The real-data tests skip with a message when ../shared/data is
//! absent.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use neuralcore_eval::{
    answer_contains, answer_fragments, answer_type, derive_aspects, derive_conflicts,
    join_questions, load_squad2, read_qa_lines, render_side_by_side, replace_answer, score,
    score_lines, split_sentences, strip_citation_markers, AnswerType, Aspect, ConflictOutcome,
    DeriveOptions, EngineAspect, EvalError, QaLine, QaOutcome, QaPassage, QaQuestion, QaSet,
};
use serde_json::{json, Value};
use tempfile::TempDir;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn write(dir: &TempDir, name: &str, body: &str) -> PathBuf {
    let path = dir.path().join(name);
    fs::write(&path, body).unwrap();
    path
}

// ---------------------------------------------------------------------------------------
// Answer types, replacement, joining
// ---------------------------------------------------------------------------------------

#[test]
fn answer_types_by_simple_rules() {
    use AnswerType::*;
    let cases: &[(&str, Option<AnswerType>)] = &[
        ("1066", Some(Year)),
        ("1990s", Some(Year)),
        ("300 BC", Some(Year)),
        ("June 1, 2014", Some(Date)),
        ("5 May 1812", Some(Date)),
        ("March 2003", Some(Date)),
        ("October 21st", Some(Date)),
        ("42", Some(Number)),
        ("1,500", Some(Number)),
        ("3.5", Some(Number)),
        ("12%", Some(Number)),
        ("$40", Some(Number)),
        ("7 million", Some(Number)),
        ("Rollo", Some(Name)),
        ("Levi's Stadium", Some(Name)),
        ("University of Chicago", Some(Name)),
        ("Denver Broncos", Some(Name)),
        ("the Normans", None),
        ("June", None),
        ("Monday", None),
        ("ten years", None),
        ("2 hours and 30 minutes", None),
        ("a large fleet", None),
        ("of", None),
        ("P", None),
        ("NP", Some(Name)),
        ("", None),
        ("Super Bowl 50", None),
        ("One Two Three Four Five Six Seven", None),
    ];
    for (text, expected) in cases {
        assert_eq!(answer_type(text), *expected, "{text:?}");
    }
}

#[test]
fn replacement_swaps_every_variant_on_word_boundaries() {
    let context = "Rollo came in 911. In 911 the treaty gave Rollo land; Rollonian is no word.";
    let golds = strings(&["Rollo", "Duke Rollo"]);
    let copy = replace_answer(context, &golds, "Rollo", "Ivar").unwrap();
    assert_eq!(
        copy,
        "Ivar came in 911. In 911 the treaty gave Ivar land; Rollonian is no word."
    );
    let golds = strings(&["911", "in 911"]);
    let copy = replace_answer(context, &golds, "911", "1204").unwrap();
    assert_eq!(
        copy,
        "Rollo came in 1204. In 1204 the treaty gave Rollo land; Rollonian is no word."
    );
    assert_eq!(
        replace_answer(context, &strings(&["Paris"]), "Paris", "Rome"),
        None
    );
    // Multi-byte text.
    let copy = replace_answer(
        "Ça à Zürich, Zürichsee.",
        &strings(&["Zürich"]),
        "Zürich",
        "Bern",
    );
    assert_eq!(copy.as_deref(), Some("Ça à Bern, Zürichsee."));
    // A gold answer that takes the sentence's period along keeps it in the copy.
    let copy = replace_answer(
        "It was based upon a passage in the Book of Isaiah. In 1997 they released a song.",
        &strings(&["Book of Isaiah."]),
        "Book of Isaiah.",
        "The Wind Waker",
    );
    assert_eq!(
        copy.as_deref(),
        Some("It was based upon a passage in the The Wind Waker. In 1997 they released a song.")
    );
    // An abbreviation's period is its own: not carried over.
    for core in ["U.S.", "Martin Luther King Jr."] {
        let copy = replace_answer(
            &format!("It was run by the {core} Navy."),
            &strings(&[core]),
            core,
            "Texas",
        );
        assert_eq!(
            copy.as_deref(),
            Some("It was run by the Texas Navy."),
            "{core}"
        );
    }
}

#[test]
fn questions_join_four_ways() {
    let a = "When did the Normans arrive? ";
    let b = "Who founded Normandy?";
    assert_eq!(
        join_questions(a, b, 0),
        "When did the Normans arrive, and who founded Normandy?"
    );
    assert_eq!(
        join_questions(a, b, 1),
        "When did the Normans arrive; also, who founded Normandy?"
    );
    assert_eq!(
        join_questions(a, b, 2),
        "When did the Normans arrive? And who founded Normandy?"
    );
    assert_eq!(
        join_questions(a, b, 3),
        "When did the Normans arrive? Also, who founded Normandy?"
    );
    // A name opening the second question keeps its capital.
    assert_eq!(
        join_questions(a, "Beyoncé was born where?", 0),
        "When did the Normans arrive, and Beyoncé was born where?"
    );
}

// ---------------------------------------------------------------------------------------
// Derivation on a small synthetic file
// ---------------------------------------------------------------------------------------

/// Three articles; years, names and numbers to swap.
fn source_doc() -> Value {
    let para = |context: &str, qas: Value| json!({"context": context, "qas": qas});
    let qa = |id: &str, q: &str, context: &str, answers: &[&str]| {
        json!({"id": id, "question": q, "is_impossible": false,
               "answers": answers.iter().map(|a| json!({
                   "text": a, "answer_start": context.find(a).map(|b| context[..b].chars().count())
               })).collect::<Vec<_>>()})
    };
    let c1 = "The abbey was founded in 1066 by monks. It burned down in 1204. Pilgrims came.";
    let c2 = "Rollo led the Vikings. He signed a treaty with Charles. Normandy grew.";
    let c3 = "The bridge is 340 metres long. It opened in 1932. Trams crossed it.";
    let c4 = "The city had 12 gates. Its mayor was Anna Berg. Trade flourished.";
    let c5 = "The war ended in 1815. The congress met in Vienna. Peace lasted.";
    let c6 = "The king was Harald. He ruled from Trondheim. His son was Olaf.";
    json!({"version": "v2.0", "data": [
        {"title": "Abbey_A", "paragraphs": [
            para(c1, json!([qa("y1", "When was the abbey founded?", c1, &["1066", "in 1066"]),
                            {"id": "u1", "question": "Why?", "is_impossible": true, "answers": []}])),
            para(c2, json!([qa("n1", "Who led the Vikings?", c2, &["Rollo"])])),
        ]},
        {"title": "Bridge_B", "paragraphs": [
            para(c3, json!([qa("y2", "When did the bridge open?", c3, &["1932"]),
                            qa("k1", "How long is the bridge?", c3, &["340"])])),
            para(c4, json!([qa("k2", "How many gates?", c4, &["12"]),
                            qa("n2", "Who was mayor?", c4, &["Anna Berg"])])),
        ]},
        {"title": "War_C", "paragraphs": [
            para(c5, json!([qa("y3", "When did the war end?", c5, &["1815"]),
                            qa("n3", "Where did the congress meet?", c5, &["Vienna"])])),
            para(c6, json!([qa("n4", "Who was king?", c6, &["Harald"])])),
        ]},
    ]})
}

fn opts(questions: usize, true_sources: usize) -> DeriveOptions {
    DeriveOptions {
        articles: None,
        questions,
        seed: 7,
        true_sources,
    }
}

fn passage<'a>(set: &'a QaSet, id: &str) -> &'a QaPassage {
    set.passage(id)
        .unwrap_or_else(|| panic!("passage {id} missing"))
}

/// Checks the invariants of a conflict set and returns it loaded.
fn check_conflict_set(path: &Path, true_sources: usize) -> QaSet {
    let set = load_squad2(path, None).unwrap();
    let texts: Vec<&str> = set.passages.iter().map(|p| p.text.as_str()).collect();
    let distinct: HashSet<&str> = texts.iter().copied().collect();
    assert_eq!(distinct.len(), texts.len(), "identical passages");
    let mut paragraphs = HashSet::new();
    for q in &set.questions {
        assert!(q.answerable, "{}", q.id);
        assert_eq!(q.counterfactual.len(), 1, "{}", q.id);
        assert_eq!(q.counterfactual_passages.len(), 1, "{}", q.id);
        assert_eq!(q.passages.len(), true_sources, "{}", q.id);
        assert!(
            paragraphs.insert(q.passages[0].clone()),
            "two questions in one paragraph"
        );
        let original = passage(&set, &q.passages[0]);
        let copy = passage(&set, &q.counterfactual_passages[0]);
        assert!(copy.title.ends_with(" (another account)"), "{}", copy.title);
        assert_eq!(copy.title, format!("{} (another account)", original.title));
        let value = &q.counterfactual[0];
        // The copy keeps no gold answer, states the counterfactual, and differs from the
        // original only where the answer was.
        assert!(
            !answer_contains(&copy.text, &q.answers),
            "{}: {}",
            q.id,
            copy.text
        );
        assert!(answer_contains(&copy.text, &q.counterfactual), "{}", q.id);
        assert!(
            !answer_contains(&original.text, &q.counterfactual),
            "{}",
            q.id
        );
        let core = q.answers.iter().min_by_key(|a| a.chars().count()).unwrap();
        assert_eq!(
            copy.text.replace(value.as_str(), core),
            original.text,
            "{}",
            q.id
        );
        // Same type.
        assert_eq!(
            answer_type(core),
            answer_type(value),
            "{}: {core} / {value}",
            q.id
        );
        assert!(answer_type(value).is_some());
        if true_sources == 2 {
            let excerpt = passage(&set, &q.passages[1]);
            assert_eq!(excerpt.title, format!("{} (excerpt)", original.title));
            assert!(original.text.contains(&excerpt.text));
            assert!(excerpt.text.len() < original.text.len());
            assert!(answer_contains(&excerpt.text, &q.answers));
        }
    }
    set
}

#[test]
fn conflict_sets_are_deterministic_and_clean() {
    let tmp = TempDir::new().unwrap();
    let src = write(&tmp, "src.json", &source_doc().to_string());
    let one = derive_conflicts(&src, &opts(100, 1)).unwrap();
    let again = derive_conflicts(&src, &opts(100, 1)).unwrap();
    assert_eq!(one.to_json_string(), again.to_json_string());
    // Every answerable question with a typed answer, one per paragraph: 6 paragraphs.
    assert_eq!(one.questions, 6, "{}", one.to_json_string());
    assert_eq!(one.passages, 6 + 6);
    let types: usize = one.by_type.iter().map(|(_, n)| n).sum();
    assert_eq!(types, 6);
    let path = write(&tmp, "c1.json", &one.to_json_string());
    let set = check_conflict_set(&path, 1);
    assert_eq!(set.questions.len(), 6);
    // Extra fields are what the file says; a plain reading keeps SQuAD's fields.
    let doc: Value = serde_json::from_str(&one.to_json_string()).unwrap();
    let q0 = &doc["data"][0]["paragraphs"][0]["qas"][0];
    assert_eq!(q0["conflict"], json!(true));
    assert!(q0["answers"][0]["answer_start"].is_u64());
    assert_eq!(doc["derived"]["kind"], "conflicts");

    let two = derive_conflicts(&src, &opts(100, 2)).unwrap();
    assert_eq!(two.passages, 6 + 6 + 6);
    let path2 = write(&tmp, "c2.json", &two.to_json_string());
    let set2 = check_conflict_set(&path2, 2);
    // Same questions, same false values in both variants.
    let key = |s: &QaSet| {
        s.questions
            .iter()
            .map(|q| (q.id.clone(), q.counterfactual.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&set), key(&set2));

    // Another seed, another draw; a limit takes fewer.
    let other = derive_conflicts(
        &src,
        &DeriveOptions {
            seed: 8,
            ..opts(100, 1)
        },
    )
    .unwrap();
    assert_eq!(other.questions, 6);
    assert_eq!(derive_conflicts(&src, &opts(2, 1)).unwrap().questions, 2);
    let err = derive_conflicts(&src, &opts(5, 3)).unwrap_err();
    assert!(err.to_string().contains("1 or 2"), "{err}");
}

#[test]
fn aspect_sets_join_questions_of_different_articles() {
    let tmp = TempDir::new().unwrap();
    let src = write(&tmp, "src.json", &source_doc().to_string());
    let a = derive_aspects(&src, &opts(100, 1)).unwrap();
    assert_eq!(
        a.to_json_string(),
        derive_aspects(&src, &opts(100, 1))
            .unwrap()
            .to_json_string()
    );
    assert!(a.questions >= 3, "{}", a.to_json_string());
    let path = write(&tmp, "a.json", &a.to_json_string());
    let set = load_squad2(&path, None).unwrap();
    let source = load_squad2(&src, None).unwrap();
    assert_eq!(set.passages.len(), source.passages.len());
    assert_eq!(set.questions.len(), a.questions);
    for q in &set.questions {
        assert_eq!(q.aspects.len(), 2);
        let (first, second) = (&q.aspects[0], &q.aspects[1]);
        let p1 = first.passage.clone().unwrap();
        let p2 = second.passage.clone().unwrap();
        assert_eq!(q.passages, [p1.clone(), p2.clone()]);
        // Different articles: "squad2:<article>:<paragraph>".
        let article = |p: &str| p.split(':').nth(1).unwrap().to_string();
        assert_ne!(article(&p1), article(&p2));
        assert_eq!(q.answers, first.answers);
        // Supporting sentences in both passages.
        let sup: HashSet<&str> = q.supporting.iter().map(|s| s.passage.as_str()).collect();
        assert_eq!(sup, HashSet::from([p1.as_str(), p2.as_str()]));
        assert!(!answer_contains(&passage(&set, &p1).text, &second.answers));
        // Each aspect is a question of the source with the same answers.
        let ids: Vec<&str> = q.id.split('+').collect();
        for (id, aspect) in ids.iter().zip(&q.aspects) {
            let orig = source.questions.iter().find(|x| x.id == *id).unwrap();
            assert_eq!(orig.answers, aspect.answers);
            assert_eq!(orig.question.trim(), aspect.question);
        }
    }
    // Fewer than two articles cannot be joined.
    let one = DeriveOptions {
        articles: Some(1..=1),
        ..opts(10, 1)
    };
    let err = derive_aspects(&src, &one).unwrap_err();
    assert!(matches!(err, EvalError::InvalidSelection { .. }), "{err}");
}

// ---------------------------------------------------------------------------------------
// Loader: bad derived fields
// ---------------------------------------------------------------------------------------

fn with_field(key: &str, value: Value) -> Value {
    let mut doc = source_doc();
    doc["data"][0]["paragraphs"][0]["qas"][0][key] = value;
    doc
}

#[test]
fn malformed_derived_fields_are_clear_errors() {
    let tmp = TempDir::new().unwrap();
    let at = "data[0].paragraphs[0].qas[0]";
    let cases = [
        (with_field("counterfactual", json!("1204")), format!("{at}.counterfactual: expected an array of strings, found a string")),
        (with_field("counterfactual", json!([1204])), format!("{at}.counterfactual[0]: expected a string, found a number")),
        (with_field("counterfactual", json!([])), format!("{at}.counterfactual: expected at least one counterfactual value")),
        (with_field("counterfactual", json!([" "])), format!("{at}.counterfactual[0]: expected a non-empty string")),
        (with_field("conflict", json!("yes")), format!("{at}.conflict: expected a boolean")),
        (with_field("conflict", json!(true)), format!("{at}.conflict: a conflict question needs a `counterfactual`")),
        (with_field("aspects", json!({"question": "x"})), format!("{at}.aspects: expected an array of {{question, answers}} objects, found an object")),
        (with_field("aspects", json!([{"question": "x", "answers": ["a"]}])), format!("{at}.aspects: expected at least two aspects, found 1")),
        (with_field("aspects", json!([{"question": "x", "answers": ["a"]}, {"answers": ["b"]}])), format!("{at}.aspects[1]: missing field `question`")),
        (with_field("aspects", json!([{"question": "x", "answers": ["a"]}, {"question": "y", "answers": []}])), format!("{at}.aspects[1].answers: an aspect needs at least one answer")),
        (with_field("aspects", json!([{"question": "x", "answers": ["a"]}, {"question": "y", "answers": [3]}])), format!("{at}.aspects[1].answers[0]: expected a string or a {{text, answer_start}} object, found a number")),
        (with_field("aspects", json!([{"question": "x", "answers": ["a"]}, {"question": "y", "answers": "b"}])), format!("{at}.aspects[1].answers: expected an array, found a string")),
        (with_field("aspects", json!([{"question": "x", "answers": ["a"]}, {"question": "y", "answers": ["b"], "passage": 4}])), format!("{at}.aspects[1].passage: expected a string, found a number")),
    ];
    for (doc, expected) in cases {
        let path = write(&tmp, "bad.json", &doc.to_string());
        let err = load_squad2(&path, None).unwrap_err();
        assert!(matches!(err, EvalError::BadShape { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("bad.json") && msg.contains(&expected),
            "{msg}\nexpected: {expected}"
        );
    }
    // Well-formed: strings or SQuAD answer objects; an unknown passage is a warning.
    let doc = with_field(
        "aspects",
        json!([{"question": "x", "answers": ["1066"]},
               {"question": "y", "answers": [{"text": "Rollo", "answer_start": 0}], "passage": "squad2:0:1"},
               {"question": "z", "answers": ["q"], "passage": "squad2:9:9"}]),
    );
    let set = load_squad2(&write(&tmp, "ok.json", &doc.to_string()), None).unwrap();
    let q = &set.questions[0];
    assert_eq!(q.aspects.len(), 3);
    assert_eq!(q.aspects[1].answers, ["Rollo"]);
    assert_eq!(q.passages, ["squad2:0:0", "squad2:0:1"]);
    assert!(q
        .supporting
        .iter()
        .any(|s| s.passage == "squad2:0:1" && s.span == (0, 22)));
    assert_eq!(set.warnings.len(), 1, "{:?}", set.warnings);
    assert!(set.warnings[0].contains("squad2:9:9"), "{:?}", set.warnings);
}

// ---------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------

fn conflict_question(id: &str) -> QaQuestion {
    QaQuestion {
        id: id.into(),
        question: "When was it founded?".into(),
        answers: strings(&["1066", "in 1066"]),
        answerable: true,
        passages: vec!["p1".into()],
        kind: "answerable".into(),
        counterfactual: strings(&["1204"]),
        counterfactual_passages: vec!["p2".into()],
        ..QaQuestion::default()
    }
}

fn aspect_question(id: &str) -> QaQuestion {
    let aspect = |q: &str, a: &[&str]| Aspect {
        question: q.into(),
        answers: strings(a),
        passage: None,
    };
    QaQuestion {
        id: id.into(),
        question: "When was it founded, and who led the Vikings?".into(),
        answers: strings(&["1066"]),
        answerable: true,
        passages: vec!["p1".into()],
        kind: "answerable".into(),
        aspects: vec![
            aspect("When was it founded?", &["1066"]),
            aspect("Who led the Vikings?", &["Rollo", "Duke Rollo"]),
        ],
        ..QaQuestion::default()
    }
}

fn set_of(questions: Vec<QaQuestion>) -> QaSet {
    QaSet {
        name: "derived".into(),
        passages: Vec::new(),
        questions,
        title_conflicts: 0,
        offset_mismatches: 0,
        warnings: Vec::new(),
    }
}

fn said(q: &str, answer: Option<&str>) -> QaOutcome {
    QaOutcome {
        question: q.into(),
        abstained: answer.is_none(),
        answer: answer.unwrap_or("").into(),
        ..QaOutcome::default()
    }
}

fn close(a: Option<f64>, b: f64) {
    let a = a.expect("a value");
    assert!((a - b).abs() < 1e-12, "{a} != {b}");
}

#[test]
fn conflict_metrics_on_hand_made_outcomes() {
    let set = set_of(
        (1..=6)
            .map(|i| conflict_question(&format!("c{i}")))
            .collect(),
    );
    let mut outcomes = vec![
        // Surfaced: both values.
        said(
            "c1",
            Some("Sources disagree: it was founded in 1066 [1], or in 1204 [2]."),
        ),
        // Misled.
        said("c2", Some("It was founded in 1204.")),
        // True only.
        said("c3", Some("It was founded in 1066.")),
        // Neither.
        said("c4", Some("It was founded long ago.")),
        // Abstained.
        said("c5", None),
        // Misled, and a fragment.
        said("c6", Some("in 1204")),
    ];
    outcomes[0].conflicts_reported = Some(1);
    outcomes[0].retrieved_passages = strings(&["p1", "p2"]);
    outcomes[1].conflicts_reported = Some(0);
    outcomes[1].retrieved_passages = strings(&["p2"]);
    let r = score(&set, &outcomes);
    assert_eq!(r.conflict_questions, 6);
    assert_eq!(
        (
            r.conflict_surfaced,
            r.misled,
            r.true_only,
            r.conflict_neither,
            r.conflict_abstained
        ),
        (1, 2, 1, 1, 1)
    );
    close(r.conflict_surfaced_rate, 1.0 / 6.0);
    // Of the four answers stating a side (c1, c2, c3, c6), one says it is disputed.
    close(r.surfaced_when_stated_rate, 1.0 / 4.0);
    close(r.misled_rate, 2.0 / 6.0);
    close(r.true_only_rate, 1.0 / 6.0);
    close(r.conflict_neither_rate, 1.0 / 6.0);
    close(r.conflict_abstained_rate, 1.0 / 6.0);
    close(r.both_sides_kept_rate, 1.0 / 6.0);
    // The engine's own count: recorded for c1 and c2 only.
    assert_eq!(
        (r.engine_conflict_questions, r.engine_conflict_reported),
        (2, 1)
    );
    close(r.engine_conflict_rate, 0.5);
    // The standard accuracy counts the surfaced answer as correct.
    assert_eq!(r.correct_answers, 2);
    // Fragments: 5 answered, 5 sentences, "in 1204" is one.
    assert_eq!(
        (
            r.answer_sentences,
            r.fragment_sentences,
            r.answers_with_fragment
        ),
        (5, 1, 1)
    );
    close(r.fragment_rate, 0.2);
    close(r.answers_with_fragment_rate, 0.2);
    assert_eq!(r.aspect_questions, 0);
    assert_eq!(r.all_aspects_rate, None);

    let table = render_side_by_side(&[("full".into(), r)]);
    assert!(table.contains("conflict surfaced (both values)"), "{table}");
    assert!(table.contains("1 (0.1667)"), "{table}");
    assert!(!table.contains("blanket abstention"), "{table}");
}

#[test]
fn aspect_metrics_on_hand_made_outcomes() {
    let set = set_of((1..=5).map(|i| aspect_question(&format!("a{i}"))).collect());
    let mut outcomes = vec![
        said(
            "a1",
            Some("It was founded in 1066. Duke Rollo led the Vikings."),
        ),
        said("a2", Some("It was founded in 1066.")),
        said("a3", Some("Rollo.")),
        said("a4", Some("Nobody knows when it was founded.")),
        said("a5", None),
    ];
    outcomes[0].aspects_reported = Some(vec![
        EngineAspect {
            aspect: "When was it founded?".into(),
            covered: true,
        },
        EngineAspect {
            aspect: "Who led the Vikings?".into(),
            covered: true,
        },
    ]);
    outcomes[1].aspects_reported = Some(Vec::new());
    // Asked alone: a1 and a2 had both aspects answered, a3 one, a4 and a5 not run.
    outcomes[0].aspects_alone = Some(vec![true, true]);
    outcomes[1].aspects_alone = Some(vec![true, true]);
    outcomes[2].aspects_alone = Some(vec![true, false]);
    let r = score(&set, &outcomes);
    assert_eq!(r.aspect_questions, 5);
    // Of the two answerable alone, a1 answers both joined; a2 only one.
    assert_eq!((r.answerable_alone, r.all_aspects_when_answerable), (2, 1));
    close(r.all_aspects_when_answerable_rate, 0.5);
    assert_eq!(
        (
            r.all_aspects,
            r.some_aspects,
            r.no_aspect,
            r.blanket_abstained
        ),
        (1, 2, 1, 1)
    );
    close(r.all_aspects_rate, 0.2);
    close(r.some_aspects_rate, 0.4);
    close(r.no_aspect_rate, 0.2);
    close(r.blanket_abstention_rate, 0.2);
    assert_eq!(r.engine_aspect_questions, 2);
    close(r.engine_split_rate, 0.5);
    close(r.engine_all_covered_rate, 0.5);
    // "Rollo." has no verb: a fragment.
    assert_eq!(r.fragment_sentences, 1);
    assert_eq!(r.answer_sentences, 5);
    assert_eq!(r.conflict_questions, 0);
    let table = render_side_by_side(&[("full".into(), r)]);
    assert!(table.contains("blanket abstention"), "{table}");
    assert!(!table.contains("misled"), "{table}");
}

#[test]
fn fragments_are_counted_without_citation_markers() {
    assert_eq!(
        strip_citation_markers("It rose [1]. It fell [2, 3].[4] See [note] and [x1]."),
        "It rose. It fell. See [note] and [x1]."
    );
    assert_eq!(
        answer_fragments(
            "Tides rise and fall twice a day [1]. The record for most medals [2]\nset the record at Levi's Stadium"
        ),
        ["The record for most medals", "set the record at Levi's Stadium"]
    );
    assert!(answer_fragments("").is_empty());
}

#[test]
fn per_question_lines_rescore_the_same_and_read_old_lines() {
    let set = set_of(vec![conflict_question("c1"), aspect_question("a1")]);
    let mut o1 = said("c1", Some("in 1204 or in 1066"));
    o1.conflicts_reported = Some(1);
    let o2 = said("a1", Some("It was founded in 1066."));
    let lines = [
        QaLine::new("full", &set.questions[0], &o1),
        QaLine::new("full", &set.questions[1], &o2),
    ];
    assert_eq!(lines[0].conflict, Some(ConflictOutcome::Surfaced));
    assert_eq!(lines[0].fragments, ["in 1204 or in 1066"]);
    assert_eq!(lines[1].aspects_answered, Some(1));
    let tmp = TempDir::new().unwrap();
    let body: String = lines
        .iter()
        .map(|l| serde_json::to_string(l).unwrap() + "\n")
        .collect();
    // A line written by an older build: no citations, no engine fields, extra fields.
    let old = json!({"ablation": "old", "id": "c1", "question": "?", "answerable": true,
        "gold": ["1066"], "abstained": false, "answer": "It was founded in 1204.",
        "correct": false, "iterations": 2, "latency_ms": 3.5,
        "verdicts": [{"passage": ["p2"], "verdict": "correct", "score": 0.9, "query": "q"}],
        "retrieved": ["p2"]});
    let path = write(&tmp, "pq.jsonl", &format!("{body}\n{old}\n"));
    let read = read_qa_lines(&path).unwrap();
    assert_eq!(read.len(), 3);
    assert_eq!(read[..2], lines);
    let reports = score_lines(&set, &read);
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0].0, "full");
    assert_eq!(
        reports[0].1,
        score(&set, &[o1, o2]),
        "re-scoring the lines gives the live report"
    );
    let (label, old_report) = &reports[1];
    assert_eq!(label, "old");
    assert_eq!(old_report.misled, 1);
    assert_eq!(old_report.missing_outcomes, 1);
    // Unknown for the old build: its citations and the engine's conflict count.
    assert_eq!(old_report.citation_precision, None);
    assert_eq!(old_report.answers_fully_cited, None);
    assert_eq!(old_report.engine_conflict_rate, None);
    close(old_report.latency_mean_ms, 3.5);

    // A malformed line names its line number.
    let bad = write(&tmp, "bad.jsonl", &format!("{body}{{\"id\": \"x\"}}\n"));
    let err = read_qa_lines(&bad).unwrap_err();
    assert!(
        matches!(err, EvalError::MalformedJson { line: 3, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("abstained"), "{err}");
}

#[test]
fn sentence_spans_come_from_the_project_splitter() {
    // Contiguous character spans; white space goes to the next sentence.
    let t = "It was in the U.S. Army. Then it left.\n\nÉté fini.  ";
    let spans = split_sentences(t);
    let chars: Vec<char> = t.chars().collect();
    let texts: Vec<String> = spans
        .iter()
        .map(|&(a, b)| chars[a..b].iter().collect())
        .collect();
    assert_eq!(
        texts,
        [
            "It was in the U.S. Army.",
            " Then it left.",
            "\n\nÉté fini.  "
        ]
    );
    assert_eq!(split_sentences("   "), [(0, 3)]);
}

// ---------------------------------------------------------------------------------------
// The real data
// ---------------------------------------------------------------------------------------

fn squad_dev() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/squad2/dev-v2.0-articles-1-8.json");
    if p.is_file() {
        Some(p)
    } else {
        eprintln!(
            "skipping: {} not found (see shared/data/README.md)",
            p.display()
        );
        None
    }
}

#[test]
fn real_squad2_derived_sets() {
    let Some(src) = squad_dev() else { return };
    let tmp = TempDir::new().unwrap();
    let base = DeriveOptions {
        articles: Some(1..=8),
        ..DeriveOptions::default()
    };
    for sources in [1, 2] {
        let o = DeriveOptions {
            true_sources: sources,
            ..base.clone()
        };
        let d = derive_conflicts(&src, &o).unwrap();
        assert_eq!(d.questions, 150, "{:?}", d.by_type);
        eprintln!(
            "conflicts {sources} vs 1: {} questions, {} passages, by type {:?}, {} skipped",
            d.questions, d.passages, d.by_type, d.skipped
        );
        let path = write(&tmp, &format!("c{sources}.json"), &d.to_json_string());
        let set = check_conflict_set(&path, sources);
        for q in set.questions.iter().take(3) {
            eprintln!(
                "  {}: {:?} -> {:?}",
                q.question, q.answers, q.counterfactual
            );
        }
    }
    let a = derive_aspects(
        &src,
        &DeriveOptions {
            questions: 100,
            ..base
        },
    )
    .unwrap();
    assert_eq!(a.questions, 100);
    let set = load_squad2(&write(&tmp, "a.json", &a.to_json_string()), None).unwrap();
    assert!(set.warnings.is_empty(), "{:?}", set.warnings);
    assert!(set
        .questions
        .iter()
        .all(|q| q.aspects.len() == 2 && q.passages.len() == 2));
    for q in set.questions.iter().take(4) {
        eprintln!("  {}", q.question);
    }
}

#[test]
fn abbreviation_answers_leave_no_stray_period() {
    // Gold "U.S" (SQuAD cut the last period) next to "U.S." in the text: no candidate.
    let c1 = "Then the U.S. was worried about oil. It acted in 1973. Prices rose.";
    let c2 = "The French fleet sailed in 1805. Spain joined later. Britain won.";
    let c3 = "The treaty was signed in Vienna. Austria hosted it. Russia came.";
    let doc = json!({"version": "v2.0", "data": [
        {"title": "A", "paragraphs": [{"context": c1, "qas": [
            {"id": "q1", "question": "Which country was worried?", "is_impossible": false,
             "answers": [{"text": "U.S", "answer_start": 9}, {"text": "the U.S.", "answer_start": 5}]}]}]},
        {"title": "B", "paragraphs": [{"context": c2, "qas": [
            {"id": "q2", "question": "Which country joined later?", "is_impossible": false,
             "answers": [{"text": "Spain", "answer_start": 33}]}]}]},
        {"title": "C", "paragraphs": [{"context": c3, "qas": [
            {"id": "q3", "question": "Which country hosted it?", "is_impossible": false,
             "answers": [{"text": "Austria", "answer_start": 34}]}]}]},
    ]});
    let tmp = TempDir::new().unwrap();
    let src = write(&tmp, "s.json", &doc.to_string());
    let d = derive_conflicts(&src, &opts(10, 1)).unwrap();
    let text = d.to_json_string();
    assert_eq!(d.questions, 2, "{text}");
    assert!(!text.contains("\"q1\""), "{text}");
}
