//! What the app's test files share: a free port and a private Redis on it.

use std::path::Path;
use std::time::{Duration, Instant};

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private `redis-server` (installed by `scripts/test.sh`) on `port`, keeping nothing
/// on disk but in `dir`, so it can be stopped without disturbing other tests. Returns
/// once it accepts connections.
pub fn start_redis(port: u16, dir: &Path) -> std::process::Child {
    let child = std::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server (scripts/test.sh installs it)");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}
