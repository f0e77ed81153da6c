//! The one mapping of documents, chunks, sources, counters and journals onto raw tables,
//! shared by every backend.

use std::collections::BTreeMap;

use neuralcore_core::{
    Chunk, CollectionInfo, DocKey, DocumentRecord, EmbeddingKey, IndexJournal, SourceRecord,
    StoreBatch, StoreError, StoreResult,
};
use serde::{de::DeserializeOwned, Serialize};

use crate::raw::{RawRead, RawWrite, Table};

fn enc<T: Serialize>(v: &T) -> StoreResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| StoreError::Backend(e.to_string()))
}

fn dec<T: DeserializeOwned>(t: Table, b: &[u8]) -> StoreResult<T> {
    serde_json::from_slice(b).map_err(|e| StoreError::Corrupt(format!("{} entry: {e}", t.name())))
}

fn check_collection(name: &str) -> StoreResult<()> {
    neuralcore_core::validate_stored_collection(name).map_err(StoreError::InvalidInput)
}

pub(crate) fn k_coll(c: &str) -> Vec<u8> {
    c.as_bytes().to_vec()
}

pub(crate) fn k_prefix(c: &str) -> Vec<u8> {
    let mut k = c.as_bytes().to_vec();
    k.push(0);
    k
}

pub(crate) fn k_source(c: &str, s: &str) -> Vec<u8> {
    let mut k = k_prefix(c);
    k.extend_from_slice(s.as_bytes());
    k
}

pub(crate) fn k_doc(c: &str, d: DocKey) -> Vec<u8> {
    let mut k = k_prefix(c);
    k.extend_from_slice(&d.to_be_bytes());
    k
}

pub(crate) fn k_chunk(d: DocKey, o: u32) -> Vec<u8> {
    let mut k = d.to_be_bytes().to_vec();
    k.extend_from_slice(&o.to_be_bytes());
    k
}

/// A stored vector: little-endian `f32`s.
pub(crate) fn decode_vector(b: &[u8]) -> StoreResult<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return Err(StoreError::Corrupt("embeddings entry length".into()));
    }
    Ok(b.chunks_exact(4)
        .map(|x| f32::from_le_bytes(x.try_into().expect("4 bytes")))
        .collect())
}

pub(crate) fn k_log(c: &str, generation: u64) -> Vec<u8> {
    let mut k = k_prefix(c);
    k.extend_from_slice(&generation.to_be_bytes());
    k
}

/// Read operations over any raw snapshot.
pub(crate) struct Reader<'a>(pub &'a dyn RawRead);

