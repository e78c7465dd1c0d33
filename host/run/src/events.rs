//! The run's events in bounded-loops 0.7's vocabulary: event types,
//! payload shapes and idempotency keys (without the `<run_id>:` prefix,
//! which the log adds). tests/corpus/graph-runs/SEMANTICS.md lists what was
//! observed; every builder here follows it. Pure: no clock, no I/O.

use serde_json::{Map, Value, json};

/// One event to record: its idempotency key, type and payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub key: String,
    pub kind: &'static str,
    pub payload: Value,
}

/// Why a node's attempt or the node failed, by bounded-loops' cause names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    WorkerFault,
    GateRejected,
    PolicyDenied,
    WorkerContract,
    BudgetUnmeasurable,
    ApprovalRejected,
    /// An input did not match the digest it was published with.
    ArtifactUnverified,
    /// The gate could not decide (a plugin that errs, traps or is missing).
    GateBroken,
}

impl Cause {
    pub fn name(self) -> &'static str {
        match self {
            Cause::WorkerFault => "worker_fault",
            Cause::GateRejected => "gate_rejected",
            Cause::PolicyDenied => "policy_denied",
            Cause::WorkerContract => "worker_contract",
            Cause::BudgetUnmeasurable => "budget_unmeasurable",
            Cause::ApprovalRejected => "approval_rejected",
            Cause::ArtifactUnverified => "artifact_unverified",
            Cause::GateBroken => "gate_broken",
        }
    }

    pub fn parse(name: &str) -> Option<Cause> {
        [
            Cause::WorkerFault,
            Cause::GateRejected,
            Cause::PolicyDenied,
            Cause::WorkerContract,
            Cause::BudgetUnmeasurable,
            Cause::ApprovalRejected,
            Cause::ArtifactUnverified,
            Cause::GateBroken,
        ]
        .into_iter()
        .find(|c| c.name() == name)
    }

    /// Whether another attempt may fix it. The others stop the node at
    /// once, and the run in every fail mode.
    pub fn retryable(self) -> bool {
        matches!(self, Cause::WorkerFault | Cause::GateRejected)
    }
}

/// bounded-loops' words for a worker that failed (bl adds why after them).
pub const WORKER_FAILED: &str = "worker execution failed";

/// bounded-loops' words for a node its execution policy denied (bl adds
/// the rule and the fix after them).
pub const POLICY_DENIED: &str = "execution policy denied worker";

/// The gate's decision, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub passed: bool,
    pub reason: String,
    /// Joins and publish receipts name the artifact that is their evidence.
    pub evidence_digest: Option<String>,
}

impl Verdict {
    fn to_json(&self) -> Value {
        let mut v = json!({"passed": self.passed, "reason": self.reason});
        if let Some(d) = &self.evidence_digest {
            v["evidence_digest"] = Value::from(d.clone());
        }
        v
    }
}

/// How a failed attempt failed: what `node.attempt.failed` and
/// `node.failed` carry.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptFailure {
    pub cause: Cause,
    pub reason: String,
    pub verdict: Option<Verdict>,
    pub artifact_digests: Vec<String>,
    /// bl's additions to the payload (the plugins that judged it); empty
    /// for every graph bounded-loops can run, so its payloads stay its own.
    pub extra: Map<String, Value>,
}

/// The route a connector node took, from its binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub provider_id: String,
    pub model_id: String,
    pub region: String,
    pub fallback: bool,
    pub policy_digest: String,
}

/// Tokens and cost a worker reported for one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_microunits: u64,
}

/// A worker's turn that finished and went to its judge: what judging it
/// again needs (see [`At::replied`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedTurn {
    /// The reply, in the run's artifact store; `None` when the worker
    /// failed and is judged by the outputs it left.
    pub reply_digest: Option<String>,
    /// Why the worker failed, when it did.
    pub worker_fault: Option<String>,
    /// When the worker was dispatched (outputs older than this are stale).
    pub dispatched_ms: u64,
    pub workspace: String,
}

impl FinishedTurn {
    /// The inverse of [`At::replied`].
    pub fn of(payload: &Value) -> Option<FinishedTurn> {
        Some(FinishedTurn {
            reply_digest: payload["reply_digest"].as_str().map(str::to_string),
            worker_fault: payload["worker_fault"].as_str().map(str::to_string),
            dispatched_ms: payload["dispatched_ms"].as_u64()?,
            workspace: payload["workspace"].as_str()?.to_string(),
        })
    }
}

