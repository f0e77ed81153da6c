//! The Redis backend, on the `redis` crate's synchronous API (no async runtime).
//!
//! Layout under `<prefix>:<tenant>:` (a layer tag `g` for global, `r:<run id>` for a
//! run):
//!
//! | Redis key | type | holds |
//! |---|---|---|
//! | `<prefix>:<tenant>:<tag>:<key>` | hash | `v` version, `w` writer, `t` written_at_ms, `ttl` (empty = none), `j` value JSON; a real `PEXPIRE` when the entry has a TTL |
//! | `<prefix>:<tenant>:<tag>#keys` | sorted set (all scores 0) | the layer's keys, for ordered prefix listing with `ZRANGEBYLEX`; a run's index expires with the run TTL |
//! | `<prefix>:<tenant>:<tag>#changes` | pub/sub channel | `w <version> <key>`, `d <key>`, `x` (layer dropped) |
//!
//! Every write, compare-and-set, delete and run drop is one Lua script, so the version
//! check, the bump, the index and the notification are atomic: concurrent writers never
//! lose a version. A batch of writes is one `MULTI`/`EXEC` pipeline of such scripts
//! (one round trip). Reads of a run scope fetch the run's and the global entry in one
//! pipeline. Index members of expired entries are dropped lazily when a listing finds
//! them gone. Scripts touch only keys under the layer they were given plus, for a run
//! write, the same key in the global layer; `drop_run` deletes keys it reads from the
//! index, which needs a single (non-cluster) Redis.
//!
//! Watch uses pub/sub: each watcher holds its own connection, subscribed to its layers'
//! channels before `watch` returns; a thread forwards messages to the [`Watch`] and
//! stops within 100 ms of the watch being dropped. Pub/sub is fire-and-forget: a
//! watcher that loses its connection gets an `Unavailable` error and its stream ends.
//!
//! Every call is bounded: connecting by `connect_timeout`, each read and write by
//! `io_timeout`; a refused, silent or slow server yields `MindError::Unavailable`. A
//! connection that failed is dropped, never reused; idle connections are pooled, and
//! one idle for over a second is checked with a PING before reuse, so after a server
//! restart the first call connects afresh instead of failing on a dead connection. A
//! server still loading its data after a restart (LOADING) is `Unavailable` too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neuralcore_core::settings::redact_url;
use redis::{Connection, ConnectionLike, RedisError, RedisResult};

use crate::error::{MindError, MindResult};
use crate::notify::{poisoned, Change, ChangeKind, Watch};
use crate::raw::{Layer, Outcome, Put, RawMind, Record};

/// Where and how to reach Redis.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://[user[:password]@]host:port/db`, or `rediss://` for TLS with
    /// `sslrootcert`, `sslcert` and `sslkey` parameters (see `neuralcore_redis`).
    pub url: String,
    /// First part of every Redis key; give each test run or deployment its own.
    pub prefix: String,
    /// Second part of every Redis key (`[A-Za-z0-9_-]`, 1–64 characters).
    pub tenant: String,
    /// Longest wait to open a connection (TCP connect and handshake).
    pub connect_timeout: Duration,
    /// Longest wait for each read or write on an open connection.
    pub io_timeout: Duration,
    /// Idle connections kept for reuse.
    pub pool_size: usize,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("tenant", &self.tenant)
            .field("connect_timeout", &self.connect_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

impl RedisConfig {
    /// Defaults for a URL: prefix `neuralcore`, tenant `default`, 1 s timeouts.
    pub fn new(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            prefix: "neuralcore".into(),
            tenant: "default".into(),
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            pool_size: 8,
        }
    }
}

const PUT: &str = r"
local cur = redis.call('HGET', KEYS[1], 'v')
local v = 0
if cur then
  v = tonumber(cur)
elseif KEYS[3] ~= KEYS[1] then
  local b = redis.call('HGET', KEYS[3], 'v')
  if b then v = tonumber(b) end
end
if ARGV[1] ~= '' and tonumber(ARGV[1]) ~= v then return {0, v} end
v = v + 1
redis.call('HSET', KEYS[1], 'v', v, 'w', ARGV[2], 't', ARGV[3], 'ttl', ARGV[4], 'j', ARGV[5])
if ARGV[4] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[4]) else redis.call('PERSIST', KEYS[1]) end
redis.call('ZADD', KEYS[2], 0, ARGV[6])
if ARGV[8] ~= '' then redis.call('PEXPIRE', KEYS[2], ARGV[8]) end
redis.call('PUBLISH', ARGV[7], 'w ' .. v .. ' ' .. ARGV[6])
return {1, v}
";

