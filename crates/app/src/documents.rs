//! Sources, documents and chunks of a tenant's collection, as front ends show them:
//! uploaded sources are named `upload:<name>`, never by their place on the server's disk.

use std::path::Path;

use neuralcore_core::{parse_doc_id, Chunk, DocumentRecord, SourceRecord};
use serde::Serialize;

use crate::jobs::{Jobs, PublicNames, UPLOAD_SCHEME};
use crate::{require_collection, App, AppError, Tenant};

/// The version of the source, document and chunk shapes.
pub const DOCUMENTS_SCHEMA: &str = "neuralcore.documents/v1";

/// A source of a collection and the documents it produced.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SourceInfo {
    /// `upload:<name>` for an uploaded file, else the path or URI it was ingested from.
    pub id: String,
    /// The loader that read it.
    pub loader: String,
    /// Size of the raw source, bytes.
    pub byte_size: u64,
    /// SHA-256 of the raw bytes, hex.
    pub raw_sha256: String,
    /// The documents it produced (ids for `GET …/documents/{id}`).
    pub documents: Vec<String>,
    /// When it was ingested, RFC 3339.
    pub ingested_at: String,
    /// True while an ingest of it is unfinished (a crash, or a load error after some
    /// of its batches committed): `documents` lists what is stored, searchable; the
    /// same bytes ingested again resume after them.
    pub partial: bool,
    /// Why an unfinished ingest stopped, when a load error stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A document with its provenance and chunk count.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DocumentInfo {
    /// `neuralcore.documents/v1`.
    pub schema: &'static str,
    /// The document's id.
    pub id: String,
    /// The stored record (its provenance in public names).
    #[serde(flatten)]
    pub record: DocumentRecord,
}

/// A chunk with where it sits in its document.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ChunkInfo {
    /// `neuralcore.documents/v1`.
    pub schema: &'static str,
    /// `<document id>#<ordinal>`.
    pub id: String,
    /// The document's id.
    pub document: String,
    /// Title of the document.
    pub title: String,
    /// The chunk.
    #[serde(flatten)]
    pub chunk: Chunk,
    /// Where the document came from (public names).
    pub provenance: Vec<neuralcore_core::Provenance>,
}

fn public_record(
    data_dir: &Path,
    stored: &str,
    name: &str,
    mut rec: DocumentRecord,
) -> DocumentRecord {
    rec.collection = name.to_string();
    let names = PublicNames::new(data_dir, stored);
    for p in &mut rec.provenance {
        p.source_id = names.of(&p.source_id);
        p.uri = names.of(&p.uri);
    }
    rec
}

impl App {
    /// The sources of one of the tenant's collections.
    pub fn sources(&self, tenant: &Tenant, collection: &str) -> Result<Vec<SourceInfo>, AppError> {
        let stored = require_collection(self.engine(), tenant, collection)?;
        let names = PublicNames::new(self.data_dir(), &stored);
        Ok(self
            .engine()
            .sources(&stored)
            .map_err(|e| crate::hide_gone(e, collection))?
            .into_iter()
            .map(|s: SourceRecord| SourceInfo {
                id: names.of(&s.source_id),
                loader: s.loader,
                byte_size: s.byte_size,
                raw_sha256: s.raw_sha256,
                documents: s.docs.iter().map(|k| neuralcore_core::doc_id(*k)).collect(),
                ingested_at: s.ingested_at,
                partial: s.partial.is_some(),
                error: s.partial.and_then(|p| p.error),
            })
            .collect())
    }

    /// Remove one source (by the id `sources` shows) of one of the tenant's collections
    /// and the documents no other source holds; an uploaded file is deleted too.
    pub fn remove_source(
        &self,
        tenant: &Tenant,
        collection: &str,
        id: &str,
    ) -> Result<neuralcore_engine::RemoveSummary, AppError> {
        let _writing = self.writing();
        let stored = require_collection(self.engine(), tenant, collection)?;
        let dir = self.data_dir();
        let names = PublicNames::new(dir, &stored);
        // Exact ids only: the engine's folder matching is for the CLI's paths.
        let source = self
            .engine()
            .sources(&stored)
            .map_err(|e| crate::hide_gone(e, collection))?
            .into_iter()
            .find(|s| names.of(&s.source_id) == id)
            .ok_or_else(|| {
                AppError::NotFound(format!("no source {id:?} in collection {collection:?}"))
            })?;
        let mut summary = self
            .engine()
            .remove(&stored, std::slice::from_ref(&source.source_id))
            .map_err(|e| crate::hide_gone(e, collection))?;
        if let Some(name) = id.strip_prefix(UPLOAD_SCHEME) {
            let _ = std::fs::remove_file(Jobs::sources_dir(dir, &stored).join(name));
        }
        summary.sources = vec![id.to_string()];
        Ok(summary)
    }

    fn document_record(
        &self,
        tenant: &Tenant,
        collection: &str,
        id: &str,
    ) -> Result<(String, DocumentRecord), AppError> {
        let stored = require_collection(self.engine(), tenant, collection)?;
        let not_found =
            || AppError::NotFound(format!("no document {id:?} in collection {collection:?}"));
        let key = parse_doc_id(id).ok_or_else(not_found)?;
        let rec = self
            .engine()
            .store()
            .document(&stored, key)
            .map_err(neuralcore_engine::EngineError::from)?
            .ok_or_else(not_found)?;
        Ok((stored, rec))
    }

    /// One document of one of the tenant's collections, with its provenance.
    pub fn document(
        &self,
        tenant: &Tenant,
        collection: &str,
        id: &str,
    ) -> Result<DocumentInfo, AppError> {
        let (stored, rec) = self.document_record(tenant, collection, id)?;
        Ok(DocumentInfo {
            schema: DOCUMENTS_SCHEMA,
            id: rec.id(),
            record: public_record(self.data_dir(), &stored, collection, rec),
        })
    }

    /// One chunk of a document of one of the tenant's collections.
    pub fn chunk(
        &self,
        tenant: &Tenant,
        collection: &str,
        id: &str,
        ordinal: u32,
    ) -> Result<ChunkInfo, AppError> {
        // The document must be the tenant's before its chunks are read (chunks are
        // keyed by document alone).
        let (stored, rec) = self.document_record(tenant, collection, id)?;
        let chunk = self
            .engine()
            .store()
            .chunk(rec.key, ordinal)
            .map_err(neuralcore_engine::EngineError::from)?
            .ok_or_else(|| {
                AppError::NotFound(format!(
                    "document {id:?} has no chunk {ordinal} (it has {})",
                    rec.n_chunks
                ))
            })?;
        let rec = public_record(self.data_dir(), &stored, collection, rec);
        Ok(ChunkInfo {
            schema: DOCUMENTS_SCHEMA,
            id: chunk.id(),
            document: rec.id(),
            title: rec.title.clone(),
            chunk,
            provenance: rec.provenance,
        })
    }
}
