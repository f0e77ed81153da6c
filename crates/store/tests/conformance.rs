//! The conformance suite against every backend.

use neuralcore_core::DocStore;
use neuralcore_store::{conformance, InMemoryStore, RedbStore};

#[test]
fn memory_store_conforms() {
    conformance::run_all(&mut || Box::new(InMemoryStore::new()) as Box<dyn DocStore>);
}

#[test]
fn redb_store_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    conformance::run_all(&mut || {
        n += 1;
        Box::new(RedbStore::open(&dir.path().join(format!("s{n}.redb"))).unwrap())
            as Box<dyn DocStore>
    });
}

#[test]
fn redb_store_persists_and_refuses_second_opener() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.redb");
    let key = {
        let s = RedbStore::open(&path).unwrap();
        let d = conformance::sample_doc("p", "persisted");
        let mut b = s.begin().unwrap();
        b.ensure_collection("p", "t").unwrap();
        b.put_document(&d).unwrap();
        b.commit().unwrap();
        let second = RedbStore::open(&path);
        assert!(matches!(second, Err(e) if e.is_transient()));
        d.key
    };
    let s = RedbStore::open(&path).unwrap();
    assert_eq!(
        s.document("p", key).unwrap().unwrap().title,
        "title of persisted"
    );
}

mod model {
    //! Random operation sequences against every backend and a `BTreeMap` model.
    use std::collections::BTreeMap;

    use neuralcore_core::DocStore;
    use neuralcore_store::{conformance, InMemoryStore, RedbStore};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        PutDoc(u8),
        DelDoc(u8),
        PutSource(u8),
        DelSource(u8),
        Commit,
        Abort,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6).prop_map(Op::PutDoc),
            (0u8..6).prop_map(Op::DelDoc),
            (0u8..4).prop_map(Op::PutSource),
            (0u8..4).prop_map(Op::DelSource),
            Just(Op::Commit),
            Just(Op::Abort),
        ]
    }

    #[derive(Default, Clone, PartialEq, Debug)]
    struct Model {
        docs: BTreeMap<u64, String>,
        sources: BTreeMap<String, ()>,
    }

    fn check(store: &dyn DocStore, ops: &[Op]) {
        let mut committed = Model::default();
        let mut pending = committed.clone();
        let mut batch = Some(store.begin().unwrap());
        batch.as_mut().unwrap().ensure_collection("m", "t").unwrap();
        for op in ops {
            let b = batch.as_mut().unwrap();
            match op {
                Op::PutDoc(i) => {
                    let d = conformance::sample_doc("m", &format!("doc{i}"));
                    b.put_document(&d).unwrap();
                    for c in conformance::sample_chunks(&d) {
                        b.put_chunk("m", &c).unwrap();
                    }
                    pending.docs.insert(d.key, d.title);
                }
                Op::DelDoc(i) => {
                    let d = conformance::sample_doc("m", &format!("doc{i}"));
                    b.delete_document("m", d.key).unwrap();
                    pending.docs.remove(&d.key);
                }
                Op::PutSource(i) => {
                    b.put_source(&conformance::sample_source("m", &format!("s{i}"), vec![]))
                        .unwrap();
                    pending.sources.insert(format!("s{i}"), ());
                }
                Op::DelSource(i) => {
                    b.delete_source("m", &format!("s{i}")).unwrap();
                    pending.sources.remove(&format!("s{i}"));
                }
                Op::Commit | Op::Abort => {
                    let b = batch.take().unwrap();
                    if matches!(op, Op::Commit) {
                        b.commit().unwrap();
                        committed = pending.clone();
                    } else {
                        drop(b);
                        pending = committed.clone();
                    }
                    let mut b = store.begin().unwrap();
                    b.ensure_collection("m", "t").unwrap();
                    batch = Some(b);
                }
            }
        }
        drop(batch);
        // The store holds exactly the committed model, counters included.
        let keys = store.document_keys("m").unwrap_or_default();
        assert_eq!(keys, committed.docs.keys().copied().collect::<Vec<_>>());
        for (k, title) in &committed.docs {
            assert_eq!(&store.document("m", *k).unwrap().unwrap().title, title);
            assert_eq!(store.chunks(*k).unwrap().len(), 2);
        }
        let sources: Vec<String> = store
            .sources("m")
            .unwrap()
            .into_iter()
            .map(|s| s.source_id)
            .collect();
        assert_eq!(
            sources,
            committed.sources.keys().cloned().collect::<Vec<_>>()
        );
        if let Some(info) = store.collection("m").unwrap() {
            assert_eq!(info.documents as usize, committed.docs.len());
            assert_eq!(info.chunks as usize, committed.docs.len() * 2);
            assert_eq!(info.sources as usize, committed.sources.len());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn backends_match_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            check(&InMemoryStore::new(), &ops);
            let dir = tempfile::tempdir().unwrap();
            check(&RedbStore::open(&dir.path().join("p.redb")).unwrap(), &ops);
        }
    }
}
