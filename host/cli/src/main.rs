//! The `bl` command. This is bl's one composition root: the only place that
//! picks concrete adapters (the wasmtime plugin runtime, the plugin build
//! pipeline, directories on disk) and wires them together. Everything it
//! calls is a library crate that knows nothing of the command line.

mod doctor_cmd;
mod egress_cmd;
mod graph_cmd;
mod keys_cmd;
mod paths;
mod plugin_cmd;
mod sandbox_cmd;
mod scaffold;
mod verify_cmd;

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
    /// Verify a run directory or an event log: the hash chain, the plan and
    /// the artifacts. Exit 0 when every applicable check holds, 1 otherwise.
    Verify {
        /// A graph run directory or a controller-events.jsonl file.
        path: std::path::PathBuf,
        /// Also require the log's head hash to be this one.
        #[arg(long)]
        expect_head: Option<String>,
        /// The verifier key (text or file) whose signatures the checkpoints
        /// must carry.
        #[arg(long)]
        pubkey: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Maintain event logs.
    #[command(subcommand)]
    Log(LogCommand),
    /// The publication ledger of a run.
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// Build, inspect and run wasm plugins (gates).
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
    /// Check what this machine can do (bwrap, seccomp, Landlock, the wasm
    /// toolchain, the cache), with a fix for each problem.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// The egress policy: where a broker request may go.
    #[command(subcommand)]
    Egress(egress_cmd::EgressCommand),
    /// Run a command in an isolation tier, as a node would.
    #[command(subcommand)]
    Sandbox(sandbox_cmd::SandboxCommand),
    /// Ed25519 keys that sign checkpoints.
    #[command(subcommand)]
    Keys(keys_cmd::KeysCommand),
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Record what an operator found out about an effect whose outcome is
    /// ambiguous (an intent with no outcome, after a crash).
    Reconcile {
        /// The run directory holding published-effects.json.
        run_dir: std::path::PathBuf,
        /// The effect key, `<run_id>/<plan_id>/<node_id>`.
        key: String,
        /// The effect did happen: record it as published.
        #[arg(
            long,
            conflicts_with = "not_published",
            required_unless_present = "not_published"
        )]
        published: bool,
        /// The effect did not happen: clear the intent so it may fire again.
        #[arg(long)]
        not_published: bool,
    },
}

#[derive(Subcommand)]
enum LogCommand {
    /// Move a torn final line (left by a crash) aside into <log>.torn-<offset>.
    Recover {
        /// A run directory or a controller-events.jsonl file.
        path: std::path::PathBuf,
    },
    /// Write the log's current Merkle tree head, and the digest of every
    /// file of the run directory, into <run>/checkpoints/ (signed with --key).
    Checkpoint {
        /// A run directory or its controller-events.jsonl.
        path: std::path::PathBuf,
        /// The private key (from `bl keys generate`); without it the
        /// checkpoint is written unsigned.
        #[arg(long)]
        key: Option<std::path::PathBuf>,
    },
    /// Print an RFC 6962 inclusion proof (--line N) or consistency proof
    /// (--from M) as JSON.
    Prove {
        /// A run directory or its controller-events.jsonl.
        path: std::path::PathBuf,
        /// The event's line number (1-based).
        #[arg(long, conflicts_with = "from")]
        line: Option<usize>,
        /// The older tree size for a consistency proof.
        #[arg(long)]
        from: Option<usize>,
        /// The tree size to prove against (default: the whole log).
        #[arg(long)]
        size: Option<usize>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Graph(cmd) => graph_cmd::run(cmd),
        Command::Plugin(cmd) => plugin_cmd::run(cmd),
        Command::Verify {
            path,
            expect_head,
            pubkey,
            json,
        } => verify_cmd::verify(&path, expect_head.as_deref(), pubkey.as_deref(), json),
        Command::Log(LogCommand::Recover { path }) => verify_cmd::recover(path),
        Command::Log(LogCommand::Checkpoint { path, key }) => {
            keys_cmd::checkpoint(&path, key.as_deref())
        }
        Command::Log(LogCommand::Prove {
            path,
            line,
            from,
            size,
        }) => keys_cmd::prove(&path, line, size, from),
        Command::Keys(cmd) => keys_cmd::run(cmd),
        Command::Sandbox(cmd) => sandbox_cmd::run(cmd),
        Command::Doctor { json } => doctor_cmd::doctor(json),
        Command::Egress(cmd) => egress_cmd::run(cmd),
        Command::Ledger(LedgerCommand::Reconcile {
            run_dir,
            key,
            published,
            ..
        }) => verify_cmd::reconcile(&run_dir, &key, published),
    };
    ExitCode::from(code)
}
