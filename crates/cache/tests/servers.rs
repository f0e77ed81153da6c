//! The conformance suite on the server-backed tiers ([`RedisTier`], [`PgTier`]) against
//! real servers, and what only they do: key layout, expiry against tags, bounds,
//! reconnecting, failing fast when the server is down or silent, and never showing a
//! password.
//!
//! The servers are the ones `scripts/test.sh` starts, found the way the other crates'
//! tests find them:
//!
//! * Redis: `NEURALCORE_TEST_REDIS_URL` (as in `crates/mind/tests/mind.rs`). Without it
//!   the Redis tests fail, saying so.
//! * PostgreSQL: `NEURALCORE_TEST_PG_URL` (`eval "$(scripts/postgres.sh | tail -n1)"`, as
//!   in `crates/memory-pg/tests/pg.rs`). Without it each PostgreSQL test prints why it
//!   skipped and passes.
//!
//! Every test uses its own key prefix or table (process id, time, counter), removed at
//! the end even when the test fails. The tests of down servers need neither variable.
// With a feature off, the helpers only the other tier's tests use go unused.
#![cfg_attr(
    not(all(feature = "redis", feature = "postgres")),
    allow(dead_code, unused_imports)
)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neuralcore_cache::{Cache, KeyBuilder, MemoryTier, Op, Tier, TierError};

#[cfg(feature = "postgres")]
#[path = "../../memory-pg/tests/support/private_pg.rs"]
mod private_pg;

/// A name no other test or run uses: process id, time and a counter.
fn unique(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{what}_{}_{nanos}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// `host:port` of a `scheme://[user[:password]@]host:port/...` URL.
fn host_port(url: &str) -> &str {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority.rsplit_once('@').map_or(authority, |(_, h)| h)
}

/// `url` pointing at `addr` instead of its own host and port.
fn retarget(url: &str, addr: SocketAddr) -> String {
    url.replacen(host_port(url), &addr.to_string(), 1)
}

/// What a [`Proxy`] does with a new connection.
const FORWARD: u8 = 0;
/// Accept and close at once (a server restarting).
const REJECT: u8 = 1;

/// A TCP proxy in front of a real server, whose connections can be cut.
struct Proxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn new(upstream: &str, mode: u8) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let upstream = upstream.to_string();
        let mode = Arc::new(AtomicU8::new(mode));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (m, held) = (mode.clone(), conns.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if m.load(Ordering::Relaxed) == REJECT {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let mut h = held.lock().unwrap();
                h.push(client.try_clone().unwrap());
                h.push(server.try_clone().unwrap());
                drop(h);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr, mode, conns }
    }

    /// Cut every connection made so far.
    fn cut(&self) {
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    fn set_mode(&self, mode: u8) {
        self.mode.store(mode, Ordering::Relaxed);
    }
}

/// A server that accepts connections and never answers.
fn silent_server() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    // Never accepted: the kernel completes the handshakes, nobody reads or writes.
    (l, addr)
}

/// What both server tiers must do beyond the conformance suite: an expired entry is not
/// counted by `delete`/`delete_tag`, and an old tag does not reach an expired entry
/// written again under other tags.
fn expired_entries_are_not_counted_or_reached_by_old_tags(t: &dyn Tier) {
    let ttl = Some(Duration::from_millis(150));
    let after = Duration::from_millis(500);
    t.put("x/a", b"a".to_vec(), ttl, &["old".into()]).unwrap();
    t.put("x/b", b"b".to_vec(), None, &["old".into()]).unwrap();
    std::thread::sleep(after);
    assert_eq!(t.get("x/a").unwrap(), None);
    assert_eq!(t.delete_tag("old").unwrap(), 1);
    assert_eq!(t.get("x/b").unwrap(), None);

    t.put("x/c", b"c".to_vec(), ttl, &["old2".into()]).unwrap();
    std::thread::sleep(after);
    t.put("x/c", b"c2".to_vec(), None, &["new".into()]).unwrap();
    assert_eq!(t.delete_tag("old2").unwrap(), 0);
    assert_eq!(t.get("x/c").unwrap().as_deref(), Some(&b"c2"[..]));
    assert_eq!(t.delete_tag("new").unwrap(), 1);

    t.put("x/d", b"d".to_vec(), ttl, &[]).unwrap();
    std::thread::sleep(after);
    assert!(!t.delete("x/d").unwrap());
    assert_eq!(t.clear().unwrap(), 0);
}

