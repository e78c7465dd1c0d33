//! Running one plugin by hand (`bl plugin run`): find it, read its declared
//! capabilities, grant what was asked, build its runtime in the asked cage,
//! and judge a workspace with a gate or a completion contract. A plugin
//! that cannot decide is an error, never a verdict.

use std::path::Path;
use std::time::Duration;

use bl_core::GateOutcome;
use bl_plugins::{
    AllocatorChoice, ContractRequest, Grants, LoadOptions, PluginPackage, Runtime, World, outcome,
};

use crate::error::AppError;

/// What a by-hand run of a plugin was asked for.
pub struct PluginRunRequest<'a> {
    /// The isolation tier the plugin's granted commands run in.
    pub isolation: &'a str,
    /// A file path, or a name found on the plugin search path.
    pub plugin: &'a str,
    /// `CAP` grants, as `--grant` gives them.
    pub grants: &'a [String],
    /// For a completion contract: the output it checks.
    pub artifact: Option<String>,
    /// For a completion contract: when the dispatch started (ms).
    pub dispatched_ms: u64,
    /// A per-call deadline.
    pub deadline: Option<Duration>,
    pub allocator: AllocatorChoice,
}

/// A plugin found, read, and ready to load into its runtime.
pub struct Opened {
    pub package: PluginPackage,
    pub declared: Option<Vec<bl_plugins::Capability>>,
    pub grants: Grants,
    pub runtime: Runtime,
    pub world: World,
}

impl Opened {
    pub fn options(&self) -> LoadOptions<'_> {
        LoadOptions {
            declared: self.declared.as_deref(),
            grants: self.grants.clone(),
        }
    }
}

/// A plugin's config: the JSON text itself, or `@FILE` naming a file that
/// holds it.
pub fn read_config(config: &str) -> Result<String, AppError> {
    let undecided = |m: String| AppError::Undecided(m);
    let text = match config.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| undecided(format!("--config @{path}: {e}")))?,
        None => config.to_string(),
    };
    serde_json::from_str::<serde_json::Value>(&text)
        .map_err(|e| undecided(format!("--config is not JSON: {e}")))?;
    Ok(text)
}

/// Finds and opens the plugin, with its runtime. Anything that stops it
/// is [`AppError::Undecided`]: the plugin cannot decide.
pub fn open(request: &PluginRunRequest) -> Result<Opened, AppError> {
    let undecided = |m: String| AppError::Undecided(m);
    let path =
        crate::paths::resolve_plugin(request.plugin).map_err(|e| undecided(e.to_string()))?;
    let package = PluginPackage::open(&path).map_err(|e| undecided(e.to_string()))?;
    let declared = package.declared().map_err(|e| undecided(e.to_string()))?;
    let grants = Grants::parse(request.grants).map_err(|e| undecided(format!("--grant: {e}")))?;
    let tier = bl_sandbox::Tier::parse(request.isolation)
        .map_err(|e| undecided(format!("--isolation: {e}")))?;
    let sandbox = crate::cage::sandbox(tier).map_err(|e| undecided(e.message().to_string()))?;
    let runtime = crate::plugin_host::runtime(request.deadline, request.allocator, sandbox)
        .map_err(|e| undecided(e.message().to_string()))?;
    let world = package
        .world(&runtime)
        .map_err(|e| undecided(e.to_string()))?;
    Ok(Opened {
        package,
        declared,
        grants,
        runtime,
        world,
    })
}

/// The opened gate or completion contract's outcome on `workspace`.
pub fn judge(
    request: &PluginRunRequest,
    opened: &Opened,
    workspace: &Path,
    config: &str,
) -> GateOutcome {
    let options = opened.options();
    let name = opened.package.name();
    let bytes = &opened.package.bytes;
    let runtime = &opened.runtime;
    let result = match opened.world {
        World::Gate => runtime
            .load_gate(&name, bytes, &options)
            .and_then(|gate| runtime.check(&gate, workspace, config)),
        World::CompletionContract => {
            let Some(artifact) = request.artifact.clone() else {
                return GateOutcome::Error(format!(
                    "{name} is a completion contract: name the output to check with --artifact PATH"
                ));
            };
            let contract_request = ContractRequest {
                artifact,
                dispatch_started_ms: request.dispatched_ms,
            };
            runtime
                .load_contract(&name, bytes, &options)
                .and_then(|contract| {
                    runtime.check_contract(&contract, workspace, &contract_request, config)
                })
        }
        other => {
            return GateOutcome::Error(format!(
                "{name} is a {other} plugin; `bl plugin run` runs gates and completion contracts"
            ));
        }
    };
    outcome(result)
}
