//! [`PgTier`]: a cold tier on PostgreSQL (the synchronous `postgres` client, with the
//! connection settings every neuralcore PostgreSQL client shares: `sslmode` and the
//! other TLS options, the password file; see `neuralcore_pg::config`), shared by every
//! process using the same database and table.
//!
//! One table, named by the caller (give each deployment and test run its own), created
//! with its indexes when missing (under an advisory lock, so many clients may start at
//! once):
//!
//! | column | type | holds |
//! |---|---|---|
//! | `key` | `text COLLATE "C"`, primary key | the entry's key |
//! | `value` | `bytea` | the value |
//! | `expires_at` | `timestamptz`, null = never | when it stops being served |
//! | `tags` | `text[]` (GIN index) | its tags; `delete_tag` is `tags @> ARRAY[tag]` |
//! | `stored_at` | `timestamptz` | when it was written, for eviction |
//!
//! Expiry is judged by the server's clock (`now()`) both when writing and reading. An
//! expired row is a miss and is deleted when a read meets it; besides, every
//! [`PURGE_EVERY`]-th write deletes up to [`PURGE_BATCH`] expired rows. `delete`,
//! `delete_tag` and `clear` count only live rows (expired ones go too, uncounted);
//! `usage` counts every row still in the table, expired or not, with an exact
//! `count(*)`/`sum` (a scan of the table: cheap for a cache of thousands of entries, it
//! may hit the statement timeout on a very large one, and the cache's stats then show no
//! usage).
//!
//! **Bound** ([`PgTierOptions::max_bytes`], off by default): when set, a value larger
//! than the bound is not stored, and after every tenth of the bound written by this
//! process the tier measures the table (keys' and values' bytes) and, past the bound,
//! deletes expired rows and then the oldest (by `stored_at`) until 90% of it is left,
//! counted as evictions. The bound is approximate: writes between two checks, and other
//! processes' writes, may take the table past it for a while.
//!
//! Calls share one connection behind a mutex. A connection that failed (server gone,
//! reset, timed out) is dropped and the next call opens a fresh one, creating the table
//! again if it went missing. Opening is bounded by [`PgTierOptions::connect_timeout`]
//! (TCP connect and handshake), each statement by
//! [`PgTierOptions::statement_timeout`] (the server's `statement_timeout`); both 500 ms
//! by default, so a down or slow server costs little and the [`crate::Cache`] bypasses
//! the tier for a while. A server that stops answering in the middle of a statement is
//! noticed only by the operating system's TCP timeouts.
//!
//! Errors show the server as `postgres://user@host:port/db`, never the password.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use postgres::{Client, Statement};

use crate::{Tier, TierError, TierUsage};

/// The tier's name.
const NAME: &str = "postgres";
/// Writes between two purges of expired rows.
pub const PURGE_EVERY: u64 = 256;
/// Most expired rows one purge deletes.
pub const PURGE_BATCH: i64 = 1000;
/// Key of the advisory lock that serializes table creation across clients.
const SETUP_LOCK: i64 = 0x6e63_6361_6368_6500; // "nccache\0"
/// Longest TTL written (100 years); a longer one is shortened to it.
const MAX_TTL_MS: u128 = 100 * 365 * 24 * 3600 * 1000;
/// Longest table name: its index names add up to 8 bytes, within PostgreSQL's 63.
const MAX_TABLE_LEN: usize = 55;

/// How a [`PgTier`] connects and what it holds. `Default` gives the values below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgTierOptions {
    /// Longest wait to open a connection, TCP connect and handshake (default 500 ms).
    pub connect_timeout: Duration,
    /// The server's `statement_timeout` for every statement (default 500 ms).
    pub statement_timeout: Duration,
    /// Keys' and values' bytes to keep the table within, approximately (default `None`:
    /// unbounded, expired rows still go).
    pub max_bytes: Option<u64>,
}

impl Default for PgTierOptions {
    fn default() -> Self {
        PgTierOptions {
            connect_timeout: Duration::from_millis(500),
            statement_timeout: Duration::from_millis(500),
            max_bytes: None,
        }
    }
}

/// The statements, prepared once per connection.
#[derive(Clone, Copy)]
enum Q {
    Get,
    DropExpired,
    Put,
    Delete,
    DeleteTag,
    Clear,
    Usage,
    Purge,
    Bytes,
    Evict,
}

