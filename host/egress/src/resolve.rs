//! Name resolution (hickory) and the address policy every resolved or
//! literal address is judged by.

use std::net::{IpAddr, SocketAddr};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;

use crate::destination::{Denial, Destination, HostKind, UrlDecision, judge_address, judge_url};

/// Which addresses a request may reach. Production is public unicast only.
/// The one exception, loopback, exists for end-to-end tests against a
/// server on this machine: it is compiled in only with the `test-loopback`
/// feature and set only by calling [`AddressPolicy::allowing_loopback_for_tests`];
/// no configuration file, flag or variable reaches it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    loopback_for_tests: bool,
}

impl AddressPolicy {
    pub fn production() -> Self {
        AddressPolicy::default()
    }

    #[cfg(feature = "test-loopback")]
    pub fn allowing_loopback_for_tests() -> Self {
        AddressPolicy {
            loopback_for_tests: true,
        }
    }

    /// Whether plain `http` may carry a request (only to a test server).
    pub fn allows_plain_http(&self) -> bool {
        self.loopback_for_tests
    }

    pub fn judge_address(&self, addr: IpAddr) -> Result<(), Denial> {
        if self.loopback_for_tests && addr.is_loopback() {
            return Ok(());
        }
        judge_address(addr).map(|_| ())
    }

    pub fn judge_url(&self, url: &str) -> Result<Destination, Denial> {
        match judge_url(url) {
            UrlDecision::Allow(destination) => Ok(destination),
            UrlDecision::Deny(Denial::Address { address, class }) => {
                let parsed: Option<IpAddr> = address.parse().ok();
                match parsed {
                    Some(addr) if self.judge_address(addr).is_ok() => {
                        // Only the loopback exception gets here; rebuild the
                        // destination the normal path would have returned.
                        let parsed_url = url::Url::parse(url.trim())
                            .map_err(|e| Denial::Unparseable(e.to_string()))?;
                        Ok(Destination {
                            url: parsed_url.to_string(),
                            scheme: parsed_url.scheme().to_string(),
                            host: HostKind::Ip(addr),
                            port: parsed_url.port_or_known_default().unwrap_or(80),
                        })
                    }
                    _ => Err(Denial::Address { address, class }),
                }
            }
            UrlDecision::Deny(denial) => Err(denial),
        }
    }
}

/// A resolver: the system's configuration, or given name servers (tests run
/// their own DNS server on loopback).
#[derive(Clone)]
pub struct Resolver {
    inner: TokioResolver,
}

impl Resolver {
    pub fn system() -> Result<Self, ResolveError> {
        let inner = TokioResolver::builder_tokio()
            .map_err(|e| ResolveError::SystemConfig(e.to_string()))?
            .build();
        Ok(Resolver { inner })
    }

    /// Asks only `server` (over UDP), with no cache, so every lookup is a
    /// fresh question the server sees.
    pub fn with_name_server(server: SocketAddr) -> Self {
        let mut config = ResolverConfig::new();
        config.add_name_server(NameServerConfig::new(server, Protocol::Udp));
        let mut options = ResolverOpts::default();
        options.cache_size = 0;
        options.attempts = 1;
        let inner = TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
            .with_options(options)
            .build();
        Resolver { inner }
    }

    /// Resolves `name` once. An answer with no address is an error too:
    /// callers judge every address, and there must be one to connect to.
    pub async fn lookup(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let lookup = self
            .inner
            .lookup_ip(name)
            .await
            .map_err(|e| ResolveError::Lookup {
                name: name.to_string(),
                // hickory's own text for these two prints its query's Debug form.
                detail: if e.is_nx_domain() {
                    "no such name".into()
                } else if e.is_no_records_found() {
                    "the name has no address records".into()
                } else {
                    e.to_string()
                },
            })?;
        let addresses: Vec<IpAddr> = lookup.iter().collect();
        if addresses.is_empty() {
            return Err(ResolveError::NoAddress {
                name: name.to_string(),
            });
        }
        Ok(addresses)
    }
}

/// Why a name has no addresses to judge. Each denies: an unknown address is
/// not a public one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("reading the system's resolver configuration: {0}")]
    SystemConfig(String),
    #[error("resolver runtime: {0}")]
    Runtime(String),
    #[error("{name} does not resolve: {detail}")]
    Lookup { name: String, detail: String },
    #[error("{name} resolves to no address")]
    NoAddress { name: String },
}

/// A destination judged, resolved once and pinned: the only addresses a
/// request to it may connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub destination: Destination,
    /// The host name as the URL spells it (what TLS and `Host` use).
    pub host: String,
    pub addresses: Vec<SocketAddr>,
}

/// Judges `url`, resolves its host once and requires every address to pass
/// `policy`. Unknown addresses are not public ones: a failed lookup denies.
pub async fn pin(
    url: &str,
    policy: &AddressPolicy,
    resolver: &Resolver,
) -> Result<Pinned, PinError> {
    let destination = policy.judge_url(url).map_err(PinError::Denied)?;
    let (host, addresses) = match &destination.host {
        HostKind::Ip(addr) => (addr.to_string(), vec![*addr]),
        HostKind::Name(name) => {
            let addresses = resolver.lookup(name).await.map_err(PinError::Resolution)?;
            (name.clone(), addresses)
        }
    };
    for addr in &addresses {
        policy.judge_address(*addr).map_err(PinError::Denied)?;
    }
    let port = destination.port;
    Ok(Pinned {
        host,
        addresses: addresses
            .into_iter()
            .map(|a| SocketAddr::new(a, port))
            .collect(),
        destination,
    })
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error("{0}")]
    Denied(Denial),
    #[error("{0}")]
    Resolution(ResolveError),
}
