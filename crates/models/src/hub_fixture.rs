//! A fixture server that speaks the Hugging Face hub's download protocol, on 127.0.0.1,
//! for tests: the hub itself cannot be reached from the machines this is built on.
//!
//! It serves `GET /api/models/{repo}/revision/{rev}` (the commit and file list),
//! `HEAD`/`GET /{repo}/resolve/{rev}/{file}` (an LFS file — `*.safetensors` — as a 302
//! to a second "storage" server with `X-Linked-Etag` = its SHA-256 and
//! `X-Linked-Size`; a small file inline with `ETag` = its git blob SHA-1) and ranged
//! `GET /blob/{sha256}` on the storage server, as the hub and its CDN do. Each
//! repository can misbehave in one scripted way ([`Fault`]). Every request is recorded.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha1::Sha1;
use sha2::{Digest, Sha256};

/// One way a repository misbehaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// None.
    None,
    /// Everything needs `Authorization: Bearer <token>` (a gated or private repo).
    Token(String),
    /// The storage server sends the first half of an LFS file and closes, once.
    TruncateOnce,
    /// The storage server sends an LFS file with one byte changed.
    Corrupt,
    /// Resolving any file redirects back and forth forever.
    RedirectLoop,
}

/// One revision of a repository.
#[derive(Debug, Clone)]
pub struct Revision {
    /// Its commit (40 hex digits).
    pub commit: String,
    /// Files by path.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// A repository: revisions by name (branches, tags) and how it misbehaves.
#[derive(Debug, Clone)]
pub struct Repo {
    /// `main` and any other names, each to a revision.
    pub revisions: BTreeMap<String, Revision>,
    /// Its fault.
    pub fault: Fault,
}

impl Repo {
    /// A repository whose `main` holds `files`; the commit is derived from them.
    pub fn new(files: BTreeMap<String, Vec<u8>>) -> Self {
        let mut h = Sha1::new();
        for (k, v) in &files {
            h.update(k.as_bytes());
            h.update(v);
        }
        let commit = hex::encode(h.finalize());
        Repo {
            revisions: BTreeMap::from([("main".to_string(), Revision { commit, files })]),
            fault: Fault::None,
        }
    }

    /// The files of a model folder on disk (every file under it).
    pub fn from_dir(dir: &std::path::Path) -> std::io::Result<Self> {
        let mut files = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d)? {
                let p = e?.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(rel) = p.strip_prefix(dir) {
                    let rel = rel.to_string_lossy().replace('\\', "/");
                    if rel != "neuralcore-model.json" {
                        files.insert(rel, std::fs::read(&p)?);
                    }
                }
            }
        }
        Ok(Self::new(files))
    }

    /// The same repository with a fault.
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = fault;
        self
    }

    /// The same repository with one more named revision.
    pub fn with_revision(mut self, name: &str, rev: Revision) -> Self {
        self.revisions.insert(name.to_string(), rev);
        self
    }

    /// The commit of `main`.
    pub fn main_commit(&self) -> String {
        self.revisions["main"].commit.clone()
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `hub` or `storage`.
    pub server: &'static str,
    /// Method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// `Authorization` header, if any.
    pub authorization: Option<String>,
    /// `Range` header, if any.
    pub range: Option<String>,
}

struct State {
    repos: BTreeMap<String, Repo>,
    seen: Mutex<Vec<Seen>>,
    body_bytes: AtomicU64,
    truncated: Mutex<Vec<String>>,
    storage: String,
}

/// The running fixture (the hub and its storage server, both on 127.0.0.1).
pub struct HubFixture {
    /// The hub's address (`HF_ENDPOINT`).
    pub endpoint: String,
    state: Arc<State>,
    stop: Arc<AtomicBool>,
}

fn git_sha1(bytes: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    hex::encode(h.finalize())
}