impl Q {
    const COUNT: usize = 10;
}

/// The statements' text for one table.
struct Sql([String; Q::COUNT]);

impl Sql {
    fn new(t: &str) -> Sql {
        let live = "expires_at IS NULL OR expires_at > now()";
        let size = "octet_length(key) + octet_length(value)";
        Sql([
            // Get
            format!(
                "SELECT value, expires_at IS NOT NULL AND expires_at <= now() \
                 FROM {t} WHERE key = $1"
            ),
            // DropExpired
            format!("DELETE FROM {t} WHERE key = $1 AND expires_at <= now()"),
            // Put
            format!(
                "INSERT INTO {t} (key, value, expires_at, tags, stored_at) \
                 VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond', $4::text[], \
                 clock_timestamp()) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, \
                 expires_at = excluded.expires_at, tags = excluded.tags, \
                 stored_at = excluded.stored_at"
            ),
            // Delete
            format!(
                "WITH d AS (DELETE FROM {t} WHERE key = $1 RETURNING expires_at) \
                 SELECT count(*) FROM d WHERE {live}"
            ),
            // DeleteTag
            format!(
                "WITH d AS (DELETE FROM {t} WHERE tags @> ARRAY[$1::text] RETURNING expires_at) \
                 SELECT count(*) FROM d WHERE {live}"
            ),
            // Clear
            format!(
                "WITH d AS (DELETE FROM {t} RETURNING expires_at) \
                 SELECT count(*) FROM d WHERE {live}"
            ),
            // Usage
            format!("SELECT count(*), coalesce(sum({size}), 0)::bigint FROM {t}"),
            // Purge
            format!(
                "DELETE FROM {t} WHERE key IN \
                 (SELECT key FROM {t} WHERE expires_at <= now() LIMIT $1)"
            ),
            // Bytes
            format!("SELECT coalesce(sum({size}), 0)::bigint FROM {t}"),
            // Evict: keep the newest rows that fit in $1 bytes.
            format!(
                "DELETE FROM {t} WHERE key IN (SELECT key FROM \
                 (SELECT key, sum({size}) OVER (ORDER BY stored_at DESC, key DESC) AS newer \
                 FROM {t}) s WHERE newer > $1)"
            ),
        ])
    }

    fn text(&self, q: Q) -> &str {
        &self.0[q as usize]
    }
}

/// One connection and the statements prepared on it.
struct Conn {
    client: Client,
    stmts: [Option<Statement>; Q::COUNT],
}

impl Conn {
    /// The prepared statement for `q`, preparing it on first use.
    fn prepared(&mut self, sql: &Sql, q: Q) -> Result<Statement, postgres::Error> {
        let slot = &mut self.stmts[q as usize];
        if let Some(s) = slot {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql.text(q))?;
        *slot = Some(s.clone());
        Ok(s)
    }
}

/// The connection, and a connection attempt given up on but maybe still finishing.
#[derive(Default)]
struct State {
    conn: Option<Conn>,
    pending: Option<mpsc::Receiver<Result<Client, postgres::Error>>>,
}

/// A cold tier in one PostgreSQL table.
pub struct PgTier {
    target: neuralcore_pg::Target,
    /// The server without the password, for messages.
    shown: String,
    /// The password, scrubbed from driver messages (empty: none).
    secret: String,
    /// The table's name as given.
    table: String,
    /// The table's name quoted as an identifier.
    quoted: String,
    sql: Sql,
    opts: PgTierOptions,
    state: Mutex<State>,
    /// Writes by this tier (for the purge cadence).
    writes: AtomicU64,
    /// Bytes written since the bound was last checked.
    written: AtomicU64,
    evictions: AtomicU64,
}

impl std::fmt::Debug for PgTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTier")
            .field("url", &self.shown)
            .field("table", &self.table)
            .field("opts", &self.opts)
            .finish()
    }
}

/// SQLSTATEs meaning the server is not there for now (besides class 08, connection
/// exceptions).
const UNAVAILABLE: &[&str] = &[
    "57P01", // admin_shutdown
    "57P02", // crash_shutdown
    "57P03", // cannot_connect_now (starting up)
    "53300", // too_many_connections
];

