//! Models from the Hugging Face hub, through the same cache `huggingface_hub` keeps.
//!
//! The protocol is the hub's own: `GET {endpoint}/api/models/{repo}/revision/{rev}`
//! lists a revision's files and names its commit; `HEAD {endpoint}/{repo}/resolve/
//! {commit}/{file}` gives each file's ETag (the SHA-256 of an LFS file, sent as
//! `X-Linked-Etag` beside a redirect to the file's storage; the git blob SHA-1 of a small
//! one) and size; a `GET` of the same address (or of the redirect's target) sends the
//! bytes, from an offset when asked with `Range`.
//!
//! Files land in the `huggingface_hub` cache layout (`HF_HUB_CACHE`, else
//! `HF_HOME/hub`, else `~/.cache/huggingface/hub`): `models--{org}--{name}/blobs/{etag}`,
//! `snapshots/{commit}/{file}` linking to the blob, `refs/{revision}` holding the
//! commit. So a model a Python user already downloaded is found without a request, and
//! what neuralcore downloads serves their tools too. A download is written to
//! `blobs/{etag}.incomplete` and resumed from there; it becomes a blob only once its
//! size and checksum are right. `HF_TOKEN` (or the token file `huggingface-cli login`
//! writes) is sent as a bearer token to the hub only, never to a redirect's other host,
//! and never logged. `HF_ENDPOINT` points at a mirror; `HF_HUB_OFFLINE=1` uses the cache
//! alone.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use neuralcore_core::ModelError;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The public hub.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// Hops a redirect chain may take before it counts as a loop.
const MAX_REDIRECTS: usize = 10;

/// Where and how to reach the hub.
#[derive(Clone)]
pub struct HubConfig {
    /// Base address (`HF_ENDPOINT`), without a trailing `/`.
    pub endpoint: String,
    /// Bearer token (`HF_TOKEN`, or the token file).
    pub token: Option<String>,
    /// The `huggingface_hub` cache folder (the one holding `models--*`).
    pub cache: PathBuf,
    /// Use the cache alone (`HF_HUB_OFFLINE`).
    pub offline: bool,
    /// Connect timeout.
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: say only whether there is one.
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("cache", &self.cache)
            .field("offline", &self.offline)
            .finish()
    }
}

impl HubConfig {
    /// From the environment variables `huggingface_hub` reads.
    pub fn from_env() -> Self {
        Self::from_vars(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// From any lookup of those variables (the environment, a test's map).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Self {
        let home = || {
            var("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("."))
        };
        let hf_home = var("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            var("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| home().join(".cache"))
                .join("huggingface")
        });
        let cache = var("HF_HUB_CACHE")
            .or_else(|| var("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token = var("HF_TOKEN")
            .or_else(|| var("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| {
                let path = var("HF_TOKEN_PATH")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| hf_home.join("token"));
                std::fs::read_to_string(path).ok()
            })
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let offline = var("HF_HUB_OFFLINE").is_some_and(|v| {
            matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
        });
        HubConfig {
            endpoint: var("HF_ENDPOINT")
                .unwrap_or_else(|| DEFAULT_ENDPOINT.into())
                .trim_end_matches('/')
                .to_string(),
            token,
            cache,
            offline,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// A revision of a repository, complete in the cache.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Repository id (`org/name`).
    pub repo: String,
    /// The commit the revision resolved to.
    pub commit: String,
    /// `snapshots/{commit}` in the cache.
    pub dir: PathBuf,
    /// The wanted files it holds (relative paths).
    pub files: Vec<String>,
    /// Bytes of file content downloaded by this call (0 when the cache had them).
    pub downloaded: u64,
}

/// A client of the hub (or a mirror of it).
pub struct Hub {
    cfg: HubConfig,
    agent: ureq::Agent,
}

fn fetch_err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Fetch(e.to_string())
}

/// `org/name` (or a bare `name`): letters, digits, `-`, `_`, `.`; no `..`.
pub fn valid_repo_id(repo: &str) -> bool {
    let parts: Vec<&str> = repo.split('/').collect();
    !repo.is_empty()
        && parts.len() <= 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with(['.', '-'])
                && !p.contains("..")
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        })
}

fn valid_revision(rev: &str) -> bool {
    !rev.is_empty()
        && rev.len() <= 255
        && rev
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && !rev.chars().any(|c| c.is_control() || c == '\\')
}

