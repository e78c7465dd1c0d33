//! `bl sandbox run`: run a command exactly as a node would, to see what an
//! agent sees.

use crate::output::{errln, out, outln};
use std::path::PathBuf;
use std::time::Duration;

use bl_core::{CommandError, CommandRunner, CommandSpec};
use bl_sandbox::{Sandbox, Tier};
use clap::Subcommand;

use crate::exit::{CliError, CliResult, Exit};

fn sandbox(tier: Tier) -> Result<Sandbox, String> {
    bl_app::cage::sandbox(tier).map_err(|e| e.to_string())
}

#[derive(Subcommand)]
#[command(defer = true)]
pub enum SandboxCommand {
    /// Run CMD in an isolation tier with DIR as its workspace. Exits with the
    /// command's own code; 125 when the sandbox refuses, 124 on timeout.
    Run {
        /// workspace_only, process_restricted, container_restricted or
        /// customer_managed_worker.
        #[arg(long)]
        isolation: String,
        /// The directory the command works in; the only place it may write.
        #[arg(long)]
        workspace: PathBuf,
        /// Let the command write its workspace only to read it.
        #[arg(long)]
        read_only: bool,
        /// Kill the command after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
        /// The command and its arguments, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Inside a sandbox with the allowlist posture: relay TCP connections on
    /// --listen to the egress proxy's unix socket, and run CMD with
    /// HTTPS_PROXY (and friends) pointing at --listen. Used by bl itself.
    #[command(hide = true)]
    Bridge {
        /// The broker's Unix socket, reachable inside the cage.
        #[arg(long)]
        socket: PathBuf,
        /// The loopback address the command's HTTP client is pointed at.
        #[arg(long)]
        listen: String,
        /// The command and its arguments, after `--`.
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
        /// The isolation tier to prove.
        #[arg(long, default_value = "container_restricted")]
        isolation: String,
    },
}

pub fn run(cmd: SandboxCommand) -> CliResult {
    match cmd {
        SandboxCommand::Run {
            isolation,
            workspace,
            read_only,
            timeout_s,
            command,
        } => {
            // It starts its processes only through the sandbox.
            bl_sandbox::containment::claim_orphans();
            run_command(&isolation, workspace, read_only, timeout_s, command)
        }
        SandboxCommand::Probe { out, isolation } => probe(out, &isolation, crate::output::json()),
        SandboxCommand::Bridge {
            socket,
            listen,
            command,
        } => bridge(socket, &listen, command),
    }
}

fn bridge(socket: PathBuf, listen: &str, command: Vec<String>) -> CliResult {
    let listener = match std::net::TcpListener::bind(listen) {
        Ok(l) => l,
        Err(e) => {
            return Err(CliError::sandbox(format!(
                "sandbox bridge: listening on {listen}: {e}"
            )));
        }
    };
    std::thread::spawn(move || bl_egress::proxy::bridge(listener, socket));
    let proxy = format!("http://{listen}");
    let mut child = std::process::Command::new(&command[0]);
    child.args(&command[1..]);
    for name in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        child.env(name, &proxy);
    }
    child.env_remove("NO_PROXY").env_remove("no_proxy");
    match child.status() {
        Ok(status) => Ok(Exit::of_status(status)),
        Err(e) => Err(CliError::with_exit(
            Exit::NotFound,
            format!("sandbox bridge: {}: {e}", command[0]),
        )),
    }
}

/// The egress posture for `bl sandbox run`: with `allowlist`, a CONNECT
/// proxy (production address policy) on a private unix socket, served from
/// a background thread for as long as the returned guard lives.
fn start_allowlist_proxy(tier: Tier) -> Result<Option<bl_app::egress_proxy::ProxyGuard>, String> {
    use bl_egress::posture::{Posture, resolve_posture};
    let config = resolve_posture(|name| std::env::var(name).ok()).map_err(|e| e.to_string())?;
    match config.posture {
        Posture::Open => return Ok(None),
        Posture::Broker if tier == Tier::ContainerRestricted => return Ok(None),
        Posture::Broker => {
            return Err(format!(
                "the broker posture gives a node no network of its own: run it container_restricted, not {}",
                tier.name()
            ));
        }
        Posture::Allowlist => {}
    }
    bl_app::egress_proxy::start_proxy(&config, None)
        .map(Some)
        .map_err(|e| e.to_string())
}

