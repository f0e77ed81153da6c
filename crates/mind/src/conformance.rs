//! One conformance suite for every Mind backend. Each check takes a factory that makes
//! a fresh, empty blackboard with the given settings; [`run_all`] runs them all.
//! Backend tests call it with their own factory (`crates/mind/tests/mind.rs`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::{ChangeKind, Layer, Mind, MindConfig, MindError};

/// Makes a fresh, empty Mind with these settings.
pub type Factory<'a> = dyn FnMut(MindConfig) -> Mind + 'a;

fn fresh(f: &mut Factory<'_>) -> Mind {
    f(MindConfig::default())
}

/// Runs every check.
pub fn run_all(f: &mut Factory<'_>) {
    roundtrip(f);
    values_roundtrip(f);
    bad_input(f);
    too_large(f);
    compare_and_set(f);
    delete(f);
    patterns_and_names(f);
    run_scopes(f);
    run_versions_continue_from_global(f);
    drop_run(f);
    ttl(f);
    run_ttl(f);
    batch(f);
    watch(f);
    concurrent_cas(f, 4, 25);
}

/// Writes bump versions from 1; reads return value and metadata.
pub fn roundtrip(f: &mut Factory<'_>) {
    let g = fresh(f).global();
    assert_eq!(g.read("a.b").unwrap(), None);
    let before = crate::now_ms();
    let e1 = g.write("a.b", json!({"x": 1}), "tool-a", None).unwrap();
    assert_eq!((e1.key.as_str(), e1.version, e1.ttl_ms), ("a.b", 1, None));
    assert!(e1.written_at_ms >= before && e1.written_at_ms <= crate::now_ms());
    assert_eq!(g.read("a.b").unwrap().unwrap(), e1);
    let e2 = g.write("a.b", json!([1, 2]), "tool-b", None).unwrap();
    assert_eq!(e2.version, 2);
    let r = g.read("a.b").unwrap().unwrap();
    assert_eq!(
        (r.value, r.writer, r.version),
        (json!([1, 2]), "tool-b".into(), 2)
    );
    assert_eq!(g.read("a.c").unwrap(), None);
}

/// JSON values of every kind come back exactly.
pub fn values_roundtrip(f: &mut Factory<'_>) {
    let g = fresh(f).global();
    let values = [
        json!(null),
        json!(true),
        json!(u64::MAX),
        json!(-17),
        json!(1.5e-7),
        json!("tides \u{1F30A} \"quoted\" \n line"),
        json!({"nested": {"list": [1, "two", {"three": null}], "empty": {}}}),
        json!([]),
    ];
    for (i, v) in values.iter().enumerate() {
        let key = format!("v.k{i}");
        g.write(&key, v.clone(), "w \u{e9}", None).unwrap();
        let e = g.read(&key).unwrap().unwrap();
        assert_eq!(&e.value, v, "{key}");
        assert_eq!(e.writer, "w \u{e9}");
    }
    assert_eq!(g.read_pattern("v.*").unwrap().len(), values.len());
}

/// Illegal keys, names, run ids and patterns are typed errors and change nothing.
pub fn bad_input(f: &mut Factory<'_>) {
    let m = fresh(f);
    let g = m.global();
    for key in [
        "", "nodot", "A.b", "a.b c", "a..b", "a.b:c", "a.b/../c", "\u{e9}.x",
    ] {
        let err = g.write(key, json!(1), "w", None).unwrap_err();
        assert!(matches!(err, MindError::InvalidKey { .. }), "{key}: {err}");
        assert!(matches!(g.read(key), Err(MindError::InvalidKey { .. })));
        assert!(matches!(g.delete(key), Err(MindError::InvalidKey { .. })));
        assert!(matches!(
            g.cas(key, 0, json!(1), "w", None),
            Err(MindError::InvalidKey { .. })
        ));
    }
    let long = format!("a.{}", "b".repeat(crate::MAX_KEY_BYTES));
    assert!(matches!(
        g.write(&long, json!(1), "w", None),
        Err(MindError::InvalidKey { .. })
    ));
    assert!(matches!(
        g.list_keys("a?"),
        Err(MindError::InvalidPattern { .. })
    ));
    assert!(matches!(
        g.list_keys("A*"),
        Err(MindError::InvalidPattern { .. })
    ));
    assert!(matches!(
        g.read_name("Bad"),
        Err(MindError::InvalidKey { .. })
    ));
    assert!(matches!(m.run("a:b"), Err(MindError::InvalidKey { .. })));
    assert!(matches!(m.run(""), Err(MindError::InvalidKey { .. })));
    assert!(matches!(
        m.drop_run("a b"),
        Err(MindError::InvalidKey { .. })
    ));
    let writer = "w".repeat(crate::MAX_WRITER_BYTES + 1);
    assert!(matches!(
        g.write("a.b", json!(1), &writer, None),
        Err(MindError::InvalidKey { .. })
    ));
    assert!(matches!(
        g.list_keys(""),
        Err(MindError::InvalidPattern { .. })
    ));
    assert!(g.list_keys("*").unwrap().is_empty());
}

