//! The `workspace.dir` capability: a read-only view of one directory.
//!
//! cap-std does the confinement (no `..` out of the root, no absolute paths,
//! no symlink that resolves outside); the checks here only turn refusals into
//! precise errors for the plugin.

use std::io::Read;
use std::path::{Component, Path};

use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};

use crate::bindings::workspace::{Entry, EntryKind, FsError};

pub struct WorkspaceDir {
    dir: Dir,
    max_read_bytes: u64,
}

impl WorkspaceDir {
    pub(crate) fn open(root: &Path, max_read_bytes: u64) -> std::io::Result<Self> {
        // cap-std would follow a symlinked root; refuse it so the view is the
        // directory the operator named, not wherever a link points.
        if std::fs::symlink_metadata(root)?.file_type().is_symlink() {
            return Err(std::io::Error::other(
                "the workspace is a symlink; pass the directory it points to",
            ));
        }
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())?;
        Ok(WorkspaceDir {
            dir,
            max_read_bytes,
        })
    }

    /// Refuses, before any I/O, what can only be an escape attempt.
    fn checked(path: &str) -> Result<&Path, FsError> {
        let rel = Path::new(path);
        let escapes = rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
        if escapes || path.contains('\0') {
            return Err(FsError::Escape(path.to_string()));
        }
        Ok(if path.is_empty() { Path::new(".") } else { rel })
    }

    /// A regular file's bytes. A FIFO, socket or device (kind `other`) is
    /// never opened for reading: its type is checked first, and the open is
    /// non-blocking and checked again on the descriptor, so a FIFO swapped
    /// in between can neither block the call nor be read.
    pub(crate) fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        let rel = Self::checked(path)?;
        let meta = self.dir.metadata(rel).map_err(|e| fs_error(path, e))?;
        if !meta.is_file() {
            return Err(FsError::WrongKind(path.to_string()));
        }
        let mut options = OpenOptions::new();
        options
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
        let mut file = self
            .dir
            .open_with(rel, &options)
            .map_err(|e| fs_error(path, e))?;
        let meta = file.metadata().map_err(|e| fs_error(path, e))?;
        if !meta.is_file() {
            return Err(FsError::WrongKind(path.to_string()));
        }
        if meta.len() > self.max_read_bytes {
            return Err(FsError::TooLarge(format!(
                "{path}: {} bytes, the limit is {}",
                meta.len(),
                self.max_read_bytes
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        // `take` keeps a file that grows after the check within the limit.
        (&mut file)
            .take(self.max_read_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| fs_error(path, e))?;
        if bytes.len() as u64 > self.max_read_bytes {
            return Err(FsError::TooLarge(format!(
                "{path}: grew past the limit of {}",
                self.max_read_bytes
            )));
        }
        Ok(bytes)
    }

    pub(crate) fn list(&self, path: &str) -> Result<Vec<Entry>, FsError> {
        let rel = Self::checked(path)?;
        let entries = self.dir.read_dir(rel).map_err(|e| fs_error(path, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| fs_error(path, e))?;
            let meta = entry.metadata().map_err(|e| fs_error(path, e))?;
            out.push(to_entry(
                entry.file_name().to_string_lossy().into_owned(),
                &meta,
            ));
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub(crate) fn stat(&self, path: &str) -> Result<Option<Entry>, FsError> {
        let rel = Self::checked(path)?;
        match self.dir.metadata(rel) {
            Ok(meta) => {
                let name = rel
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Ok(Some(to_entry(name, &meta)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(fs_error(path, e)),
        }
    }
}

fn to_entry(name: String, meta: &cap_std::fs::Metadata) -> Entry {
    let kind = if meta.is_file() {
        EntryKind::File
    } else if meta.is_dir() {
        EntryKind::Directory
    } else {
        EntryKind::Other
    };
    let modified_ms = meta
        .modified()
        .ok()
        .map(|t| t.into_std())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    Entry {
        name,
        kind,
        size: meta.len(),
        modified_ms,
    }
}

fn fs_error(path: &str, error: std::io::Error) -> FsError {
    match error.kind() {
        std::io::ErrorKind::NotFound => FsError::NotFound(path.to_string()),
        // cap-std reports a symlink or `..` that leaves the root this way.
        std::io::ErrorKind::PermissionDenied if error.to_string().contains("outside") => {
            FsError::Escape(path.to_string())
        }
        std::io::ErrorKind::IsADirectory | std::io::ErrorKind::NotADirectory => {
            FsError::WrongKind(path.to_string())
        }
        _ => FsError::Io(format!("{path}: {error}")),
    }
}
