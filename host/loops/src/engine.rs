//! The lap loop. Each lap checks the kill switch first, then the bounds,
//! then lets the runner take a turn in the scratch workspace, checks the
//! forbidden paths, measures progress by the workspace's content digest and
//! asks the gate. The runner never decides success: only the gate's verdict
//! ends a run DONE, and a gate that cannot run ends it ERROR.
//!
//! Everything outside the loop is a port ([`Runner`], [`Gate`],
//! [`Workspace`], [`Clock`], [`KillSwitch`], [`Ledger`], [`Approver`]), so
//! the engine does no I/O of its own and runs the same against a cassette
//! or an agent CLI, a local directory or a remote machine.

use std::time::Duration;

use crate::ledger::Ordered;
use serde_json::Value;

use crate::bounds::{Bounds, Stop};
use crate::ledger::{
    BudgetDeclared, BudgetSpent, GateRecord, LapDecision, LedgerLine, VerdictRecord, hundredths,
};

/// One turn the engine asks of a runner.
#[derive(Debug, Clone)]
pub struct TurnRequest<'a> {
    /// 1-based. The wind-down turn carries the lap that stopped the run.
    pub lap: u32,
    pub prompt: &'a str,
    /// The last gate verdict's detail, for the agent to act on.
    pub feedback: Option<&'a str>,
    /// The most time the turn may take before it is stopped.
    pub time_left: Duration,
    /// The reserved last turn after a bound stopped the run: the runner
    /// gives its own account for `HANDOFF.md`, and nothing it writes counts.
    pub wind_down: bool,
}

/// What a turn produced. Claims are recorded, never trusted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    pub output: String,
    pub tokens: u64,
    pub claimed_done: bool,
}

/// Why a runner could not take its turn. The run ends ERROR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerError {
    /// bounded-loops' error class, e.g. `RunnerError`, `ForbiddenWrite`.
    pub kind: String,
    pub message: String,
}

/// The [`RunnerError::kind`] of a turn stopped because the time it was
/// given ran out.
pub const TIMEOUT: &str = "Timeout";

pub trait Runner {
    fn turn(&mut self, request: &TurnRequest) -> Result<Turn, RunnerError>;
}

/// A gate's answer for one lap, in the ledger's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub outcome: Outcome,
    pub detail: String,
    pub evidence: Ordered,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// The gate could not decide: never a pass, never a fail.
    Error,
    /// The gate was still running when the work time ran out: the
    /// wallclock bound stopped it.
    OutOfTime,
}

pub trait Gate {
    fn judge(&mut self, time_left: Duration) -> Judgement;
    fn record(&self) -> GateRecord;
}

/// Two digests of a workspace, from one walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceDigest {
    /// The work: equal digests mean no progress (bl's own files and caches
    /// are left out).
    pub content: String,
    /// Everything a gate could read, bl's own files included.
    pub all: String,
}

pub trait Workspace {
    fn digest(&mut self) -> Result<WorkspaceDigest, PortError>;
    /// Paths under `forbid` the last turn created, changed or removed.
    fn forbidden_changes(&mut self) -> Result<Vec<String>, PortError>;
}

pub trait Clock {
    /// Time since the run started, a resumed run's earlier time included.
    fn elapsed(&self) -> Duration;
    /// `2026-11-30T02:08:04.367348Z`.
    fn timestamp(&self) -> String;
}

pub trait KillSwitch {
    /// `Some(why)` when the operator asked every loop to stop.
    fn engaged(&self) -> Option<String>;
    /// `Some(why)` when the stop also ended the commands running now (a
    /// signal does; a cancel waits for the lap): a worker's or a gate's
    /// failure is then the stop's doing, not its own.
    fn ends_commands(&self) -> Option<String> {
        None
    }
}

/// Where the engine's records go.
pub trait Ledger {
    /// Appends one line (no newline) and returns the new head.
    fn append(&mut self, line: &LedgerLine) -> Result<String, PortError>;
    /// The head the next line chains to.
    fn head(&self) -> &str;
    /// The worker finished lap `lap`'s turn, which spent `tokens`, and the
    /// gate is about to judge it: a ledger that can be resumed marks it
    /// durably, so a process that dies before the lap is appended leaves
    /// the turn (and what it spent) to be judged, not paid for again. The
    /// next append clears the mark.
    fn turn_finished(&mut self, _lap: u32, _tokens: u64) -> Result<(), PortError> {
        Ok(())
    }
    /// Every line appended so far is durable when this returns. A ledger
    /// may make a line durable in the background while the run goes on;
    /// the engine settles it before any worker turn, so no turn is paid
    /// for before the verdicts it follows are on record.
    fn settle(&mut self) -> Result<(), PortError> {
        Ok(())
    }
}

/// Writes `HANDOFF.md` when a bound stops the run.
pub trait Handoff {
    fn write(&mut self, outcome: &RunOutcome) -> Result<(), PortError>;
}

/// The loop's memory across laps (`.STATE.md.runtime`): a note for every
/// lap the gate rejected, for the next turn and the next run to read.
pub trait Memory {
    fn note(&mut self, lap: u32, timestamp: &str, detail: &str);
}

/// The `trace` bound: one span per lap, given each lap's record as it is
/// written.
pub trait Trace {
    fn lap(&mut self, line: &LedgerLine);
    /// Every line given so far is durable (the ledger settled).
    fn settled(&mut self) {}
}

/// The operator's go-ahead for rungs that require it.
pub trait Approver {
    /// Whether the pass the gate gave at `lap` (`detail`) is approved.
    fn approved(&mut self, lap: u32, detail: &str) -> bool;
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Done,
    Halt,
    Pause,
    Killed,
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Done => "DONE",
            Status::Halt => "HALT",
            Status::Pause => "PAUSE",
            Status::Killed => "KILLED",
            Status::Error => "ERROR",
        }
    }

    /// `bl run`'s exit code: 0 DONE, 1 a stop the operator can act on, 3 an
    /// error (2 is for manifests and refusals, before any lap).
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Done => 0,
            Status::Halt | Status::Pause | Status::Killed => 1,
            Status::Error => 3,
        }
    }
}

/// One work turn, as `HANDOFF.md` and the receipt report it.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub lap: u32,
    pub changed: bool,
    pub detail: String,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    pub status: Status,
    pub reason: String,
    /// Ledger lines this run wrote (its last lap number).
    pub laps: u32,
    pub ledger_head: String,
    pub tokens: u64,
    pub attempts: Vec<Attempt>,
    /// The last verdict a gate reached, if any.
    pub last_verdict: Option<Judgement>,
    /// The wind-down turn's own account, when a bound stopped the run.
    pub wind_down: Option<String>,
}

