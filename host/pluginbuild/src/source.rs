//! A plugin's source digest: one `sha256:` over every file its build reads.
//!
//! The set is the plugin crate's directory, the directory of every local
//! `path` dependency (followed through `workspace = true`), every extra path a
//! local crate lists in `[package.metadata.bl] sources`, and the enclosing
//! workspace's `Cargo.toml` and `Cargo.lock`. `target/` directories and
//! hidden entries are left out. Each file enters the digest as its path
//! relative to the plugin's workspace root plus its bytes, in sorted order,
//! so the digest does not depend on where the checkout lives.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::BuildError;

/// The package facts the pipeline needs from the plugin's Cargo.toml.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    /// The file stem cargo gives the cdylib (`-` becomes `_`).
    pub lib_name: String,
    pub version: String,
    pub description: String,
    /// `[package.metadata.bl] config-schema`: a JSON Schema file for the
    /// plugin's config, relative to the crate.
    pub config_schema: Option<PathBuf>,
    /// `[package.metadata.bl] contract-patterns`: the output basenames a
    /// completion contract checks, e.g. `["plan.json"]`.
    pub contract_patterns: Vec<String>,
    /// `[package.metadata.bl] kind = "page-module"`: a plain wasm module a
    /// page of bl's runs in the browser, not a plugin component.
    pub page_module: bool,
}

#[derive(Debug, Clone)]
pub struct SourceSet {
    pub package: Package,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Every file that went into the digest, relative to `root`.
    pub files: Vec<String>,
    /// The plugin's cargo workspace root (the crate itself when standalone).
    pub root: PathBuf,
    /// The directories walked for sources (each local crate, each extra
    /// source path), absolute.
    pub dirs: Vec<PathBuf>,
}

impl SourceSet {
    /// Whether a file written under `dir` would enter this digest: `dir`
    /// lies in a walked directory, not under a `target/` or hidden folder.
    pub fn covers(&self, dir: &Path) -> bool {
        let Ok(dir) = std::path::absolute(dir).map(|d| normalize(&d)) else {
            return false;
        };
        self.dirs.iter().any(|walked| {
            dir.strip_prefix(walked).is_ok_and(|rest| {
                !rest.components().any(|c| {
                    let name = c.as_os_str().to_string_lossy();
                    name == "target" || name.starts_with('.')
                })
            })
        })
    }
}

