//! `bl run` and `bl lint`: a bounded loop from its package directory, as
//! bounded-loops 0.7 runs it. This is the composition root for the loop
//! engine: it reads the manifests (bl-loops), prepares the scratch
//! workspace and the runner (bl-workers) in the sandbox the bounds ask for
//! (bl-sandbox), loads the gate's wasm plugins (bl-plugins), and appends
//! the chained ledger; then it reports the outcome with bounded-loops'
//! statuses, `BL_EVENT` line and exit codes.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bl_core::CommandRunner;
use bl_loops::bounds::Bounds;
use bl_loops::cassette::Cassette;
use bl_loops::engine::{
    self, Approver, Clock, Handoff, KillSwitch, Ledger, Plan, Ports, RunOutcome, Runner, Status,
};
use bl_loops::ledger::{LedgerLine, ascii_escaped};
use bl_loops::manifest::{LoopManifest, ManifestError};
use bl_plugins::{Runtime, RuntimeConfig};
use bl_workers::loops::{CommandTurns, ScratchWorkspace, StubRunner};
use serde_json::json;

use crate::exit::{CliError, Exit};
use crate::loop_gates::LoopGate;
use crate::output::{errln, outln};

/// The environment variable that stops every loop at its next lap.
pub const KILL_SWITCH: &str = "BOUNDED_LOOPS_KILL";
/// Commands the shell runner may start (its program's file name).
pub const SHELL_ALLOWLIST: &[&str] = &[
    "bash", "sh", "python3", "python", "node", "claude", "codex", "agy", "aider", "gemini", "make",
];

#[derive(clap::Args)]
pub struct RunArgs {
    /// Path to a loop folder containing loop.yaml.
    pub loop_dir: PathBuf,
    /// Override the runner in loop.yaml's runner.default.
    #[arg(long, value_parser = ["stub", "shell", "python_callable", "claude-code", "codex", "antigravity"])]
    pub runner: Option<String>,
    /// Replace the loop's gate with a command; exit 0 passes, 1 rejects.
    #[arg(long, value_name = "CMD")]
    pub gate_override: Option<String>,
    /// Override bounds.max_iterations (at most 1000).
    #[arg(long)]
    pub max_iterations: Option<u32>,
    /// Skip the confirmation prompt (required when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,
    /// Keep the scratch workspace after the run.
    #[arg(long)]
    pub keep_workspace: bool,
    /// Persist workspace, ledger and metadata under .bounded-loops/runs/<ID>.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Continue the run --run-id names, in its workspace.
    #[arg(long, requires = "run_id")]
    pub resume: bool,
    /// Redact the records before they are written and hashed: off, paths
    /// (absolute paths rewritten) or strict (captured output replaced by
    /// its digest too).
    #[arg(long, value_name = "MODE", default_value = "off", value_parser = ["off", "paths", "strict"])]
    pub redact: String,
}

fn manifest_error(path: &Path, e: &ManifestError) -> CliError {
    let place = match e.pos {
        Some(pos) => format!("\n  at {}:{}:{}", path.display(), pos.line, pos.col),
        None => format!("\n  in {}", path.display()),
    };
    CliError::refused(format!("bl run: manifest error — {e}{place}"))
}

/// A loop package's manifests, read and checked.
pub struct Package {
    pub dir: PathBuf,
    pub manifest: LoopManifest,
    pub bounds: Bounds,
}

