//! A run's content-addressed artifacts: `artifacts/objects/<hex>`, which
//! must hash to its name, and `artifacts/metadata/<hex>.json` in
//! bounded-loops' format, which must name the same digest and size. The
//! store writes atomically, caps sizes, re-verifies every read, and never
//! follows a symlink.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

/// The store's two folders: each object by its hex digest, and its
/// metadata beside it as `<hex>.json`.
pub const OBJECTS: &str = "objects";
pub const METADATA: &str = "metadata";

/// Where the metadata of the object `digest` (`sha256:<hex>` or `<hex>`)
/// lies in the store at `root`.
pub fn metadata_path(root: &Path, digest: &str) -> PathBuf {
    root.join(METADATA)
        .join(format!("{}.json", digest.trim_start_matches("sha256:")))
}

/// Verifies every artifact under `dir` (a run's `artifacts/`). Returns how
/// many objects were checked, or the first problem.
pub fn verify_artifacts(dir: &Path) -> Result<usize, ArtifactError> {
    let objects = dir.join(OBJECTS);
    let entries = match std::fs::read_dir(&objects) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(artifact_io(&objects)(e)),
    };
    // A write killed before its rename leaves its temporary file
    // (`.<digest>.tmp.<pid>`): no event names it and it is not an object.
    let unfinished = |name: &str| name.starts_with('.') && name.contains(".tmp.");
    let mut names: Vec<_> = entries
        .filter_map(|e| e.ok())
        .filter(|e| !unfinished(&e.file_name().to_string_lossy()))
        .collect();
    names.sort_by_key(|e| e.file_name());
    for entry in &names {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let kind = entry.file_type().map_err(artifact_io(&path))?;
        if !kind.is_file() {
            return Err(ArtifactError::NotRegular { path });
        }
        let bytes = std::fs::read(&path).map_err(artifact_io(&path))?;
        let actual = bl_core::sha256_hex(&bytes);
        if actual != name {
            return Err(ArtifactError::Misnamed { path, actual });
        }
        check_metadata(dir, &name, bytes.len() as u64)?;
    }
    Ok(names.len())
}

/// The metadata beside the object `hex` of `size` bytes, if there is any,
/// names that object and its size.
fn check_metadata(dir: &Path, hex: &str, size: u64) -> Result<(), ArtifactError> {
    let meta_path = dir.join(METADATA).join(format!("{hex}.json"));
    let Ok(text) = std::fs::read_to_string(&meta_path) else {
        return Ok(());
    };
    let meta: Value =
        serde_json::from_str(&text).map_err(|source| ArtifactError::MetadataNotJson {
            path: meta_path.clone(),
            source,
        })?;
    if meta["digest"].as_str() != Some(&format!("sha256:{hex}")) {
        return Err(ArtifactError::MetadataDigest { path: meta_path });
    }
    if meta.get("size").is_some_and(|s| s.as_u64() != Some(size)) {
        return Err(ArtifactError::MetadataSize {
            path: meta_path,
            size,
        });
    }
    Ok(())
}

/// Why an artifact could not be stored or trusted.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("artifact of {size} bytes is over the store's limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("{digest} is not a sha256 digest (sha256:<64 hex>)")]
    BadDigest { digest: String },
    #[error("{digest}: no such artifact")]
    Missing { digest: String },
    #[error("{}: not a regular file (symlinks are not trusted)", path.display())]
    NotRegular { path: PathBuf },
    #[error("{}: content hashes to {actual}, not to its name", path.display())]
    Misnamed { path: PathBuf, actual: String },
    #[error("{}: not JSON: {source}", path.display())]
    MetadataNotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: field digest does not name its object", path.display())]
    MetadataDigest { path: PathBuf },
    #[error("{}: field size is not the object's {size} bytes", path.display())]
    MetadataSize { path: PathBuf, size: u64 },
    #[error(
        "{path}: the stored bytes hash to sha256:{actual}, not to {expected}; the artifact is not trusted"
    )]
    Unverified {
        path: PathBuf,
        expected: String,
        actual: String,
    },
}

/// Facts recorded beside an object, in bounded-loops' metadata format.
#[derive(Debug, Clone)]
pub struct ArtifactMeta<'a> {
    pub organization_id: &'a str,
    pub project_id: &'a str,
    pub media_type: &'a str,
    pub producer_attempt: &'a str,
    pub sensitivity: &'a str,
}