impl Reader<'_> {
    pub(crate) fn collections(&self) -> StoreResult<Vec<CollectionInfo>> {
        self.0
            .scan(Table::Collections, b"")?
            .iter()
            .map(|(_, v)| dec(Table::Collections, v))
            .collect()
    }

    pub(crate) fn collection(&self, name: &str) -> StoreResult<Option<CollectionInfo>> {
        self.0
            .get(Table::Collections, &k_coll(name))?
            .map(|v| dec(Table::Collections, &v))
            .transpose()
    }

    pub(crate) fn source(&self, c: &str, s: &str) -> StoreResult<Option<SourceRecord>> {
        self.0
            .get(Table::Sources, &k_source(c, s))?
            .map(|v| dec(Table::Sources, &v))
            .transpose()
    }

    pub(crate) fn sources(&self, c: &str) -> StoreResult<Vec<SourceRecord>> {
        self.0
            .scan(Table::Sources, &k_prefix(c))?
            .iter()
            .map(|(_, v)| dec(Table::Sources, v))
            .collect()
    }

    pub(crate) fn document(&self, c: &str, d: DocKey) -> StoreResult<Option<DocumentRecord>> {
        self.0
            .get(Table::Documents, &k_doc(c, d))?
            .map(|v| dec(Table::Documents, &v))
            .transpose()
    }

    pub(crate) fn document_keys(&self, c: &str) -> StoreResult<Vec<DocKey>> {
        let p = k_prefix(c);
        self.0
            .scan(Table::Documents, &p)?
            .iter()
            .map(|(k, _)| {
                let tail: [u8; 8] = k[p.len()..]
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("document key length".into()))?;
                Ok(u64::from_be_bytes(tail))
            })
            .collect()
    }

    pub(crate) fn chunks(&self, d: DocKey) -> StoreResult<Vec<Chunk>> {
        self.0
            .scan(Table::Chunks, &d.to_be_bytes())?
            .iter()
            .map(|(_, v)| dec(Table::Chunks, v))
            .collect()
    }

    pub(crate) fn chunk(&self, d: DocKey, o: u32) -> StoreResult<Option<Chunk>> {
        self.0
            .get(Table::Chunks, &k_chunk(d, o))?
            .map(|v| dec(Table::Chunks, &v))
            .transpose()
    }

    pub(crate) fn embeddings(&self, keys: &[EmbeddingKey]) -> StoreResult<Vec<Option<Vec<f32>>>> {
        keys.iter()
            .map(|k| {
                self.0
                    .get(Table::Embeddings, k)?
                    .map(|b| decode_vector(&b))
                    .transpose()
            })
            .collect()
    }

    pub(crate) fn embedding_models(&self) -> StoreResult<Vec<String>> {
        self.0
            .scan(Table::EmbeddingModels, b"")?
            .into_iter()
            .map(|(k, _)| {
                String::from_utf8(k)
                    .map_err(|_| StoreError::Corrupt("embedding model id is not UTF-8".into()))
            })
            .collect()
    }

    pub(crate) fn journal(&self, c: &str) -> StoreResult<IndexJournal> {
        Ok(self
            .0
            .get(Table::Journal, &k_coll(c))?
            .map(|v| dec(Table::Journal, &v))
            .transpose()?
            .unwrap_or_default())
    }
}

impl Reader<'_> {
    pub(crate) fn journals(
        &self,
        c: &str,
        after: u64,
        upto: u64,
    ) -> StoreResult<Option<Vec<IndexJournal>>> {
        if upto <= after {
            return Ok(Some(Vec::new()));
        }
        let mut out: Vec<IndexJournal> = Vec::new();
        let mut missing = false;
        let mut next = after + 1;
        let (start, end) = (k_log(c, after + 1), k_log(c, upto.saturating_add(1)));
        self.0
            .visit_range(Table::JournalLog, &start, &end, &mut |k, v| {
                let tail: [u8; 8] = k[k.len().saturating_sub(8)..]
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("journal log key length".into()))?;
                if missing || u64::from_be_bytes(tail) != next {
                    missing = true;
                    return Ok(());
                }
                out.push(dec(Table::JournalLog, v)?);
                next += 1;
                Ok(())
            })?;
        Ok((!missing && next == upto + 1).then_some(out))
    }
}

/// The batch logic over any raw write transaction.
pub(crate) struct Batch<W: RawWrite> {
    raw: W,
    /// Collection infos touched by this batch (written at commit).
    infos: BTreeMap<String, CollectionInfo>,
    /// Index changes recorded per collection.
    journal: BTreeMap<String, (Vec<DocKey>, Vec<DocKey>)>,
    /// Embedding models known to be recorded (this batch need not look again).
    models: std::collections::BTreeSet<String>,
}

impl<W: RawWrite> Batch<W> {
    // (constructor)
    pub(crate) fn new(raw: W) -> Self {
        Batch {
            raw,
            infos: BTreeMap::new(),
            journal: BTreeMap::new(),
            models: Default::default(),
        }
    }
}

impl<W: RawWrite> Batch<W> {
    fn reader(&self) -> Reader<'_> {
        Reader(&self.raw)
    }

    fn info(&mut self, c: &str) -> StoreResult<&mut CollectionInfo> {
        if !self.infos.contains_key(c) {
            let info = self.reader().collection(c)?.ok_or_else(|| {
                StoreError::InvalidInput(format!("collection {c:?} does not exist"))
            })?;
            self.infos.insert(c.to_string(), info);
        }
        Ok(self.infos.get_mut(c).expect("inserted above"))
    }
}

