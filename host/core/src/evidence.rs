//! The decision evidence state machine of seed 004, with no I/O: what an
//! app built on another agent framework (LangGraph) may record about one
//! consequential decision, in which order, and what it may not. The
//! evidence service appends each accepted event to a signed, hash-chained
//! log; replaying that log through [`Decision::apply`] gives the same state
//! again, which is how a restart and an offline verifier read it.
//!
//! The rules, each a [`Refusal`] that names what differs:
//! - a decision is created once per operation id; a retry with the same
//!   binding is the same decision, with another binding it is refused;
//! - a policy must be evaluated before anything is requested; a block is
//!   final;
//! - an approval answers the approval request the app made (its
//!   checkpoint namespace and interrupt id), for this decision, identity,
//!   thread, arguments and policy version, before it expires; anything
//!   else is not authority;
//! - a rejection is terminal, even if an approval follows;
//! - a tool is reserved once, for exactly the tool and arguments decided;
//!   a second reservation is refused, never acknowledged;
//! - after a reservation, anything ambiguous (a failed callback, a lost
//!   process) needs reconciliation by a person, and nothing is replayed;
//! - an outcome needs an external reference, a status and a source.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The project id every evidence log's lines carry: what tells an evidence
/// log from a graph run's.
pub const EVIDENCE_PROJECT: &str = "bl-evidence";

/// One event of a decision, as the evidence log records it (`event` names
/// its type, in seed 004's words).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case", deny_unknown_fields)]
pub enum EvidenceEvent {
    DecisionCreated(DecisionBinding),
    /// What the app saw the model answer, from its explicit call only.
    ModelCompleted {
        output_digest: String,
    },
    PolicyEvaluated(PolicyRecord),
    /// The app paused for a person (a LangGraph `interrupt`), before the
    /// action.
    ApprovalRequested {
        checkpoint_ns: String,
        interrupt_id: String,
    },
    HumanApproved(Approval),
    HumanRejected {
        reviewer: String,
        reason: String,
    },
    /// The reservation: the one permission to call the tool, for exactly
    /// these arguments.
    ToolRequested {
        tool: String,
        args_digest: String,
    },
    /// The callback returned (`ok`) or raised. A return is not proof the
    /// effect happened outside.
    ToolExecuted {
        ok: bool,
        detail: String,
    },
    ToolResult {
        result_digest: String,
    },
    OutcomeObserved {
        external_ref: String,
        status: String,
        source: String,
    },
    /// Something after the reservation is unknown; the cause is recorded.
    ReconciliationRequired {
        cause: String,
    },
    /// A person said what happened to a reservation left unknown.
    Reconciled {
        executed: bool,
        reviewer: String,
    },
}

impl EvidenceEvent {
    /// Whether only a person's signed review may record it.
    pub fn needs_review(&self) -> bool {
        matches!(
            self,
            EvidenceEvent::HumanApproved(_)
                | EvidenceEvent::HumanRejected { .. }
                | EvidenceEvent::Reconciled { .. }
        )
    }

    /// Whether sending it again can be a retry ([`Decisions::accept`]
    /// answers `None`): a creation (a proposal sent again), a rejection
    /// given again, the latest outcome observed again.
    pub fn can_be_retried(&self) -> bool {
        matches!(
            self,
            EvidenceEvent::DecisionCreated(_)
                | EvidenceEvent::HumanRejected { .. }
                | EvidenceEvent::OutcomeObserved { .. }
        )
    }

    /// The event's type, as recorded.
    pub fn kind(&self) -> &'static str {
        match self {
            EvidenceEvent::DecisionCreated(_) => "decision_created",
            EvidenceEvent::ModelCompleted { .. } => "model_completed",
            EvidenceEvent::PolicyEvaluated(_) => "policy_evaluated",
            EvidenceEvent::ApprovalRequested { .. } => "approval_requested",
            EvidenceEvent::HumanApproved(_) => "human_approved",
            EvidenceEvent::HumanRejected { .. } => "human_rejected",
            EvidenceEvent::ToolRequested { .. } => "tool_requested",
            EvidenceEvent::ToolExecuted { .. } => "tool_executed",
            EvidenceEvent::ToolResult { .. } => "tool_result",
            EvidenceEvent::OutcomeObserved { .. } => "outcome_observed",
            EvidenceEvent::ReconciliationRequired { .. } => "reconciliation_required",
            EvidenceEvent::Reconciled { .. } => "reconciled",
        }
    }
}

/// Seconds since the epoch as RFC 3339 (UTC), as people read times.
fn rfc3339(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds.min(253_402_300_799)),
    )
    .to_string()
}

/// What one decision is about. The operation id stays the same across the
/// app's retries; the arguments are known only by their (redacted) digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionBinding {
    pub operation_id: String,
    pub thread_id: String,
    /// Who the app acts for (the delegated identity).
    pub identity: String,
    pub tool: String,
    pub args_digest: String,
}

impl DecisionBinding {
    /// The first field a decision cannot be bound to because it is empty:
    /// an approval for no one, no tool or no arguments binds nothing.
    /// (An empty thread is allowed: an app without threads has none.)
    pub fn blank_field(&self) -> Option<&'static str> {
        [
            ("operation_id", &self.operation_id),
            ("identity", &self.identity),
            ("tool", &self.tool),
            ("args_digest", &self.args_digest),
        ]
        .into_iter()
        .find(|(_, value)| value.trim().is_empty())
        .map(|(field, _)| field)
    }
}

/// A deterministic policy's answer, as its plugin gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRecord {
    pub policy_id: String,
    pub version: String,
    pub component_digest: String,
    /// The digest of exactly what the policy was asked.
    pub input_commitment: String,
    pub allow: bool,
    /// Whether a person must approve before the tool is requested.
    pub needs_approval: bool,
    pub reason: String,
}

/// A reviewer's approval and everything it is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    pub reviewer: String,
    pub operation_id: String,
    pub tool: String,
    pub identity: String,
    pub thread_id: String,
    pub checkpoint_ns: String,
    pub interrupt_id: String,
    pub args_digest: String,
    pub policy_id: String,
    pub policy_version: String,
    /// Seconds since the Unix epoch after which it is no authority.
    pub expires_at: u64,
}

/// Where a decision stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Created,
    /// The policy allowed it; a person must approve first.
    AwaitingApproval,
    /// The request may be reserved.
    Cleared,
    Blocked,
    Rejected,
    Reserved,
    Executed,
    ReconciliationRequired,
    /// Reconciled as not executed: the consequence did not happen; a new
    /// attempt is a new decision.
    Abandoned,
}