/// A cache with `down` as hot tier and a memory tier as cold: it still serves, from
/// cold, quickly, counting the hot tier's failure.
fn a_cache_over_a_down_tier_serves_from_the_other(down: Arc<dyn Tier>) {
    let name = down.name();
    let start = Instant::now();
    let cache = Cache::new(Some(down), Some(Arc::new(MemoryTier::new())));
    let key = KeyBuilder::new("acme", Op::Search).str("q").finish();
    assert!(cache.get(&key).is_none());
    cache.put(&key, b"hits", None, &[]);
    let hit = cache.get(&key).unwrap();
    assert_eq!((hit.value.as_slice(), hit.tier), (&b"hits"[..], "memory"));
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let s = cache.stats();
    let hot = &s.tiers[0];
    assert_eq!((hot.role, hot.name), ("hot", name));
    assert_eq!(hot.errors, 1, "{hot:?}");
    assert!(hot.bypassed >= 2, "{hot:?}");
}

/// `f` fails within a second with an error of `tier`.
fn fails_fast<T: std::fmt::Debug>(
    tier: &str,
    f: impl FnOnce() -> Result<T, TierError>,
) -> TierError {
    let start = Instant::now();
    let e = f().expect_err("a down server must fail the call");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "took {:?}: {e}",
        start.elapsed()
    );
    assert_eq!(e.tier, tier, "{e}");
    e
}

#[cfg(feature = "redis")]
mod redis_tier {
    use super::*;
    use neuralcore_cache::{RedisTier, RedisTimeouts};

    fn redis_url() -> String {
        std::env::var("NEURALCORE_TEST_REDIS_URL").unwrap_or_else(|_| {
            panic!(
                "NEURALCORE_TEST_REDIS_URL is not set: the Redis tests need a real \
                 redis-server. Run scripts/test.sh (it installs and starts one on \
                 127.0.0.1), or start one and export \
                 NEURALCORE_TEST_REDIS_URL=redis://127.0.0.1:PORT/"
            )
        })
    }

    /// Timeouts for the tests on the real server: roomy, so a loaded machine does not
    /// make them flaky (the defaults are checked on their own).
    fn roomy() -> RedisTimeouts {
        RedisTimeouts::all(Duration::from_secs(2))
    }