/// Where an event sits: node, attempt and repair round.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    pub node: &'a str,
    pub attempt: u32,
    pub round: u32,
}

impl At<'_> {
    /// `:<attempt>` from attempt 2 on, then `:r<round>` in a repair round.
    fn suffix(&self) -> String {
        let mut s = String::new();
        if self.attempt > 1 {
            s.push_str(&format!(":{}", self.attempt));
        }
        s.push_str(&self.round_suffix());
        s
    }

    fn round_suffix(&self) -> String {
        if self.round > 0 {
            format!(":r{}", self.round)
        } else {
            String::new()
        }
    }

    fn key(&self, kind: &str) -> String {
        format!("{}:{kind}{}", self.node, self.suffix())
    }

    /// `{attempt, node_id[, repair_round]}` plus `extra`.
    fn payload(&self, extra: Value) -> Value {
        let mut map = Map::new();
        map.insert("attempt".into(), Value::from(self.attempt));
        map.insert("node_id".into(), Value::from(self.node));
        if self.round > 0 {
            map.insert("repair_round".into(), Value::from(self.round));
        }
        if let Value::Object(extra) = extra {
            map.extend(extra);
        }
        Value::Object(map)
    }

    fn state_event(&self, kind: &'static str, state: &str) -> Event {
        Event {
            key: self.key(kind),
            kind,
            payload: self.payload(json!({"state": state})),
        }
    }

    pub fn ready(&self) -> Event {
        self.state_event("node.ready", "READY")
    }

    pub fn starting(&self) -> Event {
        self.state_event("node.starting", "STARTING")
    }

    pub fn running(&self) -> Event {
        self.state_event("node.running", "RUNNING")
    }

    pub fn gating(&self) -> Event {
        self.state_event("node.gating", "GATING")
    }

    pub fn awaiting_approval(&self) -> Event {
        self.state_event("node.awaiting_approval", "AWAITING_APPROVAL")
    }

    /// `node.spend`, keyed by attempt and execution (a re-driven attempt is
    /// a second execution of the same attempt).
    pub fn spend(&self, execution: u32, usage: Option<Usage>) -> Event {
        let mut extra = json!({"execution": execution});
        if let Some(u) = usage {
            extra["usage"] = json!({
                "cost_microunits": u.cost_microunits,
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "reported_by": "cli:claude",
            });
        }
        Event {
            key: format!(
                "{}:node.spend:{}:{execution}{}",
                self.node,
                self.attempt,
                self.round_suffix()
            ),
            kind: "node.spend",
            payload: self.payload(extra),
        }
    }

    /// The usage line of a spend event names who reported it.
    pub fn spend_reported_by(event: &mut Event, reported_by: &str) {
        if let Some(usage) = event.payload.get_mut("usage") {
            usage["reported_by"] = Value::from(reported_by);
        }
    }

    pub fn redrive(&self, redrive: u32) -> Event {
        Event {
            key: format!(
                "{}:node.redrive:{}:{redrive}{}",
                self.node,
                self.attempt,
                self.round_suffix()
            ),
            kind: "node.redrive",
            payload: self.payload(json!({"redrive": redrive})),
        }
    }

    /// `node.replied` (bl's, kept in the annex beside the log): this
    /// execution's worker finished its turn and its judge was asked. A
    /// resume whose record ends here judges that turn's workspace again
    /// instead of paying for a new turn.
    pub fn replied(&self, execution: u32, turn: &FinishedTurn) -> Event {
        Event {
            key: self.replied_key(execution),
            kind: "node.replied",
            payload: self.payload(json!({
                "execution": execution,
                "reply_digest": turn.reply_digest,
                "worker_fault": turn.worker_fault,
                "dispatched_ms": turn.dispatched_ms,
                "workspace": turn.workspace,
            })),
        }
    }

    pub fn replied_key(&self, execution: u32) -> String {
        format!(
            "{}:node.replied:{}:{execution}{}",
            self.node,
            self.attempt,
            self.round_suffix()
        )
    }

    /// `node.child_awaiting_approval` (bl's, kept in the annex beside the
    /// log): this execution's child run paused for people's decisions on
    /// `awaiting` (paths from the parent run, `node/gate`). The attempt is
    /// not over and this is no failure; approving them re-drives it, and
    /// the child run goes on where it stopped.
    pub fn child_awaiting_approval(&self, execution: u32, awaiting: &[String]) -> Event {
        Event {
            key: self.child_awaiting_approval_key(execution),
            kind: "node.child_awaiting_approval",
            payload: self.payload(json!({
                "awaiting_approval": awaiting,
                "execution": execution,
                "reason": format!("its child run awaits approval of {}", awaiting.join(", ")),
            })),
        }
    }

    pub fn child_awaiting_approval_key(&self, execution: u32) -> String {
        format!(
            "{}:node.child_awaiting_approval:{}:{execution}{}",
            self.node,
            self.attempt,
            self.round_suffix()
        )
    }

    /// `node.interrupted` (bl's, kept in the annex beside the log): an
    /// operator's stop ended this execution of the attempt before it did.
    /// It is not a failure and does not count against the node's attempts;
    /// `resume` re-drives it.
    pub fn interrupted(&self, execution: u32, signal: i32) -> Event {
        Event {
            key: format!(
                "{}:node.interrupted:{}:{execution}{}",
                self.node,
                self.attempt,
                self.round_suffix()
            ),
            kind: "node.interrupted",
            payload: self.payload(json!({
                "execution": execution,
                "reason": format!("stopped by {} before the attempt ended; `bl graph resume` re-drives it", signal_name(signal)),
                "signal": signal,
            })),
        }
    }

    /// A connector node's success.
    pub fn succeeded(
        &self,
        artifact_digests: &[String],
        route: Option<&Route>,
        verdict: Option<&Verdict>,
    ) -> Event {
        self.succeeded_with(artifact_digests, route, verdict, &Map::new())
    }

    /// A success with bl's additions to the payload (`outputs`, `plugins`,
    /// `routed`, `isolation`), present only where a graph uses them.
    pub fn succeeded_with(
        &self,
        artifact_digests: &[String],
        route: Option<&Route>,
        verdict: Option<&Verdict>,
        added: &Map<String, Value>,
    ) -> Event {
        let mut extra = json!({"artifact_digests": artifact_digests, "state": "SUCCEEDED"});
        if let Some(m) = extra.as_object_mut() {
            m.extend(added.clone());
        }
        if let Some(r) = route {
            extra["route"] = json!({
                "fallback": r.fallback, "model_id": r.model_id,
                "policy_digest": r.policy_digest, "provider_id": r.provider_id,
                "region": r.region,
            });
            extra["transport"] = Value::from("local_cli");
        }
        if let Some(v) = verdict {
            extra["verdict"] = v.to_json();
        }
        Event {
            key: self.key("node.succeeded"),
            kind: "node.succeeded",
            payload: self.payload(extra),
        }
    }

    fn failure_fields(failure: &AttemptFailure) -> Value {
        let mut extra = json!({"cause": failure.cause.name(), "reason": failure.reason});
        if !failure.artifact_digests.is_empty() {
            extra["artifact_digests"] = json!(failure.artifact_digests);
        }
        if let Some(v) = &failure.verdict {
            extra["verdict"] = v.to_json();
        }
        if let Some(m) = extra.as_object_mut() {
            m.extend(failure.extra.clone());
        }
        extra
    }

    /// A failed attempt; its key always carries the attempt number.
    pub fn attempt_failed(&self, failure: &AttemptFailure) -> Event {
        Event {
            key: format!(
                "{}:node.attempt.failed:{}{}",
                self.node,
                self.attempt,
                self.round_suffix()
            ),
            kind: "node.attempt.failed",
            payload: self.payload(Self::failure_fields(failure)),
        }
    }

    /// The node's failure. `budget_exhausted` is set when every one of
    /// several attempts was spent.
    pub fn failed(&self, failure: &AttemptFailure, budget_exhausted: bool) -> Event {
        let mut extra = Self::failure_fields(failure);
        // The artifact a gate rejected stays on the attempt, not the node.
        if let Some(m) = extra.as_object_mut() {
            m.remove("artifact_digests");
        }
        extra["state"] = Value::from("FAILED");
        if budget_exhausted {
            extra["budget_exhausted"] = Value::from(true);
        }
        Event {
            key: self.key("node.failed"),
            kind: "node.failed",
            payload: self.payload(extra),
        }
    }

    /// `node.artifact_completion`: a worker that failed (exit, timeout) left
    /// every declared output fresh and well-formed, so the node completes
    /// from its artifacts (seed 002).
    pub fn artifact_completion(
        &self,
        suppressed: &str,
        artifacts: &[String],
        contracts: Value,
    ) -> Event {
        Event {
            key: self.key("node.artifact_completion"),
            kind: "node.artifact_completion",
            payload: self.payload(json!({
                "artifacts": artifacts, "contracts": contracts,
                "suppressed_finish_reason": suppressed,
            })),
        }
    }

    /// `node.skipped`: attempt 0, with the reason the branch was not taken.
    pub fn skipped(node: &str, round: u32, reason: &str) -> Event {
        let at = At {
            node,
            attempt: 0,
            round,
        };
        Event {
            key: at.key("node.skipped"),
            kind: "node.skipped",
            payload: at.payload(json!({"reason": reason, "state": "SKIPPED"})),
        }
    }

    /// A node reset by a repair round, with the state it left.
    pub fn repaired(node: &str, round: u32, from_state: &str) -> Event {
        Event {
            key: format!("{node}:node.repaired:{round}"),
            kind: "node.repaired",
            payload: json!({"from_state": from_state, "node_id": node, "round": round}),
        }
    }
}

