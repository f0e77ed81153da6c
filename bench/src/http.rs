//! `nc-bench http`: what the HTTP API costs over calling the application core in process,
//! measured side by side in one run on the same data (issue 14's targets):
//!
//! 1. one search at a time: `POST /v1/search` over a kept-alive connection against
//!    `App::search` in process, p50 each and the difference (target: ≤ 0.5 ms);
//! 2. the first server-sent event of an ask (`accepted`), from the request's last byte
//!    (target: ≤ 5 ms);
//! 3. `--clients` concurrent clients for `--secs` seconds of mixed search and ask (no
//!    LLM) over HTTP, against the same number of threads calling the core in process:
//!    errors (target: 0), throughput ratio (target: ≥ 80%), p50 and p99 of each
//!    (`--secs 0` skips it).
//!
//! The server runs in this process on 127.0.0.1 with the defaults of `neuralcore serve`
//! (no keys, no rate limit), so both sides use the same engine and caches.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use neuralcore_app::{App, AskOptions, KeyStore, OpenOptions, SearchRequest, Tenant};
use neuralcore_mind::Mind;
use neuralcore_server::{ServeOptions, State};
use serde_json::json;

use crate::workload::{parse_arg, Workload};

pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// A kept-alive HTTP/1.1 connection that sends JSON and reads a Content-Length body.
pub(crate) struct Conn {
    addr: SocketAddr,
    r: BufReader<TcpStream>,
    /// The last response's `Retry-After`, in seconds.
    pub(crate) retry_after: Option<u64>,
}

impl Conn {
    pub(crate) fn new(addr: SocketAddr) -> std::io::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            addr,
            r: BufReader::new(s),
            retry_after: None,
        })
    }

    /// GET `path`; the status and the body.
    pub(crate) fn get(&mut self, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", self.addr);
        self.r.get_mut().write_all(req.as_bytes())?;
        self.read()
    }

    /// POST `body` to `path`; the status and the body.
    pub(crate) fn post(&mut self, path: &str, body: &str) -> std::io::Result<(u16, Vec<u8>)> {
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        self.r.get_mut().write_all(req.as_bytes())?;
        self.read()
    }

    fn read(&mut self) -> std::io::Result<(u16, Vec<u8>)> {
        let mut line = String::new();
        self.r.read_line(&mut line)?;
        let status = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut len = 0usize;
        self.retry_after = None;
        loop {
            let mut h = String::new();
            self.r.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                } else if k.eq_ignore_ascii_case("retry-after") {
                    self.retry_after = v.trim().parse().ok();
                }
            }
        }
        let mut body = vec![0; len];
        std::io::Read::read_exact(&mut self.r, &mut body)?;
        Ok((status, body))
    }
}

