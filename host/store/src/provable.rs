//! The provable log on disk: checkpoints in `<run>/checkpoints/` (signed
//! when the run has a key), inclusion and consistency proofs over
//! `controller-events.jsonl`, and their verification against the log and
//! the run directory as they are now.
//!
//! A checkpoint also seals the run directory: it lists the sha256 of every
//! file in it except the log itself (covered by the root), the checkpoints
//! and lock files. So after the checkpoint written at run end, no byte of
//! the run directory can change unnoticed.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::chain::{ChainError, verify_chain};
use crate::checkpoint::{Checkpoint, NoteError, SigningKey, VerifierKey};
use crate::merkle::{self, Hash};

pub const CHECKPOINT_DIR: &str = "checkpoints";
pub const EVENTS_FILE: &str = "controller-events.jsonl";

/// The leaf hashes of every complete line of the log, after verifying its
/// chain, and the run id the lines carry.
pub fn log_leaves(log: &Path) -> Result<(Vec<Hash>, String), SealError> {
    let bytes = crate::staged::read_log(log).map_err(SealError::io(log))?;
    let (head, _) = verify_chain(&bytes).map_err(|source| SealError::Chain {
        path: log.to_path_buf(),
        source,
    })?;
    let leaves = line_leaves(&bytes[..head.verified_len as usize]).collect();
    let run_id = head.identity.map(|i| i.run_id).unwrap_or_default();
    Ok((leaves, run_id))
}

/// The leaf hash of each line of `verified` (whole lines of a log).
pub(crate) fn line_leaves(verified: &[u8]) -> impl Iterator<Item = Hash> + '_ {
    verified
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(merkle::leaf_hash)
}

fn checkpoint_path(run_dir: &Path, size: u64) -> PathBuf {
    run_dir
        .join(CHECKPOINT_DIR)
        .join(format!("{size:012}.checkpoint"))
}

/// Files a checkpoint does not list: the log (its root covers it), the
/// checkpoints themselves, lock files (empty; only their locks matter),
/// and the MCP audit log, appended to by calls made after a checkpoint; it
/// is chained on its own, and each call's answer carries its proof.
/// The attempts' work directories in a graph run directory.
pub const WORK_DIR: &str = "work";

fn is_sealed(relative: &str) -> bool {
    // `work/` holds the attempts' scratch directories: what a worker left
    // there is not a record (and may hold anything, symlinks included).
    relative != EVENTS_FILE
        && relative != WORK_DIR
        && !relative.starts_with(&format!("{WORK_DIR}/"))
        && relative != CHECKPOINT_DIR
        && !relative.starts_with(&format!("{CHECKPOINT_DIR}/"))
        && !relative.ends_with(".lock")
        && relative != crate::RunDir::MCP_AUDIT
        // A log's staged lines: the log, not yet moved in.
        && !crate::staged::is_staged_name(relative)
}

/// Whether `relative` is where `bl log recover` set aside the log's torn
/// tail: `<events file>.torn-<byte offset>`.
fn is_set_aside_torn_tail(relative: &str) -> bool {
    relative
        .strip_prefix(EVENTS_FILE)
        .and_then(|rest| rest.strip_prefix(".torn-"))
        .is_some_and(|offset| !offset.is_empty() && offset.bytes().all(|b| b.is_ascii_digit()))
}

/// Every sealed file of the run directory with its `sha256:` digest,
/// sorted by path. A symlink, or a path that cannot be one line of a note,
/// is an error: a run directory holds neither.
pub fn seal_files(run_dir: &Path) -> Result<Vec<(String, String)>, SealError> {
    seal_files_knowing(run_dir, &Written::new())
}

/// Files the sealing process wrote itself, by path (under the run
/// directory as the seal is given it), with the digest of what it wrote.
pub type Written = std::collections::HashMap<PathBuf, String>;

