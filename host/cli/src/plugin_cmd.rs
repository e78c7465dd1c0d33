//! `bl plugin …`

use crate::output::outln;
use std::path::{Path, PathBuf};

use bl_core::GateOutcome;
use bl_plugins::World;
use clap::{Subcommand, ValueEnum};
use serde_json::json;

use bl_app::plugin_run::{self, PluginRunRequest};

use crate::exit::{CliError, CliResult, Exit};

// Parts of `bl plugin`: the registry's subcommands, and running the worlds
// that do not judge a workspace.
mod registry;
mod worlds;

#[derive(Subcommand)]
#[command(defer = true)]
pub enum PluginCommand {
    #[command(flatten)]
    Registry(registry::RegistryCommand),
    /// Write a new plugin (a Rust crate, or a Python or JavaScript one) that builds as it is.
    New {
        /// The plugin's name; it goes in a directory of that name.
        name: String,
        /// What the plugin is: the world its component exports.
        #[arg(long, value_enum)]
        kind: NewKind,
        /// Where to create it (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The bl plugin SDK to depend on (default: the one beside this bl).
        #[arg(long)]
        sdk: Option<PathBuf>,
        /// The language: a Rust crate, or a Python or JavaScript (js) plugin.
        #[arg(long, default_value = "rust", value_parser = ["rust", "python", "js"])]
        lang: String,
    },
    /// Build a plugin (Rust, Python or JavaScript) into a component stamped with its source digest.
    Build {
        /// The plugin's directory (it holds Cargo.toml, or bl-plugin.toml for Python or JavaScript).
        dir: PathBuf,
        /// Where `<name>.wasm` and `<name>.plugin.json` go (default:
        /// target/plugins under the plugin's cargo workspace root, or, for
        /// Python or JavaScript, under the plugin's own directory).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Cargo's target directory for the wasm build (default:
        /// target/wasm under the plugin's cargo workspace root).
        #[arg(long)]
        target_dir: Option<PathBuf>,
        /// Rebuild even when the component is up to date.
        #[arg(long, conflicts_with = "signed")]
        force: bool,
        /// Take the component a trusted key signed as built from exactly
        /// these sources from the registry (BL_REGISTRY, else the one
        /// shipped with bl) instead of compiling; compile when none did.
        #[arg(long)]
        signed: bool,
    },
    /// List every plugin bl can find: each component on the plugin path
    /// (BL_PLUGIN_PATH, then beside bl), with its world, version, digest
    /// and the capabilities it asks for. A name found twice is used from
    /// the first directory; later ones are marked shadowed.
    List,
    /// Write the manifest (NAME.plugin.json) of a component built by another
    /// toolchain, from what the component itself says.
    Manifest {
        /// The component (.wasm).
        component: PathBuf,
        /// The version the manifest records.
        #[arg(long = "plugin-version", default_value = "0.1.0")]
        plugin_version: String,
        /// Write it again when one is there.
        #[arg(long)]
        force: bool,
    },
    /// Show a component's world, WIT version, imports, exports, requested
    /// capabilities and digests.
    Inspect {
        /// A path to a component, or the name of one on the plugin path.
        plugin: String,
    },
    /// Run a plugin of any world. A gate or a completion contract judges
    /// --workspace and prints its verdict: exit 0 pass, 1 fail, 3 error (it
    /// could not decide). A transform turns --input files into its --output
    /// artifacts (written into --out): exit 0, or 3. A publication policy
    /// decides on one effect: exit 0 allow, 1 deny, 3 error.
    Run {
        /// A path to a component, or the name of one on the plugin path.
        plugin: String,
        /// For a gate or a contract: the directory it judges; it sees
        /// nothing else.
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Its config, as JSON, or `@FILE` to read it from a file.
        #[arg(long, default_value = "{}")]
        config: String,
        /// Grant a capability the plugin requests (`command`, `log`, `clock`,
        /// `random`). Nothing is granted by default.
        #[arg(long = "grant", value_name = "CAPABILITY")]
        grants: Vec<String>,
        /// For a completion contract: the output to check, relative to the workspace.
        #[arg(long)]
        artifact: Option<String>,
        /// For a completion contract: when the node was dispatched, in ms since
        /// the Unix epoch (files modified before it are stale).
        #[arg(long, default_value_t = 0)]
        dispatched_ms: u64,
        /// Stop the plugin after this many milliseconds.
        #[arg(long)]
        deadline_ms: Option<u64>,
        /// How instances get memory.
        #[arg(long, value_enum, default_value_t = Allocator::Auto)]
        allocator: Allocator,
        /// The isolation tier the `command` capability runs commands in.
        #[arg(long, default_value = "container_restricted")]
        isolation: String,
        // Boxed: they make the variant large and are used only by two worlds.
        #[command(flatten)]
        transform: Box<worlds::TransformArgs>,
        #[command(flatten)]
        policy: Box<worlds::PolicyArgs>,
    },
}

/// `--kind` of `bl plugin new`.
#[derive(Clone, Copy, ValueEnum)]
pub enum NewKind {
    Gate,
    Transform,
    Contract,
    Policy,
}