/// Why an event is not accepted. Each names what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the decision must be created first (decision_created)")]
    NotCreated,
    #[error(
        "operation {operation_id} was already created with another {field}: a retry keeps the decision's binding; a new consequence needs a new operation id"
    )]
    CreatedDifferently {
        operation_id: String,
        field: &'static str,
    },
    #[error("no policy was evaluated for this decision: evaluate one before {0}")]
    NoPolicy(&'static str),
    #[error("the policy was already evaluated; its answer stands")]
    PolicyAlreadyEvaluated,
    #[error("the policy blocked this decision: {0}")]
    Blocked(String),
    #[error("this decision needs a person's approval before the tool is requested")]
    ApprovalRequired,
    #[error("no approval was requested for this decision (approval_requested comes first)")]
    NoApprovalRequest,
    #[error("this decision needs no approval: the policy cleared it")]
    ApprovalNotNeeded,
    #[error(
        "approval was already requested at {checkpoint_ns}/{interrupt_id}: each pause for a person has its own interrupt id"
    )]
    RequestRepeated {
        checkpoint_ns: String,
        interrupt_id: String,
    },
    #[error("the decision was rejected by {0}; a rejection is final")]
    Rejected(String),
    #[error(
        "the decision was already approved (a second review of it, approval or rejection, is refused)"
    )]
    AlreadyApproved,
    #[error(
        "the approval is not authority for this decision: its {field} is {found:?}, not {expected:?}"
    )]
    ApprovalMismatch {
        field: &'static str,
        expected: String,
        found: String,
    },
    #[error(
        "the approval expired at {} (now {}); run the decision again: a person is asked again, at a new pause",
        rfc3339(*expires_at),
        rfc3339(*now)
    )]
    ApprovalExpired { expires_at: u64, now: u64 },
    #[error("an approval needs a named reviewer")]
    NoReviewer,
    #[error("the tool was already requested for this decision; a second request is never granted")]
    AlreadyReserved,
    #[error("the request is not the decided one: its {field} is {found:?}, not {expected:?}")]
    RequestMismatch {
        field: &'static str,
        expected: String,
        found: String,
    },
    #[error("the tool was not requested (tool_requested): nothing may be recorded as executed")]
    NotReserved,
    #[error("the tool's execution is already recorded")]
    AlreadyExecuted,
    #[error(
        "reconciliation is required: what happened after the request is unknown; a person records it (reconciled), nothing is replayed"
    )]
    ReconciliationRequired,
    #[error("nothing is waiting for reconciliation")]
    NothingToReconcile,
    #[error(
        "an outcome needs its {0}: it is recorded from the system it happened in, never invented"
    )]
    OutcomeIncomplete(&'static str),
    #[error("an outcome is observed only after the tool was executed")]
    NotExecuted,
    #[error("the decision was abandoned at reconciliation; a new attempt needs a new operation id")]
    Abandoned,
}

impl Refusal {
    /// The refusal's name, stable for clients to branch on
    /// (`ReconciliationRequired` is seed 004's own).
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::NotCreated => "NotCreated",
            Refusal::CreatedDifferently { .. } => "CreatedDifferently",
            Refusal::NoPolicy(_) => "NoPolicy",
            Refusal::PolicyAlreadyEvaluated => "PolicyAlreadyEvaluated",
            Refusal::Blocked(_) => "Blocked",
            Refusal::ApprovalRequired => "ApprovalRequired",
            Refusal::NoApprovalRequest => "NoApprovalRequest",
            Refusal::ApprovalNotNeeded => "ApprovalNotNeeded",
            Refusal::RequestRepeated { .. } => "RequestRepeated",
            Refusal::Rejected(_) => "Rejected",
            Refusal::AlreadyApproved => "AlreadyApproved",
            Refusal::ApprovalMismatch { .. } => "ApprovalMismatch",
            Refusal::ApprovalExpired { .. } => "ApprovalExpired",
            Refusal::NoReviewer => "NoReviewer",
            Refusal::AlreadyReserved => "AlreadyReserved",
            Refusal::RequestMismatch { .. } => "RequestMismatch",
            Refusal::NotReserved => "NotReserved",
            Refusal::AlreadyExecuted => "AlreadyExecuted",
            Refusal::ReconciliationRequired => "ReconciliationRequired",
            Refusal::NothingToReconcile => "NothingToReconcile",
            Refusal::OutcomeIncomplete(_) => "OutcomeIncomplete",
            Refusal::NotExecuted => "NotExecuted",
            Refusal::Abandoned => "Abandoned",
        }
    }

    /// The field that differs, for the refusals that name one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Refusal::CreatedDifferently { field, .. }
            | Refusal::ApprovalMismatch { field, .. }
            | Refusal::RequestMismatch { field, .. } => Some(field),
            Refusal::OutcomeIncomplete(field) => Some(field),
            // The approval's binding field that no longer holds.
            Refusal::ApprovalExpired { .. } => Some("expires_at"),
            _ => None,
        }
    }
}

/// One decision's state, made by applying its events in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub binding: DecisionBinding,
    pub stage: Stage,
    pub policy: Option<PolicyRecord>,
    /// The approval request's (checkpoint namespace, interrupt id): the
    /// latest, which an approval must answer.
    pub approval_request: Option<(String, String)>,
    /// Every request made, so that none is made again.
    pub approval_requests: Vec<(String, String)>,
    pub approval: Option<Approval>,
    pub rejected_by: Option<String>,
    /// Why it was rejected, as the reviewer signed it.
    pub rejection_reason: Option<String>,
    pub model_outputs: Vec<String>,
    /// The digests of what the tool returned, as the app recorded them.
    pub tool_results: Vec<String>,
    pub outcomes: usize,
    /// The latest outcome observed: `(external_ref, status, source)`.
    pub last_outcome: Option<(String, String, String)>,
}

impl Decision {
    /// Whether this decision was rejected by `reviewer` for `reason`.
    fn is_rejection(&self, reviewer: &str, reason: &str) -> bool {
        self.rejected_by.as_deref() == Some(reviewer)
            && self.rejection_reason.as_deref() == Some(reason)
    }

