//! On-disk cache of compiled components, keyed by the component's sha256 and
//! the engine's compatibility hash, so a process that loads a plugin it has
//! seen before skips cranelift entirely; and a memo of each component file's
//! digest, keyed by what the kernel says about the file, so that process
//! does not read and hash a component it already knows either. The cache
//! is bounded: past its budget, storing a new artifact removes the ones
//! least recently used.

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
    budget: u64,
}

/// How much compiled code the cache keeps. A Python or JavaScript plugin's
/// is about 35 MB, a Rust one's well under 1 MB; each build of a plugin
/// under development is another entry, which nothing else would remove.
const BUDGET_BYTES: u64 = 2 << 30;

/// How stale a use must be before a hit records it: a hit writes the
/// entry's modification time at most once a day.
const TOUCH_AFTER: Duration = Duration::from_secs(24 * 3600);

/// A temporary file this old was left by a process that died storing it.
const ABANDONED_AFTER: Duration = Duration::from_secs(3600);

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
            budget: BUDGET_BYTES,
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
        if let Ok(meta) = std::fs::metadata(&path)
            && meta.is_file()
        {
            // SAFETY: only this cache writes files under this name, from
            // `Component::serialize` of the same engine configuration (the
            // name carries its compatibility hash). A file that fails
            // wasmtime's own header checks falls through to a recompile.
            if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
                mark_used(&path, &meta);
                return Ok(component);
            }
        }
        let bytes = source.read(hex_digest)?;
        let component = Component::new(engine, &bytes)?;
        if let Ok(serialized) = component.serialize()
            && store_atomically(&self.dir, &path, &serialized).is_ok()
        {
            // Only a compile adds to the cache, and it took seconds: the
            // directory's listing costs nothing beside it.
            prune(&self.dir, self.budget, &path);
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

/// Records that the artifact at `path` (which `meta` describes) was used,
/// as its modification time, unless a use was recorded within the day. A
/// cache that cannot be written only loses the order of its entries.
fn mark_used(path: &Path, meta: &std::fs::Metadata) {
    let now = SystemTime::now();
    let stale = meta.modified().map_or(true, |used| {
        now.duration_since(used).is_ok_and(|age| age > TOUCH_AFTER)
    });
    if stale && let Ok(file) = std::fs::File::options().write(true).open(path) {
        let _ = file.set_modified(now);
    }
}

/// Removes the compiled artifacts in `dir` least recently used first
/// until what remains fits in `budget` bytes, never `keep` (the one just
/// stored), and temporary files a dead process left. Another process
/// loading an artifact removed here either has it mapped already (the
/// mapping stays valid) or finds it missing and compiles it again.
fn prune(dir: &Path, budget: u64, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut artifacts = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let used = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".cwasm") {
            artifacts.push((used, meta.len(), path));
        } else if name.contains(".tmp.")
            && now
                .duration_since(used)
                .is_ok_and(|age| age > ABANDONED_AFTER)
        {
            let _ = std::fs::remove_file(&path);
        }
    }
    let mut total: u64 = artifacts.iter().map(|(_, size, _)| size).sum();
    artifacts.sort();
    for (_, size, path) in artifacts {
        if total <= budget {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            total -= size;
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

    fn aged(path: &Path, age: Duration) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - age).unwrap();
    }

    fn modified(path: &Path) -> SystemTime {
        std::fs::metadata(path).unwrap().modified().unwrap()
    }

    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// Past the budget, the least recently used artifacts go first, never
    /// the one just stored, and only as many as needed; a temporary file a
    /// dead process left goes too, one being written does not, and the
    /// digest memo is not touched.
    #[test]
    fn pruning_removes_the_least_recently_used_artifacts_down_to_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name);
        for (name, days) in [("just-stored", 5), ("a", 3), ("b", 2), ("c", 1)] {
            let path = at(&format!("{name}-key.cwasm"));
            std::fs::write(&path, [0u8; 400]).unwrap();
            aged(&path, DAY * days);
        }
        std::fs::write(at("d-key.tmp.1"), b"left by a crash").unwrap();
        aged(&at("d-key.tmp.1"), Duration::from_secs(7200));
        std::fs::write(at("e-key.tmp.2"), b"being written").unwrap();
        let memo = DigestMemo::new(dir.path());
        std::fs::create_dir_all(&memo.dir).unwrap();

        prune(dir.path(), 900, &at("just-stored-key.cwasm"));

        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "c-key.cwasm",
                "digests",
                "e-key.tmp.2",
                "just-stored-key.cwasm"
            ]
        );
    }

    /// A hit records its use once a day at most, so a hot artifact is not
    /// written at every load and a cold one moves to the front.
    #[test]
    fn a_hit_records_its_use_once_a_day() {
        let dir = tempfile::tempdir().unwrap();
        let cold = dir.path().join("cold.cwasm");
        let warm = dir.path().join("warm.cwasm");
        for path in [&cold, &warm] {
            std::fs::write(path, b"code").unwrap();
        }
        aged(&cold, DAY * 2);
        aged(&warm, Duration::from_secs(3600));
        let warm_before = modified(&warm);
        for path in [&cold, &warm] {
            mark_used(path, &std::fs::metadata(path).unwrap());
        }
        assert!(
            SystemTime::now().duration_since(modified(&cold)).unwrap() < Duration::from_secs(60)
        );
        assert_eq!(modified(&warm), warm_before);
    }

    /// The smallest component there is, made distinct by a custom section.
    fn component(tag: u8) -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        bytes.extend([0, 3, 1, b't', tag]);
        bytes
    }

    /// Through a real engine: compiling a component stores it and prunes
    /// the cache, so a cache over its budget keeps only what is in use.
    #[test]
    fn a_compile_that_stores_an_artifact_prunes_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let mut cache = ComponentCache::new(dir.path().to_path_buf(), &engine);
        let old = dir.path().join(format!("{}-old.cwasm", "0".repeat(64)));
        std::fs::write(&old, vec![0u8; 4096]).unwrap();
        aged(&old, DAY * 30);
        let first = component(1);
        let first_digest = bl_core::sha256_hex(&first);
        cache
            .load(&engine, ComponentSource::Bytes(&first), &first_digest)
            .unwrap();
        assert!(cache.is_cached(&first));
        assert!(old.exists(), "under the budget nothing is removed");

        cache.budget = std::fs::metadata(cache.path_for(&first)).unwrap().len();
        aged(&cache.path_for(&first), DAY);
        let second = component(2);
        cache
            .load(
                &engine,
                ComponentSource::Bytes(&second),
                &bl_core::sha256_hex(&second),
            )
            .unwrap();
        assert!(cache.is_cached(&second));
        assert!(!old.exists());
        assert!(
            !cache.is_cached(&first),
            "the least recently used goes first"
        );
    }
}
