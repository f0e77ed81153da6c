//! The ingestion pipeline: walk → load → normalize → hash → dedup → chunk → store + index.
//!
//! Atomicity: sources are buffered in memory and written to the current store batch
//! only once they loaded completely, so a file that fails half way leaves nothing
//! behind. A store batch commits when it holds `ingest.commit_bytes` of text or
//! `ingest.commit_chunks` new chunks, and at the end. A source bigger than that first
//! commits the batch before it, then streams into batches of its own, committed at the
//! same bounds with a checkpoint: its source record, listing the documents stored so far
//! and marked partial. A crash then loses at most one batch; ingesting the same bytes
//! again finds the stored documents (nothing is embedded twice) and goes on after them,
//! and a load error leaves the source partial with the error. A document is never
//! visible without its chunks and vectors: they commit in the same batch.
//!
//! Provenance: a source's entries are settled when it completes, not stripped first:
//! the entries of its documents that this version did not produce (at that document and
//! locator) are dropped then, and the documents left without any are deleted. Until
//! then the version being replaced stays whole.
//!
//! With an embedding model, each new chunk is embedded (or found in the embedding cache)
//! and its vector written to the same store batch, so chunks and vectors commit together;
//! the vector index follows the store like the keyword index.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use neuralcore_core::text::sha256_hex;
use neuralcore_core::{
    doc_key, Chunk, DocKey, DocumentRecord, EmbeddingKey, Provenance, SourceRecord, SourceType,
    StoreBatch,
};
use neuralcore_index::{IndexChunk, IndexSession, KeywordIndex};
use neuralcore_ingest::{
    loader_for, loaders, walk, ChunkSpan, Chunker, LoadError, LoadedDoc, LoaderOptions,
    SentenceChunker, SourceInput, WalkEntry,
};
use serde::Serialize;

use crate::vectors::{
    cached_or_embed, pending_for, ChunkVector, PendingVector, VectorPair, Vectors, EMBED_GROUP,
};
use crate::{now_rfc3339, Engine, EngineError};

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum FileOutcome {
    /// Stored (or its stored version replaced).
    Ingested {
        /// Documents the file produced.
        documents: usize,
        /// Chunks newly written (content already stored from elsewhere adds none).
        new_chunks: usize,
    },
    /// Unchanged since the last ingest.
    Skipped {
        /// Why.
        reason: String,
    },
    /// Not stored.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Receives progress during an ingest.
pub trait IngestObserver {
    /// The walk found `files` files.
    fn planned(&mut self, _files: usize) {}
    /// One more document was loaded.
    fn document(&mut self) {}
    /// A file is done.
    fn file_done(&mut self, _path: &Path, _outcome: &FileOutcome) {}
    /// A non-fatal finding about a file.
    fn warning(&mut self, _path: &Path, _message: &str) {}
    /// `texts` more chunk texts were embedded by the model (cache hits are not counted).
    fn embedded(&mut self, _texts: usize) {}
    /// A source too big for one batch committed its first `documents` documents (a
    /// checkpoint: a crash from here on loses at most the next batch).
    fn checkpoint(&mut self, _path: &Path, _documents: usize) {}
    /// An unfinished ingest of this source had stored `documents` documents: they are
    /// found in the store (not embedded again) and the ingest goes on after them.
    fn resumed(&mut self, _path: &Path, _documents: usize) {}
    /// Whether to stop: checked before each file; the files done so far are kept.
    fn cancelled(&self) -> bool {
        false
    }
    /// The id to store the file at `path` under, instead of its canonical path: for a
    /// file whose identity is not where it happens to lie (an upload run by whichever
    /// worker took its job: `upload:<name>` on every machine).
    fn source_id(&self, _path: &Path) -> Option<String> {
        None
    }
}

/// An observer that ignores everything.
struct Quiet;
impl IngestObserver for Quiet {}

impl IngestObserver for () {}

/// A file and a message about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileMessage {
    /// The file.
    pub path: String,
    /// The message.
    pub message: String,
}

