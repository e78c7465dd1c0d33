//! bl's plugin build pipeline: plugin source → core wasm module → component.
//!
//! This crate owns three things: finding a wasm toolchain on this machine
//! ([`toolchain`]), computing a plugin's *source digest* over every file its
//! build reads ([`source`]), and turning the core module cargo produced into a
//! component stamped with that digest ([`component`]). The stamp is what lets
//! anyone check that a component was built from the source in front of them.
//! A crate marked `kind = "page-module"` is built the same way into a plain
//! module, stamped alike, for one of bl's pages to run in the browser.
//!
//! It runs cargo as a child process and reads and writes files; it never
//! loads or runs a plugin (that is `bl-plugins`).

pub mod component;
pub mod polyglot;
pub mod reproducible;
pub mod source;
pub mod toolchain;

use std::path::{Path, PathBuf};
use std::process::Command;

pub use component::{
    ComponentSummary, SOURCE_DIGEST_SECTION, imports, read_source_digest, summarize,
};
pub use reproducible::build_reproducibly;
pub use source::{SourceSet, source_digest};
pub use toolchain::{ToolchainError, WasmToolchain, doctor_check};

pub use bl_core::plugin::{PluginManifest, WIT_PACKAGE};

/// The result of [`build`].
#[derive(Debug, Clone)]
pub struct BuiltPlugin {
    pub component_path: PathBuf,
    pub manifest_path: PathBuf,
    pub manifest: PluginManifest,
    /// False when an up-to-date component was already there.
    pub rebuilt: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    #[error("{path}: {message}")]
    Source { path: PathBuf, message: String },
    #[error(
        "cargo failed building {crate_name} for wasm (exit status {status}); its output is above"
    )]
    Cargo { crate_name: String, status: String },
    #[error("{0}")]
    Component(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub(crate) fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Options for [`build`].
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Where `<name>.wasm` and `<name>.plugin.json` go.
    pub out_dir: PathBuf,
    /// Cargo's target directory for wasm builds; one subdirectory per toolchain.
    pub target_dir: PathBuf,
    /// Rebuild even when the stamped source digest matches.
    pub force: bool,
}

impl BuildOptions {
    /// The defaults, which depend on the plugin and never on the current
    /// directory: `target/plugins` and `target/wasm` under the plugin's
    /// cargo workspace root (the crate itself when it stands alone).
    pub fn beside(crate_dir: &Path) -> Result<BuildOptions, BuildError> {
        Ok(BuildOptions::beside_sources(&source_digest(crate_dir)?))
    }

    /// [`BuildOptions::beside`], for sources whose digest is already taken.
    pub fn beside_sources(sources: &SourceSet) -> BuildOptions {
        BuildOptions {
            out_dir: sources.root.join("target/plugins"),
            target_dir: sources.root.join("target/wasm"),
            force: false,
        }
    }
}

/// A page module [`build`] made or found up to date: a plain wasm module,
/// stamped with its source digest, that one of bl's pages runs in the
/// browser.
#[derive(Debug, Clone)]
pub struct BuiltPageModule {
    pub name: String,
    pub module_path: PathBuf,
    pub source_digest: String,
    /// `sha256:` of the module's bytes.
    pub module_digest: String,
    pub rebuilt: bool,
}

/// What [`build`] made of a crate.
#[derive(Debug, Clone)]
pub enum Built {
    Plugin(BuiltPlugin),
    PageModule(BuiltPageModule),
}

/// Builds the crate at `crate_dir` into a component under `out_dir` (or,
/// for a crate marked `kind = "page-module"`, into a plain module there).
///
/// When a build stamped with the current source digest is already there,
/// nothing is rebuilt (so a second setup run takes seconds).
pub fn build(
    crate_dir: &Path,
    toolchain: &WasmToolchain,
    options: &BuildOptions,
) -> Result<Built, BuildError> {
    // The lock is a build input: written or brought up to date now, so the
    // build writes nothing its own digest covers.
    let manifest = crate_dir.join("Cargo.toml");
    // Named by its directory here: the digest (and the package name in it)
    // is taken once, after the lock settles.
    let crate_name = crate_dir.display().to_string();
    run_cargo(toolchain, toolchain.cargo_resolve(&manifest), &crate_name)?;
    let sources = source_digest(crate_dir)?;
    outside_sources(&sources, options)?;
    let package = &sources.package;
    if package.page_module {
        return build_page_module(crate_dir, toolchain, options, &sources).map(Built::PageModule);
    }
    if let Some(existing) = already_built(&sources, options) {
        return Ok(Built::Plugin(existing));
    }
    let core = compile_core(crate_dir, toolchain, options, package)?;
    let encoded = component::encode(&core, &sources.digest)?;
    write_plugin(crate_dir, &sources, options, encoded).map(Built::Plugin)
}

