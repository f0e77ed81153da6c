//! A redb database that reopens itself after an I/O error. After one (a full disk) redb
//! refuses every later read and write of that database until it is opened again; here
//! the next call reopens it, once no transaction is open: transactions live under the
//! read guard [`ReopeningDb::get`] hands out, and a reopen only tries the write lock (it
//! never waits for a transaction, a later call tries again). redb repairs on open what
//! the failed commit left.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, TryLockError};

/// Opens the database (again).
pub type Opener = Box<dyn Fn() -> Result<redb::Database, redb::DatabaseError> + Send + Sync>;

/// A redb database reopened after an I/O error.
pub struct ReopeningDb {
    /// `None` while a reopen failed (the next call tries again).
    db: RwLock<Option<redb::Database>>,
    /// An I/O error hit the open database: reopen it before the next transaction.
    broken: AtomicBool,
    open: Opener,
}

/// The open database, held for as long as a transaction on it lives.
pub struct DbRef<'a>(RwLockReadGuard<'a, Option<redb::Database>>);

impl Deref for DbRef<'_> {
    type Target = redb::Database;

    fn deref(&self) -> &redb::Database {
        self.0.as_ref().expect("a DbRef holds an open database")
    }
}

impl ReopeningDb {
    /// Over `db`, which `open` opens again after an I/O error.
    pub fn new(db: redb::Database, open: Opener) -> Self {
        ReopeningDb {
            db: RwLock::new(Some(db)),
            broken: AtomicBool::new(false),
            open,
        }
    }

    /// The flag an I/O error sets: the database is reopened on the next [`get`](Self::get).
    pub fn broken(&self) -> &AtomicBool {
        &self.broken
    }

    /// The open database, reopened first when an I/O error broke it; else the error
    /// reopening it gave (`None`: a reopen waits for open transactions to end).
    pub fn get(&self) -> Result<DbRef<'_>, Option<redb::DatabaseError>> {
        let failed = if self.broken.load(Ordering::SeqCst) {
            self.reopen().err()
        } else {
            None
        };
        let g = self.db.read().unwrap_or_else(PoisonError::into_inner);
        if g.is_none() {
            return Err(failed);
        }
        Ok(DbRef(g))
    }

    /// Reopen the database when no transaction is open (else leave it to a later call).
    fn reopen(&self) -> Result<(), redb::DatabaseError> {
        let mut g = match self.db.try_write() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(()),
        };
        if !self.broken.load(Ordering::SeqCst) {
            return Ok(());
        }
        // The old handle holds the file's lock: close it first.
        *g = None;
        *g = Some((self.open)()?);
        self.broken.store(false, Ordering::SeqCst);
        Ok(())
    }
}