/// The result of an ingest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IngestSummary {
    /// Collection written.
    pub collection: String,
    /// Files the walk found (plus unreadable paths).
    pub files_seen: usize,
    /// Files stored.
    pub ingested: usize,
    /// Files unchanged since the last ingest.
    pub skipped: usize,
    /// Files that failed.
    pub failed: usize,
    /// Documents the ingested files produced.
    pub documents: usize,
    /// Chunks newly written.
    pub chunks: usize,
    /// Documents removed because no source holds them any more.
    pub removed_documents: usize,
    /// Wall time, milliseconds.
    pub elapsed_ms: u64,
    /// One line per failed file.
    pub errors: Vec<FileMessage>,
    /// Warnings (lossy UTF-8, split texts, ...).
    pub warnings: Vec<FileMessage>,
    /// The observer asked to stop before every file was done.
    pub cancelled: bool,
}

/// The result of `rm`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RemoveSummary {
    /// Sources removed.
    pub sources: Vec<String>,
    /// Documents deleted (no other source holds them).
    pub removed_documents: usize,
}

/// A loaded, hashed and chunked document waiting to be written.
struct Prepared {
    record: DocumentRecord,
    provenance: Provenance,
    chunks: Vec<Chunk>,
    bytes: usize,
}

/// Per-source facts shared by its documents.
struct SourceCtx {
    source_id: String,
    uri: String,
    created_at: Option<String>,
    loader: &'static str,
}

struct Ingestor<'e, 'i> {
    engine: &'e Engine,
    collection: String,
    idx: &'i KeywordIndex,
    batch: Option<Box<dyn StoreBatch + 'e>>,
    session: Option<IndexSession<'i>>,
    batch_bytes: usize,
    /// New chunks in the open batch.
    batch_chunks: usize,
    /// A source bigger than one batch is being written: its batches leave the vector
    /// index's snapshot behind while writing it would cost more than a tenth of the
    /// time (the next open catches a stale snapshot up from the cached vectors).
    streaming: bool,
    /// When the vector index's snapshot was last written, and what that took.
    vec_saved: (Instant, std::time::Duration),
    removed: BTreeSet<DocKey>,
    added: Vec<DocKey>,
    chunker: SentenceChunker,
    loader_opts: LoaderOptions,
    settings: String,
    summary: IngestSummary,
    /// The embedding model and vector index, when there is a model.
    vec: Option<VectorPair>,
    /// Chunks of this batch waiting for their vectors.
    pending: Vec<PendingVector>,
    /// Vectors embedded in this batch (not yet visible through the store).
    local: HashMap<EmbeddingKey, Vec<f32>>,
    /// Vectors of this batch's new chunks, for the vector index.
    vectors: Vec<ChunkVector>,
    /// The collection is marked as written by this process while this lives.
    _writing: crate::engine::Writing<'e>,
}

impl<'e, 'i> Ingestor<'e, 'i> {
    fn new(
        engine: &'e Engine,
        collection: &str,
        idx: &'i KeywordIndex,
        vec: Option<VectorPair>,
    ) -> Self {
        let cfg = &engine.config.ingest;
        let chunker = cfg.chunker();
        let loader_opts = cfg.loaders();
        let settings = format!(
            "v1;{};{}",
            chunker.name(),
            serde_json::to_string(&loader_opts).expect("serializable")
        );
        Ingestor {
            _writing: engine.writing(collection),
            engine,
            collection: collection.to_string(),
            idx,
            batch: None,
            session: None,
            batch_bytes: 0,
            batch_chunks: 0,
            streaming: false,
            vec_saved: (Instant::now(), std::time::Duration::ZERO),
            removed: BTreeSet::new(),
            added: Vec::new(),
            chunker,
            loader_opts,
            settings,
            summary: IngestSummary {
                collection: collection.to_string(),
                ..Default::default()
            },
            vec,
            pending: Vec::new(),
            local: HashMap::new(),
            vectors: Vec::new(),
        }
    }

    /// Vectors for the pending chunks (cache, else the model), written to the batch.
    fn flush_vectors(&mut self, obs: &mut dyn IngestObserver) -> Result<(), EngineError> {
        let Some((embedder, _)) = self.vec.clone() else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        let pending = std::mem::take(&mut self.pending);
        let mut fresh = Vec::new();
        let vs = cached_or_embed(
            self.engine,
            &*embedder,
            &pending,
            &self.local,
            &mut fresh,
            &mut |n| obs.embedded(n),
        )?;
        for (k, v) in fresh {
            self.batch().put_embedding(embedder.model_id(), &k, &v)?;
            self.local.insert(k, v);
        }
        self.vectors.extend(vs);
        Ok(())
    }

