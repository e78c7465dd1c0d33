//! The `bl` command. This is bl's one composition root: the only place that
//! picks concrete adapters (the wasmtime plugin runtime, the plugin build
//! pipeline, directories on disk) and wires them together. Everything it
//! calls is a library crate that knows nothing of the command line.

mod doctor_cmd;
mod egress_cmd;
mod evidence_cmd;
mod exit;
mod graph_cmd;
mod graph_progress;
mod graph_report;
mod interrupt;
mod keys_cmd;
mod ledger_cmd;
mod log_cmd;
mod loop_args;
mod loop_batch;
mod loop_cmd;
mod loop_tools_cmd;
mod output;
mod plugin_cmd;
mod sandbox_cmd;
mod verify_cmd;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::output::errln;

/// bl runs AI-agent work so that the agent never grades itself: a worker
/// takes a turn, and an independent gate decides from the workspace alone.
#[derive(Parser)]
#[command(
    name = "bl",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("BL_COMMIT"), ")"),
    about = "bl runs AI-agent work so that the agent never grades itself: a worker takes a turn, and an independent gate decides from the workspace alone.",
    long_about = None,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Print the result as one JSON object on stdout, and a failure as
    /// {"error": {...}} (see docs/json.md). Where bounded-loops defines a
    /// command's JSON, it is printed exactly as bounded-loops prints it.
    #[arg(long, global = true)]
    json: bool,
    /// Run (or install) the plugin NAME although no trusted key signed it;
    /// what uses it records that it was unsigned. Repeat it for more.
    #[arg(long = "allow-unsigned", value_name = "NAME", global = true)]
    allow_unsigned: Vec<String>,
}