    /// Every key of the test's prefix on the server.
    fn keys_under(prefix: &str) -> Vec<String> {
        let client = redis::Client::open(redis_url()).unwrap();
        let mut con = client.get_connection().unwrap();
        let mut cursor = 0u64;
        let mut all = Vec::new();
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}*"))
                .arg("COUNT")
                .arg(1000)
                .query(&mut con)
                .unwrap();
            all.extend(keys);
            if next == 0 {
                return all;
            }
            cursor = next;
        }
    }

    /// Tiers under one base prefix, cleared when the test ends (even by a panic).
    struct Prefixes {
        base: String,
        made: Mutex<Vec<Arc<RedisTier>>>,
        n: AtomicUsize,
    }

    impl Prefixes {
        fn new() -> Prefixes {
            Prefixes {
                base: format!("{}:", unique("nctest-cache")),
                made: Mutex::new(Vec::new()),
                n: AtomicUsize::new(0),
            }
        }

        fn fresh_with(&self, timeouts: RedisTimeouts) -> Arc<RedisTier> {
            let n = self.n.fetch_add(1, Ordering::Relaxed);
            let prefix = format!("{}{n}:", self.base);
            let t = Arc::new(RedisTier::open(&redis_url(), &prefix, timeouts).unwrap());
            self.made.lock().unwrap().push(t.clone());
            t
        }

        fn fresh(&self) -> Arc<RedisTier> {
            self.fresh_with(roomy())
        }
    }

    impl Drop for Prefixes {
        fn drop(&mut self) {
            for t in self.made.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                let _ = t.clear();
            }
        }
    }

    #[test]
    fn redis_tier_conforms() {
        let p = Prefixes::new();
        neuralcore_cache::conformance::run_all(&mut || p.fresh() as Arc<dyn Tier>);
        let base = p.base.clone();
        drop(p);
        assert_eq!(keys_under(&base), Vec::<String>::new());
    }

    #[test]
    fn redis_keys_stay_under_the_prefix_and_expire_with_their_entry() {
        let p = Prefixes::new();
        let t = p.fresh();
        let tags = vec!["c:a".to_string(), "op:x".to_string()];
        t.put("k/1", b"v".to_vec(), Some(Duration::from_secs(60)), &tags)
            .unwrap();
        t.put("k/2", b"w".to_vec(), None, &tags[..1]).unwrap();
        let mut keys = keys_under(&p.base);
        keys.sort();
        let pre = t.prefix();
        let mut want = vec![
            format!("{pre}tag:c:a"),
            format!("{pre}tag:op:x"),
            format!("{pre}tags-of:k/1"),
            format!("{pre}tags-of:k/2"),
            format!("{pre}v:k/1"),
            format!("{pre}v:k/2"),
        ];
        want.sort();
        assert_eq!(keys, want);
        let client = redis::Client::open(redis_url()).unwrap();
        let mut con = client.get_connection().unwrap();
        let pttl = |con: &mut redis::Connection, k: String| -> i64 {
            redis::cmd("PTTL").arg(k).query(con).unwrap()
        };
        for k in [format!("{pre}v:k/1"), format!("{pre}tags-of:k/1")] {
            let ms = pttl(&mut con, k.clone());
            assert!(ms > 50_000 && ms <= 60_000, "{k}: {ms}");
        }
        assert_eq!(pttl(&mut con, format!("{pre}v:k/2")), -1);
        // A prefix sharing this one's start is someone else's: clear leaves it alone.
        let other = format!("{pre}x");
        let _: () = redis::cmd("SET")
            .arg(&other)
            .arg("theirs")
            .query(&mut con)
            .unwrap();
        assert_eq!(t.clear().unwrap(), 2);
        assert_eq!(keys_under(&p.base), vec![other.clone()]);
        let _: i64 = redis::cmd("DEL").arg(&other).query(&mut con).unwrap();
    }

    #[test]
    fn redis_expired_entries_are_not_counted_or_reached_by_old_tags() {
        let p = Prefixes::new();
        expired_entries_are_not_counted_or_reached_by_old_tags(p.fresh().as_ref());
    }

    #[test]
    fn redis_tag_deletion_goes_in_batches() {
        let p = Prefixes::new();
        let t = p.fresh();
        for i in 0..2500 {
            t.put(&format!("b/{i}"), vec![1], None, &["all".into()])
                .unwrap();
        }
        assert_eq!(t.delete_tag("all").unwrap(), 2500);
        assert_eq!(t.usage().unwrap().entries, 0);
    }

    #[test]
    fn redis_default_timeouts_serve() {
        let p = Prefixes::new();
        let t = p.fresh_with(RedisTimeouts::default());
        t.put("d/1", b"x".to_vec(), None, &[]).unwrap();
        assert_eq!(t.get("d/1").unwrap().as_deref(), Some(&b"x"[..]));
        t.ping().unwrap();
        assert_eq!(t.name(), "redis");
    }

    #[test]
    fn a_down_redis_fails_fast_and_the_cache_serves_from_cold() {
        let prefix = format!("{}:", unique("nctest-cache-down"));
        let start = Instant::now();
        let t = RedisTier::open("redis://127.0.0.1:1/", &prefix, RedisTimeouts::default()).unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        fails_fast("redis", || t.get("k"));
        fails_fast("redis", || t.put("k", b"v".to_vec(), None, &[]));
        fails_fast("redis", || t.ping());
        a_cache_over_a_down_tier_serves_from_the_other(Arc::new(t));
    }

    #[test]
    fn a_silent_redis_fails_fast() {
        let (_held, addr) = silent_server();
        let prefix = format!("{}:", unique("nctest-cache-silent"));
        let start = Instant::now();
        let t = RedisTier::open(
            &format!("redis://{addr}/"),
            &prefix,
            RedisTimeouts::default(),
        )
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        fails_fast("redis", || t.get("k"));
    }

    #[test]
    fn redis_reconnects_after_a_failure() {
        let url = redis_url();
        let proxy = Proxy::new(host_port(&url), REJECT);
        let prefix = format!("{}:", unique("nctest-cache-proxy"));
        // Down at start: opening still gives a tier, whose calls fail.
        let t = RedisTier::open(&retarget(&url, proxy.addr), &prefix, roomy()).unwrap();
        assert!(t.get("k").is_err());
        // Back: the next call connects.
        proxy.set_mode(FORWARD);
        t.put("k", b"v".to_vec(), None, &["t".into()]).unwrap();
        // Every connection cut: the next call fails, the one after reconnects.
        proxy.cut();
        assert!(t.get("k").is_err());
        assert_eq!(t.get("k").unwrap().as_deref(), Some(&b"v"[..]));
        assert_eq!(t.clear().unwrap(), 1);
    }

    #[test]
    fn no_redis_error_shows_the_password() {
        let secret = "s3cr3t-pw-xyz";
        let check = |e: &TierError| {
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(secret), "{shown}");
        };
        let prefix = format!("{}:", unique("nctest-cache-pw"));
        // Down.
        let t = RedisTier::open(
            &format!("redis://user:{secret}@127.0.0.1:1/"),
            &prefix,
            RedisTimeouts::default(),
        )
        .unwrap();
        for e in [
            t.get("k").unwrap_err(),
            t.put("k", vec![], None, &[]).unwrap_err(),
            t.ping().unwrap_err(),
            t.usage().unwrap_err(),
        ] {
            check(&e);
            assert!(e.message.contains("redis://user:***@127.0.0.1:1"), "{e}");
        }
        assert!(!format!("{t:?}").contains(secret));
        // Malformed.
        let e = RedisTier::open(
            &format!("redis://user:{secret}@host:notaport/"),
            &prefix,
            RedisTimeouts::default(),
        )
        .unwrap_err();
        check(&e);
        // A real server refusing the password (it has none set, or another one).
        let url = redis_url();
        if !url.contains('@') {
            let wrong = url.replacen("://", &format!("://:{secret}@"), 1);
            match RedisTier::open(&wrong, &prefix, RedisTimeouts::default()) {
                Err(e) => check(&e),
                Ok(t) => {
                    if let Err(e) = t.get("k") {
                        check(&e);
                    }
                }
            }
        }
    }
}