impl<W: RawWrite> StoreBatch for Batch<W> {
    fn ensure_collection(&mut self, name: &str, created_at: &str) -> StoreResult<()> {
        check_collection(name)?;
        if self.infos.contains_key(name) || self.reader().collection(name)?.is_some() {
            return Ok(());
        }
        // A collection dropped under this name left its last journal: carry on from
        // its generation.
        let info = CollectionInfo {
            name: name.to_string(),
            created_at: created_at.to_string(),
            generation: self.reader().journal(name)?.generation,
            ..Default::default()
        };
        self.raw
            .put(Table::Collections, &k_coll(name), &enc(&info)?)?;
        self.infos.insert(name.to_string(), info);
        Ok(())
    }

    fn delete_collection(&mut self, name: &str) -> StoreResult<()> {
        check_collection(name)?;
        let generation = match self.infos.get(name) {
            Some(i) => Some(i.generation),
            None => self.reader().collection(name)?.map(|i| i.generation),
        };
        let p = k_prefix(name);
        for (k, _) in self.raw.scan(Table::Sources, &p)? {
            self.raw.del(Table::Sources, &k)?;
        }
        for d in self.reader().document_keys(name)? {
            for (k, _) in self.raw.scan(Table::Chunks, &d.to_be_bytes())? {
                self.raw.del(Table::Chunks, &k)?;
            }
            self.raw.del(Table::Documents, &k_doc(name, d))?;
        }
        self.raw.del(Table::Collections, &k_coll(name))?;
        for (k, _) in self.raw.scan(Table::JournalLog, &p)? {
            self.raw.del(Table::JournalLog, &k)?;
        }
        self.infos.remove(name);
        self.journal.remove(name);
        // What is left of the collection: a journal that says it went, at the next
        // generation (the last journal and the log's one entry).
        if let Some(g) = generation {
            let reset = IndexJournal {
                generation: g + 1,
                reset: true,
                ..Default::default()
            };
            let bytes = enc(&reset)?;
            self.raw.put(Table::Journal, &k_coll(name), &bytes)?;
            self.raw
                .put(Table::JournalLog, &k_log(name, g + 1), &bytes)?;
        }
        Ok(())
    }

    fn source(&self, c: &str, s: &str) -> StoreResult<Option<SourceRecord>> {
        self.reader().source(c, s)
    }

    fn put_source(&mut self, source: &SourceRecord) -> StoreResult<()> {
        let key = k_source(&source.collection, &source.source_id);
        self.info(&source.collection)?;
        let existed = self.raw.put(Table::Sources, &key, &enc(source)?)?;
        if !existed {
            self.info(&source.collection)?.sources += 1;
        }
        Ok(())
    }

    fn delete_source(&mut self, c: &str, s: &str) -> StoreResult<()> {
        if self.raw.del(Table::Sources, &k_source(c, s))? {
            self.info(c)?.sources -= 1;
        }
        Ok(())
    }

    fn document(&self, c: &str, d: DocKey) -> StoreResult<Option<DocumentRecord>> {
        self.reader().document(c, d)
    }

    fn put_document(&mut self, doc: &DocumentRecord) -> StoreResult<()> {
        self.info(&doc.collection)?;
        if !self.raw.put(
            Table::Documents,
            &k_doc(&doc.collection, doc.key),
            &enc(doc)?,
        )? {
            self.info(&doc.collection)?.documents += 1;
        }
        Ok(())
    }

    fn delete_document(&mut self, c: &str, d: DocKey) -> StoreResult<()> {
        if !self.raw.del(Table::Documents, &k_doc(c, d))? {
            return Ok(());
        }
        let mut n = 0;
        for (k, _) in self.raw.scan(Table::Chunks, &d.to_be_bytes())? {
            self.raw.del(Table::Chunks, &k)?;
            n += 1;
        }
        let info = self.info(c)?;
        info.documents -= 1;
        info.chunks -= n;
        Ok(())
    }