/// Everything the engine needs besides its ports.
#[derive(Debug, Clone)]
pub struct Plan {
    pub bounds: Bounds,
    pub prompt: String,
    /// How the gate's findings are redacted before the agent is told them
    /// (`--redact`), and the loop directory paths are shown relative to.
    pub redact: crate::redact::Mode,
    pub loop_dir: String,
    /// Whether a verdict stands for a workspace whose content has not
    /// changed since the gate gave it. True only in the cage, where the
    /// gate's inputs are the workspace and a read-only host, with no
    /// network: asking again gives the same answer.
    pub reuse_verdicts: bool,
    /// A resumed run whose last invocation was stopped (or died) while its
    /// gate judged a turn the worker had finished: its first lap judges the
    /// workspace that turn left, and takes no new turn (it was paid for).
    pub judge_first: Option<UnjudgedTurn>,
}

/// A turn the worker finished that no gate judged (see [`Plan::judge_first`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnjudgedTurn {
    /// What the turn spent that no ledger line records: its invocation
    /// died before it could. The lap that judges it records them.
    pub tokens: u64,
    /// Whether a ledger line (the lap a stop ended) already counts the
    /// turn as an attempt; if not, the lap that judges it does.
    pub on_record: bool,
}

/// The evidence a lap stopped while its gate judged a finished turn
/// carries: what a resume looks for.
pub const STOPPED_IN_GATE: &str = "gate";

/// Whether `line` (a ledger line, as JSON) is a lap stopped while its gate
/// judged a finished turn, which a resume judges without a new turn.
pub fn stopped_in_gate(line: &serde_json::Value) -> bool {
    line["decision"] == "killed" && line["verdict"]["evidence"]["stopped"] == STOPPED_IN_GATE
}

/// The engine's ports, borrowed for one run.
pub struct Ports<'a> {
    pub runner: &'a mut dyn Runner,
    pub gate: &'a mut dyn Gate,
    pub workspace: &'a mut dyn Workspace,
    pub clock: &'a dyn Clock,
    pub kill: &'a dyn KillSwitch,
    pub ledger: &'a mut dyn Ledger,
    pub approver: &'a mut dyn Approver,
    pub handoff: &'a mut dyn Handoff,
    pub memory: &'a mut dyn Memory,
    pub trace: &'a mut dyn Trace,
}

/// Why the engine itself stopped: a record could not be written, or the
/// workspace could not be read. Nothing after the failing step happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EngineError(pub String);

/// Why a port of the engine could not do its part (the workspace could not
/// be read, a record could not be written), in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PortError(pub String);

impl From<PortError> for EngineError {
    fn from(e: PortError) -> Self {
        EngineError(e.0)
    }
}

/// Runs laps until a gate passes, a bound or the kill switch stops the
/// run, or something errs. Every lap leaves exactly one ledger line.
pub fn run(plan: &Plan, ports: Ports) -> Result<RunOutcome, EngineError> {
    let gate_record = ports.gate.record();
    let bounds = &plan.bounds;
    let declared = BudgetDeclared {
        attempts: bounds.max_iterations,
        tokens: bounds.max_tokens,
        wallclock_s: bounds.max_wallclock_s,
        wallclock_work_s: bounds.work_budget().as_secs_f64(),
    };
    let outcome = RunOutcome {
        status: Status::Error,
        reason: String::new(),
        laps: 0,
        ledger_head: ports.ledger.head().to_string(),
        tokens: plan.judge_first.map_or(0, |turn| turn.tokens),
        attempts: Vec::new(),
        last_verdict: None,
        wind_down: None,
    };
    Laps {
        plan,
        ports,
        gate_record,
        declared,
        outcome,
    }
    .run()
}

struct Laps<'p, 'a> {
    plan: &'p Plan,
    ports: Ports<'a>,
    gate_record: GateRecord,
    declared: BudgetDeclared,
    outcome: RunOutcome,
}

/// What a lap's ledger line says besides the run's totals.
struct LapRecord {
    lap: u32,
    verdict: VerdictRecord,
    decision: LapDecision,
    attempted: bool,
    handoff: bool,
    /// A killed lap records no spend (`{}`), as bounded-loops does.
    spent: bool,
}