/// Values over the size limit are refused whole, in writes, cas and batches.
pub fn too_large(f: &mut Factory<'_>) {
    let m = f(MindConfig {
        max_value_bytes: 100,
        ..MindConfig::default()
    });
    let g = m.global();
    let ok = json!("x".repeat(98)); // 100 bytes with its quotes
    g.write("big.ok", ok.clone(), "w", None).unwrap();
    let big = json!("x".repeat(99));
    let err = g.write("big.no", big.clone(), "w", None).unwrap_err();
    assert_eq!(
        err,
        MindError::TooLarge {
            key: "big.no".into(),
            size: 101,
            max: 100
        }
    );
    assert!(err.to_string().contains("101 bytes"));
    assert!(matches!(
        g.cas("big.ok", 1, big.clone(), "w", None),
        Err(MindError::TooLarge { .. })
    ));
    let batch = [("big.a", json!(1)), ("big.b", big)];
    assert!(matches!(
        g.write_batch(&batch, "w", None),
        Err(MindError::TooLarge { .. })
    ));
    assert_eq!(g.list_keys("big.*").unwrap(), vec!["big.ok"]);
    assert_eq!(g.read("big.ok").unwrap().unwrap().version, 1);
}

/// cas writes only over the expected version; 0 means absent.
pub fn compare_and_set(f: &mut Factory<'_>) {
    let g = fresh(f).global();
    let e = g.cas("c.k", 0, json!(1), "w", None).unwrap();
    assert_eq!(e.version, 1);
    let err = g.cas("c.k", 0, json!(2), "w", None).unwrap_err();
    assert_eq!(
        err,
        MindError::Conflict {
            key: "c.k".into(),
            expected: 0,
            found: 1
        }
    );
    assert!(matches!(
        g.cas("c.k", 5, json!(2), "w", None),
        Err(MindError::Conflict { found: 1, .. })
    ));
    assert_eq!(g.read("c.k").unwrap().unwrap().value, json!(1));
    assert_eq!(g.cas("c.k", 1, json!(2), "w2", None).unwrap().version, 2);
    assert!(matches!(
        g.cas("c.missing", 3, json!(2), "w", None),
        Err(MindError::Conflict { found: 0, .. })
    ));
    assert_eq!(g.read("c.missing").unwrap(), None);
    let r = g.read("c.k").unwrap().unwrap();
    assert_eq!((r.value, r.version, r.writer.as_str()), (json!(2), 2, "w2"));
}

/// delete reports whether something went; a re-created key starts at version 1.
pub fn delete(f: &mut Factory<'_>) {
    let g = fresh(f).global();
    assert!(!g.delete("d.k").unwrap());
    g.write("d.k", json!(1), "w", None).unwrap();
    g.write("d.k", json!(2), "w", None).unwrap();
    g.write("d.other", json!(0), "w", None).unwrap();
    assert!(g.delete("d.k").unwrap());
    assert!(!g.delete("d.k").unwrap());
    assert_eq!(g.read("d.k").unwrap(), None);
    assert_eq!(g.list_keys("d.*").unwrap(), vec!["d.other"]);
    assert_eq!(g.write("d.k", json!(3), "w", None).unwrap().version, 1);
}

