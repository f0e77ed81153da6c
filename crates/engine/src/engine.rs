//! Opening a data dir, keeping keyword indexes in step with the store, and search.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use neuralcore_core::{
    Chunk, CollectionInfo, DocKey, DocStore, DocumentRecord, Embedder, IndexJournal, Reranker,
    SourceRecord,
};
use neuralcore_index::{IndexChunk, KeywordIndex};
use neuralcore_store::{InMemoryStore, PgStore, PgStoreOptions, RedbStore};

use crate::search::{Ranked, SearchOptions};
use crate::{Config, EngineError, SearchMode};

/// One search result: the chunk, its document and score.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SearchHit {
    /// 1-based rank.
    pub rank: usize,
    /// Score (BM25 for keyword search, cosine for vector, fused for hybrid).
    pub score: f32,
    /// The chunk.
    pub chunk: Chunk,
    /// Its document (title, provenance, metadata).
    pub document: DocumentRecord,
}

/// The engine over one data dir (or in memory).
pub struct Engine {
    pub(crate) config: Config,
    pub(crate) store: Box<dyn DocStore>,
    pub(crate) data_dir: Option<PathBuf>,
    index_root: Option<PathBuf>,
    pub(crate) indexes: Mutex<HashMap<String, Arc<KeywordIndex>>>,
    pub(crate) embedder: OnceLock<Result<Arc<dyn Embedder>, String>>,
    pub(crate) vectors: Mutex<HashMap<String, Arc<crate::Vectors>>>,
    pub(crate) reranker: OnceLock<Result<Arc<dyn Reranker>, String>>,
    /// The evaluator `neuralcore train evaluator` wrote, loaded on first use.
    pub(crate) trained_evaluator: OnceLock<Result<Arc<dyn Reranker>, String>>,
    /// The operation cache (`[cache]`).
    pub(crate) cache: Arc<neuralcore_cache::Cache>,
    /// SHA-256 of the settings that change results, and of the version (cache keys).
    pub(crate) fingerprint: String,
    /// When to sweep the embedding cache ([`Engine::sweep_embeddings`]).
    pub(crate) sweep: crate::vectors::SweepState,
    /// Ingests and removals under way in this process, per collection: a shared store's
    /// indexes are not caught up on use meanwhile (the writer does it as it commits).
    pub(crate) writing: Mutex<HashMap<String, usize>>,
    /// Held while an index of a shared store catches up on use; a search that finds it
    /// taken goes on with the index as it is.
    pub(crate) following: Mutex<()>,
}

/// A collection being written by this process (see [`Engine::writing`]), until dropped.
pub(crate) struct Writing<'e> {
    engine: &'e Engine,
    collection: String,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut w = self
            .engine
            .writing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = w.get_mut(&self.collection) {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.collection);
            }
        }
    }
}

/// Results of [`Engine::search`].
#[derive(Debug, Clone)]
pub struct SearchResults {
    /// Best first.
    pub hits: Vec<SearchHit>,
    /// The mode that ran.
    pub mode: SearchMode,
    /// Why the mode asked for did not run (no embedding model), if it did not.
    pub fallback: Option<String>,
    /// How many of the first hits the reranker reordered.
    pub reranked: usize,
}

/// What a derived index must do to reflect the store.
pub(crate) enum CatchUp {
    /// It is at the store's generation.
    Current,
    /// It is some batches behind and the store's log holds them all: remove the
    /// `removed` documents, then (re-)add the `added` ones as the store holds them now
    /// (the batches merged; an added document is also in `removed`, so replaying a batch
    /// the index already has changes nothing).
    Replay(IndexJournal),
    /// Anything else (ahead of the store, a rebuild cut short, a collection dropped in
    /// between, a log compacted past it): rebuild from the store.
    Rebuild,
}

/// The batches of `journals` as one: every removed and added document, each once.
fn merge_journals(journals: Vec<IndexJournal>, generation: u64) -> IndexJournal {
    let mut removed: Vec<DocKey> = Vec::new();
    let mut added: Vec<DocKey> = Vec::new();
    let mut seen_r = std::collections::HashSet::new();
    let mut seen_a = std::collections::HashSet::new();
    for j in journals {
        for d in j.removed.into_iter().chain(j.added.iter().copied()) {
            if seen_r.insert(d) {
                removed.push(d);
            }
        }
        for d in j.added {
            if seen_a.insert(d) {
                added.push(d);
            }
        }
    }
    IndexJournal {
        generation,
        removed,
        added,
        reset: false,
    }
}

