//! One conformance suite for every memory backend.
//!
//! Each `check_*` takes a factory that makes a fresh, empty backend (every check gets
//! its own) and uses it through [`MemoryStore`] and directly; [`check_all`] runs them
//! all. Backend test files call it with their own factory
//! (`crates/memory/tests/conformance.rs`), or run the checks one by one as separate
//! tests. Checks panic on failure, like `assert!`.
//!
//! Times are explicit (`now_ms` arguments), so decay, archive and purge are tested
//! without waiting.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use crate::trust::{self, TrustConfig};
use crate::{
    AuditEntry, Filter, Kind, MemScope, Memory, MemoryBackend, MemoryError, MemoryStore, NewMemory,
    RelKind, Relation, Signal, Status, MAX_TEXT_BYTES,
};

const T0: u64 = 1_750_000_000_000;
const DAY: u64 = 86_400_000;
/// The default settings without decay, for checks whose clock moves by milliseconds.
const NO_DECAY: TrustConfig = TrustConfig {
    initial: 0.5,
    used: 0.05,
    confirmed: 0.10,
    ignored: -0.05,
    corrected: -0.10,
    half_life_days: 0.0,
    archive_below: 0.3,
    purge_after_days: 30.0,
};
/// A well-formed memory id that no check creates.
const UNKNOWN: &str = "0123456789abcdef";

fn store(make: &dyn Fn() -> Arc<dyn MemoryBackend>) -> MemoryStore {
    store_with(make, TrustConfig::default())
}

fn store_with(make: &dyn Fn() -> Arc<dyn MemoryBackend>, cfg: TrustConfig) -> MemoryStore {
    MemoryStore::new(make(), cfg).expect("valid trust settings")
}

fn text(t: &str) -> NewMemory {
    NewMemory {
        text: t.to_string(),
        ..Default::default()
    }
}

