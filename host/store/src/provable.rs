//! The provable log on disk: signed checkpoints in `<run>/checkpoints/`,
//! inclusion and consistency proofs over `controller-events.jsonl`, and
//! their verification against the log as it is now.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::chain::verify_chain;
use crate::checkpoint::{Checkpoint, SigningKey, VerifierKey};
use crate::merkle::{self, Hash};

pub const CHECKPOINT_DIR: &str = "checkpoints";
pub const EVENTS_FILE: &str = "controller-events.jsonl";

/// The leaf hashes of every complete line of the log, after verifying its
/// chain, and the run id the lines carry.
pub fn log_leaves(log: &Path) -> Result<(Vec<Hash>, String), String> {
    let bytes = std::fs::read(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let (head, _) = verify_chain(&bytes).map_err(|e| format!("{}: {e}", log.display()))?;
    let prefix = &bytes[..head.verified_len as usize];
    let leaves = prefix
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(merkle::leaf_hash)
        .collect();
    let run_id = head.identity.map(|i| i.run_id).unwrap_or_default();
    Ok((leaves, run_id))
}

fn checkpoint_path(run_dir: &Path, size: u64) -> PathBuf {
    run_dir
        .join(CHECKPOINT_DIR)
        .join(format!("{size:012}.checkpoint"))
}

/// Signs the tree head of the log as it is now and writes it to
/// `<run>/checkpoints/<size>.checkpoint` (atomically; an identical note
/// already there is fine, a different one is refused).
pub fn write_checkpoint(run_dir: &Path, key: &SigningKey) -> Result<(PathBuf, Checkpoint), String> {
    let (leaves, run_id) = log_leaves(&run_dir.join(EVENTS_FILE))?;
    if leaves.is_empty() {
        return Err("the log is empty: there is nothing to checkpoint".into());
    }
    let checkpoint = Checkpoint {
        origin: Checkpoint::origin_for(&run_id),
        size: leaves.len() as u64,
        root: merkle::root(&leaves),
    };
    let note = checkpoint.sign(key);
    let path = checkpoint_path(run_dir, checkpoint.size);
    let dir = path.parent().expect("under checkpoints/");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if let Ok(existing) = std::fs::read_to_string(&path) {
        // Ed25519 is deterministic: the same key over the same head gives the same note.
        return if existing == note {
            Ok((path, checkpoint))
        } else {
            Err(format!(
                "{} exists with another signature; it is never rewritten",
                path.display()
            ))
        };
    }
    let tmp = dir.join(format!(".{}.tmp.{}", checkpoint.size, std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    file.write_all(note.as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok((path, checkpoint))
}

/// The outcome of checking every checkpoint of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointReport {
    pub checked: usize,
    /// Whether signatures were checked (a verifier key was given).
    pub signatures_checked: bool,
}

/// Checks every checkpoint in `<run>/checkpoints/`: its signature (when a
/// key is given), its origin, and that its root is the Merkle root of the
/// first `size` events of the log now. Any checkpoint that does not hold is
/// an error naming the file. `Ok(None)` when there are no checkpoints.
pub fn verify_checkpoints(
    run_dir: &Path,
    key: Option<&VerifierKey>,
) -> Result<Option<CheckpointReport>, String> {
    let dir = run_dir.join(CHECKPOINT_DIR);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "checkpoint"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    if files.is_empty() {
        return Ok(None);
    }
    files.sort();
    let (leaves, run_id) = log_leaves(&run_dir.join(EVENTS_FILE))?;
    for file in &files {
        let note = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let checkpoint = match key {
            Some(key) => Checkpoint::verify(&note, key),
            None => Checkpoint::parse(&note).map(|(c, _)| c),
        }
        .map_err(|e| format!("{}: {e}", file.display()))?;
        if checkpoint.origin != Checkpoint::origin_for(&run_id) {
            return Err(format!(
                "{}: origin {} is not this run's ({})",
                file.display(),
                checkpoint.origin,
                Checkpoint::origin_for(&run_id)
            ));
        }
        let size = checkpoint.size as usize;
        if size > leaves.len() {
            return Err(format!(
                "{}: signs {size} events but the log has {}: events were removed",
                file.display(),
                leaves.len()
            ));
        }
        if merkle::root(&leaves[..size]) != checkpoint.root {
            return Err(format!(
                "{}: the first {size} events no longer hash to the signed root: the log was rewritten",
                file.display()
            ));
        }
    }
    Ok(Some(CheckpointReport {
        checked: files.len(),
        signatures_checked: key.is_some(),
    }))
}
