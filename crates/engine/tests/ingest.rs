//! Ingestion, dedup, incremental updates, removal, isolation and index recovery,
//! against the real embedded store and keyword index in a temporary data dir.

use std::path::{Path, PathBuf};

use neuralcore_core::{text::normalize, DocStore};
use neuralcore_engine::{Config, Engine, IngestSummary};
use neuralcore_ingest::testdata::pdf_with_text;

fn write(dir: &Path, name: &str, body: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, body).unwrap();
    p
}

fn ingest(e: &Engine, paths: &[&Path], c: &str) -> IngestSummary {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
    e.ingest(&paths, c, &mut ()).unwrap()
}

fn top_titles(e: &Engine, c: &str, q: &str) -> Vec<String> {
    e.search(c, q, 5, None)
        .unwrap()
        .hits
        .into_iter()
        .map(|h| h.document.title)
        .collect()
}

/// The source of `default` whose path ends with `name`.
fn source_named(e: &Engine, name: &str) -> neuralcore_core::SourceRecord {
    e.sources("default")
        .unwrap()
        .into_iter()
        .find(|s| s.source_id.ends_with(name))
        .unwrap()
}

fn e_chunks(data: &Path) -> u64 {
    Engine::open(data, Config::default())
        .unwrap()
        .collection("default")
        .unwrap()
        .chunks
}

fn every_format(dir: &Path) -> PathBuf {
    let d = dir.join("docs");
    write(
        &d,
        "notes.txt",
        "Tardigrades survive extreme cold.\n\nThey can live without water for decades.",
    );
    write(
        &d,
        "guide.md",
        "---\ntitle: Install Guide\nauthor: Ada\n---\n# Setup\n\nRun the installer.\n\n## Linux\n\nUse the zebrafish package manager.\n",
    );
    write(
        &d,
        "page.html",
        "<html><head><title>Volcano Page</title><script>var lava = 1;</script></head><body><nav>Home | About</nav><main><h1>Volcanoes</h1><p>Basalt flows &amp; obsidian glass.</p></main></body></html>",
    );
    write(
        &d,
        "paper.pdf",
        pdf_with_text(&[&["Quantum chromodynamics lecture notes"]]),
    );
    write(
        &d,
        "corpus.json",
        r#"[{"_id":"d1","title":"Penguins","text":"Emperor penguins huddle in winter."},{"_id":"d2","title":"Owls","text":"Barn owls hunt at night."}]"#,
    );
    write(&d, "more.jsonl", "{\"_id\":\"j1\",\"title\":\"Glaciers\",\"text\":\"Glaciers carve fjords.\"}\n{\"config\":{\"name\":\"flattened\",\"port\":8080}}\n");
    write(&d, "table.csv", "id,title,body\nr1,Comets,Comets have icy nuclei.\nr2,Meteors,Meteors burn in the atmosphere.\n");
    d
}

#[test]
fn ingests_every_format_with_provenance_and_spans() {
    let tmp = tempfile::tempdir().unwrap();
    let docs = every_format(tmp.path());
    let e = Engine::open(&tmp.path().join("data"), Config::default()).unwrap();
    let s = ingest(&e, &[&docs], "default");
    assert_eq!(
        (s.files_seen, s.ingested, s.failed, s.skipped),
        (7, 7, 0, 0),
        "{s:?}"
    );
    assert_eq!(s.documents, 1 + 1 + 1 + 1 + 2 + 2 + 2);
    for (q, title) in [
        ("tardigrades", "notes"),
        ("zebrafish", "Install Guide"),
        ("obsidian", "Volcano Page"),
        ("chromodynamics", "paper"),
        ("penguins", "Penguins"),
        ("fjords", "Glaciers"),
        ("8080", "more line 2"),
        ("icy nuclei", "Comets"),
    ] {
        assert_eq!(
            top_titles(&e, "default", q).first().map(String::as_str),
            Some(title),
            "query {q}"
        );
    }
    // Scripts and navigation are not text.
    assert!(e
        .search("default", "lava", 5, None)
        .unwrap()
        .hits
        .is_empty());
    assert!(e
        .search("default", "About", 5, None)
        .unwrap()
        .hits
        .is_empty());
    // Provenance and chunk spans.
    let hit = &e.search("default", "tardigrades", 1, None).unwrap().hits[0];
    let p = &hit.document.provenance[0];
    let raw = std::fs::read_to_string(docs.join("notes.txt")).unwrap();
    let text = normalize(&raw);
    assert_eq!(p.loader, "txt");
    assert_eq!(
        p.uri,
        std::fs::canonicalize(docs.join("notes.txt"))
            .unwrap()
            .to_string_lossy()
    );
    assert_eq!(
        p.content_sha256,
        neuralcore_core::text::sha256_hex(text.as_bytes())
    );
    assert_eq!(p.byte_size as usize, text.len());
    assert!(p.created_at.is_some() && !p.ingested_at.is_empty());
    let (a, b) = hit.chunk.span;
    let slice: String = text
        .chars()
        .skip(a as usize)
        .take((b - a) as usize)
        .collect();
    assert_eq!(slice, hit.chunk.text);
    assert!(hit.chunk.tokens > 5);
    // Markdown sections and front matter.
    let md = &e.search("default", "zebrafish", 1, None).unwrap().hits[0];
    assert_eq!(
        md.chunk.section,
        vec!["Setup".to_string(), "Linux".to_string()]
    );
    assert_eq!(md.document.metadata["author"], serde_json::json!("Ada"));
    // BEIR and CSV ids.
    let beir = &e.search("default", "penguins", 1, None).unwrap().hits[0];
    assert_eq!(
        beir.document.provenance[0].external_id.as_deref(),
        Some("d1")
    );
    assert_eq!(
        beir.document.provenance[0].locator.as_deref(),
        Some("item 1")
    );
    let csv = &e.search("default", "meteors", 1, None).unwrap().hits[0];
    assert_eq!(
        csv.document.provenance[0].external_id.as_deref(),
        Some("r2")
    );
}

