//! bl's bounded-loop engine, the domain half: a loop package's manifests
//! (`loop.yaml`, `bounds.yaml`) read as bounded-loops 0.7 reads them, the
//! nine bounds as pure checks, the stub runner's cassette, the chained
//! ledger line, `HANDOFF.md`, and the lap loop itself over ports
//! ([`engine::Runner`], [`engine::Gate`], [`engine::Workspace`], the clock,
//! the kill switch and the ledger). It does no I/O: the adapters (scratch
//! workspaces, runners in the sandbox, wasm gates, the ledger file) live
//! in bl-workers, bl-store and the CLI.

pub mod bounds;
pub mod cassette;
pub mod engine;
pub mod ledger;
pub mod manifest;
pub mod quarantine;
pub mod receipt;
pub mod redact;
