//! `nc-bench load`: the server as its users load it (issue 20's load, soak and overload
//! runs). It starts the real `neuralcore serve` as a child process on 127.0.0.1 over a
//! data dir (use a scratch copy: the run ingests documents and writes memories), then
//! `--clients` threads send a mix of searches, asks, small uploads (ingest jobs) and
//! memory calls (add, search, signal, in turn) for `--secs` seconds, each over its own
//! kept-alive connection, as fast as answers come or at a steady `--rate` (requests per
//! second over all clients). A client refused with 429/503 waits its `Retry-After`
//! before its next request, as a well-behaved client does.
//!
//! Printed (JSON lines): every `--sample-secs` the server process's RSS and open file
//! descriptors with the window's requests, errors and p99; at the end, per operation
//! the requests, the answers by status and p50/p99 of each status; the ingest jobs'
//! outcome once the queue has drained; and the RSS growth from the first sample to the
//! last (the soak's leak check). With `--warmup-secs W` the load runs W seconds more
//! before the soak proper, and growth is counted from the first sample after them: the
//! caches fill to their bounds during the warm-up. Each sample also gives the data
//! dir's size on disk (`data_mib`, and `mind_mib` for the embedded Mind). With serve
//! arguments that make the server small (`--serve-args "--max-concurrency 2
//! --max-queue 4"`) and many clients, it is the overload run: the 503s' latency says
//! whether excess load is refused at once or queued until timeouts.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http::{pct, Conn};
use crate::workload::{parse_arg, Workload};

/// The operations of the mix, in the order of `--mix`.
const OPS: [&str; 4] = ["search", "ask", "ingest", "memory"];

/// One answered (or failed) request.
struct Sample {
    op: &'static str,
    /// The HTTP status, or 0 when the connection failed.
    status: u16,
    ms: f64,
    /// Seconds since the start, when it finished.
    at: f64,
}

/// The server child, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    /// SIGTERM (the server finishes what it is doing and closes its stores), then
    /// SIGKILL if it is still there after 30 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(
    bin: &PathBuf,
    w: &Workload,
    model_dir: Option<&str>,
    serve_args: &[String],
) -> Result<Server, String> {
    let mut cmd = Command::new(bin);
    cmd.arg("--data-dir")
        .arg(&w.data_dir)
        .args(["serve", "--addr", "127.0.0.1:0"])
        .args(serve_args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(m) = model_dir {
        cmd.env("NEURALCORE_EMBEDDING_MODEL_DIR", m);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines() {
            let Ok(l) = l else { break };
            if let Some(rest) = l.strip_prefix("neuralcore serving http://") {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            } else {
                // The server's own warnings, passed on.
                eprintln!("server: {l}");
            }
        }
    });
    let mut server = Server {
        child,
        addr: "127.0.0.1:0".parse().unwrap(),
    };
    let addr = rx
        .recv_timeout(Duration::from_secs(120))
        .map_err(|_| "the server did not start within 120 s")?;
    server.addr = addr
        .parse()
        .map_err(|e| format!("server address {addr}: {e}"))?;
    Ok(server)
}

/// The process's resident memory (KiB) and open file descriptors, from /proc.
fn proc_stats(pid: u32) -> (u64, usize) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (rss, fds)
}

/// Per operation: requests, answers by status, p50/p99 per status and over all.
fn summarize(samples: &[&Sample]) -> Value {
    let mut out = serde_json::Map::new();
    for op in OPS {
        let mine: Vec<&&Sample> = samples.iter().filter(|s| s.op == op).collect();
        if mine.is_empty() {
            continue;
        }
        let mut by_status: BTreeMap<u16, Vec<f64>> = BTreeMap::new();
        for s in &mine {
            by_status.entry(s.status).or_default().push(s.ms);
        }
        let mut all: Vec<f64> = mine.iter().map(|s| s.ms).collect();
        let statuses: serde_json::Map<String, Value> = by_status
            .into_iter()
            .map(|(st, mut v)| {
                let key = if st == 0 {
                    "connection_failed".to_string()
                } else {
                    st.to_string()
                };
                (
                    key,
                    json!({"n": v.len(), "p50_ms": pct(&mut v, 0.5), "p99_ms": pct(&mut v, 0.99)}),
                )
            })
            .collect();
        out.insert(
            op.into(),
            json!({"requests": mine.len(), "p50_ms": pct(&mut all, 0.5),
                "p99_ms": pct(&mut all, 0.99), "status": statuses}),
        );
    }
    Value::Object(out)
}