fn source_error(path: &Path, message: impl Into<String>) -> BuildError {
    BuildError::Source {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn read_toml(path: &Path) -> Result<toml::Table, BuildError> {
    let text = std::fs::read_to_string(path).map_err(|e| source_error(path, e.to_string()))?;
    text.parse::<toml::Table>()
        .map_err(|e| source_error(path, e.to_string()))
}

/// The nearest ancestor (or self) whose Cargo.toml has a `[workspace]` that
/// could hold `crate_dir`; the crate itself when there is none.
fn workspace_root(crate_dir: &Path) -> Result<PathBuf, BuildError> {
    let mut dir = Some(crate_dir);
    while let Some(candidate) = dir {
        let manifest = candidate.join("Cargo.toml");
        if manifest.is_file() && read_toml(&manifest)?.contains_key("workspace") {
            return Ok(candidate.to_path_buf());
        }
        dir = candidate.parent();
    }
    Ok(crate_dir.to_path_buf())
}

fn str_field(table: &toml::Table, key: &str) -> Option<String> {
    table.get(key).and_then(|v| v.as_str()).map(str::to_string)
}

fn read_package(
    crate_dir: &Path,
    manifest: &toml::Table,
    workspace: &toml::Table,
) -> Result<Package, BuildError> {
    let path = crate_dir.join("Cargo.toml");
    let package = manifest
        .get("package")
        .and_then(|p| p.as_table())
        .ok_or_else(|| source_error(&path, "no [package] table: is this a plugin crate?"))?;
    let ws_package = workspace
        .get("workspace")
        .and_then(|w| w.get("package"))
        .and_then(|p| p.as_table());
    // A field is either a string or `{ workspace = true }`.
    let field = |key: &str| -> Option<String> {
        match package.get(key) {
            Some(toml::Value::String(s)) => Some(s.clone()),
            Some(toml::Value::Table(t))
                if t.get("workspace").and_then(|w| w.as_bool()) == Some(true) =>
            {
                ws_package.and_then(|p| str_field(p, key))
            }
            _ => None,
        }
    };
    let name = field("name").ok_or_else(|| source_error(&path, "[package] has no name"))?;
    let lib_name = manifest
        .get("lib")
        .and_then(|l| l.as_table())
        .and_then(|l| str_field(l, "name"))
        .unwrap_or_else(|| name.replace('-', "_"));
    let bl_metadata = package
        .get("metadata")
        .and_then(|m| m.get("bl"))
        .and_then(|b| b.as_table());
    let config_schema = bl_metadata
        .and_then(|b| str_field(b, "config-schema"))
        .map(|p| crate_dir.join(p));
    let contract_patterns = bl_metadata
        .and_then(|b| b.get("contract-patterns"))
        .and_then(|v| v.as_array())
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let page_module =
        bl_metadata.and_then(|b| str_field(b, "kind")).as_deref() == Some("page-module");
    Ok(Package {
        page_module,
        config_schema,
        contract_patterns,
        lib_name,
        version: field("version").unwrap_or_else(|| "0.0.0".into()),
        description: field("description").unwrap_or_default(),
        name,
    })
}

/// Local path dependencies of one manifest, as absolute directories.
fn path_dependencies(
    crate_dir: &Path,
    manifest: &toml::Table,
    root: &Path,
    workspace: &toml::Table,
) -> Vec<PathBuf> {
    let ws_deps = workspace
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|d| d.as_table());
    let mut out = Vec::new();
    for section in ["dependencies", "build-dependencies"] {
        let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) else {
            continue;
        };
        for (name, spec) in deps {
            let Some(spec) = spec.as_table() else {
                continue;
            };
            if let Some(path) = spec.get("path").and_then(|p| p.as_str()) {
                out.push(crate_dir.join(path));
            } else if spec.get("workspace").and_then(|w| w.as_bool()) == Some(true)
                && let Some(path) = ws_deps
                    .and_then(|d| d.get(name))
                    .and_then(|d| d.get("path"))
                    .and_then(|p| p.as_str())
            {
                out.push(root.join(path));
            }
        }
    }
    out
}

fn extra_sources(crate_dir: &Path, manifest: &toml::Table) -> Vec<PathBuf> {
    manifest
        .get("package")
        .and_then(|p| p.get("metadata"))
        .and_then(|m| m.get("bl"))
        .and_then(|b| b.get("sources"))
        .and_then(|s| s.as_array())
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.as_str())
                .map(|s| crate_dir.join(s))
                .collect()
        })
        .unwrap_or_default()
}

/// Lexically normalises a path (no file system access): drops `.` and folds `..`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `path` relative to `base`, with `..` where it lies outside.
fn relative_to(path: &Path, base: &Path) -> String {
    let path: Vec<_> = path.components().collect();
    let base: Vec<_> = base.components().collect();
    let common = path.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> =
        std::iter::repeat_n("..".to_string(), base.len() - common).collect();
    parts.extend(
        path[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

fn collect_files(path: &Path, out: &mut BTreeSet<PathBuf>) -> Result<(), BuildError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| source_error(path, e.to_string()))?;
    if meta.is_file() {
        out.insert(path.to_path_buf());
    } else if meta.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| source_error(path, e.to_string()))?;
        for entry in entries {
            let entry = entry.map_err(|e| source_error(path, e.to_string()))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            collect_files(&entry.path(), out)?;
        }
    }
    // Symlinks and special files are not sources; a build that needs them
    // would not be reproducible from the digest anyway.
    Ok(())
}