impl Engine {
    /// Open the data dir (creating it): the store in `store.redb` (or on PostgreSQL with
    /// `[store] backend = "postgres"`), indexes in `index/`.
    pub fn open(data_dir: &Path, config: Config) -> Result<Self, EngineError> {
        std::fs::create_dir_all(data_dir).map_err(|e| {
            EngineError::Io(format!(
                "cannot create data dir {}: {e}",
                data_dir.display()
            ))
        })?;
        // A newer format is refused before anything is opened for writing; the stamp is
        // written once the store is held.
        crate::format::read(data_dir)?;
        let store: Box<dyn DocStore> = match config.store.backend {
            crate::StoreBackendKind::Embedded => {
                Box::new(RedbStore::open(&data_dir.join("store.redb"))?)
            }
            crate::StoreBackendKind::Postgres => Box::new(Self::postgres_store(&config)?),
        };
        // Again with the store held: another release may have stamped it meanwhile.
        let format = crate::format::read(data_dir)?;
        crate::format::migrate(data_dir, format)?;
        // Folders of dropped collections a merge kept from being deleted then.
        sweep_dropped(&data_dir.join("index"));
        sweep_dropped(&data_dir.join("vectors"));
        Ok(Engine::with_store(config, store, Some(data_dir)))
    }

    /// The document store `[store]` names on PostgreSQL, its schema migrated.
    pub fn postgres_store(config: &Config) -> Result<PgStore, EngineError> {
        let s = &config.store;
        Ok(PgStore::connect_with(
            &s.postgres_url,
            &s.postgres_schema,
            PgStoreOptions {
                pool_size: s.postgres_pool,
                ..Default::default()
            },
        )?)
    }

    /// An engine that keeps everything in memory.
    pub fn in_memory(config: Config) -> Self {
        Engine::with_store(config, Box::new(InMemoryStore::new()), None)
    }

