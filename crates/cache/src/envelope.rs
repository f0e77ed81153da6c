//! The bytes every tier stores: a header (magic, expiry, creation time, lengths, digest),
//! the entry's tags (so a tier it is copied into can still drop it by tag), then the value, checked on every read, so a corrupted, truncated or foreign entry
//! is a miss, never a crash or a wrong answer.

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 4] = b"NCC1";
/// Magic, expires at (ms, 0 = never), created at (ms), tags' length, value's length,
/// 16 bytes of SHA-256 of the fields, the tags and the value.
pub(crate) const HEADER: usize = 4 + 8 + 8 + 4 + 4 + 16;
/// An entry written more than this far in the future (the clock went back) is a miss.
const MAX_SKEW_MS: u64 = 60_000;

/// A decoded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Opened<'a> {
    pub(crate) created_ms: u64,
    pub(crate) expires_ms: Option<u64>,
    pub(crate) tags: Vec<String>,
    pub(crate) value: &'a [u8],
}

/// Why stored bytes are not a usable entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// Past its expiry.
    Expired,
    /// Not an entry, or damaged.
    Corrupt,
}

pub(crate) fn seal(
    value: &[u8],
    tags: &[String],
    created_ms: u64,
    expires_ms: Option<u64>,
) -> Vec<u8> {
    let joined = tags.join("\0");
    let mut out = Vec::with_capacity(HEADER + joined.len() + value.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&expires_ms.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&created_ms.to_le_bytes());
    out.extend_from_slice(
        &u32::try_from(joined.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    out.extend_from_slice(&u32::try_from(value.len()).unwrap_or(u32::MAX).to_le_bytes());
    let digest = digest(&out[4..28], joined.as_bytes(), value);
    out.extend_from_slice(&digest);
    out.extend_from_slice(joined.as_bytes());
    out.extend_from_slice(value);
    out
}

/// 16 bytes of the SHA-256 of the header's fields and the value.
fn digest(fields: &[u8], tags: &[u8], value: &[u8]) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(fields);
    h.update(tags);
    h.update(value);
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.finalize()[..16]);
    out
}

pub(crate) fn open(bytes: &[u8], now_ms: u64) -> Result<Opened<'_>, Unusable> {
    if bytes.len() < HEADER || &bytes[..4] != MAGIC {
        return Err(Unusable::Corrupt);
    }
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let expires = u64_at(4);
    let created = u64_at(12);
    let u32_at = |i: usize| {
        let mut b = [0u8; 4];
        b.copy_from_slice(&bytes[i..i + 4]);
        u32::from_le_bytes(b) as usize
    };
    let (tags_len, value_len) = (u32_at(20), u32_at(24));
    let rest = &bytes[HEADER..];
    if rest.len() != tags_len.saturating_add(value_len) {
        return Err(Unusable::Corrupt);
    }
    let (tags, value) = rest.split_at(tags_len);
    if digest(&bytes[4..28], tags, value) != bytes[28..44] {
        return Err(Unusable::Corrupt);
    }
    let tags = std::str::from_utf8(tags).map_err(|_| Unusable::Corrupt)?;
    let tags = if tags.is_empty() {
        Vec::new()
    } else {
        tags.split('\0').map(str::to_string).collect()
    };
    if expires != 0 && now_ms >= expires {
        return Err(Unusable::Expired);
    }
    if created > now_ms.saturating_add(MAX_SKEW_MS) {
        return Err(Unusable::Expired);
    }
    Ok(Opened {
        created_ms: created,
        expires_ms: (expires != 0).then_some(expires),
        tags,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_expiry_and_damage() {
        let tags = vec!["op:llm".to_string(), "tenant:acme".to_string()];
        let e = seal(b"hello", &tags, 1000, Some(2000));
        let o = open(&e, 1500).unwrap();
        assert_eq!(
            (o.value, o.created_ms, o.expires_ms, o.tags),
            (&b"hello"[..], 1000, Some(2000), tags)
        );
        assert_eq!(open(&e, 2000), Err(Unusable::Expired));
        let forever = seal(b"", &[], 5, None);
        assert!(open(&forever, u64::MAX).unwrap().tags.is_empty());
        assert_eq!(open(&forever, u64::MAX).unwrap().expires_ms, None);
        // Every truncation and every flipped byte is caught.
        for cut in 0..e.len() {
            assert_eq!(open(&e[..cut], 1500), Err(Unusable::Corrupt), "cut {cut}");
        }
        for i in 0..e.len() {
            let mut bad = e.clone();
            bad[i] ^= 0x40;
            assert_eq!(open(&bad, 1500), Err(Unusable::Corrupt), "byte {i}");
        }
        assert_eq!(
            open(b"not an entry at all, just some bytes here", 0),
            Err(Unusable::Corrupt)
        );
    }

    #[test]
    fn written_in_the_future_is_a_miss() {
        let e = seal(b"x", &[], 10_000_000, None);
        assert_eq!(open(&e, 1_000), Err(Unusable::Expired));
        assert!(open(&e, 10_000_000 - 30_000).is_ok());
    }
}
