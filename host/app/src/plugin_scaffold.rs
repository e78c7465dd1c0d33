//! A new plugin crate (`bl plugin new`) that builds and runs as it is: a
//! gate, transform, completion contract or publication policy against the
//! SDK, with its config schema; and building a plugin crate with this
//! machine's wasm toolchain (`bl plugin build`, publish, rebuild).

use std::path::{Path, PathBuf};

use crate::error::AppError;

/// What `bl plugin build` made, and with which toolchain.
#[derive(Debug, Clone)]
pub struct BuildReport {
    pub built: bl_pluginbuild::Built,
    pub toolchain: String,
}

impl BuildReport {
    /// As `bl plugin build --json` prints it.
    pub fn to_json(&self) -> serde_json::Value {
        let toolchain = &self.toolchain;
        match &self.built {
            bl_pluginbuild::Built::PageModule(b) => serde_json::json!({"rebuilt": b.rebuilt,
                "page_module": b.module_path, "name": b.name, "module_digest": b.module_digest,
                "source_digest": b.source_digest, "toolchain": toolchain}),
            bl_pluginbuild::Built::Plugin(b) => serde_json::json!({"rebuilt": b.rebuilt,
                "component": b.component_path, "manifest_path": b.manifest_path,
                "manifest": b.manifest, "toolchain": toolchain}),
        }
    }
}

impl std::fmt::Display for BuildReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let toolchain = &self.toolchain;
        let state = |rebuilt| if rebuilt { "built" } else { "up to date" };
        match &self.built {
            bl_pluginbuild::Built::PageModule(b) => write!(
                f,
                "{}: {} (a page module, {toolchain} toolchain)\n  module {}  {}\n  source {}",
                state(b.rebuilt),
                b.name,
                b.module_path.display(),
                b.module_digest,
                b.source_digest
            ),
            bl_pluginbuild::Built::Plugin(b) => {
                let m = &b.manifest;
                write!(
                    f,
                    "{}: {} {} ({} world of {}, {toolchain} toolchain)\n  component {}  {}\n  source    {}",
                    state(b.rebuilt),
                    m.name,
                    m.version,
                    m.world,
                    m.wit_package,
                    b.component_path.display(),
                    m.component_digest,
                    m.source_digest
                )
            }
        }
    }
}

/// Builds the plugin crate at `dir` (into `out` and `target_dir`, by
/// default `target/plugins` and `target/wasm` under its cargo workspace).
pub fn build(
    dir: &Path,
    out: Option<PathBuf>,
    target_dir: Option<PathBuf>,
    force: bool,
) -> Result<BuildReport, AppError> {
    if bl_pluginbuild::polyglot::is_polyglot_plugin(dir) {
        let out = out.unwrap_or_else(|| dir.join("target/plugins"));
        let (built, tool) = bl_pluginbuild::polyglot::build_polyglot(dir, &out, force)
            .map_err(|e| AppError::refused(format!("plugin build {}: {e}", dir.display())))?;
        return Ok(BuildReport {
            built: bl_pluginbuild::Built::Plugin(built),
            toolchain: tool,
        });
    }
    let toolchain =
        bl_pluginbuild::WasmToolchain::detect().map_err(|e| AppError::refused(e.to_string()))?;
    let refused = |e: bl_pluginbuild::BuildError| {
        AppError::refused(format!("plugin build {}: {e}", dir.display()))
    };
    let defaults = bl_pluginbuild::BuildOptions::beside(dir).map_err(refused)?;
    let options = bl_pluginbuild::BuildOptions {
        out_dir: out.unwrap_or(defaults.out_dir),
        target_dir: target_dir.unwrap_or(defaults.target_dir),
        force,
    };
    let built = bl_pluginbuild::build(dir, &toolchain, &options).map_err(refused)?;
    Ok(BuildReport {
        built,
        toolchain: toolchain.name().to_string(),
    })
}