/// The path and body of client `c`'s `n`-th request, an `op` about the query `q`; a
/// memory call is the `memory_step`-th: an add, a search, then a signal on the client's
/// `last` memory.
fn request(
    op: &str,
    c: usize,
    n: usize,
    q: &str,
    collection: &str,
    memory_step: usize,
    last: Option<&String>,
) -> (String, Value) {
    match op {
        "search" => (
            "/v1/search".into(),
            json!({"query": q, "collection": collection, "k": 10}),
        ),
        "ask" => (
            "/v1/ask".into(),
            json!({"question": q, "collection": collection}),
        ),
        "ingest" => {
            let text = format!(
                "Load note {c}-{n}. A reader asked: {q} This note was written by client {c} \
                 during the load run."
            );
            (
                format!("/v1/collections/{collection}/documents"),
                // A name of 20 per client, uploaded again and again: a source replaced,
                // so the collection does not grow through a soak.
                json!({"documents": [{"name": format!("load-{c}-{}", n % 20),
                    "title": format!("Load note {c}-{n}"), "text": text}]}),
            )
        }
        _ => match (memory_step % 3, last) {
            (2, _) => ("/v1/memories/search".into(), json!({"query": q, "k": 5})),
            (0, Some(id)) => {
                let signal = if n.is_multiple_of(2) {
                    "used"
                } else {
                    "confirmed"
                };
                (
                    format!("/v1/memories/{id}/signal"),
                    json!({ "signal": signal }),
                )
            }
            _ => {
                let text =
                    format!("Client {c} noted while asking \"{q}\" that the answer was useful.");
                (
                    "/v1/memories".into(),
                    json!({"text": text, "kind": "fact", "session": format!("load-{c}")}),
                )
            }
        },
    }
}

/// The string at a JSON pointer of a response body, if any.
fn str_at(body: &[u8], pointer: &str) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    v.pointer(pointer)?.as_str().map(str::to_string)
}

/// Whether `status` is the answer `op` gives when it succeeds.
fn ok_status(op: &str, status: u16) -> bool {
    match op {
        "ingest" => status == 202,
        _ => status == 200 || status == 201,
    }
}

