//! The two file disciplines every authority file in a run directory uses:
//! an exclusive `flock` on a sidecar lock file, and a durable atomic replace
//! (temp file in the same directory, fsync, rename, fsync the directory).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// Blocks until this process holds the exclusive lock on `path` (created if
/// missing). The lock is released when the returned guard drops.
pub fn lock_exclusive(path: &Path) -> std::io::Result<Flock<File>> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e.into())
}

/// Makes the name of `file` in its directory durable: a file's own fsync
/// covers what it holds, not the directory entry that names it, so a file
/// made since the last crash-safe point is lost in a crash without this.
pub fn sync_name_of(file: &Path) -> std::io::Result<()> {
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// Replaces `dir/name` with `bytes` so a reader sees the old file or the new
/// one, never a mix, and the new one survives a crash once this returns.
pub fn replace_durably(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp.{}", std::process::id()));
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    File::open(dir)?.sync_all()
}
