//! Several engines (replicas, each with its own data dir for its keyword and vector
//! indexes) over one document store, with the real all-MiniLM-L6-v2 model: what one
//! ingests, removes or drops, the others see on their next search, caught up from the
//! store's journal log.
//!
//! Each scenario runs twice: over the shared in-memory twin (clones of one
//! `InMemoryStore::new_shared()`, always), and over a real PostgreSQL server when
//! `NEURALCORE_TEST_PG_URL` is set (`scripts/test.sh` starts one), in a schema of its
//! own dropped at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use neuralcore_engine::{
    Config, Engine, IngestObserver, SearchMode, StoreBackendKind, VectorBackendKind, Vectors,
};
use neuralcore_store::InMemoryStore;

struct Quiet;
impl IngestObserver for Quiet {}

/// A schema of its own for one test, dropped when the test ends.
struct Pg {
    url: String,
    schema: String,
}

impl Pg {
    fn new(test: &str) -> Option<Pg> {
        let url = match std::env::var("NEURALCORE_TEST_PG_URL") {
            Ok(u) if !u.is_empty() => u,
            _ => {
                eprintln!("skipped: NEURALCORE_TEST_PG_URL is not set (see scripts/postgres.sh)");
                return None;
            }
        };
        let pg = Pg {
            url,
            schema: format!("ncr_{test}_{}", std::process::id()),
        };
        pg.drop_schema();
        Some(pg)
    }

    fn drop_schema(&self) {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema
        ))
        .unwrap();
    }

    fn config(&self) -> Config {
        let mut c = Config::default();
        c.store.backend = StoreBackendKind::Postgres;
        c.store.postgres_url = self.url.clone();
        c.store.postgres_schema = self.schema.clone();
        c
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.drop_schema();
    }
}

/// Where the replicas' shared store lives.
enum Shared {
    Twin(InMemoryStore),
    Pg(Pg),
    /// PostgreSQL with the vector index there too (`[index] vector = "pgvector"`).
    Pgvector(Pg),
}

impl Shared {
    /// The in-memory twin, then PostgreSQL when the suite has it.
    fn all(test: &str) -> Vec<Shared> {
        let mut v = vec![Shared::Twin(InMemoryStore::new_shared())];
        v.extend(Pg::new(test).map(Shared::Pg));
        v.extend(Pg::new(&format!("{test}_v")).map(Shared::Pgvector));
        v
    }

    fn name(&self) -> &'static str {
        match self {
            Shared::Twin(_) => "in-memory twin",
            Shared::Pg(_) => "postgres",
            Shared::Pgvector(_) => "postgres with pgvector",
        }
    }

    /// An engine over the shared store with its own data dir.
    fn engine(&self, dir: &Path, cfg: impl FnOnce(&mut Config), model: bool) -> Engine {
        let mut c = match self {
            Shared::Twin(_) => Config::default(),
            Shared::Pg(pg) => pg.config(),
            Shared::Pgvector(pg) => {
                let mut c = pg.config();
                c.index.vector = VectorBackendKind::Pgvector;
                c
            }
        };
        if model {
            c.embedding.model_dir = neuralcore_models::testing::model_cache()
                .display()
                .to_string();
        }
        cfg(&mut c);
        match self {
            Shared::Twin(s) => Engine::with_store(c, Box::new(s.clone()), Some(dir)),
            Shared::Pg(_) | Shared::Pgvector(_) => Engine::open(dir, c).unwrap(),
        }
    }
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, body).unwrap();
    p
}

fn ingest(e: &Engine, p: &Path, c: &str) {
    let s = e.ingest(&[p.to_path_buf()], c, &mut Quiet).unwrap();
    assert_eq!(s.failed, 0, "{:?}", s.errors);
}

fn titles(e: &Engine, c: &str, q: &str, mode: SearchMode) -> Vec<String> {
    let r = e.search(c, q, 3, Some(mode)).unwrap();
    assert_eq!(r.mode, mode);
    r.hits.into_iter().map(|h| h.document.title).collect()
}

const CATS: &str = "# Cats\n\nDomestic cats are small carnivorous mammals that purr and hunt mice.";
const LAVA: &str = "# Volcanoes\n\nMolten rock called lava erupts from openings in the crust.";
const BREAD: &str = "# Bread\n\nDough made from flour, water and yeast rises before it is baked.";

#[test]
fn what_one_replica_ingests_removes_or_drops_the_other_finds_on_its_next_search() {
    for shared in Shared::all("follow") {
        eprintln!("over the {}", shared.name());
        follow(&shared);
    }
}

