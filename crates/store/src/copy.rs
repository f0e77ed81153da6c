//! A consistent copy of a redb database into a new file (for backups): one read
//! transaction is the snapshot, so writers go on meanwhile and the copy holds exactly
//! what was committed when it began, table by table as each owner names them.

use std::path::Path;

use redb::{Database, Key, ReadTransaction, TableDefinition, TableError, Value, WriteTransaction};

/// A copy under way: tables are added with [`RedbCopy::table`], and [`RedbCopy::finish`]
/// commits the new file.
pub struct RedbCopy {
    // Dropped in this order: the write transaction (aborted unless finished) before the
    // database it writes.
    read: ReadTransaction,
    write: WriteTransaction,
    _db: Database,
    rows: u64,
}

/// Why a copy failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CopyError(String);

fn err(e: impl std::fmt::Display) -> CopyError {
    CopyError(e.to_string())
}

impl RedbCopy {
    /// Snapshot `src` and create `dest` (which must not exist) for the copy.
    pub fn begin(src: &Database, dest: &Path) -> Result<RedbCopy, CopyError> {
        if dest.exists() {
            return Err(CopyError(format!("{} exists already", dest.display())));
        }
        let read = src.begin_read().map_err(err)?;
        let db = Database::create(dest).map_err(err)?;
        let write = db.begin_write().map_err(err)?;
        Ok(RedbCopy {
            read,
            write,
            _db: db,
            rows: 0,
        })
    }

    /// Copy one table of the snapshot (none when the source never created it).
    pub fn table<K: Key + 'static, V: Value + 'static>(
        &mut self,
        def: TableDefinition<K, V>,
    ) -> Result<&mut Self, CopyError> {
        let from = match self.read.open_table(def) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(self),
            Err(e) => return Err(err(e)),
        };
        let mut rows = 0;
        {
            let mut to = self.write.open_table(def).map_err(err)?;
            for entry in redb::ReadableTable::iter(&from).map_err(err)? {
                let (k, v) = entry.map_err(err)?;
                to.insert(k.value(), v.value()).map_err(err)?;
                rows += 1;
            }
        }
        self.rows += rows;
        Ok(self)
    }

    /// Commit the copy (durably); how many rows it holds.
    pub fn finish(self) -> Result<u64, CopyError> {
        let rows = self.rows;
        self.write.commit().map_err(err)?;
        Ok(rows)
    }
}
