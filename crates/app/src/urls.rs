//! URL ingest: a web page fetched (guarded against the server's own network), cleaned,
//! and queued as an ingest job like an uploaded text, with its URL in the document's
//! metadata.

use std::collections::BTreeMap;

use neuralcore_web::PageFetcher;
use serde::{Deserialize, Serialize};

use crate::jobs::MAX_TEXT_NAME_CHARS;
use crate::{App, AppError, Job, Tenant, TextDocument};

/// Longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// A web page to ingest (what `POST /v1/collections/{name}/urls` and the MCP tool
/// `ingest_url` take).
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UrlDocument {
    /// The page: an `http://` or `https://` URL without credentials, on a public
    /// address (unless the server's `[web]` settings allow more).
    #[schema(
        min_length = 1,
        max_length = 2048,
        pattern = "^[Hh][Tt][Tt][Pp][Ss]?://"
    )]
    pub url: String,
    /// The source's name (`<name>.json` is stored; default `url-<12 hex of the URL's
    /// SHA-256>`, so ingesting the same URL again replaces the earlier version).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 48)]
    pub name: Option<String>,
    /// Metadata kept with the document beside `url` and `fetched_at_ms`.
    #[serde(default)]
    pub metadata: BTreeMap<String, serde_json::Value>,
}

impl App {
    /// Whether URL ingest is on (`[web] ingest_urls`).
    pub fn ingest_urls_enabled(&self) -> bool {
        self.pages.is_some()
    }

    /// Fetch one web page and queue it for ingest into one of the tenant's collections
    /// (created when missing). The page is fetched now, within `[web] timeout_ms` and
    /// `max_page_bytes`, so a refused, unreachable or unreadable URL is this call's
    /// error; the job then ingests the cleaned text with the page's title, and `url` and
    /// `fetched_at_ms` in its metadata.
    pub fn ingest_url(
        &self,
        tenant: &Tenant,
        collection: &str,
        doc: UrlDocument,
    ) -> Result<Job, AppError> {
        let Some(pages) = &self.pages else {
            return Err(AppError::Forbidden(
                "URL ingest is off on this server: set [web] ingest_urls = true to enable it"
                    .into(),
            ));
        };
        let url = doc.url.trim();
        if url.is_empty() || url.len() > MAX_URL_BYTES {
            return Err(AppError::InvalidInput(format!(
                "the URL must be 1 to {MAX_URL_BYTES} bytes"
            )));
        }
        // Checked before anything is fetched.
        let jobs = self.jobs()?;
        tenant.stored(collection)?;
        let name = match doc.name {
            Some(n) => n,
            None => url_name(url),
        };
        if name.chars().count() > MAX_TEXT_NAME_CHARS {
            return Err(AppError::InvalidInput(format!(
                "the name is longer than {MAX_TEXT_NAME_CHARS} characters"
            )));
        }
        let page = fetch(pages, url)?;
        let mut metadata = doc.metadata;
        metadata.insert("url".into(), url.into());
        if page.url != url {
            metadata.insert("fetched_url".into(), page.url.into());
        }
        metadata.insert("fetched_at_ms".into(), neuralcore_memory::now_ms().into());
        let upload = TextDocument {
            name: Some(name),
            title: (!page.title.trim().is_empty()).then_some(page.title),
            text: page.text,
            metadata,
        }
        .into_upload(1)?;
        jobs.submit(tenant, collection, vec![upload])
    }
}

/// The fetcher URL ingest uses, when `[web] ingest_urls` is on.
pub(crate) fn page_fetcher(
    cfg: &neuralcore_web::WebConfig,
) -> Result<Option<PageFetcher>, AppError> {
    if !cfg.ingest_urls {
        return Ok(None);
    }
    PageFetcher::new(cfg)
        .map(Some)
        .map_err(|e| AppError::InvalidInput(e.to_string()))
}

fn fetch(pages: &PageFetcher, url: &str) -> Result<neuralcore_web::Page, AppError> {
    pages.fetch(url).map_err(|e| {
        let msg = format!("cannot ingest the page: {e}");
        if e.is_transient() {
            AppError::Upstream(msg)
        } else {
            AppError::InvalidInput(msg)
        }
    })
}

/// `url-` and 12 hex characters of the URL's SHA-256.
fn url_name(url: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(url.as_bytes());
    let hex: String = d[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("url-{hex}")
}