const DELETE: &str = r"
local n = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if n == 1 then redis.call('PUBLISH', ARGV[2], 'd ' .. ARGV[1]) end
return n
";

const DROP: &str = r"
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local n = 0
for i = 1, #members do
  n = n + redis.call('DEL', ARGV[1] .. members[i])
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'x')
return n
";

/// Poll interval of watcher threads (how soon a dropped watch is noticed).
const WATCH_POLL: Duration = Duration::from_millis(100);

/// An idle connection older than this is checked with a PING before it is used again.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The Redis backend (see [`crate::Mind::redis`]).
pub(crate) struct RedisMind {
    client: redis::Client,
    cfg: RedisConfig,
    /// The URL without its password, for messages.
    shown: String,
    /// `<prefix>:<tenant>:`
    base: String,
    /// Idle connections, each with when it was last used.
    pool: Mutex<Vec<(Connection, Instant)>>,
}

/// The connection failed (I/O, a timeout, refused, dropped): the server is gone or
/// unreachable.
fn connection_failed(e: &RedisError) -> bool {
    neuralcore_redis::connection_failed(e)
}

/// Worth trying again later: the connection failed, or the server said to wait (still
/// loading its data after a restart, a failover under way: LOADING, TRYAGAIN,
/// MASTERDOWN, CLUSTERDOWN).
fn transient(e: &RedisError) -> bool {
    use redis::ServerErrorKind as K;
    // A transaction (a batch write) aborted because its commands were refused with
    // LOADING and the like is as transient as one such command.
    connection_failed(e)
        || matches!(e.retry_method(), redis::RetryMethod::WaitAndRetry)
        || e.clone().into_server_errors().is_some_and(|errs| {
            errs.iter().any(|(_, se)| {
                matches!(
                    se.kind(),
                    Some(K::BusyLoading | K::TryAgain | K::MasterDown | K::ClusterDown)
                )
            })
        })
}

impl RedisMind {
    pub(crate) fn open(cfg: RedisConfig) -> MindResult<RedisMind> {
        crate::key::validate_id(&cfg.tenant, "tenant")?;
        if cfg.prefix.is_empty() || cfg.prefix.contains([':', '#']) || cfg.prefix.len() > 128 {
            return Err(MindError::InvalidKey {
                key: cfg.prefix.clone(),
                reason: "a Redis prefix must be 1-128 characters without ':' or '#'".into(),
            });
        }
        let shown = redact_url(&cfg.url);
        let client = neuralcore_redis::client(&cfg.url, |i| i)
            .map_err(|e| MindError::Backend(format!("redis url {shown}: {e}")))?;
        let m = RedisMind {
            client,
            base: format!("{}:{}:", cfg.prefix, cfg.tenant),
            cfg,
            shown,
            pool: Mutex::new(Vec::new()),
        };
        // Fail early, within the timeouts, when the server is not there.
        m.with_conn(|c| redis::cmd("PING").query::<String>(c))?;
        Ok(m)
    }

    fn err(&self, e: RedisError) -> MindError {
        if transient(&e) {
            MindError::Unavailable(format!("redis at {}: {e}", self.shown))
        } else {
            MindError::Backend(format!("redis: {e}"))
        }
    }

    fn connect(&self) -> MindResult<Connection> {
        let con = self
            .client
            .get_connection_with_timeout(self.cfg.connect_timeout)
            .map_err(|e| {
                if neuralcore_redis::is_tls_refusal(&e) {
                    // The server is there and refuses us: retrying will not help.
                    MindError::Backend(format!("redis at {}: TLS: {e}", self.shown))
                } else {
                    MindError::Unavailable(format!(
                        "cannot connect to redis at {} within {:?}: {e}",
                        self.shown, self.cfg.connect_timeout
                    ))
                }
            })?;
        con.set_read_timeout(Some(self.cfg.io_timeout))
            .and_then(|_| con.set_write_timeout(Some(self.cfg.io_timeout)))
            .map_err(|e| self.err(e))?;
        Ok(con)
    }

