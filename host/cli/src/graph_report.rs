//! What `bl graph run --execute`, `resume`, `approve`, `status` and
//! `artifacts` print: the flags they share, the run's report, the status
//! table and the artifact list. The use cases themselves are
//! [`bl_app::graph_run`]'s; this module only turns their answers into text,
//! JSON and an exit code.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bl_app::graph_run::{self, DriveOptions, Driven, Watcher};
use bl_app::runtime::GraphRuntime;
use bl_app::status_text::{agents_in_words, shown_artifact, state_in_words};
use bl_core::python_json;
use bl_run::executor::RunEnd;
use bl_run::projection::{NodeState, RunState};
use serde_json::{Value, json};

use crate::exit::{CliError, CliResult, Exit};
use crate::output::outln;

// The flags `run`, `approve` and `resume` share (`DriveOptions` as given);
// not a doc comment, which clap would show as each command's description.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DriveFlags {
    /// JSON object mapping node_id -> prompt (never recorded).
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// Ceiling on the tokens the whole run may spend; reaching it pauses the run.
    #[arg(long = "max-tokens")]
    pub max_tokens: Option<u64>,
    /// Ceiling on the run's cost in USD (needs prices from --budget-file).
    #[arg(long = "max-cost-usd")]
    pub max_cost_usd: Option<String>,
    /// A JSON budget file: {"max_tokens": N, "max_cost_usd": "2.50", "prices": {...}}.
    #[arg(long = "budget-file")]
    pub budget_file: Option<PathBuf>,
    /// A provider catalog (TOML) adding or overriding agent CLIs.
    #[arg(long)]
    pub providers: Option<PathBuf>,
    /// How many nodes run at once (default: the cores plus four, at most 32).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Sign the checkpoint written at every pause and at the end with this
    /// private key (from `bl keys generate`); unsigned without it.
    #[arg(long = "checkpoint-key")]
    pub checkpoint_key: Option<PathBuf>,
    /// A loop-package root (repeatable); loop and subgraph nodes' packages
    /// must be found here. Kept with the run for resume.
    #[arg(long = "loop-roots")]
    pub loop_roots: Vec<PathBuf>,
    /// A JSON file mapping connection_id -> admitted-connection record, for
    /// https connector nodes (their requests go through the egress broker).
    #[arg(long)]
    pub admitted: Option<PathBuf>,
    /// Recorded replies (bl.dev/recorded-replies/v1) for connector nodes
    /// bound to the `recorded` provider: no key, no network. Kept with the run.
    #[arg(long)]
    pub recorded: Option<PathBuf>,
    /// Recorded approval decisions (bl.dev/recorded-decisions/v1), taken
    /// when the run reaches each approval node. Kept with the run.
    #[arg(long)]
    pub decisions: Option<PathBuf>,
    /// Grant a node's gate plugin a capability: NODE=CAP (repeatable). The
    /// plugin must also request it.
    #[arg(long = "grant", value_name = "NODE=CAP")]
    pub grants: Vec<String>,
    /// Run what the preflight would refuse (a connection slot several nodes
    /// share, an effect a local run denies, a node without a prompt) and
    /// let those nodes fail when the run reaches them, as bounded-loops 0.7
    /// does.
    #[arg(long = "deny-at-run-time")]
    pub deny_at_run_time: bool,
}

impl DriveFlags {
    /// The options of a drive the operator watches: progress on stderr.
    /// bl, driving a graph, starts its processes only through the sandbox:
    /// any other child it finds was adopted from an agent, and is ended
    /// (an embedding application that forks its own must not say so).
    pub fn options(&self) -> DriveOptions {
        bl_sandbox::containment::claim_orphans();
        DriveOptions {
            inputs: self.inputs.clone(),
            max_tokens: self.max_tokens,
            max_cost_usd: self.max_cost_usd.clone(),
            budget_file: self.budget_file.clone(),
            providers: self.providers.clone(),
            concurrency: self.concurrency,
            checkpoint_key: self.checkpoint_key.clone(),
            loop_roots: self.loop_roots.clone(),
            admitted: self.admitted.clone(),
            recorded: self.recorded.clone(),
            decisions: self.decisions.clone(),
            grants: self.grants.clone(),
            deny_at_run_time: self.deny_at_run_time,
            audit_plan: None,
            cancel: None,
            watch: Some(Watcher(Arc::new(|schedule| {
                Box::new(crate::graph_progress::Progress::new(schedule))
            }))),
        }
    }
}