fn follow(shared: &Shared) {
    let tmp = tempfile::tempdir().unwrap();
    let docs = tmp.path().join("docs");
    let a = shared.engine(&tmp.path().join("a"), |_| {}, true);
    let b = shared.engine(&tmp.path().join("b"), |_| {}, true);
    ingest(&a, &write(&docs, "cats.md", CATS), "c");
    // B had never opened the collection: it builds its indexes from the store.
    let q = "which feline pets catch rodents";
    assert_eq!(titles(&b, "c", q, SearchMode::Vector)[0], "Cats");
    assert_eq!(titles(&b, "c", "purr", SearchMode::Keyword), vec!["Cats"]);
    // Loaded now: later batches reach it through the journal on its next search.
    ingest(&a, &write(&docs, "volcano.md", LAVA), "c");
    ingest(&a, &write(&docs, "bread.md", BREAD), "c");
    assert_eq!(
        titles(&b, "c", "lava", SearchMode::Keyword),
        vec!["Volcanoes"]
    );
    assert_eq!(
        titles(&b, "c", "hot liquid rock", SearchMode::Vector)[0],
        "Volcanoes"
    );
    assert_eq!(titles(&b, "c", "yeast", SearchMode::Hybrid)[0], "Bread");
    // B removes a source; A stops finding it, in both indexes.
    b.remove("c", &[docs.join("volcano.md").display().to_string()])
        .unwrap();
    assert!(titles(&a, "c", "lava", SearchMode::Keyword).is_empty());
    assert!(!titles(&a, "c", "hot liquid rock", SearchMode::Vector).contains(&"Volcanoes".into()));
    // A changed file replaces its chunks everywhere.
    ingest(
        &b,
        &write(
            &docs,
            "cats.md",
            "# Cats\n\nCats sleep for most of the day in sunny spots.",
        ),
        "c",
    );
    assert!(titles(&a, "c", "purr", SearchMode::Keyword).is_empty());
    assert_eq!(titles(&a, "c", "sleep", SearchMode::Keyword), vec!["Cats"]);
    assert_eq!(a.collection("c").unwrap().documents, 2);
    // A drops the collection and makes it again with other content: B's loaded
    // indexes must not keep the old documents.
    a.drop_collection("c").unwrap();
    ingest(&a, &write(&tmp.path().join("other"), "lava.md", LAVA), "c");
    assert!(titles(&b, "c", "sleep", SearchMode::Keyword).is_empty());
    assert!(titles(&b, "c", "yeast", SearchMode::Keyword).is_empty());
    assert_eq!(
        titles(&b, "c", "lava", SearchMode::Keyword),
        vec!["Volcanoes"]
    );
    assert_eq!(
        titles(&b, "c", "hot liquid rock", SearchMode::Vector),
        vec!["Volcanoes"]
    );
}

/// Two replicas ingesting into one collection at once: every batch is in both
/// replicas' indexes once, whichever committed first.
#[test]
fn replicas_ingesting_into_one_collection_at_once_both_end_with_everything_once() {
    for shared in Shared::all("race") {
        eprintln!("over the {}", shared.name());
        race(&shared);
    }
}

