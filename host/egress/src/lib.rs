//! bl's egress destination policy. A node never holds a credential and
//! never reaches the network itself; the broker makes its one request, and
//! only to a destination this policy allows: `http`/`https`, no userinfo,
//! and only public unicast addresses.
//!
//! This crate is the pure part: URLs are parsed WHATWG-style (so every IPv4
//! spelling, decimal, octal, hex and short forms, normalises before it is
//! judged), host names are judged by name (`localhost`, `*.localhost`,
//! `*.internal`), and every address is classified against the IANA IPv4 and
//! IPv6 special-purpose registries, unwrapping IPv6 forms that carry an
//! IPv4 address ([`judge_url`], [`classify`]).
//!
//! On top of it: [`admitted`] reads admitted-connection records (the
//! `--admitted` file), [`resolve`] resolves a host once (hickory) and pins
//! its addresses, [`lease`] issues single-use, time- and effect-bound
//! leases, and [`broker`] forwards one request per lease to the pinned
//! addresses with the credential added on the broker's side.

mod address;
pub mod admitted;
pub mod broker;
mod check;
mod destination;
pub mod lease;
pub mod posture;
pub mod proxy;
pub mod resolve;

pub use address::{AddressClass, classify};
pub use admitted::{AdmittedConnection, AdmittedError, parse_admitted};
pub use broker::{
    AuditError, Broker, BrokerLimits, Credential, CredentialSource, EgressAudit, EgressError,
    EgressEvent, EnvCredentials, ForwardedResponse, MemoryAudit, OutboundRequest,
};
pub use check::{CheckReport, CheckedAddress, check, resolve};
pub use destination::{Denial, Destination, HostKind, UrlDecision, judge_address, judge_url};
pub use lease::{Lease, LeaseBook, LeaseDenial};
pub use resolve::{AddressPolicy, PinError, Pinned, ResolveError, Resolver, pin};