/// Computes the source set and digest of the plugin crate at `crate_dir`.
pub fn source_digest(crate_dir: &Path) -> Result<SourceSet, BuildError> {
    let crate_dir = normalize(
        &std::path::absolute(crate_dir).map_err(|e| source_error(crate_dir, e.to_string()))?,
    );
    let root = workspace_root(&crate_dir)?;
    let workspace = read_toml(&root.join("Cargo.toml"))?;
    let manifest = read_toml(&crate_dir.join("Cargo.toml"))?;
    let package = read_package(&crate_dir, &manifest, &workspace)?;

    // Walk the local crate graph.
    let mut crates: BTreeSet<PathBuf> = BTreeSet::new();
    let mut extra: BTreeSet<PathBuf> = BTreeSet::new();
    let mut pending = vec![crate_dir.clone()];
    while let Some(dir) = pending.pop() {
        let dir = normalize(&dir);
        if !crates.insert(dir.clone()) {
            continue;
        }
        let manifest = read_toml(&dir.join("Cargo.toml"))?;
        pending.extend(path_dependencies(&dir, &manifest, &root, &workspace));
        extra.extend(extra_sources(&dir, &manifest).iter().map(|p| normalize(p)));
    }

    let mut files = BTreeSet::new();
    for dir in crates.iter().chain(&extra) {
        collect_files(dir, &mut files)?;
    }
    for name in ["Cargo.toml", "Cargo.lock"] {
        let path = root.join(name);
        if path.is_file() {
            files.insert(path);
        }
    }

    let mut relative: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in files {
        relative.insert(relative_to(&file, &root), file);
    }
    let mut hasher = Sha256::new();
    for (name, path) in &relative {
        let bytes = std::fs::read(path).map_err(|e| source_error(path, e.to_string()))?;
        // Length-prefixed, so no two different sets can hash alike.
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Ok(SourceSet {
        package,
        digest: bl_core::Sha256Digest::finish(hasher).to_string(),
        files: relative.into_keys().collect(),
        root,
        dirs: crates.into_iter().chain(extra).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// A workspace with a plugin, an SDK-like path dependency that lists an
    /// extra source directory, and a sibling crate that must not count.
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            &root.join("ws/Cargo.toml"),
            "[workspace]\nmembers = [\"p\", \"other\"]\n[workspace.dependencies]\nsdk = { path = \"../sdk\" }\n",
        );
        write(&root.join("ws/Cargo.lock"), "# lock\n");
        write(
            &root.join("ws/p/Cargo.toml"),
            "[package]\nname = \"my-gate\"\nversion = \"1.2.3\"\n[dependencies]\nsdk = { workspace = true }\n",
        );
        write(&root.join("ws/p/src/lib.rs"), "// gate\n");
        write(&root.join("ws/p/target/junk.wasm"), "junk");
        write(
            &root.join("ws/other/Cargo.toml"),
            "[package]\nname = \"other\"\nversion = \"0.1.0\"\n",
        );
        write(&root.join("ws/other/src/lib.rs"), "// other\n");
        write(
            &root.join("sdk/Cargo.toml"),
            "[package]\nname = \"sdk\"\nversion = \"0.1.0\"\n[package.metadata.bl]\nsources = [\"../wit\"]\n",
        );
        write(&root.join("sdk/src/lib.rs"), "// sdk\n");
        write(&root.join("wit/w.wit"), "package a:b;\n");
        dir
    }

    #[test]
    fn collects_crate_path_deps_extra_sources_and_workspace_files() {
        let dir = fixture();
        let set = source_digest(&dir.path().join("ws/p")).unwrap();
        assert_eq!(set.package.name, "my-gate");
        assert_eq!(set.package.lib_name, "my_gate");
        assert_eq!(set.package.version, "1.2.3");
        assert_eq!(
            set.files,
            vec![
                "../sdk/Cargo.toml",
                "../sdk/src/lib.rs",
                "../wit/w.wit",
                "Cargo.lock",
                "Cargo.toml",
                "p/Cargo.toml",
                "p/src/lib.rs",
            ]
        );
    }

    #[test]
    fn digest_changes_with_any_source_byte_and_ignores_unrelated_files() {
        let dir = fixture();
        let plugin = dir.path().join("ws/p");
        let before = source_digest(&plugin).unwrap().digest;
        std::fs::write(dir.path().join("ws/other/src/lib.rs"), "// changed\n").unwrap();
        std::fs::write(dir.path().join("ws/p/target/junk.wasm"), "changed").unwrap();
        assert_eq!(source_digest(&plugin).unwrap().digest, before);
        std::fs::write(dir.path().join("wit/w.wit"), "package a:c;\n").unwrap();
        assert_ne!(source_digest(&plugin).unwrap().digest, before);
    }

    #[test]
    fn digest_does_not_depend_on_checkout_location() {
        let a = fixture();
        let b = fixture();
        assert_eq!(
            source_digest(&a.path().join("ws/p")).unwrap().digest,
            source_digest(&b.path().join("ws/p")).unwrap().digest
        );
    }
}