fn scoped(t: &str, kind: Kind, tenant: &str, project: &str, session: &str) -> NewMemory {
    NewMemory {
        text: t.to_string(),
        kind: Some(kind),
        scope: MemScope {
            tenant: tenant.into(),
            project: project.into(),
            agent: String::new(),
            session: session.into(),
        },
        ..Default::default()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn ids(v: &[Memory]) -> Vec<&str> {
    v.iter().map(|m| m.id.as_str()).collect()
}

fn sorted(mut v: Vec<&str>) -> Vec<&str> {
    v.sort_unstable();
    v
}

fn events(log: &[AuditEntry]) -> Vec<&str> {
    log.iter().map(|e| e.event.as_str()).collect()
}

/// Each entry starts where the last one ended, times never go back, trust stays in
/// [0, 1], and every entry is about `id`.
fn assert_chain(id: &str, log: &[AuditEntry]) {
    for (i, e) in log.iter().enumerate() {
        assert_eq!(e.memory, id, "entry {i} of {id}'s log: {e:?}");
        for t in [e.trust_before, e.trust_after] {
            assert!((0.0..=1.0).contains(&t), "entry {i} leaves [0, 1]: {e:?}");
        }
        if i > 0 {
            let p = &log[i - 1];
            assert_eq!(
                e.trust_before,
                p.trust_after,
                "entry {i} does not start where entry {} ended: {p:?} then {e:?}",
                i - 1
            );
            assert!(
                e.at_ms >= p.at_ms,
                "entry {i} goes back in time: {p:?} {e:?}"
            );
        }
    }
}

fn is_not_found<T: std::fmt::Debug>(r: Result<T, MemoryError>) -> bool {
    matches!(r, Err(MemoryError::NotFound(_)))
}

fn is_invalid<T: std::fmt::Debug>(r: Result<T, MemoryError>) -> bool {
    matches!(r, Err(MemoryError::Invalid(_)))
}

fn is_conflict<T: std::fmt::Debug>(r: Result<T, MemoryError>) -> bool {
    matches!(r, Err(MemoryError::Conflict(_)))
}

/// Runs every check against fresh backends made by `make` (each check gets its own,
/// empty backend).
pub fn check_all(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    check_add_get(make);
    check_fields_roundtrip(make);
    check_list_filters(make);
    check_unknown_ids(make);
    check_bad_input(make);
    check_duplicate_insert(make);
    check_ids_unique_across_stores(make);
    check_update_atomic(make);
    check_signal_steps(make);
    check_signal_questions(make);
    check_clamp(make);
    check_decay(make);
    check_frequent_sweeps_keep_decay(make);
    check_archive_by_signal(make);
    check_archive_by_sweep(make);
    check_forget_restore(make);
    check_purge(make);
    check_relations(make);
    check_relation_rules(make);
    check_batched_reads(make);
    check_concurrent_used(make);
    check_concurrent_mixed(make);
    check_version(make);
}

/// A signal's question is kept in its audit entry (blank counts as none, too long is
/// refused and changes nothing), and [`crate::feedback::pairs`] makes one labelled pair
/// per (question, memory): confirmed/corrected outrank used/ignored, the latest of equal
/// weight wins, and signals without a question give none.
pub fn check_signal_questions(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store_with(make, NO_DECAY);
    let a = s.add(text("The vault code is ZQX4471."), "u", T0).unwrap();
    let b = s
        .add(text("The cafeteria opens at nine."), "u", T0)
        .unwrap();
    let q = "What is the vault code?";
    s.signal_about(&a.id, Signal::Used, "run-1", Some(q), T0 + 1)
        .unwrap();
    s.signal_about(&b.id, Signal::Ignored, "run-1", Some(q), T0 + 1)
        .unwrap();
    // The loop later ignored a; the user had confirmed it in between: the user wins.
    s.signal_about(&a.id, Signal::Confirmed, "user", Some(q), T0 + 2)
        .unwrap();
    s.signal_about(&a.id, Signal::Ignored, "run-2", Some(q), T0 + 3)
        .unwrap();
    // b used for another question, then the loop's latest word on it there: ignored.
    let q2 = "When does the cafeteria open?";
    s.signal_about(&b.id, Signal::Used, "run-3", Some(q2), T0 + 4)
        .unwrap();
    s.signal_about(&b.id, Signal::Ignored, "run-4", Some(q2), T0 + 5)
        .unwrap();
    s.signal_about(&b.id, Signal::Used, "run-5", Some("  "), T0 + 6)
        .unwrap();
    s.signal(&b.id, Signal::Confirmed, "user", T0 + 7).unwrap();
    let too_long = "q".repeat(crate::MAX_QUERY_BYTES + 1);
    let before = s.audit(&a.id).unwrap().len();
    assert!(is_invalid(s.signal_about(
        &a.id,
        Signal::Used,
        "u",
        Some(&too_long),
        T0 + 8
    )));
    assert_eq!(s.audit(&a.id).unwrap().len(), before);
    let log = s.audit(&a.id).unwrap();
    assert_eq!(log[1].query.as_deref(), Some(q));
    assert_eq!(log[0].query, None, "create names no question");

    let f = crate::feedback::pairs(&s, &Filter::default(), T0 + 9).unwrap();
    let got: Vec<(&str, &str, f32)> = f
        .pairs
        .iter()
        .map(|p| (p.question.as_str(), p.passage.as_str(), p.label))
        .collect();
    assert_eq!(
        got,
        [
            (q, "The cafeteria opens at nine.", 0.0),
            (q, "The vault code is ZQX4471.", 1.0),
            (q2, "The cafeteria opens at nine.", 0.0),
        ]
    );
    assert_eq!(
        f.pairs[1].source,
        format!("feedback:memory:{}:confirmed", a.id)
    );
    assert_eq!((f.memories, f.signals, f.without_question), (2, 6, 2));
    // A memory archived keeps its pairs when archived ones are asked for; other
    // tenants' memories are not read.
    s.forget(&b.id, "user", T0 + 10).unwrap();
    assert_eq!(
        crate::feedback::pairs(&s, &Filter::default(), T0 + 11)
            .unwrap()
            .pairs
            .len(),
        1
    );
    let all = Filter {
        statuses: vec![Status::Active, Status::Archived],
        ..Default::default()
    };
    assert_eq!(
        crate::feedback::pairs(&s, &all, T0 + 11)
            .unwrap()
            .pairs
            .len(),
        3
    );
    let other = Filter {
        tenant: "someone-else".into(),
        ..all
    };
    assert!(crate::feedback::pairs(&s, &other, T0 + 11)
        .unwrap()
        .pairs
        .is_empty());
}

/// A new memory starts active at the initial trust with a `create` audit entry, and
/// reads back equal.
pub fn check_add_get(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    assert!(!s.backend().name().is_empty());
    let m = s.add(text("  the sky is blue \n"), "alice", T0).unwrap();
    assert_eq!(m.id.len(), 16);
    assert!(m.id.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(m.text, "the sky is blue");
    assert_eq!(m.kind, Kind::Fact);
    assert_eq!(m.scope.tenant, "default");
    assert_eq!((m.trust, m.status), (0.5, Status::Active));
    assert_eq!(
        (m.created_at_ms, m.last_used_at_ms, m.trust_at_ms),
        (T0, T0, T0)
    );
    assert!(m.use_counts.is_empty() && m.archived_at_ms.is_none());
    assert_eq!(s.get(&m.id, T0).unwrap(), m);
    assert_eq!(s.backend().get(&m.id).unwrap().as_ref(), Some(&m));
    let log = s.audit(&m.id).unwrap();
    assert_eq!(log.len(), 1);
    let e = &log[0];
    assert_eq!(
        (e.event.as_str(), e.by.as_str(), e.at_ms),
        ("create", "alice", T0)
    );
    assert_eq!((e.trust_before, e.trust_after), (0.5, 0.5));
    assert_eq!(s.backend().ids().unwrap(), vec![m.id.clone()]);
}

/// Every field comes back exactly: Unicode text, scope, source, metadata, embedding.
pub fn check_fields_roundtrip(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let mut metadata = BTreeMap::new();
    metadata.insert("speaker".to_string(), json!("Bob \"the builder\""));
    metadata.insert("turn".to_string(), json!(17));
    metadata.insert(
        "nested".to_string(),
        json!({"a": [1, 2.5, null, true], "b": {"c": "d"}}),
    );
    let embedding = vec![
        0.1f32,
        -0.0,
        1.0 / 3.0,
        f32::MIN_POSITIVE,
        f32::MAX,
        -1e-30,
        0.123_456_79,
    ];
    let new = NewMemory {
        text: "日本語 and émojis 🦀 with \"quotes\", a\ttab,\nnewlines and a \u{0} NUL".into(),
        kind: Some(Kind::Preference),
        scope: MemScope {
            tenant: "acme".into(),
            project: "p/1".into(),
            agent: "planner".into(),
            session: "s:42".into(),
        },
        source: "https://example.com/a?b=c".into(),
        occurred_at: Some("2025-06-01T10:00:00Z".into()),
        metadata: metadata.clone(),
        embedding: Some(embedding.clone()),
    };
    let m = s.add(new.clone(), "u", T0).unwrap();
    let back = s.get(&m.id, T0).unwrap();
    assert_eq!(back, m);
    assert_eq!(back.text, new.text);
    assert_eq!(back.scope, new.scope);
    assert_eq!(back.source, new.source);
    assert_eq!(back.occurred_at, new.occurred_at);
    assert_eq!(back.metadata, metadata);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(back.embedding.as_deref().unwrap()), bits(&embedding));
    // Trust values that are not short decimals come back bit for bit.
    let below_threshold = f64::from_bits(0.3f64.to_bits() - 1);
    let odd = [0.1 + 0.2, 1.0 / 3.0, below_threshold, 5e-324, 0.7];
    for t in odd {
        let got = s
            .backend()
            .update(&m.id, &mut |m| {
                m.trust = t;
                Ok(Vec::new())
            })
            .unwrap();
        assert_eq!(got.trust.to_bits(), t.to_bits());
        let stored = s.backend().get(&m.id).unwrap().unwrap();
        assert_eq!(
            stored.trust.to_bits(),
            t.to_bits(),
            "trust {t:e} did not round-trip"
        );
    }
}

/// `get_many` and `relations_many` (search's one read per query) return what `get` and
/// `relations` do, in the order asked, `None` / empty for unknown ids, and without
/// vectors when asked (`check_purge` covers a purged memory's vector).
pub fn check_batched_reads(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let with_vector = NewMemory {
        embedding: Some(vec![0.25, -1.5, 3.0e-8]),
        ..text("has a vector")
    };
    let a = s.add(with_vector, "u", T0).unwrap();
    let b = s.add(text("no vector"), "u", T0).unwrap();
    let c = s.add(text("third"), "u", T0).unwrap();
    s.link(&a.id, RelKind::Supersedes, &b.id, "u", T0).unwrap();
    s.link(&c.id, RelKind::RelatedTo, &b.id, "u", T0).unwrap();
    s.link(&a.id, RelKind::Mentions, "ent:concept:x", "u", T0)
        .unwrap();
    let be = s.backend();
    let ask = [
        c.id.as_str(),
        "0000000000000000",
        a.id.as_str(),
        b.id.as_str(),
    ];
    let full = be.get_many(&ask, true).unwrap();
    // What was written (the backends may implement `get` through `get_many`).
    assert_eq!(
        full,
        vec![Some(c.clone()), None, Some(a.clone()), Some(b.clone())]
    );
    assert_eq!(a.embedding.as_deref(), Some(&[0.25, -1.5, 3.0e-8][..]));
    let lean = be.get_many(&ask, false).unwrap();
    for (l, f) in lean.iter().zip(&full) {
        let f = f.clone().map(|mut m| {
            m.embedding = None;
            m
        });
        assert_eq!(l, &f);
    }
    assert!(be.get_many(&[], true).unwrap().is_empty());
    let nodes = [
        a.id.as_str(),
        "nobody",
        b.id.as_str(),
        "ent:concept:x",
        c.id.as_str(),
    ];
    let many = be.relations_many(&nodes).unwrap();
    assert_eq!(many.len(), nodes.len());
    let (sup, rel, men) = (
        key(&a.id, RelKind::Supersedes, &b.id),
        key(&c.id, RelKind::RelatedTo, &b.id),
        key(&a.id, RelKind::Mentions, "ent:concept:x"),
    );
    let want = [
        vec![sup.clone(), men.clone()],
        vec![],
        vec![sup, rel.clone()],
        vec![men],
        vec![rel],
    ];
    for ((n, got), mut want) in nodes.iter().zip(&many).zip(want) {
        want.sort();
        assert_eq!(rel_keys(got), want, "{n}");
        assert_eq!(rel_keys(&be.relations(n).unwrap()), want, "{n}");
    }
}

/// `list` filters by status (active by default), tenant, project, session and kinds,
/// in id order.
pub fn check_list_filters(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let a = s
        .add(scoped("a", Kind::Fact, "t1", "p1", "s1"), "u", T0)
        .unwrap();
    let b = s
        .add(scoped("b", Kind::Rule, "t1", "p2", "s1"), "u", T0)
        .unwrap();
    let c = s
        .add(scoped("c", Kind::Decision, "t2", "p1", "s2"), "u", T0)
        .unwrap();
    let d = s
        .add(scoped("d", Kind::Fact, "", "p1", ""), "u", T0)
        .unwrap();
    let all = sorted(vec![&a.id, &b.id, &c.id, &d.id]);
    let list = |f: Filter| s.list(&f, T0).unwrap();
    let got = list(Filter::default());
    assert_eq!(ids(&got), all, "list is in id order");
    assert_eq!(s.backend().ids().unwrap(), all);
    let by_tenant = list(Filter {
        tenant: "t1".into(),
        ..Default::default()
    });
    assert_eq!(ids(&by_tenant), sorted(vec![&a.id, &b.id]));
    let default_tenant = list(Filter {
        tenant: "default".into(),
        ..Default::default()
    });
    assert_eq!(ids(&default_tenant), vec![d.id.as_str()]);
    let by_project = list(Filter {
        project: "p1".into(),
        ..Default::default()
    });
    assert_eq!(ids(&by_project), sorted(vec![&a.id, &c.id, &d.id]));
    let by_session = list(Filter {
        session: "s1".into(),
        ..Default::default()
    });
    assert_eq!(ids(&by_session), sorted(vec![&a.id, &b.id]));
    let by_kinds = list(Filter {
        kinds: vec![Kind::Rule, Kind::Decision],
        ..Default::default()
    });
    assert_eq!(ids(&by_kinds), sorted(vec![&b.id, &c.id]));
    let combined = list(Filter {
        tenant: "t1".into(),
        project: "p1".into(),
        session: "s1".into(),
        kinds: vec![Kind::Fact],
        ..Default::default()
    });
    assert_eq!(ids(&combined), vec![a.id.as_str()]);
    let none = list(Filter {
        project: "nope".into(),
        ..Default::default()
    });
    assert!(none.is_empty());
    s.forget(&b.id, "u", T0).unwrap();
    assert_eq!(
        ids(&list(Filter::default())),
        sorted(vec![&a.id, &c.id, &d.id])
    );
    let archived = list(Filter {
        statuses: vec![Status::Archived],
        ..Default::default()
    });
    assert_eq!(ids(&archived), vec![b.id.as_str()]);
    let both = list(Filter {
        statuses: vec![Status::Active, Status::Archived],
        ..Default::default()
    });
    assert_eq!(ids(&both), all);
    let purged = list(Filter {
        statuses: vec![Status::Purged],
        ..Default::default()
    });
    assert!(purged.is_empty());
}

/// Unknown ids: `NotFound` from the store, `None`/empty from the backend, and an update
/// never calls its closure.
pub fn check_unknown_ids(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    s.add(text("something"), "u", T0).unwrap();
    assert!(is_not_found(s.get(UNKNOWN, T0)));
    assert!(is_not_found(s.signal(UNKNOWN, Signal::Used, "u", T0)));
    assert!(is_not_found(s.forget(UNKNOWN, "u", T0)));
    assert!(is_not_found(s.restore(UNKNOWN, "u", T0)));
    assert!(is_not_found(s.audit(UNKNOWN)));
    let b = s.backend();
    assert_eq!(b.get(UNKNOWN).unwrap(), None);
    assert!(b.audit(UNKNOWN).unwrap().is_empty());
    let mut called = false;
    let r = b.update(UNKNOWN, &mut |_| {
        called = true;
        Ok(Vec::new())
    });
    assert!(is_not_found(r));
    assert!(!called, "update called its closure for a missing memory");
    assert_eq!(b.ids().unwrap().len(), 1);
}

/// Empty, blank and oversized text and non-finite embeddings are refused, and nothing
/// is stored; text of exactly [`MAX_TEXT_BYTES`] is accepted.
pub fn check_bad_input(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    assert!(is_invalid(s.add(text(""), "u", T0)));
    assert!(is_invalid(s.add(text("  \n\t  "), "u", T0)));
    assert!(is_invalid(s.add(
        text(&"x".repeat(MAX_TEXT_BYTES + 1)),
        "u",
        T0
    )));
    // Multi-byte characters count in bytes.
    let wide = "é".repeat(MAX_TEXT_BYTES / 2 + 1);
    assert!(is_invalid(s.add(text(&wide), "u", T0)));
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let new = NewMemory {
            embedding: Some(vec![0.5, bad]),
            ..text("has a bad embedding")
        };
        assert!(is_invalid(s.add(new, "u", T0)), "embedding with {bad}");
    }
    assert!(
        s.backend().ids().unwrap().is_empty(),
        "a refused memory was stored"
    );
    let big = "y".repeat(MAX_TEXT_BYTES);
    let m = s.add(text(&big), "u", T0).unwrap();
    assert_eq!(s.get(&m.id, T0).unwrap().text, big);
}

/// Inserting an id that exists is a `Conflict` and changes nothing.
pub fn check_duplicate_insert(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let m = s.add(text("original"), "u", T0).unwrap();
    let mut copy = m.clone();
    copy.text = "impostor".into();
    let entry = AuditEntry {
        memory: m.id.clone(),
        event: "create".into(),
        trust_before: 0.5,
        trust_after: 0.5,
        by: "x".into(),
        at_ms: T0,
        note: String::new(),
        query: None,
    };
    assert!(is_conflict(s.backend().insert(&copy, &[entry])));
    assert_eq!(s.get(&m.id, T0).unwrap().text, "original");
    assert_eq!(s.audit(&m.id).unwrap().len(), 1);
}

/// Regression: two stores over one backend adding the same text in the same millisecond
/// got the same id (the id counter was per store), and the second add failed.
pub fn check_ids_unique_across_stores(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let backend = make();
    let s1 = MemoryStore::new(backend.clone(), TrustConfig::default()).unwrap();
    let s2 = MemoryStore::new(backend, TrustConfig::default()).unwrap();
    let a = s1.add(text("same text"), "u", T0).unwrap();
    let b = s2.add(text("same text"), "u", T0).unwrap();
    assert_ne!(a.id, b.id);
}

/// `update` writes the memory and its audit entries together, after the existing ones;
/// an error from the closure writes nothing.
pub fn check_update_atomic(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let m = s.add(text("atomic"), "u", T0).unwrap();
    let b = s.backend();
    let entry = |event: &str, before: f64, after: f64| AuditEntry {
        memory: m.id.clone(),
        event: event.into(),
        trust_before: before,
        trust_after: after,
        by: "t".into(),
        at_ms: T0 + 1,
        note: event.into(),
        query: None,
    };
    let r = b.update(&m.id, &mut |m| {
        m.trust = 0.9;
        m.text = "changed".into();
        Err(MemoryError::Invalid("no".into()))
    });
    assert!(is_invalid(r));
    assert_eq!(
        b.get(&m.id).unwrap().unwrap(),
        m,
        "an aborted update was written"
    );
    assert_eq!(b.audit(&m.id).unwrap().len(), 1);
    let got = b
        .update(&m.id, &mut |x| {
            x.trust = 0.7;
            Ok(vec![entry("one", 0.5, 0.6), entry("two", 0.6, 0.7)])
        })
        .unwrap();
    assert_eq!(got.trust, 0.7);
    assert_eq!(b.get(&m.id).unwrap().unwrap().trust, 0.7);
    let log = b.audit(&m.id).unwrap();
    assert_eq!(events(&log), ["create", "one", "two"]);
    assert_eq!(log[2], entry("two", 0.6, 0.7));
    // No change: nothing new in the log.
    let same = b.update(&m.id, &mut |_| Ok(Vec::new())).unwrap();
    assert_eq!(same.trust, 0.7);
    assert_eq!(b.audit(&m.id).unwrap().len(), 3);
}

/// Signals move trust by exactly their steps (used +0.05, confirmed +0.10, ignored −0.05,
/// corrected −0.10), count in `use_counts`, and are audited in order with
/// before/after/by/at; `ignored` does not count as a use.
pub fn check_signal_steps(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store_with(make, NO_DECAY);
    let cfg = s.config().clone();
    for (sig, want) in [
        (Signal::Used, 0.55),
        (Signal::Confirmed, 0.60),
        (Signal::Ignored, 0.45),
        (Signal::Corrected, 0.40),
    ] {
        let m = s.add(text(sig.as_str()), "u", T0).unwrap();
        let got = s.signal(&m.id, sig, "bob", T0 + 5).unwrap();
        assert!(close(got.trust, want), "{}: {}", sig.as_str(), got.trust);
        assert_eq!(got.trust, trust::after_signal(0.5, sig, &cfg));
        assert_eq!(got.use_counts.get(sig.as_str()), Some(&1));
        assert_eq!(got.use_counts.len(), 1);
        let want_used = if sig == Signal::Ignored { T0 } else { T0 + 5 };
        assert_eq!(got.last_used_at_ms, want_used, "{}", sig.as_str());
        assert_eq!(s.get(&m.id, T0 + 5).unwrap().trust, got.trust);
        let log = s.audit(&m.id).unwrap();
        assert_eq!(events(&log), ["create", sig.as_str()]);
        let e = &log[1];
        assert_eq!((e.by.as_str(), e.at_ms), ("bob", T0 + 5));
        assert_eq!((e.trust_before, e.trust_after), (0.5, got.trust));
        assert!(close(e.delta(), cfg.step(sig)));
    }
    // A sequence on one memory (no time passes, so no decay).
    let m = s.add(text("sequence"), "u", T0).unwrap();
    let seq = [
        Signal::Used,
        Signal::Used,
        Signal::Confirmed,
        Signal::Ignored,
        Signal::Corrected,
        Signal::Used,
    ];
    let mut want = 0.5;
    for (i, sig) in seq.iter().enumerate() {
        want = trust::after_signal(want, *sig, &cfg);
        let got = s.signal(&m.id, *sig, &format!("by{i}"), T0).unwrap();
        assert_eq!(got.trust, want);
    }
    assert!(close(want, 0.6));
    let got = s.get(&m.id, T0).unwrap();
    assert_eq!(got.trust, want);
    let counts: Vec<(&str, u64)> = got
        .use_counts
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(
        counts,
        [
            ("confirmed", 1),
            ("corrected", 1),
            ("ignored", 1),
            ("used", 3)
        ]
    );
    let log = s.audit(&m.id).unwrap();
    assert_eq!(
        events(&log),
        [
            "create",
            "used",
            "used",
            "confirmed",
            "ignored",
            "corrected",
            "used"
        ]
    );
    for (i, e) in log.iter().enumerate().skip(1) {
        assert_eq!(e.by, format!("by{}", i - 1));
    }
    assert_chain(&m.id, &log);
}

/// Trust is clamped to [0, 1]; clamped signals still count and are audited.
pub fn check_clamp(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let cfg = TrustConfig {
        archive_below: 0.0,
        ..Default::default()
    };
    let s = store_with(make, cfg);
    let up = s.add(text("up"), "u", T0).unwrap();
    for i in 0..8 {
        let m = s.signal(&up.id, Signal::Confirmed, "u", T0).unwrap();
        assert!(m.trust <= 1.0);
        if i >= 5 {
            assert_eq!(m.trust, 1.0, "after {} confirmations", i + 1);
        }
    }
    let m = s.get(&up.id, T0).unwrap();
    assert_eq!((m.trust, m.use_counts["confirmed"]), (1.0, 8));
    let log = s.audit(&up.id).unwrap();
    assert_eq!(log.len(), 9);
    let last = log.last().unwrap();
    assert_eq!((last.trust_before, last.trust_after), (1.0, 1.0));
    let down = s.add(text("down"), "u", T0).unwrap();
    for i in 0..8 {
        let m = s.signal(&down.id, Signal::Corrected, "u", T0).unwrap();
        assert!(m.trust >= 0.0);
        if i >= 5 {
            assert_eq!(m.trust, 0.0, "after {} corrections", i + 1);
        }
    }
    let m = s.get(&down.id, T0).unwrap();
    assert_eq!((m.trust, m.use_counts["corrected"]), (0.0, 8));
    assert_eq!(m.status, Status::Active, "archive_below 0 never archives");
    assert_chain(&down.id, &s.audit(&down.id).unwrap());
    // With the default threshold, signals on an archived memory still count and clamp.
    let s = store(make);
    let m = s.add(text("archived"), "u", T0).unwrap();
    for _ in 0..8 {
        s.signal(&m.id, Signal::Corrected, "u", T0).unwrap();
    }
    let m = s.get(&m.id, T0).unwrap();
    assert_eq!((m.trust, m.status), (0.0, Status::Archived));
    assert_eq!(m.use_counts["corrected"], 8);
}

/// With a half-life of 10 days, 10 idle days halve trust: lazily on `get`/`list`, written
/// by `sweep` with a `decay` audit entry, never applied twice; signals decay first.
pub fn check_decay(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let cfg = TrustConfig {
        half_life_days: 10.0,
        archive_below: 0.0,
        ..Default::default()
    };
    let s = store_with(make, cfg.clone());
    let m = s.add(text("decays"), "u", T0).unwrap();
    let t10 = T0 + 10 * DAY;
    assert!(close(s.get(&m.id, t10).unwrap().trust, 0.25));
    assert!(close(s.get(&m.id, T0 + 20 * DAY).unwrap().trust, 0.125));
    assert!(close(
        s.get(&m.id, T0 + 5 * DAY).unwrap().trust,
        0.5 * 0.5f64.sqrt()
    ));
    let listed = s.list(&Filter::default(), t10).unwrap();
    assert!(close(listed[0].trust, 0.25));
    assert_eq!(
        s.backend().get(&m.id).unwrap().unwrap().trust,
        0.5,
        "reads are lazy"
    );
    assert_eq!(s.audit(&m.id).unwrap().len(), 1, "reads write nothing");
    let r = s.sweep("sweeper", t10).unwrap();
    assert_eq!((r.seen, r.decayed, r.archived, r.purged), (1, 1, 0, 0));
    let stored = s.backend().get(&m.id).unwrap().unwrap();
    assert!(close(stored.trust, 0.25));
    assert_eq!((stored.trust_at_ms, stored.status), (t10, Status::Active));
    let log = s.audit(&m.id).unwrap();
    assert_eq!(events(&log), ["create", "decay"]);
    let e = &log[1];
    assert_eq!(
        (e.by.as_str(), e.at_ms, e.trust_before),
        ("sweeper", t10, 0.5)
    );
    assert!(close(e.trust_after, 0.25));
    // A second sweep at the same time changes nothing.
    let r = s.sweep("sweeper", t10).unwrap();
    assert_eq!((r.seen, r.decayed), (1, 0));
    assert_eq!(s.audit(&m.id).unwrap().len(), 2);
    // Decay written up to t10 is not applied again.
    assert!(close(s.get(&m.id, T0 + 20 * DAY).unwrap().trust, 0.125));
    // A signal decays to its time first, then steps.
    let got = s.signal(&m.id, Signal::Used, "u", T0 + 20 * DAY).unwrap();
    assert!(close(got.trust, 0.175), "{}", got.trust);
    let log = s.audit(&m.id).unwrap();
    assert_eq!(events(&log), ["create", "decay", "decay", "used"]);
    assert!(close(log[2].trust_after, 0.125));
    assert_chain(&m.id, &log);
    // Decay runs from the last use.
    assert!(close(s.get(&m.id, T0 + 30 * DAY).unwrap().trust, 0.0875));
    // No half-life: no decay.
    let s = store_with(
        make,
        TrustConfig {
            half_life_days: 0.0,
            ..cfg
        },
    );
    let m = s.add(text("stays"), "u", T0).unwrap();
    assert_eq!(s.get(&m.id, T0 + 1000 * DAY).unwrap().trust, 0.5);
    let r = s.sweep("sweeper", T0 + 1000 * DAY).unwrap();
    assert_eq!(r.decayed, 0);
    assert_eq!(s.audit(&m.id).unwrap().len(), 1);
}

/// Regression: a sweep whose decay was too small to write still moved the decay clock,
/// so sweeping often enough kept trust from ever decaying.
pub fn check_frequent_sweeps_keep_decay(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let cfg = TrustConfig {
        half_life_days: 10.0,
        ..Default::default()
    };
    let s = store_with(make, cfg);
    let m = s.add(text("swept often"), "u", T0).unwrap();
    for i in 1..=50 {
        s.sweep("sweeper", T0 + i).unwrap();
    }
    let t = s.get(&m.id, T0 + 10 * DAY).unwrap().trust;
    assert!(close(t, 0.25), "trust {t} after frequent sweeps, want 0.25");
}

/// A signal that takes trust below the threshold archives: left out of the default
/// list, listed with `statuses: [Archived]`; later signals still count.
pub fn check_archive_by_signal(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store_with(make, NO_DECAY);
    let keep = s.add(text("kept"), "u", T0).unwrap();
    let m = s.add(text("doubted"), "u", T0).unwrap();
    let a = s.signal(&m.id, Signal::Corrected, "u", T0).unwrap();
    assert_eq!(a.status, Status::Active);
    s.signal(&m.id, Signal::Corrected, "u", T0 + 1).unwrap();
    let got = s.signal(&m.id, Signal::Corrected, "carol", T0 + 2).unwrap();
    assert!(close(got.trust, 0.2));
    assert_eq!(
        (got.status, got.archived_at_ms),
        (Status::Archived, Some(T0 + 2))
    );
    let log = s.audit(&m.id).unwrap();
    assert_eq!(
        events(&log),
        ["create", "corrected", "corrected", "corrected", "archive"]
    );
    let e = log.last().unwrap();
    assert_eq!((e.by.as_str(), e.at_ms), ("carol", T0 + 2));
    assert_eq!((e.trust_before, e.trust_after), (got.trust, got.trust));
    assert_chain(&m.id, &log);
    assert_eq!(
        ids(&s.list(&Filter::default(), T0 + 2).unwrap()),
        vec![keep.id.as_str()]
    );
    let archived = s
        .list(
            &Filter {
                statuses: vec![Status::Archived],
                ..Default::default()
            },
            T0 + 2,
        )
        .unwrap();
    assert_eq!(ids(&archived), vec![m.id.as_str()]);
    // Still counted while archived; a confirmation lifts trust but does not reactivate.
    let up = s.signal(&m.id, Signal::Confirmed, "u", T0 + 3).unwrap();
    assert!(close(up.trust, 0.3));
    assert_eq!(up.status, Status::Archived);
    assert_eq!(up.use_counts["confirmed"], 1);
    assert_eq!(s.audit(&m.id).unwrap().len(), 6);
}

/// A sweep archives memories whose decayed trust is below the threshold, and reports
/// what it did.
pub fn check_archive_by_sweep(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let cfg = TrustConfig {
        half_life_days: 10.0,
        ..Default::default()
    };
    let s = store_with(make, cfg);
    let m = s.add(text("fading"), "u", T0).unwrap();
    let fresh = s.add(text("fresh"), "u", T0 + 10 * DAY).unwrap();
    let r = s.sweep("sweep", T0 + 5 * DAY).unwrap();
    assert_eq!((r.seen, r.decayed, r.archived), (2, 1, 0));
    assert_eq!(s.get(&m.id, T0 + 5 * DAY).unwrap().status, Status::Active);
    // Reads apply decay, not status: the sweep writes that.
    let t10 = T0 + 10 * DAY;
    assert!(close(s.get(&m.id, t10).unwrap().trust, 0.25));
    assert_eq!(s.get(&m.id, t10).unwrap().status, Status::Active);
    let r = s.sweep("sweep", t10).unwrap();
    assert_eq!((r.seen, r.decayed, r.archived, r.purged), (2, 1, 1, 0));
    let got = s.get(&m.id, t10).unwrap();
    assert_eq!(
        (got.status, got.archived_at_ms),
        (Status::Archived, Some(t10))
    );
    let log = s.audit(&m.id).unwrap();
    assert_eq!(events(&log), ["create", "decay", "decay", "archive"]);
    assert_chain(&m.id, &log);
    assert_eq!(
        ids(&s.list(&Filter::default(), t10).unwrap()),
        vec![fresh.id.as_str()]
    );
    // Nothing more to do at the same time.
    let r = s.sweep("sweep", t10).unwrap();
    assert_eq!((r.decayed, r.archived, r.purged), (0, 0, 0));
}

/// `forget` archives on request (idempotent); `restore` brings an archived memory back,
/// raising its trust to the threshold; restoring an active memory does nothing.
pub fn check_forget_restore(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store_with(make, NO_DECAY);
    let m = s.add(text("forget me"), "u", T0).unwrap();
    let f = s.forget(&m.id, "dave", T0 + 1).unwrap();
    assert_eq!(
        (f.status, f.archived_at_ms, f.trust),
        (Status::Archived, Some(T0 + 1), 0.5)
    );
    let again = s.forget(&m.id, "dave", T0 + 2).unwrap();
    assert_eq!(again.archived_at_ms, Some(T0 + 1));
    assert_eq!(events(&s.audit(&m.id).unwrap()), ["create", "forget"]);
    assert!(s.list(&Filter::default(), T0 + 2).unwrap().is_empty());
    let r = s.restore(&m.id, "erin", T0 + 3).unwrap();
    assert_eq!(
        (r.status, r.archived_at_ms, r.trust),
        (Status::Active, None, 0.5)
    );
    let log = s.audit(&m.id).unwrap();
    assert_eq!(events(&log), ["create", "forget", "restore"]);
    assert_eq!((log[2].by.as_str(), log[2].at_ms), ("erin", T0 + 3));
    assert_eq!(
        ids(&s.list(&Filter::default(), T0 + 3).unwrap()),
        vec![m.id.as_str()]
    );
    // Restoring an active memory is a no-op.
    let same = s.restore(&m.id, "erin", T0 + 4).unwrap();
    assert_eq!(same.status, Status::Active);
    assert_eq!(s.audit(&m.id).unwrap().len(), 3);
    // Low trust is raised to the initial trust, so a sweep does not archive it again.
    let low = s.add(text("low"), "u", T0).unwrap();
    for _ in 0..3 {
        s.signal(&low.id, Signal::Corrected, "u", T0).unwrap();
    }
    assert_eq!(s.get(&low.id, T0).unwrap().status, Status::Archived);
    let r = s.restore(&low.id, "erin", T0).unwrap();
    assert_eq!((r.status, r.trust), (Status::Active, 0.5));
    let e = s.audit(&low.id).unwrap().pop().unwrap();
    assert_eq!(e.event, "restore");
    assert!(close(e.trust_before, 0.2));
    assert_eq!(e.trust_after, 0.5);
    let sw = s.sweep("sweep", T0).unwrap();
    assert_eq!(sw.archived, 0);
    assert_eq!(s.get(&low.id, T0).unwrap().status, Status::Active);
    assert_chain(&low.id, &s.audit(&low.id).unwrap());
}

/// A sweep purges memories archived longer than the grace period: text, embedding and
/// metadata erased, id and audit log kept; a purged memory cannot be restored, signalled
/// or forgotten. A grace period of 0 never purges.
pub fn check_purge(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let mut metadata = BTreeMap::new();
    metadata.insert("secret".to_string(), json!("s3cr3t"));
    let new = NewMemory {
        metadata,
        embedding: Some(vec![0.25, 0.5]),
        ..text("to be purged")
    };
    let m = s.add(new, "u", T0).unwrap();
    let other = s.add(text("kept"), "u", T0).unwrap();
    s.forget(&m.id, "u", T0).unwrap();
    let r = s.sweep("sweep", T0 + 29 * DAY).unwrap();
    assert_eq!(r.purged, 0);
    assert_eq!(
        s.get(&m.id, T0 + 29 * DAY).unwrap().status,
        Status::Archived
    );
    let t30 = T0 + 30 * DAY;
    let r = s.sweep("sweep", t30).unwrap();
    assert_eq!((r.seen, r.purged), (2, 1));
    let p = s.get(&m.id, t30).unwrap();
    assert_eq!(p.id, m.id);
    assert_eq!(p.status, Status::Purged);
    assert!(p.text.is_empty() && p.embedding.is_none() && p.metadata.is_empty());
    let stored = s.backend().get(&m.id).unwrap().unwrap();
    assert!(stored.text.is_empty() && stored.embedding.is_none() && stored.metadata.is_empty());
    let log = s.audit(&m.id).unwrap();
    assert_eq!(events(&log)[..2], ["create", "forget"]);
    assert_eq!(log.last().unwrap().event, "purge");
    assert_eq!(log.last().unwrap().at_ms, t30);
    assert_chain(&m.id, &log);
    let n = log.len();
    assert!(is_invalid(s.restore(&m.id, "u", t30)));
    assert!(is_invalid(s.signal(&m.id, Signal::Confirmed, "u", t30)));
    assert!(is_invalid(s.forget(&m.id, "u", t30)));
    let r = s.sweep("sweep", t30 + DAY).unwrap();
    assert_eq!(r.purged, 0);
    assert_eq!(s.audit(&m.id).unwrap().len(), n, "a purged memory changed");
    let all = Filter {
        statuses: vec![Status::Active, Status::Archived],
        ..Default::default()
    };
    assert_eq!(ids(&s.list(&all, t30).unwrap()), vec![other.id.as_str()]);
    let purged = Filter {
        statuses: vec![Status::Purged],
        ..Default::default()
    };
    assert_eq!(ids(&s.list(&purged, t30).unwrap()), vec![m.id.as_str()]);
    // Grace period 0: never purged.
    let s = store_with(
        make,
        TrustConfig {
            purge_after_days: 0.0,
            ..Default::default()
        },
    );
    let m = s.add(text("kept forever"), "u", T0).unwrap();
    s.forget(&m.id, "u", T0).unwrap();
    s.sweep("sweep", T0 + 10_000 * DAY).unwrap();
    let got = s.get(&m.id, T0 + 10_000 * DAY).unwrap();
    assert_eq!(
        (got.status, got.text.as_str()),
        (Status::Archived, "kept forever")
    );
}

fn rel_keys(v: &[Relation]) -> Vec<(String, RelKind, String)> {
    let mut k: Vec<_> = v
        .iter()
        .map(|r| (r.from.clone(), r.kind, r.to.clone()))
        .collect();
    k.sort();
    k
}

fn key(from: &str, kind: RelKind, to: &str) -> (String, RelKind, String) {
    (from.to_string(), kind, to.to_string())
}

/// Relations: stored with who and when, listed from both ends and by kind, `mem:` ids
/// made bare, duplicates a `Conflict`, removable; entity, document and chunk nodes are
/// allowed.
pub fn check_relations(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let a = s.add(text("new fact"), "u", T0).unwrap().id;
    let b = s.add(text("old fact"), "u", T0).unwrap().id;
    let c = s.add(text("other"), "u", T0).unwrap().id;
    let r = s
        .link(&a, RelKind::Supersedes, &b, "frank", T0 + 7)
        .unwrap();
    assert_eq!(
        (r.from.as_str(), r.kind, r.to.as_str()),
        (a.as_str(), RelKind::Supersedes, b.as_str())
    );
    assert_eq!((r.by.as_str(), r.at_ms), ("frank", T0 + 7));
    let r2 = s
        .link(
            &format!("mem:{b}"),
            RelKind::RelatedTo,
            &format!("mem:{c}"),
            "u",
            T0,
        )
        .unwrap();
    assert_eq!((r2.from.as_str(), r2.to.as_str()), (b.as_str(), c.as_str()));
    s.link(&a, RelKind::Mentions, "ent:person:alice", "u", T0)
        .unwrap();
    s.link("chunk:doc1#3", RelKind::PartOf, "doc:doc1", "u", T0)
        .unwrap();
    s.link(&c, RelKind::DerivedFrom, "doc:doc1", "u", T0)
        .unwrap();
    let at_a = s.relations(&a).unwrap();
    let mut want_a = vec![
        key(&a, RelKind::Supersedes, &b),
        key(&a, RelKind::Mentions, "ent:person:alice"),
    ];
    want_a.sort();
    assert_eq!(rel_keys(&at_a), want_a);
    assert_eq!(
        at_a.iter().find(|r| r.kind == RelKind::Supersedes),
        Some(&r)
    );
    let mut want_b = vec![
        key(&a, RelKind::Supersedes, &b),
        key(&b, RelKind::RelatedTo, &c),
    ];
    want_b.sort();
    assert_eq!(rel_keys(&s.relations(&b).unwrap()), want_b);
    assert_eq!(rel_keys(&s.relations(&format!("mem:{b}")).unwrap()), want_b);
    let mut want_doc = vec![
        key("chunk:doc1#3", RelKind::PartOf, "doc:doc1"),
        key(&c, RelKind::DerivedFrom, "doc:doc1"),
    ];
    want_doc.sort();
    assert_eq!(rel_keys(&s.relations("doc:doc1").unwrap()), want_doc);
    assert_eq!(
        rel_keys(&s.relations("ent:person:alice").unwrap()),
        [key(&a, RelKind::Mentions, "ent:person:alice")]
    );
    assert!(s.relations("ent:person:nobody").unwrap().is_empty());
    let sup = s.backend().relations_of_kind(RelKind::Supersedes).unwrap();
    assert_eq!(sup, vec![r.clone()]);
    assert!(s
        .backend()
        .relations_of_kind(RelKind::Contradicts)
        .unwrap()
        .is_empty());
    // Duplicates.
    assert!(is_conflict(s.link(&a, RelKind::Supersedes, &b, "u", T0)));
    assert!(is_conflict(s.link(
        &format!("mem:{a}"),
        RelKind::Supersedes,
        &b,
        "u",
        T0
    )));
    assert!(!s.backend().insert_relation(&r).unwrap());
    // Removal.
    assert!(s
        .unlink(&format!("mem:{a}"), RelKind::Supersedes, &b)
        .unwrap());
    assert!(!s.unlink(&a, RelKind::Supersedes, &b).unwrap());
    assert!(!s
        .backend()
        .remove_relation(&a, RelKind::Supersedes, &b)
        .unwrap());
    assert_eq!(
        rel_keys(&s.relations(&b).unwrap()),
        [key(&b, RelKind::RelatedTo, &c)]
    );
    assert!(s
        .backend()
        .relations_of_kind(RelKind::Supersedes)
        .unwrap()
        .is_empty());
    s.link(&a, RelKind::Supersedes, &b, "u", T0).unwrap();
    assert_eq!(s.relations(&b).unwrap().len(), 2);
}

/// The relation rules: no self-relations, memory ids must exist, no cycles of
/// SUPERSEDES, PARTIAL_UPDATE or DERIVED_FROM (of any length; kinds do not mix), RELATED_TO
/// may form cycles, CONTRADICTS once per pair in either direction.
pub fn check_relation_rules(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store(make);
    let m: Vec<String> = (0..5)
        .map(|i| s.add(text(&format!("m{i}")), "u", T0).unwrap().id)
        .collect();
    let count = || {
        RelKind::ALL
            .iter()
            .map(|k| s.backend().relations_of_kind(*k).unwrap().len())
            .sum::<usize>()
    };
    // Self-relations, in every spelling.
    assert!(is_invalid(s.link(
        &m[0],
        RelKind::RelatedTo,
        &m[0],
        "u",
        T0
    )));
    assert!(is_invalid(s.link(
        &format!("mem:{}", m[0]),
        RelKind::Supersedes,
        &m[0],
        "u",
        T0
    )));
    assert!(is_invalid(s.link(
        "ent:x",
        RelKind::RelatedTo,
        "ent:x",
        "u",
        T0
    )));
    assert!(is_invalid(s.link("", RelKind::RelatedTo, "ent:x", "u", T0)));
    // Unknown memories.
    assert!(is_not_found(s.link(
        &m[0],
        RelKind::RelatedTo,
        UNKNOWN,
        "u",
        T0
    )));
    assert!(is_not_found(s.link(
        UNKNOWN,
        RelKind::RelatedTo,
        &m[0],
        "u",
        T0
    )));
    let prefixed = format!("mem:{UNKNOWN}");
    assert!(is_not_found(s.link(
        &m[0],
        RelKind::Supersedes,
        &prefixed,
        "u",
        T0
    )));
    assert!(is_not_found(s.link(
        &m[0],
        RelKind::RelatedTo,
        "mem:nope",
        "u",
        T0
    )));
    assert_eq!(count(), 0);
    // Cycles of the ordering kinds, of length 2, 3 and 4.
    for kind in [
        RelKind::Supersedes,
        RelKind::PartialUpdate,
        RelKind::DerivedFrom,
    ] {
        let s = store(make);
        let m: Vec<String> = (0..4)
            .map(|i| s.add(text(&format!("m{i}")), "u", T0).unwrap().id)
            .collect();
        s.link(&m[0], kind, &m[1], "u", T0).unwrap();
        assert!(
            is_invalid(s.link(&m[1], kind, &m[0], "u", T0)),
            "{} 2-cycle",
            kind.as_str()
        );
        s.link(&m[1], kind, &m[2], "u", T0).unwrap();
        assert!(
            is_invalid(s.link(&m[2], kind, &m[0], "u", T0)),
            "{} 3-cycle",
            kind.as_str()
        );
        s.link(&m[2], kind, &m[3], "u", T0).unwrap();
        assert!(
            is_invalid(s.link(&format!("mem:{}", m[3]), kind, &m[0], "u", T0)),
            "{} 4-cycle",
            kind.as_str()
        );
        assert!(is_invalid(s.link(&m[3], kind, &m[1], "u", T0)));
        // A shortcut along the order is no cycle.
        s.link(&m[0], kind, &m[3], "u", T0).unwrap();
        // Another kind going back is no cycle of this kind.
        for other in [RelKind::RelatedTo, RelKind::Contradicts, RelKind::Mentions] {
            s.link(&m[3], other, &m[0], "u", T0).unwrap();
        }
        let back = if kind == RelKind::Supersedes {
            RelKind::PartialUpdate
        } else {
            RelKind::Supersedes
        };
        s.link(&m[3], back, &m[0], "u", T0).unwrap();
        // Cycles through non-memory nodes are refused too.
        s.link(&m[3], kind, "doc:d", "u", T0).unwrap();
        assert!(is_invalid(s.link("doc:d", kind, &m[0], "u", T0)));
        assert_eq!(s.backend().relations_of_kind(kind).unwrap().len(), 5);
    }
    // RELATED_TO may form cycles.
    s.link(&m[0], RelKind::RelatedTo, &m[1], "u", T0).unwrap();
    s.link(&m[1], RelKind::RelatedTo, &m[0], "u", T0).unwrap();
    s.link(&m[1], RelKind::RelatedTo, &m[2], "u", T0).unwrap();
    s.link(&m[2], RelKind::RelatedTo, &m[0], "u", T0).unwrap();
    // CONTRADICTS once per pair, either direction.
    s.link(&m[3], RelKind::Contradicts, &m[4], "u", T0).unwrap();
    assert!(is_conflict(s.link(
        &m[4],
        RelKind::Contradicts,
        &m[3],
        "u",
        T0
    )));
    assert!(is_conflict(s.link(
        &m[3],
        RelKind::Contradicts,
        &m[4],
        "u",
        T0
    )));
    assert!(is_conflict(s.link(
        &format!("mem:{}", m[4]),
        RelKind::Contradicts,
        &format!("mem:{}", m[3]),
        "u",
        T0
    )));
    assert_eq!(count(), 5);
    assert_eq!(s.relations(&m[4]).unwrap().len(), 1);
}

/// 16 threads × 25 `used` signals on one memory: every one counted, trust exactly
/// clamp(0.5 + 400 × 0.05) = 1, one audit entry per signal, trust always in [0, 1].
pub fn check_concurrent_used(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    const THREADS: u64 = 16;
    const EACH: u64 = 25;
    let s = store(make);
    let m = s.add(text("popular"), "u", T0).unwrap();
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let (s, id) = (&s, &m.id);
            sc.spawn(move || {
                for _ in 0..EACH {
                    let got = s.signal(id, Signal::Used, &format!("t{t}"), T0).unwrap();
                    assert!((0.0..=1.0).contains(&got.trust));
                }
            });
        }
    });
    let got = s.get(&m.id, T0).unwrap();
    assert_eq!(got.use_counts["used"], THREADS * EACH, "lost updates");
    assert_eq!(got.trust, 1.0);
    let log = s.audit(&m.id).unwrap();
    assert_eq!(log.len() as u64, 1 + THREADS * EACH);
    assert!(log[1..].iter().all(|e| e.event == "used"));
    assert_chain(&m.id, &log);
    for t in 0..THREADS {
        let by = format!("t{t}");
        assert_eq!(log.iter().filter(|e| e.by == by).count() as u64, EACH);
    }
}

