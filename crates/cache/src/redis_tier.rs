//! [`RedisTier`]: a hot tier shared by replicas, on Redis (the `redis` crate's synchronous
//! API, no async runtime).
//!
//! Layout, every key under the tier's `prefix` (give each deployment and test run its
//! own, ending it with `:` so that no prefix is the start of another, e.g.
//! `neuralcore:cache:`):
//!
//! | Redis key | type | holds |
//! |---|---|---|
//! | `<prefix>v:<key>` | string | the value; `PX <ttl>` when the entry has a TTL |
//! | `<prefix>tags-of:<key>` | set | the entry's tags, with the entry's TTL |
//! | `<prefix>tag:<tag>` | set | the keys carrying `tag` (no TTL) |
//!
//! `put`, `delete` and each batch of `delete_tag` are one Lua script, so the value and its
//! tag sets change together. A tag set may keep members whose entries have expired (Redis
//! forgets the value and its `tags-of` set by itself, not the member); `delete_tag`
//! deletes a member only when its `tags-of` set still holds the tag, so an expired entry
//! written again under other tags is not reached by an old tag, and it counts only the
//! values `DEL` actually removed. Scripts touch keys they compute from the prefix, which
//! needs a single (non-cluster) Redis.
//!
//! `clear` and `usage` walk the prefix with `SCAN ... MATCH` (never `KEYS`), in batches
//! of [`SCAN_COUNT`]: they cost time in proportion to the whole keyspace of the database
//! (not only this tier's keys), which is fine for stats and administration, not for a hot
//! path. `usage` reports the value keys found and, as bytes, their keys' and values'
//! lengths (`STRLEN`, pipelined per batch); evictions are Redis's business (its
//! `maxmemory` policy) and reported as 0.
//!
//! Every call is bounded: connecting (TCP and handshake: `AUTH` and `SELECT` when the URL
//! asks for them, no `CLIENT SETINFO`) by [`RedisTimeouts::connect`],
//! each read and write by [`RedisTimeouts::read`] and [`RedisTimeouts::write`] (200 ms
//! each by default), so a down or slow Redis costs little; the [`crate::Cache`] then
//! bypasses the tier for a while. A connection that failed in any way is dropped, and the
//! next call opens a fresh one; up to [`POOL_SIZE`] idle connections are kept for reuse.
//!
//! Errors never show the URL's password: the URL is shown as `redis://user:***@host`, and
//! the password is scrubbed from the driver's messages too.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use neuralcore_core::settings::redact_url;
use redis::{Connection, RedisError, RedisResult};

use crate::{Tier, TierError, TierUsage};

/// The tier's name.
const NAME: &str = "redis";
/// Idle connections kept for reuse.
pub const POOL_SIZE: usize = 8;
/// Keys asked for per `SCAN` step, and members handled per `delete_tag` script run.
pub const SCAN_COUNT: usize = 1000;
/// Longest TTL given to Redis (100 years); a longer one is shortened to it.
const MAX_TTL_MS: u128 = 100 * 365 * 24 * 3600 * 1000;

