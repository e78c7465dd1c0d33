//! What a stop or a power loss can leave in a run directory, settled
//! before a run is continued. A run stages its log's lines beside the log
//! as it goes (a killed controller loses none of them) and moves them in at
//! every pause, before every publish and at the end, once the artifacts
//! they name are durable ([`bl_store::staged`]). Lines a stopped
//! controller staged join the log here, up to the first that names an
//! artifact that is not whole (a power loss: the kernel writes files back
//! in its own order); from it, they are kept whole beside the log, and
//! said so, and the attempts they ended are driven again, as after a kill.
//!
//! A log written before lines were staged can hold lines past its last
//! checkpoint whose artifacts never reached the disk: the first such line
//! starts what is set aside the same way. Lines a checkpoint seals are
//! never cut: an artifact they name that is missing is damage, and `bl
//! verify` says so.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bl_store::{ArtifactStore, RunDir};
use serde_json::Value;

use crate::error::AppError;

/// Settles the lines a stopped controller staged (in the log and in its
/// annex), then sets aside the lines from the first that names an artifact
/// the store does not hold whole, and the unnamed objects that do not
/// verify (written, never synced); each is said in a note.
pub fn set_aside(dir: &Path) -> Result<(), AppError> {
    let run = RunDir::new(dir);
    let store = ArtifactStore::new(run.artifacts(), u64::MAX);
    // A checkpoint that cannot be read is left for verify to report:
    // nothing recorded is cut when what was sealed is not known. Staged
    // lines are past every checkpoint.
    let seal = newest_seal(&run.checkpoints());
    let mut named = seal.as_ref().map(|s| s.1.clone()).unwrap_or_default();
    for log in [run.events(), run.annex()] {
        settle_staged(&log, &store, &mut named)?;
    }
    let Some((sealed, _)) = seal else {
        return Ok(());
    };
    for (log, sealed) in [(run.events(), sealed), (run.annex(), 0)] {
        let bytes = match std::fs::read(&log) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(AppError::Refused(format!("{}: {e}", log.display()))),
        };
        if let Some((offset, lost)) = first_line_without(&bytes, sealed, &store, &mut named) {
            let aside = bl_store::set_aside_from(&log, offset, "unsynced")
                .map_err(|e| AppError::Refused(e.to_string()))?;
            said_aside(&log, &lost, &aside);
        }
    }
    set_aside_unnamed_objects(&run.artifacts(), &store, &named)
}

/// Moves the lines a stopped controller staged beside `log` into it, up
/// to the first naming an artifact that is not whole, after making the
/// store durable; the rest are kept beside the log, and said so.
fn settle_staged(
    log: &Path,
    store: &ArtifactStore,
    named: &mut BTreeSet<String>,
) -> Result<(), AppError> {
    let mut lost = None;
    let settled = bl_store::staged::settle(log, "unsynced", |lines| {
        let keep = match first_line_without(lines, 0, store, named) {
            Some((offset, digest)) => {
                lost = Some(digest);
                offset as usize
            }
            None => lines.len(),
        };
        // What the kept lines name is durable before they are.
        store
            .sync_all()
            .map_err(|e| AppError::Refused(e.to_string()))?;
        Ok::<_, AppError>(keep)
    })?;
    let Some(aside) = settled.and_then(|s| s.set_aside) else {
        return Ok(());
    };
    match lost {
        Some(lost) => said_aside(log, &lost, &aside),
        None => crate::notes::note(format!(
            "note: the last line staged for {} was torn (as after a crash); it was kept aside in {}",
            log.display(),
            aside.display()
        )),
    }
    Ok(())
}

fn said_aside(log: &Path, lost: &str, aside: &Path) {
    crate::notes::note(format!(
        "note: a power loss kept lines of {} whose artifact {lost} did not reach the disk whole; they were set aside to {}, and what they recorded is done again",
        log.display(),
        aside.display()
    ));
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
    bytes: &[u8],
    sealed: usize,
    store: &ArtifactStore,
    named: &mut BTreeSet<String>,
) -> Option<(u64, String)> {
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
                return Some((start, digest));
            }
            named.insert(digest);
        }
    }
    None
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
            "note: the artifact {digest} did not reach the disk whole (as after a power loss), and no line kept in the log names it; it was set aside to {}",
            aside.display()
        ));
    }
    Ok(())
}
