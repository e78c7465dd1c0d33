//! A log's staged lines: the write-ahead order kept without an fsync per
//! line. A graph run's writer puts each line, as it is appended, in a file
//! beside the log, `<log>.staged-<offset>` (`offset` being the log's length
//! the lines continue from), and moves them into the log only at a group
//! sync, after the artifacts they name were made durable. So a line in the
//! log is never on the disk before what it names is, and a killed writer
//! loses none (its lines wait in the staged file).
//!
//! Readers see the log and its staged lines as one ([`read_log`]). Before a
//! log is written again, the lines a dead writer staged are settled
//! ([`settle`]): those whose artifacts are whole join the log, the rest are
//! kept beside it, never dropped.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use crate::log::{StoreError, io};

/// Where lines continuing the log at `path` from byte `offset` are staged.
pub fn path_for(log: &Path, offset: u64) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(format!(".staged-{offset}"));
    PathBuf::from(name)
}

/// Whether `name` (a file name in a run directory) is a staged file: lines
/// of a log, not a record of its own.
pub fn is_staged_name(name: &str) -> bool {
    name.rsplit_once(".staged-")
        .is_some_and(|(_, offset)| !offset.is_empty() && offset.bytes().all(|b| b.is_ascii_digit()))
}

/// The lines a writer staged past the log's durable end.
#[derive(Debug)]
pub struct Continuation {
    /// Where in the log they begin. Bytes of the log past it are a prefix
    /// of them: a sync that had begun moving them in when it stopped.
    pub from: u64,
    pub bytes: Vec<u8>,
}

/// The staged files beside `log`, with the offset each continues from,
/// highest first.
fn staged_files(log: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let (Some(dir), Some(name)) = (log.parent(), log.file_name()) else {
        return Ok(Vec::new());
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!("{}.staged-", name.to_string_lossy());
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let offset = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .filter(|o| !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|o| o.parse::<u64>().ok());
        if let Some(offset) = offset {
            found.push((offset, entry.path()));
        }
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(found)
}

/// The staged lines that continue `log_bytes` (the log as just read), if a
/// writer left any it has not moved in. A staged file the log already
/// holds whole is spent, not a continuation.
pub fn continuation(log: &Path, log_bytes: &[u8]) -> std::io::Result<Option<Continuation>> {
    for (from, path) in staged_files(log)? {
        let Some(moved_in) = log_bytes.get(from as usize..) else {
            // Staged past what was read: the log grew since.
            continue;
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // Moved in and removed since it was listed.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if bytes.len() > moved_in.len() && bytes.starts_with(moved_in) {
            return Ok(Some(Continuation { from, bytes }));
        }
    }
    Ok(None)
}

/// The log at `path` with the lines staged past its end: what its writer
/// has appended so far, as one log. A reader racing a sync reads again.
pub fn read_log(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = std::fs::read(path)?;
    for _ in 0..16 {
        if let Some(staged) = continuation(path, &bytes)? {
            bytes.truncate(staged.from as usize);
            bytes.extend_from_slice(&staged.bytes);
            return Ok(bytes);
        }
        if std::fs::metadata(path)?.len() == bytes.len() as u64 {
            return Ok(bytes);
        }
        // A sync moved lines in (and removed their staged file) between
        // the two reads: read both again.
        bytes = std::fs::read(path)?;
    }
    Ok(bytes)
}

/// Opens the log at `path` and its staged lines, as one, for reading from
/// byte `offset` of them: the log file, or the staged file holding that
/// byte, positioned there (a byte moved in is the same byte in both).
/// `None` when there is no log; an `InvalidData` error when the two end
/// before `offset`: the log shrank.
pub fn open_at(path: &Path, offset: u64) -> std::io::Result<Option<File>> {
    use std::io::{Seek, SeekFrom};
    let at = |mut file: File, at: u64| file.seek(SeekFrom::Start(at)).map(|_| Some(file));
    for _ in 0..16 {
        let log = match File::open(path) {
            Ok(log) => log,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let len = log.metadata()?.len();
        if offset < len {
            return at(log, offset);
        }
        for (from, staged) in staged_files(path)? {
            if from > len || from > offset {
                continue;
            }
            match File::open(&staged) {
                Ok(file) if from + file.metadata()?.len() >= offset => {
                    return at(file, offset - from);
                }
                Ok(_) => {}
                // Moved in since it was listed.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if offset == len {
            return at(log, offset);
        }
        if std::fs::metadata(path)?.len() == len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "it shrank: it ends before byte {offset}, and a log is only ever appended to"
                ),
            ));
        }
        // Lines moved in between the two looks: look again.
    }
    Err(std::io::Error::other(
        "it kept changing under the reader; try again",
    ))
}

/// What settling a dead writer's staged lines did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Lines that joined the log.
    pub kept: usize,
    /// Where the rest were kept, whole, when there was a rest.
    pub set_aside: Option<PathBuf>,
}

