//! The evidence plane's store (seed 004): one workspace directory per app,
//! holding one hash-chained event log of its decisions, in the event-log
//! format of a graph run, with a checkpoint signed by the workspace's key
//! after every event. An event is appended only when the decision state
//! machine (`bl_core::evidence`) accepts it, and durably before the answer
//! is given; the state is rebuilt from the log when the store is opened, so
//! a restarted service refuses what the lost one would have refused.
//! `bl verify` checks such a workspace as it checks a run: the chain, the
//! Merkle tree and the signatures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bl_core::evidence::{
    Decision, Decisions, EvidenceEvent, LoggedEvent, PolicyRecord, Refusal, Stage,
};
use bl_store::provable::{EVENTS_FILE, write_checkpoint};
use bl_store::{EventLog, RunIdentity, SigningKey, StoreError};
use serde_json::Value;

/// The run id every evidence log carries: a workspace can be copied for
/// verification elsewhere and still reads as what it is.
pub const EVIDENCE_RUN_ID: &str = "evidence";

/// The kind of effect a policy is asked about for a decision.
pub const TOOL_CALL: &str = "tool-call";

/// The approval a policy names when a person must approve the call.
pub const HUMAN_APPROVAL: &str = "human";

/// Why an event was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The state machine refused it; nothing was written.
    #[error("{event} for operation {operation_id} refused: {refusal}")]
    Refused {
        operation_id: String,
        event: &'static str,
        refusal: Refusal,
    },
    /// A review that is not authority: nothing was recorded.
    #[error("review of operation {operation_id} refused: {refusal}")]
    Review {
        operation_id: String,
        refusal: ReviewRefusal,
    },
    /// The policy plugin could not be found, loaded or run: no answer.
    #[error("policy {plugin} could not decide: {message}")]
    Policy { plugin: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: checkpoint: {source}", dir.display())]
    Checkpoint {
        dir: PathBuf,
        source: bl_store::provable::SealError,
    },
    /// The log holds a line the rules would have refused, or one that is
    /// not an evidence event: it was written by something else.
    #[error("{}: line {line}: {message}", path.display())]
    NotEvidence {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// What a reviewer decides about a decision: only these reach the log
/// from a person, and only signed by a key the workspace trusts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "review", rename_all = "snake_case", deny_unknown_fields)]
pub enum Review {
    Approve(bl_core::evidence::Approval),
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
    fn operation_id(&self) -> &str {
        match self {
            Review::Approve(a) => &a.operation_id,
            Review::Reject { operation_id, .. } | Review::Reconcile { operation_id, .. } => {
                operation_id
            }
        }
    }

    fn reviewer(&self) -> &str {
        match self {
            Review::Approve(a) => &a.reviewer,
            Review::Reject { reviewer, .. } | Review::Reconcile { reviewer, .. } => reviewer,
        }
    }

    fn event(&self) -> EvidenceEvent {
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

    /// The bytes a reviewer signs: the review's canonical JSON.
    fn signed_bytes(&self) -> Vec<u8> {
        bl_core::canonical::canonical_json_of(self)
            .expect("a review is JSON")
            .into_bytes()
    }

    /// The review signed with `key`; the reviewer named in it must be the
    /// key's name.
    pub fn sign(self, key: &SigningKey) -> SignedReview {
        SignedReview {
            signature: hex::encode(key.sign(&self.signed_bytes())),
            key: key.verifier().to_text(),
            review: self,
        }
    }
}

/// A review with its reviewer's key and signature.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedReview {
    pub review: Review,
    /// The reviewer's verifier key, as `bl keys public` prints it.
    pub key: String,
    /// Ed25519 over the review's canonical JSON, in hex.
    pub signature: String,
}

/// Why a review is not authority.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewRefusal {
    #[error("the key is not one this workspace trusts for reviews ({0}); add it with --reviewer")]
    UntrustedKey(String),
    #[error("the signature does not match the review and the key")]
    BadSignature,
    #[error("the review names {named} as its reviewer, but it is signed by {signer}")]
    NotTheSigner { named: String, signer: String },
}

/// The workspace's own signing key, made on first use (mode 0600, named
/// `evidence`) in bl's keys directory, out of the workspace it signs: a
/// copy of the workspace never carries it.
pub fn workspace_key(dir: &Path) -> crate::error::AppResult<SigningKey> {
    use crate::error::AppError;
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let id = bl_core::sha256_hex(absolute.as_os_str().as_encoded_bytes());
    let keys = crate::paths::keys_dir().ok_or_else(|| {
        AppError::refused("evidence: no HOME to keep the workspace's key in: pass --key")
    })?;
    let path = keys.join(format!("evidence-{}.key", &id[..16]));
    if path.is_file() {
        return crate::keys::read_signing_key(&path);
    }
    let failed = |e: std::io::Error| {
        AppError::refused(format!(
            "evidence: cannot write the workspace's key {}: {e}",
            path.display()
        ))
    };
    let key = SigningKey::generate("evidence")
        .map_err(|e| AppError::refused(format!("evidence: {e}")))?;
    std::fs::create_dir_all(&keys).map_err(failed)?;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{}\n", key.to_text()).as_bytes()))
        .map_err(failed)?;
    std::fs::write(
        path.with_extension("pub"),
        format!("{}\n", key.verifier().to_text()),
    )
    .map_err(failed)?;
    Ok(key)
}

/// An event as it was recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Its position in the log (from 1); for a retried `decision_created`,
    /// the position of the first.
    pub sequence: u64,
    pub hash: String,
    /// Where its decision stands now.
    pub stage: Stage,
    /// A retry of what was already recorded: nothing was appended.
    pub retry: bool,
}