/// A run's content-addressed artifact store: `objects/<hex>` and
/// `metadata/<hex>.json` under a run's `artifacts/`. Writes are atomic
/// (temp file, fsync, rename); every read re-verifies the digest; symlinks
/// are never followed.
pub struct ArtifactStore {
    root: PathBuf,
    max_bytes: u64,
    /// Group commit: files written but not yet durable (with their
    /// directories), made durable together by [`ArtifactStore::sync`].
    /// `None` when every write is durable on its own.
    unsynced: Option<std::sync::Mutex<Unsynced>>,
    /// Whether `objects/` and `metadata/` were made: a write then asks
    /// the filesystem for neither (two calls a write, a node's reply
    /// writes two). One removed since is made again by the write that
    /// finds it missing.
    made: [AtomicBool; 2],
    /// Each file this store wrote, with the digest of what it wrote, when
    /// asked to remember them ([`ArtifactStore::remembering_writes`]): the
    /// run's checkpoint then seals them without reading them back.
    remembered: Option<std::sync::Mutex<HashMap<PathBuf, String>>>,
}

/// Which of the store's two directories a write goes to.
#[derive(Clone, Copy)]
enum Part {
    Objects = 0,
    Metadata = 1,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Objects => OBJECTS,
            Part::Metadata => METADATA,
        }
    }
}

/// What a group-committing store wrote since its last sync.
#[derive(Default)]
struct Unsynced {
    files: Vec<PathBuf>,
    /// The store's root, opened before the first write since the last
    /// sync: one `syncfs` on it makes every file and directory written
    /// since durable, however many, and reports any write-back error since
    /// it was opened.
    root: Option<File>,
}

fn hex_of(digest: &str) -> Result<&str, ArtifactError> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .ok_or_else(|| ArtifactError::BadDigest {
            digest: digest.to_string(),
        })
}