    fn ensure_batch(&mut self) -> Result<(), EngineError> {
        if self.batch.is_none() {
            let mut b = self.engine.store.begin()?;
            b.ensure_collection(&self.collection, &now_rfc3339())?;
            self.batch = Some(b);
            self.session = Some(self.idx.session()?);
        }
        Ok(())
    }

    fn batch(&mut self) -> &mut Box<dyn StoreBatch + 'e> {
        self.batch.as_mut().expect("batch open")
    }

    /// Commit the store batch (chunks and their vectors), then the keyword index and the
    /// vector index with the new generation.
    fn commit(&mut self, obs: &mut dyn IngestObserver) -> Result<(), EngineError> {
        if self.batch.is_none() {
            return Ok(());
        }
        if let Err(e) = self.flush_vectors(obs) {
            self.rollback();
            return Err(e);
        }
        let Some(mut batch) = self.batch.take() else {
            return Ok(());
        };
        let session = self.session.take();
        let c = self.collection.clone();
        let added: Vec<DocKey> = std::mem::take(&mut self.added)
            .into_iter()
            .filter(|k| batch.document(&c, *k).map(|d| d.is_some()).unwrap_or(true))
            .collect();
        let removed: Vec<DocKey> = std::mem::take(&mut self.removed).into_iter().collect();
        let changed = !added.is_empty() || !removed.is_empty();
        if changed {
            batch.record_index_changes(&c, &removed, &added)?;
        }
        if changed {
            // Keep the last `journal_keep` batches for indexes elsewhere to catch up by.
            batch.compact_journal(&c, self.engine.config.store.journal_keep)?;
        }
        // The generations the indexes reflect before this batch.
        let idx_before = self.idx.generation();
        let vec_before = self
            .vec
            .as_ref()
            .and_then(|(_, v)| v.local().map(|l| l.generation()));
        batch.commit()?;
        self.batch_bytes = 0;
        self.batch_chunks = 0;
        if changed {
            let generation = self
                .engine
                .store
                .collection(&c)?
                .map(|i| i.generation)
                .unwrap_or(0);
            // Another process's batch got in before this one (a shared store): this
            // batch's changes go in under the old generation, and the store's journal
            // then brings the index up (replaying this batch again changes nothing).
            let stamp = |before: u64| {
                if before.checked_add(1) == Some(generation) {
                    generation
                } else {
                    before
                }
            };
            if let Some(s) = session {
                let stamped = stamp(idx_before);
                let r = s.commit(stamped).map_err(EngineError::from).and_then(|()| {
                    if stamped == generation {
                        Ok(())
                    } else {
                        let _one = self.engine.following.lock();
                        self.engine.sync_index(&c, self.idx)
                    }
                });
                if let Err(e) = r {
                    // The store is ahead now; a fresh open replays or rebuilds.
                    self.engine.forget_index(&c);
                    self.engine.forget_vectors(&c);
                    return Err(e);
                }
            }
            if let Some((embedder, vidx)) = &self.vec {
                let kept: HashSet<DocKey> = added.iter().copied().collect();
                let vectors: Vec<_> = std::mem::take(&mut self.vectors)
                    .into_iter()
                    .filter(|(k, _)| kept.contains(&k.0))
                    .collect();
                let r = match (&**vidx, vec_before) {
                    (Vectors::Local(li), Some(before)) => {
                        let stamped = stamp(before);
                        li.apply_unsaved(&removed, &vectors, stamped)
                            .map_err(EngineError::from)
                            .and_then(|()| {
                                if stamped == generation {
                                    Ok(())
                                } else {
                                    let _one = self.engine.following.lock();
                                    self.engine.sync_vectors(&c, vidx, &**embedder, &mut |_| {})
                                }
                            })
                    }
                    (Vectors::Pgvector(p), _) => self.engine.apply_pg_batch(&c, p, &**embedder),
                    (Vectors::Local(_), None) => Ok(()),
                };
                if let Err(e) = r {
                    self.engine.forget_vectors(&c);
                    return Err(e);
                }
            }
        }
        if let Some((_, vidx)) = &self.vec {
            let (at, cost) = self.vec_saved;
            if !self.streaming || at.elapsed() >= cost * 10 {
                let t = Instant::now();
                if let Err(e) = vidx.save() {
                    self.engine.forget_vectors(&c);
                    return Err(e);
                }
                self.vec_saved = (Instant::now(), t.elapsed());
            }
        }
        self.vectors.clear();
        self.local.clear();
        Ok(())
    }

    /// Whether the open batch reached a commit bound.
    fn batch_full(&self) -> bool {
        let cfg = &self.engine.config.ingest;
        self.batch_bytes >= cfg.commit_bytes || self.batch_chunks >= cfg.commit_chunks.max(1)
    }

    /// Commit the open batch with `record` (a partial source) as its checkpoint, and
    /// open the next.
    fn checkpoint(
        &mut self,
        record: &SourceRecord,
        obs: &mut dyn IngestObserver,
    ) -> Result<(), EngineError> {
        self.batch().put_source(record)?;
        self.commit(obs)?;
        self.ensure_batch()
    }

    /// After a commit: sweep the embedding cache when replaced and removed chunks left
    /// enough vectors behind. A sweep that fails costs nothing but disk: it is logged.
    fn sweep_embeddings(&self) {
        if self.vec.is_some() {
            if let Err(e) = self.engine.sweep_embeddings(false) {
                tracing::warn!(
                    "sweeping the embedding cache failed (tried again in ten minutes): {e}"
                );
            }
        }
    }

    /// Drop the open batch and index session without writing anything.
    fn rollback(&mut self) {
        self.batch = None;
        self.session = None;
        self.pending.clear();
        self.local.clear();
        self.vectors.clear();
        self.added.clear();
        self.removed.clear();
        self.batch_bytes = 0;
        self.batch_chunks = 0;
        self.streaming = false;
    }

    fn prepare(&self, doc: LoadedDoc, src: &SourceCtx) -> Prepared {
        let sha = sha256_hex(doc.text.as_bytes());
        let key = doc_key(&self.collection, &sha);
        let spans = self.chunker.chunk(&doc.text, &doc.sections);
        let chunks = slice_chunks(key, &doc.text, &spans);
        let provenance = Provenance {
            source_id: src.source_id.clone(),
            source_type: SourceType::File,
            uri: src.uri.clone(),
            title: doc.title.clone(),
            locator: doc.locator,
            external_id: doc.external_id,
            created_at: src.created_at.clone(),
            ingested_at: now_rfc3339(),
            content_sha256: sha.clone(),
            byte_size: doc.text.len() as u64,
            loader: src.loader.to_string(),
        };
        let record = DocumentRecord {
            key,
            collection: self.collection.clone(),
            title: doc.title,
            content_sha256: sha,
            char_len: doc.text.chars().count() as u64,
            byte_size: doc.text.len() as u64,
            n_chunks: chunks.len() as u32,
            metadata: doc.metadata,
            provenance: Vec::new(),
            chunking: self.chunker.name(),
        };
        Prepared {
            record,
            provenance,
            chunks,
            bytes: doc.text.len(),
        }
    }

    /// Remove `source_id`'s provenance from `keys` (documents left without any are
    /// deleted by [`Self::drop_orphans`]).
    fn strip(&mut self, source_id: &str, keys: &[DocKey]) -> Result<(), EngineError> {
        let c = self.collection.clone();
        let unique: BTreeSet<DocKey> = keys.iter().copied().collect();
        for k in unique {
            if let Some(mut d) = self.batch().document(&c, k)? {
                d.provenance.retain(|p| p.source_id != source_id);
                self.batch().put_document(&d)?;
            }
        }
        Ok(())
    }

    fn drop_orphans(&mut self, keys: &[DocKey]) -> Result<(), EngineError> {
        let c = self.collection.clone();
        let unique: BTreeSet<DocKey> = keys.iter().copied().collect();
        for k in unique {
            let orphan = self
                .batch()
                .document(&c, k)?
                .is_some_and(|d| d.provenance.is_empty());
            if orphan {
                self.batch().delete_document(&c, k)?;
                self.session.as_mut().expect("session open").delete_doc(k);
                self.removed.insert(k);
                self.summary.removed_documents += 1;
            }
        }
        Ok(())
    }

    /// Write one prepared document: a new content gets its record, chunks and index
    /// entries; known content only gains a provenance, unless it was chunked with other
    /// settings, in which case it is chunked again (keeping every provenance).
    fn write(&mut self, p: Prepared, obs: &mut dyn IngestObserver) -> Result<usize, EngineError> {
        let c = self.collection.clone();
        let key = p.record.key;
        // An entry of this source at this place replaces the one an earlier ingest left.
        let same_place =
            |x: &Provenance, y: &Provenance| x.source_id == y.source_id && x.locator == y.locator;
        let mut provenance = vec![p.provenance];
        match self.batch().document(&c, key)? {
            Some(mut d) if d.chunking == p.record.chunking => {
                d.provenance.retain(|x| !same_place(x, &provenance[0]));
                d.provenance.append(&mut provenance);
                d.provenance
                    .sort_by(|a, b| (&a.source_id, &a.locator).cmp(&(&b.source_id, &b.locator)));
                self.batch().put_document(&d)?;
                return Ok(0);
            }
            Some(old) => {
                self.batch().delete_document(&c, key)?;
                self.session.as_mut().expect("session open").delete_doc(key);
                self.removed.insert(key);
                let new = provenance[0].clone();
                provenance.extend(old.provenance.into_iter().filter(|x| !same_place(x, &new)));
            }
            None => {}
        }
        let mut rec = p.record;
        rec.provenance = provenance;
        rec.provenance
            .sort_by(|a, b| (&a.source_id, &a.locator).cmp(&(&b.source_id, &b.locator)));
        self.batch().put_document(&rec)?;
        for ch in &p.chunks {
            self.batch().put_chunk(&c, ch)?;
        }
        let session = self.session.as_mut().expect("session open");
        for ch in &p.chunks {
            session.add(IndexChunk {
                doc: ch.doc,
                ordinal: ch.ordinal,
                title: &rec.title,
                body: &ch.text,
            })?;
        }
        if self.vec.is_some() {
            for ch in &p.chunks {
                self.pending.push(pending_for(&rec.title, ch));
            }
            if self.pending.len() >= EMBED_GROUP {
                self.flush_vectors(obs)?;
            }
        }
        self.added.push(key);
        self.batch_bytes += p.bytes;
        self.batch_chunks += p.chunks.len();
        Ok(p.chunks.len())
    }

    /// When a source's new version is written: drop its provenance entries that this
    /// version did not produce (`places`: document and locator) from its documents old
    /// and new, and delete the documents left without any.
    fn settle(
        &mut self,
        source_id: &str,
        old_keys: &[DocKey],
        places: &HashSet<(DocKey, Option<String>)>,
    ) -> Result<(), EngineError> {
        let c = self.collection.clone();
        let all: BTreeSet<DocKey> = old_keys
            .iter()
            .copied()
            .chain(places.iter().map(|p| p.0))
            .collect();
        let mut orphans = Vec::new();
        for k in all {
            let Some(mut d) = self.batch().document(&c, k)? else {
                continue;
            };
            let before = d.provenance.len();
            d.provenance
                .retain(|p| p.source_id != source_id || places.contains(&(k, p.locator.clone())));
            if d.provenance.len() != before {
                self.batch().put_document(&d)?;
            }
            if d.provenance.is_empty() {
                orphans.push(k);
            }
        }
        self.drop_orphans(&orphans)
    }

    fn process(
        &mut self,
        path: &Path,
        obs: &mut dyn IngestObserver,
    ) -> Result<FileOutcome, EngineError> {
        let Some(loader) = loader_for(path) else {
            let exts: Vec<&str> = loaders()
                .iter()
                .flat_map(|l| l.extensions().iter().copied())
                .collect();
            return Ok(FileOutcome::Failed {
                reason: format!(
                    "unsupported format: no loader reads this file type (supported: {})",
                    exts.join(", ")
                ),
            });
        };
        let meta = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => m,
            Ok(_) => {
                return Ok(FileOutcome::Failed {
                    reason: "not a regular file".into(),
                })
            }
            Err(e) => {
                return Ok(FileOutcome::Failed {
                    reason: format!("cannot read: {e}"),
                })
            }
        };
        let source_id = obs.source_id(path).unwrap_or_else(|| source_id_for(path));
        let raw_sha = match hash_file(path) {
            Ok(h) => h,
            Err(e) => {
                return Ok(FileOutcome::Failed {
                    reason: format!("cannot read: {e}"),
                })
            }
        };
        let c = self.collection.clone();
        let existing = match &self.batch {
            Some(b) => b.source(&c, &source_id)?,
            None => self.engine.store.source(&c, &source_id)?,
        };
        let same = existing
            .as_ref()
            .is_some_and(|e| e.raw_sha256 == raw_sha && e.settings == self.settings);
        if same && existing.as_ref().is_some_and(|e| e.partial.is_none()) {
            return Ok(FileOutcome::Skipped {
                reason: "unchanged".into(),
            });
        }
        // Every document this source's provenance may be on: its last version's and,
        // after an unfinished ingest, what that one stored.
        let old_keys: Vec<DocKey> = match &existing {
            None => Vec::new(),
            Some(e) => {
                let mut all: BTreeSet<DocKey> = e.docs.iter().copied().collect();
                if let Some(p) = &e.partial {
                    all.extend(p.previous_docs.iter().copied());
                }
                all.into_iter().collect()
            }
        };
        if same {
            let stored = existing.as_ref().map_or(0, |e| e.docs.len());
            if stored > 0 {
                obs.resumed(path, stored);
            }
        }
        let src = SourceCtx {
            source_id: source_id.clone(),
            uri: source_id.clone(),
            created_at: meta
                .created()
                .or_else(|_| meta.modified())
                .ok()
                .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            loader: loader.name(),
        };
        let mut record = SourceRecord {
            collection: c.clone(),
            source_id: source_id.clone(),
            source_type: SourceType::File,
            uri: source_id.clone(),
            raw_sha256: raw_sha,
            byte_size: meta.len(),
            docs: Vec::new(),
            loader: loader.name().to_string(),
            settings: self.settings.clone(),
            ingested_at: now_rfc3339(),
            partial: None,
        };
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let opts = self.loader_opts.clone();
        let input = SourceInput {
            path,
            default_title: &stem,
            options: &opts,
        };
        let cfg = &self.engine.config.ingest;
        let (limit_bytes, limit_chunks) = (cfg.commit_bytes, cfg.commit_chunks.max(1));
        let mut buffered: Vec<Prepared> = Vec::new();
        let mut buffered_bytes = 0usize;
        let mut buffered_chunks = 0usize;
        let mut direct = false;
        let mut keys: Vec<DocKey> = Vec::new();
        let mut places: HashSet<(DocKey, Option<String>)> = HashSet::new();
        let mut new_chunks = 0usize;
        let mut fatal: Option<EngineError> = None;
        let partial = |keys: &[DocKey]| SourceRecord {
            docs: keys.to_vec(),
            partial: Some(neuralcore_core::PartialSource {
                previous_docs: old_keys.clone(),
                error: None,
            }),
            ..record.clone()
        };
        let result = loader.load(&input, &mut |doc| {
            obs.document();
            let p = self.prepare(doc, &src);
            keys.push(p.record.key);
            places.insert((p.record.key, p.provenance.locator.clone()));
            let written = if direct {
                (|| -> Result<usize, EngineError> {
                    let n = self.write(p, &mut *obs)?;
                    if self.batch_full() {
                        let cp = partial(&keys);
                        self.checkpoint(&cp, &mut *obs)?;
                        obs.checkpoint(path, keys.len());
                    }
                    Ok(n)
                })()
            } else {
                buffered_bytes += p.bytes;
                buffered_chunks += p.chunks.len();
                buffered.push(p);
                if buffered_bytes <= limit_bytes && buffered_chunks <= limit_chunks {
                    return Ok(());
                }
                // Too big for one batch: commit what came before, then write this source
                // in batches of its own, each with a checkpoint.
                direct = true;
                (|| -> Result<usize, EngineError> {
                    self.commit(&mut *obs)?;
                    self.streaming = true;
                    self.ensure_batch()?;
                    let mut n = 0;
                    for p in buffered.drain(..) {
                        n += self.write(p, &mut *obs)?;
                    }
                    let cp = partial(&keys);
                    self.checkpoint(&cp, &mut *obs)?;
                    obs.checkpoint(path, keys.len());
                    Ok(n)
                })()
            };
            match written {
                Ok(n) => {
                    new_chunks += n;
                    Ok(())
                }
                Err(e) => {
                    let msg = e.to_string();
                    fatal = Some(e);
                    Err(LoadError::Sink(msg))
                }
            }
        });
        if let Some(e) = fatal {
            self.rollback();
            return Err(e);
        }
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                if !direct {
                    return Ok(FileOutcome::Failed {
                        reason: e.to_string(),
                    });
                }
                // Every document written before the error is whole: they commit, with
                // the source marked partial and the error kept.
                let mut reason = e.to_string();
                let mut cp = partial(&keys);
                if let Some(p) = cp.partial.as_mut() {
                    p.error = Some(reason.clone());
                }
                self.ensure_batch()?;
                self.batch().put_source(&cp)?;
                self.streaming = false;
                self.commit(obs)?;
                reason.push_str(&format!(
                    " (the {} documents before it are stored and the source is listed as \
                     partial: fix the file and ingest it again, or remove it)",
                    cp.docs.len()
                ));
                return Ok(FileOutcome::Failed { reason });
            }
        };
        for w in &report.warnings {
            obs.warning(path, w);
            self.summary.warnings.push(FileMessage {
                path: path.display().to_string(),
                message: w.clone(),
            });
        }
        if !direct {
            self.ensure_batch()?;
            for p in buffered {
                new_chunks += self.write(p, obs)?;
            }
        }
        self.settle(&source_id, &old_keys, &places)?;
        record.docs = keys;
        let documents = record.docs.len();
        self.batch().put_source(&record)?;
        self.streaming = false;
        if direct || self.batch_full() {
            self.commit(obs)?;
        }
        Ok(FileOutcome::Ingested {
            documents,
            new_chunks,
        })
    }

    fn remove_source(&mut self, source: &SourceRecord) -> Result<(), EngineError> {
        self.ensure_batch()?;
        let mut keys = source.docs.clone();
        if let Some(p) = &source.partial {
            keys.extend(p.previous_docs.iter().copied());
        }
        self.strip(&source.source_id, &keys)?;
        self.drop_orphans(&keys)?;
        let c = self.collection.clone();
        self.batch().delete_source(&c, &source.source_id)?;
        Ok(())
    }
}