fn is_commit(rev: &str) -> bool {
    rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A file path inside a repository that may be joined to a folder.
fn valid_file(f: &str) -> bool {
    !f.is_empty()
        && !f.starts_with('/')
        && f.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
        && !f.contains('\\')
}

/// Percent-encode everything but unreserved characters (a revision such as
/// `refs/pr/1` is one path segment to the hub).
fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn encode_path(f: &str) -> String {
    f.split('/')
        .map(encode_segment)
        .collect::<Vec<_>>()
        .join("/")
}

/// An ETag without weakness marker and quotes.
fn clean_etag(v: &str) -> String {
    v.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

/// The scheme and authority of an absolute address.
fn origin(url: &str) -> Option<&str> {
    let rest = url.find("://")? + 3;
    let end = url[rest..].find('/').map_or(url.len(), |i| rest + i);
    Some(&url[..end])
}

/// A `Location` made absolute against the address that sent it.
fn resolve_location(base: &str, loc: &str) -> Result<String, ModelError> {
    if loc.contains("://") {
        return Ok(loc.to_string());
    }
    let o = origin(base).ok_or_else(|| fetch_err(format!("bad address {base}")))?;
    if let Some(rest) = loc.strip_prefix("//") {
        let scheme = &o[..o.find("://").unwrap_or(0)];
        return Ok(format!("{scheme}://{rest}"));
    }
    if loc.starts_with('/') {
        return Ok(format!("{o}{loc}"));
    }
    let dir = &base[..base.rfind('/').map_or(base.len(), |i| i + 1)];
    Ok(format!("{dir}{loc}"))
}

/// What `HEAD …/resolve/…` said about one file.
struct FileMeta {
    etag: String,
    size: Option<u64>,
    /// Where the bytes are (the redirect's target, or the resolve address).
    url: String,
}

#[derive(Deserialize)]
struct RevisionInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(Deserialize)]
struct Sibling {
    rfilename: String,
}

/// `config.json` says what the weights are.
#[derive(Deserialize)]
struct ArchConfig {
    #[serde(default)]
    model_type: Option<String>,
    #[serde(default)]
    architectures: Vec<String>,
}

/// The architectures this build runs: BERT encoders and their heads.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &[
    "BertModel",
    "BertForSequenceClassification",
    "BertForQuestionAnswering",
    "BertForMaskedLM",
    "BertForPreTraining",
];

/// A clear error unless `config.json`'s bytes describe a model this build can run.
pub fn check_architecture(what: &str, config: &[u8]) -> Result<(), ModelError> {
    let c: ArchConfig = serde_json::from_slice(config)
        .map_err(|e| ModelError::Invalid(format!("{what}: config.json is not valid JSON: {e}")))?;
    let model_type = c.model_type.unwrap_or_default();
    let bad_arch = c
        .architectures
        .iter()
        .find(|a| !SUPPORTED_ARCHITECTURES.contains(&a.as_str()));
    if model_type != "bert" || bad_arch.is_some() {
        let arch = if c.architectures.is_empty() {
            String::new()
        } else {
            format!(" ({})", c.architectures.join(", "))
        };
        return Err(ModelError::Invalid(format!(
            "{what}: unsupported architecture: model_type {model_type:?}{arch}; this build runs \
             BERT encoders (model_type \"bert\": {})",
            SUPPORTED_ARCHITECTURES.join(", ")
        )));
    }
    Ok(())
}