pub fn bench_http(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let (mut clients, mut secs, mut ask_every) = (50usize, 60u64, 5usize);
    for (a, v) in &w.rest {
        match a.as_str() {
            "--clients" => clients = parse_arg(a, v)?,
            "--secs" => secs = parse_arg(a, v)?,
            "--ask-every" => ask_every = parse_arg(a, v)?,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let texts = w.queries(w.n)?;
    let collection = w.collection.clone();
    let app = App::open(
        &w.data_dir,
        w.config,
        OpenOptions {
            mind: Some(Mind::memory()),
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())?;
    let keys = KeyStore::open(&w.data_dir).map_err(|e| e.to_string())?;
    let opts = ServeOptions {
        addr: "127.0.0.1:0".parse().unwrap(),
        rate_per_minute: 0,
        ..Default::default()
    };
    let state = Arc::new(State::new(app, keys, opts).map_err(|e| e.to_string())?);
    let app = state.app().clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let server_state = state.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let _ = rt.block_on(neuralcore_server::serve(server_state, |a| {
            let _ = tx.send(a);
        }));
    });
    let addr: SocketAddr = rx
        .recv_timeout(Duration::from_secs(60))
        .map_err(|_| "the server did not start")?;
    let tenant = Tenant::default_tenant();
    let req = |q: &str| SearchRequest {
        k: Some(10),
        ..SearchRequest::new(q, collection.as_str())
    };
    let isa = neuralcore_models::isa().name();
    // Warm both paths (model, indexes, connections).
    let mut conn = Conn::new(addr).map_err(|e| e.to_string())?;
    for q in texts.iter().take(20) {
        app.search(&tenant, &req(q)).map_err(|e| e.to_string())?;
        let body = json!({"query": q, "collection": collection, "k": 10}).to_string();
        conn.post("/v1/search", &body).map_err(|e| e.to_string())?;
    }

    // 1. One search at a time; the query cache cleared before each so both embed.
    let (mut local, mut http, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for (i, q) in texts.iter().enumerate() {
        let body = json!({"query": q, "collection": collection, "k": 10}).to_string();
        for first_local in [i % 2 == 0, i % 2 != 0] {
            app.engine().clear_query_cache();
            if first_local {
                let t = Instant::now();
                app.search(&tenant, &req(q)).map_err(|e| e.to_string())?;
                local.push(t.elapsed().as_secs_f64() * 1e3);
            } else {
                let t = Instant::now();
                let (status, _) = conn.post("/v1/search", &body).map_err(|e| e.to_string())?;
                http.push(t.elapsed().as_secs_f64() * 1e3);
                if status != 200 {
                    return Err(format!("search answered {status}"));
                }
            }
        }
        diff.push(http[http.len() - 1] - local[local.len() - 1]);
    }
    // Where the difference goes: encoding the response, and a round trip that does no work.
    let (mut encode, mut rtt) = (Vec::new(), Vec::new());
    for q in texts.iter() {
        let res = app.search(&tenant, &req(q)).map_err(|e| e.to_string())?;
        let t = Instant::now();
        let bytes = serde_json::to_vec(&res).map_err(|e| e.to_string())?;
        encode.push(t.elapsed().as_secs_f64() * 1e3);
        std::hint::black_box(bytes);
        let t = Instant::now();
        conn.get("/healthz").map_err(|e| e.to_string())?;
        rtt.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (lp50, hp50) = (pct(&mut local, 0.5), pct(&mut http, 0.5));
    println!(
        "{}",
        json!({"bench": "http-search", "isa": isa, "n": texts.len(),
            "in_process_p50_ms": lp50, "http_p50_ms": hp50, "overhead_p50_ms": hp50 - lp50,
            "paired_overhead_p50_ms": pct(&mut diff, 0.5),
            "encode_response_p50_ms": pct(&mut encode, 0.5), "healthz_round_trip_p50_ms": pct(&mut rtt, 0.5),
            "in_process_p99_ms": pct(&mut local, 0.99), "http_p99_ms": pct(&mut http, 0.99)})
    );

    // 2. The first event of an ask stream, from the request's last byte.
    let mut first = Vec::new();
    for q in texts.iter().take(100) {
        let body = json!({"question": q, "collection": collection}).to_string();
        let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let head = format!(
            "POST /v1/ask HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
        let t = Instant::now();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        loop {
            line.clear();
            if r.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("the stream ended before its first event".into());
            }
            if line.starts_with("data:") {
                break;
            }
        }
        first.push(t.elapsed().as_secs_f64() * 1e3);
        if !line.contains("\"accepted\"") {
            return Err(format!("the first event is not accepted: {line}"));
        }
        // Read to the end so the loop finishes before the next one.
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut r, &mut rest);
    }
    println!(
        "{}",
        json!({"bench": "http-ask-first-event", "isa": isa, "n": first.len(),
            "p50_ms": pct(&mut first, 0.5), "p99_ms": pct(&mut first, 0.99)})
    );

    // 3. Mixed load: every `ask_every`-th request an ask, the rest searches.
    if secs == 0 {
        return Ok(());
    }
    let texts = Arc::new(texts);
    let run = |over_http: bool| -> Result<serde_json::Value, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicUsize::new(0));
        let errors = Arc::new(AtomicUsize::new(0));
        let lat: Arc<Mutex<(Vec<f64>, Vec<f64>)>> = Arc::default();
        let start = Instant::now();
        let mut handles = Vec::new();
        for _ in 0..clients {
            let (stop, next, errors, lat, texts) = (
                stop.clone(),
                next.clone(),
                errors.clone(),
                lat.clone(),
                texts.clone(),
            );
            let app = app.clone();
            let collection = collection.clone();
            handles.push(std::thread::spawn(move || {
                let mut conn = over_http.then(|| Conn::new(addr).ok()).flatten();
                let (mut s_ms, mut a_ms) = (Vec::new(), Vec::new());
                let tenant = Tenant::default_tenant();
                while !stop.load(Ordering::Relaxed) {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let q = &texts[i % texts.len()];
                    let ask = ask_every > 0 && i % ask_every == ask_every - 1;
                    let t = Instant::now();
                    let ok = match (&mut conn, ask) {
                        (Some(c), false) => {
                            let body =
                                json!({"query": q, "collection": collection, "k": 10}).to_string();
                            matches!(c.post("/v1/search", &body), Ok((200, _)))
                        }
                        (Some(c), true) => {
                            let body = json!({"question": q, "collection": collection}).to_string();
                            matches!(c.post("/v1/ask", &body), Ok((200, _)))
                        }
                        (None, false) => app
                            .search(
                                &tenant,
                                &SearchRequest {
                                    k: Some(10),
                                    ..SearchRequest::new(q, collection.as_str())
                                },
                            )
                            .is_ok(),
                        (None, true) => {
                            let opts = AskOptions {
                                collection: collection.clone(),
                                ..Default::default()
                            };
                            let run = neuralcore_app::new_run_id("bench");
                            app.ask(&tenant, &run, q, &opts, false).is_ok()
                        }
                    };
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    if !ok {
                        errors.fetch_add(1, Ordering::Relaxed);
                        if over_http {
                            // A broken connection is replaced.
                            conn = Conn::new(addr).ok();
                        }
                    }
                    if ask {
                        a_ms.push(ms);
                    } else {
                        s_ms.push(ms);
                    }
                }
                let mut l = lat.lock().unwrap();
                l.0.extend(s_ms);
                l.1.extend(a_ms);
            }));
        }
        std::thread::sleep(Duration::from_secs(secs));
        stop.store(true, Ordering::Relaxed);
        for h in handles {
            let _ = h.join();
        }
        let elapsed = start.elapsed().as_secs_f64();
        let mut l = lat.lock().unwrap();
        let total = l.0.len() + l.1.len();
        Ok(json!({
            "requests": total, "errors": errors.load(Ordering::Relaxed),
            "per_sec": total as f64 / elapsed,
            "search_p50_ms": pct(&mut l.0, 0.5), "search_p99_ms": pct(&mut l.0, 0.99),
            "ask_p50_ms": pct(&mut l.1, 0.5), "ask_p99_ms": pct(&mut l.1, 0.99),
        }))
    };
    let inproc = run(false)?;
    let over = run(true)?;
    let ratio = over["per_sec"].as_f64().unwrap_or(0.0) / inproc["per_sec"].as_f64().unwrap_or(1.0);
    println!(
        "{}",
        json!({"bench": "http-load", "isa": isa, "clients": clients, "secs": secs,
            "ask_every": ask_every, "in_process": inproc, "http": over,
            "throughput_ratio": ratio})
    );
    Ok(())
}