/// Where a run goes without `--out`.
pub fn default_out(workspace: Option<PathBuf>) -> Result<PathBuf, CliError> {
    Ok(graph_run::default_out(workspace)?)
}

/// The heading of a run's report.
const RUN_TITLE: &str = "Graph run";

/// What `bl graph run --execute` runs, beside its drive flags.
pub struct Run<'a> {
    pub manifest: &'a Path,
    pub connections: Option<&'a Path>,
    pub out: &'a Path,
    pub audit_plan: Option<PathBuf>,
}

/// `bl graph run --execute MANIFEST --out D ...`
pub fn run(run: Run<'_>, flags: &DriveFlags) -> CliResult {
    let options = DriveOptions {
        audit_plan: run.audit_plan,
        ..flags.options()
    };
    crate::interrupt::continue_with(graph_run::resume_command(run.out, flags.inputs.as_deref()));
    let handle = GraphRuntime::new(options).run(
        run.manifest,
        run.connections.map(Path::to_path_buf),
        run.out,
    );
    report_drive(&handle.wait()?, RUN_TITLE, flags)
}

/// `bl graph run --execute --out D` with no manifest: the sandbox probe.
pub fn run_probe(out: &Path, flags: &DriveFlags) -> CliResult {
    let handle = GraphRuntime::new(flags.options()).run_probe(out);
    report_drive(&handle.wait()?, RUN_TITLE, flags)
}

/// `bl graph resume --run D [--inputs J] [caps]`
pub fn resume(dir: &Path, flags: &DriveFlags) -> CliResult {
    crate::interrupt::continue_with(graph_run::resume_command(dir, flags.inputs.as_deref()));
    let handle = GraphRuntime::new(flags.options()).resume(dir);
    report_drive(&handle.wait()?, "Graph resume", flags)
}

/// `bl graph approve --run D --node N --decision approved|rejected`
pub fn approve(
    dir: &Path,
    node_id: &str,
    approved: bool,
    shown: Option<&str>,
    key: Option<&Path>,
    flags: &DriveFlags,
) -> CliResult {
    let runtime = GraphRuntime::new(flags.options());
    let done = match shown {
        // Bound to what the person was shown: refused if it changed since.
        Some(shown) if approved => runtime.approve(dir, node_id, shown, key)?,
        Some(shown) => runtime.reject(dir, node_id, shown, key)?,
        None => runtime.decide_named(dir, node_id, approved, key)?,
    };
    let (decision, view) = (done.decision, &done.view);
    let order: Vec<&str> = done.run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let awaiting = view.awaiting(order.iter().copied());
    let Some(end) = &done.end else {
        // Idempotent: the decision is already in the record.
        let answer = done.answer();
        if crate::output::json() {
            outln!("{}", python_json(&answer));
        } else {
            outln!("node '{node_id}' decision : {decision} (already recorded: nothing changed)");
            outln!("state     : {}", state_in_words(view, &awaiting, false));
        }
        return Ok(if answer["paused"] == json!(true) {
            Exit::Paused
        } else if view.run_state == RunState::Failed {
            Exit::Refused
        } else {
            Exit::Success
        });
    };
    say_interrupted(end, &done.run.dir, flags);
    if crate::output::json() {
        outln!("{}", python_json(&done.answer()));
    } else {
        outln!("node '{node_id}' decision : {decision}");
        outln!("state     : {}", state_in_words(view, &awaiting, false));
        for id in &order {
            let state = view.node(id).state;
            outln!("  {} node '{id}': {state}", node_mark(state));
        }
    }
    Ok(exit_of(end))
}

fn exit_of(end: &RunEnd) -> Exit {
    match end {
        RunEnd::Succeeded => Exit::Success,
        RunEnd::AwaitingApproval(_) => Exit::Paused,
        RunEnd::Failed | RunEnd::BudgetPaused(_) => Exit::Refused,
        RunEnd::Interrupted { signal, .. } => Exit::Signalled(*signal),
    }
}

/// What a stop left, said on stderr (stdout keeps the run's own report).
fn say_interrupted(end: &RunEnd, dir: &Path, flags: &DriveFlags) {
    if let RunEnd::Interrupted { signal, nodes } = end {
        let what = if nodes.is_empty() {
            "no attempt was in flight".to_string()
        } else {
            format!(
                "{} attempt(s) in flight were stopped and recorded as interrupted ({}); they count against no budget",
                nodes.len(),
                nodes.join(", ")
            )
        };
        crate::output::errln!(
            "stopped by {}: {what}. Nothing that finished is lost, and the run is not over.\nContinue it:  {}",
            bl_run::events::signal_name(*signal),
            graph_run::resume_command(dir, flags.inputs.as_deref())
        );
    }
}

