//! `controller-events.jsonl` on disk: one writer per run directory, the log
//! verified once on open, appends in O(1), and fsync before an append is
//! reported durable. A staged writer keeps its lines beside the log until
//! a group sync moves them in ([`crate::staged`]).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde_json::Value;

use crate::chain::{self, ChainError, ChainHead, RunIdentity, TornTail};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: another process{} writes this event log; a log has one writer, so this one is refused: wait for that one to end, or stop it, then try again",
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    Locked { path: PathBuf, holder: Option<u32> },
    #[error("{path}: {error}")]
    Chain { path: PathBuf, error: ChainError },
    #[error(
        "{path}: line {} is torn ({} bytes after byte {} have no newline, as after a crash). Nothing was changed; run `bl log recover {}` to move the torn bytes aside",
        tail.line, tail.len, tail.offset, path.display()
    )]
    TornTail { path: PathBuf, tail: TornTail },
    #[error(
        "{path}: idempotency key {key} is already recorded with other content; the log is never rewritten"
    )]
    Conflict { path: PathBuf, key: String },
    #[error(
        "{path}: a writer that stopped left lines it had not made durable in {}; `bl graph resume` settles them into the log first",
        staged.display()
    )]
    Unsettled { path: PathBuf, staged: PathBuf },
    #[error("{path}: the log belongs to run {found}, not {expected}")]
    WrongRun {
        path: PathBuf,
        found: String,
        expected: String,
    },
}

/// The result of an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// A new line, with its sequence, its hash in the chain and its leaf
    /// in the Merkle tree.
    Written {
        sequence: u64,
        hash: String,
        leaf: crate::merkle::Hash,
    },
    /// The same key with the same content was already there: a no-op.
    AlreadyRecorded,
}

/// The writer of one run's event log.
pub struct EventLog {
    path: PathBuf,
    file: File,
    _lock: Flock<File>,
    head: ChainHead,
    identity: RunIdentity,
    /// Lines written since the last fsync.
    unsynced: usize,
    /// Whole lines appended but not yet written, in buffered mode.
    pending: Vec<u8>,
    buffered: bool,
    /// The Merkle tree over every line, grown as lines are appended: a
    /// checkpoint's head without reading the log back.
    tree: crate::merkle::Frontier,
    /// A write failed, perhaps part way through a line: nothing more is
    /// written, so the file ends in a torn tail `bl log recover` sets
    /// aside, never in a line written twice (a retry of the same bytes).
    write_failed: bool,
    /// This writer made the file: its name in the directory is made
    /// durable with the first sync.
    name_unsynced: bool,
    /// Lines flushed beside the log, not yet in it ([`EventLog::staged`]).
    staged: Option<Staging>,
}

/// A staged writer's lines since its last sync, in `<log>.staged-<from>`.
struct Staging {
    /// The log's length: where the staged lines go at the next sync.
    from: u64,
    /// Opened at the first flush after a sync.
    file: Option<File>,
    bytes: Vec<u8>,
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How long a writer waits for the lock before it is refused: a killed
/// writer's child can hold the lock for a moment, between its fork and its
/// exec; a live writer holds it for the whole run.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes the run's exclusive writer lock: a log has one writer.
pub(crate) fn take_writer_lock(path: &Path) -> Result<Flock<File>, StoreError> {
    let since = std::time::Instant::now();
    let mut lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path(path))
        .map_err(io(path))?;
    loop {
        match Flock::lock(lock_file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((file, _)) if since.elapsed() < LOCK_PATIENCE => {
                lock_file = file;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err((file, _)) => {
                return Err(StoreError::Locked {
                    path: path.to_path_buf(),
                    holder: lock_holder(&file),
                });
            }
        }
    }
}

/// The process holding the flock on `file`, as the kernel lists it in
/// /proc/locks (`1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<inode> 0 EOF`),
/// matched by inode; None where that cannot be read.
fn lock_holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = file.metadata().ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, device) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let held_inode = device.rsplit(':').next()?.parse::<u64>().ok()?;
        (*kind == "FLOCK" && held_inode == inode)
            .then(|| pid.parse().ok())
            .flatten()
    })
}

/// Whether a live process writes the log at `path` now: a writer holds the
/// lock for its whole run, so a lock that cannot be had means one is there.
/// (Taking it to find out lasts a moment; a writer starting then waits.)
pub fn has_live_writer(path: &Path) -> bool {
    let Ok(file) = File::open(lock_path(path)) else {
        return false;
    };
    Flock::lock(file, FlockArg::LockSharedNonblock).is_err()
}