#[test]
fn bad_inputs_fail_one_file_each_and_the_rest_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("bad");
    write(
        &d,
        "good.txt",
        "A perfectly fine document about lighthouses.",
    );
    write(&d, "binary.txt", b"\x7fELF\x00\x00\x01binary");
    write(&d, "latin1.txt", b"caf\xe9 society lighthouse\n");
    write(&d, "empty.md", "");
    write(&d, "blank.txt", "   \n\n  ");
    write(
        &d,
        "broken.jsonl",
        "{\"_id\":\"1\",\"text\":\"quokka row\"}\n{\"_id\": 2, \"text\": \n",
    );
    write(&d, "ragged.csv", "a,b\n1,2\n3,4,5\n");
    write(&d, "broken.json", "{\"a\": [1, 2,}");
    write(&d, "scan.pdf", b"%PDF-1.4 garbage that is not a pdf");
    write(&d, "big.md", "x".repeat(5000));
    std::fs::create_dir_all(d.join("folder.txt")).unwrap();
    let unsupported = write(tmp.path(), "photo.xyz", "stuff");
    let missing = tmp.path().join("missing.txt");
    let dangling = tmp.path().join("dangling.txt");
    std::os::unix::fs::symlink(tmp.path().join("nowhere"), &dangling).unwrap();
    let mut cfg = Config::default();
    cfg.ingest.max_file_bytes = 4096;
    let e = Engine::open(&tmp.path().join("data"), cfg).unwrap();
    let s = ingest(&e, &[&d, &unsupported, &missing, &dangling], "default");
    let reasons: Vec<String> = s
        .errors
        .iter()
        .map(|m| format!("{} => {}", m.path, m.message))
        .collect();
    let find = |name: &str| {
        reasons
            .iter()
            .find(|r| r.contains(name))
            .cloned()
            .unwrap_or_else(|| panic!("no error for {name}: {reasons:#?}"))
    };
    assert!(find("binary.txt").contains("binary"));
    assert!(find("empty.md").contains("empty"));
    assert!(find("blank.txt").contains("empty"));
    assert!(find("broken.jsonl").contains("line 2"));
    assert!(
        find("ragged.csv").contains("line 3") || find("ragged.csv").contains("record"),
        "{}",
        find("ragged.csv")
    );
    assert!(find("broken.json").contains("malformed"));
    assert!(find("scan.pdf").contains("PDF") || find("scan.pdf").contains("parse"));
    assert!(find("big.md").contains("limit"));
    assert!(find("photo.xyz").contains("unsupported"));
    assert!(find("missing.txt").contains("cannot read"));
    assert!(find("dangling.txt").contains("cannot read"));
    assert_eq!(s.ingested, 2, "good.txt and latin1.txt: {s:#?}");
    assert_eq!(s.failed, reasons.len());
    assert!(s
        .warnings
        .iter()
        .any(|w| w.path.ends_with("latin1.txt") && w.message.contains("UTF-8")));
    // Nothing of the failed files was stored: exactly two documents.
    let info = e.collection("default").unwrap();
    assert_eq!(info.documents, 2);
    assert_eq!(e.sources("default").unwrap().len(), 2);
    assert_eq!(top_titles(&e, "default", "lighthouse").len(), 2);
    assert!(
        e.search("default", "quokka", 5, None)
            .unwrap()
            .hits
            .is_empty(),
        "half of broken.jsonl stored"
    );
}

