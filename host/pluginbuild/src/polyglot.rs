//! Plugins written in Python or JavaScript. Such a plugin is a directory
//! with a `bl-plugin.toml` (its name, version, kind, language and entry)
//! and its modules. componentize-py (Python) or componentize-js
//! (JavaScript) builds it against bl's minimal worlds (`wit-minimal`, which
//! import only the world's own capability), with bl's SDK for the language
//! (`sdk-py`, `sdk-js`) beside it; the component is stamped with the digest
//! of everything that went into it, and gets a manifest, as a Rust plugin
//! does.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::component::{stamp_component, summarize};
use crate::{BuildError, BuiltPlugin, PluginManifest, io_error, up_to_date, write_atomically};

/// The file that makes a directory a Python or JavaScript plugin.
pub const PLUGIN_FILE: &str = "bl-plugin.toml";

/// The componentize-py release bl builds Python plugins with.
pub const COMPONENTIZE_PY: &str = "0.25.1";

/// The componentize-js release bl builds JavaScript plugins with.
pub const COMPONENTIZE_JS: &str = "0.23.0";

/// `bl-plugin.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginFile {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub description: String,
    /// gate, completion-contract, transform or publication-policy.
    pub kind: String,
    /// python or js.
    pub language: String,
    /// Python: the module that defines `WitWorld` (default `app`).
    /// JavaScript: the file that exports the world's function (default
    /// `app.js`).
    #[serde(default)]
    pub entry: Option<String>,
    /// A JSON Schema file for the config, relative to the plugin.
    #[serde(default)]
    pub config_schema: Option<String>,
}

impl PluginFile {
    fn entry(&self) -> String {
        self.entry.clone().unwrap_or_else(|| {
            if self.language == "js" {
                "app.js"
            } else {
                "app"
            }
            .to_string()
        })
    }
}

/// Whether `dir` holds a plugin written in Python or JavaScript.
pub fn is_polyglot_plugin(dir: &Path) -> bool {
    dir.join(PLUGIN_FILE).is_file()
}

/// Reads `bl-plugin.toml`, refusing what bl cannot build.
pub fn read_plugin_file(dir: &Path) -> Result<PluginFile, BuildError> {
    let path = dir.join(PLUGIN_FILE);
    let text = std::fs::read_to_string(&path).map_err(io_error(&path))?;
    let file: PluginFile = toml::from_str(&text).map_err(|e| BuildError::Source {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let refuse = |message: String| BuildError::Source {
        path: path.clone(),
        message,
    };
    let name_ok = (1..=64).contains(&file.name.len())
        && file.name.starts_with(|c: char| c.is_ascii_lowercase())
        && file
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !name_ok {
        return Err(refuse(format!(
            "name = {:?}: a plugin name is 1-64 of a-z, 0-9 and '-', starting with a letter",
            file.name
        )));
    }
    if !["python", "js"].contains(&file.language.as_str()) {
        return Err(refuse(format!(
            "language = {:?}: bl builds python and js plugins from a bl-plugin.toml (Rust plugins are crates)",
            file.language
        )));
    }
    if ![
        "gate",
        "completion-contract",
        "transform",
        "publication-policy",
    ]
    .contains(&file.kind.as_str())
    {
        return Err(refuse(format!(
            "kind = {:?}: use gate, completion-contract, transform or publication-policy",
            file.kind
        )));
    }
    Ok(file)
}

/// Where bl's own files for other languages are: beside the bl executable
/// (`share/bl/…`), else this checkout's.
fn shipped(leaf: &str) -> Result<PathBuf, BuildError> {
    let mut candidates = Vec::new();
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(exe_dir.join("../share/bl").join(leaf));
    }
    candidates.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(leaf),
    );
    candidates
        .iter()
        .find(|c| c.is_dir())
        .map(|c| c.canonicalize().unwrap_or_else(|_| c.clone()))
        .ok_or_else(|| BuildError::Source {
            path: candidates[0].clone(),
            message: format!("bl's {leaf} directory is not installed beside bl"),
        })
}

/// componentize-py: `BL_COMPONENTIZE_PY`, else the one `scripts/dev setup`
/// installs in this checkout, else the one on PATH; with its version.
fn componentize_py() -> Result<(PathBuf, String), BuildError> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("BL_COMPONENTIZE_PY")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/polyglot/venv/bin/componentize-py"),
    );
    candidates.push(PathBuf::from("componentize-py"));
    for program in candidates {
        if let Ok(out) = Command::new(&program).arg("--version").output()
            && out.status.success()
        {
            let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
            return Ok((program, version));
        }
    }
    Err(BuildError::Source {
        path: PathBuf::from("componentize-py"),
        message: format!(
            "componentize-py is not installed: run `scripts/dev setup`, or `pip install componentize-py=={COMPONENTIZE_PY}` and put it on PATH (or set BL_COMPONENTIZE_PY)"
        ),
    })
}

