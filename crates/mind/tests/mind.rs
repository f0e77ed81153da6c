//! The conformance suite and the model test against every backend, plus what is
//! particular to each (redb persistence, Redis timeouts).
//!
//! The Redis tests need a real server: `scripts/test.sh` starts one and exports
//! `NEURALCORE_TEST_REDIS_URL`. Without it they fail, saying so. The crate's `redis`
//! feature (on by default) is required.
#![cfg(feature = "redis")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use neuralcore_mind::{conformance, Mind, MindConfig, MindError, RedisConfig};
use serde_json::json;

fn redis_url() -> String {
    std::env::var("NEURALCORE_TEST_REDIS_URL").unwrap_or_else(|_| {
        panic!(
            "NEURALCORE_TEST_REDIS_URL is not set: the Redis tests need a real redis-server. \
             Run scripts/test.sh (it installs and starts one on 127.0.0.1), or start one and \
             export NEURALCORE_TEST_REDIS_URL=redis://127.0.0.1:PORT/"
        )
    })
}

/// A key prefix no other test or run uses: process id, time and a counter.
fn unique_prefix() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "nctest-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn redis_config() -> RedisConfig {
    RedisConfig {
        prefix: unique_prefix(),
        ..RedisConfig::new(redis_url())
    }
}

fn redis_mind(cfg: MindConfig) -> Mind {
    Mind::redis(redis_config(), cfg).unwrap()
}

#[test]
fn memory_conforms() {
    conformance::run_all(&mut Mind::memory_with);
}

#[test]
fn redb_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    conformance::run_all(&mut |cfg| {
        n += 1;
        Mind::open_redb(&dir.path().join(format!("m{n}.redb")), cfg).unwrap()
    });
}

#[test]
fn redis_conforms() {
    conformance::run_all(&mut redis_mind);
}

#[test]
fn concurrent_cas_loses_no_update() {
    conformance::concurrent_cas(&mut Mind::memory_with, 8, 500);
    conformance::concurrent_cas(&mut redis_mind, 8, 100);
    let dir = tempfile::tempdir().unwrap();
    conformance::concurrent_cas(
        &mut |cfg| Mind::open_redb(&dir.path().join("c.redb"), cfg).unwrap(),
        4,
        25,
    );
}

#[test]
fn redb_run_scratch_written_without_fsync_is_kept_by_a_clean_close_and_by_a_later_durable_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mind.redb");
    {
        // Only scratch writes, then the Mind is closed: they are made durable on close.
        let m = Mind::open_redb(&path, MindConfig::default()).unwrap();
        let run = m.run("r").unwrap();
        for i in 0..600 {
            run.write(&format!("s.{i}"), json!(i), "w", None).unwrap();
        }
        run.delete("s.0").unwrap();
    }
    let m = Mind::open_redb(&path, MindConfig::default()).unwrap();
    let keys = m.run("r").unwrap().list_keys("s.*").unwrap();
    assert_eq!(keys.len(), 599, "scratch writes lost by a clean close");
    assert_eq!(
        m.run("r").unwrap().read("s.599").unwrap().unwrap().value,
        json!(599)
    );
    // A dropped run layer stays dropped across a reopen.
    m.drop_run("r").unwrap();
    drop(m);
    let m = Mind::open_redb(&path, MindConfig::default()).unwrap();
    assert!(m.run("r").unwrap().list_keys("*").unwrap().is_empty());
    // The file does not grow without bound under scratch writes alone (redb frees pages
    // only at durable commits, which come every LAZY_COMMITS / LAZY_FOR).
    let run = m.run("big").unwrap();
    for round in 0..20 {
        for i in 0..200 {
            run.write(
                &format!("k.{i}"),
                json!({"round": round, "pad": "x".repeat(200)}),
                "w",
                None,
            )
            .unwrap();
        }
    }
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size < 32 << 20, "mind.redb grew to {size} bytes");
}

