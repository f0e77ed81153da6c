//! `nc-bench mcp`: what MCP over stdio costs over calling the application core in
//! process, side by side in one run on the same data (issue 17's target: a `search`
//! round trip ≤ 2 ms above the in-process search).
//!
//! The MCP handler of `neuralcore mcp` serves newline-delimited JSON-RPC over a Unix
//! socket pair in this process (what a pipe to a child's stdin and stdout carries,
//! without a second process holding the data dir's lock), so both sides share one
//! engine and its caches. Each query runs both ways, in alternating order, with the
//! query cache cleared before each so both embed; the paired difference is reported.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Instant;

use neuralcore_app::{App, OpenOptions, SearchRequest, Tenant};
use neuralcore_mind::Mind;
use serde_json::{json, Value};

use crate::http::pct;
use crate::workload::Workload;

/// A JSON-RPC client over one stream: a request line out, a response line back.
struct Client {
    w: UnixStream,
    r: BufReader<UnixStream>,
    id: u64,
}

impl Client {
    fn call(&mut self, method: &str, mut params: Value) -> Result<Value, String> {
        self.id += 1;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "nc-bench", "version": "1"},
        });
        let line = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        writeln!(self.w, "{line}").map_err(|e| e.to_string())?;
        let mut out = String::new();
        self.r.read_line(&mut out).map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
        if v.get("error").is_some() || v["result"]["isError"] == true {
            return Err(format!("{method} failed: {v}"));
        }
        Ok(v)
    }
}

pub fn bench_mcp(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    if let Some((a, _)) = w.rest.first() {
        return Err(format!("unknown argument {a}"));
    }
    let texts = w.queries(w.n)?;
    let collection = w.collection.clone();
    let app = Arc::new(
        App::open(
            &w.data_dir,
            w.config,
            OpenOptions {
                mind: Some(Mind::memory()),
                ..Default::default()
            },
        )
        .map_err(|e| e.to_string())?,
    );
    let (ours, theirs) = UnixStream::pair().map_err(|e| e.to_string())?;
    let server_app = app.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            theirs.set_nonblocking(true).expect("nonblocking");
            let s = tokio::net::UnixStream::from_std(theirs).expect("socket");
            let (r, w) = s.into_split();
            let _ = neuralcore_mcp::serve_io(server_app, r, w).await;
        });
    });
    let mut client = Client {
        w: ours.try_clone().map_err(|e| e.to_string())?,
        r: BufReader::new(ours),
        id: 0,
    };
    client.call("server/discover", json!({}))?;
    let tenant = Tenant::default_tenant();
    let req = |q: &str| SearchRequest {
        k: Some(10),
        ..SearchRequest::new(q, collection.as_str())
    };
    let args = |q: &str| json!({"name": "search", "arguments": {"query": q, "collection": collection, "k": 10}});
    let isa = neuralcore_models::isa().name();
    for q in texts.iter().take(20) {
        app.search(&tenant, &req(q)).map_err(|e| e.to_string())?;
        client.call("tools/call", args(q))?;
    }
    let (mut local, mut mcp, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for (i, q) in texts.iter().enumerate() {
        for first_local in [i % 2 == 0, i % 2 != 0] {
            app.engine().clear_query_cache();
            let t = Instant::now();
            if first_local {
                app.search(&tenant, &req(q)).map_err(|e| e.to_string())?;
                local.push(t.elapsed().as_secs_f64() * 1e3);
            } else {
                client.call("tools/call", args(q))?;
                mcp.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        diff.push(mcp[mcp.len() - 1] - local[local.len() - 1]);
    }
    // A round trip that does no work (`server/discover`): what the protocol itself costs.
    let mut ping = Vec::new();
    for _ in 0..texts.len() {
        let t = Instant::now();
        client.call("server/discover", json!({}))?;
        ping.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (lp50, mp50) = (pct(&mut local, 0.5), pct(&mut mcp, 0.5));
    println!(
        "{}",
        json!({"bench": "mcp-stdio-search", "isa": isa, "n": texts.len(),
            "in_process_p50_ms": lp50, "mcp_p50_ms": mp50, "overhead_p50_ms": mp50 - lp50,
            "paired_overhead_p50_ms": pct(&mut diff, 0.5), "discover_round_trip_p50_ms": pct(&mut ping, 0.5),
            "in_process_p99_ms": pct(&mut local, 0.99), "mcp_p99_ms": pct(&mut mcp, 0.99)})
    );
    Ok(())
}