/// Globs, exact keys and names across namespaces, always sorted.
pub fn patterns_and_names(f: &mut Factory<'_>) {
    let g = fresh(f).global();
    for k in [
        "retrieval.query",
        "vector.chunks",
        "bm25.chunks",
        "bm25.stats.chunks",
        "retrieval.chunks",
        "retrievalx.chunks",
        "bm25.chunks2",
    ] {
        g.write(k, json!(k), "w", None).unwrap();
    }
    assert_eq!(
        g.list_keys("retrieval.*").unwrap(),
        vec!["retrieval.chunks", "retrieval.query"]
    );
    // Without `*`, a pattern is one exact key: never a prefix.
    assert!(g.list_keys("retrieval").unwrap().is_empty());
    assert_eq!(
        g.list_keys("retrieval.query").unwrap(),
        vec!["retrieval.query"]
    );
    assert_eq!(g.list_keys("bm25.chunks").unwrap(), vec!["bm25.chunks"]);
    assert_eq!(
        g.list_keys("*.chunks").unwrap(),
        vec![
            "bm25.chunks",
            "bm25.stats.chunks",
            "retrieval.chunks",
            "retrievalx.chunks",
            "vector.chunks"
        ]
    );
    assert_eq!(
        g.list_keys("b*s").unwrap(),
        vec!["bm25.chunks", "bm25.stats.chunks"]
    );
    assert_eq!(g.list_keys("*").unwrap().len(), 7);
    assert!(g.list_keys("zzz").unwrap().is_empty());
    let names: Vec<String> = g
        .read_name("chunks")
        .unwrap()
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(
        names,
        vec![
            "bm25.chunks",
            "retrieval.chunks",
            "retrievalx.chunks",
            "vector.chunks"
        ]
    );
    let stats = g.read_name("stats.chunks").unwrap();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].value, json!("bm25.stats.chunks"));
    assert!(g.read_name("nothing").unwrap().is_empty());
}

/// A run sees its keys over the global ones and never another run's.
pub fn run_scopes(f: &mut Factory<'_>) {
    let m = fresh(f);
    let g = m.global();
    let (r1, r2) = (m.run("r1").unwrap(), m.run("r2").unwrap());
    assert_eq!(r1.run_id(), Some("r1"));
    assert_eq!(g.run_id(), None);
    g.write("q.text", json!("global q"), "cli", None).unwrap();
    g.write("shared.chunks", json!("global"), "g", None)
        .unwrap();
    r1.write("bm25.chunks", json!([1]), "bm25", None).unwrap();
    r1.write("shared.chunks", json!("r1"), "r1", None).unwrap();
    r2.write("vector.chunks", json!([2]), "vector", None)
        .unwrap();

    assert_eq!(r1.read("q.text").unwrap().unwrap().value, json!("global q"));
    assert_eq!(
        r1.read("shared.chunks").unwrap().unwrap().value,
        json!("r1")
    );
    assert_eq!(
        r2.read("shared.chunks").unwrap().unwrap().value,
        json!("global")
    );
    assert_eq!(
        g.read("shared.chunks").unwrap().unwrap().value,
        json!("global")
    );
    assert_eq!(r2.read("bm25.chunks").unwrap(), None);
    assert_eq!(r1.read("vector.chunks").unwrap(), None);
    assert_eq!(g.read("bm25.chunks").unwrap(), None);

    assert_eq!(
        r1.list_keys("*").unwrap(),
        vec!["bm25.chunks", "q.text", "shared.chunks"]
    );
    assert_eq!(
        r2.list_keys("*.chunks").unwrap(),
        vec!["shared.chunks", "vector.chunks"]
    );
    assert_eq!(g.list_keys("*").unwrap(), vec!["q.text", "shared.chunks"]);
    let r1_chunks: Vec<(String, Value)> = r1
        .read_name("chunks")
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect();
    assert_eq!(
        r1_chunks,
        vec![
            ("bm25.chunks".to_string(), json!([1])),
            ("shared.chunks".to_string(), json!("r1"))
        ]
    );
    assert_eq!(r1.read_pattern("shared.*").unwrap()[0].value, json!("r1"));
    let many: Vec<Option<Value>> = r1
        .read_many(&["shared.chunks", "q.text", "vector.chunks", "bm25.chunks"])
        .unwrap()
        .into_iter()
        .map(|e| e.map(|e| e.value))
        .collect();
    assert_eq!(
        many,
        vec![
            Some(json!("r1")),
            Some(json!("global q")),
            None,
            Some(json!([1]))
        ]
    );
    assert!(matches!(
        r1.read_many(&["a.b", "bad"]),
        Err(MindError::InvalidKey { .. })
    ));
    assert!(r1.read_many(&[]).unwrap().is_empty());

    // A run cannot delete a global key; deleting its shadow reveals the global one.
    assert!(!r2.delete("q.text").unwrap());
    assert!(g.read("q.text").unwrap().is_some());
    assert!(r1.delete("shared.chunks").unwrap());
    assert_eq!(
        r1.read("shared.chunks").unwrap().unwrap().value,
        json!("global")
    );
    // Global changes show through where not shadowed.
    g.write("q.text", json!("new q"), "cli", None).unwrap();
    assert_eq!(r2.read("q.text").unwrap().unwrap().value, json!("new q"));
}