#[test]
fn redb_persists_and_refuses_a_second_opener() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mind.redb");
    {
        let m = Mind::open_redb(&path, MindConfig::default()).unwrap();
        m.global().write("p.k", json!({"a": 1}), "w", None).unwrap();
        m.global().write("p.k", json!({"a": 2}), "w", None).unwrap();
        m.run("r")
            .unwrap()
            .write("p.r", json!(1), "w", None)
            .unwrap();
        m.global()
            .write("p.gone", json!(1), "w", Some(Duration::from_millis(1)))
            .unwrap();
        let second = Mind::open_redb(&path, MindConfig::default());
        assert!(matches!(second, Err(MindError::Unavailable(ref m)) if m.contains("in use")));
    }
    std::thread::sleep(Duration::from_millis(5));
    let m = Mind::open_redb(&path, MindConfig::default()).unwrap();
    let e = m.global().read("p.k").unwrap().unwrap();
    assert_eq!((e.value, e.version), (json!({"a": 2}), 2));
    assert_eq!(
        m.run("r").unwrap().list_keys("p.*").unwrap(),
        vec!["p.k", "p.r"]
    );
    assert_eq!(m.global().list_keys("*").unwrap(), vec!["p.k"]);
    // Expired entries were dropped at open.
    assert_eq!(m.purge_expired().unwrap(), 0);
}

fn assert_unavailable_quickly(cfg: RedisConfig, limit: Duration) {
    let t = Instant::now();
    let r = Mind::redis(cfg, MindConfig::default());
    let took = t.elapsed();
    match r {
        Err(MindError::Unavailable(msg)) => assert!(msg.contains("redis"), "{msg}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(took < limit, "took {took:?}");
}

#[test]
fn redis_down_is_unavailable_within_the_timeout() {
    // A port nobody listens on: bind, note the port, close.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut cfg = RedisConfig::new(format!("redis://127.0.0.1:{port}/"));
    cfg.connect_timeout = Duration::from_millis(300);
    cfg.io_timeout = Duration::from_millis(300);
    assert_unavailable_quickly(cfg, Duration::from_secs(2));
}

#[test]
fn redis_silent_server_is_unavailable_within_the_timeout() {
    // Accepts connections and never answers.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let keep = std::thread::spawn(move || {
        let mut held = Vec::new();
        l.set_nonblocking(true).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            match l.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    let mut cfg = RedisConfig::new(format!("redis://127.0.0.1:{port}/"));
    cfg.connect_timeout = Duration::from_millis(300);
    cfg.io_timeout = Duration::from_millis(300);
    assert_unavailable_quickly(cfg, Duration::from_secs(3));
    drop(keep);
}

#[test]
fn redis_dying_mid_use_is_unavailable_not_a_hang() {
    // A proxy in front of the real server that goes silent on demand: operations
    // through it first work, then time out as Unavailable, with no panic.
    use std::io::{Read, Write};
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let url = redis_url();
    let target = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_string();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let silent = Arc::new(AtomicBool::new(false));
    let s2 = silent.clone();
    std::thread::spawn(move || {
        for client in l.incoming().take(4) {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = std::net::TcpStream::connect(&target) else {
                return;
            };
            let (mut c2, mut s3) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let silent = s2.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s3.read(&mut buf) {
                    if n == 0 || silent.load(Ordering::Relaxed) {
                        // Swallow answers from now on.
                        let _ = std::io::copy(&mut s3, &mut std::io::sink());
                        return;
                    }
                    if c2.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut client, &mut server);
            });
        }
    });
    let mut cfg = redis_config();
    cfg.url = format!("redis://127.0.0.1:{port}/");
    cfg.io_timeout = Duration::from_millis(300);
    cfg.connect_timeout = Duration::from_millis(300);
    let m = Mind::redis(cfg, MindConfig::default()).unwrap();
    let g = m.global();
    g.write("x.k", json!(1), "w", None).unwrap();
    silent.store(true, Ordering::Relaxed);
    let t = Instant::now();
    let err = g.read("x.k").unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let err = g.write("x.k", json!(2), "w", None).unwrap_err();
    assert!(matches!(err, MindError::Unavailable(_)), "{err}");
}

#[test]
fn redis_bad_config_is_a_clear_error() {
    let mut cfg = redis_config();
    cfg.tenant = "bad:tenant".into();
    assert!(matches!(
        Mind::redis(cfg, MindConfig::default()),
        Err(MindError::InvalidKey { .. })
    ));
    let mut cfg = redis_config();
    cfg.prefix = "a:b".into();
    assert!(matches!(
        Mind::redis(cfg, MindConfig::default()),
        Err(MindError::InvalidKey { .. })
    ));
    let cfg = RedisConfig::new("not a url");
    assert!(matches!(
        Mind::redis(cfg, MindConfig::default()),
        Err(MindError::Backend(_))
    ));
}