    fn put_chunk(&mut self, c: &str, chunk: &Chunk) -> StoreResult<()> {
        self.info(c)?;
        if !self.raw.put(
            Table::Chunks,
            &k_chunk(chunk.doc, chunk.ordinal),
            &enc(chunk)?,
        )? {
            self.info(c)?.chunks += 1;
        }
        Ok(())
    }

    fn record_index_changes(
        &mut self,
        c: &str,
        removed: &[DocKey],
        added: &[DocKey],
    ) -> StoreResult<()> {
        self.info(c)?;
        let e = self.journal.entry(c.to_string()).or_default();
        e.0.extend_from_slice(removed);
        e.1.extend_from_slice(added);
        Ok(())
    }

    fn compact_journal(&mut self, c: &str, keep: u64) -> StoreResult<u64> {
        let Some(info) = self.reader().collection(c)? else {
            return Ok(0);
        };
        // The last generation: this batch's own, when it records changes (its entry is
        // written at commit).
        let last = info.generation + u64::from(self.journal.contains_key(c));
        let Some(mut g) = last.checked_sub(keep.max(1)) else {
            return Ok(0);
        };
        // Compaction runs after every batch, so what is older than the cut is gone
        // already: the first missing entry ends the walk.
        let mut n = 0;
        while g > 0 && self.raw.del(Table::JournalLog, &k_log(c, g))? {
            n += 1;
            g -= 1;
        }
        Ok(n)
    }

    fn put_embedding(
        &mut self,
        model_id: &str,
        key: &EmbeddingKey,
        vector: &[f32],
    ) -> StoreResult<()> {
        if vector.is_empty() || vector.iter().any(|x| !x.is_finite()) {
            return Err(StoreError::InvalidInput(
                "an embedding must be a non-empty vector of finite numbers".into(),
            ));
        }
        if !self.models.contains(model_id) {
            let m = model_id.as_bytes();
            if self.raw.get(Table::EmbeddingModels, m)?.is_none() {
                self.raw.put(Table::EmbeddingModels, m, b"")?;
            }
            self.models.insert(model_id.to_string());
        }
        let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.raw.put(Table::Embeddings, key, &bytes)?;
        Ok(())
    }

    fn retain_embeddings(
        &mut self,
        key_of: &dyn Fn(&str, &str, &Chunk) -> EmbeddingKey,
    ) -> StoreResult<u64> {
        let models = self.reader().embedding_models()?;
        if models.is_empty() {
            // A store written before models were recorded: which vectors a chunk
            // holds is unknown until the next vector records its model, so keep all.
            return Ok(0);
        }
        let mut docs: Vec<(DocKey, String)> = Vec::new();
        self.raw.visit(Table::Documents, b"", &mut |_, v| {
            let doc: DocumentRecord = dec(Table::Documents, v)?;
            docs.push((doc.key, doc.title));
            Ok(())
        })?;
        let mut keep = std::collections::HashSet::new();
        for (d, title) in &docs {
            self.raw
                .visit(Table::Chunks, &d.to_be_bytes(), &mut |_, v| {
                    let c: Chunk = dec(Table::Chunks, v)?;
                    for m in &models {
                        keep.insert(key_of(m, title, &c));
                    }
                    Ok(())
                })?;
        }
        self.raw
            .retain(Table::Embeddings, &mut |k| keep.contains(k))
    }

    fn commit(self: Box<Self>) -> StoreResult<()> {
        let mut this = *self;
        let journal = std::mem::take(&mut this.journal);
        for (c, (removed, added)) in journal {
            let info = this.info(&c)?;
            info.generation += 1;
            let j = IndexJournal {
                generation: info.generation,
                removed,
                added,
                reset: false,
            };
            let bytes = enc(&j)?;
            this.raw.put(Table::Journal, &k_coll(&c), &bytes)?;
            this.raw
                .put(Table::JournalLog, &k_log(&c, j.generation), &bytes)?;
        }
        let infos = std::mem::take(&mut this.infos);
        for (c, info) in infos {
            if this.raw.get(Table::Collections, &k_coll(&c))?.is_some() {
                this.raw
                    .put(Table::Collections, &k_coll(&c), &enc(&info)?)?;
            }
        }
        Box::new(this.raw).commit()
    }
}
