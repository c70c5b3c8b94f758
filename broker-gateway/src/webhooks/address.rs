//! Which addresses a webhook may be delivered to: public ones, plus whatever the
//! operator's allow list (`--webhook-allow CIDR`) names.
//!
//! Without this the gateway would be a probe into the networks it sits in: a caller
//! allowed to create webhooks could make it POST to the broker's monitoring port, a
//! cloud metadata service (169.254.169.254) or any private host, and read the answers'
//! status codes back through the subscription's `last_error`. So loopback, private
//! (RFC 1918, ULA), link-local, unspecified, multicast, broadcast and shared (CGNAT)
//! addresses are refused, also when written as IPv4-mapped or NAT64 IPv6 addresses.
//! The check is made on the resolved address, and the delivery connects to exactly the
//! address it checked ([`super::http`]), so a DNS answer cannot change in between.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// An address range, `ADDR/PREFIX` (a bare address is the range of just it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// Why a text is not a CIDR range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an address range (like 10.0.0.0/8 or fd00::/8)")]
pub struct CidrError(String);

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || CidrError(s.to_owned());
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let network: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            // Digits only: `u8::from_str` would also take a leading `+`.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().ok().filter(|n| *n <= max).ok_or_else(bad)?
            }
            Some(_) => return Err(bad()),
        };
        Ok(Self { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Cidr {
    /// Whether `ip` is in the range (an IPv4 range never holds an IPv6 address: callers
    /// pass addresses through [`canonical`] first).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => same_prefix(
                u128::from(net.to_bits()),
                u128::from(ip.to_bits()),
                32,
                self.prefix,
            ),
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                same_prefix(net.to_bits(), ip.to_bits(), 128, self.prefix)
            }
            _ => false,
        }
    }
}

fn same_prefix(a: u128, b: u128, bits: u8, prefix: u8) -> bool {
    let shift = u32::from(bits - prefix);
    // A shift by the whole width is a /0: everything matches.
    a.checked_shr(shift).unwrap_or(0) == b.checked_shr(shift).unwrap_or(0)
}

/// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`, or NAT64's `64:ff9b::a.b.c.d`) as
/// the IPv4 address it reaches; anything else unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let [a, b, c, d, e, f, ..] = v6.segments();
    if [a, b, c, d, e, f] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let low = v6.to_bits() as u32;
        return IpAddr::V4(Ipv4Addr::from_bits(low));
    }
    ip
}

