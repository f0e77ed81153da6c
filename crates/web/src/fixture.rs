//! A tiny HTTP/1.1 server on `127.0.0.1` for tests: it answers each request with what a
//! handler returns, so a test can play SearxNG (see [`searxng_json`]) and the pages its
//! results point to, without a network. Other crates use it to test the VERIFY stage.
//!
//! ```
//! use neuralcore_web::fixture::{searxng_json, FixtureServer, Reply};
//! use neuralcore_web::{WebConfig, WebSearch};
//!
//! let server = FixtureServer::start(|req| match req.path.as_str() {
//!     "/search" => Reply::json(searxng_json(&[("/page", "A page", "snippet")], &req.base)),
//!     "/page" => Reply::html("<title>T</title><p>Water boils at 100 °C.</p>"),
//!     _ => Reply::status(404, "not found"),
//! })
//! .unwrap();
//! let ws = WebSearch::new(WebConfig {
//!     searxng_url: server.url(),
//!     // The pages are on 127.0.0.1, which page fetches refuse by default.
//!     allow_private_urls: true,
//!     ..WebConfig::default()
//! })
//! .unwrap();
//! let results = ws.search("boiling point").unwrap();
//! assert_eq!(results[0].text.as_deref(), Some("Water boils at 100 °C."));
//! ```
//!
//! Each connection is served on its own thread and closed after one answer
//! (`Connection: close`). Dropping the server stops accepting; answers still being
//! delayed finish on their own threads.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// Largest request head read, in bytes.
const MAX_HEAD: usize = 64 * 1024;

/// A request as the handler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`...
    pub method: String,
    /// The request target as sent (`/search?q=a%20b&format=json`).
    pub target: String,
    /// The target's path, still percent-encoded (`/search`).
    pub path: String,
    /// Query parameters, percent- and `+`-decoded, in order.
    pub query: Vec<(String, String)>,
    /// `http://127.0.0.1:PORT` of this server, for building links back to it.
    pub base: String,
    /// The request's headers (names in lower case), in order.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of query parameter `name`.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// `Content-Type` header (none when empty).
    pub content_type: String,
    /// Body.
    pub body: Vec<u8>,
    /// Wait this long before sending anything.
    pub delay: Duration,
    /// Send these bytes instead of a well-formed response (for hostile-server tests).
    pub raw: Option<Vec<u8>>,
    /// More headers (name, value).
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// `200` with a body and content type.
    pub fn with_type(content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Reply {
            status: 200,
            content_type: content_type.to_owned(),
            body: body.into(),
            delay: Duration::ZERO,
            raw: None,
            headers: Vec::new(),
        }
    }

    /// `200 application/json`.
    pub fn json(body: impl Into<Vec<u8>>) -> Self {
        Self::with_type("application/json", body)
    }

    /// `200 text/html; charset=utf-8`.
    pub fn html(body: impl Into<Vec<u8>>) -> Self {
        Self::with_type("text/html; charset=utf-8", body)
    }

    /// `200 text/plain; charset=utf-8`.
    pub fn text(body: impl Into<Vec<u8>>) -> Self {
        Self::with_type("text/plain; charset=utf-8", body)
    }

    /// A status with a plain-text body.
    pub fn status(status: u16, body: &str) -> Self {
        Reply {
            status,
            ..Self::text(body)
        }
    }

    /// These bytes as the whole response, as is.
    pub fn raw(bytes: impl Into<Vec<u8>>) -> Self {
        Reply {
            raw: Some(bytes.into()),
            ..Self::text("")
        }
    }

    /// The same reply, sent after `delay`.
    pub fn delayed(self, delay: Duration) -> Self {
        Reply { delay, ..self }
    }

    /// The same reply with one more header.
    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

type Handler = dyn Fn(&Request) -> Reply + Send + Sync;