    /// Runs `f` on a pooled connection; a connection that failed is dropped, and with a
    /// failure of the connection itself (I/O, timeout, refused) every idle one too.
    fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> RedisResult<T>) -> MindResult<T> {
        let mut con = self.take()?;
        match f(&mut con) {
            Ok(v) => {
                self.give_back(con)?;
                Ok(v)
            }
            Err(e) => {
                if connection_failed(&e) {
                    // The server went away (a restart, a failover): every idle
                    // connection to it is as dead as this one.
                    self.pool.lock().map_err(poisoned)?.clear();
                } else if con.is_open() {
                    self.give_back(con)?;
                }
                Err(self.err(e))
            }
        }
    }

    /// An idle connection, or a new one. One idle for longer than [`IDLE_CHECK`] is
    /// asked for a PING first: the server may have restarted since (every idle
    /// connection is then dropped), and a command sent on a dead connection fails even
    /// though the server is back.
    fn take(&self) -> MindResult<Connection> {
        let pooled = self.pool.lock().map_err(poisoned)?.pop();
        match pooled {
            Some((con, used)) if used.elapsed() < IDLE_CHECK => Ok(con),
            Some((mut con, _)) => match redis::cmd("PING").query::<String>(&mut con) {
                Err(e) if connection_failed(&e) => {
                    self.pool.lock().map_err(poisoned)?.clear();
                    self.connect()
                }
                // Alive, though the server refused the PING (still loading, say): the
                // call itself will get the same answer and say so.
                _ => Ok(con),
            },
            None => self.connect(),
        }
    }

    fn give_back(&self, con: Connection) -> MindResult<()> {
        let mut pool = self.pool.lock().map_err(poisoned)?;
        if pool.len() < self.cfg.pool_size {
            pool.push((con, Instant::now()));
        }
        Ok(())
    }

    fn tag(&self, layer: &Layer) -> String {
        match layer {
            Layer::Global => format!("{}g", self.base),
            Layer::Run(id) => format!("{}r:{id}", self.base),
        }
    }

    fn entry_key(&self, layer: &Layer, key: &str) -> String {
        format!("{}:{key}", self.tag(layer))
    }

    fn index_key(&self, layer: &Layer) -> String {
        format!("{}#keys", self.tag(layer))
    }

    fn channel(&self, layer: &Layer) -> String {
        format!("{}#changes", self.tag(layer))
    }

    /// The keys of a layer's index starting with `prefix` (may include expired ones).
    fn index_range(&self, layer: &Layer, prefix: &str) -> MindResult<Vec<String>> {
        let idx = self.index_key(layer);
        let (lo, hi): (Vec<u8>, Vec<u8>) = if prefix.is_empty() {
            (b"-".to_vec(), b"+".to_vec())
        } else {
            let mut hi = format!("({prefix}").into_bytes();
            hi.push(0xff);
            (format!("[{prefix}").into_bytes(), hi)
        };
        self.with_conn(|c| redis::cmd("ZRANGEBYLEX").arg(&idx).arg(lo).arg(hi).query(c))
    }

    /// Best effort: forget index members whose entries are gone.
    fn forget(&self, layer: &Layer, stale: &[&str]) {
        if stale.is_empty() {
            return;
        }
        let idx = self.index_key(layer);
        let _ = self.with_conn(|c| redis::cmd("ZREM").arg(&idx).arg(stale).query::<i64>(c));
    }

    fn hmget(&self, pipe: &mut redis::Pipeline, layer: &Layer, key: &str) {
        pipe.cmd("HMGET")
            .arg(self.entry_key(layer, key))
            .arg(&["v", "w", "t", "ttl", "j"]);
    }
}

type Fields = Vec<Option<String>>;

fn parse(key: &str, f: Fields) -> MindResult<Option<Record>> {
    if f.iter().all(Option::is_none) {
        return Ok(None);
    }
    let corrupt = |what: &str| MindError::Corrupt(format!("{key}: {what}"));
    let field = |i: usize| {
        f.get(i)
            .cloned()
            .flatten()
            .ok_or_else(|| corrupt("missing field"))
    };
    let num = |s: String| s.parse::<u64>().map_err(|_| corrupt("bad number"));
    let ttl = field(3)?;
    Ok(Some(Record {
        version: num(field(0)?)?,
        writer: field(1)?,
        written_at_ms: num(field(2)?)?,
        ttl_ms: if ttl.is_empty() {
            None
        } else {
            Some(num(ttl)?)
        },
        value: serde_json::from_str(&field(4)?)
            .map_err(|e| corrupt(&format!("value is not JSON: {e}")))?,
    }))
}