#[cfg(feature = "postgres")]
mod pg_tier {
    use super::*;
    use neuralcore_cache::{PgTier, PgTierOptions};

    fn url() -> Option<String> {
        match std::env::var("NEURALCORE_TEST_PG_URL") {
            Ok(u) if !u.is_empty() => Some(u),
            _ => {
                eprintln!("skipped: NEURALCORE_TEST_PG_URL is not set (see scripts/postgres.sh)");
                None
            }
        }
    }

    /// Options for the tests on the real server: roomy timeouts, so a loaded machine
    /// does not make them flaky (the defaults are checked on their own).
    fn roomy() -> PgTierOptions {
        PgTierOptions {
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(5),
            max_bytes: None,
        }
    }

    /// Fresh tables for one test, dropped when it ends (even by a panic).
    struct Tables {
        url: String,
        made: Mutex<Vec<Arc<PgTier>>>,
    }

    impl Tables {
        fn new() -> Option<Tables> {
            Some(Tables {
                url: url()?,
                made: Mutex::new(Vec::new()),
            })
        }

        fn fresh_with(&self, opts: PgTierOptions) -> Arc<PgTier> {
            let t = Arc::new(PgTier::open(&self.url, &unique("nc_cache"), opts).unwrap());
            self.made.lock().unwrap().push(t.clone());
            t
        }

        fn fresh(&self) -> Arc<PgTier> {
            self.fresh_with(roomy())
        }
    }

    impl Drop for Tables {
        fn drop(&mut self) {
            let made = self.made.lock().unwrap_or_else(|e| e.into_inner());
            let names: Vec<String> = made.iter().map(|t| t.table().to_string()).collect();
            for t in made.iter() {
                let _ = t.drop_table();
            }
            if std::thread::panicking() {
                return;
            }
            // None is left behind.
            let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
            for n in names {
                let row = c.query_one("SELECT to_regclass($1)::text", &[&n]).unwrap();
                assert_eq!(row.get::<_, Option<String>>(0), None, "{n} left behind");
            }
        }
    }

    #[test]
    fn pg_tier_conforms() {
        let Some(tables) = Tables::new() else { return };
        neuralcore_cache::conformance::run_all(&mut || tables.fresh() as Arc<dyn Tier>);
    }

    #[test]
    fn pg_expired_entries_are_not_counted_or_reached_by_old_tags() {
        let Some(tables) = Tables::new() else { return };
        expired_entries_are_not_counted_or_reached_by_old_tags(tables.fresh().as_ref());
    }

