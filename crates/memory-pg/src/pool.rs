//! A small connection pool: up to `max` connections, opened on demand, each with its own
//! prepared statements. A connection that failed as unavailable, or that the server
//! closed, is dropped on return, so the next checkout opens a fresh one.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use neuralcore_memory::{MemResult, MemoryError};
use postgres::{Client, NoTls, Statement};

use crate::error;
use crate::sql::{Sql, Q};

/// One connection and the statements prepared on it.
pub(crate) struct Conn {
    pub(crate) client: Client,
    stmts: [Option<Statement>; Q::COUNT],
    /// Taken from the idle list (it may have gone stale), not opened for this checkout.
    pub(crate) reused: bool,
    /// Failed as unavailable: close it instead of returning it to the pool.
    pub(crate) broken: bool,
}

impl Conn {
    /// The prepared statement for `q`, preparing it on first use.
    pub(crate) fn stmt(&mut self, sql: &Sql, q: Q, url: &str) -> MemResult<Statement> {
        let slot = &mut self.stmts[q as usize];
        if let Some(s) = slot {
            return Ok(s.clone());
        }
        let s = self
            .client
            .prepare(sql.text(q))
            .map_err(|e| error::map(e, url))?;
        *slot = Some(s.clone());
        Ok(s)
    }
}

struct State {
    idle: Vec<Conn>,
    /// Connections checked out or idle.
    open: usize,
}

/// The pool.
pub(crate) struct Pool {
    config: postgres::Config,
    /// The URL without its password, for messages.
    pub(crate) url: String,
    max: usize,
    /// How long a checkout waits for a free connection.
    wait: Duration,
    state: Mutex<State>,
    freed: Condvar,
}

impl Pool {
    /// A pool of at most `max` (≥ 1) connections to `config`.
    pub(crate) fn new(config: postgres::Config, url: String, max: usize, wait: Duration) -> Pool {
        Pool {
            config,
            url,
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
    pub(crate) fn open(&self) -> MemResult<Conn> {
        let client = self
            .config
            .connect(NoTls)
            .map_err(|e| error::map(e, &self.url))?;
        Ok(Conn {
            client,
            stmts: Default::default(),
            reused: false,
            broken: false,
        })
    }

    /// A connection: an idle one, a new one when fewer than `max` are open, else the
    /// next one returned (waiting at most `wait`).
    pub(crate) fn get(&self) -> MemResult<PooledConn<'_>> {
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
                return Err(MemoryError::Unavailable(format!(
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

/// A checked-out connection; returned to the pool when dropped.
pub(crate) struct PooledConn<'a> {
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