pub fn read_package(dir: &Path) -> Result<Package, CliError> {
    let loop_path = dir.join("loop.yaml");
    let text = std::fs::read_to_string(&loop_path).map_err(|e| {
        CliError::refused(format!(
            "bl run: no readable loop.yaml in {} ({e}); a loop package is a directory containing loop.yaml",
            dir.display()
        ))
    })?;
    let manifest = LoopManifest::parse(&text).map_err(|e| manifest_error(&loop_path, &e))?;
    let bounds_path = dir.join(&manifest.bounds);
    let text = std::fs::read_to_string(&bounds_path).map_err(|e| {
        CliError::refused(format!(
            "bl run: manifest error — cannot read {}: {e}",
            bounds_path.display()
        ))
    })?;
    let bounds =
        Bounds::parse(&text, &manifest.rung).map_err(|e| manifest_error(&bounds_path, &e))?;
    if let Some(spec) = &manifest.spec
        && !dir.join(spec).is_file()
    {
        return Err(CliError::refused(format!(
            "bl run: manifest error — spec file {} not found",
            dir.join(spec).display()
        )));
    }
    Ok(Package {
        dir: dir.to_path_buf(),
        manifest,
        bounds,
    })
}

struct WallClock {
    started: Instant,
    before: Duration,
}

impl Clock for WallClock {
    fn elapsed(&self) -> Duration {
        self.before + self.started.elapsed()
    }
    fn timestamp(&self) -> String {
        humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
    }
}

struct EnvKill;

impl KillSwitch for EnvKill {
    fn engaged(&self) -> Option<String> {
        // Any non-empty value stops the loop, "0" and "false" included:
        // a kill switch that can be misread as off is not one.
        std::env::var_os(KILL_SWITCH)
            .filter(|v| !v.is_empty())
            .map(|_| "killed".to_string())
    }
}

/// The ledger file, appended line by line and synced, chained to the
/// head of what is already there.
struct FileLedger {
    path: PathBuf,
    head: String,
    redact: Redact,
}

impl FileLedger {
    fn open(path: &Path, redact: Redact) -> Result<FileLedger, CliError> {
        let head = match std::fs::read(path) {
            Ok(bytes) if !bytes.is_empty() => {
                let chain = bl_store::loop_ledger::verify_ledger(&bytes);
                if chain.status != bl_store::loop_ledger::ChainStatus::Verified {
                    return Err(CliError::refused(format!(
                        "bl run: the ledger {} does not verify ({}: {}); bl will not append to a ledger whose history is broken. Move it aside to start a new one.",
                        path.display(),
                        chain.status.as_str(),
                        chain.detail
                    )));
                }
                chain.head
            }
            _ => bl_loops::ledger::GENESIS.to_string(),
        };
        Ok(FileLedger {
            path: path.to_path_buf(),
            head,
            redact,
        })
    }
}

impl Ledger for FileLedger {
    fn append(&mut self, line: &LedgerLine) -> Result<String, String> {
        let text = self.redact.line(line);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| format!("cannot open the ledger {}: {e}", self.path.display()))?;
        file.write_all(format!("{text}\n").as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| format!("cannot append to the ledger {}: {e}", self.path.display()))?;
        self.head = bl_core::sha256_hex(text.as_bytes());
        Ok(self.head.clone())
    }

    fn head(&self) -> &str {
        &self.head
    }
}

/// `--redact`: what is rewritten before a line is written and hashed.
#[derive(Clone)]
struct Redact {
    mode: String,
    /// Absolute paths to rewrite, longest first, with their placeholders.
    paths: Vec<(String, String)>,
}

impl Redact {
    fn line(&self, line: &LedgerLine) -> String {
        if self.mode == "off" {
            return line.to_line();
        }
        let mut line = line.clone();
        if self.mode == "strict" {
            redact_output(&mut line.verdict.evidence);
        }
        let mut text = serde_json::to_string(&line).expect("a ledger line serializes");
        for (path, placeholder) in &self.paths {
            let escaped = serde_json::to_string(path).expect("a string serializes");
            text = text.replace(escaped.trim_matches('"'), placeholder);
        }
        ascii_escaped(&text)
    }
}

/// Replaces captured output (`tail`, at any depth) with its digest.
fn redact_output(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "tail"
                    && let Some(text) = v.as_str()
                {
                    *v = json!(format!("sha256:{}", bl_core::sha256_hex(text.as_bytes())));
                } else {
                    redact_output(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_output),
        _ => {}
    }
}

struct Prompted {
    interactive: bool,
}

