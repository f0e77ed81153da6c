//! Documents, chunks, sources and their provenance.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Stable numeric key of a document: derived from its collection and the SHA-256 of its
/// normalized content, so identical content in one collection is stored once.
pub type DocKey = u64;

/// The name of the collection used when none is given.
pub const DEFAULT_COLLECTION: &str = "default";

/// Derive the key of a document from its collection and content hash.
pub fn doc_key(collection: &str, content_sha256: &str) -> DocKey {
    let mut h = Sha256::new();
    h.update(collection.as_bytes());
    h.update([0u8]);
    h.update(content_sha256.as_bytes());
    let d = h.finalize();
    u64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// The printable id of a document key (16 hex digits).
pub fn doc_id(key: DocKey) -> String {
    format!("{key:016x}")
}

/// Parse a printable document id back into its key.
pub fn parse_doc_id(id: &str) -> Option<DocKey> {
    if id.len() != 16 {
        return None;
    }
    u64::from_str_radix(id, 16).ok()
}

/// Check a collection name: 1–64 characters of `[A-Za-z0-9_.-]`, not starting with a dot.
pub fn validate_collection(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err(format!(
            "collection name {name:?} must be 1 to 64 characters long"
        ));
    }
    if name.starts_with('.') {
        return Err(format!("collection name {name:?} must not start with '.'"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
    {
        return Err(format!(
            "collection name {name:?} may only hold letters, digits, '_', '-' and '.'"
        ));
    }
    Ok(())
}

/// Separates a tenant from its collection's name in the store (`acme~docs`); never
/// part of a collection name a caller chooses.
pub const TENANT_SEP: char = '~';

/// Check a tenant id: 1–32 characters of `[a-z0-9_]`, starting with a letter or digit.
/// No `-`: a tenant's run and session ids are `<tenant>-<id>`, split at the first `-`.
pub fn validate_tenant(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 32 {
        return Err(format!("tenant id {id:?} must be 1 to 32 characters long"));
    }
    let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if !id.chars().all(ok) || !id.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!(
            "tenant id {id:?} may only hold lower-case letters, digits and '_', and must start with a letter or digit"
        ));
    }
    Ok(())
}

/// Check a collection name as the store keeps it: a name ([`validate_collection`]),
/// or `tenant~name` for a tenant other than the default one.
pub fn validate_stored_collection(name: &str) -> Result<(), String> {
    match name.split_once(TENANT_SEP) {
        Some((tenant, rest)) => {
            validate_tenant(tenant)?;
            validate_collection(rest)
        }
        None => validate_collection(name),
    }
}

/// Where a source comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SourceType {
    /// A file on the local file system.
    File,
    /// A resource addressed by URI.
    Uri,
}

/// Where one document came from. A document with identical content found in two places
/// keeps one provenance per place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Provenance {
    /// Id of the source (the canonical path of a file, or its URI).
    pub source_id: String,
    /// Kind of source.
    pub source_type: SourceType,
    /// Path or URI as the user named it, made absolute.
    pub uri: String,
    /// Title the loader found for this occurrence.
    pub title: String,
    /// Position inside the source for sources that hold several documents
    /// (`line 12`, `row 5`, `item 3`, `part 2`), if any.
    pub locator: Option<String>,
    /// Id the source itself gives the document (BEIR `_id`, a CSV id column), if any.
    pub external_id: Option<String>,
    /// Creation (or, where the file system has none, modification) time of the file, RFC 3339.
    pub created_at: Option<String>,
    /// When this occurrence was ingested, RFC 3339.
    pub ingested_at: String,
    /// SHA-256 of the normalized content, hex.
    pub content_sha256: String,
    /// Size in bytes of the normalized content (UTF-8).
    pub byte_size: u64,
    /// Name of the loader that read it.
    pub loader: String,
}

/// A stored document: its content hash, title, metadata, chunk count and provenances.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DocumentRecord {
    /// Key (see [`doc_key`]).
    pub key: DocKey,
    /// Collection it lives in.
    pub collection: String,
    /// Title (from the first provenance).
    pub title: String,
    /// SHA-256 of the normalized content, hex.
    pub content_sha256: String,
    /// Length of the normalized content in characters.
    pub char_len: u64,
    /// Size in bytes of the normalized content.
    pub byte_size: u64,
    /// Number of chunks.
    pub n_chunks: u32,
    /// Metadata from the loader (front matter, JSON fields, CSV columns, ...).
    pub metadata: BTreeMap<String, serde_json::Value>,
    /// Every place this content was found.
    pub provenance: Vec<Provenance>,
    /// The chunker and its settings that cut this document (a change re-chunks it).
    #[serde(default)]
    pub chunking: String,
}

impl DocumentRecord {
    /// Printable id.
    pub fn id(&self) -> String {
        doc_id(self.key)
    }
}

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Chunk {
    /// Document it belongs to.
    pub doc: DocKey,
    /// Position in the document, from 0.
    pub ordinal: u32,
    /// Character span `[start, end)` in the document's normalized text.
    pub span: (u64, u64),
    /// Section path (headings) the chunk sits under; empty when the format has none.
    pub section: Vec<String>,
    /// Token count (see `text::count_tokens`).
    pub tokens: u32,
    /// The chunk's text: exactly the span of the normalized document text.
    pub text: String,
}

impl Chunk {
    /// Printable id: `<doc id>#<ordinal>`.
    pub fn id(&self) -> String {
        format!("{}#{}", doc_id(self.doc), self.ordinal)
    }
}

/// A source (file or URI) and the documents it produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SourceRecord {
    /// Collection.
    pub collection: String,
    /// Id of the source (canonical path or URI).
    pub source_id: String,
    /// Kind of source.
    pub source_type: SourceType,
    /// Path or URI.
    pub uri: String,
    /// SHA-256 of the raw bytes, hex: an unchanged source is skipped on re-ingest.
    pub raw_sha256: String,
    /// Size in bytes of the raw source.
    pub byte_size: u64,
    /// Documents it produced, in source order (a key may repeat for duplicate rows).
    pub docs: Vec<DocKey>,
    /// Loader that read it.
    pub loader: String,
    /// Configuration fingerprint (chunker and loader settings) it was ingested with:
    /// a change re-ingests it.
    pub settings: String,
    /// When it was ingested, RFC 3339.
    pub ingested_at: String,
    /// Set while an ingest of this source is unfinished: one too big for one batch
    /// commits in several, and a crash or a load error between them leaves the
    /// documents committed so far (in `docs`) stored and searchable, and this set. An
    /// ingest of the same bytes resumes after them; other bytes replace them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<PartialSource>,
}

/// What an unfinished ingest of a source left (see [`SourceRecord::partial`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
pub struct PartialSource {
    /// The documents of the version being replaced: they keep this source's
    /// provenance until the new version is complete.
    pub previous_docs: Vec<DocKey>,
    /// Why it stopped, when a load error stopped it (none after a crash).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Counts and settings of a collection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default, utoipa::ToSchema)]
pub struct CollectionInfo {
    /// Name.
    pub name: String,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// Bumped by every committed batch that changed the collection's indexed content.
    pub generation: u64,
    /// Number of sources.
    pub sources: u64,
    /// Number of documents.
    pub documents: u64,
    /// Number of chunks.
    pub chunks: u64,
}