/// `KEYS[1]` value key, `KEYS[2]` its tags-of set; `ARGV[1]` value, `ARGV[2]` TTL in ms
/// (empty: none), `ARGV[3]` tag-set prefix, `ARGV[4]` the entry's key, `ARGV[5..]` tags.
const PUT: &str = r"
local old = redis.call('SMEMBERS', KEYS[2])
for i = 1, #old do redis.call('SREM', ARGV[3] .. old[i], ARGV[4]) end
redis.call('DEL', KEYS[2])
if ARGV[2] == '' then
  redis.call('SET', KEYS[1], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
if #ARGV > 4 then
  for i = 5, #ARGV do
    redis.call('SADD', KEYS[2], ARGV[i])
    redis.call('SADD', ARGV[3] .. ARGV[i], ARGV[4])
  end
  if ARGV[2] ~= '' then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
end
return 1
";

/// `KEYS[1]` value key, `KEYS[2]` its tags-of set; `ARGV[1]` tag-set prefix, `ARGV[2]`
/// the entry's key. Returns how many values were deleted (0 or 1).
const DELETE: &str = r"
local tags = redis.call('SMEMBERS', KEYS[2])
for i = 1, #tags do redis.call('SREM', ARGV[1] .. tags[i], ARGV[2]) end
redis.call('DEL', KEYS[2])
return redis.call('DEL', KEYS[1])
";

/// `KEYS[1]` the tag set; `ARGV[1]` value-key prefix, `ARGV[2]` tags-of prefix, `ARGV[3]`
/// tag-set prefix, `ARGV[4]` the tag, `ARGV[5]` batch size. Pops up to a batch of
/// members and deletes those whose tags-of set still holds the tag. Returns
/// `{values deleted, members popped}`.
const DELETE_TAG: &str = r"
local members = redis.call('SPOP', KEYS[1], tonumber(ARGV[5]))
local n = 0
for i = 1, #members do
  local m = members[i]
  local of = ARGV[2] .. m
  if redis.call('SISMEMBER', of, ARGV[4]) == 1 then
    local tags = redis.call('SMEMBERS', of)
    for j = 1, #tags do
      if tags[j] ~= ARGV[4] then redis.call('SREM', ARGV[3] .. tags[j], m) end
    end
    redis.call('DEL', of)
    n = n + redis.call('DEL', ARGV[1] .. m)
  end
end
return {n, #members}
";

/// How long a [`RedisTier`] waits on Redis. `Default`: 200 ms each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisTimeouts {
    /// Longest wait to open a connection (TCP connect and handshake).
    pub connect: Duration,
    /// Longest wait for each read on an open connection.
    pub read: Duration,
    /// Longest wait for each write on an open connection.
    pub write: Duration,
}

impl Default for RedisTimeouts {
    fn default() -> Self {
        RedisTimeouts::all(Duration::from_millis(200))
    }
}

impl RedisTimeouts {
    /// The same timeout for connecting, reading and writing.
    pub fn all(d: Duration) -> RedisTimeouts {
        RedisTimeouts {
            connect: d,
            read: d,
            write: d,
        }
    }
}

/// A hot tier on Redis, shared by every process using the same URL and prefix.
pub struct RedisTier {
    client: redis::Client,
    /// The URL without its password, for messages.
    shown: String,
    /// The password, scrubbed from driver messages (empty: none).
    secret: String,
    timeouts: RedisTimeouts,
    /// `<prefix>v:`
    value_prefix: String,
    /// `<prefix>tags-of:`
    tags_of_prefix: String,
    /// `<prefix>tag:`
    tag_prefix: String,
    /// The prefix, escaped for `SCAN ... MATCH`.
    glob: String,
    prefix: String,
    idle: Mutex<Vec<Connection>>,
}

impl std::fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTier")
            .field("url", &self.shown)
            .field("prefix", &self.prefix)
            .field("timeouts", &self.timeouts)
            .finish()
    }
}

/// `s` escaped for a `SCAN ... MATCH` pattern (it matches itself only).
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether `e` means the server could not be reached or did not answer in time.
fn unreachable(e: &RedisError) -> bool {
    neuralcore_redis::connection_failed(e)
}

