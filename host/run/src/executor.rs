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

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::events::{self, At, AttemptFailure, BudgetPause, Cause, Event, Route, Usage, Verdict};
use crate::machine::{AttemptEnd, Machine, NodeState, RunStatus, Transition};
use crate::schedule::{Driver, NodeInfo, PROBE_TOOL, Schedule};

/// The kind of an event the observer is shown but the log never records:
/// why a worker failed, in the worker's own words.
pub const NOTE: &str = "note";

/// An incomplete attempt is re-driven at most this many times.
pub const MAX_REDRIVES: u32 = 3;

/// What the controller asks a worker to do: one execution of one attempt.
#[derive(Debug, Clone)]
pub struct WorkRequest {
    pub node_id: String,
    pub attempt: u32,
    pub execution: u32,
    pub round: u32,
    pub prompt: String,
    /// A connector node's binding; `None` for a built-in tool.
    pub binding: Option<bl_graph::Connection>,
    /// A tool node's `tool_ref` (the built-in sandbox probe).
    pub tool_ref: Option<String>,
    pub isolation: String,
    pub deadline: Duration,
}

/// What came back. The worker never says whether the node succeeded: the
/// controller's gate decides from the reply.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkReply {
    Reply {
        bytes: Vec<u8>,
        /// `None` when the worker does not report tokens.
        usage: Option<Usage>,
        reported_by: String,
    },
    /// The worker did not produce a reply (non-zero exit, missing CLI,
    /// timeout). Retryable.
    Fault(String),
    /// The worker replied in a form it promised not to (a metered CLI
    /// without its envelope). Never retried.
    Contract(String),
}

pub type WorkFuture = Pin<Box<dyn Future<Output = WorkReply> + Send>>;

/// The worker port: local CLIs today; remote machines later.
pub trait Worker: Send + Sync {
    fn work(&self, request: WorkRequest) -> WorkFuture;
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("event log: {0}")]
    Journal(String),
    #[error("artifact store: {0}")]
    Artifacts(String),
    #[error("publication ledger: {0}")]
    Ledger(String),
    #[error(
        "the recorded run does not match this plan: {0}; the log is never rewritten, so nothing was changed"
    )]
    Diverged(String),
}

/// The event log port. `append` of a key already recorded with the same
/// content is a no-op; with other content it is an error.
pub trait Journal {
    fn append(&mut self, event: &Event) -> Result<(), RunError>;
    /// The payload recorded under `key`, if any.
    fn recorded(&self, key: &str) -> Option<Value>;
    /// Makes every append so far durable (one group commit).
    fn sync(&mut self) -> Result<(), RunError>;
    /// Hands every append so far to the operating system (no fsync): the
    /// controller calls it before work starts and before it waits, so a
    /// killed controller never leaves work running that its log does not
    /// show started.
    fn flush(&mut self) -> Result<(), RunError> {
        Ok(())
    }
}

/// The run's content-addressed artifact store.
pub trait Artifacts {
    fn put(&self, bytes: &[u8], media_type: &str, attempt: u32) -> Result<String, RunError>;
    /// Makes every artifact put so far durable (one group commit); called
    /// before the log is synced, so a durable event never names a lost file.
    fn sync(&self) -> Result<(), RunError>;
}

/// Human decisions, by node and repair round.
pub trait Decisions {
    fn decision(&self, node: &str, round: u32) -> Option<bool>;
}

/// What the publication ledger did with one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Fired,
    AlreadyPublished,
    /// Refused: another payload was published under the key, or an
    /// earlier intent needs reconciling.
    Refused(String),
}

/// One publish, as the ledger and its publication policy see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishOrder<'a> {
    pub node: &'a str,
    /// The node's `publication_policy`.
    pub policy: &'a str,
    pub payload_digest: &'a str,
    /// What is published: the artifacts of the node's parents.
    pub upstream: &'a [String],
    /// Every approval node that decided before this publish: (id, approved).
    pub approvals: Vec<(String, bool)>,
}

/// The exactly-once publication ledger, with the publication policy that
/// must allow each effect before it fires. Returns what happened and the
/// effect key.
pub trait Ledger {
    fn publish(&self, order: &PublishOrder) -> Result<(Published, String), RunError>;
}

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
}

