//! One trait per world, the capability traits plugin logic sees, and the
//! export macros.

use crate::bindings::gate::bl::plugin::workspace::Dir;
use crate::bindings::transform::bl::plugin::artifacts::{InputSet, OutputSink};
use crate::{
    ArtifactError, ContractRequest, Entry, FsError, InputInfo, OutputDecl, PluginError,
    PublishDecision, PublishRequest, TransformReport, Verdict, parse_config,
};

/// A read-only view of the workspace a plugin was handed.
///
/// Paths are relative to the workspace root, with `/` separators. Absolute
/// paths, `..` and symlinks that leave the root are refused by the host, and
/// the attempt fails the whole call.
pub trait Workspace {
    /// A file's bytes (at most the host's read cap, 16 MiB by default).
    fn read(&self, path: &str) -> Result<Vec<u8>, FsError>;
    /// A directory's entries, sorted by name (`""` is the root).
    fn list(&self, path: &str) -> Result<Vec<Entry>, FsError>;
    /// What is at `path`, or `None` when nothing is.
    fn stat(&self, path: &str) -> Result<Option<Entry>, FsError>;

    /// A file's contents as UTF-8 text.
    fn read_to_string(&self, path: &str) -> Result<String, FsError> {
        let bytes = self.read(path)?;
        String::from_utf8(bytes).map_err(|_| FsError::Io(format!("{path}: not UTF-8 text")))
    }
}

impl Workspace for Dir {
    fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        Dir::read(self, path)
    }
    fn list(&self, path: &str) -> Result<Vec<Entry>, FsError> {
        Dir::list_dir(self, path)
    }
    fn stat(&self, path: &str) -> Result<Option<Entry>, FsError> {
        Dir::stat(self, path)
    }
}

/// A transform's declared inputs.
pub trait Inputs {
    /// Every declared input: name, media type, size and digest.
    fn entries(&self) -> Vec<InputInfo>;
    /// An input's bytes, verified against its digest by the host.
    fn read(&self, name: &str) -> Result<Vec<u8>, ArtifactError>;
}

/// A transform's declared outputs; each may be written once.
pub trait Outputs {
    /// Every declared output: name, media type and visibility.
    fn declared(&self) -> Vec<OutputDecl>;
    /// Writes a declared output, once.
    fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), ArtifactError>;
}

impl Inputs for InputSet {
    fn entries(&self) -> Vec<InputInfo> {
        InputSet::entries(self)
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, ArtifactError> {
        InputSet::read(self, name)
    }
}

#[doc(hidden)]
pub struct SinkRef<'a>(pub &'a OutputSink);

impl Outputs for SinkRef<'_> {
    fn declared(&self) -> Vec<OutputDecl> {
        self.0.declared()
    }
    fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), ArtifactError> {
        self.0.write(name, bytes)
    }
}

/// A gate: decides from the workspace alone whether a turn succeeded.
pub trait Gate {
    /// The operator's config, parsed from JSON. Ill-typed fields become a
    /// `bad-config` error before `check` runs.
    type Config: serde::de::DeserializeOwned;

    /// Decides from the workspace alone. An `Err` is an ERROR, never a
    /// failed verdict and never a pass.
    fn check(workspace: &dyn Workspace, config: Self::Config) -> Result<Verdict, PluginError>;
}

/// A completion contract: the shape one declared output must have.
pub trait Contract {
    /// The operator's config, parsed from JSON.
    type Config: serde::de::DeserializeOwned;

    /// Fail with a verdict whose summary says why; it becomes
    /// `<path>: <pattern> contract: <summary>` in the run's record.
    fn check(
        workspace: &dyn Workspace,
        request: &ContractRequest,
        config: Self::Config,
    ) -> Result<Verdict, PluginError>;
}

/// A transform: declared inputs in, declared outputs out, deterministically.
pub trait Transform {
    /// The operator's config, parsed from JSON.
    type Config: serde::de::DeserializeOwned;

    /// `seed` is the host's, derived from the run id and the input digests;
    /// use it for any ordering or sampling so re-runs give identical bytes.
    fn run(
        inputs: &dyn Inputs,
        outputs: &mut dyn Outputs,
        seed: &[u8],
        config: Self::Config,
    ) -> Result<TransformReport, PluginError>;
}

