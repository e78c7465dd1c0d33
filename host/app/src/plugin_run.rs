//! Running one plugin by hand (`bl plugin run`): find it, read its declared
//! capabilities, grant what was asked, build its runtime in the asked cage,
//! and judge a workspace with a gate or a completion contract. A plugin
//! that cannot decide is an error, never a verdict.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bl_core::GateOutcome;
use bl_plugins::{
    ContractRequest, FoundPlugin, Grant, Grants, PluginError, PluginHost, Runtime, World, outcome,
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
}

/// A plugin found, read, and ready to load with what was granted.
pub struct Opened {
    pub found: FoundPlugin,
    pub grant: Grant,
    pub host: Arc<PluginHost>,
    pub world: World,
}

impl Opened {
    pub fn name(&self) -> String {
        self.found.name()
    }

    pub fn runtime(&self) -> Result<&Runtime, PluginError> {
        self.host.runtime()
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

/// Finds and opens the plugin in the process's plugin host. Anything that
/// stops it is [`AppError::Undecided`]: the plugin cannot decide.
pub fn open(request: &PluginRunRequest) -> Result<Opened, AppError> {
    let undecided = |m: String| AppError::Undecided(m);
    let host = crate::plugin_host::shared();
    // The operator named it here: a file given by its path runs unsigned.
    let found = host
        .find_operator_named(request.plugin)
        .map_err(|e| undecided(e.to_string()))?;
    let grants = Grants::parse(request.grants).map_err(|e| undecided(format!("--grant: {e}")))?;
    let tier = bl_sandbox::Tier::parse(request.isolation)
        .map_err(|e| undecided(format!("--isolation: {e}")))?;
    let sandbox = crate::cage::sandbox(tier).map_err(|e| undecided(e.message().to_string()))?;
    let runtime = host
        .runtime()
        .map_err(|e| undecided(format!("the plugin runtime: {e}")))?;
    let world = found
        .package
        .world(runtime)
        .map_err(|e| undecided(e.to_string()))?;
    let grant = Grant {
        grants,
        commands: Some(Arc::new(sandbox)),
        deadline: request.deadline,
        command_timeout: None,
    };
    Ok(Opened {
        found,
        grant,
        host,
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
    let name = opened.name();
    let (host, found, grant) = (&opened.host, &opened.found, &opened.grant);
    let result = match opened.world {
        World::Gate => host.load_gate(found, grant).and_then(|gate| {
            opened
                .runtime()
                .and_then(|runtime| runtime.check(&gate, workspace, config))
        }),
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
            host.load_contract(found, grant).and_then(|contract| {
                opened.runtime().and_then(|runtime| {
                    runtime.check_contract(&contract, workspace, &contract_request, config)
                })
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
