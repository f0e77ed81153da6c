//! Vector and hybrid search with the real all-MiniLM-L6-v2 model (pulled by
//! `scripts/test.sh` into `<repo>/.models`, or NEURALCORE_TEST_MODEL_DIR), against the
//! real embedded store in a temporary data dir: embedding during ingest, the embedding
//! cache, atomic replacement, removal, recovery of a lost index, and the keyword-only
//! fallback without a model.

use std::path::{Path, PathBuf};

use neuralcore_engine::{Config, Engine, IngestObserver, SearchMode};

fn config() -> Config {
    let mut c = Config::default();
    c.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    c
}

#[derive(Default)]
struct Count {
    embedded: usize,
}

impl IngestObserver for Count {
    fn embedded(&mut self, texts: usize) {
        self.embedded += texts;
    }
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, body).unwrap();
    p
}

fn ingest(e: &Engine, paths: &[&Path], c: &str) -> usize {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
    let mut n = Count::default();
    let s = e.ingest(&paths, c, &mut n).unwrap();
    assert_eq!(s.failed, 0, "{:?}", s.errors);
    n.embedded
}

fn titles(e: &Engine, c: &str, q: &str, mode: SearchMode) -> Vec<String> {
    let r = e.search(c, q, 3, Some(mode)).unwrap();
    assert_eq!(r.mode, mode);
    r.hits.into_iter().map(|h| h.document.title).collect()
}

fn corpus(dir: &Path) -> PathBuf {
    let d = dir.join("docs");
    write(
        &d,
        "cats.md",
        "# Cats\n\nDomestic cats are small carnivorous mammals that purr and hunt mice.",
    );
    write(
        &d,
        "volcano.md",
        "# Volcanoes\n\nMolten rock called lava erupts from openings in the crust.",
    );
    write(
        &d,
        "bread.md",
        "# Bread\n\nDough made from flour, water and yeast rises before it is baked.",
    );
    d
}

#[test]
fn vector_and_hybrid_search_find_paraphrases_keyword_search_misses() {
    let tmp = tempfile::tempdir().unwrap();
    let e = Engine::open(&tmp.path().join("data"), config()).unwrap();
    let n = ingest(&e, &[&corpus(tmp.path())], "default");
    assert_eq!(n, 3, "one vector per chunk");
    let q = "which feline pets catch rodents";
    assert!(
        !titles(&e, "default", q, SearchMode::Keyword).contains(&"Cats".to_string()),
        "no shared term: keyword search cannot find it"
    );
    assert_eq!(titles(&e, "default", q, SearchMode::Vector)[0], "Cats");
    assert_eq!(titles(&e, "default", q, SearchMode::Hybrid)[0], "Cats");
    // Hybrid is the default mode when the model is there.
    let r = e.search("default", "hot liquid rock", 1, None).unwrap();
    assert_eq!((r.mode, r.fallback.as_deref()), (SearchMode::Hybrid, None));
    assert_eq!(r.hits[0].document.title, "Volcanoes");
    // Scores: cosine similarity in vector mode.
    let v = e
        .search("default", q, 3, Some(SearchMode::Vector))
        .unwrap()
        .hits;
    assert!(v[0].score > v[1].score && v[0].score <= 1.0 + 1e-5);
}

#[test]
fn unchanged_text_is_never_embedded_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let docs = corpus(tmp.path());
    let e = Engine::open(&tmp.path().join("data"), config()).unwrap();
    assert_eq!(ingest(&e, &[&docs], "a"), 3);
    // Re-ingest: files unchanged, nothing embedded.
    assert_eq!(ingest(&e, &[&docs], "a"), 0);
    // The same texts in another collection come from the cache.
    assert_eq!(ingest(&e, &[&docs], "b"), 0);
    assert_eq!(
        titles(&e, "b", "baking with yeast", SearchMode::Vector)[0],
        "Bread"
    );
    // One changed file: only its chunk is embedded.
    write(
        &docs,
        "bread.md",
        "# Bread\n\nSourdough uses a starter culture instead of baker's yeast.",
    );
    assert_eq!(ingest(&e, &[&docs], "a"), 1);
}