/// componentize-js's command line: `BL_COMPONENTIZE_JS` (its `cli.js`),
/// else the one `scripts/dev setup` installs in this checkout; run by node.
fn componentize_js() -> Result<(PathBuf, String), BuildError> {
    let cli = std::env::var_os("BL_COMPONENTIZE_JS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join(
                "../../target/polyglot/node_modules/@bytecodealliance/componentize-js/src/cli.js",
            )
        });
    let runs = Command::new("node")
        .arg(&cli)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        return Err(BuildError::Source {
            path: cli,
            message: format!(
                "componentize-js (with node) is not installed: run `scripts/dev setup`, or `npm install @bytecodealliance/componentize-js@{COMPONENTIZE_JS}` and set BL_COMPONENTIZE_JS to its src/cli.js"
            ),
        });
    }
    let version = Command::new("node")
        .arg(&cli)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    Ok((cli, format!("componentize-js {version}")))
}

/// Copies the plain files under `from` into `to` (as [`files_under`] lists them).
fn copy_sources(from: &Path, to: &Path) -> Result<(), BuildError> {
    let mut files = Vec::new();
    files_under(from, &mut files)?;
    for file in files {
        let dest = to.join(file.strip_prefix(from).unwrap_or(&file));
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(io_error(parent))?;
        }
        std::fs::copy(&file, &dest).map_err(io_error(&file))?;
    }
    Ok(())
}

/// The module a JavaScript plugin is built from: it exports the world's
/// function, the plugin's own behind `guarded` (sdk-js).
const GUARDED_ENTRY: &str = "bl_entry.js";

fn guarded_entry(file: &PluginFile) -> String {
    let function = match file.kind.as_str() {
        "transform" => "run",
        "publication-policy" => "decide",
        _ => "check",
    };
    format!(
        "// Written by `bl plugin build`: {entry}'s `{function}`, behind the SDK's guard.\n\
         import * as plugin from './{entry}';\n\
         import {{ guarded }} from './bl_plugin.js';\n\
         export const {function} = guarded(plugin.{function}, '{function}', '{entry}');\n",
        entry = file.entry(),
    )
}