impl Approver for Prompted {
    fn approved(&mut self, lap: u32) -> bool {
        if !self.interactive {
            return false;
        }
        eprint!("[bl] the gate passed at lap {lap}; this rung requires approval. Approve? [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).is_ok()
            && matches!(answer.trim(), "y" | "Y" | "yes")
    }
}

struct HandoffFile {
    path: PathBuf,
    name: String,
    goal: String,
    bounds: Bounds,
}

impl Handoff for HandoffFile {
    fn write(&mut self, outcome: &RunOutcome) -> Result<(), String> {
        let text = handoff_text(&self.name, &self.goal, &self.bounds, outcome);
        std::fs::write(&self.path, text).map_err(|e| e.to_string())
    }
}

/// `HANDOFF.md`: why the run stopped, how far it got, and (marked as
/// unverified) the worker's own account from the wind-down turn.
pub fn handoff_text(name: &str, goal: &str, bounds: &Bounds, outcome: &RunOutcome) -> String {
    let mut s = format!(
        "# Handoff: {name}\n\nThe run stopped on a bound before its gate passed. This file is not a claim that the work is done; it is where the next run starts.\n\n"
    );
    s.push_str(&format!("## Why it stopped\n\n{}\n\n", outcome.reason));
    s.push_str(&format!("## The goal\n\n{}\n\n", goal.trim()));
    s.push_str(&format!(
        "## Progress\n\nLaps recorded: {}. Tokens spent: {}.\n\n",
        outcome.laps, outcome.tokens
    ));
    for a in &outcome.attempts {
        let what = if a.changed {
            "changed the workspace"
        } else {
            "changed nothing"
        };
        s.push_str(&format!(
            "- lap {}: {what}; the gate said: {}\n",
            a.lap, a.detail
        ));
    }
    let last = outcome
        .last_verdict
        .as_ref()
        .map_or("(the gate never ran)", |v| v.detail.as_str());
    s.push_str(&format!("\n## The gate's last word\n\n{last}\n\n"));
    s.push_str(&format!(
        "## Bounds\n\n- max_iterations: {}\n- no_progress_window: {}\n- max_tokens: {}\n- max_wallclock_s: {} ({} s reserved for this handoff)\n\n",
        bounds.max_iterations,
        bounds.no_progress_window,
        bounds.max_tokens.map_or("none".into(), |t| t.to_string()),
        bounds.max_wallclock_s,
        bounds.handoff_reserve_s
    ));
    s.push_str("Laps that changed nothing mean the loop was stuck; raising a bound will not help them. Laps that changed the workspace but did not pass mean it ran short: raise the bound or act on the gate's last word.\n\n");
    s.push_str("## The worker's own account (unverified)\n\nWritten in the reserved wind-down turn. No gate has checked it.\n\n");
    s.push_str(
        outcome
            .wind_down
            .as_deref()
            .unwrap_or("(the wind-down turn gave no account)"),
    );
    s.push('\n');
    s
}

fn sandbox_runner(sandbox: bool) -> Result<Arc<dyn CommandRunner>, CliError> {
    let tier = if sandbox {
        bl_sandbox::Tier::ProcessRestricted
    } else {
        bl_sandbox::Tier::WorkspaceOnly
    };
    let sandbox = crate::sandbox_cmd::sandbox(tier).map_err(CliError::refused)?;
    Ok(Arc::new(sandbox))
}

fn runtime(runner: Arc<dyn CommandRunner>, bounds: &Bounds) -> Result<Runtime, CliError> {
    let mut config = RuntimeConfig {
        cache_dir: crate::paths::component_cache_dir(),
        command_runner: Some(runner),
        ..Default::default()
    };
    // A gate may take what the run may; the engine stops laps at the budget.
    config.limits.deadline = Duration::from_secs(bounds.max_wallclock_s.max(1));
    config.limits.command_timeout = config.limits.deadline;
    Runtime::new(config).map_err(|e| CliError::with_exit(Exit::Undecided, format!("bl run: {e}")))
}

fn make_runner(
    name: &str,
    package: &Package,
    root: &Path,
    commands: Arc<dyn CommandRunner>,
) -> Result<Box<dyn Runner>, CliError> {
    let m = &package.manifest;
    match name {
        "stub" => {
            let rel = m
                .runner
                .cassette
                .clone()
                .unwrap_or_else(|| "cassettes/default.json".into());
            let path = package.dir.join(&rel);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                CliError::refused(format!(
                    "bl run: the stub runner needs a cassette: cannot read {}: {e}",
                    path.display()
                ))
            })?;
            let cassette = Cassette::parse(&text)
                .map_err(|e| CliError::refused(format!("bl run: {}: {e}", path.display())))?;
            Ok(Box::new(StubRunner::new(cassette, root, &m.forbid)))
        }
        "shell" => {
            let cmd = m.runner.agent_cmd.as_deref().ok_or_else(|| {
                CliError::refused("bl run: the shell runner needs runner.agent_cmd in loop.yaml")
            })?;
            let argv = shlex::split(cmd).filter(|a| !a.is_empty()).ok_or_else(|| {
                CliError::refused(format!(
                    "bl run: runner.agent_cmd {cmd:?} is not a command line"
                ))
            })?;
            let program = Path::new(&argv[0])
                .file_name()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !SHELL_ALLOWLIST.contains(&program.as_str()) {
                return Err(CliError::refused(format!(
                    "bl run: runner.agent_cmd starts '{program}', which is not on the shell runner's allowlist ({}); wrap it in a script run by one of them",
                    SHELL_ALLOWLIST.join(", ")
                )));
            }
            Ok(Box::new(CommandTurns::shell(argv, root, commands)))
        }
        "python_callable" => {
            let module = m.runner.module_path.as_deref().ok_or_else(|| {
                CliError::refused(
                    "bl run: the python_callable runner needs runner.module_path in loop.yaml",
                )
            })?;
            let function = m.runner.function_name.as_deref().unwrap_or("run_turn");
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            Ok(Box::new(CommandTurns::python_callable(
                module, function, &cwd, root, commands,
            )))
        }
        agent => {
            let profile_name = match agent {
                "claude-code" => "claude",
                "antigravity" => "agy",
                other => other,
            };
            let catalog = bl_workers::Catalog::shipped();
            let profile = catalog.get(profile_name).cloned().ok_or_else(|| {
                CliError::refused(format!("bl run: no agent CLI profile for {agent}"))
            })?;
            let binary = bl_workers::LocalCli::new(catalog.clone(), root.to_path_buf())
                .resolve(&profile.binary)
                .ok_or_else(|| {
                    CliError::refused(format!(
                        "bl run: the {agent} runner needs '{}' on PATH; install it, or pick another --runner",
                        profile.binary
                    ))
                })?;
            let env: Vec<(String, String)> = ["PATH", "HOME"]
                .iter()
                .chain(
                    m.runner
                        .env_passthrough
                        .iter()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .iter(),
                )
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
                .collect();
            Ok(Box::new(CommandTurns::agent(
                agent, profile, binary, root, commands, env,
            )))
        }
    }
}

