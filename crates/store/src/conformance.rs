//! One conformance suite for every `DocStore` backend. Each check takes a fresh, empty
//! store; [`run_all`] runs them all. Backend test files call it with their own store.

use std::collections::BTreeMap;

use neuralcore_core::{
    doc_key, Chunk, DocStore, DocumentRecord, Provenance, SourceRecord, SourceType,
};

/// A document record for tests.
pub fn sample_doc(collection: &str, content: &str) -> DocumentRecord {
    let sha = neuralcore_core::text::sha256_hex(content.as_bytes());
    DocumentRecord {
        key: doc_key(collection, &sha),
        collection: collection.to_string(),
        title: format!("title of {content}"),
        content_sha256: sha.clone(),
        char_len: content.chars().count() as u64,
        byte_size: content.len() as u64,
        n_chunks: 2,
        metadata: BTreeMap::new(),
        provenance: vec![Provenance {
            source_id: format!("/src/{content}"),
            source_type: SourceType::File,
            uri: format!("/src/{content}"),
            title: content.to_string(),
            locator: None,
            external_id: None,
            created_at: None,
            ingested_at: "2026-01-01T00:00:00Z".into(),
            content_sha256: sha,
            byte_size: content.len() as u64,
            loader: "txt".into(),
        }],
        chunking: "test".into(),
    }
}

/// Chunks for a test document.
pub fn sample_chunks(doc: &DocumentRecord) -> Vec<Chunk> {
    (0..doc.n_chunks)
        .map(|i| Chunk {
            doc: doc.key,
            ordinal: i,
            span: (i as u64 * 10, i as u64 * 10 + 10),
            section: vec!["S".into()],
            tokens: 3,
            text: format!("chunk {i} of {}", doc.title),
        })
        .collect()
}

/// A source record for tests.
pub fn sample_source(collection: &str, id: &str, docs: Vec<u64>) -> SourceRecord {
    SourceRecord {
        collection: collection.to_string(),
        source_id: id.to_string(),
        source_type: SourceType::File,
        uri: id.to_string(),
        raw_sha256: "00".into(),
        byte_size: 1,
        docs,
        loader: "txt".into(),
        settings: "s".into(),
        ingested_at: "2026-01-01T00:00:00Z".into(),
        partial: None,
    }
}

fn add(store: &dyn DocStore, c: &str, content: &str) -> DocumentRecord {
    let doc = sample_doc(c, content);
    let mut b = store.begin().unwrap();
    b.ensure_collection(c, "t").unwrap();
    b.put_document(&doc).unwrap();
    for ch in sample_chunks(&doc) {
        b.put_chunk(c, &ch).unwrap();
    }
    b.put_source(&sample_source(
        c,
        &doc.provenance[0].source_id,
        vec![doc.key],
    ))
    .unwrap();
    b.record_index_changes(c, &[], &[doc.key]).unwrap();
    b.commit().unwrap();
    doc
}

/// Writes become visible at commit, with counters and journal.
pub fn roundtrip(store: &dyn DocStore) {
    assert!(store.collections().unwrap().is_empty());
    let d = add(store, "docs", "alpha");
    let info = store.collection("docs").unwrap().unwrap();
    assert_eq!(
        (info.sources, info.documents, info.chunks, info.generation),
        (1, 1, 2, 1)
    );
    assert_eq!(store.document("docs", d.key).unwrap().unwrap(), d);
    let chunks = store.chunks(d.key).unwrap();
    assert_eq!(chunks, sample_chunks(&d));
    assert_eq!(store.chunk(d.key, 1).unwrap().unwrap(), chunks[1]);
    assert!(store.chunk(d.key, 7).unwrap().is_none());
    assert_eq!(store.sources("docs").unwrap().len(), 1);
    let j = store.index_journal("docs").unwrap();
    assert_eq!(
        (j.generation, j.added.clone(), j.removed.len()),
        (1, vec![d.key], 0)
    );
    let d2 = add(store, "docs", "beta");
    let mut keys = vec![d.key, d2.key];
    keys.sort();
    assert_eq!(store.document_keys("docs").unwrap(), keys);
    assert_eq!(store.index_journal("docs").unwrap().generation, 2);
}

