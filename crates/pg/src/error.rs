//! From `postgres` errors to [`PgError`], and URLs without their password.
//!
//! The split follows what a caller can do about it: connection trouble (refused, reset,
//! timed out, the server shutting down, too many clients) and transient conflicts
//! (deadlock, serialization failure) are `Unavailable`, worth retrying; a value
//! PostgreSQL cannot store (a NUL character in a text column) is `Invalid`; everything
//! else is `Backend`. Each backend maps these three onto its own error type.

use std::error::Error as _;

/// A PostgreSQL failure, by what the caller can do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PgError {
    /// The server cannot be reached, is shutting down or full, or the transaction hit a
    /// deadlock or a serialization failure: worth retrying.
    #[error("{0}")]
    Unavailable(String),
    /// The request is malformed (a URL, an identifier) or holds a value PostgreSQL cannot
    /// store: retrying the same request fails the same way.
    #[error("{0}")]
    Invalid(String),
    /// Anything else.
    #[error("{0}")]
    Backend(String),
}

/// Result of this crate.
pub type PgResult<T> = Result<T, PgError>;

/// SQLSTATEs that mean "try again later".
const TRANSIENT: &[&str] = &[
    "57P01", // admin_shutdown
    "57P02", // crash_shutdown
    "57P03", // cannot_connect_now (starting up)
    "53300", // too_many_connections
    "40001", // serialization_failure
    "40P01", // deadlock_detected
];

/// SQLSTATEs for values PostgreSQL cannot store as given.
const UNSTORABLE: &[&str] = &[
    "22P05", // untranslatable_character (\u0000 where text is needed)
    "22021", // character_not_in_repertoire (NUL in text)
];

/// Map a driver error; `url` (already without password) names the server in connection
/// errors.
pub fn map(e: postgres::Error, url: &str) -> PgError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let msg = format!("{} ({code}): {}", db.severity(), db.message());
        let msg = match db.detail() {
            Some(d) => format!("{msg}; {d}"),
            None => msg,
        };
        return if code.starts_with("08") || TRANSIENT.contains(&code) {
            PgError::Unavailable(format!("{url}: {msg}"))
        } else if UNSTORABLE.contains(&code) {
            PgError::Invalid(format!("PostgreSQL cannot store this value: {msg}"))
        } else {
            PgError::Backend(format!("PostgreSQL {msg}"))
        };
    }
    let io = e
        .source()
        .is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some());
    let said = describe(&e);
    // A refused certificate or a TLS alert can surface as an I/O error: not a retry.
    if crate::tls::is_tls_refusal(&e) {
        return PgError::Backend(format!("PostgreSQL client ({url}): {said}"));
    }
    if io || e.is_closed() || e.to_string().starts_with("timeout") {
        PgError::Unavailable(format!("{url}: {said}"))
    } else {
        PgError::Backend(format!("PostgreSQL client ({url}): {said}"))
    }
}

/// A driver error with its causes: the driver's own message names only the kind
/// ("error performing TLS handshake"), the reason is in the source chain.
pub fn describe(e: &postgres::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let said = c.to_string();
        if !out.contains(&said) {
            out = format!("{out}: {said}");
        }
        cause = c.source();
    }
    out
}

/// `url` with any password replaced by `***`, for messages. Handles both the URL form
/// (`postgres://user:secret@host/db`) and the key-value form (`password=secret`).
pub fn redact(url: &str) -> String {
    if let Some(rest_at) = url.find("://").map(|i| i + 3) {
        let rest = &url[rest_at..];
        let auth_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..auth_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                return format!("{}{}:***{}", &url[..rest_at], &rest[..colon], &rest[at..]);
            }
        }
        // A password can also be a query parameter.
        return redact_kv(url, '&');
    }
    redact_kv(url, ' ')
}

/// Replace the value of `password=` in a `sep`-separated list.
fn redact_kv(s: &str, sep: char) -> String {
    let Some(i) = s.find("password=") else {
        return s.to_string();
    };
    let start = i + "password=".len();
    let end = if s[start..].starts_with('\'') {
        // A quoted key-value: up to the closing quote.
        s[start + 1..]
            .find('\'')
            .map(|j| start + j + 2)
            .unwrap_or(s.len())
    } else {
        s[start..].find(sep).map(|j| start + j).unwrap_or(s.len())
    };
    format!("{}***{}", &s[..start], &s[end..])
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            redact("postgresql://u:p@ss@h/db?x=1"),
            "postgresql://u:***@h/db?x=1"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("postgres://h/db?user=u&password=secret&x=1"),
            "postgres://h/db?user=u&password=***&x=1"
        );
        assert_eq!(
            redact("host=h user=u password=secret dbname=d"),
            "host=h user=u password=*** dbname=d"
        );
        assert_eq!(
            redact("host=h password='se cret' dbname=d"),
            "host=h password=*** dbname=d"
        );
        assert_eq!(redact("not a url"), "not a url");
    }
}