/// Builds a plugin crate that must be a plugin (not a page module), from
/// a copy of its sources at one fixed place, so that the same sources and
/// toolchain give the same bytes on any machine (for publishing and
/// rebuilding).
pub fn build_plugin(
    dir: &Path,
    out: PathBuf,
    target_dir: PathBuf,
) -> Result<(bl_pluginbuild::BuiltPlugin, &'static str), AppError> {
    let toolchain =
        bl_pluginbuild::WasmToolchain::detect().map_err(|e| AppError::refused(e.to_string()))?;
    let options = bl_pluginbuild::BuildOptions {
        out_dir: out,
        target_dir,
        force: true,
    };
    let built = bl_pluginbuild::build_reproducibly(dir, &toolchain, &options)
        .map_err(|e| AppError::refused(format!("plugin build {}: {e}", dir.display())))?;
    match (built, toolchain.name()) {
        (bl_pluginbuild::Built::Plugin(built), toolchain) => Ok((built, toolchain)),
        (bl_pluginbuild::Built::PageModule(_), _) => Err(AppError::refused(format!(
            "{} is a page module, not a plugin",
            dir.display()
        ))),
    }
}

/// The kind of plugin to scaffold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gate,
    Transform,
    Contract,
    Policy,
}

impl Kind {
    /// As `--kind` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Gate => "gate",
            Kind::Transform => "transform",
            Kind::Contract => "contract",
            Kind::Policy => "policy",
        }
    }
}

