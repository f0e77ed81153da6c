//! Embeddings and the vector index: loading the embedding model from the model cache,
//! the embedding cache in the store, and keeping each collection's HNSW index in step
//! with the store (replay the last batch, or rebuild).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use neuralcore_core::{embedding_key, Chunk, DocKey, Embedder, EmbeddingKey, Reranker, TextKind};
use neuralcore_index::{VectorHit, VectorIndex, VectorStats};
use neuralcore_store::{PgVectors, VectorTxn};

use neuralcore_config::VectorBackendKind;

use crate::engine::CatchUp;
use crate::{Engine, EngineError};

/// Texts embedded per call to the model while ingesting (progress is reported after each).
pub(crate) const EMBED_GROUP: usize = 256;

/// Cached embeddings beyond twice the stored chunks (per model), and this many more,
/// start a sweep of the ones no chunk holds ([`Engine::sweep_embeddings`]).
pub const EMBEDDING_SLACK: u64 = 4096;

/// After a sweep failed (a full disk, a damaged record), the next automatic one waits
/// this long rather than repeat the whole read after every ingest.
const SWEEP_BACKOFF: std::time::Duration = std::time::Duration::from_secs(600);

/// The sweep's slack and its last failure.
pub(crate) struct SweepState {
    slack: std::sync::atomic::AtomicU64,
    failed_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Default for SweepState {
    fn default() -> Self {
        SweepState {
            slack: EMBEDDING_SLACK.into(),
            failed_at: Default::default(),
        }
    }
}

/// What a chunk's vector is computed from: its document title (when the chunk does not
/// already start with it) and its text, as BEIR's sentence-transformers baselines do.
pub fn embed_text(title: &str, text: &str) -> String {
    let title = title.trim();
    if title.is_empty() || text.trim_start().starts_with(title) {
        text.to_string()
    } else {
        format!("{title}\n{text}")
    }
}

/// A chunk's key and its vector.
pub(crate) type ChunkVector = ((DocKey, u32), Vec<f32>);

/// The embedding model and a collection's vector index.
pub(crate) type VectorPair = (Arc<dyn Embedder>, Arc<Vectors>);

/// A collection's vector index (`[index] vector`): an HNSW graph in this process's data
/// dir, or pgvector's in PostgreSQL next to the documents. Both are caught up from the
/// store's journal (see [`Engine::vector_index`]) and score by cosine similarity.
// One per collection, behind an `Arc`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum Vectors {
    /// In the data dir (or in memory).
    Local(VectorIndex),
    /// In PostgreSQL, shared by every replica.
    Pgvector(PgVectors),
}

impl Vectors {
    /// The store generation the index reflects.
    pub fn generation(&self) -> Result<u64, EngineError> {
        match self {
            Vectors::Local(i) => Ok(i.generation()),
            Vectors::Pgvector(p) => Ok(p.generation()?),
        }
    }

    /// Counts (a pgvector index keeps no deleted vectors behind).
    pub fn stats(&self) -> Result<VectorStats, EngineError> {
        match self {
            Vectors::Local(i) => Ok(i.stats()),
            Vectors::Pgvector(p) => Ok(VectorStats {
                live: p.len()? as usize,
                deleted: 0,
                dim: p.dim(),
                generation: p.generation()?,
            }),
        }
    }

