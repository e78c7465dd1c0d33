//! Checking a proof that `bl log prove` printed, without the log: the
//! proof's own arithmetic (RFC 9162), and that its root is one the checker
//! trusts: a root given by hand, or a checkpoint (signed, when a verifier
//! key is given) of the same tree size. An inclusion proof can also be
//! bound to the event's own bytes.

use base64::Engine as _;
use serde_json::Value;

use crate::checkpoint::{Checkpoint, NoteError, VerifierKey};
use crate::merkle::{self, Hash};

/// What the proof must be checked against.
#[derive(Default)]
pub struct Trust<'a> {
    /// A checkpoint note, and the key that must have signed it (when given).
    pub checkpoint: Option<(&'a str, Option<&'a VerifierKey>)>,
    /// A tree root known from elsewhere, in base64 (as `prove` prints it).
    pub root: Option<&'a str>,
    /// The event line the inclusion proof is for, as it is in the log
    /// (without its newline).
    pub event: Option<&'a [u8]>,
}

/// A proof that holds: what it showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProofReport {
    pub kind: &'static str,
    pub tree_size: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    #[error("not a proof from `bl log prove`: {0}")]
    Shape(String),
    /// Any list of hashes leads to some root: without a trusted one to end
    /// at, a proof shows nothing.
    #[error("no trusted root to end at: give a checkpoint (and the key that signed it) or a root")]
    Unanchored,
    #[error("the proof does not hold: its path does not lead to its root")]
    Broken,
    #[error("the event's bytes hash to another leaf than the proof's")]
    OtherEvent,
    #[error("the proof's root is not the trusted root {trusted}")]
    OtherRoot { trusted: String },
    #[error(
        "the checkpoint covers {checkpoint} events, the proof {proof}: prove against --size {checkpoint}"
    )]
    OtherSize { checkpoint: u64, proof: u64 },
    #[error("the checkpoint: {0}")]
    Checkpoint(#[from] NoteError),
}

/// A base64 sha256, as `prove` prints hashes; `what` names it in errors.
fn hash(value: &Value, what: &str) -> Result<Hash, ProofError> {
    value
        .as_str()
        .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
        .and_then(|bytes| Hash::try_from(bytes.as_slice()).ok())
        .ok_or_else(|| ProofError::Shape(format!("{what} is not a base64 sha256")))
}

fn decode(value: &Value, key: &str) -> Result<Hash, ProofError> {
    hash(&value[key], key)
}

fn number(value: &Value, key: &str) -> Result<u64, ProofError> {
    value[key]
        .as_u64()
        .ok_or_else(|| ProofError::Shape(format!("no {key}")))
}

/// Checks `proof` (the JSON `bl log prove` prints) against `trust`, which
/// must name a trusted root (a checkpoint, or a root).
pub fn check_proof(proof: &Value, trust: &Trust) -> Result<ProofReport, ProofError> {
    if trust.checkpoint.is_none() && trust.root.is_none() {
        return Err(ProofError::Unanchored);
    }
    let path: Vec<Hash> = proof["proof"]
        .as_array()
        .ok_or_else(|| ProofError::Shape("no proof".into()))?
        .iter()
        .enumerate()
        .map(|(i, item)| hash(item, &format!("proof/{i}")))
        .collect::<Result<_, _>>()?;
    let size = number(proof, "tree_size")?;
    let root = decode(proof, "root")?;
    let kind = match proof["kind"].as_str() {
        Some("inclusion") => {
            let line = number(proof, "line")?;
            let leaf = decode(proof, "leaf_hash")?;
            if let Some(event) = trust.event
                && merkle::leaf_hash(event) != leaf
            {
                return Err(ProofError::OtherEvent);
            }
            let index = line
                .checked_sub(1)
                .ok_or_else(|| ProofError::Shape("line 0".into()))?;
            if !merkle::verify_inclusion(&leaf, index as usize, size as usize, &path, &root) {
                return Err(ProofError::Broken);
            }
            "inclusion"
        }
        Some("consistency") => {
            let old_size = number(proof, "old_size")?;
            let old_root = decode(proof, "old_root")?;
            if !merkle::verify_consistency(
                old_size as usize,
                size as usize,
                &path,
                &old_root,
                &root,
            ) {
                return Err(ProofError::Broken);
            }
            "consistency"
        }
        _ => {
            return Err(ProofError::Shape(
                "kind is not inclusion or consistency".into(),
            ));
        }
    };
    let b64 = |h: &Hash| base64::engine::general_purpose::STANDARD.encode(h);
    if let Some(trusted) = trust.root
        && trusted.trim() != b64(&root)
    {
        return Err(ProofError::OtherRoot {
            trusted: trusted.trim().to_string(),
        });
    }
    if let Some((note, key)) = trust.checkpoint {
        let checkpoint = match key {
            Some(key) => Checkpoint::verify(note, key)?,
            None => Checkpoint::parse(note)?.0,
        };
        if checkpoint.size != size {
            return Err(ProofError::OtherSize {
                checkpoint: checkpoint.size,
                proof: size,
            });
        }
        if checkpoint.root != root {
            return Err(ProofError::OtherRoot {
                trusted: b64(&checkpoint.root),
            });
        }
    }
    Ok(ProofReport {
        kind,
        tree_size: size,
    })
}