fn is_lfs(path: &str) -> bool {
    path.ends_with(".safetensors") || path.ends_with(".bin")
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl HubFixture {
    /// Serve `repos` (by id, `org/name`).
    pub fn start(repos: BTreeMap<String, Repo>) -> Self {
        let hub = TcpListener::bind("127.0.0.1:0").expect("bind");
        let storage = TcpListener::bind("127.0.0.1:0").expect("bind");
        let endpoint = format!("http://{}", hub.local_addr().expect("addr"));
        let state = Arc::new(State {
            repos,
            seen: Mutex::new(Vec::new()),
            body_bytes: AtomicU64::new(0),
            truncated: Mutex::new(Vec::new()),
            storage: format!("http://{}", storage.local_addr().expect("addr")),
        });
        let stop = Arc::new(AtomicBool::new(false));
        for (listener, name) in [(hub, "hub"), (storage, "storage")] {
            let state = state.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let state = state.clone();
                    std::thread::spawn(move || {
                        let _ = serve(conn, name, &state);
                    });
                }
            });
        }
        HubFixture {
            endpoint,
            state,
            stop,
        }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().expect("lock").clone()
    }

    /// Bytes of response bodies sent so far (file content and file lists).
    pub fn body_bytes(&self) -> u64 {
        self.state.body_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for HubFixture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loops so they see the flag.
        for addr in [&self.endpoint, &self.state.storage] {
            let _ = TcpStream::connect(addr.trim_start_matches("http://"));
        }
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes, then close (a truncated transfer).
    cut: Option<usize>,
}

impl Reply {
    fn status(status: u16, msg: &str) -> Self {
        Reply {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: format!("{{\"error\":\"{msg}\"}}").into_bytes(),
            cut: None,
        }
    }

    fn redirect(to: String) -> Self {
        Reply {
            status: 302,
            headers: vec![("Location".into(), to)],
            body: Vec::new(),
            cut: None,
        }
    }
}

fn serve(conn: TcpStream, server: &'static str, state: &State) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let seen = Seen {
        server,
        method: method.clone(),
        path: path.clone(),
        authorization: headers.get("authorization").cloned(),
        range: headers.get("range").cloned(),
    };
    state.seen.lock().expect("lock").push(seen.clone());
    let reply = if server == "hub" {
        hub_reply(state, &seen)
    } else {
        storage_reply(state, &seen)
    };
    let mut out = conn;
    let reason = match reply.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nConnection: close\r\n",
        reply.status
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !reply.headers.iter().any(|(k, _)| k == "Content-Length") {
        head.push_str(&format!("Content-Length: {}\r\n", reply.body.len()));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if method != "HEAD" {
        let n = reply.cut.unwrap_or(reply.body.len()).min(reply.body.len());
        out.write_all(&reply.body[..n])?;
        state.body_bytes.fetch_add(n as u64, Ordering::SeqCst);
    }
    out.flush()?;
    Ok(())
}

/// The repository id and the rest of a path, for `/{org}/{name}/{rest}` or
/// `/{name}/{rest}`.
fn split_repo<'a>(state: &'a State, path: &str) -> Option<(&'a str, &'a Repo, String)> {
    let p = path.trim_start_matches('/');
    let segs: Vec<&str> = p.splitn(3, '/').collect();
    if segs.len() >= 2 {
        let id = format!("{}/{}", segs[0], segs[1]);
        if let Some((k, r)) = state.repos.get_key_value(&id) {
            return Some((
                k.as_str(),
                r,
                segs.get(2).copied().unwrap_or("").to_string(),
            ));
        }
    }
    let (first, rest) = p.split_once('/')?;
    state
        .repos
        .get_key_value(first)
        .map(|(k, r)| (k.as_str(), r, rest.to_string()))
}

fn revision<'a>(repo: &'a Repo, rev: &str) -> Option<&'a Revision> {
    repo.revisions
        .get(rev)
        .or_else(|| repo.revisions.values().find(|r| r.commit == rev))
}

