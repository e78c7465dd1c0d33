//! A native test harness: run plugin logic against a real directory without
//! compiling to wasm. It applies the same path rules the host does (no
//! absolute paths, no `..`, no symlink leaving the root), so a test that
//! passes here behaves the same inside bl.

use std::path::{Component, Path, PathBuf};

use crate::{Entry, EntryKind, FsError, Workspace};

/// A [`Workspace`] over a directory on the local file system.
pub struct NativeWorkspace {
    root: PathBuf,
}

impl NativeWorkspace {
    pub fn new(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into().canonicalize()?;
        Ok(NativeWorkspace { root })
    }

    fn resolve(&self, path: &str) -> Result<PathBuf, FsError> {
        let rel = Path::new(path);
        for component in rel.components() {
            match component {
                Component::Normal(_) | Component::CurDir => {}
                _ => return Err(FsError::Escape(path.to_string())),
            }
        }
        let full = self.root.join(rel);
        match full.canonicalize() {
            Ok(real) if real.starts_with(&self.root) => Ok(real),
            Ok(_) => Err(FsError::Escape(path.to_string())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(FsError::NotFound(path.to_string()))
            }
            Err(e) => Err(FsError::Io(format!("{path}: {e}"))),
        }
    }
}

fn entry(name: String, meta: &std::fs::Metadata) -> Entry {
    let kind = if meta.is_file() {
        EntryKind::File
    } else if meta.is_dir() {
        EntryKind::Directory
    } else {
        EntryKind::Other
    };
    Entry {
        name,
        kind,
        size: meta.len(),
    }
}

impl Workspace for NativeWorkspace {
    fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        let full = self.resolve(path)?;
        if full.is_dir() {
            return Err(FsError::WrongKind(path.to_string()));
        }
        std::fs::read(&full).map_err(|e| FsError::Io(format!("{path}: {e}")))
    }

    fn list(&self, path: &str) -> Result<Vec<Entry>, FsError> {
        let full = self.resolve(if path.is_empty() { "." } else { path })?;
        let mut entries = Vec::new();
        let dir = std::fs::read_dir(&full).map_err(|e| FsError::Io(format!("{path}: {e}")))?;
        for item in dir {
            let item = item.map_err(|e| FsError::Io(format!("{path}: {e}")))?;
            let meta = item
                .metadata()
                .map_err(|e| FsError::Io(format!("{path}: {e}")))?;
            entries.push(entry(
                item.file_name().to_string_lossy().into_owned(),
                &meta,
            ));
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn stat(&self, path: &str) -> Result<Option<Entry>, FsError> {
        match self.resolve(path) {
            Ok(full) => {
                let meta =
                    std::fs::metadata(&full).map_err(|e| FsError::Io(format!("{path}: {e}")))?;
                let name = full
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                Ok(Some(entry(name, &meta)))
            }
            Err(FsError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