/// The lock file beside the log; bounded-loops uses the same name.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

impl EventLog {
    /// Opens (creating) the log for `identity`, taking the exclusive writer
    /// lock without waiting, and verifies what is already recorded.
    pub fn open(path: &Path, identity: RunIdentity) -> Result<Self, StoreError> {
        let lock = take_writer_lock(path)?;
        let name_unsynced = !path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)
            .map_err(io(path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io(path))?;
        let (head, torn) = chain::verify_chain(&bytes).map_err(|error| StoreError::Chain {
            path: path.to_path_buf(),
            error,
        })?;
        if let Some(tail) = torn {
            return Err(StoreError::TornTail {
                path: path.to_path_buf(),
                tail,
            });
        }
        if let Some(found) = &head.identity
            && found != &identity
        {
            return Err(StoreError::WrongRun {
                path: path.to_path_buf(),
                found: found.run_id.clone(),
                expected: identity.run_id.clone(),
            });
        }
        if let Some(staged) = crate::staged::continuation(path, &bytes).map_err(io(path))? {
            return Err(StoreError::Unsettled {
                path: path.to_path_buf(),
                staged: crate::staged::path_for(path, staged.from),
            });
        }
        file.seek(SeekFrom::End(0)).map_err(io(path))?;
        let mut tree = crate::merkle::Frontier::default();
        for leaf in crate::provable::line_leaves(&bytes[..head.verified_len as usize]) {
            tree.push(leaf);
        }
        Ok(EventLog {
            path: path.to_path_buf(),
            file,
            _lock: lock,
            head,
            identity,
            unsynced: 0,
            pending: Vec::new(),
            buffered: false,
            tree,
            write_failed: false,
            name_unsynced,
            staged: None,
        })
    }

    /// The same log, with appends kept in memory until [`Self::flush`] or
    /// [`Self::sync`] writes them in one system call. Only whole lines are
    /// ever written, in order; a writer that dies loses the unflushed tail,
    /// exactly as if it had died before appending it. Flush before acting
    /// on what was appended.
    pub fn buffered(mut self) -> Self {
        self.buffered = true;
        self
    }

    /// The same log, buffered, with flushed lines staged beside it and
    /// moved in by [`Self::sync`]: called once the artifacts they name are
    /// durable, it keeps the write-ahead order with one fsync for the
    /// group. A killed writer's staged lines are settled by
    /// [`crate::staged::settle`] before the log is opened again.
    pub fn staged(mut self) -> Self {
        self.staged = Some(Staging {
            from: self.head.verified_len,
            file: None,
            bytes: Vec::new(),
        });
        self.buffered()
    }

    /// Writes the buffered lines (no fsync): to the log, or staged beside it.
    pub fn flush(&mut self) -> Result<(), StoreError> {
        if !self.pending.is_empty() {
            // Taken to write it, and given back empty: after a failed
            // write no line is written again, so none is kept.
            let mut pending = std::mem::take(&mut self.pending);
            let written = match self.staged.is_some() {
                true => self.stage(&pending),
                false => self.write(&pending),
            };
            pending.clear();
            self.pending = pending;
            written?;
        }
        Ok(())
    }

