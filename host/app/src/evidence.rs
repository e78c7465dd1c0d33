//! The evidence plane's store (seed 004): one workspace directory per app,
//! holding one hash-chained event log of its decisions, in the event-log
//! format of a graph run, with a checkpoint signed by the workspace's key
//! after every request. An event is appended only when the decision state
//! machine (`bl_core::evidence`) accepts it, and durably before the answer
//! is given; the state is rebuilt from the log when the store is opened, so
//! a restarted service refuses what the lost one would have refused.
//!
//! Speed: the events one request records share one write and one
//! fdatasync, and the log's writer grows its tree head as it appends
//! (`EventLog::tree_head`), so a request costs
//! the same at the millionth event as at the first. The checkpoint over a
//! request's events is signed on a thread of its own, within
//! 50 ms, off the answer's path, and replaces the one before it; opening
//! the store signs one over the whole log, so a service killed before its
//! last checkpoint has it made at its next start.
//! `bl verify` checks such a workspace as it checks a run: the chain, the
//! Merkle tree and the signatures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bl_core::evidence::{
    Decision, DecisionBinding, Decisions, EvidenceEvent, LoggedEvent, PolicyRecord, Refusal, Stage,
    review_signed_bytes,
};
pub use bl_core::evidence::{Review, SignedReview};
use bl_store::provable::{Durability, EVENTS_FILE, write_checkpoint_at};
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
    /// A person's decision offered without the signed review it must come
    /// from.
    #[error("{0} is recorded only from a reviewer's signed review")]
    NeedsReview(&'static str),
    /// An earlier write failed after the log may have changed; the store
    /// must be opened again.
    #[error("the evidence store stopped recording after a failed write ({0}); restart the service")]
    Broken(String),
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

/// Seconds since the epoch, the clock approvals expire by; a clock before
/// the epoch makes every approval expired (fail closed), never none.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(u64::MAX, |d| d.as_secs())
}

/// `review` for the workspace whose checkpoints `workspace` verifies,
/// signed with `key`; the reviewer it names must be the key's name.
pub fn sign_review(review: Review, workspace: &str, key: &SigningKey) -> SignedReview {
    SignedReview {
        signature: hex::encode(key.sign(&review_signed_bytes(workspace, &review))),
        key: key.verifier().to_text(),
        workspace: workspace.to_string(),
        review,
    }
}

/// Whether `signed` is authority here: for this workspace, signed by one
/// of `reviewers`, naming that key's owner as its reviewer.
fn check_review(
    signed: &SignedReview,
    workspace: &str,
    reviewers: &[bl_store::VerifierKey],
) -> Result<(), ReviewRefusal> {
    if signed.workspace.trim() != workspace {
        return Err(ReviewRefusal::OtherWorkspace);
    }
    let untrusted = || ReviewRefusal::UntrustedKey(signed.key.trim().to_string());
    let key = bl_verify::review_signer(signed).map_err(|e| match e {
        bl_verify::ReviewSignatureError::BadKey => untrusted(),
        bl_verify::ReviewSignatureError::BadSignature => ReviewRefusal::BadSignature,
        bl_verify::ReviewSignatureError::NotTheSigner { named, signer } => {
            ReviewRefusal::NotTheSigner { named, signer }
        }
    })?;
    if !reviewers.iter().any(|k| k.to_text() == key.to_text()) {
        return Err(untrusted());
    }
    Ok(())
}

/// Why a review is not authority.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewRefusal {
    #[error(
        "the key is not one this workspace trusts for reviews ({0}); the service trusts the keys it was started with: restart `bl evidence serve` with --reviewer KEY.pub for this one"
    )]
    UntrustedKey(String),
    #[error("the review is for another workspace (its `workspace` is not this one's verifier key)")]
    OtherWorkspace,
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
    // The same workspace by any path (a symlink, `..`) has the same key.
    let absolute = std::fs::create_dir_all(dir)
        .and_then(|()| dir.canonicalize())
        .map_err(|e| AppError::refused(format!("evidence: {}: {e}", dir.display())))?;
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

/// Binds a unix socket at `path` that only its owner may connect to: made
/// under a umask that leaves others nothing, so there is no moment when
/// it is open to them. A socket no one listens on (left by a service that
/// was killed) is replaced; any other file at `path` is refused. The
/// umask is the process's: call this before other threads make files.
pub fn bind_owner_only_socket(
    path: &Path,
) -> crate::error::AppResult<std::os::unix::net::UnixListener> {
    use crate::error::AppError;
    use std::os::unix::fs::FileTypeExt;
    if let Ok(found) = std::fs::symlink_metadata(path) {
        // A socket no one listens on is what a killed service left: it
        // is replaced. Anything else, or a live service's, is not.
        let stale = found.file_type().is_socket()
            && std::os::unix::net::UnixStream::connect(path)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
        if !stale {
            return Err(AppError::refused(format!(
                "evidence: {} exists and is not a socket left by a stopped service; name another path",
                path.display()
            )));
        }
        std::fs::remove_file(path).map_err(|e| {
            AppError::refused(format!(
                "evidence: cannot remove the stale socket {}: {e}",
                path.display()
            ))
        })?;
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let bound = std::os::unix::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    bound.map_err(|e| {
        AppError::refused(format!(
            "evidence: cannot listen on {}: {e}",
            path.display()
        ))
    })
}

/// What `export` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub events: u64,
    pub checkpoints: usize,
    /// Complete events past the newest signed checkpoint: left out.
    pub left_out: u64,
}

