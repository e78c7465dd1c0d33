//! An evidence workspace's log (seed 004) read back through the decision
//! rules: every event must be one the evidence service could have
//! accepted, in that order. What it establishes, and what it cannot.

use std::path::Path;

use bl_core::evidence::{
    Decisions, EVIDENCE_PROJECT, LoggedEvent, SignedReview, Stage, review_signed_bytes,
};
use serde_json::Value;

use crate::graph_run::Finding;

/// `Ok(None)`: the log is not an evidence log.
pub(crate) fn verify_evidence(
    log: &Path,
    workspace_key: Option<&bl_store::VerifierKey>,
    trusted_reviewers: Option<&[bl_store::VerifierKey]>,
) -> Result<Option<String>, Finding> {
    let text = std::fs::read_to_string(log).map_err(|source| Finding::Unreadable {
        path: log.to_path_buf(),
        source,
    })?;
    let lines = text.lines().count();
    let rows = text.lines().map(serde_json::from_str::<Value>);
    let mut decisions = Decisions::default();
    // Every person's decision, in the log's order, with the key that signed.
    let mut reviewed: Vec<String> = Vec::new();
    for (i, row) in rows.enumerate() {
        let line = i + 1;
        let row = row.map_err(|e| Finding::Evidence(format!("line {line}: {e}")))?;
        if row["project_id"] != EVIDENCE_PROJECT {
            return match line {
                1 => Ok(None),
                _ => Err(Finding::Evidence(format!(
                    "line {line}: not of the evidence log"
                ))),
            };
        }
        let logged: LoggedEvent = serde_json::from_value(row["payload"].clone())
            .map_err(|e| Finding::Evidence(format!("line {line}: not an evidence event: {e}")))?;
        if row["event_type"] != logged.evidence.kind() {
            return Err(Finding::Evidence(format!(
                "line {line}: recorded as {}, but holds {}",
                row["event_type"],
                logged.evidence.kind()
            )));
        }
        if logged.needs_review() {
            let key = check_review(&logged, workspace_key, line)?;
            if let Some(trusted) = trusted_reviewers
                && !trusted.iter().any(|k| k.to_text() == key.to_text())
            {
                return Err(Finding::Evidence(format!(
                    "line {line}: {} was signed by {} (key {}), which is not one of the reviewer keys given (--reviewer)",
                    who_reviewed(&logged, &key),
                    key.name(),
                    key_id(&key)
                )));
            }
            reviewed.push(who_reviewed(&logged, &key));
        }
        decisions.replay(&logged).map_err(|refusal| {
            Finding::Evidence(format!(
                "line {line}: {} for operation {} breaks the rules: {refusal}",
                logged.evidence.kind(),
                logged.operation_id
            ))
        })?;
    }
    if decisions.is_empty() {
        return Ok(None);
    }
    let mut said = summary(&decisions, &reviewed, trusted_reviewers.map(<[_]>::len));
    // The service signs a checkpoint shortly after each answer: a tail
    // past the newest is not under any signature yet. Verified against the
    // workspace's key, every event must be (a log without checkpoints is
    // anyone's to write: its chain has no key).
    let signed = newest_checkpoint(log);
    if workspace_key.is_some() && signed < lines {
        return Err(Finding::Evidence(format!(
            "{} of the {lines} events are under no checkpoint signed by the key (the newest covers {signed}); a live service signs within 50 ms: verify again, or verify a bundle from `bl evidence export`",
            lines - signed
        )));
    }
    if signed < lines {
        said.push_str(&format!(
            "; the newest {} event(s) are under no signed checkpoint yet (the newest covers {signed})",
            lines - signed
        ));
    }
    Ok(Some(said))
}

/// The size of the newest checkpoint beside `log`, 0 if there is none.
fn newest_checkpoint(log: &Path) -> usize {
    let dir = log
        .parent()
        .unwrap_or(Path::new("."))
        .join(bl_store::provable::CHECKPOINT_DIR);
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()?
                .strip_suffix(".checkpoint")?
                .parse::<usize>()
                .ok()
        })
        .max()
        .unwrap_or(0)
}

/// Why a signed review's signature does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewSignatureError {
    #[error("names no valid reviewer key")]
    BadKey,
    #[error("its signature does not match the review and the key")]
    BadSignature,
    #[error("names {named} as its reviewer, but {signer} signed it")]
    NotTheSigner { named: String, signer: String },
}