// Each command's own arguments are built only when it is the one given
// (and so for the commands under `graph`, `plugin` and the others):
// building all of them cost every `bl` process about 0.8 ms of CPU.
#[derive(Subcommand)]
#[command(defer = true)]
enum Command {
    /// Run a bounded loop: a worker takes turns in a scratch copy of the
    /// loop's seed until its gate passes or a bound stops it.
    Run(loop_args::RunArgs),
    /// Check loop packages (loop.yaml, bounds.yaml): [PASS] or [FAIL] each.
    Lint {
        /// The loop package directories to check.
        #[arg(required = true)]
        dirs: Vec<std::path::PathBuf>,
    },
    /// List the loop packages under DIR (./loops/*/ and ./*/).
    List {
        /// Where to look (default: here).
        dir: Option<std::path::PathBuf>,
    },
    /// Show a loop's runner, gate, bounds and content hash.
    Show {
        /// The loop package directory (it holds loop.yaml).
        dir: std::path::PathBuf,
    },
    /// The gate kinds, the plugin that runs each, and whether this machine has it.
    Gates,
    /// Render a loop run's receipt from its ledger (or --write it).
    Receipt {
        /// The loop run's directory (it holds the ledger).
        run_dir: std::path::PathBuf,
        /// Write receipt.md into the run directory instead of printing it.
        #[arg(long)]
        write: bool,
    },
    /// Draw a loop run as one page: its outcome, each lap's verdict and
    /// spend, and whether its ledger verifies.
    Report {
        /// The loop run's directory (what `bl run --run-id` wrote).
        run_dir: std::path::PathBuf,
        /// Where to write the page (default: `<run_dir>.report.html`).
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// The live window onto a project on 127.0.0.1: every run under its
    /// .bounded-loops/runs with state, spend and each node's receipt, each
    /// run's live arena and approval console, and its graphs started after
    /// a preview. Until Ctrl-C.
    Monitor {
        /// The project (default: here).
        #[arg(long, default_value = ".")]
        project: std::path::PathBuf,
        /// The port on 127.0.0.1 (default: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Print the address without opening a browser.
        #[arg(long)]
        no_browser: bool,
        /// Sign approvals made from the page with this private key.
        #[arg(long)]
        key: Option<std::path::PathBuf>,
    },
    /// Serve bl to an agent over the Model Context Protocol (stdio).
    Mcp {
        /// Whose .bounded-loops/runs the tools read ($BOUNDED_LOOPS_WORKSPACE, else here).
        #[arg(long)]
        workspace: Option<std::path::PathBuf>,
        /// Signs the decisions people make on the approval links graph_approve hands out (a key from `bl keys generate`).
        #[arg(long)]
        key: Option<std::path::PathBuf>,
        /// Let agents decide approvals through graph_approve, recorded as the agent's (decided_by_source: agent). Without it only a person decides, on the link graph_approve hands out.
        #[arg(long)]
        agent_approvals: bool,
        /// Seconds a preview's confirm token holds: 900 (15 minutes) at most.
        #[arg(long, value_name = "SECONDS", default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=900))]
        confirm_token_lifetime: u64,
        /// Serve MCP's Streamable HTTP transport on this loopback address (for example 127.0.0.1:8808) instead of stdio; every request needs the bearer token.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// With --http: the bearer token is kept in this file (made, mode 0600, when missing); without it a fresh token is printed.
        #[arg(long, requires = "http")]
        token_file: Option<std::path::PathBuf>,
    },
    /// What this engine can actually do here.
    Capabilities,
    /// Scaffold a loop that lints and runs: NAME, from a template per gate kind.
    New {
        /// The new loop's name; its directory gets this name.
        name: String,
        /// command, pytest or jsonschema.
        #[arg(long, default_value = "command")]
        template: String,
        /// Where to create it (default: ./NAME).
        #[arg(long)]
        dest: Option<std::path::PathBuf>,
    },
    /// bl's own catalog of keyless loops.
    #[command(subcommand)]
    Loops(loop_tools_cmd::LoopsCommand),
    /// Lint, plan and inspect graph/v1 manifests (DAGs of gated nodes).
    #[command(subcommand)]
    Graph(Box<graph_cmd::GraphCommand>),
    /// Verify a run directory or an event log: the hash chain, the plan and
    /// the artifacts. Exit 0 when every applicable check holds, 1 otherwise.
    Verify {
        /// A graph run directory, a controller-events.jsonl file, or an
        /// evidence workspace or its exported bundle.
        path: std::path::PathBuf,
        /// Also require the log's head hash to be this one.
        #[arg(long)]
        expect_head: Option<String>,
        /// The verifier key (text or file) whose signatures the checkpoints
        /// must carry.
        #[arg(long)]
        pubkey: Option<String>,
        /// An evidence workspace's trusted reviewer key (text or file),
        /// repeatable: every person's decision must be signed by one of
        /// them.
        #[arg(long = "reviewer", value_name = "KEY")]
        reviewers: Vec<String>,
    },
    /// Maintain event logs.
    #[command(subcommand)]
    Log(log_cmd::LogCommand),
    /// The publication ledger of a run.
    #[command(subcommand)]
    Ledger(ledger_cmd::LedgerCommand),
    /// Build, list, inspect and run wasm plugins: gates, completion
    /// contracts, transforms and publication policies.
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
    /// Check what this machine can do (bwrap, seccomp, Landlock, the wasm
    /// toolchain, the cache), with a fix for each problem.
    Doctor,
    /// The egress policy: where a broker request may go.
    #[command(subcommand)]
    Egress(egress_cmd::EgressCommand),
    /// Run a command in an isolation tier, as a node would.
    #[command(subcommand)]
    Sandbox(sandbox_cmd::SandboxCommand),
    /// Ed25519 keys that sign checkpoints.
    #[command(subcommand)]
    Keys(keys_cmd::KeysCommand),
    /// The decision evidence plane for apps on other agent frameworks
    /// (LangGraph): policy, approval and exactly-once tool requests.
    #[command(subcommand)]
    Evidence(evidence_cmd::EvidenceCommand),
    /// Print a shell completion script: `bl completions bash > /etc/bash_completion.d/bl`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write man pages (bl.1, bl-graph.1, bl-graph-lint.1, …) into DIR.
    Man {
        /// The directory to write the pages into.
        dir: std::path::PathBuf,
    },
}

fn main() -> ExitCode {
    // bl's watchdog is bl itself under another name (see bl_sandbox::containment).
    if std::env::args_os()
        .next()
        .is_some_and(|arg0| arg0 == bl_sandbox::containment::WATCHDOG_NAME)
    {
        bl_sandbox::containment::watchdog_main();
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and --version are not failures; a usage error under --json
        // is answered as one, in the error object's form.
        Err(e) if e.use_stderr() && std::env::args().any(|a| a == "--json") => {
            // clap's first paragraph, without its usage lines.
            let rendered = e.render().to_string();
            let message = rendered
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
                .trim_start_matches("error: ")
                .to_string();
            let error = exit::CliError::refused(message).with_detail(exit::ErrorDetail {
                code: Some("usage".into()),
                ..Default::default()
            });
            errln!("error: {error}");
            output::outln!("{}", error.to_json());
            return ExitCode::from(exit::Exit::Refused.code());
        }
        Err(e) => e.exit(),
    };
    output::set_json(cli.json);
    bl_app::plugin_host::allow_unsigned(&cli.allow_unsigned);
    // A daemon an agent leaves behind is re-parented to bl, which ends it;
    // what bl started dies with bl, through its watchdog.
    bl_sandbox::containment::become_subreaper();
    bl_sandbox::containment::set_watchdog_program("/proc/self/exe".into());
    interrupt::install();
    bl_app::notes::set_sink(|text| output::errln!("{text}"));
    let outcome = match cli.command {
        Command::Run(args) => loop_cmd::run(args, output::json()),
        Command::Lint { dirs } => loop_tools_cmd::lint(&dirs),
        Command::List { dir } => loop_tools_cmd::list(dir.as_deref(), output::json()),
        Command::Show { dir } => loop_tools_cmd::show(&dir, output::json()),
        Command::Gates => loop_tools_cmd::gates(output::json()),
        Command::Receipt { run_dir, write } => {
            loop_tools_cmd::receipt(&run_dir, write, output::json())
        }
        Command::Report { run_dir, out } => loop_tools_cmd::report(&run_dir, out.as_deref()),
        Command::Monitor {
            project,
            port,
            no_browser,
            key,
        } => graph_report::monitor(project, port, !no_browser, key),
        Command::Mcp {
            workspace,
            key,
            agent_approvals,
            confirm_token_lifetime,
            http,
            token_file,
        } => {
            let config = bl_mcp::McpConfig {
                key,
                agent_approvals,
                token_lifetime_s: confirm_token_lifetime,
                ..bl_mcp::McpConfig::new(workspace)
            };
            match http {
                None => bl_mcp::serve_stdio(config),
                Some(address) => serve_mcp_http(config, address, token_file.as_deref()),
            }
        }
        .map(|()| exit::Exit::Success)
        .map_err(|e| exit::CliError::refused(format!("mcp: {e}"))),
        Command::Capabilities => loop_tools_cmd::capabilities(output::json()),
        Command::New {
            name,
            template,
            dest,
        } => loop_tools_cmd::new(&name, &template, dest.as_deref()),
        Command::Loops(cmd) => loop_tools_cmd::loops(cmd, output::json()),
        Command::Graph(cmd) => graph_cmd::run(*cmd),
        Command::Plugin(cmd) => plugin_cmd::run(cmd),
        Command::Evidence(cmd) => evidence_cmd::run(cmd),
        Command::Verify {
            path,
            expect_head,
            pubkey,
            reviewers,
        } => verify_cmd::verify(
            &path,
            expect_head.as_deref(),
            pubkey.as_deref(),
            &reviewers,
            output::json(),
        ),
        Command::Log(cmd) => log_cmd::run(cmd),
        Command::Keys(cmd) => keys_cmd::run(cmd),
        Command::Sandbox(cmd) => sandbox_cmd::run(cmd),
        Command::Doctor => doctor_cmd::doctor(output::json()),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "bl", &mut out);
            output::stdout_bytes(&out);
            Ok(exit::Exit::Success)
        }
        Command::Man { dir } => man_pages(&dir),
        Command::Egress(cmd) => egress_cmd::run(cmd),
        Command::Ledger(cmd) => ledger_cmd::run(cmd),
    };
    // The one reporter: a command prints its own results, and its error
    // comes back here to be said once, in one form.
    let exit = outcome.unwrap_or_else(|error| {
        errln!("error: {error}");
        // A command that reported its error has answered with it.
        interrupt::answer(|| {
            if output::json() && !error.detail.reported {
                output::outln!("{}", error.to_json());
            }
        });
        error.exit
    });
    // Asked to stop: whatever the command made of it, bl says so by its
    // code (and under --json, if the command has not answered, in words).
    let exit = match bl_core::interrupt::requested() {
        Some(signal) => {
            interrupt::answer_stopped(signal);
            exit::Exit::Signalled(signal)
        }
        None => exit,
    };
    output::flush();
    ExitCode::from(exit.code())
}

