//! The embedded persistent store: one redb file in the data dir. redb commits are
//! atomic and durable (copy-on-write B-trees with a checksummed commit slot), so a
//! `kill -9` at any moment leaves the last committed batch intact and nothing of a
//! half-done one.

use std::path::{Path, PathBuf};

use neuralcore_core::{
    Chunk, CollectionInfo, DocKey, DocStore, DocumentRecord, EmbeddingKey, IndexJournal,
    SourceRecord, StoreBatch, StoreError, StoreResult,
};
use redb::{ReadableTable, TableDefinition};

use crate::logic::{Batch, Reader};
use crate::raw::{RawRead, RawWrite, Table};

/// Page cache of the store: bounds memory on large ingests (redb's default is 1 GiB).
const CACHE_BYTES: usize = 64 * 1024 * 1024;

type Def = TableDefinition<'static, &'static [u8], &'static [u8]>;

const COLLECTIONS: Def = TableDefinition::new("collections");
const SOURCES: Def = TableDefinition::new("sources");
const DOCUMENTS: Def = TableDefinition::new("documents");
const CHUNKS: Def = TableDefinition::new("chunks");
const JOURNAL: Def = TableDefinition::new("journal");
const EMBEDDINGS: Def = TableDefinition::new("embeddings");

fn def(t: Table) -> Def {
    match t {
        Table::Collections => COLLECTIONS,
        Table::Sources => SOURCES,
        Table::Documents => DOCUMENTS,
        Table::Chunks => CHUNKS,
        Table::Journal => JOURNAL,
        Table::Embeddings => EMBEDDINGS,
    }
}

fn be<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// A document store in one redb file.
pub struct RedbStore {
    db: redb::Database,
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
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| match e {
                redb::DatabaseError::DatabaseAlreadyOpen => StoreError::Unavailable(format!(
                    "{} is in use by another neuralcore process",
                    path.display()
                )),
                other => StoreError::Unavailable(format!("{}: {other}", path.display())),
            })?;
        let txn = db.begin_write().map_err(be)?;
        for t in Table::ALL {
            txn.open_table(def(t)).map_err(be)?;
        }
        txn.commit().map_err(be)?;
        Ok(RedbStore {
            db,
            path: path.to_path_buf(),
        })
    }

    /// The file it lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> StoreResult<ReadTxn> {
        Ok(ReadTxn(self.db.begin_read().map_err(be)?))
    }
}

struct ReadTxn(redb::ReadTransaction);

fn scan_table<T: ReadableTable<&'static [u8], &'static [u8]>>(
    t: &T,
    prefix: &[u8],
) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut out = Vec::new();
    for item in t.range::<&[u8]>(prefix..).map_err(be)? {
        let (k, v) = item.map_err(be)?;
        if !k.value().starts_with(prefix) {
            break;
        }
        out.push((k.value().to_vec(), v.value().to_vec()));
    }
    Ok(out)
}

impl RawRead for ReadTxn {
    fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let table = self.0.open_table(def(t)).map_err(be)?;
        Ok(table.get(key).map_err(be)?.map(|v| v.value().to_vec()))
    }
    fn scan(&self, t: Table, prefix: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let table = self.0.open_table(def(t)).map_err(be)?;
        scan_table(&table, prefix)
    }
}

struct WriteTxn(redb::WriteTransaction);

impl RawRead for WriteTxn {
    fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        let table = self.0.open_table(def(t)).map_err(be)?;
        let v = table.get(key).map_err(be)?.map(|v| v.value().to_vec());
        Ok(v)
    }
    fn scan(&self, t: Table, prefix: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let table = self.0.open_table(def(t)).map_err(be)?;
        scan_table(&table, prefix)
    }
}

impl RawWrite for WriteTxn {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> StoreResult<bool> {
        let mut table = self.0.open_table(def(t)).map_err(be)?;
        let existed = table.insert(key, value).map_err(be)?.is_some();
        Ok(existed)
    }
    fn del(&mut self, t: Table, key: &[u8]) -> StoreResult<bool> {
        let mut table = self.0.open_table(def(t)).map_err(be)?;
        let existed = table.remove(key).map_err(be)?.is_some();
        Ok(existed)
    }
    fn commit(self: Box<Self>) -> StoreResult<()> {
        self.0.commit().map_err(be)
    }
}

impl DocStore for RedbStore {
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
    fn embeddings(&self, keys: &[EmbeddingKey]) -> StoreResult<Vec<Option<Vec<f32>>>> {
        Reader(&self.read()?).embeddings(keys)
    }
    fn begin(&self) -> StoreResult<Box<dyn StoreBatch + '_>> {
        let txn = self.db.begin_write().map_err(be)?;
        Ok(Box::new(Batch::new(WriteTxn(txn))))
    }
}
