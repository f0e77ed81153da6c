//! The MCP server with real clients: the official MCP Python SDK (`mcp` on PyPI) over
//! stdio (`neuralcore mcp`) and over streamable HTTP (`/mcp` on `neuralcore serve`, two
//! tenants and a read-only key), and the MCP Inspector's CLI (`@modelcontextprotocol/
//! inspector` on npm) over both; raw JSON-RPC lines for bad input.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{bin, client_python, model_cache, run_ok as run, start_server};

use serde_json::Value;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/mcp_client.py")
}

fn check(out: std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn mcp_python_sdk_over_stdio_calls_every_tool_resource_and_prompt_and_bad_input() {
    let Some(python) = client_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let out = Command::new(python)
        .arg(script())
        .args(["stdio", env!("CARGO_BIN_EXE_neuralcore")])
        .arg(&data)
        .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
        .output()
        .unwrap();
    let stdout = check(out);
    assert!(stdout.contains("stdio: ok"), "{stdout}");
    eprintln!("{stdout}");
}

/// Two tenants' write keys and tenant `a`'s read-only key on a fresh data dir.
fn tenants_and_keys(data: &Path) -> [String; 3] {
    run(data, &["-q", "tenants", "create", "a"]);
    run(data, &["-q", "tenants", "create", "b"]);
    [
        run(
            data,
            &["-q", "keys", "create", "--tenant", "a", "--scope", "write"],
        ),
        run(
            data,
            &["-q", "keys", "create", "--tenant", "b", "--scope", "write"],
        ),
        run(
            data,
            &["-q", "keys", "create", "--tenant", "a", "--scope", "read"],
        ),
    ]
}

#[test]
fn mcp_python_sdk_over_http_two_tenants_never_see_each_other_and_read_keys_only_read() {
    let Some(python) = client_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let [a, b, read] = tenants_and_keys(&data);
    let (mut server, base) = start_server(&data);
    let out = Command::new(python)
        .arg(script())
        .arg("http")
        .arg(format!("{base}/mcp"))
        .args([&a, &b, &read])
        .output()
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    let stdout = check(out);
    assert!(stdout.contains("http: ok"), "{stdout}");
}

/// The MCP Inspector's folder (`scripts/clients.sh` installs it), or `None`.
fn inspector() -> Option<PathBuf> {
    common::provided("NEURALCORE_TEST_MCP_INSPECTOR", "scripts/clients.sh").map(PathBuf::from)
}

/// `mcp-inspector --cli ARGS`: whether it succeeded (it fails on a tool error, after
/// printing the result) and the first JSON value it printed.
fn inspect_any(dir: &Path, catalog: &Path, args: &[&str]) -> (bool, Value) {
    let out = Command::new(dir.join("node_modules/.bin/mcp-inspector"))
        .arg("--cli")
        .args(args)
        .env("MCP_CATALOG_PATH", catalog)
        .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let first = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| {
            panic!(
                "no JSON from the Inspector: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    (out.status.success(), first)
}

/// [`inspect_any`] that must succeed.
fn inspect(dir: &Path, catalog: &Path, args: &[&str]) -> Value {
    let (ok, v) = inspect_any(dir, catalog, args);
    assert!(ok, "the Inspector failed: {v}");
    v
}

#[test]
fn mcp_inspector_cli_lists_and_calls_tools_over_stdio_and_http() {
    let Some(dir) = inspector() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let catalog = tmp.path().join("catalog.json");
    // stdio: the Inspector launches `neuralcore mcp` on a data dir with the examples.
    let local = tmp.path().join("local");
    run(
        &local,
        &[
            "-q",
            "ingest",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples")
                .to_str()
                .unwrap(),
        ],
    );
    let exe = env!("CARGO_BIN_EXE_neuralcore");
    let local_s = local.to_str().unwrap();
    let target = ["--", exe, "--data-dir", local_s, "-q", "mcp"];
    let listed = inspect(
        &dir,
        &catalog,
        &[&["--method", "tools/list"][..], &target].concat(),
    );
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 13, "{names:?}");
    assert!(names.contains(&"ask") && names.contains(&"memory_tiers"));
    let called = inspect(
        &dir,
        &catalog,
        &[
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "search",
                "--tool-arg",
                "query=what causes the tides",
                "k=3",
            ][..],
            &target,
        ]
        .concat(),
    );
    let hits = &called["structuredContent"]["hits"];
    assert!(
        hits[0]["text"].as_str().unwrap().contains("Moon"),
        "{called}"
    );
    // HTTP, with tenant `a`'s key: it sees its own collection only.
    let data = tmp.path().join("data");
    let [a, _, _] = tenants_and_keys(&data);
    let (mut server, base) = start_server(&data);
    let url = format!("{base}/mcp");
    let auth = format!("Authorization: Bearer {a}");
    let listed = inspect(
        &dir,
        &catalog,
        &["--method", "tools/list", "--header", &auth, "--", &url],
    );
    let resources = inspect(
        &dir,
        &catalog,
        &["--method", "resources/list", "--header", &auth, "--", &url],
    );
    let (ok, called) = inspect_any(
        &dir,
        &catalog,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "search",
            "--tool-arg",
            "query=tides",
            "--header",
            &auth,
            "--",
            &url,
        ],
    );
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(listed["tools"].as_array().unwrap().len(), 13, "{listed}");
    assert_eq!(
        resources["resources"][0]["uri"], "neuralcore://collections",
        "{resources}"
    );
    // Tenant `a` has no `default` collection: a tool error, not a dropped connection.
    assert!(!ok);
    assert_eq!(called["isError"], true, "{called}");
    assert!(
        called["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("not_found:"),
        "{called}"
    );
}

/// One JSON-RPC request of the 2026-07-28 protocol (stateless: each request carries its
/// version and capabilities).
fn rpc(id: u64, method: &str, params: Value) -> String {
    let mut params = params;
    params["_meta"] = serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    });
    serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// `neuralcore mcp` on `data` with `env`, spoken to line by line.