/// Nothing of a dropped batch is visible; a batch reads its own writes; readers do not
/// see uncommitted writes.
pub fn atomic_batches(store: &dyn DocStore) {
    let d = sample_doc("c", "gamma");
    {
        let mut b = store.begin().unwrap();
        b.ensure_collection("c", "t").unwrap();
        b.put_document(&d).unwrap();
        assert_eq!(b.document("c", d.key).unwrap().unwrap(), d);
        b.put_source(&sample_source("c", "s1", vec![d.key]))
            .unwrap();
        assert!(b.source("c", "s1").unwrap().is_some());
        // dropped without commit
    }
    assert!(store.collection("c").unwrap().is_none());
    assert!(store.document("c", d.key).unwrap().is_none());
    assert!(store.source("c", "s1").unwrap().is_none());
}

/// Deleting a document removes its chunks and fixes the counters; deleting a
/// collection removes everything in it and nothing else.
pub fn deletes(store: &dyn DocStore) {
    let a = add(store, "one", "a");
    let b = add(store, "one.two", "b");
    let mut batch = store.begin().unwrap();
    batch.delete_document("one", a.key).unwrap();
    batch
        .delete_source("one", &a.provenance[0].source_id)
        .unwrap();
    batch.delete_document("one", 12345).unwrap(); // absent: no-op
    batch.record_index_changes("one", &[a.key], &[]).unwrap();
    batch.commit().unwrap();
    let info = store.collection("one").unwrap().unwrap();
    assert_eq!((info.sources, info.documents, info.chunks), (0, 0, 0));
    assert!(store.chunks(a.key).unwrap().is_empty());
    assert_eq!(store.index_journal("one").unwrap().removed, vec![a.key]);
    // "one.two" shares a prefix with "one" and must be untouched.
    assert_eq!(store.chunks(b.key).unwrap().len(), 2);
    let mut batch = store.begin().unwrap();
    batch.delete_collection("one.two").unwrap();
    batch.commit().unwrap();
    assert!(store.collection("one.two").unwrap().is_none());
    assert!(store.chunks(b.key).unwrap().is_empty());
    assert!(store.collection("one").unwrap().is_some());
}

/// Collections are isolated and names are checked.
pub fn collections(store: &dyn DocStore) {
    let a = add(store, "x", "same text");
    let b = add(store, "y", "same text");
    assert_ne!(
        a.key, b.key,
        "same content in two collections gets two keys"
    );
    assert_eq!(store.document_keys("x").unwrap(), vec![a.key]);
    assert!(store.document("x", b.key).unwrap().is_none());
    let mut batch = store.begin().unwrap();
    for bad in ["", "a/b", ".hidden", "sp ace", &"n".repeat(65)] {
        assert!(
            batch.ensure_collection(bad, "t").is_err(),
            "{bad:?} accepted"
        );
    }
    assert!(
        batch.put_document(&sample_doc("nope", "z")).is_err(),
        "unknown collection"
    );
    drop(batch);
    let names: Vec<String> = store
        .collections()
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, vec!["x", "y"]);
}

/// Replacing records keeps counters exact.
pub fn replace_keeps_counts(store: &dyn DocStore) {
    let d = add(store, "r", "delta");
    let mut b = store.begin().unwrap();
    let mut d2 = d.clone();
    d2.title = "new".into();
    b.put_document(&d2).unwrap();
    for ch in sample_chunks(&d) {
        b.put_chunk("r", &ch).unwrap();
    }
    b.put_source(&sample_source("r", &d.provenance[0].source_id, vec![d.key]))
        .unwrap();
    b.commit().unwrap();
    let info = store.collection("r").unwrap().unwrap();
    assert_eq!((info.sources, info.documents, info.chunks), (1, 1, 2));
    assert_eq!(
        info.generation, 1,
        "no index change recorded: generation stays"
    );
    assert_eq!(store.document("r", d.key).unwrap().unwrap().title, "new");
}