    /// The decision a `decision_created` event makes.
    pub fn create(binding: DecisionBinding) -> Decision {
        Decision {
            binding,
            stage: Stage::Created,
            policy: None,
            approval_request: None,
            approval_requests: Vec::new(),
            approval: None,
            rejected_by: None,
            rejection_reason: None,
            model_outputs: Vec::new(),
            tool_results: Vec::new(),
            outcomes: 0,
            last_outcome: None,
        }
    }

    /// Replays a decision's events from its first (`decision_created`).
    /// `Err` holds the index of the first event refused and why.
    pub fn replay<'a>(
        events: impl IntoIterator<Item = (&'a EvidenceEvent, u64)>,
    ) -> Result<Option<Decision>, (usize, Refusal)> {
        let mut decision: Option<Decision> = None;
        for (i, (event, now)) in events.into_iter().enumerate() {
            match &mut decision {
                None => match event {
                    EvidenceEvent::DecisionCreated(binding) => {
                        decision = Some(Decision::create(binding.clone()))
                    }
                    _ => return Err((i, Refusal::NotCreated)),
                },
                Some(d) => d.apply(event, now).map_err(|r| (i, r))?,
            }
        }
        Ok(decision)
    }

    /// Whether `event`, at `now` (seconds since the epoch), is accepted;
    /// accepted, it is applied. A refused event changes nothing.
    pub fn apply(&mut self, event: &EvidenceEvent, now: u64) -> Result<(), Refusal> {
        use EvidenceEvent as E;
        // What no event may pass, whatever it is.
        match (self.stage, event) {
            // Asking again about the same decision learns it is closed.
            (
                Stage::Rejected,
                E::HumanRejected { .. } | E::ModelCompleted { .. } | E::DecisionCreated(_),
            ) => {}
            (Stage::Rejected, _) => {
                return Err(Refusal::Rejected(
                    self.rejected_by.clone().unwrap_or_default(),
                ));
            }
            (Stage::Abandoned, E::ModelCompleted { .. } | E::DecisionCreated(_)) => {}
            (Stage::Abandoned, _) => return Err(Refusal::Abandoned),
            _ => {}
        }
        match event {
            E::DecisionCreated(binding) => {
                self.same_binding(binding)?;
                // A retry of the same decision: nothing new.
            }
            E::ModelCompleted { output_digest } => {
                self.model_outputs.push(output_digest.clone());
            }
            E::PolicyEvaluated(policy) => {
                if self.policy.is_some() {
                    return Err(Refusal::PolicyAlreadyEvaluated);
                }
                self.stage = match (policy.allow, policy.needs_approval) {
                    (false, _) => Stage::Blocked,
                    (true, true) => Stage::AwaitingApproval,
                    (true, false) => Stage::Cleared,
                };
                self.policy = Some(policy.clone());
            }
            E::ApprovalRequested {
                checkpoint_ns,
                interrupt_id,
            } => {
                // An approval that expired before the tool was requested
                // is no authority: a person is asked again.
                if self.approval_expired(now) {
                    self.approval = None;
                    self.stage = Stage::AwaitingApproval;
                }
                self.expect_awaiting_approval()?;
                // The latest request is the one an approval must answer (a
                // resumed graph may interrupt again); an earlier one is never
                // made current again, or its stale approval would answer.
                let request = (checkpoint_ns.clone(), interrupt_id.clone());
                if self.approval_requests.contains(&request) {
                    return Err(Refusal::RequestRepeated {
                        checkpoint_ns: request.0,
                        interrupt_id: request.1,
                    });
                }
                self.approval_requests.push(request.clone());
                self.approval_request = Some(request);
            }
            E::HumanApproved(approval) => {
                self.expect_awaiting_approval()?;
                self.check_approval(approval, now)?;
                self.approval = Some(approval.clone());
                self.stage = Stage::Cleared;
            }
            E::HumanRejected { reviewer, reason } => {
                if reviewer.trim().is_empty() {
                    return Err(Refusal::NoReviewer);
                }
                match self.stage {
                    Stage::Rejected if self.is_rejection(reviewer, reason) => return Ok(()),
                    Stage::Rejected => {
                        return Err(Refusal::Rejected(
                            self.rejected_by.clone().unwrap_or_default(),
                        ));
                    }
                    Stage::Created => return Err(Refusal::NoPolicy("a review")),
                    Stage::AwaitingApproval | Stage::Blocked => {}
                    // An approval that expired unused no longer stands in
                    // a person's way.
                    Stage::Cleared if self.approval_expired(now) => {}
                    Stage::Cleared if self.approval.is_none() => {
                        return Err(Refusal::ApprovalNotNeeded);
                    }
                    _ => return Err(Refusal::AlreadyApproved),
                }
                self.stage = Stage::Rejected;
                self.rejected_by = Some(reviewer.clone());
                self.rejection_reason = Some(reason.clone());
            }
            E::ToolRequested { tool, args_digest } => {
                match self.stage {
                    Stage::Created => return Err(Refusal::NoPolicy("the tool is requested")),
                    Stage::Blocked => return Err(self.blocked()),
                    Stage::AwaitingApproval => return Err(Refusal::ApprovalRequired),
                    Stage::Reserved | Stage::Executed => return Err(Refusal::AlreadyReserved),
                    Stage::ReconciliationRequired => return Err(Refusal::ReconciliationRequired),
                    Stage::Cleared => {}
                    Stage::Rejected | Stage::Abandoned => unreachable!("refused above"),
                }
                let want = &self.binding;
                differs("tool", &want.tool, tool).map_err(request_mismatch)?;
                differs("args_digest", &want.args_digest, args_digest).map_err(request_mismatch)?;
                // The approval must still hold now, not only when given.
                if let Some(approval) = &self.approval
                    && now > approval.expires_at
                {
                    return Err(Refusal::ApprovalExpired {
                        expires_at: approval.expires_at,
                        now,
                    });
                }
                self.stage = Stage::Reserved;
            }
            E::ToolExecuted { ok, .. } => {
                match self.stage {
                    Stage::Reserved => {}
                    Stage::Executed => return Err(Refusal::AlreadyExecuted),
                    Stage::ReconciliationRequired => return Err(Refusal::ReconciliationRequired),
                    _ => return Err(Refusal::NotReserved),
                }
                // A callback that raised may have acted before it did.
                self.stage = if *ok {
                    Stage::Executed
                } else {
                    Stage::ReconciliationRequired
                };
            }
            E::ToolResult { result_digest } => {
                if self.stage != Stage::Executed {
                    return Err(self.not_executed());
                }
                self.tool_results.push(result_digest.clone());
            }
            E::OutcomeObserved {
                external_ref,
                status,
                source,
            } => {
                if self.stage != Stage::Executed {
                    return Err(self.not_executed());
                }
                for (field, value) in [
                    ("external_ref", external_ref),
                    ("status", status),
                    ("source", source),
                ] {
                    if value.trim().is_empty() {
                        return Err(Refusal::OutcomeIncomplete(field));
                    }
                }
                self.outcomes += 1;
                self.last_outcome = Some((external_ref.clone(), status.clone(), source.clone()));
            }
            E::ReconciliationRequired { .. } => match self.stage {
                Stage::Reserved | Stage::ReconciliationRequired => {
                    self.stage = Stage::ReconciliationRequired;
                }
                _ => return Err(Refusal::NotReserved),
            },
            E::Reconciled { executed, reviewer } => {
                if self.stage != Stage::ReconciliationRequired {
                    return Err(Refusal::NothingToReconcile);
                }
                if reviewer.trim().is_empty() {
                    return Err(Refusal::NoReviewer);
                }
                self.stage = if *executed {
                    Stage::Executed
                } else {
                    Stage::Abandoned
                };
            }
        }
        Ok(())
    }

