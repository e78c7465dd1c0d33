//! Every IP address classified against the IANA special-purpose registries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// What an address is. Only [`AddressClass::Public`] may be reached.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "class", content = "inner")]
pub enum AddressClass {
    Public,
    ThisNetwork,
    Loopback,
    Private,
    SharedCgnat,
    LinkLocal,
    Benchmarking,
    Documentation,
    Multicast,
    Broadcast,
    Reserved,
    Unspecified,
    UniqueLocal,
    SiteLocal,
    Discard,
    /// IPv4-mapped, IPv4-compatible or NAT64: judged by the address inside.
    Embeds4(Box<AddressClass>),
    /// 6to4 or Teredo: a tunnel, never reached directly.
    Tunnel(Box<AddressClass>),
}

impl AddressClass {
    pub fn is_public(&self) -> bool {
        match self {
            AddressClass::Public => true,
            AddressClass::Embeds4(inner) => inner.is_public(),
            _ => false,
        }
    }

    /// A short name for messages, e.g. `loopback` or `ipv4_mapped(private)`.
    pub fn name(&self) -> String {
        match self {
            AddressClass::Embeds4(inner) => format!("embeds_ipv4({})", inner.name()),
            AddressClass::Tunnel(inner) => format!("tunnel({})", inner.name()),
            other => format!("{other:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let lower = c.to_ascii_lowercase();
                    if c.is_ascii_uppercase() && i > 0 {
                        vec!['_', lower]
                    } else {
                        vec![lower]
                    }
                })
                .collect(),
        }
    }
}

fn v4(net: &str) -> Ipv4Net {
    net.parse().expect("a valid IPv4 network in the table")
}

fn v6(net: &str) -> Ipv6Net {
    net.parse().expect("a valid IPv6 network in the table")
}

/// The IPv4 special-purpose registry, most specific entries first.
fn ipv4_table() -> Vec<(Ipv4Net, AddressClass)> {
    use AddressClass::*;
    vec![
        (v4("255.255.255.255/32"), Broadcast),
        (v4("192.0.0.0/24"), Reserved),
        (v4("192.0.2.0/24"), Documentation),
        (v4("192.31.196.0/24"), Reserved),
        (v4("192.52.193.0/24"), Reserved),
        (v4("192.88.99.0/24"), Reserved),
        (v4("192.175.48.0/24"), Reserved),
        (v4("198.51.100.0/24"), Documentation),
        (v4("203.0.113.0/24"), Documentation),
        (v4("198.18.0.0/15"), Benchmarking),
        (v4("0.0.0.0/8"), ThisNetwork),
        (v4("10.0.0.0/8"), Private),
        (v4("100.64.0.0/10"), SharedCgnat),
        (v4("127.0.0.0/8"), Loopback),
        (v4("169.254.0.0/16"), LinkLocal),
        (v4("172.16.0.0/12"), Private),
        (v4("192.168.0.0/16"), Private),
        (v4("224.0.0.0/4"), Multicast),
        (v4("240.0.0.0/4"), Reserved),
    ]
}

pub fn classify_v4(addr: Ipv4Addr) -> AddressClass {
    ipv4_table()
        .into_iter()
        .find(|(net, _)| net.contains(&addr))
        .map(|(_, class)| class)
        .unwrap_or(AddressClass::Public)
}

/// The 32 bits of `addr` that sit `shift` bits above the lowest bit.
fn embedded_v4(addr: Ipv6Addr, shift: u32) -> Ipv4Addr {
    Ipv4Addr::from(((u128::from(addr) >> shift) & 0xffff_ffff) as u32)
}

pub fn classify_v6(addr: Ipv6Addr) -> AddressClass {
    use AddressClass::*;
    if addr == Ipv6Addr::UNSPECIFIED {
        return Unspecified;
    }
    if addr == Ipv6Addr::LOCALHOST {
        return Loopback;
    }
    // Forms that carry an IPv4 address: unwrap and judge that.
    if v6("::ffff:0:0/96").contains(&addr)
        || v6("::/96").contains(&addr)
        || v6("64:ff9b::/96").contains(&addr)
    {
        return Embeds4(Box::new(classify_v4(embedded_v4(addr, 0))));
    }
    if v6("2002::/16").contains(&addr) {
        return Tunnel(Box::new(classify_v4(embedded_v4(addr, 80))));
    }
    if v6("2001::/32").contains(&addr) {
        // Teredo carries the client's address inverted in the last 32 bits.
        let client = Ipv4Addr::from(!(u128::from(addr) as u32));
        return Tunnel(Box::new(classify_v4(client)));
    }
    let table: [(&str, AddressClass); 15] = [
        ("64:ff9b:1::/48", Reserved),
        ("100::/64", Discard),
        ("2001:2::/48", Benchmarking),
        ("2001:db8::/32", Documentation),
        ("3fff::/20", Documentation),
        ("2001:10::/28", Reserved),
        ("2001:20::/28", Reserved),
        ("2001::/23", Reserved),
        ("5f00::/16", Reserved),
        ("fc00::/7", UniqueLocal),
        ("fe80::/10", LinkLocal),
        ("fec0::/10", SiteLocal),
        ("ff00::/8", Multicast),
        ("::/8", Reserved),
        ("2000::/3", Public),
    ];
    for (net, class) in table {
        if v6(net).contains(&addr) {
            return class;
        }
    }
    // Outside global unicast (2000::/3): not assigned for public use.
    Reserved
}

pub fn classify(addr: IpAddr) -> AddressClass {
    match addr {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => classify_v6(a),
    }
}
