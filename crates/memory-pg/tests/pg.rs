//! PostgreSQL backend tests against a real server.
//!
//! They run only when `NEURALCORE_TEST_PG_URL` is set (`eval "$(scripts/postgres.sh |
//! tail -n1)"`); otherwise each prints why it skipped and passes. Every test works in
//! schemas of its own, named after the test and the process id, dropped at the end, so
//! runs never collide.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neuralcore_memory::{
    AuditEntry, Filter, InMemoryBackend, Kind, MemScope, Memory, MemoryBackend, MemoryError,
    MemoryStore, NewMemory, RelKind, Relation, Signal, Status, TrustConfig,
};
use neuralcore_memory_pg::{PgBackend, PgOptions};

const T0: u64 = 1_700_000_000_000;

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
    made: Mutex<Vec<Arc<PgBackend>>>,
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

    /// A backend on a new, empty schema.
    fn fresh(&self) -> Arc<PgBackend> {
        let n = self.n.fetch_add(1, Ordering::Relaxed);
        let name = format!("nc_{}_{}_{n}", self.test, std::process::id());
        let b = Arc::new(PgBackend::connect(&self.url, &name).expect("connect"));
        b.drop_schema().expect("drop leftover schema");
        let b = Arc::new(PgBackend::connect(&self.url, &name).expect("reconnect"));
        self.made.lock().unwrap().push(b.clone());
        b
    }

    /// Another connection to the schema of `b`.
    fn again(&self, b: &PgBackend) -> PgBackend {
        PgBackend::connect(&self.url, b.schema()).expect("connect again")
    }
}

impl Drop for Schemas {
    fn drop(&mut self) {
        for b in self.made.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if let Err(e) = b.drop_schema() {
                eprintln!("could not drop schema {}: {e}", b.schema());
            }
        }
    }
}

fn memory(id: &str, text: &str) -> Memory {
    Memory {
        id: id.to_string(),
        text: text.to_string(),
        kind: Kind::Fact,
        scope: MemScope {
            tenant: "default".into(),
            project: "p".into(),
            agent: "a".into(),
            session: "s1".into(),
        },
        source: "user".into(),
        created_at_ms: T0,
        last_used_at_ms: T0,
        use_counts: BTreeMap::new(),
        trust: 0.5,
        trust_at_ms: T0,
        status: Status::Active,
        archived_at_ms: None,
        occurred_at: None,
        metadata: BTreeMap::new(),
        embedding: None,
    }
}

fn entry(id: &str, event: &str, before: f64, after: f64) -> AuditEntry {
    AuditEntry {
        memory: id.to_string(),
        event: event.to_string(),
        trust_before: before,
        trust_after: after,
        by: "test".into(),
        at_ms: T0,
        note: String::new(),
        query: None,
    }
}

fn rel(from: &str, kind: RelKind, to: &str) -> Relation {
    Relation {
        from: from.into(),
        kind,
        to: to.into(),
        by: "test".into(),
        at_ms: T0,
    }
}

/// Each conformance check as its own test, each backend on a fresh schema.
macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                let Some(s) = Schemas::new(stringify!($check)) else { return };
                neuralcore_memory::conformance::$check(&|| -> Arc<dyn MemoryBackend> {
                    s.fresh()
                });
            }
        )*

        /// The names wired in above, to compare with the suite's.
        const CHECKS: &[&str] = &[$(stringify!($check)),*];
    };
}

conformance!(
    check_add_get,
    check_fields_roundtrip,
    check_list_filters,
    check_unknown_ids,
    check_bad_input,
    check_duplicate_insert,
    check_ids_unique_across_stores,
    check_update_atomic,
    check_signal_steps,
    check_signal_questions,
    check_clamp,
    check_decay,
    check_frequent_sweeps_keep_decay,
    check_archive_by_signal,
    check_archive_by_sweep,
    check_forget_restore,
    check_purge,
    check_relations,
    check_relation_rules,
    check_batched_reads,
    check_concurrent_used,
    check_concurrent_mixed,
    check_version,
);

