//! The embedded persistent store: one redb file in the data dir. redb commits are
//! atomic and durable (copy-on-write B-trees with a checksummed commit slot), so a
//! `kill -9` at any moment leaves the last committed batch intact and nothing of a
//! half-done one.
//!
//! An I/O error (a full disk) fails the batch it hit, and redb then refuses every later
//! read and write of that database until it is opened again: the store reopens it on
//! its next call, once no transaction is open (redb repairs what the failed commit left).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::reopen::{DbRef, Opener, ReopeningDb};

use neuralcore_core::{
    Chunk, CollectionInfo, DocKey, DocStore, DocumentRecord, EmbeddingKey, IndexJournal,
    SourceRecord, StoreBatch, StoreError, StoreResult,
};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::logic::{Batch, Reader};
use crate::raw::{RawRead, RawWrite, Table, Visitor};

/// Page cache of the store: bounds memory on large ingests (redb's default is 1 GiB).
const CACHE_BYTES: usize = 64 * 1024 * 1024;

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

const COLLECTIONS: Def = TableDefinition::new("collections");
const SOURCES: Def = TableDefinition::new("sources");
const DOCUMENTS: Def = TableDefinition::new("documents");
const CHUNKS: Def = TableDefinition::new("chunks");
const JOURNAL: Def = TableDefinition::new("journal");
const JOURNAL_LOG: Def = TableDefinition::new("journal_log");
const EMBEDDINGS: Def = TableDefinition::new("embeddings");
const EMBEDDING_MODELS: Def = TableDefinition::new("embedding_models");

fn def(t: Table) -> Def {
    match t {
        Table::Collections => COLLECTIONS,
        Table::Sources => SOURCES,
        Table::Documents => DOCUMENTS,
        Table::Chunks => CHUNKS,
        Table::Journal => JOURNAL,
        Table::JournalLog => JOURNAL_LOG,
        Table::Embeddings => EMBEDDINGS,
        Table::EmbeddingModels => EMBEDDING_MODELS,
    }
}

/// A redb error as a store error; an I/O error marks the database `broken` (to reopen).
fn be<E: Into<redb::Error>>(broken: &AtomicBool, e: E) -> StoreError {
    match e.into() {
        redb::Error::Io(io) => {
            broken.store(true, Ordering::SeqCst);
            match io.kind() {
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                    StoreError::Full(io.to_string())
                }
                _ => StoreError::Backend(format!("I/O error: {io}")),
            }
        }
        redb::Error::PreviousIo => {
            broken.store(true, Ordering::SeqCst);
            StoreError::Unavailable("the store is reopening after an I/O error".into())
        }
        other => StoreError::Backend(other.to_string()),
    }
}

/// A document store in one redb file.
pub struct RedbStore {
    db: ReopeningDb,
    path: PathBuf,
}

impl RedbStore {
    /// Open (or create) the store at `path`. Fails with `Unavailable` when another
    /// process has it open.
    pub fn open(path: &Path) -> StoreResult<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| StoreError::Unavailable(format!("{}: {e}", parent.display())))?;
        }
        let p = path.to_path_buf();
        let open: Opener =
            Box::new(move || redb::Builder::new().set_cache_size(CACHE_BYTES).create(&p));
        let db = open().map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Unavailable(format!(
                "{} is in use by another neuralcore process",
                path.display()
            )),
            redb::DatabaseError::Storage(redb::StorageError::Io(io))
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
                ) =>
            {
                StoreError::Full(io.to_string())
            }
            other => StoreError::Unavailable(format!("{}: {other}", path.display())),
        })?;
        RedbStore::with_db(db, open, path)
    }

    /// The store over an open database, creating its tables.
    fn with_db(db: redb::Database, open: Opener, path: &Path) -> StoreResult<Self> {
        let db = ReopeningDb::new(db, open);
        let broken = db.broken();
        let txn = db
            .get()
            .map_err(|_| StoreError::Unavailable("the store could not be opened".into()))?
            .begin_write()
            .map_err(|e| be(broken, e))?;
        for t in Table::ALL {
            txn.open_table(def(t)).map_err(|e| be(broken, e))?;
        }
        txn.commit().map_err(|e| be(broken, e))?;
        Ok(RedbStore {
            db,
            path: path.to_path_buf(),
        })
    }

    /// The file it lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open database, reopened first when an I/O error broke it.
    fn db(&self) -> StoreResult<DbRef<'_>> {
        self.db.get().map_err(|failed| match failed {
            Some(redb::DatabaseError::Storage(e)) => be(self.db.broken(), e),
            _ => StoreError::Unavailable("the store is reopening after an I/O error".into()),
        })
    }

    fn read(&self) -> StoreResult<ReadTxn<'_>> {
        let db = self.db()?;
        let broken = self.db.broken();
        let txn = db.begin_read().map_err(|e| be(broken, e))?;
        Ok(ReadTxn {
            txn,
            broken,
            _db: db,
        })
    }
}

