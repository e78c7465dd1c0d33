//! The SDK for writing bl plugins in Rust.
//!
//! A plugin is a WIT-typed wasm component. This crate owns the guest side of
//! that ABI (the bindings for the `bl:plugin` WIT package in `wit/`) and
//! gives plugin authors one plain Rust trait per world, plus a macro that
//! exports it:
//!
//! | world                  | trait           | macro              |
//! |------------------------|-----------------|--------------------|
//! | `gate`                 | [`Gate`]        | [`export_gate!`]     |
//! | `completion-contract`  | [`Contract`]    | [`export_contract!`] |
//! | `transform`            | [`Transform`]   | [`export_transform!`]|
//! | `publication-policy`   | [`Policy`]      | [`export_policy!`]   |
//!
//! Plugin logic sees only the [`Workspace`], [`Inputs`] and [`Outputs`]
//! traits and the [`command`] and [`log`] functions, so it runs unchanged
//! natively (see [`testing`]) and inside wasm. A capability is requested by
//! using it: a plugin that never calls [`command::run`] does not import the
//! `command` interface, and needs no grant for it.
//!
//! ```ignore
//! use bl_plugin_sdk::{Gate, Verdict, PluginError, Workspace};
//!
//! struct AlwaysPass;
//! impl Gate for AlwaysPass {
//!     type Config = serde_json::Value;
//!     fn check(_ws: &dyn Workspace, _config: Self::Config) -> Result<Verdict, PluginError> {
//!         Ok(Verdict::pass("nothing to check"))
//!     }
//! }
//! bl_plugin_sdk::export_gate!(AlwaysPass);
//! ```

#![warn(missing_docs)]

// The generated bindings name this crate by its absolute path, so the export
// macros work from inside plugin crates.
extern crate self as bl_plugin_sdk;

#[doc(hidden)]
#[allow(missing_docs)]
pub mod bindings;
pub mod command;
pub mod log;
pub mod testing;
mod worlds;

pub use bindings::gate::bl::plugin::types::{
    Approval, ContractRequest, Finding, Location, PluginError, PublishDecision, PublishRequest,
    Severity, TransformReport, Verdict,
};
pub use bindings::gate::bl::plugin::workspace::{Entry, EntryKind, FsError};
pub use bindings::transform::bl::plugin::artifacts::{
    ArtifactError, InputInfo, OutputDecl, Visibility,
};
pub use serde;
pub use serde_json;
pub use worlds::*;

impl Verdict {
    /// A passing verdict.
    pub fn pass(summary: impl Into<String>) -> Self {
        Verdict {
            passed: true,
            summary: summary.into(),
            findings: Vec::new(),
            evidence_digest: None,
        }
    }

    /// A failing verdict; say why in the summary or in findings.
    pub fn fail(summary: impl Into<String>) -> Self {
        Verdict {
            passed: false,
            summary: summary.into(),
            findings: Vec::new(),
            evidence_digest: None,
        }
    }

    /// The same verdict, with these findings.
    pub fn with_findings(mut self, findings: Vec<Finding>) -> Self {
        self.findings = findings;
        self
    }

    /// Passes exactly when there are no findings of severity above `info`.
    pub fn from_findings(findings: Vec<Finding>, pass_summary: &str, fail_summary: &str) -> Self {
        let passed = findings
            .iter()
            .all(|f| matches!(f.severity, Severity::Info));
        let summary = if passed { pass_summary } else { fail_summary };
        Verdict {
            passed,
            summary: summary.to_string(),
            findings,
            evidence_digest: None,
        }
    }
}

impl Finding {
    /// A finding with no rule and no location.
    pub fn new(severity: Severity, message: impl Into<String>) -> Self {
        Finding {
            severity,
            message: message.into(),
            rule: None,
            location: None,
        }
    }

    /// The same finding, naming the rule it breaks.
    pub fn rule(mut self, rule: &str) -> Self {
        self.rule = Some(rule.to_string());
        self
    }

    /// The same finding, at a file of the workspace.
    pub fn at(mut self, path: &str) -> Self {
        self.location = Some(Location {
            path: path.to_string(),
            line: None,
            column: None,
        });
        self
    }

    /// The same finding, at a line (1-based) of a file.
    pub fn at_line(mut self, path: &str, line: u32) -> Self {
        self.location = Some(Location {
            path: path.to_string(),
            line: Some(line),
            column: None,
        });
        self
    }
}

impl PublishDecision {
    /// Lets the effect fire.
    pub fn allow(reason: impl Into<String>) -> Self {
        PublishDecision {
            allow: true,
            reason: reason.into(),
        }
    }

    /// Stops the effect, saying why.
    pub fn deny(reason: impl Into<String>) -> Self {
        PublishDecision {
            allow: false,
            reason: reason.into(),
        }
    }
}

/// getrandom's custom backend: plugins hold no randomness capability, so
/// crates that seed hash maps from OS entropy get fixed bytes, which also
/// keeps plugin output deterministic.
#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
#[unsafe(no_mangle)]
unsafe extern "Rust" fn __getrandom_v03_custom(
    dest: *mut u8,
    len: usize,
) -> Result<(), getrandom::Error> {
    // SAFETY: getrandom hands us a writable buffer of exactly `len` bytes.
    unsafe { core::ptr::write_bytes(dest, 0x5a, len) };
    Ok(())
}

/// A workspace refusal in words (the generated `Display` shows the Rust
/// form, which is no message for a person).
pub fn describe_fs_error(error: &FsError) -> String {
    match error {
        FsError::NotFound(p) => format!("not found in the workspace: {p}"),
        FsError::Escape(p) => format!("outside the workspace: {p}"),
        FsError::WrongKind(p) => format!("not a file of the kind asked for: {p}"),
        FsError::TooLarge(p) => format!("too large to read: {p}"),
        FsError::Io(m) => format!("workspace: {m}"),
    }
}

/// An artifact refusal in words.
pub fn describe_artifact_error(error: &ArtifactError) -> String {
    match error {
        ArtifactError::NotDeclared(n) => format!("no declared input or output is named {n}"),
        ArtifactError::AlreadyWritten(n) => format!("output {n} was already written"),
        ArtifactError::TooLarge(n) => format!("over the host's size limit: {n}"),
        ArtifactError::Io(m) => format!("artifacts: {m}"),
    }
}

/// A refused workspace call ends the plugin's work with a capability error,
/// so `?` works on workspace calls inside `check`.
impl From<FsError> for PluginError {
    fn from(error: FsError) -> Self {
        PluginError::Capability(describe_fs_error(&error))
    }
}

/// A refused artifact call ends the plugin's work with a capability error,
/// so `?` works on input and output calls inside `run`.
impl From<ArtifactError> for PluginError {
    fn from(error: ArtifactError) -> Self {
        PluginError::Capability(describe_artifact_error(&error))
    }
}

/// `sha256:<hex>` of `bytes`, the form evidence and artifact digests take.
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    for byte in hash {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// Parses the operator's JSON config; `""` means `{}`.
pub fn parse_config<C: serde::de::DeserializeOwned>(config: &str) -> Result<C, PluginError> {
    let config = if config.trim().is_empty() {
        "{}"
    } else {
        config
    };
    serde_json::from_str(config).map_err(|e| PluginError::BadConfig(format!("config: {e}")))
}