/// `SIGINT`, `SIGTERM`, or the number.
pub fn signal_name(signal: i32) -> String {
    match signal {
        2 => "SIGINT".into(),
        15 => "SIGTERM".into(),
        1 => "SIGHUP".into(),
        n => format!("signal {n}"),
    }
}

pub fn run_state(kind: &'static str, state: &str) -> Event {
    Event {
        key: kind.to_string(),
        kind,
        payload: json!({"state": state}),
    }
}

/// The audit plan the run was given, bound into its log: the plan file's
/// digest and what it audits (bounded-loops 0.7's payload shape). Recorded
/// once; a resume records the same.
pub fn audit_plan_created(payload: Value) -> Event {
    Event {
        key: "audit.plan.created".to_string(),
        kind: "audit.plan.created",
        payload,
    }
}

pub fn run_created() -> Event {
    run_state("run.created", "PENDING")
}

pub fn run_started() -> Event {
    run_state("run.started", "RUNNING")
}

pub fn run_succeeded() -> Event {
    run_state("run.succeeded", "SUCCEEDED")
}

pub fn run_failed() -> Event {
    run_state("run.failed", "FAILED")
}

pub fn run_resumed(ordinal: u32) -> Event {
    Event {
        key: format!("run.resumed:{ordinal}"),
        kind: "run.resumed",
        payload: json!({"resume_ordinal": ordinal}),
    }
}