/// Takes `component`, bytes a publisher the caller trusts signed as built
/// from exactly the `sources` of the crate at `crate_dir`, where [`build`]
/// would have written its own, with the same manifest, instead of
/// compiling: the bytes [`build_reproducibly`] gives for these sources, in
/// seconds and with no wasm toolchain. The component must be stamped with
/// the sources' digest; what is already there is kept only when it is
/// these very bytes.
pub fn adopt_signed(
    crate_dir: &Path,
    sources: &SourceSet,
    component: Vec<u8>,
    options: &BuildOptions,
) -> Result<BuiltPlugin, BuildError> {
    outside_sources(sources, options)?;
    let stamped = read_source_digest(&component)?;
    if stamped.as_deref() != Some(sources.digest.as_str()) {
        return Err(BuildError::Component(format!(
            "the signed component is stamped with {}, not with these sources' digest {}",
            stamped.as_deref().unwrap_or("no source digest"),
            sources.digest
        )));
    }
    // Up to date only when the bytes there are the signed ones: a local
    // build of the same sources carries the same stamp but other bytes.
    let signed = bl_core::Sha256Digest::of(&component).to_string();
    if let Some(existing) = already_built(sources, options)
        && existing.manifest.component_digest == signed
    {
        return Ok(existing);
    }
    let (world, package) = component::world_of(&component)?;
    write_plugin(
        crate_dir,
        sources,
        options,
        component::Encoded {
            bytes: component,
            world,
            package,
        },
    )
}

/// Refuses an output or target directory inside the plugin's sources.
fn outside_sources(sources: &SourceSet, options: &BuildOptions) -> Result<(), BuildError> {
    for (flag, dir) in [
        ("--out", &options.out_dir),
        ("--target-dir", &options.target_dir),
    ] {
        if sources.covers(dir) {
            return Err(BuildError::Source {
                path: dir.clone(),
                message: format!(
                    "{flag} is inside the plugin's sources, so every build would change their digest; choose a folder under target/ or outside the crate"
                ),
            });
        }
    }
    Ok(())
}

/// The component and manifest already in the output directory, when they
/// are stamped with these sources' digest (and `force` is not set).
fn already_built(sources: &SourceSet, options: &BuildOptions) -> Option<BuiltPlugin> {
    let (component_path, manifest_path) = plugin_paths(sources, options);
    if options.force {
        return None;
    }
    let manifest = up_to_date(&component_path, &manifest_path, &sources.digest)?;
    Some(BuiltPlugin {
        component_path,
        manifest_path,
        manifest,
        rebuilt: false,
    })
}

fn plugin_paths(sources: &SourceSet, options: &BuildOptions) -> (PathBuf, PathBuf) {
    let name = &sources.package.name;
    (
        options.out_dir.join(format!("{name}.wasm")),
        options.out_dir.join(format!("{name}.plugin.json")),
    )
}

/// Writes a plugin's component and its manifest (from the crate's
/// metadata and what the component says of itself).
fn write_plugin(
    crate_dir: &Path,
    sources: &SourceSet,
    options: &BuildOptions,
    encoded: component::Encoded,
) -> Result<BuiltPlugin, BuildError> {
    let package = &sources.package;
    let (component_path, manifest_path) = plugin_paths(sources, options);
    let config_schema = match &package.config_schema {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(io_error(path))?;
            Some(serde_json::from_str(&text).map_err(|e| BuildError::Source {
                path: path.clone(),
                message: format!("the config schema is not JSON: {e}"),
            })?)
        }
    };
    if encoded.world == "completion-contract" && package.contract_patterns.is_empty() {
        return Err(BuildError::Source {
            path: crate_dir.join("Cargo.toml"),
            message: "a completion contract must list the basenames it checks: add \
                      `contract-patterns = [\"plan.json\"]` under [package.metadata.bl]"
                .into(),
        });
    }

    let manifest = PluginManifest {
        name: package.name.clone(),
        version: package.version.clone(),
        description: package.description.clone(),
        capabilities: requested_capabilities(&component::imports(&encoded.bytes)?),
        config_schema,
        contract_patterns: package.contract_patterns.clone(),
        world: encoded.world,
        wit_package: encoded.package,
        source_digest: sources.digest.clone(),
        component_digest: bl_core::Sha256Digest::of(&encoded.bytes).to_string(),
    };
    std::fs::create_dir_all(&options.out_dir).map_err(io_error(&options.out_dir))?;
    write_atomically(&component_path, &encoded.bytes)?;
    let json = serde_json::to_string_pretty(&manifest).expect("a manifest always serializes");
    write_atomically(&manifest_path, format!("{json}\n").as_bytes())?;
    Ok(BuiltPlugin {
        component_path,
        manifest_path,
        manifest,
        rebuilt: true,
    })
}