/// Copies the evidence of `workspace` into the new directory `out`, as a
/// bundle anyone verifies with the workspace's public key alone (`bl
/// verify OUT --pubkey KEY`): the log's complete lines and the signed
/// checkpoints over them. A service may be writing meanwhile: a line or a
/// checkpoint newer than the copy is left out, never half copied. The key
/// is not in the bundle; it must reach the verifier another way.
pub fn export(workspace: &Path, out: &Path) -> crate::error::AppResult<Exported> {
    use crate::error::AppError;
    let failed = |path: &Path, e: std::io::Error| {
        AppError::refused(format!("evidence export: {}: {e}", path.display()))
    };
    let log = workspace.join(EVENTS_FILE);
    let bytes = std::fs::read(&log).map_err(|e| failed(&log, e))?;
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let events = bytes[..complete].iter().filter(|b| **b == b'\n').count() as u64;
    if events == 0 {
        return Err(AppError::refused(format!(
            "evidence export: {} holds no events yet",
            log.display()
        )));
    }
    if out.exists() {
        return Err(AppError::refused(format!(
            "evidence export: {} exists; name a new directory",
            out.display()
        )));
    }
    // The checkpoints over complete lines; the log is cut at the newest, so
    // every line in the bundle is under a signature.
    let source = workspace.join(bl_store::provable::CHECKPOINT_DIR);
    let mut signed: Vec<(u64, PathBuf)> = Vec::new();
    for entry in std::fs::read_dir(&source).map_err(|e| failed(&source, e))? {
        let path = entry.map_err(|e| failed(&source, e))?.path();
        let size = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".checkpoint"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(size) = size.filter(|size| *size <= events) {
            signed.push((size, path));
        }
    }
    let Some(newest) = signed.iter().map(|(size, _)| *size).max() else {
        return Err(AppError::refused(format!(
            "evidence export: no signed checkpoint in {} covers the log yet; open the workspace with bl evidence serve first",
            source.display()
        )));
    };
    let cut = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(newest as usize - 1)
        .map_or(complete, |(i, _)| i + 1);
    let checkpoints = out.join(bl_store::provable::CHECKPOINT_DIR);
    std::fs::create_dir_all(&checkpoints).map_err(|e| failed(&checkpoints, e))?;
    std::fs::write(out.join(EVENTS_FILE), &bytes[..cut])
        .map_err(|e| failed(&out.join(EVENTS_FILE), e))?;
    for (_, path) in &signed {
        let to = checkpoints.join(path.file_name().expect("a named file"));
        std::fs::copy(path, &to).map_err(|e| failed(path, e))?;
    }
    Ok(Exported {
        events: newest,
        checkpoints: signed.len(),
        left_out: events - newest,
    })
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
    /// The workspace key's signature (hex) over `receipt_signed_bytes` of
    /// the operation, the sequence and the hash.
    pub receipt: String,
}

