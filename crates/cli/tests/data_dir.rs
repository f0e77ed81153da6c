//! The data dir across releases and crashes (issue 20): a data dir written by an older
//! release (a fixture of format 1) opens migrated with everything in it; an ingest
//! killed with SIGKILL in the middle of a big file resumes where its last batch
//! committed and ends as an uninterrupted one does.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;

use common::{bin, model_cache, run_ok, run_ok_env};
use serde_json::Value;

fn untar(fixture: &str, into: &Path) {
    let archive = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let st = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(into)
        .status()
        .expect("tar runs");
    assert!(st.success(), "cannot unpack {}", archive.display());
}

fn format_of(data: &Path) -> u64 {
    let v: Value =
        serde_json::from_slice(&std::fs::read(data.join("format.json")).unwrap()).unwrap();
    v["format"].as_u64().unwrap()
}

#[test]
fn a_data_dir_written_at_format_1_opens_migrated_with_documents_memories_and_keys() {
    // Written by `neuralcore` at commit 56e0713 (format 1): two files ingested into
    // `default`, one into `acme_docs`, a memory, a tenant `acme` and a read key
    // (nck_28d84fe3_…) of the default tenant. No model: keyword search.
    let tmp = tempfile::tempdir().unwrap();
    untar("data-dir-format-1.tar.gz", tmp.path());
    let data = tmp.path().join("data");
    assert_eq!(format_of(&data), 1);

    let out = run_ok(&data, &["search", "tides", "--json"]);
    assert_eq!(format_of(&data), 2, "migrated on open");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["hits"][0]["title"], "Tides", "{v}");
    let out = run_ok(
        &data,
        &["search", "borrow checker", "--collection", "acme_docs"],
    );
    assert!(out.contains("borrow"), "{out}");
    let out = run_ok(&data, &["memory", "search", "when do we ship"]);
    assert!(out.contains("Thursdays"), "{out}");
    let out = run_ok(&data, &["keys", "list"]);
    assert!(out.contains("28d84fe3") && out.contains("active"), "{out}");
    let out = run_ok(&data, &["tenants", "list"]);
    assert!(out.contains("acme"), "{out}");
    // And it takes new writes at its new format.
    let note = tmp.path().join("new.md");
    std::fs::write(&note, "# Comets\n\nComets grow tails near the Sun.").unwrap();
    run_ok(&data, &["ingest", note.to_str().unwrap()]);
    let out = run_ok(&data, &["search", "comets"]);
    assert!(out.contains("Comets"), "{out}");
}

fn rows(n: usize) -> String {
    let animals = [
        "sea otters",
        "tree frogs",
        "snow leopards",
        "barn owls",
        "orcas",
    ];
    (0..n)
        .map(|i| {
            format!(
                "{{\"_id\":\"{i}\",\"title\":\"row {i}\",\"text\":\"Row {i} is a field note about {} seen on day {}.\"}}\n",
                animals[i % animals.len()],
                i / 7
            )
        })
        .collect()
}

