//! The plugins a run uses: one wasmtime runtime, made when the first plugin
//! is needed, and plugins found by name, each load returning what the
//! run's events record about it (its role, name and component digest).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bl_plugins::{
    ContractPlugin, GatePlugin, Grants, LoadOptions, PluginPackage, Runtime, TransformPlugin,
};
use bl_run::executor::PluginUse;

/// Why a plugin could not be had for a run: not found, unreadable, of
/// another major version, refused a grant, or the runtime would not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PluginUnavailable(pub String);

fn unavailable(e: impl std::fmt::Display) -> PluginUnavailable {
    PluginUnavailable(e.to_string())
}

/// Finds a plugin's component by name (the plugin search path).
pub type Resolve = dyn Fn(&str) -> Result<PathBuf, PluginUnavailable> + Send + Sync;
/// Makes the run's runtime (the composition root's limits and sandbox).
pub type MakeRuntime = dyn Fn() -> Result<Runtime, PluginUnavailable> + Send + Sync;

pub struct Plugins {
    runtime: OnceLock<Result<Runtime, PluginUnavailable>>,
    make: Box<MakeRuntime>,
    resolve: Box<Resolve>,
}

/// A plugin opened for one role: the package and what the events record.
struct Opened {
    package: PluginPackage,
    declared: Option<Vec<bl_plugins::Capability>>,
    used: PluginUse,
}

impl Plugins {
    pub fn new(make: Box<MakeRuntime>, resolve: Box<Resolve>) -> Self {
        Plugins {
            runtime: OnceLock::new(),
            make,
            resolve,
        }
    }

    /// The run's runtime, made on first use.
    pub fn runtime(&self) -> Result<&Runtime, PluginUnavailable> {
        self.runtime
            .get_or_init(|| (self.make)())
            .as_ref()
            .map_err(|e| PluginUnavailable(format!("the plugin runtime could not start: {e}")))
    }

    fn open(&self, name: &str, role: &str) -> Result<Opened, PluginUnavailable> {
        let path = (self.resolve)(name)?;
        let package = PluginPackage::open(&path).map_err(unavailable)?;
        let declared = package.declared().map_err(unavailable)?;
        let used = PluginUse {
            role: role.to_string(),
            plugin: package.name(),
            component_digest: bl_core::Sha256Digest::of(&package.bytes).to_string(),
            component: Arc::new(package.bytes.clone()),
        };
        Ok(Opened {
            package,
            declared,
            used,
        })
    }

    fn options<'a>(
        opened: &'a Opened,
        grants: &[String],
    ) -> Result<LoadOptions<'a>, PluginUnavailable> {
        Ok(LoadOptions {
            declared: opened.declared.as_deref(),
            grants: Grants::parse(grants).map_err(unavailable)?,
        })
    }

    /// A gate plugin, with the capabilities granted to it.
    /// A gate plugin that cannot be loaded is still named: `Err` carries
    /// why, and the component when it was found (so the record says which
    /// bytes could not decide).
    pub fn gate(
        &self,
        name: &str,
        grants: &[String],
    ) -> Result<(GatePlugin, PluginUse), (PluginUnavailable, Option<PluginUse>)> {
        let opened = self.open(name, "gate").map_err(|e| (e, None))?;
        let used = opened.used.clone();
        let loaded = self.runtime().and_then(|runtime| {
            runtime
                .load_gate(
                    &opened.package.name(),
                    &opened.package.bytes,
                    &Self::options(&opened, grants)?,
                )
                .map_err(unavailable)
        });
        match loaded {
            Ok(gate) => Ok((gate, opened.used)),
            Err(e) => Err((e, Some(used))),
        }
    }

    /// A completion-contract plugin (granted nothing: it reads the
    /// workspace handle it is given).
    pub fn contract(&self, name: &str) -> Result<(ContractPlugin, PluginUse), PluginUnavailable> {
        let opened = self.open(name, "contract")?;
        let runtime = self.runtime()?;
        let contract = runtime
            .load_contract(
                &opened.package.name(),
                &opened.package.bytes,
                &Self::options(&opened, &[])?,
            )
            .map_err(unavailable)?;
        Ok((contract, opened.used))
    }

    /// The transform `transform:<name>@v<major>` names: the plugin `name`
    /// (or, with dots as dashes, the package it is built as), whose
    /// manifest's major version must be `major`.
    pub fn transform(
        &self,
        name: &str,
        major: u32,
    ) -> Result<(TransformPlugin, PluginUse), PluginUnavailable> {
        let dashed = name.replace('.', "-");
        let opened = self
            .open(name, "transform")
            .or_else(|first| self.open(&dashed, "transform").map_err(|_| first))?;
        if let Some(manifest) = &opened.package.manifest {
            check_major(name, major, manifest)?;
        }
        let runtime = self.runtime()?;
        let transform = runtime
            .load_transform(
                &opened.package.name(),
                &opened.package.bytes,
                &Self::options(&opened, &[])?,
            )
            .map_err(unavailable)?;
        Ok((transform, opened.used))
    }
}

/// A transform's manifest must carry the major version its `tool_ref`
/// asks for (`transform:<name>@v<major>`).
pub fn check_major(
    name: &str,
    major: u32,
    manifest: &bl_plugins::PluginManifest,
) -> Result<(), PluginUnavailable> {
    let found = manifest
        .version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    if found == Some(major) {
        return Ok(());
    }
    Err(PluginUnavailable(format!(
        "transform:{name}@v{major} asks for major version {major}, but the installed plugin '{}' is version {}",
        manifest.name, manifest.version
    )))
}