/// Every `pub fn check_*` of the suite (but `check_all`) runs here: a check added to the
/// suite and not to the list above fails this test (no server needed).
#[test]
fn every_conformance_check_is_wired_in() {
    let src = include_str!("../../memory/src/conformance.rs");
    let suite: Vec<&str> = src
        .lines()
        .filter_map(|l| l.strip_prefix("pub fn "))
        .filter_map(|l| l.split('(').next())
        .filter(|n| n.starts_with("check_") && *n != "check_all")
        .collect();
    let mut missing: Vec<&&str> = suite.iter().filter(|n| !CHECKS.contains(n)).collect();
    missing.sort();
    assert!(missing.is_empty(), "add to conformance!(...): {missing:?}");
    assert!(
        CHECKS.iter().all(|c| suite.contains(c)),
        "unknown check in the list"
    );
}

#[test]
fn records_round_trip_exactly() {
    let Some(s) = Schemas::new("roundtrip") else {
        return;
    };
    let b = s.fresh();
    let mut m = memory(
        "00000000000000a1",
        "Zürich café — naïve ✓ \"quoted\" \\ back",
    );
    m.kind = Kind::Decision;
    m.occurred_at = Some("2024-05-01".into());
    m.archived_at_ms = Some(T0 + 5);
    m.trust = 0.1 + 0.2; // not representable exactly in decimal
    m.use_counts.insert("used".into(), u64::MAX);
    m.metadata.insert(
        "speaker".into(),
        serde_json::json!({"name": "Ann", "n": [1, 2.5, -0.0]}),
    );
    m.metadata.insert("big".into(), serde_json::json!(1e300));
    m.embedding = Some(vec![0.1, -3.4e38, 1e-45, 0.0, 123.456]);
    b.insert(&m, &[entry(&m.id, "create", 0.5, 0.5)]).unwrap();
    assert_eq!(b.get(&m.id).unwrap().as_ref(), Some(&m));
    assert_eq!(b.get("ffffffffffffffff").unwrap(), None);
    eprintln!("pgvector column: {}", b.has_pgvector());

    // Embeddings a pgvector column cannot hold still round-trip.
    for (i, e) in [
        vec![],
        vec![f32::NAN, 1.0],
        vec![f32::INFINITY],
        vec![0.5; 16_001],
    ]
    .into_iter()
    .enumerate()
    {
        let mut m = memory(&format!("00000000000000b{i}"), "odd embedding");
        m.embedding = Some(e.clone());
        b.insert(&m, &[]).unwrap();
        let got = b.get(&m.id).unwrap().unwrap().embedding.unwrap();
        assert_eq!(got.len(), e.len());
        assert!(got.iter().zip(&e).all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn insert_conflicts_and_keeps_the_first() {
    let Some(s) = Schemas::new("conflict") else {
        return;
    };
    let b = s.fresh();
    let m = memory("00000000000000a1", "first");
    b.insert(&m, &[entry(&m.id, "create", 0.5, 0.5)]).unwrap();
    let err = b
        .insert(
            &memory(&m.id, "second"),
            &[entry(&m.id, "create", 0.5, 0.5)],
        )
        .unwrap_err();
    assert!(matches!(err, MemoryError::Conflict(_)), "{err:?}");
    assert_eq!(b.get(&m.id).unwrap().unwrap().text, "first");
    assert_eq!(b.audit(&m.id).unwrap().len(), 1);
}

#[test]
fn list_filters_in_id_order() {
    let Some(s) = Schemas::new("list") else {
        return;
    };
    let b = s.fresh();
    let mut ids = Vec::new();
    for (i, (tenant, project, session, kind, status)) in [
        ("t1", "p1", "s1", Kind::Fact, Status::Active),
        ("t1", "p2", "s1", Kind::Rule, Status::Active),
        ("t2", "p1", "s2", Kind::Fact, Status::Archived),
        ("t1", "p1", "s2", Kind::Episode, Status::Purged),
        ("t2", "p2", "s1", Kind::Rule, Status::Active),
    ]
    .into_iter()
    .enumerate()
    {
        // Ids inserted out of order; mixed case would sort differently under a locale.
        let id = format!("{:x}{}", 15 - i, "0".repeat(15));
        let mut m = memory(&id, "x");
        m.scope = MemScope {
            tenant: tenant.into(),
            project: project.into(),
            agent: String::new(),
            session: session.into(),
        };
        m.kind = kind;
        m.status = status;
        b.insert(&m, &[]).unwrap();
        ids.push(m);
    }
    let model = InMemoryBackend::new();
    for m in &ids {
        model.insert(m, &[]).unwrap();
    }
    let filters = [
        Filter::default(),
        Filter {
            statuses: vec![Status::Active, Status::Archived, Status::Purged],
            ..Default::default()
        },
        Filter {
            tenant: "t1".into(),
            ..Default::default()
        },
        Filter {
            statuses: vec![Status::Archived, Status::Purged],
            project: "p1".into(),
            ..Default::default()
        },
        Filter {
            session: "s1".into(),
            kinds: vec![Kind::Rule],
            ..Default::default()
        },
        Filter {
            tenant: "t2".into(),
            project: "p2".into(),
            session: "s1".into(),
            kinds: vec![Kind::Rule, Kind::Fact],
            statuses: vec![Status::Active],
        },
        Filter {
            tenant: "nobody".into(),
            ..Default::default()
        },
    ];
    for f in &filters {
        assert_eq!(b.list(f).unwrap(), model.list(f).unwrap(), "{f:?}");
    }
    assert_eq!(b.ids().unwrap(), model.ids().unwrap());
}

#[test]
fn update_applies_aborts_and_refuses() {
    let Some(s) = Schemas::new("update") else {
        return;
    };
    let b = s.fresh();
    let m = memory("00000000000000a1", "x");
    b.insert(&m, &[entry(&m.id, "create", 0.5, 0.5)]).unwrap();

    let got = b
        .update(&m.id, &mut |m| {
            m.trust = 0.7;
            m.status = Status::Archived;
            m.embedding = Some(vec![1.0, 2.0]);
            Ok(vec![
                entry(&m.id, "a", 0.5, 0.7),
                entry(&m.id, "b", 0.7, 0.7),
            ])
        })
        .unwrap();
    assert_eq!(b.get(&m.id).unwrap().as_ref(), Some(&got));
    let events: Vec<String> = b
        .audit(&m.id)
        .unwrap()
        .into_iter()
        .map(|a| a.event)
        .collect();
    assert_eq!(events, ["create", "a", "b"]);
    assert!(
        b.list(&Filter::default()).unwrap().is_empty(),
        "status column updated"
    );

    // An error from the change writes nothing.
    let err = b
        .update(&m.id, &mut |m| {
            m.trust = 0.0;
            Err(MemoryError::Invalid("no".into()))
        })
        .unwrap_err();
    assert_eq!(err, MemoryError::Invalid("no".into()));
    assert_eq!(b.get(&m.id).unwrap().unwrap().trust, 0.7);
    assert_eq!(b.audit(&m.id).unwrap().len(), 3);

    // The id cannot change; a missing memory is NotFound.
    let err = b
        .update(&m.id, &mut |m| {
            m.id = "00000000000000a2".into();
            Ok(vec![])
        })
        .unwrap_err();
    assert!(matches!(err, MemoryError::Invalid(_)), "{err:?}");
    assert_eq!(b.ids().unwrap(), vec![m.id.clone()]);
    let err = b
        .update("ffffffffffffffff", &mut |_| Ok(vec![]))
        .unwrap_err();
    assert_eq!(err, MemoryError::NotFound("ffffffffffffffff".into()));

    // A lock left behind by an aborted update would make this one hang.
    b.update(&m.id, &mut |m| {
        m.trust = 0.9;
        Ok(vec![])
    })
    .unwrap();
    assert_eq!(b.get(&m.id).unwrap().unwrap().trust, 0.9);
}

#[test]
fn relations_by_node_and_kind() {
    let Some(s) = Schemas::new("relations") else {
        return;
    };
    let b = s.fresh();
    let model = InMemoryBackend::new();
    let rels = [
        rel("b", RelKind::RelatedTo, "a"),
        rel("a", RelKind::Supersedes, "c"),
        rel("a", RelKind::PartOf, "doc:1"),
        rel("a", RelKind::Mentions, "ent:person:Ann"),
        rel("c", RelKind::Supersedes, "d"),
        rel("a", RelKind::Supersedes, "b"),
    ];
    for r in &rels {
        assert!(b.insert_relation(r).unwrap());
        assert!(model.insert_relation(r).unwrap());
    }
    assert!(!b.insert_relation(&rels[0]).unwrap(), "duplicate");
    for node in ["a", "b", "c", "doc:1", "zzz"] {
        assert_eq!(
            b.relations(node).unwrap(),
            model.relations(node).unwrap(),
            "{node}"
        );
    }
    for k in RelKind::ALL {
        assert_eq!(
            b.relations_of_kind(k).unwrap(),
            model.relations_of_kind(k).unwrap()
        );
    }
    assert!(b.remove_relation("a", RelKind::Supersedes, "c").unwrap());
    assert!(!b.remove_relation("a", RelKind::Supersedes, "c").unwrap());
    assert!(!b.remove_relation("a", RelKind::RelatedTo, "b").unwrap());
    assert_eq!(b.relations_of_kind(RelKind::Supersedes).unwrap().len(), 2);
}

/// NUL in a memory's text (kept in the `json` record) round-trips; in a text column (a
/// scope field, a relation node) PostgreSQL cannot hold it: `Invalid`, not `Backend`.
#[test]
fn nul_characters_round_trip_in_records_and_are_invalid_in_keys() {
    let Some(s) = Schemas::new("nul") else { return };
    let b = s.fresh();
    let mut m = memory("00000000000000a1", "a\0b");
    m.metadata.insert("k\0".into(), serde_json::json!("v\0"));
    b.insert(&m, &[entry(&m.id, "create\0", 0.5, 0.5)]).unwrap();
    assert_eq!(b.get(&m.id).unwrap().as_ref(), Some(&m));
    assert_eq!(b.audit(&m.id).unwrap()[0].event, "create\0");
    let mut bad = memory("00000000000000a2", "x");
    bad.scope.tenant = "t\0".into();
    let err = b.insert(&bad, &[]).unwrap_err();
    assert!(matches!(err, MemoryError::Invalid(_)), "{err:?}");
    let err = b
        .insert_relation(&rel("a\0", RelKind::RelatedTo, "b"))
        .unwrap_err();
    assert!(matches!(err, MemoryError::Invalid(_)), "{err:?}");
    assert_eq!(b.ids().unwrap(), vec![m.id.clone()]);
}

#[test]
fn store_rules_work_on_postgres() {
    let Some(s) = Schemas::new("store") else {
        return;
    };
    let store = MemoryStore::new(s.fresh(), TrustConfig::default()).unwrap();
    let m = store
        .add(
            NewMemory {
                text: "Deploys run on Fridays.".into(),
                embedding: Some(vec![0.25; 384]),
                ..Default::default()
            },
            "user",
            T0,
        )
        .unwrap();
    store.signal(&m.id, Signal::Used, "agent", T0 + 1).unwrap();
    store.forget(&m.id, "user", T0 + 2).unwrap();
    let back = store.restore(&m.id, "user", T0 + 3).unwrap();
    assert_eq!(back.status, Status::Active);
    let events: Vec<String> = store
        .audit(&m.id)
        .unwrap()
        .into_iter()
        .map(|a| a.event)
        .collect();
    assert_eq!(events[0], "create");
    assert!(events.contains(&"used".to_string()) && events.contains(&"restore".to_string()));
    let other = store
        .add(
            NewMemory {
                text: "Old rule.".into(),
                ..Default::default()
            },
            "u",
            T0,
        )
        .unwrap();
    store
        .link(&m.id, RelKind::Supersedes, &other.id, "u", T0)
        .unwrap();
    let err = store
        .link(&other.id, RelKind::Supersedes, &m.id, "u", T0)
        .unwrap_err();
    assert!(
        matches!(err, MemoryError::Invalid(_)),
        "cycle refused: {err:?}"
    );
}

/// 16 threads, each with its own connection, signal one memory 25 times: all 400 count.
#[test]
fn concurrent_signals_across_connections_lose_nothing() {
    let Some(s) = Schemas::new("concurrent") else {
        return;
    };
    let first = s.fresh();
    let cfg = TrustConfig::default();
    let id = MemoryStore::new(first.clone(), cfg.clone())
        .unwrap()
        .add(
            NewMemory {
                text: "hot memory".into(),
                ..Default::default()
            },
            "u",
            T0,
        )
        .unwrap()
        .id;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..16 {
            let (s, id, cfg, first) = (&s, &id, cfg.clone(), &first);
            scope.spawn(move || {
                // One pooled connection each: the threads meet only in the database.
                let own = PgBackend::connect_with(
                    &s.url,
                    first.schema(),
                    PgOptions {
                        pool_size: 1,
                        ..Default::default()
                    },
                )
                .unwrap();
                let store = MemoryStore::new(Arc::new(own), cfg).unwrap();
                for _ in 0..25 {
                    store
                        .signal(id, Signal::Used, &format!("t{t}"), T0)
                        .unwrap();
                }
            });
        }
    });
    eprintln!("400 signals over 16 connections in {:?}", started.elapsed());
    let check = s.again(&first);
    let m = check.get(&id).unwrap().unwrap();
    assert_eq!(m.use_counts.get("used"), Some(&400));
    let used = check
        .audit(&id)
        .unwrap()
        .iter()
        .filter(|a| a.event == "used")
        .count();
    assert_eq!(used, 400);
}

/// Many threads on one backend share its pool.
#[test]
fn one_backend_shared_by_threads() {
    let Some(s) = Schemas::new("shared") else {
        return;
    };
    let b = s.fresh();
    let store = MemoryStore::new(b, TrustConfig::default()).unwrap();
    let id = store
        .add(
            NewMemory {
                text: "shared".into(),
                ..Default::default()
            },
            "u",
            T0,
        )
        .unwrap()
        .id;
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..10 {
                    store.signal(&id, Signal::Ignored, "t", T0).unwrap();
                    store.get(&id, T0).unwrap();
                }
            });
        }
    });
    let m = store.get(&id, T0).unwrap();
    assert_eq!(m.use_counts.get("ignored"), Some(&80));
}

