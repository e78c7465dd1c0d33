//! A native test harness: run plugin logic against a real directory, real
//! inputs and a real child process without compiling to wasm. It applies
//! the same rules the host does (no absolute paths, no `..`, no symlink
//! leaving the root; only declared outputs, each once), so a test that
//! passes here behaves the same inside bl.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::{
    ArtifactError, Entry, EntryKind, FsError, InputInfo, Inputs, OutputDecl, Outputs, Visibility,
    Workspace,
};

/// The largest file one read returns, as in the host (16 MiB).
pub const MAX_READ_BYTES: u64 = 16 << 20;

/// A [`Workspace`] over a directory on the local file system.
pub struct NativeWorkspace {
    root: PathBuf,
    max_read_bytes: u64,
}

impl NativeWorkspace {
    /// A view of the directory `root`. A symlink as the root is refused, as
    /// the host refuses it: the view is the directory named, not wherever a
    /// link points.
    pub fn new(root: impl Into<PathBuf>) -> std::io::Result<Self> {
        let root = root.into();
        if std::fs::symlink_metadata(&root)?.file_type().is_symlink() {
            return Err(std::io::Error::other(
                "the workspace is a symlink; pass the directory it points to",
            ));
        }
        Ok(NativeWorkspace {
            root: root.canonicalize()?,
            max_read_bytes: MAX_READ_BYTES,
        })
    }

    /// The same view with another read cap (the host's is configurable too).
    pub fn with_max_read_bytes(mut self, max: u64) -> Self {
        self.max_read_bytes = max;
        self
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
    let modified_ms = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as u64);
    Entry {
        name,
        kind,
        size: meta.len(),
        modified_ms,
    }
}

impl Workspace for NativeWorkspace {
    fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        use std::io::Read;
        let full = self.resolve(path)?;
        let meta = std::fs::metadata(&full).map_err(|e| FsError::Io(format!("{path}: {e}")))?;
        if meta.is_dir() {
            return Err(FsError::WrongKind(path.to_string()));
        }
        if !meta.is_file() {
            // FIFOs, sockets and devices are never opened for reading.
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
        std::fs::File::open(&full)
            .and_then(|f| f.take(self.max_read_bytes + 1).read_to_end(&mut bytes))
            .map_err(|e| FsError::Io(format!("{path}: {e}")))?;
        if bytes.len() as u64 > self.max_read_bytes {
            return Err(FsError::TooLarge(format!(
                "{path}: grew past the limit of {}",
                self.max_read_bytes
            )));
        }
        Ok(bytes)
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

/// Declared inputs held in memory.
#[derive(Default)]
pub struct NativeInputs {
    inputs: Vec<(InputInfo, Vec<u8>)>,
}

impl NativeInputs {
    /// No inputs yet.
    pub fn new() -> Self {
        NativeInputs::default()
    }

    /// Adds an input; its digest is computed the way the host computes it.
    pub fn with(mut self, name: &str, media_type: &str, bytes: &[u8]) -> Self {
        let info = InputInfo {
            name: name.to_string(),
            media_type: media_type.to_string(),
            size: bytes.len() as u64,
            digest: crate::digest(bytes),
        };
        self.inputs.push((info, bytes.to_vec()));
        self
    }
}

impl Inputs for NativeInputs {
    fn entries(&self) -> Vec<InputInfo> {
        self.inputs.iter().map(|(i, _)| i.clone()).collect()
    }
    fn read(&self, name: &str) -> Result<Vec<u8>, ArtifactError> {
        self.inputs
            .iter()
            .find(|(i, _)| i.name == name)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| ArtifactError::NotDeclared(format!("no input named `{name}`")))
    }
}

/// An output sink that keeps what was written, refusing undeclared names
/// and second writes as the host does.
#[derive(Default)]
pub struct NativeOutputs {
    declared: Vec<OutputDecl>,
    /// What was written, by output name.
    pub written: BTreeMap<String, Vec<u8>>,
}

impl NativeOutputs {
    /// No outputs declared yet.
    pub fn new() -> Self {
        NativeOutputs::default()
    }

    /// Declares an output the transform may write once.
    pub fn declare(mut self, name: &str, media_type: &str, visibility: Visibility) -> Self {
        self.declared.push(OutputDecl {
            name: name.to_string(),
            media_type: media_type.to_string(),
            visibility,
        });
        self
    }
}

impl Outputs for NativeOutputs {
    fn declared(&self) -> Vec<OutputDecl> {
        self.declared.clone()
    }
    fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), ArtifactError> {
        if !self.declared.iter().any(|d| d.name == name) {
            return Err(ArtifactError::NotDeclared(format!(
                "`{name}` is not a declared output"
            )));
        }
        if self.written.contains_key(name) {
            return Err(ArtifactError::AlreadyWritten(name.to_string()));
        }
        self.written.insert(name.to_string(), bytes.to_vec());
        Ok(())
    }
}

pub use crate::command::native::{run_command_natively, with_command_dir};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PluginError;

    /// A fresh directory under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bl-sdk-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_symlinked_root_is_refused_as_the_host_refuses_it() {
        let dir = scratch("symlink-root");
        std::fs::create_dir(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        let err = NativeWorkspace::new(dir.join("link"))
            .err()
            .expect("refused");
        assert!(err.to_string().contains("is a symlink"), "{err}");
        assert!(NativeWorkspace::new(dir.join("real")).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_over_the_cap_and_special_files_are_refused_without_blocking() {
        let dir = scratch("caps");
        std::fs::write(dir.join("big"), vec![b'x'; 2048]).unwrap();
        std::fs::write(dir.join("small"), b"ok").unwrap();
        let status = std::process::Command::new("mkfifo")
            .arg(dir.join("pipe"))
            .status()
            .unwrap();
        assert!(status.success());
        let ws = NativeWorkspace::new(&dir)
            .unwrap()
            .with_max_read_bytes(1024);
        assert!(matches!(ws.read("big"), Err(FsError::TooLarge(_))));
        assert_eq!(ws.read("small").unwrap(), b"ok");
        // Opening a FIFO for reading would block until a writer came.
        assert!(matches!(ws.read("pipe"), Err(FsError::WrongKind(_))));
        assert_eq!(
            NativeWorkspace::new(&dir).unwrap().max_read_bytes,
            MAX_READ_BYTES
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn workspace_and_artifact_refusals_convert_with_question_mark_into_words() {
        let dir = scratch("question-mark");
        let ws = NativeWorkspace::new(&dir).unwrap();
        let read = || -> Result<Vec<u8>, PluginError> { Ok(ws.read("missing.txt")?) };
        match read() {
            Err(PluginError::Capability(m)) => {
                assert_eq!(m, "not found in the workspace: missing.txt")
            }
            other => panic!("{other:?}"),
        }
        let mut outputs = NativeOutputs::new();
        let write =
            |o: &mut NativeOutputs| -> Result<(), PluginError> { Ok(o.write("undeclared", b"x")?) };
        match write(&mut outputs) {
            Err(PluginError::Capability(m)) => {
                assert!(m.contains("no declared input or output"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
