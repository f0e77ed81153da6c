//! Backups of a data dir, taken while it is in use, and their restore.
//!
//! A backup is a folder holding a consistent copy of each store of the data dir, each
//! made from one read snapshot of it (writers go on meanwhile). In order: the uploads of
//! queued jobs and the jobs (so a job listed as finished has its documents in the store
//! copy, and one listed as waiting has its files in the copy); then, under the lock every
//! change of documents holds, the documents, the vector indexes' snapshots (of the store
//! copy's generations) and the placed sources; then memories, the Mind, keys, the config
//! and an evaluator trained here; and `backup.json`, the manifest, last. It is built in a
//! staging folder beside the destination and renamed into place (or, when the
//! destination is an empty folder already, a mount point say, built in it), so a folder
//! with a manifest is always a whole backup. Its folders are readable by their owner
//! only: it holds every tenant's data.
//!
//! Left out, as they are derived or replaceable: the keyword indexes (rebuilt from the
//! store when the restored data dir is first opened: `restore` does it), the operation
//! cache, the pulled model files (`neuralcore models pull`) and a running server's
//! record. Stores kept by a database server (memory on PostgreSQL, a Mind on Redis) are
//! named in `skipped`: back them up with their own tools.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{App, AppError, KeyStore};

/// The manifest's schema.
pub const BACKUP_SCHEMA: &str = "neuralcore.backup/v1";

/// The manifest's file name in a backup.
pub const MANIFEST: &str = "backup.json";

/// The folder of the data dir where a server writes the backups asked of it over HTTP
/// (`<data dir>/backups/<name>`): never anywhere else on its machine. A backup leaves
/// it out.
pub const BACKUPS_DIR: &str = "backups";

/// Whether `name` can name a backup in [`BACKUPS_DIR`]: 1-64 of `A-Za-z0-9_.-`, not
/// starting with a dot.
pub fn backup_name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// Check that `dest` can take a backup of `data_dir`: free (missing or empty) and
/// apart from it. What `neuralcore backup` checks before it asks a server.
pub fn check_destination(dest: &Path, data_dir: &Path) -> Result<(), AppError> {
    check_free(dest, "the backup destination")?;
    check_apart(dest, data_dir, "the backup destination and the data dir")
}

/// Move a finished backup from `from` to `to` (which must be free): renamed when both
/// are on one filesystem, else copied (each file synced) and the original deleted.
pub fn move_backup(from: &Path, to: &Path) -> Result<(), AppError> {
    check_free(to, "the backup destination")?;
    if let Some(parent) = to.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| io_at(parent, e))?;
    }
    if !to.exists() && std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    // Copied with the manifest last: a folder with one is whole.
    write_then_place(to, "backup", |tmp| {
        copy_tree_except(from, tmp, &[MANIFEST])?;
        let manifest = std::fs::read(from.join(MANIFEST)).map_err(|e| io_at(from, e))?;
        write_synced(&tmp.join(MANIFEST), &manifest)
    })?;
    // The copy is whole: the original goes (if that fails, DEST is still right).
    if let Err(e) = std::fs::remove_dir_all(from) {
        tracing::warn!("cannot delete {} after moving it: {e}", from.display());
    }
    Ok(())
}

/// What a backup holds (`backup.json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct BackupManifest {
    /// [`BACKUP_SCHEMA`].
    pub schema: String,
    /// The data dir format of the copy.
    pub format: u32,
    /// The neuralcore version that made it.
    pub written_by: String,
    /// When it began, RFC 3339.
    pub created_at: String,
    /// Each part copied.
    pub parts: Vec<BackupPart>,
    /// Parts not in the backup, and why.
    pub skipped: Vec<String>,
    /// Every collection (stored names) with its counts, as the store copy holds them.
    pub collections: Vec<BackupCollection>,
}

/// One part of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct BackupPart {
    /// The file or folder, relative to the data dir.
    pub path: String,
    /// Records copied (a store), or files (a folder).
    pub items: u64,
}

/// A collection's counts in a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct BackupCollection {
    /// Stored name (`<tenant>~<name>` for a tenant other than the default).
    pub name: String,
    /// Its generation (the vector snapshots of the same generation are current).
    pub generation: u64,
    /// Documents.
    pub documents: u64,
    /// Chunks.
    pub chunks: u64,
}