/// What a finished ingest leaves that a user sees: sources, counts, and the hits of a
/// few searches.
fn dump(data: &Path, env: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    let sources: Value =
        serde_json::from_str(&run_ok_env(data, &["sources", "--json"], env)).unwrap();
    for s in sources.as_array().unwrap() {
        out.push(format!(
            "source docs={} partial={}",
            s["docs"],
            s.get("partial").is_some()
        ));
    }
    let cols = run_ok_env(data, &["collections", "--json"], env);
    let cols: Value = serde_json::from_str(&cols).unwrap();
    for c in cols.as_array().unwrap() {
        out.push(format!("{} {} {}", c["name"], c["documents"], c["chunks"]));
    }
    for q in ["sea otters day 3", "orcas", "row 17"] {
        let v: Value =
            serde_json::from_str(&run_ok_env(data, &["search", q, "--json", "-k", "8"], env))
                .unwrap();
        let ids: Vec<String> = v["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| format!("{}", h["title"]))
            .collect();
        out.push(format!("{q}: {ids:?}"));
    }
    out
}

#[test]
fn an_ingest_killed_mid_file_resumes_after_its_last_batch_and_ends_as_an_uninterrupted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("notes.jsonl");
    std::fs::write(&file, rows(400)).unwrap();
    let file = file.to_str().unwrap();
    let model = model_cache();
    let env = [
        ("NEURALCORE_EMBEDDING_MODEL_DIR", model.as_str()),
        ("NEURALCORE_INGEST_COMMIT_CHUNKS", "40"),
    ];

    let whole = tmp.path().join("whole");
    run_ok_env(&whole, &["ingest", file], &env);

    // Killed (SIGKILL) right after its third checkpoint was logged.
    let data = tmp.path().join("data");
    let mut child = bin()
        .arg("--data-dir")
        .arg(&data)
        .args(["-v", "ingest", file])
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = 0;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        if line.unwrap().contains("checkpoint") {
            seen += 1;
            if seen == 3 {
                child.kill().unwrap();
                break;
            }
        }
    }
    let status = child.wait().unwrap();
    assert_eq!(seen, 3, "three checkpoints before the end");
    assert!(!status.success(), "killed before it finished");

    let sources: Value =
        serde_json::from_str(&run_ok_env(&data, &["sources", "--json"], &env)).unwrap();
    let s = &sources[0];
    assert!(s.get("partial").is_some(), "listed as partial: {s}");
    let stored = s["docs"].as_array().unwrap().len();
    // Three batches of 40 chunks (a row is one chunk; the first batch is 41 rows),
    // perhaps a fourth committed between the log line and the kill.
    assert!((121..=161).contains(&stored), "{stored} rows stored");
    let listed = run_ok_env(&data, &["sources"], &env);
    assert!(listed.contains("partial: interrupted"), "{listed}");

    // Resumed: only the rows not stored are new; the end is the uninterrupted one's.
    let out = run_ok_env(&data, &["--json", "ingest", file], &env);
    let summary: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(summary["chunks"], 400 - stored as u64, "{summary}");
    assert_eq!(dump(&data, &env), dump(&whole, &env));
}

#[test]
fn a_backup_taken_while_the_server_ingests_restores_to_a_consistent_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let model = model_cache();
    let env = [("NEURALCORE_EMBEDDING_MODEL_DIR", model.as_str())];
    let seed = tmp.path().join("seed.jsonl");
    std::fs::write(&seed, rows(60)).unwrap();
    run_ok_env(&data, &["ingest", seed.to_str().unwrap()], &env);
    run_ok(&data, &["memory", "add", "Backups run every night at two."]);
    let key = run_ok(&data, &["keys", "create", "--scope", "admin"]);
    let key = key.lines().next().unwrap().trim().to_string();
    assert!(key.starts_with("nck_"), "{key}");
    let read_key = run_ok(&data, &["keys", "create"]);
    let read_key = read_key.lines().next().unwrap().trim().to_string();

    let (mut server, url) = common::start_server(&data);
    // A writer uploads file after file through the server meanwhile.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, url, key, dir) = (
            stop.clone(),
            url.clone(),
            key.clone(),
            tmp.path().to_path_buf(),
        );
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let f = dir.join(format!("upload_{n}.md"));
                std::fs::write(
                    &f,
                    format!("# Upload {n}\n\nNote {n}: the heron waits at pond {n}."),
                )
                .unwrap();
                let out = bin()
                    .args(["--server", &url, "--api-key", &key, "ingest"])
                    .arg(&f)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                n += 1;
            }
            n
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Two backups while it writes: by the server that owns the data dir (found there).
    let mut backups = Vec::new();
    for i in 0..2 {
        let dest = tmp.path().join(format!("backup{i}"));
        let out = run_ok(
            &data,
            &[
                "--api-key",
                &key,
                "--json",
                "backup",
                dest.to_str().unwrap(),
            ],
        );
        let manifest: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(manifest["schema"], "neuralcore.backup/v1");
        backups.push((dest, manifest));
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
    // By --server, the backup is named and stays in the server's backups folder; a key
    // of another scope, and a name taken, are refused.
    let by_name = |k: &str, name: &str| {
        bin()
            .args(["--server", &url, "--api-key", k, "backup", name])
            .output()
            .unwrap()
    };
    let out = by_name(&read_key, "by-reader");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(err.contains("HTTP 403"), "{err}");
    assert!(!data.join("backups/by-reader").exists());
    let out = by_name(&key, "weekly");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(data.join("backups/weekly/backup.json").is_file());
    let out = by_name(&key, "weekly");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success() && err.contains("HTTP 409"), "{err}");
    // The CLI's own backups were moved out of the server's folder to where it was told.
    let left: Vec<_> = std::fs::read_dir(data.join("backups"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["weekly".to_string()]);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let uploads = writer.join().unwrap();
    assert!(
        uploads >= 2,
        "the writer ran during the backups ({uploads})"
    );
    server.kill().unwrap();
    let _ = server.wait();

    for (i, (dest, manifest)) in backups.iter().enumerate() {
        let restored = tmp.path().join(format!("restored{i}"));
        // Restore checks every collection's counts, keyword index and vectors.
        let out = run_ok_env(
            &restored,
            &["--json", "restore", dest.to_str().unwrap()],
            &env,
        );
        let report: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["mismatches"], serde_json::json!([]), "{report}");
        let docs = manifest["collections"][0]["documents"].as_u64().unwrap();
        assert!(docs >= 60, "{manifest}");
        let out = run_ok_env(&restored, &["search", "field note about orcas"], &env);
        assert!(out.contains("row "), "{out}");
        let out = run_ok(&restored, &["memory", "search", "when do backups run"]);
        assert!(out.contains("every night"), "{out}");
        let out = run_ok(&restored, &["keys", "list"]);
        assert!(out.contains(&key[4..12]), "{out}");
        // Every source's documents are there: uploads are whole or absent.
        let sources: Value =
            serde_json::from_str(&run_ok_env(&restored, &["sources", "--json"], &env)).unwrap();
        let listed: u64 = sources
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["docs"].as_array().unwrap().len() as u64)
            .sum();
        assert_eq!(listed, docs, "{sources}");
    }
    // Restoring over a data dir that holds anything is refused.
    let out = bin()
        .arg("--data-dir")
        .arg(&data)
        .arg("restore")
        .arg(&backups[0].0)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
}

