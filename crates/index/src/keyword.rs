//! The per-collection keyword index and its BM25 scorer.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use neuralcore_core::bm25::{self, Bm25Params};
use neuralcore_core::DocKey;
use serde::{Deserialize, Serialize};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST, INDEXED,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, Term};

use crate::analyzer::AnalyzerConfig;

const TOKENIZER: &str = "nc";
const WRITER_BUDGET: usize = 64 * 1024 * 1024;

/// Errors of the keyword index.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// Bad configuration (analyzer language, ...).
    #[error("invalid keyword index configuration: {0}")]
    Config(String),
    /// tantivy failed.
    #[error("keyword index error: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    /// File system failure.
    #[error("keyword index I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// What the index needs of a chunk.
#[derive(Debug, Clone, Copy)]
pub struct IndexChunk<'a> {
    /// Document key.
    pub doc: DocKey,
    /// Chunk ordinal.
    pub ordinal: u32,
    /// Document title.
    pub title: &'a str,
    /// Chunk text.
    pub body: &'a str,
}

/// One ranked chunk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeywordHit {
    /// Document key.
    pub doc: DocKey,
    /// Chunk ordinal.
    pub ordinal: u32,
    /// BM25 score.
    pub score: f32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
struct Payload {
    generation: u64,
    analyzer: String,
}

/// A keyword index of one collection.
pub struct KeywordIndex {
    index: Index,
    reader: IndexReader,
    writer: Mutex<Option<IndexWriter>>,
    analyzer: TextAnalyzer,
    analyzer_fp: String,
    title_in_body: bool,
    f_doc: Field,
    f_ord: Field,
    f_title: Field,
    f_body: Field,
    /// Saturation tables for the last (k1, b, avgdl) seen, per field.
    tf_tables: Mutex<Vec<(TfKey, Arc<TfTable>)>>,
    /// Per-segment caches, cleared at every commit.
    seg_cache: Mutex<HashMap<tantivy::index::SegmentId, Arc<SegCache>>>,
}

/// What queries read of a segment, materialized once.
struct SegCache {
    body_norms: Vec<u8>,
    title_norms: Vec<u8>,
    doc: tantivy::columnar::Column<u64>,
    ord: tantivy::columnar::Column<u64>,
}

/// Term frequencies whose saturation `tf / (tf + norm)` is tabulated.
const TF_TABLE: usize = 8;
type TfTable = [[f32; 256]; TF_TABLE];
type TfKey = (u32, u32, u32);

fn schema() -> Schema {
    let mut s = Schema::builder();
    s.add_u64_field("doc", INDEXED | FAST);
    s.add_u64_field("ord", FAST);
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqs)
            .set_fieldnorms(true),
    );
    s.add_text_field("title", text.clone());
    s.add_text_field("body", text);
    s.build()
}

impl KeywordIndex {
    /// Open the index in `dir`, creating it when missing. An index built with another
    /// analyzer, or unreadable, is recreated empty (its generation is then 0, which
    /// makes the engine re-index the collection from the store).
    pub fn open(dir: &Path, cfg: &AnalyzerConfig) -> Result<Self, IndexError> {
        std::fs::create_dir_all(dir)?;
        let fp = cfg.fingerprint();
        let existing = tantivy::directory::MmapDirectory::open(dir)
            .map_err(|e| IndexError::Io(std::io::Error::other(e.to_string())))?;
        let index = match Index::open(existing) {
            Ok(index) => {
                let payload = read_payload(&index);
                if payload.analyzer == fp && index.schema() == schema() {
                    index
                } else {
                    drop(index);
                    recreate(dir)?
                }
            }
            Err(_) => recreate(dir)?,
        };
        Self::from_index(index, cfg, fp)
    }

    /// A fresh index in memory (for tests and ephemeral collections).
    pub fn in_memory(cfg: &AnalyzerConfig) -> Result<Self, IndexError> {
        Self::from_index(Index::create_in_ram(schema()), cfg, cfg.fingerprint())
    }

    fn from_index(index: Index, cfg: &AnalyzerConfig, fp: String) -> Result<Self, IndexError> {
        let analyzer = crate::analyzer::build(cfg).map_err(IndexError::Config)?;
        index.tokenizers().register(TOKENIZER, analyzer.clone());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()?;
        let s = index.schema();
        Ok(KeywordIndex {
            f_doc: s.get_field("doc")?,
            f_ord: s.get_field("ord")?,
            f_title: s.get_field("title")?,
            f_body: s.get_field("body")?,
            index,
            reader,
            writer: Mutex::new(None),
            analyzer,
            analyzer_fp: fp,
            title_in_body: cfg.title_in_body,
            tf_tables: Mutex::new(Vec::new()),
            seg_cache: Mutex::new(HashMap::new()),
        })
    }