fn report_drive(driven: &Driven, title: &str, flags: &DriveFlags) -> CliResult {
    let (run, end, view) = (&driven.run, &driven.end, &driven.view);
    let order: Vec<&str> = run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let awaiting = view.awaiting(order.iter().copied());
    say_interrupted(end, &run.dir, flags);
    if crate::output::json() {
        let answer = driven.answer(flags.inputs.as_deref());
        crate::interrupt::answer(|| outln!("{}", python_json(&answer)));
        return Ok(exit_of(end));
    }
    outln!("{title}");
    outln!("==============================================================");
    outln!("state     : {}", state_in_words(view, &awaiting, false));
    outln!("agents    : {}", agents_in_words(&run.plan));
    for node in &run.graph.nodes {
        let id = &node.id;
        let n = view.node(id);
        let artifact = shown_artifact(node, &n.artifact_digests, 24);
        let (mark, state) = match end {
            RunEnd::Interrupted { nodes, .. } if nodes.contains(id) => {
                ("‖", "INTERRUPTED (taken up again on resume)".into())
            }
            _ => (node_mark(n.state), n.state.to_string()),
        };
        outln!("  {mark} node '{id}': {state}  artifact={artifact}");
    }
    outln!("out       : {}", run.dir.display());
    outln!();
    match end {
        RunEnd::AwaitingApproval(nodes) => {
            outln!("To continue:");
            for n in nodes {
                outln!(
                    "  bl graph approve --run {} --node {n} --decision approved|rejected",
                    run.dir.display()
                );
            }
        }
        RunEnd::BudgetPaused(p) => {
            outln!("Paused: {}", p.reason);
            outln!(
                "Continue with a higher ceiling:  bl graph resume --run {} --max-tokens N",
                run.dir.display()
            );
        }
        RunEnd::Failed => {
            outln!(
                "Run did not succeed; see why:  bl graph status --run {}",
                run.dir.display()
            )
        }
        RunEnd::Succeeded => outln!("Verify it:  bl verify {}", run.dir.display()),
        RunEnd::Interrupted { .. } => {
            outln!(
                "Stopped; continue it:  {}",
                graph_run::resume_command(&run.dir, flags.inputs.as_deref())
            )
        }
    }
    Ok(exit_of(end))
}

/// Where `command` serves its page on 127.0.0.1, said on stdout.
/// Serves the approval console on 127.0.0.1 until one decision is made.
pub fn console(dir: &Path, port: u16, key: Option<PathBuf>, flags: &DriveFlags) -> CliResult {
    let runtime = GraphRuntime::new(flags.options());
    // Refused here, before anything is served, as the page would be.
    runtime.status(dir)?;
    let console = bl_web::Console {
        dir: dir.to_path_buf(),
        key,
        runtime,
    };
    bl_web::serve_console(console, crate::output::serving(port, "console")?, || {
        bl_core::interrupt::requested().is_some()
    })
    .map_err(|e| CliError::refused(format!("graph console: {e}")))?;
    Ok(Exit::Success)
}

