//! `bl run`: a bounded loop from its package directory, as bounded-loops
//! 0.7 runs it. The use case is bl-app's (`loop_run`); this command parses
//! the flags, shows the preview and asks to go ahead, answers the approval
//! of a result on the terminal, and reports the outcome with
//! bounded-loops' statuses, `BL_EVENT` line and exit codes.

use std::io::IsTerminal;
use std::path::Path;

use bl_app::loop_run;
use bl_loops::engine::{Approver, RunOutcome, Status};
use bl_loops::manifest::LoopManifest;
use serde_json::json;

use crate::exit::{CliError, Exit};
use crate::loop_args::RunArgs;
use crate::output::{errln, outln};

use bl_app::loop_run::KILL_SWITCH;

/// Asks on stdout and reads the answer from stdin, `--yes` or not: `--yes`
/// skips the confirmation to start, never the approval of a result. No
/// answer (end of input) is no approval, and the run pauses.
struct StdinApproval;

impl Approver for StdinApproval {
    fn approved(&mut self, _lap: u32, detail: &str) -> bool {
        crate::output::out!(
            "\n[bounded-loops] Gate passed: {detail}\n[bounded-loops] Approve this result and mark DONE? [y/N] "
        );
        crate::output::flush();
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).is_ok()
            && matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    }
}

/// The confirmation before anything runs: the preview, then `Proceed?`
/// on a terminal. `--gate-override` runs without either, as upstream does.
fn confirm(args: &RunArgs, m: &LoopManifest, runner: &str) -> Result<(), CliError> {
    if args.gate_override.is_some() {
        return Ok(());
    }
    let gate = match (&m.gate.run, &m.gate.plugin) {
        (Some(run), _) => run.clone(),
        (None, Some(plugin)) => format!("plugin {plugin}"),
        (None, None) => format!("<{} gate>", m.gate.kind),
    };
    // Under --json stdout carries only the outcome: the preview goes to
    // stderr. (bounded-loops' readers take the outcome from the last line.)
    let preview = format!(
        "[bounded-loops] About to run loop '{}':\n  runner : {runner}\n  gate   : {gate}",
        m.name
    );
    if crate::output::json() {
        crate::output::errln!("{preview}");
    } else {
        outln!("{preview}");
    }
    if args.yes {
        return Ok(());
    }
    let refused =
        || CliError::refused("bl run: not confirmed. Pass --yes to skip this prompt (e.g. in CI).");
    if !std::io::stdin().is_terminal() {
        return Err(refused());
    }
    if crate::output::json() {
        eprint!("Proceed? [y/N] ");
    } else {
        crate::output::out!("Proceed? [y/N] ");
        crate::output::flush();
    }
    let mut answer = String::new();
    let _ = std::io::stdin().read_line(&mut answer);
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(refused())
    }
}

pub fn run(args: RunArgs, json_out: bool) -> Result<Exit, CliError> {
    match args.loop_dirs.as_slice() {
        [one] => {
            // One loop starts its processes only through the sandbox.
            bl_sandbox::containment::claim_orphans();
            run_one(&args, one, json_out)
        }
        _ => crate::loop_batch::run(&args, json_out),
    }
}

fn run_one(args: &RunArgs, loop_dir: &Path, json_out: bool) -> Result<Exit, CliError> {
    let request = args.request(loop_dir);
    let prepared = loop_run::prepare(&request)?;
    confirm(args, &prepared.package.manifest, &prepared.runner)?;
    let run = loop_run::run(prepared, &request, &mut StdinApproval)?;
    if let Some(kept) = &run.kept_workspace {
        errln!("workspace kept at {}", kept.display());
    }
    // The report says whether the run was stopped and why: under --json a
    // second object would make the answer two documents.
    crate::interrupt::answer(|| {
        report(
            &run.outcome,
            &run.subject(),
            args.run_id.as_deref(),
            &run.ledger,
            run.verify_dir(),
            json_out,
        )
    });
    Ok(match run.outcome.status {
        Status::Done => Exit::Success,
        Status::Halt | Status::Pause | Status::Killed => Exit::No,
        Status::Error => Exit::Undecided,
    })
}

fn report(
    outcome: &RunOutcome,
    subject: &str,
    run_id: Option<&str>,
    ledger: &Path,
    verify_dir: &Path,
    json_out: bool,
) {
    let status = outcome.status.as_str();
    if json_out {
        // bounded-loops' key order, its separators and ASCII escapes.
        let text = format!(
            "{{\"subcommand\": \"run\", \"status\": {}, \"reason\": {}, \"laps\": {}, \"ledger_path\": {}, \"ledger_head\": {}}}",
            bl_core::python_json(&json!(status)),
            bl_core::python_json(&json!(outcome.reason)),
            outcome.laps,
            bl_core::python_json(&json!(ledger.display().to_string())),
            bl_core::python_json(&json!(outcome.ledger_head)),
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
            Status::Killed if bl_core::interrupt::requested().is_some() => outln!(
                "Stopped by a signal: a run with --run-id continues with --resume; the line above says what the resume does first."
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
    // Compact, in this key order, UTF-8 raw, as bounded-loops writes it.
    let quoted = |s: &str| serde_json::to_string(s).expect("a string serializes");
    let run_id = run_id.map_or(String::new(), |id| format!(",\"run_id\":{}", quoted(id)));
    let event = format!(
        "{{\"event\":\"terminal\",\"status\":{},\"alert\":{},\"reason\":{},\"subject\":{}{run_id},\"laps\":{},\"ledger_head\":{}}}",
        quoted(status),
        outcome.status != Status::Done,
        quoted(&outcome.reason),
        quoted(subject),
        outcome.laps,
        quoted(&outcome.ledger_head),
    );
    errln!("BL_EVENT {event}");
}