    /// Whether the next step may call the tool: only a reservation this
    /// decision holds and has not used.
    pub fn may_call_tool(&self) -> bool {
        self.stage == Stage::Reserved
    }

    fn same_binding(&self, other: &DecisionBinding) -> Result<(), Refusal> {
        let mine = &self.binding;
        for (field, a, b) in [
            ("operation_id", &mine.operation_id, &other.operation_id),
            ("thread_id", &mine.thread_id, &other.thread_id),
            ("identity", &mine.identity, &other.identity),
            ("tool", &mine.tool, &other.tool),
            ("args_digest", &mine.args_digest, &other.args_digest),
        ] {
            if a != b {
                return Err(Refusal::CreatedDifferently {
                    operation_id: mine.operation_id.clone(),
                    field,
                });
            }
        }
        Ok(())
    }

    /// Cleared by an approval whose expiry has passed at `now`, and not
    /// yet requested.
    pub fn approval_expired(&self, now: u64) -> bool {
        self.stage == Stage::Cleared && self.approval.as_ref().is_some_and(|a| now > a.expires_at)
    }

    fn expect_awaiting_approval(&self) -> Result<(), Refusal> {
        match self.stage {
            Stage::AwaitingApproval => Ok(()),
            Stage::Created => Err(Refusal::NoPolicy("an approval")),
            Stage::Blocked => Err(self.blocked()),
            Stage::Cleared if self.approval.is_none() => Err(Refusal::ApprovalNotNeeded),
            Stage::Cleared => Err(Refusal::AlreadyApproved),
            _ => Err(Refusal::AlreadyReserved),
        }
    }

    fn check_approval(&self, approval: &Approval, now: u64) -> Result<(), Refusal> {
        if approval.reviewer.trim().is_empty() {
            return Err(Refusal::NoReviewer);
        }
        let (checkpoint_ns, interrupt_id) = self
            .approval_request
            .as_ref()
            .ok_or(Refusal::NoApprovalRequest)?;
        let policy = self
            .policy
            .as_ref()
            .ok_or(Refusal::NoPolicy("an approval"))?;
        let want = &self.binding;
        for (field, expected, found) in [
            ("operation_id", &want.operation_id, &approval.operation_id),
            ("identity", &want.identity, &approval.identity),
            ("thread_id", &want.thread_id, &approval.thread_id),
            ("checkpoint_ns", checkpoint_ns, &approval.checkpoint_ns),
            ("interrupt_id", interrupt_id, &approval.interrupt_id),
            ("tool", &want.tool, &approval.tool),
            ("args_digest", &want.args_digest, &approval.args_digest),
            ("policy_id", &policy.policy_id, &approval.policy_id),
            ("policy_version", &policy.version, &approval.policy_version),
        ] {
            differs(field, expected, found).map_err(approval_mismatch)?;
        }
        if now > approval.expires_at {
            return Err(Refusal::ApprovalExpired {
                expires_at: approval.expires_at,
                now,
            });
        }
        Ok(())
    }

    fn blocked(&self) -> Refusal {
        Refusal::Blocked(
            self.policy
                .as_ref()
                .map(|p| p.reason.clone())
                .unwrap_or_default(),
        )
    }

    fn not_executed(&self) -> Refusal {
        match self.stage {
            Stage::ReconciliationRequired => Refusal::ReconciliationRequired,
            _ => Refusal::NotExecuted,
        }
    }
}

/// What one line of an evidence log carries (its payload): the event, for
/// which operation, at what time (seconds since the epoch), and for a
/// person's decision the signed review it came from, kept whole so that
/// anyone can check the signature again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoggedEvent {
    pub operation_id: String,
    pub at: u64,
    pub evidence: EvidenceEvent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<SignedReview>,
}

impl LoggedEvent {
    /// Whether the event is one only a person's signed review may record.
    pub fn needs_review(&self) -> bool {
        self.evidence.needs_review()
    }

    /// Whether the review it carries is for exactly this event.
    pub fn review_matches(&self) -> bool {
        self.review.as_ref().is_some_and(|signed| {
            signed.review.operation_id() == self.operation_id
                && signed.review.event() == self.evidence
        })
    }
}

/// What a reviewer decides about a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "review", rename_all = "snake_case", deny_unknown_fields)]
pub enum Review {
    Approve(Approval),
    Reject {
        operation_id: String,
        reviewer: String,
        reason: String,
    },
    Reconcile {
        operation_id: String,
        reviewer: String,
        executed: bool,
    },
}

impl Review {
    pub fn operation_id(&self) -> &str {
        match self {
            Review::Approve(a) => &a.operation_id,
            Review::Reject { operation_id, .. } | Review::Reconcile { operation_id, .. } => {
                operation_id
            }
        }
    }

    pub fn reviewer(&self) -> &str {
        match self {
            Review::Approve(a) => &a.reviewer,
            Review::Reject { reviewer, .. } | Review::Reconcile { reviewer, .. } => reviewer,
        }
    }

    /// The event the review records.
    pub fn event(&self) -> EvidenceEvent {
        match self.clone() {
            Review::Approve(approval) => EvidenceEvent::HumanApproved(approval),
            Review::Reject {
                reviewer, reason, ..
            } => EvidenceEvent::HumanRejected { reviewer, reason },
            Review::Reconcile {
                reviewer, executed, ..
            } => EvidenceEvent::Reconciled { executed, reviewer },
        }
    }
}

