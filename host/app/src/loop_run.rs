//! Driving a bounded loop (`bl run`) and a graph's loop node: a loop
//! package read and checked (bl-loops), the scratch or kept workspace and
//! the runner (bl-workers) in the sandbox the bounds ask for (bl-sandbox),
//! the gate as wasm plugins, and the chained ledger with its run records
//! (metadata, receipts, the runs index). The front end confirms, supplies
//! the human approver and reports.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bl_core::CommandRunner;
use bl_loops::bounds::Bounds;
use bl_loops::cassette::Cassette;
use bl_loops::engine::{
    self, Approver, Clock, Handoff, KillSwitch, Ledger, Memory, Plan, Ports, RunOutcome, Runner,
};
use bl_loops::ledger::LedgerLine;
use bl_loops::manifest::{LoopManifest, ManifestError};
use bl_workers::loops::{CommandTurns, Prepare, ScratchWorkspace, StubRunner};
use serde_json::json;

use bl_store::{LoopDir, LoopRunDir};

use crate::error::AppError;
use crate::loop_gates::{GatePlugins, LoopGate};
use crate::loop_trace::{LapSpans, Redact};
use crate::notes::note;
use crate::stop::Cancel;
use bl_loops::engine::{PortError, UnjudgedTurn};

/// The environment variable that stops every loop at its next lap.
pub const KILL_SWITCH: &str = "BOUNDED_LOOPS_KILL";
/// Programs the shell runner may start (the file name of agent_cmd's
/// first word), as bounded-loops reviewed them.
pub const AGENT_CMD_ALLOWLIST: &[&str] = &[
    "agy", "claude", "codex", "grok", "muse", "python", "python3", "true", "uv",
];
/// The operator's own additions to the allowlist (comma-separated).
pub const EXTRA_AGENT_CMDS: &str = "BOUNDED_LOOPS_EXTRA_AGENT_CMDS";
/// The variables `runner.env_passthrough` may name (comma-separated).
pub const ENV_PASSTHROUGH_ALLOW: &str = "BOUNDED_LOOPS_ENV_PASSTHROUGH_ALLOW";

fn manifest_error(path: &Path, e: &ManifestError) -> AppError {
    let place = match e.pos {
        Some(pos) => format!("\n  at {}:{}:{}", path.display(), pos.line, pos.col),
        None => format!("\n  in {}", path.display()),
    };
    AppError::refused(format!("bl run: manifest error — {e}{place}"))
}

/// A loop package's manifests, read and checked.
pub struct Package {
    pub dir: PathBuf,
    pub manifest: LoopManifest,
    pub bounds: Bounds,
}

