//! The process's one plugin host: one wasmtime engine, the compiled-component
//! cache and the plugin search path, shared by every use case. The
//! composition root installs it (choosing the allocator); a use case that
//! runs before that gets one with the defaults. In a project with a
//! `bl.lock`, its installed plugins are searched first and pinned.

use std::sync::{Arc, OnceLock};

use bl_plugins::{AllocatorChoice, PluginHost, RuntimeConfig};

use crate::paths;

static HOST: OnceLock<Arc<PluginHost>> = OnceLock::new();

/// Makes the process's host with `allocator`, unless one was made already
/// (then that one is returned as it is).
pub fn install(allocator: AllocatorChoice) -> Arc<PluginHost> {
    HOST.get_or_init(|| Arc::new(build(allocator))).clone()
}

/// The process's host.
pub fn shared() -> Arc<PluginHost> {
    // On demand: a loop makes an instance per gate per lap, and a pool
    // costs more to reserve than one short run saves.
    install(AllocatorChoice::OnDemand)
}

fn build(allocator: AllocatorChoice) -> PluginHost {
    let config = RuntimeConfig {
        cache_dir: paths::component_cache_dir(),
        allocator,
        // No command runs unless the plugin's load hands it a runner.
        command_runner: None,
        ..Default::default()
    };
    // A project's installed plugins come first, pinned by its lock.
    let project = crate::plugin_registry::Project::current()
        .ok()
        .filter(|p| p.lock_path().is_file());
    let mut search = paths::plugin_search_path();
    let Some(project) = project else {
        return PluginHost::new(config, search);
    };
    search.insert(0, project.installed_dir());
    let host = PluginHost::new(config, search);
    match project.pins() {
        Ok(pins) => host.with_pins(pins),
        Err(e) => host.refusing(format!("{e}; no plugin runs until the lock reads")),
    }
}