/// 8 threads sending mixed signals on one memory. Steps are powers of two, so every
/// order sums exactly, and chosen so no order can clamp: the final trust is the
/// sequential sum. Every signal counted and audited once, the log a consistent chain.
pub fn check_concurrent_mixed(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let cfg = TrustConfig {
        initial: 0.5,
        used: 1.0 / 64.0,
        confirmed: 1.0 / 32.0,
        ignored: -1.0 / 64.0,
        corrected: -1.0 / 32.0,
        half_life_days: 0.0,
        archive_below: 0.0,
        purge_after_days: 0.0,
    };
    // Thread i sends plan[i].
    let plan: Vec<(Signal, u64)> = (0..8)
        .map(|i| {
            let sig = Signal::ALL[i % 4];
            (sig, if sig == Signal::Used { 6 } else { 4 })
        })
        .collect();
    let (mut up, mut down, mut total) = (0.0, 0.0, 0);
    for (sig, n) in &plan {
        let d = cfg.step(*sig) * *n as f64;
        if d > 0.0 {
            up += d;
        } else {
            down += d;
        }
        total += n;
    }
    assert!(
        cfg.initial + up <= 1.0 && cfg.initial + down >= 0.0,
        "the plan could clamp"
    );
    let want = cfg.initial + up + down;
    assert_eq!(want, 0.5625);
    let s = store_with(make, cfg);
    let m = s.add(text("disputed"), "u", T0).unwrap();
    std::thread::scope(|sc| {
        for (sig, n) in &plan {
            let (s, id) = (&s, &m.id);
            sc.spawn(move || {
                for _ in 0..*n {
                    let got = s.signal(id, *sig, "u", T0).unwrap();
                    assert!((0.0..=1.0).contains(&got.trust));
                }
            });
        }
    });
    let got = s.get(&m.id, T0).unwrap();
    assert_eq!(got.trust, want);
    for sig in Signal::ALL {
        let n: u64 = plan.iter().filter(|p| p.0 == sig).map(|p| p.1).sum();
        assert_eq!(
            got.use_counts.get(sig.as_str()),
            Some(&n),
            "{}",
            sig.as_str()
        );
    }
    let log = s.audit(&m.id).unwrap();
    assert_eq!(log.len() as u64, 1 + total);
    assert_chain(&m.id, &log);
    assert_eq!(log.last().unwrap().trust_after, want);
}

