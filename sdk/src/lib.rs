//! The SDK for writing bl plugins in Rust.
//!
//! A plugin is a WIT-typed wasm component. This crate owns the guest side of
//! that ABI (the bindings for the `bl:plugin` WIT package in `wit/`), and
//! gives plugin authors a plain Rust trait per world plus a macro that
//! exports it. Plugin logic only sees the [`Workspace`] trait, so it runs
//! unchanged natively (see [`testing`]) and inside wasm.
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

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit/plugin",
        world: "gate",
        pub_export_macro: true,
        export_macro_name: "__export_gate_world",
        default_bindings_module: "bl_plugin_sdk::bindings",
    });
}

pub mod testing;

pub use bindings::bl::plugin::types::{Finding, Location, PluginError, Severity, Verdict};
pub use bindings::bl::plugin::workspace::{Entry, EntryKind, FsError};
pub use serde;
pub use serde_json;

/// A read-only view of the workspace a plugin was handed.
///
/// Paths are relative to the workspace root, with `/` separators. Absolute
/// paths, `..` and symlinks that leave the root are refused by the host.
pub trait Workspace {
    fn read(&self, path: &str) -> Result<Vec<u8>, FsError>;
    fn list(&self, path: &str) -> Result<Vec<Entry>, FsError>;
    fn stat(&self, path: &str) -> Result<Option<Entry>, FsError>;

    /// A file's contents as UTF-8 text.
    fn read_to_string(&self, path: &str) -> Result<String, FsError> {
        let bytes = self.read(path)?;
        String::from_utf8(bytes).map_err(|_| FsError::Io(format!("{path}: not UTF-8 text")))
    }
}

impl Workspace for bindings::bl::plugin::workspace::Dir {
    fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        bindings::bl::plugin::workspace::Dir::read(self, path)
    }
    fn list(&self, path: &str) -> Result<Vec<Entry>, FsError> {
        bindings::bl::plugin::workspace::Dir::list_dir(self, path)
    }
    fn stat(&self, path: &str) -> Result<Option<Entry>, FsError> {
        bindings::bl::plugin::workspace::Dir::stat(self, path)
    }
}

/// A gate: decides from the workspace alone whether a turn succeeded.
pub trait Gate {
    /// The operator's config, parsed from JSON. Unknown or ill-typed fields
    /// become a `bad-config` error before `check` runs.
    type Config: serde::de::DeserializeOwned;

    fn check(workspace: &dyn Workspace, config: Self::Config) -> Result<Verdict, PluginError>;
}

/// Parses the config and runs the gate: what the exported `check` does.
pub fn run_gate<G: Gate>(workspace: &dyn Workspace, config: &str) -> Result<Verdict, PluginError> {
    let config = if config.trim().is_empty() {
        "{}"
    } else {
        config
    };
    let parsed: G::Config =
        serde_json::from_str(config).map_err(|e| PluginError::BadConfig(format!("config: {e}")))?;
    G::check(workspace, parsed)
}

impl Verdict {
    pub fn pass(summary: impl Into<String>) -> Self {
        Verdict {
            passed: true,
            summary: summary.into(),
            findings: Vec::new(),
            evidence_digest: None,
        }
    }

    /// Passes exactly when there are no findings of severity above `info`.
    pub fn from_findings(findings: Vec<Finding>, pass_summary: &str, fail_summary: &str) -> Self {
        let passed = findings
            .iter()
            .all(|f| matches!(f.severity, Severity::Info));
        let summary = if passed {
            pass_summary.to_string()
        } else {
            fail_summary.to_string()
        };
        Verdict {
            passed,
            summary,
            findings,
            evidence_digest: None,
        }
    }
}

impl Finding {
    pub fn new(severity: Severity, message: impl Into<String>) -> Self {
        Finding {
            severity,
            message: message.into(),
            rule: None,
            location: None,
        }
    }

    pub fn rule(mut self, rule: &str) -> Self {
        self.rule = Some(rule.to_string());
        self
    }

    pub fn at(mut self, path: &str) -> Self {
        self.location = Some(Location {
            path: path.to_string(),
            line: None,
            column: None,
        });
        self
    }
}

/// Exports a type that implements [`Gate`] as this component's `gate` world.
#[macro_export]
macro_rules! export_gate {
    ($gate:ty) => {
        #[doc(hidden)]
        pub struct __BlGateExport;

        impl $crate::bindings::Guest for __BlGateExport {
            fn check(
                root: &$crate::bindings::bl::plugin::workspace::Dir,
                config: ::std::string::String,
            ) -> ::core::result::Result<$crate::Verdict, $crate::PluginError> {
                $crate::run_gate::<$gate>(root, &config)
            }
        }

        $crate::bindings::__export_gate_world!(__BlGateExport);
    };
}