    #[test]
    fn pg_tier_stays_within_its_bytes_dropping_the_oldest() {
        let Some(tables) = Tables::new() else { return };
        let t = tables.fresh_with(PgTierOptions {
            max_bytes: Some(50_000),
            ..roomy()
        });
        neuralcore_cache::conformance::stays_within_50k_bytes_dropping_the_oldest(t.as_ref());
    }

    #[test]
    fn pg_two_tiers_on_one_table_share_it() {
        let Some(tables) = Tables::new() else { return };
        let a = tables.fresh();
        let b = PgTier::open(&tables.url, a.table(), roomy()).unwrap();
        a.put("s/1", b"x".to_vec(), None, &["t".into()]).unwrap();
        assert_eq!(b.get("s/1").unwrap().as_deref(), Some(&b"x"[..]));
        assert_eq!(b.delete_tag("t").unwrap(), 1);
        assert!(a.get("s/1").unwrap().is_none());
    }

    #[test]
    fn pg_default_options_serve() {
        let Some(tables) = Tables::new() else { return };
        let t = tables.fresh_with(PgTierOptions::default());
        t.put("d/1", b"x".to_vec(), Some(Duration::from_secs(60)), &[])
            .unwrap();
        assert_eq!(t.get("d/1").unwrap().as_deref(), Some(&b"x"[..]));
        t.ping().unwrap();
        assert_eq!(t.name(), "postgres");
    }

    #[test]
    fn a_down_postgres_fails_fast_and_the_cache_serves_from_cold() {
        let start = Instant::now();
        let t = PgTier::open(
            "postgres://postgres@127.0.0.1:1/postgres",
            "nc_cache_down",
            PgTierOptions::default(),
        )
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        fails_fast("postgres", || t.get("k"));
        fails_fast("postgres", || t.put("k", b"v".to_vec(), None, &[]));
        fails_fast("postgres", || t.ping());
        a_cache_over_a_down_tier_serves_from_the_other(Arc::new(t));
    }

