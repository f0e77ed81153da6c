//! Secrets never leave where they were put (issue 20): an LLM API key, passwords in the
//! Redis and PostgreSQL URLs of the cache and the memory, and a server's API keys are
//! configured; the CLI runs its main commands (some of them failing against the
//! unreachable servers) and a server answers good and bad keys, all with logging at
//! `trace`; then everything they printed and every file they wrote in the data dir is
//! searched for each secret. The only places a secret may be are the config file the
//! test wrote and the one output of `keys create` that hands the key to its owner. With
//! the suite's Phoenix (`NEURALCORE_TEST_PHOENIX_URL`) every process also exports its
//! spans, sent with a secret header, and every span Phoenix stored is searched too.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::{bin, model_cache};

const LLM_KEY: &str = "sk-nc-secret-LLMKEY-7d1f0c";
const REDIS_PW: &str = "nc-secret-REDISPW-93ab";
const CACHE_PG_PW: &str = "nc-secret-PGPW-41cd";
const MEMORY_PG_PW: &str = "nc-secret-MEMPW-55ef";
const STORE_PG_PW: &str = "nc-secret-STOREPW-77ab";
const WRONG_KEY: &str = "nck_wrongwrongwrongwrongsecret";
const OTLP_TOKEN: &str = "nc-secret-OTLPTOKEN-24fa";