impl Hub {
    /// A client for `cfg`.
    pub fn new(cfg: HubConfig) -> Self {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // Redirects are followed here, so a token never goes to another host and a
            // loop is named as one.
            .max_redirects(0)
            .max_redirects_will_error(false)
            .timeout_connect(Some(cfg.connect_timeout))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            .user_agent(concat!(
                "neuralcore/",
                env!("CARGO_PKG_VERSION"),
                "; hf_hub-protocol"
            ))
            .build();
        Hub {
            cfg,
            agent: ureq::Agent::new_with_config(config),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &HubConfig {
        &self.cfg
    }

    /// `models--{org}--{name}` in the cache.
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.cfg
            .cache
            .join(format!("models--{}", repo.replace('/', "--")))
    }

    /// The wanted files of `repo` at `revision`, complete in the cache: from the cache
    /// alone when it has them (unless `refresh`), else downloaded. `wanted` picks the
    /// files of the revision to fetch; `required` must all be among them. `log` gets
    /// progress lines.
    pub fn snapshot(
        &self,
        repo: &str,
        revision: &str,
        wanted: &dyn Fn(&str) -> bool,
        required: &[&str],
        refresh: bool,
        log: &mut dyn FnMut(&str),
    ) -> Result<Snapshot, ModelError> {
        if !valid_repo_id(repo) {
            return Err(ModelError::Invalid(format!(
                "bad repository id {repo:?} (expected org/name)"
            )));
        }
        if !valid_revision(revision) {
            return Err(ModelError::Invalid(format!("bad revision {revision:?}")));
        }
        let root = self.repo_dir(repo);
        if !refresh || self.cfg.offline {
            if let Some(s) = self.cached(repo, revision, wanted, required)? {
                log(&format!(
                    "{repo}@{revision}: in the Hugging Face cache ({}), nothing to download",
                    s.dir.display()
                ));
                return Ok(s);
            }
        }
        if self.cfg.offline {
            return Err(ModelError::NotFound(format!(
                "{repo}@{revision} is not complete in the Hugging Face cache {} and HF_HUB_OFFLINE is set",
                self.cfg.cache.display()
            )));
        }
        let info = self.revision_info(repo, revision)?;
        if !is_commit(&info.sha) {
            return Err(fetch_err(format!(
                "{repo}@{revision}: the hub named no commit (sha {:?})",
                info.sha
            )));
        }
        let commit = info.sha;
        let mut files: Vec<String> = info
            .siblings
            .into_iter()
            .map(|s| s.rfilename)
            .filter(|f| valid_file(f) && wanted(f))
            .collect();
        files.sort();
        files.dedup();
        for r in required {
            if !files.iter().any(|f| f == r) {
                return Err(ModelError::Invalid(format!(
                    "{repo}@{revision} has no {r}{}",
                    if *r == "model.safetensors" {
                        " (only safetensors weights are loaded; a pytorch_model.bin pickle is not)"
                    } else {
                        ""
                    }
                )));
            }
        }
        // The small config first: an architecture this build cannot run is refused
        // before the weights are downloaded.
        files.sort_by_key(|f| f != "config.json");
        let mut downloaded = 0;
        for f in &files {
            downloaded += self.file(repo, &commit, f, log)?;
            if f == "config.json" {
                let bytes = std::fs::read(root.join("snapshots").join(&commit).join(f))
                    .map_err(fetch_err)?;
                check_architecture(repo, &bytes)?;
            }
        }
        if !is_commit(revision) {
            let r = root.join("refs").join(revision);
            std::fs::create_dir_all(r.parent().expect("has parent")).map_err(fetch_err)?;
            std::fs::write(&r, &commit).map_err(fetch_err)?;
        }
        files.sort();
        Ok(Snapshot {
            repo: repo.to_string(),
            dir: root.join("snapshots").join(&commit),
            commit,
            files,
            downloaded,
        })
    }

    /// The snapshot from the cache alone, when the revision is known there and holds
    /// every required file.
    fn cached(
        &self,
        repo: &str,
        revision: &str,
        wanted: &dyn Fn(&str) -> bool,
        required: &[&str],
    ) -> Result<Option<Snapshot>, ModelError> {
        let root = self.repo_dir(repo);
        let commit = if is_commit(revision) {
            revision.to_string()
        } else {
            match std::fs::read_to_string(root.join("refs").join(revision)) {
                Ok(c) if is_commit(c.trim()) => c.trim().to_string(),
                _ => return Ok(None),
            }
        };
        let dir = root.join("snapshots").join(&commit);
        if !required.iter().all(|r| dir.join(r).is_file()) {
            return Ok(None);
        }
        let mut files: Vec<String> = crate::cache::walk_files(&dir)?
            .into_iter()
            .filter(|f| wanted(f) && dir.join(f).is_file())
            .collect();
        files.sort();
        Ok(Some(Snapshot {
            repo: repo.to_string(),
            commit,
            dir,
            files,
            downloaded: 0,
        }))
    }

    fn get(
        &self,
        url: &str,
        head: bool,
        range: Option<u64>,
        what: &str,
    ) -> Result<ureq::http::Response<ureq::Body>, ModelError> {
        let same_host = origin(url) == origin(&self.cfg.endpoint);
        let mut req = if head {
            self.agent.head(url)
        } else {
            self.agent.get(url)
        };
        if let (Some(t), true) = (&self.cfg.token, same_host) {
            req = req.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(from) = range {
            req = req.header("Range", format!("bytes={from}-"));
        }
        req.call().map_err(|e| {
            fetch_err(format!(
                "{what}: cannot reach {}: {e}",
                origin(url).unwrap_or(url)
            ))
        })
    }

    /// A clear error for a status the hub answered with.
    fn status_error(&self, what: &str, status: u16) -> ModelError {
        match status {
            401 => ModelError::Fetch(format!(
                "{what}: 401 unauthorized: the repository is private or gated{}",
                if self.cfg.token.is_some() {
                    " and the token (HF_TOKEN) has no access to it"
                } else {
                    "; set HF_TOKEN to a token with read access"
                }
            )),
            403 => ModelError::Fetch(format!(
                "{what}: 403 forbidden: accept the model's conditions on its hub page with the account of HF_TOKEN"
            )),
            404 => ModelError::NotFound(format!(
                "{what}: 404: no such repository, revision or file at {}",
                self.cfg.endpoint
            )),
            s => ModelError::Fetch(format!("{what}: the hub answered HTTP {s}")),
        }
    }

    fn revision_info(&self, repo: &str, revision: &str) -> Result<RevisionInfo, ModelError> {
        let url = format!(
            "{}/api/models/{repo}/revision/{}",
            self.cfg.endpoint,
            encode_segment(revision)
        );
        let what = format!("{repo}@{revision}");
        let (resp, _) = self.follow(&url, false, None, &what)?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Err(self.status_error(&what, status));
        }
        let bytes = resp
            .into_body()
            .with_config()
            .limit(16 << 20)
            .read_to_vec()
            .map_err(|e| fetch_err(format!("{what}: {e}")))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| fetch_err(format!("{what}: the hub's file list is not valid: {e}")))
    }