    /// The `k` chunks most similar to `query` (unit length), best first; `exact` scans
    /// every vector (recall measurements).
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        exact: bool,
    ) -> Result<Vec<VectorHit>, EngineError> {
        match self {
            Vectors::Local(i) => Ok(i.search(query, k, exact)),
            Vectors::Pgvector(p) => Ok(p
                .search(query, k, exact)?
                .into_iter()
                .map(|h| VectorHit {
                    doc: h.doc,
                    ordinal: h.ordinal,
                    score: h.score,
                })
                .collect()),
        }
    }

    /// The cosine similarity of a chunk's vector to `query`, if the index holds one.
    pub fn similarity(
        &self,
        doc: DocKey,
        ordinal: u32,
        query: &[f32],
    ) -> Result<Option<f32>, EngineError> {
        match self {
            Vectors::Local(i) => Ok(i.similarity(doc, ordinal, query)),
            Vectors::Pgvector(p) => Ok(p.similarity(doc, ordinal, query)?),
        }
    }

    /// The local index, if that is what this is.
    pub fn local(&self) -> Option<&VectorIndex> {
        match self {
            Vectors::Local(i) => Some(i),
            Vectors::Pgvector(_) => None,
        }
    }

    /// Write what an ingest left unsaved (the local index's snapshot; pgvector commits
    /// as it goes).
    pub fn save(&self) -> Result<(), EngineError> {
        match self {
            Vectors::Local(i) => Ok(i.save()?),
            Vectors::Pgvector(_) => Ok(()),
        }
    }
}

/// A chunk waiting for its vector.
pub(crate) struct PendingVector {
    pub key: (DocKey, u32),
    pub text: String,
}

/// The model-cache folder of the evaluator `neuralcore train evaluator` writes.
pub const TRAINED_EVALUATOR: &str = "neuralcore-evaluator";

/// The model-cache folder of the reranker `neuralcore train reranker` writes; name it
/// as `rerank.model` to rerank with it.
pub const TRAINED_RERANKER: &str = "neuralcore-reranker";

/// The folders in the model cache that hold what was trained here (they cannot be
/// pulled: a backup keeps them).
pub const TRAINED_MODELS: [&str; 2] = [TRAINED_EVALUATOR, TRAINED_RERANKER];

/// The manifest `neuralcore train` writes beside the trained tensors.
const TRAINED_MANIFEST: &str = "evaluator.json";

/// A cross-encoder `neuralcore train` wrote into the model cache `dir` (the folder
/// `artifact`: its trained top over the base model its manifest names, also in `dir`).
fn load_trained(dir: &Path, artifact: &Path) -> Result<neuralcore_models::CrossEncoder, String> {
    let manifest = artifact.join(TRAINED_MANIFEST);
    let text =
        std::fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let m: neuralcore_models::train::EvaluatorManifest =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let base = dir.join(neuralcore_models::local_name(&m.base));
    neuralcore_models::CrossEncoder::load_adapted(&base, artifact, m.options.max_length)
        .map_err(|e| e.to_string())
}

fn model_err(e: neuralcore_core::ModelError) -> EngineError {
    EngineError::Model(e.to_string())
}

impl Engine {
    /// The model cache folder: `embedding.model_dir`, else `<data dir>/models`.
    pub fn model_dir(&self) -> Option<PathBuf> {
        let d = &self.config.embedding.model_dir;
        if !d.is_empty() {
            return Some(PathBuf::from(d));
        }
        self.data_dir.as_ref().map(|p| p.join("models"))
    }

    /// The embedding model, loaded on first use; `Err` says why there is none (turned
    /// off, or not pulled yet: the message names the command that fetches it).
    pub fn embedder_status(&self) -> Result<Arc<dyn Embedder>, String> {
        self.embedder
            .get_or_init(|| {
                let name = self.config.embedding.model.trim();
                let path = self.model_folder(
                    name,
                    "embeddings are turned off (embedding.model is empty)",
                    &|dir| {
                        format!(
                            "the embedding model {name:?} is not in {}: run `neuralcore models pull{}`",
                            dir.display(),
                            if name == neuralcore_models::DEFAULT_EMBEDDER {
                                String::new()
                            } else {
                                format!(" {name}")
                            }
                        )
                    },
                )?;
                let mut e = neuralcore_models::SentenceEmbedder::load(&path, name)
                    .map_err(|e| format!("cannot load the embedding model {name:?}: {e}"))?;
                e.set_batch_size(self.config.embedding.batch_size);
                e.set_query_weights(self.config.embedding.query_weights);
                Ok(Arc::new(e) as Arc<dyn Embedder>)
            })
            .clone()
    }

