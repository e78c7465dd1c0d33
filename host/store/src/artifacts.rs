//! Checking a run's content-addressed artifacts: `artifacts/objects/<hex>`
//! must hash to its name, and `artifacts/metadata/<hex>.json` must name the
//! same digest and size. Symlinks are never followed.

use std::path::Path;

use serde_json::Value;

/// Verifies every artifact under `dir` (a run's `artifacts/`). Returns how
/// many objects were checked, or the first problem.
pub fn verify_artifacts(dir: &Path) -> Result<usize, String> {
    let objects = dir.join("objects");
    let entries = match std::fs::read_dir(&objects) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(format!("{}: {e}", objects.display())),
    };
    let mut names: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    names.sort_by_key(|e| e.file_name());
    for entry in &names {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if !kind.is_file() {
            return Err(format!(
                "{}: not a regular file (symlinks are not trusted)",
                path.display()
            ));
        }
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let actual = bl_core::sha256_hex(&bytes);
        if actual != name {
            return Err(format!(
                "{}: content hashes to {actual}, not to its name",
                path.display()
            ));
        }
        let meta_path = dir.join("metadata").join(format!("{name}.json"));
        if let Ok(text) = std::fs::read_to_string(&meta_path) {
            let meta: Value = serde_json::from_str(&text)
                .map_err(|e| format!("{}: not JSON: {e}", meta_path.display()))?;
            if meta["digest"].as_str() != Some(&format!("sha256:{name}")) {
                return Err(format!(
                    "{}: field digest does not name its object",
                    meta_path.display()
                ));
            }
            if meta
                .get("size")
                .is_some_and(|s| s.as_u64() != Some(bytes.len() as u64))
            {
                return Err(format!(
                    "{}: field size is not the object's {} bytes",
                    meta_path.display(),
                    bytes.len()
                ));
            }
        }
    }
    Ok(names.len())
}