#[test]
fn redis_tenants_and_prefixes_are_isolated() {
    let base = redis_config();
    let a = Mind::redis(base.clone(), MindConfig::default()).unwrap();
    let b = Mind::redis(
        RedisConfig {
            tenant: "other".into(),
            ..base
        },
        MindConfig::default(),
    )
    .unwrap();
    let c = redis_mind(MindConfig::default());
    a.global().write("t.k", json!("a"), "w", None).unwrap();
    assert_eq!(b.global().read("t.k").unwrap(), None);
    assert_eq!(c.global().read("t.k").unwrap(), None);
    assert!(b.global().list_keys("*").unwrap().is_empty());
}

#[test]
fn redis_second_client_sees_writes_and_watch_crosses_processes() {
    let cfg = redis_config();
    let a = Mind::redis(cfg.clone(), MindConfig::default()).unwrap();
    let b = Mind::redis(cfg, MindConfig::default()).unwrap();
    let w = b.run("x").unwrap().watch().unwrap();
    a.run("x")
        .unwrap()
        .write("n.k", json!(1), "a", None)
        .unwrap();
    assert_eq!(
        b.run("x").unwrap().read("n.k").unwrap().unwrap().writer,
        "a"
    );
    let c = w.recv_timeout(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!(c.key, "n.k");
}

mod model {
    //! Random operation sequences over the global scope and two runs, against a
    //! `BTreeMap` model, for every backend.
    use std::collections::{BTreeMap, BTreeSet};

    use neuralcore_mind::{Mind, MindConfig, MindError, Pattern};
    use proptest::prelude::*;
    use serde_json::json;

    const KEYS: [&str; 5] = ["a.x", "a.y", "b.x", "b.y.z", "c.x"];
    const PATTERNS: [&str; 7] = ["*", "a.*", "*.x", "a*", "*y*", "b.y", "a.x"];
    const NAMES: [&str; 3] = ["x", "y", "y.z"];
    const RUNS: [&str; 2] = ["ra", "rb"];

    #[derive(Debug, Clone)]
    enum Op {
        Write(usize, usize, u8),
        /// scope, key, expected: None = the current visible version, Some = this one.
        Cas(usize, usize, Option<u64>, u8),
        Delete(usize, usize),
        Read(usize, usize),
        List(usize, usize),
        ReadName(usize, usize),
        DropRun(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        let s = 0usize..3;
        let k = 0usize..KEYS.len();
        prop_oneof![
            4 => (s.clone(), k.clone(), any::<u8>()).prop_map(|(s, k, v)| Op::Write(s, k, v)),
            3 => (s.clone(), k.clone(), proptest::option::of(0u64..4), any::<u8>())
                .prop_map(|(s, k, e, v)| Op::Cas(s, k, e, v)),
            2 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::Delete(s, k)),
            2 => (s.clone(), k.clone()).prop_map(|(s, k)| Op::Read(s, k)),
            1 => (s.clone(), 0usize..PATTERNS.len()).prop_map(|(s, p)| Op::List(s, p)),
            1 => (s, 0usize..NAMES.len()).prop_map(|(s, n)| Op::ReadName(s, n)),
            1 => (0usize..2).prop_map(Op::DropRun),
        ]
    }

    /// (layer 0 = global, 1.. = runs, key) → (version, value)
    #[derive(Default)]
    struct Model(BTreeMap<(usize, String), (u64, u8)>);

    impl Model {
        fn visible(&self, s: usize, key: &str) -> Option<(u64, u8)> {
            self.0
                .get(&(s, key.to_string()))
                .or_else(|| self.0.get(&(0, key.to_string())))
                .copied()
        }
        fn keys(&self, s: usize) -> BTreeSet<String> {
            self.0
                .keys()
                .filter(|(l, _)| *l == s || *l == 0)
                .map(|(_, k)| k.clone())
                .collect()
        }
    }

    fn check(mind: &Mind, ops: &[Op]) {
        let scopes = [
            mind.global(),
            mind.run(RUNS[0]).unwrap(),
            mind.run(RUNS[1]).unwrap(),
        ];
        let mut m = Model::default();
        for op in ops {
            match *op {
                Op::Write(s, k, v) => {
                    let key = KEYS[k];
                    let cur = m.visible(s, key).map_or(0, |e| e.0);
                    let e = scopes[s].write(key, json!(v), "w", None).unwrap();
                    assert_eq!(e.version, cur + 1, "{op:?}");
                    m.0.insert((s, key.to_string()), (cur + 1, v));
                }
                Op::Cas(s, k, expected, v) => {
                    let key = KEYS[k];
                    let cur = m.visible(s, key).map_or(0, |e| e.0);
                    let expected = expected.unwrap_or(cur);
                    match scopes[s].cas(key, expected, json!(v), "w", None) {
                        Ok(e) => {
                            assert_eq!((expected, e.version), (cur, cur + 1), "{op:?}");
                            m.0.insert((s, key.to_string()), (cur + 1, v));
                        }
                        Err(MindError::Conflict { found, .. }) => {
                            assert_ne!(expected, cur, "{op:?}");
                            assert_eq!(found, cur, "{op:?}");
                        }
                        Err(e) => panic!("{op:?}: {e}"),
                    }
                }
                Op::Delete(s, k) => {
                    let key = KEYS[k];
                    let had = m.0.remove(&(s, key.to_string())).is_some();
                    assert_eq!(scopes[s].delete(key).unwrap(), had, "{op:?}");
                }
                Op::Read(s, k) => {
                    let got = scopes[s]
                        .read(KEYS[k])
                        .unwrap()
                        .map(|e| (e.version, e.value.as_u64().unwrap() as u8));
                    assert_eq!(got, m.visible(s, KEYS[k]), "{op:?}");
                }
                Op::List(s, p) => {
                    let pat = Pattern::parse(PATTERNS[p]).unwrap();
                    let want: Vec<String> =
                        m.keys(s).into_iter().filter(|k| pat.matches(k)).collect();
                    assert_eq!(scopes[s].list_keys(PATTERNS[p]).unwrap(), want, "{op:?}");
                }
                Op::ReadName(s, n) => {
                    let want: Vec<(String, u64, u8)> = m
                        .keys(s)
                        .into_iter()
                        .filter(|k| k.split_once('.').unwrap().1 == NAMES[n])
                        .map(|k| {
                            let (v, x) = m.visible(s, &k).unwrap();
                            (k, v, x)
                        })
                        .collect();
                    let got: Vec<(String, u64, u8)> = scopes[s]
                        .read_name(NAMES[n])
                        .unwrap()
                        .into_iter()
                        .map(|e| (e.key, e.version, e.value.as_u64().unwrap() as u8))
                        .collect();
                    assert_eq!(got, want, "{op:?}");
                }
                Op::DropRun(r) => {
                    let layer = r + 1;
                    let before = m.0.len();
                    m.0.retain(|(l, _), _| *l != layer);
                    assert_eq!(mind.drop_run(RUNS[r]).unwrap(), before - m.0.len());
                }
            }
        }
        // Final state: every scope shows exactly the model.
        for (s, scope) in scopes.iter().enumerate() {
            let want: Vec<String> = m.keys(s).into_iter().collect();
            assert_eq!(scope.list_keys("*").unwrap(), want);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn memory_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
            check(&Mind::memory(), &ops);
        }

        #[test]
        fn redb_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            let dir = tempfile::tempdir().unwrap();
            check(&Mind::open_redb(&dir.path().join("p.redb"), MindConfig::default()).unwrap(), &ops);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn redis_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            check(&super::redis_mind(MindConfig::default()), &ops);
        }
    }
}