/// The key that signed `signed`, when its signature holds over the review
/// and its workspace and the review names that key's owner. Whether the
/// key is trusted is the caller's to decide.
pub fn review_signer(signed: &SignedReview) -> Result<bl_store::VerifierKey, ReviewSignatureError> {
    let key = bl_store::VerifierKey::parse(signed.key.trim())
        .map_err(|_| ReviewSignatureError::BadKey)?;
    let signature: [u8; 64] = hex::decode(&signed.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(ReviewSignatureError::BadSignature)?;
    if !key.verify(
        &review_signed_bytes(&signed.workspace, &signed.review),
        &signature,
    ) {
        return Err(ReviewSignatureError::BadSignature);
    }
    if signed.review.reviewer() != key.name() {
        return Err(ReviewSignatureError::NotTheSigner {
            named: signed.review.reviewer().to_string(),
            signer: key.name().to_string(),
        });
    }
    Ok(key)
}

/// A person's decision must carry the review it came from, for this
/// workspace (when its key is known), signed by the key it names.
fn check_review(
    logged: &LoggedEvent,
    workspace_key: Option<&bl_store::VerifierKey>,
    line: usize,
) -> Result<bl_store::VerifierKey, Finding> {
    let fail =
        |why: String| Finding::Evidence(format!("line {line}: {} {why}", logged.evidence.kind()));
    let signed = match &logged.review {
        Some(signed) if logged.review_matches() => signed,
        Some(_) => return Err(fail("carries a review for another event".into())),
        None => return Err(fail("carries no signed review".into())),
    };
    if let Some(given) = workspace_key
        && given.to_text() != signed.workspace.trim()
    {
        // Either the review was made for another workspace or the key
        // given is not this workspace's: say which keys, not which is wrong.
        let named = bl_store::VerifierKey::parse(signed.workspace.trim())
            .map_or_else(|_| signed.workspace.trim().to_string(), |k| key_id(&k));
        return Err(fail(format!(
            "carries a review for the workspace key {named}, not the key given with --pubkey ({}); if that is not this workspace's key, give its own",
            key_id(given)
        )));
    }
    review_signer(signed).map_err(|e| fail(format!("carries a review that {e}")))
}

/// What a person decided, named with the id of the key that signed it:
/// a name alone is any key's to claim.
fn who_reviewed(logged: &LoggedEvent, key: &bl_store::VerifierKey) -> String {
    use bl_core::evidence::EvidenceEvent as E;
    let id = key_id(key);
    let op = &logged.operation_id;
    match &logged.evidence {
        E::HumanApproved(a) => format!(
            "{op} approved by {} (key {id}) for {}",
            a.reviewer, a.identity
        ),
        E::HumanRejected { reviewer, .. } => format!("{op} rejected by {reviewer} (key {id})"),
        E::Reconciled { reviewer, executed } => format!(
            "{op} reconciled by {reviewer} (key {id}): the tool {}",
            if *executed { "ran" } else { "did not run" }
        ),
        other => format!("{op} {} (key {id})", other.kind()),
    }
}

/// The id part of a key's text (`name+id+key`), as the reviews show it.
fn key_id(key: &bl_store::VerifierKey) -> String {
    key.to_text()
        .split('+')
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

/// What the replayed log establishes; `trusted`: how many reviewer keys
/// every review was checked against, if any were given.
fn summary(decisions: &Decisions, reviewed: &[String], trusted: Option<usize>) -> String {
    let count = |stage: Stage| decisions.iter().filter(|(_, d)| d.stage == stage).count();
    let outcomes: usize = decisions.iter().map(|(_, d)| d.outcomes).sum();
    let keys = match trusted {
        Some(n) => format!(
            "Every review is signed by one of the {n} reviewer key(s) given. Not established: that any action or outcome was right in the world outside"
        ),
        None => "Not established: that any action or outcome was right in the world outside, or that a reviewer's key belongs to the person it names (give --reviewer KEY to require the keys you trust)".to_string(),
    };
    format!(
        "{} decision(s), every event in an order the rules accept: {} executed, {} reserved and not yet executed, {} awaiting reconciliation, {} abandoned, {} rejected, {} blocked, {} not yet requested; {}; {outcomes} outcome(s) observed, as the app reported them. {keys}",
        decisions.len(),
        count(Stage::Executed),
        count(Stage::Reserved),
        count(Stage::ReconciliationRequired),
        count(Stage::Abandoned),
        count(Stage::Rejected),
        count(Stage::Blocked),
        count(Stage::Created) + count(Stage::AwaitingApproval) + count(Stage::Cleared),
        if reviewed.is_empty() {
            "no human decisions".to_string()
        } else {
            reviewed.join(", ")
        },
    )
}