    #[test]
    fn a_silent_postgres_fails_fast() {
        let (_held, addr) = silent_server();
        let start = Instant::now();
        let t = PgTier::open(
            &format!("postgres://postgres@{addr}/postgres"),
            "nc_cache_silent",
            PgTierOptions::default(),
        )
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(1));
        fails_fast("postgres", || t.get("k"));
        fails_fast("postgres", || t.get("k"));
    }

    #[test]
    fn pg_reconnects_after_a_failure_and_creates_its_table() {
        let Some(tables) = Tables::new() else { return };
        let proxy = Proxy::new(host_port(&tables.url), REJECT);
        let table = unique("nc_cache");
        // Down at start: opening still gives a tier, whose calls fail.
        let t =
            Arc::new(PgTier::open(&retarget(&tables.url, proxy.addr), &table, roomy()).unwrap());
        tables.made.lock().unwrap().push(t.clone());
        assert!(t.get("k").is_err());
        // Back: the next call connects and creates the table.
        proxy.set_mode(FORWARD);
        t.put("k", b"v".to_vec(), None, &["t".into()]).unwrap();
        // The connection cut: the next call fails, the one after reconnects.
        proxy.cut();
        assert!(t.get("k").is_err());
        assert_eq!(t.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn no_postgres_error_shows_the_password() {
        let secret = "s3cr3t-pw-xyz";
        let check = |e: &TierError| {
            let shown = format!("{e} {e:?}");
            assert!(!shown.contains(secret), "{shown}");
        };
        for url in [
            format!("postgres://postgres:{secret}@127.0.0.1:1/postgres"),
            format!("host=127.0.0.1 port=1 user=postgres password={secret} dbname=postgres"),
        ] {
            let t = PgTier::open(&url, "nc_cache_pw", PgTierOptions::default()).unwrap();
            for e in [
                t.get("k").unwrap_err(),
                t.put("k", vec![], None, &[]).unwrap_err(),
                t.ping().unwrap_err(),
                t.usage().unwrap_err(),
            ] {
                check(&e);
                assert!(
                    e.message
                        .contains("postgres://postgres@127.0.0.1:1/postgres"),
                    "{e}"
                );
            }
            assert!(!format!("{t:?}").contains(secret));
        }
        let e = PgTier::open(
            &format!("postgres://postgres:{secret}@host:notaport/db"),
            "nc_cache_pw",
            PgTierOptions::default(),
        )
        .unwrap_err();
        check(&e);
    }

    /// PostgreSQL killed (`kill -9`, every process of a private server) and restarted
    /// under a cache whose only tier it is, while four threads put and get: every call
    /// stays quick (the breaker skips the tier while it is down), no get ever returns a
    /// value that was not put under its key, what the tier acknowledged before the kill
    /// is there after the crash recovery, and the same cache serves from PostgreSQL again
    /// once it is back, without being reopened.
    #[test]
    fn postgres_killed_and_restarted_under_the_cache() {
        let Some(bin) = crate::private_pg::bin() else {
            return;
        };
        let mut pg = crate::private_pg::Private::init(bin);
        let tier = Arc::new(
            PgTier::open(
                &pg.url(),
                "nc_cache_restart",
                PgTierOptions {
                    connect_timeout: Duration::from_secs(2),
                    statement_timeout: Duration::from_secs(2),
                    max_bytes: None,
                },
            )
            .unwrap(),
        );
        // Acknowledged by the tier before the kill: must survive it.
        for i in 0..50 {
            let v = format!("kept {i}").into_bytes();
            tier.put(&format!("kept/{i}"), v, None, &["kept".into()])
                .unwrap();
        }
        let cache = Arc::new(Cache::new(None, Some(tier.clone() as Arc<dyn Tier>)));
        #[derive(Default)]
        struct Seen {
            hits_after: Vec<Instant>,
            slowest: Duration,
            wrong: Vec<String>,
        }
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (cache, seen, stop) = (cache.clone(), seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        let name = |j: u64| format!("t{t}-k{}", j % 16);
                        let key =
                            |j: u64| KeyBuilder::new("acme", Op::Search).str(&name(j)).finish();
                        let t0 = Instant::now();
                        cache.put(&key(i), format!("{}={i}", name(i)).as_bytes(), None, &[]);
                        let hit = cache.get(&key(i + 7));
                        let took = t0.elapsed();
                        let mut s = seen.lock().unwrap();
                        s.slowest = s.slowest.max(took);
                        if let Some(h) = hit {
                            let v = String::from_utf8_lossy(&h.value).to_string();
                            if !v.starts_with(&format!("{}=", name(i + 7))) || h.tier != "postgres"
                            {
                                s.wrong
                                    .push(format!("{} -> {v} from {}", name(i + 7), h.tier));
                            }
                            s.hits_after.push(Instant::now());
                        }
                        drop(s);
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
            })
            .collect();

        std::thread::sleep(Duration::from_millis(1500));
        let hits_before = seen.lock().unwrap().hits_after.len();
        pg.kill();
        let killed = Instant::now();
        std::thread::sleep(Duration::from_millis(1000));
        pg.start();
        let back = Instant::now();
        // Served from PostgreSQL again: the breaker rests RETRY_AFTER, then tries.
        let limit = neuralcore_cache::RETRY_AFTER + Duration::from_secs(10);
        loop {
            let recovered = seen.lock().unwrap().hits_after.iter().any(|t| *t > back);
            if recovered {
                break;
            }
            assert!(
                back.elapsed() < limit,
                "no hit from PostgreSQL within {limit:?} of its restart"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }

        let s = seen.lock().unwrap();
        assert!(hits_before > 0, "no hit before the kill");
        assert!(s.wrong.is_empty(), "wrong values served: {:?}", s.wrong);
        assert!(
            s.slowest < Duration::from_secs(3),
            "a put and get took {:?}",
            s.slowest
        );
        let stats = cache.stats();
        let pg_stats = &stats.tiers[0];
        assert!(
            pg_stats.errors >= 1,
            "the kill was never seen: {pg_stats:?}"
        );
        assert!(pg_stats.bypassed >= 1, "{pg_stats:?}");
        assert!(stats.ops.iter().all(|o| o.corrupt == 0), "{:?}", stats.ops);
        for i in 0..50 {
            assert_eq!(
                tier.get(&format!("kept/{i}")).unwrap(),
                Some(format!("kept {i}").into_bytes()),
                "kept/{i} was acknowledged before the kill"
            );
        }
        eprintln!(
            "{hits_before} hits before the kill, {} in all; {} errors, {} calls bypassed; \
             slowest put+get {:?}; back {:?} after the kill",
            s.hits_after.len(),
            pg_stats.errors,
            pg_stats.bypassed,
            s.slowest,
            back - killed
        );
        drop(s);
    }
}
