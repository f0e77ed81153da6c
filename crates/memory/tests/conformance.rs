//! The conformance suite against every backend, one test per check and backend, plus
//! what only the embedded backend has: persistence, the file lock, crash safety.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use neuralcore_memory::{
    conformance, InMemoryBackend, MemoryBackend, MemoryError, MemoryStore, NewMemory, RedbBackend,
    RelKind, Signal, TrustConfig,
};

fn in_memory() -> Arc<dyn MemoryBackend> {
    Arc::new(InMemoryBackend::new())
}

/// A factory of fresh redb backends, each in its own file under one temp dir.
struct RedbFactory {
    dir: tempfile::TempDir,
    n: AtomicUsize,
}

impl RedbFactory {
    fn new() -> Self {
        RedbFactory {
            dir: tempfile::tempdir().unwrap(),
            n: AtomicUsize::new(0),
        }
    }

    fn path(&self) -> PathBuf {
        let n = self.n.fetch_add(1, Ordering::Relaxed);
        self.dir.path().join(format!("m{n}.redb"))
    }

    fn make(&self) -> Arc<dyn MemoryBackend> {
        Arc::new(RedbBackend::open(&self.path()).unwrap())
    }
}

macro_rules! conformance_tests {
    ($($check:ident),* $(,)?) => {
        mod in_memory {
            $(
                #[test]
                fn $check() {
                    neuralcore_memory::conformance::$check(&super::in_memory);
                }
            )*
        }
        mod redb {
            $(
                #[test]
                fn $check() {
                    let f = super::RedbFactory::new();
                    neuralcore_memory::conformance::$check(&|| f.make());
                }
            )*
        }
    };
}

conformance_tests!(
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

#[test]
fn check_all_in_memory() {
    conformance::check_all(&in_memory);
}

const T0: u64 = 1_750_000_000_000;

fn text(t: &str) -> NewMemory {
    NewMemory {
        text: t.to_string(),
        ..Default::default()
    }
}

/// Trust settings without decay, so audit logs depend only on what was done.
fn no_decay() -> TrustConfig {
    TrustConfig {
        half_life_days: 0.0,
        ..Default::default()
    }
}

#[test]
fn redb_data_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/memory.redb");
    let (a, b, snapshot) = {
        let backend = Arc::new(RedbBackend::open(&path).unwrap());
        assert_eq!(backend.path(), path);
        let s = MemoryStore::new(backend.clone(), TrustConfig::default()).unwrap();
        let a = s.add(text("survives"), "u", T0).unwrap();
        let b = s.add(text("also survives"), "u", T0).unwrap();
        s.signal(&a.id, Signal::Confirmed, "u", T0 + 1).unwrap();
        s.forget(&b.id, "u", T0 + 2).unwrap();
        s.link(&a.id, RelKind::Supersedes, &b.id, "u", T0).unwrap();
        s.link(&a.id, RelKind::Mentions, "ent:person:alice", "u", T0)
            .unwrap();
        let snap = |id: &str| {
            (
                s.backend().get(id).unwrap().unwrap(),
                s.audit(id).unwrap(),
                s.relations(id).unwrap(),
            )
        };
        (a.id.clone(), b.id.clone(), [snap(&a.id), snap(&b.id)])
    };
    let backend = Arc::new(RedbBackend::open(&path).unwrap());
    backend.verify().unwrap();
    let s = MemoryStore::new(backend, TrustConfig::default()).unwrap();
    for (id, (m, log, rels)) in [&a, &b].into_iter().zip(snapshot) {
        assert_eq!(s.backend().get(id).unwrap().unwrap(), m);
        assert_eq!(s.audit(id).unwrap(), log);
        assert_eq!(s.relations(id).unwrap(), rels);
    }
    assert_eq!(s.backend().ids().unwrap().len(), 2);
    // Writing on after reopening continues the audit numbering.
    s.signal(&a, Signal::Used, "u", T0 + 3).unwrap();
    assert_eq!(s.audit(&a).unwrap().len(), 3);
    let backend = s.backend().clone();
    drop(s);
    drop(backend);
    let backend = RedbBackend::open(&path).unwrap();
    backend.verify().unwrap();
    assert_eq!(backend.audit(&a).unwrap().len(), 3);
}

#[test]
fn redb_second_open_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.redb");
    let first = RedbBackend::open(&path).unwrap();
    match RedbBackend::open(&path) {
        Err(MemoryError::Unavailable(msg)) => {
            assert!(msg.contains("in use"), "{msg}");
            assert!(msg.contains("memory.redb"), "{msg}");
        }
        other => panic!("second open: {other:?}"),
    }
    drop(first);
    RedbBackend::open(&path).unwrap();
}