/// A review for one workspace, with its reviewer's key and signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedReview {
    /// The verifier key of the workspace the review is for: a review is
    /// no authority in another workspace.
    pub workspace: String,
    pub review: Review,
    /// The reviewer's verifier key.
    pub key: String,
    /// Ed25519 over [`review_signed_bytes`], in hex.
    pub signature: String,
}

/// The bytes a reviewer signs: a tag, then the canonical JSON of the
/// workspace and the review.
pub fn review_signed_bytes(workspace: &str, review: &Review) -> Vec<u8> {
    let body = serde_json::json!({"workspace": workspace, "review": review});
    let mut bytes = b"bl-evidence-review/v1\n".to_vec();
    bytes.extend(crate::canonical::canonical_json(&body).into_bytes());
    bytes
}

/// The bytes the workspace's key signs as the receipt of an event it
/// recorded: the answer an app keeps, checkable with the public key alone
/// (a reservation's receipt is the signed permission to call the tool).
pub fn receipt_signed_bytes(operation_id: &str, sequence: u64, event_hash: &str) -> Vec<u8> {
    let body = serde_json::json!({
        "operation_id": operation_id,
        "sequence": sequence,
        "event_hash": event_hash,
    });
    let mut bytes = b"bl-evidence-receipt/v1\n".to_vec();
    bytes.extend(crate::canonical::canonical_json(&body).into_bytes());
    bytes
}

/// Every decision of an evidence log, by operation id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions(BTreeMap<String, Decision>);