    /// Writes `bytes` at the end of the file, unless a write failed before.
    fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.refuse_after_a_failed_write()?;
        self.file.write_all(bytes).map_err(|e| {
            self.write_failed = true;
            io(&self.path)(e)
        })
    }

    fn refuse_after_a_failed_write(&self) -> Result<(), StoreError> {
        match self.write_failed {
            true => Err(io(&self.path)(std::io::Error::other(
                "an earlier write to it failed and may have left part of a line, so nothing more is written; once this writer is gone, `bl log recover` sets a torn tail aside",
            ))),
            false => Ok(()),
        }
    }

    /// Writes `bytes` at the end of the staged file (made at the first
    /// flush after a sync), unless a write failed before.
    fn stage(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.refuse_after_a_failed_write()?;
        let staging = self.staged.as_mut().expect("a staged writer");
        let path = crate::staged::path_for(&self.path, staging.from);
        let written = match &mut staging.file {
            Some(file) => file.write_all(bytes),
            None => OpenOptions::new()
                .create_new(true)
                .append(true)
                .open(&path)
                .and_then(|mut file| {
                    file.write_all(bytes)?;
                    staging.file = Some(file);
                    Ok(())
                }),
        };
        if let Err(e) = written {
            self.write_failed = true;
            return Err(io(&path)(e));
        }
        staging.bytes.extend_from_slice(bytes);
        Ok(())
    }

    /// Moves the staged lines into the log (the caller made what they
    /// name durable), makes them durable, and removes their staged file.
    fn move_staged_in(&mut self) -> Result<(), StoreError> {
        let Some(staging) = self.staged.as_mut() else {
            return Ok(());
        };
        if staging.bytes.is_empty() {
            return Ok(());
        }
        let bytes = std::mem::take(&mut staging.bytes);
        let from = staging.from;
        self.write(&bytes)?;
        self.file.sync_data().map_err(io(&self.path))?;
        let staged = crate::staged::path_for(&self.path, from);
        std::fs::remove_file(&staged).map_err(io(&staged))?;
        let staging = self.staged.as_mut().expect("a staged writer");
        staging.from = from + bytes.len() as u64;
        staging.file = None;
        // Kept for the next group: its allocation, not its lines.
        staging.bytes = bytes;
        staging.bytes.clear();
        self.unsynced = 0;
        Ok(())
    }

    pub fn head(&self) -> &ChainHead {
        &self.head
    }

    /// The head of the log's Merkle tree, as `provable::log_leaves` would
    /// find it over every line appended, buffered ones too: sync before a
    /// checkpoint is written over it.
    pub fn tree_head(&self) -> crate::provable::TreeHead<'_> {
        crate::provable::TreeHead {
            run_id: &self.identity.run_id,
            size: self.tree.size(),
            root: self.tree.root(),
        }
    }

    /// Appends one event without waiting for the disk; call [`Self::sync`]
    /// (or use [`Self::append_durable`]) before acting on it. A key already
    /// recorded with the same content is a no-op; with other content, an error.
    pub fn append(
        &mut self,
        key: &str,
        event_type: &str,
        payload: &Value,
        timestamp: &str,
    ) -> Result<Appended, StoreError> {
        let id = format!("{}:{key}", self.identity.run_id);
        if let Some(&offset) = self.head.keys.get(&id) {
            self.flush()?;
            let (recorded_type, recorded_payload) = self.recorded_content(offset)?;
            if recorded_type == event_type && recorded_payload == bl_core::canonical_json(payload) {
                return Ok(Appended::AlreadyRecorded);
            }
            return Err(StoreError::Conflict {
                path: self.path.clone(),
                key: id,
            });
        }
        let (line, hash) = chain::build_line(
            &self.head,
            &self.identity,
            key,
            event_type,
            payload,
            timestamp,
        );
        let leaf = crate::merkle::leaf_hash(line.as_bytes());
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        let written = bytes.len() as u64;
        if self.buffered {
            self.pending.extend_from_slice(&bytes);
        } else {
            self.write(&bytes)?;
        }
        self.head.sequence += 1;
        self.head.hash = hash.clone();
        self.head
            .identity
            .get_or_insert_with(|| self.identity.clone());
        self.head.keys.insert(id, self.head.verified_len);
        self.head.verified_len += written;
        self.tree.push(leaf);
        self.unsynced += 1;
        Ok(Appended::Written {
            sequence: self.head.sequence,
            hash,
            leaf,
        })
    }

    /// The event type and canonical payload of the line recorded at `offset`
    /// (read back from the file, or the staged lines: the head keeps
    /// offsets, not contents).
    fn recorded_content(&self, offset: u64) -> Result<(String, String), StoreError> {
        let mut line = Vec::new();
        if let Some(staging) = self.staged.as_ref().filter(|s| offset >= s.from) {
            let rest = &staging.bytes[(offset - staging.from) as usize..];
            line.extend_from_slice(rest.split(|b| *b == b'\n').next().unwrap_or_default());
            return parse_recorded(&self.path, &line);
        }
        let mut chunk = [0u8; 4096];
        loop {
            let read = self
                .file
                .read_at(&mut chunk, offset + line.len() as u64)
                .map_err(io(&self.path))?;
            match chunk[..read].iter().position(|b| *b == b'\n') {
                Some(end) => {
                    line.extend_from_slice(&chunk[..end]);
                    break;
                }
                None if read == 0 => break,
                None => line.extend_from_slice(&chunk[..read]),
            }
        }
        parse_recorded(&self.path, &line)
    }

    /// Makes every append so far durable (one fsync for the whole group);
    /// a staged writer's lines move into the log first.
    pub fn sync(&mut self) -> Result<(), StoreError> {
        self.flush()?;
        self.move_staged_in()?;
        if self.unsynced > 0 {
            self.file.sync_data().map_err(io(&self.path))?;
            self.unsynced = 0;
        }
        if self.name_unsynced {
            crate::durable::sync_name_of(&self.path).map_err(io(&self.path))?;
            self.name_unsynced = false;
        }
        Ok(())
    }

    /// Appends and waits for the disk: what must precede an effect.
    pub fn append_durable(
        &mut self,
        key: &str,
        event_type: &str,
        payload: &Value,
        timestamp: &str,
    ) -> Result<Appended, StoreError> {
        let appended = self.append(key, event_type, payload, timestamp)?;
        self.sync()?;
        Ok(appended)
    }
}