#[test]
fn reingest_and_rm_replace_vectors_with_their_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let docs = corpus(tmp.path());
    let e = Engine::open(&tmp.path().join("data"), config()).unwrap();
    ingest(&e, &[&docs], "default");
    let cats = docs.join("cats.md");
    write(
        &docs,
        "cats.md",
        "# Cats\n\nThe orbit of comets around the Sun is highly elliptical.",
    );
    ingest(&e, &[&docs], "default");
    let store_keys = e.store().document_keys("default").unwrap();
    let idx = e.vector_index("default").unwrap().unwrap();
    assert_eq!(idx.stats().unwrap().live, 3);
    for q in ["feline pets", "comet orbits", "hot lava"] {
        for h in e
            .search("default", q, 10, Some(SearchMode::Vector))
            .unwrap()
            .hits
        {
            assert!(store_keys.contains(&h.chunk.doc), "stale vector returned");
        }
    }
    assert!(e
        .search("default", "comet orbits", 1, Some(SearchMode::Vector))
        .unwrap()
        .hits[0]
        .chunk
        .text
        .contains("comets"));
    e.remove("default", &[cats.display().to_string()]).unwrap();
    assert_eq!(idx.stats().unwrap().live, 2);
    let hits = e
        .search("default", "comet orbits", 10, Some(SearchMode::Vector))
        .unwrap()
        .hits;
    assert!(hits.iter().all(|h| h.document.title != "Cats"));
}

#[test]
fn vectors_no_chunk_holds_are_swept_from_the_cache_and_the_rest_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let docs = corpus(tmp.path());
    let e = Engine::open(&tmp.path().join("data"), config()).unwrap();
    assert_eq!(ingest(&e, &[&docs], "a"), 3);
    // Cats replaced twice, bread removed: five texts cached, two held.
    for body in ["Lions hunt in prides.", "Tigers swim well."] {
        write(&docs, "cats.md", &format!("# Cats\n\n{body}"));
        assert_eq!(ingest(&e, &[&docs], "a"), 1);
    }
    let bread = docs.join("bread.md");
    e.remove("a", &[bread.display().to_string()]).unwrap();
    std::fs::remove_file(&bread).unwrap();
    assert_eq!(e.store().embedding_count().unwrap(), 5);
    assert_eq!(e.store().embedding_models().unwrap().len(), 1);
    // Not due: far fewer than twice the chunks and the slack.
    assert_eq!(e.sweep_embeddings(false).unwrap(), 0);
    assert_eq!(e.sweep_embeddings(true).unwrap(), 3);
    assert_eq!(e.store().embedding_count().unwrap(), 2);

    // Without slack, the ingest that leaves more than twice the chunks (2) cached
    // sweeps by itself.
    e.set_embedding_sweep_slack(0);
    for (body, cached) in [
        ("Ocelots climb.", 3),
        ("Servals leap.", 4),
        ("Lynxes stalk.", 2),
    ] {
        write(&docs, "cats.md", &format!("# Cats\n\n{body}"));
        assert_eq!(ingest(&e, &[&docs], "a"), 1);
        assert_eq!(e.store().embedding_count().unwrap(), cached, "after {body}");
    }

    // What is held stays cached: the same texts elsewhere embed nothing...
    assert_eq!(ingest(&e, &[&docs], "b"), 0);
    assert_eq!(
        titles(
            &e,
            "b",
            "wild cats that stalk their prey",
            SearchMode::Vector
        )[0],
        "Cats"
    );
    // ...and a swept text is embedded again when it comes back.
    write(
        &docs,
        "bread.md",
        "# Bread\n\nDough made from flour, water and yeast rises before it is baked.",
    );
    assert_eq!(ingest(&e, &[&docs], "b"), 1);
}