/// The ports, borrowed for one drive.
pub struct Ports<'a> {
    pub journal: &'a mut dyn Journal,
    pub artifacts: &'a dyn Artifacts,
    pub decisions: &'a dyn Decisions,
    pub ledger: &'a dyn Ledger,
    pub worker: std::sync::Arc<dyn Worker>,
    /// Told about every event as it is recorded (progress output).
    pub observer: &'a mut dyn FnMut(&Event),
}

/// An attempt in flight.
struct InFlight {
    node: usize,
    attempt: u32,
    round: u32,
    execution: u32,
}

/// How an attempt ended, for the transitions that follow.
enum Ended {
    Succeeded {
        digests: Vec<String>,
        verdict: Option<Verdict>,
        route: Option<Route>,
    },
    Failed(AttemptFailure),
}

struct Controller<'a, 'p> {
    schedule: &'a Schedule,
    settings: &'a RunSettings,
    ports: &'a mut Ports<'p>,
    machine: Machine,
    /// How each node's last attempt ended (for `node.succeeded`/`node.failed`).
    ended: Vec<Option<Ended>>,
    /// Digests each succeeded node produced (joins and publishes read them).
    produced: Vec<Vec<String>>,
    tokens: u64,
    cost: u64,
    pause: Option<BudgetPause>,
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
        produced: vec![Vec::new(); schedule.nodes.len()],
        tokens: 0,
        cost: 0,
        pause: None,
        ports,
    };
    c.record(&events::run_created())?;
    c.record(&events::run_started())?;
    if let Some(ordinal) = settings.resume_ordinal {
        c.record(&events::run_resumed(ordinal))?;
    }
    let begun = c.machine.begin();
    c.apply(begun)?;
    let mut running: JoinSet<(InFlight, WorkReply)> = JoinSet::new();
    let mut busy: HashSet<usize> = HashSet::new();
    let concurrency = settings.concurrency.max(1);
    loop {
        // Start what may start, lowest plan position first.
        while c.pause.is_none() && running.len() < concurrency {
            let Some(node) = c.machine.first_ready().filter(|n| !busy.contains(n)) else {
                break;
            };
            if let Some(work) = c.dispatch(node)? {
                c.ports.journal.flush()?;
                busy.insert(node);
                let worker = c.ports.worker.clone();
                running.spawn(async move {
                    let reply = match work.1 {
                        Some(request) => worker.work(request).await,
                        None => WorkReply::Fault("no prompt was supplied for this node".into()),
                    };
                    (work.0, reply)
                });
            }
        }
        c.ports.journal.flush()?;
        let Some(joined) = running.join_next().await else {
            break;
        };
        let (flight, reply) = joined.map_err(|e| RunError::Journal(format!("worker task: {e}")))?;
        busy.remove(&flight.node);
        c.complete(flight, reply)?;
    }
    c.sync()?;
    if let Some(pause) = c.pause.take() {
        return Ok(RunEnd::BudgetPaused(pause));
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

fn state_name(state: NodeState) -> &'static str {
    match state {
        NodeState::Pending => "PENDING",
        NodeState::Running { .. } => "RUNNING",
        NodeState::AwaitingApproval => "AWAITING_APPROVAL",
        NodeState::Succeeded => "SUCCEEDED",
        NodeState::Failed(_) => "FAILED",
        NodeState::Skipped => "SKIPPED",
    }
}

fn usage_of(payload: &Value) -> Option<Usage> {
    let u = payload.get("usage")?;
    Some(Usage {
        input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
        cost_microunits: u["cost_microunits"].as_u64().unwrap_or(0),
    })
}

fn failure_of(payload: &Value) -> Option<AttemptFailure> {
    let cause = Cause::parse(payload["cause"].as_str()?)?;
    let verdict = payload.get("verdict").map(|v| Verdict {
        passed: v["passed"].as_bool().unwrap_or(false),
        reason: v["reason"].as_str().unwrap_or_default().to_string(),
        evidence_digest: v["evidence_digest"].as_str().map(str::to_string),
    });
    Some(AttemptFailure {
        cause,
        reason: payload["reason"].as_str().unwrap_or_default().to_string(),
        verdict,
        artifact_digests: digests_of(payload),
    })
}

