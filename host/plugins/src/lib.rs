//! bl's plugin runtime: loads WIT-typed wasm components with wasmtime and
//! calls them, handing each invocation only the capability handles it was
//! given (today: a read-only view of one workspace directory).
//!
//! This crate owns the wasmtime [`Engine`](wasmtime::Engine) (one per
//! [`Runtime`]), the on-disk cache of compiled components, the per-invocation
//! limits (a wall-clock deadline and a memory cap) and the mapping of every
//! failure to a typed [`PluginError`]. It never decides what a verdict means
//! and never writes run records: callers get a [`GateOutcome`] and take it
//! from there. A gate that errs is `GateOutcome::Error`, never a pass or fail.

mod cache;
mod error;
mod gate;
mod workspace;

pub use error::PluginError;
pub use gate::{GatePlugin, Limits, Runtime, RuntimeConfig};

pub use bl_core::{GateOutcome, Verdict};
