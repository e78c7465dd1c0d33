//! The `bl` command. This is bl's one composition root: the only place that
//! picks concrete adapters (the wasmtime plugin runtime, the plugin build
//! pipeline, directories on disk) and wires them together. Everything it
//! calls is a library crate that knows nothing of the command line.

mod graph_cmd;
mod loop_package;
mod paths;
mod plugin_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// bl runs AI-agent work so that the agent never grades itself: a worker
/// takes a turn, and an independent gate decides from the workspace alone.
#[derive(Parser)]
#[command(name = "bl", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Lint, plan and inspect graph/v1 manifests (DAGs of gated nodes).
    #[command(subcommand)]
    Graph(graph_cmd::GraphCommand),
    /// Build, inspect and run wasm plugins (gates).
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Graph(cmd) => graph_cmd::run(cmd),
        Command::Plugin(cmd) => plugin_cmd::run(cmd),
    };
    ExitCode::from(code)
}