/// A read transaction (dropped before the guard of its database).
struct ReadTxn<'a> {
    txn: redb::ReadTransaction,
    broken: &'a AtomicBool,
    _db: DbRef<'a>,
}

fn visit_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    t: &T,
    prefix: &[u8],
    broken: &AtomicBool,
    f: &mut Visitor<'_>,
) -> StoreResult<()> {
    for item in t.range::<&[u8]>(prefix..).map_err(|e| be(broken, e))? {
        let (k, v) = item.map_err(|e| be(broken, e))?;
        if !k.value().starts_with(prefix) {
            break;
        }
        f(k.value(), v.value())?;
    }
    Ok(())
}

/// The reads of a redb transaction, read-only or writing (their tables differ in type).
macro_rules! raw_read {
    ($txn:ident) => {
        impl RawRead for $txn<'_> {
            fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
                let table = self
                    .txn
                    .open_table(def(t))
                    .map_err(|e| be(self.broken, e))?;
                let v = table
                    .get(key)
                    .map_err(|e| be(self.broken, e))?
                    .map(|v| v.value().to_vec());
                Ok(v)
            }
            fn len(&self, t: Table) -> StoreResult<u64> {
                let table = self
                    .txn
                    .open_table(def(t))
                    .map_err(|e| be(self.broken, e))?;
                table.len().map_err(|e| be(self.broken, e))
            }
            fn visit(&self, t: Table, prefix: &[u8], f: &mut Visitor<'_>) -> StoreResult<()> {
                let table = self
                    .txn
                    .open_table(def(t))
                    .map_err(|e| be(self.broken, e))?;
                visit_table(&table, prefix, self.broken, f)
            }
            fn visit_range(
                &self,
                t: Table,
                start: &[u8],
                end: &[u8],
                f: &mut Visitor<'_>,
            ) -> StoreResult<()> {
                let table = self
                    .txn
                    .open_table(def(t))
                    .map_err(|e| be(self.broken, e))?;
                for item in table
                    .range::<&[u8]>(start..end)
                    .map_err(|e| be(self.broken, e))?
                {
                    let (k, v) = item.map_err(|e| be(self.broken, e))?;
                    f(k.value(), v.value())?;
                }
                Ok(())
            }
        }
    };
}

raw_read!(ReadTxn);

/// A write transaction (dropped before the guard of its database).
struct WriteTxn<'a> {
    txn: redb::WriteTransaction,
    broken: &'a AtomicBool,
    _db: DbRef<'a>,
}

raw_read!(WriteTxn);

impl RawWrite for WriteTxn<'_> {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> StoreResult<bool> {
        let mut table = self
            .txn
            .open_table(def(t))
            .map_err(|e| be(self.broken, e))?;
        let existed = table
            .insert(key, value)
            .map_err(|e| be(self.broken, e))?
            .is_some();
        Ok(existed)
    }
    fn del(&mut self, t: Table, key: &[u8]) -> StoreResult<bool> {
        let mut table = self
            .txn
            .open_table(def(t))
            .map_err(|e| be(self.broken, e))?;
        let existed = table.remove(key).map_err(|e| be(self.broken, e))?.is_some();
        Ok(existed)
    }
    fn retain(&mut self, t: Table, keep: &mut dyn FnMut(&[u8]) -> bool) -> StoreResult<u64> {
        let mut table = self
            .txn
            .open_table(def(t))
            .map_err(|e| be(self.broken, e))?;
        let before = table.len().map_err(|e| be(self.broken, e))?;
        table
            .retain(|k, _| keep(k))
            .map_err(|e| be(self.broken, e))?;
        let after = table.len().map_err(|e| be(self.broken, e))?;
        Ok(before - after)
    }
    fn commit(self: Box<Self>) -> StoreResult<()> {
        let WriteTxn { txn, broken, _db } = *self;
        txn.commit().map_err(|e| be(broken, e))
    }
}

