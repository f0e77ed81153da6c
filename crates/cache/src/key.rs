//! Cache keys: SHA-256 of a canonical encoding of everything that changes a result.
//!
//! Every field is written with its kind and length before its bytes, so no two different
//! field lists encode alike (`("ab", "c")` never meets `("a", "bc")`), and floats are
//! written by their bits, so `0.1` and `0.1000001` differ. The tenant and the operation
//! come first: two tenants asking the same thing never share an entry, and no input one
//! tenant controls can produce another tenant's key.

use std::fmt;

use sha2::{Digest, Sha256};

/// A cached operation: each has its own switch, TTL and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// A query's embedding (or a sentence's, compared with a query).
    QueryEmbedding,
    /// Keyword, vector or hybrid search results of a collection at a generation.
    Search,
    /// Cross-encoder scores of (query, chunk text) pairs.
    Rerank,
    /// Evaluator scores of (query, chunk text) pairs.
    Grade,
    /// Web search results and fetched pages.
    Web,
    /// LLM completions.
    Llm,
    /// Memory search results at a memory-store version.
    MemorySearch,
    /// Whole answer reports, valid while what they drew on is unchanged.
    Answer,
}

impl Op {
    /// Every operation, in a stable order.
    pub const ALL: [Op; 8] = [
        Op::QueryEmbedding,
        Op::Search,
        Op::Rerank,
        Op::Grade,
        Op::Web,
        Op::Llm,
        Op::MemorySearch,
        Op::Answer,
    ];

    /// Its name in config keys, tags, stats and `cache clear --op`.
    pub fn name(self) -> &'static str {
        match self {
            Op::QueryEmbedding => "query_embedding",
            Op::Search => "search",
            Op::Rerank => "rerank",
            Op::Grade => "grade",
            Op::Web => "web",
            Op::Llm => "llm",
            Op::MemorySearch => "memory_search",
            Op::Answer => "answer",
        }
    }

    /// The operation named `name`.
    pub fn parse(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|o| o.name() == name)
    }

    pub(crate) fn index(self) -> usize {
        Op::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A finished key: the operation, and the SHA-256 of the canonical encoding.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    op: Op,
    digest: [u8; 32],
}

impl CacheKey {
    /// The operation.
    pub fn op(&self) -> Op {
        self.op
    }

    /// How tiers store it: `<op>/<64 hex>`.
    pub fn storage_key(&self) -> String {
        let mut s = String::with_capacity(self.op.name().len() + 65);
        s.push_str(self.op.name());
        s.push('/');
        for b in self.digest {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

impl fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.storage_key())
    }
}

/// Builds a [`CacheKey`] field by field.
///
/// ```
/// use neuralcore_cache::{KeyBuilder, Op};
/// let a = KeyBuilder::new("acme", Op::Search).str("docs").u64(7).str("tides").finish();
/// let b = KeyBuilder::new("globex", Op::Search).str("docs").u64(7).str("tides").finish();
/// assert_ne!(a, b);
/// ```
pub struct KeyBuilder {
    op: Op,
    hasher: Sha256,
}

impl KeyBuilder {
    /// A key of `tenant`'s `op`.
    pub fn new(tenant: &str, op: Op) -> KeyBuilder {
        let mut k = KeyBuilder {
            op,
            hasher: Sha256::new(),
        };
        k.hasher.update(b"neuralcore.cache/v1");
        k = k.str(tenant).str(op.name());
        k
    }

    fn field(mut self, kind: u8, bytes: &[u8]) -> Self {
        self.hasher.update([kind]);
        self.hasher.update((bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
        self
    }

    /// A string.
    pub fn str(self, s: &str) -> Self {
        self.field(b's', s.as_bytes())
    }

    /// Bytes.
    pub fn bytes(self, b: &[u8]) -> Self {
        self.field(b'b', b)
    }

    /// An unsigned integer.
    pub fn u64(self, n: u64) -> Self {
        self.field(b'u', &n.to_le_bytes())
    }

    /// A float, by its bits.
    pub fn f64(self, x: f64) -> Self {
        self.field(b'f', &x.to_bits().to_le_bytes())
    }

    /// A flag.
    pub fn bool(self, b: bool) -> Self {
        self.field(b'?', &[u8::from(b)])
    }

    /// An optional string (`None` differs from every string, the empty one included).
    pub fn opt_str(self, s: Option<&str>) -> Self {
        match s {
            Some(s) => self.field(b'S', s.as_bytes()),
            None => self.field(b'N', &[]),
        }
    }

    /// A JSON value, by its canonical text (object keys sorted, as `serde_json` keeps
    /// them without `preserve_order`).
    pub fn json(self, v: &serde_json::Value) -> Self {
        self.field(b'j', v.to_string().as_bytes())
    }

    /// The key.
    pub fn finish(self) -> CacheKey {
        CacheKey {
            op: self.op,
            digest: self.hasher.finalize().into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_never_run_together() {
        let k = |a: &str, b: &str| KeyBuilder::new("t", Op::Llm).str(a).str(b).finish();
        assert_ne!(k("ab", "c"), k("a", "bc"));
        assert_ne!(k("", "x"), k("x", ""));
        let none = KeyBuilder::new("t", Op::Llm).opt_str(None).finish();
        let empty = KeyBuilder::new("t", Op::Llm).opt_str(Some("")).finish();
        assert_ne!(none, empty);
        // The same number as different kinds differs too.
        let u = KeyBuilder::new("t", Op::Llm).u64(1).finish();
        let f = KeyBuilder::new("t", Op::Llm)
            .f64(f64::from_bits(1))
            .finish();
        assert_ne!(u, f);
    }

    #[test]
    fn tenant_and_op_partition_keys() {
        let k = |t: &str, op: Op| KeyBuilder::new(t, op).str("same").finish();
        assert_ne!(k("acme", Op::Search), k("globex", Op::Search));
        assert_ne!(k("acme", Op::Search), k("acme", Op::Answer));
        // A tenant name cannot smuggle another tenant's fields.
        assert_ne!(
            KeyBuilder::new("acme", Op::Search).str("x").finish(),
            KeyBuilder::new("acmes", Op::Search).finish()
        );
        assert_eq!(k("acme", Op::Search), k("acme", Op::Search));
        let s = k("acme", Op::Search).storage_key();
        assert!(s.starts_with("search/") && s.len() == 7 + 64, "{s}");
    }

    #[test]
    fn op_names_round_trip() {
        for op in Op::ALL {
            assert_eq!(Op::parse(op.name()), Some(op));
        }
        assert_eq!(Op::parse("nope"), None);
    }
}