/// cargo's release build of the crate for wasm: the core module's bytes.
fn compile_core(
    crate_dir: &Path,
    toolchain: &WasmToolchain,
    options: &BuildOptions,
    package: &source::Package,
) -> Result<Vec<u8>, BuildError> {
    let target_dir = options.target_dir.join(toolchain.target_subdir());
    run_cargo(
        toolchain,
        toolchain.cargo_build(&crate_dir.join("Cargo.toml"), &target_dir),
        &package.name,
    )?;
    let core_path = target_dir
        .join("wasm32-unknown-unknown/release")
        .join(format!("{}.wasm", package.lib_name));
    std::fs::read(&core_path).map_err(io_error(&core_path))
}

/// A page module: the core module, stamped with the source digest in a
/// custom section (as a component is), written as `<name>.wasm`.
fn build_page_module(
    crate_dir: &Path,
    toolchain: &WasmToolchain,
    options: &BuildOptions,
    sources: &SourceSet,
) -> Result<BuiltPageModule, BuildError> {
    let name = sources.package.name.clone();
    let module_path = options.out_dir.join(format!("{name}.wasm"));
    let built = |bytes: &[u8], rebuilt| BuiltPageModule {
        name: name.clone(),
        module_path: module_path.clone(),
        source_digest: sources.digest.clone(),
        module_digest: bl_core::Sha256Digest::of(bytes).to_string(),
        rebuilt,
    };
    if !options.force
        && let Ok(existing) = std::fs::read(&module_path)
        && read_source_digest(&existing).ok().flatten().as_deref() == Some(&sources.digest)
    {
        return Ok(built(&existing, false));
    }
    let mut module = compile_core(crate_dir, toolchain, options, &sources.package)?;
    component::stamp_module(&mut module, &sources.digest);
    std::fs::create_dir_all(&options.out_dir).map_err(io_error(&options.out_dir))?;
    write_atomically(&module_path, &module)?;
    Ok(built(&module, true))
}

fn run_cargo(
    toolchain: &WasmToolchain,
    mut cargo: Command,
    crate_name: &str,
) -> Result<(), BuildError> {
    let status = cargo.status().map_err(|e| {
        BuildError::Toolchain(ToolchainError::Spawn {
            program: toolchain.cargo_path().display().to_string(),
            message: e.to_string(),
        })
    })?;
    if !status.success() {
        return Err(BuildError::Cargo {
            crate_name: crate_name.to_string(),
            status: status.to_string(),
        });
    }
    Ok(())
}

/// The grantable capabilities among a component's imports, by name.
pub fn requested_capabilities(imports: &[bl_core::plugin::Import]) -> Vec<String> {
    let mut names: Vec<String> = imports
        .iter()
        .filter_map(|import| match bl_core::plugin::classify(import) {
            bl_core::plugin::ImportClass::Capability(c) if c.grantable() => {
                Some(c.name().to_string())
            }
            _ => None,
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

pub(crate) fn up_to_date(
    component: &Path,
    manifest: &Path,
    digest: &str,
) -> Option<PluginManifest> {
    let bytes = std::fs::read(component).ok()?;
    let manifest: PluginManifest = serde_json::from_slice(&std::fs::read(manifest).ok()?).ok()?;
    let stamped = read_source_digest(&bytes).ok()??;
    let component_digest = bl_core::Sha256Digest::of(&bytes).to_string();
    (stamped == digest
        && manifest.source_digest == digest
        && manifest.component_digest == component_digest)
        .then_some(manifest)
}

/// Writes through a temp file in the same directory and renames it over the
/// target, so a reader never sees half a component.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io_error(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_error(path))
}

/// Why a component does not match the source in front of us.
#[derive(Debug, thiserror::Error)]
pub enum ProvenanceError {
    #[error("{component}: no {SOURCE_DIGEST_SECTION} stamp; it was not built by `bl plugin build`")]
    Unstamped { component: PathBuf },
    #[error(
        "{component} was built from other sources ({stamped}) than those in {crate_dir} now ({current}); \
         rebuild it with `bl plugin build {crate_dir}` or `scripts/dev setup`"
    )]
    Stale {
        component: PathBuf,
        crate_dir: PathBuf,
        stamped: String,
        current: String,
    },
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// Checks that the component at `component` was built from exactly the
/// sources of the plugin crate at `crate_dir` as they are now.
pub fn check_provenance(crate_dir: &Path, component: &Path) -> Result<(), ProvenanceError> {
    let bytes = std::fs::read(component).map_err(|e| BuildError::Io {
        path: component.to_path_buf(),
        source: e,
    })?;
    let stamped = read_source_digest(&bytes)?.ok_or_else(|| ProvenanceError::Unstamped {
        component: component.to_path_buf(),
    })?;
    let current = source_digest(crate_dir)?.digest;
    if stamped != current {
        return Err(ProvenanceError::Stale {
            component: component.to_path_buf(),
            crate_dir: crate_dir.to_path_buf(),
            stamped,
            current,
        });
    }
    Ok(())
}