fn python_dumps(value: &serde_json::Value) -> String {
    bl_core::python_json(value)
}

pub fn run(args: RunArgs, json_out: bool) -> Result<Exit, CliError> {
    let package = read_package(&args.loop_dir)?;
    let mut bounds = package.bounds.clone();
    if let Some(max) = args.max_iterations {
        if max == 0 || i128::from(max) > bl_loops::manifest::MAX_ITERATIONS_CEILING {
            return Err(CliError::refused(format!(
                "bl run: --max-iterations {max} is outside 1..=1000; the 1000 ceiling is hard"
            )));
        }
        bounds.max_iterations = max;
    }
    let m = &package.manifest;
    let runner_name = args
        .runner
        .clone()
        .unwrap_or_else(|| m.runner.default.clone());
    let gate_text = LoopGate::describe(&m.gate, args.gate_override.as_deref());
    outln!("[bounded-loops] About to run loop '{}':", m.name);
    outln!("  runner : {runner_name}");
    outln!("  gate   : {gate_text}");
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(CliError::refused(
                "bl run: stdin is not a terminal, so the run cannot be confirmed; pass --yes to run without the prompt",
            ));
        }
        eprint!("Run it? [y/N] ");
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            errln!("not run");
            return Ok(Exit::No);
        }
    }

    let dir = std::fs::canonicalize(&package.dir).unwrap_or_else(|_| package.dir.clone());
    // Where the records and the workspace go.
    let (run_dir, ledger_path, workspace_root, scratch) = match &args.run_id {
        Some(id) => {
            if id.is_empty() || id.contains('/') || id.starts_with('.') {
                return Err(CliError::refused(format!(
                    "bl run: --run-id {id:?} must be a plain name"
                )));
            }
            let run_dir = dir.join(".bounded-loops/runs").join(id);
            let exists = run_dir.join("ledger.jsonl").exists();
            if args.resume && !exists {
                return Err(CliError::refused(format!(
                    "bl run: --resume: no run '{id}' at {}",
                    run_dir.display()
                )));
            }
            if !args.resume && exists {
                return Err(CliError::refused(format!(
                    "bl run: run '{id}' already exists at {}; pass --resume to continue it, or pick another --run-id",
                    run_dir.display()
                )));
            }
            std::fs::create_dir_all(&run_dir)
                .map_err(|e| CliError::refused(format!("bl run: {}: {e}", run_dir.display())))?;
            (
                Some(run_dir.clone()),
                run_dir.join("ledger.jsonl"),
                run_dir.join("workspace"),
                None,
            )
        }
        None => {
            let scratch = tempfile::Builder::new()
                .prefix("bl-loop-")
                .tempdir()
                .map_err(|e| {
                    CliError::refused(format!("bl run: cannot make a scratch workspace: {e}"))
                })?;
            let root = scratch.path().to_path_buf();
            (None, dir.join(".ledger.jsonl"), root, Some(scratch))
        }
    };
    let resume = args.resume;
    let mut workspace = ScratchWorkspace::prepare(&dir, &workspace_root, &m.forbid, resume)
        .map_err(|e| CliError::refused(format!("bl run: cannot prepare the workspace: {e}")))?;
    let commands = sandbox_runner(bounds.sandbox)?;
    let mut runner = make_runner(&runner_name, &package, &workspace_root, commands.clone())?;
    let runtime = runtime(commands, &bounds)?;
    let mut gate = LoopGate::new(
        runtime,
        &m.gate,
        args.gate_override.as_deref(),
        &dir,
        &workspace_root,
        &m.outputs,
        bounds.schema.as_deref(),
    )
    .map_err(|e| {
        CliError::with_exit(
            Exit::Undecided,
            format!("bl run: the gate could not be prepared: {e}"),
        )
    })?;

    let mut paths = vec![
        (
            workspace_root.display().to_string(),
            "<workspace>".to_string(),
        ),
        (dir.display().to_string(), "<loop>".to_string()),
    ];
    if let Ok(home) = std::env::var("HOME") {
        paths.push((home, "<home>".into()));
    }
    paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    let redact = Redact {
        mode: args.redact.clone(),
        paths,
    };
    let mut ledger = FileLedger::open(&ledger_path, redact)?;
    let (laps_done, tokens_spent, before) = if resume {
        resumed(&ledger_path)
    } else {
        (0, 0, Duration::ZERO)
    };
    let prompt = m
        .spec
        .as_ref()
        .and_then(|s| std::fs::read_to_string(dir.join(s)).ok())
        .unwrap_or_default();
    let plan = Plan {
        bounds: bounds.clone(),
        prompt,
        laps_done,
        tokens_spent,
    };
    let clock = WallClock {
        started: Instant::now(),
        before,
    };
    let mut approver = Prompted {
        interactive: !args.yes && std::io::stdin().is_terminal(),
    };
    let handoff_dir = run_dir.clone().unwrap_or_else(|| dir.clone());
    let mut handoff = HandoffFile {
        path: handoff_dir.join(engine::HANDOFF_FILE),
        name: m.name.clone(),
        goal: m.description.clone(),
        bounds: bounds.clone(),
    };
    let outcome = engine::run(
        &plan,
        Ports {
            runner: runner.as_mut(),
            gate: &mut gate,
            workspace: &mut workspace,
            clock: &clock,
            kill: &EnvKill,
            ledger: &mut ledger,
            approver: &mut approver,
            handoff: &mut handoff,
        },
    )
    .map_err(|e| CliError::with_exit(Exit::Undecided, format!("bl run: {e}")))?;

    if let Some(run_dir) = &run_dir {
        write_run_records(
            run_dir,
            &dir,
            &workspace_root,
            &ledger_path,
            &outcome,
            args.run_id.as_deref().unwrap_or_default(),
            m,
            &runner_name,
            &gate,
        )?;
    }
    if let Some(scratch) = scratch {
        if args.keep_workspace {
            let kept = scratch.keep();
            errln!("workspace kept at {}", kept.display());
        }
    }
    report(&outcome, &m.name, &ledger_path, &dir, json_out);
    Ok(match outcome.status {
        Status::Done => Exit::Success,
        Status::Halt | Status::Pause | Status::Killed => Exit::No,
        Status::Error => Exit::Undecided,
    })
}