fn race(shared: &Shared) {
    let tmp = tempfile::tempdir().unwrap();
    let a = Arc::new(shared.engine(&tmp.path().join("a"), |_| {}, false));
    let b = Arc::new(shared.engine(&tmp.path().join("b"), |_| {}, false));
    // Both load the (empty) collection first, so each has indexes to keep current.
    a.create_collection("r").unwrap();
    let _ = a
        .search("r", "anything", 1, Some(SearchMode::Keyword))
        .unwrap();
    let _ = b
        .search("r", "anything", 1, Some(SearchMode::Keyword))
        .unwrap();
    let handles: Vec<_> = [(a.clone(), "a"), (b.clone(), "b")]
        .into_iter()
        .map(|(e, who)| {
            let dir = tmp.path().join(format!("docs-{who}"));
            std::thread::spawn(move || {
                for i in 0..8 {
                    let p = write(
                        &dir,
                        &format!("{who}{i}.md"),
                        &format!("# {who}{i}\n\nReplica {who} wrote note number zz{who}{i} here."),
                    );
                    ingest(&e, &p, "r");
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let info = a.collection("r").unwrap();
    assert_eq!(info.documents, 16);
    for e in [&a, &b] {
        for who in ["a", "b"] {
            for i in 0..8 {
                let t = titles(e, "r", &format!("zz{who}{i}"), SearchMode::Keyword);
                assert_eq!(
                    t,
                    vec![format!("{who}{i}")],
                    "each note once, in both replicas"
                );
            }
        }
    }
}

/// A replica further behind than the journal log keeps rebuilds, and is then current.
#[test]
fn a_replica_behind_a_compacted_log_rebuilds() {
    for shared in Shared::all("compact") {
        eprintln!("over the {}", shared.name());
        compacted(&shared);
    }
}

fn compacted(shared: &Shared) {
    let tmp = tempfile::tempdir().unwrap();
    let docs = tmp.path().join("docs");
    let keep_one = |c: &mut Config| c.store.journal_keep = 1;
    let a = shared.engine(&tmp.path().join("a"), keep_one, true);
    let b = shared.engine(&tmp.path().join("b"), keep_one, true);
    ingest(&a, &write(&docs, "cats.md", CATS), "k");
    assert_eq!(titles(&b, "k", "purr", SearchMode::Keyword), vec!["Cats"]);
    ingest(&a, &write(&docs, "volcano.md", LAVA), "k");
    ingest(&a, &write(&docs, "bread.md", BREAD), "k");
    // Two batches behind with one kept: not replayable.
    let g = a.collection("k").unwrap().generation;
    assert_eq!(a.store().index_journals("k", g - 2, g).unwrap(), None);
    assert_eq!(
        titles(&b, "k", "lava", SearchMode::Keyword),
        vec!["Volcanoes"]
    );
    assert_eq!(titles(&b, "k", "yeast", SearchMode::Keyword), vec!["Bread"]);
    assert_eq!(titles(&b, "k", "purr", SearchMode::Keyword), vec!["Cats"]);
    assert_eq!(
        titles(&b, "k", "hot liquid rock", SearchMode::Vector)[0],
        "Volcanoes"
    );
}

/// The pgvector index ranks as the local HNSW index does and scores the same cosine
/// similarities, over one store; one engine's batch is in it for the other at once
/// (one index, no catch-up); and it holds each chunk once.
#[test]
fn pgvector_ranks_and_scores_as_the_local_index_and_is_one_index_for_every_replica() {
    let Some(pg) = Pg::new("pgv") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let docs = tmp.path().join("docs");
    let local = Shared::Pg(pg);
    let l = local.engine(&tmp.path().join("l"), |_| {}, true);
    let p = local.engine(
        &tmp.path().join("p"),
        |c| c.index.vector = VectorBackendKind::Pgvector,
        true,
    );
    let q = local.engine(
        &tmp.path().join("q"),
        |c| c.index.vector = VectorBackendKind::Pgvector,
        true,
    );
    for (name, body) in [("cats.md", CATS), ("volcano.md", LAVA), ("bread.md", BREAD)] {
        ingest(&p, &write(&docs, name, body), "v");
    }
    let pv = p.vector_index("v").unwrap().unwrap();
    assert!(matches!(*pv, Vectors::Pgvector(_)));
    let lv = l.vector_index("v").unwrap().unwrap();
    assert!(matches!(*lv, Vectors::Local(_)));
    assert_eq!(pv.stats().unwrap().live, 3);
    assert_eq!(
        pv.stats().unwrap().generation,
        p.collection("v").unwrap().generation
    );
    let keys: Vec<(u64, u32)> = p
        .store()
        .document_keys("v")
        .unwrap()
        .into_iter()
        .map(|d| (d, 0))
        .collect();
    for text in [
        "which feline pets catch rodents",
        "hot liquid rock",
        "baking",
    ] {
        assert_eq!(
            titles(&p, "v", text, SearchMode::Vector),
            titles(&l, "v", text, SearchMode::Vector),
            "{text}"
        );
        let (a, b) = (
            p.chunk_similarities("v", text, &keys).unwrap(),
            l.chunk_similarities("v", text, &keys).unwrap(),
        );
        for (x, y) in a.iter().zip(&b) {
            assert!((x.unwrap() - y.unwrap()).abs() < 1e-5, "{x:?} vs {y:?}");
        }
        let qv = p.query_vector(text).unwrap();
        let (approx, exact) = (
            pv.search(&qv, 3, false).unwrap(),
            pv.search(&qv, 3, true).unwrap(),
        );
        assert_eq!(approx.len(), 3);
        assert_eq!(
            approx.iter().map(|h| h.doc).collect::<Vec<_>>(),
            exact.iter().map(|h| h.doc).collect::<Vec<_>>()
        );
    }
    // Q's batch: P finds it on its next search without anything to replay.
    ingest(
        &q,
        &write(
            &docs,
            "tides.md",
            "# Tides\n\nThe Moon's gravity pulls the oceans into bulges.",
        ),
        "v",
    );
    assert_eq!(
        pv.stats().unwrap().generation,
        q.collection("v").unwrap().generation,
        "the writer put its batch into the shared index"
    );
    assert_eq!(
        titles(
            &p,
            "v",
            "what makes the sea rise and fall",
            SearchMode::Vector
        )[0],
        "Tides"
    );
    // A replaced file: its old chunk goes, once.
    ingest(
        &q,
        &write(
            &docs,
            "cats.md",
            "# Cats\n\nCats sleep for most of the day.",
        ),
        "v",
    );
    assert_eq!(pv.stats().unwrap().live, 4);
    q.remove("v", &[docs.join("bread.md").display().to_string()])
        .unwrap();
    assert_eq!(
        p.vector_index("v").unwrap().unwrap().stats().unwrap().live,
        3
    );
    assert!(!titles(&p, "v", "baking", SearchMode::Vector).contains(&"Bread".into()));
}
