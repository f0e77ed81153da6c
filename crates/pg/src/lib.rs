//! What every neuralcore PostgreSQL client shares (the memory backend,
//! `neuralcore-memory-pg`, the document store's, `neuralcore_store::PgStore`, and the
//! cache's cold tier): connection settings as libpq spells them, TLS included
//! ([`config`], [`Target`]), a small connection pool with per-connection prepared
//! statements ([`Pool`]), the classification of driver errors into retry / invalid /
//! backend ([`PgError`]), URLs shown without their passwords, and identifier quoting.
//!
//! The client is the synchronous `postgres` crate (tokio-postgres on a private
//! current-thread runtime), because the stores above are synchronous; TLS is rustls
//! ([`tls`] lists the modes).

#![warn(missing_docs)]

mod conninfo;
mod error;
mod pool;
pub mod tls;

use std::path::PathBuf;
use std::time::Duration;

pub use error::{describe, map, redact, PgError, PgResult};
pub use pool::{Conn, Pool, PooledConn};
pub use postgres;
pub use tls::{SslMode, Tls};

/// A server to connect to: the driver's configuration, the TLS that goes with it, and
/// the URL as shown in messages.
#[derive(Clone)]
pub struct Target {
    /// The driver's configuration (password included, when one was found).
    pub config: postgres::Config,
    /// The TLS side.
    pub tls: Tls,
    /// The mode asked for.
    pub sslmode: SslMode,
    /// The URL without its password.
    pub shown: String,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the configuration itself: it holds the password.
        f.debug_struct("Target")
            .field("url", &self.shown)
            .field("sslmode", &self.sslmode)
            .finish()
    }
}

impl Target {
    /// Open a connection.
    pub fn connect(&self) -> Result<postgres::Client, postgres::Error> {
        self.config.connect(self.tls.clone())
    }

    /// The password in use, if any (to scrub from messages that might echo it).
    pub fn password(&self) -> Option<String> {
        self.config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
    }
}

/// `name` quoted as an identifier, if it is a plain one (ASCII letters, digits and `_`,
/// not starting with a digit, at most 63 bytes).
pub fn quote_ident(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then(|| format!("\"{name}\""))
}

/// Parse `url` (`postgres://user[:password]@host:port/db?sslmode=...`, or the key-value
/// form) into a [`Target`]: `connect_timeout` and `application_name` set when the URL
/// sets none, notices kept out of the log, TLS as `sslmode` and friends ask (see
/// [`tls`]), and the password, when the URL has none, from `PGPASSWORD` or the password
/// file (`passfile`, `PGPASSFILE`, else `~/.pgpass`), as libpq finds it.
pub fn config(url: &str, application_name: &str, connect_timeout: Duration) -> PgResult<Target> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    config_with(
        url,
        application_name,
        connect_timeout,
        &|k| std::env::var(k).ok(),
        home,
    )
}

/// [`config`] with the environment and the home folder given (for tests).
pub fn config_with(
    url: &str,
    application_name: &str,
    connect_timeout: Duration,
    env: &dyn Fn(&str) -> Option<String>,
    home: Option<PathBuf>,
) -> PgResult<Target> {
    let invalid = |e: String| {
        PgError::Invalid(format!(
            "invalid PostgreSQL URL {:?}: {e} (expected postgres://user@host:port/db)",
            redact(url)
        ))
    };
    let (rest, mut extra) = conninfo::split(url).map_err(invalid)?;
    let mut config: postgres::Config = rest
        .parse()
        .map_err(|e: postgres::Error| invalid(e.to_string()))?;
    let mut files = extra
        .tls(env, home.clone())
        .map_err(|e| PgError::Invalid(format!("invalid PostgreSQL URL {:?}: {e}", redact(url))))?;
    // `hostaddr` without `host`: the address is also the name TLS checks and the
    // password file is searched for (as libpq does).
    if config.get_hosts().is_empty() && !config.get_hostaddrs().is_empty() {
        let addrs: Vec<String> = config
            .get_hostaddrs()
            .iter()
            .map(|a| a.to_string())
            .collect();
        for a in addrs {
            config.host(&a);
        }
    }
    // Unix sockets never use TLS (libpq does not try; the server refuses it there), so
    // sslmode, from the URL or PGSSLMODE, does not break local connections.
    let unix_only = !config.get_hosts().is_empty()
        && config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, postgres::config::Host::Unix(_)));
    if unix_only {
        files.mode = SslMode::Disable;
    }
    config.ssl_mode(files.mode.driver());
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(connect_timeout);
    }
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    if config.get_password().is_none() {
        if let Some(p) = env("PGPASSWORD").filter(|p| !p.is_empty()) {
            config.password(p);
        } else if let Some(p) = password_from_file(&config, extra.passfile.as_deref(), home) {
            config.password(p);
        }
    }
    // `CREATE ... IF NOT EXISTS` answers with notices; keep them out of the log.
    config.notice_callback(|n| tracing::trace!(notice = n.message(), "postgres notice"));
    let mut shown = shown_url(&config);
    if files.mode != SslMode::Prefer {
        shown.push_str("?sslmode=");
        shown.push_str(files.mode.as_str());
    }
    let tls = Tls::new(&files).map_err(|e| PgError::Invalid(format!("{shown}: {e}")))?;
    Ok(Target {
        config,
        tls,
        sslmode: files.mode,
        shown,
    })
}

