//! The controller: drives the [`Machine`] on tokio, runs ready nodes in
//! parallel (bounded), and records everything through the [`Journal`]
//! port. Workers, artifacts, approvals and the publication ledger are
//! ports too; the CLI composes the adapters.
//!
//! A resumed run is driven again from the start: every event it would
//! write that is already recorded is checked against the record (same key,
//! same content, or the run stops), and an attempt whose outcome is
//! recorded is not run again. So a SUCCEEDED node is never re-driven or
//! re-gated, and an attempt that started but never ended (the controller
//! died) is re-driven, at most [`MAX_REDRIVES`] times.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::task::JoinSet;

use super::ports::*;
use crate::events::{
    self, At, AttemptFailure, BudgetPause, Cause, Event, FinishedTurn, POLICY_DENIED, Route, Usage,
    Verdict, WORKER_FAILED, failure_of, success_of, usage_of,
};
use crate::machine::{AttemptEnd, Machine, NodeState, RunStatus, Transition};
use crate::reply::{ReplyCheck, ReplyRequest, ReplyRuling};
use crate::schedule::{Driver, NodeInfo, OutputPort, Schedule};

/// An attempt that a crash left incomplete (its controller died, nothing
/// recorded how it ended) is re-driven at most this many times. An attempt
/// an operator's stop interrupted is recorded as such and never counts.
pub const MAX_REDRIVES: u32 = 3;

/// How often the controller looks for a stop while it waits for its nodes.
const STOP_POLL: Duration = Duration::from_millis(25);

/// What one million tokens cost on a route, in microunits (millionths of a USD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    pub input_microunits_per_mtok: u64,
    pub output_microunits_per_mtok: u64,
}

impl Price {
    /// The cost of `usage`, rounded up: a cap must never under-charge.
    pub fn cost(&self, usage: &Usage) -> u64 {
        let micro = u128::from(usage.input_tokens) * u128::from(self.input_microunits_per_mtok)
            + u128::from(usage.output_tokens) * u128::from(self.output_microunits_per_mtok);
        micro.div_ceil(1_000_000).min(u128::from(u64::MAX)) as u64
    }
}

/// Run-wide caps, checked before every attempt starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caps {
    pub max_tokens: Option<u64>,
    pub max_cost_microunits: Option<u64>,
}

/// How a drive of the run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    Succeeded,
    Failed,
    /// Waiting for decisions on these nodes.
    AwaitingApproval(Vec<String>),
    /// A run-wide cap is spent.
    BudgetPaused(BudgetPause),
    /// The operator stopped the run (`signal`); these nodes' attempts were
    /// in flight and are recorded as interrupted. The run is resumable.
    Interrupted {
        signal: i32,
        nodes: Vec<String>,
    },
}

/// Everything a drive needs that is not a port.
pub struct RunSettings {
    pub run_id: String,
    pub plan_id: String,
    pub concurrency: usize,
    pub caps: Caps,
    /// node id → prompt. Never recorded.
    pub prompts: std::collections::HashMap<String, String>,
    /// `Some(ordinal)` when this drive resumes the run.
    pub resume_ordinal: Option<u32>,
    /// Prices by `provider/model`; a route without one costs 0.
    pub prices: std::collections::HashMap<String, Price>,
    /// Capabilities the operator grants each node's gate plugin, by node id.
    pub gate_grants: std::collections::HashMap<String, Vec<String>>,
    /// The `audit.plan.created` payload, when the run has an audit plan.
    pub audit_plan: Option<serde_json::Value>,
}

/// An attempt in flight.
struct InFlight {
    node: usize,
    attempt: u32,
    round: u32,
    execution: u32,
    /// When the worker was dispatched, ms since the epoch (outputs older
    /// than this are stale).
    dispatched_ms: u64,
    workspace: PathBuf,
}

/// An attempt the controller has started and not yet recorded the end of:
/// what a stop records as interrupted.
#[derive(Debug, Clone, Copy)]
struct Open {
    attempt: u32,
    round: u32,
    execution: u32,
}

impl Open {
    fn of(flight: &InFlight) -> Open {
        Open {
            attempt: flight.attempt,
            round: flight.round,
            execution: flight.execution,
        }
    }
}

/// What a node task hands back to the controller.
enum Done {
    /// The worker's turn is over.
    Worked(InFlight, WorkReply),
    /// The attempt could not be staged: the worker never ran.
    Unstaged(InFlight, StageError),
    /// The judge decided.
    Judged(Box<JudgedAttempt>),
}

/// A judged attempt, with what the controller kept from its turn.
struct JudgedAttempt {
    flight: InFlight,
    judgement: Judgement,
    reply_digest: Option<String>,
    /// A worker failure the outputs may overrule (artifact completion).
    suppressed: Option<String>,
    /// Plugins the worker itself ran (a transform).
    plugins: Vec<PluginUse>,
    /// A subgraph's receipt: the child run it names goes into the record.
    child_run: Option<Value>,
    /// A router's pick from its worker's reply, when its outputs are judged.
    routed: Option<u32>,
}

/// What a succeeded node left for the nodes after it.
#[derive(Debug, Clone, Default)]
struct Produced {
    digests: Vec<String>,
    outputs: Vec<PublishedOutput>,
}

/// How an attempt ended, for the transitions that follow.
enum Ended {
    Succeeded {
        digests: Vec<String>,
        verdict: Option<Verdict>,
        route: Option<Route>,
        /// bl's additions to `node.succeeded` (outputs, plugins, routed).
        extra: Map<String, Value>,
        outputs: Vec<PublishedOutput>,
        /// A router's pick.
        routed: Option<u32>,
    },
    Failed(AttemptFailure),
}

impl Ended {
    /// Records that a router took `route` (its name in `node.succeeded`).
    fn take_route(&mut self, routes: &crate::schedule::Routes, route: u32) {
        if let Ended::Succeeded { extra, routed, .. } = self {
            extra.insert(
                "routed".into(),
                Value::from(routes.names[route as usize].clone()),
            );
            *routed = Some(route);
        }
    }

    fn succeeded(digests: Vec<String>, verdict: Option<Verdict>, route: Option<Route>) -> Ended {
        Ended::Succeeded {
            digests,
            verdict,
            route,
            extra: Map::new(),
            outputs: Vec::new(),
            routed: None,
        }
    }
}

struct Controller<'a, 'p> {
    schedule: &'a Schedule,
    settings: &'a RunSettings,
    ports: &'a mut Ports<'p>,
    machine: Machine,
    /// How each node's last attempt ended (for `node.succeeded`/`node.failed`).
    ended: Vec<Option<Ended>>,
    /// What each succeeded node produced (joins, publishes and consumers read it).
    produced: Vec<Produced>,
    /// Components already kept with the run.
    kept_components: HashSet<String>,
    tokens: u64,
    cost: u64,
    pause: Option<BudgetPause>,
    /// Subgraph nodes whose child run paused for approvals. Their attempts
    /// stay open.
    waiting: Vec<ChildWait>,
}

/// A subgraph node's open attempt whose child run paused, and the paths of
/// the approval nodes it waits on.
struct ChildWait {
    node: usize,
    attempt: u32,
    paths: Vec<String>,
}