struct StdioMcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

impl StdioMcp {
    fn spawn(data: &Path, env: &[(&str, String)]) -> StdioMcp {
        let mut child = bin()
            .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("--data-dir")
            .arg(data)
            .args(["-q", "mcp"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        StdioMcp {
            child,
            stdin,
            stdout,
        }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Send a line and read the answer.
    fn ask(&mut self, line: &str) -> Value {
        self.send(line);
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("{e}: {l:?}"))
    }

    /// Call a tool: its result (`isError` set on a tool error).
    fn call(&mut self, id: u64, name: &str, arguments: Value) -> Value {
        let r = self.ask(&rpc(
            id,
            "tools/call",
            serde_json::json!({"name": name, "arguments": arguments}),
        ));
        r["result"].clone()
    }

    fn tool_names(&mut self, id: u64) -> Vec<String> {
        let r = self.ask(&rpc(id, "tools/list", serde_json::json!({})));
        r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Close stdin and check the server ends well.
    fn finish(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "exit {status:?}");
    }
}

#[test]
fn mcp_over_stdio_survives_garbage_lines_and_answers_bad_arguments_with_tool_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut mcp = StdioMcp::spawn(&data, &[]);
    // Lines that are not JSON-RPC do not end the connection.
    mcp.send("this is not json");
    mcp.send("{\"jsonrpc\": \"2.0\", \"id\": ");
    let found = mcp.ask(&rpc(1, "server/discover", serde_json::json!({})));
    assert!(
        found["result"]["supportedVersions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "2026-07-28"),
        "{found}"
    );
    assert_eq!(
        found["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "neuralcore"
    );
    let cases = [
        (
            serde_json::json!({"name": "search", "arguments": {"query": ""}}),
            "invalid_input: the query is empty",
        ),
        (
            serde_json::json!({"name": "search", "arguments": {"query": "x", "collection": "../x"}}),
            "invalid_input",
        ),
        (
            serde_json::json!({"name": "search", "arguments": {"query": "x", "bogus": 1}}),
            "unknown field `bogus`",
        ),
        (
            serde_json::json!({"name": "memory_get", "arguments": {"id": "nope"}}),
            "not_found",
        ),
        (
            serde_json::json!({"name": "ask", "arguments": {"question": "why?", "collection": "none"}}),
            "not_found",
        ),
    ];
    for (i, (params, want)) in cases.into_iter().enumerate() {
        let r = mcp.ask(&rpc(10 + i as u64, "tools/call", params.clone()));
        assert_eq!(r["result"]["isError"], true, "{params}: {r}");
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(want), "{params}: {text}");
    }
    let r = mcp.ask(&rpc(
        30,
        "tools/call",
        serde_json::json!({"name": "drop_tables", "arguments": {}}),
    ));
    assert!(
        r["error"]["message"].as_str().unwrap().contains("no tool"),
        "{r}"
    );
    let r = mcp.ask(&rpc(
        31,
        "resources/read",
        serde_json::json!({"uri": "file:///etc/passwd"}),
    ));
    assert!(r["error"]["message"].as_str().is_some(), "{r}");
    // URL ingest is off by default: not offered, and a call says how to turn it on.
    assert!(!mcp.tool_names(32).contains(&"ingest_url".to_string()));
    let r = mcp.call(
        33,
        "ingest_url",
        serde_json::json!({"url": "https://example.org/"}),
    );
    assert_eq!(r["isError"], true, "{r}");
    assert!(
        r["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("ingest_urls = true"),
        "{r}"
    );
    mcp.finish();
}

#[test]
fn mcp_fixture_ingest_url_adds_a_page_and_refuses_the_local_network() {
    use neuralcore_web::fixture::{FixtureServer, Reply};
    // Stands in for a web page (the live web cannot be reached here).
    let page = FixtureServer::start(|_| {
        Reply::html(
            "<html><head><title>Borrowing</title></head><body><main><p>The borrow checker \
             enforces that references never outlive the data they point to.</p></main>\
             </body></html>",
        )
    })
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut mcp = StdioMcp::spawn(
        &data,
        &[
            ("NEURALCORE_WEB_INGEST_URLS", "true".into()),
            (
                "NEURALCORE_WEB_ALLOW_ADDRESSES",
                format!("[\"127.0.0.1:{}\"]", page.port()),
            ),
        ],
    );
    assert!(mcp.tool_names(1).contains(&"ingest_url".to_string()));
    // The local network stays closed but for the one allowed address and port.
    for (i, (url, want)) in [
        ("http://127.0.0.1:6379/", "127.0.0.1 is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        // A name resolving to loopback, on a port that is not the allowed one.
        ("http://localhost:6380/", "localhost resolves to"),
    ]
    .into_iter()
    .enumerate()
    {
        let r = mcp.call(10 + i as u64, "ingest_url", serde_json::json!({"url": url}));
        assert_eq!(r["isError"], true, "{url}: {r}");
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(want), "{url}: {text}");
    }
    assert!(page.requests().is_empty(), "{:?}", page.requests());

    let url = format!("{}/borrowck", page.url());
    let r = mcp.call(
        20,
        "ingest_url",
        serde_json::json!({"url": url, "collection": "rust"}),
    );
    assert_ne!(r["isError"], true, "{r}");
    let job = r["structuredContent"]["id"].as_str().unwrap().to_string();
    let started = std::time::Instant::now();
    let done = loop {
        let s = mcp.call(21, "job_status", serde_json::json!({ "job": job }));
        let state = s["structuredContent"]["state"]
            .as_str()
            .unwrap()
            .to_string();
        if ["indexed", "failed", "cancelled"].contains(&state.as_str()) {
            break s;
        }
        assert!(started.elapsed().as_secs() < 120, "{s}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(done["structuredContent"]["state"], "indexed", "{done}");
    let hits = mcp.call(
        22,
        "search",
        serde_json::json!({"query": "borrow checker references", "collection": "rust"}),
    );
    let top = &hits["structuredContent"]["hits"][0];
    assert_eq!(top["title"], "Borrowing", "{hits}");
    assert_eq!(top["metadata"]["url"], url.as_str(), "{hits}");
    mcp.finish();
}
