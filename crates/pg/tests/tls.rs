//! TLS to a real PostgreSQL with TLS turned on (`scripts/tls-servers.sh`: PostgreSQL 15
//! on loopback with a test CA's certificate, TLS-only TCP, SCRAM passwords, and
//! certificate authentication for the role `nc_cert`). Skipped, saying so, when
//! `NEURALCORE_TEST_PG_TLS_URL` is not set.

use std::path::PathBuf;
use std::time::Duration;

use neuralcore_pg::{config_with, PgError, SslMode, Target};

struct Server {
    /// `postgres://postgres@127.0.0.1:5441/postgres`, without a password.
    url: String,
    /// The certificates, the password file and the password.
    dir: PathBuf,
}

fn server() -> Option<Server> {
    match (
        std::env::var("NEURALCORE_TEST_PG_TLS_URL"),
        std::env::var("NEURALCORE_TEST_TLS_DIR"),
    ) {
        (Ok(url), Ok(dir)) if !url.is_empty() => Some(Server {
            url,
            dir: PathBuf::from(dir),
        }),
        _ => {
            eprintln!("skipped: NEURALCORE_TEST_PG_TLS_URL is not set (scripts/tls-servers.sh)");
            None
        }
    }
}

impl Server {
    fn file(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn password(&self) -> String {
        std::fs::read_to_string(self.dir.join("pg-password"))
            .unwrap()
            .trim()
            .to_string()
    }

    /// The URL with `params` and the password file.
    fn url(&self, params: &str) -> String {
        format!("{}?passfile={}&{params}", self.url, self.file("pgpass"))
    }
}

/// No PG* variables and no home folder: the caller's environment cannot change what
/// is tested.
fn no_env(_: &str) -> Option<String> {
    None
}

fn target(url: &str) -> Target {
    config_with(url, "nc-tls-test", Duration::from_secs(10), &no_env, None).unwrap()
}

/// Whether the session is encrypted, and as whom.
fn session(t: &Target) -> Result<(bool, String), postgres::Error> {
    let mut c = t.connect()?;
    let row = c.query_one(
        "SELECT ssl, current_user::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        &[],
    )?;
    Ok((row.get(0), row.get(1)))
}

fn failure(t: &Target) -> (String, PgError) {
    let e = t.connect().err().expect("the connection must fail");
    (neuralcore_pg::describe(&e), neuralcore_pg::map(e, &t.shown))
}

#[test]
fn verify_full_with_the_test_ca_and_the_password_file() {
    let Some(s) = server() else { return };
    let t = target(&s.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        s.file("ca.pem")
    )));
    assert_eq!(t.sslmode, SslMode::VerifyFull);
    assert!(!t.shown.contains(&s.password()));
    assert_eq!(session(&t).unwrap(), (true, "postgres".to_string()));
    // The default, prefer, encrypts too when the server offers TLS.
    let t = target(&s.url("application_name=x"));
    assert!(session(&t).unwrap().0);
    // The pool connects the same way.
    let pool = neuralcore_pg::Pool::new(t, 2, Duration::from_secs(5));
    let mut c = pool.get().unwrap();
    let one: i32 = c.client.query_one("SELECT 1", &[]).unwrap().get(0);
    assert_eq!(one, 1);
}

#[test]
fn verify_ca_checks_the_chain_and_verify_full_the_name_too() {
    let Some(s) = server() else { return };
    let port = s.url.rsplit(':').next().unwrap().split('/').next().unwrap();
    let pw = s.password();
    let env = |k: &str| (k == "PGPASSWORD").then(|| pw.clone());
    // The certificate names localhost and 127.0.0.1, not this host.
    let url = |mode: &str| {
        format!(
            "host=db.neuralcore.invalid hostaddr=127.0.0.1 port={port} user=postgres \
             dbname=postgres sslmode={mode} sslrootcert='{}'",
            s.file("ca.pem")
        )
    };
    let at = |mode: &str| config_with(&url(mode), "t", Duration::from_secs(10), &env, None);
    let (msg, err) = failure(&at("verify-full").unwrap());
    assert!(msg.contains("names the host"), "{msg}");
    assert!(matches!(err, PgError::Backend(_)), "not a retry: {err:?}");
    assert!(session(&at("verify-ca").unwrap()).unwrap().0);
    // require with a CA given is verify-ca, as in libpq.
    assert!(session(&at("require").unwrap()).unwrap().0);
    // verify-ca (and require with a CA) still check the chain: another CA's
    // certificate is refused whatever the name.
    let other = |mode: &str| {
        config_with(
            &url(mode).replace("ca.pem", "other-ca.pem"),
            "t",
            Duration::from_secs(10),
            &env,
            None,
        )
        .unwrap()
    };
    for mode in ["verify-ca", "require"] {
        let (msg, err) = failure(&other(mode));
        assert!(
            msg.contains("not signed by a CA in sslrootcert"),
            "{mode}: {msg}"
        );
        assert!(matches!(err, PgError::Backend(_)), "{mode}: {err:?}");
    }
}

#[test]
fn a_certificate_from_another_ca_is_refused_clearly() {
    let Some(s) = server() else { return };
    let t = target(&s.url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        s.file("other-ca.pem")
    )));
    let (msg, err) = failure(&t);
    assert!(msg.contains("not signed by a CA in sslrootcert"), "{msg}");
    assert!(
        matches!(&err, PgError::Backend(m) if m.contains("UnknownIssuer") || m.contains("issuer")),
        "{err:?}"
    );
    // Without any CA, verify-full says what to add before connecting at all.
    let e = config_with(
        &s.url("sslmode=verify-full"),
        "t",
        Duration::from_secs(1),
        &|_| None,
        Some(s.dir.join("no-home")),
    )
    .unwrap_err();
    assert!(
        matches!(&e, PgError::Invalid(m) if m.contains("sslrootcert=")),
        "{e}"
    );
}

#[test]
fn without_tls_or_with_a_wrong_password_the_server_says_no() {
    let Some(s) = server() else { return };
    let (msg, _) = failure(&target(&s.url("sslmode=disable")));
    assert!(msg.contains("no encryption"), "{msg}");
    let wrong = s.url.replace("postgres@", "postgres:not-the-password@");
    let (msg, err) = failure(&target(&format!("{wrong}?sslmode=require")));
    assert!(msg.contains("password authentication failed"), "{msg}");
    assert!(!err.to_string().contains("not-the-password"), "{err}");
}

#[test]
fn a_client_certificate_authenticates() {
    let Some(s) = server() else { return };
    let base = s.url.replace("postgres@", "nc_cert@");
    let ca = format!("sslmode=verify-full&sslrootcert={}", s.file("ca.pem"));
    let t = target(&format!(
        "{base}?{ca}&sslcert={}&sslkey={}",
        s.file("client.pem"),
        s.file("client.key")
    ));
    assert_eq!(session(&t).unwrap(), (true, "nc_cert".to_string()));
    let (msg, _) = failure(&target(&format!("{base}?{ca}")));
    assert!(msg.contains("certificate"), "{msg}");
}