/// As [`seal_files`], but a file in `written` is sealed with the digest of
/// what its writer wrote, not read back: a run's artifacts, which its
/// controller hashed as it wrote them. A change to one since, by anyone,
/// is then a file that does not match its seal, as after the checkpoint.
pub fn seal_files_knowing(
    run_dir: &Path,
    written: &Written,
) -> Result<Vec<(String, String)>, SealError> {
    fn walk(
        dir: &Path,
        prefix: &str,
        written: &Written,
        out: &mut Vec<(String, String)>,
    ) -> Result<(), SealError> {
        let entries = std::fs::read_dir(dir).map_err(SealError::io(dir))?;
        for entry in entries {
            let entry = entry.map_err(SealError::io(dir))?;
            let name = entry.file_name();
            let name = name
                .to_str()
                .filter(|n| !n.contains('\n'))
                .ok_or_else(|| SealError::UnsealableName { path: entry.path() })?;
            let relative = if prefix.is_empty() {
                name.to_string()
            } else {
                format!("{prefix}/{name}")
            };
            if !is_sealed(&relative) {
                continue;
            }
            let kind = entry
                .file_type()
                .map_err(SealError::io(Path::new(&relative)))?;
            if kind.is_dir() {
                walk(&entry.path(), &relative, written, out)?;
            } else if kind.is_file() {
                let path = entry.path();
                let digest = match written.get(&path) {
                    Some(digest) => digest.clone(),
                    None => {
                        let bytes =
                            std::fs::read(&path).map_err(SealError::io(Path::new(&relative)))?;
                        bl_core::Sha256Digest::of(&bytes).to_string()
                    }
                };
                out.push((relative, digest));
            } else {
                return Err(SealError::NotAFile { relative });
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(run_dir, "", written, &mut files)?;
    files.sort();
    Ok(files)
}

/// Writes the tree head of the log as it is now, with the seal of the run
/// directory, to `<run>/checkpoints/<size>.checkpoint`, signed by `key` if
/// there is one (atomically; an identical note already there is fine, a
/// different one is refused: append an event first).
pub fn write_checkpoint(
    run_dir: &Path,
    key: Option<&SigningKey>,
) -> Result<(PathBuf, Checkpoint), SealError> {
    let (leaves, run_id) = log_leaves(&run_dir.join(EVENTS_FILE))?;
    if leaves.is_empty() {
        return Err(SealError::EmptyLog);
    }
    let head = TreeHead {
        run_id: &run_id,
        size: leaves.len() as u64,
        root: merkle::root(&leaves),
    };
    write_checkpoint_at(run_dir, &head, key, Durability::Synced)
}

/// The head of a log's tree, as its writer knows it without reading the
/// log back.
pub struct TreeHead<'a> {
    pub run_id: &'a str,
    pub size: u64,
    pub root: Hash,
}

/// Writes (and signs, with `key`) the checkpoint of `head`, a head the
/// caller computed over the log it writes: the same as `write_checkpoint`
/// without reading the log back.
/// Whether a checkpoint waits for the disk before it is reported written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The file and its directory are synced.
    Synced,
    /// Written, not synced: for a writer whose log is durable, which signs
    /// the log again when it opens it and sets aside a checkpoint a lost
    /// machine left damaged.
    Written,
}

pub fn write_checkpoint_at(
    run_dir: &Path,
    head: &TreeHead<'_>,
    key: Option<&SigningKey>,
    durability: Durability,
) -> Result<(PathBuf, Checkpoint), SealError> {
    write_checkpoint_knowing(run_dir, head, key, durability, &Written::new())
}

/// As [`write_checkpoint_at`], sealing the files in `written` with the
/// digests their writer gave them (see [`seal_files_knowing`]).
pub fn write_checkpoint_knowing(
    run_dir: &Path,
    head: &TreeHead<'_>,
    key: Option<&SigningKey>,
    durability: Durability,
    written: &Written,
) -> Result<(PathBuf, Checkpoint), SealError> {
    if head.size == 0 {
        return Err(SealError::EmptyLog);
    }
    let checkpoint = Checkpoint {
        origin: Checkpoint::origin_for(head.run_id),
        size: head.size,
        root: head.root,
        files: seal_files_knowing(run_dir, written)?,
    };
    let note = match key {
        Some(key) => checkpoint.sign(key),
        None => checkpoint.unsigned(),
    };
    let path = checkpoint_path(run_dir, checkpoint.size);
    let dir = path.parent().expect("under checkpoints/");
    std::fs::create_dir_all(dir).map_err(SealError::io(dir))?;
    if let Ok(existing) = std::fs::read_to_string(&path) {
        // Ed25519 is deterministic: the same key over the same head and
        // files gives the same note.
        return if existing == note {
            Ok((path, checkpoint))
        } else {
            Err(SealError::CheckpointDiffers { path })
        };
    }
    let tmp = dir.join(format!(".{}.tmp.{}", checkpoint.size, std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(SealError::io(&tmp))?;
    file.write_all(note.as_bytes())
        .and_then(|_| match durability {
            Durability::Synced => file.sync_all(),
            Durability::Written => Ok(()),
        })
        .map_err(SealError::io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(SealError::io(&path))?;
    if durability == Durability::Synced {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(SealError::io(dir))?;
    }
    Ok((path, checkpoint))
}

/// Why the log's leaves, the run directory's seal or a checkpoint could not
/// be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Chain { path: PathBuf, source: ChainError },
    #[error("{}: not a sealable file name", path.display())]
    UnsealableName { path: PathBuf },
    #[error("{relative} is not a regular file or directory; a run directory holds no symlinks")]
    NotAFile { relative: String },
    #[error("the log is empty: there is nothing to checkpoint")]
    EmptyLog,
    #[error(
        "{} exists and differs (other files or another key); it is never rewritten: append an event, then checkpoint",
        path.display()
    )]
    CheckpointDiffers { path: PathBuf },
}

impl SealError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SealError + '_ {
        move |source| SealError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// How the run directory differs from the latest checkpoint's seal: the
/// first difference, naming the file and the checkpoint.
#[derive(Debug, thiserror::Error)]
enum SealMismatch {
    #[error(transparent)]
    Unreadable(#[from] SealError),
    #[error("{path} is missing; {} seals it", checkpoint.display())]
    Missing { path: String, checkpoint: PathBuf },
    #[error("{path} changed: it hashes to {found}, {} seals {sealed}", checkpoint.display())]
    Changed {
        path: String,
        found: String,
        sealed: String,
        checkpoint: PathBuf,
    },
    #[error("{path} was added after the run's last checkpoint ({})", checkpoint.display())]
    Added { path: String, checkpoint: PathBuf },
}

/// Which check a checkpoint failed, and how (naming the file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// A checkpoint is unreadable, malformed, for another run, or its root
    /// does not match the log.
    #[error("{0}")]
    Merkle(String),
    /// A checkpoint is not signed by the given key, or the signature fails.
    #[error("{0}")]
    Signature(String),
    /// The run directory's files differ from the latest checkpoint's seal.
    #[error("{0}")]
    Files(String),
}

/// The outcome of checking every checkpoint of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointReport {
    pub checked: usize,
    /// Whether signatures were checked (a verifier key was given).
    pub signatures_checked: bool,
    /// How the run directory compares with the latest checkpoint's seal.
    pub files: FilesSeal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilesSeal {
    /// The latest checkpoint covers the whole log, and every sealed file is
    /// exactly as it lists (this many files).
    Intact(usize),
    /// Events were appended after the latest checkpoint, so files may have
    /// changed legitimately since; they are sealed again at the next one.
    Open { events_after: usize },
}

/// Checks every checkpoint in `<run>/checkpoints/`: its signature (when a
/// key is given), its origin, and that its root is the Merkle root of the
/// first `size` events of the log now. Any checkpoint that does not hold is
/// an error naming the file. `Ok(None)` when there are no checkpoints.
pub fn verify_checkpoints(
    run_dir: &Path,
    key: Option<&VerifierKey>,
) -> Result<Option<CheckpointReport>, CheckpointError> {
    use CheckpointError::{Files, Merkle, Signature};
    let dir = run_dir.join(CHECKPOINT_DIR);
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "checkpoint"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Merkle(format!("{}: {e}", dir.display()))),
    };
    if files.is_empty() {
        return Ok(None);
    }
    files.sort();
    let (leaves, run_id) =
        log_leaves(&run_dir.join(EVENTS_FILE)).map_err(|e| Merkle(e.to_string()))?;
    let mut latest: Option<Checkpoint> = None;
    for file in &files {
        let note = std::fs::read_to_string(file)
            .map_err(|e| Merkle(format!("{}: {e}", file.display())))?;
        let checkpoint = match key {
            Some(key) => Checkpoint::verify(&note, key),
            None => Checkpoint::parse(&note).map(|(c, _)| c),
        }
        .map_err(|e| {
            let message = format!("{}: {e}", file.display());
            match e {
                NoteError::Unsigned { .. } | NoteError::BadSignature(_) => Signature(message),
                _ => Merkle(message),
            }
        })?;
        if checkpoint.origin != Checkpoint::origin_for(&run_id) {
            return Err(Merkle(format!(
                "{}: origin {} is not this run's ({})",
                file.display(),
                checkpoint.origin,
                Checkpoint::origin_for(&run_id)
            )));
        }
        // The name says which head it is: one renamed to claim a later
        // head would let events after its own pass as signed.
        if file.file_name() != checkpoint_path(run_dir, checkpoint.size).file_name() {
            return Err(Merkle(format!(
                "{}: holds the checkpoint of {} events, not the one its name says",
                file.display(),
                checkpoint.size
            )));
        }
        let size = checkpoint.size as usize;
        if size > leaves.len() {
            return Err(Merkle(format!(
                "{}: covers {size} events but the log has {}: events were removed",
                file.display(),
                leaves.len()
            )));
        }
        if merkle::root(&leaves[..size]) != checkpoint.root {
            return Err(Merkle(format!(
                "{}: the first {size} events no longer hash to its root: the log was rewritten",
                file.display()
            )));
        }
        if latest.as_ref().is_none_or(|l| l.size <= checkpoint.size) {
            latest = Some(checkpoint);
        }
    }
    let latest = latest.expect("at least one checkpoint was read");
    let files_seal = if (latest.size as usize) < leaves.len() {
        FilesSeal::Open {
            events_after: leaves.len() - latest.size as usize,
        }
    } else {
        compare_seal(run_dir, &latest.files, files.last().expect("one file"))
            .map_err(|e| Files(e.to_string()))?;
        FilesSeal::Intact(latest.files.len())
    };
    Ok(Some(CheckpointReport {
        checked: files.len(),
        signatures_checked: key.is_some(),
        files: files_seal,
    }))
}

