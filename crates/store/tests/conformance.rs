//! The conformance suite against every backend.

use neuralcore_core::DocStore;
use neuralcore_store::{conformance, MemoryStore, RedbStore};

#[test]
fn memory_store_conforms() {
    conformance::run_all(&mut || Box::new(MemoryStore::new()) as Box<dyn DocStore>);
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
