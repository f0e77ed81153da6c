//! Every input fuzzing found a failure with (fuzz/regressions/load_EXT/*, see
//! scripts/fuzz.sh) is loaded again by its loader: it must give documents or a clear
//! error, never a panic, and the error it gave when it was found must not come back as
//! anything worse.

use std::path::{Path, PathBuf};

use neuralcore_ingest::{loader_for, LoadError, LoaderOptions, SourceInput};

fn regressions() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions");
    let mut out = Vec::new();
    for dir in std::fs::read_dir(&root).expect("fuzz/regressions") {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Some(ext) = name.strip_prefix("load_") else {
            continue;
        };
        for f in std::fs::read_dir(&dir).unwrap() {
            out.push((ext.to_owned(), f.unwrap().path()));
        }
    }
    out.sort();
    out
}

#[test]
fn inputs_fuzzing_found_failures_with_load_without_a_panic() {
    let cases = regressions();
    assert!(!cases.is_empty(), "no regression inputs found");
    let options = LoaderOptions::default();
    for (ext, path) in cases {
        // Loaders choose by extension: give the input its target's.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(format!("input.{ext}"));
        std::fs::copy(&path, &file).unwrap();
        let loader = loader_for(&file).expect("a loader for the target's extension");
        let input = SourceInput {
            path: &file,
            default_title: "input",
            options: &options,
        };
        let outcome = loader.load(&input, &mut |_| Ok(()));
        match outcome {
            Ok(_) | Err(LoadError::Parse(_) | LoadError::Malformed { .. } | LoadError::NoText) => {}
            Err(e) => panic!("{}: unexpected error {e}", path.display()),
        }
        if let Err(e) = &outcome {
            assert!(
                !e.to_string().is_empty(),
                "{}: an error without words",
                path.display()
            );
        }
    }
}

/// Load `fuzz/regressions/load_pdf/NAME` with the default options.
fn load_pdf(name: &str) -> Result<(), LoadError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions/load_pdf")
        .join(name);
    let options = LoaderOptions::default();
    let input = SourceInput {
        path: &path,
        default_title: "input",
        options: &options,
    };
    loader_for(&path)
        .unwrap()
        .load(&input, &mut |_| Ok(()))
        .map(|_| ())
}

#[test]
fn a_pdf_naming_an_object_it_lacks_is_a_parse_error() {
    // Found by `scripts/fuzz.sh` (load_pdf): pdf-extract panics on a font reference to a
    // missing object; the loader must say the PDF is invalid.
    let err = load_pdf("font-object-missing.pdf").unwrap_err();
    assert!(
        matches!(&err, LoadError::Parse(m) if m.contains("panicked") && m.contains("missing object")),
        "{err}"
    );
}

#[test]
fn a_pdf_whose_page_tree_loops_is_refused_at_once() {
    // Found by `scripts/fuzz.sh 600` (load_pdf, a timeout): a page's /Parent chain comes
    // back to itself, and pdf-extract follows it forever looking for inherited
    // attributes (a hang in release builds, a stack overflow in debug ones).
    let started = std::time::Instant::now();
    let err = load_pdf("page-tree-parent-cycle.pdf").unwrap_err();
    assert!(
        matches!(&err, LoadError::Parse(m) if m.contains("loops back on itself")),
        "{err}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
