//! `bl plugin …`

use std::path::PathBuf;

use bl_core::GateOutcome;
use bl_pluginbuild::{BuildOptions, WasmToolchain};
use bl_plugins::{Runtime, RuntimeConfig};
use clap::Subcommand;
use serde_json::json;

use crate::paths;

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Build a plugin crate into a component stamped with its source digest.
    Build {
        /// The plugin's crate directory (it holds Cargo.toml).
        dir: PathBuf,
        /// Where `<name>.wasm` and `<name>.plugin.json` go.
        #[arg(long, default_value = "target/plugins")]
        out: PathBuf,
        /// Cargo's target directory for the wasm build.
        #[arg(long, default_value = "target/wasm")]
        target_dir: PathBuf,
        /// Rebuild even when the component is up to date.
        #[arg(long)]
        force: bool,
    },
    /// Run a gate on a workspace directory and print its verdict.
    /// Exit 0 pass, 1 fail, 3 error (the gate could not decide).
    Run {
        /// A path to a component, or the name of one on the plugin path.
        plugin: String,
        /// The directory the gate judges; it sees nothing else.
        #[arg(long)]
        workspace: PathBuf,
        /// The gate's config, as JSON.
        #[arg(long, default_value = "{}")]
        config: String,
        /// Print the outcome as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: PluginCommand) -> u8 {
    match cmd {
        PluginCommand::Build {
            dir,
            out,
            target_dir,
            force,
        } => build(dir, out, target_dir, force),
        PluginCommand::Run {
            plugin,
            workspace,
            config,
            json,
        } => run_gate(&plugin, &workspace, &config, json),
    }
}

fn build(dir: PathBuf, out: PathBuf, target_dir: PathBuf, force: bool) -> u8 {
    let toolchain = match WasmToolchain::detect() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    match bl_pluginbuild::build(
        &dir,
        &toolchain,
        &BuildOptions {
            out_dir: out,
            target_dir,
            force,
        },
    ) {
        Ok(built) => {
            let m = &built.manifest;
            let state = if built.rebuilt { "built" } else { "up to date" };
            println!(
                "{state}: {} {} ({} world of {}, {} toolchain)\n  component {}  {}\n  source    {}",
                m.name,
                m.version,
                m.world,
                m.wit_package,
                toolchain.name(),
                built.component_path.display(),
                m.component_digest,
                m.source_digest
            );
            0
        }
        Err(e) => {
            eprintln!("error: plugin build {}: {e}", dir.display());
            2
        }
    }
}

fn run_gate(plugin: &str, workspace: &std::path::Path, config: &str, as_json: bool) -> u8 {
    let outcome = judge(plugin, workspace, config);
    if as_json {
        println!("{}", outcome_json(plugin, workspace, &outcome));
    } else {
        print_outcome(plugin, workspace, &outcome);
    }
    outcome.exit_code() as u8
}

fn judge(plugin: &str, workspace: &std::path::Path, config: &str) -> GateOutcome {
    let path = match paths::resolve_plugin(plugin) {
        Ok(p) => p,
        Err(e) => return GateOutcome::Error(e),
    };
    if let Err(e) = serde_json::from_str::<serde_json::Value>(config) {
        return GateOutcome::Error(format!("--config is not JSON: {e}"));
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return GateOutcome::Error(format!("{}: {e}", path.display())),
    };
    let runtime = match Runtime::new(RuntimeConfig {
        cache_dir: paths::component_cache_dir(),
        ..Default::default()
    }) {
        Ok(r) => r,
        Err(e) => return GateOutcome::Error(e.to_string()),
    };
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| plugin.to_string());
    match runtime.load_gate(&name, &bytes) {
        Ok(gate) => runtime.judge(&gate, workspace, config),
        Err(e) => GateOutcome::Error(e.to_string()),
    }
}

fn outcome_json(
    plugin: &str,
    workspace: &std::path::Path,
    outcome: &GateOutcome,
) -> serde_json::Value {
    let mut value = json!({
        "plugin": plugin,
        "workspace": workspace.display().to_string(),
        "outcome": outcome.label().to_lowercase(),
    });
    match outcome {
        GateOutcome::Passed(v) | GateOutcome::Failed(v) => value["verdict"] = json!(v),
        GateOutcome::Error(e) => value["error"] = json!(e),
    }
    value
}

fn print_outcome(plugin: &str, workspace: &std::path::Path, outcome: &GateOutcome) {
    println!("{}  {plugin}  {}", outcome.label(), workspace.display());
    match outcome {
        GateOutcome::Passed(v) | GateOutcome::Failed(v) => {
            println!("  {}", v.summary);
            for f in &v.findings {
                let place = f
                    .location
                    .as_ref()
                    .map(|l| match l.line {
                        Some(line) => format!(" at {}:{line}", l.path),
                        None => format!(" at {}", l.path),
                    })
                    .unwrap_or_default();
                let rule = f
                    .rule
                    .as_deref()
                    .map(|r| format!(" [{r}]"))
                    .unwrap_or_default();
                println!("  - {:?}: {}{place}{rule}", f.severity, f.message);
            }
        }
        GateOutcome::Error(e) => println!("  the gate could not decide: {e}"),
    }
}
