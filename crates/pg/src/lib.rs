//! What every neuralcore PostgreSQL backend shares (the memory backend,
//! `neuralcore-memory-pg`, and the document store's, `neuralcore_store::PgStore`): a
//! small connection pool with per-connection prepared statements ([`Pool`]), the
//! classification of driver errors into retry / invalid / backend ([`PgError`]), URLs
//! shown without their passwords, and identifier quoting.
//!
//! The client is the synchronous `postgres` crate (tokio-postgres on a private
//! current-thread runtime), because the stores above are synchronous. No TLS yet: the
//! server is expected on loopback or a private network.

#![warn(missing_docs)]

mod error;
mod pool;

use std::time::Duration;

pub use error::{map, redact, PgError, PgResult};
pub use pool::{Conn, Pool, PooledConn};
pub use postgres;

/// `name` quoted as an identifier, if it is a plain one (ASCII letters, digits and `_`,
/// not starting with a digit, at most 63 bytes).
pub fn quote_ident(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then(|| format!("\"{name}\""))
}

/// Parse `url` (`postgres://user[:password]@host:port/db`, or the key-value form) into
/// a client configuration with `connect_timeout` (when the URL sets none) and
/// `application_name` (likewise), notices kept out of the log; with the URL as shown in
/// messages (from the parsed configuration, without the password).
pub fn config(
    url: &str,
    application_name: &str,
    connect_timeout: Duration,
) -> PgResult<(postgres::Config, String)> {
    let mut config: postgres::Config = url.parse().map_err(|e| {
        PgError::Invalid(format!(
            "invalid PostgreSQL URL {:?}: {e} (expected postgres://user@host:port/db)",
            redact(url)
        ))
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(connect_timeout);
    }
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    // `CREATE ... IF NOT EXISTS` answers with notices; keep them out of the log.
    config.notice_callback(|n| tracing::trace!(notice = n.message(), "postgres notice"));
    let shown = shown_url(&config);
    Ok((config, shown))
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
        let (_, shown) = config(
            "postgres://u:secret@127.0.0.1:5439/db",
            "t",
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(shown, "postgres://u@127.0.0.1:5439/db");
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
}
