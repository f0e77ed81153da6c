//! The document store on a real PostgreSQL server.
//!
//! They run only when `NEURALCORE_TEST_PG_URL` is set (`eval "$(scripts/postgres.sh |
//! tail -n1)"`, which `scripts/test.sh` does); otherwise each prints why it skipped and
//! passes. Every test works in schemas of its own, named after the test and the process
//! id, dropped at the end, so runs never collide.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use neuralcore_core::{Chunk, DocStore, StoreError};
use neuralcore_store::conformance::{self, ModelOp};
use neuralcore_store::{PgStore, PgStoreOptions, PG_SCHEMA_VERSION};
use proptest::prelude::*;

fn url() -> Option<String> {
    match std::env::var("NEURALCORE_TEST_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            eprintln!("skipped: NEURALCORE_TEST_PG_URL is not set (see scripts/postgres.sh)");
            None
        }
    }
}

/// Fresh schemas for one test, dropped when it ends (even by a panic).
struct Schemas {
    url: String,
    test: &'static str,
    made: Mutex<Vec<String>>,
    n: AtomicUsize,
}

impl Schemas {
    fn new(test: &'static str) -> Option<Schemas> {
        Some(Schemas {
            url: url()?,
            test,
            made: Mutex::new(Vec::new()),
            n: AtomicUsize::new(0),
        })
    }

    /// A new schema's name (nothing created yet).
    fn name(&self) -> String {
        let n = self.n.fetch_add(1, Ordering::Relaxed);
        let name = format!("ncs_{}_{}_{n}", self.test, std::process::id());
        drop_schema(&self.url, &name);
        self.made.lock().unwrap().push(name.clone());
        name
    }

    /// A store on a new, empty schema.
    fn fresh(&self) -> PgStore {
        PgStore::connect(&self.url, &self.name()).expect("connect")
    }
}

fn drop_schema(url: &str, name: &str) {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("admin connection");
    c.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
        .expect("drop schema");
}

impl Drop for Schemas {
    fn drop(&mut self) {
        for name in self.made.lock().unwrap().iter() {
            drop_schema(&self.url, name);
        }
    }
}

#[test]
fn postgres_store_conforms() {
    let Some(s) = Schemas::new("conforms") else {
        return;
    };
    conformance::run_all(&mut || Box::new(s.fresh()) as Box<dyn DocStore>);
}

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
    #![proptest_config(ProptestConfig::with_cases(16))]
    #[test]
    fn postgres_store_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let Some(s) = Schemas::new("model") else {
            return Ok(());
        };
        conformance::check_model(&s.fresh(), &ops);
    }
}

#[test]
fn a_second_client_sees_what_one_committed_and_nothing_uncommitted() {
    let Some(s) = Schemas::new("shared") else {
        return;
    };
    let name = s.name();
    let a = PgStore::connect(&s.url, &name).unwrap();
    let b = PgStore::connect(&s.url, &name).unwrap();
    let d = conformance::sample_doc("c", "shared");
    let mut w = a.begin().unwrap();
    w.ensure_collection("c", "t").unwrap();
    w.put_document(&d).unwrap();
    for c in conformance::sample_chunks(&d) {
        w.put_chunk("c", &c).unwrap();
    }
    w.record_index_changes("c", &[], &[d.key]).unwrap();
    // Uncommitted: the other client sees nothing of it.
    assert!(b.collection("c").unwrap().is_none());
    w.commit().unwrap();
    let info = b.collection("c").unwrap().unwrap();
    assert_eq!((info.documents, info.chunks, info.generation), (1, 2, 1));
    assert_eq!(b.index_journal("c").unwrap().added, vec![d.key]);
    assert_eq!(b.chunks(d.key).unwrap().len(), 2);
}

