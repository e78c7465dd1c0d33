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

use serde_json::{Value, json};

use crate::bounds::{Bounds, Stop};
use crate::ledger::{
    BudgetDeclared, BudgetSpent, Decision, GateRecord, LedgerLine, VerdictRecord, hundredths,
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

pub trait Runner {
    fn turn(&mut self, request: &TurnRequest) -> Result<Turn, RunnerError>;
}

/// A gate's answer for one lap, in the ledger's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub outcome: Outcome,
    pub detail: String,
    pub evidence: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail,
    /// The gate could not decide: never a pass, never a fail.
    Error,
}

pub trait Gate {
    fn judge(&mut self, time_left: Duration) -> Judgement;
    fn record(&self) -> GateRecord;
}

pub trait Workspace {
    /// A digest of the workspace's content; equal digests mean no progress.
    fn digest(&mut self) -> Result<String, String>;
    /// Paths under `forbid` the last turn created, changed or removed.
    fn forbidden_changes(&mut self) -> Result<Vec<String>, String>;
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
}

/// Where the engine's records go.
pub trait Ledger {
    /// Appends one line (no newline) and returns the new head.
    fn append(&mut self, line: &LedgerLine) -> Result<String, String>;
    /// The head the next line chains to.
    fn head(&self) -> &str;
}

/// Writes `HANDOFF.md` when a bound stops the run.
pub trait Handoff {
    fn write(&mut self, outcome: &RunOutcome) -> Result<(), String>;
}

/// The operator's go-ahead for rungs that require it.
pub trait Approver {
    fn approved(&mut self, lap: u32) -> bool;
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
    /// Laps already recorded for this run (`--resume`); the next lap is one more.
    pub laps_done: u32,
    pub tokens_spent: u64,
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
}

/// Why the engine itself stopped: a record could not be written, or the
/// workspace could not be read. Nothing after the failing step happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EngineError(pub String);

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
        laps: plan.laps_done,
        ledger_head: ports.ledger.head().to_string(),
        tokens: plan.tokens_spent,
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
    decision: Decision,
    attempted: bool,
    handoff: bool,
    /// A killed lap records no spend (`{}`), as bounded-loops does.
    spent: bool,
}

impl Laps<'_, '_> {
    fn run(mut self) -> Result<RunOutcome, EngineError> {
        let bounds = &self.plan.bounds;
        let mut last_digest = self.ports.workspace.digest().map_err(EngineError)?;
        let mut unchanged = 0u32;
        let mut feedback: Option<String> = None;
        let mut lap = self.plan.laps_done;
        loop {
            lap += 1;
            // The kill switch comes before everything else in a lap.
            if let Some(why) = self.ports.kill.engaged() {
                let verdict = verdict(false, why.clone(), json!({}));
                return self.finish(
                    Status::Killed,
                    why,
                    LapRecord {
                        lap,
                        verdict,
                        decision: Decision::Killed,
                        attempted: false,
                        handoff: false,
                        spent: false,
                    },
                );
            }
            let elapsed = self.ports.clock.elapsed();
            if let Some(stop) = bounds.stop_before(lap, self.outcome.tokens, elapsed) {
                return self.halt(stop, lap, false);
            }
            let request = TurnRequest {
                lap,
                prompt: &self.plan.prompt,
                feedback: feedback.as_deref(),
                time_left: bounds.work_budget().saturating_sub(elapsed),
                wind_down: false,
            };
            let turn = match self.ports.runner.turn(&request) {
                Ok(turn) => turn,
                Err(error) => {
                    let detail = format!("runner error: {}: {}", error.kind, error.message);
                    let evidence = json!({"component": "runner", "error_type": error.kind});
                    return self.error(lap, detail, evidence);
                }
            };
            self.outcome.tokens += turn.tokens;
            let forbidden = self
                .ports
                .workspace
                .forbidden_changes()
                .map_err(EngineError)?;
            if !forbidden.is_empty() {
                let detail = format!(
                    "runner error: ForbiddenWrite: the turn changed {}, which the loop's forbid list protects (the gate's anchors may not change)",
                    forbidden.join(", ")
                );
                let evidence = json!({"component": "runner", "error_type": "ForbiddenWrite", "paths": forbidden});
                return self.error(lap, detail, evidence);
            }
            let digest = self.ports.workspace.digest().map_err(EngineError)?;
            let changed = digest != last_digest;
            last_digest = digest;
            unchanged = if changed { 0 } else { unchanged + 1 };

            let time_left = bounds
                .work_budget()
                .saturating_sub(self.ports.clock.elapsed());
            let judgement = self.ports.gate.judge(time_left);
            self.outcome.attempts.push(Attempt {
                lap,
                changed,
                detail: judgement.detail.clone(),
            });
            self.outcome.last_verdict = Some(judgement.clone());
            let passed = judgement.outcome == Outcome::Pass;
            let recorded = verdict(passed, judgement.detail.clone(), judgement.evidence.clone());
            match judgement.outcome {
                Outcome::Pass => {
                    let approved = !bounds.require_approval || self.ports.approver.approved(lap);
                    let (status, decision, reason) = if approved {
                        (Status::Done, Decision::Done, "gate-passed")
                    } else {
                        (Status::Pause, Decision::Pause, "awaiting-approval")
                    };
                    return self.finish(
                        status,
                        reason.into(),
                        LapRecord {
                            lap,
                            verdict: recorded,
                            decision,
                            attempted: true,
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
                            decision: Decision::Error,
                            attempted: true,
                            handoff: false,
                            spent: true,
                        },
                    );
                }
                Outcome::Fail if unchanged >= bounds.no_progress_window => {
                    let stop = Stop::NoProgress {
                        window: bounds.no_progress_window,
                    };
                    return self.halt(stop, lap, true);
                }
                Outcome::Fail => {
                    feedback = Some(judgement.detail);
                    self.record(LapRecord {
                        lap,
                        verdict: recorded,
                        decision: Decision::Continue,
                        attempted: true,
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
        self.outcome.ledger_head = self.ports.ledger.append(&line).map_err(EngineError)?;
        self.outcome.laps = record.lap;
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

    fn error(self, lap: u32, detail: String, evidence: Value) -> Result<RunOutcome, EngineError> {
        let record = LapRecord {
            lap,
            verdict: verdict(false, detail.clone(), evidence),
            decision: Decision::Error,
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
            time_left: reserve.max(Duration::from_secs(1)),
            wind_down: true,
        };
        // A wind-down turn that fails leaves the handoff without the
        // worker's account; the halt itself stands.
        if let Ok(turn) = self.ports.runner.turn(&request) {
            self.outcome.tokens += turn.tokens;
            self.outcome.wind_down = Some(turn.output);
        }
        self.outcome.status = Status::Halt;
        self.outcome.reason = reason.clone();
        self.outcome.laps = lap;
        let handoff = self.ports.handoff.write(&self.outcome).is_ok();
        let record = LapRecord {
            lap,
            verdict: verdict(false, reason.clone(), json!({})),
            decision: Decision::Halt,
            attempted,
            handoff,
            spent: true,
        };
        self.finish(Status::Halt, reason, record)
    }
}

fn verdict(passed: bool, detail: String, evidence: Value) -> VerdictRecord {
    VerdictRecord {
        passed,
        detail,
        evidence,
    }
}

/// The file a halt leaves for the next run.
pub const HANDOFF_FILE: &str = "HANDOFF.md";
