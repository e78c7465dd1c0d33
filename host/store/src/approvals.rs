//! `approvals.json`: the durable record of human decisions on approval
//! nodes, in bounded-loops' format, under its lock (`approvals.lock`), with
//! an atomic, fsynced replace.
//!
//! ```json
//! {"resource_version": 2,
//!  "commits": [{"approval_id", "new_resource_version", "idempotency_key", "node_id",
//!               "actor_id", "decided_by", "decided_by_source", "decided_at", "nonce",
//!               "request_digest", "repair_round"}],
//!  "rejections": [{"node_id", "attempt", "approval_id", "actor_id", "decided_at",
//!                  "decided_by", "decided_by_source", "repair_round"}]}
//! ```
//!
//! Beyond bounded-loops: a decision may carry a `signature`
//! (`{"key": "<verifier key>", "sig": "<base64 Ed25519>"}`) over the
//! canonical JSON of the decision without it. A commit binds the node, the
//! repair round, the approval id and `request_digest`, the digest of the
//! evidence the approver saw. A rejection is terminal: no later commit for
//! that node is accepted. A file that does not parse, or whose shape is
//! wrong, fails closed; it is never treated as empty.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::checkpoint::{NoteError, SigningKey, VerifierKey};

pub const APPROVALS_FILE: &str = "approvals.json";
pub const APPROVALS_LOCK: &str = "approvals.lock";

#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: corrupt ({message}); refusing to treat it as empty, which would forget decisions"
    )]
    Corrupt { path: PathBuf, message: String },
    #[error("approval_stale: expected resource_version {expected}, the ledger is at {actual}")]
    Stale { expected: u64, actual: u64 },
    #[error("node {node_id} was rejected; a rejection is terminal and no approval can follow it")]
    Rejected { node_id: String },
    #[error("node {node_id} was already approved; it cannot be rejected now")]
    AlreadyApproved { node_id: String },
    #[error("{path}: /commits/{index}/new_resource_version is {found}, expected {expected}")]
    VersionGap {
        path: PathBuf,
        index: usize,
        found: u64,
        expected: u64,
    },
    #[error("{path}: node {node_id} is both approved and rejected")]
    BothDecided { path: PathBuf, node_id: String },
    #[error("{path}: /resource_version is {found}, but there are {commits} commits")]
    VersionCount {
        path: PathBuf,
        found: u64,
        commits: usize,
    },
    #[error("{path}: {pointer}: {source}")]
    Signature {
        path: PathBuf,
        pointer: String,
        source: SignatureError,
    },
}

/// Why a decision's signature does not hold.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error(transparent)]
    Key(#[from] NoteError),
    #[error("signed by {signer}, not by the trusted key {trusted}")]
    Untrusted { signer: String, trusted: String },
    #[error("the signature is not base64 Ed25519")]
    Malformed,
    #[error("the signature does not match the decision: it was altered")]
    Altered,
}

/// Who decided, and what they decided on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The verifier key text (`name+id+key`).
    pub key: String,
    pub sig: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub approval_id: String,
    pub new_resource_version: u64,
    pub idempotency_key: String,
    pub node_id: String,
    pub actor_id: String,
    pub decided_by: String,
    pub decided_by_source: String,
    pub decided_at: String,
    pub nonce: String,
    pub request_digest: String,
    #[serde(default)]
    pub repair_round: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    pub node_id: String,
    #[serde(default = "first_attempt")]
    pub attempt: u64,
    pub approval_id: String,
    pub actor_id: String,
    pub decided_at: String,
    pub decided_by: String,
    pub decided_by_source: String,
    #[serde(default)]
    pub repair_round: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
}

fn first_attempt() -> u64 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub resource_version: u64,
    pub commits: Vec<Commit>,
    pub rejections: Vec<Rejection>,
}

impl Default for ApprovalRecord {
    fn default() -> Self {
        ApprovalRecord {
            resource_version: 1,
            commits: Vec::new(),
            rejections: Vec::new(),
        }
    }
}

