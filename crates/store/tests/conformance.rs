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
    use neuralcore_store::conformance::{self, ModelOp};
    use neuralcore_store::{InMemoryStore, RedbStore};
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = ModelOp> {
        prop_oneof![
            (0u8..6).prop_map(ModelOp::PutDoc),
            (0u8..6).prop_map(ModelOp::DelDoc),
            (0u8..4).prop_map(ModelOp::PutSource),
            (0u8..4).prop_map(ModelOp::DelSource),
            Just(ModelOp::Commit),
            Just(ModelOp::Abort),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn backends_match_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            conformance::check_model(&InMemoryStore::new(), &ops);
            let dir = tempfile::tempdir().unwrap();
            conformance::check_model(&RedbStore::open(&dir.path().join("p.redb")).unwrap(), &ops);
        }
    }
}