#[test]
fn redb_refuses_a_file_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.redb");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let e = RedbBackend::open(&path).unwrap_err();
    assert!(e.to_string().contains("memory.redb"), "{e}");
    let e = RedbBackend::open(dir.path()).unwrap_err();
    assert!(
        e.to_string().contains(&dir.path().display().to_string()),
        "{e}"
    );
}

const CHILD_ENV: &str = "NEURALCORE_MEMORY_CRASH_CHILD";

/// Run as a child process by `redb_survives_kill_mid_writes`: writes until killed,
/// printing `ack ...` after each write returns.
#[test]
fn redb_crash_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let backend = Arc::new(RedbBackend::open(std::path::Path::new(&path)).unwrap());
    let s = MemoryStore::new(backend, no_decay()).unwrap();
    let mut prev: Option<String> = None;
    // Never outlive a parent that failed before killing us.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    for i in 0u64.. {
        if std::time::Instant::now() > deadline {
            break;
        }
        let m = s
            .add(text(&format!("memory {i}")), "child", T0 + i)
            .unwrap();
        println!("ack add {}", m.id);
        for _ in 0..3 {
            s.signal(&m.id, Signal::Used, "child", T0 + i).unwrap();
            println!("ack used {}", m.id);
        }
        if let Some(p) = &prev {
            s.link(&m.id, RelKind::Supersedes, p, "child", T0 + i)
                .unwrap();
            println!("ack link {} {p}", m.id);
        }
        prev = Some(m.id);
    }
}

/// A process killed (SIGKILL) in the middle of writing leaves a file that opens, passes
/// `verify`, holds every acknowledged write, and holds each write whole or not at all.
#[test]
fn redb_survives_kill_mid_writes() {
    use std::io::BufRead;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.redb");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "redb_crash_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    let mut links = Vec::new();
    let mut acks = 0;
    let mut killed = false;
    // Read acks until the child has made 60 writes, kill it, then read the acks it
    // printed before dying.
    for line in lines {
        let line = line.unwrap();
        // libtest may print `test redb_crash_child ... ` on the same line.
        let Some(at) = line.find("ack ") else {
            continue;
        };
        let parts: Vec<&str> = line[at..].split_whitespace().collect();
        match parts.as_slice() {
            ["ack", "add", id] => {
                used.insert(id.to_string(), 0);
            }
            ["ack", "used", id] => *used.get_mut(*id).unwrap() += 1,
            ["ack", "link", from, to] => links.push((from.to_string(), to.to_string())),
            _ => continue,
        }
        acks += 1;
        if acks == 30 {
            // The file is held by the child.
            assert!(matches!(
                RedbBackend::open(&path),
                Err(MemoryError::Unavailable(_))
            ));
        }
        if acks >= 60 && !killed {
            child.kill().unwrap();
            killed = true;
        }
    }
    assert!(killed, "the child stopped after {acks} writes");
    child.wait().unwrap();

    let backend = Arc::new(RedbBackend::open(&path).unwrap());
    backend.verify().unwrap();
    let s = MemoryStore::new(backend.clone(), no_decay()).unwrap();
    let cfg = no_decay();
    for id in backend.ids().unwrap() {
        let m = s.get(&id, T0).unwrap();
        let n = m.use_counts.get("used").copied().unwrap_or(0);
        // The last write may have committed without its ack being printed.
        if let Some(acked) = used.get(&id) {
            assert!(
                n == *acked || n == acked + 1,
                "{id}: {n} used, {acked} acked"
            );
        } else {
            assert_eq!(n, 0, "{id}: unacknowledged memory with uses");
        }
        let mut want = cfg.initial;
        for _ in 0..n {
            want = neuralcore_memory::trust::after_signal(want, Signal::Used, &cfg);
        }
        assert_eq!(m.trust, want, "{id}");
        let log = s.audit(&id).unwrap();
        assert_eq!(log.len() as u64, 1 + n, "{id}: one audit entry per write");
    }
    for id in used.keys() {
        assert!(backend.get(id).unwrap().is_some(), "acknowledged {id} lost");
    }
    for (from, to) in &links {
        let rels = s.relations(from).unwrap();
        assert!(
            rels.iter()
                .any(|r| r.kind == RelKind::Supersedes && &r.from == from && &r.to == to),
            "acknowledged link {from} → {to} lost"
        );
    }
}