/// Whether `e` means the server could not be reached, went away or did not answer in
/// time (the connection is then useless).
fn unreachable(e: &postgres::Error) -> bool {
    use std::error::Error as _;
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        return code.starts_with("08") || UNAVAILABLE.contains(&code);
    }
    if neuralcore_pg::tls::is_tls_refusal(e) {
        // A refused certificate: the server is there and says no.
        return false;
    }
    let io = e
        .source()
        .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some());
    io || e.is_closed() || e.to_string().starts_with("timeout")
}

/// `msg` with every occurrence of `secret` replaced by `***`.
fn scrub(msg: &str, secret: &str) -> String {
    if secret.is_empty() {
        msg.to_string()
    } else {
        msg.replace(secret, "***")
    }
}

/// `name` quoted as an identifier, when it is 1 to [`MAX_TABLE_LEN`] ASCII letters,
/// digits or `_`, not starting with a digit.
fn quote_table(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_TABLE_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    ok.then(|| format!("\"{name}\""))
}

/// A TTL in whole milliseconds (at least 1, at most 100 years).
fn ttl_ms(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|t| i64::try_from(t.as_millis().clamp(1, MAX_TTL_MS)).unwrap_or(i64::MAX))
}

impl PgTier {
    /// A tier in `table` of the PostgreSQL database at `url`
    /// (`postgres://user[:password]@host:port/db`, or the key-value form), created when
    /// missing. `table` is 1 to 55 ASCII letters, digits or `_`, not starting with a
    /// digit, in the connection's default schema; its indexes are `<table>_tags` and
    /// `<table>_exp`.
    ///
    /// It connects once and creates the table: a server that cannot be reached
    /// (refused, silent, too slow, shutting down) does not make `open` fail — a cache is
    /// never worth failing to start for — the tier is returned and each call fails fast
    /// until the server is back, the first connection that works creating the table (the
    /// [`crate::Cache`] bypasses the tier meanwhile; [`PgTier::ping`] checks explicitly).
    /// A malformed URL or table name, or a server that answers but refuses (a wrong
    /// password, no right to create the table), is an error.
    pub fn open(url: &str, table: &str, opts: PgTierOptions) -> Result<PgTier, TierError> {
        let quoted = quote_table(table).ok_or_else(|| {
            TierError::new(
                NAME,
                format!(
                    "table name {table:?} must be 1 to {MAX_TABLE_LEN} ASCII letters, digits \
                     or '_', not starting with a digit"
                ),
            )
        })?;
        let at_least = |d: Duration| d.max(Duration::from_millis(1));
        // The messages name options and the URL without its password, never values.
        let mut target =
            neuralcore_pg::config(url, "neuralcore-cache", at_least(opts.connect_timeout))
                .map_err(|e| TierError::new(NAME, e.to_string()))?;
        let config = &mut target.config;
        config.connect_timeout(at_least(opts.connect_timeout));
        let statement_ms = at_least(opts.statement_timeout).as_millis();
        let options = match config.get_options() {
            Some(o) if !o.is_empty() => format!("{o} -c statement_timeout={statement_ms}"),
            _ => format!("-c statement_timeout={statement_ms}"),
        };
        config.options(&options);
        let secret = target.password().unwrap_or_default();
        let tier = PgTier {
            shown: target.shown.clone(),
            target,
            secret,
            table: table.to_string(),
            sql: Sql::new(&quoted),
            quoted,
            opts,
            state: Mutex::new(State::default()),
            writes: AtomicU64::new(0),
            written: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        };
        let mut state = tier.state();
        match tier.connect(&mut state) {
            Ok(c) => state.conn = Some(c),
            Err((e, true)) => {
                tracing::warn!("cache tier {e}; it will be tried again on use");
            }
            Err((e, false)) => return Err(e),
        }
        drop(state);
        Ok(tier)
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Check that the server answers (`SELECT 1`).
    pub fn ping(&self) -> Result<(), TierError> {
        self.with_conn("ping", |c| c.client.simple_query("SELECT 1").map(|_| ()))
    }

    /// Drop the table and its indexes (for tests and cleanup). The tier creates it
    /// again on its next new connection only: do not use it afterwards.
    pub fn drop_table(&self) -> Result<(), TierError> {
        let sql = format!("DROP TABLE IF EXISTS {}", self.quoted);
        self.with_conn("drop table", |c| c.client.batch_execute(&sql))
    }

    /// An error of this tier, without the password.
    fn err(&self, what: &str, e: impl std::fmt::Display) -> TierError {
        TierError::new(
            NAME,
            scrub(&format!("{} ({what}): {e}", self.shown), &self.secret),
        )
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // The state is two `Option`s, consistent at every unlock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new connection, the table created if missing; the error says whether the
    /// server could not be reached (rather than refusing).
    ///
    /// The driver bounds only the TCP connect: the handshake runs on a thread of its own,
    /// waited for at most `connect_timeout`. An attempt given up on is kept (in `state`)
    /// and waited for again by the next call instead of starting another, so a server
    /// that accepts and never answers holds at most one thread per tier.
    fn connect(&self, state: &mut State) -> Result<Conn, (TierError, bool)> {
        let wait = self.opts.connect_timeout.max(Duration::from_millis(1));
        let rx = match state.pending.take() {
            Some(rx) => rx,
            None => {
                let (tx, rx) = mpsc::channel();
                let target = self.target.clone();
                std::thread::Builder::new()
                    .name("cache-pg-connect".into())
                    .spawn(move || {
                        // The caller may be gone: the connection is then dropped.
                        let _ = tx.send(target.connect());
                    })
                    .map_err(|e| (self.err("connect", e), false))?;
                rx
            }
        };
        let mut client = match rx.recv_timeout(wait) {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                let down = unreachable(&e);
                return Err((self.err("connect", neuralcore_pg::describe(&e)), down));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                state.pending = Some(rx);
                return Err((
                    self.err("connect", format!("no answer within {wait:?}")),
                    true,
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err((self.err("connect", "the connecting thread died"), true));
            }
        };
        // Bounded by the server's statement_timeout.
        setup_table(&mut client, &self.setup_sql()).map_err(|e| {
            let down = unreachable(&e);
            (self.err("create table", neuralcore_pg::describe(&e)), down)
        })?;
        Ok(Conn {
            client,
            stmts: Default::default(),
        })
    }

    /// The statements creating the table and its indexes.
    fn setup_sql(&self) -> String {
        let (q, t) = (&self.quoted, &self.table);
        format!(
            "CREATE TABLE IF NOT EXISTS {q} (\
               key text COLLATE \"C\" PRIMARY KEY, \
               value bytea NOT NULL, \
               expires_at timestamptz NULL, \
               tags text[] NOT NULL DEFAULT '{{}}', \
               stored_at timestamptz NOT NULL DEFAULT clock_timestamp()); \
             CREATE INDEX IF NOT EXISTS \"{t}_tags\" ON {q} USING gin (tags); \
             CREATE INDEX IF NOT EXISTS \"{t}_exp\" ON {q} (expires_at) \
               WHERE expires_at IS NOT NULL;"
        )
    }

    /// Run `f` on the connection, opening one if there is none. A connection that
    /// failed as unreachable, or that the server closed, is dropped so the next call
    /// opens a fresh one.
    fn with_conn<T>(
        &self,
        what: &str,
        f: impl FnOnce(&mut Conn) -> Result<T, postgres::Error>,
    ) -> Result<T, TierError> {
        let mut state = self.state();
        if state.conn.is_none() {
            let c = self.connect(&mut state).map_err(|(e, _)| e)?;
            state.conn = Some(c);
        }
        let Some(conn) = state.conn.as_mut() else {
            return Err(self.err(what, "no connection"));
        };
        match f(conn) {
            Ok(v) => Ok(v),
            Err(e) => {
                if unreachable(&e) || conn.client.is_closed() {
                    state.conn = None;
                }
                Err(self.err(what, neuralcore_pg::describe(&e)))
            }
        }
    }

    /// Run statement `q` with `params`, preparing it on first use on this connection.
    fn query(
        &self,
        what: &str,
        q: Q,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, TierError> {
        self.with_conn(what, |c| {
            let stmt = c.prepared(&self.sql, q)?;
            c.client.query(&stmt, params)
        })
    }

    /// The first column of the only row of `q`, as a count.
    fn count(
        &self,
        what: &str,
        q: Q,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64, TierError> {
        let rows = self.query(what, q, params)?;
        let n: i64 = rows
            .first()
            .ok_or_else(|| self.err(what, "no row"))?
            .try_get(0)
            .map_err(|e| self.err(what, e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// After a write: purge expired rows now and then, and keep within the bound.
    fn after_write(&self, size: u64) -> Result<(), TierError> {
        let n = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(PURGE_EVERY) {
            self.query("purge expired", Q::Purge, &[&PURGE_BATCH])?;
        }
        let Some(max) = self.opts.max_bytes else {
            return Ok(());
        };
        let since = self.written.fetch_add(size, Ordering::Relaxed) + size;
        if since < (max / 10).max(1) {
            return Ok(());
        }
        self.written.store(0, Ordering::Relaxed);
        let total = self.count("measure", Q::Bytes, &[])?;
        if total <= max {
            return Ok(());
        }
        self.query("purge expired", Q::Purge, &[&i64::MAX])?;
        let target = i64::try_from(max / 10 * 9).unwrap_or(i64::MAX);
        let evicted = self.with_conn("evict", |c| {
            let stmt = c.prepared(&self.sql, Q::Evict)?;
            c.client.execute(&stmt, &[&target])
        })?;
        self.evictions.fetch_add(evicted, Ordering::Relaxed);
        Ok(())
    }
}

/// Create the table under the advisory lock (many clients may start at once).
fn setup_table(client: &mut Client, sql: &str) -> Result<(), postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SETUP_LOCK])?;
    tx.batch_execute(sql)?;
    tx.commit()
}

impl Tier for PgTier {
    fn name(&self) -> &'static str {
        NAME
    }

    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TierError> {
        let rows = self.query("get", Q::Get, &[&key])?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let expired: bool = row.try_get(1).map_err(|e| self.err("get", e))?;
        if expired {
            // Best effort: a failure here is the next read's business.
            let _ = self.query("drop expired", Q::DropExpired, &[&key]);
            return Ok(None);
        }
        let value: Vec<u8> = row.try_get(0).map_err(|e| self.err("get", e))?;
        Ok(Some(value))
    }

    fn put(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl: Option<Duration>,
        tags: &[String],
    ) -> Result<(), TierError> {
        let size = (key.len() + value.len()) as u64;
        if self.opts.max_bytes.is_some_and(|max| size > max) {
            return Ok(());
        }
        let mut distinct: Vec<&str> = tags.iter().map(String::as_str).collect();
        distinct.sort_unstable();
        distinct.dedup();
        self.query(
            "put",
            Q::Put,
            &[&key, &value, &ttl_ms(ttl), &distinct.as_slice()],
        )?;
        self.after_write(size)
    }

    fn delete(&self, key: &str) -> Result<bool, TierError> {
        Ok(self.count("delete", Q::Delete, &[&key])? > 0)
    }

    fn delete_tag(&self, tag: &str) -> Result<usize, TierError> {
        let n = self.count("delete_tag", Q::DeleteTag, &[&tag])?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn clear(&self) -> Result<usize, TierError> {
        let n = self.count("clear", Q::Clear, &[])?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn usage(&self) -> Result<TierUsage, TierError> {
        let rows = self.query("usage", Q::Usage, &[])?;
        let row = rows.first().ok_or_else(|| self.err("usage", "no row"))?;
        let entries: i64 = row.try_get(0).map_err(|e| self.err("usage", e))?;
        let bytes: i64 = row.try_get(1).map_err(|e| self.err("usage", e))?;
        Ok(TierUsage {
            entries: u64::try_from(entries).unwrap_or(0),
            bytes: u64::try_from(bytes).unwrap_or(0),
            evictions: self.evictions.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{quote_table, ttl_ms};
    use std::time::Duration;

    #[test]
    fn table_names_are_plain_identifiers() {
        assert_eq!(quote_table("cache_1").as_deref(), Some("\"cache_1\""));
        assert_eq!(quote_table("1cache"), None);
        assert_eq!(quote_table("a\"b"), None);
        assert_eq!(quote_table(""), None);
        assert_eq!(quote_table(&"a".repeat(56)), None);
    }

    #[test]
    fn ttls_are_whole_positive_milliseconds() {
        assert_eq!(ttl_ms(None), None);
        assert_eq!(ttl_ms(Some(Duration::ZERO)), Some(1));
        assert_eq!(ttl_ms(Some(Duration::from_millis(1500))), Some(1500));
        assert!(ttl_ms(Some(Duration::MAX)).unwrap() < i64::MAX);
    }
}
