//! On-disk cache of compiled components, keyed by the component's sha256 and
//! the engine's compatibility hash, so a process that loads a plugin it has
//! seen before skips cranelift entirely.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

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
    /// `hex_digest` is the sha256 of `bytes`, computed once by the caller.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
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
        let component = Component::new(engine, bytes)?;
        if let Ok(serialized) = component.serialize() {
            let _ = store_atomically(&self.dir, &path, &serialized);
        }
        Ok(component)
    }

    pub(crate) fn is_cached(&self, bytes: &[u8]) -> bool {
        self.path_for(bytes).is_file()
    }
}

fn store_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