    /// The store generation this index reflects (0 for a new index).
    pub fn generation(&self) -> u64 {
        read_payload(&self.index).generation
    }

    /// Number of indexed chunks.
    pub fn num_chunks(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Start a write session: adds and deletes become visible together at
    /// [`IndexSession::commit`]; a session dropped without commit is rolled back.
    pub fn session(&self) -> Result<IndexSession<'_>, IndexError> {
        let mut guard = self.writer.lock().expect("writer lock");
        if guard.is_none() {
            *guard = Some(self.index.writer_with_num_threads(1, WRITER_BUDGET)?);
        }
        Ok(IndexSession {
            idx: self,
            guard,
            dirty: false,
            done: false,
        })
    }

    /// Remove every chunk of the `removed` documents, add `added` chunks, and commit as
    /// `generation` — all or nothing.
    pub fn apply<'a>(
        &self,
        removed: &[DocKey],
        added: impl IntoIterator<Item = IndexChunk<'a>>,
        generation: u64,
    ) -> Result<(), IndexError> {
        let mut s = self.session()?;
        for d in removed {
            s.delete_doc(*d);
        }
        for c in added {
            s.add(c)?;
        }
        s.commit(generation)
    }

    /// Remove everything (then `apply` the whole collection to rebuild).
    pub fn clear(&self) -> Result<(), IndexError> {
        let mut s = self.session()?;
        s.writer().delete_all_documents()?;
        s.commit(0)
    }

    /// Wait for background merges (call before the process exits after big writes).
    pub fn close(self) -> Result<(), IndexError> {
        if let Some(w) = self.writer.into_inner().expect("writer lock") {
            w.wait_merging_threads()?;
        }
        Ok(())
    }

    /// The analyzed terms of a text, in order (for highlighting and query inspection).
    pub fn analyze(&self, text: &str) -> Vec<(String, usize, usize)> {
        let mut a = self.analyzer.clone();
        let mut s = a.token_stream(text);
        let mut out = Vec::new();
        while s.advance() {
            let t = s.token();
            out.push((t.text.clone(), t.offset_from, t.offset_to));
        }
        out
    }

    /// The BM25 inverse document frequency, `ln(1 + (N - df + 0.5) / (df + 0.5))`, of
    /// each analyzed term in the body field (a term no chunk holds gets the largest
    /// value, as if `df` were 0). Deleted chunks still count until segments merge.
    pub fn idf(&self, terms: &[String]) -> Result<Vec<f32>, IndexError> {
        let searcher = self.reader.searcher();
        let n = searcher.num_docs() as f32;
        terms
            .iter()
            .map(|t| {
                let df = searcher.doc_freq(&Term::from_field_text(self.f_body, t))? as f32;
                Ok(bm25::idf(n, df))
            })
            .collect()
    }

    /// `tf / (tf + norm[id])` for tf = 1..=TF_TABLE, cached per (k1, b, avgdl): the
    /// statistics change only at commits, so queries share one table.
    fn tf_table(&self, k1: f32, b: f32, avgdl: f32, norm: &[f32; 256]) -> Arc<TfTable> {
        let key = (k1.to_bits(), b.to_bits(), avgdl.to_bits());
        let mut cache = self.tf_tables.lock().expect("tf table lock");
        if let Some((_, t)) = cache.iter().find(|(k, _)| *k == key) {
            return t.clone();
        }
        let mut table = [[0f32; 256]; TF_TABLE];
        for (i, row) in table.iter_mut().enumerate() {
            let tf = (i + 1) as f32;
            for (slot, n) in row.iter_mut().zip(norm) {
                *slot = bm25::saturation(tf, *n);
            }
        }
        let table = Arc::new(table);
        if cache.len() >= 8 {
            cache.remove(0);
        }
        cache.push((key, table.clone()));
        table
    }

    /// Per-segment data every query needs (field-norm ids, fast-field columns), built
    /// once per segment and dropped at the next commit.
    fn segment_cache(&self, seg: &tantivy::SegmentReader) -> Result<Arc<SegCache>, IndexError> {
        let id = seg.segment_id();
        if let Some(c) = self.seg_cache.lock().expect("segment cache lock").get(&id) {
            return Ok(c.clone());
        }
        let ids = |field| -> Result<Vec<u8>, IndexError> {
            let r = seg.get_fieldnorms_reader(field)?;
            Ok((0..seg.max_doc()).map(|d| r.fieldnorm_id(d)).collect())
        };
        let ff = seg.fast_fields();
        let cache = Arc::new(SegCache {
            body_norms: ids(self.f_body)?,
            title_norms: ids(self.f_title)?,
            doc: ff.u64("doc")?,
            ord: ff.u64("ord")?,
        });
        self.seg_cache
            .lock()
            .expect("segment cache lock")
            .insert(id, cache.clone());
        Ok(cache)
    }

    /// The `k` best chunks for `query` under BM25 with `params`.
    pub fn search(
        &self,
        query: &str,
        k: usize,
        params: &Bm25Params,
    ) -> Result<Vec<KeywordHit>, IndexError> {
        // Query terms with their counts, in a stable order.
        let mut qterms: Vec<(String, f32)> = Vec::new();
        for (t, _, _) in self.analyze(query) {
            match qterms.iter_mut().find(|(q, _)| *q == t) {
                Some(e) => e.1 += 1.0,
                None => qterms.push((t, 1.0)),
            }
        }
        qterms.sort_by(|a, b| a.0.cmp(&b.0));
        let searcher = self.reader.searcher();
        let live_docs = searcher.num_docs();
        if qterms.is_empty() || k == 0 || live_docs == 0 {
            return Ok(Vec::new());
        }
        let segs = searcher.segment_readers();
        let caches: Vec<Arc<SegCache>> = segs
            .iter()
            .map(|s| self.segment_cache(s))
            .collect::<Result<_, _>>()?;
        let (k1, b) = (params.k1 as f32, params.b as f32);
        let mut fields = vec![(self.f_body, 1.0f32, true)];
        if params.title_weight > 0.0 {
            fields.push((self.f_title, params.title_weight as f32, false));
        }
        // Per field: statistics, saturation tables, and each term's weight and term info
        // per segment (looked up once; document frequency summed over segments).
        struct FieldPlan {
            body: bool,
            norm: [f32; 256],
            tf_table: Arc<TfTable>,
            invs: Vec<Arc<tantivy::InvertedIndexReader>>,
            terms: Vec<(f32, Vec<Option<tantivy::postings::TermInfo>>)>,
        }
        // Statistics count deleted chunks that are not merged away yet, like tantivy's
        // own: document frequencies do, so N must too (or idf can turn negative).
        let total_docs: u64 = segs.iter().map(|s| s.max_doc() as u64).sum();
        let n_docs = total_docs as f32;
        let mut plan = Vec::with_capacity(fields.len());
        for (field, weight, body) in fields {
            let invs: Vec<_> = segs
                .iter()
                .map(|s| s.inverted_index(field))
                .collect::<Result<_, _>>()?;
            let tokens: u64 = invs.iter().map(|i| i.total_num_tokens()).sum();
            let avgdl = bm25::average_length(tokens as f64, total_docs);
            let mut norm = [0f32; 256];
            for (id, slot) in norm.iter_mut().enumerate() {
                let dl = tantivy::fieldnorm::FieldNormReader::id_to_fieldnorm(id as u8) as f32;
                *slot = params.length_norm(dl, avgdl);
            }
            let tf_table = self.tf_table(k1, b, avgdl, &norm);
            let mut terms = Vec::new();
            for (t, qtf) in &qterms {
                let term = Term::from_field_text(field, t);
                let infos = invs
                    .iter()
                    .map(|i| i.get_term_info(&term))
                    .collect::<Result<Vec<_>, _>>()?;
                let df: u64 = infos.iter().flatten().map(|ti| ti.doc_freq as u64).sum();
                if df == 0 {
                    continue;
                }
                let df = df as f32;
                let idf = bm25::idf(n_docs, df);
                // Strictly positive, so a scored document never reads as unscored.
                let w = (weight * params.term_weight(idf, *qtf)).max(f32::MIN_POSITIVE);
                terms.push((w, infos));
            }
            plan.push(FieldPlan {
                body,
                norm,
                tf_table,
                invs,
                terms,
            });
        }
        let k = k.min(live_docs as usize);
        let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(k + 1);
        let mut scores: Vec<f32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        for (seg_ord, seg) in segs.iter().enumerate() {
            let cache = &caches[seg_ord];
            scores.clear();
            scores.resize(seg.max_doc() as usize, 0.0);
            // Every document is recorded once, when it first scores: written
            // unconditionally and kept by advancing the length, so the hot loop has no
            // unpredictable branch.
            if touched.len() <= seg.max_doc() as usize {
                touched.resize(seg.max_doc() as usize + 1, 0);
            }
            let mut n_touched = 0usize;
            for fp in &plan {
                let ids: &[u8] = if fp.body {
                    &cache.body_norms
                } else {
                    &cache.title_norms
                };
                for (w, infos) in &fp.terms {
                    let Some(ti) = &infos[seg_ord] else { continue };
                    let mut block = fp.invs[seg_ord]
                        .read_block_postings_from_terminfo(ti, IndexRecordOption::WithFreqs)?;
                    loop {
                        let docs = block.docs();
                        if docs.is_empty() {
                            break;
                        }
                        for (&d, &tf) in docs.iter().zip(block.freqs()) {
                            let id = ids[d as usize] as usize;
                            let c = match fp.tf_table.get(tf as usize - 1) {
                                Some(row) => w * row[id],
                                None => w * bm25::saturation(tf as f32, fp.norm[id]),
                            };
                            let s = &mut scores[d as usize];
                            touched[n_touched] = d;
                            n_touched += (*s == 0.0) as usize;
                            *s += c;
                        }
                        block.advance();
                    }
                }
            }
            // Top k by score, ties by (document key, ordinal): independent of how
            // the index happens to be split into segments.
            let alive = seg.alive_bitset();
            for &d in &touched[..n_touched] {
                let s = scores[d as usize];
                if heap.len() == k && heap.peek().is_some_and(|min| s < min.score) {
                    continue;
                }
                if alive.is_some_and(|a| !a.is_alive(d)) {
                    continue;
                }
                let entry = Scored {
                    score: s,
                    key: cache.doc.first(d).unwrap_or_default(),
                    ordinal: cache.ord.first(d).unwrap_or_default() as u32,
                };
                if heap.len() == k && heap.peek().is_some_and(|worst| entry >= *worst) {
                    continue;
                }
                heap.push(entry);
                if heap.len() > k {
                    heap.pop();
                }
            }
        }
        Ok(heap
            .into_sorted_vec()
            .into_iter()
            .map(|s| KeywordHit {
                doc: s.key,
                ordinal: s.ordinal,
                score: s.score,
            })
            .collect())
    }
}