/// The SDK a new plugin depends on: `--sdk`, `BL_SDK_PATH`, or the `sdk/`
/// of the checkout or install this `bl` came from.
fn find_sdk(explicit: Option<PathBuf>) -> Result<PathBuf, SdkNotFound> {
    let candidates: Vec<PathBuf> =
        match explicit.or_else(|| std::env::var_os("BL_SDK_PATH").map(PathBuf::from)) {
            Some(p) => vec![p],
            None => {
                let exe = std::env::current_exe().map_err(|e| SdkNotFound(e.to_string()))?;
                let dir = exe.parent().unwrap_or(Path::new("."));
                vec![dir.join("../../sdk"), dir.join("../share/bl/sdk")]
            }
        };
    candidates
        .iter()
        .find(|p| p.join("Cargo.toml").is_file())
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .ok_or_else(|| {
            SdkNotFound(format!(
                "cannot find the bl plugin SDK (looked in {}); pass --sdk PATH or set BL_SDK_PATH",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// Why no SDK was found, in words.
struct SdkNotFound(String);

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Writes the crate of plugin `name` into `dir` (by default `./NAME`),
/// depending on the SDK at `sdk` (by default the one beside this bl).
/// Refuses a directory that exists.
pub fn new_plugin(
    name: &str,
    kind: Kind,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
) -> Result<PathBuf, AppError> {
    let refused = |why: String| AppError::refused(format!("plugin new {name}: {why}"));
    if !valid_name(name) {
        return Err(refused(
            "a plugin name is lowercase letters, digits and `-`, starting with a letter".into(),
        ));
    }
    let sdk = find_sdk(sdk).map_err(|e| refused(e.0))?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        return Err(refused(format!(
            "{} already exists; pick another name or --dir",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir.join("src"))
        .map_err(|e| refused(format!("{}: {e}", dir.display())))?;
    let (description, metadata, source) = match kind {
        Kind::Gate => ("A gate.", String::new(), GATE),
        Kind::Contract => (
            "A completion contract.",
            format!("contract-patterns = [\"{name}.json\"]\n"),
            CONTRACT,
        ),
        Kind::Transform => ("A transform.", String::new(), TRANSFORM),
        Kind::Policy => ("A publication policy.", String::new(), POLICY),
    };
    let sdk_path = sdk.display().to_string().replace('\\', "/");
    let cargo = format!(
        r#"[package]
name = "{name}"
description = "{description}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
bl-plugin-sdk = {{ path = "{sdk_path}" }}
serde = {{ version = "1", features = ["derive"] }}

[package.metadata.bl]
config-schema = "config.schema.json"
{metadata}
[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
panic = "abort"
strip = true

# A standalone crate, not a member of any enclosing workspace.
[workspace]
"#
    );
    let schema = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "needle": { "type": "string", "description": "What to look for." }
  },
  "additionalProperties": false
}
"#;
    let files: [(&str, String); 3] = [
        ("Cargo.toml", cargo),
        ("config.schema.json", schema.to_string()),
        ("src/lib.rs", source.replace("{name}", name)),
    ];
    for (rel, text) in files {
        let path = dir.join(rel);
        std::fs::write(&path, text).map_err(|e| refused(format!("{}: {e}", path.display())))?;
    }
    Ok(dir)
}

const GATE: &str = r##"//! {name}: a gate. It passes when `README.md` exists and contains the
//! configured needle.

use bl_plugin_sdk::{Finding, Gate, PluginError, Severity, Verdict, Workspace};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_needle")]
    pub needle: String,
}

fn default_needle() -> String {
    "#".into()
}

pub struct Plugin;

impl Gate for Plugin {
    type Config = Config;

    fn check(ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        match ws.read_to_string("README.md") {
            Ok(text) if text.contains(&config.needle) => Ok(Verdict::pass("README.md has the needle")),
            Ok(_) => Ok(Verdict::fail("README.md lacks the needle").with_findings(vec![
                Finding::new(Severity::High, format!("no {:?} in README.md", config.needle)).at("README.md"),
            ])),
            Err(bl_plugin_sdk::FsError::NotFound(_)) => Ok(Verdict::fail("README.md is missing")),
            Err(e) => Err(PluginError::Capability(e.to_string())),
        }
    }
}

bl_plugin_sdk::export_gate!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::testing::NativeWorkspace;

    #[test]
    fn passes_with_the_needle() {
        let dir = std::env::temp_dir().join(format!("{name}-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("README.md"), "# hello").unwrap();
        let ws = NativeWorkspace::new(&dir).unwrap();
        let verdict = bl_plugin_sdk::run_gate::<Plugin>(&ws, "{}").unwrap();
        assert!(verdict.passed);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
"##;

const CONTRACT: &str = r##"//! {name}: a completion contract for `{name}.json`: the output must be a
//! JSON object written after the node was dispatched.

use bl_plugin_sdk::{Contract, ContractRequest, PluginError, Verdict, Workspace};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub needle: Option<String>,
}

pub struct Plugin;

impl Contract for Plugin {
    type Config = Config;

    fn check(ws: &dyn Workspace, request: &ContractRequest, _config: Config) -> Result<Verdict, PluginError> {
        let Some(entry) = ws.stat(&request.artifact).map_err(|e| PluginError::Capability(e.to_string()))? else {
            return Ok(Verdict::fail("missing"));
        };
        if entry.modified_ms < request.dispatch_started_ms {
            return Ok(Verdict::fail("stale: written before the node was dispatched"));
        }
        let text = ws.read_to_string(&request.artifact).map_err(|e| PluginError::Capability(e.to_string()))?;
        match bl_plugin_sdk::serde_json::from_str::<bl_plugin_sdk::serde_json::Value>(&text) {
            Ok(v) if v.is_object() => Ok(Verdict::pass("a JSON object")),
            _ => Ok(Verdict::fail("not a JSON object")),
        }
    }
}

bl_plugin_sdk::export_contract!(Plugin);
"##;

const TRANSFORM: &str = r##"//! {name}: a transform. It concatenates its inputs, in name order, into
//! every declared output.

use bl_plugin_sdk::{Inputs, Outputs, PluginError, Transform, TransformReport};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub needle: Option<String>,
}

pub struct Plugin;

impl Transform for Plugin {
    type Config = Config;

    fn run(inputs: &dyn Inputs, outputs: &mut dyn Outputs, _seed: &[u8], _config: Config) -> Result<TransformReport, PluginError> {
        let mut entries = inputs.entries();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let mut joined = Vec::new();
        for entry in &entries {
            joined.extend(inputs.read(&entry.name).map_err(|e| PluginError::Capability(e.to_string()))?);
        }
        for output in outputs.declared() {
            outputs.write(&output.name, &joined).map_err(|e| PluginError::Capability(e.to_string()))?;
        }
        Ok(TransformReport { summary: format!("joined {} inputs", entries.len()) })
    }
}

bl_plugin_sdk::export_transform!(Plugin);
"##;

const POLICY: &str = r##"//! {name}: a publication policy. It allows an effect once any approval
//! is recorded and none was rejected.

use bl_plugin_sdk::{Policy, PluginError, PublishDecision, PublishRequest};
use serde::Deserialize;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub needle: Option<String>,
}

pub struct Plugin;

impl Policy for Plugin {
    type Config = Config;

    fn decide(request: &PublishRequest, _config: Config) -> Result<PublishDecision, PluginError> {
        if request.approvals.iter().any(|a| !a.approved) {
            return Ok(PublishDecision::deny("an approval was rejected"));
        }
        if request.approvals.is_empty() {
            return Ok(PublishDecision::deny("no approval is recorded"));
        }
        Ok(PublishDecision::allow("approved"))
    }
}

bl_plugin_sdk::export_policy!(Plugin);
"##;

/// The world a kind's component exports, as `bl-plugin.toml` names it.
fn world_of(kind: Kind) -> &'static str {
    match kind {
        Kind::Gate => "gate",
        Kind::Contract => "completion-contract",
        Kind::Transform => "transform",
        Kind::Policy => "publication-policy",
    }
}

/// Writes a Python or JavaScript (`js`) plugin `name` into `dir` (by
/// default `./NAME`): its `bl-plugin.toml` and `app.py` or `app.js`, which
/// build as they are with `bl plugin build` and use bl's SDK for the
/// language. Refuses a directory that exists.
pub fn new_polyglot_plugin(
    name: &str,
    kind: Kind,
    lang: &str,
    dir: Option<PathBuf>,
) -> Result<PathBuf, AppError> {
    let refused = |why: String| AppError::refused(format!("plugin new {name}: {why}"));
    if !valid_name(name) {
        return Err(refused(
            "a plugin name is lowercase letters, digits and `-`, starting with a letter".into(),
        ));
    }
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() {
        return Err(refused(format!(
            "{} already exists; pick another name or --dir",
            dir.display()
        )));
    }
    let write = |file: &str, text: &str| {
        std::fs::write(dir.join(file), text)
            .map_err(|e| refused(format!("{}: {e}", dir.join(file).display())))
    };
    std::fs::create_dir_all(&dir).map_err(|e| refused(format!("{}: {e}", dir.display())))?;
    write(
        "bl-plugin.toml",
        &format!(
            "name = \"{name}\"\nversion = \"0.1.0\"\ndescription = \"A {} written in {}.\"\nkind = \"{}\"\nlanguage = \"{lang}\"\n",
            kind.name(),
            if lang == "js" { "JavaScript" } else { "Python" },
            world_of(kind)
        ),
    )?;
    let (file, app) = match (lang, kind) {
        ("js", Kind::Gate) => ("app.js", JS_GATE),
        ("js", Kind::Contract) => ("app.js", JS_CONTRACT),
        ("js", Kind::Transform) => ("app.js", JS_TRANSFORM),
        ("js", Kind::Policy) => ("app.js", JS_POLICY),
        (_, Kind::Gate) => ("app.py", PY_GATE),
        (_, Kind::Contract) => ("app.py", PY_CONTRACT),
        (_, Kind::Transform) => ("app.py", PY_TRANSFORM),
        (_, Kind::Policy) => ("app.py", PY_POLICY),
    };
    write(file, app)?;
    Ok(dir)
}

const PY_GATE: &str = r#""""A gate: passes when the file named in its config exists and is not empty.
Config: {"file": "report.md"}."""

import bl_plugin
import wit_world


class WitWorld(wit_world.WitWorld):
    def check(self, root, config):
        path = bl_plugin.config(config, {"file": str})["file"]
        text = bl_plugin.read_text(root, path)
        if text is None:
            return bl_plugin.failed(f"{path} is missing")
        if not text.strip():
            return bl_plugin.failed(f"{path} is empty", [bl_plugin.finding("empty", rule="empty", path=path)])
        return bl_plugin.passed(f"{path} is there")
"#;

const PY_CONTRACT: &str = r#""""A completion contract: the declared output must exist and not be empty."""

import bl_plugin
import wit_world


class WitWorld(wit_world.WitWorld):
    def check(self, root, request, config):
        bl_plugin.config(config, {})
        text = bl_plugin.read_text(root, request.artifact)
        if not text:
            return bl_plugin.failed(f"{request.artifact} is missing or empty")
        return bl_plugin.passed(f"{request.artifact} is there")
"#;

const PY_TRANSFORM: &str = r#""""A transform: writes each declared output as the inputs' names, one a line."""

import bl_plugin
import wit_world


class WitWorld(wit_world.WitWorld):
    def run(self, inputs, outputs, seed, config):
        bl_plugin.config(config, {})
        names = "".join(f"{entry.name}\n" for entry in inputs.entries())
        for output in outputs.declared():
            outputs.write(output.name, names.encode())
        return bl_plugin.report(f"wrote {len(outputs.declared())} output(s)")
"#;

const PY_POLICY: &str = r#""""A publication policy: allows an effect only once an approval said yes."""

import bl_plugin
import wit_world


class WitWorld(wit_world.WitWorld):
    def decide(self, request, config):
        bl_plugin.config(config, {})
        if any(a.approved for a in request.approvals):
            return bl_plugin.allow("approved")
        return bl_plugin.deny("no approval said yes")
"#;

/// A new plugin, and how to build and try it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Scaffolded {
    pub created: PathBuf,
    pub kind: &'static str,
    pub build: String,
    pub test: String,
}

/// Writes a new plugin in `lang`, `rust`, `python` or `js` (see
/// [`new_plugin`], [`new_polyglot_plugin`]).
pub fn scaffold(
    name: &str,
    kind: Kind,
    lang: &str,
    dir: Option<PathBuf>,
    sdk: Option<PathBuf>,
) -> Result<Scaffolded, AppError> {
    let (created, test) = match lang {
        "rust" => {
            let dir = new_plugin(name, kind, dir, sdk)?;
            let test = format!("cargo test --manifest-path {}/Cargo.toml", dir.display());
            (dir, test)
        }
        "python" | "js" => {
            let dir = new_polyglot_plugin(name, kind, lang, dir)?;
            let plugin = dir.join(format!("target/plugins/{name}.wasm"));
            (dir, format!("bl plugin run {} …", plugin.display()))
        }
        other => {
            return Err(AppError::refused(format!(
                "plugin new {name}: --lang {other}: bl writes plugins in rust, python or js"
            )));
        }
    };
    Ok(Scaffolded {
        build: format!("bl plugin build {}", created.display()),
        kind: kind.name(),
        created,
        test,
    })
}

const JS_GATE: &str = r#"// A gate: passes when the file named in its config exists and is not empty.
// Config: {"file": "report.md"}.

import * as bl from './bl_plugin.js';

export function check(root, config) {
  const { file } = bl.config(config, { file: 'string' });
  const text = bl.readText(root, file);
  if (text === undefined) return bl.failed(`${file} is missing`);
  if (!text.trim()) return bl.failed(`${file} is empty`, [bl.finding('empty', 'medium', { rule: 'empty', path: file })]);
  return bl.passed(`${file} is there`);
}
"#;

const JS_CONTRACT: &str = r#"// A completion contract: the declared output must exist and not be empty.

import * as bl from './bl_plugin.js';

export function check(root, request, config) {
  bl.config(config, {});
  const text = bl.readText(root, request.artifact);
  if (!text) return bl.failed(`${request.artifact} is missing or empty`);
  return bl.passed(`${request.artifact} is there`);
}
"#;

const JS_TRANSFORM: &str = r#"// A transform: writes each declared output as the inputs' names, one a line.

import * as bl from './bl_plugin.js';

export function run(inputs, outputs, seed, config) {
  bl.config(config, {});
  const names = inputs.entries().map((entry) => `${entry.name}\n`).join('');
  const declared = outputs.declared();
  for (const output of declared) outputs.write(output.name, new TextEncoder().encode(names));
  return bl.report(`wrote ${declared.length} output(s)`);
}
"#;

const JS_POLICY: &str = r#"// A publication policy: allows an effect only once an approval said yes.

import * as bl from './bl_plugin.js';

export function decide(request, config) {
  bl.config(config, {});
  if (request.approvals.some((a) => a.approved)) return bl.allow('approved');
  return bl.deny('no approval said yes');
}
"#;
