//! A small connection pool: up to `max` connections, opened on demand, each with its own
//! prepared statements. A connection that failed as unavailable, or that the server
//! closed, is dropped on return, so the next checkout opens a fresh one.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use postgres::{Client, Statement};

use crate::error::{self, PgError, PgResult};
use crate::Target;

/// One connection and the statements prepared on it.
pub struct Conn {
    /// The client.
    pub client: Client,
    /// Statements prepared on this connection, by their text.
    stmts: HashMap<String, Statement>,
    /// Taken from the idle list (it may have gone stale), not opened for this checkout.
    pub reused: bool,
    /// Failed as unavailable: close it instead of returning it to the pool.
    pub broken: bool,
}

impl Conn {
    /// The statement `sql` prepared on this connection, preparing it on first use;
    /// `url` (without its password) names the server in errors.
    pub fn stmt(&mut self, sql: &str, url: &str) -> PgResult<Statement> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).map_err(|e| error::map(e, url))?;
        self.stmts.insert(sql.to_string(), s.clone());
        Ok(s)
    }
}

struct State {
    idle: Vec<Conn>,
    /// Connections checked out or idle.
    open: usize,
}

/// The pool.
pub struct Pool {
    target: Target,
    /// The URL without its password, for messages.
    pub url: String,
    max: usize,
    /// How long a checkout waits for a free connection.
    wait: Duration,
    state: Mutex<State>,
    freed: Condvar,
}

impl Pool {
    /// A pool of at most `max` (≥ 1) connections to `target`.
    pub fn new(target: Target, max: usize, wait: Duration) -> Pool {
        Pool {
            url: target.shown.clone(),
            target,
            max: max.max(1),
            wait,
            state: Mutex::new(State {
                idle: Vec::new(),
                open: 0,
            }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is two plain fields, consistent at every unlock: a panic elsewhere
        // cannot leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Open a new connection (not counted; the caller counts it).
    pub fn open(&self) -> PgResult<Conn> {
        let client = self
            .target
            .connect()
            .map_err(|e| error::map(e, &self.url))?;
        Ok(Conn {
            client,
            stmts: HashMap::new(),
            reused: false,
            broken: false,
        })
    }

    /// A connection: an idle one, a new one when fewer than `max` are open, else the
    /// next one returned (waiting at most `wait`).
    pub fn get(&self) -> PgResult<PooledConn<'_>> {
        let deadline = Instant::now() + self.wait;
        let mut st = self.lock();
        loop {
            while let Some(mut c) = st.idle.pop() {
                c.reused = true;
                if c.client.is_closed() {
                    st.open -= 1;
                    continue;
                }
                return Ok(PooledConn {
                    pool: self,
                    conn: Some(c),
                });
            }
            if st.open < self.max {
                st.open += 1;
                drop(st);
                return match self.open() {
                    Ok(c) => Ok(PooledConn {
                        pool: self,
                        conn: Some(c),
                    }),
                    Err(e) => {
                        self.lock().open -= 1;
                        self.freed.notify_one();
                        Err(e)
                    }
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(PgError::Unavailable(format!(
                    "{}: all {} connections busy for {:?}",
                    self.url, self.max, self.wait
                )));
            }
            st = self
                .freed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Pool {
    /// Run a read on a pooled connection. When it fails as unavailable on a connection
    /// that had been used before (the server restarted, or ended an idle session), that
    /// connection is dropped and the read runs once more on a fresh one.
    /// `from` turns a pool error into the caller's, `unavailable` says which of those
    /// mean the connection is gone.
    pub fn read<T, E>(
        &self,
        from: fn(PgError) -> E,
        unavailable: fn(&E) -> bool,
        f: impl Fn(&mut Conn) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.get().map_err(from)?;
        match f(&mut conn) {
            Err(e) if unavailable(&e) => {
                conn.broken = true;
                if !conn.reused {
                    return Err(e);
                }
                tracing::debug!(url = %self.url, "stale PostgreSQL connection; retrying the read");
                drop(conn);
                let mut conn = self.get().map_err(from)?;
                let r = f(&mut conn);
                conn.broken = matches!(&r, Err(e) if unavailable(e));
                r
            }
            r => r,
        }
    }

    /// Run a write on a pooled connection; a connection that failed as unavailable is
    /// dropped. Writes are not retried: whether a lost commit happened is unknown.
    pub fn write<T, E>(
        &self,
        from: fn(PgError) -> E,
        unavailable: fn(&E) -> bool,
        f: impl FnOnce(&mut Conn) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.get().map_err(from)?;
        let r = f(&mut conn);
        conn.broken = matches!(&r, Err(e) if unavailable(e));
        r
    }
}

/// A checked-out connection; returned to the pool when dropped.
pub struct PooledConn<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
}

impl std::ops::Deref for PooledConn<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl std::ops::DerefMut for PooledConn<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        let Some(c) = self.conn.take() else { return };
        let mut st = self.pool.lock();
        if c.broken || c.client.is_closed() {
            st.open -= 1;
        } else {
            st.idle.push(c);
        }
        drop(st);
        self.pool.freed.notify_one();
    }
}
