//! One plugin host per process: the wasmtime engine (made on first use, so
//! a run without plugins never pays for it), the compiled-component cache,
//! and the directories plugins are found in by name. Every use case loads
//! its gates, contracts, transforms and policies through it, each plugin
//! with its own grants, command runner and per-call deadline. A project's
//! lock pins plugins by digest: a pinned plugin whose bytes differ is
//! never found, whatever directory it is in. A host with a trust policy
//! (bl's own always has one) finds an unpinned plugin only when it ships
//! with bl, a trusted publisher signed its bytes, or the operator allowed
//! it unsigned by name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bl_core::CommandRunner;
use bl_core::plugin::{Capability, Grants};

use crate::cache::{ComponentSource, DigestMemo};
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
    trust: Option<TrustPolicy>,
    runtime: OnceLock<Result<Runtime, PluginError>>,
    memo: Option<DigestMemo>,
}

/// Which plugins that no lock pins may run. Everything else is refused
/// before it is loaded: an unsigned plugin is never run by default.
pub struct TrustPolicy {
    /// Directories of components that ship with bl itself (beside its
    /// executable, or the plugins its checkout built): trusted as bl is.
    bundled: Vec<PathBuf>,
    /// Plugins the operator allows unsigned, by name (`--allow-unsigned`).
    allowed_unsigned: BTreeSet<String>,
    /// Whether a trusted publisher signed a digest, asked only of a plugin
    /// that is neither pinned nor bundled.
    signed: SignedBy,
}

/// Whether only its owner may write to `dir`: a directory that others may
/// write to is no part of an installation, whatever is beside it.
fn not_writable_by_others(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(dir).is_ok_and(|m| m.permissions().mode() & 0o022 == 0)
}

/// Whether a trusted key signed the component whose digest (`sha256:<hex>`)
/// is given.
pub type SignedBy = Box<dyn Fn(&str) -> bool + Send + Sync>;

/// How a plugin came to be trusted, as a run records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Its bytes are the ones a project's lock pins (checked at install).
    Pinned,
    /// It ships with bl.
    Bundled,
    /// A trusted publisher signed its bytes.
    Signed,
    /// Neither: the operator allowed it by name, or named its file.
    Unsigned,
}

impl TrustPolicy {
    /// A policy trusting the components in `bundled` (canonicalised here;
    /// one that others may write to is left out), those whose digest
    /// `signed` lists, and those allowed by name.
    pub fn new(
        bundled: &[PathBuf],
        allowed_unsigned: BTreeSet<String>,
        signed: SignedBy,
    ) -> TrustPolicy {
        TrustPolicy {
            bundled: bundled
                .iter()
                .filter_map(|d| d.canonicalize().ok())
                .filter(|d| not_writable_by_others(d))
                .collect(),
            allowed_unsigned,
            signed,
        }
    }

    fn is_bundled(&self, path: &Path) -> bool {
        let dir = path.parent().and_then(|d| d.canonicalize().ok());
        dir.is_some_and(|dir| self.bundled.contains(&dir))
    }

    fn is_signed(&self, digest: &str) -> bool {
        (self.signed)(digest)
    }
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
    /// The version the lock records (from the signed registry entry at
    /// install): what a `NAME@REQ` is checked against, not the manifest.
    pub version: String,
}