/// The whole command line, every command's arguments made (they are
/// deferred until a command is given): for what documents them all.
fn whole_command_line() -> clap::Command {
    let mut command = Cli::command();
    command.build();
    command
}

/// One page per command, named as man names them (`bl-graph-lint.1`).
fn man_pages(dir: &std::path::Path) -> exit::CliResult {
    fn write(dir: &std::path::Path, cmd: clap::Command, name: String) -> std::io::Result<usize> {
        let cmd = cmd.name(name.clone());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
        std::fs::write(dir.join(format!("{name}.1")), page)?;
        let mut written = 1;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            written += write(dir, sub.clone(), format!("{name}-{}", sub.get_name()))?;
        }
        Ok(written)
    }
    std::fs::create_dir_all(dir)
        .and_then(|_| write(dir, whole_command_line(), "bl".into()))
        .map(|n| {
            output::answer(
                || serde_json::json!({"dir": dir, "pages": n}),
                || format!("wrote {n} man pages into {}", dir.display()),
            );
            exit::Exit::Success
        })
        .map_err(|e| exit::CliError::refused(format!("man: {}: {e}", dir.display())))
}

/// `bl mcp --http ADDR`: says where and with which token, then serves
/// until Ctrl-C.
fn serve_mcp_http(
    config: bl_mcp::McpConfig,
    address: std::net::SocketAddr,
    token_file: Option<&std::path::Path>,
) -> Result<(), bl_mcp::McpError> {
    let (token, told) = match token_file {
        Some(file) => (
            bl_mcp::http::token_in(file)?,
            format!("token: in {}", file.display()),
        ),
        None => {
            let token = bl_mcp::http::fresh_token()
                .map_err(|e| bl_mcp::McpError::Start(std::io::Error::other(e)))?;
            (token.clone(), format!("token: {token}"))
        }
    };
    bl_mcp::http::serve_http(
        config,
        bl_mcp::http::HttpOptions { address, token },
        |url| {
            output::outln!("mcp: {url}");
            output::errln!("bl mcp: bearer {told}");
        },
        || bl_core::interrupt::requested().is_some(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks (unique names, valid defaults) on every command.
    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// Every argument of every command says what it is for.
    #[test]
    fn every_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&whole_command_line(), "bl", &mut missing);
        assert!(missing.is_empty(), "without help: {missing:#?}");
        // Built, the deferred commands have their arguments: `run` has.
        let built = whole_command_line();
        let run = built.find_subcommand("run").unwrap();
        assert!(run.get_arguments().any(|a| a.get_id() == "max_iterations"));
    }
}