/// A run's first write of a key it sees from global continues the global version, so
/// cas compares with what read returned.
pub fn run_versions_continue_from_global(f: &mut Factory<'_>) {
    let m = fresh(f);
    let g = m.global();
    let r = m.run("rv").unwrap();
    g.write("k.v", json!(1), "g", None).unwrap();
    g.write("k.v", json!(2), "g", None).unwrap();
    let seen = r.read("k.v").unwrap().unwrap();
    assert_eq!(seen.version, 2);
    assert!(matches!(
        r.cas("k.v", 0, json!("x"), "r", None),
        Err(MindError::Conflict { found: 2, .. })
    ));
    let e = r.cas("k.v", seen.version, json!("run"), "r", None).unwrap();
    assert_eq!(e.version, 3);
    assert_eq!(g.read("k.v").unwrap().unwrap().version, 2);
    assert_eq!(
        r.write("k.v", json!("again"), "r", None).unwrap().version,
        4
    );
    assert_eq!(r.write("k.new", json!(0), "r", None).unwrap().version, 1);
    assert_eq!(r.cas("k.new2", 0, json!(0), "r", None).unwrap().version, 1);
}

/// drop_run removes exactly one run's keys.
pub fn drop_run(f: &mut Factory<'_>) {
    let m = fresh(f);
    m.global().write("g.k", json!(1), "w", None).unwrap();
    let (a, b) = (m.run("a").unwrap(), m.run("b").unwrap());
    for i in 0..5 {
        a.write(&format!("x.k{i}"), json!(i), "w", None).unwrap();
    }
    b.write("x.k0", json!("b"), "w", None).unwrap();
    assert_eq!(m.drop_run("a").unwrap(), 5);
    assert_eq!(a.list_keys("*").unwrap(), vec!["g.k"]);
    assert_eq!(b.list_keys("*").unwrap(), vec!["g.k", "x.k0"]);
    assert_eq!(m.drop_run("a").unwrap(), 0);
    assert_eq!(m.drop_run("never").unwrap(), 0);
    // The run can be used again afterwards.
    assert_eq!(a.write("x.k1", json!(1), "w", None).unwrap().version, 1);
}

/// Expired entries vanish from every read at once.
pub fn ttl(f: &mut Factory<'_>) {
    let m = fresh(f);
    let g = m.global();
    let e = g
        .write("t.short", json!(1), "w", Some(Duration::from_millis(150)))
        .unwrap();
    assert_eq!(e.ttl_ms, Some(150));
    assert_eq!(e.expires_at_ms(), Some(e.written_at_ms + 150));
    g.write("t.keep", json!(2), "w", None).unwrap();
    g.write("t2.chunks", json!(3), "w", Some(Duration::from_millis(150)))
        .unwrap();
    assert_eq!(g.read("t.short").unwrap().unwrap().ttl_ms, Some(150));
    assert_eq!(g.list_keys("*").unwrap().len(), 3);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(g.read("t.short").unwrap(), None);
    assert_eq!(g.list_keys("*").unwrap(), vec!["t.keep"]);
    assert!(g.read_name("chunks").unwrap().is_empty());
    assert!(!g.delete("t.short").unwrap());
    // An expired key counts as absent for versions and cas.
    assert_eq!(g.cas("t.short", 0, json!(5), "w", None).unwrap().version, 1);
    // Overwriting without a TTL makes it permanent.
    g.write("t.keep", json!(3), "w", Some(Duration::from_millis(100)))
        .unwrap();
    g.write("t.keep", json!(4), "w", None).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(g.read("t.keep").unwrap().unwrap().value, json!(4));
    m.purge_expired().unwrap();
    assert_eq!(g.list_keys("*").unwrap(), vec!["t.keep", "t.short"]);
}

