//! bl's own catalog of loops (`examples/loops`: keyless and offline),
//! embedded in the binary so that it works from any install: listed and
//! copied by `bl loops`, and offered by the MCP catalog tools when a
//! workspace holds no loop packages of its own.

use std::path::{Path, PathBuf};

use include_dir::{Dir, include_dir};
use sha2::{Digest, Sha256};

use crate::error::AppError;

/// The catalog, as it was when bl was built.
pub static CATALOG: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../examples/loops");

/// The catalog loop `name`, if it is one.
pub fn catalog_loop(name: &str) -> Option<&'static Dir<'static>> {
    CATALOG
        .get_dir(name)
        .filter(|d| d.get_file(d.path().join("loop.yaml")).is_some())
}

/// Writes an embedded directory to `dest`.
pub fn extract(dir: &Dir, dest: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dest)?;
    for file in dir.files() {
        let rel = file.path().strip_prefix(dir.path()).unwrap_or(file.path());
        let target = dest.join(rel);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, file.contents())?;
    }
    for sub in dir.dirs() {
        let rel = sub.path().strip_prefix(dir.path()).unwrap_or(sub.path());
        extract(sub, &dest.join(rel))?;
    }
    Ok(())
}

fn fingerprint(dir: &Dir, hash: &mut Sha256) {
    for file in dir.files() {
        hash.update(file.path().to_string_lossy().as_bytes());
        hash.update(file.contents().len().to_le_bytes());
        hash.update(file.contents());
    }
    for sub in dir.dirs() {
        fingerprint(sub, hash);
    }
}

/// The whole catalog as directories on disk, to read as any package is
/// read: unpacked once per catalog content under the user's cache
/// (`$XDG_CACHE_HOME/bl`, else `~/.cache/bl`), by a rename so that two
/// processes never see half of it.
pub fn unpacked() -> Result<PathBuf, AppError> {
    let mut hash = Sha256::new();
    fingerprint(&CATALOG, &mut hash);
    let tag = hex::encode(&hash.finalize()[..8]);
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("bl");
    let dest = cache.join(format!("catalog-{tag}"));
    if dest.is_dir() {
        return Ok(dest);
    }
    let failed = |e: std::io::Error| {
        AppError::refused(format!(
            "{}: bl's catalog could not be unpacked: {e}",
            dest.display()
        ))
    };
    std::fs::create_dir_all(&cache).map_err(failed)?;
    let staging = tempfile::Builder::new()
        .prefix(".catalog-")
        .tempdir_in(&cache)
        .map_err(failed)?;
    extract(&CATALOG, staging.path()).map_err(failed)?;
    match std::fs::rename(staging.path(), &dest) {
        Ok(()) => {
            // Renamed away: nothing is left for the guard to remove.
            let _ = staging.keep();
            Ok(dest)
        }
        // Another process unpacked it first.
        Err(_) if dest.is_dir() => Ok(dest),
        Err(e) => Err(failed(e)),
    }
}