/// The password for `c`'s host from the password file, as libpq looks it up; only for a
/// single host (one host's password is never sent to another).
fn password_from_file(
    c: &postgres::Config,
    passfile: Option<&str>,
    home: Option<PathBuf>,
) -> Option<String> {
    use postgres::config::Host;
    if c.get_hosts().len() > 1 {
        return None;
    }
    let path = match passfile {
        Some(p) => PathBuf::from(p),
        None => home?.join(".pgpass"),
    };
    let host = match c.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c.get_user().unwrap_or("");
    let db = c.get_dbname().unwrap_or(user);
    conninfo::passfile_lookup(&path, &host, port, db, user)
}

/// The URL of a parsed configuration as shown in messages: without the password.
pub fn shown_url(c: &postgres::Config) -> String {
    use postgres::config::Host;
    let user = c.get_user().unwrap_or("");
    let hosts: Vec<String> = c
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(s) => s.clone(),
                Host::Unix(p) => p.display().to_string(),
            };
            let port = c.get_ports().get(i).or(c.get_ports().first());
            match port {
                Some(p) => format!("{host}:{p}"),
                None => host,
            }
        })
        .collect();
    let at = if user.is_empty() { "" } else { "@" };
    format!(
        "postgres://{user}{at}{}/{}",
        hosts.join(","),
        c.get_dbname().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        assert_eq!(quote_ident("nc_test_1").as_deref(), Some("\"nc_test_1\""));
        assert_eq!(quote_ident("Memory").as_deref(), Some("\"Memory\""));
        assert!(quote_ident("").is_none());
        assert!(quote_ident("1abc").is_none());
        assert!(quote_ident("a\"b").is_none());
        assert!(quote_ident("a b").is_none());
        assert!(quote_ident(&"a".repeat(64)).is_none());
    }

    #[test]
    fn shown_urls_have_no_password() {
        let t = config(
            "postgres://u:secret@127.0.0.1:5439/db",
            "t",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(t.shown, "postgres://u@127.0.0.1:5439/db");
        let err = config(
            "postgres://u:secret@h:notaport/db",
            "t",
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            matches!(&err, PgError::Invalid(m) if !m.contains("secret")),
            "{err}"
        );
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn tls_settings_are_checked_when_parsed() {
        let at = |url: &str| config_with(url, "t", Duration::from_secs(1), &no_env, None);
        let t = at("postgres://u@h/db?sslmode=verify-full&sslrootcert=system").unwrap();
        assert_eq!(t.sslmode, SslMode::VerifyFull);
        assert_eq!(t.shown, "postgres://u@h:5432/db?sslmode=verify-full");
        let e = at("postgres://u:pw@h/db?sslmode=verify-ca").unwrap_err();
        assert!(
            matches!(&e, PgError::Invalid(m) if m.contains("sslrootcert") && !m.contains("pw")),
            "{e}"
        );
        let e = at("postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
            .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let e = at(&format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={}",
            junk.display()
        ))
        .unwrap_err();
        assert!(e.to_string().contains("no certificate"), "{e}");
        let e = at(&format!(
            "postgres://u@h/db?sslmode=require&sslcert={}",
            junk.display()
        ))
        .unwrap_err();
        assert!(e.to_string().contains("sslkey"), "{e}");
        assert_eq!(
            at("postgres://u@h/db?sslmode=disable").unwrap().sslmode,
            SslMode::Disable
        );
        assert_eq!(at("host=h user=u").unwrap().sslmode, SslMode::Prefer);
        // A Unix socket never uses TLS, whatever the mode.
        let t = at("host=/run/postgresql user=u sslmode=require").unwrap();
        assert_eq!(t.sslmode, SslMode::Disable);
        // hostaddr alone: the address is the name.
        let t = at("hostaddr=127.0.0.1 user=u sslmode=require").unwrap();
        assert_eq!(t.shown, "postgres://u@127.0.0.1/?sslmode=require");
    }

    #[test]
    fn passwords_come_from_the_environment_or_the_password_file() {
        let dir = tempfile::tempdir().unwrap();
        let pgpass = dir.path().join(".pgpass");
        std::fs::write(&pgpass, "h:5432:db:u:from-file\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let home = Some(dir.path().to_path_buf());
        let t = |url: &str, env: &dyn Fn(&str) -> Option<String>| {
            config_with(url, "t", Duration::from_secs(1), env, home.clone())
                .unwrap()
                .password()
        };
        assert_eq!(
            t("postgres://u@h/db", &no_env).as_deref(),
            Some("from-file")
        );
        assert_eq!(t("postgres://u:url@h/db", &no_env).as_deref(), Some("url"));
        let env = |k: &str| (k == "PGPASSWORD").then(|| "from-env".to_string());
        assert_eq!(t("postgres://u@h/db", &env).as_deref(), Some("from-env"));
        assert_eq!(t("postgres://u@other/db", &no_env), None);
        // Two hosts: one host's password is not sent to the other.
        assert_eq!(t("postgres://u@h,h/db", &no_env), None);
        let elsewhere = dir.path().join("elsewhere");
        std::fs::copy(&pgpass, &elsewhere).unwrap();
        std::fs::remove_file(&pgpass).unwrap();
        let url = format!("postgres://u@h/db?passfile={}", elsewhere.display());
        assert_eq!(t(&url, &no_env).as_deref(), Some("from-file"));
    }
}