/// Laps, tokens and time a resumed run already spent, from its ledger.
fn resumed(ledger: &Path) -> (u32, u64, Duration) {
    let text = std::fs::read_to_string(ledger).unwrap_or_default();
    let last = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .last();
    let Some(last) = last else {
        return (0, 0, Duration::ZERO);
    };
    let lap = last["lap"].as_u64().unwrap_or(0) as u32;
    let tokens = last["budget_spent"]["tokens"].as_u64().unwrap_or(0);
    let secs = last["budget_spent"]["wallclock_s"].as_f64().unwrap_or(0.0);
    (lap, tokens, Duration::from_secs_f64(secs.max(0.0)))
}

#[allow(clippy::too_many_arguments)]
fn write_run_records(
    run_dir: &Path,
    loop_dir: &Path,
    workspace: &Path,
    ledger: &Path,
    outcome: &RunOutcome,
    run_id: &str,
    m: &LoopManifest,
    runner: &str,
    gate: &LoopGate,
) -> Result<(), CliError> {
    use bl_loops::engine::Gate as _;
    let rows = std::fs::read_to_string(ledger)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let metadata = json!({
        "laps": outcome.laps,
        "ledger_head": outcome.ledger_head,
        "ledger_path": ledger.display().to_string(),
        "ledger_rows": rows,
        "loop_dir": loop_dir.display().to_string(),
        "reason": outcome.reason,
        "run_id": run_id,
        "status": outcome.status.as_str(),
        "workspace": workspace.display().to_string(),
    });
    let gate_record = gate.record();
    let receipt = json!({
        "run_id": run_id,
        "loop": m.name,
        "status": outcome.status.as_str(),
        "reason": outcome.reason,
        "laps": outcome.laps,
        "tokens": outcome.tokens,
        "ledger_head": outcome.ledger_head,
        "ledger_rows": rows,
        "runner": runner,
        "gate": {"kind": gate_record.kind, "source": gate_record.source, "components": gate_record.component},
        "attempts": outcome.attempts.iter().map(|a| json!({"lap": a.lap, "changed": a.changed, "verdict": a.detail})).collect::<Vec<_>>(),
        "verify": format!("bl verify {} --expect-head {}", run_dir.display(), outcome.ledger_head),
    });
    let md = format!(
        "# Receipt: {} / {run_id}\n\n- status: **{}** ({})\n- laps: {}\n- tokens: {}\n- runner: {runner}\n- gate: {} ({})\n- ledger head: `{}`\n\nThe gate decided; the worker's claims were recorded and not trusted. Check that this receipt was not edited:\n\n    bl verify {} --expect-head {}\n",
        m.name,
        outcome.status.as_str(),
        outcome.reason,
        outcome.laps,
        outcome.tokens,
        gate_record.kind,
        gate_record.implementation,
        outcome.ledger_head,
        run_dir.display(),
        outcome.ledger_head,
    );
    let write = |name: &str, text: String| {
        std::fs::write(run_dir.join(name), text).map_err(|e| {
            CliError::refused(format!(
                "bl run: cannot write {}: {e}",
                run_dir.join(name).display()
            ))
        })
    };
    write(
        "metadata.json",
        format!(
            "{}\n",
            serde_json::to_string_pretty(&metadata).expect("json")
        ),
    )?;
    write(
        "receipt.json",
        format!(
            "{}\n",
            serde_json::to_string_pretty(&receipt).expect("json")
        ),
    )?;
    write("receipt.md", md)?;
    // The runs index: one line per run, newest last.
    let index = loop_dir.join(".bounded-loops/runs/index.jsonl");
    let line = serde_json::to_string(&json!({
        "run_id": run_id,
        "status": outcome.status.as_str(),
        "reason": outcome.reason,
        "laps": outcome.laps,
        "ledger_head": outcome.ledger_head,
        "ended": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
    }))
    .expect("json");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&index)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| {
            CliError::refused(format!("bl run: cannot append to {}: {e}", index.display()))
        })
}

