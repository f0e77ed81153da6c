//! The SSRF guard: which addresses a fetched page may live at.
//!
//! A page fetch asked for by a user (URL ingest) or by a search result (web verification)
//! must not reach the server's own network: the loopback interface (a Redis on
//! `127.0.0.1:6379`), private and carrier-grade NAT ranges, link-local addresses (the
//! cloud metadata service on `169.254.169.254`), IPv6 unique-local addresses, and the
//! reserved, documentation and multicast ranges. The check runs inside the HTTP client's
//! name resolution ([`GuardedResolver`]), on the addresses it is about to connect to, so
//! it holds for a literal address, for a name whose DNS answer is private, for every
//! redirect hop, and against a name whose answer changes between a check and the
//! connection (DNS rebinding): there is no second lookup to change.
//!
//! `[web] allow_private_urls = true` turns the guard off, for a deployment whose pages
//! are on its own network; `[web] allow_addresses` lets through only the addresses,
//! ranges or address-and-port pairs it names ([`Allowed`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ureq::config::Config;
use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Why an address is refused, or `None` when it is a public unicast address.
pub fn refused_range(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

fn refused_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (127, ..) => "a loopback address",
        (10, ..) | (172, 16..=31, _) | (192, 168, _) => "a private address",
        (100, 64..=127, _) => "a carrier-grade NAT address",
        (169, 254, _) => "a link-local address",
        (0, ..) => "an unspecified (\"this network\") address",
        (192, 0, 0) => "an IETF protocol address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        (224..=239, ..) => "a multicast address",
        (240..=255, ..) => "a reserved or broadcast address",
        _ => return None,
    })
}

fn refused_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    let s = ip.segments();
    // Addresses that carry an IPv4 address: judged by it.
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return refused_v4(v4);
    }
    if s[..6] == [0; 6] {
        // IPv4-compatible (deprecated): ::a.b.c.d
        return refused_v4(embedded(s[6], s[7])).or(Some("a deprecated IPv4-compatible address"));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        // NAT64 (64:ff9b::/96)
        return refused_v4(embedded(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        // 6to4 (2002::/16): the IPv4 address is in segments 1 and 2.
        return refused_v4(embedded(s[1], s[2]));
    }
    Some(match s[0] {
        0xfc00..=0xfdff => "a unique-local address",
        0xfe80..=0xfebf => "a link-local address",
        0xfec0..=0xfeff => "a site-local address",
        0xff00..=0xffff => "a multicast address",
        0x0064 if s[1] == 0xff9b && s[2] == 1 => "a local-use NAT64 address",
        0x0100 if s[1..4] == [0; 3] => "a discard-only address",
        0x2001 if s[1] == 0x0db8 => "a documentation address",
        0x2001 if s[1] == 0 => "a Teredo address",
        0x3fff if s[1] <= 0x0fff => "a documentation address",
        _ => return None,
    })
}

/// One entry of `allow_addresses`: an address (`10.0.0.5`, `fd00::5`), a range in CIDR
/// notation (`10.1.0.0/16`), or an address and port (`127.0.0.1:8081`, `[::1]:8081`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Addresses whose first `prefix` bits are those of the address.
    Range(IpAddr, u8),
    /// One port of one address.
    Socket(SocketAddr),
}

impl Allowed {
    /// Parse one entry; the error says what is wrong with it.
    pub fn parse(entry: &str) -> Result<Allowed, String> {
        let entry = entry.trim();
        let bad = |why: &str| Err(format!("`{entry}` in allow_addresses {why}"));
        if let Some((ip, prefix)) = entry.split_once('/') {
            let Ok(ip) = ip.parse::<IpAddr>() else {
                return bad("is not an address/prefix range");
            };
            let max = if ip.is_ipv4() { 32 } else { 128 };
            return match prefix.parse::<u8>() {
                Ok(p) if p <= max => Ok(Allowed::Range(ip, p)),
                _ => bad(&format!("has a prefix length that is not 0 to {max}")),
            };
        }
        if let Ok(ip) = entry.parse::<IpAddr>() {
            return Ok(Allowed::Range(ip, if ip.is_ipv4() { 32 } else { 128 }));
        }
        match entry.parse::<SocketAddr>() {
            Ok(s) => Ok(Allowed::Socket(s)),
            Err(_) => bad("is neither an address, a range (10.0.0.0/8) nor an address:port"),
        }
    }