impl RawMind for RedisMind {
    fn put(&self, puts: &[Put<'_>]) -> MindResult<Vec<Outcome>> {
        if puts.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        if puts.len() > 1 {
            pipe.atomic();
        }
        for p in puts {
            let entry = self.entry_key(p.layer, p.key);
            let base = match p.layer {
                Layer::Run(_) => self.entry_key(&Layer::Global, p.key),
                Layer::Global => entry.clone(),
            };
            let index_ttl = p.layer_ttl_ms.map(|t| t.to_string()).unwrap_or_default();
            pipe.cmd("EVAL")
                .arg(PUT)
                .arg(3)
                .arg(&entry)
                .arg(self.index_key(p.layer))
                .arg(&base)
                .arg(p.expect.map(|e| e.to_string()).unwrap_or_default())
                .arg(p.writer)
                .arg(p.now_ms)
                .arg(p.ttl_ms.map(|t| t.to_string()).unwrap_or_default())
                .arg(p.json)
                .arg(p.key)
                .arg(self.channel(p.layer))
                .arg(index_ttl);
        }
        let replies: Vec<(i64, u64)> = self.with_conn(|c| pipe.query(c))?;
        Ok(replies
            .into_iter()
            .map(|(ok, v)| {
                if ok == 1 {
                    Outcome::Written(v)
                } else {
                    Outcome::Conflict(v)
                }
            })
            .collect())
    }

    fn get(&self, layers: &[&Layer], key: &str, now_ms: u64) -> MindResult<Option<Record>> {
        let mut pipe = redis::pipe();
        for l in layers {
            self.hmget(&mut pipe, l, key);
        }
        let replies: Vec<Fields> = self.with_conn(|c| pipe.query(c))?;
        for f in replies {
            if let Some(r) = parse(key, f)? {
                if r.live(now_ms) {
                    return Ok(Some(r));
                }
            }
        }
        Ok(None)
    }

    fn get_many(
        &self,
        layer: &Layer,
        keys: &[&str],
        now_ms: u64,
    ) -> MindResult<Vec<Option<Record>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for k in keys {
            self.hmget(&mut pipe, layer, k);
        }
        let replies: Vec<Fields> = self.with_conn(|c| pipe.query(c))?;
        keys.iter()
            .zip(replies)
            .map(|(k, f)| Ok(parse(k, f)?.filter(|r| r.live(now_ms))))
            .collect()
    }

    fn keys(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        _now_ms: u64,
    ) -> MindResult<Vec<String>> {
        let candidates: Vec<String> = self
            .index_range(layer, prefix)?
            .into_iter()
            .filter(|k| filter(k))
            .collect();
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let mut pipe = redis::pipe();
        for k in &candidates {
            pipe.cmd("EXISTS").arg(self.entry_key(layer, k));
        }
        let exists: Vec<bool> = self.with_conn(|c| pipe.query(c))?;
        let stale: Vec<&str> = candidates
            .iter()
            .zip(&exists)
            .filter(|(_, e)| !**e)
            .map(|(k, _)| k.as_str())
            .collect();
        self.forget(layer, &stale);
        Ok(candidates
            .iter()
            .zip(&exists)
            .filter(|(_, e)| **e)
            .map(|(k, _)| k.clone())
            .collect())
    }

    fn scan(
        &self,
        layer: &Layer,
        prefix: &str,
        filter: &dyn Fn(&str) -> bool,
        now_ms: u64,
    ) -> MindResult<Vec<(String, Record)>> {
        let candidates: Vec<String> = self
            .index_range(layer, prefix)?
            .into_iter()
            .filter(|k| filter(k))
            .collect();
        let refs: Vec<&str> = candidates.iter().map(String::as_str).collect();
        let recs = self.get_many(layer, &refs, now_ms)?;
        let stale: Vec<&str> = refs
            .iter()
            .zip(&recs)
            .filter(|(_, r)| r.is_none())
            .map(|(k, _)| *k)
            .collect();
        self.forget(layer, &stale);
        Ok(candidates
            .into_iter()
            .zip(recs)
            .filter_map(|(k, r)| r.map(|r| (k, r)))
            .collect())
    }