/// `approval_id`: hex sha256 of `<org>:<project>:<run_id>:<node_id>`.
pub fn approval_id(organization_id: &str, project_id: &str, run_id: &str, node_id: &str) -> String {
    bl_core::sha256_hex(format!("{organization_id}:{project_id}:{run_id}:{node_id}").as_bytes())
}

/// The bytes a decision's signature covers: its canonical JSON without the
/// signature.
fn signed_bytes<T: Serialize>(decision: &T) -> Vec<u8> {
    let mut value = serde_json::to_value(decision).expect("decisions serialize");
    if let Value::Object(map) = &mut value {
        map.remove("signature");
    }
    bl_core::canonical_json(&value).into_bytes()
}

fn sign<T: Serialize>(decision: &T, key: &SigningKey) -> Signature {
    Signature {
        key: key.verifier().to_text(),
        sig: B64.encode(key.sign(&signed_bytes(decision))),
    }
}

fn check_signed_bytes(
    bytes: &[u8],
    signature: &Signature,
    trusted: &VerifierKey,
) -> Result<(), SignatureError> {
    let key = VerifierKey::parse(&signature.key)?;
    if key != *trusted {
        return Err(SignatureError::Untrusted {
            signer: key.name().to_string(),
            trusted: trusted.name().to_string(),
        });
    }
    let sig: [u8; 64] = B64
        .decode(&signature.sig)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(SignatureError::Malformed)?;
    if key.verify(bytes, &sig) {
        Ok(())
    } else {
        Err(SignatureError::Altered)
    }
}

/// Python's `json.dumps(value, indent=2)`: two-space indent, `": "`, and
/// every non-ASCII character escaped.
fn python_indent2(record: &ApprovalRecord) -> String {
    bl_core::canonical::ascii_escaped(
        &serde_json::to_string_pretty(record).expect("records serialize"),
    )
}

/// The approval ledger of one run directory.
pub struct Approvals {
    dir: PathBuf,
}

impl Approvals {
    pub fn new(run_dir: &Path) -> Self {
        Approvals {
            dir: run_dir.to_path_buf(),
        }
    }

    fn io(&self, name: &str) -> impl FnOnce(std::io::Error) -> ApprovalError + '_ {
        let path = self.dir.join(name);
        move |source| ApprovalError::Io { path, source }
    }

    /// Reads the ledger; a missing file is a fresh one, a corrupt one an error.
    pub fn read(&self) -> Result<ApprovalRecord, ApprovalError> {
        let path = self.dir.join(APPROVALS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(ApprovalRecord::default());
            }
            Err(source) => return Err(ApprovalError::Io { path, source }),
        };
        serde_json::from_str(&text).map_err(|e| ApprovalError::Corrupt {
            path,
            message: e.to_string(),
        })
    }

    fn write(&self, record: &ApprovalRecord) -> Result<(), ApprovalError> {
        crate::durable::replace_durably(
            &self.dir,
            APPROVALS_FILE,
            python_indent2(record).as_bytes(),
        )
        .map_err(self.io(APPROVALS_FILE))
    }

    /// Runs `change` on the ledger under its lock and writes the result
    /// durably when `change` reports it changed something.
    fn transact<T>(
        &self,
        change: impl FnOnce(&mut ApprovalRecord) -> Result<(T, bool), ApprovalError>,
    ) -> Result<T, ApprovalError> {
        let _lock = crate::durable::lock_exclusive(&self.dir.join(APPROVALS_LOCK))
            .map_err(self.io(APPROVALS_LOCK))?;
        let mut record = self.read()?;
        let (out, changed) = change(&mut record)?;
        if changed {
            self.write(&record)?;
        }
        Ok(out)
    }

    /// Records an approval, if the ledger is at `expected_version`. Replaying
    /// the same idempotency key returns the commit already recorded.
    pub fn commit(
        &self,
        mut commit: Commit,
        expected_version: u64,
        key: Option<&SigningKey>,
    ) -> Result<Commit, ApprovalError> {
        self.transact(|record| {
            if record
                .rejections
                .iter()
                .any(|r| r.node_id == commit.node_id)
            {
                return Err(ApprovalError::Rejected {
                    node_id: commit.node_id.clone(),
                });
            }
            if let Some(existing) = record
                .commits
                .iter()
                .find(|c| c.idempotency_key == commit.idempotency_key)
            {
                return Ok((existing.clone(), false));
            }
            if record.resource_version != expected_version {
                return Err(ApprovalError::Stale {
                    expected: expected_version,
                    actual: record.resource_version,
                });
            }
            record.resource_version += 1;
            commit.new_resource_version = record.resource_version;
            commit.signature = key.map(|key| {
                sign(
                    &Commit {
                        signature: None,
                        ..commit.clone()
                    },
                    key,
                )
            });
            record.commits.push(commit.clone());
            Ok((commit, true))
        })
    }

    /// Records a rejection. It is terminal: the node can never be approved
    /// afterwards. Rejecting the same node and attempt again is a no-op.
    pub fn reject(
        &self,
        mut rejection: Rejection,
        key: Option<&SigningKey>,
    ) -> Result<Rejection, ApprovalError> {
        self.transact(|record| {
            if record
                .commits
                .iter()
                .any(|c| c.node_id == rejection.node_id)
            {
                return Err(ApprovalError::AlreadyApproved {
                    node_id: rejection.node_id.clone(),
                });
            }
            if let Some(existing) = record
                .rejections
                .iter()
                .find(|r| r.node_id == rejection.node_id && r.attempt == rejection.attempt)
            {
                return Ok((existing.clone(), false));
            }
            rejection.signature = key.map(|key| {
                sign(
                    &Rejection {
                        signature: None,
                        ..rejection.clone()
                    },
                    key,
                )
            });
            record.rejections.push(rejection.clone());
            Ok((rejection, true))
        })
    }
}