/// Every plain file under `dir`, but dot files, `target` and `__pycache__`.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), BuildError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io_error(dir))?
        .collect::<Result<_, _>>()
        .map_err(io_error(dir))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "__pycache__" {
            continue;
        }
        let kind = entry.file_type().map_err(io_error(dir))?;
        if kind.is_dir() {
            files_under(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// The digest of a Python plugin's build inputs: its files, the Python
/// SDK, the WIT it is built against, and the componentize-py version.
fn inputs_digest(roots: &[(&str, &Path)], tool: &str) -> Result<String, BuildError> {
    let mut hasher = Sha256::new();
    hasher.update((tool.len() as u64).to_le_bytes());
    hasher.update(tool.as_bytes());
    for (label, root) in roots {
        let mut files = Vec::new();
        files_under(root, &mut files)?;
        for file in files {
            let name = format!(
                "{label}/{}",
                file.strip_prefix(root).unwrap_or(&file).display()
            );
            let bytes = std::fs::read(&file).map_err(io_error(&file))?;
            hasher.update((name.len() as u64).to_le_bytes());
            hasher.update(name.as_bytes());
            hasher.update((bytes.len() as u64).to_le_bytes());
            hasher.update(&bytes);
        }
    }
    Ok(bl_core::Sha256Digest::finish(hasher).to_string())
}

/// What componentize-py says when the plugin's own code raised while it
/// was built: that traceback alone, without the one of componentize-py's
/// own wrapper around it and the cause it then repeats. Anything else is
/// kept whole.
fn plugins_own_traceback(said: &str) -> &str {
    let Some(start) = said.find("AssertionError: Traceback (most recent call last):") else {
        return said;
    };
    let own = &said[start + "AssertionError: ".len()..];
    own.find("\n\nCaused by:")
        .map_or(own, |end| &own[..end])
        .trim_end()
}

/// Builds the Python or JavaScript plugin at `dir` into `out_dir` (unless
/// a build of the same inputs is there already); with the tool's version.
pub fn build_polyglot(
    dir: &Path,
    out_dir: &Path,
    force: bool,
) -> Result<(BuiltPlugin, String), BuildError> {
    let file = read_plugin_file(dir)?;
    let python = file.language == "python";
    let (tool, version) = if python {
        componentize_py()?
    } else {
        componentize_js()?
    };
    let sdk = shipped(if python { "sdk-py" } else { "sdk-js" })?;
    let wit = shipped("wit-minimal")?;
    let wit_plugin = shipped("wit/plugin")?;
    let digest = inputs_digest(
        &[
            ("plugin", dir),
            ("sdk", &sdk),
            ("wit-minimal", &wit),
            ("wit/plugin", &wit_plugin),
        ],
        &version,
    )?;
    std::fs::create_dir_all(out_dir).map_err(io_error(out_dir))?;
    let component_path = out_dir.join(format!("{}.wasm", file.name));
    let manifest_path = out_dir.join(format!("{}.plugin.json", file.name));
    if !force && let Some(manifest) = up_to_date(&component_path, &manifest_path, &digest) {
        let built = BuiltPlugin {
            component_path,
            manifest_path,
            manifest,
            rebuilt: false,
        };
        return Ok((built, version));
    }
    let staged = out_dir.join(format!(".{}.componentize.wasm", file.name));
    // Built from a copy of exactly the files the digest covers (never a
    // `.venv` or `target/` inside the plugin's directory).
    let scratch = out_dir.join(format!(".{}.build", file.name));
    let _ = std::fs::remove_dir_all(&scratch);
    let sources = scratch.join("plugin");
    copy_sources(dir, &sources)?;
    let out = if python {
        // With no site-packages: componentize-py adds an active venv's, else
        // python3's own and the user's, so a build would hold the builder's
        // packages, which are neither the plugin's nor under its digest.
        let no_packages = scratch.join("env");
        let site_packages = no_packages.join("lib/site-packages");
        std::fs::create_dir_all(&site_packages).map_err(io_error(&site_packages))?;
        Command::new(&tool)
            .env("VIRTUAL_ENV", &no_packages)
            // Its own stack, under a Python traceback, says nothing to the
            // plugin's author.
            .env("RUST_LIB_BACKTRACE", "0")
            .arg("-d")
            .arg(&wit)
            .args([
                "-w",
                &format!("bl:minimal/{}", file.kind),
                "componentize",
                "-p",
            ])
            .arg(&sources)
            .arg("-p")
            .arg(&sdk)
            .arg(file.entry())
            .arg("-o")
            .arg(&staged)
            .output()
    } else {
        // The SDK is imported as `./bl_plugin.js`: it is put beside the
        // plugin's files, with the entry bl builds: the plugin's function
        // behind the SDK's guard, so that whatever it throws reaches the
        // operator as a plugin error saying what and where.
        copy_sources(&sdk, &sources)?;
        let entry = sources.join(GUARDED_ENTRY);
        std::fs::write(&entry, guarded_entry(&file)).map_err(io_error(&entry))?;
        Command::new("node")
            .arg(&tool)
            .arg(&entry)
            .arg("-w")
            .arg(&wit)
            .args([
                "-n",
                &file.kind,
                "-d",
                "random",
                "clocks",
                "http",
                "fetch-event",
                "-o",
            ])
            .arg(&staged)
            .output()
    };
    let _ = std::fs::remove_dir_all(&scratch);
    let out = out.map_err(io_error(&tool))?;
    if !out.status.success() {
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
        let said = if python {
            plugins_own_traceback(&said)
        } else {
            &said
        };
        let hint = if python && said.contains("ModuleNotFoundError") {
            "\nA Python plugin is built from its own directory and bl's SDK only, never from packages installed on this machine: copy a pure-Python package it imports into the plugin's directory, so that the build and its signed digest hold it."
        } else {
            ""
        };
        return Err(BuildError::Source {
            path: dir.to_path_buf(),
            message: format!("{version} could not build it: {said}{hint}"),
        });
    }
    let mut bytes = std::fs::read(&staged).map_err(io_error(&staged))?;
    let _ = std::fs::remove_file(&staged);
    stamp_component(&mut bytes, &digest);
    let summary = summarize(&bytes)?;
    let config_schema = match &file.config_schema {
        None => None,
        Some(rel) => {
            let path = dir.join(rel);
            let text = std::fs::read_to_string(&path).map_err(io_error(&path))?;
            Some(serde_json::from_str(&text).map_err(|e| BuildError::Source {
                path: path.clone(),
                message: format!("the config schema is not JSON: {e}"),
            })?)
        }
    };
    let manifest = PluginManifest {
        name: file.name.clone(),
        version: file.version.clone(),
        description: file.description.clone(),
        world: file.kind.clone(),
        wit_package: summary.wit_package.clone().unwrap_or_default(),
        capabilities: summary.capabilities.clone(),
        config_schema,
        contract_patterns: Vec::new(),
        source_digest: digest,
        component_digest: summary.component_digest.clone(),
    };
    write_atomically(&component_path, &bytes)?;
    let text = serde_json::to_string_pretty(&manifest).expect("a manifest serialises");
    write_atomically(&manifest_path, text.as_bytes())?;
    Ok((
        BuiltPlugin {
            component_path,
            manifest_path,
            manifest,
            rebuilt: true,
        },
        version,
    ))
}
