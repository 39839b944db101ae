//! Which addresses a webhook may reach. A `notify_url` is chosen by whoever submits a
//! task, and the node POSTs to it from inside the network: left alone, a submit token
//! could make the node call its cloud's metadata service, an admin port on loopback or
//! any service on the private network. So, by default, an address inside the network is
//! refused: loopback, private, shared (CGNAT), link-local (where cloud metadata lives),
//! multicast, broadcast, reserved and unspecified, in IPv4, IPv6 and the IPv6 forms that
//! carry an IPv4 address. Operators whose receivers are internal list them in
//! `webhook_allow`.
//!
//! The check happens on the addresses a name resolves to, in the resolver the delivering
//! client connects through ([`GuardedResolver`]), so the connection goes to an address
//! that was checked: a name that answers a public address to one lookup and a private
//! one to the next (DNS rebinding) gains nothing. reqwest does not ask the resolver about
//! a URL whose host is an address already, so those are checked by [`check_url`].

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

/// An address webhooks may not reach, and what kind it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forbidden {
    pub addr: IpAddr,
    pub kind: &'static str,
}

impl std::fmt::Display for Forbidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is a {} address", self.addr, self.kind)
    }
}

/// The refused ranges and the allow-list that overrides them.
#[derive(Debug, Clone, Default)]
pub(crate) struct AddressPolicy {
    allow: Vec<IpNet>,
}

impl AddressPolicy {
    /// From `webhook_allow`: CIDRs, or single addresses; empty entries are skipped.
    pub(crate) fn new(allow: &[String]) -> Result<Self, String> {
        let allow = allow
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("webhook_allow: {s:?} is not an address or a CIDR"))
            })
            .collect::<Result<_, _>>()?;
        Ok(AddressPolicy { allow })
    }

    /// Whether a webhook may connect to `addr`.
    pub(crate) fn check(&self, addr: IpAddr) -> Result<(), Forbidden> {
        let Some(kind) = forbidden_kind(addr) else {
            return Ok(());
        };
        // An allowed IPv4 network admits its IPv6-mapped forms too.
        let allowed = |a: IpAddr| self.allow.iter().any(|net| net.contains(&a));
        if allowed(addr) || embedded_v4(addr).is_some_and(|v4| allowed(IpAddr::V4(v4))) {
            return Ok(());
        }
        Err(Forbidden { addr, kind })
    }
}

/// A URL's host when it is an address (the resolver never sees those): checked here.
/// A name is left to the resolver. The URL parser has already turned every spelling of an IPv4 address (`127.1`,
/// `0x7f.0.0.1`, `2130706433`) into the dotted one.
pub(crate) fn check_url(policy: &AddressPolicy, url: &reqwest::Url) -> Result<(), Forbidden> {
    let host = url.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(addr) => policy.check(addr),
        Err(_) => Ok(()),
    }
}

/// The kind of a refused address, or `None` for one on the open internet. Ranges from
/// the IANA special-purpose registries; IPv6 forms that carry an IPv4 address are judged
/// by it.
fn forbidden_kind(addr: IpAddr) -> Option<&'static str> {
    match addr {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => {
            if v6.is_unspecified() {
                return Some("unspecified");
            }
            if v6.is_loopback() {
                return Some("loopback");
            }
            if let Some(v4) = embedded_v4(addr) {
                return v4_kind(v4);
            }
            V6_RANGES
                .iter()
                .find(|(net, _)| net.contains(&v6))
                .map(|(_, kind)| *kind)
        }
    }
}

fn v4_kind(v4: Ipv4Addr) -> Option<&'static str> {
    V4_RANGES
        .iter()
        .find(|(net, _)| net.contains(&v4))
        .map(|(_, kind)| *kind)
}

/// The IPv4 address inside an IPv6 one that stands for it: mapped (`::ffff:a.b.c.d`),
/// compatible (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) and 6to4 (`2002:aabb:ccdd::`).
/// A connection to any of them may end at that IPv4 address.
fn embedded_v4(addr: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = addr else {
        return None;
    };
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0, 0, _, _] => Some(low),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        [0x2002, a, b, ..] => Some(Ipv4Addr::new(
            (a >> 8) as u8,
            a as u8,
            (b >> 8) as u8,
            b as u8,
        )),
        _ => None,
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    match Ipv4Net::new(Ipv4Addr::new(a, b, c, d), len) {
        Ok(net) => net,
        Err(_) => panic!("a valid prefix length"),
    }
}

const fn v6(segments: [u16; 8], len: u8) -> Ipv6Net {
    let [a, b, c, d, e, f, g, h] = segments;
    match Ipv6Net::new(Ipv6Addr::new(a, b, c, d, e, f, g, h), len) {
        Ok(net) => net,
        Err(_) => panic!("a valid prefix length"),
    }
}

const V4_RANGES: &[(Ipv4Net, &str)] = &[
    // "This network": Linux connects 0.0.0.0 to the local host.
    (v4(0, 0, 0, 0, 8), "unspecified"),
    (v4(127, 0, 0, 0, 8), "loopback"),
    (v4(10, 0, 0, 0, 8), "private"),
    (v4(172, 16, 0, 0, 12), "private"),
    (v4(192, 168, 0, 0, 16), "private"),
    // Carrier-grade NAT; some clouds serve metadata here (100.100.100.200).
    (v4(100, 64, 0, 0, 10), "shared (CGNAT)"),
    // Cloud metadata services (169.254.169.254) live here.
    (v4(169, 254, 0, 0, 16), "link-local"),
    (v4(192, 0, 0, 0, 24), "reserved"),
    (v4(198, 18, 0, 0, 15), "reserved"),
    (v4(224, 0, 0, 0, 4), "multicast"),
    (v4(255, 255, 255, 255, 32), "broadcast"),
    (v4(240, 0, 0, 0, 4), "reserved"),
];