    /// The folder of model `name` in the cache, or why it cannot be used: `off` when no
    /// name is configured, `missing(cache dir)` when its weights are not there.
    fn model_folder(
        &self,
        name: &str,
        off: &str,
        missing: &dyn Fn(&Path) -> String,
    ) -> Result<PathBuf, String> {
        if name.is_empty() {
            return Err(off.into());
        }
        let dir = self
            .model_dir()
            .ok_or("no model folder configured (embedding.model_dir)")?;
        // A known name, or a hub repository id (`org/name` is cached as `org--name`).
        let path = dir.join(neuralcore_models::local_name(name));
        // Pulled weights, or what `neuralcore train` wrote.
        if !path.join("model.safetensors").exists() && !path.join(TRAINED_MANIFEST).is_file() {
            return Err(missing(&dir));
        }
        Ok(path)
    }

    /// The reranker, loaded on first use; `Err` says why there is none.
    pub fn reranker_status(&self) -> Result<Arc<dyn Reranker>, String> {
        self.reranker
            .get_or_init(|| {
                let name = self.config.rerank.model.trim();
                let path = self.model_folder(
                    name,
                    "no reranker configured (rerank.model is empty)",
                    &|dir| {
                        format!(
                            "the reranker {name:?} is not in {}: run `neuralcore models pull {}` \
                             (from the Hugging Face hub), or `neuralcore models pull --from DIR \
                             {name}` for a cross-encoder folder you have",
                            dir.display(),
                            neuralcore_models::known(name).map_or(name, |k| k.hf_repo)
                        )
                    },
                )?;
                // A folder `neuralcore train` wrote holds a manifest, not the full model.
                let r = if path.join(TRAINED_MANIFEST).is_file() {
                    load_trained(path.parent().unwrap_or(&path), &path)
                } else {
                    neuralcore_models::CrossEncoder::load(
                        &path,
                        name,
                        self.config.rerank.max_length,
                    )
                    .map_err(|e| e.to_string())
                }
                .map_err(|e| format!("cannot load the reranker {name:?}: {e}"))?;
                Ok(Arc::new(r) as Arc<dyn Reranker>)
            })
            .clone()
    }

    /// The relevance evaluator `neuralcore train evaluator` wrote into the model cache
    /// (`<model dir>/neuralcore-evaluator`: the trained top of a cross-encoder over its
    /// base model), loaded on first use; `Err` says why there is none.
    pub fn trained_evaluator_status(&self) -> Result<Arc<dyn Reranker>, String> {
        self.trained_evaluator
            .get_or_init(|| {
                let dir = self
                    .model_dir()
                    .ok_or("no model folder configured (embedding.model_dir)")?;
                let artifact = dir.join(TRAINED_EVALUATOR);
                if !artifact.join(TRAINED_MANIFEST).is_file() {
                    return Err(format!(
                        "no trained evaluator in {} (`neuralcore train evaluator`)",
                        artifact.display()
                    ));
                }
                let r = load_trained(&dir, &artifact)
                    .map_err(|e| format!("cannot load the trained evaluator: {e}"))?;
                Ok(Arc::new(r) as Arc<dyn Reranker>)
            })
            .clone()
    }

    /// Use `reranker` instead of loading one from the model cache.
    pub fn set_reranker(&mut self, reranker: Arc<dyn Reranker>) {
        self.reranker = std::sync::OnceLock::new();
        let _ = self.reranker.set(Ok(reranker));
    }

    /// The vector of a query, through the operation cache (a query asked again, or asked
    /// deeper by a caller that needs more results, is embedded once). Cached under the
    /// `default` tenant; the searches of a collection cache under its tenant.
    pub fn query_vector(&self, query: &str) -> Result<Vec<f32>, EngineError> {
        self.query_vector_in(crate::cached::DEFAULT_TENANT, query)
    }