/// Drives the run until it ends or pauses.
pub async fn drive(
    schedule: &Schedule,
    settings: &RunSettings,
    ports: &mut Ports<'_>,
) -> Result<RunEnd, RunError> {
    let mut c = Controller {
        schedule,
        settings,
        machine: Machine::new(schedule.spec.clone()),
        ended: (0..schedule.nodes.len()).map(|_| None).collect(),
        produced: vec![Produced::default(); schedule.nodes.len()],
        kept_components: HashSet::new(),
        tokens: 0,
        cost: 0,
        pause: None,
        waiting: Vec::new(),
        ports,
    };
    c.record(&events::run_created())?;
    c.record(&events::run_started())?;
    if let Some(plan) = &settings.audit_plan {
        c.record(&events::audit_plan_created(plan.clone()))?;
    }
    if let Some(ordinal) = settings.resume_ordinal {
        c.record(&events::run_resumed(ordinal))?;
    }
    let begun = c.machine.begin();
    c.apply(begun)?;
    // The run's opening lines are made durable at once (they name no
    // artifact): a tool that reads only the log, as bounded-loops' own do,
    // finds the run there from its first moment, not from its first sync.
    c.sync()?;
    // Node tasks: staging and the worker's turn, then the judge. A node
    // being judged still holds its slot, so at concurrency 1 nodes run one
    // after the other, as bounded-loops runs them.
    let mut running: JoinSet<Done> = JoinSet::new();
    let mut busy: HashMap<usize, Open> = HashMap::new();
    let concurrency = settings.concurrency.max(1);
    // Any error below ends the drive, but never by dropping the attempts in
    // flight: they are settled first (cargo's job queue ends so too).
    macro_rules! or_settle {
        ($drive:lifetime, $result:expr) => {
            match $result {
                Ok(value) => value,
                Err(error) => break $drive Some(error),
            }
        };
    }
    let failed: Option<RunError> = 'drive: loop {
        // No attempt starts once a stop was asked for.
        if let Some(signal) = c.ports.stop.requested() {
            return c.interrupt(signal, running, &busy, None).await;
        }
        // Start what may start, lowest plan position first.
        while c.pause.is_none() && running.len() < concurrency && c.ports.stop.requested().is_none()
        {
            let Some(node) = c.machine.first_ready().filter(|n| !busy.contains_key(n)) else {
                break;
            };
            match or_settle!('drive, c.dispatch(node)) {
                Some(Work::Turn(work)) => {
                    or_settle!('drive, c.ports.journal.flush());
                    busy.insert(node, Open::of(&work.0));
                    running.spawn(take_turn(
                        *work,
                        c.ports.stage.clone(),
                        c.ports.worker.clone(),
                        c.ports.stop.clone(),
                    ));
                }
                Some(Work::Judging(node, open, judging)) => {
                    busy.insert(node, open);
                    running.spawn(judging);
                }
                None => {}
            }
        }
        or_settle!('drive, c.ports.journal.flush());
        if running.is_empty() {
            break None;
        }
        let joined = tokio::select! {
            joined = running.join_next() => joined,
            () = tokio::time::sleep(STOP_POLL) => continue,
        };
        let Some(joined) = joined else {
            break None;
        };
        // A turn that ends after a stop was asked for was ended by it (or
        // raced it): it is interrupted, never judged a failure.
        if let Some(signal) = c.ports.stop.requested() {
            return c.interrupt(signal, running, &busy, Some(joined)).await;
        }
        let done = or_settle!('drive, joined.map_err(|e| RunError::Task(e.to_string())));
        match done {
            Done::Worked(flight, reply) => {
                let node = flight.node;
                match or_settle!('drive, c.worked(flight, reply)) {
                    Some(judging) => {
                        running.spawn(judging);
                    }
                    None => {
                        busy.remove(&node);
                    }
                }
            }
            Done::Unstaged(flight, error) => {
                busy.remove(&flight.node);
                or_settle!('drive, c.unstaged(flight, error));
            }
            Done::Judged(judged) => {
                busy.remove(&judged.flight.node);
                or_settle!('drive, c.judged(*judged));
            }
        }
    };
    if let Some(error) = failed {
        // What a later attempt reports cannot outrank the first error.
        // After a broken log or a diverged record nothing more is written.
        let may_record = !matches!(error, RunError::Journal(_) | RunError::Diverged(_));
        let _ = c.settle(running, Vec::new(), may_record).await;
        return Err(error);
    }
    c.sync()?;
    if let Some(pause) = c.pause.take() {
        return Ok(RunEnd::BudgetPaused(pause));
    }
    let failed_elsewhere = c
        .machine
        .states()
        .iter()
        .any(|s| matches!(s, NodeState::Failed(_)));
    // A wait still holds while its attempt is open (a repair may have
    // reset the node since, and run it to an end).
    let machine = &c.machine;
    c.waiting.retain(
        |w| matches!(machine.state(w.node), NodeState::Running { attempt } if attempt == w.attempt),
    );
    if !c.waiting.is_empty() && !failed_elsewhere {
        // Nothing else can move: the run pauses as it does at its own
        // approval nodes. The open attempts are taken up again by the
        // drive the decisions set off.
        let mut awaiting: Vec<String> = c
            .machine
            .states()
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == NodeState::AwaitingApproval)
            .map(|(i, _)| schedule.nodes[i].id.clone())
            .collect();
        awaiting.extend(c.waiting.iter().flat_map(|w| w.paths.clone()));
        return Ok(RunEnd::AwaitingApproval(awaiting));
    }
    let end = match c.machine.status() {
        RunStatus::Succeeded => {
            c.record(&events::run_succeeded())?;
            RunEnd::Succeeded
        }
        RunStatus::Paused => RunEnd::AwaitingApproval(
            c.machine
                .states()
                .iter()
                .enumerate()
                .filter(|(_, s)| **s == NodeState::AwaitingApproval)
                .map(|(i, _)| schedule.nodes[i].id.clone())
                .collect(),
        ),
        RunStatus::Failed | RunStatus::Running => {
            c.record(&events::run_failed())?;
            RunEnd::Failed
        }
    };
    c.sync()?;
    Ok(end)
}

/// A node task's second half: the judge at work.
type Judging = Pin<Box<dyn Future<Output = Done> + Send>>;

/// What `dispatch` hands a node task: the attempt, how to stage it, and
/// the request for its worker (`None`: no prompt was supplied).
type Turn = (InFlight, StageRequest, Option<WorkRequest>);

/// What `dispatch` starts: a worker's turn, or (on a resume) the judge of
/// a turn that finished before the run stopped.
enum Work {
    Turn(Box<Turn>),
    Judging(usize, Open, Judging),
}

/// A node task's first half: stage the attempt's workspace (verifying its
/// inputs), then let the worker take its turn there.
async fn take_turn(
    turn: Turn,
    stage: Arc<dyn Stage>,
    worker: Arc<dyn Worker>,
    stop: Arc<dyn Stop>,
) -> Done {
    let (mut flight, staging, request) = turn;
    // One hop to the blocking pool: the workspace, its inputs, and (for a
    // node judged by its outputs) the dispatch marker.
    let staged = tokio::task::spawn_blocking(move || {
        let (workspace, inputs) = stage.stage(&staging)?;
        let dispatched = if staging.marks_dispatch {
            stage.mark_dispatch(&workspace)
        } else {
            now_ms()
        };
        Ok((workspace, inputs, dispatched))
    })
    .await
    .unwrap_or_else(|e| Err(StageError::Io(format!("staging task: {e}"))));
    let (workspace, inputs) = match staged {
        Ok((workspace, inputs, dispatched)) => {
            flight.dispatched_ms = dispatched;
            (workspace, inputs)
        }
        Err(e) => return Done::Unstaged(flight, e),
    };
    flight.workspace = workspace.clone();
    let Some(mut request) = request else {
        return Done::Worked(
            flight,
            WorkReply::Fault("no prompt was supplied for this node".into()),
        );
    };
    if !request.outputs.is_empty() || !inputs.is_empty() {
        request
            .prompt
            .push_str(&artifact_brief(&inputs, &request.outputs));
    }
    request.workspace = workspace;
    request.inputs = inputs;
    // A stop while the workspace was staged: the worker never starts.
    if stop.requested().is_some() {
        return Done::Worked(
            flight,
            WorkReply::Fault("stopped before the worker started".into()),
        );
    }
    let waited = request.deadline + WORK_GRACE;
    let reply = match tokio::time::timeout(waited, worker.work(request)).await {
        Ok(reply) => reply,
        Err(_) => WorkReply::Fault(format!(
            "the worker sent no reply within the node's deadline and {}s of grace ({}s in all)",
            WORK_GRACE.as_secs(),
            waited.as_secs()
        )),
    };
    Done::Worked(flight, reply)
}

/// What an agent is told about its artifacts: the inputs it was handed and
/// the outputs it must write (the input manifest of seed 002, in words).
fn artifact_brief(inputs: &[StagedInput], outputs: &[OutputPort]) -> String {
    let mut text = String::from("\n\n---\n");
    if !inputs.is_empty() {
        text.push_str("Your inputs (read-only; each verified against its published sha256):\n");
        for i in inputs {
            text.push_str(&format!(
                "- {}: {} ({}, from {}.{}, {})\n",
                i.port, i.path, i.kind, i.from_node, i.from_port, i.digest
            ));
        }
    }
    if !outputs.is_empty() {
        text.push_str("Write these files; the node is judged by them, not by your reply:\n");
        for o in outputs {
            text.push_str(&format!("- {}: {} ({})\n", o.port, o.path, o.kind));
        }
    }
    text
}

impl Controller<'_, '_> {
    /// Group commit: artifacts first, then the events that name them.
    fn sync(&mut self) -> Result<(), RunError> {
        self.ports.artifacts.sync()?;
        self.ports.journal.sync()
    }

    fn record(&mut self, event: &Event) -> Result<(), RunError> {
        self.ports.journal.append(event)?;
        // Once a stop is asked, a second one may end the process at any
        // moment: each event reaches the file before it is shown, so a
        // stopped run never showed what its log does not hold (a ✓).
        if self.ports.stop.requested().is_some() {
            self.ports.journal.flush()?;
        }
        (self.ports.observer)(event);
        Ok(())
    }

    fn info(&self, node: usize) -> &NodeInfo {
        &self.schedule.nodes[node]
    }

    fn at(&self, node: usize, attempt: u32) -> At<'_> {
        At {
            node: &self.schedule.nodes[node].id,
            attempt,
            round: self.machine.round(),
        }
    }

    /// The operator stopped the run: every attempt in flight is recorded as
    /// interrupted at once (a second signal may end the process before the
    /// tasks return), then the tasks are awaited as their workers end their
    /// processes, keeping the spend of any turn that still came back.
    async fn interrupt(
        &mut self,
        signal: i32,
        running: JoinSet<Done>,
        open: &HashMap<usize, Open>,
        first: Option<Result<Done, tokio::task::JoinError>>,
    ) -> Result<RunEnd, RunError> {
        let mut interrupted: Vec<(usize, Open)> = open.iter().map(|(n, o)| (*n, *o)).collect();
        interrupted.sort_by_key(|(node, _)| *node);
        for (node, attempt) in &interrupted {
            let id = self.info(*node).id.clone();
            let at = At {
                node: &id,
                attempt: attempt.attempt,
                round: attempt.round,
            };
            let event = at.interrupted(attempt.execution, signal);
            self.ports.journal.annex(&event)?;
            (self.ports.observer)(&event);
        }
        self.sync()?;
        self.ports.stop.recorded();
        // What still comes back is kept where it is whole: a turn that
        // finished (its reply, then its judgement) is recorded as it ended,
        // so no finished, paid-for turn is made again. A failure that comes
        // back now may be the stop's doing: it stays interrupted.
        if let Some(error) = self
            .settle(running, first.into_iter().collect(), true)
            .await
        {
            return Err(error);
        }
        let still: Vec<String> = interrupted
            .iter()
            .filter(|(node, _)| matches!(self.machine.state(*node), NodeState::Running { .. }))
            .map(|(node, _)| self.info(*node).id.clone())
            .collect();
        Ok(RunEnd::Interrupted {
            signal,
            nodes: still,
        })
    }

    /// Waits for every attempt still in flight and keeps what comes back
    /// whole: a finished turn (its reply, then its judgement) is recorded
    /// as it ended, so no finished, paid-for turn is made again. A failure
    /// that comes back now may be the stop's (or the error's) doing: it is
    /// left for the resume. Once recording fails (or when it may not), the
    /// rest are only awaited. Returns the first error met while recording.
    async fn settle(
        &mut self,
        mut running: JoinSet<Done>,
        mut finished: Vec<Result<Done, tokio::task::JoinError>>,
        may_record: bool,
    ) -> Option<RunError> {
        let mut failed: Option<RunError> = None;
        let mut recording = may_record;
        loop {
            for done in finished.drain(..) {
                if !recording {
                    continue;
                }
                let kept = match done {
                    Ok(Done::Worked(flight, reply @ WorkReply::Reply { .. })) => {
                        self.worked(flight, reply).map(|judging| {
                            if let Some(judging) = judging {
                                running.spawn(judging);
                            }
                        })
                    }
                    Ok(Done::Judged(judged))
                        if matches!(judged.judgement.decision, Ruling::Pass(_)) =>
                    {
                        self.judged(*judged)
                    }
                    _ => Ok(()),
                };
                if let Err(error) = kept {
                    recording = false;
                    failed.get_or_insert(error);
                }
            }
            match running.join_next().await {
                Some(done) => finished.push(done),
                None => break,
            }
        }
        if recording && let Err(error) = self.sync() {
            failed.get_or_insert(error);
        }
        failed
    }

    /// Checks the run-wide caps before `node`'s next attempt; a spent cap
    /// pauses the run (after `node.ready`, as bounded-loops records it).
    fn over_budget(&mut self, node: usize, attempt: u32) -> Result<bool, RunError> {
        let caps = self.settings.caps;
        let tokens_spent = caps.max_tokens.is_some_and(|m| self.tokens >= m);
        let cost_spent = caps.max_cost_microunits.is_some_and(|m| self.cost >= m);
        if !tokens_spent && !cost_spent {
            return Ok(false);
        }
        let reason = if tokens_spent {
            format!(
                "this run token budget is spent: {} of {} consumed, so no further attempt may start",
                self.tokens,
                caps.max_tokens.unwrap_or_default()
            )
        } else {
            format!(
                "this run cost budget is spent: {} of {} microunits consumed, so no further attempt may start",
                self.cost,
                caps.max_cost_microunits.unwrap_or_default()
            )
        };
        let pause = BudgetPause {
            node: self.info(node).id.clone(),
            attempt,
            tokens: self.tokens,
            cost_microunits: self.cost,
            max_tokens: caps.max_tokens,
            max_cost_microunits: caps.max_cost_microunits,
            reason,
        };
        if attempt == 1 {
            let ready = self.at(node, attempt).ready();
            self.record(&ready)?;
        }
        self.record(&events::budget_paused(&pause))?;
        self.pause = Some(pause);
        Ok(true)
    }

    /// Starts `node`'s next attempt. Returns the work to run, or `None`
    /// when the attempt ended without a worker (a denial, a join, a
    /// publish, or an outcome already recorded).
    fn dispatch(&mut self, node: usize) -> Result<Option<Work>, RunError> {
        let info = self.info(node).clone();
        let next_attempt = self.machine.attempts(node) + 1;
        if info.runs_work() && self.over_budget(node, next_attempt)? {
            return Ok(None);
        }
        let started = self
            .machine
            .start(node)
            .map_err(|e| RunError::Diverged(e.to_string()))?;
        let Some(&Transition::Started { attempt, round, .. }) = started.first() else {
            // An approval node: it waits (or takes a decision on record).
            self.apply(started)?;
            return Ok(None);
        };
        let at = At {
            node: &info.id,
            attempt,
            round,
        };
        if attempt == 1 {
            self.record(&at.ready())?;
            self.record(&at.starting())?;
        }
        // Policy, decided before anything runs.
        let denied = match &info.driver {
            Driver::Worker | Driver::Publish { .. } => {
                info.shared_binding || (info.network_effect && !info.via_broker())
            }
            Driver::Unsupported(_) => true,
            _ => false,
        };
        if denied {
            let reason = match (&info.driver, &info.hazard) {
                (Driver::Unsupported(why), _) => why.clone(),
                // bounded-loops' words, then (bl's) which rule and the fix.
                (_, Some(why)) => format!("{POLICY_DENIED}: {why}"),
                (_, None) => POLICY_DENIED.to_string(),
            };
            self.end(
                node,
                Ended::Failed(stop(Cause::PolicyDenied, reason)),
                round,
            )?;
            return Ok(None);
        }
        let started_before = self.ports.journal.recorded(&at.running().key).is_some();
        self.record(&at.running())?;
        match &info.driver {
            Driver::Join(_) => {
                self.run_join(node, attempt, round)?;
                return Ok(None);
            }
            Driver::Publish { policy } => {
                self.run_publish(node, attempt, round, policy)?;
                return Ok(None);
            }
            Driver::Router if info.gate.is_none() => {
                self.run_default_route(node, attempt, round)?;
                return Ok(None);
            }
            Driver::Approval | Driver::Unsupported(_) => unreachable!("never ready or denied"),
            _ => {}
        }
        // A resumed run: the attempt's outcome may be recorded already.
        // Executions 1..=prior+1 ran before; what each paid is counted.
        let prior = self.redrives(&at);
        let mut execution = 1;
        if started_before {
            for run in 1..=prior + 1 {
                let spend = self.ports.journal.recorded(&at.spend(run, None).key);
                if let Some(u) = spend.as_ref().and_then(usage_of) {
                    self.tokens += u.input_tokens + u.output_tokens;
                    self.cost += u.cost_microunits;
                }
            }
        }
        if let Some(ended) = self.recorded_outcome(&info, attempt, round) {
            self.end(node, ended, round)?;
            return Ok(None);
        }
        if started_before {
            // Started before, never ended: a stop interrupted it (on record),
            // or its controller died (nothing on record). Only the deaths
            // count against the re-drives, and only those of an execution
            // that ran the worker: one that judged a finished turn again
            // took no turn, and the turn it judges is still there to judge.
            let recorded = |key: String| self.ports.journal.recorded(&key).is_some();
            let crashed = (1..=prior + 1)
                .filter(|&e| {
                    let judged_again =
                        recorded(at.replied_key(e)) && !recorded(at.spend(e, None).key);
                    let paused = recorded(at.child_awaiting_approval_key(e));
                    !recorded(at.interrupted(e, 0).key) && !judged_again && !paused
                })
                .count() as u32;
            if crashed > MAX_REDRIVES {
                let reason = format!(
                    "the attempt's controller died {crashed} times before it ended, and it is not re-driven again"
                );
                self.end(node, Ended::Failed(stop(Cause::WorkerFault, reason)), round)?;
                return Ok(None);
            }
            self.record(&at.redrive(prior + 1))?;
            execution = prior + 2;
            // The last execution's worker finished its turn and only its
            // judge was cut short: that turn is judged again, not paid for
            // again.
            let open = Open {
                attempt,
                round,
                execution,
            };
            if let Some(judged) = self.judge_again(node, open, prior + 1)? {
                return Ok(judged.map(|judging| Work::Judging(node, open, judging)));
            }
        }
        let task = match &info.driver {
            Driver::Worker => Task::Connector,
            Driver::Probe => Task::Probe,
            Driver::Transform { plugin, major } => Task::Transform {
                plugin: plugin.clone(),
                major: *major,
                config: info.config.clone(),
            },
            Driver::Tool { argv } => Task::Command { argv: argv.clone() },
            Driver::Loop { package } => Task::Loop {
                package: package.clone(),
            },
            Driver::Subgraph { package } => Task::Subgraph {
                package: package.clone(),
            },
            _ => Task::Route,
        };
        // An agent never runs without a prompt; the other kinds take none.
        let prompt = match task {
            Task::Connector => self.settings.prompts.get(&info.id).cloned(),
            _ => Some(
                self.settings
                    .prompts
                    .get(&info.id)
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        // Every required input must have been published (the machine
        // starts a consumer only after its producers succeeded; this holds
        // the line should a producer succeed without its output).
        let inputs = self.inputs_of(node);
        if let Some(missing) = info
            .inputs
            .iter()
            .find(|i| i.required && !inputs.iter().any(|s| s.port == i.port))
        {
            let producer = self.info(missing.from);
            let reason = format!(
                "input {}.{}: {}.{} published nothing (it is {}), so '{}' is not started",
                info.id,
                missing.port,
                producer.id,
                missing.from_port,
                self.machine.state(missing.from).name(),
                info.id
            );
            self.end(
                node,
                Ended::Failed(stop(Cause::ArtifactUnverified, reason)),
                round,
            )?;
            return Ok(None);
        }
        let staging = StageRequest {
            node_id: info.id.clone(),
            attempt,
            execution,
            round,
            inputs,
            transform: matches!(task, Task::Transform { .. }),
            marks_dispatch: !info.outputs.is_empty(),
        };
        let request = prompt.map(|prompt| WorkRequest {
            run_id: self.settings.run_id.clone(),
            node_id: info.id.clone(),
            attempt,
            execution,
            round,
            prompt,
            binding: info.binding.clone(),
            transport: Transport::of(&task, info.binding.as_ref()),
            task,
            isolation: info.isolation,
            deadline: info.deadline,
            workspace: PathBuf::new(),
            inputs: Vec::new(),
            outputs: info.outputs.clone(),
        });
        Ok(Some(Work::Turn(Box::new((
            InFlight {
                node,
                attempt,
                round,
                execution,
                dispatched_ms: 0,
                workspace: PathBuf::new(),
            },
            staging,
            request,
        )))))
    }

    /// Gates again, as execution `open`, the turn execution `last` of the
    /// same attempt finished, when the record shows its judge was asked
    /// and never answered, and its reply and workspace are still there.
    /// `None`: there is no such turn (the worker takes a new one);
    /// `Some(None)`: the attempt ended on its reply alone.
    fn judge_again(
        &mut self,
        node: usize,
        open: Open,
        last: u32,
    ) -> Result<Option<Option<Judging>>, RunError> {
        let at = At {
            node: &self.info(node).id,
            attempt: open.attempt,
            round: open.round,
        };
        let Some(turn) = self
            .ports
            .journal
            .recorded(&at.replied_key(last))
            .as_ref()
            .and_then(FinishedTurn::of)
        else {
            return Ok(None);
        };
        let workspace = PathBuf::from(&turn.workspace);
        if !self.ports.stage.kept(at.node, &workspace) {
            return Ok(None);
        }
        let bytes = match &turn.reply_digest {
            Some(digest) => match self.ports.artifacts.get(digest) {
                Ok(bytes) => bytes,
                Err(_) => return Ok(None),
            },
            None => Vec::new(),
        };
        let flight = InFlight {
            node,
            attempt: open.attempt,
            round: open.round,
            execution: open.execution,
            dispatched_ms: turn.dispatched_ms,
            workspace,
        };
        let again = self.replied_event(&flight, &turn);
        (self.ports.observer)(&again);
        self.gate(flight, bytes, Vec::new(), turn.worker_fault)
            .map(Some)
    }

    fn replied_event(&self, flight: &InFlight, turn: &FinishedTurn) -> Event {
        At {
            node: &self.info(flight.node).id,
            attempt: flight.attempt,
            round: flight.round,
        }
        .replied(flight.execution, turn)
    }

    /// The inputs `node` is handed: each bound producer's published output
    /// with the digest its success recorded.
    fn inputs_of(&self, node: usize) -> Vec<InputToStage> {
        self.info(node)
            .inputs
            .iter()
            .filter_map(|input| {
                let producer = self.info(input.from);
                let published = self.produced[input.from]
                    .outputs
                    .iter()
                    .find(|o| o.port == input.from_port)?;
                Some(InputToStage {
                    port: input.port.clone(),
                    from_node: producer.id.clone(),
                    from_port: input.from_port.clone(),
                    source: published.path.clone(),
                    digest: published.digest.clone(),
                    kind: published.kind.clone(),
                    system_only: published.system_only,
                })
            })
            .collect()
    }

    /// The artifacts `node`'s parents produced, in edge order (what an
    /// approval is about).
    fn parent_artifacts(&self, node: usize) -> Vec<String> {
        self.info(node)
            .incoming
            .iter()
            .flat_map(|&(from, _)| self.produced[from].digests.iter().cloned())
            .collect()
    }

    fn redrives(&self, at: &At) -> u32 {
        (1..)
            .take_while(|r| self.ports.journal.recorded(&at.redrive(*r).key).is_some())
            .count() as u32
    }

    /// The recorded end of an attempt, when a previous drive recorded one.
    fn recorded_outcome(&self, info: &NodeInfo, attempt: u32, round: u32) -> Option<Ended> {
        let at = At {
            node: &info.id,
            attempt,
            round,
        };
        if let Some(p) = self
            .ports
            .journal
            .recorded(&at.succeeded(&[], None, None).key)
        {
            let recorded = success_of(&p);
            let routed = recorded
                .routed
                .as_deref()
                .and_then(|name| info.routes.as_ref()?.index(name));
            return Some(Ended::Succeeded {
                digests: recorded.digests,
                verdict: recorded.verdict,
                route: info.route(),
                extra: recorded.extra,
                outputs: PublishedOutput::recorded_in(&p),
                routed,
            });
        }
        let probe = stop(Cause::WorkerFault, String::new());
        if let Some(p) = self.ports.journal.recorded(&at.attempt_failed(&probe).key) {
            return failure_of(&p).map(Ended::Failed);
        }
        let p = self.ports.journal.recorded(&at.failed(&probe, false).key)?;
        failure_of(&p).map(Ended::Failed)
    }

    /// A worker's turn is over: record the spend at once, then gate. Returns
    /// the judge's task when the node is judged from its workspace.
    fn worked(&mut self, flight: InFlight, reply: WorkReply) -> Result<Option<Judging>, RunError> {
        let info = self.info(flight.node).clone();
        let at = At {
            node: &info.id,
            attempt: flight.attempt,
            round: flight.round,
        };
        if let WorkReply::AwaitingApproval(awaiting) = &reply {
            return self.child_paused(flight, awaiting);
        }
        let usage = match &reply {
            WorkReply::Reply { usage, .. } => usage.map(|mut u| {
                if let Some(price) = info.binding.as_ref().and_then(|b| {
                    self.settings
                        .prices
                        .get(&format!("{}/{}", b.provider_id, b.model_target))
                }) {
                    u.cost_microunits = price.cost(&u);
                }
                u
            }),
            _ => None,
        };
        let mut spend = at.spend(flight.execution, usage);
        if let WorkReply::Reply { reported_by, .. } = &reply {
            At::spend_reported_by(&mut spend, reported_by);
        }
        self.record(&spend)?;
        if let Some(u) = usage {
            self.tokens += u.input_tokens + u.output_tokens;
            self.cost += u.cost_microunits;
        }
        let (bytes, plugins, suppressed) = match reply {
            // Seed 002: a worker that failed may still have left every
            // declared output; the judge decides from them.
            WorkReply::Fault(detail) if !info.outputs.is_empty() => {
                (Vec::new(), Vec::new(), Some(detail))
            }
            WorkReply::Fault(detail) => {
                self.end(
                    flight.node,
                    Ended::Failed(worker_fault(&detail)),
                    flight.round,
                )?;
                return Ok(None);
            }
            WorkReply::Contract(reason) => {
                let reason = format!("local-CLI node '{}': {reason}", info.id);
                self.end(
                    flight.node,
                    Ended::Failed(stop(Cause::WorkerContract, reason)),
                    flight.round,
                )?;
                return Ok(None);
            }
            WorkReply::Denied(reason) => {
                self.end(
                    flight.node,
                    Ended::Failed(stop(Cause::PolicyDenied, reason)),
                    flight.round,
                )?;
                return Ok(None);
            }
            WorkReply::Reply { .. } if info.max_tokens.is_some() && usage.is_none() => {
                let failure = stop(
                    Cause::BudgetUnmeasurable,
                    format!(
                        "node '{}' declares a tokens budget but its worker does not report tokens, so the spend cannot be metered; either remove that budget or bind the node to a worker that reports it",
                        info.id
                    ),
                );
                self.end(flight.node, Ended::Failed(failure), flight.round)?;
                return Ok(None);
            }
            WorkReply::ApprovalRejected(_) if !matches!(info.driver, Driver::Subgraph { .. }) => {
                return self.not_a_child_run(&flight, &info.id, "a person rejected an approval");
            }
            WorkReply::ApprovalRejected(reason) => {
                let failure = stop(Cause::ApprovalRejected, reason);
                self.end(flight.node, Ended::Failed(failure), flight.round)?;
                return Ok(None);
            }
            WorkReply::Reply { bytes, plugins, .. } => (bytes, plugins, None),
            WorkReply::AwaitingApproval(_) => unreachable!("handled before the spend"),
        };
        self.gate(flight, bytes, plugins, suppressed)
    }

    /// A subgraph node's child run paused for approvals: the attempt stays
    /// open, on record as waiting (not a failure, not a crash), and the
    /// run pauses once nothing else can move. Only a child run pauses so:
    /// any other worker that says it waits breaks its contract.
    fn child_paused(
        &mut self,
        flight: InFlight,
        awaiting: &[String],
    ) -> Result<Option<Judging>, RunError> {
        let info = self.info(flight.node).clone();
        if !matches!(info.driver, Driver::Subgraph { .. }) || awaiting.is_empty() {
            return self.not_a_child_run(&flight, &info.id, "it awaits approvals");
        }
        let paths: Vec<String> = awaiting
            .iter()
            .map(|path| format!("{}/{path}", info.id))
            .collect();
        let at = At {
            node: &info.id,
            attempt: flight.attempt,
            round: flight.round,
        };
        let event = at.child_awaiting_approval(flight.execution, &paths);
        self.ports.journal.annex(&event)?;
        (self.ports.observer)(&event);
        // A node has one open attempt: an older wait of its is over.
        self.waiting.retain(|w| w.node != flight.node);
        self.waiting.push(ChildWait {
            node: flight.node,
            attempt: flight.attempt,
            paths,
        });
        Ok(None)
    }

    /// A worker that is no subgraph's said what only a child run may: it
    /// broke its contract.
    fn not_a_child_run(
        &mut self,
        flight: &InFlight,
        id: &str,
        said: &str,
    ) -> Result<Option<Judging>, RunError> {
        let reason =
            format!("node '{id}': its worker says {said}, which only a subgraph's child run may");
        let failure = stop(Cause::WorkerContract, reason);
        self.end(flight.node, Ended::Failed(failure), flight.round)?;
        Ok(None)
    }

    /// Gates a finished turn: the reply's own ruling first, then (for a
    /// node judged from its workspace) the judge's task. Before the judge
    /// is asked, the turn is marked on record (`node.replied`), so a
    /// resume after a stop or a crash judges it again instead of paying
    /// for another turn.
    fn gate(
        &mut self,
        flight: InFlight,
        bytes: Vec<u8>,
        plugins: Vec<PluginUse>,
        suppressed: Option<String>,
    ) -> Result<Option<Judging>, RunError> {
        let info = self.info(flight.node).clone();
        let at = At {
            node: &info.id,
            attempt: flight.attempt,
            round: flight.round,
        };
        self.record(&at.gating())?;
        let reply_digest = match suppressed {
            Some(_) => None,
            None => Some(self.ports.artifacts.put(
                &bytes,
                reply_media_type(&info),
                flight.attempt,
            )?),
        };
        let digests: Vec<String> = reply_digest.iter().cloned().collect();
        // What the reply itself shows, ruled on by the judge before anything
        // else looks.
        let ruling = if suppressed.is_some() {
            ReplyRuling::WorkspaceOnly
        } else {
            let check = ReplyCheck::for_node(&info);
            self.ports.judge.rule_on_reply(&ReplyRequest {
                node_id: &info.id,
                attempt: flight.attempt,
                round: flight.round,
                check: &check,
                reply: &bytes,
                reply_digest: reply_digest.as_deref(),
            })
        };
        let reply_route = match ruling {
            ReplyRuling::Reject(verdict) => {
                let failure = AttemptFailure {
                    cause: Cause::GateRejected,
                    reason: "independent gate rejected output".into(),
                    verdict: Some(verdict),
                    artifact_digests: digests,
                    extra: plugins_extra(&plugins),
                };
                self.keep_components(&plugins, flight.attempt)?;
                self.end(flight.node, Ended::Failed(failure), flight.round)?;
                return Ok(None);
            }
            ReplyRuling::Pass { verdict, route } if !info.judged() => {
                self.keep_components(&plugins, flight.attempt)?;
                let mut ended = Ended::succeeded(digests, Some(verdict), info.route());
                if let Ended::Succeeded { extra, .. } = &mut ended {
                    extra.extend(plugins_extra(&plugins));
                    if matches!(info.driver, Driver::Loop { .. }) {
                        extra.insert("isolation".into(), isolation_controls(info.isolation));
                    }
                }
                if let (Some(route), Some(routes)) = (route, &info.routes) {
                    ended.take_route(routes, route);
                }
                self.end(flight.node, ended, flight.round)?;
                return Ok(None);
            }
            ReplyRuling::Pass { route, .. } => route,
            ReplyRuling::WorkspaceOnly => None,
        };
        let request = JudgeRequest {
            node_id: info.id.clone(),
            attempt: flight.attempt,
            round: flight.round,
            workspace: flight.workspace.clone(),
            dispatched_ms: flight.dispatched_ms,
            outputs: info.outputs.clone(),
            gate: info.gate.clone(),
            grants: self
                .settings
                .gate_grants
                .get(&info.id)
                .cloned()
                .unwrap_or_default(),
            subgraph_receipt: matches!(info.driver, Driver::Subgraph { .. }).then(|| bytes.clone()),
            routes: info.routes.clone(),
        };
        let child_run = request
            .subgraph_receipt
            .as_deref()
            .and_then(|r| serde_json::from_slice::<Value>(r).ok())
            .map(|r| {
                json!({
                    "head_hash": r["head_hash"], "head_sequence": r["head_sequence"],
                    "path": r["child_run"], "run_state": r["run_state"],
                })
            });
        // A transform's turn keeps the component it ran, which is not on
        // record until it ends: it is cheap, and simply runs again.
        if plugins.is_empty() {
            let turn = FinishedTurn {
                reply_digest: reply_digest.clone(),
                worker_fault: suppressed.clone(),
                dispatched_ms: flight.dispatched_ms,
                workspace: flight.workspace.to_string_lossy().into_owned(),
            };
            let replied = self.replied_event(&flight, &turn);
            self.ports.journal.annex(&replied)?;
            // On disk before the judge starts: a controller killed while
            // it judges leaves the mark for the resume.
            self.ports.journal.flush()?;
        }
        let judge = self.ports.judge.clone();
        Ok(Some(Box::pin(async move {
            let judgement = judge.judge(request).await;
            Done::Judged(Box::new(JudgedAttempt {
                flight,
                judgement,
                reply_digest,
                suppressed,
                plugins,
                child_run,
                routed: reply_route,
            }))
        })))
    }

    /// Keeps each plugin component with the run (once), so `bl verify` can
    /// check the digests the events name.
    fn keep_components(&mut self, plugins: &[PluginUse], attempt: u32) -> Result<(), RunError> {
        for p in plugins {
            if self.kept_components.insert(p.component_digest.clone()) {
                let digest = self
                    .ports
                    .artifacts
                    .put(&p.component, "application/wasm", attempt)?;
                if digest != p.component_digest {
                    return Err(RunError::Artifacts(format!(
                        "plugin {} was recorded as {} but its bytes are {digest}",
                        p.plugin, p.component_digest
                    )));
                }
            }
        }
        Ok(())
    }

    /// The judge decided: publish what passed, record how it ended.
    fn judged(&mut self, judged: JudgedAttempt) -> Result<(), RunError> {
        let JudgedAttempt {
            flight,
            judgement,
            reply_digest,
            suppressed,
            mut plugins,
            child_run,
            routed: reply_route,
        } = judged;
        let info = self.info(flight.node).clone();
        plugins.extend(judgement.plugins.iter().cloned());
        self.keep_components(&plugins, flight.attempt)?;
        let mut digests: Vec<String> = reply_digest.iter().cloned().collect();
        let mut extra = plugins_extra(&plugins);
        let verdict = |passed: bool, reason: &str| Verdict {
            passed,
            reason: reason.to_string(),
            evidence_digest: judgement.evidence_digest.clone(),
        };
        let ended = match &judgement.decision {
            Ruling::Pass(reason) => {
                for output in &judgement.published {
                    let digest = self.ports.artifacts.put(
                        &output.bytes,
                        media_type_of(&output.kind),
                        flight.attempt,
                    )?;
                    if digest != output.digest {
                        return Err(RunError::Artifacts(format!(
                            "{}: published as {} but stored as {digest}",
                            output.path, output.digest
                        )));
                    }
                    digests.push(digest);
                }
                if let Some(detail) = &suppressed {
                    let at = self.at(flight.node, flight.attempt);
                    let contracts = serde_json::to_value(&judgement.contracts).unwrap_or_default();
                    let event = at.artifact_completion(detail, &judgement.checked, contracts);
                    self.record(&event)?;
                }
                if let Some(child) = child_run {
                    extra.insert("child_run".into(), child);
                }
                if !judgement.published.is_empty() {
                    extra.insert(
                        "outputs".into(),
                        Value::Array(
                            judgement
                                .published
                                .iter()
                                .map(PublishedOutput::to_json)
                                .collect(),
                        ),
                    );
                }
                // A gated router's pick is the judge's; an ungated one's, its
                // worker's reply.
                let routed = info.routes.as_ref().and(judgement.route.or(reply_route));
                let mut reason = reason.clone();
                if let (Some(route), Some(routes)) = (routed, &info.routes) {
                    let name = &routes.names[route as usize];
                    reason = format!("router '{}' took route '{name}': {reason}", info.id);
                }
                let outputs = judgement
                    .published
                    .iter()
                    .map(|o| PublishedOutput {
                        bytes: Vec::new(),
                        ..o.clone()
                    })
                    .collect();
                let mut ended = Ended::Succeeded {
                    digests,
                    verdict: Some(verdict(true, &reason)),
                    route: info.route(),
                    extra,
                    outputs,
                    routed: None,
                };
                if let (Some(route), Some(routes)) = (routed, &info.routes) {
                    ended.take_route(routes, route);
                }
                ended
            }
            Ruling::Reject(reason) => Ended::Failed(match &suppressed {
                Some(detail) => AttemptFailure {
                    verdict: Some(verdict(false, reason)),
                    artifact_digests: digests,
                    extra,
                    ..worker_fault(detail)
                },
                None => AttemptFailure {
                    cause: Cause::GateRejected,
                    reason: "independent gate rejected output".into(),
                    verdict: Some(verdict(false, reason)),
                    artifact_digests: digests,
                    extra,
                },
            }),
            Ruling::ContractBroken(reason) => Ended::Failed(AttemptFailure {
                cause: Cause::WorkerContract,
                reason: reason.clone(),
                verdict: Some(verdict(false, reason)),
                artifact_digests: digests,
                extra,
            }),
            Ruling::Broken(reason) => Ended::Failed(AttemptFailure {
                cause: Cause::GateBroken,
                reason: format!("the gate could not decide: {reason}"),
                verdict: None,
                artifact_digests: digests,
                extra,
            }),
        };
        self.end(flight.node, ended, flight.round)
    }

    /// The attempt could not be staged: a changed input stops the run; a
    /// workspace that could not be made is the worker's fault.
    fn unstaged(&mut self, flight: InFlight, error: StageError) -> Result<(), RunError> {
        let failure = match error {
            StageError::Integrity(reason) => stop(Cause::ArtifactUnverified, reason),
            StageError::Io(detail) => worker_fault(&format!(
                "the attempt's workspace could not be made: {detail}"
            )),
        };
        self.end(flight.node, Ended::Failed(failure), flight.round)
    }

    /// A router with no connection and no gate takes its default route.
    fn run_default_route(&mut self, node: usize, attempt: u32, round: u32) -> Result<(), RunError> {
        let info = self.info(node).clone();
        self.record_inline_turn(&info.id, attempt, round)?;
        let routes = info.routes.clone().unwrap_or(crate::schedule::Routes {
            names: Vec::new(),
            default: 0,
            leads: Vec::new(),
        });
        let Some(name) = routes.names.get(routes.default as usize).cloned() else {
            let failure = stop(
                Cause::PolicyDenied,
                format!("router '{}' has no routes", info.id),
            );
            return self.end(node, Ended::Failed(failure), round);
        };
        let mut ended = Ended::succeeded(
            Vec::new(),
            Some(Verdict {
                passed: true,
                reason: format!(
                    "router '{}' took its default route '{name}': it has no connection and no gate to pick another",
                    info.id
                ),
                evidence_digest: None,
            }),
            None,
        );
        ended.take_route(&routes, routes.default);
        self.end(node, ended, round)
    }

    /// Records how an attempt ended and feeds the machine.
    fn end(&mut self, node: usize, ended: Ended, round: u32) -> Result<(), RunError> {
        let (end, route) = match &ended {
            Ended::Succeeded { routed, .. } => (AttemptEnd::Succeeded, *routed),
            Ended::Failed(f) if f.cause.retryable() => (AttemptEnd::Rejected, None),
            Ended::Failed(_) => (AttemptEnd::Stopped, None),
        };
        if let (Ended::Failed(f), AttemptEnd::Rejected) = (&ended, end) {
            let attempt = match self.machine.state(node) {
                NodeState::Running { attempt } => attempt,
                _ => 1,
            };
            let event = self.at(node, attempt).attempt_failed(f);
            self.record(&event)?;
        }
        self.ended[node] = Some(ended);
        let transitions = self
            .machine
            .finish_routed(node, round, end, route)
            .map_err(|e| RunError::Diverged(e.to_string()))?;
        self.apply(transitions)
    }

    /// Records the machine's transitions as events, and answers the
    /// approvals that now wait with the decisions on record.
    fn apply(&mut self, transitions: Vec<Transition>) -> Result<(), RunError> {
        let mut queue: std::collections::VecDeque<Transition> = transitions.into();
        while let Some(t) = queue.pop_front() {
            match t {
                Transition::Started { .. }
                | Transition::Retrying { .. }
                | Transition::Halted { .. } => {}
                Transition::Succeeded {
                    node,
                    attempt,
                    round,
                } => {
                    let id = self.info(node).id.clone();
                    let at = At {
                        node: &id,
                        attempt,
                        round,
                    };
                    let event = match self.ended[node].take() {
                        Some(Ended::Succeeded {
                            digests,
                            verdict,
                            route,
                            extra,
                            outputs,
                            routed: _,
                        }) => {
                            let e = at.succeeded_with(
                                &digests,
                                route.as_ref(),
                                verdict.as_ref(),
                                &extra,
                            );
                            self.produced[node] = Produced { digests, outputs };
                            e
                        }
                        _ => at.succeeded(&[], None, None),
                    };
                    self.record(&event)?;
                }
                Transition::Failed {
                    node,
                    attempt,
                    round,
                    ..
                } => {
                    let id = self.info(node).id.clone();
                    let max = self.info(node).max_attempts;
                    let failure = match self.ended[node].take() {
                        Some(Ended::Failed(f)) => f,
                        _ => stop(Cause::WorkerFault, "worker execution failed".into()),
                    };
                    let attempt = attempt.max(1);
                    let exhausted = max > 1 && attempt >= max && failure.cause.retryable();
                    let at = At {
                        node: &id,
                        attempt,
                        round,
                    };
                    let event = at.failed(&failure, exhausted);
                    self.record(&event)?;
                }
                Transition::Skipped { node, round } => {
                    let reason = self.skip_reason(node);
                    let event = At::skipped(&self.info(node).id.clone(), round, &reason);
                    self.record(&event)?;
                }
                Transition::AwaitingApproval { node, round } => {
                    let id = self.info(node).id.clone();
                    let at = At {
                        node: &id,
                        attempt: 1,
                        round,
                    };
                    self.record(&at.ready())?;
                    self.record(&at.awaiting_approval())?;
                    let evidence = self.parent_artifacts(node);
                    if let Some(approved) = self.ports.decisions.decision(&id, round, &evidence) {
                        if !approved {
                            self.ended[node] = Some(Ended::Failed(stop(
                                Cause::ApprovalRejected,
                                "human approval was rejected".into(),
                            )));
                        }
                        let more = self
                            .machine
                            .decide(node, approved)
                            .map_err(|e| RunError::Diverged(e.to_string()))?;
                        queue.extend(more);
                    }
                }
                Transition::Approved { node, round } => {
                    let id = self.info(node).id.clone();
                    let at = At {
                        node: &id,
                        attempt: 1,
                        round,
                    };
                    self.record(&at.succeeded(&[], None, None))?;
                }
                Transition::Rejected { .. } => {}
                Transition::RepairRound {
                    round,
                    trigger,
                    target,
                } => {
                    let e = events::repair_round(
                        round,
                        &self.info(trigger).id.clone(),
                        &self.info(target).id.clone(),
                    );
                    self.record(&e)?;
                }
                Transition::Repaired { node, round, left } => {
                    let e = At::repaired(&self.info(node).id.clone(), round, left.name());
                    self.record(&e)?;
                }
            }
        }
        Ok(())
    }

    /// `branch not taken: <source> is <STATE> (guard '<when>')`, for each
    /// guarded edge, joined with `; ` (as bounded-loops words it).
    fn skip_reason(&self, node: usize) -> String {
        let missed: Vec<String> = self
            .info(node)
            .incoming
            .iter()
            .filter_map(|&(from, guard)| {
                let state = self.machine.state(from);
                if let (Some(routes), Some(picked), NodeState::Succeeded) =
                    (&self.info(from).routes, self.machine.picked(from), state)
                {
                    let id = &self.info(node).id;
                    let on_route = |r: u32| routes.leads.iter().any(|(lr, t)| *lr == r && t == id);
                    if routes.leads.iter().any(|(_, t)| t == id) && !on_route(picked) {
                        return Some(format!(
                            "router '{}' took route '{}'",
                            self.info(from).id,
                            routes.names[picked as usize]
                        ));
                    }
                }
                // Every guarded edge is named, its guard met or not: a
                // join's mode may skip it over guards that held.
                let guard = guard?;
                Some(format!(
                    "{} is {} (guard '{guard}')",
                    self.info(from).id,
                    state.name()
                ))
            })
            .collect();
        format!("branch not taken: {}", missed.join("; "))
    }

    /// A join: the controller checks its parents and writes the evidence.
    fn run_join(&mut self, node: usize, attempt: u32, round: u32) -> Result<(), RunError> {
        let info = self.info(node).clone();
        let Driver::Join(mode) = info.driver else {
            unreachable!("a join node")
        };
        self.record_inline_turn(&info.id, attempt, round)?;
        let parents: Vec<Value> = info
            .incoming
            .iter()
            .map(|&(from, guard)| {
                json!([self.info(from).id, self.machine.state(from).name(), guard])
            })
            .collect();
        let ids: Vec<&str> = info
            .incoming
            .iter()
            .map(|&(from, _)| self.info(from).id.as_str())
            .collect();
        let evidence = json!({
            "join_mode": bl_graph::model::Named::name(mode),
            "node_id": info.id,
            "parents": parents,
            "parents_observed": true,
            "predecessor_node_ids": ids,
        });
        let bytes = bl_core::python_json(&evidence);
        let digest = self
            .ports
            .artifacts
            .put(bytes.as_bytes(), "application/json", attempt)?;
        let quoted: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
        let verdict = Verdict {
            passed: true,
            reason: format!(
                "join causality verified: mode='{}', predecessors=[{}]",
                bl_graph::model::Named::name(mode),
                quoted.join(", ")
            ),
            evidence_digest: Some(digest.clone()),
        };
        let ended = Ended::succeeded(vec![digest], Some(verdict), None);
        self.end(node, ended, round)
    }

    /// A node the controller decides itself (a join, a publish) records
    /// a spend of nothing and its gating, as bounded-loops does.
    fn record_inline_turn(&mut self, id: &str, attempt: u32, round: u32) -> Result<(), RunError> {
        let at = At {
            node: id,
            attempt,
            round,
        };
        self.record(&at.spend(1, None))?;
        self.record(&at.gating())
    }

    /// What a publish node publishes: its parents' artifacts, looking
    /// through approvals (which pass on what they approved); and the
    /// digests its receipt binds (those, and the replies of parents that
    /// declare no port, as bounded-loops binds every upstream artifact).
    fn published_inputs(&self, node: usize) -> (Vec<PublishedFile>, Vec<String>) {
        let mut out: Vec<PublishedFile> = Vec::new();
        let mut unpublished: Vec<String> = Vec::new();
        let mut stack: Vec<usize> = self.info(node).incoming.iter().map(|&(f, _)| f).collect();
        let mut seen = HashSet::new();
        while let Some(parent) = stack.pop() {
            if !seen.insert(parent) {
                continue;
            }
            if self.info(parent).driver == Driver::Approval {
                stack.extend(self.info(parent).incoming.iter().map(|&(f, _)| f));
                continue;
            }
            let producer = self.info(parent).id.clone();
            let produced = &self.produced[parent];
            if produced.outputs.is_empty() {
                // Its reply, where a plain port declares it; a chat reply
                // no port declares is bound, never published.
                match &self.info(parent).reply_name {
                    Some(name) => out.extend(produced.digests.iter().map(|d| PublishedFile {
                        name: name.clone(),
                        digest: d.clone(),
                        producer: producer.clone(),
                    })),
                    None => unpublished.extend(produced.digests.iter().cloned()),
                }
            } else {
                // Its declared outputs, by their names; never its chat
                // reply, never a system_only output (the operator's).
                out.extend(produced.outputs.iter().filter(|o| !o.system_only).map(|o| {
                    PublishedFile {
                        name: o.path.rsplit('/').next().unwrap_or(&o.path).to_string(),
                        digest: o.digest.clone(),
                        producer: producer.clone(),
                    }
                }));
            }
        }
        // A name two producers share, or the outbox's own index name, is
        // told apart by its producer.
        let names: Vec<String> = out.iter().map(|f| f.name.clone()).collect();
        for file in &mut out {
            if file.name == OUTBOX_INDEX || names.iter().filter(|n| **n == file.name).count() > 1 {
                file.name = format!("{}-{}", file.producer, file.name);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name).then(a.digest.cmp(&b.digest)));
        out.dedup_by(|a, b| a.digest == b.digest && a.name == b.name);
        let mut bound: Vec<String> = out.iter().map(|f| f.digest.clone()).collect();
        bound.extend(unpublished);
        bound.sort();
        bound.dedup();
        (out, bound)
    }

    /// A publish node with no worker: its receipt fires through the ledger,
    /// exactly once per run, plan and node.
    fn run_publish(
        &mut self,
        node: usize,
        attempt: u32,
        round: u32,
        policy: &str,
    ) -> Result<(), RunError> {
        let info = self.info(node).clone();
        self.record_inline_turn(&info.id, attempt, round)?;
        let (files, upstream) = self.published_inputs(node);
        // bounded-loops' formula: hex sha256 of Python's json.dumps (sorted
        // keys, default separators) of what is published, under what plan
        // and policy.
        let payload_digest = bl_core::sha256_hex(
            bl_core::python_json(&json!({
                "node_id": info.id, "plan_id": self.settings.plan_id,
                "publication_policy": policy, "upstream_artifact_digests": upstream,
            }))
            .as_bytes(),
        );
        // Durable before the effect: what led here is on disk first.
        self.sync()?;
        let approvals: Vec<(String, bool)> = self
            .schedule
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.driver == Driver::Approval)
            .filter_map(|(i, n)| match self.machine.state(i) {
                NodeState::Succeeded => Some((n.id.clone(), true)),
                NodeState::Failed(_) => Some((n.id.clone(), false)),
                _ => None,
            })
            .collect();
        let Publication {
            published,
            effect_key,
            plugins,
        } = self.ports.ledger.publish(&PublishOrder {
            node: &info.id,
            policy,
            payload_digest: &payload_digest,
            upstream: &upstream,
            files: &files,
            approvals,
        })?;
        self.keep_components(&plugins, attempt)?;
        let mut ended = match published {
            Published::Fired | Published::AlreadyPublished => {
                let receipt = json!({
                    "effect_key": effect_key, "node_id": info.id, "outcome": "fired",
                    "payload_digest": payload_digest, "plan_id": self.settings.plan_id,
                    "publication_policy": policy, "upstream_artifact_count": upstream.len(),
                });
                let bytes = bl_core::python_json(&receipt);
                let digest =
                    self.ports
                        .artifacts
                        .put(bytes.as_bytes(), "application/json", attempt)?;
                Ended::succeeded(
                    vec![digest.clone()],
                    Some(Verdict {
                        passed: true,
                        reason: format!(
                            "publish receipt verified: effect_key='{effect_key}', outcome='fired'"
                        ),
                        evidence_digest: Some(digest),
                    }),
                    None,
                )
            }
            Published::Refused(why) => Ended::Failed(stop(Cause::PolicyDenied, why)),
        };
        match &mut ended {
            Ended::Succeeded { extra, .. } => extra.extend(plugins_extra(&plugins)),
            Ended::Failed(f) => f.extra.extend(plugins_extra(&plugins)),
        }
        self.end(node, ended, round)
    }
}

/// A worker that failed: bounded-loops' cause and words, then (bl's
/// addition, in the same string: its readers refuse payload keys they do
/// not know) why, in the worker's own words, as its adapter bounded and
/// redacted them.
fn worker_fault(detail: &str) -> AttemptFailure {
    let reason = if detail.is_empty() {
        WORKER_FAILED.to_string()
    } else {
        format!("{WORKER_FAILED}: {detail}")
    };
    stop(Cause::WorkerFault, reason)
}

fn stop(cause: Cause, reason: String) -> AttemptFailure {
    AttemptFailure {
        cause,
        reason,
        verdict: None,
        artifact_digests: Vec::new(),
        extra: Map::new(),
    }
}

/// `{"plugins": [...]}` when any plugin took part; nothing otherwise.
fn plugins_extra(plugins: &[PluginUse]) -> Map<String, Value> {
    let mut extra = Map::new();
    if !plugins.is_empty() {
        extra.insert(
            "plugins".into(),
            Value::Array(plugins.iter().map(PluginUse::to_json).collect()),
        );
    }
    extra
}

/// How a node's reply is stored.
fn reply_media_type(info: &NodeInfo) -> &'static str {
    match info.driver {
        Driver::Loop { .. } | Driver::Subgraph { .. } | Driver::Probe => "application/json",
        _ => "text/plain",
    }
}

/// The media type an output of this port type is stored as.
pub fn media_type_of(kind: &str) -> &'static str {
    match kind {
        "json" => "application/json",
        "markdown" => "text/markdown",
        "text" => "text/plain",
        "yaml" => "application/yaml",
        _ => "application/octet-stream",
    }
}

/// What the node's isolation tier enforces, as bounded-loops records it
/// for a loop node (`provider_id: native`). bl's cages enforce more than
/// bounded-loops' `unshare -n`, and say so.
fn isolation_controls(tier: bl_graph::model::Isolation) -> Value {
    use bl_graph::model::Isolation;
    let on = |yes: bool| if yes { "enforced" } else { "not_enforced" };
    let (caged, container) = match tier {
        Isolation::ProcessRestricted => (true, false),
        Isolation::ContainerRestricted => (true, true),
        Isolation::WorkspaceOnly | Isolation::CustomerManagedWorker => (false, false),
    };
    json!({
        "controls": {
            "egress": on(caged), "fs_read": on(container), "fs_write": on(caged),
            "kernel": on(caged), "net": on(caged), "pid": on(caged), "user": on(caged),
        },
        "provider_id": "native",
    })
}