impl Decisions {
    pub fn get(&self, operation_id: &str) -> Option<&Decision> {
        self.0.get(operation_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Decision)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The decision `event` would leave behind, or `None` for a retry of
    /// `decision_created` that changes nothing. Nothing is changed here:
    /// [`Decisions::commit`] does, once the event is recorded.
    pub fn accept(
        &self,
        operation_id: &str,
        event: &EvidenceEvent,
        now: u64,
    ) -> Result<Option<Decision>, Refusal> {
        match (self.0.get(operation_id), event) {
            (None, EvidenceEvent::DecisionCreated(binding)) => {
                if binding.operation_id != operation_id {
                    return Err(Refusal::CreatedDifferently {
                        operation_id: operation_id.to_string(),
                        field: "operation_id",
                    });
                }
                Ok(Some(Decision::create(binding.clone())))
            }
            (None, _) => Err(Refusal::NotCreated),
            (Some(decision), EvidenceEvent::DecisionCreated(_)) => {
                decision.clone().apply(event, now).map(|()| None)
            }
            // The same rejection given again (a relayed review retried) is
            // a retry; another reviewer's or reason is refused: the first
            // is final.
            (Some(decision), EvidenceEvent::HumanRejected { .. })
                if decision.stage == Stage::Rejected =>
            {
                decision.clone().apply(event, now).map(|()| None)
            }
            // The outcome just observed, sent again (its answer lost) is a
            // retry, not a second observation; another one is recorded,
            // since what the outside system says may change.
            (
                Some(decision),
                EvidenceEvent::OutcomeObserved {
                    external_ref,
                    status,
                    source,
                },
            ) if decision
                .last_outcome
                .as_ref()
                .is_some_and(|(r, st, so)| (r, st, so) == (external_ref, status, source)) =>
            {
                Ok(None)
            }
            (Some(decision), _) => {
                let mut next = decision.clone();
                next.apply(event, now)?;
                Ok(Some(next))
            }
        }
    }

    pub fn commit(&mut self, operation_id: &str, decision: Decision) {
        self.0.insert(operation_id.to_string(), decision);
    }

    /// Applies a logged event as [`Decisions::accept`] and
    /// [`Decisions::commit`] would; `Ok(false)`: a retry, nothing changed
    /// (but an outcome logged twice is counted twice).
    pub fn replay(&mut self, logged: &LoggedEvent) -> Result<bool, Refusal> {
        match self.accept(&logged.operation_id, &logged.evidence, logged.at)? {
            Some(decision) => {
                self.commit(&logged.operation_id, decision);
                Ok(true)
            }
            None => {
                // A log made before an outcome sent again was a retry holds
                // it twice: it is still an outcome the log holds.
                if matches!(logged.evidence, EvidenceEvent::OutcomeObserved { .. })
                    && let Some(decision) = self.0.get_mut(&logged.operation_id)
                {
                    decision.outcomes += 1;
                }
                Ok(false)
            }
        }
    }
}

/// `(field, expected, found)` when they differ.
fn differs(
    field: &'static str,
    expected: &str,
    found: &str,
) -> Result<(), (&'static str, String, String)> {
    if expected == found {
        Ok(())
    } else {
        Err((field, expected.to_string(), found.to_string()))
    }
}

fn approval_mismatch((field, expected, found): (&'static str, String, String)) -> Refusal {
    Refusal::ApprovalMismatch {
        field,
        expected,
        found,
    }
}

fn request_mismatch((field, expected, found): (&'static str, String, String)) -> Refusal {
    Refusal::RequestMismatch {
        field,
        expected,
        found,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EvidenceEvent as E;

    const NOW: u64 = 1_800_000_000;

    fn binding() -> DecisionBinding {
        DecisionBinding {
            operation_id: "op-1".into(),
            thread_id: "thread-1".into(),
            identity: "alice@example.org".into(),
            tool: "refund".into(),
            args_digest: "sha256:aa".into(),
        }
    }

    fn policy(allow: bool, needs_approval: bool) -> E {
        E::PolicyEvaluated(PolicyRecord {
            policy_id: "refunds".into(),
            version: "3".into(),
            component_digest: "sha256:cc".into(),
            input_commitment: "sha256:ii".into(),
            allow,
            needs_approval,
            reason: if allow {
                "under the limit"
            } else {
                "over the limit"
            }
            .into(),
        })
    }

    fn requested() -> E {
        E::ApprovalRequested {
            checkpoint_ns: "review:1".into(),
            interrupt_id: "int-1".into(),
        }
    }

    fn approval() -> Approval {
        Approval {
            reviewer: "bob".into(),
            operation_id: "op-1".into(),
            identity: "alice@example.org".into(),
            thread_id: "thread-1".into(),
            checkpoint_ns: "review:1".into(),
            interrupt_id: "int-1".into(),
            tool: "refund".into(),
            args_digest: "sha256:aa".into(),
            policy_id: "refunds".into(),
            policy_version: "3".into(),
            expires_at: NOW + 600,
        }
    }

    fn executed() -> E {
        E::ToolExecuted {
            ok: true,
            detail: String::new(),
        }
    }

    fn reserve() -> E {
        E::ToolRequested {
            tool: "refund".into(),
            args_digest: "sha256:aa".into(),
        }
    }

    /// A decision after `events`, each accepted at NOW.
    fn after(events: &[E]) -> Decision {
        let mut d = Decision::create(binding());
        for e in events {
            d.apply(e, NOW)
                .unwrap_or_else(|r| panic!("{} refused: {r}", e.kind()));
        }
        d
    }

    fn approved() -> Decision {
        after(&[
            policy(true, true),
            requested(),
            E::HumanApproved(approval()),
        ])
    }

    #[test]
    fn allowed_approved_reserved_executed_observed() {
        let mut d = approved();
        d.apply(&reserve(), NOW).unwrap();
        assert!(d.may_call_tool());
        for e in [
            executed(),
            E::ToolResult {
                result_digest: "sha256:rr".into(),
            },
            E::OutcomeObserved {
                external_ref: "refund/991".into(),
                status: "settled".into(),
                source: "payments-api".into(),
            },
        ] {
            d.apply(&e, NOW).unwrap();
        }
        assert_eq!((d.stage, d.outcomes), (Stage::Executed, 1));
        assert_eq!(d.tool_results, ["sha256:rr"]);
        assert!(!d.may_call_tool());
    }

    #[test]
    fn a_policy_that_needs_no_approval_clears_the_request() {
        let mut d = after(&[policy(true, false)]);
        d.apply(&reserve(), NOW).unwrap();
        assert_eq!(d.stage, Stage::Reserved);
    }

    #[test]
    fn nothing_is_requested_before_a_policy_and_a_block_is_final() {
        let mut d = after(&[]);
        assert_eq!(
            d.apply(&reserve(), NOW),
            Err(Refusal::NoPolicy("the tool is requested"))
        );
        let mut d = after(&[policy(false, false)]);
        assert_eq!(
            d.apply(&reserve(), NOW),
            Err(Refusal::Blocked("over the limit".into()))
        );
        assert_eq!(
            d.apply(&E::HumanApproved(approval()), NOW),
            Err(Refusal::Blocked("over the limit".into()))
        );
        assert_eq!(
            d.apply(&policy(true, false), NOW),
            Err(Refusal::PolicyAlreadyEvaluated)
        );
        assert_eq!(d.stage, Stage::Blocked);
    }

    #[test]
    fn a_request_before_approval_is_refused() {
        let mut d = after(&[policy(true, true), requested()]);
        assert_eq!(d.apply(&reserve(), NOW), Err(Refusal::ApprovalRequired));
    }

    #[test]
    fn an_approval_answers_a_request_the_app_made() {
        let mut d = after(&[policy(true, true)]);
        assert_eq!(
            d.apply(&E::HumanApproved(approval()), NOW),
            Err(Refusal::NoApprovalRequest)
        );
        let mut d = after(&[policy(true, false)]);
        assert_eq!(
            d.apply(&E::HumanApproved(approval()), NOW),
            Err(Refusal::ApprovalNotNeeded)
        );
    }

    #[test]
    fn an_approval_bound_to_anything_else_is_no_authority_and_names_the_field() {
        type Change = fn(&mut Approval);
        let cases: [(&str, Change); 9] = [
            ("operation_id", |a| a.operation_id = "op-2".into()),
            ("tool", |a| a.tool = "transfer".into()),
            ("policy_id", |a| a.policy_id = "other-policy".into()),
            ("identity", |a| a.identity = "mallory".into()),
            ("thread_id", |a| a.thread_id = "thread-2".into()),
            ("checkpoint_ns", |a| a.checkpoint_ns = "review:0".into()),
            ("interrupt_id", |a| a.interrupt_id = "int-0".into()),
            ("args_digest", |a| a.args_digest = "sha256:bb".into()),
            ("policy_version", |a| a.policy_version = "2".into()),
        ];
        for (field, change) in cases {
            let mut d = after(&[policy(true, true), requested()]);
            let mut other = approval();
            change(&mut other);
            match d.apply(&E::HumanApproved(other), NOW) {
                Err(Refusal::ApprovalMismatch { field: f, .. }) => assert_eq!(f, field),
                outcome => panic!("{field}: {outcome:?}"),
            }
            assert_eq!(d.stage, Stage::AwaitingApproval, "{field}: nothing changed");
        }
    }

    /// Approval was asked at int-1, then (the graph resumed and paused
    /// again) at int-2.
    fn interrupted_twice() -> Decision {
        after(&[
            policy(true, true),
            requested(),
            E::ApprovalRequested {
                checkpoint_ns: "review:1".into(),
                interrupt_id: "int-2".into(),
            },
        ])
    }

    #[test]
    fn an_approval_for_an_earlier_interrupt_does_not_answer_a_later_one() {
        // LangGraph's stale resume value (#8837): the graph interrupted again.
        let mut d = interrupted_twice();
        assert!(matches!(
            d.apply(&E::HumanApproved(approval()), NOW),
            Err(Refusal::ApprovalMismatch {
                field: "interrupt_id",
                ..
            })
        ));
    }

    #[test]
    fn an_earlier_interrupt_is_never_requested_again() {
        let mut d = interrupted_twice();
        assert!(matches!(
            d.apply(&requested(), NOW),
            Err(Refusal::RequestRepeated { .. })
        ));
        assert_eq!(
            d.approval_request,
            Some(("review:1".into(), "int-2".into()))
        );
    }

    #[test]
    fn a_rejection_given_again_is_the_same_rejection() {
        let mut decisions = Decisions::default();
        let rejected = E::HumanRejected {
            reviewer: "carol".into(),
            reason: "no".into(),
        };
        for e in [
            E::DecisionCreated(binding()),
            policy(true, true),
            rejected.clone(),
        ] {
            assert!(
                decisions.accept("op-1", &e, NOW).unwrap().is_some(),
                "{}",
                e.kind()
            );
            let next = decisions.accept("op-1", &e, NOW).unwrap();
            if let Some(d) = next {
                decisions.commit("op-1", d);
            }
        }
        assert_eq!(decisions.accept("op-1", &rejected, NOW), Ok(None));
    }

    #[test]
    fn the_outcome_just_observed_sent_again_is_a_retry_and_a_changed_one_is_recorded() {
        let mut decisions = Decisions::default();
        let outcome = |status: &str| E::OutcomeObserved {
            external_ref: "refund/991".into(),
            status: status.into(),
            source: "payments-api".into(),
        };
        let mut record = |e: &E| -> bool {
            match decisions.accept("op-1", e, NOW).unwrap() {
                Some(d) => {
                    decisions.commit("op-1", d);
                    true
                }
                None => false,
            }
        };
        for e in [
            E::DecisionCreated(binding()),
            policy(true, false),
            reserve(),
            executed(),
        ] {
            assert!(record(&e), "{}", e.kind());
        }
        assert!(record(&outcome("pending")));
        assert!(!record(&outcome("pending")), "sent again: a retry");
        assert!(record(&outcome("settled")), "what the outside says changed");
        assert!(record(&outcome("pending")), "and changed back");
        let d = decisions.get("op-1").unwrap();
        assert_eq!(d.outcomes, 3);
        // A log written before the rules read it as a retry holds the same
        // outcome twice in a row: replayed, it is accepted and counted.
        let logged = LoggedEvent {
            operation_id: "op-1".into(),
            at: NOW,
            evidence: outcome("pending"),
            review: None,
        };
        assert_eq!(decisions.replay(&logged), Ok(false));
        assert_eq!(decisions.get("op-1").unwrap().outcomes, 4);
    }

    #[test]
    fn an_expired_approval_is_refused_when_given_and_when_used() {
        let mut d = after(&[policy(true, true), requested()]);
        let refused = d.apply(&E::HumanApproved(approval()), NOW + 601);
        assert_eq!(
            refused,
            Err(Refusal::ApprovalExpired {
                expires_at: NOW + 600,
                now: NOW + 601
            })
        );
        // The refusal names the binding field that no longer holds.
        assert_eq!(refused.unwrap_err().field(), Some("expires_at"));
        let mut d = approved();
        assert_eq!(
            d.apply(&reserve(), NOW + 601),
            Err(Refusal::ApprovalExpired {
                expires_at: NOW + 600,
                now: NOW + 601
            })
        );
        // Not a dead end: a person is asked again at a new pause, and the
        // old approval no longer counts.
        let again = E::ApprovalRequested {
            checkpoint_ns: "ns".into(),
            interrupt_id: "i-2".into(),
        };
        assert_eq!(d.apply(&again, NOW), Err(Refusal::AlreadyApproved));
        assert!(d.approval_expired(NOW + 601));
        assert_eq!(d.apply(&again, NOW + 601), Ok(()));
        assert_eq!(
            (d.stage, d.approval.is_none()),
            (Stage::AwaitingApproval, true)
        );
        assert_eq!(
            d.apply(&reserve(), NOW + 601),
            Err(Refusal::ApprovalRequired)
        );
        // And a person may reject it once its approval has expired, not
        // before.
        let reject = E::HumanRejected {
            reviewer: "carol".into(),
            reason: "too late".into(),
        };
        let mut d = approved();
        assert_eq!(d.apply(&reject, NOW), Err(Refusal::AlreadyApproved));
        assert_eq!(d.apply(&reject, NOW + 601), Ok(()));
        assert_eq!(d.stage, Stage::Rejected);
    }

    #[test]
    fn an_approval_and_a_rejection_need_a_reviewer() {
        let mut d = after(&[policy(true, true), requested()]);
        let mut anonymous = approval();
        anonymous.reviewer = " ".into();
        assert_eq!(
            d.apply(&E::HumanApproved(anonymous), NOW),
            Err(Refusal::NoReviewer)
        );
        assert_eq!(
            d.apply(
                &E::HumanRejected {
                    reviewer: String::new(),
                    reason: "no".into()
                },
                NOW
            ),
            Err(Refusal::NoReviewer)
        );
    }

    #[test]
    fn a_rejection_is_final_even_if_an_approval_follows() {
        let mut d = after(&[
            policy(true, true),
            requested(),
            E::HumanRejected {
                reviewer: "carol".into(),
                reason: "not this customer".into(),
            },
        ]);
        for e in [
            E::HumanApproved(approval()),
            reserve(),
            requested(),
            policy(true, false),
        ] {
            assert_eq!(
                d.apply(&e, NOW),
                Err(Refusal::Rejected("carol".into())),
                "{}",
                e.kind()
            );
        }
        assert_eq!(d.stage, Stage::Rejected);
        // The app asking again about the same decision learns it is closed;
        // another binding under its id is still refused.
        assert_eq!(d.apply(&E::DecisionCreated(binding()), NOW), Ok(()));
        assert_eq!(d.stage, Stage::Rejected);
        let other = DecisionBinding {
            tool: "delete".into(),
            ..binding()
        };
        assert!(matches!(
            d.apply(&E::DecisionCreated(other), NOW),
            Err(Refusal::CreatedDifferently { field: "tool", .. })
        ));
        // The same rejection again is a retry; another reason, or another
        // reviewer, is refused: the first stands as it was signed.
        let rejection = |reviewer: &str, reason: &str| E::HumanRejected {
            reviewer: reviewer.into(),
            reason: reason.into(),
        };
        assert_eq!(
            d.apply(&rejection("carol", "not this customer"), NOW),
            Ok(())
        );
        for again in [
            rejection("carol", "other"),
            rejection("dave", "not this customer"),
        ] {
            assert_eq!(d.apply(&again, NOW), Err(Refusal::Rejected("carol".into())));
        }
        assert_eq!(d.rejection_reason.as_deref(), Some("not this customer"));
    }

    #[test]
    fn an_approved_decision_cannot_be_rejected_afterwards() {
        let mut d = approved();
        assert_eq!(
            d.apply(
                &E::HumanRejected {
                    reviewer: "carol".into(),
                    reason: "late".into()
                },
                NOW
            ),
            Err(Refusal::AlreadyApproved)
        );
    }

    #[test]
    fn the_request_must_be_the_decided_tool_and_arguments() {
        let mut d = approved();
        let other_args = E::ToolRequested {
            tool: "refund".into(),
            args_digest: "sha256:bb".into(),
        };
        assert!(matches!(
            d.apply(&other_args, NOW),
            Err(Refusal::RequestMismatch {
                field: "args_digest",
                ..
            })
        ));
        let other_tool = E::ToolRequested {
            tool: "transfer".into(),
            args_digest: "sha256:aa".into(),
        };
        assert!(matches!(
            d.apply(&other_tool, NOW),
            Err(Refusal::RequestMismatch { field: "tool", .. })
        ));
        assert_eq!(d.stage, Stage::Cleared);
    }

    #[test]
    fn a_second_reservation_is_never_granted() {
        let mut d = approved();
        d.apply(&reserve(), NOW).unwrap();
        assert_eq!(d.apply(&reserve(), NOW), Err(Refusal::AlreadyReserved));
        d.apply(&executed(), NOW).unwrap();
        assert_eq!(d.apply(&reserve(), NOW), Err(Refusal::AlreadyReserved));
        assert_eq!(d.apply(&executed(), NOW), Err(Refusal::AlreadyExecuted));
    }

    #[test]
    fn a_failed_callback_or_a_lost_process_needs_reconciliation_and_nothing_replays() {
        for ambiguity in [
            E::ToolExecuted {
                ok: false,
                detail: "timeout".into(),
            },
            E::ReconciliationRequired {
                cause: "the app restarted after the reservation".into(),
            },
        ] {
            let mut d = approved();
            d.apply(&reserve(), NOW).unwrap();
            d.apply(&ambiguity, NOW).unwrap();
            assert_eq!(d.stage, Stage::ReconciliationRequired);
            assert_eq!(
                d.apply(&reserve(), NOW),
                Err(Refusal::ReconciliationRequired)
            );
            assert_eq!(
                d.apply(&executed(), NOW),
                Err(Refusal::ReconciliationRequired)
            );
            assert_eq!(
                d.apply(
                    &E::OutcomeObserved {
                        external_ref: "x".into(),
                        status: "y".into(),
                        source: "z".into()
                    },
                    NOW
                ),
                Err(Refusal::ReconciliationRequired)
            );
            assert!(!d.may_call_tool());
        }
    }

    #[test]
    fn a_person_reconciles_and_a_new_attempt_needs_a_new_operation() {
        let mut d = approved();
        d.apply(&reserve(), NOW).unwrap();
        assert_eq!(
            d.apply(
                &E::Reconciled {
                    executed: false,
                    reviewer: "bob".into()
                },
                NOW
            ),
            Err(Refusal::NothingToReconcile)
        );
        d.apply(
            &E::ReconciliationRequired {
                cause: "crash".into(),
            },
            NOW,
        )
        .unwrap();
        assert_eq!(
            d.apply(
                &E::Reconciled {
                    executed: false,
                    reviewer: String::new()
                },
                NOW
            ),
            Err(Refusal::NoReviewer)
        );
        d.apply(
            &E::Reconciled {
                executed: false,
                reviewer: "bob".into(),
            },
            NOW,
        )
        .unwrap();
        assert_eq!(d.stage, Stage::Abandoned);
        assert_eq!(d.apply(&reserve(), NOW), Err(Refusal::Abandoned));
    }

    #[test]
    fn nothing_is_executed_or_observed_without_a_reservation() {
        let mut d = approved();
        assert_eq!(d.apply(&executed(), NOW), Err(Refusal::NotReserved));
        assert_eq!(
            d.apply(
                &E::ToolResult {
                    result_digest: "sha256:rr".into()
                },
                NOW
            ),
            Err(Refusal::NotExecuted)
        );
        assert_eq!(
            d.apply(&E::ReconciliationRequired { cause: "?".into() }, NOW),
            Err(Refusal::NotReserved)
        );
    }

    #[test]
    fn an_outcome_needs_a_reference_a_status_and_a_source() {
        let mut d = approved();
        d.apply(&reserve(), NOW).unwrap();
        d.apply(&executed(), NOW).unwrap();
        for (missing, event) in [
            (
                "external_ref",
                E::OutcomeObserved {
                    external_ref: String::new(),
                    status: "settled".into(),
                    source: "payments-api".into(),
                },
            ),
            (
                "status",
                E::OutcomeObserved {
                    external_ref: "refund/1".into(),
                    status: " ".into(),
                    source: "payments-api".into(),
                },
            ),
            (
                "source",
                E::OutcomeObserved {
                    external_ref: "refund/1".into(),
                    status: "settled".into(),
                    source: String::new(),
                },
            ),
        ] {
            assert_eq!(
                d.apply(&event, NOW),
                Err(Refusal::OutcomeIncomplete(missing))
            );
        }
        assert_eq!(d.outcomes, 0);
    }

    #[test]
    fn a_retry_is_the_same_decision_and_another_binding_is_refused() {
        let mut d = after(&[policy(true, false)]);
        d.apply(&E::DecisionCreated(binding()), NOW).unwrap();
        assert_eq!(d.stage, Stage::Cleared, "a retry changes nothing");
        let mut other = binding();
        other.args_digest = "sha256:bb".into();
        assert_eq!(
            d.apply(&E::DecisionCreated(other), NOW),
            Err(Refusal::CreatedDifferently {
                operation_id: "op-1".into(),
                field: "args_digest"
            })
        );
    }

    #[test]
    fn replay_rebuilds_the_state_and_names_the_first_refused_event() {
        let events = [
            E::DecisionCreated(binding()),
            policy(true, true),
            requested(),
            E::HumanApproved(approval()),
            reserve(),
            reserve(),
        ];
        let at = |n: usize| events[..n].iter().map(|e| (e, NOW));
        let d = Decision::replay(at(5)).unwrap().unwrap();
        assert_eq!(d.stage, Stage::Reserved);
        assert_eq!(Decision::replay(at(6)), Err((5, Refusal::AlreadyReserved)));
        assert_eq!(
            Decision::replay([(&reserve(), NOW)]),
            Err((0, Refusal::NotCreated))
        );
    }

    #[test]
    fn events_read_back_as_written_under_seed_004s_names() {
        let event = E::HumanApproved(approval());
        let text = serde_json::to_string(&event).unwrap();
        assert!(text.starts_with(r#"{"event":"human_approved","#), "{text}");
        assert_eq!(serde_json::from_str::<E>(&text).unwrap(), event);
        let smuggled = text.replace(r#""reviewer""#, r#""approved_by_model":true,"reviewer""#);
        assert!(
            serde_json::from_str::<E>(&smuggled).is_err(),
            "unknown fields are refused"
        );
    }
}