#[test]
fn reingest_skips_unchanged_and_replaces_changed_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("d");
    let a = write(
        &d,
        "a.md",
        "# One\n\nOriginal alpha content about walruses.",
    );
    write(&d, "b.txt", "Stable bravo content about narwhals. Narwhals have long tusks. They live in Arctic waters.");
    let e = Engine::open(&tmp.path().join("data"), Config::default()).unwrap();
    ingest(&e, &[&d], "default");
    let gen = e.collection("default").unwrap().generation;
    let again = ingest(&e, &[&d], "default");
    assert_eq!((again.ingested, again.skipped, again.chunks), (0, 2, 0));
    assert_eq!(
        e.collection("default").unwrap().generation,
        gen,
        "no-op must not touch the index"
    );
    std::fs::write(&a, "# One\n\nRevised alpha content about belugas.").unwrap();
    let changed = ingest(&e, &[&d], "default");
    assert_eq!(
        (changed.ingested, changed.skipped, changed.removed_documents),
        (1, 1, 1)
    );
    assert!(
        e.search("default", "walruses", 5, None)
            .unwrap()
            .hits
            .is_empty(),
        "old chunks must be gone"
    );
    assert_eq!(top_titles(&e, "default", "belugas"), vec!["One"]);
    let info = e.collection("default").unwrap();
    assert_eq!((info.sources, info.documents), (2, 2));
    // A settings change (chunk size) re-ingests unchanged files.
    drop(e);
    let mut cfg = Config::default();
    cfg.ingest.chunk_tokens = 8;
    let before = e_chunks(&tmp.path().join("data"));
    let e = Engine::open(&tmp.path().join("data"), cfg).unwrap();
    assert_eq!(ingest(&e, &[&d], "default").ingested, 2);
    let info = e.collection("default").unwrap();
    assert!(
        info.chunks > before,
        "re-chunked with 8-token chunks: {} -> {}",
        before,
        info.chunks
    );
    assert_eq!(
        info.chunks,
        e.keyword_index("default").unwrap().num_chunks()
    );
    assert_eq!(top_titles(&e, "default", "belugas"), vec!["One"]);
    let narwhals = top_titles(&e, "default", "narwhals");
    assert!(
        narwhals.len() >= 2 && narwhals.iter().all(|t| t == "b"),
        "{narwhals:?}"
    );
}

#[test]
fn identical_content_is_stored_once_with_every_provenance() {
    let tmp = tempfile::tempdir().unwrap();
    let a = write(tmp.path(), "x/a.txt", "Shared text about axolotls.\r\n");
    let b = write(tmp.path(), "y/b.txt", "Shared text about axolotls.\n");
    let e = Engine::open(&tmp.path().join("data"), Config::default()).unwrap();
    let s = ingest(&e, &[&a, &b], "default");
    assert_eq!((s.ingested, s.documents), (2, 2));
    let hits = e.search("default", "axolotls", 10, None).unwrap().hits;
    assert_eq!(hits.len(), 1, "one document, one chunk");
    let prov: Vec<&str> = hits[0]
        .document
        .provenance
        .iter()
        .map(|p| p.uri.as_str())
        .collect();
    assert_eq!(prov.len(), 2);
    assert!(
        prov[0].ends_with("x/a.txt") && prov[1].ends_with("y/b.txt"),
        "{prov:?}"
    );
    let r = e
        .remove("default", &[a.to_string_lossy().into_owned()])
        .unwrap();
    assert_eq!(r.removed_documents, 0, "b still holds it");
    let hits = e.search("default", "axolotls", 10, None).unwrap().hits;
    assert_eq!(hits[0].document.provenance.len(), 1);
    // Removing by folder removes every source under it.
    let r = e
        .remove(
            "default",
            &[tmp.path().join("y").to_string_lossy().into_owned()],
        )
        .unwrap();
    assert_eq!((r.sources.len(), r.removed_documents), (1, 1));
    assert!(e
        .search("default", "axolotls", 10, None)
        .unwrap()
        .hits
        .is_empty());
    assert_eq!(e.collection("default").unwrap().chunks, 0);
    let err = e
        .remove("default", &["/no/such/source".into()])
        .unwrap_err();
    assert!(err.to_string().contains("no source"), "{err}");
}