impl Laps<'_, '_> {
    fn run(mut self) -> Result<RunOutcome, EngineError> {
        let bounds = &self.plan.bounds;
        let mut last_digest = self.ports.workspace.digest().map_err(EngineError::from)?;
        let mut unchanged = 0u32;
        // The workspace digest the gate last judged, and what it said.
        let mut judged: Option<(String, Judgement)> = None;
        let mut feedback: Option<String> = None;
        // Every invocation counts its laps from 1, a resumed one too (as
        // bounded-loops does): the chain, not the lap number, links them.
        let mut lap = 0;
        // What the turn a judge-only lap judges spent, when only its mark
        // said so: recorded with this invocation's laps, charged to none of
        // its bounds (a turn stopped in its gate is charged to the
        // invocation that took it, and so is this one).
        let adopted = self.plan.judge_first.map_or(0, |turn| turn.tokens);
        loop {
            lap += 1;
            // A turn the last invocation paid for and never had judged is
            // judged first, without a new one.
            let judge_only = lap == 1 && self.plan.judge_first.is_some();
            // A lap's line counts an attempt when it took a turn, or judges
            // one that no line counted (its invocation died in the gate).
            let attempted = !judge_only || self.plan.judge_first.is_some_and(|t| !t.on_record);
            // The kill switch comes before everything else in a lap.
            if let Some(why) = self.ports.kill.engaged() {
                if judge_only {
                    // Still unjudged: the next resume judges it.
                    let detail = format!(
                        "{why} before the gate judged the worker's finished turn; a run with --run-id continues with --resume, which judges that turn without a new one"
                    );
                    return self.stopped(lap, detail, STOPPED_IN_GATE, attempted);
                }
                let verdict = verdict(false, why.clone(), Ordered::empty());
                return self.finish(
                    Status::Killed,
                    why,
                    LapRecord {
                        lap,
                        verdict,
                        decision: LapDecision::Killed,
                        attempted: false,
                        handoff: false,
                        spent: false,
                    },
                );
            }
            let elapsed = self.ports.clock.elapsed();
            let stop = if judge_only {
                // It takes no turn and spends nothing: only the clock (its
                // gate needs time) can stop it.
                bounds.out_of_time(elapsed)
            } else {
                // The iteration bound counts turns, which a judge-only first
                // lap did not take; the token bound, what this invocation's
                // turns spent (not the one it judged, whose invocation paid).
                let turns = lap - u32::from(self.plan.judge_first.is_some());
                let mut stop = bounds.stop_before(turns, self.outcome.tokens - adopted, elapsed);
                if let Some(Stop::Iterations { lap: at, .. }) = &mut stop {
                    *at = lap;
                }
                stop
            };
            if let Some(stop) = stop {
                return self.halt(stop, lap, false);
            }
            let request = TurnRequest {
                lap,
                prompt: &self.plan.prompt,
                feedback: feedback.as_deref(),
                time_left: bounds.work_budget().saturating_sub(elapsed),
                wind_down: false,
            };
            let turn = if judge_only {
                Ok(Turn::default())
            } else {
                self.settle()?;
                self.ports.runner.turn(&request)
            };
            let turn = match turn {
                Ok(turn) => turn,
                // Stopped by a signal while the worker took its turn: the
                // turn is not finished, and a resume takes it again.
                Err(_) if let Some(why) = self.ports.kill.ends_commands() => {
                    let detail = format!(
                        "{why} during the worker's turn, before it finished; a run with --run-id continues with --resume, which takes that turn again"
                    );
                    return self.stopped(lap, detail, "turn", true);
                }
                // The turn ran into the work budget: the wallclock bound,
                // enforced inside the attempt, stopped it.
                Err(error) if error.kind == TIMEOUT => {
                    let stop = Stop::Wallclock {
                        max: bounds.max_wallclock_s,
                        elapsed: self.ports.clock.elapsed(),
                        reserve: bounds.handoff_reserve_s,
                    };
                    return self.halt(stop, lap, true);
                }
                Err(error) => {
                    let detail = format!("runner error: {}: {}", error.kind, error.message);
                    let evidence = error_evidence("runner", &error.kind);
                    return self.error(lap, detail, evidence);
                }
            };
            self.outcome.tokens += turn.tokens;
            let forbidden = self
                .ports
                .workspace
                .forbidden_changes()
                .map_err(EngineError::from)?;
            if !forbidden.is_empty() {
                // A tampered anchor is never judged: the gate it feeds
                // could be made to pass.
                let detail = format!(
                    "runner error: RunnerError: SECURITY: the gate's verification anchor '{}' was MODIFIED during the run (it is declared in the loop's forbid list). A runner may not neuter the file the gate checks — refusing to report a pass on a tampered anchor.",
                    forbidden.join("', '")
                );
                return self.error(lap, detail, error_evidence("runner", "RunnerError"));
            }
            let digest = self.ports.workspace.digest().map_err(EngineError::from)?;
            let changed = digest.content != last_digest.content;
            last_digest = digest.clone();
            // A judge-only lap took no turn: it neither made progress nor
            // failed to.
            if !judge_only {
                unchanged = if changed { 0 } else { unchanged + 1 };
                // Best effort: without the mark, a death in the gate costs
                // the turn again, as it did before there was one.
                let _ = self.ports.ledger.turn_finished(lap, turn.tokens);
            }
            let time_left = bounds
                .work_budget()
                .saturating_sub(self.ports.clock.elapsed());
            let judgement = match &judged {
                Some((seen, verdict)) if self.plan.reuse_verdicts && *seen == digest.all => {
                    verdict.clone()
                }
                _ => {
                    let verdict = self.ports.gate.judge(time_left);
                    judged = Some((digest.all, verdict.clone()));
                    verdict
                }
            };
            // The turn a judge-only lap judges was counted when it was
            // taken, unless its invocation died first.
            if attempted {
                self.outcome.attempts.push(Attempt {
                    lap,
                    changed,
                    detail: judgement.detail.clone(),
                });
            }
            // Stopped while the gate judged: the worker's turn is finished
            // and paid for, so a resume judges it rather than paying again.
            if judgement.outcome == Outcome::Error
                && let Some(why) = self.ports.kill.ends_commands()
            {
                let detail = format!(
                    "{why} while the gate judged the worker's finished turn; a run with --run-id continues with --resume, which judges that turn without a new one"
                );
                return self.stopped(lap, detail, STOPPED_IN_GATE, attempted);
            }
            self.outcome.last_verdict = Some(judgement.clone());
            let passed = judgement.outcome == Outcome::Pass;
            let recorded = verdict(passed, judgement.detail.clone(), judgement.evidence.clone());
            match judgement.outcome {
                Outcome::OutOfTime => {
                    let stop = Stop::Wallclock {
                        max: bounds.max_wallclock_s,
                        elapsed: self.ports.clock.elapsed(),
                        reserve: bounds.handoff_reserve_s,
                    };
                    return self.halt(stop, lap, attempted);
                }
                Outcome::Pass => {
                    let approved = !bounds.require_approval
                        || self.ports.approver.approved(lap, &judgement.detail);
                    let (status, decision, reason) = if approved {
                        (Status::Done, LapDecision::Done, "gate-passed")
                    } else {
                        (Status::Pause, LapDecision::Pause, "awaiting-approval")
                    };
                    return self.finish(
                        status,
                        reason.into(),
                        LapRecord {
                            lap,
                            verdict: recorded,
                            decision,
                            attempted,
                            handoff: false,
                            spent: true,
                        },
                    );
                }
                Outcome::Error => {
                    return self.finish(
                        Status::Error,
                        judgement.detail,
                        LapRecord {
                            lap,
                            verdict: recorded,
                            decision: LapDecision::Error,
                            attempted,
                            handoff: false,
                            spent: true,
                        },
                    );
                }
                Outcome::Fail if unchanged >= bounds.no_progress_window => {
                    let stop = Stop::NoProgress {
                        window: bounds.no_progress_window,
                    };
                    return self.halt(stop, lap, attempted);
                }
                Outcome::Fail => {
                    let now = self.ports.clock.timestamp();
                    self.ports.memory.note(lap, &now, &judgement.detail);
                    feedback = Some(feedback_text(
                        &judgement,
                        self.plan.redact,
                        &self.plan.loop_dir,
                    ));
                    self.record(LapRecord {
                        lap,
                        verdict: recorded,
                        decision: LapDecision::Continue,
                        attempted,
                        handoff: false,
                        spent: true,
                    })?;
                }
            }
        }
    }

    fn record(&mut self, record: LapRecord) -> Result<(), EngineError> {
        let clock = self.ports.clock;
        let line = LedgerLine {
            prev: self.ports.ledger.head().to_string(),
            lap: record.lap,
            ts: clock.timestamp(),
            verdict: record.verdict,
            decision: record.decision,
            budget_spent: record.spent.then(|| BudgetSpent {
                laps: record.lap,
                tokens: self.outcome.tokens,
                wallclock_s: hundredths(clock.elapsed().as_secs_f64()),
            }),
            attempted: record.attempted,
            handoff: if record.handoff {
                HANDOFF_FILE.into()
            } else {
                String::new()
            },
            gate: self.gate_record.clone(),
            budget_declared: self.declared.clone(),
        };
        self.outcome.ledger_head = self.ports.ledger.append(&line).map_err(EngineError::from)?;
        self.ports.trace.lap(&line);
        self.outcome.laps = record.lap;
        Ok(())
    }