fn io_at(path: &Path, e: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("{}: {e}", path.display()))
}

/// A destination that does not exist, or an empty folder (then replaced).
fn check_free(dest: &Path, what: &str) -> Result<(), AppError> {
    match std::fs::read_dir(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(AppError::InvalidInput(format!(
            "{what} {}: {e}",
            dest.display()
        ))),
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(AppError::InvalidInput(format!(
                "{what} {} is not empty: nothing is ever written over; name a new folder",
                dest.display()
            ))),
        },
    }
}

/// `p` made absolute with every symbolic link and `..` resolved, as far as it exists
/// (the rest appended as given): what "inside" is decided on.
fn resolve(p: &Path) -> Result<PathBuf, AppError> {
    use std::path::Component;
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| io_at(p, e))?.join(p)
    };
    let parts: Vec<Component> = abs.components().collect();
    // The longest prefix that exists, resolved; the rest has no links to follow, so its
    // `.` and `..` are taken as written (what creating it would do).
    for cut in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..cut].iter().collect();
        if let Ok(mut out) = std::fs::canonicalize(&prefix) {
            for c in &parts[cut..] {
                match c {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other),
                }
            }
            return Ok(out);
        }
    }
    Ok(abs)
}

/// Refuse a `dest` inside `dir` or holding it: a copy of a folder into itself.
fn check_apart(dest: &Path, dir: &Path, what: &str) -> Result<(), AppError> {
    let (d, r) = (resolve(dest)?, resolve(dir)?);
    if d.starts_with(&r) || r.starts_with(&d) {
        return Err(AppError::InvalidInput(format!(
            "{what} {} and {} are one inside the other: name a folder elsewhere",
            dest.display(),
            dir.display()
        )));
    }
    Ok(())
}

/// A new folder readable by its owner only (it holds every tenant's data).
fn create_private_dir(p: &Path) -> std::io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(p)
}

/// A temporary folder of this call's own beside `dest` (same filesystem, so it can be
/// renamed into place); never one another call made.
fn staging_beside(dest: &Path, tag: &str) -> Result<PathBuf, AppError> {
    let name = dest
        .file_name()
        .ok_or_else(|| AppError::InvalidInput(format!("{} names no folder", dest.display())))?;
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| io_at(&parent, e))?;
    for n in 0u32.. {
        let tmp = parent.join(format!(
            ".{}.{tag}-{}-{n}",
            name.to_string_lossy(),
            std::process::id()
        ));
        match create_private_dir(&tmp) {
            Ok(()) => return Ok(tmp),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_at(&tmp, e)),
        }
    }
    unreachable!("some staging name is free")
}

/// Where a backup or restore writes: into `dest` itself when it is an empty folder
/// already (a mount point, say: it cannot be replaced), else into a staging folder
/// beside it renamed into place at the end. Whatever fails, nothing it wrote is left.
fn write_then_place<T>(
    dest: &Path,
    tag: &str,
    fill: impl FnOnce(&Path) -> Result<T, AppError>,
) -> Result<T, AppError> {
    if dest.is_dir() {
        // Claimed first: a second run on the same folder stops here and clears nothing.
        let claim = dest.join(CLAIM);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&claim)
            .map_err(|e| {
                AppError::InvalidInput(format!(
                    "{} is taken by another backup or restore ({e})",
                    dest.display()
                ))
            })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| io_at(dest, e))?;
        }
        let out = fill(dest);
        if out.is_err() {
            clear_dir(dest);
        } else {
            std::fs::remove_file(&claim).map_err(|e| io_at(&claim, e))?;
        }
        return out;
    }
    let tmp = staging_beside(dest, tag)?;
    let out = fill(&tmp).and_then(|v| put_in_place(&tmp, dest).map(|()| v));
    if out.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    out
}

/// The file that marks a folder a backup or restore is filling (see [`write_then_place`]).
const CLAIM: &str = ".neuralcore-filling";

/// Delete what is in `dir` (not `dir`).
fn clear_dir(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}

/// Move the finished `tmp` to `dest` (which does not exist) and make the rename durable.
fn put_in_place(tmp: &Path, dest: &Path) -> Result<(), AppError> {
    std::fs::rename(tmp, dest).map_err(|e| io_at(dest, e))?;
    if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::File::open(parent)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_at(parent, e))?;
    }
    Ok(())
}