fn digests_of(payload: &Value) -> Vec<String> {
    payload["artifact_digests"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

impl Controller<'_, '_> {
    /// Group commit: artifacts first, then the events that name them.
    fn sync(&mut self) -> Result<(), RunError> {
        self.ports.artifacts.sync()?;
        self.ports.journal.sync()
    }

    fn record(&mut self, event: &Event) -> Result<(), RunError> {
        self.ports.journal.append(event)?;
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
    #[allow(clippy::type_complexity)]
    fn dispatch(
        &mut self,
        node: usize,
    ) -> Result<Option<(InFlight, Option<WorkRequest>)>, RunError> {
        let info = self.info(node).clone();
        let next_attempt = self.machine.attempts(node) + 1;
        if matches!(info.driver, Driver::Worker | Driver::Probe)
            && self.over_budget(node, next_attempt)?
        {
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
        let denied = match info.driver {
            Driver::Worker | Driver::Publish { .. } => info.shared_binding || info.network_effect,
            Driver::Unsupported => true,
            _ => false,
        };
        if denied {
            let reason = if info.driver == Driver::Unsupported {
                format!(
                    "node kind '{}' cannot run without a connection on this version",
                    info.kind
                )
            } else {
                "execution policy denied worker".to_string()
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
            Driver::Worker | Driver::Probe => {}
            Driver::Join(_) => {
                self.run_join(node, attempt, round)?;
                return Ok(None);
            }
            Driver::Publish { policy } => {
                self.run_publish(node, attempt, round, policy)?;
                return Ok(None);
            }
            Driver::Approval | Driver::Unsupported => unreachable!("never ready or denied"),
        }
        // A resumed run: the attempt's outcome may be recorded already.
        let mut execution = 1;
        loop {
            let spend_key = at.spend(execution, None).key;
            let Some(spend) = self.ports.journal.recorded(&spend_key) else {
                break;
            };
            if let Some(u) = usage_of(&spend) {
                self.tokens += u.input_tokens + u.output_tokens;
                self.cost += u.cost_microunits;
            }
            execution += 1;
        }
        if let Some(ended) = self.recorded_outcome(&info, attempt, round) {
            self.end(node, ended, round)?;
            return Ok(None);
        }
        if started_before {
            // Started before, never ended: the controller stopped mid-attempt.
            let prior = self.redrives(&at);
            if prior >= MAX_REDRIVES {
                let reason = format!(
                    "the attempt was interrupted {} times and is not re-driven again",
                    prior + 1
                );
                self.end(node, Ended::Failed(stop(Cause::WorkerFault, reason)), round)?;
                return Ok(None);
            }
            self.record(&at.redrive(prior + 1))?;
            execution = execution.max(prior + 2);
        }
        // The probe takes no prompt; an agent never runs without one.
        let prompt = match info.driver {
            Driver::Probe => Some(String::new()),
            _ => self.settings.prompts.get(&info.id).cloned(),
        };
        let request = prompt.map(|prompt| WorkRequest {
            node_id: info.id.clone(),
            attempt,
            execution,
            round,
            prompt,
            binding: info.binding.clone(),
            tool_ref: (info.driver == Driver::Probe).then(|| PROBE_TOOL.to_string()),
            isolation: info.isolation.clone(),
            deadline: info.deadline,
        });
        Ok(Some((
            InFlight {
                node,
                attempt,
                round,
                execution,
            },
            request,
        )))
    }

    fn redrives(&self, at: &At) -> u32 {
        (1..=MAX_REDRIVES)
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
            return Some(Ended::Succeeded {
                digests: digests_of(&p),
                verdict: p.get("verdict").map(|v| Verdict {
                    passed: true,
                    reason: v["reason"].as_str().unwrap_or_default().to_string(),
                    evidence_digest: v["evidence_digest"].as_str().map(str::to_string),
                }),
                route: info.route(),
            });
        }
        let probe = stop(Cause::WorkerFault, String::new());
        if let Some(p) = self.ports.journal.recorded(&at.attempt_failed(&probe).key) {
            return failure_of(&p).map(Ended::Failed);
        }
        let p = self.ports.journal.recorded(&at.failed(&probe, false).key)?;
        failure_of(&p).map(Ended::Failed)
    }

    /// A worker's reply came back: record the spend at once, gate, end.
    fn complete(&mut self, flight: InFlight, reply: WorkReply) -> Result<(), RunError> {
        let info = self.info(flight.node).clone();
        let at = At {
            node: &info.id,
            attempt: flight.attempt,
            round: flight.round,
        };
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
        if let WorkReply::Fault(detail) | WorkReply::Contract(detail) = &reply {
            // Not recorded (the record keeps bounded-loops' wording), but
            // shown: the operator needs to know why a worker failed.
            let note = Event {
                key: String::new(),
                kind: NOTE,
                payload: json!({"node_id": info.id, "detail": detail}),
            };
            (self.ports.observer)(&note);
        }
        let ended = match reply {
            WorkReply::Fault(_) => Ended::Failed(AttemptFailure {
                cause: Cause::WorkerFault,
                reason: "worker execution failed".into(),
                verdict: None,
                artifact_digests: Vec::new(),
            }),
            WorkReply::Contract(reason) => Ended::Failed(stop(
                Cause::WorkerContract,
                format!("local-CLI node '{}': {reason}", info.id),
            )),
            WorkReply::Reply { .. } if info.max_tokens.is_some() && usage.is_none() => {
                Ended::Failed(stop(
                    Cause::BudgetUnmeasurable,
                    format!(
                        "node '{}' declares a tokens budget but its worker does not report tokens, so the spend cannot be metered; either remove that budget or bind the node to a worker that reports it",
                        info.id
                    ),
                ))
            }
            WorkReply::Reply { bytes, .. } => {
                self.record(&at.gating())?;
                let digest = self
                    .ports
                    .artifacts
                    .put(&bytes, "text/plain", flight.attempt)?;
                let verdict = gate_reply(&info, &bytes);
                if verdict.passed {
                    Ended::Succeeded {
                        digests: vec![digest],
                        verdict: Some(verdict),
                        route: info.route(),
                    }
                } else {
                    Ended::Failed(AttemptFailure {
                        cause: Cause::GateRejected,
                        reason: "independent gate rejected output".into(),
                        verdict: Some(verdict),
                        artifact_digests: vec![digest],
                    })
                }
            }
        };
        self.end(flight.node, ended, flight.round)
    }

    /// Records how an attempt ended and feeds the machine.
    fn end(&mut self, node: usize, ended: Ended, round: u32) -> Result<(), RunError> {
        let end = match &ended {
            Ended::Succeeded { .. } => AttemptEnd::Succeeded,
            Ended::Failed(f) if f.cause.retryable() => AttemptEnd::Rejected,
            Ended::Failed(_) => AttemptEnd::Stopped,
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
            .finish(node, round, end)
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
                        }) => {
                            let e = at.succeeded(&digests, route.as_ref(), verdict.as_ref());
                            self.produced[node] = digests;
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
                    if let Some(approved) = self.ports.decisions.decision(&id, round) {
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
                    let e = At::repaired(&self.info(node).id.clone(), round, state_name(left));
                    self.record(&e)?;
                }
            }
        }
        Ok(())
    }

    /// `branch not taken: <source> is <STATE> (guard '<when>')`, for each
    /// guarded edge the source's outcome missed, joined with `; `.
    fn skip_reason(&self, node: usize) -> String {
        let missed: Vec<String> = self
            .info(node)
            .incoming
            .iter()
            .filter_map(|&(from, guard)| {
                let guard = guard?;
                let state = self.machine.state(from);
                let taken = match (guard, state) {
                    ("terminal", s) => s.is_terminal(),
                    ("succeeded", NodeState::Succeeded)
                    | ("failed", NodeState::Failed(_))
                    | ("skipped", NodeState::Skipped) => true,
                    _ => false,
                };
                (!taken).then(|| {
                    format!(
                        "{} is {} (guard '{guard}')",
                        self.info(from).id,
                        state_name(state)
                    )
                })
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
                json!([
                    self.info(from).id,
                    state_name(self.machine.state(from)),
                    guard
                ])
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
        let ended = Ended::Succeeded {
            digests: vec![digest],
            verdict: Some(verdict),
            route: None,
        };
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
    /// through approvals (which pass on what they approved).
    fn published_inputs(&self, node: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack: Vec<usize> = self.info(node).incoming.iter().map(|&(f, _)| f).collect();
        let mut seen = HashSet::new();
        while let Some(parent) = stack.pop() {
            if !seen.insert(parent) {
                continue;
            }
            if self.info(parent).driver == Driver::Approval {
                stack.extend(self.info(parent).incoming.iter().map(|&(f, _)| f));
            } else {
                out.extend(self.produced[parent].iter().cloned());
            }
        }
        out
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
        let mut upstream = self.published_inputs(node);
        upstream.sort();
        upstream.dedup();
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
        let (published, effect_key) = self.ports.ledger.publish(&PublishOrder {
            node: &info.id,
            policy,
            payload_digest: &payload_digest,
            upstream: &upstream,
            approvals,
        })?;
        let ended = match published {
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
                Ended::Succeeded {
                    digests: vec![digest.clone()],
                    verdict: Some(Verdict {
                        passed: true,
                        reason: format!(
                            "publish receipt verified: effect_key='{effect_key}', outcome='fired'"
                        ),
                        evidence_digest: Some(digest),
                    }),
                    route: None,
                }
            }
            Published::Refused(why) => Ended::Failed(stop(Cause::PolicyDenied, why)),
        };
        self.end(node, ended, round)
    }
}

fn stop(cause: Cause, reason: String) -> AttemptFailure {
    AttemptFailure {
        cause,
        reason,
        verdict: None,
        artifact_digests: Vec::new(),
    }
}

/// The default gate for connector nodes, bounded-loops' structural
/// acceptance: a non-empty UTF-8 reply. A publish node's reply must be its
/// JSON receipt.
pub fn gate_reply(info: &NodeInfo, bytes: &[u8]) -> Verdict {
    let id = &info.id;
    if info.driver == Driver::Probe {
        return gate_probe(id, bytes);
    }
    let (passed, reason) = if bytes.is_empty() {
        (false, format!("node '{id}' produced an empty reply"))
    } else if std::str::from_utf8(bytes).is_err() {
        (
            false,
            format!("node '{id}' produced a reply that is not UTF-8"),
        )
    } else if info.kind == bl_graph::model::NodeKind::Publish {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(_)) => (true, format!("publish receipt verified for node '{id}'")),
            Ok(_) => (
                false,
                format!("publish node '{id}' receipt is not a JSON object"),
            ),
            Err(e) => (
                false,
                format!(
                    "publish node '{id}' receipt is not valid JSON: {}",
                    python_json_error(bytes, &e)
                ),
            ),
        }
    } else {
        (
            true,
            format!("independent gate: node '{id}' produced a non-empty, well-formed reply"),
        )
    };
    Verdict {
        passed,
        reason,
        evidence_digest: None,
    }
}

/// A JSON error as Python's `json` module words the common one ("Expecting
/// value: line 1 column 1 (char 0)"), since bounded-loops records that text.
fn python_json_error(bytes: &[u8], e: &serde_json::Error) -> String {
    let text = String::from_utf8_lossy(bytes);
    let (line, column) = (e.line().max(1), e.column().max(1));
    let before: usize = text
        .split('\n')
        .take(line - 1)
        .map(|l| l.chars().count() + 1)
        .sum();
    if e.to_string().starts_with("expected value") || e.is_eof() {
        format!(
            "Expecting value: line {line} column {column} (char {})",
            before + column - 1
        )
    } else {
        e.to_string()
    }
}

/// The sandbox probe's gate: the host's own observations (recorded by the
/// probe worker from outside the probed process) must show that the OS
/// denied everything the probe tried.
fn gate_probe(id: &str, bytes: &[u8]) -> Verdict {
    let verdict = |passed, reason| Verdict {
        passed,
        reason,
        evidence_digest: None,
    };
    let Ok(result) = serde_json::from_slice::<Value>(bytes) else {
        return verdict(false, format!("node '{id}': the probe result is not JSON"));
    };
    let Some(checks) = result["checks"].as_array() else {
        return verdict(
            false,
            format!("node '{id}': the probe result has no checks"),
        );
    };
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c["ok"] != Value::Bool(true))
        .map(|c| {
            format!(
                "{}: {}",
                c["name"].as_str().unwrap_or("?"),
                c["detail"].as_str().unwrap_or("")
            )
        })
        .collect();
    if checks.is_empty() || !failed.is_empty() || result["passed"] != Value::Bool(true) {
        return verdict(
            false,
            format!(
                "sandbox probe: the OS did not deny everything: {}",
                failed.join("; ")
            ),
        );
    }
    verdict(
        true,
        format!(
            "sandbox probe: the OS denied all {} attempts (network, writes outside the workspace, sysctl, keyring)",
            checks.len()
        ),
    )
}