/// Writers in several processes (here: several clients on threads) are serialized, so
/// the counters and generations they bump are exact.
#[test]
fn concurrent_writers_from_many_clients_lose_no_count() {
    let Some(s) = Schemas::new("writers") else {
        return;
    };
    let name = s.name();
    let first = PgStore::connect(&s.url, &name).unwrap();
    let mut b = first.begin().unwrap();
    b.ensure_collection("w", "t").unwrap();
    b.commit().unwrap();
    let stores: Vec<Arc<PgStore>> = (0..4)
        .map(|_| Arc::new(PgStore::connect(&s.url, &name).unwrap()))
        .collect();
    let handles: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(t, store)| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..5 {
                    let d = conformance::sample_doc("w", &format!("t{t}-{i}"));
                    let mut b = store.begin().unwrap();
                    b.put_document(&d).unwrap();
                    for c in conformance::sample_chunks(&d) {
                        b.put_chunk("w", &c).unwrap();
                    }
                    b.record_index_changes("w", &[], &[d.key]).unwrap();
                    b.commit().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let info = first.collection("w").unwrap().unwrap();
    assert_eq!((info.documents, info.chunks, info.generation), (20, 40, 20));
    assert_eq!(first.document_keys("w").unwrap().len(), 20);
}

/// Chunk text is stored byte for byte, NUL and all (a `jsonb` column would refuse it).
#[test]
fn text_with_nul_and_any_unicode_round_trips() {
    let Some(s) = Schemas::new("nul") else {
        return;
    };
    let store = s.fresh();
    let d = conformance::sample_doc("n", "nul");
    let text = "a\u{0}b — ünïcødé 🦀 \u{10FFFF}";
    let chunk = Chunk {
        text: text.into(),
        ..conformance::sample_chunks(&d).remove(0)
    };
    let mut b = store.begin().unwrap();
    b.ensure_collection("n", "t").unwrap();
    b.put_document(&d).unwrap();
    b.put_chunk("n", &chunk).unwrap();
    b.commit().unwrap();
    assert_eq!(
        store.chunk(d.key, chunk.ordinal).unwrap().unwrap().text,
        text
    );
}

#[test]
fn migrations_are_versioned_and_a_newer_schema_is_refused() {
    let Some(s) = Schemas::new("migrate") else {
        return;
    };
    let name = s.name();
    assert_eq!(PgStore::schema_version(&s.url, &name).unwrap(), 0);
    let store = PgStore::connect(&s.url, &name).unwrap();
    assert_eq!(
        PgStore::schema_version(&s.url, &name).unwrap(),
        PG_SCHEMA_VERSION
    );
    // Migrating again changes nothing.
    let m = store.migrate().unwrap();
    assert_eq!((m.from, m.to), (PG_SCHEMA_VERSION, PG_SCHEMA_VERSION));
    // A later release moved the schema on: this one refuses it and changes nothing.
    let mut c = postgres::Client::connect(&s.url, postgres::NoTls).unwrap();
    c.batch_execute(&format!(
        "UPDATE \"{name}\".store_schema SET version = {}",
        PG_SCHEMA_VERSION + 1
    ))
    .unwrap();
    let err = PgStore::connect(&s.url, &name).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("newer") && msg.contains(&name), "{msg}");
    assert_eq!(
        PgStore::schema_version(&s.url, &name).unwrap(),
        PG_SCHEMA_VERSION + 1
    );
}

#[test]
fn bad_urls_and_names_are_clear_errors_without_the_password() {
    let Some(s) = Schemas::new("bad") else {
        return;
    };
    let err = PgStore::connect(&s.url, "1 bad name").unwrap_err();
    assert!(
        matches!(&err, StoreError::InvalidInput(m) if m.contains("schema name")),
        "{err}"
    );
    let err = PgStore::connect("postgres://u:s3cret@127.0.0.1:notaport/db", "ok").unwrap_err();
    assert!(matches!(&err, StoreError::InvalidInput(_)), "{err}");
    assert!(!err.to_string().contains("s3cret"), "{err}");
    // Nothing listens on port 1: unavailable (worth a retry), the password hidden.
    let opts = PgStoreOptions {
        connect_timeout: std::time::Duration::from_secs(2),
        ..Default::default()
    };
    let err = PgStore::connect_with("postgres://u:s3cret@127.0.0.1:1/db", "ok", opts).unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    assert!(!err.to_string().contains("s3cret"), "{err}");
}

/// A batch whose connection dies before commit (the server ended it: a crashed client
/// looks the same to the server) commits nothing, and the store goes on working.
#[test]
fn a_batch_cut_off_mid_write_commits_nothing() {
    let Some(s) = Schemas::new("cut") else {
        return;
    };
    // A name of its own for this test's sessions: other tests' must not be ended.
    let app = format!("nc_cut_{}", std::process::id());
    let sep = if s.url.contains('?') { '&' } else { '?' };
    let store =
        PgStore::connect(&format!("{}{sep}application_name={app}", s.url), &s.name()).unwrap();
    let kept = conformance::sample_doc("k", "kept");
    let mut b = store.begin().unwrap();
    b.ensure_collection("k", "t").unwrap();
    b.put_document(&kept).unwrap();
    b.commit().unwrap();

    let lost = conformance::sample_doc("k", "lost");
    let mut b = store.begin().unwrap();
    b.put_document(&lost).unwrap();
    for c in conformance::sample_chunks(&lost) {
        b.put_chunk("k", &c).unwrap();
    }
    // End the batch's session from outside.
    let mut admin = postgres::Client::connect(&s.url, postgres::NoTls).unwrap();
    let ended: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1 AND state LIKE 'idle in transaction%') t",
            &[&app],
        )
        .unwrap()
        .get(0);
    assert!(ended >= 1, "the batch's session was not found");
    let err = b.commit().unwrap_err();
    assert!(err.is_transient(), "{err}");
    let info = store.collection("k").unwrap().unwrap();
    assert_eq!(info.documents, 1);
    assert!(store.document("k", lost.key).unwrap().is_none());
    assert!(store.chunks(lost.key).unwrap().is_empty());
    // The next batch works on a fresh connection.
    let mut b = store.begin().unwrap();
    b.put_document(&lost).unwrap();
    b.commit().unwrap();
    assert_eq!(store.collection("k").unwrap().unwrap().documents, 2);
}