#[test]
fn any_document_store_plugs_in_without_editing_the_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let f = write(tmp.path(), "f.txt", "Okapis live in the Ituri rainforest.");
    let data = tmp.path().join("data");
    // The in-memory twin of the store, injected, with the indexes on disk.
    let store = Box::new(neuralcore_store::InMemoryStore::new());
    let e = Engine::with_store(Config::default(), store, Some(&data));
    assert_eq!(ingest(&e, &[&f], "one").ingested, 1);
    assert_eq!(top_titles(&e, "one", "okapis"), vec!["f"]);
    assert_eq!(e.store().collections().unwrap().len(), 1);
    assert!(data.join("index").is_dir());
    assert!(!data.join("store.redb").exists());
}

#[test]
fn collections_are_isolated() {
    let tmp = tempfile::tempdir().unwrap();
    let f = write(tmp.path(), "f.txt", "Okapis live in the Ituri rainforest.");
    let g = write(tmp.path(), "g.txt", "Okapis are related to giraffes.");
    let e = Engine::open(&tmp.path().join("data"), Config::default()).unwrap();
    ingest(&e, &[&f], "one");
    ingest(&e, &[&f, &g], "two");
    assert_eq!(top_titles(&e, "one", "okapis"), vec!["f"]);
    assert_eq!(top_titles(&e, "two", "okapis").len(), 2);
    let err = e.search("three", "okapis", 5, None).unwrap_err();
    assert!(err.to_string().contains("one, two"), "{err}");
    assert!(e.ingest(&[], "bad name", &mut ()).is_err());
    e.drop_collection("two").unwrap();
    assert!(e.search("two", "okapis", 5, None).is_err());
    assert_eq!(top_titles(&e, "one", "okapis"), vec!["f"]);
}

/// A search racing a drop of its collection is either answered or not found, never
/// an internal error (the isolation test over HTTP met a 500 when a drop renamed the
/// index folder away under a search).
#[test]
fn a_search_racing_a_drop_is_answered_or_not_found() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().unwrap();
    let f = write(tmp.path(), "f.txt", "Okapis live in the Ituri rainforest.");
    // Keyword only: without embedding, drops come fast enough to meet searches often.
    let e = Engine::open(&tmp.path().join("data"), Config::default()).unwrap();
    let stop = AtomicBool::new(false);
    let (answered, gone) = std::thread::scope(|s| {
        // Two searchers: more of them meet a drop mid-search.
        let searchers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let (mut answered, mut gone) = (0, 0);
                    while !stop.load(Ordering::Relaxed) {
                        match e.search("c", "okapis", 5, None) {
                            Ok(_) => answered += 1,
                            Err(neuralcore_engine::EngineError::NotFound(_)) => gone += 1,
                            Err(other) => panic!("a search racing a drop: {other}"),
                        }
                    }
                    (answered, gone)
                })
            })
            .collect();
        for _ in 0..150 {
            ingest(&e, &[&f], "c");
            e.drop_collection("c").unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        searchers
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |(a, g), (x, y)| (a + x, g + y))
    });
    assert!(answered + gone > 0);
    // No index over a dropped folder was left behind for the name's next ingest.
    ingest(&e, &[&f], "c");
    assert_eq!(top_titles(&e, "c", "okapis"), vec!["f"]);
}