pub fn repair_round(round: u32, trigger: &str, target: &str) -> Event {
    Event {
        key: format!("run.repair.round:{round}"),
        kind: "run.repair.round",
        payload: json!({
            "reason": format!("node '{trigger}' failed; repairing '{target}'"),
            "round": round, "target_node": target, "trigger_node": trigger,
        }),
    }
}

/// What a run-wide cap stopped, for `run.budget.paused`.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetPause {
    pub node: String,
    pub attempt: u32,
    pub tokens: u64,
    pub cost_microunits: u64,
    pub max_tokens: Option<u64>,
    pub max_cost_microunits: Option<u64>,
    pub reason: String,
}

pub fn budget_paused(p: &BudgetPause) -> Event {
    let opt = |v: Option<u64>| v.map_or("None".to_string(), |v| v.to_string());
    let mut payload = json!({
        "attempt": p.attempt, "cost_microunits": p.cost_microunits, "node_id": p.node,
        "reason": p.reason, "tokens": p.tokens,
    });
    if let Some(t) = p.max_tokens {
        payload["max_tokens"] = Value::from(t);
    }
    if let Some(c) = p.max_cost_microunits {
        payload["max_cost_microunits"] = Value::from(c);
    }
    Event {
        key: format!(
            "run.budget.paused:{}:{}:{}:{}",
            p.node,
            p.attempt,
            opt(p.max_tokens),
            opt(p.max_cost_microunits)
        ),
        kind: "run.budget.paused",
        payload,
    }
}

// What the builders above wrote, read back (a resume replays by them).