impl NewKind {
    fn kind(self) -> bl_app::plugin_scaffold::Kind {
        use bl_app::plugin_scaffold::Kind;
        match self {
            NewKind::Gate => Kind::Gate,
            NewKind::Transform => Kind::Transform,
            NewKind::Contract => Kind::Contract,
            NewKind::Policy => Kind::Policy,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Allocator {
    Auto,
    Pooling,
    OnDemand,
}

impl Allocator {
    fn choice(self) -> bl_plugins::AllocatorChoice {
        match self {
            Allocator::Auto => bl_plugins::AllocatorChoice::Auto,
            Allocator::Pooling => bl_plugins::AllocatorChoice::Pooling,
            Allocator::OnDemand => bl_plugins::AllocatorChoice::OnDemand,
        }
    }
}

pub fn run(cmd: PluginCommand) -> CliResult {
    match cmd {
        PluginCommand::Registry(cmd) => registry::run(cmd),
        PluginCommand::New {
            name,
            kind,
            dir,
            sdk,
            lang,
        } => {
            let s = bl_app::plugin_scaffold::scaffold(&name, kind.kind(), &lang, dir, sdk)?;
            crate::output::answer(
                || json!(s),
                || {
                    format!(
                        "created {} ({})\n  build it:  {}\n  test it:   {}",
                        s.created.display(),
                        s.kind,
                        s.build,
                        s.test
                    )
                },
            );
            Ok(Exit::Success)
        }
        PluginCommand::Build {
            dir,
            out,
            target_dir,
            force,
            signed,
        } => build(dir, out, target_dir, force, signed),
        PluginCommand::Inspect { plugin } => inspect(&plugin),
        PluginCommand::Manifest {
            component,
            plugin_version,
            force,
        } => {
            let written =
                bl_app::plugin_registry::write_manifest(&component, &plugin_version, force)?;
            crate::output::answer(|| json!(written), || written.to_string());
            Ok(Exit::Success)
        }
        PluginCommand::List => list(),
        PluginCommand::Run {
            plugin,
            workspace,
            config,
            grants,
            artifact,
            dispatched_ms,
            deadline_ms,
            allocator,
            isolation,
            transform,
            policy,
        } => {
            let json = crate::output::json();
            let request = PluginRunRequest {
                isolation: &isolation,
                plugin: &plugin,
                grants: &grants,
                artifact,
                dispatched_ms,
                deadline: deadline_ms.map(std::time::Duration::from_millis),
            };
            bl_app::plugin_host::install(allocator.choice());
            let config = plugin_run::read_config(&config)?;
            let opened = plugin_run::open(&request)?;
            match opened.world {
                World::Transform => {
                    return worlds::run_transform(&opened, &config, &transform);
                }
                World::PublicationPolicy => {
                    return worlds::run_policy(&opened, &config, &policy);
                }
                World::Gate | World::CompletionContract => {}
            }
            let Some(workspace) = workspace else {
                return Err(CliError::refused(format!(
                    "{plugin} is a {} plugin: name the directory it judges with --workspace DIR",
                    opened.world
                )));
            };
            let outcome = plugin_run::judge(&request, &opened, &workspace, &config);
            if json {
                outln!("{}", outcome_json(&plugin, &workspace, &outcome));
            } else {
                print_outcome(&plugin, &workspace, &outcome);
            }
            Ok(match outcome {
                GateOutcome::Passed(_) => Exit::Success,
                GateOutcome::Failed(_) => Exit::No,
                GateOutcome::Error(_) => Exit::Undecided,
            })
        }
    }
}

fn build(
    dir: PathBuf,
    out: Option<PathBuf>,
    target: Option<PathBuf>,
    force: bool,
    signed: bool,
) -> CliResult {
    if signed && let Some(taken) = bl_app::plugin_registry::take_signed_build(&dir, out.clone())? {
        crate::output::answer(|| taken.to_json(), || taken.to_string());
        return Ok(Exit::Success);
    }
    let built = bl_app::plugin_scaffold::build(&dir, out, target, force)?;
    crate::output::answer(|| built.to_json(), || built.to_string());
    Ok(Exit::Success)
}

fn list() -> CliResult {
    let list = bl_app::plugin_registry::list_plugins();
    crate::output::answer(|| json!(list), || list.to_string());
    Ok(Exit::Success)
}

fn inspect(plugin: &str) -> CliResult {
    let found = bl_app::plugin_registry::inspect(plugin)?;
    crate::output::answer(|| json!(found), || found.to_string());
    Ok(Exit::Success)
}

fn outcome_json(plugin: &str, workspace: &Path, outcome: &GateOutcome) -> serde_json::Value {
    let mut value = json!({
        "plugin": plugin,
        "workspace": workspace.display().to_string(),
        "outcome": outcome.label().to_lowercase(),
    });
    match outcome {
        GateOutcome::Passed(v) | GateOutcome::Failed(v) => value["verdict"] = json!(v),
        GateOutcome::Error(e) => {
            value["error"] = json!({"code": Exit::Undecided.name(), "message": e});
        }
    }
    value
}

fn print_outcome(plugin: &str, workspace: &Path, outcome: &GateOutcome) {
    outln!("{}  {plugin}  {}", outcome.label(), workspace.display());
    match outcome {
        GateOutcome::Passed(v) | GateOutcome::Failed(v) => {
            outln!("  {}", v.summary);
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
                outln!("  - {}: {}{place}{rule}", f.severity.as_str(), f.message);
            }
        }
        GateOutcome::Error(e) => outln!("  could not decide: {e}"),
    }
}