/// The run directory's files against a checkpoint's list: same paths, same
/// bytes. The first difference is the error, naming the file.
fn compare_seal(
    run_dir: &Path,
    sealed: &[(String, String)],
    checkpoint_file: &Path,
) -> Result<(), SealMismatch> {
    let now = seal_files(run_dir)?;
    let sealed_map: std::collections::BTreeMap<_, _> = sealed.iter().cloned().collect();
    let now_map: std::collections::BTreeMap<_, _> = now.iter().cloned().collect();
    for (path, digest) in &sealed_map {
        match now_map.get(path) {
            None => {
                return Err(SealMismatch::Missing {
                    path: path.clone(),
                    checkpoint: checkpoint_file.to_path_buf(),
                });
            }
            Some(found) if found != digest => {
                return Err(SealMismatch::Changed {
                    path: path.clone(),
                    found: found.clone(),
                    sealed: digest.clone(),
                    checkpoint: checkpoint_file.to_path_buf(),
                });
            }
            Some(_) => {}
        }
    }
    // A torn tail `bl log recover` set aside after the last checkpoint is
    // no event and no record (the log verifies without it); the next
    // checkpoint seals it with the rest.
    if let Some(extra) = now_map
        .keys()
        .find(|p| !sealed_map.contains_key(*p) && !is_set_aside_torn_tail(p))
    {
        return Err(SealMismatch::Added {
            path: extra.clone(),
            checkpoint: checkpoint_file.to_path_buf(),
        });
    }
    Ok(())
}