/// One workspace's evidence: its log, open and locked, and every decision's
/// state.
pub struct EvidenceStore {
    dir: PathBuf,
    log: EventLog,
    key: SigningKey,
    decisions: Decisions,
    /// Where each decision was created, for its retries.
    created_at: BTreeMap<String, (u64, String)>,
}

fn identity() -> RunIdentity {
    let none = format!("sha256:{}", "0".repeat(64));
    RunIdentity {
        organization_id: "local-org".into(),
        project_id: bl_core::evidence::EVIDENCE_PROJECT.into(),
        run_id: EVIDENCE_RUN_ID.into(),
        graph_digest: none.clone(),
        plan_digest: none.clone(),
        policy_digest: none,
    }
}

impl EvidenceStore {
    /// Opens (or makes) the workspace at `dir`, signing with `key`; the
    /// log is read back through the rules. Another process holding it is
    /// refused (`StoreError::Locked`).
    pub fn open(dir: &Path, key: SigningKey) -> Result<EvidenceStore, EvidenceError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(EVENTS_FILE);
        let log = EventLog::open(&path, identity())?;
        let mut store = EvidenceStore {
            dir: dir.to_path_buf(),
            log,
            key,
            decisions: Decisions::default(),
            created_at: BTreeMap::new(),
        };
        store.replay(&path)?;
        Ok(store)
    }

    fn replay(&mut self, path: &Path) -> Result<(), EvidenceError> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let not_evidence = |message: String| EvidenceError::NotEvidence {
                path: path.to_path_buf(),
                line: i + 1,
                message,
            };
            let row: Value = serde_json::from_str(line).map_err(|e| not_evidence(e.to_string()))?;
            let logged: LoggedEvent = serde_json::from_value(row["payload"].clone())
                .map_err(|e| not_evidence(format!("not an evidence event: {e}")))?;
            let changed = self.decisions.replay(&logged).map_err(|refusal| {
                not_evidence(format!("{} refused: {refusal}", logged.evidence.kind()))
            })?;
            if changed && matches!(logged.evidence, EvidenceEvent::DecisionCreated(_)) {
                let sequence = row["sequence"].as_u64().unwrap_or_default();
                let hash = row["event_hash"].as_str().unwrap_or_default().to_string();
                self.created_at
                    .insert(logged.operation_id, (sequence, hash));
            }
        }
        Ok(())
    }

    /// Records `event` for `operation_id` at `now` (seconds since the
    /// epoch), if the rules accept it: appended and made durable, then a
    /// signed checkpoint is written, before this returns.
    pub fn record(
        &mut self,
        operation_id: &str,
        event: EvidenceEvent,
        now: u64,
    ) -> Result<Recorded, EvidenceError> {
        let refused = |refusal| EvidenceError::Refused {
            operation_id: operation_id.to_string(),
            event: event.kind(),
            refusal,
        };
        let Some(next) = self
            .decisions
            .accept(operation_id, &event, now)
            .map_err(refused)?
        else {
            let (sequence, hash) = self.created_at[operation_id].clone();
            return Ok(Recorded {
                sequence,
                hash,
                stage: self
                    .decisions
                    .get(operation_id)
                    .map_or(Stage::Created, |d| d.stage),
                retry: true,
            });
        };
        let sequence = self.log.head().sequence + 1;
        let payload = serde_json::to_value(LoggedEvent {
            operation_id: operation_id.to_string(),
            at: now,
            evidence: event.clone(),
        })
        .expect("an evidence event is JSON");
        let timestamp = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(now),
        )
        .to_string();
        let key = format!("{operation_id}/{sequence}");
        self.log
            .append_durable(&key, event.kind(), &payload, &timestamp)?;
        let hash = self.log.head().hash.clone();
        write_checkpoint(&self.dir, Some(&self.key)).map_err(|source| {
            EvidenceError::Checkpoint {
                dir: self.dir.clone(),
                source,
            }
        })?;
        if matches!(event, EvidenceEvent::DecisionCreated(_)) {
            self.created_at
                .insert(operation_id.to_string(), (sequence, hash.clone()));
        }
        let stage = next.stage;
        self.decisions.commit(operation_id, next);
        Ok(Recorded {
            sequence,
            hash,
            stage,
            retry: false,
        })
    }

    /// Asks the publication-policy plugin `plugin` (with `config`) about a
    /// decision, and records its answer: the plugin, its version and
    /// component digest, and the digest of exactly what it was asked. It
    /// is asked twice, without an approval and with one named `human`:
    /// allowed without, the decision is cleared; allowed only with, a
    /// person must approve; allowed by neither, it is blocked. A policy
    /// that cannot decide is an error, and nothing is recorded.
    pub fn evaluate_policy(
        &mut self,
        host: &bl_plugins::PluginHost,
        operation_id: &str,
        plugin: &str,
        config: &str,
        now: u64,
    ) -> Result<Recorded, EvidenceError> {
        let binding = self
            .decisions
            .get(operation_id)
            .ok_or_else(|| EvidenceError::Refused {
                operation_id: operation_id.to_string(),
                event: "policy_evaluated",
                refusal: Refusal::NotCreated,
            })?
            .binding
            .clone();
        let cannot = |message: String| EvidenceError::Policy {
            plugin: plugin.to_string(),
            message,
        };
        let found = host.find(plugin).map_err(|e| cannot(e.to_string()))?;
        // A policy is granted nothing: it decides from the request alone.
        let policy = host
            .load_policy(&found, &bl_plugins::Grant::default())
            .map_err(|e| cannot(e.to_string()))?;
        let request = |approved: bool| bl_plugins::PublishRequest {
            effect_key: operation_id.to_string(),
            kind: TOOL_CALL.into(),
            target: binding.tool.clone(),
            payload_digest: binding.args_digest.clone(),
            approvals: approved
                .then(|| bl_plugins::Approval {
                    name: HUMAN_APPROVAL.into(),
                    approver: "reviewer".into(),
                    approved: true,
                })
                .into_iter()
                .collect(),
        };
        let ask = |approved: bool| {
            host.runtime()
                .and_then(|runtime| runtime.decide(&policy, &request(approved), config))
                .map(|invocation| invocation.value)
                .map_err(|e| cannot(e.to_string()))
        };
        let (alone, approved) = (ask(false)?, ask(true)?);
        let asked = serde_json::json!({
            "config": config,
            "effect_key": operation_id,
            "kind": TOOL_CALL,
            "target": binding.tool,
            "payload_digest": binding.args_digest,
        });
        let record = PolicyRecord {
            policy_id: found.name(),
            version: found.version.clone().unwrap_or_default(),
            component_digest: found.digest.clone(),
            input_commitment: bl_core::Sha256Digest::of(
                bl_core::canonical::canonical_json(&asked).as_bytes(),
            )
            .to_string(),
            allow: alone.allow || approved.allow,
            needs_approval: !alone.allow && approved.allow,
            reason: if alone.allow {
                alone.reason
            } else {
                approved.reason
            },
        };
        self.record(operation_id, EvidenceEvent::PolicyEvaluated(record), now)
    }

    /// Records a person's review, if one of `reviewers` (verifier keys,
    /// as `bl keys public` prints them) signed it and it names that key as
    /// its reviewer; the rules then apply as to any event. Nothing else
    /// records an approval, a rejection or a reconciliation.
    pub fn review(
        &mut self,
        signed: &SignedReview,
        reviewers: &[bl_store::VerifierKey],
        now: u64,
    ) -> Result<Recorded, EvidenceError> {
        let review = &signed.review;
        let refused = |refusal| EvidenceError::Review {
            operation_id: review.operation_id().to_string(),
            refusal,
        };
        let key = reviewers
            .iter()
            .find(|k| k.to_text() == signed.key.trim())
            .ok_or_else(|| refused(ReviewRefusal::UntrustedKey(signed.key.trim().to_string())))?;
        let signature: [u8; 64] = hex::decode(&signed.signature)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| refused(ReviewRefusal::BadSignature))?;
        if !key.verify(&review.signed_bytes(), &signature) {
            return Err(refused(ReviewRefusal::BadSignature));
        }
        if review.reviewer() != key.name() {
            return Err(refused(ReviewRefusal::NotTheSigner {
                named: review.reviewer().to_string(),
                signer: key.name().to_string(),
            }));
        }
        self.record(review.operation_id(), review.event(), now)
    }

    /// A decision's state, as the log makes it.
    pub fn decision(&self, operation_id: &str) -> Option<&Decision> {
        self.decisions.get(operation_id)
    }

    /// Every decision, by operation id.
    pub fn decisions(&self) -> &Decisions {
        &self.decisions
    }

    /// The workspace directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bl_core::evidence::{Approval, DecisionBinding, PolicyRecord};

    const NOW: u64 = 1_800_000_000;

    fn created() -> EvidenceEvent {
        EvidenceEvent::DecisionCreated(DecisionBinding {
            operation_id: "op-1".into(),
            thread_id: "t-1".into(),
            identity: "alice".into(),
            tool: "refund".into(),
            args_digest: "sha256:aa".into(),
        })
    }

    fn policy() -> EvidenceEvent {
        EvidenceEvent::PolicyEvaluated(PolicyRecord {
            policy_id: "refunds".into(),
            version: "1".into(),
            component_digest: "sha256:cc".into(),
            input_commitment: "sha256:ii".into(),
            allow: true,
            needs_approval: true,
            reason: "under the limit".into(),
        })
    }

    fn approval() -> EvidenceEvent {
        EvidenceEvent::HumanApproved(Approval {
            reviewer: "bob".into(),
            operation_id: "op-1".into(),
            identity: "alice".into(),
            thread_id: "t-1".into(),
            checkpoint_ns: "ns".into(),
            interrupt_id: "i-1".into(),
            args_digest: "sha256:aa".into(),
            policy_version: "1".into(),
            expires_at: NOW + 60,
        })
    }

    fn reserve() -> EvidenceEvent {
        EvidenceEvent::ToolRequested {
            tool: "refund".into(),
            args_digest: "sha256:aa".into(),
        }
    }

    fn key() -> SigningKey {
        SigningKey::generate("evidence-test").unwrap()
    }

    #[test]
    fn accepted_events_are_chained_and_checkpointed_and_a_reopened_store_refuses_as_before() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ws");
        let signer = key();
        let same_key = || SigningKey::parse(&signer.to_text()).unwrap();
        {
            let mut store = EvidenceStore::open(&dir, same_key()).unwrap();
            let first = store.record("op-1", created(), NOW).unwrap();
            assert_eq!((first.sequence, first.retry), (1, false));
            let retry = store.record("op-1", created(), NOW + 5).unwrap();
            assert_eq!(
                retry,
                Recorded {
                    retry: true,
                    ..first.clone()
                }
            );
            store.record("op-1", policy(), NOW).unwrap();
            store
                .record(
                    "op-1",
                    EvidenceEvent::ApprovalRequested {
                        checkpoint_ns: "ns".into(),
                        interrupt_id: "i-1".into(),
                    },
                    NOW,
                )
                .unwrap();
            store.record("op-1", approval(), NOW).unwrap();
            let reserved = store.record("op-1", reserve(), NOW).unwrap();
            assert_eq!((reserved.sequence, reserved.stage), (5, Stage::Reserved));
            // The process is lost here, after the reservation.
        }
        let mut store = EvidenceStore::open(&dir, same_key()).unwrap();
        assert_eq!(store.decision("op-1").unwrap().stage, Stage::Reserved);
        match store.record("op-1", reserve(), NOW) {
            Err(EvidenceError::Refused {
                refusal: Refusal::AlreadyReserved,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        // Nothing refused was written; five events, five signed checkpoints.
        let lines = std::fs::read_to_string(dir.join(EVENTS_FILE)).unwrap();
        assert_eq!(lines.lines().count(), 5);
        let report = bl_store::provable::verify_checkpoints(&dir, Some(&signer.verifier()))
            .unwrap()
            .unwrap();
        assert_eq!(report.checked, 5);
        assert!(report.signatures_checked);
        // `bl verify` with the public key alone: integrity, order, who approved.
        let options = bl_verify::Options {
            verifier: Some(signer.verifier()),
            ..Default::default()
        };
        let bl_verify::Report::Graph(report) = bl_verify::verify(&dir, &options).unwrap() else {
            panic!("an evidence workspace verifies as an event log");
        };
        assert!(report.ok(), "{report:?}");
        let evidence = report.checks.iter().find(|c| c.name == "evidence").unwrap();
        assert!(
            evidence.detail.contains("1 reserved and not yet executed")
                && evidence.detail.contains("op-1 approved by bob for alice")
                && evidence.detail.contains("Not established"),
            "{}",
            evidence.detail
        );
    }

    #[test]
    fn events_for_an_unknown_decision_and_a_second_writer_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = EvidenceStore::open(tmp.path(), key()).unwrap();
        assert!(matches!(
            store.record("op-9", reserve(), NOW),
            Err(EvidenceError::Refused {
                refusal: Refusal::NotCreated,
                ..
            })
        ));
        assert!(matches!(
            store.record("op-2", created(), NOW),
            Err(EvidenceError::Refused {
                refusal: Refusal::CreatedDifferently {
                    field: "operation_id",
                    ..
                },
                ..
            })
        ));
        assert!(matches!(
            EvidenceStore::open(tmp.path(), key()),
            Err(EvidenceError::Store(StoreError::Locked { .. }))
        ));
    }

    /// The first-party plugins `scripts/dev setup` builds.
    fn first_party_plugins() -> Option<std::sync::Arc<bl_plugins::PluginHost>> {
        let built =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins/deny-all.wasm");
        if built.is_file() {
            return Some(crate::plugin_host::shared());
        }
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is missing: scripts/dev setup builds it",
            built.display()
        );
        eprintln!("SKIPPED: no {}", built.display());
        None
    }

    #[test]
    fn a_policy_plugin_decides_and_its_answer_is_recorded_with_what_it_was_asked() {
        let Some(host) = first_party_plugins() else {
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let mut store = EvidenceStore::open(tmp.path(), key()).unwrap();
        store.record("op-1", created(), NOW).unwrap();
        // A policy that cannot decide is an error, and nothing is recorded.
        assert!(matches!(
            store.evaluate_policy(&host, "op-1", "no-such-policy", "{}", NOW),
            Err(EvidenceError::Policy { .. })
        ));
        let recorded = store
            .evaluate_policy(&host, "op-1", "deny-all", "{}", NOW)
            .unwrap();
        assert_eq!((recorded.sequence, recorded.stage), (2, Stage::Blocked));
        let policy = store.decision("op-1").unwrap().policy.clone().unwrap();
        let wasm = std::fs::read(host.find("deny-all").unwrap().path).unwrap();
        assert_eq!(
            policy.component_digest,
            bl_core::Sha256Digest::of(&wasm).to_string()
        );
        assert_eq!(policy.policy_id, "deny-all");
        assert!(policy.input_commitment.starts_with("sha256:"), "{policy:?}");
        assert!(!policy.allow && !policy.needs_approval);
        assert!(matches!(
            store.record("op-1", reserve(), NOW),
            Err(EvidenceError::Refused {
                refusal: Refusal::Blocked(_),
                ..
            })
        ));
    }

    #[test]
    fn only_a_trusted_reviewers_signed_review_is_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = EvidenceStore::open(tmp.path(), key()).unwrap();
        for event in [
            created(),
            policy(),
            EvidenceEvent::ApprovalRequested {
                checkpoint_ns: "ns".into(),
                interrupt_id: "i-1".into(),
            },
        ] {
            store.record("op-1", event, NOW).unwrap();
        }
        let bob = SigningKey::generate("bob").unwrap();
        let mallory = SigningKey::generate("mallory").unwrap();
        let trusted = [bob.verifier()];
        let EvidenceEvent::HumanApproved(approval) = approval() else {
            unreachable!()
        };
        let refusal = |outcome: Result<Recorded, EvidenceError>| match outcome {
            Err(EvidenceError::Review { refusal, .. }) => refusal,
            other => panic!("{other:?}"),
        };
        // Signed by a key the workspace does not trust.
        let mut by_mallory = approval.clone();
        by_mallory.reviewer = "mallory".into();
        assert!(matches!(
            refusal(store.review(&Review::Approve(by_mallory).sign(&mallory), &trusted, NOW)),
            ReviewRefusal::UntrustedKey(_)
        ));
        // Bob's key, but the review was changed after he signed it.
        let mut tampered = Review::Approve(approval.clone()).sign(&bob);
        if let Review::Approve(a) = &mut tampered.review {
            a.expires_at += 3600;
        }
        assert_eq!(
            refusal(store.review(&tampered, &trusted, NOW)),
            ReviewRefusal::BadSignature
        );
        // Bob signing in another reviewer's name.
        let mut as_carol = approval.clone();
        as_carol.reviewer = "carol".into();
        assert_eq!(
            refusal(store.review(&Review::Approve(as_carol).sign(&bob), &trusted, NOW)),
            ReviewRefusal::NotTheSigner {
                named: "carol".into(),
                signer: "bob".into()
            }
        );
        assert_eq!(
            store.decision("op-1").unwrap().stage,
            Stage::AwaitingApproval
        );
        // Bob's own: recorded, and then a rejection comes too late.
        let recorded = store
            .review(&Review::Approve(approval).sign(&bob), &trusted, NOW)
            .unwrap();
        assert_eq!(recorded.stage, Stage::Cleared);
        let late = Review::Reject {
            operation_id: "op-1".into(),
            reviewer: "bob".into(),
            reason: "second thoughts".into(),
        };
        assert!(matches!(
            store.review(&late.sign(&bob), &trusted, NOW),
            Err(EvidenceError::Refused {
                refusal: Refusal::AlreadyApproved,
                ..
            })
        ));
    }

    #[test]
    fn a_log_with_an_event_the_rules_refuse_does_not_open() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(EVENTS_FILE);
        {
            // Written past the rules: a reservation with no decision.
            let mut log = EventLog::open(&path, identity()).unwrap();
            let payload =
                serde_json::json!({"operation_id": "op-1", "at": NOW, "evidence": reserve()});
            log.append_durable("op-1/1", "tool_requested", &payload, "2027-01-15T08:00:00Z")
                .unwrap();
        }
        match EvidenceStore::open(tmp.path(), key()) {
            Err(EvidenceError::NotEvidence {
                line: 1, message, ..
            }) => {
                assert!(message.contains("decision_created"), "{message}")
            }
            other => panic!("{:?}", other.err()),
        }
        let bl_verify::Report::Graph(report) =
            bl_verify::verify(tmp.path(), &bl_verify::Options::default()).unwrap()
        else {
            panic!("an event log");
        };
        let evidence = report.checks.iter().find(|c| c.name == "evidence").unwrap();
        assert_eq!(evidence.status, bl_verify::Status::Fail, "{evidence:?}");
        assert!(
            evidence.detail.contains("line 1: tool_requested"),
            "{}",
            evidence.detail
        );
    }
}