#[test]
fn closed_port_is_unavailable_quickly_without_the_password() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres:s3cret@127.0.0.1:{port}/postgres");
    let started = Instant::now();
    let err = PgBackend::connect(&url, "nc_closed").unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let MemoryError::Unavailable(msg) = &err else {
        panic!("expected Unavailable, got {err:?}");
    };
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
}

#[test]
fn unroutable_host_times_out_as_unavailable() {
    // 10.255.255.1 is private and normally unrouted: the connect timeout decides.
    let started = Instant::now();
    let res = PgBackend::connect_with(
        "postgres://u@10.255.255.1:5432/db",
        "nc_timeout",
        PgOptions {
            connect_timeout: Duration::from_millis(300),
            ..Default::default()
        },
    );
    assert!(matches!(res, Err(MemoryError::Unavailable(_))), "{res:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn bad_urls_and_schema_names_are_clear_errors() {
    for url in [
        "postgres://u:s3cret@127.0.0.1:notaport/db",
        "host=127.0.0.1 password=s3cret sslmode=sideways",
        "not a url",
    ] {
        let err = PgBackend::connect(url, "nc_bad").unwrap_err();
        let MemoryError::Invalid(msg) = &err else {
            panic!("expected Invalid for {url:?}, got {err:?}");
        };
        assert!(msg.contains("invalid PostgreSQL URL"), "{msg}");
        assert!(!msg.contains("s3cret"), "{msg}");
    }
    for schema in ["", "1abc", "bad-name", "x\"; DROP SCHEMA public; --"] {
        let err = PgBackend::connect("postgres://u@127.0.0.1:1/db", schema).unwrap_err();
        assert!(
            matches!(err, MemoryError::Invalid(_)),
            "{schema:?}: {err:?}"
        );
    }
}

#[test]
fn wrong_database_is_a_backend_error() {
    let Some(url) = url() else { return };
    let Some(base) = url.rsplit_once('/').map(|(b, _)| b.to_string()) else {
        return;
    };
    let err = PgBackend::connect(&format!("{base}/no_such_db_nc"), "nc_x").unwrap_err();
    assert!(matches!(err, MemoryError::Backend(_)), "{err:?}");
    assert!(err.to_string().contains("no_such_db_nc"), "{err}");
}

/// Many clients creating the same new schema at once: the advisory lock serializes the
/// `CREATE ... IF NOT EXISTS` statements, which would otherwise race.
#[test]
fn concurrent_connects_create_one_schema() {
    let Some(s) = Schemas::new("setup") else {
        return;
    };
    // Registered for cleanup, then dropped so that the threads race to create it.
    let name = s.fresh().schema().to_string();
    PgBackend::connect(&s.url, &name)
        .unwrap()
        .drop_schema()
        .unwrap();
    let made: Vec<PgBackend> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| PgBackend::connect(&s.url, &name)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    });
    made[0]
        .insert(&memory("00000000000000a1", "x"), &[])
        .unwrap();
    for b in &made {
        assert_eq!(b.ids().unwrap().len(), 1);
    }
}