#[test]
fn the_backup_command_is_told_to_use_the_servers_tools() {
    let Some(s) = Schemas::new("backup") else {
        return;
    };
    let store = s.fresh();
    let err = store
        .backup_to(std::path::Path::new("/tmp/never-written"))
        .unwrap_err();
    assert!(err.to_string().contains("pg_dump"), "{err}");
}

/// The pgvector index of a collection: bad input refused with a clear error, a failed
/// update leaves nothing behind, a row another process holds is skipped when asked,
/// another model empties the table, and scores are cosine similarities.
#[test]
fn pgvector_sets_refuse_bad_input_and_roll_back_failed_updates() {
    use neuralcore_store::PgVectors;
    let Some(s) = Schemas::new("pgvec") else {
        return;
    };
    let store = s.fresh();
    let params = neuralcore_core::settings::HnswParams::default();
    let open = |model: &str, dim: usize| {
        PgVectors::open(&s.url, store.schema(), 2, "c", model, dim, params)
    };
    for dim in [0, 2001] {
        let e = open("m", dim).unwrap_err();
        assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
    }
    let e = PgVectors::open(&s.url, "bad name", 2, "c", "m", 3, params).unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
    let v = open("m", 3).unwrap();
    assert_eq!((v.generation().unwrap(), v.len().unwrap()), (0, 0));
    let unit = |x: [f32; 3]| {
        let n = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        x.map(|a| a / n).to_vec()
    };
    let rows = vec![
        ((1u64 << 63 | 7, 0u32), unit([1.0, 0.0, 0.0])),
        ((2, 0), unit([0.0, 1.0, 0.0])),
        ((2, 1), unit([1.0, 1.0, 0.0])),
    ];
    v.update(true, |tx| -> Result<(), StoreError> {
        tx.insert(&rows)?;
        tx.set_generation(1);
        Ok(())
    })
    .unwrap()
    .unwrap();
    assert_eq!((v.generation().unwrap(), v.len().unwrap()), (1, 3));
    // Keys above i64::MAX come back as they went in; scores are cosines.
    let hits = v.search(&unit([1.0, 0.1, 0.0]), 2, false).unwrap();
    assert_eq!(
        hits.iter().map(|h| (h.doc, h.ordinal)).collect::<Vec<_>>(),
        vec![(1u64 << 63 | 7, 0), (2, 1)]
    );
    let q = unit([1.0, 0.1, 0.0]);
    let cos = q[0];
    assert!((hits[0].score - cos).abs() < 1e-5, "{hits:?}");
    assert!((v.similarity(2, 0, &q).unwrap().unwrap() - q[1]).abs() < 1e-5);
    assert_eq!(v.similarity(9, 9, &q).unwrap(), None);
    assert_eq!(v.search(&q, 10, true).unwrap().len(), 3);
    // Bad input.
    let e = v.search(&[1.0, 0.0], 1, false).unwrap_err();
    assert!(matches!(e, StoreError::InvalidInput(_)), "{e}");
    let e = v
        .update(true, |tx| tx.insert(&[((3, 0), vec![1.0; 4])]))
        .unwrap_err();
    assert!(e.to_string().contains("4 dimensions"), "{e}");
    // A failed update leaves nothing: the removal and the generation roll back.
    let e = v
        .update(true, |tx| -> Result<(), StoreError> {
            tx.remove_docs(&[2])?;
            tx.set_generation(2);
            Err(StoreError::Backend("stop".into()))
        })
        .unwrap_err();
    assert!(e.to_string().contains("stop"));
    assert_eq!((v.generation().unwrap(), v.len().unwrap()), (1, 3));
    // While one holds the row, another that will not wait is told so at once.
    let w = open("m", 3).unwrap();
    let skipped = v
        .update(true, |_| -> Result<_, StoreError> {
            Ok(w.update(false, |_| -> Result<(), StoreError> { Ok(()) })
                .unwrap())
        })
        .unwrap()
        .unwrap();
    assert_eq!(skipped, None);
    // Another model (or dimension): the table starts over at generation 0.
    let other = open("other", 4).unwrap();
    assert_eq!((other.generation().unwrap(), other.len().unwrap()), (0, 0));
    assert_eq!(v.generation().unwrap(), 0);
}