    /// Cosine similarity of `query` to each chunk, from the vectors in the collection's
    /// index (vectors are unit length); `None` without a model or for a chunk with no
    /// vector.
    pub fn chunk_similarities(
        &self,
        collection: &str,
        query: &str,
        chunks: &[(DocKey, u32)],
    ) -> Result<Vec<Option<f32>>, EngineError> {
        let Some(index) = self.vector_index(collection)? else {
            return Ok(vec![None; chunks.len()]);
        };
        let q = self.query_vector_in(crate::cached::tenant_of(collection), query)?;
        chunks
            .iter()
            .map(|(d, o)| index.similarity(*d, *o, &q))
            .collect()
    }

    /// The vectors of `texts` embedded as `kind` (queries, or sentences to compare with
    /// them) by the engine's embedding model, through the operation cache under the
    /// collection's tenant; `None` for no texts, or when the model cannot be loaded (as
    /// vector search falls back to keywords then). Compare them with
    /// [`neuralcore_core::cosine`].
    pub fn text_vectors(
        &self,
        collection: &str,
        texts: &[&str],
        kind: TextKind,
    ) -> Result<Option<Vec<Vec<f32>>>, EngineError> {
        if texts.is_empty() || self.embedder_status().is_err() {
            return Ok(None);
        }
        let tenant = crate::cached::tenant_of(collection);
        self.text_vectors_in(tenant, texts, kind).map(Some)
    }

    /// Forget cached query vectors and search results (so a benchmark's latencies
    /// include embedding and searching).
    pub fn clear_query_cache(&self) {
        self.cache.delete_tag(&neuralcore_cache::op_tag(
            neuralcore_cache::Op::QueryEmbedding,
        ));
        self.cache
            .delete_tag(&neuralcore_cache::op_tag(neuralcore_cache::Op::Search));
    }

    /// The embedding model, if there is one.
    pub fn embedder(&self) -> Option<Arc<dyn Embedder>> {
        self.embedder_status().ok()
    }

    /// Use `embedder` instead of loading one from the model cache (tests, embedding).
    pub fn set_embedder(&mut self, embedder: Arc<dyn Embedder>) {
        self.embedder = std::sync::OnceLock::new();
        let _ = self.embedder.set(Ok(embedder));
        self.vectors.lock().expect("vector map lock").clear();
        self.clear_query_cache();
    }

    /// Write every open vector index's snapshot that an ingest left behind (see
    /// `VectorIndex::apply_unsaved`): before a backup copies them.
    pub fn save_vectors(&self) -> Result<(), EngineError> {
        let open: Vec<Arc<Vectors>> = self
            .vectors
            .lock()
            .expect("vector map lock")
            .values()
            .cloned()
            .collect();
        for idx in open {
            idx.save()?;
        }
        Ok(())
    }

    /// The vector index of a collection, opened and brought up to the store's
    /// generation; `None` without an embedding model.
    pub fn vector_index(&self, collection: &str) -> Result<Option<Arc<Vectors>>, EngineError> {
        self.vector_index_observed(collection, &mut |_| {})
    }