/// Copy the files under `from` into `to` (made as needed), each synced; files that
/// vanish meanwhile (a finished job's upload) are passed over. How many were copied.
fn copy_tree(from: &Path, to: &Path) -> Result<u64, AppError> {
    copy_tree_except(from, to, &[])
}

/// [`copy_tree`] without the entries of `from` named in `skip` (its top level only).
fn copy_tree_except(from: &Path, to: &Path, skip: &[&str]) -> Result<u64, AppError> {
    let entries = match std::fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_at(from, e)),
    };
    std::fs::create_dir_all(to).map_err(|e| io_at(to, e))?;
    let mut n = 0;
    for entry in entries {
        let entry = entry.map_err(|e| io_at(from, e))?;
        // A snapshot being written, or a dropped collection's folder not yet deleted.
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".tmp")
            || name.starts_with(".dropped-")
            || name == CLAIM
            || skip.contains(&name.as_str())
        {
            continue;
        }
        let kind = entry.file_type().map_err(|e| io_at(&entry.path(), e))?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            n += copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            match std::fs::copy(entry.path(), &target) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_at(&entry.path(), e)),
            }
            std::fs::File::open(&target)
                .and_then(|f| f.sync_all())
                .map_err(|e| io_at(&target, e))?;
            n += 1;
        }
    }
    Ok(n)
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

impl App {
    /// Back the data dir up into `dest` (a new folder, or an empty one) while it is in
    /// use: see the module docs. `keys` is the key store a server holds open; without
    /// one the data dir's own is opened, when it has one.
    pub fn backup(&self, dest: &Path, keys: Option<&KeyStore>) -> Result<BackupManifest, AppError> {
        let dir = self.data_dir().to_path_buf();
        check_destination(dest, &dir)?;
        write_then_place(dest, "backup", |tmp| self.backup_into(tmp, &dir, keys))
    }

