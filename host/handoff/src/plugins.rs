//! The plugins a run uses, through the process's one [`PluginHost`]: found
//! by name, loaded with the run's command runner, each load returning what
//! the run's events record about it (its role, name and component digest).

use std::sync::Arc;

use bl_core::CommandRunner;
use bl_plugins::{
    ContractPlugin, FoundPlugin, GatePlugin, Grant, Grants, PluginHost, Runtime, TransformPlugin,
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

pub struct Plugins {
    host: Arc<PluginHost>,
    /// What the run's plugins' `command` capability runs through.
    commands: Arc<dyn CommandRunner>,
}

impl Plugins {
    pub fn new(host: Arc<PluginHost>, commands: Arc<dyn CommandRunner>) -> Self {
        Plugins { host, commands }
    }

    /// The process's runtime, made on first use.
    pub fn runtime(&self) -> Result<&Runtime, PluginUnavailable> {
        self.host
            .runtime()
            .map_err(|e| PluginUnavailable(format!("the plugin runtime could not start: {e}")))
    }

    fn find(&self, name: &str, role: &str) -> Result<(FoundPlugin, PluginUse), PluginUnavailable> {
        let found = self.host.find(name).map_err(unavailable)?;
        let used = PluginUse {
            role: role.to_string(),
            plugin: found.name(),
            component_digest: found.digest.clone(),
            component: Arc::new(found.verified_bytes().map_err(unavailable)?),
            unsigned: found.unsigned,
        };
        Ok((found, used))
    }

    fn grant(&self, grants: &[String]) -> Result<Grant, PluginUnavailable> {
        Ok(Grant {
            grants: Grants::parse(grants).map_err(unavailable)?,
            commands: Some(self.commands.clone()),
            ..Grant::default()
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
        let (found, used) = self.find(name, "gate").map_err(|e| (e, None))?;
        let loaded = self.grant(grants).and_then(|grant| {
            self.host
                .load_gate(&found, &grant)
                .map_err(|e| self.refused(e))
        });
        match loaded {
            Ok(gate) => Ok((gate, used)),
            Err(e) => Err((e, Some(used))),
        }
    }

    /// A runtime that would not start says so; anything else as it is.
    fn refused(&self, e: bl_plugins::PluginError) -> PluginUnavailable {
        match e {
            bl_plugins::PluginError::Runtime(_) => {
                PluginUnavailable(format!("the plugin runtime could not start: {e}"))
            }
            e => unavailable(e),
        }
    }

    /// A completion-contract plugin (granted nothing: it reads the
    /// workspace handle it is given).
    pub fn contract(&self, name: &str) -> Result<(ContractPlugin, PluginUse), PluginUnavailable> {
        let (found, used) = self.find(name, "contract")?;
        let contract = self
            .host
            .load_contract(&found, &self.grant(&[])?)
            .map_err(|e| self.refused(e))?;
        Ok((contract, used))
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
        let (found, used) = self
            .find(name, "transform")
            .or_else(|first| self.find(&dashed, "transform").map_err(|_| first))?;
        if let Some(manifest) = &found.package.manifest {
            check_major(name, major, manifest)?;
        }
        let transform = self
            .host
            .load_transform(&found, &self.grant(&[])?)
            .map_err(|e| self.refused(e))?;
        Ok((transform, used))
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
