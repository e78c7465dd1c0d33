//! bl's plugin runtime: loads WIT-typed wasm components with wasmtime and
//! calls them, handing each invocation only the capability handles it was
//! given.
//!
//! This crate owns the wasmtime [`Engine`](wasmtime::Engine) (one per
//! [`Runtime`]), the on-disk cache of compiled components, capability
//! admission (a component's imports against its world, its manifest and the
//! operator's grants), the per-invocation limits (deadline, memory, fuel,
//! output caps) and the mapping of every failure to a typed [`PluginError`].
//! It never decides what a verdict means and never writes run records:
//! callers get values or errors and take it from there. A gate that errs is
//! `GateOutcome::Error`, never a pass or a fail.

mod artifacts;
mod bindings;
mod cache;
mod compose;
mod config_schema;
mod error;
mod host;
mod limits;
mod package;
mod plugin_host;
mod runtime;
mod workspace;
mod worlds;

pub use artifacts::{
    InputArtifact, OutputDeclaration, PublishedOutput, Visibility, transform_seed,
};
pub use bl_core::plugin::{
    Capability, Grants, Import, ImportClass, World, admit, classify, classify_import,
};
pub use cache::ComponentSource;
pub use compose::{ContractRegistry, ContractReport, PatternError, judge_all};
pub use config_schema::ConfigRefused;
pub use error::PluginError;
pub use host::LogEntry;
pub use limits::Limits;
pub use package::{PackageError, PluginPackage};
pub use plugin_host::{
    FindError, FoundPlugin, Grant, Pin, PluginHost, Provenance, SignedBy, TrustPolicy,
    meets_requirement, split_requirement,
};
pub use runtime::{AllocatorChoice, Invocation, LoadOptions, Runtime, RuntimeConfig};
pub use worlds::{
    Approval, ContractPlugin, ContractRequest, GatePlugin, PolicyPlugin, PublishDecision,
    PublishRequest, TransformOutput, TransformPlugin, outcome,
};

pub use bl_core::{GateOutcome, Verdict};

pub use bl_core::plugin::{PluginManifest, WIT_PACKAGE};
