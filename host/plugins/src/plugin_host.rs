//! One plugin host per process: the wasmtime engine (made on first use, so
//! a run without plugins never pays for it), the compiled-component cache,
//! and the directories plugins are found in by name. Every use case loads
//! its gates, contracts, transforms and policies through it, each plugin
//! with its own grants, command runner and per-call deadline. A project's
//! lock pins plugins by digest: a pinned plugin whose bytes differ is
//! never found, whatever directory it is in.

use std::collections::BTreeMap;
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
    /// What a project's lock pins, by plugin name.
    pins: BTreeMap<String, Pin>,
    /// Why no plugin may be found at all (a lock that cannot be read:
    /// its pins cannot be checked, so nothing runs).
    refusal: Option<String>,
    runtime: OnceLock<Result<Runtime, PluginError>>,
}

/// A plugin as a project's lock pins it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// `sha256:<hex>` its component must have.
    pub digest: String,
    /// Where the lock says it is (whichever file is found, the digest decides).
    pub lock: PathBuf,
    /// Installed unsigned because the operator allowed it by name; runs
    /// that use it record so.
    pub unsigned: bool,
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
    #[error("{0}")]
    Refused(String),
    #[error(
        "plugin {name:?} at {path} is version {found}, which does not meet {requirement}; install one that does (`bl plugin install {name}@{requirement}`)"
    )]
    Version {
        name: String,
        requirement: String,
        found: String,
        path: PathBuf,
    },
    #[error(
        "plugin {name:?} at {path} has {found}, but {lock} pins {pinned}; nothing was run. Install the pinned version again (`bl plugin install {name}`), or see what changed with `bl plugin verify`"
    )]
    PinMismatch {
        name: String,
        path: PathBuf,
        found: String,
        pinned: String,
        lock: PathBuf,
    },
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
    /// Pinned by a lock that records it was installed unsigned.
    pub unsigned: bool,
}

/// `NAME@REQ` as the name and the version requirement (none without `@`).
pub fn split_requirement(name: &str) -> (&str, Option<&str>) {
    match name.split_once('@') {
        Some((name, requirement)) => (name, Some(requirement)),
        None => (name, None),
    }
}

/// Whether `version` (MAJOR.MINOR.PATCH) meets the semver `requirement`;
/// either one unreadable never does.
pub fn meets_requirement(version: &str, requirement: &str) -> bool {
    semver::VersionReq::parse(requirement)
        .ok()
        .zip(semver::Version::parse(version).ok())
        .is_some_and(|(req, version)| req.matches(&version))
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
            pins: BTreeMap::new(),
            refusal: None,
            runtime: OnceLock::new(),
        }
    }

    /// The host, with plugins pinned by digest (a project's lock).
    pub fn with_pins(mut self, pins: BTreeMap<String, Pin>) -> PluginHost {
        self.pins = pins;
        self
    }

    /// The host, refusing every plugin for `why`.
    pub fn refusing(mut self, why: String) -> PluginHost {
        self.refusal = Some(why);
        self
    }

    pub fn pins(&self) -> &BTreeMap<String, Pin> {
        &self.pins
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
        let (name, _) = split_requirement(name);
        self.search_path
            .iter()
            .map(|dir| dir.join(format!("{name}.wasm")))
            .find(|candidate| candidate.is_file())
            .ok_or_else(|| FindError::NotFound {
                name: name.to_string(),
                searched: self.search_path.clone(),
            })
    }

    /// Finds and reads a plugin, with its manifest's declarations. `name`
    /// may carry a version requirement, `NAME@REQ` (`files@^1.2`): the
    /// plugin found must declare a version that meets it.
    pub fn find(&self, name: &str) -> Result<FoundPlugin, FindError> {
        if let Some(why) = &self.refusal {
            return Err(FindError::Refused(why.clone()));
        }
        let path = self.resolve(name)?;
        let (name, requirement) = match Path::new(name).is_file() {
            true => (name, None),
            false => split_requirement(name),
        };
        let package = PluginPackage::open(&path)?;
        if let Some(requirement) = requirement {
            let found = package.manifest.as_ref().map(|m| m.version.clone());
            if !found
                .as_deref()
                .is_some_and(|v| meets_requirement(v, requirement))
            {
                return Err(FindError::Version {
                    name: name.to_string(),
                    requirement: requirement.to_string(),
                    found: found.unwrap_or_else(|| "no version (no manifest)".into()),
                    path,
                });
            }
        }
        let declared = package.declared()?;
        let digest = bl_core::Sha256Digest::of(&package.bytes).to_string();
        // Pinned under the name it was asked by or the name its manifest
        // gives: a manifest edited to another name does not escape the pin.
        let pin = self
            .pins
            .get(name)
            .or_else(|| self.pins.get(&package.name()));
        if let Some(pin) = pin
            && pin.digest != digest
        {
            return Err(FindError::PinMismatch {
                name: name.to_string(),
                path,
                found: digest,
                pinned: pin.digest.clone(),
                lock: pin.lock.clone(),
            });
        }
        Ok(FoundPlugin {
            path,
            package,
            declared,
            digest,
            unsigned: pin.is_some_and(|p| p.unsigned),
        })
    }

    fn options<'a>(plugin: &'a FoundPlugin, grant: &Grant) -> LoadOptions<'a> {
        LoadOptions {
            declared: plugin.declared.as_deref(),
            grants: grant.grants.clone(),
            commands: grant.commands.clone(),
            deadline: grant.deadline,
            command_timeout: grant.command_timeout,
            hex_digest: plugin.digest.strip_prefix("sha256:"),
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