#[test]
fn index_catches_up_after_a_crash_between_store_and_index_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let f = write(tmp.path(), "f.txt", "Pangolins eat ants.");
    let g = write(tmp.path(), "g.txt", "Aardvarks eat termites.");
    {
        let e = Engine::open(&data, Config::default()).unwrap();
        ingest(&e, &[&f], "default");
    }
    // Simulate a crash after the store commit of a batch: write the batch straight to
    // the store (with its journal) and never touch the index.
    {
        let staging = Engine::in_memory(Config::default());
        ingest(&staging, &[&g], "default");
        let key = staging.store().document_keys("default").unwrap()[0];
        let doc = staging.store().document("default", key).unwrap().unwrap();
        let chunks = staging.store().chunks(key).unwrap();
        let store = neuralcore_store::RedbStore::open(&data.join("store.redb")).unwrap();
        let mut b = store.begin().unwrap();
        b.put_document(&doc).unwrap();
        for c in &chunks {
            b.put_chunk("default", c).unwrap();
        }
        b.record_index_changes("default", &[], &[key]).unwrap();
        b.commit().unwrap();
    }
    let e = Engine::open(&data, Config::default()).unwrap();
    assert_eq!(
        top_titles(&e, "default", "termites"),
        vec!["g"],
        "journal replayed"
    );
    assert_eq!(top_titles(&e, "default", "ants"), vec!["f"]);
    drop(e);
    // A lost index is rebuilt from the store.
    std::fs::remove_dir_all(data.join("index")).unwrap();
    let e = Engine::open(&data, Config::default()).unwrap();
    assert_eq!(e.keyword_index("default").unwrap().num_chunks(), 2);
    assert_eq!(top_titles(&e, "default", "termites"), vec!["g"]);
    drop(e);
    // Changing the analyzer rebuilds the index with the new one.
    let mut cfg = Config::default();
    cfg.analyzer.stemmer = "none".into();
    let e = Engine::open(&data, cfg).unwrap();
    assert_eq!(top_titles(&e, "default", "termites"), vec!["g"]);
    assert!(
        e.search("default", "termite", 5, None)
            .unwrap()
            .hits
            .is_empty(),
        "no stemming now"
    );
}

#[test]
fn big_sources_commit_in_batches_and_a_load_error_leaves_them_partial_with_the_error() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.ingest.commit_bytes = 10_000;
    cfg.ingest.max_document_chars = 5_000;
    let small = write(tmp.path(), "a_small.txt", "Small file about capybaras.");
    let para = "Manatees graze on seagrass in warm coastal waters. ".repeat(20);
    let big_text: String = (0..40).map(|i| format!("Part {i}. {para}\n\n")).collect();
    let big = write(tmp.path(), "b_big.txt", &big_text);
    let rows = |n: usize| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "{{\"_id\":\"{i}\",\"text\":\"row {i} about dugongs {}\"}}\n",
                    "filler ".repeat(20)
                )
            })
            .collect()
    };
    let mut lines = rows(300);
    lines.push_str("{not json}\n");
    let bad_big = write(tmp.path(), "c_bad.jsonl", &lines);
    let e = Engine::open(&tmp.path().join("data"), cfg).unwrap();
    let s = ingest(&e, &[&small, &big, &bad_big], "default");
    assert_eq!((s.ingested, s.failed), (2, 1), "{s:#?}");
    let msg = &s.errors[0].message;
    assert!(msg.contains("line 301"), "{msg}");
    assert!(msg.contains("documents before it are stored"), "{msg}");
    assert!(msg.contains("listed as partial"), "{msg}");
    // The batches committed before the error stay, searchable, the source partial.
    let bad = source_named(&e, "c_bad.jsonl");
    let partial = bad.partial.clone().expect("listed as partial");
    assert!(partial.error.unwrap().contains("line 301"));
    // Every row before the bad line is whole: all of them are kept.
    let stored = bad.docs.len();
    assert_eq!(stored, 300);
    assert!(!e
        .search("default", "dugongs", 5, None)
        .unwrap()
        .hits
        .is_empty());
    // The same bad bytes again: the stored rows are found, the error comes again.
    let s = ingest(&e, &[&bad_big], "default");
    assert_eq!((s.failed, s.chunks), (1, 0), "{s:#?}");
    // Fixed (and longer): the source completes; nothing of it is left partial or twice.
    std::fs::write(&bad_big, rows(400)).unwrap();
    let s = ingest(&e, &[&bad_big], "default");
    assert_eq!((s.ingested, s.documents), (1, 400), "{s:#?}");
    assert_eq!(s.chunks, 400 - stored, "only the rows not stored before");
    let bad = source_named(&e, "c_bad.jsonl");
    assert!(bad.partial.is_none());
    assert_eq!(bad.docs.len(), 400);
    for k in &bad.docs {
        let d = e.store().document("default", *k).unwrap().unwrap();
        assert_eq!(d.provenance.len(), 1, "{:?}", d.provenance);
    }
    assert_eq!(top_titles(&e, "default", "capybaras"), vec!["a_small"]);
    let parts = e.search("default", "manatees", 100, None).unwrap().hits;
    let distinct: std::collections::BTreeSet<String> =
        parts.iter().map(|h| h.document.title.clone()).collect();
    assert!(
        distinct.len() > 5,
        "big text split into parts: {distinct:?}"
    );
    let info = e.collection("default").unwrap();
    assert_eq!(
        info.chunks,
        e.keyword_index("default").unwrap().num_chunks()
    );
}

