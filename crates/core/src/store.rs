//! The document store contract. Backends: an in-memory twin and the embedded redb store
//! (crate `neuralcore-store`), both checked by one conformance suite.
//!
//! All writes go through a [`StoreBatch`], which commits atomically: a reader sees either
//! none or all of a batch. Each commit that changes a collection's indexed documents bumps
//! the collection's generation and records an [`IndexJournal`], so a derived index (the
//! keyword index) that missed the last commit after a crash can catch up by replaying it.

use serde::{Deserialize, Serialize};

use crate::error::StoreResult;
use crate::types::{Chunk, CollectionInfo, DocKey, DocumentRecord, SourceRecord};

/// Key of a cached embedding: SHA-256 of the model id, a NUL byte and the text.
pub type EmbeddingKey = [u8; 32];

/// The cache key of `text` embedded by `model_id`.
pub fn embedding_key(model_id: &str, text: &str) -> EmbeddingKey {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(model_id.as_bytes());
    h.update([0u8]);
    h.update(text.as_bytes());
    h.finalize().into()
}

/// What one committed batch changed in one collection's indexed content. The store
/// keeps the last one ([`DocStore::index_journal`]) and a log of them by generation
/// ([`DocStore::index_journals`]), so an index in another process catches up batch by
/// batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexJournal {
    /// Generation after that batch.
    pub generation: u64,
    /// Documents removed by that batch.
    pub removed: Vec<DocKey>,
    /// Documents added by that batch (after the removals).
    pub added: Vec<DocKey>,
    /// The collection was dropped by that batch: everything indexed before it goes.
    /// The dropped collection's generation lives on, so one made again under the same
    /// name carries on from it and an index of the old one never mistakes the new one's
    /// batches for its own next ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
}

/// Read access to a document store, plus the start of a write batch.
pub trait DocStore: Send + Sync {
    /// Every collection, by name.
    fn collections(&self) -> StoreResult<Vec<CollectionInfo>>;
    /// One collection, if it exists.
    fn collection(&self, name: &str) -> StoreResult<Option<CollectionInfo>>;
    /// One source.
    fn source(&self, collection: &str, source_id: &str) -> StoreResult<Option<SourceRecord>>;
    /// Every source of a collection, ordered by source id.
    fn sources(&self, collection: &str) -> StoreResult<Vec<SourceRecord>>;
    /// One document.
    fn document(&self, collection: &str, key: DocKey) -> StoreResult<Option<DocumentRecord>>;
    /// Every document key of a collection, ascending.
    fn document_keys(&self, collection: &str) -> StoreResult<Vec<DocKey>>;
    /// The chunks of a document, by ordinal.
    fn chunks(&self, key: DocKey) -> StoreResult<Vec<Chunk>>;
    /// One chunk.
    fn chunk(&self, key: DocKey, ordinal: u32) -> StoreResult<Option<Chunk>>;
    /// The journal of the last batch that changed the collection's indexed documents.
    fn index_journal(&self, collection: &str) -> StoreResult<IndexJournal>;
    /// Cached embeddings, one per key (`None` when not cached), read in one snapshot.
    fn embeddings(&self, keys: &[EmbeddingKey]) -> StoreResult<Vec<Option<Vec<f32>>>>;
    /// How many embeddings are cached (of every model, held by a chunk or not).
    fn embedding_count(&self) -> StoreResult<u64>;
    /// Every model that has cached an embedding, by id.
    fn embedding_models(&self) -> StoreResult<Vec<String>>;
    /// Whether other processes may write this store too (a server shared by replicas):
    /// then indexes derived from it catch up on use, not only when opened.
    fn shared(&self) -> bool {
        false
    }
    /// Start a write batch. Only one batch writes at a time; a second caller waits.
    fn begin(&self) -> StoreResult<Box<dyn StoreBatch + '_>>;
    /// The journals of the batches that took `collection` from generation `after` to
    /// `upto`, in order; `None` when the log no longer holds all of them (compacted
    /// past, or written before the log was kept): an index that far behind rebuilds.
    fn index_journals(
        &self,
        collection: &str,
        after: u64,
        upto: u64,
    ) -> StoreResult<Option<Vec<IndexJournal>>>;
    /// Copy what is committed now, consistently (writers go on), into a new store file
    /// at `dest` of this backend's kind; how many records it holds. A store with no
    /// file of its own says so.
    fn backup_to(&self, dest: &std::path::Path) -> StoreResult<u64> {
        let _ = dest;
        Err(crate::StoreError::InvalidInput(
            "this document store has no file to back up".into(),
        ))
    }
}

/// An atomic set of writes. Reads through the batch see its own writes. Dropping a batch
/// without [`StoreBatch::commit`] discards it.
pub trait StoreBatch {
    /// Create a collection if missing.
    fn ensure_collection(&mut self, name: &str, created_at: &str) -> StoreResult<()>;
    /// Drop the journal log of `collection` but for its last `keep` generations (at
    /// least the last one is always kept); how many entries went.
    fn compact_journal(&mut self, collection: &str, keep: u64) -> StoreResult<u64>;
    /// Delete a collection and everything in it.
    fn delete_collection(&mut self, name: &str) -> StoreResult<()>;
    /// Read a source as the batch sees it.
    fn source(&self, collection: &str, source_id: &str) -> StoreResult<Option<SourceRecord>>;
    /// Insert or replace a source record.
    fn put_source(&mut self, source: &SourceRecord) -> StoreResult<()>;
    /// Delete a source record (not its documents: see the engine's ingest logic).
    fn delete_source(&mut self, collection: &str, source_id: &str) -> StoreResult<()>;
    /// Read a document as the batch sees it.
    fn document(&self, collection: &str, key: DocKey) -> StoreResult<Option<DocumentRecord>>;
    /// Insert or replace a document record.
    fn put_document(&mut self, doc: &DocumentRecord) -> StoreResult<()>;
    /// Delete a document and all its chunks.
    fn delete_document(&mut self, collection: &str, key: DocKey) -> StoreResult<()>;
    /// Insert or replace a chunk of a document of `collection`.
    fn put_chunk(&mut self, collection: &str, chunk: &Chunk) -> StoreResult<()>;
    /// Record that documents left or joined a collection's index in this batch; the
    /// commit bumps the collection's generation and stores the journal.
    fn record_index_changes(
        &mut self,
        collection: &str,
        removed: &[DocKey],
        added: &[DocKey],
    ) -> StoreResult<()>;
    /// Cache the embedding `model_id` computed, under `key` (see [`embedding_key`]). It
    /// is kept when documents go (the cache is keyed by text, not by document, so
    /// re-adding a text never embeds it again) until a sweep
    /// ([`StoreBatch::retain_embeddings`]); the model is recorded for that sweep.
    fn put_embedding(
        &mut self,
        model_id: &str,
        key: &EmbeddingKey,
        vector: &[f32],
    ) -> StoreResult<()>;
    /// Drop every cached embedding that no stored chunk (of any collection) names for
    /// any recorded model, as `key_of(model id, document title, chunk)` gives a chunk's
    /// key; how many went. Replaced and removed documents so leave no vectors behind
    /// for ever, while every model's vectors of the stored chunks stay (switching back
    /// to a model embeds nothing again). The batch being the only writer, no chunk can
    /// appear meanwhile; the store is read one entry at a time.
    fn retain_embeddings(
        &mut self,
        key_of: &dyn Fn(&str, &str, &Chunk) -> EmbeddingKey,
    ) -> StoreResult<u64>;
    /// Make every write durable and visible at once.
    fn commit(self: Box<Self>) -> StoreResult<()>;
}