    /// Follows same-origin redirects (the hub's renamed repositories) and, unless
    /// `stop_at_linked`, any redirect; `stop_at_linked` stops at a redirect that carries
    /// `X-Linked-Etag` (an LFS file: its target is the storage). Returns the last
    /// response and its address.
    fn follow(
        &self,
        url: &str,
        head: bool,
        range: Option<u64>,
        what: &str,
    ) -> Result<(ureq::http::Response<ureq::Body>, String), ModelError> {
        let mut seen: Vec<String> = Vec::new();
        let mut url = url.to_string();
        loop {
            let resp = self.get(&url, head, range, what)?;
            let status = resp.status().as_u16();
            if !(300..400).contains(&status) || status == 304 {
                return Ok((resp, url));
            }
            if head && resp.headers().contains_key("x-linked-etag") {
                return Ok((resp, url));
            }
            let loc = resp
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| fetch_err(format!("{what}: HTTP {status} without a Location")))?;
            let next = resolve_location(&url, loc)?;
            seen.push(url);
            if seen.contains(&next) || seen.len() > MAX_REDIRECTS {
                return Err(fetch_err(format!(
                    "{what}: redirect loop ({} hops, back to {})",
                    seen.len(),
                    origin(&next).unwrap_or("?")
                )));
            }
            url = next;
        }
    }

    fn meta(&self, repo: &str, commit: &str, file: &str) -> Result<FileMeta, ModelError> {
        let url = format!(
            "{}/{repo}/resolve/{commit}/{}",
            self.cfg.endpoint,
            encode_path(file)
        );
        let what = format!("{repo}/{file}");
        let (resp, at) = self.follow(&url, true, None, &what)?;
        let status = resp.status().as_u16();
        let h = resp.headers();
        let header = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        let linked = header("x-linked-etag");
        if !(200..300).contains(&status) && linked.is_none() {
            return Err(self.status_error(&what, status));
        }
        let etag = linked
            .or_else(|| header("etag"))
            .map(|e| clean_etag(&e))
            .filter(|e| !e.is_empty() && valid_file(e) && !e.contains('/'))
            .ok_or_else(|| fetch_err(format!("{what}: the hub sent no usable ETag")))?;
        let size = header("x-linked-size")
            .or_else(|| header("content-length"))
            .and_then(|s| s.trim().parse().ok());
        let url = match header("location") {
            Some(loc) if (300..400).contains(&status) => resolve_location(&at, &loc)?,
            _ => at,
        };
        Ok(FileMeta { etag, size, url })
    }

    /// One file into the cache; returns the bytes downloaded (0 when its blob was there).
    fn file(
        &self,
        repo: &str,
        commit: &str,
        file: &str,
        log: &mut dyn FnMut(&str),
    ) -> Result<u64, ModelError> {
        let root = self.repo_dir(repo);
        let meta = self.meta(repo, commit, file)?;
        let blobs = root.join("blobs");
        std::fs::create_dir_all(&blobs).map_err(fetch_err)?;
        let blob = blobs.join(&meta.etag);
        let have = std::fs::metadata(&blob)
            .ok()
            .filter(|m| m.is_file() && meta.size.is_none_or(|s| s == m.len()));
        let mut downloaded = 0;
        if have.is_none() {
            downloaded = self.download(repo, file, &meta, &blob, log)?;
        }
        let link = root.join("snapshots").join(commit).join(file);
        std::fs::create_dir_all(link.parent().expect("has parent")).map_err(fetch_err)?;
        let _ = std::fs::remove_file(&link);
        // `../../blobs/<etag>` from `snapshots/<commit>/`, one more `..` per folder.
        let depth = file.matches('/').count();
        let target = PathBuf::from("../".repeat(2 + depth))
            .join("blobs")
            .join(&meta.etag);
        #[cfg(unix)]
        let linked = std::os::unix::fs::symlink(&target, &link).is_ok();
        #[cfg(not(unix))]
        let linked = false;
        if !linked {
            std::fs::copy(&blob, &link).map_err(fetch_err)?;
        }
        Ok(downloaded)
    }

    fn download(
        &self,
        repo: &str,
        file: &str,
        meta: &FileMeta,
        blob: &Path,
        log: &mut dyn FnMut(&str),
    ) -> Result<u64, ModelError> {
        let what = format!("{repo}/{file}");
        let part = blob.with_extension("incomplete");
        let mut from = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if meta.size.is_some_and(|s| from > s) {
            let _ = std::fs::remove_file(&part);
            from = 0;
        }
        let size = meta
            .size
            .map_or_else(String::new, |s| format!(" ({:.1} MB)", s as f64 / 1e6));
        if from > 0 {
            log(&format!("{what}: resuming at byte {from}{size}"));
        } else {
            log(&format!("{what}: downloading{size}"));
        }
        let range = (from > 0).then_some(from);
        let (resp, _) = self.follow(&meta.url, false, range, &what)?;
        let status = resp.status().as_u16();
        let append = match status {
            206 if from > 0 => true,
            200 => false,
            416 if from > 0 => {
                // The server has nothing past our end: start over once.
                let _ = std::fs::remove_file(&part);
                return self.download(repo, file, meta, blob, log);
            }
            s => return Err(self.status_error(&what, s)),
        };
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(append)
            .write(true)
            .truncate(!append)
            .open(&part)
            .map_err(|e| fetch_err(format!("{}: {e}", part.display())))?;
        let mut got = if append { from } else { 0 };
        let start = got;
        let mut body = resp.into_body();
        let mut reader = body.as_reader();
        let mut buf = vec![0u8; 1 << 16];
        let read_err = loop {
            match reader.read(&mut buf) {
                Ok(0) => break None,
                Ok(n) => {
                    out.write_all(&buf[..n]).map_err(fetch_err)?;
                    got += n as u64;
                    if meta.size.is_some_and(|s| got > s) {
                        break Some(format!(
                            "more bytes than the {} announced",
                            meta.size.unwrap_or(0)
                        ));
                    }
                }
                Err(e) => break Some(e.to_string()),
            }
        };
        out.sync_all().map_err(fetch_err)?;
        drop(out);
        let fetched = got - start;
        if let Some(size) = meta.size {
            if got != size {
                if got > size {
                    let _ = std::fs::remove_file(&part);
                }
                return Err(fetch_err(format!(
                    "{what}: truncated download: {got} of {size} bytes{}; run the pull again to resume",
                    read_err.map_or_else(String::new, |e| format!(" ({e})"))
                )));
            }
        } else if let Some(e) = read_err {
            return Err(fetch_err(format!(
                "{what}: download failed after {got} bytes: {e}"
            )));
        }
        check_blob(&what, &part, &meta.etag).inspect_err(|_| {
            let _ = std::fs::remove_file(&part);
        })?;
        std::fs::rename(&part, blob).map_err(fetch_err)?;
        Ok(fetched)
    }
}