    /// Whether `addr` is let through.
    pub fn covers(&self, addr: SocketAddr) -> bool {
        match *self {
            Allowed::Socket(s) => s == addr,
            Allowed::Range(net, prefix) => match (net, addr.ip()) {
                (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(
                    u128::from(u32::from(n)),
                    u128::from(u32::from(a)),
                    prefix,
                    32,
                ),
                (IpAddr::V6(n), IpAddr::V6(a)) => {
                    prefix_eq(u128::from(n), u128::from(a), prefix, 128)
                }
                _ => false,
            },
        }
    }
}

/// Whether the first `prefix` of `bits` bits of `a` and `b` agree.
fn prefix_eq(a: u128, b: u128, prefix: u8, bits: u8) -> bool {
    if prefix == 0 {
        return true;
    }
    let shift = u32::from(bits - prefix.min(bits));
    (a >> shift) == (b >> shift)
}

/// The error a refused address becomes inside the HTTP client; [`crate::WebError`]'s
/// mapping turns it into [`crate::WebError::Refused`].
#[derive(Debug)]
pub(crate) struct RefusedAddress {
    pub(crate) host: String,
    pub(crate) ip: IpAddr,
    pub(crate) range: &'static str,
}

impl fmt::Display for RefusedAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.trim_matches(['[', ']']) == self.ip.to_string() {
            write!(f, "{} is {}", self.ip, self.range)
        } else {
            write!(f, "{} resolves to {}, {}", self.host, self.ip, self.range)
        }
    }
}

impl std::error::Error for RefusedAddress {}

/// Resolves like the client's default resolver, then refuses the whole answer when any
/// address in it is neither public (see [`refused_range`]) nor allowed.
#[derive(Debug, Default)]
pub(crate) struct GuardedResolver {
    inner: DefaultResolver,
    allowed: Vec<Allowed>,
}

impl GuardedResolver {
    pub(crate) fn new(allowed: Vec<Allowed>) -> GuardedResolver {
        GuardedResolver {
            inner: DefaultResolver::default(),
            allowed,
        }
    }
}

impl Resolver for GuardedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = self.inner.resolve(uri, config, timeout)?;
        for addr in addrs.iter() {
            if self.allowed.iter().any(|a| a.covers(*addr)) {
                continue;
            }
            if let Some(range) = refused_range(addr.ip()) {
                let host = uri.host().unwrap_or_default().to_owned();
                return Err(ureq::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    RefusedAddress {
                        host,
                        ip: addr.ip(),
                        range,
                    },
                )));
            }
        }
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> Option<&'static str> {
        refused_range(s.parse().unwrap())
    }

    #[test]
    fn public_addresses_pass() {
        for ok in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(refused(ok), None, "{ok}");
        }
    }

    #[test]
    fn internal_addresses_are_refused() {
        for (bad, why) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.254", "carrier-grade NAT"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("192.0.2.7", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique-local"),
            ("fc12:3456::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a00:1", "private"),
            ("2002:c0a8:0101::1", "private"),
            ("2001:db8::1", "documentation"),
            ("2001:0:4136:e378::1", "Teredo"),
        ] {
            let got = refused(bad).unwrap_or_else(|| panic!("{bad} passed"));
            assert!(got.contains(why), "{bad}: {got}");
        }
    }

    #[test]
    fn allow_entries() {
        let sock = |s: &str| s.parse::<SocketAddr>().unwrap();
        let range = Allowed::parse("10.1.0.0/16").unwrap();
        assert!(range.covers(sock("10.1.200.3:80")));
        assert!(!range.covers(sock("10.2.0.1:80")));
        assert!(!range.covers(sock("[::ffff:10.1.0.1]:80")));
        let one = Allowed::parse(" 192.168.1.7 ").unwrap();
        assert!(one.covers(sock("192.168.1.7:443")));
        assert!(!one.covers(sock("192.168.1.8:443")));
        let port = Allowed::parse("127.0.0.1:8081").unwrap();
        assert!(port.covers(sock("127.0.0.1:8081")));
        assert!(!port.covers(sock("127.0.0.1:6379")));
        let v6 = Allowed::parse("fd00::/8").unwrap();
        assert!(v6.covers(sock("[fd12::1]:80")));
        assert!(!v6.covers(sock("[fe80::1]:80")));
        assert!(Allowed::parse("0.0.0.0/0")
            .unwrap()
            .covers(sock("8.8.8.8:1")));
        for bad in [
            "",
            "10.0.0.0/33",
            "fd00::/129",
            "intranet",
            "10.0.0/8",
            "1.2.3.4:x",
        ] {
            let e = Allowed::parse(bad).unwrap_err();
            assert!(e.contains("allow_addresses"), "{bad}: {e}");
        }
    }

    #[test]
    fn messages_name_the_host_and_the_address() {
        let lit = RefusedAddress {
            host: "127.0.0.1".into(),
            ip: "127.0.0.1".parse().unwrap(),
            range: "a loopback address",
        };
        assert_eq!(lit.to_string(), "127.0.0.1 is a loopback address");
        let v6 = RefusedAddress {
            host: "[::1]".into(),
            ip: "::1".parse().unwrap(),
            range: "a loopback address",
        };
        assert_eq!(v6.to_string(), "::1 is a loopback address");
        let name = RefusedAddress {
            host: "intranet.example".into(),
            ip: "10.0.0.5".parse().unwrap(),
            range: "a private address",
        };
        assert_eq!(
            name.to_string(),
            "intranet.example resolves to 10.0.0.5, a private address"
        );
    }
}