/// The version changes with every committed write (insert, signal, forget, link,
/// unlink) and with nothing else (reads, a write refused, an unlink of nothing); two
/// fresh stores do not start at the same version.
pub fn check_version(make: &dyn Fn() -> Arc<dyn MemoryBackend>) {
    let s = store_with(make, NO_DECAY);
    let v = || s.version().unwrap();
    let v0 = v();
    let a = s.add(text("the deploy runs on Fridays"), "t", T0).unwrap();
    let v1 = v();
    assert_ne!(v1, v0, "an insert changes the version");
    s.get(&a.id, T0).unwrap();
    s.list(&Filter::default(), T0).unwrap();
    s.backend().ids().unwrap();
    s.audit(&a.id).unwrap();
    s.relations(&a.id).unwrap();
    assert_eq!(v(), v1, "reads leave the version");
    assert!(is_conflict(s.backend().insert(&a, &[])));
    assert_eq!(v(), v1, "a refused insert leaves the version");
    s.signal(&a.id, Signal::Used, "t", T0 + 1).unwrap();
    let v2 = v();
    assert_ne!(v2, v1, "a signal changes the version");
    let b = s
        .add(text("the deploy runs on Mondays"), "t", T0 + 2)
        .unwrap();
    let v3 = v();
    assert_ne!(v3, v2);
    s.link(&b.id, RelKind::Supersedes, &a.id, "t", T0 + 3)
        .unwrap();
    let v4 = v();
    assert_ne!(v4, v3, "a relation added changes the version");
    assert!(s.unlink(&b.id, RelKind::Supersedes, &a.id).unwrap());
    let v5 = v();
    assert_ne!(v5, v4, "a relation removed changes the version");
    s.forget(&b.id, "t", T0 + 4).unwrap();
    let v6 = v();
    assert_ne!(v6, v5, "forgetting changes the version");
    for earlier in [v0, v1, v2, v3, v4, v5] {
        assert_ne!(v6, earlier, "versions do not come back");
    }
    std::thread::sleep(std::time::Duration::from_millis(2));
    let other = store_with(make, NO_DECAY);
    assert_ne!(
        other.version().unwrap(),
        v0,
        "a fresh store starts elsewhere"
    );
}