/// The file's content against its ETag: the SHA-256 of an LFS file, the git blob SHA-1
/// of a small one. An ETag of another form is not a checksum; the size check stands.
fn check_blob(what: &str, path: &Path, etag: &str) -> Result<(), ModelError> {
    let hex_len = etag
        .bytes()
        .all(|b| b.is_ascii_hexdigit())
        .then_some(etag.len());
    let got = match hex_len {
        Some(64) => crate::cache::sha256_file(path)?,
        Some(40) => git_blob_sha1(path)?,
        _ => return Ok(()),
    };
    if got != etag.to_ascii_lowercase() {
        return Err(ModelError::Checksum(format!(
            "{what}: the download's checksum is {got}, the hub's ETag says {etag}"
        )));
    }
    Ok(())
}

/// Git's object id of a file: SHA-1 of `blob <len>\0` and the content.
pub fn git_blob_sha1(path: &Path) -> Result<String, ModelError> {
    let len = std::fs::metadata(path).map_err(fetch_err)?.len();
    crate::cache::digest_file::<sha1::Sha1>(path, format!("blob {len}\0").as_bytes())
}

/// SHA-256 of bytes, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids_and_revisions_are_checked() {
        assert!(valid_repo_id("cross-encoder/ms-marco-MiniLM-L-6-v2"));
        assert!(valid_repo_id("bert-base-uncased"));
        for bad in ["", "a/b/c", "../x", "a/..", "a//b", "/a", "a/.git", "a b/c"] {
            assert!(!valid_repo_id(bad), "{bad:?}");
        }
        assert!(valid_revision("main") && valid_revision("refs/pr/1") && valid_revision("v1.0"));
        for bad in ["", "..", "a/../b", "a\\b", "a\nb"] {
            assert!(!valid_revision(bad), "{bad:?}");
        }
        assert_eq!(encode_segment("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(
            encode_path("1_Pooling/config.json"),
            "1_Pooling/config.json"
        );
    }

    #[test]
    fn locations_resolve_against_the_address() {
        let base = "http://127.0.0.1:9/org/m/resolve/main/a.json";
        assert_eq!(
            resolve_location(base, "/x/y").unwrap(),
            "http://127.0.0.1:9/x/y"
        );
        assert_eq!(
            resolve_location(base, "https://cdn/z").unwrap(),
            "https://cdn/z"
        );
        assert_eq!(
            resolve_location(base, "b.json").unwrap(),
            "http://127.0.0.1:9/org/m/resolve/main/b.json"
        );
        assert_eq!(resolve_location(base, "//cdn/z").unwrap(), "http://cdn/z");
        assert_eq!(clean_etag("W/\"abc\""), "abc");
    }

    #[test]
    fn the_environment_picks_endpoint_cache_and_token_but_debug_hides_the_token() {
        let vars = |k: &str| match k {
            "HF_HOME" => Some("/h".to_string()),
            "HF_ENDPOINT" => Some("http://mirror.local/".to_string()),
            "HF_TOKEN" => Some(" hf_secret ".to_string()),
            "HF_HUB_OFFLINE" => Some("1".to_string()),
            _ => None,
        };
        let c = HubConfig::from_vars(vars);
        assert_eq!(c.endpoint, "http://mirror.local");
        assert_eq!(c.cache, PathBuf::from("/h/hub"));
        assert_eq!(c.token.as_deref(), Some("hf_secret"));
        assert!(c.offline);
        assert!(!format!("{c:?}").contains("hf_secret"));
        let c = HubConfig::from_vars(|k| (k == "HOME").then(|| "/home/u".to_string()));
        assert_eq!(c.cache, PathBuf::from("/home/u/.cache/huggingface/hub"));
        assert_eq!(c.endpoint, DEFAULT_ENDPOINT);
        assert!(c.token.is_none() && !c.offline);
    }

    #[test]
    fn architectures_other_than_bert_are_refused() {
        assert!(check_architecture(
            "m",
            br#"{"model_type":"bert","architectures":["BertForQuestionAnswering"]}"#
        )
        .is_ok());
        let e = check_architecture(
            "m",
            br#"{"model_type":"gpt2","architectures":["GPT2LMHeadModel"]}"#,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("unsupported architecture") && e.to_string().contains("gpt2"),
            "{e}"
        );
        assert!(check_architecture("m", b"not json").is_err());
    }
}