#[test]
fn a_lost_or_damaged_vector_index_is_rebuilt_from_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let docs = corpus(tmp.path());
    let before = {
        let e = Engine::open(&data, config()).unwrap();
        ingest(&e, &[&docs], "default");
        titles(&e, "default", "rising dough", SearchMode::Vector)
    };
    let dir = data.join("vectors").join("default");
    let snapshot = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // Damaged: one flipped byte.
    let mut bytes = std::fs::read(&snapshot).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&snapshot, &bytes).unwrap();
    let e = Engine::open(&data, config()).unwrap();
    assert_eq!(
        titles(&e, "default", "rising dough", SearchMode::Vector),
        before
    );
    drop(e);
    // Lost: the whole folder.
    std::fs::remove_dir_all(&dir).unwrap();
    let e = Engine::open(&data, config()).unwrap();
    assert_eq!(
        titles(&e, "default", "rising dough", SearchMode::Vector),
        before
    );
    assert_eq!(
        e.vector_index("default")
            .unwrap()
            .unwrap()
            .stats()
            .unwrap()
            .live,
        3
    );
    // Dropping the collection removes its vectors too.
    e.drop_collection("default").unwrap();
    assert!(!dir.exists());
}

#[test]
fn a_vector_index_one_batch_behind_replays_the_last_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let docs = corpus(tmp.path());
    let dir = data.join("vectors").join("default");
    let old = {
        let e = Engine::open(&data, config()).unwrap();
        ingest(&e, &[&docs], "default");
        let snap = std::fs::read_dir(&dir)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        (snap.clone(), std::fs::read(&snap).unwrap())
    };
    {
        let e = Engine::open(&data, config()).unwrap();
        write(
            &docs,
            "cats.md",
            "# Cats\n\nThe orbit of comets around the Sun is highly elliptical.",
        );
        ingest(&e, &[&docs], "default");
    }
    // As if the process died after the store commit, before the vector index's.
    std::fs::write(&old.0, &old.1).unwrap();
    let e = Engine::open(&data, config()).unwrap();
    let mut n = Count::default();
    let idx = e.vector_index("default").unwrap().unwrap();
    assert_eq!(idx.stats().unwrap().live, 3);
    assert_eq!(
        idx.stats().unwrap().generation,
        e.collection("default").unwrap().generation
    );
    let top = &e
        .search("default", "comet orbits", 1, Some(SearchMode::Vector))
        .unwrap()
        .hits[0];
    assert!(top.chunk.text.contains("comets"));
    // Replay found every vector in the cache.
    e.ingest(std::slice::from_ref(&docs), "default", &mut n)
        .unwrap();
    assert_eq!(n.embedded, 0);
}

#[test]
fn chunks_stored_before_the_model_came_get_vectors_on_first_use() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let docs = corpus(tmp.path());
    {
        let e = Engine::open(&data, Config::default()).unwrap();
        assert_eq!(
            ingest(&e, &[&docs], "default"),
            0,
            "no model: nothing embedded"
        );
    }
    let e = Engine::open(&data, config()).unwrap();
    // Files unchanged, but the collection's chunks are embedded for the new index, and
    // the observer is told.
    assert_eq!(ingest(&e, &[&docs], "default"), 3);
    assert_eq!(
        titles(
            &e,
            "default",
            "which feline pets catch rodents",
            SearchMode::Vector
        )[0],
        "Cats"
    );
}

#[test]
fn without_a_model_search_is_keyword_only_and_says_how_to_get_one() {
    let tmp = tempfile::tempdir().unwrap();
    let e = Engine::open(&tmp.path().join("data"), Config::default()).unwrap();
    ingest(&e, &[&corpus(tmp.path())], "default");
    let r = e.search("default", "lava", 3, None).unwrap();
    assert_eq!(r.mode, SearchMode::Keyword);
    let why = r.fallback.expect("says why");
    assert!(why.contains("neuralcore models pull"), "{why}");
    assert_eq!(r.hits[0].document.title, "Volcanoes");
    let err = e
        .search("default", "lava", 3, Some(SearchMode::Vector))
        .unwrap_err()
        .to_string();
    assert!(err.contains("neuralcore models pull"), "{err}");
    // Turned off on purpose: no vectors, and the message says so.
    let mut c = config();
    c.embedding.model = String::new();
    let e = Engine::open(&tmp.path().join("data2"), c).unwrap();
    assert!(e.embedder_status().err().unwrap().contains("turned off"));
}