/// A connection the server ended (restart, idle timeout, an administrator) costs at most
/// one failed write; reads retry on a fresh connection.
#[test]
fn connections_ended_by_the_server_are_replaced() {
    let Some(s) = Schemas::new("terminated") else {
        return;
    };
    let app = format!("nc_terminated_{}", std::process::id());
    let sep = if s.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}application_name={app}", s.url);
    let first = s.fresh();
    let b = PgBackend::connect_with(
        &url,
        first.schema(),
        PgOptions {
            pool_size: 1,
            ..Default::default()
        },
    )
    .unwrap();
    let m = memory("00000000000000a1", "survives");
    b.insert(&m, &[]).unwrap();
    let mut admin = postgres::Client::connect(&s.url, postgres::NoTls).unwrap();
    let mut terminate = || {
        let n: i64 = admin
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1) t",
                &[&app],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "one pooled connection");
        std::thread::sleep(Duration::from_millis(100));
    };

    terminate();
    assert_eq!(
        b.get(&m.id).unwrap().unwrap().text,
        "survives",
        "read retried"
    );

    terminate();
    let r = rel("a", RelKind::RelatedTo, "b");
    let err = b.insert_relation(&r).unwrap_err();
    assert!(matches!(err, MemoryError::Unavailable(_)), "{err:?}");
    assert!(
        b.insert_relation(&r).unwrap(),
        "next write on a fresh connection"
    );
}