/// Pending writes to a [`KeywordIndex`] (see [`KeywordIndex::session`]).
pub struct IndexSession<'a> {
    idx: &'a KeywordIndex,
    guard: std::sync::MutexGuard<'a, Option<IndexWriter>>,
    dirty: bool,
    done: bool,
}

impl IndexSession<'_> {
    fn writer(&mut self) -> &mut IndexWriter {
        self.dirty = true;
        self.guard.as_mut().expect("writer present in a session")
    }

    /// Remove every chunk (a rebuild then adds the collection back, and readers see the
    /// old contents until the commit).
    pub fn clear(&mut self) -> Result<(), IndexError> {
        self.writer().delete_all_documents()?;
        self.dirty = true;
        Ok(())
    }

    /// Remove every chunk of a document (chunks added earlier in this session too).
    pub fn delete_doc(&mut self, doc: DocKey) {
        let f = self.idx.f_doc;
        self.writer().delete_term(Term::from_field_u64(f, doc));
    }

    /// Add one chunk.
    pub fn add(&mut self, c: IndexChunk<'_>) -> Result<(), IndexError> {
        let (fd, fo, ft, fb) = (
            self.idx.f_doc,
            self.idx.f_ord,
            self.idx.f_title,
            self.idx.f_body,
        );
        let body = if self.idx.title_in_body && !c.title.is_empty() {
            format!("{}\n{}", c.title, c.body)
        } else {
            c.body.to_string()
        };
        self.writer().add_document(doc!(
            fd => c.doc,
            fo => c.ordinal as u64,
            ft => c.title,
            fb => body,
        ))?;
        Ok(())
    }

    /// Make the session's writes visible, recording `generation`.
    pub fn commit(mut self, generation: u64) -> Result<(), IndexError> {
        let payload = Payload {
            generation,
            analyzer: self.idx.analyzer_fp.clone(),
        };
        let writer = self.guard.as_mut().expect("writer present in a session");
        let mut prepared = writer.prepare_commit()?;
        prepared.set_payload(&serde_json::to_string(&payload).expect("serializable"));
        prepared.commit()?;
        self.done = true;
        self.idx.reader.reload()?;
        self.idx
            .seg_cache
            .lock()
            .expect("segment cache lock")
            .clear();
        Ok(())
    }
}

impl Drop for IndexSession<'_> {
    fn drop(&mut self) {
        if !self.done && self.dirty {
            if let Some(w) = self.guard.as_mut() {
                let _ = w.rollback();
            }
        }
    }
}

fn recreate(dir: &Path) -> Result<Index, IndexError> {
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(Index::create_in_dir(dir, schema())?)
}

fn read_payload(index: &Index) -> Payload {
    index
        .load_metas()
        .ok()
        .and_then(|m| m.payload)
        .and_then(|p| serde_json::from_str(&p).ok())
        .unwrap_or_default()
}

/// A ranked chunk; "greater" means ranked lower, so a `BinaryHeap` keeps the worst of
/// the current top k on top and `into_sorted_vec` yields best first.
#[derive(Debug, Clone, Copy)]
struct Scored {
    score: f32,
    key: DocKey,
    ordinal: u32,
}

impl PartialEq for Scored {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Scored {}
impl PartialOrd for Scored {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scored {
    fn cmp(&self, o: &Self) -> Ordering {
        o.score
            .total_cmp(&self.score)
            .then(self.key.cmp(&o.key))
            .then(self.ordinal.cmp(&o.ordinal))
    }
}