    /// Waits until every line appended is durable, and tells the trace.
    fn settle(&mut self) -> Result<(), EngineError> {
        self.ports.ledger.settle().map_err(EngineError::from)?;
        self.ports.trace.settled();
        Ok(())
    }

    fn finish(
        mut self,
        status: Status,
        reason: String,
        record: LapRecord,
    ) -> Result<RunOutcome, EngineError> {
        self.outcome.status = status;
        self.outcome.reason = reason;
        self.record(record)?;
        Ok(self.outcome)
    }

    /// A stop asked for during a lap (`stopped`: in the worker's `turn`, or
    /// in the `gate`), recorded as the kill switch's is.
    fn stopped(
        self,
        lap: u32,
        detail: String,
        stopped: &str,
        attempted: bool,
    ) -> Result<RunOutcome, EngineError> {
        let record = LapRecord {
            lap,
            verdict: verdict(
                false,
                detail.clone(),
                Ordered::object([("stopped", stopped.into())]),
            ),
            decision: LapDecision::Killed,
            attempted,
            handoff: false,
            spent: true,
        };
        self.finish(Status::Killed, detail, record)
    }

    fn error(self, lap: u32, detail: String, evidence: Ordered) -> Result<RunOutcome, EngineError> {
        let record = LapRecord {
            lap,
            verdict: verdict(false, detail.clone(), evidence),
            decision: LapDecision::Error,
            attempted: true,
            handoff: false,
            spent: true,
        };
        self.finish(Status::Error, detail, record)
    }

    /// A bound stopped the run: the runner takes the reserved wind-down
    /// turn (its account is unverified and nothing it writes is judged),
    /// then `HANDOFF.md` is written and the halt recorded.
    fn halt(mut self, stop: Stop, lap: u32, attempted: bool) -> Result<RunOutcome, EngineError> {
        let reason = stop.reason();
        let reserve = Duration::from_secs(self.plan.bounds.handoff_reserve_s);
        let request = TurnRequest {
            lap,
            prompt: &self.plan.prompt,
            feedback: Some(&reason),
            time_left: reserve,
            wind_down: true,
        };
        // No reserve, no wind-down turn. One that fails leaves the handoff
        // without the worker's account; the halt itself stands. A line
        // that could not be made durable is an error, turn or no turn.
        self.settle()?;
        if !reserve.is_zero()
            && let Ok(turn) = self.ports.runner.turn(&request)
        {
            self.outcome.tokens += turn.tokens;
            self.outcome.wind_down = Some(turn.output);
        }
        self.outcome.status = Status::Halt;
        self.outcome.reason = reason.clone();
        self.outcome.laps = lap;
        let handoff = self.ports.handoff.write(&self.outcome).is_ok();
        let record = LapRecord {
            lap,
            verdict: verdict(false, reason.clone(), Ordered::empty()),
            decision: LapDecision::Halt,
            attempted,
            handoff,
            spent: true,
        };
        self.finish(Status::Halt, reason, record)
    }
}

/// At most this many bytes of the gate's findings reach the agent.
pub const FEEDBACK_BYTES: usize = 4096;
/// At most this many lines of a checker's output reach the agent.
pub const FEEDBACK_LINES: usize = 40;

/// What the agent is told of a verdict that failed: the gate's detail, then
/// what it found (a checker's last lines of output, a schema's errors, each
/// child's word in a composite), bounded and redacted as the ledger is.
pub fn feedback_text(judgement: &Judgement, redact: crate::redact::Mode, loop_dir: &str) -> String {
    use crate::redact::{Mode, redact_text};
    let clean = |t: &str| match redact {
        Mode::Off => t.to_string(),
        _ => redact_text(t, loop_dir),
    };
    let mut out = clean(&judgement.detail);
    let mut found = String::new();
    render_evidence(&judgement.evidence, None, redact, &clean, &mut found);
    let found = found.trim_end();
    if !found.trim().is_empty() {
        out.push_str("\n\nWhat the gate found:\n");
        // Over the budget, the last lines are kept: a checker says what
        // matters most at its end.
        let room = FEEDBACK_BYTES.saturating_sub(out.len() + 64);
        if found.len() > room {
            let mut start = found.len() - room;
            while !found.is_char_boundary(start) {
                start += 1;
            }
            let start = found[start..]
                .find('\n')
                .map_or(found.len(), |i| start + i + 1);
            out.push_str("[… earlier lines cut: the rest is in the ledger]\n");
            out.push_str(&found[start..]);
        } else {
            out.push_str(found);
        }
    }
    if out.len() > FEEDBACK_BYTES {
        let mut cut = FEEDBACK_BYTES;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("\n[… cut: the rest is in the ledger]");
    }
    out
}

/// A checker's output, a schema's errors, a composite's children: what the
/// evidence says, as lines.
fn render_evidence(
    value: &Ordered,
    key: Option<&str>,
    redact: crate::redact::Mode,
    clean: &dyn Fn(&str) -> String,
    out: &mut String,
) {
    match value {
        Ordered::Object(pairs) => {
            for (k, v) in pairs {
                render_evidence(v, Some(k), redact, clean, out);
            }
        }
        Ordered::Array(items) => {
            for item in items {
                render_evidence(item, key, redact, clean, out);
            }
        }
        Ordered::Json(Value::String(text)) if key == Some("tail") => {
            if redact == crate::redact::Mode::Strict {
                out.push_str("(the checker's output is withheld: --redact strict)\n");
                return;
            }
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            let start = lines.len().saturating_sub(FEEDBACK_LINES);
            for line in &lines[start..] {
                out.push_str(&clean(line));
                out.push('\n');
            }
        }
        Ordered::Json(Value::String(text))
            if matches!(
                key,
                Some("message" | "error" | "errors" | "finding" | "findings" | "detail" | "reason")
            ) =>
        {
            out.push_str(&format!("- {}\n", clean(text)));
        }
        Ordered::Json(Value::Array(items)) => {
            for item in items {
                render_evidence(&Ordered::Json(item.clone()), key, redact, clean, out);
            }
        }
        Ordered::Json(Value::Object(map)) => {
            for (k, v) in map {
                render_evidence(&Ordered::Json(v.clone()), Some(k), redact, clean, out);
            }
        }
        _ => {}
    }
}

/// `{"component": …, "error_type": …}`: what could not run.
pub fn error_evidence(component: &str, error_type: &str) -> Ordered {
    Ordered::object([
        ("component", component.into()),
        ("error_type", error_type.into()),
    ])
}

fn verdict(passed: bool, detail: String, evidence: Ordered) -> VerdictRecord {
    VerdictRecord {
        passed,
        detail,
        evidence,
    }
}