/// Panics at its `at`-th document: a crash mid-file, as far as the store can tell.
struct CrashAt(usize, usize);

impl neuralcore_engine::IngestObserver for CrashAt {
    fn document(&mut self) {
        self.1 += 1;
        if self.1 == self.0 {
            panic!("simulated crash at document {}", self.0);
        }
    }
}

fn crash_at(e: &Engine, file: &Path, at: usize) {
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        e.ingest(&[file.to_path_buf()], "default", &mut CrashAt(at, 0))
    }));
    assert!(died.is_err(), "crashed");
}

/// Every document with its provenance (source file name, locator), and the sources.
fn state(e: &Engine) -> Vec<String> {
    let mut out = Vec::new();
    for k in e.store().document_keys("default").unwrap() {
        let d = e.store().document("default", k).unwrap().unwrap();
        let prov: Vec<String> = d
            .provenance
            .iter()
            .map(|p| {
                let file = Path::new(&p.source_id)
                    .file_name()
                    .unwrap()
                    .to_string_lossy();
                format!("{file}@{:?}", p.locator)
            })
            .collect();
        out.push(format!("{} {prov:?}", d.title));
    }
    for s in e.sources("default").unwrap() {
        out.push(format!(
            "source {} docs={} partial={}",
            Path::new(&s.source_id)
                .file_name()
                .unwrap()
                .to_string_lossy(),
            s.docs.len(),
            s.partial.is_some()
        ));
    }
    out.sort();
    out
}

#[test]
fn a_complete_version_stays_whole_while_its_replacement_is_partial_and_is_settled_after() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = Config::default();
    cfg.ingest.commit_chunks = 20;
    let row = |i: usize| {
        format!("{{\"_id\":\"{i}\",\"title\":\"r{i}\",\"text\":\"Row {i} notes a kingfisher.\"}}\n")
    };
    let rows = |r: std::ops::Range<usize>| -> String { r.map(row).collect() };
    let big = write(tmp.path(), "big.jsonl", rows(0..100));
    // Row 5's text is held by another source too.
    let other = write(tmp.path(), "other.jsonl", row(5));
    let e = Engine::open(&tmp.path().join("data"), cfg.clone()).unwrap();
    ingest(&e, &[&big, &other], "default");
    assert_eq!(e.collection("default").unwrap().documents, 100);

    // Version 2 keeps rows 50..100 and adds 100..150; it crashes after some batches.
    std::fs::write(&big, rows(50..150)).unwrap();
    crash_at(&e, &big, 70);
    drop(e);
    let e = Engine::open(&tmp.path().join("data"), cfg.clone()).unwrap();
    let src = source_named(&e, "big.jsonl");
    assert!(src.partial.is_some());
    // The old version is whole meanwhile: rows 0..50 are still there, with their place.
    let d0 = top_titles(&e, "default", "Row 0 kingfisher");
    assert!(d0.contains(&"r0".to_string()), "{d0:?}");

    // Resumed: exactly what an uninterrupted replacement leaves.
    ingest(&e, &[&big], "default");
    let whole = Engine::open(&tmp.path().join("whole"), cfg.clone()).unwrap();
    std::fs::write(&big, rows(0..100)).unwrap();
    ingest(&whole, &[&big, &other], "default");
    std::fs::write(&big, rows(50..150)).unwrap();
    ingest(&whole, &[&big], "default");
    assert_eq!(state(&e), state(&whole));
    let after = state(&e);
    assert!(
        after
            .iter()
            .any(|l| l.starts_with("r5 ") && l.contains("other.jsonl")),
        "row 5 kept by the other source: {after:?}"
    );
    assert!(!after.iter().any(|l| l.starts_with("r0 ")), "{after:?}");
    assert!(after.contains(&"source big.jsonl docs=100 partial=false".to_string()));

    // Version 3 crashes too, and the partial source is removed: every document only it
    // (or the version it replaced) held goes; row 5 stays with the other source.
    std::fs::write(&big, rows(120..220)).unwrap();
    crash_at(&e, &big, 60);
    drop(e);
    let e = Engine::open(&tmp.path().join("data"), cfg).unwrap();
    e.remove("default", &[big.display().to_string()]).unwrap();
    let left = state(&e);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left[0].starts_with("r5 ") && left[0].contains("other.jsonl") && !left[0].contains("big"),
        "{left:?}"
    );
    assert_eq!(left[1], "source other.jsonl docs=1 partial=false");
    assert_eq!(e.keyword_index("default").unwrap().num_chunks(), 1);
}