    /// An engine over any document store (the seam another backend plugs into): with a
    /// `data_dir`, its keyword and vector indexes live in `<data_dir>/index/` and are
    /// caught up with the store's journal on open; without, in memory.
    pub fn with_store(config: Config, store: Box<dyn DocStore>, data_dir: Option<&Path>) -> Self {
        let cache = Arc::new(crate::cached::open_cache(&config, data_dir));
        let fingerprint = crate::cached::settings_fingerprint(&config);
        Engine {
            config,
            store,
            data_dir: data_dir.map(Path::to_path_buf),
            index_root: data_dir.map(|d| d.join("index")),
            indexes: Mutex::new(HashMap::new()),
            embedder: OnceLock::new(),
            vectors: Mutex::new(HashMap::new()),
            reranker: OnceLock::new(),
            trained_evaluator: OnceLock::new(),
            cache,
            fingerprint,
            sweep: Default::default(),
            writing: Mutex::new(HashMap::new()),
            following: Mutex::new(()),
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The data dir (`None` for an in-memory engine).
    pub fn data_dir(&self) -> Option<&Path> {
        self.data_dir.as_deref()
    }

    /// The document store.
    pub fn store(&self) -> &dyn DocStore {
        &*self.store
    }

    /// Every collection.
    pub fn collections(&self) -> Result<Vec<CollectionInfo>, EngineError> {
        Ok(self.store.collections()?)
    }

    /// One collection, or a NotFound error listing the ones that exist.
    pub fn collection(&self, name: &str) -> Result<CollectionInfo, EngineError> {
        if let Some(c) = self.store.collection(name)? {
            return Ok(c);
        }
        let names: Vec<String> = self.collections()?.into_iter().map(|c| c.name).collect();
        Err(EngineError::NotFound(if names.is_empty() {
            format!("collection {name:?} does not exist: nothing has been ingested yet")
        } else {
            format!(
                "collection {name:?} does not exist (collections: {})",
                names.join(", ")
            )
        }))
    }

    /// `e`, or the collection's NotFound when it was dropped meanwhile: a read that met
    /// a concurrent drop (its index folder renamed away under it) failed because the
    /// collection is gone, and says so instead of showing an internal error.
    pub fn unless_gone(&self, collection: &str, e: EngineError) -> EngineError {
        if matches!(e, EngineError::NotFound(_)) {
            return e;
        }
        match self.store.collection(collection) {
            Ok(None) => self.collection(collection).err().unwrap_or(e),
            _ => e,
        }
    }

    /// Every source of a collection.
    pub fn sources(&self, collection: &str) -> Result<Vec<SourceRecord>, EngineError> {
        self.collection(collection)?;
        Ok(self.store.sources(collection)?)
    }

    /// The keyword index of a collection, opened and brought up to the store's
    /// generation (replaying the last batch or rebuilding when behind).
    pub fn keyword_index(&self, collection: &str) -> Result<Arc<KeywordIndex>, EngineError> {
        let mut map = self.indexes.lock().expect("index map lock");
        if let Some(i) = map.get(collection) {
            let i = i.clone();
            drop(map);
            if self.may_follow(collection) {
                if let Ok(_one) = self.following.try_lock() {
                    self.sync_index(collection, &i)?;
                }
            }
            return Ok(i);
        }
        let idx = match &self.index_root {
            Some(root) => KeywordIndex::open(&root.join(collection), &self.config.analyzer)?,
            None => KeywordIndex::in_memory(&self.config.analyzer)?,
        };
        let idx = Arc::new(idx);
        self.sync_index(collection, &idx)?;
        map.insert(collection.to_string(), idx.clone());
        Ok(idx)
    }

    /// How an index derived from `collection` at generation `idx_gen` catches up with
    /// the store: the store's generation, and what to do. Shared by the keyword and the
    /// vector index.
    pub(crate) fn catch_up(
        &self,
        collection: &str,
        idx_gen: u64,
    ) -> Result<(u64, CatchUp), EngineError> {
        let store_gen = self
            .store
            .collection(collection)?
            .map(|c| c.generation)
            .unwrap_or(0);
        if store_gen == idx_gen {
            return Ok((store_gen, CatchUp::Current));
        }
        if idx_gen < store_gen {
            let journals = match self.store.index_journals(collection, idx_gen, store_gen)? {
                Some(js) => Some(js),
                // A store written before the log was kept has the last batch only.
                None if idx_gen + 1 == store_gen => {
                    let last = self.store.index_journal(collection)?;
                    (last.generation == store_gen).then(|| vec![last])
                }
                None => None,
            };
            if let Some(js) = journals.filter(|js| !js.iter().any(|j| j.reset)) {
                return Ok((store_gen, CatchUp::Replay(merge_journals(js, store_gen))));
            }
        }
        Ok((store_gen, CatchUp::Rebuild))
    }

    /// Bring `idx` to the store's generation of `collection`.
    pub(crate) fn sync_index(
        &self,
        collection: &str,
        idx: &KeywordIndex,
    ) -> Result<(), EngineError> {
        let idx_gen = idx.generation();
        let (store_gen, plan) = self.catch_up(collection, idx_gen)?;
        if let CatchUp::Current = plan {
            return Ok(());
        }
        if let CatchUp::Replay(journal) = plan {
            tracing::info!(
                collection,
                from = idx_gen,
                to = store_gen,
                "keyword index behind: replaying the store's journal"
            );
            let chunks = self.chunks_of(&journal.added)?;
            let mut titles: HashMap<DocKey, String> = HashMap::new();
            for d in &journal.added {
                if let Some(doc) = self.store.document(collection, *d)? {
                    titles.insert(*d, doc.title);
                }
            }
            idx.apply(
                &journal.removed,
                chunks.iter().map(|c| IndexChunk {
                    doc: c.doc,
                    ordinal: c.ordinal,
                    title: titles.get(&c.doc).map(String::as_str).unwrap_or(""),
                    body: &c.text,
                }),
                store_gen,
            )?;
            return Ok(());
        }
        tracing::info!(
            collection,
            store_gen,
            idx_gen,
            "rebuilding keyword index from the store"
        );
        // One session: searches meanwhile see the old contents whole, then the new
        // (the writer flushes to disk as its memory budget fills; nothing is visible
        // before the commit, and a crash before it leaves the old index to rebuild).
        let mut session = idx.session()?;
        session.clear()?;
        for key in self.store.document_keys(collection)? {
            let Some(doc) = self.store.document(collection, key)? else {
                continue;
            };
            for c in self.store.chunks(key)? {
                session.add(IndexChunk {
                    doc: c.doc,
                    ordinal: c.ordinal,
                    title: &doc.title,
                    body: &c.text,
                })?;
            }
        }
        session.commit(store_gen)?;
        Ok(())
    }

    /// Whether an index of `collection` loaded earlier catches up with the store on use:
    /// when other processes write the store and this one is not writing the collection.
    pub(crate) fn may_follow(&self, collection: &str) -> bool {
        self.store.shared()
            && !self
                .writing
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(collection)
    }

    /// Mark `collection` as written by this process until the guard goes.
    pub(crate) fn writing(&self, collection: &str) -> Writing<'_> {
        *self
            .writing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(collection.to_string())
            .or_default() += 1;
        Writing {
            engine: self,
            collection: collection.to_string(),
        }
    }

    /// Drop the cached index of a collection (after a failed index commit), so the
    /// next use re-syncs it with the store.
    pub(crate) fn forget_index(&self, collection: &str) {
        self.indexes
            .lock()
            .expect("index map lock")
            .remove(collection);
    }

    fn chunks_of(&self, docs: &[DocKey]) -> Result<Vec<Chunk>, EngineError> {
        let mut out = Vec::new();
        for d in docs {
            out.extend(self.store.chunks(*d)?);
        }
        Ok(out)
    }

    /// The `k` best chunks of `collection` for `query`, with their documents, found by
    /// `mode` (the configured default when `None`; see [`Engine::search_keys`]).
    pub fn search(
        &self,
        collection: &str,
        query: &str,
        k: usize,
        opts: impl Into<SearchOptions>,
    ) -> Result<SearchResults, EngineError> {
        let before = self.collection(collection)?;
        if query.trim().is_empty() {
            return Err(EngineError::InvalidInput("the query is empty".into()));
        }
        let opts = opts.into();
        // A drop (and an ingest making the collection again) can pull the index folder
        // from under a search that held the old index: it fails, and is run once more
        // over what the collection is now, or is not found when it is gone.
        let ranked = match self.search_keys(collection, query, k, opts) {
            Ok(r) => r,
            Err(e) => match self.store.collection(collection)? {
                None => return Err(self.unless_gone(collection, e)),
                Some(now) if now.generation != before.generation => self
                    .search_keys(collection, query, k, opts)
                    .map_err(|e| self.unless_gone(collection, e))?,
                Some(_) => return Err(e),
            },
        };
        let Ranked {
            hits,
            mode,
            fallback,
            reranked,
        } = ranked;
        let mut docs: HashMap<DocKey, DocumentRecord> = HashMap::new();
        let mut out = Vec::with_capacity(hits.len());
        for h in hits {
            let Some(chunk) = self.store.chunk(h.doc, h.ordinal)? else {
                // The indexes follow the store a moment after each commit: a document
                // replaced or removed meanwhile is skipped (the load bench's replacing
                // uploads met this every few seconds). A lasting gap is caught when an
                // index opens, by its generation.
                tracing::debug!(
                    doc = h.doc,
                    ordinal = h.ordinal,
                    "indexed chunk gone from the store (replaced meanwhile): skipped"
                );
                continue;
            };
            let document = match docs.entry(h.doc) {
                std::collections::hash_map::Entry::Occupied(e) => e.get().clone(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    match self.store.document(collection, h.doc)? {
                        Some(d) => e.insert(d).clone(),
                        None => continue,
                    }
                }
            };
            out.push(SearchHit {
                rank: out.len() + 1,
                score: h.score,
                chunk,
                document,
            });
        }
        Ok(SearchResults {
            hits: out,
            mode,
            fallback,
            reranked,
        })
    }

    /// The analyzed terms of a query (for highlighting).
    pub fn query_terms(
        &self,
        collection: &str,
        text: &str,
    ) -> Result<Vec<(String, usize, usize)>, EngineError> {
        Ok(self.keyword_index(collection)?.analyze(text))
    }

    /// The distinct analyzed terms of `text`, in order of first appearance, with their
    /// BM25 inverse document frequency in `collection` (how rare, so how telling, each
    /// word is there).
    pub fn term_weights(
        &self,
        collection: &str,
        text: &str,
    ) -> Result<Vec<(String, f32)>, EngineError> {
        let idx = self.keyword_index(collection)?;
        let mut terms: Vec<String> = Vec::new();
        for (t, _, _) in idx.analyze(text) {
            if !terms.contains(&t) {
                terms.push(t);
            }
        }
        let idf = idx.idf(&terms)?;
        Ok(terms.into_iter().zip(idf).collect())
    }

    /// Create an empty collection (nothing happens when it exists).
    pub fn create_collection(&self, name: &str) -> Result<CollectionInfo, EngineError> {
        neuralcore_core::validate_stored_collection(name).map_err(EngineError::InvalidInput)?;
        if self.store.collection(name)?.is_none() {
            let mut b = self.store.begin()?;
            b.ensure_collection(name, &crate::now_rfc3339())?;
            b.commit()?;
        }
        self.collection(name)
    }

    /// Delete a collection and its index.
    pub fn drop_collection(&self, name: &str) -> Result<(), EngineError> {
        self.collection(name)?;
        let mut b = self.store.begin()?;
        b.delete_collection(name)?;
        b.commit()?;
        // A collection made again under the same name within the same second would have
        // the same creation time: its cached results go now.
        let tenant = crate::cached::tenant_of(name);
        self.cache
            .delete_tag(&neuralcore_cache::collection_tag(tenant, name));
        // Each index map stays locked while its entry goes and its folder is moved aside
        // (one at a time, after the commit: no search waits on the store's writer): an
        // index a search opened over the old folder meanwhile is in the map by then and
        // goes with it, and none can be opened over it after, to be left for the next
        // ingest of the name to write into deleted files.
        let keyword_dir = {
            let mut keyword = self.indexes.lock().expect("index map lock");
            keyword.remove(name);
            self.index_root
                .as_ref()
                .and_then(|r| move_aside(&r.join(name)))
        };
        let vector_dir = {
            let mut vectors = self.vectors.lock().expect("vector map lock");
            vectors.remove(name);
            self.data_dir
                .as_ref()
                .and_then(|d| move_aside(&d.join("vectors").join(name)))
        };
        for dir in [keyword_dir, vector_dir].into_iter().flatten() {
            remove_index_dir(&dir);
        }
        Ok(())
    }

    /// Wait for background index merges; call before exiting after writes.
    pub fn close(self) -> Result<(), EngineError> {
        let map = self.indexes.into_inner().expect("index map lock");
        for (_, idx) in map {
            if let Ok(idx) = Arc::try_unwrap(idx) {
                idx.close()?;
            }
        }
        Ok(())
    }
}

/// The index folder `dir` of a dropped collection renamed to a name no collection has
/// (`.dropped-…`), or `dir` itself when it cannot be; `None` when there is none.
fn move_aside(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    if !dir.exists() {
        return None;
    }
    static DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = DROPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let trash = dir.with_file_name(format!(".dropped-{}-{n}", std::process::id()));
    Some(match std::fs::rename(dir, &trash) {
        Ok(()) => trash,
        Err(_) => dir.to_path_buf(),
    })
}

/// Delete a dropped collection's index folder (moved aside by [`move_aside`]). The drop is committed by then, so this
/// cannot fail it: a background merge of the keyword index may still write into the
/// folder (deleting it then fails with "directory not empty"), so it is first renamed
/// out of the way, then deleted, again a moment later if need be; what is left is only
/// logged, under a name no collection has (`.dropped-…`), and swept by the next open.
fn remove_index_dir(target: &std::path::Path) {
    for wait_ms in [0u64, 50, 200, 1000] {
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        match std::fs::remove_dir_all(target) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) if wait_ms == 1000 => {
                tracing::warn!(
                    "cannot delete {} of a dropped collection ({e}): it is deleted on the next open",
                    target.display()
                );
            }
            Err(_) => {}
        }
    }
}

/// Delete what [`remove_index_dir`] left under `root` (`index/` or `vectors/`).
pub(crate) fn sweep_dropped(root: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(".dropped-") {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