pub fn read_package(dir: &Path) -> Result<Package, AppError> {
    if !dir.is_dir() {
        return Err(AppError::refused(format!(
            "bl run: '{}' is not a directory or does not exist.",
            dir.display()
        )));
    }
    let loop_path = dir.join("loop.yaml");
    let text = std::fs::read_to_string(&loop_path).map_err(|e| {
        AppError::refused(format!(
            "bl run: no readable loop.yaml in {} ({e}); a loop package is a directory containing loop.yaml",
            dir.display()
        ))
    })?;
    let manifest = LoopManifest::parse(&text).map_err(|e| manifest_error(&loop_path, &e))?;
    let bounds_path = dir.join(&manifest.bounds);
    let text = std::fs::read_to_string(&bounds_path).map_err(|e| {
        AppError::refused(format!(
            "bl run: manifest error — cannot read {}: {e}",
            bounds_path.display()
        ))
    })?;
    let bounds =
        Bounds::parse(&text, &manifest.rung).map_err(|e| manifest_error(&bounds_path, &e))?;
    if let Some(spec) = &manifest.spec
        && !dir.join(spec).is_file()
    {
        return Err(AppError::refused(format!(
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
}

impl Clock for WallClock {
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
    fn timestamp(&self) -> String {
        humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
    }
}

/// The kill switch: the environment's (every loop), a stop asked of the
/// whole process (a signal), or one loop's cancel.
struct Kill<'a> {
    cancel: Option<&'a Cancel>,
}

impl KillSwitch for Kill<'_> {
    fn engaged(&self) -> Option<String> {
        // Any non-empty value stops the loop, "0" and "false" included:
        // a kill switch that can be misread as off is not one.
        std::env::var_os(KILL_SWITCH)
            .filter(|v| !v.is_empty())
            .map(|_| "killed".to_string())
            .or_else(|| self.ends_commands())
            .or_else(|| {
                self.cancel
                    .filter(|c| c.is_cancelled())
                    .map(|_| "cancelled".to_string())
            })
    }

    fn ends_commands(&self) -> Option<String> {
        bl_core::interrupt::requested().map(|s| format!("stopped by signal {s}"))
    }
}

/// The ledger file, appended line by line and synced, chained to the
/// head of what is already there.
struct FileLedger {
    path: PathBuf,
    head: String,
    redact: Redact,
    /// Where a finished turn is marked until its lap is appended (a run
    /// with `--run-id`, which can be resumed).
    turn_mark: Option<PathBuf>,
    /// Whether the last lap on record was stopped while its gate judged a
    /// turn the worker had finished.
    last_stopped_in_gate: bool,
    /// The last line's fdatasync, running while the run goes on (the run's
    /// end removes its scratch copy meanwhile); settled before the next
    /// worker turn, the next line and the run's report.
    syncing: Option<LedgerSync>,
}

/// A ledger line being made durable on a thread of its own. Dropped
/// unwaited (a run that ends in an error), it still waits.
pub(crate) struct LedgerSync {
    path: PathBuf,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl LedgerSync {
    /// Waits until the line is durable.
    fn wait(mut self) -> Result<(), PortError> {
        self.join().map_err(|e| {
            PortError(format!(
                "cannot append to the ledger {}: {e}",
                self.path.display()
            ))
        })
    }

    fn join(&mut self) -> std::io::Result<()> {
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the thread syncing it panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for LedgerSync {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// A scratch workspace being removed on a thread of its own once the
/// engine is done with it, while the run finishes (its gate and runner
/// dropped, its ledger made durable). On a disk that discards what is
/// freed, the removal took 0.5 to 0.8 ms. Dropped, it waits.
struct ScratchRemoval(Option<std::thread::JoinHandle<()>>);

impl ScratchRemoval {
    fn start(scratch: Option<tempfile::TempDir>) -> ScratchRemoval {
        // Where no thread starts, the closure is dropped, and the
        // directory removed with it, here.
        let thread = scratch.and_then(|scratch| {
            std::thread::Builder::new()
                .name("bl-scratch".into())
                .spawn(move || drop(scratch))
                .ok()
        });
        ScratchRemoval(thread)
    }
}

impl Drop for ScratchRemoval {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

impl FileLedger {
    /// A turn the worker finished that waits to be judged: the last lap
    /// was stopped in its gate (and recorded what the turn spent), or a
    /// finished turn is marked on top of the ledger's head (the process
    /// that took it died in the gate, and only the mark says what it spent).
    fn unjudged_turn(&self) -> Option<UnjudgedTurn> {
        if self.last_stopped_in_gate {
            return Some(UnjudgedTurn {
                tokens: 0,
                on_record: true,
            });
        }
        let mark = std::fs::read(self.turn_mark.as_deref()?).ok()?;
        let mark: serde_json::Value = serde_json::from_slice(&mark).ok()?;
        (mark["head"] == self.head.as_str()).then(|| UnjudgedTurn {
            tokens: mark["tokens"].as_u64().unwrap_or(0),
            on_record: false,
        })
    }

    fn open(path: &Path, redact: Redact) -> Result<FileLedger, AppError> {
        let mut last_stopped_in_gate = false;
        let head = match std::fs::read(path) {
            Ok(bytes) if !bytes.is_empty() => {
                let chain = bl_store::loop_ledger::verify_ledger(&bytes);
                if chain.status != bl_store::loop_ledger::ChainStatus::Verified {
                    return Err(AppError::refused(format!(
                        "bl run: the ledger {} does not verify ({}: {}); bl will not append to a ledger whose history is broken. Move it aside to start a new one.",
                        path.display(),
                        chain.status.as_str(),
                        chain.detail
                    )));
                }
                last_stopped_in_gate = bytes
                    .split(|b| *b == b'\n')
                    .rfind(|l| !l.trim_ascii().is_empty())
                    .and_then(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
                    .is_some_and(|line| bl_loops::engine::stopped_in_gate(&line));
                chain.head
            }
            _ => bl_loops::ledger::GENESIS.to_string(),
        };
        Ok(FileLedger {
            path: path.to_path_buf(),
            head,
            redact,
            turn_mark: None,
            last_stopped_in_gate,
            syncing: None,
        })
    }

    /// The line still being made durable, for the caller to wait for once
    /// it has done what need not wait (the run's end: removing its copies).
    fn take_sync(&mut self) -> Option<LedgerSync> {
        self.syncing.take()
    }
}

impl Ledger for FileLedger {
    fn append(&mut self, line: &LedgerLine) -> Result<String, PortError> {
        self.settle()?;
        let text = self.redact.line(line);
        // A ledger this line starts: its name must reach the disk too.
        let new_name = (!self.path.exists()).then(|| self.path.clone());
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| {
                PortError(format!(
                    "cannot open the ledger {}: {e}",
                    self.path.display()
                ))
            })?;
        file.write_all(format!("{text}\n").as_bytes())
            .map_err(|e| {
                PortError(format!(
                    "cannot append to the ledger {}: {e}",
                    self.path.display()
                ))
            })?;
        self.head = bl_core::sha256_hex(text.as_bytes());
        let turn_mark = self.turn_mark.clone();
        let thread = std::thread::Builder::new()
            .name("bl-ledger-sync".into())
            .spawn(move || {
                file.sync_data()?;
                if let Some(path) = new_name {
                    bl_store::sync_name_of(&path)?;
                }
                if let Some(mark) = turn_mark {
                    // Judged and on record: the mark has done its work.
                    let _ = std::fs::remove_file(mark);
                }
                Ok(())
            })
            .map_err(|e| PortError(format!("cannot start syncing the ledger: {e}")))?;
        self.syncing = Some(LedgerSync {
            path: self.path.clone(),
            thread: Some(thread),
        });
        Ok(self.head.clone())
    }

    fn settle(&mut self) -> Result<(), PortError> {
        self.syncing.take().map_or(Ok(()), LedgerSync::wait)
    }

    fn head(&self) -> &str {
        &self.head
    }

    fn turn_finished(&mut self, lap: u32, tokens: u64) -> Result<(), PortError> {
        let Some(mark) = &self.turn_mark else {
            return Ok(());
        };
        let text = json!({"head": self.head, "lap": lap, "tokens": tokens}).to_string();
        std::fs::File::create(mark)
            .and_then(|mut file| {
                file.write_all(text.as_bytes())?;
                file.sync_data()
            })
            .map_err(|e| {
                PortError(format!(
                    "cannot mark the finished turn in {}: {e}",
                    mark.display()
                ))
            })
    }
}

/// `.STATE.md.runtime` in the loop directory: one note per rejected lap,
/// appended across runs; `STATE.md` itself is never touched.
struct RuntimeMemory {
    path: PathBuf,
}

impl Memory for RuntimeMemory {
    fn note(&mut self, lap: u32, timestamp: &str, detail: &str) {
        let note = format!(
            "\n<!-- bl:lap:{lap} ts:{timestamp} verdict:FAIL decision:continue -->\nGate failed: {detail}\n---\n"
        );
        // Memory is a convenience for the next turn, not a record: a loop
        // directory that cannot be written does not stop the run.
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .and_then(|mut f| f.write_all(note.as_bytes()));
    }
}

struct HandoffFile {
    path: PathBuf,
    manifest: LoopManifest,
    bounds: Bounds,
    /// How the gate's findings are redacted (`--redact`), and the loop dir.
    redact: bl_loops::redact::Mode,
    loop_dir: String,
}

impl Handoff for HandoffFile {
    fn write(&mut self, outcome: &RunOutcome) -> Result<(), PortError> {
        let said_last = outcome
            .last_verdict
            .as_ref()
            .map(|j| bl_loops::engine::feedback_text(j, self.redact, &self.loop_dir));
        let text = handoff_text(&self.manifest, &self.bounds, outcome, said_last.as_deref());
        std::fs::write(&self.path, text).map_err(|e| PortError(e.to_string()))
    }
}

/// `HANDOFF.md`, laid out as bounded-loops lays it out: why the run
/// stopped, what it was for, how far it got (per attempt), the gate's last
/// word, the bounds, what to do next, and (marked unverified) the worker's
/// own account from the wind-down turn.
fn handoff_text(
    m: &LoopManifest,
    bounds: &Bounds,
    outcome: &RunOutcome,
    said_last: Option<&str>,
) -> String {
    let mut s = format!(
        "# Handoff — {}\n\nA declared bound stopped this run before its gate passed. Nothing here says the work is\ndone; it is here so that the next run does not start from nothing.\n\n",
        m.name
    );
    s.push_str(&format!("## Why it stopped\n\n{}\n\n", outcome.reason));
    let stop = match m.gate.kind.as_str() {
        "command" => "gate command passes".to_string(),
        kind => format!("the {kind} gate passes"),
    };
    s.push_str(&format!(
        "## What it was trying to do\n\n- goal: {}\n- stop condition (the gate proves this, not the agent): {stop}\n",
        m.description.trim()
    ));
    if !m.forbid.is_empty() {
        s.push_str(&format!("- must not touch: {}\n", m.forbid.join(", ")));
    }
    let attempted = outcome.attempts.len();
    s.push_str(&format!(
        "\n## How far it got\n\n- laps recorded: {}\n- work attempts spent: {attempted} of {} declared\n\nPer attempt:\n",
        outcome.laps, bounds.max_iterations
    ));
    for (i, a) in outcome.attempts.iter().enumerate() {
        let what = if a.changed {
            "changed the workspace"
        } else {
            "changed nothing"
        };
        s.push_str(&format!("  attempt {}: {what} — {}\n", i + 1, a.detail));
    }
    // The gate's last word belongs to the halting lap only if that lap got to the gate.
    // (With what it found, as the agent was told it.)
    // bounded-loops says only "(no verdict was reached)" when the halting
    // lap was not judged; the verdict before it is what the next run needs.
    let last = match outcome.attempts.last() {
        Some(a) if a.lap == outcome.laps => said_last.unwrap_or(a.detail.as_str()).to_string(),
        Some(a) => format!(
            "(no verdict was reached in lap {}, where the run stopped; the last one, at lap {}:)\n\n{}",
            outcome.laps,
            a.lap,
            said_last.unwrap_or(a.detail.as_str())
        ),
        None => "(no verdict was reached)".into(),
    };
    s.push_str(&format!("\n## What the gate said last\n\n{last}\n\n"));
    s.push_str(&format!(
        "## The bounds it was given\n\n- max_iterations: {}\n- no_progress_window: {}\n- max_wallclock_s: {}\n- max_tokens: {}\n- handoff_reserve_s: {}\n\n",
        bounds.max_iterations,
        bounds.no_progress_window,
        bounds.max_wallclock_s,
        bounds.max_tokens.map_or("None".into(), |t| t.to_string()),
        bounds.handoff_reserve_s
    ));
    s.push_str("## What to do next\n\nA re-run starts again from the same seed, so change something first:\n\n1. if the attempts above changed the workspace, the run was converging and ran short: raise\n   the bound it stopped on;\n2. if they changed nothing, the run was stuck: act on what the gate said last.\n\n---\n\n");
    match &outcome.wind_down {
        Some(account) => {
            s.push_str("## The agent's own account (written in the reserved wind-down turn)\n\nUnverified: this is the worker describing its own work, and no gate has checked it.\nEverything above comes from the run's records.\n\n");
            s.push_str(account);
            s.push('\n');
        }
        None => s.push_str("No wind-down turn was recorded, so this handoff is the engine's account only: either\n`handoff_reserve_s` is 0, or the wind-down turn produced nothing.\n"),
    }
    s
}

/// Whether the package's `kind: plugin` gates (bl's own kind) would be
/// prepared here: found, trusted, of the version asked, taking their
/// config. What `bl lint` checks beyond the manifest; nothing is judged.
pub fn check_plugin_gates(package: &Package) -> Result<(), AppError> {
    fn uses_plugin(spec: &bl_loops::manifest::GateSpec) -> bool {
        spec.kind == bl_loops::manifest::PLUGIN_GATE || spec.gates.iter().any(uses_plugin)
    }
    let m = &package.manifest;
    if !uses_plugin(&m.gate) {
        return Ok(());
    }
    let plugins = GatePlugins {
        host: crate::plugin_host::shared(),
        commands: sandbox_runner(false, &[])?,
        deadline: Duration::from_secs(1),
    };
    LoopGate::new(
        plugins,
        &m.gate,
        None,
        &package.dir,
        &package.dir,
        &m.outputs,
        package.bounds.schema.as_deref(),
    )
    .map(drop)
    .map_err(|e| AppError::Undecided(format!("the gate could not be prepared: {e}")))
}

fn sandbox_runner(sandbox: bool, hidden: &[PathBuf]) -> Result<Arc<dyn CommandRunner>, AppError> {
    let tier = if sandbox {
        bl_sandbox::Tier::ProcessRestricted
    } else {
        bl_sandbox::Tier::WorkspaceOnly
    };
    // Its containment and network are made ahead only once the worker or
    // the gate is known to run commands (a cassette worker and a wasm-only
    // gate run none).
    let sandbox = crate::cage::sandbox_on_demand(tier)
        .map_err(|e| AppError::Refused(e.to_string()))?
        .hiding(hidden.to_vec());
    Ok(Arc::new(sandbox))
}

fn make_runner(
    name: &str,
    package: &Package,
    root: &Path,
    commands: Arc<dyn CommandRunner>,
    env: Vec<(String, String)>,
) -> Result<Box<dyn Runner>, AppError> {
    let m = &package.manifest;
    // Every worker but a cassette runs commands.
    if name != "stub" {
        commands.expect_commands();
    }
    match name {
        "stub" => {
            let rel = m
                .runner
                .cassette
                .clone()
                .unwrap_or_else(|| "cassettes/default.json".into());
            let path = package.dir.join(&rel);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                AppError::refused(format!(
                    "bl run: the stub runner needs a cassette: cannot read {}: {e}",
                    path.display()
                ))
            })?;
            let cassette = Cassette::parse(&text)
                .map_err(|e| AppError::refused(format!("bl run: {}: {e}", path.display())))?;
            Ok(Box::new(StubRunner::new(cassette, root, &m.forbid)))
        }
        "shell" => {
            let cmd = m.runner.agent_cmd.as_deref().unwrap_or("true");
            let argv = shlex::split(cmd)
                .filter(|a| !a.is_empty())
                .ok_or_else(|| AppError::refused("bl run: manifest error — runner.agent_cmd must be a non-empty string when given"))?;
            let program = Path::new(&argv[0])
                .file_name()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            let extra: Vec<String> = std::env::var(EXTRA_AGENT_CMDS)
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            if !AGENT_CMD_ALLOWLIST.contains(&program.as_str()) {
                if !extra.contains(&program) {
                    return Err(AppError::refused(format!(
                        "bl run: manifest error — runner.agent_cmd first token '{program}' is not in the agent_cmd allowlist ({}). Wrap the command in a script run by one of these, or have the operator allow it for this deployment with {EXTRA_AGENT_CMDS}={program}.",
                        bl_core::python::list_repr(
                            &AGENT_CMD_ALLOWLIST
                                .iter()
                                .map(|s| s.to_string())
                                .collect::<Vec<_>>()
                        )
                    )));
                }
                note(format!(
                    "[bounded-loops] agent_cmd '{program}' is permitted only by the operator extension {EXTRA_AGENT_CMDS}; it is not in the reviewed allowlist shipped with bl."
                ));
            }
            Ok(Box::new(
                CommandTurns::shell(argv, root, commands).with_env(env),
            ))
        }
        "python_callable" => {
            let module = m.runner.module_path.as_deref().ok_or_else(|| {
                AppError::refused(
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
                AppError::refused(format!("bl run: no agent CLI profile for {agent}"))
            })?;
            let binary = bl_workers::LocalCli::new(catalog.clone(), root.to_path_buf())
                .resolve(&profile.binary)
                .ok_or_else(|| {
                    AppError::refused(format!(
                        "bl run: the {agent} runner needs '{}' on PATH; install it, or pick another --runner",
                        profile.binary
                    ))
                })?;
            // An agent CLI needs the operator's PATH and HOME (its login).
            let env: Vec<(String, String)> = ["PATH", "HOME"]
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
                .chain(env)
                .collect();
            Ok(Box::new(CommandTurns::agent(
                agent, profile, binary, root, commands, env,
            )))
        }
    }
}

/// A run id: 1-128 of letters, digits, `.`, `_`, `-`, starting with a
/// letter or digit (it names a directory).
fn valid_run_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_alphanumeric())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// What the agent is told each lap: the goal, the spec, what it must not
/// touch, and the loop's memory as the package ships it.
fn compose_prompt(dir: &Path, m: &LoopManifest) -> String {
    let read = |rel: &Option<String>| {
        rel.as_ref()
            .and_then(|r| std::fs::read_to_string(dir.join(r)).ok())
            .unwrap_or_default()
    };
    let mut prompt = format!(
        "# Goal\n{}\n\n# Steps\n1. {}\n",
        m.description.trim_end(),
        read(&m.spec).trim_end()
    );
    if !m.forbid.is_empty() {
        prompt.push_str("# Forbidden actions\n");
        for f in &m.forbid {
            prompt.push_str(&format!("- {f}\n"));
        }
    }
    prompt.push_str(&format!(
        "\n# Controller memory snapshot\n{}",
        read(&m.memory)
    ));
    prompt
}

/// `runner.env_passthrough` names only what the operator allowed; the
/// allowed names go to the runner with the operator's values.
fn passthrough(m: &LoopManifest) -> Result<Vec<(String, String)>, AppError> {
    let allowed: Vec<String> = std::env::var(ENV_PASSTHROUGH_ALLOW)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let refused: Vec<&str> = m
        .runner
        .env_passthrough
        .iter()
        .filter(|v| !allowed.contains(v))
        .map(String::as_str)
        .collect();
    if refused.is_empty() {
        return Ok(m
            .runner
            .env_passthrough
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
            .collect());
    }
    Err(AppError::refused(format!(
        "bl run: wiring error — ManifestError: loop.yaml requests runner.env_passthrough: {}, but it is not in the operator allowlist ({ENV_PASSTHROUGH_ALLOW}). Refusing to pass through an unauthorized variable.",
        refused.join(", ")
    )))
}

/// The hosts a caged agent-CLI runner may reach: its profile's provider
/// hosts, and the operator's allowlist when the egress posture is
/// `allowlist`. `None` for the other runners, and without a cage.
fn agent_hosts(runner: &str, sandbox: bool) -> Result<Option<Vec<String>>, AppError> {
    if !sandbox || matches!(runner, "stub" | "shell" | "python_callable") {
        return Ok(None);
    }
    let profile = match runner {
        "claude-code" => "claude",
        "antigravity" => "agy",
        other => other,
    };
    let mut hosts = bl_workers::Catalog::shipped()
        .get(profile)
        .map(|p| p.egress_hosts.clone())
        .unwrap_or_default();
    let config = bl_egress::posture::resolve_posture(|name| std::env::var(name).ok())
        .map_err(|e| AppError::refused(format!("bl run: egress posture: {e}")))?;
    if config.posture == bl_egress::posture::Posture::Allowlist {
        hosts.extend(config.allowlist);
    }
    Ok(Some(hosts))
}

/// Where one loop run keeps its workspace and records.
struct LoopPlace {
    workspace_root: PathBuf,
    how: Prepare,
    ledger: PathBuf,
    handoff: PathBuf,
    /// `.STATE.md.runtime`: the notes the next turn reads.
    memory: PathBuf,
    redact: String,
    /// Where a caged agent runner's egress decisions are kept.
    egress_record: PathBuf,
    /// What the cages hide (a graph run's directory, for a loop node).
    hidden: Vec<PathBuf>,
    /// A cancel of this loop alone (the runtime API's).
    cancel: Option<Arc<Cancel>>,
    /// Where a finished turn is marked until its lap is on record, for a
    /// run `--resume` can continue (`--run-id`); a graph's loop node is
    /// re-driven by its graph instead.
    turn_mark: Option<PathBuf>,
    /// The throwaway workspace, removed once the engine is done with it.
    scratch: Option<tempfile::TempDir>,
}

/// Runs the loop engine over `package` (resolved as `dir`): the scratch
/// workspace and the runner in the sandbox the bounds ask for, the gate as
/// wasm plugins, the chained ledger. Returns with the ledger's last line
/// perhaps still being made durable: the caller waits for it before it
/// reports the run, and its scratch workspace perhaps still being removed.
#[allow(clippy::too_many_arguments)]
fn drive_loop(
    package: &Package,
    dir: &Path,
    bounds: Bounds,
    runner_name: &str,
    gate_override: Option<&str>,
    place: &mut LoopPlace,
    env: Vec<(String, String)>,
    approver: &mut dyn Approver,
) -> Result<(RunOutcome, LastLine, ScratchRemoval), AppError> {
    let m = &package.manifest;
    let workspace_root = &place.workspace_root;
    let mut workspace = ScratchWorkspace::prepare(
        dir,
        workspace_root,
        &m.forbid,
        place.how,
        bounds.quarantine_inputs,
    )
    .map_err(|e| AppError::refused(format!("bl run: cannot prepare the workspace: {e}")))?;
    if !workspace.withheld().is_empty() {
        note(bl_loops::quarantine::warning(workspace.withheld()));
    }
    let commands = sandbox_runner(bounds.sandbox, &place.hidden)?;
    // A caged agent CLI reaches its provider, and only it, through the
    // allowlist proxy; every other command in the cage has no network.
    let (runner_commands, _proxy) = match agent_hosts(runner_name, bounds.sandbox)? {
        Some(hosts) => {
            let config = bl_egress::posture::EgressConfig::new(
                bl_egress::posture::Posture::Allowlist,
                &hosts,
            )
            .map_err(|e| AppError::refused(format!("bl run: egress allowlist: {e}")))?;
            let guard = crate::egress_proxy::start_proxy(&config, Some(&place.egress_record))
                .map_err(|e| {
                    AppError::refused(format!("bl run: the allowlist proxy could not start: {e}"))
                })?;
            let caged = crate::cage::sandbox(bl_sandbox::Tier::ProcessRestricted)
                .map_err(|e| AppError::Refused(e.to_string()))?
                .hiding(place.hidden.clone())
                .with_egress(guard.bridge.clone());
            (Arc::new(caged) as Arc<dyn CommandRunner>, Some(guard))
        }
        None => (commands.clone(), None),
    };
    let mut runner = make_runner(runner_name, package, workspace_root, runner_commands, env)?;
    let plugins = GatePlugins {
        host: crate::plugin_host::shared(),
        commands,
        deadline: Duration::from_secs(bounds.max_wallclock_s.max(1)),
    };
    let mut gate = LoopGate::new(
        plugins,
        &m.gate,
        gate_override,
        dir,
        workspace_root,
        &m.outputs,
        bounds.schema.as_deref(),
    )
    .map_err(|e| AppError::Undecided(format!("bl run: the gate could not be prepared: {e}")))?;

    let redact = Redact::new(&place.redact, dir);
    let mut ledger = FileLedger::open(&place.ledger, redact)?;
    ledger.turn_mark = place.turn_mark.clone();
    // A resumed run continues the ledger's chain with fresh laps and
    // budgets in the workspace it left, as bounded-loops resumes.
    let plan = Plan {
        bounds: bounds.clone(),
        prompt: compose_prompt(dir, m),
        redact: bl_loops::redact::Mode::parse(&place.redact).unwrap_or(bl_loops::redact::Mode::Off),
        loop_dir: dir.display().to_string(),
        reuse_verdicts: bounds.sandbox,
        judge_first: ledger
            .unjudged_turn()
            .filter(|_| place.how == Prepare::Resume),
    };
    let clock = WallClock {
        started: Instant::now(),
    };
    let mut handoff = HandoffFile {
        path: place.handoff.clone(),
        manifest: m.clone(),
        bounds: bounds.clone(),
        redact: plan.redact,
        loop_dir: plan.loop_dir.clone(),
    };
    let mut trace = LapSpans::new(bounds.trace, &m.name, Redact::new(&place.redact, dir));
    let mut memory = RuntimeMemory {
        path: place.memory.clone(),
    };
    let outcome = engine::run(
        &plan,
        Ports {
            runner: runner.as_mut(),
            gate: &mut gate,
            workspace: &mut workspace,
            clock: &clock,
            kill: &Kill {
                cancel: place.cancel.as_deref(),
            },
            ledger: &mut ledger,
            approver,
            handoff: &mut handoff,
            memory: &mut memory,
            trace: &mut trace,
        },
    )
    .map_err(|e| AppError::Undecided(format!("bl run: {e}")))?;
    let removal = ScratchRemoval::start(place.scratch.take());
    let last = LastLine {
        syncing: ledger.take_sync(),
        trace,
    };
    Ok((outcome, last, removal))
}

/// Writes what `--run-id` keeps beside the ledger: `metadata.json`, the
/// receipts derived from the whole ledger, and a line in the runs index.
#[allow(clippy::too_many_arguments)]
fn write_run_records(
    run_dir: &Path,
    loop_dir: &Path,
    workspace: &Path,
    ledger: &Path,
    outcome: &RunOutcome,
    run_id: &str,
    index: Option<&Path>,
) -> Result<(), AppError> {
    let fail = |path: &Path, e: std::io::Error| {
        AppError::refused(format!("bl run: cannot write {}: {e}", path.display()))
    };
    let text = std::fs::read_to_string(ledger).map_err(|e| fail(ledger, e))?;
    let rows: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let metadata = json!({
        "laps": outcome.laps,
        "ledger_head": outcome.ledger_head,
        "ledger_path": ledger.display().to_string(),
        "ledger_rows": rows.len(),
        "loop_dir": loop_dir.display().to_string(),
        "reason": outcome.reason,
        "run_id": run_id,
        "status": outcome.status.as_str(),
        "workspace": workspace.display().to_string(),
    });
    let receipt =
        bl_loops::receipt::receipt(&rows, &metadata, run_id, &run_dir.display().to_string());
    let write = |name: &str, text: String| {
        let path = run_dir.join(name);
        std::fs::write(&path, text).map_err(|e| fail(&path, e))
    };
    write(
        LoopRunDir::METADATA,
        format!(
            "{}\n",
            serde_json::to_string_pretty(&metadata).expect("json")
        ),
    )?;
    write(
        LoopRunDir::RECEIPT_JSON,
        format!(
            "{}\n",
            bl_loops::ledger::ascii_escaped(&serde_json::to_string_pretty(&receipt).expect("json"))
        ),
    )?;
    write(
        LoopRunDir::RECEIPT_MARKDOWN,
        bl_loops::receipt::receipt_markdown(&receipt),
    )?;
    // The runs index: one line per invocation, newest last.
    let Some(index) = index else {
        return Ok(());
    };
    let line = serde_json::to_string(&json!({
        "run_id": run_id,
        "loop_dir": loop_dir.display().to_string(),
        "workspace": workspace.display().to_string(),
        "ledger_path": ledger.display().to_string(),
        "status": outcome.status.as_str(),
        "reason": outcome.reason,
        "laps": outcome.laps,
        "updated_at": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
    }))
    .expect("json");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(index)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| fail(index, e))
}

/// A graph's loop node has no human at its terminal: a result that needs
/// approval pauses, and the receipt gate says to lift the checkpoint to an
/// `approval` node, as bounded-loops does.
struct NoHumanHere;

impl Approver for NoHumanHere {
    fn approved(&mut self, _lap: u32, _detail: &str) -> bool {
        false
    }
}

/// The inner run id bounded-loops gives a loop node's attempt:
/// `<run>.<node>.r<round>.a<attempt>.<16 hex>` (the hex from sha256 of the
/// four joined by U+001F), characters outside `[A-Za-z0-9_-]` as `-`, the
/// run id cut to 40 characters and the node id to 24.
pub fn inner_run_id(run_id: &str, node: &str, round: u32, attempt: u32) -> String {
    let clean = |s: &str, max: usize| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .take(max)
            .collect()
    };
    let fingerprint =
        bl_core::sha256_hex(format!("{run_id}\u{1f}{node}\u{1f}{round}\u{1f}{attempt}").as_bytes());
    format!(
        "{}.{}.r{round}.a{attempt}.{}",
        clean(run_id, 40),
        clean(node, 24),
        &fingerprint[..16]
    )
}

/// One attempt of a graph's loop node: the package (which must still have
/// the digest the plan admitted) runs through the loop engine in the
/// attempt's workspace (`.controller/runs/<inner run id>/`, the package is
/// never written), and `loop-outcome.json` is written as bounded-loops
/// writes it. Returns its bytes: the node's reply, which the receipt gate
/// reads.
/// One attempt of a graph's loop node.
pub struct LoopNode<'a> {
    pub package_dir: &'a Path,
    /// The digest the plan admitted.
    pub package_digest: &'a str,
    pub run_id: &'a str,
    pub node: &'a str,
    pub attempt: u32,
    pub round: u32,
    /// The attempt's workspace.
    pub workspace: &'a Path,
    /// What the loop's cages hide (the graph run's directory; the attempt's
    /// workspace stays visible).
    pub hidden: Vec<PathBuf>,
}

pub fn run_node_loop(n: &LoopNode) -> Result<Vec<u8>, AppError> {
    let (package_dir, package_digest, workspace) = (n.package_dir, n.package_digest, n.workspace);
    let now = bl_packages::digest(package_dir).map_err(|e| AppError::Refused(e.to_string()))?;
    if now != package_digest {
        return Err(AppError::Refused(format!(
            "the loop package {} now digests to {now}, not the {package_digest} the plan admitted; it changed after the run began",
            package_dir.display()
        )));
    }
    let package = read_package(package_dir).map_err(|e| AppError::Refused(e.to_string()))?;
    let dir = std::fs::canonicalize(package_dir).unwrap_or_else(|_| package_dir.to_path_buf());
    let inner = inner_run_id(n.run_id, n.node, n.round, n.attempt);
    let run_dir = workspace.join(".controller/runs").join(&inner);
    std::fs::create_dir_all(&run_dir)
        .map_err(|e| AppError::Refused(format!("{}: {e}", run_dir.display())))?;
    let records = LoopRunDir::new(&run_dir);
    let mut place = LoopPlace {
        workspace_root: records.workspace(),
        how: Prepare::Persistent,
        ledger: records.ledger(),
        handoff: records.handoff(),
        memory: records.memory(),
        redact: "off".into(),
        egress_record: run_dir.join(EGRESS_DECISIONS),
        hidden: n.hidden.clone(),
        cancel: None,
        turn_mark: None,
        scratch: None,
    };
    let env = passthrough(&package.manifest).map_err(|e| AppError::Refused(e.to_string()))?;
    let runner = package.manifest.runner.default.clone();
    let (outcome, last, _) = drive_loop(
        &package,
        &dir,
        package.bounds.clone(),
        &runner,
        None,
        &mut place,
        env,
        &mut NoHumanHere,
    )
    .map_err(|e| AppError::Refused(e.to_string()))?;
    last.durable()
        .map_err(|e| AppError::Refused(e.to_string()))?;
    write_run_records(
        &run_dir,
        &dir,
        &place.workspace_root,
        &place.ledger,
        &outcome,
        &inner,
        None,
    )
    .map_err(|e| AppError::Refused(e.to_string()))?;
    let ledger = std::fs::read(&place.ledger).map_err(|e| AppError::Refused(e.to_string()))?;
    let record = json!({
        "attempt": n.attempt, "inner_ledger_digest": bl_core::sha256_hex(&ledger),
        "inner_run_id": inner, "node_id": n.node,
        "package_digest": package_digest.trim_start_matches("sha256:"),
        "reason": outcome.reason, "repair_round": n.round, "status": outcome.status.as_str(),
    });
    let mut bytes = bl_core::canonical_json(&record).into_bytes();
    bytes.push(b'\n');
    std::fs::write(workspace.join(LOOP_OUTCOME), &bytes)
        .map_err(|e| AppError::Refused(e.to_string()))?;
    Ok(bytes)
}

/// The run's last ledger line on its way to disk, and the span of its lap,
/// which is exported only once the line is durable.
struct LastLine {
    syncing: Option<LedgerSync>,
    trace: LapSpans,
}

impl LastLine {
    /// Waits until the line is durable (then the last span goes out).
    fn durable(self) -> Result<(), AppError> {
        let synced = self.syncing.map_or(Ok(()), LedgerSync::wait);
        self.trace.finish(synced.is_ok());
        synced.map_err(|e| AppError::Undecided(format!("bl run: {}", e.0)))
    }
}

/// Where a caged agent runner's egress decisions go (one JSON line each).
pub const EGRESS_DECISIONS: &str = bl_store::RunDir::EGRESS_DECISIONS;

/// What a loop node writes for the receipt gate.
pub const LOOP_OUTCOME: &str = "loop-outcome.json";

#[cfg(test)]
mod node_tests {
    #[test]
    fn inner_run_ids_are_bounded_loops_ones() {
        // Observed from bounded-loops 0.7.6 for run graph-run, node
        // balance, round 0, attempt 1.
        assert_eq!(
            super::inner_run_id("graph-run", "balance", 0, 1),
            "graph-run.balance.r0.a1.dcc7f7b046791aaa"
        );
    }

    /// The mark a turn leaves before its gate says what the turn spent,
    /// and stands only on top of the head it was made on.
    #[test]
    fn a_marked_turn_keeps_its_tokens_until_the_ledger_moves_on() {
        use bl_loops::engine::Ledger;
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = super::FileLedger::open(
            &dir.path().join("ledger.jsonl"),
            crate::loop_trace::Redact::new("off", dir.path()),
        )
        .unwrap();
        ledger.turn_mark = Some(super::LoopRunDir::new(dir.path()).turn_mark());
        assert_eq!(ledger.unjudged_turn(), None);
        ledger.turn_finished(3, 42).unwrap();
        assert_eq!(
            ledger.unjudged_turn(),
            Some(super::UnjudgedTurn {
                tokens: 42,
                on_record: false
            })
        );
        ledger.head = "another head".into();
        assert_eq!(ledger.unjudged_turn(), None, "a stale mark never matches");
    }

    /// A line is synced in the background; its turn's mark goes only once
    /// it is durable, and settling (or dropping the ledger) waits for that.
    #[test]
    fn an_appended_line_clears_its_turn_mark_once_settled() {
        use bl_loops::engine::Ledger;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        let mark = super::LoopRunDir::new(dir.path()).turn_mark();
        let open = || {
            let mut ledger =
                super::FileLedger::open(&path, crate::loop_trace::Redact::new("off", dir.path()))
                    .unwrap();
            ledger.turn_mark = Some(mark.clone());
            ledger
        };
        let line = |lap: u32, prev: &str| bl_loops::ledger::LedgerLine {
            lap,
            prev: prev.to_string(),
            ..bl_loops::ledger::sample_line()
        };
        let mut ledger = open();
        ledger.turn_finished(1, 5).unwrap();
        let head = ledger.append(&line(1, bl_loops::ledger::GENESIS)).unwrap();
        ledger.settle().unwrap();
        assert!(!mark.exists(), "a settled line's mark is gone");
        ledger.turn_finished(2, 5).unwrap();
        ledger.append(&line(2, &head)).unwrap();
        drop(ledger);
        assert!(
            !mark.exists(),
            "dropping the ledger waits for its last line"
        );
        let reopened = open();
        assert_eq!(reopened.unjudged_turn(), None);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    }

    #[test]
    fn the_loop_engine_and_the_run_directory_name_the_handoff_alike() {
        assert_eq!(
            bl_store::LoopRunDir::HANDOFF,
            bl_loops::engine::HANDOFF_FILE
        );
    }
}

/// What `bl run DIR` asks for, flag by flag.
#[derive(Debug, Clone, Default)]
pub struct LoopRequest {
    pub loop_dir: PathBuf,
    /// Overrides loop.yaml's `runner.default`.
    pub runner: Option<String>,
    /// A command that replaces the loop's gate (exit 0 passes).
    pub gate_override: Option<String>,
    pub max_iterations: Option<u32>,
    /// Keep the records under `.bounded-loops/runs/<id>`.
    pub run_id: Option<String>,
    /// Continue the run `run_id` names, in its workspace.
    pub resume: bool,
    pub keep_workspace: bool,
    /// `off`, `paths` or `strict`.
    pub redact: String,
    /// Stops this loop before its next lap (the runtime API's cancel).
    pub cancel: Option<Arc<Cancel>>,
}

/// A loop checked and ready to run: what a front end shows before it asks
/// to go ahead.
pub struct PreparedLoop {
    pub package: Package,
    pub bounds: Bounds,
    pub runner: String,
    env: Vec<(String, String)>,
}

/// Reads and checks the package and the request; nothing runs yet.
pub fn prepare(request: &LoopRequest) -> Result<PreparedLoop, AppError> {
    // Its gate is a plugin: the engine is made while the rest gets ready.
    crate::plugin_host::warm_up();
    let package = read_package(&request.loop_dir)?;
    let mut bounds = package.bounds.clone();
    if let Some(max) = request.max_iterations {
        // 0 is allowed (the run halts at lap 1, as bounded-loops does); the
        // ceiling is not.
        if i128::from(max) > bl_loops::manifest::MAX_ITERATIONS_CEILING {
            return Err(AppError::refused(format!(
                "bl run: --max-iterations {max} exceeds the 1000 ceiling, which is hard and non-overridable"
            )));
        }
        bounds.max_iterations = max;
    }
    let env = passthrough(&package.manifest)?;
    let runner = request
        .runner
        .clone()
        .unwrap_or_else(|| package.manifest.runner.default.clone());
    Ok(PreparedLoop {
        package,
        bounds,
        runner,
        env,
    })
}

/// How a loop run ended, and where its records are.
pub struct LoopRun {
    pub outcome: RunOutcome,
    /// The loop directory, resolved.
    pub loop_dir: PathBuf,
    /// `.bounded-loops/runs/<id>` when the run has an id.
    pub run_dir: Option<PathBuf>,
    pub ledger: PathBuf,
    /// The scratch workspace, when it was asked to be kept.
    pub kept_workspace: Option<PathBuf>,
}

impl LoopRun {
    /// The name the run reports itself by: the loop directory's.
    pub fn subject(&self) -> String {
        self.loop_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// What `bl verify` checks the run in.
    pub fn verify_dir(&self) -> &Path {
        self.run_dir.as_deref().unwrap_or(&self.loop_dir)
    }
}

/// Runs a prepared loop to its end; `approver` decides results that need a
/// human.
pub fn run(
    prepared: PreparedLoop,
    request: &LoopRequest,
    approver: &mut dyn Approver,
) -> Result<LoopRun, AppError> {
    let PreparedLoop {
        package,
        bounds,
        runner,
        env,
    } = prepared;
    let dir = std::fs::canonicalize(&package.dir).unwrap_or_else(|_| package.dir.clone());
    // Where the records and the workspace go.
    let (run_dir, ledger_path, workspace_root, scratch, how) = match &request.run_id {
        Some(id) => {
            if !valid_run_id(id) {
                return Err(AppError::refused(
                    "bl run: wiring error — ManifestError: run_id must be 1-128 chars: letters, digits, '.', '_', '-' only; must start with a letter or digit",
                ));
            }
            let records = LoopDir::new(&dir).run(id);
            let run_dir = records.path().to_path_buf();
            let workspace = records.workspace();
            let how = if request.resume {
                if !workspace.is_dir() {
                    return Err(AppError::refused(format!(
                        "bl run: wiring error — ManifestError: run_id '{id}' has no persistent workspace to resume: {}",
                        workspace.display()
                    )));
                }
                Prepare::Resume
            } else {
                if run_dir.exists() {
                    return Err(AppError::refused(format!(
                        "bl run: wiring error — ManifestError: run_id '{id}' already exists. Use --resume to continue it or choose a new run id."
                    )));
                }
                Prepare::Persistent
            };
            std::fs::create_dir_all(&run_dir)
                .map_err(|e| AppError::refused(format!("bl run: {}: {e}", run_dir.display())))?;
            (
                Some(run_dir.clone()),
                records.ledger(),
                workspace,
                None,
                how,
            )
        }
        None => {
            let scratch = tempfile::Builder::new()
                .prefix("bounded-loops-")
                .tempdir()
                .map_err(|e| {
                    AppError::refused(format!("bl run: cannot make a scratch workspace: {e}"))
                })?;
            let root = scratch.path().to_path_buf();
            (
                None,
                LoopDir::new(&dir).ledger(),
                root,
                Some(scratch),
                Prepare::Scratch,
            )
        }
    };
    // A workspace asked to be kept stays here; a throwaway one goes with
    // the engine's end.
    let (kept, scratch) = match scratch {
        Some(scratch) if request.keep_workspace => (Some(scratch), None),
        scratch => (None, scratch),
    };
    let fresh_run_dir = run_dir.clone().filter(|_| how == Prepare::Persistent);
    let mut place = LoopPlace {
        workspace_root: workspace_root.clone(),
        how,
        ledger: ledger_path.clone(),
        handoff: match &run_dir {
            Some(run_dir) => LoopRunDir::new(run_dir).handoff(),
            None => LoopDir::new(&dir).handoff(),
        },
        memory: LoopDir::new(&dir).memory(),
        redact: request.redact.clone(),
        egress_record: match &run_dir {
            Some(d) => d.join(EGRESS_DECISIONS),
            None => dir.join(format!(".{EGRESS_DECISIONS}")),
        },
        hidden: Vec::new(),
        cancel: request.cancel.clone(),
        turn_mark: run_dir.as_ref().map(|d| LoopRunDir::new(d).turn_mark()),
        scratch,
    };
    let driven = drive_loop(
        &package,
        &dir,
        bounds,
        &runner,
        request.gate_override.as_deref(),
        &mut place,
        env,
        approver,
    );
    let (outcome, last, removal) = match driven {
        Ok(driven) => driven,
        Err(refusal) => {
            // Refused before its first lap (a gate plugin missing or
            // unsigned): nothing is recorded, so the run id this call took
            // is given back, and the same command can be run again.
            if let Some(fresh) = &fresh_run_dir
                && !ledger_path.exists()
            {
                let _ = std::fs::remove_dir_all(fresh);
            }
            return Err(refusal);
        }
    };
    let kept_workspace = kept.map(tempfile::TempDir::keep);
    // The run's records say how it ended only once its ledger does.
    last.durable()?;
    drop(removal);
    if let Some(run_dir) = &run_dir {
        write_run_records(
            run_dir,
            &dir,
            &workspace_root,
            &ledger_path,
            &outcome,
            request.run_id.as_deref().unwrap_or_default(),
            Some(&LoopDir::new(&dir).runs_index()),
        )?;
    }
    Ok(LoopRun {
        outcome,
        loop_dir: dir,
        run_dir,
        ledger: ledger_path,
        kept_workspace,
    })
}