/// The file a halt leaves for the next run.
pub const HANDOFF_FILE: &str = "HANDOFF.md";

#[cfg(test)]
mod tests {
    //! The lap loop against in-memory ports: the bounds, the order of the
    //! checks in a lap, and what each ending records.
    use std::cell::Cell;

    use super::*;

    struct Script {
        /// Per lap: tokens, whether the turn changes the workspace, the verdict.
        laps: Vec<(u64, bool, Outcome)>,
        content: u32,
        wind_downs: u32,
        fail_runner_at: Option<u32>,
        tamper_at: Option<u32>,
        time_out_at: Option<u32>,
        tampered: bool,
        /// Bumped by every turn when `touch_bookkeeping`: a file the gate
        /// may read changes, but not the work.
        bookkeeping: u32,
        touch_bookkeeping: bool,
        gate_runs: u32,
        /// Set while a ledger line is appended and not yet settled
        /// (durable); shared with the ledger.
        unsettled: std::rc::Rc<Cell<bool>>,
        /// The ledger's background sync of a line fails.
        sync_fails: bool,
        /// Turns taken while a line was unsettled: always 0.
        turns_unsettled: u32,
    }

    impl Script {
        fn new(laps: Vec<(u64, bool, Outcome)>) -> Script {
            Script {
                laps,
                content: 0,
                wind_downs: 0,
                fail_runner_at: None,
                tamper_at: None,
                time_out_at: None,
                tampered: false,
                bookkeeping: 0,
                touch_bookkeeping: false,
                gate_runs: 0,
                unsettled: Default::default(),
                sync_fails: false,
                turns_unsettled: 0,
            }
        }
        fn lap(&self, lap: u32) -> (u64, bool, Outcome) {
            let i = (lap as usize - 1).min(self.laps.len() - 1);
            self.laps[i]
        }
    }

