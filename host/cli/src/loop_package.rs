//! The content digest of a loop package directory.
//!
//! bl's own definition (bounded-loops computes its digest differently, and
//! that algorithm is not yet reproduced here), over the same content that
//! bounded-loops' digest covers, as observed by probing it: every file's
//! bytes and executable bit, and every directory, empty ones included; not
//! the package directory's own name, other mode bits or times. Caches and
//! VCS metadata are left out (`.git`, `.bounded-loops`, `__pycache__`,
//! `.pytest_cache`, `.mypy_cache`, `.ruff_cache`, `.DS_Store`, and files
//! ending `.pyc` or `.pyo`).
//!
//! The digest is `sha256:` over the canonical JSON
//! `{"entries": [{"path": P, "kind": "dir"} | {"path": P, "kind": "file",
//! "executable": B, "sha256": H}, …]}`, paths relative with `/`, sorted.
//! Symlinks are refused, so a package cannot point its digest at files
//! outside itself.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{Value, json};

/// Names left out wherever they appear, as files or directories.
const IGNORED_NAMES: &[&str] = &[
    ".git",
    ".bounded-loops",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".DS_Store",
];
/// File suffixes left out (compiled Python).
const IGNORED_FILE_SUFFIXES: &[&str] = &[".pyc", ".pyo"];

pub fn digest(dir: &Path) -> Result<String, String> {
    let mut entries = Vec::new();
    walk(dir, "", &mut entries)?;
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    let entries: Vec<Value> = entries.into_iter().map(|(_, entry)| entry).collect();
    Ok(bl_core::digest(&json!({ "entries": entries })))
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, Value)>) -> Result<(), String> {
    let listing = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in listing {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if IGNORED_NAMES.contains(&name.as_str()) {
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
                "{rel} is a symlink; a loop package must hold its own files (copy the target in)"
            ));
        } else if kind.is_dir() {
            out.push((rel.clone(), json!({"path": rel, "kind": "dir"})));
            walk(&entry.path(), &rel, out)?;
        } else if kind.is_file() {
            if IGNORED_FILE_SUFFIXES.iter().any(|s| name.ends_with(s)) {
                continue;
            }
            let bytes = std::fs::read(entry.path()).map_err(|e| format!("{rel}: {e}"))?;
            let mode = entry
                .metadata()
                .map_err(|e| format!("{rel}: {e}"))?
                .permissions()
                .mode();
            out.push((
                rel.clone(),
                json!({"path": rel, "kind": "file", "executable": mode & 0o111 != 0,
                       "sha256": bl_core::sha256_hex(&bytes)}),
            ));
        } else {
            return Err(format!(
                "{rel} is neither a file nor a directory; a loop package holds only those"
            ));
        }
    }
    Ok(())
}