/// One workspace's evidence: its log, open and locked, and every decision's
/// state.
pub struct EvidenceStore {
    dir: PathBuf,
    log: EventLog,
    key: SigningKey,
    /// The keys whose signed reviews are authority here.
    reviewers: Vec<bl_store::VerifierKey>,
    decisions: Decisions,
    /// Set when a write failed after the log may have changed: the store
    /// refuses everything until it is opened again and read back.
    broken: Option<String>,
    /// Where each decision's latest event of each kind a retry can repeat
    /// is in the log (sequence, hash), so that a retry is answered with
    /// the event it repeats.
    recorded_at: BTreeMap<(String, &'static str), (u64, String)>,
    /// Signs the checkpoints after the one made at open, off the path of
    /// the answers.
    sealer: Option<crate::evidence_sealer::Sealer>,
    /// Lines appended that are not yet synced and checkpointed.
    unsealed: bool,
    /// The policy plugin, found and loaded once: the operator's, for the
    /// life of the store (what it records is the component it loaded).
    policy: Option<(String, bl_plugins::FoundPlugin, bl_plugins::PolicyPlugin)>,
    /// The reservations a stopped service left open, ended at this open.
    lost_at_open: Vec<String>,
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
    pub fn open(
        dir: &Path,
        key: SigningKey,
        reviewers: Vec<bl_store::VerifierKey>,
    ) -> Result<EvidenceStore, EvidenceError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(EVENTS_FILE);
        // Buffered: a request's events reach the file in one write, at
        // its seal, before it is answered.
        let log = EventLog::open(&path, identity())?.buffered();
        let mut store = EvidenceStore {
            dir: dir.to_path_buf(),
            log,
            key,
            reviewers,
            decisions: Decisions::default(),
            broken: None,
            recorded_at: BTreeMap::new(),
            sealer: None,
            unsealed: false,
            policy: None,
            lost_at_open: Vec::new(),
        };
        store.replay(&path)?;
        store.end_lost_reservations()?;
        // A synced checkpoint over the whole log, whatever was lost with
        // the last one.
        store.checkpoint_synced()?;
        let key = SigningKey::parse(&store.key.to_text()).map_err(|e| StoreError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        store.sealer = Some(crate::evidence_sealer::Sealer::start(
            dir.to_path_buf(),
            EVIDENCE_RUN_ID,
            key,
            store.log.tree_head().size,
        ));
        Ok(store)
    }

    /// A reservation still open when the store is opened was held by a
    /// service that stopped: whether the tool ran is unknown, so it needs a
    /// person (seed 004: an interrupted process), never a replay.
    fn end_lost_reservations(&mut self) -> Result<(), EvidenceError> {
        let lost: Vec<String> = self
            .decisions
            .iter()
            .filter(|(_, d)| d.stage == Stage::Reserved)
            .map(|(op, _)| op.clone())
            .collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        for op in &lost {
            let cause = "the evidence service stopped while the tool was reserved; whether it ran is unknown".to_string();
            self.append(
                op,
                EvidenceEvent::ReconciliationRequired { cause },
                None,
                now,
            )?;
        }
        self.lost_at_open = lost;
        self.seal()
    }

    /// The decisions whose reservation a stopped service left open, which
    /// this opening set to await reconciliation: the operator is told at
    /// once, not when someone asks about one.
    pub fn lost_at_open(&self) -> &[String] {
        &self.lost_at_open
    }

    fn replay(&mut self, path: &Path) -> Result<(), EvidenceError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(StoreError::Io {
                    path: path.to_path_buf(),
                    source,
                }
                .into());
            }
        };
        for (i, line) in text.lines().enumerate() {
            let not_evidence = |message: String| EvidenceError::NotEvidence {
                path: path.to_path_buf(),
                line: i + 1,
                message,
            };
            let row: Value = serde_json::from_str(line).map_err(|e| not_evidence(e.to_string()))?;
            let logged: LoggedEvent = serde_json::from_value(row["payload"].clone())
                .map_err(|e| not_evidence(format!("not an evidence event: {e}")))?;
            if row["event_type"] != logged.evidence.kind() {
                return Err(not_evidence(format!(
                    "recorded as {}, but holds {}",
                    row["event_type"],
                    logged.evidence.kind()
                )));
            }
            if logged.needs_review() {
                let workspace = self.key.verifier().to_text();
                match &logged.review {
                    Some(signed) if logged.review_matches() => {
                        check_review(signed, &workspace, &self.reviewers).map_err(|refusal| {
                            not_evidence(format!("{}: {refusal}", logged.evidence.kind()))
                        })?
                    }
                    _ => {
                        return Err(not_evidence(format!(
                            "{} without the signed review it must come from",
                            logged.evidence.kind()
                        )));
                    }
                }
            }
            let changed = self.decisions.replay(&logged).map_err(|refusal| {
                not_evidence(format!("{} refused: {refusal}", logged.evidence.kind()))
            })?;
            if changed && logged.evidence.can_be_retried() {
                let sequence = row["sequence"].as_u64().unwrap_or_default();
                let hash = row["event_hash"].as_str().unwrap_or_default().to_string();
                self.recorded_at.insert(
                    (logged.operation_id, logged.evidence.kind()),
                    (sequence, hash),
                );
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
        let recorded = self.append(operation_id, event, None, now);
        self.answered(operation_id, recorded)
    }

    /// Records the tool's receipt, `tool_executed` with `ok`, and the
    /// digest of what it returned, `tool_result`, in one durable step: a
    /// receipt sent again after a lost answer is refused before anything
    /// is appended (`AlreadyExecuted`), so neither is recorded twice.
    /// Answers both, in that order.
    pub fn record_returned(
        &mut self,
        operation_id: &str,
        detail: String,
        result_digest: String,
        now: u64,
    ) -> Result<(Recorded, Recorded), EvidenceError> {
        let executed = self.append(
            operation_id,
            EvidenceEvent::ToolExecuted { ok: true, detail },
            None,
            now,
        );
        // Executed is the only stage a receipt that returned leads to, and
        // the one a result is accepted in.
        let result = executed.is_ok().then(|| {
            self.append(
                operation_id,
                EvidenceEvent::ToolResult { result_digest },
                None,
                now,
            )
        });
        let executed = self.answered(operation_id, executed)?;
        let mut result = result.expect("appended after the receipt")?;
        result.receipt = self.receipt(operation_id, result.sequence, &result.hash);
        Ok((executed, result))
    }

    /// `outcome`, once what was appended for it is durable and
    /// checkpointed (a failure to seal is the answer instead), signed for
    /// `operation_id`. Only the answered event is signed (a proposal
    /// appends two).
    fn answered(
        &mut self,
        operation_id: &str,
        outcome: Result<Recorded, EvidenceError>,
    ) -> Result<Recorded, EvidenceError> {
        self.seal()?;
        let mut recorded = outcome?;
        recorded.receipt = self.receipt(operation_id, recorded.sequence, &recorded.hash);
        Ok(recorded)
    }

    /// Appends `event` if the rules accept it, without waiting for the
    /// disk: nothing may be answered until `seal`, and its receipt is
    /// signed then (`answered`).
    fn append(
        &mut self,
        operation_id: &str,
        event: EvidenceEvent,
        review: Option<SignedReview>,
        now: u64,
    ) -> Result<Recorded, EvidenceError> {
        if let Some(why) = &self.broken {
            return Err(EvidenceError::Broken(why.clone()));
        }
        if event.needs_review() && review.is_none() {
            return Err(EvidenceError::NeedsReview(event.kind()));
        }
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
            // The event this one repeats: a rejection's, the latest
            // outcome's, else (a proposal) the decision's creation.
            let (sequence, hash) = self
                .recorded_at
                .get(&(operation_id.to_string(), event.kind()))
                .or_else(|| {
                    self.recorded_at
                        .get(&(operation_id.to_string(), "decision_created"))
                })
                .cloned()
                .unwrap_or_default();
            return Ok(Recorded {
                receipt: String::new(),
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
            review,
        })
        .expect("an evidence event is JSON");
        let timestamp = humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(now),
        )
        .to_string();
        let key = format!("{operation_id}/{sequence}");
        // From here a failure may leave the line written: the state is
        // committed with it, and any error breaks the store until it is
        // opened again and read back, so nothing is granted twice.
        match self.log.append(&key, event.kind(), &payload, &timestamp) {
            Ok(bl_store::Appended::Written { .. }) => {}
            Ok(bl_store::Appended::AlreadyRecorded) => {
                let why = format!("{key} was already in the log");
                self.broken = Some(why.clone());
                return Err(EvidenceError::Broken(why));
            }
            Err(e) => {
                self.broken = Some(e.to_string());
                return Err(e.into());
            }
        }
        self.unsealed = true;
        let hash = self.log.head().hash.clone();
        if event.can_be_retried() {
            self.recorded_at.insert(
                (operation_id.to_string(), event.kind()),
                (sequence, hash.clone()),
            );
        }
        let stage = next.stage;
        self.decisions.commit(operation_id, next);
        Ok(Recorded {
            receipt: String::new(),
            sequence,
            hash,
            stage,
            retry: false,
        })
    }

    fn receipt(&self, operation_id: &str, sequence: u64, hash: &str) -> String {
        let bytes = bl_core::evidence::receipt_signed_bytes(operation_id, sequence, hash);
        hex::encode(self.key.sign(&bytes))
    }

    /// Makes every line appended since the last seal durable (one
    /// fdatasync for them all), and has the sealer sign a checkpoint over
    /// the log.
    fn seal(&mut self) -> Result<(), EvidenceError> {
        // A broken store writes nothing more: what it failed to write
        // stays unwritten, and the answer says why it stopped.
        if let Some(why) = &self.broken {
            return Err(EvidenceError::Broken(why.clone()));
        }
        if !self.unsealed {
            return Ok(());
        }
        if let Err(e) = self.log.sync() {
            self.broken = Some(e.to_string());
            return Err(e.into());
        }
        self.unsealed = false;
        let failed = match &self.sealer {
            Some(sealer) => {
                let head = self.log.tree_head();
                sealer.request(head.size, head.root)
            }
            None => None,
        };
        match failed {
            Some(why) => {
                self.broken = Some(why.clone());
                Err(EvidenceError::Broken(why))
            }
            None => Ok(()),
        }
    }

    /// Waits until the checkpoint over every event recorded so far is
    /// written.
    pub fn flush_checkpoints(&mut self) -> Result<(), EvidenceError> {
        match self.sealer.as_ref().and_then(|s| s.flush()) {
            Some(why) => {
                self.broken = Some(why.clone());
                Err(EvidenceError::Broken(why))
            }
            None => Ok(()),
        }
    }

    /// Moves every checkpoint that is not a note this workspace's key
    /// signed into `checkpoints/damaged/`: what a machine that lost power
    /// can leave of one written but not yet synced. Nothing is deleted.
    fn set_aside_damaged_checkpoints(&self) -> Result<(), EvidenceError> {
        let dir = self.dir.join(bl_store::provable::CHECKPOINT_DIR);
        let verifier = self.key.verifier();
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| EvidenceError::Store(StoreError::Io { path, source })
        };
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(&dir)(e)),
        };
        for entry in entries {
            let path = entry.map_err(io(&dir))?.path();
            if path.extension().is_none_or(|x| x != "checkpoint") {
                continue;
            }
            let whole = std::fs::read_to_string(&path)
                .ok()
                .is_some_and(|note| bl_store::Checkpoint::verify(&note, &verifier).is_ok());
            if !whole {
                let aside = dir.join("damaged");
                std::fs::create_dir_all(&aside).map_err(io(&aside))?;
                let to = aside.join(path.file_name().expect("a named file"));
                std::fs::rename(&path, &to).map_err(io(&path))?;
                crate::notes::note(format!(
                    "bl evidence: {} is not a checkpoint this workspace's key signed (a power loss leaves one so); moved to {}",
                    path.display(),
                    to.display()
                ));
            }
        }
        Ok(())
    }

    /// Writes the synced checkpoint of the log as it is, now.
    fn checkpoint_synced(&mut self) -> Result<(), EvidenceError> {
        let head = self.log.tree_head();
        if head.size == 0 {
            return Ok(());
        }
        self.set_aside_damaged_checkpoints()?;
        match write_checkpoint_at(&self.dir, &head, Some(&self.key), Durability::Synced) {
            Ok(_) => Ok(()),
            // This head is checkpointed already, over other files: a torn
            // tail `bl log recover` set aside since. The head is what the
            // checkpoint vouches for; the set-aside bytes are no event, and
            // the next checkpoint seals them with the directory.
            Err(bl_store::provable::SealError::CheckpointDiffers { path })
                if self.checkpoints_head(&path, head.size, &head.root) =>
            {
                Ok(())
            }
            Err(source) => Err(EvidenceError::Checkpoint {
                dir: self.dir.clone(),
                source,
            }),
        }
    }

    /// Whether the checkpoint at `path` is this workspace key's, over the
    /// log's first `size` events with `root`.
    fn checkpoints_head(&self, path: &Path, size: u64, root: &bl_store::merkle::Hash) -> bool {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|note| bl_store::Checkpoint::verify(&note, &self.key.verifier()).ok())
            .is_some_and(|c| c.size == size && c.root == *root)
    }

    /// Asks the publication-policy plugin `plugin` (with `config`) about a
    /// decision, and records its answer: the plugin, its version and
    /// component digest, and the digest of exactly what it was asked. It
    /// is asked without an approval, and if that is denied, again with one
    /// named `human`: allowed without, the decision is cleared; allowed
    /// only with, a person must approve; allowed by neither, it is blocked. A policy
    /// that cannot decide is an error, and nothing is recorded.
    pub fn evaluate_policy(
        &mut self,
        host: &bl_plugins::PluginHost,
        operation_id: &str,
        plugin: &str,
        config: &str,
        now: u64,
    ) -> Result<Recorded, EvidenceError> {
        let event = self.ask_policy(host, operation_id, plugin, config)?;
        self.record(operation_id, event, now)
    }

    /// A proposal: the decision is created (or found, on a retry) and, if
    /// no policy has decided it yet, the policy decides, in one durable
    /// step. The answer is where the decision stands after both.
    ///
    /// With `reserve`, the same step also takes the reservation
    /// (`tool_requested`, for the binding's tool and arguments) when the
    /// decision stands cleared, with any approval still in force: for an
    /// app that calls the tool right after it asks. The reservation is
    /// `Some` only when it was granted by this very call; a decision
    /// reserved before (a node run again) gets none, and the proposal's
    /// stage says `reserved`. Anything else (a person must approve,
    /// blocked, an expired approval) is answered as a proposal alone.
    pub fn propose(
        &mut self,
        host: &bl_plugins::PluginHost,
        binding: DecisionBinding,
        (plugin, config): (&str, &str),
        reserve: bool,
        now: u64,
    ) -> Result<(Recorded, Option<Recorded>), EvidenceError> {
        let operation_id = binding.operation_id.clone();
        let request = EvidenceEvent::ToolRequested {
            tool: binding.tool.clone(),
            args_digest: binding.args_digest.clone(),
        };
        let decided = self.propose_unsealed(host, binding, plugin, config, now);
        let cleared = self
            .decisions
            .get(&operation_id)
            .is_some_and(|d| d.stage == Stage::Cleared && !d.approval_expired(now));
        let reserved = match &decided {
            Ok(_) if reserve && cleared => Some(self.append(&operation_id, request, None, now)),
            _ => None,
        };
        let mut proposal = self.answered(&operation_id, decided)?;
        let reservation = match reserved {
            Some(reserved) => {
                let mut reserved = reserved?;
                reserved.receipt = self.receipt(&operation_id, reserved.sequence, &reserved.hash);
                proposal.stage = reserved.stage;
                Some(reserved)
            }
            None => None,
        };
        Ok((proposal, reservation))
    }

    /// The proposal's events, appended but not yet durable.
    fn propose_unsealed(
        &mut self,
        host: &bl_plugins::PluginHost,
        binding: DecisionBinding,
        plugin: &str,
        config: &str,
        now: u64,
    ) -> Result<Recorded, EvidenceError> {
        let operation_id = binding.operation_id.clone();
        let created = self.append(
            &operation_id,
            EvidenceEvent::DecisionCreated(binding),
            None,
            now,
        );
        match created {
            Ok(created)
                if self
                    .decisions
                    .get(&operation_id)
                    .is_some_and(|d| d.policy.is_some()) =>
            {
                Ok(created)
            }
            Ok(_) => self
                .ask_policy(host, &operation_id, plugin, config)
                .and_then(|event| self.append(&operation_id, event, None, now)),
            Err(e) => Err(e),
        }
    }

    /// What the policy plugin says of a created decision, as the event
    /// that records it.
    /// The policy plugin `plugin`, loaded once and kept.
    fn loaded_policy(
        &mut self,
        host: &bl_plugins::PluginHost,
        plugin: &str,
    ) -> Result<(&bl_plugins::FoundPlugin, &bl_plugins::PolicyPlugin), EvidenceError> {
        let cannot = |message: String| EvidenceError::Policy {
            plugin: plugin.to_string(),
            message,
        };
        if self.policy.as_ref().is_none_or(|(name, ..)| name != plugin) {
            let found = host.find(plugin).map_err(|e| cannot(e.to_string()))?;
            // A policy is granted nothing: it decides from the request alone.
            let loaded = host
                .load_policy(&found, &bl_plugins::Grant::default())
                .map_err(|e| cannot(e.to_string()))?;
            self.policy = Some((plugin.to_string(), found, loaded));
        }
        let (_, found, policy) = self.policy.as_ref().expect("loaded above");
        Ok((found, policy))
    }

    /// Loads the policy plugin `plugin` and has it answer one request
    /// with `config`, recording nothing: a service whose policy cannot be
    /// found, loaded or configured refuses to start, rather than answer
    /// every decision with an error.
    pub fn check_policy(
        &mut self,
        host: &bl_plugins::PluginHost,
        plugin: &str,
        config: &str,
    ) -> Result<(), EvidenceError> {
        let (found, policy) = self.loaded_policy(host, plugin)?;
        let cannot = |message: String| EvidenceError::Policy {
            plugin: plugin.to_string(),
            message,
        };
        // Its manifest's schema names the place in the config that is
        // wrong; the plugin's own refusal would not.
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(config) {
            found
                .check_config(&value, "", str::to_string)
                .map_err(|e| cannot(e.to_string()))?;
        }
        let probe = bl_plugins::PublishRequest {
            effect_key: "bl-evidence-start".into(),
            kind: TOOL_CALL.into(),
            target: "bl-evidence-start".into(),
            payload_digest: format!("sha256:{}", "0".repeat(64)),
            approvals: Vec::new(),
        };
        host.runtime()
            .and_then(|runtime| runtime.decide(policy, &probe, config))
            .map(|_| ())
            .map_err(|e| cannot(e.to_string()))
    }

    fn ask_policy(
        &mut self,
        host: &bl_plugins::PluginHost,
        operation_id: &str,
        plugin: &str,
        config: &str,
    ) -> Result<EvidenceEvent, EvidenceError> {
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
        let (found, policy) = self.loaded_policy(host, plugin)?;
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
                .and_then(|runtime| runtime.decide(policy, &request(approved), config))
                .map(|invocation| invocation.value)
                .map_err(|e| cannot(e.to_string()))
        };
        // Allowed as it is, it is not asked about an approval at all.
        let alone = ask(false)?;
        let approved = if alone.allow { None } else { Some(ask(true)?) };
        // Exactly what it was asked: each request, and the config.
        let asked_requests = if approved.is_some() {
            vec![request(false), request(true)]
        } else {
            vec![request(false)]
        };
        let requests: Vec<serde_json::Value> = asked_requests
            .iter()
            .map(|r| {
                let approvals: Vec<serde_json::Value> = r
                    .approvals
                    .iter()
                    .map(|a| serde_json::json!({"name": a.name, "approver": a.approver, "approved": a.approved}))
                    .collect();
                serde_json::json!({
                    "effect_key": r.effect_key,
                    "kind": r.kind,
                    "target": r.target,
                    "payload_digest": r.payload_digest,
                    "approvals": approvals,
                })
            })
            .collect();
        let asked = serde_json::json!({"config": config, "requests": requests});
        let record = PolicyRecord {
            policy_id: found.name(),
            version: found.version.clone().unwrap_or_default(),
            component_digest: found.digest.clone(),
            input_commitment: bl_core::Sha256Digest::of(
                bl_core::canonical::canonical_json(&asked).as_bytes(),
            )
            .to_string(),
            allow: alone.allow || approved.as_ref().is_some_and(|a| a.allow),
            needs_approval: approved.as_ref().is_some_and(|a| a.allow),
            // The answer to the call as it stands ("refund needs a
            // person's approval"); the answer with an approval assumed
            // ("refund was approved") is no reason a reviewer should see.
            reason: alone.reason,
        };
        Ok(EvidenceEvent::PolicyEvaluated(record))
    }

    /// Records a person's review, if it is authority here (see
    /// `check_review`); the rules then apply as to any event, and the
    /// signed review is kept with it. Nothing else records an approval, a
    /// rejection or a reconciliation.
    pub fn review(&mut self, signed: &SignedReview, now: u64) -> Result<Recorded, EvidenceError> {
        let workspace = self.key.verifier().to_text();
        check_review(signed, &workspace, &self.reviewers).map_err(|refusal| {
            EvidenceError::Review {
                operation_id: signed.review.operation_id().to_string(),
                refusal,
            }
        })?;
        let event = signed.review.event();
        let operation_id = signed.review.operation_id();
        let recorded = self.append(operation_id, event, Some(signed.clone()), now);
        self.answered(operation_id, recorded)
    }

    /// The verifier key of this workspace's checkpoints: what a review
    /// names as its workspace, and what verifies the workspace offline.
    pub fn verifier(&self) -> String {
        self.key.verifier().to_text()
    }

    /// Why the store stopped recording, if it did: what it holds in
    /// memory may then be ahead of its log, and is not to be shown.
    pub fn broken(&self) -> Option<EvidenceError> {
        self.broken.clone().map(EvidenceError::Broken)
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
            tool: "refund".into(),
            args_digest: "sha256:aa".into(),
            policy_id: "refunds".into(),
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

    /// One reviewer key for the whole test process.
    fn bob() -> SigningKey {
        static BOB: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        SigningKey::parse(BOB.get_or_init(|| SigningKey::generate("bob").unwrap().to_text()))
            .unwrap()
    }

    /// `event` (an approval), as bob's signed review for `store`.
    fn reviewed(store: &EvidenceStore, event: EvidenceEvent) -> SignedReview {
        let EvidenceEvent::HumanApproved(approval) = event else {
            panic!("an approval")
        };
        sign_review(Review::Approve(approval), &store.verifier(), &bob())
    }

    fn key() -> SigningKey {
        SigningKey::generate("evidence-test").unwrap()
    }

    /// An outcome sent again (its answer lost) is answered with the
    /// outcome's own place in the log and receipt, before and after the
    /// store is reopened; nothing new is written.
    #[test]
    fn an_outcome_sent_again_is_answered_with_the_outcome_it_repeats() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ws");
        let signer = key();
        let same_key = || SigningKey::parse(&signer.to_text()).unwrap();
        let outcome = || EvidenceEvent::OutcomeObserved {
            external_ref: "refund/991".into(),
            status: "settled".into(),
            source: "payments-api".into(),
        };
        let first = {
            let mut store = EvidenceStore::open(&dir, same_key(), vec![bob().verifier()]).unwrap();
            store.record("op-1", created(), NOW).unwrap();
            store.record("op-1", policy(), NOW).unwrap();
            let paused = EvidenceEvent::ApprovalRequested {
                checkpoint_ns: "ns".into(),
                interrupt_id: "i-1".into(),
            };
            store.record("op-1", paused, NOW).unwrap();
            let signed = reviewed(&store, approval());
            store.review(&signed, NOW).unwrap();
            store.record("op-1", reserve(), NOW).unwrap();
            let executed = EvidenceEvent::ToolExecuted {
                ok: true,
                detail: "sha256:rr".into(),
            };
            store.record("op-1", executed, NOW).unwrap();
            let first = store.record("op-1", outcome(), NOW).unwrap();
            assert_eq!((first.sequence, first.retry), (7, false));
            let again = store.record("op-1", outcome(), NOW).unwrap();
            assert_eq!(
                again,
                Recorded {
                    retry: true,
                    ..first.clone()
                }
            );
            first
        };
        let mut store = EvidenceStore::open(&dir, same_key(), vec![bob().verifier()]).unwrap();
        let again = store.record("op-1", outcome(), NOW).unwrap();
        assert_eq!(
            again,
            Recorded {
                retry: true,
                ..first
            }
        );
        let lines = std::fs::read_to_string(dir.join(EVENTS_FILE)).unwrap();
        assert_eq!(lines.lines().count(), 7);
        assert_eq!(store.decision("op-1").unwrap().outcomes, 1);
    }

    #[test]
    fn accepted_events_are_chained_and_checkpointed_and_a_reopened_store_refuses_as_before() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ws");
        let signer = key();
        let same_key = || SigningKey::parse(&signer.to_text()).unwrap();
        {
            let mut store = EvidenceStore::open(&dir, same_key(), vec![bob().verifier()]).unwrap();
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
            // The receipt is the workspace key's signature over the event.
            let signature: [u8; 64] = hex::decode(&first.receipt).unwrap().try_into().unwrap();
            let signed = bl_core::evidence::receipt_signed_bytes("op-1", 1, &first.hash);
            assert!(signer.verifier().verify(&signed, &signature));
            assert!(!signer.verifier().verify(
                &bl_core::evidence::receipt_signed_bytes("op-1", 2, &first.hash),
                &signature
            ));
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
            assert!(matches!(
                store.record("op-1", approval(), NOW),
                Err(EvidenceError::NeedsReview("human_approved"))
            ));
            let signed = reviewed(&store, approval());
            store.review(&signed, NOW).unwrap();
            let reserved = store.record("op-1", reserve(), NOW).unwrap();
            assert_eq!((reserved.sequence, reserved.stage), (5, Stage::Reserved));
            // The process is lost here, after the reservation.
        }
        // Reopened, the lost reservation needs a person: nothing replays.
        let mut store = EvidenceStore::open(&dir, same_key(), vec![bob().verifier()]).unwrap();
        assert_eq!(
            store.decision("op-1").unwrap().stage,
            Stage::ReconciliationRequired
        );
        match store.record("op-1", reserve(), NOW) {
            Err(EvidenceError::Refused {
                refusal: Refusal::ReconciliationRequired,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        // Nothing refused was written. Each checkpoint replaced the one
        // before it: the first store's last (5 events) and the second's (6).
        let lines = std::fs::read_to_string(dir.join(EVENTS_FILE)).unwrap();
        assert_eq!(lines.lines().count(), 6);
        let report = bl_store::provable::verify_checkpoints(&dir, Some(&signer.verifier()))
            .unwrap()
            .unwrap();
        assert_eq!(report.checked, 2);
        let kept: Vec<_> = std::fs::read_dir(dir.join("checkpoints"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            kept.contains(&"000000000006.checkpoint".to_string()),
            "{kept:?}"
        );
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
            evidence.detail.contains("1 awaiting reconciliation")
                && evidence.detail.contains("op-1 approved by bob (key ")
                && evidence.detail.contains("Not established")
                && !evidence.detail.contains("under no signed checkpoint"),
            "{}",
            evidence.detail
        );
        // A checkpoint a power loss left empty is set aside at the next
        // open, and signed again.
        drop(store);
        let newest = dir.join("checkpoints/000000000006.checkpoint");
        std::fs::write(&newest, "").unwrap();
        let store = EvidenceStore::open(&dir, same_key(), vec![bob().verifier()]).unwrap();
        assert!(
            dir.join("checkpoints/damaged/000000000006.checkpoint")
                .is_file()
        );
        assert!(
            std::fs::read_to_string(&newest)
                .unwrap()
                .contains("evidence")
        );
        // A checkpoint renamed to claim a later head is refused.
        drop(store);
        let checkpoints = dir.join("checkpoints");
        std::fs::copy(
            checkpoints.join("000000000005.checkpoint"),
            checkpoints.join("000000000009.checkpoint"),
        )
        .unwrap();
        let bl_verify::Report::Graph(report) = bl_verify::verify(&dir, &options).unwrap() else {
            unreachable!()
        };
        assert!(
            format!("{report:?}").contains("not the one its name says"),
            "{report:?}"
        );
        std::fs::remove_file(checkpoints.join("000000000009.checkpoint")).unwrap();
        // Without its newest checkpoint, the last event is under no
        // signature: against the key that fails; without a key it is said.
        std::fs::remove_file(dir.join("checkpoints/000000000006.checkpoint")).unwrap();
        let bl_verify::Report::Graph(report) = bl_verify::verify(&dir, &options).unwrap() else {
            unreachable!()
        };
        assert!(!report.ok(), "{report:?}");
        let evidence = report.checks.iter().find(|c| c.name == "evidence").unwrap();
        assert!(
            evidence
                .detail
                .contains("1 of the 6 events are under no checkpoint signed by the key"),
            "{}",
            evidence.detail
        );
        let unkeyed = bl_verify::Options::default();
        let bl_verify::Report::Graph(report) = bl_verify::verify(&dir, &unkeyed).unwrap() else {
            unreachable!()
        };
        let evidence = report.checks.iter().find(|c| c.name == "evidence").unwrap();
        assert!(
            evidence
                .detail
                .contains("the newest 1 event(s) are under no signed checkpoint yet"),
            "{}",
            evidence.detail
        );
    }

    #[test]
    fn events_for_an_unknown_decision_and_a_second_writer_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = EvidenceStore::open(tmp.path(), key(), vec![bob().verifier()]).unwrap();
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
            EvidenceStore::open(tmp.path(), key(), vec![bob().verifier()]),
            Err(EvidenceError::Store(StoreError::Locked { .. }))
        ));
    }

    #[test]
    fn a_policy_plugin_decides_and_its_answer_is_recorded_with_what_it_was_asked() {
        let Some(host) = crate::test_support::first_party_plugins() else {
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let mut store = EvidenceStore::open(tmp.path(), key(), vec![bob().verifier()]).unwrap();
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

    /// The first-party plugins, a fresh store and op-1's binding, for the
    /// tests that propose; None where the plugins are not built.
    fn proposing() -> Option<(
        std::sync::Arc<bl_plugins::PluginHost>,
        tempfile::TempDir,
        EvidenceStore,
        DecisionBinding,
    )> {
        let host = crate::test_support::first_party_plugins()?;
        let tmp = tempfile::tempdir().unwrap();
        let store = EvidenceStore::open(tmp.path(), key(), vec![bob().verifier()]).unwrap();
        let EvidenceEvent::DecisionCreated(binding) = created() else {
            unreachable!()
        };
        Some((host, tmp, store, binding))
    }

    #[test]
    fn a_proposal_creates_and_decides_in_one_step_and_a_retry_records_nothing() {
        let Some((host, tmp, mut store, binding)) = proposing() else {
            return;
        };
        let config = r#"{"needs_approval": ["refund"]}"#;
        let (first, _) = store
            .propose(&host, binding.clone(), ("tool-policy", config), false, NOW)
            .unwrap();
        assert_eq!((first.sequence, first.stage), (2, Stage::AwaitingApproval));
        let (again, _) = store
            .propose(&host, binding.clone(), ("tool-policy", config), false, NOW)
            .unwrap();
        assert_eq!((again.stage, again.retry), (Stage::AwaitingApproval, true));
        let lines = std::fs::read_to_string(tmp.path().join(EVENTS_FILE)).unwrap();
        assert_eq!(lines.lines().count(), 2);
        // Another tool under the same operation id is another decision.
        let other = DecisionBinding {
            tool: "delete".into(),
            ..binding
        };
        assert!(matches!(
            store.propose(&host, other, ("tool-policy", config), false, NOW),
            Err(EvidenceError::Refused {
                refusal: Refusal::CreatedDifferently { field: "tool", .. },
                ..
            })
        ));
        // One checkpoint, the newest, covers both lines.
        store.flush_checkpoints().unwrap();
        let report =
            bl_store::provable::verify_checkpoints(tmp.path(), Some(&store.key.verifier()))
                .unwrap()
                .unwrap();
        assert_eq!(report.checked, 1);
    }

    #[test]
    fn a_proposal_that_reserves_takes_the_reservation_only_when_cleared_and_only_once() {
        let Some((host, tmp, mut store, binding)) = proposing() else {
            return;
        };
        let lines = || {
            std::fs::read_to_string(tmp.path().join(EVENTS_FILE))
                .unwrap()
                .lines()
                .count()
        };
        // Cleared: created, decided and reserved in one step, and the
        // reservation's receipt verifies with the workspace key.
        let allow = r#"{"allow": ["refund"]}"#;
        let (proposal, reservation) = store
            .propose(&host, binding.clone(), ("tool-policy", allow), true, NOW)
            .unwrap();
        let reservation = reservation.expect("a cleared decision is reserved");
        assert_eq!((proposal.stage, proposal.retry), (Stage::Reserved, false));
        assert_eq!((reservation.sequence, reservation.retry), (3, false));
        let signed = bl_core::evidence::receipt_signed_bytes("op-1", 3, &reservation.hash);
        let signature: [u8; 64] = hex::decode(&reservation.receipt)
            .unwrap()
            .try_into()
            .unwrap();
        assert!(store.key.verifier().verify(&signed, &signature));
        assert_eq!(lines(), 3);
        // Asked again (a node run again): no second permission, nothing
        // recorded, and the stage says where it stands.
        let (again, none) = store
            .propose(&host, binding.clone(), ("tool-policy", allow), true, NOW)
            .unwrap();
        assert_eq!(
            (again.stage, again.retry, none),
            (Stage::Reserved, true, None)
        );
        assert_eq!(lines(), 3);
        assert!(matches!(
            store.record("op-1", reserve(), NOW),
            Err(EvidenceError::Refused {
                refusal: Refusal::AlreadyReserved,
                ..
            })
        ));
        // A person must approve, or the policy blocks: a proposal only.
        for (op, config, stage) in [
            (
                "op-2",
                r#"{"needs_approval": ["refund"]}"#,
                Stage::AwaitingApproval,
            ),
            ("op-3", r#"{"allow": ["lookup"]}"#, Stage::Blocked),
        ] {
            let other = DecisionBinding {
                operation_id: op.into(),
                ..binding.clone()
            };
            let (proposal, reservation) = store
                .propose(&host, other, ("tool-policy", config), true, NOW)
                .unwrap();
            assert_eq!((proposal.stage, reservation), (stage, None), "{op}");
        }
        assert_eq!(lines(), 7);
    }

    #[test]
    fn a_proposal_reserves_an_approved_decision_only_while_its_approval_holds() {
        let Some((host, _tmp, mut store, binding)) = proposing() else {
            return;
        };
        awaiting_approval(&mut store);
        let signed = reviewed(&store, approval());
        store.review(&signed, NOW).unwrap();
        let policy = ("tool-policy", r#"{"needs_approval": ["refund"]}"#);
        // The approval (for a minute) has run out: no reservation.
        let (late, none) = store
            .propose(&host, binding.clone(), policy, true, NOW + 61)
            .unwrap();
        assert_eq!((late.stage, none), (Stage::Cleared, None));
        // While it holds, the proposal reserves the call.
        let (proposal, reservation) = store
            .propose(&host, binding, policy, true, NOW + 1)
            .unwrap();
        assert_eq!(proposal.stage, Stage::Reserved);
        assert!(reservation.is_some_and(|r| !r.retry && r.stage == Stage::Reserved));
    }

    /// Records op-1 up to a person's approval being asked for.
    fn awaiting_approval(store: &mut EvidenceStore) {
        let asked = EvidenceEvent::ApprovalRequested {
            checkpoint_ns: "ns".into(),
            interrupt_id: "i-1".into(),
        };
        for event in [created(), policy(), asked] {
            store.record("op-1", event, NOW).unwrap();
        }
    }

    #[test]
    fn only_a_trusted_reviewers_signed_review_is_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = EvidenceStore::open(tmp.path(), key(), vec![bob().verifier()]).unwrap();
        awaiting_approval(&mut store);
        let (bob, mallory) = (bob(), SigningKey::generate("mallory").unwrap());
        let here = store.verifier();
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
        let signed = sign_review(Review::Approve(by_mallory), &here, &mallory);
        assert!(matches!(
            refusal(store.review(&signed, NOW)),
            ReviewRefusal::UntrustedKey(_)
        ));
        // Bob's key, but the review was changed after he signed it.
        let mut tampered = sign_review(Review::Approve(approval.clone()), &here, &bob);
        if let Review::Approve(a) = &mut tampered.review {
            a.expires_at += 3600;
        }
        assert_eq!(
            refusal(store.review(&tampered, NOW)),
            ReviewRefusal::BadSignature
        );
        // Bob's, but for another workspace.
        let elsewhere = key().verifier().to_text();
        let signed = sign_review(Review::Approve(approval.clone()), &elsewhere, &bob);
        assert_eq!(
            refusal(store.review(&signed, NOW)),
            ReviewRefusal::OtherWorkspace
        );
        // Bob signing in another reviewer's name.
        let mut as_carol = approval.clone();
        as_carol.reviewer = "carol".into();
        let signed = sign_review(Review::Approve(as_carol), &here, &bob);
        assert_eq!(
            refusal(store.review(&signed, NOW)),
            ReviewRefusal::NotTheSigner {
                named: "carol".into(),
                signer: "bob".into()
            }
        );
        assert_eq!(
            store.decision("op-1").unwrap().stage,
            Stage::AwaitingApproval
        );
        // Bob's own: recorded with its signature, and a rejection comes too late.
        let signed = sign_review(Review::Approve(approval), &here, &bob);
        assert_eq!(store.review(&signed, NOW).unwrap().stage, Stage::Cleared);
        let late = Review::Reject {
            operation_id: "op-1".into(),
            reviewer: "bob".into(),
            reason: "second thoughts".into(),
        };
        assert!(matches!(
            store.review(&sign_review(late, &here, &bob), NOW),
            Err(EvidenceError::Refused {
                refusal: Refusal::AlreadyApproved,
                ..
            })
        ));
        let log = std::fs::read_to_string(tmp.path().join(EVENTS_FILE)).unwrap();
        let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
        assert_eq!(
            last["payload"]["review"],
            serde_json::to_value(&signed).unwrap()
        );
    }

    #[test]
    fn an_approval_written_past_the_service_does_not_open_or_verify() {
        let tmp = tempfile::tempdir().unwrap();
        let signer = key();
        let verifier = signer.verifier().to_text();
        {
            let mut store =
                EvidenceStore::open(tmp.path(), signer, vec![bob().verifier()]).unwrap();
            awaiting_approval(&mut store);
        }
        // Whoever can write the file appends an approval with no review.
        written_past_the_service(tmp.path(), 4, approval());
        let message = refused_on_open(tmp.path(), 4);
        assert!(message.contains("signed review"), "{message}");
        let detail = failed_verify(tmp.path(), Some(&verifier));
        assert!(detail.contains("line 4"), "{detail}");
    }

    /// Appends `evidence` as line `n` of `dir`'s log, as something other
    /// than the service would.
    fn written_past_the_service(dir: &Path, n: u64, evidence: EvidenceEvent) {
        let mut log = EventLog::open(&dir.join(EVENTS_FILE), identity()).unwrap();
        let payload = serde_json::json!({"operation_id": "op-1", "at": NOW, "evidence": evidence});
        log.append_durable(
            &format!("op-1/{n}"),
            evidence.kind(),
            &payload,
            "2027-01-15T08:00:00Z",
        )
        .unwrap();
    }

    /// Why the store at `dir` does not open: its line `line` is refused.
    fn refused_on_open(dir: &Path, line: usize) -> String {
        match EvidenceStore::open(dir, key(), vec![bob().verifier()]) {
            Err(EvidenceError::NotEvidence {
                line: l, message, ..
            }) if l == line => message,
            other => panic!("{:?}", other.err()),
        }
    }

    /// The failed evidence check of `bl verify` on `dir`.
    fn failed_verify(dir: &Path, workspace_key: Option<&str>) -> String {
        let options = bl_verify::Options {
            verifier: workspace_key.map(|k| bl_store::VerifierKey::parse(k).unwrap()),
            ..Default::default()
        };
        let bl_verify::Report::Graph(report) = bl_verify::verify(dir, &options).unwrap() else {
            panic!("an event log");
        };
        let evidence = report.checks.iter().find(|c| c.name == "evidence").unwrap();
        assert_eq!(evidence.status, bl_verify::Status::Fail, "{evidence:?}");
        evidence.detail.clone()
    }

    #[test]
    fn a_log_with_an_event_the_rules_refuse_does_not_open() {
        let tmp = tempfile::tempdir().unwrap();
        // Written past the rules: a reservation with no decision.
        written_past_the_service(tmp.path(), 1, reserve());
        let message = refused_on_open(tmp.path(), 1);
        assert!(message.contains("decision_created"), "{message}");
        let detail = failed_verify(tmp.path(), None);
        assert!(detail.contains("line 1: tool_requested"), "{detail}");
    }
}
