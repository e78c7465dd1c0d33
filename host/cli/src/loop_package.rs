//! The content digest of a loop package directory.
//!
//! bl's own definition (bounded-loops computes its digest differently, and
//! that algorithm is not yet reproduced here): `sha256:` over the canonical
//! JSON `{"files": [{"path": P, "sha256": H}, …]}` of every regular file
//! below the directory, paths relative with `/` and sorted, leaving out
//! hidden entries and `__pycache__`. Symlinks are refused, so a package
//! cannot point its digest at files outside itself.

use std::path::Path;

use serde_json::json;

pub fn digest(dir: &Path) -> Result<String, String> {
    let mut files = Vec::new();
    walk(dir, "", &mut files)?;
    files.sort();
    let entries: Vec<_> = files
        .iter()
        .map(|(path, sha)| json!({"path": path, "sha256": sha}))
        .collect();
    Ok(bl_core::digest(&json!({ "files": entries })))
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, String)>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "__pycache__" {
            continue;
        }
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let kind = entry.file_type().map_err(|e| e.to_string())?;
        if kind.is_symlink() {
            return Err(format!(
                "{rel} is a symlink; a loop package must hold its own files"
            ));
        } else if kind.is_dir() {
            walk(&entry.path(), &rel, out)?;
        } else if kind.is_file() {
            let bytes = std::fs::read(entry.path()).map_err(|e| format!("{rel}: {e}"))?;
            out.push((rel, bl_core::sha256_hex(&bytes)));
        }
    }
    Ok(())
}
