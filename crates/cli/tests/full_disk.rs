//! A full disk under a running `neuralcore serve` (issue 14): the data dir is a small
//! tmpfs, mounted in a user and mount namespace of the server's own (`unshare`), so the
//! test runs as root or not and never leaves a mount behind. The test fills the disk
//! with a ballast file (reached through `/proc/<pid>/root`) and checks the server
//! answers clearly and loses nothing: an upload that cannot be staged is a 503
//! `storage_full` problem and leaves no staged file; a job whose commit finds the disk
//! full ends `failed` and says so; what was committed before stays searchable; once
//! there is room again uploads work; and after a `kill -9` a server restarted on the
//! same disk finds everything as it was.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Size of the tmpfs: the stores open and a first small upload commits.
const DISK_MB: u64 = 16;

/// The model cache holding all-MiniLM-L6-v2 (pulled by scripts/test.sh).
fn model_cache() -> String {
    neuralcore_models::testing::model_cache()
        .display()
        .to_string()
}

/// The servers of one test: a `sh` in its own namespaces that mounts the tmpfs on
/// `data`, runs a first server (its pid in `pid_file`) and, once that one is gone, a
/// second on the same disk.
struct Servers {
    sh: Child,
    /// The servers' stderr, line by line (a thread keeps reading it, so they never block
    /// on a full pipe).
    lines: Receiver<String>,
    /// Every line the servers wrote so far (for failure messages).
    log: Vec<String>,
    data: PathBuf,
    pid_file: PathBuf,
}