/// A private `redis-server` on `port` persisting every write (`appendfsync always`) in
/// `dir`, so a `kill -9` loses nothing it acknowledged.
fn start_private_redis(port: u16, dir: &std::path::Path) -> std::process::Child {
    let mut child = std::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
        .arg("--dir")
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server (scripts/test.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    let pong = || {
        std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "ping"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
    };
    while !pong() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redis-server did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn redis_killed_and_restarted_mid_writes_loses_no_acknowledged_write_and_serves_again() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = start_private_redis(port, dir.path());
    let mut cfg = RedisConfig::new(format!("redis://127.0.0.1:{port}/"));
    cfg.prefix = unique_prefix();
    cfg.connect_timeout = Duration::from_millis(300);
    cfg.io_timeout = Duration::from_millis(500);
    cfg.pool_size = 4;
    let mind = Arc::new(Mind::redis(cfg, MindConfig::default()).unwrap());

    // Four writers, each its own keys, through the pool; each records the writes Redis
    // acknowledged and checks every failure is a quick Unavailable.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (mind, stop) = (mind.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut acked, mut failed) = (Vec::new(), 0usize);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("w{w}.k{i}");
                    let t = Instant::now();
                    match mind.global().write(&key, json!(i), "w", None) {
                        Ok(_) => acked.push(key),
                        Err(MindError::Unavailable(_)) => {
                            failed += 1;
                            assert!(t.elapsed() < Duration::from_secs(3), "a write hung");
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(e) => panic!("a write failed otherwise than Unavailable: {e}"),
                    }
                    i += 1;
                }
                (acked, failed)
            })
        })
        .collect();

    std::thread::sleep(Duration::from_millis(400));
    server.kill().unwrap(); // SIGKILL, mid-writes
    server.wait().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let mut server = start_private_redis(port, dir.path());
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::Relaxed);
    let results: Vec<(Vec<String>, usize)> =
        writers.into_iter().map(|w| w.join().unwrap()).collect();

    let failed: usize = results.iter().map(|r| r.1).sum();
    assert!(
        failed > 0,
        "no write saw the server down: the kill came too late"
    );
    for (acked, _) in &results {
        assert!(!acked.is_empty());
        for key in acked {
            assert!(
                mind.global().read(key).unwrap().is_some(),
                "{key} was acknowledged before the kill and is gone"
            );
        }
    }
    // Back: every call works at once, none fails on a connection left from before.
    for i in 0..20 {
        mind.global()
            .write(&format!("after.{i}"), json!(i), "w", None)
            .unwrap_or_else(|e| panic!("call {i} after the restart failed: {e}"));
    }

    // Restarted while idle: the pool is full of connections to the old process, and
    // the first call after the restart must still work.
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let mind = mind.clone();
            std::thread::spawn(move || mind.global().read("after.0").unwrap())
        })
        .collect();
    for r in readers {
        assert!(r.join().unwrap().is_some());
    }
    server.kill().unwrap();
    server.wait().unwrap();
    let mut server = start_private_redis(port, dir.path());
    std::thread::sleep(Duration::from_millis(1200));
    for i in 0..8 {
        let e = mind
            .global()
            .read(&format!("after.{i}"))
            .unwrap_or_else(|e| panic!("read {i} after an idle restart failed: {e}"));
        assert!(e.is_some(), "after.{i} is gone");
    }
    server.kill().unwrap();
    server.wait().unwrap();
}