/// The embedding cache: round trip, atomic with its batch, bad vectors refused, models
/// recorded, and a sweep that keeps what a stored chunk names for any recorded model.
pub fn embeddings(store: &dyn DocStore) {
    let a = neuralcore_core::embedding_key("m", "text a");
    let b = neuralcore_core::embedding_key("m", "text b");
    assert_ne!(a, neuralcore_core::embedding_key("other model", "text a"));
    let mut w = store.begin().unwrap();
    w.put_embedding("m", &a, &[1.0, -2.5, 3.25]).unwrap();
    drop(w);
    assert_eq!(store.embeddings(&[a]).unwrap(), vec![None], "dropped batch");
    assert!(
        store.embedding_models().unwrap().is_empty(),
        "dropped batch"
    );
    let mut w = store.begin().unwrap();
    w.put_embedding("m", &a, &[1.0, -2.5, 3.25]).unwrap();
    assert!(w.put_embedding("m", &b, &[]).is_err());
    assert!(w.put_embedding("m", &b, &[f32::NAN]).is_err());
    w.commit().unwrap();
    assert_eq!(
        store.embeddings(&[b, a]).unwrap(),
        vec![None, Some(vec![1.0, -2.5, 3.25])]
    );
    assert_eq!(store.embedding_count().unwrap(), 1);
    assert_eq!(store.embedding_models().unwrap(), ["m"]);

    // Two collections' chunks, each embedded by two models: the sweep keeps all eight
    // vectors and drops `a`, held by no chunk; atomically with its batch.
    let key_of = |model: &str, title: &str, c: &Chunk| {
        neuralcore_core::embedding_key(model, &format!("{title}\n{}", c.text))
    };
    let mut w = store.begin().unwrap();
    let mut held = Vec::new();
    for (coll, content) in [("e1", "one"), ("e2", "two")] {
        w.ensure_collection(coll, "2026-01-01T00:00:00Z").unwrap();
        let d = sample_doc(coll, content);
        w.put_document(&d).unwrap();
        for c in sample_chunks(&d) {
            w.put_chunk(coll, &c).unwrap();
            for model in ["m", "m2"] {
                let k = key_of(model, &d.title, &c);
                w.put_embedding(model, &k, &[0.5]).unwrap();
                held.push(k);
            }
        }
    }
    w.commit().unwrap();
    assert_eq!(store.embedding_count().unwrap(), 9);
    assert_eq!(store.embedding_models().unwrap(), ["m", "m2"]);
    let mut w = store.begin().unwrap();
    assert_eq!(
        w.retain_embeddings(&key_of).unwrap(),
        1,
        "only `a` is held by none"
    );
    drop(w);
    assert_eq!(store.embedding_count().unwrap(), 9, "dropped batch");
    let mut w = store.begin().unwrap();
    assert_eq!(w.retain_embeddings(&key_of).unwrap(), 1);
    w.commit().unwrap();
    assert_eq!(store.embedding_count().unwrap(), 8);
    assert_eq!(store.embeddings(&[a]).unwrap(), vec![None]);
    assert!(store.embeddings(&held).unwrap().iter().all(Option::is_some));

    // A document removed: its chunks' vectors of both models go at the next sweep.
    let mut w = store.begin().unwrap();
    w.delete_document("e1", sample_doc("e1", "one").key)
        .unwrap();
    assert_eq!(w.retain_embeddings(&key_of).unwrap(), 4);
    w.commit().unwrap();
    assert_eq!(store.embedding_count().unwrap(), 4);
}

/// One step of a random operation sequence ([`check_model`]).
#[derive(Debug, Clone)]
pub enum ModelOp {
    /// Put document `doc{i}` and its two chunks.
    PutDoc(u8),
    /// Delete document `doc{i}`.
    DelDoc(u8),
    /// Put source `s{i}`.
    PutSource(u8),
    /// Delete source `s{i}`.
    DelSource(u8),
    /// Commit the batch and begin another.
    Commit,
    /// Drop the batch and begin another.
    Abort,
}

#[derive(Default, Clone, PartialEq, Debug)]
struct Model {
    docs: BTreeMap<u64, String>,
    sources: BTreeMap<String, ()>,
}

