//! The web console of `neuralcore serve` in a real headless Chromium: a server with keys
//! for two tenants, driven by `tests/clients/console.py` (Playwright over Debian's
//! chromium, from `scripts/console-client.sh`). The script signs in, uploads files and
//! watches their job, asks and opens a citation's span, signals a memory, checks that an
//! XSS probe stays text and that the other tenant's ids are not found, and saves
//! screenshots of each page: in a temporary folder, or with
//! `NEURALCORE_CONSOLE_SCREENSHOTS=docs/console` in the folder the README links (how
//! those were made), so a test run never changes the working tree.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_neuralcore"));
    // Tests never inherit a user's settings, but for the instruction set the suite runs
    // the encoder on (`NEURALCORE_ISA=avx2 scripts/test.sh`).
    for (k, _) in std::env::vars() {
        if (k.starts_with("NEURALCORE_") && k != "NEURALCORE_ISA")
            || k.starts_with("HF_")
            || k.starts_with("HUGGING")
        {
            c.env_remove(k);
        }
    }
    c.stdin(Stdio::null());
    c
}

fn run_json(data: &Path, args: &[&str]) -> Value {
    let out = bin()
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// `neuralcore serve` on a free loopback port, with the embedding model; its address.
fn start_server(data: &Path) -> (std::process::Child, String) {
    use std::io::BufRead;
    let models = neuralcore_models::testing::model_cache();
    let mut child = bin()
        .env("NEURALCORE_EMBEDDING_MODEL_DIR", models)
        .arg("--data-dir")
        .arg(data)
        .args(["serve", "--addr", "127.0.0.1:0", "--rate-per-minute", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server stopped before it listened")
            .unwrap();
        if let Some(rest) = line.strip_prefix("neuralcore serving http://") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, format!("http://{addr}"))
}

/// The Python with Playwright (`scripts/console-client.sh`), or `None` when the suite
/// runs without it (the test then says it was skipped).
fn console_python() -> Option<String> {
    let p = std::env::var("NEURALCORE_TEST_CONSOLE_PYTHON").ok();
    if p.is_none() {
        eprintln!(
            "skipped: NEURALCORE_TEST_CONSOLE_PYTHON is not set (scripts/test.sh sets it \
             through scripts/console-client.sh)"
        );
    }
    p
}

#[test]
fn the_web_console_works_in_a_real_browser_and_keeps_documents_inert_and_tenants_apart() {
    let Some(python) = console_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let key = |tenant: &str| {
        run_json(&data, &["--json", "tenants", "create", tenant]);
        run_json(
            &data,
            &[
                "--json", "keys", "create", "--tenant", tenant, "--scope", "write",
            ],
        )["key"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (user, other) = (key("acme"), key("globex"));
    let (mut server, base) = start_server(&data);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cmd = Command::new(python);
    cmd.arg(root.join("crates/cli/tests/clients/console.py"))
        .arg(&base)
        .arg(&user)
        .arg(&other)
        .arg(root.join("examples"))
        .arg(match std::env::var("NEURALCORE_CONSOLE_SCREENSHOTS") {
            Ok(dir) => root.join(dir),
            Err(_) => tmp.path().join("screenshots"),
        });
    if let Ok(chromium) = std::env::var("NEURALCORE_TEST_CHROMIUM") {
        cmd.env("NEURALCORE_TEST_CHROMIUM", chromium);
    }
    let out = cmd.output().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The first-event time is reported, not asserted.
    for line in stdout.lines().filter(|l| l.starts_with("first event")) {
        eprintln!("{line}");
    }
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
