//! Raw ordered byte tables: the whole contract a backend has to fulfil.

use neuralcore_core::StoreResult;

/// The tables of a document store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Table {
    /// collection → CollectionInfo
    Collections,
    /// collection \0 source id → SourceRecord
    Sources,
    /// collection \0 doc key (BE) → DocumentRecord
    Documents,
    /// doc key (BE) ordinal (BE) → Chunk
    Chunks,
    /// collection → IndexJournal (the last batch's)
    Journal,
    /// collection \0 generation (BE) → IndexJournal: the log of batches
    JournalLog,
    /// SHA-256(model id \0 text) → f32 little-endian vector
    Embeddings,
    /// model id → (): every model that has put a vector in `Embeddings`
    EmbeddingModels,
}

impl Table {
    pub(crate) const ALL: [Table; 8] = [
        Table::Collections,
        Table::Sources,
        Table::Documents,
        Table::Chunks,
        Table::Journal,
        Table::JournalLog,
        Table::Embeddings,
        Table::EmbeddingModels,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Table::Collections => "collections",
            Table::Sources => "sources",
            Table::Documents => "documents",
            Table::Chunks => "chunks",
            Table::Journal => "journal",
            Table::JournalLog => "journal_log",
            Table::Embeddings => "embeddings",
            Table::EmbeddingModels => "embedding_models",
        }
    }
}

/// What [`RawRead::visit`] calls on each entry (key, value).
pub(crate) type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> StoreResult<()> + 'a;

/// Reads of a consistent snapshot.
pub(crate) trait RawRead {
    fn get(&self, t: Table, key: &[u8]) -> StoreResult<Option<Vec<u8>>>;
    /// Every entry whose key starts with `prefix`, in key order.
    fn scan(&self, t: Table, prefix: &[u8]) -> StoreResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.visit(t, prefix, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(())
        })?;
        Ok(out)
    }
    /// Call `f` on every entry whose key starts with `prefix`, in key order, one at a
    /// time (a table too large to copy out at once).
    fn visit(&self, t: Table, prefix: &[u8], f: &mut Visitor<'_>) -> StoreResult<()>;
    /// Call `f` on every entry with `start <= key < end`, in key order.
    fn visit_range(
        &self,
        t: Table,
        start: &[u8],
        end: &[u8],
        f: &mut Visitor<'_>,
    ) -> StoreResult<()>;
    /// How many entries the table holds.
    fn len(&self, t: Table) -> StoreResult<u64>;
}

/// An atomic write transaction; reads see its own writes.
pub(crate) trait RawWrite: RawRead {
    /// Insert or replace; true when the key existed.
    fn put(&mut self, t: Table, key: &[u8], value: &[u8]) -> StoreResult<bool>;
    /// Remove; true when the key existed.
    fn del(&mut self, t: Table, key: &[u8]) -> StoreResult<bool>;
    /// Remove every entry whose key `keep` refuses; how many went.
    fn retain(&mut self, t: Table, keep: &mut dyn FnMut(&[u8]) -> bool) -> StoreResult<u64>;
    fn commit(self: Box<Self>) -> StoreResult<()>;
}