    struct Fake<'a>(&'a std::cell::RefCell<Script>);

    impl Runner for Fake<'_> {
        fn turn(&mut self, r: &TurnRequest) -> Result<Turn, RunnerError> {
            let mut s = self.0.borrow_mut();
            if s.unsettled.get() {
                s.turns_unsettled += 1;
            }
            if r.wind_down {
                s.wind_downs += 1;
                return Ok(Turn {
                    output: "my account".into(),
                    tokens: 20,
                    claimed_done: true,
                });
            }
            if s.fail_runner_at == Some(r.lap) {
                return Err(RunnerError {
                    kind: "RunnerError".into(),
                    message: "StubRunner: no entry".into(),
                });
            }
            if s.time_out_at == Some(r.lap) {
                return Err(RunnerError {
                    kind: TIMEOUT.into(),
                    message: "ran past".into(),
                });
            }
            if s.tamper_at == Some(r.lap) {
                s.tampered = true;
            }
            if s.touch_bookkeeping {
                s.bookkeeping += 1;
            }
            let (tokens, changes, _) = s.lap(r.lap);
            if changes {
                s.content += 1;
            }
            Ok(Turn {
                output: format!("lap {}", r.lap),
                tokens,
                claimed_done: true,
            })
        }
    }

    impl Workspace for Fake<'_> {
        fn digest(&mut self) -> Result<WorkspaceDigest, PortError> {
            let s = self.0.borrow();
            Ok(WorkspaceDigest {
                content: s.content.to_string(),
                all: format!("{}/{}", s.content, s.bookkeeping),
            })
        }
        fn forbidden_changes(&mut self) -> Result<Vec<String>, PortError> {
            Ok(if self.0.borrow().tampered {
                vec!["seed/check.py".into()]
            } else {
                vec![]
            })
        }
    }

    struct FakeGate<'a>(&'a std::cell::RefCell<Script>, Cell<u32>);

    impl Gate for FakeGate<'_> {
        fn judge(&mut self, _: Duration) -> Judgement {
            self.1.set(self.1.get() + 1);
            let mut s = self.0.borrow_mut();
            s.gate_runs += 1;
            let lap = self.1.get();
            let (_, _, outcome) = s.lap(lap);
            let detail = match outcome {
                Outcome::Pass => "gate passed (exit 0)",
                Outcome::Fail => "gate failed (exit 1)",
                Outcome::Error => "gate error: GateError: CommandGate: boom",
                Outcome::OutOfTime => "gate error: GateError: CommandGate: ran out of time",
            };
            Judgement {
                outcome,
                detail: detail.into(),
                evidence: Ordered::empty(),
            }
        }
        fn record(&self) -> GateRecord {
            GateRecord {
                kind: "command".into(),
                source: "shipped".into(),
                implementation: "CommandGate".into(),
                component: None,
            }
        }
    }

    /// Each call to `elapsed` moves time on by `step`.
    struct Ticking {
        now: Cell<Duration>,
        step: Duration,
    }
    impl Clock for Ticking {
        fn elapsed(&self) -> Duration {
            let t = self.now.get();
            self.now.set(t + self.step);
            t
        }
        fn timestamp(&self) -> String {
            "2026-12-01T00:00:00.000000Z".into()
        }
    }

    struct Kill(bool);
    impl KillSwitch for Kill {
        fn engaged(&self) -> Option<String> {
            self.0.then(|| "killed".into())
        }
    }

    /// A ledger in memory that, as a file ledger, makes each line durable
    /// in the background: `unsettled` until `settle`, which fails when
    /// `sync_fails`.
    struct Lines {
        lines: Vec<LedgerLine>,
        head: String,
        unsettled: std::rc::Rc<Cell<bool>>,
        sync_fails: bool,
    }
    impl Ledger for Lines {
        fn append(&mut self, line: &LedgerLine) -> Result<String, PortError> {
            self.head = bl_core::sha256_hex(line.to_line().as_bytes());
            self.lines.push(line.clone());
            self.unsettled.set(true);
            Ok(self.head.clone())
        }
        fn settle(&mut self) -> Result<(), PortError> {
            if self.sync_fails && self.unsettled.get() {
                return Err(PortError("cannot append to the ledger: EIO".into()));
            }
            self.unsettled.set(false);
            Ok(())
        }
        fn head(&self) -> &str {
            if self.lines.is_empty() {
                crate::ledger::GENESIS
            } else {
                &self.head
            }
        }
    }

    struct Answer(bool);
    impl Approver for Answer {
        fn approved(&mut self, _: u32, _: &str) -> bool {
            self.0
        }
    }

    #[derive(Default)]
    struct Written(Option<RunOutcome>, Vec<u32>, Vec<u32>);
    impl Handoff for Written {
        fn write(&mut self, outcome: &RunOutcome) -> Result<(), PortError> {
            self.0 = Some(outcome.clone());
            Ok(())
        }
    }
    impl Trace for Written {
        fn lap(&mut self, line: &LedgerLine) {
            self.2.push(line.lap);
        }
    }

    impl Memory for Written {
        fn note(&mut self, lap: u32, _: &str, _: &str) {
            self.1.push(lap);
        }
    }

    fn bounds() -> Bounds {
        Bounds {
            max_iterations: 5,
            no_progress_window: 3,
            max_tokens: None,
            max_wallclock_s: 990,
            handoff_reserve_s: 90,
            sandbox: true,
            quarantine_inputs: true,
            schema: None,
            trace: true,
            require_approval: false,
        }
    }

    struct Run {
        outcome: RunOutcome,
        lines: Vec<LedgerLine>,
        handoff: Option<RunOutcome>,
        notes: Vec<u32>,
        script: Script,
    }

    fn run_with(script: Script, bounds: Bounds, kill: bool, approve: bool, step_ms: u64) -> Run {
        finished(try_run(script, bounds, kill, approve, step_ms, false, None))
    }

    /// A run that returned, as the ports saw it.
    fn finished(
        (outcome, (lines, handoff, notes, script)): (Result<RunOutcome, EngineError>, Seen),
    ) -> Run {
        Run {
            outcome: outcome.unwrap(),
            lines,
            handoff,
            notes,
            script,
        }
    }

    /// What the ports saw: the lines, the handoff, the notes, the script.
    type Seen = (Vec<LedgerLine>, Option<RunOutcome>, Vec<u32>, Script);

    /// The engine over the fakes: what it returned, and what the ports saw.
    fn try_run(
        script: Script,
        bounds: Bounds,
        kill: bool,
        approve: bool,
        step_ms: u64,
        reuse_verdicts: bool,
        judge_first: Option<UnjudgedTurn>,
    ) -> (Result<RunOutcome, EngineError>, Seen) {
        let cell = std::cell::RefCell::new(script);
        let mut runner = Fake(&cell);
        let mut workspace = Fake(&cell);
        let mut gate = FakeGate(&cell, Cell::new(0));
        let clock = Ticking {
            now: Cell::new(Duration::ZERO),
            step: Duration::from_millis(step_ms),
        };
        let mut ledger = Lines {
            lines: Vec::new(),
            head: String::new(),
            unsettled: cell.borrow().unsettled.clone(),
            sync_fails: cell.borrow().sync_fails,
        };
        let mut written = Written::default();
        let mut memory = Written::default();
        let mut trace = Written::default();
        let plan = Plan {
            bounds,
            prompt: "fix".into(),
            redact: crate::redact::Mode::Off,
            loop_dir: String::new(),
            reuse_verdicts,
            judge_first,
        };
        let outcome = run(
            &plan,
            Ports {
                runner: &mut runner,
                gate: &mut gate,
                workspace: &mut workspace,
                clock: &clock,
                kill: &Kill(kill),
                ledger: &mut ledger,
                approver: &mut Answer(approve),
                handoff: &mut written,
                memory: &mut memory,
                trace: &mut trace,
            },
        );
        assert_eq!(
            trace.2,
            ledger.lines.iter().map(|l| l.lap).collect::<Vec<_>>(),
            "one span per ledger line"
        );
        assert_eq!(
            cell.borrow().turns_unsettled,
            0,
            "no worker turn starts before the verdicts it follows are durable"
        );
        (
            outcome,
            (ledger.lines, written.0, memory.1, cell.into_inner()),
        )
    }

    fn run_script(laps: Vec<(u64, bool, Outcome)>, bounds: Bounds) -> Run {
        run_with(Script::new(laps), bounds, false, true, 0)
    }

    use Outcome::{Error as E, Fail as F, Pass as P};

    /// A lap's line that cannot be made durable ends the run in an error,
    /// before any further turn: the next lap's, or a halt's wind-down.
    #[test]
    fn a_line_that_cannot_be_made_durable_ends_the_run_before_another_turn() {
        for max_iterations in [3, 1] {
            let mut script = Script::new(vec![(10, true, F)]);
            script.sync_fails = true;
            let (outcome, (lines, _, _, script)) = try_run(
                script,
                Bounds {
                    max_iterations,
                    ..bounds()
                },
                false,
                true,
                0,
                false,
                None,
            );
            let error = outcome.expect_err("a sync that fails is an error");
            assert!(error.0.contains("cannot append to the ledger"), "{error:?}");
            assert_eq!(lines.len(), 1, "the lap was written, and no other");
            assert_eq!(script.wind_downs, 0, "no wind-down turn after it");
        }
    }

    #[test]
    fn what_the_agent_is_told_is_bounded_and_redacted() {
        let long: String = (1..=100)
            .map(|i| {
                format!(
                    "/home/me/loop/src/file{i}.py: missing docstring {}\n",
                    "x".repeat(60)
                )
            })
            .collect();
        let judgement = Judgement {
            outcome: Outcome::Fail,
            detail: "gate failed (exit 1)".into(),
            evidence: Ordered::Object(vec![("tail".into(), Ordered::Json(long.clone().into()))]),
        };
        let told = feedback_text(&judgement, crate::redact::Mode::Off, "/home/me/loop");
        assert!(
            told.starts_with("gate failed (exit 1)\n\nWhat the gate found:\n"),
            "{told}"
        );
        // The checker's last lines, never more than 40 of them nor 4 KiB.
        assert!(told.len() <= FEEDBACK_BYTES + 64, "{} bytes", told.len());
        assert!(told.lines().count() <= FEEDBACK_LINES + 4, "{told}");
        assert!(
            !told.contains("file1.py:"),
            "the head is cut, the tail kept"
        );
        assert!(told.contains("file100.py"), "{told}");
        let paths = feedback_text(&judgement, crate::redact::Mode::Paths, "/home/me/loop");
        assert!(
            !paths.contains("/home/me/loop") && paths.contains("<workspace>"),
            "{paths}"
        );
        let strict = feedback_text(&judgement, crate::redact::Mode::Strict, "/home/me/loop");
        assert!(strict.contains("(the checker's output is withheld: --redact strict)"));
        assert!(!strict.contains("missing docstring"), "{strict}");
    }

    #[test]
    fn a_pass_ends_the_run_done_and_a_fail_continues() {
        let r = run_script(vec![(10, true, F), (5, true, P)], bounds());
        assert_eq!(
            (
                r.outcome.status,
                r.outcome.reason.as_str(),
                r.outcome.laps,
                r.outcome.tokens
            ),
            (Status::Done, "gate-passed", 2, 15)
        );
        let decisions: Vec<_> = r.lines.iter().map(|l| l.decision).collect();
        assert_eq!(decisions, [LapDecision::Continue, LapDecision::Done]);
        assert_eq!(r.lines[1].budget_spent.as_ref().unwrap().tokens, 15);
        assert_eq!(r.notes, [1], "a rejected lap is remembered");
        assert!(r.handoff.is_none());
    }

    #[test]
    fn a_pass_wins_even_when_the_lap_changed_nothing() {
        let r = run_script(vec![(1, false, F), (1, false, F), (1, false, P)], bounds());
        assert_eq!((r.outcome.status, r.outcome.laps), (Status::Done, 3));
    }

    #[test]
    fn max_iterations_halts_before_the_extra_lap_with_a_wind_down_and_a_handoff() {
        let r = run_script(
            vec![(3, true, F)],
            Bounds {
                max_iterations: 2,
                ..bounds()
            },
        );
        assert_eq!(
            (r.outcome.status, r.outcome.reason.as_str()),
            (Status::Halt, "max_iterations 2 reached at lap 3")
        );
        let last = r.lines.last().unwrap();
        assert_eq!(
            (
                last.lap,
                last.decision,
                last.attempted,
                last.handoff.as_str()
            ),
            (3, LapDecision::Halt, false, "HANDOFF.md")
        );
        assert_eq!(
            last.budget_spent.as_ref().unwrap().tokens,
            3 + 3 + 20,
            "the wind-down's tokens count"
        );
        assert_eq!(r.script.wind_downs, 1);
        assert_eq!(r.handoff.unwrap().wind_down.as_deref(), Some("my account"));
    }

    #[test]
    fn no_progress_replaces_the_window_s_last_lap_with_the_halt() {
        // Lap 1 changes, laps 2..4 do not: the halt is written at lap 4.
        let r = run_script(
            vec![(1, true, F), (1, false, F)],
            Bounds {
                max_iterations: 10,
                ..bounds()
            },
        );
        assert_eq!(
            (r.outcome.status, r.outcome.reason.as_str(), r.outcome.laps),
            (Status::Halt, "no progress in last 3 laps", 4)
        );
        let last = r.lines.last().unwrap();
        assert_eq!(
            (last.attempted, last.decision, last.handoff.as_str()),
            (true, LapDecision::Halt, "HANDOFF.md")
        );
        assert_eq!(r.lines.len(), 4);
    }

    #[test]
    fn in_the_cage_an_unchanged_workspace_is_not_judged_twice() {
        let laps = vec![(1, true, F), (1, false, F)];
        let cold = finished(try_run(
            Script::new(laps.clone()),
            Bounds {
                max_iterations: 10,
                ..bounds()
            },
            false,
            true,
            0,
            false,
            None,
        ));
        let warm = finished(try_run(
            Script::new(laps),
            Bounds {
                max_iterations: 10,
                ..bounds()
            },
            false,
            true,
            0,
            true,
            None,
        ));
        assert_eq!((cold.script.gate_runs, warm.script.gate_runs), (4, 1));
        assert_eq!(cold.outcome.reason, warm.outcome.reason);
        let detail = |r: &Run| {
            r.lines
                .iter()
                .map(|l| l.verdict.detail.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(detail(&cold), detail(&warm), "the same records either way");
        // A change in the workspace is always judged afresh.
        let changing = finished(try_run(
            Script::new(vec![(1, true, F), (1, true, P)]),
            bounds(),
            false,
            true,
            0,
            true,
            None,
        ));
        assert_eq!(
            (changing.script.gate_runs, changing.outcome.status),
            (2, Status::Done)
        );
    }

    #[test]
    fn a_verdict_is_asked_again_when_anything_the_gate_could_read_changed() {
        // Each turn rewrites only bl's own agent_output.txt: no progress, but
        // a gate may read that file, so its verdict is not reused.
        let mut script = Script::new(vec![(1, true, F), (1, false, F)]);
        script.touch_bookkeeping = true;
        let r = finished(try_run(
            script,
            Bounds {
                max_iterations: 10,
                ..bounds()
            },
            false,
            true,
            0,
            true,
            None,
        ));
        assert_eq!(
            (r.outcome.reason.as_str(), r.script.gate_runs),
            ("no progress in last 3 laps", 4)
        );
    }

    #[test]
    fn a_gate_that_runs_out_of_time_is_the_wallclock_bound() {
        let r = run_script(vec![(1, true, Outcome::OutOfTime)], bounds());
        assert_eq!((r.outcome.status, r.outcome.laps), (Status::Halt, 1));
        assert!(
            r.outcome
                .reason
                .starts_with("wallclock limit 990s exceeded"),
            "{}",
            r.outcome.reason
        );
        assert!(r.lines[0].attempted);
    }

    #[test]
    fn the_token_budget_is_checked_before_a_lap() {
        let r = run_script(
            vec![(20, true, F)],
            Bounds {
                max_tokens: Some(40),
                max_iterations: 10,
                ..bounds()
            },
        );
        assert_eq!(
            (r.outcome.reason.as_str(), r.outcome.laps),
            ("token budget 40 exceeded (40 spent)", 3)
        );
        assert!(!r.lines[2].attempted);
        assert_eq!(r.lines[2].budget_spent.as_ref().unwrap().tokens, 60);
    }

    #[test]
    fn the_wallclock_stops_work_at_the_reserve_and_no_reserve_means_no_wind_down() {
        let b = Bounds {
            max_wallclock_s: 1,
            handoff_reserve_s: 0,
            max_iterations: 100,
            ..bounds()
        };
        let r = run_with(Script::new(vec![(1, true, F)]), b, false, true, 150);
        assert_eq!(r.outcome.status, Status::Halt);
        assert!(
            r.outcome
                .reason
                .starts_with("wallclock limit 1s exceeded ("),
            "{}",
            r.outcome.reason
        );
        assert_eq!(r.script.wind_downs, 0);
        assert!(r.handoff.unwrap().wind_down.is_none());
    }

    #[test]
    fn a_turn_that_runs_out_of_time_is_the_wallclock_bound_not_an_error() {
        let mut s = Script::new(vec![(1, true, F)]);
        s.time_out_at = Some(2);
        let r = run_with(s, bounds(), false, true, 0);
        assert_eq!((r.outcome.status, r.outcome.laps), (Status::Halt, 2));
        assert!(
            r.outcome
                .reason
                .starts_with("wallclock limit 990s exceeded"),
            "{}",
            r.outcome.reason
        );
        assert!(r.lines[1].attempted);
        assert_eq!(r.script.wind_downs, 1);
    }

    #[test]
    fn the_kill_switch_comes_first_and_records_no_spend() {
        let r = run_with(Script::new(vec![(1, true, P)]), bounds(), true, true, 0);
        assert_eq!(
            (r.outcome.status, r.outcome.reason.as_str(), r.outcome.laps),
            (Status::Killed, "killed", 1)
        );
        assert_eq!(r.lines[0].budget_spent, None);
        assert!(r.lines[0].to_line().contains(r#""budget_spent":{}"#));
        assert_eq!(r.script.gate_runs, 0);
    }

    #[test]
    fn runner_and_gate_failures_are_errors_never_verdicts() {
        let mut s = Script::new(vec![(1, true, F)]);
        s.fail_runner_at = Some(2);
        let r = run_with(s, bounds(), false, true, 0);
        assert_eq!((r.outcome.status, r.outcome.laps), (Status::Error, 2));
        assert_eq!(
            r.outcome.reason,
            "runner error: RunnerError: StubRunner: no entry"
        );
        assert_eq!(
            r.lines[1].verdict.evidence,
            error_evidence("runner", "RunnerError")
        );
        let r = run_script(vec![(1, true, E)], bounds());
        assert_eq!(
            (r.outcome.status, r.lines[0].decision),
            (Status::Error, LapDecision::Error)
        );
        assert_eq!(Status::Error.exit_code(), 3);
    }

    #[test]
    fn a_tampered_anchor_is_an_error_and_the_gate_never_sees_it() {
        let mut s = Script::new(vec![(1, true, P)]);
        s.tamper_at = Some(1);
        let r = run_with(s, bounds(), false, true, 0);
        assert_eq!(r.outcome.status, Status::Error);
        assert!(
            r.outcome.reason.contains("'seed/check.py' was MODIFIED"),
            "{}",
            r.outcome.reason
        );
        assert_eq!(r.script.gate_runs, 0);
    }

    #[test]
    fn an_unapproved_pass_pauses() {
        let b = Bounds {
            require_approval: true,
            ..bounds()
        };
        let r = run_with(Script::new(vec![(1, true, P)]), b.clone(), false, false, 0);
        assert_eq!(
            (
                r.outcome.status,
                r.outcome.reason.as_str(),
                r.lines[0].decision
            ),
            (Status::Pause, "awaiting-approval", LapDecision::Pause)
        );
        let r = run_with(Script::new(vec![(1, true, P)]), b, false, true, 0);
        assert_eq!(r.outcome.status, Status::Done);
    }

    #[test]
    fn every_line_chains_to_the_one_before() {
        let r = run_script(vec![(1, true, F), (1, true, F), (1, true, P)], bounds());
        let mut prev = crate::ledger::GENESIS.to_string();
        for line in &r.lines {
            assert_eq!(line.prev, prev);
            prev = bl_core::sha256_hex(line.to_line().as_bytes());
        }
        assert_eq!(prev, r.outcome.ledger_head);
    }

    /// A turn a stop in the gate left: its KILLED line counts it.
    fn left_by_a_stop_in_the_gate() -> Option<UnjudgedTurn> {
        Some(UnjudgedTurn {
            tokens: 0,
            on_record: true,
        })
    }

    /// A turn only its mark records (its process was killed in the gate).
    fn marked(tokens: u64) -> Option<UnjudgedTurn> {
        Some(UnjudgedTurn {
            tokens,
            on_record: false,
        })
    }

    /// A resume of a run stopped in its gate: the first lap judges the turn
    /// it was left, takes none, and counts neither as progress nor as none;
    /// stopped again before judging, it is still left to judge.
    #[test]
    fn a_judge_only_first_lap_takes_no_turn_and_a_stop_before_it_keeps_it_unjudged() {
        let window_of_one = Bounds {
            no_progress_window: 1,
            ..bounds()
        };
        let r = finished(try_run(
            Script::new(vec![(10, true, F), (5, true, P)]),
            window_of_one,
            false,
            true,
            0,
            false,
            left_by_a_stop_in_the_gate(),
        ));
        assert_eq!((r.outcome.status, r.outcome.laps), (Status::Done, 2));
        assert_eq!(r.outcome.tokens, 5, "only lap 2 took a turn");
        assert!(!r.lines[0].attempted && r.lines[1].attempted);
        assert_eq!(r.outcome.attempts.len(), 1);

        let killed = finished(try_run(
            Script::new(vec![(1, true, P)]),
            bounds(),
            true,
            true,
            0,
            false,
            left_by_a_stop_in_the_gate(),
        ));
        assert_eq!(killed.outcome.status, Status::Killed);
        let line = &killed.lines[0];
        let as_json = serde_json::json!({
            "decision": serde_json::to_value(line.decision).unwrap(),
            "verdict": {"evidence": line.verdict.evidence.to_json()},
        });
        assert!(stopped_in_gate(&as_json), "{as_json}");
        assert!(!line.attempted);
        assert_eq!(killed.script.gate_runs, 0);
    }

    /// The turn a judge-only lap judges was paid for: the tokens only its
    /// mark recorded (its process died in the gate) go on record with the
    /// lap that judges it, and are charged to none of the resume's bounds;
    /// the iteration bound counts the resume's turns, and only the clock
    /// stops a judge-only lap.
    #[test]
    fn a_judge_only_lap_records_what_its_turn_spent_and_no_bound_but_the_clock_stops_it() {
        let one_turn = Bounds {
            max_iterations: 1,
            max_tokens: Some(7),
            ..bounds()
        };
        let r = finished(try_run(
            Script::new(vec![(0, false, F), (3, true, F)]),
            one_turn.clone(),
            false,
            true,
            0,
            false,
            marked(7),
        ));
        assert_eq!(r.lines[0].budget_spent.as_ref().unwrap().tokens, 7);
        assert!(
            r.lines[0].attempted,
            "the judge-only lap counts the turn no line of its own counted"
        );
        assert_eq!(r.script.gate_runs, 2, "judged, then the resume's one turn");
        assert_eq!(r.lines[1].budget_spent.as_ref().unwrap().tokens, 10);
        assert_eq!(r.outcome.status, Status::Halt);
        assert_eq!(
            r.outcome.reason, "max_iterations 1 reached at lap 3",
            "the lap its ledger line has"
        );

        let no_time = Bounds {
            max_wallclock_s: 0,
            handoff_reserve_s: 0,
            ..one_turn
        };
        let r = finished(try_run(
            Script::new(vec![(0, false, F)]),
            no_time,
            false,
            true,
            0,
            false,
            marked(7),
        ));
        assert_eq!(r.outcome.status, Status::Halt);
        assert!(r.outcome.reason.contains("wall"), "{}", r.outcome.reason);
        assert_eq!(r.script.gate_runs, 0, "no time to judge it");

        let no_iterations = Bounds {
            max_iterations: 1,
            ..bounds()
        };
        let r = finished(try_run(
            Script::new(vec![(0, false, F), (3, true, F), (3, true, F)]),
            no_iterations,
            false,
            true,
            0,
            false,
            left_by_a_stop_in_the_gate(),
        ));
        assert_eq!(r.outcome.status, Status::Halt);
        assert_eq!(r.outcome.attempts.len(), 1, "the resume keeps its one turn");
        assert!(r.lines[1].attempted);
    }
}