impl Servers {
    fn start(tmp: &Path) -> Servers {
        let data = tmp.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let pid_file = tmp.join("server.pid");
        let script = format!(
            r#"mount -t tmpfs -o size={DISK_MB}m tmpfs "$NC_DATA" || {{ echo "full_disk: cannot mount a tmpfs" >&2; exit 97; }}
"$NC_BIN" --data-dir "$NC_DATA" serve --addr 127.0.0.1:0 &
echo $! > "$NC_PID"
wait
echo "full_disk: restarting" >&2
exec "$NC_BIN" --data-dir "$NC_DATA" serve --addr 127.0.0.1:0"#
        );
        let mut cmd = Command::new("unshare");
        // Tests never inherit a user's settings, but for the instruction set the suite
        // runs the encoder on.
        for (k, _) in std::env::vars() {
            if k.starts_with("NEURALCORE_") && k != "NEURALCORE_ISA" {
                cmd.env_remove(k);
            }
        }
        let mut sh = cmd
            .args(["--user", "--map-root-user", "--mount", "sh", "-c", &script])
            .env("NC_BIN", env!("CARGO_BIN_EXE_neuralcore"))
            .env("NC_DATA", &data)
            .env("NC_PID", &pid_file)
            .env("NEURALCORE_EMBEDDING_MODEL_DIR", model_cache())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `unshare` (util-linux): {e}"));
        let stderr = BufReader::new(sh.stderr.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Servers {
            sh,
            lines,
            log: Vec::new(),
            data,
            pid_file,
        }
    }

    /// The address of the next server to listen.
    fn next_server(&mut self) -> String {
        loop {
            let line = match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no server listened in 60 s:\n{}", self.log.join("\n"))
                }
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "the server stopped before it listened. A tmpfs must be mountable in a \
                     user and mount namespace (`unshare --user --map-root-user --mount`: user \
                     namespaces enabled, no seccomp/AppArmor rule against them). Its output:\n{}",
                    self.log.join("\n")
                ),
            };
            self.log.push(line.clone());
            if let Some(rest) = line.strip_prefix("neuralcore serving http://") {
                return format!("http://{}", rest.split_whitespace().next().unwrap());
            }
        }
    }

    /// The data dir as the test sees it: through the namespace of the `sh`.
    fn disk(&self) -> PathBuf {
        Path::new(&format!("/proc/{}/root", self.sh.id()))
            .join(self.data.strip_prefix("/").unwrap())
    }

    /// The first server's pid.
    fn first_pid(&self) -> u32 {
        let start = Instant::now();
        loop {
            if let Ok(s) = std::fs::read_to_string(&self.pid_file) {
                if let Ok(pid) = s.trim().parse() {
                    return pid;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(10), "no pid file");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        // The first server, when a failed test left it running (its pid is checked to
        // still be that server).
        if let Ok(pid) = std::fs::read_to_string(&self.pid_file) {
            let pid = pid.trim();
            let ours = std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&*self.data.to_string_lossy()));
            if ours {
                let _ = Command::new("kill")
                    .args(["-KILL", pid])
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let _ = self.sh.kill();
        let _ = self.sh.wait();
    }
}

/// An answer: status, content type, `Retry-After`, body as JSON (`null` when not JSON).
struct Answer {
    status: u16,
    content_type: String,
    retry_after: Option<String>,
    body: Value,
}

struct Http {
    agent: ureq::Agent,
    base: String,
    /// Every status seen, with its request.
    seen: Vec<(u16, String)>,
}

impl Http {
    fn new(base: String) -> Http {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build();
        Http {
            agent: ureq::Agent::new_with_config(config),
            base,
            seen: Vec::new(),
        }
    }

    fn call(&mut self, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Answer {
        let url = format!("{}{path}", self.base);
        let mut resp = match (method, body) {
            ("GET", None) => self.agent.get(&url).call(),
            ("POST", Some((ctype, bytes))) => self
                .agent
                .post(&url)
                .header("content-type", ctype)
                .send(&bytes[..]),
            _ => unreachable!(),
        }
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let header = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type").unwrap_or_default();
        let retry_after = header("retry-after");
        let status = resp.status().as_u16();
        let bytes = resp.body_mut().read_to_vec().unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        self.seen.push((status, format!("{method} {path}")));
        Answer {
            status,
            content_type,
            retry_after,
            body,
        }
    }

    fn get(&mut self, path: &str) -> Answer {
        self.call("GET", path, None)
    }

    fn post_json(&mut self, path: &str, body: Value) -> Answer {
        self.call(
            "POST",
            path,
            Some(("application/json", serde_json::to_vec(&body).unwrap())),
        )
    }

    /// One file as `multipart/form-data`.
    fn post_file(&mut self, path: &str, name: &str, bytes: &[u8]) -> Answer {
        let boundary = "----neuralcore-full-disk";
        let mut body = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: text/plain\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(bytes);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let ctype = format!("multipart/form-data; boundary={boundary}");
        self.call("POST", path, Some((&ctype, body)))
    }

    /// Upload texts as JSON; the job when accepted.
    fn upload_text(&mut self, name: &str, text: &str) -> Answer {
        self.post_json(
            "/v1/collections/notes/documents",
            json!({"documents": [{"name": name, "text": text}]}),
        )
    }

    /// The job once it is over.
    fn wait_job(&mut self, id: &str) -> Value {
        let start = Instant::now();
        loop {
            let a = self.get(&format!("/v1/jobs/{id}"));
            assert_eq!(a.status, 200, "{}", a.body);
            let state = a.body["state"].as_str().unwrap().to_string();
            if ["indexed", "failed", "cancelled"].contains(&state.as_str()) {
                return a.body;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "job stuck in {state}: {}",
                a.body
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The titles of the hits of `query` in `notes`.
    fn search(&mut self, query: &str) -> Vec<String> {
        let a = self.post_json(
            "/v1/search",
            json!({"query": query, "collection": "notes", "k": 10}),
        );
        assert_eq!(a.status, 200, "search {query:?}: {}", a.body);
        a.body["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["title"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The ids of the sources of `notes`.
    fn sources(&mut self) -> Vec<String> {
        let a = self.get("/v1/collections/notes/sources");
        assert_eq!(a.status, 200, "{}", a.body);
        let mut ids: Vec<String> = a.body["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    }

    /// /healthz and /readyz answer 200.
    fn alive(&mut self) {
        for p in ["/healthz", "/readyz"] {
            let a = self.get(p);
            assert_eq!(a.status, 200, "{p}: {}", a.body);
        }
    }
}

/// Fill the disk of `dir` with `<dir>/ballast`, then give back `free` bytes of it.
fn fill_leaving(dir: &Path, free: u64) {
    let path = dir.join("ballast");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let block = vec![b'x'; 64 * 1024];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    let len = f.metadata().unwrap().len();
    f.set_len(len.saturating_sub(free)).unwrap();
}

/// The names in `dir` (none when it does not exist).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A 503 `storage_full` problem that says the disk is full and names no path.
fn assert_storage_full(a: &Answer, data: &Path) {
    assert_eq!(a.status, 503, "{}", a.body);
    assert_eq!(a.content_type, "application/problem+json");
    assert_eq!(
        a.body["type"], "urn:neuralcore:problem:storage_full",
        "{}",
        a.body
    );
    assert_eq!(a.body["status"], 503);
    assert!(a.retry_after.is_some(), "no Retry-After");
    let detail = a.body["detail"].as_str().unwrap();
    assert!(
        detail.contains("disk") && detail.contains("full"),
        "{detail}"
    );
    assert!(
        !detail.contains('/') && !detail.contains(&*data.to_string_lossy()),
        "the detail names a path: {detail}"
    );
}

#[test]
fn a_full_disk_during_upload_and_ingest_answers_503_and_loses_nothing() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let mut servers = Servers::start(tmp.path());
    let base = servers.next_server();
    let disk = servers.disk();
    let mounts = std::fs::read_to_string(format!("/proc/{}/mountinfo", servers.sh.id())).unwrap();
    assert!(
        mounts.lines().any(
            |l| l.contains(&format!(" {} ", servers.data.display())) && l.contains(" - tmpfs ")
        ),
        "the data dir is not the tmpfs:\n{mounts}"
    );
    let mut http = Http::new(base);

    // A first document, committed while there is room.
    let first = "The lighthouse keeper of Harbour Nine logs the tide every morning.";
    let a = http.upload_text("first", first);
    assert_eq!(a.status, 202, "{}", a.body);
    let job = http.wait_job(a.body["id"].as_str().unwrap());
    assert_eq!(job["state"], "indexed", "{job}");
    assert_eq!(http.search("lighthouse keeper tide")[0], "first");

    // 1. An upload larger than the room left cannot be staged: 503, nothing staged.
    fill_leaving(&disk, 256 * 1024);
    let big = "word ".repeat(200_000);
    let a = http.post_file("/v1/collections/notes/documents", "big.txt", big.as_bytes());
    assert_storage_full(&a, &servers.data);
    assert_eq!(names(&disk.join("uploads")), Vec::<String>::new());

    // 2. An upload that fits the disk but whose ingest does not: staged (202), then the
    // job's commit finds the disk full and the job fails, saying so.
    let text: String = (0..400)
        .map(|i| {
            format!(
                "Paragraph {}: the storm ledger of the granite harbour lists the pilots, \
                 lanterns and anchors of the reef channel. ",
                i % 4
            )
            .repeat(3)
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    fill_leaving(&disk, text.len() as u64 + 32 * 1024);
    let a = http.post_file(
        "/v1/collections/notes/documents",
        "ledger.txt",
        text.as_bytes(),
    );
    assert_eq!(a.status, 202, "the upload should fit the disk: {}", a.body);
    let job = http.wait_job(a.body["id"].as_str().unwrap());
    assert_eq!(job["state"], "failed", "{job}");
    let error = job["error"].as_str().unwrap();
    assert!(error.contains("disk") && error.contains("full"), "{job}");
    assert!(!error.contains(&*servers.data.to_string_lossy()), "{job}");
    assert_eq!(job["counts"]["ingested"], 0, "{job}");
    assert_eq!(job["counts"]["failed"], 1, "{job}");
    assert_eq!(job["errors"][0]["file"], "ledger.txt", "{job}");
    let why = job["errors"][0]["message"].as_str().unwrap();
    assert!(why.contains("disk") && why.contains("full"), "{job}");
    // Its file is not kept: not staged, not among the sources.
    assert_eq!(names(&disk.join("uploads")), Vec::<String>::new());
    assert_eq!(names(&disk.join("sources/notes")), ["first.json"]);

    // 3. Still full: the server answers, and what was committed is all there.
    http.alive();
    assert_eq!(http.search("lighthouse keeper tide")[0], "first");
    assert!(!http
        .search("storm ledger granite")
        .contains(&"ledger".to_string()));
    assert_eq!(http.sources(), ["upload:first.json"]);
    let jobs = http.get("/v1/jobs");
    assert_eq!(jobs.status, 200, "{}", jobs.body);
    assert_eq!(
        jobs.body["jobs"].as_array().unwrap().len(),
        2,
        "{}",
        jobs.body
    );

    // 4. Room again: an upload works.
    std::fs::remove_file(disk.join("ballast")).unwrap();
    let a = http.upload_text("second", "The second note says the beacon was repaired.");
    assert_eq!(a.status, 202, "{}", a.body);
    let job = http.wait_job(a.body["id"].as_str().unwrap());
    assert_eq!(job["state"], "indexed", "{job}");
    assert_eq!(http.search("beacon repaired")[0], "second");

    // 5. kill -9, and a server restarted on the same disk finds everything as it was.
    let pid = servers.first_pid();
    let killed = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let base = servers.next_server();
    let seen = std::mem::take(&mut http.seen);
    let mut http = Http::new(base);
    http.seen = seen;
    http.alive();
    assert_eq!(http.sources(), ["upload:first.json", "upload:second.json"]);
    assert_eq!(http.search("lighthouse keeper tide")[0], "first");
    assert_eq!(http.search("beacon repaired")[0], "second");
    let jobs = http.get("/v1/jobs");
    let states: Vec<&str> = jobs.body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["state"].as_str().unwrap())
        .collect();
    // Newest first: second (indexed), ledger (failed), first (indexed).
    assert_eq!(states, ["indexed", "failed", "indexed"], "{}", jobs.body);
    let a = http.upload_text("third", "A third note about the fog horn.");
    assert_eq!(a.status, 202, "{}", a.body);
    let job = http.wait_job(a.body["id"].as_str().unwrap());
    assert_eq!(job["state"], "indexed", "{job}");

    // No server error but the 503s of the full disk.
    let errors: Vec<&(u16, String)> = http
        .seen
        .iter()
        .filter(|(s, _)| *s >= 500 && *s != 503)
        .collect();
    assert!(errors.is_empty(), "server errors: {errors:?}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
