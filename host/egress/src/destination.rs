//! A URL judged as a destination: scheme, userinfo, host name and every
//! literal address.

use std::net::IpAddr;

use crate::address::{AddressClass, classify};

/// Why a destination is refused. Each says what was seen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum Denial {
    #[error("not a URL: {0}")]
    Unparseable(String),
    #[error("scheme `{0}` is not allowed; only http and https are")]
    Scheme(String),
    #[error(
        "the URL carries credentials (user info); send them through the broker's admitted connection instead"
    )]
    Userinfo,
    #[error("the URL has no host")]
    NoHost,
    #[error("host `{0}` names this machine or an internal network")]
    InternalName(String),
    #[error("address {address} is {class}, not public unicast")]
    Address { address: String, class: String },
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostKind {
    /// A name to be resolved; every address it resolves to is judged.
    Name(String),
    Ip(IpAddr),
}

/// A parsed, normalised destination.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Destination {
    /// The URL as the WHATWG parser normalised it.
    pub url: String,
    pub scheme: String,
    pub host: HostKind,
    pub port: u16,
}

/// The decision on a URL before any resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UrlDecision {
    /// Allowed so far; a `Name` host still needs every resolved address judged.
    Allow(Destination),
    Deny(Denial),
}

/// Judges an address (literal or resolved).
pub fn judge_address(addr: IpAddr) -> Result<AddressClass, Denial> {
    let class = classify(addr);
    if class.is_public() {
        Ok(class)
    } else {
        Err(Denial::Address {
            address: addr.to_string(),
            class: class.name(),
        })
    }
}

fn internal_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host == "internal"
        || host.ends_with(".internal")
        || host.is_empty()
}

pub fn judge_url(text: &str) -> UrlDecision {
    let url = match url::Url::parse(text.trim()) {
        Ok(u) => u,
        Err(e) => return UrlDecision::Deny(Denial::Unparseable(e.to_string())),
    };
    let scheme = url.scheme().to_string();
    if scheme != "http" && scheme != "https" {
        return UrlDecision::Deny(Denial::Scheme(scheme));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return UrlDecision::Deny(Denial::Userinfo);
    }
    let host = match url.host() {
        None => return UrlDecision::Deny(Denial::NoHost),
        Some(url::Host::Domain(name)) => {
            if internal_name(name) {
                return UrlDecision::Deny(Denial::InternalName(name.to_string()));
            }
            HostKind::Name(name.trim_end_matches('.').to_ascii_lowercase())
        }
        Some(url::Host::Ipv4(a)) => HostKind::Ip(IpAddr::V4(a)),
        Some(url::Host::Ipv6(a)) => HostKind::Ip(IpAddr::V6(a)),
    };
    if let HostKind::Ip(addr) = host
        && let Err(denial) = judge_address(addr)
    {
        return UrlDecision::Deny(denial);
    }
    let port = url
        .port_or_known_default()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    UrlDecision::Allow(Destination {
        url: url.to_string(),
        scheme,
        host,
        port,
    })
}