/// The running server; stops accepting when dropped.
pub struct FixtureServer {
    port: u16,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl FixtureServer {
    /// Start on a free port of `127.0.0.1`, answering with `handler`.
    pub fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let handler: Arc<Handler> = Arc::new(handler);
        let (stop2, requests2) = (stop.clone(), requests.clone());
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = conn else { continue };
                let (handler, requests) = (handler.clone(), requests2.clone());
                thread::spawn(move || {
                    // Errors (a client that hung up) only end this connection.
                    let _ = serve(stream, port, &*handler, &requests);
                });
            }
        });
        Ok(FixtureServer {
            port,
            stop,
            requests,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Request targets received so far, in arrival order.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(
    mut stream: TcpStream,
    port: u16,
    handler: &Handler,
    requests: &Mutex<Vec<String>>,
) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 || head.len() > MAX_HEAD {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    if let Ok(mut r) = requests.lock() {
        r.push(target.clone());
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let request = Request {
        method,
        path: path.to_owned(),
        query: query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (decode_param(k), decode_param(v))
            })
            .collect(),
        target,
        base: format!("http://127.0.0.1:{port}"),
        headers: lines
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect(),
    };
    let reply = handler(&request);
    if !reply.delay.is_zero() {
        thread::sleep(reply.delay);
    }
    if let Some(raw) = &reply.raw {
        stream.write_all(raw)?;
        return stream.flush();
    }
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reason(reply.status),
        reply.body.len()
    );
    if !reply.content_type.is_empty() {
        out.push_str(&format!("Content-Type: {}\r\n", reply.content_type));
    }
    for (name, value) in &reply.headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    stream.write_all(out.as_bytes())?;
    stream.write_all(&reply.body)?;
    stream.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        _ => "Status",
    }
}

/// Decode `%XX` escapes and `+` (as a space); invalid UTF-8 is replaced.
pub fn decode_param(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An OpenAI-compatible chat completion body: one choice saying `text` (finished with
/// `stop`) from `model`, with its token usage.
pub fn chat_completion(
    model: &str,
    text: &str,
    prompt_tokens: u64,
    completion_tokens: u64,
) -> String {
    serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": "stop"
        }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens
        }
    })
    .to_string()
}

/// A slow LLM: a chat-completion endpoint that answers `text` after `delay`, and a
/// receiver told of each call as it arrives, so a test knows a call is in flight.
pub fn slow_llm(
    text: &str,
    delay: std::time::Duration,
) -> io::Result<(FixtureServer, std::sync::mpsc::Receiver<()>)> {
    let (called_tx, called) = std::sync::mpsc::channel::<()>();
    let called_tx = Mutex::new(called_tx);
    let body = chat_completion("m", text, 50, 12);
    let server = FixtureServer::start(move |_| {
        let _ = called_tx.lock().map(|tx| tx.send(()));
        Reply::json(body.clone()).delayed(delay)
    })?;
    Ok((server, called))
}

/// A SearxNG JSON answer holding `results` (url, title, content), in the shape SearxNG
/// 2025 sends (`engine`, `engines`, `score`, `category`, `positions`...). A URL starting
/// with `/` is made absolute with `base`.
pub fn searxng_json(results: &[(&str, &str, &str)], base: &str) -> String {
    let results: Vec<serde_json::Value> = results
        .iter()
        .enumerate()
        .map(|(i, (url, title, content))| {
            let url = if url.starts_with('/') {
                format!("{base}{url}")
            } else {
                (*url).to_owned()
            };
            serde_json::json!({
                "url": url,
                "title": title,
                "content": content,
                "engine": "fixture",
                "engines": ["fixture"],
                "positions": [i + 1],
                "score": 1.0 / (i as f64 + 1.0),
                "category": "general",
                "template": "default.html",
                "publishedDate": null,
                "thumbnail": "",
            })
        })
        .collect();
    serde_json::json!({
        "query": "fixture",
        "number_of_results": 0,
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": [],
    })
    .to_string()
}
