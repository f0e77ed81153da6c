//! HTTP plumbing: URL checks and percent-encoding, capped body reads, and the mapping of
//! ureq's errors onto [`WebError`].

use std::io::Read;

use crate::WebError;

/// Longest error body kept in [`WebError::Http`], in characters.
const ERROR_BODY_CHARS: usize = 512;
/// Bytes read from an error response.
const ERROR_BODY_BYTES: usize = 4096;

/// Percent-encode a query component: everything but RFC 3986's unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) becomes `%XX` of its UTF-8 bytes.
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            push_pct(&mut out, b);
        }
    }
    out
}

fn push_pct(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(HEX[usize::from(b >> 4)] as char);
    out.push(HEX[usize::from(b & 15)] as char);
}

/// Make a URL sendable: drop the fragment, percent-encode bytes a URI may not hold
/// (non-ASCII, controls, space, `"<>\^`{|}`, a `%` not starting an escape); keep the rest.
pub(crate) fn sanitize_url(url: &str) -> String {
    let url = url.split('#').next().unwrap_or_default();
    let bytes = url.as_bytes();
    let mut out = String::with_capacity(url.len());
    for (i, &b) in bytes.iter().enumerate() {
        let escape = match b {
            b'%' => {
                !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                    && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            }
            0..=0x20 | 0x7f..=0xff => true,
            b'"' | b'<' | b'>' | b'\\' | b'^' | b'`' | b'{' | b'|' | b'}' => true,
            _ => false,
        };
        if escape {
            push_pct(&mut out, b);
        } else {
            out.push(b as char);
        }
    }
    out
}

/// Check that `url` is an absolute `http`/`https` URL with a host; returns it sanitized
/// (see [`sanitize_url`]).
pub(crate) fn check_http_url(url: &str) -> Result<String, WebError> {
    let invalid = |reason: &str| WebError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = url.trim();
    let lower = trimmed.to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &trimmed[7..]
    } else if lower.starts_with("https://") {
        &trimmed[8..]
    } else {
        return Err(invalid("only http:// and https:// URLs are supported"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if host_port.starts_with('[') {
        host_port.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() || host == "[" {
        return Err(invalid("no host"));
    }
    if authority
        .chars()
        .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(invalid("white space in the host"));
    }
    let clean = sanitize_url(trimmed);
    ureq::http::Uri::try_from(clean.as_str()).map_err(|e| invalid(&e.to_string()))?;
    Ok(clean)
}

/// Map a ureq error onto this crate's categories; `what` names the request in messages.
pub(crate) fn classify(e: ureq::Error, what: &str) -> WebError {
    use ureq::Error as E;
    match e {
        E::Timeout(t) => WebError::Timeout(format!("{what}: {t}")),
        E::Io(io) if refused(&io).is_some() => WebError::Refused {
            url: what.to_owned(),
            reason: refused(&io).map(ToString::to_string).unwrap_or_default(),
        },
        E::Io(io) => match io.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                WebError::Timeout(format!("{what}: {io}"))
            }
            _ => WebError::Unavailable(format!("{what}: {io}")),
        },
        E::StatusCode(status) => WebError::Http {
            status,
            body: String::new(),
        },
        E::BadUri(reason) => WebError::InvalidUrl {
            url: what.to_owned(),
            reason,
        },
        E::Http(err) => WebError::InvalidUrl {
            url: what.to_owned(),
            reason: err.to_string(),
        },
        E::RequireHttpsOnly(reason) => WebError::InvalidUrl {
            url: what.to_owned(),
            reason,
        },
        e @ (E::Protocol(_)
        | E::LargeResponseHeader(..)
        | E::Json(_)
        | E::BodyExceedsLimit(_)
        | E::BodyStalled) => WebError::Malformed(format!("{what}: {e}")),
        other => WebError::Unavailable(format!("{what}: {other}")),
    }
}

/// The guard's refusal inside an I/O error, if that is what it is.
fn refused(io: &std::io::Error) -> Option<&crate::guard::RefusedAddress> {
    io.get_ref()?.downcast_ref()
}

