//! What the CLI's integration tests share: the binary without the user's settings,
//! the embedding model, a `neuralcore serve` on a free port, the real clients' Python.
#![allow(dead_code)] // each test file uses its own part of it

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// The `neuralcore` binary. Tests never inherit a user's settings, but for the
/// instruction set the suite runs the encoder on (`NEURALCORE_ISA=avx2 scripts/test.sh`).
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_neuralcore"));
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

/// Run the CLI on `data`; its stdout (trimmed), or a panic with its stderr.
pub fn run_ok(data: &Path, args: &[&str]) -> String {
    run_ok_env(data, args, &[])
}

/// [`run_ok`] with environment variables set for the run.
pub fn run_ok_env(data: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = bin()
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The folder holding the test embedding model (`neuralcore models pull`).
pub fn model_cache() -> String {
    neuralcore_models::testing::model_cache()
        .display()
        .to_string()
}

/// `neuralcore serve` on a free loopback port with the embedding model and `args`: the
/// child and its base URL. Its stderr is drained so it never blocks on a full pipe.
pub fn start_server_with(data: &Path, args: &[&str]) -> (Child, String) {
    let mut child = bin()
        .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
        .arg("--data-dir")
        .arg(data)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the server stopped before it listened")
            .unwrap();
        if let Some(rest) = line.strip_prefix("neuralcore serving http://") {
            break rest.split_whitespace().next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, format!("http://{addr}"))
}

/// [`start_server_with`] no more arguments.
pub fn start_server(data: &Path) -> (Child, String) {
    start_server_with(data, &[])
}

/// The path in `var` (set by `scripts/test.sh` from `script`), or `None` when the
/// suite runs without it: the test then says it was skipped.
pub fn provided(var: &str, script: &str) -> Option<String> {
    let p = std::env::var(var).ok();
    if p.is_none() {
        eprintln!("skipped: {var} is not set (scripts/test.sh sets it through {script})");
    }
    p
}

/// The Python with the real clients (`scripts/clients.sh`).
pub fn client_python() -> Option<String> {
    provided("NEURALCORE_TEST_PYTHON", "scripts/clients.sh")
}

/// The spans of `trace` in Phoenix's `project`, once one of them is named `root` and
/// their number has stopped growing (60 s at most).
pub fn phoenix_trace(
    phoenix: &str,
    project: &str,
    trace: &str,
    root: &str,
) -> Vec<serde_json::Value> {
    let start = std::time::Instant::now();
    let mut last = usize::MAX;
    loop {
        let url = format!("{phoenix}/v1/projects/{project}/spans?limit=1000");
        let spans: Vec<serde_json::Value> = match ureq::get(&url).call() {
            Ok(mut r) => r.body_mut().read_json::<serde_json::Value>().unwrap()["data"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|s| s["context"]["trace_id"] == trace)
                .collect(),
            Err(_) => Vec::new(),
        };
        if spans.iter().any(|s| s["name"] == root) && spans.len() == last {
            return spans;
        }
        last = spans.len();
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "Phoenix never showed the trace {trace} with {root} in {project}: {spans:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
}
