//! The process's one plugin host: one wasmtime engine, the compiled-component
//! cache and the plugin search path, shared by every use case. The
//! composition root installs it (choosing the allocator); a use case that
//! runs before that gets one with the defaults. In a project with a
//! `bl.lock`, its installed plugins are searched first and pinned. A
//! plugin no lock pins runs only when it ships with bl, a publisher the
//! project trusts signed it (in the registry shipped with bl, or the one
//! `BL_REGISTRY` names), or the operator allowed it unsigned by name.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use bl_plugins::{AllocatorChoice, PluginHost, RuntimeConfig, TrustPolicy};

use crate::paths;

static HOST: OnceLock<Arc<PluginHost>> = OnceLock::new();
static ALLOWED_UNSIGNED: OnceLock<BTreeSet<String>> = OnceLock::new();

/// The plugins the operator allows to run unsigned, by name
/// (`--allow-unsigned NAME`), for this process; call it before the host is
/// first used. `BL_ALLOW_UNSIGNED` (comma-separated names) adds to them.
pub fn allow_unsigned(names: &[String]) {
    let _ = ALLOWED_UNSIGNED.set(names.iter().cloned().collect());
}

/// Every name allowed unsigned: the operator's and `BL_ALLOW_UNSIGNED`'s.
pub fn allowed_unsigned() -> BTreeSet<String> {
    let from_env = std::env::var("BL_ALLOW_UNSIGNED").unwrap_or_default();
    let from_env = from_env
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string);
    ALLOWED_UNSIGNED
        .get()
        .into_iter()
        .flatten()
        .cloned()
        .chain(from_env)
        .collect()
}

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

/// Starts making the shared host's plugin engine on a thread of its own,
/// once per process, so that what the caller does next (reading a loop
/// package, preparing its workspace) runs beside it; the first use of the
/// engine waits for it. Making it took about 0.5 ms of the 6 ms a one-lap
/// `bl run` of a wasm gate takes.
pub fn warm_up() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        // A thread that cannot start leaves the engine to its first use.
        let _ = std::thread::Builder::new()
            .name("bl-engine".into())
            .spawn(|| {
                let _ = shared().runtime();
            });
    });
}

fn build(allocator: AllocatorChoice) -> PluginHost {
    let config = RuntimeConfig {
        cache_dir: paths::component_cache_dir(),
        allocator,
        // No command runs unless the plugin's load hands it a runner.
        command_runner: None,
        ..Default::default()
    };
    let here = crate::plugin_registry::Project::current().ok();
    // A project's installed plugins come first, pinned by its lock.
    let project = here.clone().filter(|p| p.lock_path().is_file());
    let trust = TrustPolicy::new(&paths::bundled_plugin_dirs(), allowed_unsigned(), {
        // Read once, on first need; each answer checks only the
        // signatures of that digest's versions.
        let registries = std::sync::OnceLock::new();
        Box::new(move |digest: &str| {
            registries
                .get_or_init(|| {
                    here.as_ref()
                        .map(crate::plugin_registry::trusted_registries)
                        .unwrap_or_default()
                })
                .iter()
                .any(|registry| registry.signs(digest))
        })
    });
    let mut search = paths::plugin_search_path();
    let Some(project) = project else {
        return PluginHost::new(config, search).with_trust(trust);
    };
    search.insert(0, project.installed_dir());
    let host = PluginHost::new(config, search).with_trust(trust);
    match project.pins() {
        Ok(pins) => host.with_pins(pins),
        Err(e) => host.refusing(format!("{e}; no plugin runs until the lock reads")),
    }
}
