//! Approval decisions: what one is bound to (the digests of what its
//! parents produced, in a request digest), writing one into a run's
//! approvals.json in bounded-loops' format, signed when a key is given,
//! reading back the one on record, and the executor's `Decisions` port
//! over that file and `--decisions`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bl_graph::Graph;
use bl_run::executor::Decisions;
use bl_run::projection::RunView;
use serde_json::json;

use crate::error::AppError;
use crate::run_adapters::FileDecisions;

pub const RUN_ID: &str = "graph-run";
pub const ORGANIZATION: &str = "local-org";
pub const PROJECT: &str = "local-project";

/// What a decision on `node` is bound to: the artifacts its parents
/// produced, as the run's state has them now.
pub fn evidence(graph: &Graph, view: &RunView, node: &str) -> Vec<String> {
    graph
        .edges
        .iter()
        .filter(|e| e.to_node == node)
        .flat_map(|e| view.node(&e.from_node).artifact_digests)
        .collect()
}

/// The digest an approval commits to: the plan, the node, the repair round
/// and the evidence. A person approves what this names, and an approval
/// shown one digest is refused when the evidence has changed since.
pub fn request_digest(plan_id: &str, node: &str, round: u64, evidence: &[String]) -> String {
    let request = json!({
        "evidence_digests": evidence, "node_id": node,
        "plan_id": plan_id, "repair_round": round,
    });
    bl_core::Sha256Digest::of(bl_core::canonical_json(&request).as_bytes()).to_string()
}

/// A decision on record for a node in a repair round.
pub(crate) struct RecordedDecision {
    pub approved: bool,
    pub by: String,
    pub source: String,
    pub at: String,
}

pub(crate) fn recorded(
    dir: &Path,
    node: &str,
    round: u64,
) -> Result<Option<RecordedDecision>, AppError> {
    let record = FileDecisions::read(dir)
        .map_err(|e| AppError::refused(format!("graph approve: {e}")))?
        .record;
    let approved = record
        .commits
        .iter()
        .find(|c| c.node_id == node && c.repair_round == round)
        .map(|c| RecordedDecision {
            approved: true,
            by: c.decided_by.clone(),
            source: c.decided_by_source.clone(),
            at: c.decided_at.clone(),
        });
    let rejected = record
        .rejections
        .iter()
        .find(|r| r.node_id == node && r.repair_round == round)
        .map(|r| RecordedDecision {
            approved: false,
            by: r.decided_by.clone(),
            source: r.decided_by_source.clone(),
            at: r.decided_at.clone(),
        });
    Ok(approved.or(rejected))
}

/// One decision to write into a run's approvals.json.
pub struct ApprovalEntry<'a> {
    pub node: &'a str,
    pub approved: bool,
    pub round: u64,
    /// The digests of what is approved (its parents' artifacts).
    pub evidence: &'a [String],
    pub decided_by: String,
    /// `os_user`, `recorded` for a decision from --decisions, or `agent`.
    pub source: &'a str,
}

/// Writes a decision into `dir`'s approvals.json, in bounded-loops' format
/// (signed with `key` when given).
pub fn commit(
    dir: &Path,
    plan_id: &str,
    d: &ApprovalEntry,
    key: Option<&bl_store::SigningKey>,
) -> Result<(), AppError> {
    let refused = |m: String| AppError::Refused(m);
    let approvals = bl_store::Approvals::new(dir);
    let record = approvals.read().map_err(|e| refused(e.to_string()))?;
    let id = bl_store::approval_id(ORGANIZATION, PROJECT, RUN_ID, d.node);
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    // An approval's nonce must be unpredictable: no entropy, no approval.
    let mut nonce = [0u8; 32];
    getrandom::fill(&mut nonce).map_err(|e| {
        refused(format!(
            "no entropy for the approval's nonce ({e}); nothing was recorded"
        ))
    })?;
    let result = if d.approved {
        let request_digest = request_digest(plan_id, d.node, d.round, d.evidence);
        approvals
            .commit(
                bl_store::approvals::Commit {
                    approval_id: id.clone(),
                    new_resource_version: 0,
                    idempotency_key: if d.round == 0 {
                        id.clone()
                    } else {
                        format!("{id}:r{}", d.round)
                    },
                    node_id: d.node.into(),
                    actor_id: ORGANIZATION.into(),
                    decided_by: d.decided_by.clone(),
                    decided_by_source: d.source.into(),
                    decided_at: now,
                    nonce: hex::encode(nonce),
                    request_digest,
                    repair_round: d.round,
                    signature: None,
                },
                record.resource_version,
                key,
            )
            .map(|_| ())
    } else {
        approvals
            .reject(
                bl_store::approvals::Rejection {
                    node_id: d.node.into(),
                    attempt: 1,
                    approval_id: id,
                    actor_id: ORGANIZATION.into(),
                    decided_at: now,
                    decided_by: d.decided_by.clone(),
                    decided_by_source: d.source.into(),
                    repair_round: d.round,
                    signature: None,
                },
                key,
            )
            .map(|_| ())
    };
    result.map_err(|e| refused(e.to_string()))
}

/// Decisions from approvals.json, and, for an approval node it has none
/// for, the decision recorded for it (`--decisions`), written into
/// approvals.json when the run reaches the node, bound to what its parents
/// produced.
pub struct RecordedDecisions {
    pub file: FileDecisions,
    pub recorded: HashMap<String, (bool, String)>,
    pub run_dir: PathBuf,
    pub plan_id: String,
}

impl Decisions for RecordedDecisions {
    fn decision(&self, node: &str, round: u32, evidence: &[String]) -> Option<bool> {
        if let Some(d) = self.file.decision(node, round, evidence) {
            return Some(d);
        }
        let (approved, by) = self.recorded.get(node)?;
        let entry = ApprovalEntry {
            node,
            approved: *approved,
            round: u64::from(round),
            evidence,
            decided_by: by.clone(),
            source: "recorded",
        };
        // A decision that cannot be recorded is not taken: the run waits,
        // and says why.
        match commit(&self.run_dir, &self.plan_id, &entry, None) {
            Ok(()) => Some(*approved),
            Err(e) => {
                crate::notes::note(format!(
                    "the recorded decision for '{node}' could not be written to approvals.json ({}); the node waits for a decision",
                    e.message()
                ));
                None
            }
        }
    }
}