/// The IPv4 address a host written in one of the old numeric forms reaches, as URL
/// parsers (WHATWG) and the system resolver (`inet_aton`) read it: one to four parts, each
/// decimal, octal (a leading `0`) or hexadecimal (`0x`), the last filling the bytes left
/// (`2130706433`, `0x7f000001`, `0177.0.0.1`, `127.1` are all 127.0.0.1); a trailing dot
/// is allowed. `None` for anything else, which is then a name.
///
/// Without it such a host is taken for a name, accepted at creation and only refused
/// once resolved: it must be refused at creation like `127.0.0.1`.
pub fn numeric_ipv4(host: &str) -> Option<Ipv4Addr> {
    let host = host.strip_suffix('.').unwrap_or(host);
    let parts: Vec<u64> = host.split('.').map(numeric_part).collect::<Option<_>>()?;
    let (last, first) = parts.split_last()?;
    if parts.len() > 4 || first.iter().any(|p| *p > 255) {
        return None;
    }
    let room = 8 * (5 - parts.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let high = first
        .iter()
        .enumerate()
        .fold(0u64, |acc, (i, p)| acc | (p << (8 * (3 - i as u32))));
    u32::try_from(high | last).ok().map(Ipv4Addr::from_bits)
}

/// One part of [`numeric_ipv4`]: `0x…` hexadecimal, `0…` octal, else decimal.
fn numeric_part(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    // `0x` alone is 0 for both readers; otherwise digits only (no sign, no space), and
    // few enough that the value fits.
    if digits.is_empty() {
        return (radix == 16).then_some(0);
    }
    if digits.len() > 12 || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// What kind of non-public address `ip` is, or `None` for a public one.
pub fn restricted_kind(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(if ip.is_loopback() {
        "loopback"
    } else if ip.is_private() {
        "private"
    } else if ip.is_link_local() {
        "link-local"
    } else if a == 0 {
        "unspecified"
    } else if a == 100 && (64..128).contains(&b) {
        "shared (carrier-grade NAT)"
    } else if ip.is_multicast() {
        "multicast"
    } else if ip.is_broadcast() {
        "broadcast"
    } else {
        return None;
    })
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(if ip.is_loopback() {
        "loopback"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if first & 0xfe00 == 0xfc00 {
        "private (unique local)"
    } else if first & 0xffc0 == 0xfe80 {
        "link-local"
    } else if first & 0xffc0 == 0xfec0 {
        "private (site-local)"
    } else if ip.is_multicast() {
        "multicast"
    } else {
        return None;
    })
}

/// The gateway's rule for webhook addresses: refuse non-public ones unless allowed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    allow: Vec<Cidr>,
}

/// An address a webhook may not be delivered to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{address} is a {kind} address; webhooks to it need --webhook-allow")]
pub struct Refused {
    /// The address.
    pub address: IpAddr,
    /// What kind of address it is (`loopback`, `private`, …).
    pub kind: &'static str,
}

impl AddressPolicy {
    /// Refuses non-public addresses except those in `allow`.
    pub fn new(allow: Vec<Cidr>) -> Self {
        Self { allow }
    }

    /// `Ok` when a webhook may be delivered to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        let ip = canonical(ip);
        let Some(kind) = restricted_kind(ip) else {
            return Ok(());
        };
        if self.allow.iter().any(|range| range.contains(ip)) {
            return Ok(());
        }
        Err(Refused { address: ip, kind })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn old_numeric_ipv4_forms_are_the_addresses_they_reach() {
        let loopback = Some(Ipv4Addr::LOCALHOST);
        for host in [
            "2130706433",
            "0x7f000001",
            "0X7F000001",
            "0177.0.0.1",
            "127.1",
            "127.0.1",
            "0x7f.1",
            "0x7f.0.0.0x1",
            "017700000001",
            "127.0.0.1.",
        ] {
            assert_eq!(numeric_ipv4(host), loopback, "{host}");
        }
        assert_eq!(
            numeric_ipv4("169.254.43518"),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        assert_eq!(numeric_ipv4("0"), Some(Ipv4Addr::UNSPECIFIED));
        // WHATWG reads a bare `0x` as 0 (the system resolver refuses it): the stricter
        // reading refuses more.
        assert_eq!(numeric_ipv4("0x"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(numeric_ipv4("8.8.8.8"), Some(Ipv4Addr::new(8, 8, 8, 8)));
        for name in [
            "example.com",
            "1.2.3.4.5",
            "256.0.0.1",
            "127.0.0.256",
            "4294967296",
            "127..1",
            "",
            ".",
            "08.0.0.1",
            "1e3",
            "+1",
            " 1",
            "127.0.0.1.example",
        ] {
            assert_eq!(numeric_ipv4(name), None, "{name:?}");
        }
    }

    #[test]
    fn ranges_parse_and_match() {
        let r: Cidr = "10.0.0.0/8".parse().expect("range");
        assert!(r.contains(ip("10.255.1.2")) && !r.contains(ip("11.0.0.0")));
        let one: Cidr = "127.0.0.1".parse().expect("bare address");
        assert_eq!(one.to_string(), "127.0.0.1/32");
        assert!(one.contains(ip("127.0.0.1")) && !one.contains(ip("127.0.0.2")));
        let all: Cidr = "::/0".parse().expect("everything v6");
        assert!(all.contains(ip("fe80::1")) && !all.contains(ip("10.0.0.1")));
        let v6: Cidr = "fd00:1::/32".parse().expect("v6 range");
        assert!(v6.contains(ip("fd00:1:ffff::1")) && !v6.contains(ip("fd00:2::1")));
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "x/8",
            "10.0.0/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn non_public_addresses_are_refused_in_every_spelling() {
        let policy = AddressPolicy::default();
        for (addr, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.9.9.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd12::1", "private (unique local)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("64:ff9b::10.0.0.1", "private"),
        ] {
            let refused = policy.check(ip(addr)).expect_err(addr);
            assert_eq!(refused.kind, kind, "{addr}");
        }
        for public in ["1.1.1.1", "100.128.0.1", "172.32.0.1", "2606:4700::1111"] {
            policy.check(ip(public)).expect(public);
        }
    }

    #[test]
    fn the_allow_list_lets_named_ranges_through_also_when_mapped() {
        let policy = AddressPolicy::new(vec!["127.0.0.1/32".parse().expect("range")]);
        policy.check(ip("127.0.0.1")).expect("allowed");
        policy
            .check(ip("::ffff:127.0.0.1"))
            .expect("mapped form allowed too");
        let refused = policy
            .check(ip("127.0.0.2"))
            .expect_err("outside the range");
        assert_eq!(
            refused.to_string(),
            "127.0.0.2 is a loopback address; webhooks to it need --webhook-allow"
        );
    }
}
