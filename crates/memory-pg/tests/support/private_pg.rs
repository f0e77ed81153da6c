//! A private PostgreSQL server for fault tests: its own data folder (a temporary one
//! under `/tmp`) and port, so the shared test server is never touched. `initdb` and
//! `postgres` come from `NEURALCORE_TEST_PG_BIN` (`scripts/postgres.sh bin`;
//! `scripts/test.sh` sets it) and run as the `postgres` user when the tests run as
//! root. [`Private::kill`] is a crash (`kill -9` of every process of the server), not a
//! shutdown; [`Private::start`] brings it back through crash recovery.
//!
//! Shared by the memory store's and the cache's restart tests (included with
//! `#[path]`, as a test target cannot depend on another's files).
// Each test that includes it uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The folder of `initdb` and `postgres`, or `None` (saying the test skipped) when
/// `NEURALCORE_TEST_PG_BIN` is not set.
pub fn bin() -> Option<PathBuf> {
    match std::env::var("NEURALCORE_TEST_PG_BIN") {
        Ok(b) if !b.is_empty() => Some(PathBuf::from(b)),
        _ => {
            eprintln!("skipped: NEURALCORE_TEST_PG_BIN is not set (scripts/postgres.sh bin)");
            None
        }
    }
}

/// Whether the tests run as root (`/proc/self` belongs to the effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `bin/name`, run as the `postgres` user when we are root (initdb refuses root).
fn as_owner(bin: &Path, name: &str) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(name));
        c
    } else {
        Command::new(bin.join(name))
    }
}

/// A private PostgreSQL: its folder, port and running postmaster.
pub struct Private {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    server: Option<Child>,
    _dir: tempfile::TempDir,
}

impl Private {
    pub fn init(bin: PathBuf) -> Private {
        let dir = tempfile::Builder::new()
            .prefix("nc-pg-restart-")
            .tempdir_in("/tmp")
            .unwrap();
        let data = dir.path().join("data");
        if is_root() {
            let ok = Command::new("chown")
                .arg("postgres:")
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(ok.success(), "chown the private server's folder");
        }
        let out = as_owner(&bin, "initdb")
            .arg("-D")
            .arg(&data)
            .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut p = Private {
            bin,
            data,
            port,
            server: None,
            _dir: dir,
        };
        p.start();
        p
    }

    /// The server's log (stderr), beside its data folder.
    pub fn log(&self) -> PathBuf {
        self.data.with_file_name("postgres.log")
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Start the postmaster (crash recovery when it was killed) and wait until it
    /// answers.
    pub fn start(&mut self) {
        let child = as_owner(&self.bin, "postgres")
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(&self.data)
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=on"])
            .stdout(Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(self.log())
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        self.server = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err()
            || postgres::Client::connect(&self.url(), postgres::NoTls).is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the private server did not start; its log:\n{}",
                std::fs::read_to_string(self.log()).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `kill -9` the postmaster and every process it started: a crash, not a shutdown.
    /// The postmaster is stopped first (SIGSTOP), so it cannot start a backend between
    /// the scan for its children and the kill.
    pub fn kill(&mut self) {
        let pid: Option<u32> = std::fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse().ok());
        let Some(pid) = pid else {
            if let Some(mut c) = self.server.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return;
        };
        let _ = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status();
        let mut doomed = vec![];
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(child) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            // The 4th field of /proc/PID/stat (after the parenthesized name) is the ppid.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                continue;
            };
            let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
            let ppid: u32 = after
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            if ppid == pid {
                doomed.push(child);
            }
        }
        // The children first, the stopped postmaster last.
        doomed.push(pid);
        for p in &doomed {
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
        // The postmaster's parent (runuser, or the server itself when not root) reaps it:
        // killed before it has, the postmaster would stay a zombie under a PID 1 that may
        // never reap, and a new postmaster refuses to start while that PID exists.
        if let Some(mut c) = self.server.take() {
            // runuser stops itself when its child is stopped (as su does): go on.
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let start = Instant::now();
            while !matches!(c.try_wait(), Ok(Some(_))) {
                if start.elapsed() > Duration::from_secs(10) {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Wait until every one of them is gone (the port and shared memory are free).
        let start = Instant::now();
        while doomed
            .iter()
            .any(|p| Path::new(&format!("/proc/{p}")).exists() && !zombie(*p))
        {
            if start.elapsed() > Duration::from_secs(30) {
                // Not an assert: this also runs from Drop, maybe while unwinding.
                eprintln!("kill -9 did not end {doomed:?} within 30 s");
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .map(|x| x.1.trim_start().starts_with('Z'))
                .unwrap_or(true)
        })
        .unwrap_or(true)
}

impl Drop for Private {
    fn drop(&mut self) {
        if self.server.is_some() {
            self.kill();
        }
    }
}