    fn delete(&self, layer: &Layer, key: &str, _now_ms: u64) -> MindResult<bool> {
        let n: i64 = self.with_conn(|c| {
            redis::cmd("EVAL")
                .arg(DELETE)
                .arg(2)
                .arg(self.entry_key(layer, key))
                .arg(self.index_key(layer))
                .arg(key)
                .arg(self.channel(layer))
                .query(c)
        })?;
        Ok(n == 1)
    }

    fn drop_layer(&self, layer: &Layer, _now_ms: u64) -> MindResult<usize> {
        let n: i64 = self.with_conn(|c| {
            redis::cmd("EVAL")
                .arg(DROP)
                .arg(1)
                .arg(self.index_key(layer))
                .arg(format!("{}:", self.tag(layer)))
                .arg(self.channel(layer))
                .query(c)
        })?;
        Ok(n as usize)
    }

    fn purge_expired(&self, now_ms: u64) -> MindResult<usize> {
        // Redis expires entries itself; this forgets the global index's stale members.
        let before = self.index_range(&Layer::Global, "")?.len();
        let live = self.keys(&Layer::Global, "", &|_| true, now_ms)?.len();
        Ok(before - live)
    }

    fn watch(&self, layers: &[Layer]) -> MindResult<Watch> {
        let mut con = self.connect()?;
        let channels: Vec<(String, Layer)> = layers
            .iter()
            .map(|l| (self.channel(l), l.clone()))
            .collect();
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<MindResult<()>>();
        let url = self.shown.clone();
        let stop2 = stop.clone();
        std::thread::Builder::new()
            .name("mind-redis-watch".into())
            .spawn(move || {
                let mut ps = con.as_pubsub();
                for (ch, _) in &channels {
                    if let Err(e) = ps.subscribe(ch) {
                        let _ = ready_tx.send(Err(MindError::Unavailable(format!(
                            "redis at {url}: subscribe: {e}"
                        ))));
                        return;
                    }
                }
                if ps.set_read_timeout(Some(WATCH_POLL)).is_err() {
                    let _ = ready_tx.send(Err(MindError::Unavailable("set timeout".into())));
                    return;
                }
                let _ = ready_tx.send(Ok(()));
                while !stop2.load(Ordering::Relaxed) {
                    let msg = match ps.get_message() {
                        Ok(m) => m,
                        Err(e) if e.is_timeout() => continue,
                        Err(e) => {
                            let _ = tx.send(Err(MindError::Unavailable(format!(
                                "redis at {url}: watch connection lost: {e}"
                            ))));
                            return;
                        }
                    };
                    let Some((_, layer)) =
                        channels.iter().find(|(c, _)| c == msg.get_channel_name())
                    else {
                        continue;
                    };
                    let Ok(payload) = msg.get_payload::<String>() else {
                        continue;
                    };
                    let change = match payload.split_once(' ') {
                        Some(("w", rest)) => rest.split_once(' ').and_then(|(v, k)| {
                            Some((k.to_string(), ChangeKind::Written(v.parse().ok()?)))
                        }),
                        Some(("d", k)) => Some((k.to_string(), ChangeKind::Deleted)),
                        _ if payload == "x" => Some((String::new(), ChangeKind::Dropped)),
                        _ => None,
                    };
                    if let Some((key, kind)) = change {
                        let c = Change {
                            layer: layer.clone(),
                            key,
                            kind,
                        };
                        if tx.send(Ok(c)).is_err() {
                            return;
                        }
                    }
                }
            })
            .map_err(|e| MindError::Backend(format!("cannot start watch thread: {e}")))?;
        let wait = self.cfg.connect_timeout + self.cfg.io_timeout * (layers.len() as u32 + 1);
        match ready_rx.recv_timeout(wait) {
            Ok(Ok(())) => Ok(Watch::new(rx, stop)),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                Err(MindError::Unavailable(format!(
                    "redis at {}: subscribe did not finish within {wait:?}",
                    self.shown
                )))
            }
        }
    }
}
