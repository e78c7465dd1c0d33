//! A plugin registry served as a static web tree (`--registry
//! https://…`): mirrored into bl's cache, file by file, then read exactly
//! as a registry directory is. Nothing fetched is trusted: the index's
//! signatures and each component's digest are checked on the mirror, as
//! on any directory. Only `index.json` and the components asked for are
//! fetched, each within the registry's size caps.

use std::path::{Path, PathBuf};

use crate::error::{AppError, AppResult};

/// The file in a mirror that names where it was fetched from.
const SOURCE: &str = ".source-url";

/// Whether a registry argument is a URL.
pub fn is_url(arg: &str) -> bool {
    arg.starts_with("http://") || arg.starts_with("https://")
}

/// Where the registry at `url` is mirrored: under bl's cache, named by the
/// URL's digest.
fn mirror_of(url: &str) -> AppResult<PathBuf> {
    let cache = crate::paths::component_cache_dir()
        .and_then(|c| c.parent().map(Path::to_path_buf))
        .ok_or_else(|| AppError::refused("no cache directory: set BL_CACHE_DIR or HOME"))?;
    let digest = bl_core::sha256_hex(url.as_bytes());
    Ok(cache.join("registries").join(&digest[..16]))
}

/// Fetches `url` into `to`, refusing a body over `limit` bytes, and one
/// whose sha256 is not `signed` (when given) before anything is written.
fn fetch(url: &str, to: &Path, limit: u64, signed: Option<&str>) -> AppResult<()> {
    let failed = |why: String| AppError::refused(format!("{url}: {why}"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let bytes = runtime.block_on(async {
        let mut response = reqwest::Client::new()
            .get(url)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("the server answered {}", response.status())));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > limit {
                return Err(failed(format!("over the {limit}-byte cap")));
            }
        }
        Ok(body)
    })?;
    if let Some(signed) = signed {
        let found = format!("sha256:{}", bl_core::sha256_hex(&bytes));
        if found != signed {
            return Err(failed(format!(
                "its bytes have {found}, but the signed index says {signed}; nothing was written"
            )));
        }
    }
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    }
    let staged = to.with_extension("part");
    std::fs::write(&staged, &bytes).map_err(|e| failed(format!("{}: {e}", staged.display())))?;
    std::fs::rename(&staged, to).map_err(|e| failed(format!("{}: {e}", to.display())))
}

/// Mirrors the registry at `url` (its index) and returns the mirror's
/// directory, to be read as a registry directory.
pub fn mirror(url: &str) -> AppResult<PathBuf> {
    let dir = mirror_of(url)?;
    let base = url.trim_end_matches('/');
    fetch(
        &format!("{base}/{}", bl_registry::INDEX),
        &dir.join(bl_registry::INDEX),
        bl_registry::MAX_INDEX_BYTES,
        None,
    )?;
    std::fs::write(dir.join(SOURCE), base)
        .map_err(|e| AppError::refused(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

/// The URL a mirror was fetched from, when `dir` is a mirror.
pub fn source_of(dir: &Path) -> Option<String> {
    std::fs::read_to_string(dir.join(SOURCE)).ok()
}

/// Fetches `name@version`'s component into the mirror at `dir`, when `dir`
/// is a mirror (a directory registry has it already), refused before it is
/// written when its bytes are not the ones the index signed. The name and
/// version were checked by the index's reader: a name is never a path.
pub fn fetch_component(dir: &Path, name: &str, version: &bl_registry::Version) -> AppResult<()> {
    let (signed, version) = (version.component_sha256.as_str(), version.version.as_str());
    let Some(base) = source_of(dir) else {
        return Ok(());
    };
    let path = bl_registry::component_path(dir, name, version);
    let rel = path
        .strip_prefix(dir)
        .unwrap_or(&path)
        .display()
        .to_string();
    fetch(
        &format!("{base}/{rel}"),
        &path,
        bl_registry::MAX_COMPONENT_BYTES,
        Some(signed),
    )
}
