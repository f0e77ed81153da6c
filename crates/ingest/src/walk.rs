//! Expands the paths given to `ingest` into the files to load: folders recursively (in
//! a stable, sorted order), filtered by include and exclude globs that match paths
//! relative to the folder given. A file named directly is always taken.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};

/// Folder-walk settings.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WalkOptions {
    /// Globs a file inside a folder must match (empty: any file a loader reads).
    pub include: Vec<String>,
    /// Globs that leave a file or folder out.
    pub exclude: Vec<String>,
    /// Follow symbolic links inside folders.
    pub follow_links: bool,
    /// Skip files and folders whose name starts with a dot.
    pub skip_hidden: bool,
}

impl Default for WalkOptions {
    fn default() -> Self {
        WalkOptions {
            include: Vec::new(),
            exclude: vec!["**/node_modules/**".into(), "**/target/**".into()],
            follow_links: false,
            skip_hidden: true,
        }
    }
}

/// One result of the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEntry {
    /// A file to load.
    File(PathBuf),
    /// A path that could not be walked, with the reason.
    Error(PathBuf, String),
}

fn globset(patterns: &[String]) -> Result<GlobSet, String> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(Glob::new(p).map_err(|e| format!("bad glob {p:?}: {e}"))?);
    }
    b.build().map_err(|e| e.to_string())
}

/// Expand `paths` into files. Errors in the globs are returned as `Err`; unreadable
/// paths become [`WalkEntry::Error`] so the rest of the batch goes on.
pub fn walk(paths: &[PathBuf], opts: &WalkOptions) -> Result<Vec<WalkEntry>, String> {
    let include = globset(&opts.include)?;
    let exclude = globset(&opts.exclude)?;
    let mut out = Vec::new();
    for root in paths {
        let meta = match std::fs::metadata(root) {
            Ok(m) => m,
            Err(e) => {
                out.push(WalkEntry::Error(root.clone(), e.to_string()));
                continue;
            }
        };
        if !meta.is_dir() {
            out.push(WalkEntry::File(root.clone()));
            continue;
        }
        let it = walkdir::WalkDir::new(root)
            .follow_links(opts.follow_links)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                if e.depth() == 0 {
                    return true;
                }
                let rel = e.path().strip_prefix(root).unwrap_or(e.path());
                let hidden = opts.skip_hidden && e.file_name().to_string_lossy().starts_with('.');
                !hidden && !exclude.is_match(rel) && !exclude.is_match(e.path())
            });
        for entry in it {
            match entry {
                Ok(e) if e.file_type().is_dir() => {}
                Ok(e) => {
                    let rel = e.path().strip_prefix(root).unwrap_or(e.path());
                    let wanted = if opts.include.is_empty() {
                        crate::loaders::loader_for(e.path()).is_some()
                    } else {
                        include.is_match(rel) || include.is_match(e.path())
                    };
                    if wanted {
                        out.push(WalkEntry::File(e.path().to_path_buf()));
                    }
                }
                Err(err) => {
                    let p = err
                        .path()
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|| root.clone());
                    out.push(WalkEntry::Error(p, err.to_string()));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_sorted_with_globs() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("sub/node_modules")).unwrap();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        for f in [
            "b.md",
            "a.txt",
            "sub/c.html",
            "sub/node_modules/x.md",
            ".git/y.md",
            "img.png",
            "sub/d.log",
        ] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        let files = |o: &WalkOptions| -> Vec<String> {
            walk(&[r.to_path_buf()], o)
                .unwrap()
                .into_iter()
                .map(|e| match e {
                    WalkEntry::File(p) => p.strip_prefix(r).unwrap().to_string_lossy().into_owned(),
                    WalkEntry::Error(p, e) => panic!("{p:?} {e}"),
                })
                .collect()
        };
        assert_eq!(
            files(&WalkOptions::default()),
            vec!["a.txt", "b.md", "sub/c.html", "sub/d.log"]
        );
        let o = WalkOptions {
            include: vec!["**/*.md".into(), "*.md".into()],
            ..Default::default()
        };
        assert_eq!(files(&o), vec!["b.md"]);
        let o = WalkOptions {
            exclude: vec!["sub/**".into()],
            ..Default::default()
        };
        assert_eq!(files(&o), vec!["a.txt", "b.md"]);
        let missing = walk(&[r.join("nope")], &WalkOptions::default()).unwrap();
        assert!(matches!(&missing[0], WalkEntry::Error(_, _)));
        assert!(walk(
            &[],
            &WalkOptions {
                include: vec!["[".into()],
                ..Default::default()
            }
        )
        .is_err());
    }
}