/// Why a named plugin could not be had: it is nowhere on the search path,
/// or its files could not be read as a plugin.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error(
        "plugin {name:?} not found: it is not a file, and no {name}.wasm is in {}.{} Install it from a registry (`bl plugin install {name}`), or name a directory holding it in BL_PLUGIN_PATH; bl's own plugins ship beside it (in a checkout, `scripts/dev setup` builds them)",
        searched.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
        nearest.as_ref().map(|n| format!(" Did you mean {n:?}?")).unwrap_or_default()
    )]
    NotFound {
        name: String,
        /// Every directory looked in, in order (each once, as it resolves).
        searched: Vec<PathBuf>,
        /// A plugin on the path whose name is close to `name`.
        nearest: Option<String>,
    },
    #[error(transparent)]
    Package(#[from] PackageError),
    #[error("{0}")]
    Refused(String),
    #[error(
        "plugin {name:?} at {path} ({digest}) is not signed by a key this project trusts, no bl.lock pins it, and it does not ship with bl; nothing was run. Install it from a registry (`bl plugin install {name}`), or run it anyway, recorded as unsigned, with `--allow-unsigned {name}` (or BL_ALLOW_UNSIGNED={name}){}",
        allowed_others(allowed, name)
    )]
    Unsigned {
        name: String,
        path: PathBuf,
        digest: String,
        /// The names the operator did allow unsigned (none of them this).
        allowed: Vec<String>,
    },
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
    /// Pinned by a lock that records it was installed unsigned, or
    /// allowed unsigned by the operator.
    pub unsigned: bool,
    /// How it came to be trusted (`None` for a host without a trust policy).
    pub provenance: Option<Provenance>,
    /// Its version: the lock's for a pinned plugin, else its manifest's.
    pub version: Option<String>,
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

    /// Checks `config` (at the JSON pointer `within` in the user's file,
    /// each wrong place named by `place`) against the config schema the
    /// plugin's manifest declares. Nothing is checked when it declares
    /// none, or when the manifest is not this component's own: a stale
    /// manifest's schema may not be the plugin's, and the plugin still
    /// checks its config itself.
    pub fn check_config(
        &self,
        config: &serde_json::Value,
        within: &str,
        place: impl Fn(&str) -> String,
    ) -> Result<(), crate::ConfigRefused> {
        match &self.package.manifest {
            Some(m) if m.component_digest == self.digest => match &m.config_schema {
                Some(schema) => {
                    crate::config_schema::check_config(&m.name, schema, config, within, place)
                }
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Where its bytes are read from, if it must be compiled.
    fn source(&self) -> ComponentSource<'_> {
        ComponentSource::File(&self.path)
    }

    /// Its bytes, read now and checked to be the ones its digest names
    /// (what a run stores beside its record).
    pub fn verified_bytes(&self) -> Result<Vec<u8>, FindError> {
        let hex = self.digest.strip_prefix("sha256:").unwrap_or(&self.digest);
        self.source()
            .read(hex)
            .map(|bytes| bytes.into_owned())
            .map_err(|e| FindError::Refused(format!("{e:#}")))
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
            memo: config.cache_dir.as_deref().map(DigestMemo::new),
            config,
            search_path,
            pins: BTreeMap::new(),
            refusal: None,
            trust: None,
            runtime: OnceLock::new(),
        }
    }

    /// The host, finding unpinned plugins only as `policy` allows.
    pub fn with_trust(mut self, policy: TrustPolicy) -> PluginHost {
        self.trust = Some(policy);
        self
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

    /// Whether a trusted publisher signed `digest` (never, without a policy).
    pub fn is_signed(&self, digest: &str) -> bool {
        self.trust.as_ref().is_some_and(|t| t.is_signed(digest))
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
            .ok_or_else(|| self.not_found(name))
    }

    /// Why `name` is nowhere on the search path: the directories (each
    /// once, `a/../b` written as `b`), and the nearest name there is.
    fn not_found(&self, name: &str) -> FindError {
        let mut searched: Vec<PathBuf> = Vec::new();
        for dir in &self.search_path {
            // As it resolves (a directory that is not there, as written
            // without its `..`): said once, and as a person would write it.
            let dir = dir.canonicalize().unwrap_or_else(|_| {
                let mut plain = PathBuf::new();
                for part in dir.components() {
                    match part {
                        std::path::Component::ParentDir => {
                            plain.pop();
                        }
                        std::path::Component::CurDir => {}
                        other => plain.push(other),
                    }
                }
                plain
            });
            if !searched.contains(&dir) {
                searched.push(dir);
            }
        }
        let on_path: Vec<String> = searched
            .iter()
            .filter_map(|dir| std::fs::read_dir(dir).ok())
            .flatten()
            .filter_map(|entry| {
                let path = entry.ok()?.path();
                (path.extension()? == "wasm")
                    .then(|| path.file_stem()?.to_str().map(str::to_string))?
            })
            .collect();
        let nearest = bl_core::spelling::closest(name, on_path.iter().map(String::as_str))
            .map(str::to_string);
        FindError::NotFound {
            name: name.to_string(),
            searched,
            nearest,
        }
    }

    /// Finds and reads a plugin, with its manifest's declarations. `name`
    /// may carry a version requirement, `NAME@REQ` (`files@^1.2`): the
    /// plugin found must declare a version that meets it. Under a trust
    /// policy, a plugin no lock pins must ship with bl, be signed by a
    /// trusted key, or be allowed unsigned by name.
    pub fn find(&self, name: &str) -> Result<FoundPlugin, FindError> {
        self.find_as(name, false)
    }

    /// As [`find`](Self::find), for a plugin the operator named on the
    /// command line (`bl plugin run FILE`): a file given by its path runs
    /// even unsigned, as if allowed by name, and is reported unsigned.
    pub fn find_operator_named(&self, name: &str) -> Result<FoundPlugin, FindError> {
        self.find_as(name, Path::new(name).is_file())
    }

    fn find_as(&self, name: &str, operator_named_file: bool) -> Result<FoundPlugin, FindError> {
        if let Some(why) = &self.refusal {
            return Err(FindError::Refused(why.clone()));
        }
        let path = self.resolve(name)?;
        let (name, requirement) = match Path::new(name).is_file() {
            true => (name, None),
            false => split_requirement(name),
        };
        let package = PluginPackage::open(&path)?;
        let declared = package.declared()?;
        let digest = format!("sha256:{}", self.hex_digest(&package)?);
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
                // The plugin's name, for the `bl plugin install` it advises,
                // though it was asked for by its file's path.
                name: if self.pins.contains_key(name) {
                    name.to_string()
                } else {
                    package.name()
                },
                path,
                found: digest,
                pinned: pin.digest.clone(),
                lock: pin.lock.clone(),
            });
        }
        // A pinned plugin's version is the lock's (signed at install); the
        // manifest beside a component is only its author's word.
        let version = match pin {
            Some(pin) => Some(pin.version.clone()),
            None => package.manifest.as_ref().map(|m| m.version.clone()),
        };
        if let Some(requirement) = requirement
            && !version
                .as_deref()
                .is_some_and(|v| meets_requirement(v, requirement))
        {
            return Err(FindError::Version {
                name: name.to_string(),
                requirement: requirement.to_string(),
                found: version.unwrap_or_else(|| "no version (no manifest)".into()),
                path,
            });
        }
        let provenance = match (&self.trust, pin) {
            (None, _) => None,
            (Some(_), Some(pin)) if pin.unsigned => Some(Provenance::Unsigned),
            (Some(_), Some(_)) => Some(Provenance::Pinned),
            (Some(policy), None) => Some(self.unpinned_provenance(
                policy,
                name,
                &package,
                &path,
                &digest,
                operator_named_file,
            )?),
        };
        Ok(FoundPlugin {
            path,
            package,
            declared,
            digest,
            unsigned: provenance == Some(Provenance::Unsigned) || pin.is_some_and(|p| p.unsigned),
            provenance,
            version,
        })
    }

    /// The component's sha256: memoised for a file unchanged since it was
    /// last hashed, else read and hashed (and memoised).
    fn hex_digest(&self, package: &PluginPackage) -> Result<String, FindError> {
        if let Some(hex) = self.memo.as_ref().and_then(|m| m.get(&package.path)) {
            return Ok(hex);
        }
        let hex = bl_core::sha256_hex(package.bytes()?);
        if let Some(memo) = &self.memo {
            memo.put(&package.path, &hex);
        }
        Ok(hex)
    }

    /// Why an unpinned plugin may run, or why it may not.
    fn unpinned_provenance(
        &self,
        policy: &TrustPolicy,
        name: &str,
        package: &PluginPackage,
        path: &Path,
        digest: &str,
        operator_named_file: bool,
    ) -> Result<Provenance, FindError> {
        if policy.is_bundled(path) {
            return Ok(Provenance::Bundled);
        }
        if policy.is_signed(digest) {
            return Ok(Provenance::Signed);
        }
        let allowed = |n: &str| policy.allowed_unsigned.contains(n);
        if operator_named_file || allowed(name) || allowed(&package.name()) {
            return Ok(Provenance::Unsigned);
        }
        Err(FindError::Unsigned {
            name: package.name(),
            path: path.to_path_buf(),
            digest: digest.to_string(),
            allowed: policy.allowed_unsigned.iter().cloned().collect(),
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
            .load_gate(&plugin.name(), plugin.source(), &options)
    }

    pub fn load_contract(
        &self,
        plugin: &FoundPlugin,
        grant: &Grant,
    ) -> Result<ContractPlugin, PluginError> {
        let options = Self::options(plugin, grant);
        self.runtime()?
            .load_contract(&plugin.name(), plugin.source(), &options)
    }

    pub fn load_transform(
        &self,
        plugin: &FoundPlugin,
        grant: &Grant,
    ) -> Result<TransformPlugin, PluginError> {
        let options = Self::options(plugin, grant);
        self.runtime()?
            .load_transform(&plugin.name(), plugin.source(), &options)
    }

    pub fn load_policy(
        &self,
        plugin: &FoundPlugin,
        grant: &Grant,
    ) -> Result<PolicyPlugin, PluginError> {
        let options = Self::options(plugin, grant);
        self.runtime()?
            .load_policy(&plugin.name(), plugin.source(), &options)
    }
}

/// The names allowed unsigned when none is the plugin refused: said, with
/// the one it may have been meant as, since a misspelt name allows nothing.
fn allowed_others(allowed: &[String], name: &str) -> String {
    if allowed.is_empty() {
        return String::new();
    }
    let meant = bl_core::spelling::closest(name, allowed.iter().map(String::as_str))
        .map(|near| format!("; {near:?} is close to {name:?}: a misspelling?"))
        .unwrap_or_default();
    format!(". Allowed unsigned now: {}{meant}", allowed.join(", "))
}