/// The usage a recorded `node.spend` carries (the inverse of its builder).
pub fn usage_of(payload: &Value) -> Option<Usage> {
    let u = payload.get("usage")?;
    Some(Usage {
        input_tokens: u["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: u["output_tokens"].as_u64().unwrap_or(0),
        cost_microunits: u["cost_microunits"].as_u64().unwrap_or(0),
    })
}

/// How a recorded attempt failed (the inverse of [`At::failed`] and
/// [`At::attempt_failed`]).
pub fn failure_of(payload: &Value) -> Option<AttemptFailure> {
    let cause = Cause::parse(payload["cause"].as_str()?)?;
    let verdict = payload.get("verdict").map(|v| Verdict {
        passed: v["passed"].as_bool().unwrap_or(false),
        reason: v["reason"].as_str().unwrap_or_default().to_string(),
        evidence_digest: v["evidence_digest"].as_str().map(str::to_string),
    });
    let mut extra = Map::new();
    if let Some(p) = payload.get("plugins") {
        extra.insert("plugins".into(), p.clone());
    }
    Some(AttemptFailure {
        cause,
        reason: payload["reason"].as_str().unwrap_or_default().to_string(),
        verdict,
        artifact_digests: digests_of(payload),
        extra,
    })
}

/// What a recorded `node.succeeded` says (the inverse of
/// [`At::succeeded`] and bl's additions to it).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedSuccess {
    pub digests: Vec<String>,
    pub verdict: Option<Verdict>,
    /// bl's additions, as recorded: outputs, plugins, routed, isolation,
    /// child_run.
    pub extra: Map<String, Value>,
    /// The route a router took, by name.
    pub routed: Option<String>,
}

/// Reads a recorded `node.succeeded` back.
pub fn success_of(payload: &Value) -> RecordedSuccess {
    let mut extra = Map::new();
    for key in ["outputs", "plugins", "routed", "isolation", "child_run"] {
        if let Some(v) = payload.get(key) {
            extra.insert(key.to_string(), v.clone());
        }
    }
    RecordedSuccess {
        digests: digests_of(payload),
        verdict: payload.get("verdict").map(|v| Verdict {
            passed: true,
            reason: v["reason"].as_str().unwrap_or_default().to_string(),
            evidence_digest: v["evidence_digest"].as_str().map(str::to_string),
        }),
        extra,
        routed: payload["routed"].as_str().map(str::to_string),
    }
}

/// The artifact digests a recorded attempt names.
pub fn digests_of(payload: &Value) -> Vec<String> {
    payload["artifact_digests"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_success_reads_back_as_it_was_built() {
        let at = At {
            node: "triage",
            attempt: 2,
            round: 1,
        };
        let verdict = Verdict {
            passed: true,
            reason: "router 'triage' took route 'pass'".into(),
            evidence_digest: Some(format!("sha256:{}", "e".repeat(64))),
        };
        let mut added = Map::new();
        added.insert("routed".into(), Value::from("pass"));
        added.insert("plugins".into(), serde_json::json!([{"plugin": "files"}]));
        let digests = vec![format!("sha256:{}", "a".repeat(64))];
        let event = at.succeeded_with(&digests, None, Some(&verdict), &added);
        let back = success_of(&event.payload);
        assert_eq!(back.digests, digests);
        assert_eq!(back.verdict, Some(verdict));
        assert_eq!(back.routed.as_deref(), Some("pass"));
        assert_eq!(back.extra, added);
    }

    #[test]
    fn keys_follow_the_recorded_scheme() {
        let first = At {
            node: "a",
            attempt: 1,
            round: 0,
        };
        assert_eq!(first.ready().key, "a:node.ready");
        assert_eq!(first.spend(1, None).key, "a:node.spend:1:1");
        let failure = AttemptFailure {
            cause: Cause::WorkerFault,
            reason: "worker execution failed".into(),
            verdict: None,
            artifact_digests: vec![],
            extra: Map::new(),
        };
        assert_eq!(
            first.attempt_failed(&failure).key,
            "a:node.attempt.failed:1"
        );
        let later = At {
            node: "a",
            attempt: 2,
            round: 1,
        };
        assert_eq!(later.running().key, "a:node.running:2:r1");
        assert_eq!(later.spend(1, None).key, "a:node.spend:2:1:r1");
        assert_eq!(later.failed(&failure, true).key, "a:node.failed:2:r1");
        assert_eq!(later.running().payload["repair_round"], 1);
        assert_eq!(At::repaired("a", 2, "FAILED").key, "a:node.repaired:2");
    }
}
