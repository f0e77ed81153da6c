//! A scripted HTTP/1.1 fixture server on 127.0.0.1 for the client tests.
//!
//! Each request gets the next [`Reply`] of the script (the last one repeats). Every
//! connection is served on its own thread and closed after one response, so a slow reply
//! never holds up the next attempt. Requests are recorded for assertions.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// One scripted response.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Sent in order, with `pause` before each piece after the first.
    pub pieces: Vec<Vec<u8>>,
    /// Wait before sending anything (the status line included).
    pub delay: Duration,
    /// Wait between pieces.
    pub pause: Duration,
    /// Send `Content-Length` (else the body ends when the connection closes).
    pub content_length: bool,
}

impl Reply {
    /// A JSON body with `status`.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self::raw(status, "application/json", body.into().into_bytes())
    }

    /// Any body with a content type.
    pub fn raw(status: u16, content_type: &str, body: Vec<u8>) -> Self {
        Reply {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            pieces: vec![body],
            delay: Duration::ZERO,
            pause: Duration::ZERO,
            content_length: true,
        }
    }

    /// A server-sent-event stream sent as these pieces (close-delimited).
    pub fn sse(pieces: &[&str]) -> Self {
        Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            pieces: pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
            delay: Duration::ZERO,
            pause: Duration::from_millis(5),
            content_length: false,
        }
    }

    /// The same reply with one more header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same reply, sent after `delay`.
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same reply with `pause` between pieces.
    pub fn paced(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }
}

/// A chat completion body with `text` and usage.
pub fn completion(text: &str, prompt_tokens: u64, completion_tokens: u64) -> String {
    serde_json::json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "fixture-model",
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

/// One `data:` event of a stream with a content delta.
pub fn delta_event(text: &str) -> String {
    let chunk = serde_json::json!({
        "object": "chat.completion.chunk",
        "model": "fixture-model",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]
    });
    format!("data: {chunk}\n\n")
}

/// What the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Header names lowercased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }
}

/// The running server; stops accepting when dropped.
pub struct FixtureServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    hits: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    accept: Option<thread::JoinHandle<()>>,
}

impl FixtureServer {
    /// Serves `script` (at least one reply; the last repeats).
    pub fn start(script: Vec<Reply>) -> Self {
        assert!(!script.is_empty());
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let hits = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(script);
        let accept = {
            let (stop, hits, requests) = (stop.clone(), hits.clone(), requests.clone());
            thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let (hits, requests, script) = (hits.clone(), requests.clone(), script.clone());
                    thread::spawn(move || {
                        let _ = serve(conn, &hits, &requests, &script);
                    });
                }
            })
        };
        FixtureServer {
            addr,
            stop,
            hits,
            requests,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Requests answered so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for FixtureServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(
    conn: TcpStream,
    hits: &AtomicUsize,
    requests: &Mutex<Vec<Recorded>>,
    script: &[Reply],
) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(()); // the wake-up connection from Drop
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_owned();
    let path = parts.next().unwrap_or_default().to_owned();
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            break;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((n, v)) = l.split_once(':') {
            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body)?;
    let n = hits.fetch_add(1, Ordering::SeqCst);
    requests.lock().unwrap().push(Recorded {
        method,
        path,
        headers,
        body,
    });
    let reply = &script[n.min(script.len() - 1)];

    thread::sleep(reply.delay);
    let mut out = conn;
    let mut head = format!("HTTP/1.1 {} Fixture\r\nConnection: close\r\n", reply.status);
    for (n, v) in &reply.headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    if reply.content_length {
        let total: usize = reply.pieces.iter().map(Vec::len).sum();
        head.push_str(&format!("Content-Length: {total}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.flush()?;
    for (i, piece) in reply.pieces.iter().enumerate() {
        if i > 0 {
            thread::sleep(reply.pause);
        }
        out.write_all(piece)?;
        out.flush()?;
    }
    Ok(())
}

/// A port on 127.0.0.1 that nothing listens on (bound, read, released).
pub fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}