#[test]
fn a_backup_goes_nowhere_inside_the_data_dir_and_fills_an_empty_folder_it_is_given() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let note = tmp.path().join("kestrel.md");
    std::fs::write(&note, "# Kestrel\n\nKestrels hover over fields.").unwrap();
    run_ok(&data, &["ingest", note.to_str().unwrap()]);
    let fails = |args: &[&str]| -> String {
        let out = bin().current_dir(tmp.path()).args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    // Inside the data dir, named relatively or through a symbolic link: refused.
    let err = fails(&["--data-dir", "data", "backup", "data/vectors/b"]);
    assert!(err.contains("one inside the other"), "{err}");
    std::os::unix::fs::symlink(&data, tmp.path().join("link")).unwrap();
    let err = fails(&["--data-dir", "data", "backup", "link/b"]);
    assert!(err.contains("one inside the other"), "{err}");
    // ... or through `..` after a folder that does not exist yet.
    let err = fails(&["--data-dir", "data", "backup", "nope/../data/sources/b"]);
    assert!(err.contains("one inside the other"), "{err}");
    assert!(!data.join("b").exists() && !data.join("vectors/b").exists());
    assert!(!data.join("sources/b").exists());
    // A mistyped data dir is not created and backed up empty.
    let err = fails(&["--data-dir", "nope", "backup", "x"]);
    assert!(err.contains("no neuralcore data dir"), "{err}");
    assert!(!tmp.path().join("nope").exists());

    // An empty folder given (a mount point, say) is filled, not replaced.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    run_ok(&data, &["backup", empty.to_str().unwrap()]);
    assert!(empty.join("backup.json").is_file() && empty.join("store.redb").is_file());
    use std::os::unix::fs::PermissionsExt;
    let staged: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(staged.is_empty(), "no staging folder left");
    run_ok(&data, &["backup", tmp.path().join("b2").to_str().unwrap()]);
    let mode = std::fs::metadata(tmp.path().join("b2"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "owner-only: {mode:o}");

    // Restoring into the backup itself is refused; into an empty folder works.
    let inner = empty.join("restored");
    let err = fails(&[
        "--data-dir",
        inner.to_str().unwrap(),
        "restore",
        empty.to_str().unwrap(),
    ]);
    assert!(err.contains("one inside the other"), "{err}");
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    run_ok(&target, &["restore", empty.to_str().unwrap()]);
    let out = run_ok(&target, &["search", "kestrels"]);
    assert!(out.contains("Kestrel"), "{out}");
}