fn artifact_io(path: &Path) -> impl FnOnce(std::io::Error) -> ArtifactError + '_ {
    move |source| ArtifactError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl ArtifactStore {
    pub fn new(root: impl Into<PathBuf>, max_bytes: u64) -> Self {
        ArtifactStore {
            root: root.into(),
            max_bytes,
            unsynced: None,
            made: [AtomicBool::new(false), AtomicBool::new(false)],
            remembered: None,
        }
    }

    /// The same store, remembering each file it writes with its digest,
    /// for [`ArtifactStore::written`]. For a writer that holds the run (a
    /// graph run's controller): a long-lived one would keep them all.
    pub fn remembering_writes(mut self) -> Self {
        self.remembered = Some(Default::default());
        self
    }

    /// Each file this store wrote (its path, under the store's root as it
    /// was given) with the `sha256:` digest of the bytes it wrote, if it
    /// remembers them; empty otherwise.
    pub fn written(&self) -> HashMap<PathBuf, String> {
        self.remembered
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default()
    }

    fn remember(&self, path: PathBuf, digest: impl FnOnce() -> String) {
        if let Some(remembered) = &self.remembered {
            let digest = digest();
            remembered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(path, digest);
        }
    }

    /// A store whose writes are made durable in groups, by
    /// [`ArtifactStore::sync`]: a writer calls it before it records
    /// anything that names what it wrote as durable.
    pub fn with_group_commit(root: impl Into<PathBuf>, max_bytes: u64) -> Self {
        ArtifactStore {
            unsynced: Some(std::sync::Mutex::new(Unsynced::default())),
            ..ArtifactStore::new(root, max_bytes)
        }
    }

    /// Makes every write so far durable, in one `syncfs` of the store's
    /// filesystem however many artifacts were written (a file on another
    /// filesystem, below a mount, is fsynced on its own, with its
    /// directory).
    pub fn sync(&self) -> Result<(), ArtifactError> {
        let Some(unsynced) = &self.unsynced else {
            return Ok(());
        };
        let Unsynced { files, root } =
            std::mem::take(&mut *unsynced.lock().unwrap_or_else(|p| p.into_inner()));
        if files.is_empty() {
            return Ok(());
        }
        // A write that began before the last sync took the root, and ended
        // after it, left its file with no root opened: it is synced all the
        // same.
        let root = match root {
            Some(root) => root,
            None => File::open(&self.root).map_err(artifact_io(&self.root))?,
        };
        let elsewhere = on_other_filesystems(&root, &files).map_err(artifact_io(&self.root))?;
        sync_filesystem(&root).map_err(artifact_io(&self.root))?;
        let mut dirs = std::collections::BTreeSet::new();
        for file in elsewhere {
            File::open(file)
                .and_then(|f| f.sync_all())
                .map_err(artifact_io(file))?;
            if let Some(dir) = file.parent() {
                dirs.insert(dir.to_path_buf());
            }
        }
        for dir in dirs {
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(artifact_io(&dir))?;
        }
        Ok(())
    }

    /// Makes every file the store holds durable, whoever wrote it (as a
    /// writer that stopped before its sync left them): one `syncfs` for
    /// each filesystem its parts are on.
    pub fn sync_all(&self) -> Result<(), ArtifactError> {
        use std::os::unix::fs::MetadataExt;
        let mut synced = std::collections::BTreeSet::new();
        for dir in [
            self.root.clone(),
            self.root.join(OBJECTS),
            self.root.join(METADATA),
        ] {
            let opened = match File::open(&dir) {
                Ok(opened) => opened,
                // A part never made holds nothing.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(artifact_io(&dir)(e)),
            };
            let device = opened.metadata().map_err(artifact_io(&dir))?.dev();
            if synced.insert(device) {
                sync_filesystem(&opened).map_err(artifact_io(&dir))?;
            }
        }
        Ok(())
    }

    /// Writes `bytes` as `name` in `part`; returns the file's path.
    fn write_atomically(
        &self,
        part: Part,
        name: &str,
        bytes: &[u8],
    ) -> Result<PathBuf, ArtifactError> {
        let dir = &self.root.join(part.name());
        let made = &self.made[part as usize];
        if !made.load(Ordering::Relaxed) {
            std::fs::create_dir_all(dir).map_err(artifact_io(dir))?;
            made.store(true, Ordering::Relaxed);
        }
        if let Some(unsynced) = &self.unsynced {
            let mut unsynced = unsynced.lock().unwrap_or_else(|p| p.into_inner());
            if unsynced.root.is_none() {
                // Opened before the first write it will make durable: a
                // write-back error from here on is reported by its sync.
                unsynced.root = Some(File::open(&self.root).map_err(artifact_io(&self.root))?);
            }
        }
        let target = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp.{}", std::process::id()));
        let create = || {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&tmp)
        };
        let mut file = match create() {
            // The directory was removed since it was made.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir).map_err(artifact_io(dir))?;
                create()
            }
            opened => opened,
        }
        .map_err(artifact_io(&tmp))?;
        file.write_all(bytes).map_err(artifact_io(&tmp))?;
        if let Some(unsynced) = &self.unsynced {
            std::fs::rename(&tmp, &target).map_err(artifact_io(&target))?;
            unsynced
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .files
                .push(target.clone());
            return Ok(target);
        }
        file.sync_all().map_err(artifact_io(&tmp))?;
        std::fs::rename(&tmp, &target).map_err(artifact_io(&target))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(artifact_io(dir))?;
        Ok(target)
    }

    /// Stores `bytes` and returns their digest. Storing the same bytes
    /// again is a no-op: content addressing makes writes idempotent.
    pub fn put(&self, bytes: &[u8], meta: &ArtifactMeta) -> Result<String, ArtifactError> {
        if bytes.len() as u64 > self.max_bytes {
            return Err(ArtifactError::TooLarge {
                size: bytes.len() as u64,
                limit: self.max_bytes,
            });
        }
        let sum = bl_core::Sha256Digest::of(bytes);
        let (hex, digest) = (sum.hex(), sum.to_string());
        if self.get(&digest).is_err() {
            let path = self.write_atomically(Part::Objects, &hex, bytes)?;
            self.remember(path, || digest.clone());
        }
        let metadata = serde_json::json!({
            "digest": digest, "expires_at": null, "legal_hold": false, "legal_hold_allowed": false,
            "media_type": meta.media_type, "producer_attempt": meta.producer_attempt,
            "ref": {"digest": digest, "organization_id": meta.organization_id, "project_id": meta.project_id},
            "retention_class": "standard", "sensitivity": meta.sensitivity, "size": bytes.len(),
            "state": "ACTIVE", "tombstone_reason": null,
        });
        // Canonical JSON and a newline, byte for byte as bounded-loops writes it.
        let json = format!("{}\n", bl_core::canonical_json(&metadata));
        let meta_dir = self.root.join(METADATA);
        // The same object stored again with the same facts: nothing to write.
        if std::fs::read(meta_dir.join(format!("{hex}.json"))).is_ok_and(|b| b == json.as_bytes()) {
            return Ok(digest);
        }
        let path =
            self.write_atomically(Part::Metadata, &format!("{hex}.json"), json.as_bytes())?;
        self.remember(path, || {
            bl_core::Sha256Digest::of(json.as_bytes()).to_string()
        });
        Ok(digest)
    }

    /// Checks the artifact `digest` as `verify_artifacts` checks each one:
    /// its bytes hash to its name, and its metadata, if any, names it.
    pub fn verify(&self, digest: &str) -> Result<(), ArtifactError> {
        let size = self.get(digest)?.len() as u64;
        check_metadata(&self.root, hex_of(digest)?, size)
    }

    /// The bytes of an artifact, verified against their digest before they
    /// are returned. A symlink in place of the object is refused.
    pub fn get(&self, digest: &str) -> Result<Vec<u8>, ArtifactError> {
        let hex = hex_of(digest)?;
        let path = self.root.join(OBJECTS).join(hex);
        let mut file = match OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArtifactError::Missing {
                    digest: digest.to_string(),
                });
            }
            Err(e) => return Err(ArtifactError::Io { path, source: e }),
        };
        let mut bytes = Vec::new();
        (&mut file)
            .take(self.max_bytes.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(artifact_io(&path))?;
        let actual = bl_core::sha256_hex(&bytes);
        if actual != hex {
            return Err(ArtifactError::Unverified {
                path,
                expected: digest.to_string(),
                actual,
            });
        }
        Ok(bytes)
    }
}