/// Panics at its `at`-th document: the process dying mid-file, as far as the store can
/// tell (the open batch is dropped, uncommitted).
struct CrashAt {
    at: usize,
    docs: usize,
    checkpoints: Vec<usize>,
}

impl IngestObserver for CrashAt {
    fn document(&mut self) {
        self.docs += 1;
        if self.docs == self.at {
            panic!("simulated crash at document {}", self.at);
        }
    }
    fn checkpoint(&mut self, _path: &Path, documents: usize) {
        self.checkpoints.push(documents);
    }
}

/// Every document's key, title, chunk texts and provenance places of a collection,
/// and its vector search results for a few queries: what a finished ingest leaves.
fn dump(e: &Engine, c: &str) -> Vec<String> {
    let mut out = Vec::new();
    for k in e.store().document_keys(c).unwrap() {
        let d = e.store().document(c, k).unwrap().unwrap();
        let chunks: Vec<String> = e
            .store()
            .chunks(k)
            .unwrap()
            .into_iter()
            .map(|c| c.text)
            .collect();
        let places: Vec<String> = d
            .provenance
            .iter()
            .map(|p| format!("{:?}", p.locator))
            .collect();
        out.push(format!("{k:016x} {} {chunks:?} {places:?}", d.title));
    }
    for q in ["sea otters", "tree frogs", "row 7"] {
        out.push(format!("{q}: {:?}", titles(e, c, q, SearchMode::Vector)));
    }
    out.sort();
    out
}

#[test]
fn an_ingest_killed_mid_file_resumes_after_its_last_batch_and_embeds_nothing_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let animals = ["sea otters", "tree frogs", "snow leopards", "barn owls"];
    let rows: String = (0..120)
        .map(|i| {
            format!(
                "{{\"_id\":\"{i}\",\"title\":\"row {i}\",\"text\":\"Row {i} is a note about {}.\"}}\n",
                animals[i % 4]
            )
        })
        .collect();
    let file = write(tmp.path(), "big.jsonl", &rows);
    let mut cfg = config();
    cfg.ingest.commit_chunks = 32;

    // Uninterrupted, for comparison.
    let whole = Engine::open(&tmp.path().join("whole"), cfg.clone()).unwrap();
    assert_eq!(ingest(&whole, &[&file], "default"), 120);

    let data = tmp.path().join("data");
    let e = Engine::open(&data, cfg.clone()).unwrap();
    let mut crash = CrashAt {
        at: 80,
        docs: 0,
        checkpoints: Vec::new(),
    };
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.ingest(std::slice::from_ref(&file), "default", &mut crash)
    }));
    assert!(died.is_err());
    drop(e);
    // Batches of 32 chunks (one a row): checkpoints after rows 33 and 65, none later
    // before the crash at row 80.
    assert_eq!(crash.checkpoints, vec![33, 65]);

    let e = Engine::open(&data, cfg).unwrap();
    let source = &e.sources("default").unwrap()[0];
    assert!(source.partial.is_some(), "listed as partial");
    assert_eq!(source.docs.len(), 65);
    // The committed rows are searchable meanwhile.
    assert_eq!(e.collection("default").unwrap().documents, 65);
    assert_eq!(
        titles(&e, "default", "row 3 sea otters", SearchMode::Keyword)[0],
        "row 3"
    );
    // Resumed: only the 55 rows after the last checkpoint are embedded; the 15 of them
    // the crash lost are the work lost (less than one batch).
    assert_eq!(ingest(&e, &[&file], "default"), 55);
    assert!(e.sources("default").unwrap()[0].partial.is_none());
    assert_eq!(dump(&e, "default"), dump(&whole, "default"));
    // And it is complete: the next ingest skips it.
    assert_eq!(ingest(&e, &[&file], "default"), 0);
    assert_eq!(
        e.ingest(std::slice::from_ref(&file), "default", &mut ())
            .unwrap()
            .skipped,
        1
    );
}
