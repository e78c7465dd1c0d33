//! `bl egress check`: judge a URL, resolve its name once with the system's
//! resolver configuration (hickory), and judge every address it resolves
//! to, without connecting.

use std::net::IpAddr;

use crate::address::classify;
use crate::destination::{Denial, Destination, HostKind, UrlDecision, judge_url};
use crate::resolve::{ResolveError, Resolver};

/// One resolved (or literal) address and its class.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckedAddress {
    pub address: IpAddr,
    pub class: String,
    pub public: bool,
}

/// The full answer for one URL.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CheckReport {
    pub url: String,
    pub allow: bool,
    pub destination: Option<Destination>,
    pub addresses: Vec<CheckedAddress>,
    /// Why it is denied, when it is.
    pub denial: Option<String>,
}

fn checked(addr: IpAddr) -> CheckedAddress {
    let class = classify(addr);
    CheckedAddress {
        address: addr,
        public: class.is_public(),
        class: class.name(),
    }
}

/// Resolves `name` once; every address must be public unicast.
pub fn resolve(name: &str) -> Result<Vec<IpAddr>, ResolveError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ResolveError::Runtime(e.to_string()))?;
    runtime.block_on(async { Resolver::system()?.lookup(name).await })
}

pub fn check(url: &str) -> CheckReport {
    let deny = |destination: Option<Destination>, addresses, denial: String| CheckReport {
        url: url.to_string(),
        allow: false,
        destination,
        addresses,
        denial: Some(denial),
    };
    let destination = match judge_url(url) {
        UrlDecision::Deny(Denial::Address { address, class }) => {
            let addresses = address
                .parse()
                .map(|a| vec![checked(a)])
                .unwrap_or_default();
            return deny(
                None,
                addresses,
                format!("address {address} is {class}, not public unicast"),
            );
        }
        UrlDecision::Deny(denial) => return deny(None, Vec::new(), denial.to_string()),
        UrlDecision::Allow(d) => d,
    };
    let host = destination.host.clone();
    let addresses: Vec<CheckedAddress> = match &host {
        HostKind::Ip(addr) => vec![checked(*addr)],
        HostKind::Name(name) => match resolve(name) {
            Ok(addrs) => addrs.into_iter().map(checked).collect(),
            // Unknown addresses are not public ones: fail closed.
            Err(e) => return deny(Some(destination), Vec::new(), e.to_string()),
        },
    };
    if let Some(bad) = addresses.iter().find(|a| !a.public) {
        let denial = format!(
            "resolves to {} ({}), not public unicast",
            bad.address, bad.class
        );
        return deny(Some(destination), addresses, denial);
    }
    CheckReport {
        url: url.to_string(),
        allow: true,
        destination: Some(destination),
        addresses,
        denial: None,
    }
}