/// A port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// `neuralcore --data-dir data ARGS` with logging at trace; its stdout and stderr.
fn run(data: &Path, args: &[&str]) -> String {
    let out = bin()
        .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
        .env("NEURALCORE_LOG", "trace")
        .env_remove("OPENAI_API_KEY")
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    format!(
        "$ neuralcore {}\n{}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every file under `dir`, but `skip`, as bytes.
fn files(dir: &Path, skip: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p == skip {
            continue;
        }
        if p.is_dir() {
            files(&p, skip, out);
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn secrets_never_reach_logs_errors_reports_or_the_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // The real test LLM when the suite has it (the key rides along in its requests),
    // else a closed port (the key is sent nowhere, and every call fails).
    let llm = std::env::var("NEURALCORE_TEST_LLM_URL")
        .unwrap_or_else(|_| format!("http://127.0.0.1:{}/v1", closed_port()));
    let config = data.join("neuralcore.toml");
    let phoenix = std::env::var("NEURALCORE_TEST_PHOENIX_URL").ok();
    let project = format!("nc-secrets-{}", std::process::id());
    let telemetry = match &phoenix {
        Some(url) => format!(
            "\n[telemetry]\nenabled = true\nendpoint = \"{url}/v1/traces\"\n\
             project = \"{project}\"\nheaders = \"X-Nc-Token={OTLP_TOKEN}\"\n"
        ),
        None => String::new(),
    };
    std::fs::write(
        &config,
        format!(
            r#"{telemetry}
[llm]
base_url = "{llm}"
api_key = "{LLM_KEY}"
max_retries = 0
timeout_ms = 20000

[cache]
hot = "redis"
redis_url = "redis://:{REDIS_PW}@127.0.0.1:{redis}/"
cold = "postgres"
postgres_url = "postgres://nc:{CACHE_PG_PW}@127.0.0.1:{pg}/nc"
"#,
            redis = closed_port(),
            pg = closed_port(),
        ),
    )
    .unwrap();
    let memory_url = format!(
        "postgres://nc:{MEMORY_PG_PW}@127.0.0.1:{}/nc",
        closed_port()
    );
    let mut said = String::new();
    said += &run(&data, &["config", "show"]);
    said += &run(&data, &["--json", "config", "show"]);
    said += &run(&data, &["--json", "ingest", examples().to_str().unwrap()]);
    said += &run(&data, &["--json", "ask", "What causes the tides?"]);
    said += &run(&data, &["ask", "What causes the tides?", "--explain"]);
    said += &run(&data, &["--json", "search", "tides"]);
    said += &run(&data, &["cache", "stats"]);
    // The memory on an unreachable PostgreSQL: each command fails, and says why.
    for args in [
        &["memory", "add", "The deploy runs on Fridays."][..],
        &["memory", "search", "deploy"][..],
    ] {
        let out = bin()
            .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
            .env("NEURALCORE_LOG", "trace")
            .env("NEURALCORE_MEMORY_BACKEND", "postgres")
            .env("NEURALCORE_MEMORY_POSTGRES_URL", &memory_url)
            .arg("--data-dir")
            .arg(&data)
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} on an unreachable server");
        said += &String::from_utf8_lossy(&out.stdout);
        said += &String::from_utf8_lossy(&out.stderr);
    }
    // The document store on an unreachable PostgreSQL (in a data dir of its own, so
    // the password reaches no file but the config): each command fails, and says why.
    let store_data = tmp.path().join("store-data");
    let store_url = format!("postgres://nc:{STORE_PG_PW}@127.0.0.1:{}/nc", closed_port());
    for args in [
        &["ingest", examples().to_str().unwrap()][..],
        &["search", "tides"][..],
        &["db", "status"][..],
        &["--json", "db", "migrate"][..],
        &["config", "show"][..],
        &["--json", "config", "show"][..],
    ] {
        let out = bin()
            .env("NEURALCORE_LOG", "trace")
            .env("NEURALCORE_STORE_BACKEND", "postgres")
            .env("NEURALCORE_STORE_POSTGRES_URL", &store_url)
            .arg("--data-dir")
            .arg(&store_data)
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        if args.contains(&"config") {
            assert!(out.status.success(), "{args:?}: {text}");
        } else {
            assert!(!out.status.success(), "{args:?} on an unreachable server");
            assert!(text.contains("unavailable"), "{args:?}: {text}");
        }
        said += &String::from_utf8_lossy(&out.stdout);
        said += &text;
    }

    // A server with a key: asked with it, with a wrong one and with none.
    let created = bin()
        .arg("--data-dir")
        .arg(&data)
        .args(["--json", "keys", "create", "--scope", "write"])
        .output()
        .unwrap();
    let key = serde_json::from_slice::<serde_json::Value>(&created.stdout).unwrap()["key"]
        .as_str()
        .unwrap()
        .to_string();
    said += &run(&data, &["keys", "list"]);
    let mut server = bin()
        .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
        .env("NEURALCORE_LOG", "trace")
        .arg("--data-dir")
        .arg(&data)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = server.stdout.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        for l in BufReader::new(stdout).lines() {
            s += &l.unwrap_or_default();
            s.push('\n');
        }
        s
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = server.stderr.take().unwrap();
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        for l in BufReader::new(stderr).lines() {
            let l = l.unwrap_or_default();
            if let Some(rest) = l.strip_prefix("neuralcore serving http://") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
            s += &l;
            s.push('\n');
        }
        s
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server listens");
    let base = format!("http://{addr}");
    let call = |method: &str, path: &str, auth: Option<&str>, body: Option<serde_json::Value>| {
        let url = format!("{base}{path}");
        let mut req = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(k) = auth {
            req = req.header("Authorization", format!("Bearer {k}"));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let resp = match body {
            Some(b) => agent.run(
                req.header("Content-Type", "application/json")
                    .body(b.to_string())
                    .unwrap(),
            ),
            None => agent.run(req.body(()).unwrap()),
        }
        .unwrap();
        let status = resp.status().as_u16();
        let text = resp.into_body().read_to_string().unwrap_or_default();
        format!("{method} {path} → {status}\n{text}\n")
    };
    let ask = serde_json::json!({"question": "What causes the tides?"});
    let search = serde_json::json!({"query": "tides"});
    for auth in [Some(key.as_str()), Some(WRONG_KEY), None] {
        said += &call("POST", "/v1/ask", auth, Some(ask.clone()));
        said += &call("POST", "/v1/search", auth, Some(search.clone()));
        said += &call("GET", "/v1/collections", auth, None);
        said += &call("GET", "/v1/runs", auth, None);
        said += &call("GET", "/metrics", auth, None);
        said += &call("GET", "/v1/nowhere", auth, None);
    }
    // Let the server's log catch up before it is stopped.
    std::thread::sleep(Duration::from_millis(500));
    server.kill().unwrap();
    server.wait().unwrap();
    said += &out_thread.join().unwrap();
    said += &err_thread.join().unwrap();
    assert!(
        said.contains("POST /v1/ask → 200"),
        "the server answered the right key: {said:.4000}"
    );
    assert!(said.contains("→ 401"), "and refused the wrong one");

    let mut written = Vec::new();
    files(&data, &config, &mut written);
    if store_data.exists() {
        files(&store_data, &config, &mut written);
    }
    assert!(written.len() > 5, "the data dir holds the run's files");
    if let Some(url) = &phoenix {
        // The CLI's processes flushed their spans as they exited; the server's last
        // ones may have gone with its kill.
        let mut spans = String::new();
        for _ in 0..40 {
            spans = ureq::get(&format!("{url}/v1/projects/{project}/spans?limit=1000"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .unwrap_or_default();
            if spans.contains("\"ask\"") && spans.contains("POST /v1/ask") {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        assert!(
            spans.contains("\"ask\""),
            "no ask span reached Phoenix: {spans:.2000}"
        );
        said += &spans;
    }
    for secret in [
        OTLP_TOKEN,
        LLM_KEY,
        REDIS_PW,
        CACHE_PG_PW,
        MEMORY_PG_PW,
        STORE_PG_PW,
        key.as_str(),
        WRONG_KEY,
    ] {
        if let Some(at) = said.find(secret) {
            let from = said[..at].rfind("$ neuralcore").unwrap_or(0);
            panic!(
                "{secret} was printed:\n{}",
                &said[from..(at + 200).min(said.len())]
            );
        }
        for (path, bytes) in &written {
            assert!(
                !contains(bytes, secret),
                "{secret} is in {}",
                path.display()
            );
        }
    }
    // What a user sees instead: the URL with its password hidden.
    assert!(
        said.contains("127.0.0.1"),
        "the errors still say which server failed"
    );
}