/// Trust values and metadata numbers come back bit for bit, the sign of zero included.
#[test]
fn floats_survive_bit_for_bit() {
    let Some(s) = Schemas::new("floats") else {
        return;
    };
    let b = s.fresh();
    // A fixed xorshift stream over the whole f64 range and typical trust values.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut values = Vec::new();
    while values.len() < 3000 {
        let bits = next();
        let v = match values.len() % 3 {
            0 => f64::from_bits(bits),
            1 => (bits >> 11) as f64 / (1u64 << 53) as f64,
            _ => f64::from_bits(bits) * 1e-300,
        };
        if v.is_finite() {
            values.push(v);
        }
    }
    let mut m = memory("00000000000000a1", "numbers");
    m.trust = values[1];
    m.metadata.insert("xs".into(), serde_json::json!(values));
    b.insert(&m, &[entry(&m.id, "create", values[4], values[7])])
        .unwrap();
    let got = b.get(&m.id).unwrap().unwrap();
    let back: Vec<f64> = serde_json::from_value(got.metadata["xs"].clone()).unwrap();
    let differ: Vec<(f64, f64)> = values
        .iter()
        .zip(&back)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .map(|(a, b)| (*a, *b))
        .take(5)
        .collect();
    assert!(differ.is_empty(), "{differ:?}");
    assert_eq!(got.trust.to_bits(), values[1].to_bits());
    let a = &b.audit(&m.id).unwrap()[0];
    assert_eq!((a.trust_before, a.trust_after), (values[4], values[7]));
}