fn probe(out: Option<PathBuf>, isolation: &str, as_json: bool) -> CliResult {
    let tier = match Tier::parse(isolation) {
        Ok(t) => t,
        Err(e) => {
            return Err(CliError::sandbox(format!("sandbox probe: {e}")));
        }
    };
    let out = match out {
        Some(dir) => dir,
        None => match tempfile::Builder::new().prefix("bl-probe-").tempdir() {
            Ok(dir) => dir.keep(),
            Err(e) => {
                return Err(CliError::sandbox(format!("sandbox probe: {e}")));
            }
        },
    };
    let sandbox = match sandbox(tier) {
        Ok(s) => s,
        Err(e) => {
            return Err(CliError::sandbox(format!("sandbox probe: {e}")));
        }
    };
    match bl_sandbox::probe::run_probe(&sandbox, sandbox.host_ids(), &out) {
        Ok(outcome) => {
            if as_json {
                let text = std::fs::read_to_string(&outcome.result_path).unwrap_or_default();
                out!("{text}");
            } else {
                for (name, ok, detail) in &outcome.checks {
                    outln!("{} {name}: {detail}", if *ok { "ok  " } else { "FAIL" });
                }
                outln!(
                    "{} ({}): result in {}",
                    if outcome.passed { "PASS" } else { "FAIL" },
                    tier.name(),
                    outcome.result_path.display()
                );
            }
            Ok(if outcome.passed {
                Exit::Success
            } else {
                Exit::No
            })
        }
        Err(e) => Err(CliError::sandbox(format!("sandbox probe: {e}"))),
    }
}

fn run_command(
    isolation: &str,
    workspace: PathBuf,
    read_only: bool,
    timeout_s: u64,
    command: Vec<String>,
) -> CliResult {
    let tier = match Tier::parse(isolation) {
        Ok(t) => t,
        Err(e) => {
            return Err(CliError::sandbox(format!("sandbox: {e}")));
        }
    };
    let spec = CommandSpec {
        argv: command,
        workspace,
        workspace_writable: !read_only,
        stdin: Vec::new(),
        timeout: Duration::from_secs(timeout_s),
        output_cap: 4 << 20,
        // The terminal's stdin goes in and the output comes out as it is
        // written; under --json it is captured into the answer instead.
        stream: !crate::output::json(),
        env: Vec::new(),
        private_dir: None,
        home: None,
    };
    let proxy = match start_allowlist_proxy(tier) {
        Ok(proxy) => proxy,
        Err(e) => {
            return Err(CliError::sandbox(format!(
                "sandbox refused: egress posture: {e}"
            )));
        }
    };
    let mut sandbox = match sandbox(tier) {
        Ok(s) => s,
        Err(e) => {
            return Err(CliError::sandbox(format!("sandbox refused: {e}")));
        }
    };
    if let Some(guard) = &proxy {
        sandbox = sandbox.with_egress(guard.bridge.clone());
    }
    match sandbox.run(&spec) {
        Ok(result) => {
            if crate::output::json() {
                crate::interrupt::answer(|| {
                    outln!(
                        "{}",
                        serde_json::json!({
                            "exit_code": result.exit_code, "timed_out": result.timed_out,
                            "truncated": result.truncated,
                            "duration_ms": result.duration.as_millis() as u64,
                            "stdout": String::from_utf8_lossy(&result.stdout_tail),
                            "stderr": String::from_utf8_lossy(&result.stderr_tail),
                        })
                    )
                });
            }
            if result.timed_out {
                errln!(
                    "bl: the command timed out after {} s and was killed with its process group",
                    spec.timeout.as_secs()
                );
            }
            Ok(match (result.timed_out, result.exit_code) {
                (true, _) => Exit::TimedOut,
                (false, Some(code)) => Exit::Code(code.clamp(0, 255) as u8),
                (false, None) => Exit::Code(137),
            })
        }
        Err(CommandError::Denied(m)) => Err(CliError::sandbox(format!("sandbox refused: {m}"))),
        Err(CommandError::Spawn(m)) => Err(CliError::sandbox(format!(
            "sandbox could not start the command: {m}"
        ))),
        Err(CommandError::Interrupted(signal)) => Ok(Exit::Signalled(signal)),
    }
}
