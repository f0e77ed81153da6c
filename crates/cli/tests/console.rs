//! The web console of `neuralcore serve` in a real headless Chromium: a server with keys
//! for two tenants, driven by `tests/clients/console.py` (Playwright over Debian's
//! chromium, from `scripts/console-client.sh`). The script signs in, uploads files and
//! watches their job, asks and opens a citation's span, signals a memory, checks that an
//! XSS probe stays text and that the other tenant's ids are not found, and saves
//! screenshots of each page: in a temporary folder, or with
//! `NEURALCORE_CONSOLE_SCREENSHOTS=docs/console` in the folder the README links (how
//! those were made), so a test run never changes the working tree.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::run_ok;

use serde_json::Value;

fn run_json(data: &Path, args: &[&str]) -> Value {
    let out = run_ok(data, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The Python with Playwright (`scripts/console-client.sh`), or `None` when the suite
/// runs without it (the test then says it was skipped).
fn console_python() -> Option<String> {
    common::provided(
        "NEURALCORE_TEST_CONSOLE_PYTHON",
        "scripts/console-client.sh",
    )
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
    let (mut server, base) = common::start_server_with(&data, &["--rate-per-minute", "0"]);
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
