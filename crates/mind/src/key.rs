//! Naming rules for keys, run ids and patterns.
//!
//! - A key is `namespace.name`. The namespace is 1–64 characters of `[a-z0-9_-]`; the
//!   name is one or more dot-separated segments of `[a-z0-9_-]` (so `retrieval.chunks`
//!   and `tool.stats.latency` are keys, `a..b`, `a.` and `Ns.x` are not); at most
//!   [`MAX_KEY_BYTES`] bytes in all.
//! - A run id (and a Redis tenant) is 1–64 characters of `[A-Za-z0-9_-]`.
//! - A pattern is a prefix (`retrieval.` or `retrieval`) or a glob in which `*` matches
//!   any run of characters, dots included (`retrieval.*`, `*.chunks`, `*`).

use crate::error::{MindError, MindResult};

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 200;
/// Longest namespace and longest run id.
pub const MAX_PART: usize = 64;

fn word_char(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_' || c == b'-'
}

fn bad_key(key: &str, reason: impl Into<String>) -> MindError {
    MindError::InvalidKey {
        key: key.chars().take(80).collect(),
        reason: reason.into(),
    }
}

/// Checks a key; returns its `(namespace, name)`.
pub fn validate_key(key: &str) -> MindResult<(&str, &str)> {
    if key.len() > MAX_KEY_BYTES {
        return Err(bad_key(
            key,
            format!("longer than {MAX_KEY_BYTES} bytes ({})", key.len()),
        ));
    }
    let Some((ns, name)) = key.split_once('.') else {
        return Err(bad_key(key, "a key is `namespace.name`"));
    };
    if ns.is_empty() || ns.len() > MAX_PART {
        return Err(bad_key(key, "the namespace must be 1-64 characters"));
    }
    if let Some(c) = ns.bytes().find(|c| !word_char(*c)) {
        return Err(bad_key(
            key,
            format!(
                "character {:?} is not allowed in a namespace ([a-z0-9_-])",
                c as char
            ),
        ));
    }
    if name.split('.').any(str::is_empty) {
        return Err(bad_key(
            key,
            "the name must be dot-separated non-empty segments",
        ));
    }
    if let Some(c) = name.bytes().find(|c| !word_char(*c) && *c != b'.') {
        return Err(bad_key(
            key,
            format!(
                "character {:?} is not allowed in a name ([a-z0-9_.-])",
                c as char
            ),
        ));
    }
    Ok((ns, name))
}

/// Checks a name as given to `read_name` (the part after the namespace).
pub fn validate_name(name: &str) -> MindResult<()> {
    validate_key(&format!("n.{name}")).map(|_| ())
}

/// Checks a run id or tenant.
pub fn validate_id(id: &str, what: &str) -> MindResult<()> {
    if id.is_empty() || id.len() > MAX_PART {
        return Err(bad_key(id, format!("a {what} must be 1-64 characters")));
    }
    if let Some(c) = id
        .bytes()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-'))
    {
        return Err(bad_key(
            id,
            format!(
                "character {:?} is not allowed in a {what} ([A-Za-z0-9_-])",
                c as char
            ),
        ));
    }
    Ok(())
}

/// A checked `list_keys` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    glob: bool,
}

impl Pattern {
    /// Parses a prefix or glob; `""` and `"*"` match every key.
    pub fn parse(pattern: &str) -> MindResult<Pattern> {
        let bad = |reason: String| MindError::InvalidPattern {
            pattern: pattern.chars().take(80).collect(),
            reason,
        };
        if pattern.len() > MAX_KEY_BYTES {
            return Err(bad(format!("longer than {MAX_KEY_BYTES} bytes")));
        }
        if let Some(c) = pattern
            .bytes()
            .find(|c| !word_char(*c) && *c != b'.' && *c != b'*')
        {
            return Err(bad(format!(
                "character {:?} is not allowed ([a-z0-9_.-] and *)",
                c as char
            )));
        }
        Ok(Pattern {
            text: pattern.to_string(),
            glob: pattern.contains('*'),
        })
    }

    /// The literal text before the first `*`: every match starts with it.
    pub fn prefix(&self) -> &str {
        match self.text.find('*') {
            Some(i) => &self.text[..i],
            None => &self.text,
        }
    }

    /// Whether `key` matches.
    pub fn matches(&self, key: &str) -> bool {
        if !self.glob {
            return key.starts_with(&self.text);
        }
        glob_match(self.text.as_bytes(), key.as_bytes())
    }
}

/// `*`-only glob matching, linear with backtracking to the last star.
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for ok in ["a.b", "retrieval.chunks", "t-1.x_y.z", "a.b.c.d"] {
            assert!(validate_key(ok).is_ok(), "{ok}");
        }
        let long = format!("a.{}", "b".repeat(199));
        for bad in [
            "", "a", ".b", "a.", "a..b", "A.b", "a.B", "a b.c", "a:b.c", "a.b/c", &long,
        ] {
            assert!(
                matches!(validate_key(bad), Err(MindError::InvalidKey { .. })),
                "{bad}"
            );
        }
        assert!(validate_key(&format!("{}.b", "a".repeat(65))).is_err());
        assert!(validate_key(&format!("{}.b", "a".repeat(64))).is_ok());
    }

    #[test]
    fn ids() {
        assert!(validate_id("Run-1_x", "run id").is_ok());
        for bad in ["", "a:b", "a.b", &"x".repeat(65)] {
            assert!(validate_id(bad, "run id").is_err());
        }
    }

    #[test]
    fn patterns() {
        let p = |s: &str| Pattern::parse(s).unwrap();
        assert!(p("retrieval.*").matches("retrieval.chunks"));
        assert!(!p("retrieval.*").matches("retrievalx.chunks"));
        assert!(p("*.chunks").matches("bm25.chunks"));
        assert!(p("*.chunks").matches("a.b.chunks"));
        assert!(!p("*.chunks").matches("bm25.chunks2"));
        assert!(p("retrieval").matches("retrieval.q"));
        assert!(p("").matches("a.b") && p("*").matches("a.b"));
        assert!(p("a*c*e").matches("a.bcde") && !p("a*c*e").matches("a.bcd"));
        assert_eq!(p("ret*.x").prefix(), "ret");
        assert!(Pattern::parse("a?").is_err() && Pattern::parse("A*").is_err());
    }
}
