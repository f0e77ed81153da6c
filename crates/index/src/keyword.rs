//! The per-collection keyword index and its BM25 scorer.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::Mutex;

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

/// BM25 parameters, applied at query time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Bm25Params {
    /// Term-frequency saturation.
    pub k1: f64,
    /// Length normalization (0 = none, 1 = full).
    pub b: f64,
    /// Weight of title matches relative to body matches (0 ignores titles).
    pub title_weight: f64,
}

/// Defaults chosen on the SciFact train split (see `bench/README.md`); Lucene's
/// classic values are k1 = 1.2, b = 0.75.
impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params {
            k1: 0.9,
            b: 0.5,
            title_weight: 0.2,
        }
    }
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
}

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
        let analyzer = cfg.build().map_err(IndexError::Config)?;
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

    /// The `k` best chunks for `query` under BM25 with `params`.
    pub fn search(
        &self,
        query: &str,
        k: usize,
        params: &Bm25Params,
    ) -> Result<Vec<KeywordHit>, IndexError> {
        let mut qterms: HashMap<String, f32> = HashMap::new();
        for (t, _, _) in self.analyze(query) {
            *qterms.entry(t).or_default() += 1.0;
        }
        if qterms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let mut qterms: Vec<(String, f32)> = qterms.into_iter().collect();
        qterms.sort_by(|a, b| a.0.cmp(&b.0));
        let searcher = self.reader.searcher();
        let n_docs = searcher.num_docs() as f32;
        if n_docs == 0.0 {
            return Ok(Vec::new());
        }
        let mut fields = vec![(self.f_body, 1.0f32)];
        let (k1, b) = (params.k1 as f32, params.b as f32);
        if params.title_weight > 0.0 {
            fields.push((self.f_title, params.title_weight as f32));
        }
        // Per-field statistics and per-term weights. Each term is looked up once per
        // segment; its document frequency is the sum over segments.
        let segs = searcher.segment_readers();
        struct FieldPlan {
            norm: [f32; 256],
            /// `1 / (1 + norm)`: the common tf = 1 case without a division.
            inv1: [f32; 256],
            invs: Vec<std::sync::Arc<tantivy::InvertedIndexReader>>,
            norms: Vec<tantivy::fieldnorm::FieldNormReader>,
            /// (weight, term info per segment)
            terms: Vec<(f32, Vec<Option<tantivy::postings::TermInfo>>)>,
        }
        let total_docs: u64 = segs.iter().map(|s| s.max_doc() as u64).sum();
        let mut plan = Vec::new();
        for (field, weight) in fields {
            let mut invs = Vec::with_capacity(segs.len());
            let mut norms = Vec::with_capacity(segs.len());
            let mut tokens = 0u64;
            for seg in segs {
                let inv = seg.inverted_index(field)?;
                tokens += inv.total_num_tokens();
                invs.push(inv);
                norms.push(seg.get_fieldnorms_reader(field)?);
            }
            let avgdl = (tokens as f32 / total_docs.max(1) as f32).max(1e-6);
            let mut norm = [0f32; 256];
            for (id, slot) in norm.iter_mut().enumerate() {
                let dl = tantivy::fieldnorm::FieldNormReader::id_to_fieldnorm(id as u8) as f32;
                *slot = k1 * (1.0 - b + b * dl / avgdl);
            }
            let inv1 = norm.map(|n| 1.0 / (1.0 + n));
            let mut terms = Vec::new();
            for (t, qtf) in &qterms {
                let term = Term::from_field_text(field, t);
                let mut infos = Vec::with_capacity(segs.len());
                let mut df = 0u64;
                for inv in &invs {
                    let ti = inv.get_term_info(&term)?;
                    df += ti.as_ref().map_or(0, |ti| ti.doc_freq as u64);
                    infos.push(ti);
                }
                if df == 0 {
                    continue;
                }
                let df = df as f32;
                let idf = (1.0 + (n_docs - df + 0.5) / (df + 0.5)).ln();
                terms.push((weight * qtf * idf * (k1 + 1.0), infos));
            }
            plan.push(FieldPlan {
                norm,
                inv1,
                invs,
                norms,
                terms,
            });
        }
        let mut heap: BinaryHeap<Scored> = BinaryHeap::with_capacity(k + 1);
        let mut scores: Vec<f32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        for (seg_ord, seg) in segs.iter().enumerate() {
            scores.clear();
            scores.resize(seg.max_doc() as usize, 0.0);
            touched.clear();
            for fp in &plan {
                let inv = &fp.invs[seg_ord];
                let norms = &fp.norms[seg_ord];
                for (w, infos) in &fp.terms {
                    let Some(ti) = &infos[seg_ord] else { continue };
                    let mut block =
                        inv.read_block_postings_from_terminfo(ti, IndexRecordOption::WithFreqs)?;
                    loop {
                        let docs = block.docs();
                        if docs.is_empty() {
                            break;
                        }
                        for (&d, &tf) in docs.iter().zip(block.freqs()) {
                            let id = norms.fieldnorm_id(d) as usize;
                            let c = if tf == 1 {
                                w * fp.inv1[id]
                            } else {
                                let tf = tf as f32;
                                w * tf / (tf + fp.norm[id])
                            };
                            let s = &mut scores[d as usize];
                            if *s == 0.0 {
                                touched.push(d);
                            }
                            *s += c;
                        }
                        block.advance();
                    }
                }
            }
            let alive = seg.alive_bitset();
            for &d in &touched {
                if alive.is_some_and(|a| !a.is_alive(d)) {
                    continue;
                }
                let s = scores[d as usize];
                if heap.len() < k {
                    heap.push(Scored {
                        score: s,
                        seg: seg_ord as u32,
                        doc: d,
                    });
                } else if let Some(min) = heap.peek() {
                    if s > min.score {
                        heap.pop();
                        heap.push(Scored {
                            score: s,
                            seg: seg_ord as u32,
                            doc: d,
                        });
                    }
                }
            }
        }
        let mut top = heap.into_vec();
        top.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(a.seg.cmp(&b.seg))
                .then(a.doc.cmp(&b.doc))
        });
        let mut columns: HashMap<
            u32,
            (
                tantivy::columnar::Column<u64>,
                tantivy::columnar::Column<u64>,
            ),
        > = HashMap::new();
        let mut out = Vec::with_capacity(top.len());
        for s in top {
            let (dc, oc) = match columns.entry(s.seg) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let ff = searcher.segment_readers()[s.seg as usize].fast_fields();
                    e.insert((ff.u64("doc")?, ff.u64("ord")?))
                }
            };
            let doc = dc.first(s.doc).unwrap_or_default();
            let ordinal = oc.first(s.doc).unwrap_or_default() as u32;
            out.push(KeywordHit {
                doc,
                ordinal,
                score: s.score,
            });
        }
        // Stable order among equal scores: by document key and ordinal.
        out.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then(a.doc.cmp(&b.doc))
                .then(a.ordinal.cmp(&b.ordinal))
        });
        Ok(out)
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

    /// True when the session holds writes.
    pub fn is_dirty(&self) -> bool {
        self.dirty
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

/// Min-heap entry (by score).
#[derive(Debug, Clone, Copy)]
struct Scored {
    score: f32,
    seg: u32,
    doc: u32,
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
        // Reversed: the heap's top is the lowest score.
        o.score
            .total_cmp(&self.score)
            .then(self.seg.cmp(&o.seg))
            .then(self.doc.cmp(&o.doc))
    }
}
