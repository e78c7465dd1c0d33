//! One plugin host per process: the wasmtime engine (made on first use, so
//! a run without plugins never pays for it), the compiled-component cache,
//! and the directories plugins are found in by name. Every use case loads
//! its gates, contracts, transforms and policies through it, each plugin
//! with its own grants, command runner and per-call deadline.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bl_core::CommandRunner;
use bl_core::plugin::{Capability, Grants};

use crate::error::PluginError;
use crate::package::{PackageError, PluginPackage};
use crate::runtime::{LoadOptions, Runtime, RuntimeConfig};
use crate::worlds::{ContractPlugin, GatePlugin, PolicyPlugin, TransformPlugin};

pub struct PluginHost {
    config: RuntimeConfig,
    search_path: Vec<PathBuf>,
    runtime: OnceLock<Result<Runtime, PluginError>>,
}

/// Why a named plugin could not be had: it is nowhere on the search path,
/// or its files could not be read as a plugin.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error(
        "plugin {name:?} not found: it is not a file, and no {name}.wasm is in {}. Build the first-party plugins with `scripts/dev setup`, or set BL_PLUGIN_PATH",
        searched.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotFound {
        name: String,
        /// Every directory looked in, in order.
        searched: Vec<PathBuf>,
    },
    #[error(transparent)]
    Package(#[from] PackageError),
}

/// A plugin found and read, not yet loaded: what a run records about it
/// even when it then cannot load.
pub struct FoundPlugin {
    pub path: PathBuf,
    pub package: PluginPackage,
    /// What its manifest declares; `None` without a manifest.
    pub declared: Option<Vec<Capability>>,
    /// `sha256:` and the hex digest of its component.
    pub digest: String,
}

impl FoundPlugin {
    pub fn name(&self) -> String {
        self.package.name()
    }
}

/// What one plugin is loaded with: the capabilities granted it, what its
/// `command` capability runs through, and limits for each of its calls
/// (the host's own when `None`).
#[derive(Clone, Default)]
pub struct Grant {
    pub grants: Grants,
    pub commands: Option<Arc<dyn CommandRunner>>,
    pub deadline: Option<Duration>,
    pub command_timeout: Option<Duration>,
}

impl Grant {
    pub fn of(grants: Grants) -> Grant {
        Grant {
            grants,
            ..Grant::default()
        }
    }
}

impl PluginHost {
    pub fn new(config: RuntimeConfig, search_path: Vec<PathBuf>) -> PluginHost {
        PluginHost {
            config,
            search_path,
            runtime: OnceLock::new(),
        }
    }

    /// The engine and everything shared across calls, made on first use.
    pub fn runtime(&self) -> Result<&Runtime, PluginError> {
        self.runtime
            .get_or_init(|| Runtime::new(self.config.clone()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Where plugins are looked for by name, in order.
    pub fn search_path(&self) -> &[PathBuf] {
        &self.search_path
    }

    /// A plugin argument: an existing file, or `<name>.wasm` on the search path.
    pub fn resolve(&self, name: &str) -> Result<PathBuf, FindError> {
        let as_path = Path::new(name);
        if as_path.is_file() {
            return Ok(as_path.to_path_buf());
        }
        self.search_path
            .iter()
            .map(|dir| dir.join(format!("{name}.wasm")))
            .find(|candidate| candidate.is_file())
            .ok_or_else(|| FindError::NotFound {
                name: name.to_string(),
                searched: self.search_path.clone(),
            })
    }

    /// Finds and reads a plugin, with its manifest's declarations.
    pub fn find(&self, name: &str) -> Result<FoundPlugin, FindError> {
        let path = self.resolve(name)?;
        let package = PluginPackage::open(&path)?;
        let declared = package.declared()?;
        let digest = bl_core::Sha256Digest::of(&package.bytes).to_string();
        Ok(FoundPlugin {
            path,
            package,
            declared,
            digest,
        })
    }

    fn options<'a>(plugin: &'a FoundPlugin, grant: &Grant) -> LoadOptions<'a> {
        LoadOptions {
            declared: plugin.declared.as_deref(),
            grants: grant.grants.clone(),
            commands: grant.commands.clone(),
            deadline: grant.deadline,
            command_timeout: grant.command_timeout,
        }
    }

    pub fn load_gate(
        &self,
        plugin: &FoundPlugin,
        grant: &Grant,
    ) -> Result<GatePlugin, PluginError> {
        let options = Self::options(plugin, grant);
        self.runtime()?
            .load_gate(&plugin.name(), &plugin.package.bytes, &options)
    }

    pub fn load_contract(
        &self,
        plugin: &FoundPlugin,
        grant: &Grant,
    ) -> Result<ContractPlugin, PluginError> {
        let options = Self::options(plugin, grant);
        self.runtime()?
            .load_contract(&plugin.name(), &plugin.package.bytes, &options)
    }

    pub fn load_transform(
        &self,
        plugin: &FoundPlugin,
        grant: &Grant,
    ) -> Result<TransformPlugin, PluginError> {
        let options = Self::options(plugin, grant);
        self.runtime()?
            .load_transform(&plugin.name(), &plugin.package.bytes, &options)
    }

    pub fn load_policy(
        &self,
        plugin: &FoundPlugin,
        grant: &Grant,
    ) -> Result<PolicyPlugin, PluginError> {
        let options = Self::options(plugin, grant);
        self.runtime()?
            .load_policy(&plugin.name(), &plugin.package.bytes, &options)
    }
}
