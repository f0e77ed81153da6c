//! Naming rules for keys, run ids and patterns.
//!
//! - A key is `namespace.name`. The namespace is 1–64 characters of `[a-z0-9_-]`; the
//!   name is one or more dot-separated segments of `[a-z0-9_-]` (so `retrieval.chunks`
//!   and `tool.stats.latency` are keys, `a..b`, `a.` and `Ns.x` are not); at most
//!   [`MAX_KEY_BYTES`] bytes in all.
//! - A run id (and a Redis tenant) is 1–64 characters of `[A-Za-z0-9_-]`.
//! - A pattern is a glob: `*` matches any run of characters, dots included, and every
//!   other character matches itself (`retrieval.*`, `*.chunks`, `*`). A pattern without
//!   `*` matches only that exact key (`input.query`; `retrieval` matches nothing, since
//!   it is no key). [`glob_match`] is the one matcher: the Mind's `list_keys` and the
//!   agents' tool registry (a tool's `reads` and `writes`) both use it.

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

/// A checked `list_keys` pattern (see [`glob_match`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
}

impl Pattern {
    /// Parses a glob; `"*"` matches every key. The empty pattern is refused (it would
    /// match no key: `*` is every key).
    pub fn parse(pattern: &str) -> MindResult<Pattern> {
        let bad = |reason: String| MindError::InvalidPattern {
            pattern: pattern.chars().take(80).collect(),
            reason,
        };
        if pattern.len() > MAX_KEY_BYTES {
            return Err(bad(format!("longer than {MAX_KEY_BYTES} bytes")));
        }
        if pattern.is_empty() {
            return Err(bad(
                "an empty pattern matches no key (`*` matches every key)".into(),
            ));
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
        glob_match(&self.text, key)
    }
}

/// Whether `key` matches `pattern`, where `*` matches any run of characters (dots
/// included, possibly none) and every other character matches only itself: a pattern
/// without `*` matches only that exact key. `*.chunks` matches `bm25.chunks` and
/// `a.b.chunks` but not `bm25.chunks2`; `loop.*` matches `loop.iteration`; `input.query`
/// matches `input.query` only, not `input.queryx`.
///
/// Linear in practice: on a mismatch it backtracks only to the last `*`.
pub fn glob_match(pattern: &str, key: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), key.as_bytes());
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
        assert!(p("*").matches("a.b"));
        assert!(p("a*c*e").matches("a.bcde") && !p("a*c*e").matches("a.bcd"));
        assert_eq!(p("ret*.x").prefix(), "ret");
        assert!(Pattern::parse("a?").is_err() && Pattern::parse("A*").is_err());
    }

    /// The cases where the Mind's patterns (a prefix without `*`) and the tool
    /// registry's (exact) used to disagree: a pattern without `*` is the exact key.
    #[test]
    fn pattern_without_star_is_an_exact_key() {
        let p = |s: &str| Pattern::parse(s).unwrap();
        assert!(p("input.query").matches("input.query"));
        assert!(!p("input.query").matches("input.queryx"));
        assert!(!p("input.query").matches("input.query.text"));
        assert!(!p("retrieval").matches("retrieval.q"));
        assert!(!p("retrieval.").matches("retrieval.q"));
        assert!(p("retrieval.*").matches("retrieval.q"));
        // The scan prefix is the whole key: every match starts with it.
        assert_eq!(p("input.query").prefix(), "input.query");
        assert!(matches!(
            Pattern::parse(""),
            Err(MindError::InvalidPattern { .. })
        ));
        assert!(!glob_match("", "a.b") && glob_match("", ""));
    }

    #[test]
    fn glob_match_stars() {
        // Tool specs' `reads` and `writes`.
        assert!(glob_match("*.strips", "memory.strips"));
        assert!(!glob_match("*.strips", "memory.strips.meta"));
        assert!(glob_match("loop.*", "loop.iteration"));
        assert!(!glob_match("loop.*", "loops.iteration"));
        assert!(glob_match("*.chunks", "a.b.chunks"));
        // `*` may match nothing, and several stars backtrack.
        assert!(glob_match("a.*b", "a.b") && glob_match("**", ""));
        assert!(glob_match("a*c*e", "abcde") && !glob_match("a*c*e", "abde"));
        assert!(glob_match("*a*a*a", "aaaa") && !glob_match("*a*a*a", "aab"));
        assert!(glob_match("ab*ba", "abba") && !glob_match("ab*ba", "aba"));
        // Any characters, byte-exact.
        assert!(glob_match("é*ü", "éxyü") && !glob_match("é*ü", "exyü"));
    }

    proptest::proptest! {
        /// `glob_match` agrees with a plain recursive matcher.
        #[test]
        fn glob_match_is_the_reference(
            pattern in "[ab.*]{0,8}",
            key in "[ab.]{0,10}",
        ) {
            fn reference(p: &[u8], s: &[u8]) -> bool {
                match p.split_first() {
                    None => s.is_empty(),
                    Some((b'*', rest)) => (0..=s.len()).any(|i| reference(rest, &s[i..])),
                    Some((c, rest)) => s.first() == Some(c) && reference(rest, &s[1..]),
                }
            }
            proptest::prop_assert_eq!(
                glob_match(&pattern, &key),
                reference(pattern.as_bytes(), key.as_bytes())
            );
        }
    }
}