impl RedisTier {
    /// A tier on the Redis at `url` (`redis://[user[:password]@]host[:port][/db]`), every
    /// key under `prefix` (1 to 256 bytes; end it with `:`).
    ///
    /// It connects and sends `PING` once to check: a server that cannot be reached
    /// (refused, silent, too slow) does not make `open` fail — a cache is never worth
    /// failing to start for — the tier is returned and each call fails fast until the
    /// server is back (the [`crate::Cache`] bypasses it meanwhile; [`RedisTier::ping`]
    /// checks explicitly). A malformed URL, a bad prefix, or a server that answers but
    /// refuses (a wrong or missing password) is an error.
    pub fn open(url: &str, prefix: &str, timeouts: RedisTimeouts) -> Result<RedisTier, TierError> {
        let shown = redact_url(url);
        if prefix.is_empty() || prefix.len() > 256 {
            return Err(TierError::new(
                NAME,
                format!(
                    "the key prefix must be 1 to 256 bytes, not {}",
                    prefix.len()
                ),
            ));
        }
        let client = neuralcore_redis::client(url, |info| {
            // No `CLIENT SETINFO` after connecting: its replies are waited for (and their
            // errors ignored) one by one, each up to the whole connect timeout, so a
            // silent server would cost twice the timeout.
            let settings = info.redis_settings().clone().set_skip_set_lib_name();
            info.set_redis_settings(settings)
        })
        .map_err(|e| {
            let secret = password_in(url);
            TierError::new(
                NAME,
                scrub(
                    &format!(
                        "invalid Redis URL {shown}: {e} \
                         (expected redis://[user[:password]@]host[:port][/db])"
                    ),
                    &secret,
                ),
            )
        })?;
        let secret = client
            .get_connection_info()
            .redis_settings()
            .password()
            .map(str::to_string)
            .unwrap_or_else(|| password_in(url));
        let tier = RedisTier {
            client,
            shown,
            secret,
            timeouts,
            value_prefix: format!("{prefix}v:"),
            tags_of_prefix: format!("{prefix}tags-of:"),
            tag_prefix: format!("{prefix}tag:"),
            glob: glob_escape(prefix),
            prefix: prefix.to_string(),
            idle: Mutex::new(Vec::new()),
        };
        let checked =
            tier.connect().and_then(
                |mut con| match redis::cmd("PING").query::<String>(&mut con) {
                    Ok(_) => Ok(con),
                    Err(e) => {
                        let down = unreachable(&e);
                        Err((tier.err("PING", e), down))
                    }
                },
            );
        match checked {
            Ok(con) => tier.give_back(con),
            Err((e, true)) => {
                tracing::warn!("cache tier {e}; it will be tried again on use");
            }
            Err((e, false)) => return Err(e),
        }
        Ok(tier)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Check that the server answers (`PING`).
    pub fn ping(&self) -> Result<(), TierError> {
        self.with_conn("PING", |c| redis::cmd("PING").query::<String>(c))
            .map(|_| ())
    }

    /// An error of this tier, without the password.
    fn err(&self, what: &str, e: impl std::fmt::Display) -> TierError {
        TierError::new(
            NAME,
            scrub(&format!("{} ({what}): {e}", self.shown), &self.secret),
        )
    }

    /// A new connection with the timeouts set; the error says whether the server could
    /// not be reached (rather than refusing).
    fn connect(&self) -> Result<Connection, (TierError, bool)> {
        let t = self.timeouts;
        let at_least = |d: Duration| d.max(Duration::from_millis(1));
        let con = self
            .client
            .get_connection_with_timeout(at_least(t.connect))
            .map_err(|e| {
                let down = unreachable(&e);
                (
                    self.err(&format!("connect within {:?}", t.connect), e),
                    down,
                )
            })?;
        con.set_read_timeout(Some(at_least(t.read)))
            .and_then(|_| con.set_write_timeout(Some(at_least(t.write))))
            .map_err(|e| (self.err("set timeouts", e), false))?;
        Ok(con)
    }

    fn give_back(&self, con: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < POOL_SIZE {
            idle.push(con);
        }
    }

    /// Run `f` on an idle connection or a new one. A connection that failed in any way is
    /// dropped (a timed-out reply could still arrive on it), so the next call opens a
    /// fresh one.
    fn with_conn<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> Result<T, TierError> {
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut con = match pooled {
            Some(c) => c,
            None => self.connect().map_err(|(e, _)| e)?,
        };
        match f(&mut con) {
            Ok(v) => {
                self.give_back(con);
                Ok(v)
            }
            Err(e) if e.is_timeout() => Err(self.err(
                what,
                format!(
                    "no answer within {:?} ({e})",
                    self.timeouts.read.max(self.timeouts.write)
                ),
            )),
            Err(e) => Err(self.err(what, e)),
        }
    }

    /// `SCAN` every key matching `pattern`, once each, handing each batch to `each`.
    fn scan(
        &self,
        pattern: &str,
        mut each: impl FnMut(&mut Connection, Vec<String>) -> RedisResult<()>,
    ) -> Result<(), TierError> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut cursor: u64 = 0;
        loop {
            let next = self.with_conn("SCAN", |c| {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .query(c)?;
                // SCAN may return a key twice (while Redis rehashes): keep the first.
                let fresh: Vec<String> = keys
                    .into_iter()
                    .filter(|k| seen.insert(k.clone()))
                    .collect();
                if !fresh.is_empty() {
                    each(c, fresh)?;
                }
                Ok(next)
            })?;
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

/// The password in a URL's authority (`scheme://user:password@`), or empty.
fn password_in(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return String::new();
    };
    let rest = &url[start..];
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..auth_end].rfind('@') {
        Some(at) => rest[..at]
            .split_once(':')
            .map(|(_, p)| p.to_string())
            .unwrap_or_default(),
        None => String::new(),
    }
}

/// `msg` with every occurrence of `secret` replaced by `***`.
fn scrub(msg: &str, secret: &str) -> String {
    if secret.is_empty() {
        msg.to_string()
    } else {
        msg.replace(secret, "***")
    }
}

impl Tier for RedisTier {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TierError> {
        let k = format!("{}{key}", self.value_prefix);
        self.with_conn("GET", |c| redis::cmd("GET").arg(&k).query(c))
    }

    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
        tags: &[String],
    ) -> Result<(), TierError> {
        let ttl_ms = ttl
            .map(|t| t.as_millis().clamp(1, MAX_TTL_MS).to_string())
            .unwrap_or_default();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(PUT)
            .arg(2)
            .arg(format!("{}{key}", self.value_prefix))
            .arg(format!("{}{key}", self.tags_of_prefix))
            .arg(value)
            .arg(ttl_ms)
            .arg(&self.tag_prefix)
            .arg(key);
        let mut distinct: Vec<&String> = tags.iter().collect();
        distinct.sort();
        distinct.dedup();
        for t in distinct {
            cmd.arg(t);
        }
        self.with_conn("put", |c| cmd.query::<i64>(c)).map(|_| ())
    }

