//! The in-memory twin: raw tables as `BTreeMap`s behind a lock; a batch works on a copy
//! and swaps it in at commit, so readers never see half a batch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use neuralcore_core::{
    Chunk, CollectionInfo, DocKey, DocStore, DocumentRecord, EmbeddingKey, IndexJournal,
    SourceRecord, StoreBatch, StoreError, StoreResult,
};

use crate::logic::{Batch, Reader};
use crate::raw::{RawRead, RawWrite, Table, Visitor};

type Tables = BTreeMap<Table, BTreeMap<Vec<u8>, Vec<u8>>>;

/// A document store held in memory (for tests and ephemeral use).
#[derive(Default, Clone)]
pub struct InMemoryStore {
    tables: Arc<RwLock<Arc<Tables>>>,
    writer: Arc<Mutex<()>>,
    /// Reports itself as [`DocStore::shared`]: clones stand for processes sharing one
    /// server's store (tests of replicas without a server).
    shared: bool,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that says it is shared ([`DocStore::shared`]): engines over its
    /// clones behave as replicas over one server's store.
    pub fn new_shared() -> Self {
        InMemoryStore {
            shared: true,
            ..Self::default()
        }
    }

    fn snapshot(&self) -> Snapshot {
        Snapshot(self.tables.read().expect("lock").clone())
    }
}

struct Snapshot(Arc<Tables>);

fn visit_map(
    m: Option<&BTreeMap<Vec<u8>, Vec<u8>>>,
    prefix: &[u8],
    f: &mut Visitor<'_>,
) -> StoreResult<()> {
    let Some(m) = m else { return Ok(()) };
    for (k, v) in m
        .range(prefix.to_vec()..)
        .take_while(|(k, _)| k.starts_with(prefix))
    {
        f(k, v)?;
    }
    Ok(())
}

fn visit_map_range(
    m: Option<&BTreeMap<Vec<u8>, Vec<u8>>>,
    start: &[u8],
    end: &[u8],
    f: &mut Visitor<'_>,
) -> StoreResult<()> {
    let Some(m) = m else { return Ok(()) };
    if start >= end {
        return Ok(());
    }
    for (k, v) in m.range(start.to_vec()..end.to_vec()) {
        f(k, v)?;
    }
    Ok(())
}

impl RawRead for Snapshot {
    fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.0.get(&t).and_then(|m| m.get(key)).cloned())
    }
    fn len(&self, t: Table) -> StoreResult<u64> {
        Ok(self.0.get(&t).map_or(0, |m| m.len() as u64))
    }
    fn visit(&self, t: Table, prefix: &[u8], f: &mut Visitor<'_>) -> StoreResult<()> {
        visit_map(self.0.get(&t), prefix, f)
    }
    fn visit_range(
        &self,
        t: Table,
        start: &[u8],
        end: &[u8],
        f: &mut Visitor<'_>,
    ) -> StoreResult<()> {
        visit_map_range(self.0.get(&t), start, end, f)
    }
}

struct MemTxn<'a> {
    work: Tables,
    target: &'a RwLock<Arc<Tables>>,
    _guard: MutexGuard<'a, ()>,
}

impl RawRead for MemTxn<'_> {
    fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>> {
        Ok(self.work.get(&t).and_then(|m| m.get(key)).cloned())
    }
    fn len(&self, t: Table) -> StoreResult<u64> {
        Ok(self.work.get(&t).map_or(0, |m| m.len() as u64))
    }
    fn visit(&self, t: Table, prefix: &[u8], f: &mut Visitor<'_>) -> StoreResult<()> {
        visit_map(self.work.get(&t), prefix, f)
    }
    fn visit_range(
        &self,
        t: Table,
        start: &[u8],
        end: &[u8],
        f: &mut Visitor<'_>,
    ) -> StoreResult<()> {
        visit_map_range(self.work.get(&t), start, end, f)
    }
}

impl RawWrite for MemTxn<'_> {
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> StoreResult<bool> {
        Ok(self
            .work
            .entry(t)
            .or_default()
            .insert(key.to_vec(), value.to_vec())
            .is_some())
    }
    fn del(&mut self, t: Table, key: &[u8]) -> StoreResult<bool> {
        Ok(self.work.entry(t).or_default().remove(key).is_some())
    }
    fn retain(&mut self, t: Table, keep: &mut dyn FnMut(&[u8]) -> bool) -> StoreResult<u64> {
        let m = self.work.entry(t).or_default();
        let before = m.len();
        m.retain(|k, _| keep(k));
        Ok((before - m.len()) as u64)
    }
    fn commit(self: Box<Self>) -> StoreResult<()> {
        *self
            .target
            .write()
            .map_err(|_| StoreError::Backend("poisoned lock".into()))? = Arc::new(self.work);
        Ok(())
    }
}

impl DocStore for InMemoryStore {
    fn collections(&self) -> StoreResult<Vec<CollectionInfo>> {
        Reader(&self.snapshot()).collections()
    }
    fn collection(&self, name: &str) -> StoreResult<Option<CollectionInfo>> {
        Reader(&self.snapshot()).collection(name)
    }
    fn source(&self, c: &str, s: &str) -> StoreResult<Option<SourceRecord>> {
        Reader(&self.snapshot()).source(c, s)
    }
    fn sources(&self, c: &str) -> StoreResult<Vec<SourceRecord>> {
        Reader(&self.snapshot()).sources(c)
    }
    fn document(&self, c: &str, key: DocKey) -> StoreResult<Option<DocumentRecord>> {
        Reader(&self.snapshot()).document(c, key)
    }
    fn document_keys(&self, c: &str) -> StoreResult<Vec<DocKey>> {
        Reader(&self.snapshot()).document_keys(c)
    }
    fn chunks(&self, key: DocKey) -> StoreResult<Vec<Chunk>> {
        Reader(&self.snapshot()).chunks(key)
    }
    fn chunk(&self, key: DocKey, ordinal: u32) -> StoreResult<Option<Chunk>> {
        Reader(&self.snapshot()).chunk(key, ordinal)
    }
    fn index_journal(&self, c: &str) -> StoreResult<IndexJournal> {
        Reader(&self.snapshot()).journal(c)
    }
    fn index_journals(
        &self,
        c: &str,
        after: u64,
        upto: u64,
    ) -> StoreResult<Option<Vec<IndexJournal>>> {
        Reader(&self.snapshot()).journals(c, after, upto)
    }
    fn embeddings(&self, keys: &[EmbeddingKey]) -> StoreResult<Vec<Option<Vec<f32>>>> {
        Reader(&self.snapshot()).embeddings(keys)
    }
    fn embedding_models(&self) -> StoreResult<Vec<String>> {
        Reader(&self.snapshot()).embedding_models()
    }
    fn embedding_count(&self) -> StoreResult<u64> {
        self.snapshot().len(Table::Embeddings)
    }
    fn shared(&self) -> bool {
        self.shared
    }
    fn begin(&self) -> StoreResult<Box<dyn StoreBatch + '_>> {
        let guard = self
            .writer
            .lock()
            .map_err(|_| StoreError::Backend("poisoned lock".into()))?;
        let work = (**self.tables.read().expect("lock")).clone();
        Ok(Box::new(Batch::new(MemTxn {
            work,
            target: &self.tables,
            _guard: guard,
        })))
    }
}