/// The media type (lowercase, without parameters) and charset of a response, if given.
/// How long a shared cache may keep a response, from its `Cache-Control` header:
/// `Some(None)` with no header or no lifetime in it (the cache's own TTL applies),
/// `Some(Some(d))` for `s-maxage` (else `max-age`), and `None` when it must not be kept
/// (`no-store`, `no-cache`, `private`, or a lifetime of 0). `Expires` is not read.
pub(crate) fn cache_lifetime(
    resp: &ureq::http::Response<ureq::Body>,
) -> Option<Option<std::time::Duration>> {
    let mut max_age = None;
    let mut s_maxage = None;
    for value in resp
        .headers()
        .get_all(ureq::http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for directive in value.split(',') {
            let (name, arg) = match directive.split_once('=') {
                Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                None => (directive.trim(), None),
            };
            match name.to_ascii_lowercase().as_str() {
                "no-store" | "no-cache" | "private" => return None,
                "max-age" => max_age = arg.and_then(|a| a.parse::<u64>().ok()),
                "s-maxage" => s_maxage = arg.and_then(|a| a.parse::<u64>().ok()),
                _ => {}
            }
        }
    }
    match s_maxage.or(max_age) {
        Some(0) => None,
        Some(s) => Some(Some(std::time::Duration::from_secs(s))),
        None => Some(None),
    }
}

pub(crate) fn content_type(
    resp: &ureq::http::Response<ureq::Body>,
) -> (Option<String>, Option<String>) {
    let Some(value) = resp
        .headers()
        .get(ureq::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return (None, None);
    };
    let mut parts = value.split(';');
    let mime = parts
        .next()
        .map(|m| m.trim().to_ascii_lowercase())
        .filter(|m| !m.is_empty());
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("charset")
            .then(|| v.trim().trim_matches('"').to_ascii_lowercase())
    });
    (mime, charset)
}

/// Read at most `cap` bytes of the body; the flag says whether the body was longer.
pub(crate) fn read_capped(
    resp: ureq::http::Response<ureq::Body>,
    cap: usize,
    what: &str,
) -> Result<(Vec<u8>, bool), WebError> {
    let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
    let mut buf = Vec::new();
    resp.into_body()
        .into_reader()
        .take(limit)
        .read_to_end(&mut buf)
        .map_err(|e| classify(ureq::Error::from(e), what))?;
    let truncated = buf.len() > cap;
    buf.truncate(cap);
    Ok((buf, truncated))
}

/// [`WebError::Http`] for a non-2xx response, with the start of its body.
pub(crate) fn http_error(resp: ureq::http::Response<ureq::Body>, what: &str) -> WebError {
    let status = resp.status().as_u16();
    let body = match read_capped(resp, ERROR_BODY_BYTES, what) {
        Ok((bytes, _)) => {
            let text = String::from_utf8_lossy(&bytes);
            let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
            collapsed.chars().take(ERROR_BODY_CHARS).collect()
        }
        Err(_) => String::new(),
    };
    WebError::Http { status, body }
}

/// Decode a body: Latin-1 family charsets byte by byte, everything else as UTF-8 with
/// invalid sequences replaced; a byte-order mark is dropped.
pub(crate) fn decode(bytes: &[u8], charset: Option<&str>) -> String {
    let latin1 = matches!(
        charset,
        Some("iso-8859-1" | "iso8859-1" | "latin1" | "latin-1" | "windows-1252" | "cp1252")
    );
    let text = if latin1 {
        bytes.iter().map(|&b| char::from(b)).collect()
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    };
    match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_query_components() {
        assert_eq!(encode_component("a b&c=d"), "a%20b%26c%3Dd");
        assert_eq!(encode_component("café"), "caf%C3%A9");
        assert_eq!(encode_component("100%/x?y#z+"), "100%25%2Fx%3Fy%23z%2B");
        assert_eq!(encode_component("A-z_0.9~"), "A-z_0.9~");
    }

    #[test]
    fn sanitizes_urls() {
        assert_eq!(
            sanitize_url("http://h/a b/é?q=x y#frag"),
            "http://h/a%20b/%C3%A9?q=x%20y"
        );
        assert_eq!(sanitize_url("http://h/%41%zz%"), "http://h/%41%25zz%25");
    }

    #[test]
    fn checks_http_urls() {
        assert!(check_http_url("http://127.0.0.1:8888").is_ok());
        assert!(check_http_url("HTTPS://example.org/searx/").is_ok());
        assert!(check_http_url("http://[::1]:80/").is_ok());
        for bad in [
            "",
            "ftp://h/",
            "127.0.0.1:8888",
            "http://",
            "http:///path",
            "http://:80/",
        ] {
            assert!(
                matches!(check_http_url(bad), Err(WebError::InvalidUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn decodes_charsets() {
        assert_eq!(decode(b"caf\xe9", Some("iso-8859-1")), "café");
        assert_eq!(decode("\u{feff}hé".as_bytes(), None), "hé");
        assert_eq!(decode(b"a\xffb", Some("utf-8")), "a\u{fffd}b");
    }
}