/// `bl monitor`: serves the project's window on 127.0.0.1 until Ctrl-C.
pub fn monitor(project: PathBuf, port: u16, open: bool, key: Option<PathBuf>) -> CliResult {
    if !project.is_dir() {
        return Err(CliError::refused(format!(
            "monitor: {} is not a directory; name the project with --project DIR",
            project.display()
        )));
    }
    let page = crate::output::serving(port, "monitor")?;
    if open {
        // A desktop's browser, when there is one; the address is printed
        // either way.
        let _ = std::process::Command::new("xdg-open")
            .arg(&page.url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    let monitor = bl_web::Monitor {
        project: bl_app::monitor::Project::new(project),
        options: bl_app::graph_run::DriveOptions::default(),
        key,
    };
    bl_web::serve_monitor(monitor, page, || bl_core::interrupt::requested().is_some())
        .map_err(|e| CliError::refused(format!("monitor: {e}")))?;
    Ok(Exit::Success)
}

/// Serves the run's live arena on 127.0.0.1 until Ctrl-C.
pub fn watch(dir: &Path, port: u16, pubkey: Option<&str>) -> CliResult {
    let verifier = pubkey
        .map(bl_app::keys::read_verifier_key)
        .transpose()?
        .map(|key| key.to_text());
    // Refused here, before anything is served, as the page would be.
    GraphRuntime::default().status(dir)?;
    let watch = bl_web::Watch {
        dir: dir.to_path_buf(),
        verifier,
        runtime: GraphRuntime::default(),
    };
    bl_web::serve(watch, crate::output::serving(port, "watch")?, || {
        bl_core::interrupt::requested().is_some()
    })
    .map_err(|e| CliError::refused(format!("graph watch: {e}")))?;
    Ok(Exit::Success)
}

/// Writes the run's arena page and says where.
pub fn arena(dir: &Path, out: Option<&Path>, pubkey: Option<&str>) -> CliResult {
    let out = GraphRuntime::default().write_arena(dir, out, pubkey)?;
    crate::output::answer(
        || json!({"arena": out.display().to_string()}),
        || format!("arena: {}", out.display()),
    );
    Ok(Exit::Success)
}

/// `bl graph metrics --run D [--json]`
pub fn metrics(dir: &Path) -> CliResult {
    let metrics = GraphRuntime::default().metrics(dir)?;
    if crate::output::json() {
        outln!("{}", python_json(&metrics.to_json()));
    } else {
        crate::output::stdout_bytes(metrics.to_text().as_bytes());
    }
    Ok(Exit::Success)
}

/// `bl graph studio [--from MANIFEST] [--out studio.html]`
pub fn studio(from: Option<&Path>, out: Option<&Path>) -> CliResult {
    let page = bl_app::studio::studio_page(from)?;
    let out = bl_app::studio::default_out(out);
    std::fs::write(&out, page).map_err(|e| {
        CliError::refused(format!("graph studio: cannot write {}: {e}", out.display()))
    })?;
    crate::output::answer(
        || json!({"studio": out.display().to_string()}),
        || format!("studio: {}", out.display()),
    );
    Ok(Exit::Success)
}

/// `bl graph status --run D [--json] [--format md]`
pub fn status(dir: &Path, markdown: bool) -> CliResult {
    let status = GraphRuntime::default().status(dir)?;
    if crate::output::json() {
        outln!("{}", python_json(&status.to_json()));
        return Ok(Exit::Success);
    }
    if markdown {
        crate::output::stdout_bytes(status.to_markdown().as_bytes());
        return Ok(Exit::Success);
    }
    crate::output::stdout_bytes(status.to_text().as_bytes());
    Ok(Exit::Success)
}

/// `bl graph artifacts --run D [--json]`: every artifact the run's log
/// names, with its producer, digest, size, visibility and consumers.
pub fn artifacts(dir: &Path) -> CliResult {
    let rows = GraphRuntime::default().artifacts(dir)?;
    if crate::output::json() {
        outln!(
            "{}",
            python_json(&json!({"artifacts": rows, "run": dir.display().to_string()}))
        );
        return Ok(Exit::Success);
    }
    outln!(
        "{:<24} {:>9}  {:<22} {:<12} WHAT (-> CONSUMERS)",
        "ARTIFACT",
        "BYTES",
        "PRODUCER",
        "VISIBILITY"
    );
    for r in &rows {
        let digest = r["digest"].as_str().unwrap_or_default();
        let short = format!("{}...", &digest[..digest.len().min(20)]);
        let what = match r["role"].as_str() {
            Some("output") => format!(
                "{} ({})",
                r["path"].as_str().unwrap_or(""),
                r["port"].as_str().unwrap_or("")
            ),
            Some("plugin") => format!("plugin {}", r["plugin"].as_str().unwrap_or("")),
            Some(role) => role.to_string(),
            None => String::new(),
        };
        let consumers: Vec<&str> = r["consumers"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let to = if consumers.is_empty() {
            String::new()
        } else {
            format!(" -> {}", consumers.join(", "))
        };
        outln!(
            "{short:<24} {:>9}  {:<22} {:<12} {what}{to}",
            r["size"].as_u64().unwrap_or(0),
            r["producer"]["node_id"].as_str().unwrap_or(""),
            r["visibility"].as_str().unwrap_or("-"),
        );
    }
    Ok(Exit::Success)
}

/// The mark before a node's line in a run's report.
fn node_mark(state: NodeState) -> &'static str {
    match state {
        NodeState::Succeeded => "✓",
        NodeState::Failed | NodeState::Cancelled => "✗",
        NodeState::AwaitingApproval => "⏸",
        NodeState::Skipped => "–",
        _ => "·",
    }
}