    /// Back the data dir up into `<data dir>/backups/<name>` (see [`BACKUPS_DIR`]): what
    /// a server does when asked over HTTP.
    pub fn backup_named(
        &self,
        name: &str,
        keys: Option<&KeyStore>,
    ) -> Result<BackupManifest, AppError> {
        if !backup_name_ok(name) {
            return Err(AppError::InvalidInput(format!(
                "{name:?} is no backup name: 1-64 of A-Z, a-z, 0-9, _, . and -, not starting with ."
            )));
        }
        let dir = self.data_dir().to_path_buf();
        let root = dir.join(BACKUPS_DIR);
        std::fs::create_dir_all(&root).map_err(|e| io_at(&root, e))?;
        let dest = root.join(name);
        // Reserved at once: a second request for the name is refused, not run.
        create_private_dir(&dest).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => {
                AppError::InvalidInput(format!("a backup named {name:?} exists"))
            }
            _ => io_at(&dest, e),
        })?;
        let out = write_then_place(&dest, "backup", |tmp| self.backup_into(tmp, &dir, keys));
        if out.is_err() {
            let _ = std::fs::remove_dir(&dest);
        }
        out
    }

    fn backup_into(
        &self,
        tmp: &Path,
        dir: &Path,
        keys: Option<&KeyStore>,
    ) -> Result<BackupManifest, AppError> {
        let created_at = now_rfc3339();
        let mut parts = Vec::new();
        let mut skipped = Vec::new();
        let engine = self.engine();
        // Jobs first, then the uploads they wait on: a job's files are written and
        // synced before its record, so every job the copy lists has its files in the
        // uploads copied next, or (moved on meanwhile) in the sources copied after, and
        // one it lists as finished has its documents in the store copied after.
        if dir.join("jobs.redb").exists() {
            let n = self.jobs()?.backup_to(&tmp.join("jobs.redb"))?;
            parts.push(BackupPart {
                path: "jobs.redb".into(),
                items: n,
            });
            let n = copy_tree(&dir.join("uploads"), &tmp.join("uploads"))?;
            if n > 0 {
                parts.push(BackupPart {
                    path: "uploads".into(),
                    items: n,
                });
            }
        }
        // Documents, vector snapshots and placed uploads with no collection changing:
        // the snapshots then match the store copy's generations.
        let collections = {
            let _writing = self.writing();
            let n = engine
                .store()
                .backup_to(&tmp.join("store.redb"))
                .map_err(neuralcore_engine::EngineError::from)?;
            parts.push(BackupPart {
                path: "store.redb".into(),
                items: n,
            });
            engine.save_vectors()?;
            for sub in ["vectors", "sources"] {
                let n = copy_tree(&dir.join(sub), &tmp.join(sub))?;
                if n > 0 {
                    parts.push(BackupPart {
                        path: sub.into(),
                        items: n,
                    });
                }
            }
            engine
                .collections()?
                .into_iter()
                .map(|c| BackupCollection {
                    name: c.name,
                    generation: c.generation,
                    documents: c.documents,
                    chunks: c.chunks,
                })
                .collect()
        };
        let cfg = self.config();
        // Memories, the Mind, keys and jobs: each store's own snapshot.
        use neuralcore_engine::MemoryBackendKind;
        match cfg.memory.backend {
            MemoryBackendKind::Embedded if dir.join("memory.redb").exists() => {
                let n = self
                    .memory_store()?
                    .backup_to(&tmp.join("memory.redb"))
                    .map_err(AppError::from)?;
                parts.push(BackupPart {
                    path: "memory.redb".into(),
                    items: n,
                });
            }
            MemoryBackendKind::Embedded => {}
            MemoryBackendKind::Memory => {
                skipped.push("memory: kept in memory only ([memory] backend = \"memory\")".into())
            }
            MemoryBackendKind::Postgres => skipped.push(
                "memory: on PostgreSQL ([memory] backend = \"postgres\"): back it up with pg_dump"
                    .into(),
            ),
        }
        match self.mind().backend() {
            "redb" => {
                let n = self
                    .mind()
                    .backup_to(&tmp.join("mind.redb"))
                    .map_err(|e| AppError::Internal(format!("mind.redb: {e}")))?;
                parts.push(BackupPart {
                    path: "mind.redb".into(),
                    items: n,
                });
            }
            other => skipped.push(format!(
                "the Mind: on {other}, not embedded: a Redis Mind is backed up with Redis's own \
                 tools, an in-memory one has nothing to keep"
            )),
        }
        // Marks on answers are training data no run keeps once the week is over.
        if dir.join("marks.redb").exists() {
            let marks = self.marks()?;
            if marks.in_postgres() {
                skipped.push(
                    "marks on answers: in PostgreSQL with the documents; back them up with \
                     pg_dump --schema"
                        .to_string(),
                );
            } else {
                let n = marks.backup_to(&tmp.join("marks.redb"))?;
                parts.push(BackupPart {
                    path: "marks.redb".into(),
                    items: n,
                });
            }
        }
        let opened;
        let keys = match keys {
            Some(k) => Some(k),
            None if dir.join("auth.redb").exists() => {
                opened = KeyStore::open(dir)?;
                Some(&opened)
            }
            None => None,
        };
        match keys {
            Some(k) if k.in_postgres() => skipped.push(
                "tenants and keys: in PostgreSQL with the documents; back them up with \
                 pg_dump --schema"
                    .to_string(),
            ),
            Some(k) => {
                let n = k.backup_to(&tmp.join("auth.redb"))?;
                parts.push(BackupPart {
                    path: "auth.redb".into(),
                    items: n,
                });
            }
            None => {}
        }
        let config = dir.join("neuralcore.toml");
        if config.is_file() {
            std::fs::copy(&config, tmp.join("neuralcore.toml")).map_err(|e| io_at(&config, e))?;
            parts.push(BackupPart {
                path: "neuralcore.toml".into(),
                items: 1,
            });
        }
        // What was trained here (`neuralcore train evaluator|reranker`) cannot be pulled.
        if let Some(models) = engine.model_dir() {
            for name in neuralcore_engine::TRAINED_MODELS {
                let trained = models.join(name);
                if !trained.is_dir() {
                    continue;
                }
                if resolve(&models)? == resolve(&dir.join("models"))? {
                    let n = copy_tree(&trained, &tmp.join("models").join(name))?;
                    parts.push(BackupPart {
                        path: format!("models/{name}"),
                        items: n,
                    });
                } else {
                    skipped.push(format!(
                        "the trained model {name}: its model dir is outside the data dir \
                         (embedding.model_dir); copy it yourself"
                    ));
                }
            }
        }
        skipped.push(
            "the keyword indexes (rebuilt from the store by `neuralcore restore`), the \
             operation cache, and the pulled models (`neuralcore models pull`)"
                .into(),
        );
        let format = neuralcore_engine::DATA_DIR_FORMAT;
        let stamp =
            serde_json::json!({ "format": format, "written_by": env!("CARGO_PKG_VERSION") });
        write_synced(
            &tmp.join(neuralcore_engine::FORMAT_FILE),
            &serde_json::to_vec_pretty(&stamp).expect("serializable"),
        )?;
        let manifest = BackupManifest {
            schema: BACKUP_SCHEMA.into(),
            format,
            written_by: env!("CARGO_PKG_VERSION").into(),
            created_at,
            parts,
            skipped,
            collections,
        };
        write_synced(
            &tmp.join(MANIFEST),
            &serde_json::to_vec_pretty(&manifest).expect("serializable"),
        )?;
        std::fs::File::open(tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_at(tmp, e))?;
        Ok(manifest)
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), AppError> {
    std::fs::write(path, bytes)
        .and_then(|_| std::fs::File::open(path)?.sync_all())
        .map_err(|e| io_at(path, e))
}

