//! What a power loss between two syncs can leave in a run directory. A run
//! writes its log's lines as it goes (a killed controller loses none of
//! them) and makes its artifacts, then its log, durable together at every
//! pause, before every publish and at the end. Between two of those the
//! kernel writes files back in its own order, so a power loss can keep log
//! lines whose artifacts never reached the disk (or came back empty).
//! Before a run is continued, the first line after the last checkpoint
//! (of the log or its annex) that names such an artifact starts what is
//! set aside, kept whole beside the log, and said so; the attempts those
//! lines ended are driven again, as after a kill. Lines a checkpoint seals
//! are never cut: an artifact they name that is missing is damage, and
//! `bl verify` says so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bl_store::{ArtifactStore, RunDir};
use serde_json::Value;

use crate::error::AppError;

/// Sets aside, in the log and in its annex, the lines from the first that
/// names an artifact the store does not hold whole, and the unnamed
/// objects that do not verify (written, never synced); each is said in a
/// note.
pub fn set_aside(dir: &Path) -> Result<(), AppError> {
    let run = RunDir::new(dir);
    let store = ArtifactStore::new(run.artifacts(), u64::MAX);
    // A checkpoint that cannot be read is left for verify to report:
    // nothing is cut when what was sealed is not known.
    let Some((sealed, mut named)) = newest_seal(&run.checkpoints()) else {
        return Ok(());
    };
    for (log, sealed) in [(run.events(), sealed), (run.annex(), 0)] {
        if let Some((offset, lost)) = first_line_without(&log, sealed, &store, &mut named)? {
            let aside = bl_store::set_aside_from(&log, offset, "unsynced")
                .map_err(|e| AppError::Refused(e.to_string()))?;
            crate::notes::note(format!(
                "note: a power loss kept lines of {} whose artifact {lost} did not reach the disk whole; they were set aside to {}, and what they recorded is done again",
                log.display(),
                aside.display()
            ));
        }
    }
    set_aside_unnamed_objects(&run.artifacts(), &store, &named)
}

/// How many events of the log the newest checkpoint seals, and the
/// artifacts it seals (`sha256:<hex>`); none sealed with no checkpoint,
/// `None` when the newest cannot be read.
fn newest_seal(checkpoints: &Path) -> Option<(usize, BTreeSet<String>)> {
    let newest = std::fs::read_dir(checkpoints)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "checkpoint"))
        .max();
    let Some(newest) = newest else {
        return Some((0, BTreeSet::new()));
    };
    let note = std::fs::read_to_string(newest).ok()?;
    let (checkpoint, _) = bl_store::Checkpoint::parse(&note).ok()?;
    let objects = format!("{}/{}/", RunDir::ARTIFACTS, bl_store::artifacts::OBJECTS);
    let sealed = checkpoint
        .files
        .iter()
        .filter_map(|(path, _)| path.strip_prefix(&objects))
        .map(|hex| format!("sha256:{hex}"))
        .collect();
    Some((usize::try_from(checkpoint.size).ok()?, sealed))
}

/// The byte offset of the first line past the `sealed` first ones that
/// names an artifact that does not verify in `store`, with that artifact;
/// every artifact the lines past `sealed` name before it goes into `named`
/// (one already there, sealed or seen, is not read again).
fn first_line_without(
    log: &Path,
    sealed: usize,
    store: &ArtifactStore,
    named: &mut BTreeSet<String>,
) -> Result<Option<(u64, String)>, AppError> {
    let bytes = match std::fs::read(log) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(AppError::Refused(format!("{}: {e}", log.display()))),
    };
    let mut offset = 0u64;
    for (index, line) in bytes.split_inclusive(|b| *b == b'\n').enumerate() {
        let start = offset;
        offset += line.len() as u64;
        // What a sealed line names, the checkpoint seals too.
        if index < sealed {
            continue;
        }
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        for digest in artifacts_named(&event) {
            if named.contains(&digest) {
                continue;
            }
            if store.verify(&digest).is_err() {
                return Ok(Some((start, digest)));
            }
            named.insert(digest);
        }
    }
    Ok(None)
}

/// The artifacts an event names: the outputs a node ended with, and the
/// reply a turn was marked with.
fn artifacts_named(event: &Value) -> Vec<String> {
    let payload = &event["payload"];
    payload["artifact_digests"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(std::iter::once(&payload["reply_digest"]))
        .filter_map(Value::as_str)
        .filter(|d| d.starts_with("sha256:"))
        .map(str::to_string)
        .collect()
}

/// Objects that do not verify, that no kept line names and no checkpoint
/// seals, go to `artifacts/unsynced/`, with their metadata: bytes written
/// and never synced, not a record.
fn set_aside_unnamed_objects(
    artifacts: &Path,
    store: &ArtifactStore,
    named: &BTreeSet<String>,
) -> Result<(), AppError> {
    let objects = artifacts.join(bl_store::artifacts::OBJECTS);
    let Ok(entries) = std::fs::read_dir(&objects) else {
        return Ok(());
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let digest = format!("sha256:{name}");
        if name.starts_with('.') || named.contains(&digest) || store.verify(&digest).is_ok() {
            continue;
        }
        let aside = artifacts.join("unsynced");
        let metadata = bl_store::artifacts::metadata_path(artifacts, &digest);
        let moved: Vec<(PathBuf, PathBuf)> = [entry.path(), metadata]
            .into_iter()
            .filter(|p| p.exists())
            .map(|p| {
                let to = aside.join(p.file_name().unwrap_or_default());
                (p, to)
            })
            .collect();
        std::fs::create_dir_all(&aside)
            .and_then(|()| {
                moved
                    .iter()
                    .try_for_each(|(from, to)| std::fs::rename(from, to))
            })
            .map_err(|e| AppError::Refused(format!("{}: {e}", aside.display())))?;
        crate::notes::note(format!(
            "note: the artifact {digest} no kept line names did not reach the disk whole (as after a power loss); it was set aside to {}",
            aside.display()
        ));
    }
    Ok(())
}