impl DocStore for RedbStore {
    fn backup_to(&self, dest: &Path) -> StoreResult<u64> {
        let db = self.db()?;
        let io = |e: crate::copy::CopyError| StoreError::Backend(e.to_string());
        let mut copy = crate::copy::RedbCopy::begin(&db, dest).map_err(io)?;
        for t in Table::ALL {
            copy.table(def(t)).map_err(io)?;
        }
        copy.finish().map_err(io)
    }
    fn collections(&self) -> StoreResult<Vec<CollectionInfo>> {
        Reader(&self.read()?).collections()
    }
    fn collection(&self, name: &str) -> StoreResult<Option<CollectionInfo>> {
        Reader(&self.read()?).collection(name)
    }
    fn source(&self, c: &str, s: &str) -> StoreResult<Option<SourceRecord>> {
        Reader(&self.read()?).source(c, s)
    }
    fn sources(&self, c: &str) -> StoreResult<Vec<SourceRecord>> {
        Reader(&self.read()?).sources(c)
    }
    fn document(&self, c: &str, key: DocKey) -> StoreResult<Option<DocumentRecord>> {
        Reader(&self.read()?).document(c, key)
    }
    fn document_keys(&self, c: &str) -> StoreResult<Vec<DocKey>> {
        Reader(&self.read()?).document_keys(c)
    }
    fn chunks(&self, key: DocKey) -> StoreResult<Vec<Chunk>> {
        Reader(&self.read()?).chunks(key)
    }
    fn chunk(&self, key: DocKey, ordinal: u32) -> StoreResult<Option<Chunk>> {
        Reader(&self.read()?).chunk(key, ordinal)
    }
    fn index_journal(&self, c: &str) -> StoreResult<IndexJournal> {
        Reader(&self.read()?).journal(c)
    }
    fn index_journals(
        &self,
        c: &str,
        after: u64,
        upto: u64,
    ) -> StoreResult<Option<Vec<IndexJournal>>> {
        Reader(&self.read()?).journals(c, after, upto)
    }
    fn embeddings(&self, keys: &[EmbeddingKey]) -> StoreResult<Vec<Option<Vec<f32>>>> {
        Reader(&self.read()?).embeddings(keys)
    }
    fn embedding_models(&self) -> StoreResult<Vec<String>> {
        Reader(&self.read()?).embedding_models()
    }
    fn embedding_count(&self) -> StoreResult<u64> {
        self.read()?.len(Table::Embeddings)
    }
    fn begin(&self) -> StoreResult<Box<dyn StoreBatch + '_>> {
        let db = self.db()?;
        let broken = self.db.broken();
        let txn = db.begin_write().map_err(|e| be(broken, e))?;
        Ok(Box::new(Batch::new(WriteTxn {
            txn,
            broken,
            _db: db,
        })))
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::Arc;

    use super::*;
    use crate::conformance::sample_doc;

    /// An in-memory file on a disk that can fill up: while `full` is set, a write to a
    /// part of the file never written before fails with ENOSPC (rewriting allocated blocks
    /// needs no space, as on a real file system).
    #[derive(Debug)]
    struct Disk {
        bytes: Arc<redb::backends::InMemoryBackend>,
        full: Arc<AtomicBool>,
        allocated: Arc<std::sync::atomic::AtomicU64>,
    }

    impl redb::StorageBackend for Disk {
        fn len(&self) -> io::Result<u64> {
            self.bytes.len()
        }
        fn read(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
            self.bytes.read(offset, len)
        }
        fn set_len(&self, len: u64) -> io::Result<()> {
            self.bytes.set_len(len)
        }
        fn sync_data(&self, eventual: bool) -> io::Result<()> {
            self.bytes.sync_data(eventual)
        }
        fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            let end = offset + data.len() as u64;
            if self.full.load(Ordering::SeqCst) && end > self.allocated.load(Ordering::SeqCst) {
                return Err(io::Error::from(io::ErrorKind::StorageFull));
            }
            self.allocated.fetch_max(end, Ordering::SeqCst);
            self.bytes.write(offset, data)
        }
    }

    #[test]
    fn a_full_disk_fails_the_batch_and_the_store_recovers_once_there_is_room() {
        let bytes = Arc::new(redb::backends::InMemoryBackend::new());
        let full = Arc::new(AtomicBool::new(false));
        let allocated = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (b, f) = (bytes.clone(), full.clone());
        let open: Opener = Box::new(move || {
            redb::Builder::new().create_with_backend(Disk {
                bytes: b.clone(),
                full: f.clone(),
                allocated: allocated.clone(),
            })
        });
        let db = open().unwrap();
        let s = RedbStore::with_db(db, open, Path::new("mem")).unwrap();
        // A document of about `kib` KiB.
        let put = |name: &str, kib: usize| {
            let mut d = sample_doc("c", name);
            d.title = "x".repeat(kib * 1024);
            let mut b = s.begin()?;
            b.ensure_collection("c", "t")?;
            b.put_document(&d)?;
            b.commit().map(|()| d.key)
        };
        let kept = put("kept", 1).unwrap();

        full.store(true, Ordering::SeqCst);
        let err = put("lost", 512).unwrap_err();
        assert!(matches!(err, StoreError::Full(_)), "{err}");
        assert!(err.is_transient());
        // Still full: the store reopens, what was committed reads back, writes that need
        // space still fail.
        assert_eq!(s.document("c", kept).unwrap().unwrap().title.len(), 1024);
        let err = put("lost", 512).unwrap_err();
        assert!(matches!(err, StoreError::Full(_)), "{err}");

        full.store(false, Ordering::SeqCst);
        assert_eq!(s.document("c", kept).unwrap().unwrap().title.len(), 1024);
        assert_eq!(s.document_keys("c").unwrap(), vec![kept]);
        let later = put("later", 512).unwrap();
        assert!(s.document("c", later).unwrap().is_some());
    }
}