    fn delete(&self, key: &str) -> Result<bool, TierError> {
        let n: i64 = self.with_conn("delete", |c| {
            redis::cmd("EVAL")
                .arg(DELETE)
                .arg(2)
                .arg(format!("{}{key}", self.value_prefix))
                .arg(format!("{}{key}", self.tags_of_prefix))
                .arg(&self.tag_prefix)
                .arg(key)
                .query(c)
        })?;
        Ok(n > 0)
    }

    fn delete_tag(&self, tag: &str) -> Result<usize, TierError> {
        let set = format!("{}{tag}", self.tag_prefix);
        let mut deleted = 0usize;
        loop {
            let (n, popped): (i64, i64) = self.with_conn("delete_tag", |c| {
                redis::cmd("EVAL")
                    .arg(DELETE_TAG)
                    .arg(1)
                    .arg(&set)
                    .arg(&self.value_prefix)
                    .arg(&self.tags_of_prefix)
                    .arg(&self.tag_prefix)
                    .arg(tag)
                    .arg(SCAN_COUNT)
                    .query(c)
            })?;
            deleted += usize::try_from(n).unwrap_or(0);
            if usize::try_from(popped).unwrap_or(0) < SCAN_COUNT {
                return Ok(deleted);
            }
        }
    }

    fn clear(&self) -> Result<usize, TierError> {
        let mut deleted = 0usize;
        let pattern = format!("{}*", self.glob);
        let (v, of, tag) = (
            self.value_prefix.as_str(),
            self.tags_of_prefix.as_str(),
            self.tag_prefix.as_str(),
        );
        self.scan(&pattern, |c, keys| {
            // Only the tier's own namespaces: a longer prefix sharing this one's start
            // belongs to someone else.
            let (values, others): (Vec<String>, Vec<String>) = keys
                .into_iter()
                .filter(|k| k.starts_with(v) || k.starts_with(of) || k.starts_with(tag))
                .partition(|k| k.starts_with(v));
            if !values.is_empty() {
                let n: i64 = redis::cmd("DEL").arg(&values).query(c)?;
                deleted += usize::try_from(n).unwrap_or(0);
            }
            if !others.is_empty() {
                redis::cmd("UNLINK").arg(&others).query::<i64>(c)?;
            }
            Ok(())
        })?;
        Ok(deleted)
    }

    fn usage(&self) -> Result<TierUsage, TierError> {
        let mut usage = TierUsage::default();
        let pattern = format!("{}*", glob_escape(&self.value_prefix));
        let skip = self.value_prefix.len();
        self.scan(&pattern, |c, keys| {
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("STRLEN").arg(k);
            }
            let lens: Vec<u64> = pipe.query(c)?;
            usage.entries += keys.len() as u64;
            usage.bytes += keys
                .iter()
                .zip(&lens)
                .map(|(k, n)| (k.len().saturating_sub(skip)) as u64 + n)
                .sum::<u64>();
            Ok(())
        })?;
        Ok(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::{glob_escape, password_in};

    #[test]
    fn passwords_are_found() {
        assert_eq!(password_in("redis://u:p@ss@h/"), "p@ss");
        assert_eq!(password_in("redis://h/"), "");
    }

    #[test]
    fn globs_match_themselves() {
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