/// The files among `files` one `syncfs` of `root` does not cover: those
/// below a mount of another filesystem (every one where there is no
/// `syncfs`).
fn on_other_filesystems<'a>(
    root: &File,
    files: &'a [PathBuf],
) -> std::io::Result<Vec<&'a PathBuf>> {
    use std::os::unix::fs::MetadataExt;
    if cfg!(not(target_os = "linux")) {
        return Ok(files.iter().collect());
    }
    let device = root.metadata()?.dev();
    // A file's directory tells its filesystem: each one is looked at once.
    let mut dir_elsewhere = std::collections::HashMap::new();
    let mut elsewhere = Vec::new();
    for file in files {
        let dir = file.parent().unwrap_or(Path::new("."));
        let other = match dir_elsewhere.get(dir) {
            Some(&other) => other,
            None => {
                let other = std::fs::metadata(dir)?.dev() != device;
                dir_elsewhere.insert(dir, other);
                other
            }
        };
        if other {
            elsewhere.push(file);
        }
    }
    Ok(elsewhere)
}

/// Flushes every file and directory of `root`'s filesystem to the disk.
#[cfg(target_os = "linux")]
fn sync_filesystem(root: &File) -> std::io::Result<()> {
    nix::unistd::syncfs(root).map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn sync_filesystem(_root: &File) -> std::io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: ArtifactMeta = ArtifactMeta {
        organization_id: "demo-org",
        project_id: "demo-project",
        media_type: "text/plain",
        producer_attempt: "1",
        sensitivity: "public",
    };

    #[test]
    fn a_directory_removed_after_the_first_write_is_made_again_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path(), 1 << 20);
        store.put(b"first", &META).unwrap();
        std::fs::remove_dir_all(dir.path().join(OBJECTS)).unwrap();
        std::fs::remove_dir_all(dir.path().join(METADATA)).unwrap();
        let digest = store.put(b"second", &META).unwrap();
        assert_eq!(store.get(&digest).unwrap(), b"second");
        assert_eq!(verify_artifacts(dir.path()).unwrap(), 1);
    }

    #[test]
    fn metadata_matches_what_bounded_loops_writes() {
        let upstream = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/corpus/runs/upstream-demo/artifacts");
        let object = std::fs::read_dir(upstream.join(OBJECTS))
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let bytes = std::fs::read(object.path()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path(), 1 << 20);
        let digest = store.put(&bytes, &META).unwrap();
        let name = object.file_name().to_string_lossy().into_owned();
        assert_eq!(digest, format!("sha256:{name}"));
        let ours = std::fs::read(dir.path().join(format!("metadata/{name}.json"))).unwrap();
        let theirs = std::fs::read(upstream.join(format!("metadata/{name}.json"))).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(store.get(&digest).unwrap(), bytes);
        assert_eq!(verify_artifacts(dir.path()).unwrap(), 1);
    }

    #[test]
    fn a_write_killed_before_its_rename_leaves_no_object_to_verify() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path(), 1 << 20);
        let digest = store.put(b"kept", &META).unwrap();
        // What a kill -9 between create and rename leaves behind.
        let objects = dir.path().join(OBJECTS);
        std::fs::write(objects.join(format!(".{}.tmp.4242", &digest[7..])), b"").unwrap();
        assert_eq!(verify_artifacts(dir.path()).unwrap(), 1);
        // A misnamed object is still refused.
        std::fs::write(objects.join("0".repeat(64)), b"not zeros").unwrap();
        assert!(matches!(
            verify_artifacts(dir.path()),
            Err(ArtifactError::Misnamed { .. })
        ));
    }

    #[test]
    fn reads_reverify_refuse_symlinks_and_sizes_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(dir.path(), 16);
        let digest = store.put(b"hello", &META).unwrap();
        let object = dir.path().join("objects").join(&digest[7..]);
        std::fs::write(&object, b"hellO").unwrap();
        assert!(matches!(
            store.get(&digest),
            Err(ArtifactError::Unverified { .. })
        ));

        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"hello").unwrap();
        std::fs::remove_file(&object).unwrap();
        std::os::unix::fs::symlink(&outside, &object).unwrap();
        assert!(
            matches!(store.get(&digest), Err(ArtifactError::Io { .. })),
            "a symlink must not be followed"
        );

        assert!(matches!(
            store.put(&[0u8; 17], &META),
            Err(ArtifactError::TooLarge {
                size: 17,
                limit: 16
            })
        ));
        assert!(matches!(
            store.get("sha256:abc"),
            Err(ArtifactError::BadDigest { .. })
        ));
    }

    #[test]
    fn a_group_commit_makes_every_write_durable_in_one_sync_of_the_filesystem() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::with_group_commit(dir.path().join("artifacts"), 1 << 20);
        store.sync().expect("nothing written: nothing to sync");
        let digests: Vec<String> = (0..20)
            .map(|i| store.put(format!("reply {i}").as_bytes(), &META).unwrap())
            .collect();
        {
            let pending = store.unsynced.as_ref().unwrap().lock().unwrap();
            // An object and its metadata per artifact, and the root opened
            // at the first of them, before anything could fail to write back.
            assert_eq!(pending.files.len(), 40);
            assert!(pending.root.is_some());
        }
        let (root, files) = {
            let pending = store.unsynced.as_ref().unwrap().lock().unwrap();
            (
                pending.root.as_ref().unwrap().try_clone().unwrap(),
                pending.files.clone(),
            )
        };
        assert!(
            on_other_filesystems(&root, &files).unwrap().is_empty()
                || cfg!(not(target_os = "linux")),
            "one filesystem: one syncfs covers all"
        );
        store.sync().unwrap();
        let pending = store.unsynced.as_ref().unwrap().lock().unwrap();
        assert!(pending.files.is_empty() && pending.root.is_none());
        drop(pending);
        for digest in &digests {
            store.get(digest).unwrap();
        }
        assert_eq!(verify_artifacts(&dir.path().join("artifacts")).unwrap(), 20);
    }

    #[test]
    fn a_checkpoint_seals_what_the_store_wrote_without_reading_it_back() {
        let run = tempfile::tempdir().unwrap();
        let store = ArtifactStore::new(run.path().join("artifacts"), 1 << 20).remembering_writes();
        let digest = store.put(b"the reply", &META).unwrap();
        std::fs::write(run.path().join("plan.json"), "{}").unwrap();
        let written = store.written();
        assert_eq!(written.len(), 2, "the object and its metadata: {written:?}");
        let seal = |written: &crate::provable::Written| {
            crate::provable::seal_files_knowing(run.path(), written).unwrap()
        };
        // Untouched, the two seals are the same.
        assert_eq!(
            seal(&written),
            crate::provable::seal_files(run.path()).unwrap()
        );
        // Changed by someone else after the store wrote it: sealed as the
        // store wrote it, so the change is a mismatch `bl verify` reports;
        // read back, the change would be sealed as if bl had written it.
        let object = format!("artifacts/objects/{}", hex_of(&digest).unwrap());
        std::fs::write(run.path().join(&object), "not the reply").unwrap();
        let sealed = |files: Vec<(String, String)>| {
            files
                .into_iter()
                .find(|(path, _)| *path == object)
                .unwrap()
                .1
        };
        assert_eq!(sealed(seal(&written)), digest);
        assert_eq!(
            sealed(seal(&Default::default())),
            bl_core::Sha256Digest::of(b"not the reply").to_string()
        );
        // A store that does not remember remembers nothing.
        let plain = ArtifactStore::new(run.path().join("other"), 1 << 20);
        plain.put(b"x", &META).unwrap();
        assert!(plain.written().is_empty());
    }
}
