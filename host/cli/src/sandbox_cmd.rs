//! `bl sandbox run`: run a command exactly as a node would, to see what an
//! agent sees.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use bl_core::{CommandError, CommandRunner, CommandSpec};
use bl_sandbox::{Sandbox, Tier};
use clap::Subcommand;

/// The exit code when the sandbox refuses to run the command at all.
pub const REFUSED: u8 = 125;

#[derive(Subcommand)]
pub enum SandboxCommand {
    /// Run CMD in an isolation tier with DIR as its workspace. Exits with the
    /// command's own code; 125 when the sandbox refuses, 124 on timeout.
    Run {
        /// workspace_only, process_restricted, container_restricted or
        /// customer_managed_worker.
        #[arg(long)]
        isolation: String,
        #[arg(long)]
        workspace: PathBuf,
        /// Let the command write its workspace only to read it.
        #[arg(long)]
        read_only: bool,
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Prove the sandbox denies what it must: a process inside tries the
    /// network and a write outside its workspace, and an independent check
    /// passes only if the OS denied both. Exit 0 pass, 1 fail, 125 refused.
    Probe {
        /// Where the probe's workspace, artifact and result go (default: a
        /// temporary directory, printed).
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long, default_value = "container_restricted")]
        isolation: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: SandboxCommand) -> u8 {
    match cmd {
        SandboxCommand::Run {
            isolation,
            workspace,
            read_only,
            timeout_s,
            command,
        } => run_command(&isolation, workspace, read_only, timeout_s, command),
        SandboxCommand::Probe {
            out,
            isolation,
            json,
        } => probe(out, &isolation, json),
    }
}

fn probe(out: Option<PathBuf>, isolation: &str, as_json: bool) -> u8 {
    let tier = match Tier::parse(isolation) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: sandbox probe: {e}");
            return REFUSED;
        }
    };
    let out = match out {
        Some(dir) => dir,
        None => match tempfile::Builder::new().prefix("bl-probe-").tempdir() {
            Ok(dir) => dir.keep(),
            Err(e) => {
                eprintln!("error: sandbox probe: {e}");
                return REFUSED;
            }
        },
    };
    match bl_sandbox::probe::run_probe(&Sandbox::new(tier), &out) {
        Ok(outcome) => {
            if as_json {
                let text = std::fs::read_to_string(&outcome.result_path).unwrap_or_default();
                print!("{text}");
            } else {
                for (name, ok, detail) in &outcome.checks {
                    println!("{} {name}: {detail}", if *ok { "ok  " } else { "FAIL" });
                }
                println!(
                    "{} ({}): result in {}",
                    if outcome.passed { "PASS" } else { "FAIL" },
                    tier.name(),
                    outcome.result_path.display()
                );
            }
            if outcome.passed { 0 } else { 1 }
        }
        Err(e) => {
            eprintln!("error: sandbox probe: {e}");
            REFUSED
        }
    }
}

fn run_command(
    isolation: &str,
    workspace: PathBuf,
    read_only: bool,
    timeout_s: u64,
    command: Vec<String>,
) -> u8 {
    let tier = match Tier::parse(isolation) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: sandbox: {e}");
            return REFUSED;
        }
    };
    let spec = CommandSpec {
        argv: command,
        workspace,
        workspace_writable: !read_only,
        stdin: Vec::new(),
        timeout: Duration::from_secs(timeout_s),
        output_cap: 4 << 20,
    };
    match Sandbox::new(tier).run(&spec) {
        Ok(result) => {
            let _ = std::io::stdout().write_all(&result.stdout_tail);
            let _ = std::io::stderr().write_all(&result.stderr_tail);
            if result.truncated {
                eprintln!("bl: output was longer than 4 MiB; only its end is shown");
            }
            match (result.timed_out, result.exit_code) {
                (true, _) => 124,
                (false, Some(code)) => code.clamp(0, 255) as u8,
                (false, None) => 137,
            }
        }
        Err(CommandError::Denied(m)) => {
            eprintln!("error: sandbox refused: {m}");
            REFUSED
        }
        Err(CommandError::Spawn(m)) => {
            eprintln!("error: sandbox could not start the command: {m}");
            REFUSED
        }
    }
}
