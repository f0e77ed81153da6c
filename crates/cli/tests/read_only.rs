//! A read-only data dir (issue 20's faults): the data dir of a finished ingest is
//! remounted read-only — a bind mount in a user and mount namespace of the command's own
//! (`unshare`), so the test runs as root (whom file modes do not stop) or not and leaves
//! no mount behind. Every command, reading or writing, must then stop with a clear error
//! naming the file and the cause, never a panic, and the data must be as it was.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Run `neuralcore --data-dir DATA ARGS` with DATA mounted read-only.
fn run_read_only(data: &Path, args: &[&str]) -> Output {
    let script = r#"mount --bind "$NC_DATA" "$NC_DATA" && mount -o remount,bind,ro "$NC_DATA" || { echo "read_only: cannot remount" >&2; exit 97; }
touch "$NC_DATA/probe" 2>/dev/null && { echo "read_only: the data dir is still writable" >&2; exit 98; }
exec timeout 60 "$NC_BIN" --data-dir "$NC_DATA" "$@""#;
    let mut cmd = Command::new("unshare");
    for (k, _) in std::env::vars() {
        if k.starts_with("NEURALCORE_") && k != "NEURALCORE_ISA" {
            cmd.env_remove(k);
        }
    }
    let out = cmd
        .args([
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .args(args)
        .env("NC_BIN", env!("CARGO_BIN_EXE_neuralcore"))
        .env("NC_DATA", data)
        .env("NEURALCORE_EMBEDDING_MODEL_DIR", common::model_cache())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `unshare` (util-linux): {e}"));
    let code = out.status.code();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        code != Some(97) && code != Some(98) && !err.starts_with("unshare:"),
        "the read-only mount failed (are user namespaces allowed here?): {err}"
    );
    out
}

/// Every file of the data dir with its bytes' digest (what "as it was" means).
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let digest = neuralcore_core::text::sha256_hex(&bytes);
                out.push((p.strip_prefix(dir).unwrap().display().to_string(), digest));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_read_only_data_dir_gets_a_clear_error_from_every_command_and_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let notes = examples.join("notes");
    let cache = common::model_cache();
    let model = [("NEURALCORE_EMBEDDING_MODEL_DIR", cache.as_str())];
    let with_model = |args: &[&str]| common::run_ok_env(&data, args, &model);
    with_model(&["ingest", examples.to_str().unwrap()]);
    let found = with_model(&["search", "What causes the tides?"]);
    let before = snapshot(&data);

    let commands: [&[&str]; 6] = [
        &["search", "What causes the tides?"],
        &["ask", "What causes the tides?"],
        &["ingest", notes.to_str().unwrap()],
        &["memory", "add", "The user prefers short answers."],
        &["collections"],
        &["serve", "--addr", "127.0.0.1:0"],
    ];
    for args in commands {
        let out = run_read_only(&data, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{args:?} succeeded on a read-only data dir"
        );
        assert_ne!(out.status.code(), Some(101), "{args:?} panicked: {err}");
        assert_ne!(out.status.code(), Some(124), "{args:?} hung: {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
        assert!(
            err.contains("Read-only file system") && err.contains(data.to_str().unwrap()),
            "{args:?}: the error must name the data dir and the cause: {err}"
        );
    }

    assert_eq!(snapshot(&data), before, "the data dir changed");
    assert_eq!(
        with_model(&["search", "What causes the tides?"]),
        found,
        "the data dir answers otherwise once writable again"
    );
}