pub fn bench_load(args: &[String]) -> Result<(), String> {
    let w = Workload::parse(args)?;
    let (mut clients, mut secs, mut rate, mut sample_secs) = (50usize, 60u64, 0.0f64, 10u64);
    let mut warmup = 0u64;
    let mut mix = [6usize, 2, 1, 1];
    let mut serve_args: Vec<String> = Vec::new();
    let mut bin = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("neuralcore");
    let mut model_dir: Option<String> = None;
    for (a, v) in &w.rest {
        match a.as_str() {
            "--clients" => clients = parse_arg(a, v)?,
            "--secs" => secs = parse_arg(a, v)?,
            "--rate" => rate = parse_arg(a, v)?,
            "--sample-secs" => sample_secs = parse_arg::<u64>(a, v)?.max(1),
            "--warmup-secs" => warmup = parse_arg(a, v)?,
            "--serve-args" => serve_args = v.split_whitespace().map(str::to_string).collect(),
            "--bin" => bin = v.into(),
            "--server-model-dir" => model_dir = Some(v.clone()),
            "--mix" => {
                let parts: Vec<usize> = v
                    .split(',')
                    .map(|p| p.trim().parse().map_err(|e| format!("--mix {v}: {e}")))
                    .collect::<Result<_, _>>()?;
                if parts.len() != 4 || parts.iter().sum::<usize>() == 0 {
                    return Err("--mix takes four weights: search,ask,ingest,memory".into());
                }
                mix.copy_from_slice(&parts);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let texts = Arc::new(w.queries(w.n)?);
    let collection = w.collection.clone();
    let server = start_server(&bin, &w, model_dir.as_deref(), &serve_args)?;
    let (addr, pid) = (server.addr, server.child.id());
    let isa = neuralcore_models::isa().name();

    // Warm the server (model, indexes) before the clock starts.
    let mut conn = Conn::new(addr).map_err(|e| e.to_string())?;
    for q in texts.iter().take(10) {
        let body = json!({"query": q, "collection": collection, "k": 10}).to_string();
        let (st, b) = conn.post("/v1/search", &body).map_err(|e| e.to_string())?;
        if st != 200 {
            return Err(format!(
                "warm-up search answered {st}: {}",
                String::from_utf8_lossy(&b)
            ));
        }
    }
    drop(conn);

    let wheel: Vec<&'static str> = OPS
        .iter()
        .zip(mix)
        .flat_map(|(op, n)| std::iter::repeat_n(*op, n))
        .collect();
    let wheel = Arc::new(wheel);
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let jobs: Arc<Mutex<Vec<String>>> = Arc::default();
    let start = Instant::now();
    let mut handles = Vec::new();
    for c in 0..clients {
        let (stop, next, samples, jobs, texts, wheel) = (
            stop.clone(),
            next.clone(),
            samples.clone(),
            jobs.clone(),
            texts.clone(),
            wheel.clone(),
        );
        let collection = collection.clone();
        handles.push(std::thread::spawn(move || {
            let mut conn = Conn::new(addr).ok();
            // Each client's memories: added, then searched for and signalled.
            let mut memories: Vec<String> = Vec::new();
            let mut memory_step = 0usize;
            // A steady rate: this client's share, its requests spread evenly.
            let interval = (rate > 0.0).then(|| Duration::from_secs_f64(clients as f64 / rate));
            let offset = interval.map(|i| i.mul_f64(c as f64 / clients as f64));
            let mut due = Instant::now() + offset.unwrap_or_default();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                // At a steady rate, latency counts from when the request was due, not
                // from when a late client got round to sending it (no coordinated
                // omission: a stall shows in p99 rather than hiding in fewer requests).
                let mut scheduled = None;
                if let Some(i) = interval {
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    scheduled = Some(due);
                    due += i;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let op = wheel[i % wheel.len()];
                let q = &texts[i % texts.len()];
                n += 1;
                if op == "memory" {
                    memory_step += 1;
                }
                let (path, body) = request(op, c, n, q, &collection, memory_step, memories.last());
                let t = scheduled.unwrap_or_else(Instant::now);
                let res = match conn.as_mut() {
                    Some(k) => k.post(&path, &body.to_string()),
                    None => Err(std::io::Error::other("no connection")),
                };
                let ms = t.elapsed().as_secs_f64() * 1e3;
                let status = match res {
                    Ok((st, b)) => {
                        if st == 202 && op == "ingest" {
                            jobs.lock().unwrap().extend(str_at(&b, "/id"));
                        }
                        if st == 201 && path == "/v1/memories" {
                            memories.extend(str_at(&b, "/memory/id"));
                        }
                        st
                    }
                    Err(_) => 0,
                };
                if status == 0 {
                    // A broken connection is replaced, after a pause (a server that is
                    // gone is not hammered, nor the figures flooded).
                    std::thread::sleep(Duration::from_millis(100));
                    conn = Conn::new(addr).ok();
                }
                // A client that honours Retry-After, as well-behaved ones do.
                let retry_after = conn.as_ref().and_then(|k| k.retry_after);
                samples.lock().unwrap().push(Sample {
                    op,
                    status,
                    ms,
                    at: start.elapsed().as_secs_f64(),
                });
                if let (Some(secs), true) = (retry_after, matches!(status, 429 | 503)) {
                    let until = Instant::now() + Duration::from_secs(secs);
                    while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    if interval.is_some() {
                        due = due.max(Instant::now());
                    }
                }
            }
        }));
    }

    // Sample the server every `sample_secs` until the end.
    let mut rss_fd: Vec<(f64, u64, usize)> = Vec::new();
    let mut window_from = 0.0f64;
    let end = start + Duration::from_secs(warmup + secs);
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep((end - now).min(Duration::from_secs(sample_secs)));
        let at = start.elapsed().as_secs_f64();
        let (rss, fds) = proc_stats(pid);
        rss_fd.push((at, rss, fds));
        let mib = |b: u64| (b as f64 / (1 << 20) as f64 * 10.0).round() / 10.0;
        let (data, mind) = (
            mib(dir_bytes(&w.data_dir)),
            mib(std::fs::metadata(w.data_dir.join("mind.redb")).map_or(0, |m| m.len())),
        );
        let s = samples.lock().unwrap();
        let mut win: Vec<f64> = Vec::new();
        let mut errors = 0usize;
        for x in s.iter().filter(|x| x.at > window_from && x.at <= at) {
            win.push(x.ms);
            errors += usize::from(!ok_status(x.op, x.status));
        }
        drop(s);
        println!(
            "{}",
            json!({"bench": "load-sample", "isa": isa, "at_s": at.round(), "warmup": at <= warmup as f64,
                "rss_mib": rss as f64 / 1024.0, "data_mib": data, "mind_mib": mind, "fds": fds, "requests": win.len(), "errors": errors, "p99_ms": pct(&mut win, 0.99)})
        );
        window_from = at;
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let elapsed = start.elapsed().as_secs_f64();

    // Let the ingest jobs finish, then count how they ended.
    let drain = Instant::now();
    let ids = jobs.lock().unwrap().clone();
    let mut conn = Conn::new(addr).map_err(|e| e.to_string())?;
    let mut states: BTreeMap<String, usize> = BTreeMap::new();
    for id in &ids {
        let state = loop {
            let Ok((st, b)) = conn.get(&format!("/v1/jobs/{id}")) else {
                conn = Conn::new(addr).map_err(|e| e.to_string())?;
                break "no answer".to_string();
            };
            let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
            let state = v["state"].as_str().unwrap_or("unknown").to_string();
            if st != 200 || matches!(state.as_str(), "indexed" | "failed" | "cancelled") {
                break if st == 200 {
                    state
                } else {
                    format!("http {st}")
                };
            }
            if drain.elapsed() > Duration::from_secs(600) {
                break format!("still {state} after 600 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        *states.entry(state).or_default() += 1;
    }
    let drain_s = drain.elapsed().as_secs_f64();
    let (rss_end, fds_end) = proc_stats(pid);

    let all = samples.lock().unwrap();
    let refs: Vec<&Sample> = all.iter().collect();
    let errors = all.iter().filter(|s| !ok_status(s.op, s.status)).count();
    let shed: Vec<&Sample> = all.iter().filter(|s| s.status == 503).collect();
    let mut errors_by_status: BTreeMap<String, usize> = BTreeMap::new();
    for s in all.iter().filter(|s| !ok_status(s.op, s.status)) {
        *errors_by_status
            .entry(format!("{} {}", s.op, s.status))
            .or_default() += 1;
    }
    let mut shed_ms: Vec<f64> = shed.iter().map(|s| s.ms).collect();
    // Growth over the soak: from its first sample after the warm-up to the last.
    let first = rss_fd
        .iter()
        .find(|x| x.0 > warmup as f64)
        .or(rss_fd.first())
        .copied()
        .unwrap_or((0.0, rss_end, fds_end));
    let last = rss_fd.last().copied().unwrap_or((0.0, rss_end, fds_end));
    let growth = if first.1 > 0 {
        last.1 as f64 / first.1 as f64 - 1.0
    } else {
        f64::NAN
    };
    let rss_max = rss_fd.iter().map(|x| x.1).max().unwrap_or(rss_end);
    let fds_max = rss_fd.iter().map(|x| x.2).max().unwrap_or(fds_end);
    println!(
        "{}",
        json!({"bench": "load", "isa": isa, "clients": clients, "secs": secs, "warmup_secs": warmup, "rate": rate,
            "mix": {"search": mix[0], "ask": mix[1], "ingest": mix[2], "memory": mix[3]},
            "serve_args": serve_args, "requests": all.len(), "per_sec": all.len() as f64 / elapsed,
            "errors_by_status": errors_by_status,
            "errors": errors, "shed_503": shed.len(), "errors_other_than_503": errors - shed.len(), "shed_p50_ms": pct(&mut shed_ms, 0.5),
            "shed_p99_ms": pct(&mut shed_ms, 0.99),
            "ops": summarize(&refs),
            "jobs": {"submitted": ids.len(), "states": states, "drain_s": drain_s},
            "rss_mib": {"first": first.1 as f64 / 1024.0, "last": last.1 as f64 / 1024.0,
                "max": rss_max as f64 / 1024.0, "after_drain": rss_end as f64 / 1024.0,
                "growth_first_to_last": growth},
            "fds": {"first": first.2, "last": last.2, "max": fds_max, "after_drain": fds_end}})
    );
    Ok(())
}

/// Bytes of the files under `dir` (0 for what cannot be read: files come and go).
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}
