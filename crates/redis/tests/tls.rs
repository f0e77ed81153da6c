//! `rediss://` to a real Redis with TLS turned on (`scripts/tls-servers.sh`: TLS only, a
//! test CA's certificate for localhost and 127.0.0.1, a password). Skipped, saying so,
//! when `NEURALCORE_TEST_REDIS_TLS_URL` is not set.

use std::path::PathBuf;
use std::time::Duration;

struct Server {
    /// `rediss://127.0.0.1:6391/`, without the password.
    url: String,
    dir: PathBuf,
}

fn server() -> Option<Server> {
    match (
        std::env::var("NEURALCORE_TEST_REDIS_TLS_URL"),
        std::env::var("NEURALCORE_TEST_TLS_DIR"),
    ) {
        (Ok(url), Ok(dir)) if !url.is_empty() => Some(Server {
            url,
            dir: PathBuf::from(dir),
        }),
        _ => {
            eprintln!("skipped: NEURALCORE_TEST_REDIS_TLS_URL is not set (scripts/tls-servers.sh)");
            None
        }
    }
}

impl Server {
    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The URL with `password` and `params`.
    fn url(&self, password: &str, params: &str) -> String {
        let with_pw = self
            .url
            .replace("rediss://", &format!("rediss://:{password}@"));
        format!("{with_pw}?{params}")
    }

    fn password(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis-password"))
            .unwrap()
            .trim()
            .to_string()
    }
}

/// The error of connecting to `url` (and sending PING), which must fail.
fn refused(url: &str) -> String {
    match connect(url).and_then(|mut c| {
        redis::cmd("PING")
            .query::<String>(&mut c)
            .map_err(|e| e.to_string())
    }) {
        Ok(_) => panic!("the connection must be refused"),
        Err(e) => e,
    }
}

fn connect(url: &str) -> Result<redis::Connection, String> {
    let client = neuralcore_redis::client(url, |i| i)?;
    client
        .get_connection_with_timeout(Duration::from_secs(5))
        .map_err(|e| e.to_string())
}

#[test]
fn rediss_with_the_test_ca_and_the_password() {
    let Some(s) = server() else { return };
    let ca = format!("sslrootcert={}", s.file("ca.pem"));
    let mut c = connect(&s.url(&s.password(), &ca)).unwrap();
    let key = format!("nc-tls-test:{}", std::process::id());
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("over tls")
        .arg("EX")
        .arg(60)
        .query(&mut c)
        .unwrap();
    let got: String = redis::cmd("GET").arg(&key).query(&mut c).unwrap();
    assert_eq!(got, "over tls");
}

#[test]
fn a_client_certificate_is_presented_where_the_server_requires_one() {
    let Some(s) = server() else { return };
    let Ok(mtls) = std::env::var("NEURALCORE_TEST_REDIS_MTLS_URL") else {
        eprintln!("skipped: NEURALCORE_TEST_REDIS_MTLS_URL is not set (scripts/tls-servers.sh)");
        return;
    };
    let s = Server { url: mtls, ..s };
    let ca = format!("sslrootcert={}", s.file("ca.pem"));
    let e = refused(&s.url(&s.password(), &ca));
    assert!(!e.contains(&s.password()), "{e}");
    let with_cert = format!(
        "{ca}&sslcert={}&sslkey={}",
        s.file("client.pem"),
        s.file("client.key")
    );
    let mut c = connect(&s.url(&s.password(), &with_cert)).unwrap();
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn a_wrong_ca_the_system_roots_or_plain_tcp_are_refused() {
    let Some(s) = server() else { return };
    let pw = s.password();
    let url = s.url(&pw, &format!("sslrootcert={}", s.file("other-ca.pem")));
    let e = refused(&url);
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    assert!(!e.contains(&pw), "{e}");
    // A refusal, not the network: not worth a retry.
    let err = neuralcore_redis::client(&url, |i| i)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(5))
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
        .unwrap_err();
    assert!(neuralcore_redis::is_tls_refusal(&err), "{err}");
    assert!(!neuralcore_redis::connection_failed(&err), "{err}");
    // The test CA is in no system store.
    let e = refused(&s.url(&pw, ""));
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    // Plain TCP to the TLS port gets no answer it understands.
    let plain = s.url(&pw, "").replace("rediss://", "redis://");
    refused(&plain);
}

#[test]
fn a_wrong_password_is_refused() {
    let Some(s) = server() else { return };
    let e = refused(&s.url(
        "not-the-password",
        &format!("sslrootcert={}", s.file("ca.pem")),
    ));
    assert!(
        e.contains("WRONGPASS") || e.to_lowercase().contains("auth"),
        "{e}"
    );
}