    /// [`Engine::vector_index`], reporting texts embedded while catching up.
    pub(crate) fn vector_index_observed(
        &self,
        collection: &str,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Option<Arc<Vectors>>, EngineError> {
        let Some(embedder) = self.embedder() else {
            return Ok(None);
        };
        let mut map = self.vectors.lock().expect("vector map lock");
        if let Some(i) = map.get(collection) {
            let i = i.clone();
            drop(map);
            if self.may_follow(collection) {
                if let Ok(_one) = self.following.try_lock() {
                    // A pgvector index another process is catching up is used as it is.
                    self.sync_vectors_waiting(collection, &i, &*embedder, progress, false)?;
                }
            }
            return Ok(Some(i));
        }
        let model = embedder.model_id().to_string();
        let idx = if self.config.index.vector == VectorBackendKind::Pgvector {
            let s = &self.config.store;
            Vectors::Pgvector(
                PgVectors::open(
                    &s.postgres_url,
                    &s.postgres_schema,
                    s.postgres_pool,
                    collection,
                    &model,
                    embedder.dimension(),
                    self.config.vector,
                )?
                .with_build_memory_mb(self.config.index.pgvector_build_memory_mb),
            )
        } else {
            Vectors::Local(match &self.data_dir {
                Some(d) => VectorIndex::open(
                    &d.join("vectors")
                        .join(collection)
                        .join(format!("{}.hnsw", slug(&model))),
                    &model,
                    embedder.dimension(),
                    self.config.vector,
                ),
                None => VectorIndex::in_memory(&model, embedder.dimension(), self.config.vector),
            })
        };
        let idx = Arc::new(idx);
        self.sync_vectors(collection, &idx, &*embedder, progress)?;
        map.insert(collection.to_string(), idx.clone());
        Ok(Some(idx))
    }

    /// Drop the cached embeddings that no stored chunk holds any more (a replaced or
    /// removed document's), once they are due: more than twice the chunks of every
    /// collection per model that cached vectors, and the slack ([`EMBEDDING_SLACK`]
    /// unless [`Engine::set_embedding_sweep_slack`]) more; or always with `force`. The
    /// cache is kept when documents go so that re-adding a text never embeds it again;
    /// without a sweep it grew by every replaced chunk for ever (a soak replacing 200
    /// uploads: 17,477 vectors for 7,714 chunks after 30 minutes). Every model's
    /// vectors of the stored chunks are kept. A sweep reads every chunk once, a cost
    /// paid once per as many replaced chunks as the store holds. How many went.
    ///
    /// Called after each ingest and removal; an automatic sweep that failed is not
    /// tried again for ten minutes.
    pub fn sweep_embeddings(&self, force: bool) -> Result<u64, EngineError> {
        use std::sync::atomic::Ordering;
        if !force {
            let failed = *self
                .sweep
                .failed_at
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if failed.is_some_and(|t| t.elapsed() < SWEEP_BACKOFF) {
                return Ok(0);
            }
            let cached = self.store.embedding_count()?;
            let models = self.store.embedding_models()?.len().max(1) as u64;
            let live: u64 = self.store.collections()?.iter().map(|c| c.chunks).sum();
            let bound = live
                .saturating_mul(2 * models)
                .saturating_add(self.sweep.slack.load(Ordering::Relaxed));
            if cached <= bound {
                return Ok(0);
            }
        }
        let start = std::time::Instant::now();
        let swept = self.store.begin().and_then(|mut batch| {
            let gone = batch.retain_embeddings(&|model, title, c| {
                embedding_key(model, &embed_text(title, &c.text))
            })?;
            batch.commit()?;
            Ok(gone)
        });
        *self
            .sweep
            .failed_at
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = swept.is_err().then(std::time::Instant::now);
        let gone = swept?;
        tracing::info!(
            gone,
            left = self.store.embedding_count().unwrap_or(0),
            ms = start.elapsed().as_millis() as u64,
            "swept the embedding cache of vectors no chunk holds"
        );
        Ok(gone)
    }

    /// Change the slack of the automatic sweep ([`EMBEDDING_SLACK`] by default): a small
    /// one sweeps sooner (tests), a large one rarely.
    pub fn set_embedding_sweep_slack(&self, slack: u64) {
        self.sweep
            .slack
            .store(slack, std::sync::atomic::Ordering::Relaxed);
    }

    /// Drop the cached vector index of a collection so the next use re-syncs it.
    pub(crate) fn forget_vectors(&self, collection: &str) {
        self.vectors
            .lock()
            .expect("vector map lock")
            .remove(collection);
    }

    /// Bring `idx` up to the store's generation of `collection`: replay the journal
    /// log from the index's generation, or rebuild from every stored chunk (vectors from
    /// the embedding cache, the rest embedded). A pgvector index is caught up in one
    /// transaction holding its row: with `wait` false and another process at it, this
    /// returns at once and the index is used as it is.
    pub(crate) fn sync_vectors(
        &self,
        collection: &str,
        idx: &Vectors,
        embedder: &dyn Embedder,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(), EngineError> {
        self.sync_vectors_waiting(collection, idx, embedder, progress, true)
    }

    pub(crate) fn sync_vectors_waiting(
        &self,
        collection: &str,
        idx: &Vectors,
        embedder: &dyn Embedder,
        progress: &mut dyn FnMut(usize),
        wait: bool,
    ) -> Result<(), EngineError> {
        match idx {
            Vectors::Local(idx) => {
                let idx_gen = idx.generation();
                let Some((store_gen, rebuild, removed, vectors)) =
                    self.vector_plan(collection, idx_gen, embedder, progress)?
                else {
                    return Ok(());
                };
                if rebuild {
                    // Searches meanwhile see the old graph whole, then the new one.
                    idx.replace(&vectors, store_gen)?;
                } else {
                    idx.apply(&removed, &vectors, store_gen)?;
                }
                Ok(())
            }
            Vectors::Pgvector(p) => {
                // Cheap check first: most searches find the index current.
                let (_, plan) = self.catch_up(collection, p.generation()?)?;
                if matches!(plan, CatchUp::Current) {
                    return Ok(());
                }
                p.update(wait, |tx| {
                    self.catch_up_pg(collection, tx, embedder, progress)
                })?;
                Ok(())
            }
        }
    }

    /// After this process committed a batch: bring a pgvector index up from the journal
    /// log, which holds the batch (its vectors from the embedding cache it wrote),
    /// waiting for another process at it. Not from the batch's own vectors: which
    /// generation the index is at when the row is taken is only known inside it, and
    /// another process's batch may have landed between.
    pub(crate) fn apply_pg_batch(
        &self,
        collection: &str,
        p: &PgVectors,
        embedder: &dyn Embedder,
    ) -> Result<(), EngineError> {
        p.update(true, |tx| {
            self.catch_up_pg(collection, tx, embedder, &mut |_| {})
        })?;
        Ok(())
    }

    /// Inside a pgvector index's update: replay the journal log from the generation it
    /// reflects, or rebuild it (the HNSW index built after the inserts).
    fn catch_up_pg(
        &self,
        collection: &str,
        tx: &mut VectorTxn<'_, '_>,
        embedder: &dyn Embedder,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(), EngineError> {
        let Some((store_gen, rebuild, removed, vectors)) =
            self.vector_plan(collection, tx.generation(), embedder, progress)?
        else {
            return Ok(());
        };
        if rebuild {
            tx.clear()?;
            tx.insert(&vectors)?;
            tx.finish_rebuild()?;
        } else {
            tx.remove_docs(&removed)?;
            tx.insert(&vectors)?;
        }
        tx.set_generation(store_gen);
        Ok(())
    }

    /// What brings an index at `idx_gen` up to the store: the store's generation,
    /// whether it is a rebuild, the documents whose vectors go, and the vectors that
    /// come; `None` when it is current.
    #[allow(clippy::type_complexity)]
    fn vector_plan(
        &self,
        collection: &str,
        idx_gen: u64,
        embedder: &dyn Embedder,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Option<(u64, bool, Vec<DocKey>, Vec<ChunkVector>)>, EngineError> {
        let (store_gen, plan) = self.catch_up(collection, idx_gen)?;
        let rebuild = matches!(plan, CatchUp::Rebuild);
        let (removed, docs) = match plan {
            CatchUp::Current => return Ok(None),
            CatchUp::Replay(journal) => {
                tracing::info!(
                    collection,
                    from = idx_gen,
                    to = store_gen,
                    "vector index behind: replaying the store's journal"
                );
                (journal.removed, journal.added)
            }
            CatchUp::Rebuild => {
                tracing::info!(collection, store_gen, idx_gen, "rebuilding vector index");
                (Vec::new(), self.store.document_keys(collection)?)
            }
        };
        let mut pending = Vec::new();
        for d in &docs {
            let Some(doc) = self.store.document(collection, *d)? else {
                continue;
            };
            for c in self.store.chunks(*d)? {
                pending.push(pending_for(&doc.title, &c));
            }
        }
        let vectors = self.vectors_for(embedder, &pending, progress)?;
        Ok(Some((store_gen, rebuild, removed, vectors)))
    }

    /// Vectors for `pending` chunks: from the embedding cache, the rest embedded and
    /// cached, committed every few thousand texts so an interrupted rebuild keeps what
    /// it embedded.
    fn vectors_for(
        &self,
        embedder: &dyn Embedder,
        pending: &[PendingVector],
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<ChunkVector>, EngineError> {
        if pending.len() >= 4 * EMBED_GROUP {
            tracing::warn!(
                "preparing vectors for {} stored chunks with {} (texts not in the embedding \
                 cache are embedded now; this happens once)",
                pending.len(),
                embedder.model_id()
            );
        }
        let mut out = Vec::with_capacity(pending.len());
        for slice in pending.chunks(16 * EMBED_GROUP) {
            let mut fresh = Vec::new();
            out.extend(cached_or_embed(
                self,
                embedder,
                slice,
                &HashMap::new(),
                &mut fresh,
                progress,
            )?);
            if !fresh.is_empty() {
                let mut b = self.store.begin()?;
                for (k, v) in &fresh {
                    b.put_embedding(embedder.model_id(), k, v)?;
                }
                b.commit()?;
            }
        }
        Ok(out)
    }
}

/// The pending vector of a chunk.
pub(crate) fn pending_for(title: &str, c: &Chunk) -> PendingVector {
    PendingVector {
        key: (c.doc, c.ordinal),
        text: embed_text(title, &c.text),
    }
}

/// Look `pending` up in `local` (embedded earlier in this batch) and the store's cache;
/// embed what is missing (each distinct text once), appending it to `fresh`.
pub(crate) fn cached_or_embed(
    engine: &Engine,
    embedder: &dyn Embedder,
    pending: &[PendingVector],
    local: &HashMap<EmbeddingKey, Vec<f32>>,
    fresh: &mut Vec<(EmbeddingKey, Vec<f32>)>,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<ChunkVector>, EngineError> {
    let model = embedder.model_id();
    let keys: Vec<EmbeddingKey> = pending
        .iter()
        .map(|p| embedding_key(model, &p.text))
        .collect();
    let cached = engine.store.embeddings(&keys)?;
    let mut found: HashMap<EmbeddingKey, Vec<f32>> = HashMap::new();
    let mut missing: Vec<usize> = Vec::new();
    let mut queued: std::collections::HashSet<EmbeddingKey> = Default::default();
    for (i, c) in cached.into_iter().enumerate() {
        let k = keys[i];
        if found.contains_key(&k) {
            continue;
        }
        match c.filter(|v| v.len() == embedder.dimension()) {
            Some(v) => {
                found.insert(k, v);
            }
            None => match local.get(&k) {
                Some(v) => {
                    found.insert(k, v.clone());
                }
                None => {
                    if queued.insert(k) {
                        missing.push(i);
                    }
                }
            },
        }
    }
    for group in missing.chunks(EMBED_GROUP) {
        let texts: Vec<&str> = group.iter().map(|&i| pending[i].text.as_str()).collect();
        let vs = embedder
            .embed(&texts, TextKind::Document)
            .map_err(model_err)?;
        one_each(vs.len(), texts.len())?;
        for (&i, v) in group.iter().zip(vs) {
            fresh.push((keys[i], v.clone()));
            found.insert(keys[i], v);
        }
        progress(group.len());
    }
    Ok(pending
        .iter()
        .zip(&keys)
        .map(|(p, k)| (p.key, found[k].clone()))
        .collect())
}

/// A file-name-safe form of a model id.
fn slug(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    out.truncate(80);
    out
}

/// An error unless the model returned one vector for each of the texts it was given.
pub(crate) fn one_each(vectors: usize, texts: usize) -> Result<(), EngineError> {
    if vectors == texts {
        return Ok(());
    }
    Err(EngineError::Model(format!(
        "the model returned {vectors} vectors for {texts} texts"
    )))
}