/// A run TTL caps every entry a run writes; global entries are untouched.
pub fn run_ttl(f: &mut Factory<'_>) {
    let m = f(MindConfig {
        run_ttl: Some(Duration::from_millis(150)),
        ..MindConfig::default()
    });
    let r = m.run("short-lived").unwrap();
    m.global().write("g.k", json!(1), "w", None).unwrap();
    let e = r.write("r.k", json!(1), "w", None).unwrap();
    assert_eq!(e.ttl_ms, Some(150));
    let e = r
        .write("r.k2", json!(1), "w", Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(e.ttl_ms, Some(150));
    let e = r
        .write("r.k3", json!(1), "w", Some(Duration::from_millis(50)))
        .unwrap();
    assert_eq!(e.ttl_ms, Some(50));
    assert_eq!(r.list_keys("*").unwrap().len(), 4);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(r.list_keys("*").unwrap(), vec!["g.k"]);
    assert_eq!(m.global().read("g.k").unwrap().unwrap().ttl_ms, None);
    assert_eq!(m.drop_run("short-lived").unwrap(), 0);
}

/// A batch writes every item with its own version.
pub fn batch(f: &mut Factory<'_>) {
    let m = fresh(f);
    let r = m.run("batch").unwrap();
    r.write("b.k1", json!(0), "w", None).unwrap();
    let items: Vec<(&str, Value)> = vec![("b.k1", json!(1)), ("b.k2", json!(2)), ("c.k", json!(3))];
    let out = r.write_batch(&items, "batcher", None).unwrap();
    let versions: Vec<u64> = out.iter().map(|e| e.version).collect();
    assert_eq!(versions, vec![2, 1, 1]);
    assert_eq!(r.read("b.k2").unwrap().unwrap().writer, "batcher");
    assert!(r.write_batch(&[], "w", None).unwrap().is_empty());
    let bad: Vec<(&str, Value)> = vec![("b.k3", json!(1)), ("Bad", json!(2))];
    assert!(matches!(
        r.write_batch(&bad, "w", None),
        Err(MindError::InvalidKey { .. })
    ));
    assert_eq!(r.read("b.k3").unwrap(), None);
    let keys: Vec<&str> = vec!["b.k1", "b.k1"];
    let twice: Vec<(&str, Value)> = keys.iter().map(|k| (*k, json!(9))).collect();
    let out = r.write_batch(&twice, "w", None).unwrap();
    assert_eq!((out[0].version, out[1].version), (3, 4));
}

/// Watchers see their scope's writes and deletes in order, and nothing of other runs.
pub fn watch(f: &mut Factory<'_>) {
    let m = fresh(f);
    let (g, r1, r2) = (m.global(), m.run("w1").unwrap(), m.run("w2").unwrap());
    let wg = g.watch().unwrap();
    let w1 = r1.watch().unwrap();
    r1.write("a.k", json!(1), "w", None).unwrap();
    r2.write("a.k", json!(1), "w", None).unwrap();
    g.write("g.k", json!(1), "w", None).unwrap();
    r1.cas("a.k", 1, json!(2), "w", None).unwrap();
    r1.delete("a.k").unwrap();
    m.drop_run("w1").unwrap();
    let next = |w: &crate::Watch| {
        w.recv_timeout(Duration::from_secs(5))
            .expect("a change within 5 s")
            .unwrap()
    };
    let run1 = Layer::Run(Arc::from("w1"));
    let seen: Vec<(Layer, String, ChangeKind)> = (0..5)
        .map(|_| next(&w1))
        .map(|c| (c.layer, c.key, c.kind))
        .collect();
    assert_eq!(
        seen,
        vec![
            (run1.clone(), "a.k".into(), ChangeKind::Written(1)),
            (Layer::Global, "g.k".into(), ChangeKind::Written(1)),
            (run1.clone(), "a.k".into(), ChangeKind::Written(2)),
            (run1.clone(), "a.k".into(), ChangeKind::Deleted),
            (run1, String::new(), ChangeKind::Dropped),
        ]
    );
    let c = next(&wg);
    assert_eq!(
        (c.layer, c.key, c.kind),
        (Layer::Global, "g.k".into(), ChangeKind::Written(1))
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(wg.drain().is_empty() && w1.drain().is_empty());
    drop(w1);
    // Writes after a watcher is dropped are fine.
    r1.write("a.k", json!(3), "w", None).unwrap();
}

/// Many threads incrementing one counter with cas lose no update.
pub fn concurrent_cas(f: &mut Factory<'_>, threads: usize, increments: usize) {
    let m = fresh(f);
    let g = m.global();
    g.write("count.n", json!(0), "init", None).unwrap();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let g = g.clone();
            std::thread::spawn(move || {
                let mut retries = 0u64;
                for _ in 0..increments {
                    loop {
                        let e = g.read("count.n").unwrap().unwrap();
                        let n = e.value.as_u64().unwrap();
                        match g.cas("count.n", e.version, json!(n + 1), &format!("t{t}"), None) {
                            Ok(_) => break,
                            Err(MindError::Conflict { .. }) => retries += 1,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                retries
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let e = g.read("count.n").unwrap().unwrap();
    let total = (threads * increments) as u64;
    assert_eq!(e.value, json!(total));
    assert_eq!(e.version, total + 1);
}