/// What `bl verify` learns from an approvals file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalReport {
    pub decisions: usize,
    pub signed: usize,
    /// Decisions an agent made (`decided_by_source: agent`), not a person.
    pub by_agents: usize,
}

/// Checks every signed decision (against `trusted` when given, else against
/// the key it names, so an altered decision never passes), and the
/// ledger's own invariants: versions count up by one per commit, and no
/// node is both rejected and approved.
pub fn verify_approvals(
    run_dir: &Path,
    trusted: Option<&VerifierKey>,
) -> Result<Option<ApprovalReport>, ApprovalError> {
    let path = run_dir.join(APPROVALS_FILE);
    if !path.exists() {
        return Ok(None);
    }
    let record = Approvals::new(run_dir).read()?;
    for (i, commit) in record.commits.iter().enumerate() {
        if commit.new_resource_version != i as u64 + 2 {
            return Err(ApprovalError::VersionGap {
                path,
                index: i,
                found: commit.new_resource_version,
                expected: i as u64 + 2,
            });
        }
        if record
            .rejections
            .iter()
            .any(|r| r.node_id == commit.node_id)
        {
            return Err(ApprovalError::BothDecided {
                path,
                node_id: commit.node_id.clone(),
            });
        }
    }
    if record.resource_version != record.commits.len() as u64 + 1 {
        return Err(ApprovalError::VersionCount {
            path,
            found: record.resource_version,
            commits: record.commits.len(),
        });
    }
    let signature_error = |pointer: String| {
        let path = path.clone();
        move |source| ApprovalError::Signature {
            path,
            pointer,
            source,
        }
    };
    let mut signed = 0;
    let decisions = record.commits.len() + record.rejections.len();
    // Without a trusted key, a signed decision must still hold under the
    // key it names: an altered one fails closed either way.
    let check = |bytes: Vec<u8>, sig: &Signature| -> Result<(), SignatureError> {
        match trusted {
            Some(trusted) => check_signed_bytes(&bytes, sig, trusted),
            None => check_signed_bytes(&bytes, sig, &VerifierKey::parse(&sig.key)?),
        }
    };
    for (i, c) in record.commits.iter().enumerate() {
        if let Some(sig) = &c.signature {
            check(signed_bytes(c), sig)
                .map_err(signature_error(format!("/commits/{i}/signature")))?;
            signed += 1;
        }
    }
    for (i, r) in record.rejections.iter().enumerate() {
        if let Some(sig) = &r.signature {
            check(signed_bytes(r), sig)
                .map_err(signature_error(format!("/rejections/{i}/signature")))?;
            signed += 1;
        }
    }
    let by_agents = record
        .commits
        .iter()
        .map(|c| &c.decided_by_source)
        .chain(record.rejections.iter().map(|r| &r.decided_by_source))
        .filter(|source| *source == "agent")
        .count();
    Ok(Some(ApprovalReport {
        decisions,
        signed,
        by_agents,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(node: &str, key: &str) -> Commit {
        Commit {
            approval_id: approval_id("org", "proj", "run", node),
            new_resource_version: 0,
            idempotency_key: key.into(),
            node_id: node.into(),
            actor_id: "ana".into(),
            decided_by: "ana".into(),
            decided_by_source: "cli".into(),
            decided_at: "2026-11-29T00:00:00Z".into(),
            nonce: "n1".into(),
            request_digest: "sha256:ev".into(),
            repair_round: 0,
            signature: None,
        }
    }

    fn rejection(node: &str) -> Rejection {
        Rejection {
            node_id: node.into(),
            attempt: 1,
            approval_id: approval_id("org", "proj", "run", node),
            actor_id: "bo".into(),
            decided_at: "2026-11-29T00:00:00Z".into(),
            decided_by: "bo".into(),
            decided_by_source: "cli".into(),
            repair_round: 0,
            signature: None,
        }
    }

    #[test]
    fn commits_count_versions_replays_are_idempotent_and_stale_writes_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Approvals::new(dir.path());
        let first = ledger.commit(commit("review", "k1"), 1, None).unwrap();
        assert_eq!(first.new_resource_version, 2);
        assert_eq!(
            ledger.commit(commit("review", "k1"), 1, None).unwrap(),
            first
        );
        assert!(matches!(
            ledger.commit(commit("ship", "k2"), 1, None),
            Err(ApprovalError::Stale {
                expected: 1,
                actual: 2
            })
        ));
        assert_eq!(
            ledger
                .commit(commit("ship", "k2"), 2, None)
                .unwrap()
                .new_resource_version,
            3
        );
        let text = std::fs::read_to_string(dir.path().join(APPROVALS_FILE)).unwrap();
        assert!(
            text.starts_with("{\n  \"resource_version\": 3,\n  \"commits\": [\n"),
            "{text}"
        );
        assert!(verify_approvals(dir.path(), None).unwrap().is_some());
    }

    #[test]
    fn a_signed_rejection_is_terminal_and_signatures_catch_edits() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Approvals::new(dir.path());
        let key = SigningKey::generate("ops").unwrap();
        ledger.reject(rejection("ship"), Some(&key)).unwrap();
        assert!(matches!(
            ledger.commit(commit("ship", "k"), 1, Some(&key)),
            Err(ApprovalError::Rejected { .. })
        ));
        let report = verify_approvals(dir.path(), Some(&key.verifier()))
            .unwrap()
            .unwrap();
        assert_eq!(report.signed, 1);
        let path = dir.path().join(APPROVALS_FILE);
        let edited = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"bo\"", "\"mallory\"");
        std::fs::write(&path, edited).unwrap();
        let err = verify_approvals(dir.path(), Some(&key.verifier()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/rejections/0/signature"), "{err}");
    }

    #[test]
    fn a_corrupt_file_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(APPROVALS_FILE),
            "{\"resource_version\": \"2\"",
        )
        .unwrap();
        let ledger = Approvals::new(dir.path());
        assert!(matches!(ledger.read(), Err(ApprovalError::Corrupt { .. })));
        assert!(matches!(
            ledger.commit(commit("a", "k"), 1, None),
            Err(ApprovalError::Corrupt { .. })
        ));
    }
}