/// Run `ops` on `store` (empty) and on a `BTreeMap` model; the store must then hold
/// exactly what the model committed, counters included.
pub fn check_model(store: &dyn DocStore, ops: &[ModelOp]) {
    let mut committed = Model::default();
    let mut pending = committed.clone();
    let mut batch = Some(store.begin().unwrap());
    batch.as_mut().unwrap().ensure_collection("m", "t").unwrap();
    for op in ops {
        let b = batch.as_mut().unwrap();
        match op {
            ModelOp::PutDoc(i) => {
                let d = sample_doc("m", &format!("doc{i}"));
                b.put_document(&d).unwrap();
                for c in sample_chunks(&d) {
                    b.put_chunk("m", &c).unwrap();
                }
                pending.docs.insert(d.key, d.title);
            }
            ModelOp::DelDoc(i) => {
                let d = sample_doc("m", &format!("doc{i}"));
                b.delete_document("m", d.key).unwrap();
                pending.docs.remove(&d.key);
            }
            ModelOp::PutSource(i) => {
                b.put_source(&sample_source("m", &format!("s{i}"), vec![]))
                    .unwrap();
                pending.sources.insert(format!("s{i}"), ());
            }
            ModelOp::DelSource(i) => {
                b.delete_source("m", &format!("s{i}")).unwrap();
                pending.sources.remove(&format!("s{i}"));
            }
            ModelOp::Commit | ModelOp::Abort => {
                let b = batch.take().unwrap();
                if matches!(op, ModelOp::Commit) {
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

/// Every batch that changes a collection's indexed content is logged by generation; a
/// range reads back in order, a range the log no longer holds whole is `None`, and
/// compaction keeps the last generations.
pub fn journal_log(store: &dyn DocStore) {
    let docs: Vec<_> = (0..4).map(|i| sample_doc("j", &format!("j{i}"))).collect();
    for (i, d) in docs.iter().enumerate() {
        let mut b = store.begin().unwrap();
        b.ensure_collection("j", "t").unwrap();
        b.put_document(d).unwrap();
        let removed: Vec<u64> = if i == 3 { vec![docs[0].key] } else { vec![] };
        if i == 3 {
            b.delete_document("j", docs[0].key).unwrap();
        }
        b.record_index_changes("j", &removed, &[d.key]).unwrap();
        b.commit().unwrap();
    }
    assert_eq!(store.collection("j").unwrap().unwrap().generation, 4);
    let all = store.index_journals("j", 0, 4).unwrap().unwrap();
    assert_eq!(
        all.iter().map(|j| j.generation).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(all[3].removed, vec![docs[0].key]);
    assert_eq!(all[3].added, vec![docs[3].key]);
    let tail = store.index_journals("j", 2, 4).unwrap().unwrap();
    assert_eq!(
        tail.iter().map(|j| j.generation).collect::<Vec<_>>(),
        vec![3, 4]
    );
    assert_eq!(store.index_journals("j", 4, 4).unwrap(), Some(vec![]));
    // Past the end of the log: not all there.
    assert_eq!(store.index_journals("j", 2, 5).unwrap(), None);
    assert_eq!(store.index_journals("other", 0, 1).unwrap(), None);
    // Keep the last two generations.
    let mut b = store.begin().unwrap();
    assert_eq!(b.compact_journal("j", 2).unwrap(), 2);
    assert_eq!(b.compact_journal("j", 2).unwrap(), 0);
    b.commit().unwrap();
    assert_eq!(store.index_journals("j", 0, 4).unwrap(), None);
    assert_eq!(store.index_journals("j", 1, 4).unwrap(), None);
    assert_eq!(store.index_journals("j", 2, 4).unwrap().unwrap().len(), 2);
    // A dropped collection leaves a reset; made again, it carries on from there.
    let mut b = store.begin().unwrap();
    b.delete_collection("j").unwrap();
    b.commit().unwrap();
    let mut b = store.begin().unwrap();
    b.ensure_collection("j", "t").unwrap();
    b.put_document(&docs[0]).unwrap();
    b.record_index_changes("j", &[], &[docs[0].key]).unwrap();
    b.commit().unwrap();
    // The generation carries on: the drop is a reset at 5, the new batch 6.
    assert_eq!(store.collection("j").unwrap().unwrap().generation, 6);
    let again = store.index_journals("j", 4, 6).unwrap().unwrap();
    assert_eq!(again.len(), 2);
    assert!(again[0].reset && again[0].added.is_empty());
    assert_eq!((again[1].generation, again[1].reset), (6, false));
    assert_eq!(again[1].added, vec![docs[0].key]);
    // Older entries went with the old collection.
    assert_eq!(store.index_journals("j", 3, 6).unwrap(), None);
}

/// Run every check, each on a fresh store from `make`.
pub fn run_all(make: &mut dyn FnMut() -> Box<dyn DocStore>) {
    roundtrip(&*make());
    atomic_batches(&*make());
    deletes(&*make());
    collections(&*make());
    replace_keeps_counts(&*make());
    embeddings(&*make());
    journal_log(&*make());
}