fn report(outcome: &RunOutcome, name: &str, ledger: &Path, verify_dir: &Path, json_out: bool) {
    let status = outcome.status.as_str();
    if json_out {
        // bounded-loops' key order, its separators and ASCII escapes.
        let text = format!(
            "{{\"subcommand\": \"run\", \"status\": {}, \"reason\": {}, \"laps\": {}, \"ledger_path\": {}, \"ledger_head\": {}}}",
            python_dumps(&json!(status)),
            python_dumps(&json!(outcome.reason)),
            outcome.laps,
            python_dumps(&json!(ledger.display().to_string())),
            python_dumps(&json!(outcome.ledger_head)),
        );
        outln!("{text}");
    } else {
        let mark = if outcome.status == Status::Done {
            "✓"
        } else {
            "✗"
        };
        outln!(
            "{mark} [{status}] {} (laps: {})  ledger: {}",
            outcome.reason,
            outcome.laps,
            ledger.display()
        );
        outln!("Ledger head: {}", outcome.ledger_head);
        match outcome.status {
            Status::Done => outln!(
                "The gate passed after {} lap(s); the worker's own claims were not consulted.",
                outcome.laps
            ),
            Status::Halt => outln!("A bound stopped the run; see HANDOFF.md for where it got to."),
            Status::Pause => outln!(
                "The gate passed, and this rung needs a human's approval: run it again interactively to approve."
            ),
            Status::Killed => outln!("{KILL_SWITCH} is set: every loop stops at its next lap."),
            Status::Error => {
                outln!("The run could not be decided: this is an error, never a pass or a fail.")
            }
        }
        outln!("Check that the ledger was not edited after the run:");
        outln!(
            "  bl verify {} --expect-head {}",
            verify_dir.display(),
            outcome.ledger_head
        );
    }
    // One machine-readable line for supervisors, on stderr.
    let event = format!(
        "{{\"event\":\"terminal\",\"status\":{},\"alert\":{},\"reason\":{},\"subject\":{},\"laps\":{},\"ledger_head\":{}}}",
        serde_json::to_string(status).expect("json"),
        outcome.status != Status::Done,
        serde_json::to_string(&outcome.reason).expect("json"),
        serde_json::to_string(name).expect("json"),
        outcome.laps,
        serde_json::to_string(&outcome.ledger_head).expect("json"),
    );
    errln!("BL_EVENT {}", ascii_escaped(&event));
}
