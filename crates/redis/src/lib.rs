//! What every neuralcore Redis client shares (the Mind's Redis backend and the cache's
//! hot tier): a URL turned into a client.
//!
//! `redis://[user[:password]@]host[:port][/db]` is plain TCP; `rediss://` is TLS (rustls),
//! always verified: against the system's roots, or against the CA in `sslrootcert`. A
//! client certificate is `sslcert` and `sslkey` (PEM files). The three parameters use
//! libpq's names, so a PostgreSQL and a Redis URL read alike:
//!
//! ```text
//! rediss://:secret@redis.internal:6380/0?sslrootcert=/etc/neuralcore/ca.pem
//! ```
//!
//! Errors never contain the URL (it may hold the password): callers name the server
//! with their own redacted copy.

#![warn(missing_docs)]

use redis::{ClientTlsConfig, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

/// The TLS files named in a URL.
#[derive(Debug, Default, PartialEq, Eq)]
struct Files {
    root: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

/// `url` without `sslrootcert`, `sslcert` and `sslkey`, and their values.
fn split(url: &str) -> Result<(String, Files), String> {
    let mut files = Files::default();
    let (base, fragment) = match url.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (url, None),
    };
    let Some((head, query)) = base.split_once('?') else {
        return Ok((url.to_string(), files));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match k {
            "sslrootcert" => &mut files.root,
            "sslcert" => &mut files.cert,
            "sslkey" => &mut files.key,
            _ => {
                kept.push(pair);
                continue;
            }
        };
        *slot = Some(percent_decode(v)?);
    }
    let mut out = head.to_string();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    Ok((out, files))
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let v = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("invalid %-escape in the Redis URL")?;
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the Redis URL decodes to invalid UTF-8".into())
}

/// The connection failed (I/O, a timeout, refused, dropped): the server is gone or
/// unreachable, worth trying again later. Not a TLS refusal ([`is_tls_refusal`]), which
/// also arrives as an I/O error.
pub fn connection_failed(e: &redis::RedisError) -> bool {
    (e.is_io_error() || e.is_timeout() || e.is_connection_refusal() || e.is_connection_dropped())
        && !is_tls_refusal(e)
}

/// Whether `e` is a TLS refusal (a certificate refused, a TLS alert) rather than the
/// network failing: the server is there and says no, so retrying will not help. The
/// redis crate reports the handshake's failure as an I/O error (it shakes hands on the
/// first read), so the causes are searched, inside shared and I/O errors too.
pub fn is_tls_refusal(e: &redis::RedisError) -> bool {
    use std::error::Error;
    fn tls(e: &(dyn Error + 'static)) -> bool {
        if e.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.get_ref().is_some_and(|i| i.is::<rustls::Error>());
        }
        if let Some(shared) = e.downcast_ref::<std::sync::Arc<dyn Error + Send + Sync>>() {
            return tls(&**shared);
        }
        false
    }
    let mut cur = e.source();
    while let Some(c) = cur {
        if tls(c) {
            return true;
        }
        cur = c.source();
    }
    false
}

fn read(what: &str, path: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{what} {path}: {e}"))?;
    if !String::from_utf8_lossy(&bytes).contains("-----BEGIN ") {
        return Err(format!("{what} {path}: not a PEM file"));
    }
    Ok(bytes)
}

/// A client for `url`, its connection settings passed through `adjust` first. The error
/// says what is wrong without repeating the URL.
pub fn client(
    url: &str,
    adjust: impl FnOnce(ConnectionInfo) -> ConnectionInfo,
) -> Result<redis::Client, String> {
    let (rest, files) = split(url)?;
    let tls = rest
        .get(..9)
        .is_some_and(|s| s.eq_ignore_ascii_case("rediss://"));
    if tls {
        // The redis crate builds its rustls configuration from the process-wide provider:
        // ring, unless the program chose one already (then that one stays).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let info = rest
        .as_str()
        .into_connection_info()
        .map_err(|e| e.to_string())?;
    let info = adjust(info);
    if files == Files::default() {
        return redis::Client::open(info).map_err(|e| e.to_string());
    }
    if !tls {
        return Err("sslrootcert, sslcert and sslkey need a TLS URL: rediss://".into());
    }
    let client_tls = match (&files.cert, &files.key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("sslcert", cert)?,
            client_key: read("sslkey", key)?,
        }),
        _ => return Err("sslcert and sslkey go together: give both or neither".into()),
    };
    let root_cert = files
        .root
        .as_deref()
        .map(|p| read("sslrootcert", p))
        .transpose()?;
    redis::Client::build_with_tls(
        info,
        TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_files_leave_the_url() {
        let (rest, f) =
            split("rediss://:pw@h:6380/2?sslrootcert=%2Fetc%2Fca.pem&protocol=resp3&sslcert=/c")
                .unwrap();
        assert_eq!(rest, "rediss://:pw@h:6380/2?protocol=resp3");
        assert_eq!(f.root.as_deref(), Some("/etc/ca.pem"));
        assert_eq!(f.cert.as_deref(), Some("/c"));
        let (rest, f) = split("redis://h/0").unwrap();
        assert_eq!((rest.as_str(), f), ("redis://h/0", Files::default()));
        assert_eq!(split("rediss://h/?sslkey=/k#x").unwrap().0, "rediss://h/#x");
    }

    #[test]
    fn bad_settings_are_clear_and_never_echo_the_url() {
        let id = |i| i;
        let e = client("redis://:pw@h/?sslrootcert=/ca.pem", id).unwrap_err();
        assert!(e.contains("rediss://") && !e.contains("pw"), "{e}");
        let e = client("rediss://:pw@h/?sslrootcert=/nonexistent/ca.pem", id).unwrap_err();
        assert!(
            e.contains("/nonexistent/ca.pem") && !e.contains("pw"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "junk").unwrap();
        let e = client(&format!("rediss://h/?sslrootcert={}", junk.display()), id).unwrap_err();
        assert!(e.contains("not a PEM file"), "{e}");
        let e = client(&format!("rediss://h/?sslcert={}", junk.display()), id).unwrap_err();
        assert!(e.contains("sslkey"), "{e}");
        assert!(client("rediss://h/?sslrootcert=%zz", id).is_err());
        assert!(client("nope://h", id).is_err());
        assert!(client("redis://127.0.0.1:6379/0", id).is_ok());
        assert!(client("rediss://127.0.0.1:6379/0", id).is_ok());
    }
}
