//! The wasm plugin runtime as bl's use cases build it: compiled components
//! cached on disk, and the `command` capability's commands run in a cage.

use std::sync::Arc;
use std::time::Duration;

use bl_plugins::{AllocatorChoice, Runtime, RuntimeConfig};

use crate::error::AppError;
use crate::paths;

/// A runtime whose plugins' commands run in `sandbox`, with a per-call
/// `deadline` when one is given.
pub fn runtime(
    deadline: Option<Duration>,
    allocator: AllocatorChoice,
    sandbox: bl_sandbox::Sandbox,
) -> Result<Runtime, AppError> {
    let mut config = RuntimeConfig {
        cache_dir: paths::component_cache_dir(),
        command_runner: Some(Arc::new(sandbox)),
        allocator,
        ..Default::default()
    };
    if let Some(deadline) = deadline {
        config.limits.deadline = deadline;
    }
    Runtime::new(config).map_err(|e| AppError::Undecided(format!("the plugin runtime: {e}")))
}
