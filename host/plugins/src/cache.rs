//! On-disk cache of compiled components, keyed by the component's sha256 and
//! the engine's compatibility hash, so a process that loads a plugin it has
//! seen before skips cranelift entirely; and a memo of each component file's
//! digest, keyed by what the kernel says about the file, so that process
//! does not read and hash a component it already knows either.

use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

pub(crate) struct ComponentCache {
    dir: PathBuf,
    engine_key: String,
}

impl ComponentCache {
    pub(crate) fn new(dir: PathBuf, engine: &Engine) -> Self {
        // The compatibility hash covers wasmtime's version and every engine
        // setting that changes compiled code; a cached artifact from another
        // configuration is simply never looked up.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ComponentCache {
            dir,
            engine_key: format!("{:016x}", hasher.finish()),
        }
    }

    fn path_for(&self, component_bytes: &[u8]) -> PathBuf {
        self.path_for_digest(&hex::encode(Sha256::digest(component_bytes)))
    }

    fn path_for_digest(&self, hex_digest: &str) -> PathBuf {
        self.dir
            .join(format!("{hex_digest}-{}.cwasm", self.engine_key))
    }

    /// The compiled component, from the cache when present, else compiled
    /// and stored. A cache that cannot be written only costs speed.
    /// `hex_digest` is the sha256 of the component, computed once by the
    /// caller; its bytes are read only when it must be compiled.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        source: ComponentSource,
        hex_digest: &str,
    ) -> wasmtime::Result<Component> {
        let path = self.path_for_digest(hex_digest);
        if path.is_file() {
            // SAFETY: only this cache writes files under this name, from
            // `Component::serialize` of the same engine configuration (the
            // name carries its compatibility hash). A file that fails
            // wasmtime's own header checks falls through to a recompile.
            if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
                return Ok(component);
            }
        }
        let bytes = source.read(hex_digest)?;
        let component = Component::new(engine, &bytes)?;
        if let Ok(serialized) = component.serialize() {
            let _ = store_atomically(&self.dir, &path, &serialized);
        }
        Ok(component)
    }

    pub(crate) fn is_cached(&self, bytes: &[u8]) -> bool {
        self.path_for(bytes).is_file()
    }
}

/// Where a component's bytes come from: in memory, or a file read only
/// when the component must be compiled.
#[derive(Debug, Clone, Copy)]
pub enum ComponentSource<'a> {
    Bytes(&'a [u8]),
    /// A file whose sha256 the caller knows: read, it must still have it.
    File(&'a Path),
}

impl<'a> From<&'a [u8]> for ComponentSource<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        ComponentSource::Bytes(bytes)
    }
}

impl<'a> From<&'a Vec<u8>> for ComponentSource<'a> {
    fn from(bytes: &'a Vec<u8>) -> Self {
        ComponentSource::Bytes(bytes)
    }
}

impl<'a> ComponentSource<'a> {
    /// The bytes; a file that no longer has `hex_digest` is refused, so
    /// nothing is compiled (or cached) under a digest it does not have.
    pub(crate) fn read(self, hex_digest: &str) -> wasmtime::Result<std::borrow::Cow<'a, [u8]>> {
        match self {
            ComponentSource::Bytes(bytes) => Ok(std::borrow::Cow::Borrowed(bytes)),
            ComponentSource::File(path) => {
                let bytes = std::fs::read(path)
                    .map_err(|e| wasmtime::format_err!("{}: {e}", path.display()))?;
                let found = bl_core::sha256_hex(&bytes);
                if found != hex_digest {
                    wasmtime::bail!(
                        "{} changed while it was being loaded (sha256:{found}, not sha256:{hex_digest}); nothing was run",
                        path.display()
                    );
                }
                Ok(std::borrow::Cow::Owned(bytes))
            }
        }
    }
}

/// A memo of component files' digests, keyed by the file's path, device,
/// inode, size, modification and change times. Any write to a file
/// changes its change time, which no user can set, so a memo entry names
/// the bytes the file still has. An entry is made only for a file unchanged
/// for a while, so a write within the same clock tick cannot be missed.
/// It lives beside the compiled components, which are trusted as much.
pub(crate) struct DigestMemo {
    dir: PathBuf,
}

/// How long a file must be unchanged before its digest is memoised (more
/// than the coarse clock tick the kernel stamps change times with).
const SETTLED: Duration = Duration::from_secs(2);

impl DigestMemo {
    pub(crate) fn new(cache_dir: &Path) -> DigestMemo {
        DigestMemo {
            dir: cache_dir.join("digests"),
        }
    }

    fn entry(&self, path: &Path) -> Option<(PathBuf, std::fs::Metadata)> {
        let meta = std::fs::metadata(path).ok()?;
        let canonical = path.canonicalize().ok()?;
        let key = format!(
            "{}\0{}\0{}\0{}\0{}.{}\0{}.{}",
            canonical.display(),
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        );
        let name = hex::encode(Sha256::digest(key.as_bytes()));
        Some((self.dir.join(name), meta))
    }

    /// The hex sha256 memoised for the file at `path` as it is now.
    pub(crate) fn get(&self, path: &Path) -> Option<String> {
        let (entry, _) = self.entry(path)?;
        let hex = std::fs::read_to_string(entry).ok()?;
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(hex)
    }

    /// Memoises `hex` for the file at `path`, when it has settled.
    pub(crate) fn put(&self, path: &Path, hex: &str) {
        let Some((entry, meta)) = self.entry(path) else {
            return;
        };
        let changed = SystemTime::UNIX_EPOCH
            + Duration::new(meta.ctime().max(0) as u64, meta.ctime_nsec() as u32);
        if SystemTime::now()
            .duration_since(changed)
            .is_ok_and(|age| age >= SETTLED)
        {
            let _ = store_atomically(&self.dir, &entry, hex.as_bytes());
        }
    }
}

fn store_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A digest is memoised only for a file left unchanged a while, and a
    /// write to the file (any write changes its change time) makes the
    /// memo miss, so the new bytes are hashed.
    #[test]
    fn a_memoised_digest_is_forgotten_when_the_file_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let memo = DigestMemo::new(&dir.path().join("cache"));
        let file = dir.path().join("gate.wasm");
        std::fs::write(&file, b"first").unwrap();
        let first = hex::encode(Sha256::digest(b"first"));
        memo.put(&file, &first);
        assert_eq!(memo.get(&file), None, "a file just written is not memoised");
        std::thread::sleep(SETTLED + Duration::from_millis(100));
        memo.put(&file, &first);
        assert_eq!(memo.get(&file), Some(first));
        // Same length, same place: only the change time tells.
        std::fs::write(&file, b"other").unwrap();
        assert_eq!(memo.get(&file), None);
    }
}