const V6_RANGES: &[(Ipv6Net, &str)] = &[
    // Unique local, where AWS serves metadata over IPv6 (fd00:ec2::254).
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "private"),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    // Site-local: deprecated, still routed inside some networks.
    (v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), "private"),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
];

/// The delivering client's resolver: the system's lookup, then every address the policy
/// refuses is dropped. The client connects only to what this returns.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

impl GuardedResolver {
    pub(crate) fn new(policy: Arc<AddressPolicy>) -> Self {
        GuardedResolver { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (kept, refused): (Vec<_>, Vec<_>) = found
                .into_iter()
                .map(|a| (a, policy.check(a.ip())))
                .partition(|(_, checked)| checked.is_ok());
            if kept.is_empty() {
                let why: Vec<String> = refused
                    .into_iter()
                    .filter_map(|(_, checked)| checked.err().map(|f| f.to_string()))
                    .collect();
                return Err(format!(
                    "address refused: {host} resolves only to addresses webhooks may not reach ({})",
                    why.join(", ")
                )
                .into());
            }
            let addrs: Addrs = Box::new(kept.into_iter().map(|(a, _)| a));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &AddressPolicy, addr: &str) -> Option<&'static str> {
        policy.check(addr.parse().unwrap()).err().map(|f| f.kind)
    }

    #[test]
    fn addresses_inside_the_network_are_refused_by_default() {
        let policy = AddressPolicy::default();
        let table = [
            ("127.0.0.1", Some("loopback")),
            ("127.9.9.9", Some("loopback")),
            ("0.0.0.0", Some("unspecified")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("172.32.0.1", None),
            ("192.168.1.1", Some("private")),
            ("100.64.0.1", Some("shared (CGNAT)")),
            ("100.100.100.200", Some("shared (CGNAT)")),
            ("169.254.169.254", Some("link-local")),
            ("224.0.0.1", Some("multicast")),
            ("255.255.255.255", Some("broadcast")),
            ("8.8.8.8", None),
            ("93.184.215.14", None),
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("fe80::1", Some("link-local")),
            ("fd00:ec2::254", Some("private")),
            ("fc00::1", Some("private")),
            ("ff02::1", Some("multicast")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:169.254.169.254", Some("link-local")),
            ("::ffff:10.0.0.1", Some("private")),
            ("::127.0.0.1", Some("loopback")),
            ("64:ff9b::a9fe:a9fe", Some("link-local")),
            ("2002:7f00:1::", Some("loopback")),
            ("::ffff:8.8.8.8", None),
            ("2606:4700::1111", None),
        ];
        for (addr, kind) in table {
            assert_eq!(refused(&policy, addr), kind, "{addr}");
        }
    }

    #[test]
    fn the_allow_list_admits_internal_receivers_and_their_mapped_forms() {
        let policy =
            AddressPolicy::new(&["10.1.0.0/16".into(), " 127.0.0.1 ".into(), "".into()]).unwrap();
        assert_eq!(refused(&policy, "10.1.2.3"), None);
        assert_eq!(refused(&policy, "::ffff:10.1.2.3"), None);
        assert_eq!(refused(&policy, "127.0.0.1"), None);
        assert_eq!(refused(&policy, "10.2.0.1"), Some("private"));
        assert_eq!(refused(&policy, "127.0.0.2"), Some("loopback"));
        assert_eq!(refused(&policy, "169.254.169.254"), Some("link-local"));
        assert!(AddressPolicy::new(&["10.0.0.0/33".into()]).is_err());
        assert!(AddressPolicy::new(&["intranet".into()]).is_err());
    }

    #[test]
    fn a_url_whose_host_is_an_address_is_checked_in_every_spelling() {
        let policy = AddressPolicy::default();
        for url in [
            "http://127.0.0.1:8080/hook",
            "http://127.1/",
            "http://0x7f.0.0.1/",
            "http://2130706433/",
            "http://0/",
            "http://[::1]/",
            "http://[::ffff:169.254.169.254]/latest/meta-data/",
            "https://user:pw@10.0.0.1/",
        ] {
            let url = reqwest::Url::parse(url).unwrap();
            assert!(check_url(&policy, &url).is_err(), "{url}");
        }
        let named = reqwest::Url::parse("http://localhost/").unwrap();
        assert!(
            check_url(&policy, &named).is_ok(),
            "names are the resolver's"
        );
    }

    #[tokio::test]
    async fn the_resolver_drops_refused_addresses() {
        let resolver = GuardedResolver::new(Arc::new(AddressPolicy::default()));
        let err = resolver
            .resolve("localhost".parse().unwrap())
            .await
            .err()
            .expect("localhost is refused");
        assert!(err.to_string().contains("address refused"), "{err}");
        let allowing = GuardedResolver::new(Arc::new(
            AddressPolicy::new(&["127.0.0.0/8".into(), "::1".into()]).unwrap(),
        ));
        let addrs: Vec<SocketAddr> = allowing
            .resolve("localhost".parse().unwrap())
            .await
            .expect("allowed")
            .collect();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()) && !addrs.is_empty());
    }
}