/// The chunks of a document from the chunker's spans.
fn slice_chunks(key: DocKey, text: &str, spans: &[ChunkSpan]) -> Vec<Chunk> {
    spans
        .iter()
        .enumerate()
        .map(|(i, s)| Chunk {
            doc: key,
            ordinal: i as u32,
            span: (s.start as u64, s.end as u64),
            section: s.section.clone(),
            tokens: s.tokens as u32,
            text: text[s.bytes.0..s.bytes.1].to_string(),
        })
        .collect()
}

/// SHA-256 of a file's bytes, streamed.
fn hash_file(path: &Path) -> std::io::Result<String> {
    use sha2::Digest;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// The id of a file source: its canonical path, or (for a path that no longer exists)
/// the absolute path with `.` and `..` resolved lexically.
pub(crate) fn source_id_for(path: &Path) -> String {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p.to_string_lossy().into_owned();
    }
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for comp in abs.components() {
        match comp {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.to_string_lossy().into_owned()
}

impl Engine {
    /// The embedding model and the collection's vector index, when there is a model.
    fn vector_pair(
        &self,
        collection: &str,
        obs: &mut dyn IngestObserver,
    ) -> Result<Option<VectorPair>, EngineError> {
        let index = self.vector_index_observed(collection, &mut |n| obs.embedded(n))?;
        Ok(match (self.embedder(), index) {
            (Some(e), Some(i)) => Some((e, i)),
            _ => None,
        })
    }

    /// Ingest files and folders into `collection` (created when missing).
    pub fn ingest(
        &self,
        paths: &[PathBuf],
        collection: &str,
        obs: &mut dyn IngestObserver,
    ) -> Result<IngestSummary, EngineError> {
        neuralcore_core::validate_stored_collection(collection)
            .map_err(EngineError::InvalidInput)?;
        let start = Instant::now();
        let entries = walk(paths, &self.config.ingest.walk()).map_err(EngineError::Config)?;
        // The same file named twice (directly and through its folder) is read once.
        let mut seen = HashSet::new();
        let entries: Vec<WalkEntry> = entries
            .into_iter()
            .filter(|e| match e {
                WalkEntry::File(p) => seen.insert(source_id_for(p)),
                WalkEntry::Error(..) => true,
            })
            .collect();
        obs.planned(entries.len());
        let idx = self.keyword_index(collection)?;
        let vec = self.vector_pair(collection, obs)?;
        let mut ing = Ingestor::new(self, collection, &idx, vec);
        for entry in &entries {
            if obs.cancelled() {
                ing.summary.cancelled = true;
                break;
            }
            ing.summary.files_seen += 1;
            let (path, outcome) = match entry {
                WalkEntry::Error(p, e) => (
                    p.as_path(),
                    FileOutcome::Failed {
                        reason: format!("cannot read: {e}"),
                    },
                ),
                WalkEntry::File(p) => (p.as_path(), ing.process(p, obs)?),
            };
            match &outcome {
                FileOutcome::Ingested {
                    documents,
                    new_chunks,
                } => {
                    ing.summary.ingested += 1;
                    ing.summary.documents += documents;
                    ing.summary.chunks += new_chunks;
                }
                FileOutcome::Skipped { .. } => ing.summary.skipped += 1,
                FileOutcome::Failed { reason } => {
                    ing.summary.failed += 1;
                    ing.summary.errors.push(FileMessage {
                        path: path.display().to_string(),
                        message: reason.clone(),
                    });
                }
            }
            obs.file_done(path, &outcome);
        }
        ing.commit(obs)?;
        ing.sweep_embeddings();
        let mut summary = std::mem::take(&mut ing.summary);
        summary.elapsed_ms = start.elapsed().as_millis() as u64;
        Ok(summary)
    }

    /// Remove sources (a file path, a folder path for every source under it, or a
    /// source id/URI as listed by `sources`) and every document no other source holds.
    pub fn remove(
        &self,
        collection: &str,
        targets: &[String],
    ) -> Result<RemoveSummary, EngineError> {
        self.collection(collection)?;
        let all = self.store.sources(collection)?;
        let mut chosen: Vec<&SourceRecord> = Vec::new();
        for t in targets {
            let id = source_id_for(Path::new(t));
            let dir_prefix = format!("{}/", id.trim_end_matches('/'));
            let matched: Vec<&SourceRecord> = all
                .iter()
                .filter(|s| {
                    s.source_id == *t
                        || s.uri == *t
                        || s.source_id == id
                        || s.source_id.starts_with(&dir_prefix)
                })
                .collect();
            if matched.is_empty() {
                return Err(EngineError::NotFound(format!(
                    "no source {t:?} in collection {collection:?} (see `neuralcore sources`)"
                )));
            }
            chosen.extend(matched);
        }
        chosen.sort_by(|a, b| a.source_id.cmp(&b.source_id));
        chosen.dedup_by(|a, b| a.source_id == b.source_id);
        let idx = self.keyword_index(collection)?;
        let vec = self.vector_pair(collection, &mut Quiet)?;
        let mut ing = Ingestor::new(self, collection, &idx, vec);
        for s in &chosen {
            ing.remove_source(s)?;
        }
        ing.commit(&mut Quiet)?;
        ing.sweep_embeddings();
        Ok(RemoveSummary {
            sources: chosen.iter().map(|s| s.source_id.clone()).collect(),
            removed_documents: ing.summary.removed_documents,
        })
    }
}