/// The writer child of the test below: global writes (durable) interleaved with bursts
/// of run scratch (not fsynced), each acknowledged on stdout, until it is killed.
#[test]
fn redb_kill_child_writer() {
    let Ok(path) = std::env::var("NEURALCORE_TEST_MIND_KILL_CHILD") else {
        return;
    };
    use std::io::Write;
    let m = Mind::open_redb(std::path::Path::new(&path), MindConfig::default()).unwrap();
    let mut out = std::io::stdout().lock();
    for i in 0u64.. {
        let run = m.run(&format!("run-{i}")).unwrap();
        for j in 0..20 {
            run.write(&format!("scratch.{j}"), json!(j), "w", None)
                .unwrap();
        }
        m.global()
            .write(&format!("acked.{i}"), json!(i), "w", None)
            .unwrap();
        writeln!(out, "acked {i}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn redb_killed_mid_writes_keeps_every_acknowledged_global_write_and_opens_clean() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mind.redb");
    for round in 0..3u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "redb_kill_child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("NEURALCORE_TEST_MIND_KILL_CHILD", &path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut last = None;
        // Kill at a different point each round: after 50, 137 and 311 acknowledged.
        let at = [50u64, 137, 311][round as usize];
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.unwrap();
            if let Some(n) = line.strip_prefix("acked ") {
                let n: u64 = n.parse().unwrap();
                last = Some(n);
                if n >= at {
                    child.kill().unwrap(); // SIGKILL, mid-writes
                    break;
                }
            }
        }
        child.wait().unwrap();
        let last = last.expect("the child acknowledged nothing");
        let m = Mind::open_redb(&path, MindConfig::default()).unwrap();
        for i in 0..=last {
            assert_eq!(
                m.global()
                    .read(&format!("acked.{i}"))
                    .unwrap()
                    .map(|e| e.value),
                Some(json!(i)),
                "round {round}: acked.{i} was acknowledged before the kill and is gone"
            );
        }
        for i in 0..=last {
            let keys = m
                .run(&format!("run-{i}"))
                .unwrap()
                .list_keys("scratch.*")
                .unwrap();
            // Run i's scratch was committed before the durable acked.i: all of it is
            // there.
            assert_eq!(keys.len(), 20, "run-{i}: {keys:?}");
        }
        // The next round's child starts over from acked.0 on the same file.
        drop(m);
        std::fs::remove_file(&path).unwrap();
    }
}
