//! The data dir's format version: `<data dir>/format.json`, checked by every open.
//!
//! A data dir made by this release is stamped with [`DATA_DIR_FORMAT`]. One made before
//! the stamp existed (format 0: the same files) is stamped on its first open. One
//! stamped by an older release is migrated step by step, then stamped. One stamped by a
//! newer release is refused with a message that says what to run, before anything in it
//! is written. The stamp is written only while the store is held, so two processes never
//! migrate one data dir at once.

use std::path::Path;

use serde::Serialize;

use crate::EngineError;

/// The format this release writes and reads.
///
/// - 1: the format stamp.
/// - 2: a source record may be partial (an ingest that committed some of its batches);
///   a release of format 1 would take such a source for complete and skip it. The files
///   are those of format 1: migrating is stamping.
pub const DATA_DIR_FORMAT: u32 = 2;

/// The stamp's file name in the data dir.
pub const FORMAT_FILE: &str = "format.json";

#[derive(Debug, Serialize)]
struct Stamp {
    /// The data dir format.
    format: u32,
    /// The neuralcore version that wrote the stamp.
    written_by: String,
}

/// The format a data dir holds: its stamp's, 0 when it has none. A stamp newer than
/// this release, or one that cannot be read, is an error that names the file and what
/// to do.
pub(crate) fn read(data_dir: &Path) -> Result<u32, EngineError> {
    let path = data_dir.join(FORMAT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => {
            return Err(EngineError::Io(format!(
                "cannot read {}: {e}",
                path.display()
            )))
        }
    };
    // Only `format` is required, so a newer release's stamp of another shape is still
    // read as newer, never as damaged.
    let stamp: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| damaged(&path, e))?;
    let format = stamp
        .get("format")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| damaged(&path, "no \"format\" number"))?;
    if format > u64::from(DATA_DIR_FORMAT) {
        let by = stamp
            .get("written_by")
            .and_then(serde_json::Value::as_str)
            .filter(|v| !v.is_empty() && v.len() <= 40)
            .unwrap_or("a newer release");
        return Err(EngineError::Format(format!(
            "the data dir {} has format {format}, written by neuralcore {by}; this \
             neuralcore ({}) reads formats up to {DATA_DIR_FORMAT}: run neuralcore {by} or \
             newer on it, or use another --data-dir",
            data_dir.display(),
            env!("CARGO_PKG_VERSION"),
        )));
    }
    Ok(format as u32)
}

fn damaged(path: &Path, e: impl std::fmt::Display) -> EngineError {
    EngineError::Format(format!(
        "{} is damaged ({e}); it should read {{\"format\": {DATA_DIR_FORMAT}, \
         \"written_by\": \"…\"}} for a data dir of this release",
        path.display()
    ))
}

/// Refuse a data dir of a newer format (or with a damaged stamp) before anything opens a
/// file of it: for the parts of a data dir opened without the engine (API keys, the
/// Mind). It stamps nothing.
pub fn check(data_dir: &Path) -> Result<(), EngineError> {
    read(data_dir).map(|_| ())
}

/// Bring a data dir of format `from` (≤ [`DATA_DIR_FORMAT`]) to this release's format and
/// stamp it. Formats 0 (no stamp) and 1 have the same files as 2: stamping is all. A
/// data dir that cannot be written (read-only, full) is used as it is, unstamped; a
/// migration that changes files must therefore be safe to run again.
pub(crate) fn migrate(data_dir: &Path, from: u32) -> Result<(), EngineError> {
    if from == DATA_DIR_FORMAT {
        return Ok(());
    }
    if from > 0 {
        tracing::info!(
            data_dir = %data_dir.display(),
            from,
            to = DATA_DIR_FORMAT,
            "migrating the data dir"
        );
    }
    let stamp = Stamp {
        format: DATA_DIR_FORMAT,
        written_by: env!("CARGO_PKG_VERSION").to_string(),
    };
    let path = data_dir.join(FORMAT_FILE);
    let tmp = data_dir.join(format!("{FORMAT_FILE}.tmp"));
    let body = serde_json::to_vec_pretty(&stamp).expect("serializable");
    let written = std::fs::write(&tmp, body)
        .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|_| std::fs::rename(&tmp, &path))
        .and_then(|_| std::fs::File::open(data_dir)?.sync_all());
    if let Err(e) = written {
        // Read-only, full, or not ours to write: the files are those of this format
        // already (formats 0 and 1 differ only by the stamp), so use it as it is; the next
        // open that can write stamps it.
        tracing::warn!(
            "the data dir {} cannot be stamped with its format ({e}); using it as it is",
            data_dir.display()
        );
        let _ = std::fs::remove_file(&tmp);
    }
    Ok(())
}
