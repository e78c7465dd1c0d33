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
//! IPv4 address. Resolution, pinning and the forwarder build on it.

mod address;
mod check;
mod destination;

pub use address::{AddressClass, classify};
pub use check::{CheckReport, CheckedAddress, check, resolve};
pub use destination::{Decision, Denial, Destination, HostKind, judge_address, judge_url};