/// The event type and canonical payload of one recorded line.
fn parse_recorded(path: &Path, line: &[u8]) -> Result<(String, String), StoreError> {
    let event: Value = serde_json::from_slice(line).map_err(|e| StoreError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
    })?;
    Ok((
        event["event_type"].as_str().unwrap_or_default().to_string(),
        bl_core::canonical_json(&event["payload"]),
    ))
}

impl Drop for EventLog {
    fn drop(&mut self) {
        // A staged writer's lines stay staged: only its owner knows whether
        // what they name is durable. The next writer settles them.
        let _ = match self.staged.is_some() {
            true => self.flush(),
            false => self.sync(),
        };
    }
}

/// Moves a torn tail (bytes after the last newline) aside into
/// `<log>.torn-<offset>`, leaving the verified lines untouched: the log's
/// own, or else one its writer staged beside it. Returns the tail that was
/// moved, or `None` when the log was whole. Takes the writer lock, so it
/// never races a live writer.
pub fn recover_torn_tail(path: &Path) -> Result<Option<TornTail>, StoreError> {
    let _lock = take_writer_lock(path)?;
    let bytes = std::fs::read(path).map_err(io(path))?;
    let (_, torn) = chain::verify_chain(&bytes).map_err(|error| StoreError::Chain {
        path: path.to_path_buf(),
        error,
    })?;
    let Some(tail) = torn else {
        return crate::staged::recover_torn_tail(path, &bytes);
    };
    move_aside(path, &bytes, tail.offset, "torn")?;
    Ok(Some(tail))
}

/// Moves the lines of the log at `path` from byte `offset` (the start of a
/// line) to its end aside, whole, into `<log>.<label>-<offset>`, and cuts
/// the log there; what stays is a log whose chain still verifies. Returns
/// where they were kept. Takes the writer lock, so it never races a live
/// writer.
pub fn set_aside_from(path: &Path, offset: u64, label: &str) -> Result<PathBuf, StoreError> {
    let _lock = take_writer_lock(path)?;
    let bytes = std::fs::read(path).map_err(io(path))?;
    let at_a_line = offset == 0 || bytes.get(offset as usize - 1) == Some(&b'\n');
    if offset as usize > bytes.len() || !at_a_line {
        return Err(io(path)(std::io::Error::other(format!(
            "byte {offset} does not start a line of it"
        ))));
    }
    move_aside(path, &bytes, offset, label)
}

/// Keeps `bytes[offset..]` of the log at `path` in `<log>.<label>-<offset>`
/// (made durable first), then cuts the log to `offset`.
fn move_aside(path: &Path, bytes: &[u8], offset: u64, label: &str) -> Result<PathBuf, StoreError> {
    let aside = keep_aside(path, &bytes[offset as usize..], offset, label)?;
    cut_durably(path, offset)?;
    Ok(aside)
}

/// Writes `bytes`, from byte `offset` of the log at `path`, to
/// `<log>.<label>-<offset>`, made durable, name and all.
pub(crate) fn keep_aside(
    path: &Path,
    bytes: &[u8],
    offset: u64,
    label: &str,
) -> Result<PathBuf, StoreError> {
    let aside = PathBuf::from(format!("{}.{label}-{offset}", path.display()));
    let mut saved = File::create(&aside).map_err(io(&aside))?;
    saved.write_all(bytes).map_err(io(&aside))?;
    saved.sync_all().map_err(io(&aside))?;
    crate::durable::sync_name_of(&aside).map_err(io(&aside))?;
    Ok(aside)
}

/// Cuts the file at `path` to `len` bytes, durably.
pub(crate) fn cut_durably(path: &Path, len: u64) -> Result<(), StoreError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io(path))?;
    file.set_len(len).map_err(io(path))?;
    file.sync_all().map_err(io(path))
}