/// Settles the lines a dead writer staged beside the log at `path`, under
/// the writer lock: `keep` is shown the whole lines that continue the chain
/// and answers how many of their bytes may join the log (a line boundary).
/// It makes durable first what those name. They are moved in and made
/// durable; the rest (lines refused, or a torn last line) are kept whole
/// in `<log>.<label>-<offset>`; then the staged files are removed. `None`
/// when nothing was staged.
pub fn settle<E: From<StoreError>>(
    path: &Path,
    label: &str,
    keep: impl FnOnce(&[u8]) -> Result<usize, E>,
) -> Result<Option<Settled>, E> {
    // Looked for before the lock is taken: a log with nothing staged (or
    // none at all) is left as it is, without a lock file made beside it.
    if staged_files(path).map_err(io(path))?.is_empty() {
        return Ok(None);
    }
    let _lock = crate::log::take_writer_lock(path)?;
    let files = staged_files(path).map_err(io(path))?;
    let log_bytes = std::fs::read(path).map_err(io(path))?;
    let settled = match continuation(path, &log_bytes).map_err(io(path))? {
        Some(staged) => Some(move_in(path, &log_bytes, staged, label, keep)?),
        None => None,
    };
    for (_, file) in files {
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&file)(e).into()),
            _ => {}
        }
    }
    // Removed for good: a staged file back after a crash would be settled
    // again (and found spent), but never needs to be.
    crate::durable::sync_name_of(path).map_err(io(path))?;
    Ok(settled)
}

fn move_in<E: From<StoreError>>(
    path: &Path,
    log_bytes: &[u8],
    staged: Continuation,
    label: &str,
    keep: impl FnOnce(&[u8]) -> Result<usize, E>,
) -> Result<Settled, E> {
    let from = staged.from as usize;
    let whole = whole_lines(path, &log_bytes[..from], &staged.bytes)?;
    let kept_bytes = keep(&staged.bytes[..whole])?.min(whole);
    let set_aside = match kept_bytes < staged.bytes.len() {
        true => Some(crate::log::keep_aside(
            path,
            &staged.bytes[kept_bytes..],
            (from + kept_bytes) as u64,
            label,
        )?),
        false => None,
    };
    let log = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io(path))?;
    // What a stopped sync already moved in is cut back to the line kept
    // last, then the rest written after it.
    let moved_in = log_bytes.len() - from;
    log.set_len((from + kept_bytes.min(moved_in)) as u64)
        .map_err(io(path))?;
    if kept_bytes > moved_in {
        use std::os::unix::fs::FileExt;
        log.write_all_at(&staged.bytes[moved_in..kept_bytes], log_bytes.len() as u64)
            .map_err(io(path))?;
    }
    log.sync_data().map_err(io(path))?;
    Ok(Settled {
        kept: staged.bytes[..kept_bytes]
            .iter()
            .filter(|b| **b == b'\n')
            .count(),
        set_aside,
    })
}

/// Moves a torn last line the writer staged beside the log at `path`
/// (whose durable bytes are `log_bytes`) aside into `<log>.torn-<offset>`,
/// `offset` counted in the log and its staged lines as one; the whole
/// lines stay staged. The caller holds the writer lock.
pub(crate) fn recover_torn_tail(
    path: &Path,
    log_bytes: &[u8],
) -> Result<Option<crate::chain::TornTail>, StoreError> {
    let Some(staged) = continuation(path, log_bytes).map_err(io(path))? else {
        return Ok(None);
    };
    let all = [&log_bytes[..staged.from as usize], &staged.bytes[..]].concat();
    let (_, torn) = crate::chain::verify_chain(&all).map_err(|error| StoreError::Chain {
        path: path.to_path_buf(),
        error,
    })?;
    let Some(tail) = torn else { return Ok(None) };
    crate::log::keep_aside(path, &all[tail.offset as usize..], tail.offset, "torn")?;
    crate::log::cut_durably(&path_for(path, staged.from), tail.offset - staged.from)?;
    Ok(Some(tail))
}

/// How many bytes of `staged` are whole lines that continue the chain of
/// `durable`: up to a torn last line, or the first line that breaks the
/// chain. A break inside `durable` is damage, and the error.
fn whole_lines(path: &Path, durable: &[u8], staged: &[u8]) -> Result<usize, StoreError> {
    let all = [durable, staged].concat();
    match crate::chain::verify_chain(&all) {
        Ok((_, None)) => Ok(staged.len()),
        Ok((_, Some(torn))) => Ok(torn.offset as usize - durable.len()),
        Err(error) => {
            let broken_at = all
                .split_inclusive(|b| *b == b'\n')
                .take(error.line.saturating_sub(1))
                .map(<[u8]>::len)
                .sum::<usize>();
            if broken_at < durable.len() {
                return Err(StoreError::Chain {
                    path: path.to_path_buf(),
                    error,
                });
            }
            Ok(broken_at - durable.len())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_names_are_told_from_records() {
        assert!(is_staged_name("controller-events.jsonl.staged-0"));
        assert!(is_staged_name("controller-annex.jsonl.staged-1234"));
        assert!(!is_staged_name("controller-events.jsonl.staged-"));
        assert!(!is_staged_name("controller-events.jsonl.staged-12a"));
        assert!(!is_staged_name("controller-events.jsonl.torn-12"));
        assert_eq!(
            path_for(Path::new("/r/controller-events.jsonl"), 7),
            Path::new("/r/controller-events.jsonl.staged-7")
        );
    }
}