/// A publication policy: may this effect fire?
pub trait Policy {
    /// The operator's config, parsed from JSON.
    type Config: serde::de::DeserializeOwned;

    /// Allows or denies the effect. An `Err` denies it too: a policy that
    /// cannot decide never lets an effect fire.
    fn decide(
        request: &PublishRequest,
        config: Self::Config,
    ) -> Result<PublishDecision, PluginError>;
}

/// Parses the config and runs the gate: what the exported `check` does.
pub fn run_gate<G: Gate>(workspace: &dyn Workspace, config: &str) -> Result<Verdict, PluginError> {
    G::check(workspace, parse_config(config)?)
}

/// Parses the config and runs the contract: what the exported `check` does.
pub fn run_contract<C: Contract>(
    workspace: &dyn Workspace,
    request: &ContractRequest,
    config: &str,
) -> Result<Verdict, PluginError> {
    C::check(workspace, request, parse_config(config)?)
}

/// Parses the config and runs the transform: what the exported `run` does.
pub fn run_transform<T: Transform>(
    inputs: &dyn Inputs,
    outputs: &mut dyn Outputs,
    seed: &[u8],
    config: &str,
) -> Result<TransformReport, PluginError> {
    T::run(inputs, outputs, seed, parse_config(config)?)
}

/// Parses the config and runs the policy: what the exported `decide` does.
pub fn run_policy<P: Policy>(
    request: &PublishRequest,
    config: &str,
) -> Result<PublishDecision, PluginError> {
    P::decide(request, parse_config(config)?)
}

/// Exports a type that implements [`Gate`] as this component's `gate` world.
#[macro_export]
macro_rules! export_gate {
    ($gate:ty) => {
        #[doc(hidden)]
        pub struct __BlGateExport;

        impl $crate::bindings::gate::Guest for __BlGateExport {
            fn check(
                root: &$crate::bindings::gate::bl::plugin::workspace::Dir,
                config: ::std::string::String,
            ) -> ::core::result::Result<$crate::Verdict, $crate::PluginError> {
                $crate::run_gate::<$gate>(root, &config)
            }
        }

        $crate::bindings::gate::__export_gate_world!(__BlGateExport);
    };
}

/// Exports a type that implements [`Contract`] as a `completion-contract`.
#[macro_export]
macro_rules! export_contract {
    ($contract:ty) => {
        #[doc(hidden)]
        pub struct __BlContractExport;

        impl $crate::bindings::contract::Guest for __BlContractExport {
            fn check(
                root: &$crate::bindings::gate::bl::plugin::workspace::Dir,
                request: $crate::ContractRequest,
                config: ::std::string::String,
            ) -> ::core::result::Result<$crate::Verdict, $crate::PluginError> {
                $crate::run_contract::<$contract>(root, &request, &config)
            }
        }

        $crate::bindings::contract::__export_contract_world!(__BlContractExport);
    };
}

/// Exports a type that implements [`Transform`] as a `transform`.
#[macro_export]
macro_rules! export_transform {
    ($transform:ty) => {
        #[doc(hidden)]
        pub struct __BlTransformExport;

        impl $crate::bindings::transform::Guest for __BlTransformExport {
            fn run(
                inputs: &$crate::bindings::transform::bl::plugin::artifacts::InputSet,
                outputs: &$crate::bindings::transform::bl::plugin::artifacts::OutputSink,
                seed: ::std::vec::Vec<u8>,
                config: ::std::string::String,
            ) -> ::core::result::Result<$crate::TransformReport, $crate::PluginError> {
                let mut sink = $crate::SinkRef(outputs);
                $crate::run_transform::<$transform>(inputs, &mut sink, &seed, &config)
            }
        }

        $crate::bindings::transform::__export_transform_world!(__BlTransformExport);
    };
}

/// Exports a type that implements [`Policy`] as a `publication-policy`.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[doc(hidden)]
        pub struct __BlPolicyExport;

        impl $crate::bindings::policy::Guest for __BlPolicyExport {
            fn decide(
                request: $crate::PublishRequest,
                config: ::std::string::String,
            ) -> ::core::result::Result<$crate::PublishDecision, $crate::PluginError> {
                $crate::run_policy::<$policy>(&request, &config)
            }
        }

        $crate::bindings::policy::__export_policy_world!(__BlPolicyExport);
    };
}
