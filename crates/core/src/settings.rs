//! Settings types and helpers shared by the configuration (`neuralcore-config`) and
//! the crates it configures. They live here so the configuration needs neither the
//! index nor the models crate (and so can be fuzzed without building them).

use serde::{Deserialize, Serialize};

/// HNSW settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HnswParams {
    /// Links per node on the upper layers (twice this on layer 0).
    pub m: usize,
    /// Candidate list size while inserting.
    pub ef_construction: usize,
    /// Candidate list size while searching (raised to `k` when smaller).
    pub ef_search: usize,
    /// Collections with fewer live vectors than this are searched exactly.
    pub exact_below: usize,
}

/// Defaults measured on SciFact (see `bench/README.md`, "vector index").
impl Default for HnswParams {
    fn default() -> Self {
        HnswParams {
            m: 16,
            ef_construction: 200,
            ef_search: 64,
            exact_below: 2048,
        }
    }
}

/// How the query path (one sequence of at most `NARROW_MAX` tokens) holds
/// its weights. A query's forward pass reads every weight once, so the bytes streamed
/// are most of its time; the compact formats are copies beside the f32 weights, which
/// documents (and longer queries) keep using.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryWeights {
    /// The model's own f32 weights.
    #[default]
    F32,
    /// bfloat16 copies (half the bytes): worst cosine 0.99999 against the f32 vectors
    /// on the parity fixture.
    Bf16,
    /// int8 copies with one scale per output row (a quarter of the bytes): worst cosine
    /// 0.9986 on the parity fixture, below the 0.999 a default must hold.
    Int8,
}

impl QueryWeights {
    /// Every format.
    pub const ALL: [QueryWeights; 3] = [QueryWeights::F32, QueryWeights::Bf16, QueryWeights::Int8];

    /// Its name in configuration.
    pub fn name(self) -> &'static str {
        match self {
            QueryWeights::F32 => "f32",
            QueryWeights::Bf16 => "bf16",
            QueryWeights::Int8 => "int8",
        }
    }
}

impl std::fmt::Display for QueryWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for QueryWeights {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        QueryWeights::ALL
            .into_iter()
            .find(|q| q.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown query weight format {s:?} (f32, bf16 or int8)"))
    }
}

/// `url` with its password replaced by `***`: `redis://user:secret@host` becomes
/// `redis://user:***@host`, `redis://:secret@host` becomes `redis://:***@host`, and a
/// `password=` or `pass=` query parameter is hidden the same way.
pub fn redact_url(url: &str) -> String {
    // The query's passwords first: hiding one can end the authority earlier (a `/` in a
    // password), and the user info is then read from what is left, so a second pass
    // changes nothing.
    let mut out = url.to_string();
    for param in ["password=", "pass="] {
        let mut from = 0;
        while let Some(i) = out[from..].find(param).map(|i| i + from) {
            let before = out[..i].chars().next_back();
            let start = i + param.len();
            if !matches!(before, Some('?') | Some('&')) {
                from = start;
                continue;
            }
            let end = out[start..]
                .find(['&', '#'])
                .map_or(out.len(), |j| start + j);
            out = format!("{}***{}", &out[..start], &out[end..]);
            from = start + 3;
        }
    }
    if let Some(start) = out.find("://").map(|i| i + 3) {
        let rest = &out[start..];
        let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if let Some(at) = rest[..auth_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                out = format!("{}{}:***{}", &out[..start], &rest[..colon], &rest[at..]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_url("redis://user:secret@h:6379/0"),
            "redis://user:***@h:6379/0"
        );
        assert_eq!(redact_url("redis://:secret@h/"), "redis://:***@h/");
        assert_eq!(redact_url("rediss://u:p@ss@h/"), "rediss://u:***@h/");
        assert_eq!(redact_url("redis://h:6379/"), "redis://h:6379/");
        assert_eq!(redact_url("redis://u@h/"), "redis://u@h/");
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=secret&x=1"),
            "redis+unix:///run/redis.sock?db=1&pass=***&x=1"
        );
        assert_eq!(
            redact_url("unix:///s.sock?password=secret"),
            "unix:///s.sock?password=***"
        );
        assert_eq!(redact_url("not a url"), "not a url");
        // A password in the query that ends the authority early is hidden, and so is
        // the user info found after it: a second pass changes nothing.
        let once = redact_url("redis://a:b&pass=/&@h/");
        assert_eq!(once, "redis://a:***@h/");
        for url in [
            "redis://a:b&pass=/&@h/",
            "redis://x&pass=1:s@h?password=p#f",
            &once,
        ] {
            let r = redact_url(url);
            assert_eq!(redact_url(&r), r, "{url}");
        }
    }

    #[test]
    fn query_weights_parse_by_name() {
        for q in QueryWeights::ALL {
            assert_eq!(q.name().to_uppercase().parse::<QueryWeights>(), Ok(q));
        }
        assert!("f16".parse::<QueryWeights>().is_err());
    }
}
