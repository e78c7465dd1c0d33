//! The domain of bl: the types every other crate speaks (verdicts, findings,
//! outcomes) and the pure functions that define bl's record formats (canonical
//! JSON and `sha256:` digests, byte-compatible with bounded-loops 0.7).
//!
//! This crate owns no I/O: it never touches files, processes, the network or a
//! clock. Adapters (the plugin runtime, the store, the sandbox) depend on it;
//! it depends on none of them.

pub mod canonical;
pub mod egress_audit;
pub mod evidence;
pub mod exec;
pub mod health;
pub mod interrupt;
pub mod package;
pub mod plugin;
pub mod python;
pub mod sha256;
pub mod spelling;
pub mod table;
pub mod verdict;

pub use canonical::{canonical_json, digest, python_json, sha256_hex};
pub use exec::{CommandError, CommandResult, CommandRunner, CommandSpec, HomeGrant};
pub use sha256::Sha256Digest;
pub use verdict::{Finding, GateOutcome, Location, Severity, Verdict};
