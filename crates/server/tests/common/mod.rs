//! What the HTTP tests share: a server over a real data dir and the real model, and a
//! raw HTTP/1.1 client.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use neuralcore_app::{App, KeyStore, OpenOptions, Tenant};
use neuralcore_engine::Config;
use neuralcore_server::{ServeOptions, State};
use serde_json::Value;

/// A response: status, lower-case headers, body.
pub struct Resp {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// A problem+json error of `kind`.
    pub fn problem(&self, status: u16, kind: &str) -> Value {
        assert_eq!(
            self.status,
            status,
            "{}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.headers.get("content-type").map(String::as_str),
            Some("application/problem+json")
        );
        let v = self.json();
        assert_eq!(v["type"], format!("urn:neuralcore:problem:{kind}"), "{v}");
        assert_eq!(v["status"], status);
        v
    }
}

pub fn read_head(r: &mut impl BufRead) -> (u16, HashMap<String, String>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status: u16 = line.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
    let mut headers = HashMap::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    (status, headers)
}

pub fn read_body(r: &mut impl BufRead, headers: &HashMap<String, String>) -> Vec<u8> {
    let mut body = Vec::new();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = headers.get("content-length").and_then(|v| v.parse().ok()) {
        body.resize(n, 0);
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    body
}

/// One request over a fresh connection.
pub fn raw(addr: SocketAddr, request: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    s.write_all(request).unwrap();
    let mut r = BufReader::new(s);
    let (status, headers) = read_head(&mut r);
    let body = read_body(&mut r, &headers);
    Resp {
        status,
        headers,
        body,
    }
}

pub fn req(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> Resp {
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut r = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(k) = key {
        r.push_str(&format!("Authorization: Bearer {k}\r\n"));
    }
    if !body.is_empty() {
        r.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    r.push_str("\r\n");
    r.push_str(&body);
    raw(addr, r.as_bytes())
}

/// A JSON-RPC message to the MCP endpoint (stateless: no session needed), with `key`
/// when given.
#[allow(dead_code)]
pub fn mcp_post(addr: SocketAddr, key: Option<&str>, msg: &Value) -> Resp {
    let body = msg.to_string();
    let auth = key
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    let r = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    raw(addr, r.as_bytes())
}

/// Poll a job until it is over.
#[allow(dead_code)]
pub fn wait_job(addr: SocketAddr, key: Option<&str>, id: &str) -> Value {
    let start = Instant::now();
    loop {
        let j = req(addr, "GET", &format!("/v1/jobs/{id}"), key, None).json();
        if ["indexed", "failed", "cancelled"].contains(&j["state"].as_str().unwrap_or("")) {
            return j;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "job stuck: {j}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub struct Server {
    pub addr: SocketAddr,
    pub _tmp: tempfile::TempDir,
}

pub fn write(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), text).unwrap();
}

/// A server over a data dir holding `acme`'s and `globex`'s `docs`, and (with keys)
/// the keys `make_keys` creates.
pub fn server(opts: ServeOptions, make_keys: impl FnOnce(&KeyStore)) -> Server {
    server_configured(opts, |_| {}, make_keys)
}

/// [`server`] with settings of its own.
pub fn server_configured(
    opts: ServeOptions,
    configure: impl FnOnce(&mut Config),
    make_keys: impl FnOnce(&KeyStore),
) -> Server {
    // The server's warnings and errors go to the test's output: a 500's detail is in
    // the log only, and a CI failure must show it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_test_writer()
        .try_init();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut config = Config::default();
    config.embedding.model_dir = neuralcore_models::testing::model_cache()
        .display()
        .to_string();
    configure(&mut config);
    let app = App::open(
        &data,
        config,
        OpenOptions {
            mind: Some(neuralcore_mind::Mind::memory()),
            ..Default::default()
        },
    )
    .unwrap();
    let src = tmp.path().join("src");
    write(
        &src.join("acme"),
        "launch.md",
        "# Launch\n\nThe acme rocket launches on the ninth of March from Kourou.\n",
    );
    write(
        &src.join("acme"),
        "press.md",
        "# Press\n\nAcme confirms its rocket launches on the ninth of March, from Kourou.\n",
    );
    write(
        &src.join("globex"),
        "plan.md",
        "# Plan\n\nGlobex builds a volcano lair near the coast of Cyprus.\n",
    );
    for t in ["acme", "globex"] {
        app.ingest(&Tenant::new(t).unwrap(), &[src.join(t)], "docs", &mut ())
            .unwrap();
    }
    app.ingest(
        &Tenant::default_tenant(),
        &[src.join("acme")],
        "docs",
        &mut (),
    )
    .unwrap();
    let keys = KeyStore::open(&data).unwrap();
    make_keys(&keys);
    let state = Arc::new(State::new(app, keys, opts).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(neuralcore_server::serve(state, |a| tx.send(a).unwrap()))
            .unwrap();
    });
    let addr = rx.recv_timeout(Duration::from_secs(30)).unwrap();
    Server { addr, _tmp: tmp }
}

pub fn loopback() -> ServeOptions {
    ServeOptions {
        addr: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    }
}

/// Tenants `acme` and `globex`, each with a read-write key: their keys by tenant.
#[allow(dead_code)]
pub fn acme_and_globex(ks: &neuralcore_app::KeyStore) -> HashMap<String, String> {
    let mut made = HashMap::new();
    for t in ["acme", "globex"] {
        ks.create_tenant(t).unwrap();
        let (k, _) = ks.create_key(t, neuralcore_app::Scope::Write, "").unwrap();
        made.insert(t.to_string(), k);
    }
    made
}