fn hub_reply(state: &State, seen: &Seen) -> Reply {
    let path = seen.path.split('?').next().unwrap_or("");
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let Some((id, repo, tail)) = split_repo(state, &format!("/{rest}")) else {
            return Reply::status(404, "Repository not found");
        };
        if let Fault::Token(t) = &repo.fault {
            if seen.authorization.as_deref() != Some(&format!("Bearer {t}")) {
                return Reply::status(401, "Invalid credentials");
            }
        }
        let Some(rev) = tail
            .strip_prefix("revision/")
            .and_then(|r| revision(repo, &decode(r)))
        else {
            return Reply::status(404, "Revision not found");
        };
        let siblings: Vec<serde_json::Value> = rev
            .files
            .keys()
            .map(|f| serde_json::json!({ "rfilename": f }))
            .collect();
        let body = serde_json::json!({ "id": id, "sha": rev.commit, "siblings": siblings });
        return Reply {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
            cut: None,
        };
    }
    let Some((id, repo, tail)) = split_repo(state, path) else {
        return Reply::status(404, "Repository not found");
    };
    let Some(rest) = tail.strip_prefix("resolve/") else {
        return Reply::status(404, "Not found");
    };
    let Some((rev, file)) = rest.split_once('/') else {
        return Reply::status(404, "Not found");
    };
    match &repo.fault {
        Fault::Token(t) if seen.authorization.as_deref() != Some(&format!("Bearer {t}")) => {
            return Reply::status(401, "Invalid credentials");
        }
        Fault::RedirectLoop => {
            // /resolve/<rev>/<file> -> /resolve/<rev>/<file>.again -> back.
            let to = match file.strip_suffix(".again") {
                Some(f) => format!("/{id}/resolve/{rev}/{f}"),
                None => format!("/{id}/resolve/{rev}/{file}.again"),
            };
            return Reply::redirect(to);
        }
        _ => {}
    }
    let Some(r) = revision(repo, &decode(rev)) else {
        return Reply::status(404, "Revision not found");
    };
    let file = decode(file);
    let Some(bytes) = r.files.get(&file) else {
        return Reply::status(404, "Entry not found");
    };
    let mut headers = vec![("X-Repo-Commit".to_string(), r.commit.clone())];
    if is_lfs(&file) {
        let sha = hex::encode(Sha256::digest(bytes));
        headers.push(("X-Linked-Etag".into(), format!("\"{sha}\"")));
        headers.push(("X-Linked-Size".into(), bytes.len().to_string()));
        headers.push((
            "Location".into(),
            format!("{}/blob/{id}/{sha}", state.storage),
        ));
        return Reply {
            status: 302,
            headers,
            body: Vec::new(),
            cut: None,
        };
    }
    headers.push(("ETag".into(), format!("\"{}\"", git_sha1(bytes))));
    Reply {
        status: 200,
        headers,
        body: bytes.clone(),
        cut: None,
    }
}

fn storage_reply(state: &State, seen: &Seen) -> Reply {
    let Some(rest) = seen.path.strip_prefix("/blob/") else {
        return Reply::status(404, "Not found");
    };
    let Some((id, sha)) = rest.rsplit_once('/') else {
        return Reply::status(404, "Not found");
    };
    let Some(repo) = state.repos.get(id) else {
        return Reply::status(404, "Not found");
    };
    let found = repo
        .revisions
        .values()
        .flat_map(|r| r.files.values())
        .find(|b| hex::encode(Sha256::digest(b)) == sha);
    let Some(bytes) = found else {
        return Reply::status(404, "Not found");
    };
    let mut body = bytes.clone();
    if repo.fault == Fault::Corrupt {
        let mid = body.len() / 2;
        body[mid] ^= 0xff;
    }
    let total = body.len();
    let from = seen
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.trim_end_matches('-').parse::<usize>().ok());
    let mut reply = match from {
        Some(f) if f >= total => return Reply::status(416, "Range not satisfiable"),
        Some(f) => Reply {
            status: 206,
            headers: vec![(
                "Content-Range".into(),
                format!("bytes {f}-{}/{total}", total - 1),
            )],
            body: body[f..].to_vec(),
            cut: None,
        },
        None => Reply {
            status: 200,
            headers: Vec::new(),
            body,
            cut: None,
        },
    };
    if repo.fault == Fault::TruncateOnce {
        let mut done = state.truncated.lock().expect("lock");
        if !done.contains(&seen.path) {
            done.push(seen.path.clone());
            reply.cut = Some(reply.body.len() / 2);
        }
    }
    reply
}