/// Read a backup's manifest, refusing what is not a whole backup this release reads.
pub fn read_manifest(backup: &Path) -> Result<BackupManifest, AppError> {
    let path = backup.join(MANIFEST);
    let bytes = std::fs::read(&path).map_err(|e| {
        AppError::InvalidInput(format!(
            "{} is not a neuralcore backup ({}: {e})",
            backup.display(),
            MANIFEST
        ))
    })?;
    let m: BackupManifest = serde_json::from_slice(&bytes)
        .map_err(|e| AppError::InvalidInput(format!("{} is damaged: {e}", path.display())))?;
    if m.schema != BACKUP_SCHEMA {
        return Err(AppError::InvalidInput(format!(
            "{} has schema {:?}; this release reads {BACKUP_SCHEMA}",
            path.display(),
            m.schema
        )));
    }
    if m.format > neuralcore_engine::DATA_DIR_FORMAT {
        return Err(AppError::InvalidInput(format!(
            "the backup {} has data dir format {}, written by neuralcore {}; this neuralcore \
             ({}) reads formats up to {}: restore it with neuralcore {} or newer",
            backup.display(),
            m.format,
            m.written_by,
            env!("CARGO_PKG_VERSION"),
            neuralcore_engine::DATA_DIR_FORMAT,
            m.written_by
        )));
    }
    Ok(m)
}

/// Copy the backup at `backup` into `data_dir` (a new folder, or an empty one): the
/// files only; opening the result rebuilds the keyword indexes (see
/// [`App::verify_restored`]). Nothing is ever written over.
pub fn restore_files(backup: &Path, data_dir: &Path) -> Result<BackupManifest, AppError> {
    let manifest = read_manifest(backup)?;
    check_free(data_dir, "the data dir to restore into")?;
    check_apart(
        data_dir,
        backup,
        "the data dir to restore into and the backup",
    )?;
    write_then_place(data_dir, "restore", |tmp| {
        copy_tree_except(backup, tmp, &[MANIFEST])?;
        std::fs::File::open(tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| io_at(tmp, e))
    })?;
    Ok(manifest)
}

impl App {
    /// After a restore: bring every collection's indexes up to its store (the keyword
    /// indexes are rebuilt; vectors come from the store's cache, never embedded again)
    /// and check the counts against the manifest's. The collections that differ.
    pub fn verify_restored(&self, manifest: &BackupManifest) -> Result<Vec<String>, AppError> {
        let engine = self.engine();
        let mut wrong = Vec::new();
        for c in &manifest.collections {
            let got = engine.collection(&c.name)?;
            let idx = engine.keyword_index(&c.name)?;
            let vectors = match engine.vector_index(&c.name)? {
                Some(v) => Some(v.stats()?.live as u64),
                None => None,
            };
            if (got.documents, got.chunks) != (c.documents, c.chunks)
                || idx.num_chunks() != c.chunks
                || vectors.is_some_and(|n| n != c.chunks)
            {
                wrong.push(format!(
                    "{}: the backup lists {} documents and {} chunks; restored {} and {} ({} \
                     indexed, {} with vectors)",
                    c.name,
                    c.documents,
                    c.chunks,
                    got.documents,
                    got.chunks,
                    idx.num_chunks(),
                    vectors.map_or("no model".to_string(), |n| n.to_string())
                ));
            }
        }
        Ok(wrong)
    }
}
