//! Plugins from a registry, in a project: publishing a built plugin into a
//! registry directory, searching it, installing a version into a project
//! (verified before anything is written, cached or compiled), the
//! project's lock (`bl.lock`) that pins each installed plugin by digest,
//! the trust file (`bl.trust`) of publisher keys, and re-checking what is
//! installed against the lock.
//!
//! A project is the nearest directory, from where bl runs, that holds a
//! `bl.lock`; installed components live in its `.bl/plugins/`, which the
//! process's plugin host searches first, and the lock's digests are the
//! host's pins.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use bl_core::plugin::PluginManifest;
use bl_plugins::Pin;
use bl_registry::{Registry, RegistryError, Trust};
use bl_store::VerifierKey;
use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};

/// The lock file's name and format tag.
pub const LOCK: &str = "bl.lock";
pub const LOCK_FORMAT: &str = "bl-lock/1";
/// The trust file: one publisher verifier key a line.
pub const TRUST: &str = "bl.trust";
/// Where a project's installed components are, under the project.
pub const INSTALLED: &str = ".bl/plugins";
/// The bl project's publisher key, which signs the first-party plugins in
/// the registry shipped with bl: trusted like bl itself.
pub const PROJECT_KEY: &str = include_str!("../../../registry/bl-project.pub");

/// One plugin as the lock pins it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locked {
    pub version: String,
    pub component_sha256: String,
    pub world: String,
    pub wit_version: String,
    /// What the component asks for.
    pub capabilities: Vec<String>,
    /// What the operator granted it: a later version asking for more
    /// needs them granted again.
    pub granted: Vec<String>,
    /// The registry it came from, as given at install.
    pub registry: String,
    pub publisher_key_id: String,
    /// Verified, NotSigned or UntrustedKey (the last two only when the
    /// operator allowed this plugin unsigned).
    pub trust: String,
    #[serde(default)]
    pub allowed_unsigned: bool,
}

/// The lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub format: String,
    pub plugins: BTreeMap<String, Locked>,
}

impl Default for Lock {
    fn default() -> Self {
        Lock {
            format: LOCK_FORMAT.into(),
            plugins: BTreeMap::new(),
        }
    }
}

/// A project: the directory of its lock.
#[derive(Debug, Clone)]
pub struct Project {
    pub dir: PathBuf,
}

impl Project {
    /// The nearest directory from `from` upward that holds a lock.
    pub fn find(from: &Path) -> Option<Project> {
        from.ancestors()
            .find(|d| d.join(LOCK).is_file())
            .map(|d| Project {
                dir: d.to_path_buf(),
            })
    }

    /// The project the current directory belongs to, or the current
    /// directory itself when none does (where a first install makes one).
    pub fn current() -> AppResult<Project> {
        let here = std::env::current_dir()
            .map_err(|e| AppError::refused(format!("the current directory: {e}")))?;
        Ok(Project::find(&here).unwrap_or(Project { dir: here }))
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK)
    }

    pub fn trust_path(&self) -> PathBuf {
        self.dir.join(TRUST)
    }

    pub fn installed_dir(&self) -> PathBuf {
        self.dir.join(INSTALLED)
    }

    /// The lock, or an empty one when there is none yet. A lock that does
    /// not read is refused with its place: it is never silently replaced.
    pub fn lock(&self) -> AppResult<Lock> {
        let path = self.lock_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lock::default()),
            Err(e) => return Err(AppError::refused(format!("{}: {e}", path.display()))),
        };
        let lock: Lock = serde_json::from_str(&text).map_err(|e| {
            AppError::refused(format!(
                "{}: line {}, column {}: {e}; it is not a bl.lock (restore it from version control, or delete it and install again)",
                path.display(),
                e.line(),
                e.column()
            ))
        })?;
        if lock.format != LOCK_FORMAT {
            return Err(AppError::refused(format!(
                "{} at /format: {:?} is not {LOCK_FORMAT:?}",
                path.display(),
                lock.format
            )));
        }
        Ok(lock)
    }

    /// The host's pins: each locked plugin's digest.
    pub fn pins(&self) -> AppResult<BTreeMap<String, Pin>> {
        Ok(self
            .lock()?
            .plugins
            .into_iter()
            .map(|(name, locked)| {
                let pin = Pin {
                    digest: locked.component_sha256,
                    lock: self.lock_path(),
                    unsigned: locked.allowed_unsigned,
                    version: locked.version,
                };
                (name, pin)
            })
            .collect())
    }

    /// The publisher keys this project trusts: bl's own, and its trust file's.
    pub fn trusted(&self) -> AppResult<Vec<VerifierKey>> {
        // One key a line: a rotated key is added beside the old one.
        let own = PROJECT_KEY
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|l| VerifierKey::parse(l.trim()).expect("bl's project keys parse"));
        Ok(own.chain(self.trust_file()?).collect())
    }

    fn trust_file(&self) -> AppResult<Vec<VerifierKey>> {
        let path = self.trust_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(AppError::refused(format!("{}: {e}", path.display()))),
        };
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map(|(i, l)| {
                VerifierKey::parse(l.trim()).map_err(|e| {
                    AppError::refused(format!(
                        "{}: line {}: {e}; each line is a verifier key as `bl keys generate` writes it (NAME.pub)",
                        path.display(),
                        i + 1
                    ))
                })
            })
            .collect()
    }

    /// Adds a publisher's verifier key to the trust file (once).
    pub fn trust(&self, key: &VerifierKey) -> AppResult<bool> {
        if self.trusted()?.iter().any(|k| k.to_text() == key.to_text()) {
            return Ok(false);
        }
        let path = self.trust_path();
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(key.to_text().trim());
        text.push('\n');
        write_replacing(&path, text.as_bytes())?;
        Ok(true)
    }

    fn write_lock(&self, lock: &Lock) -> AppResult<()> {
        let text = serde_json::to_string_pretty(lock).expect("a lock serialises") + "\n";
        write_replacing(&self.lock_path(), text.as_bytes())
    }
}

/// Writes `path` whole or not at all: a staged file renamed over it.
fn write_replacing(path: &Path, bytes: &[u8]) -> AppResult<()> {
    let failed = |e: std::io::Error| AppError::refused(format!("{}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let staged = path.with_file_name(format!(".{name}.new"));
    std::fs::write(&staged, bytes).map_err(failed)?;
    std::fs::rename(&staged, path).map_err(failed)
}

fn registry_error(e: RegistryError) -> AppError {
    AppError::refused(e.to_string())
}

/// The registry to use: the one named, else `BL_REGISTRY`, else the one
/// shipped beside bl.
pub fn registry_dir(named: Option<&Path>) -> AppResult<PathBuf> {
    let named = named
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("BL_REGISTRY").map(PathBuf::from));
    if let Some(dir) = named {
        // A static web tree is mirrored, then read as a directory.
        return match dir.to_str().filter(|d| crate::registry_mirror::is_url(d)) {
            Some(url) => crate::registry_mirror::mirror(url),
            None => Ok(dir),
        };
    }
    crate::paths::registry_search_path()
        .into_iter()
        .find(|d| d.join(bl_registry::INDEX).is_file())
        .ok_or_else(|| {
            AppError::refused(
                "no plugin registry: name one with --registry DIR (a directory holding index.json) or URL (a static web tree of one), or set BL_REGISTRY",
            )
        })
}

/// Where `bl plugin install NAME` installs from: the registry named
/// (`--registry`, else `BL_REGISTRY`), else the one the lock says NAME came
/// from (so installing a pinned plugin again, as a refusal advises, needs
/// no flag), else the one shipped with bl.
pub fn install_registry_dir(
    project: &Project,
    name: &str,
    named: Option<&Path>,
) -> AppResult<PathBuf> {
    if named.is_none()
        && std::env::var_os("BL_REGISTRY").is_none()
        && let Some(locked) = project.lock()?.plugins.get(name)
    {
        return registry_dir(Some(Path::new(&locked.registry)));
    }
    registry_dir(named)
}

/// The registries whose signatures (by keys the project trusts) let an
/// unpinned plugin run: the one shipped with bl and the directory
/// `BL_REGISTRY` names (a web registry is not fetched for this: install
/// from it instead). A registry that does not read signs nothing.
pub fn trusted_registries(project: &Project) -> Vec<Registry> {
    let named = std::env::var_os("BL_REGISTRY")
        .map(PathBuf::from)
        .filter(|d| d.join(bl_registry::INDEX).is_file());
    let shipped = crate::paths::registry_search_path()
        .into_iter()
        .find(|d| d.join(bl_registry::INDEX).is_file());
    named
        .into_iter()
        .chain(shipped)
        .filter_map(|dir| open_registry(project, &dir).ok())
        .collect()
}

/// Reads a registry, checking every signature against the project's trust.
pub fn open_registry(project: &Project, dir: &Path) -> AppResult<Registry> {
    Registry::load(dir, &project.trusted()?).map_err(registry_error)
}

/// The registry a lock entry came from, for `verify`: `Ok(None)` when it
/// cannot be reached (a web registry offline, a directory gone).
fn read_locked_registry(registry: &str, trusted: &[VerifierKey]) -> AppResult<Option<Registry>> {
    let is_url = crate::registry_mirror::is_url(registry);
    if !is_url && !Path::new(registry).exists() {
        return Ok(None);
    }
    let dir = match registry_dir(Some(Path::new(registry))) {
        Ok(dir) => dir,
        Err(_) if is_url => return Ok(None),
        Err(e) => return Err(e),
    };
    Registry::load(&dir, trusted)
        .map(Some)
        .map_err(registry_error)
}

/// A plugin crate's component taken from a registry instead of compiled.
#[derive(Debug, Clone)]
pub struct SignedBuild {
    pub built: bl_pluginbuild::BuiltPlugin,
    /// The registry it came from, the version whose entry names these
    /// sources, and the key that signed that entry.
    pub registry: PathBuf,
    pub version: String,
    pub signed_by: String,
}

impl SignedBuild {
    /// As `bl plugin build --json` prints it: a build's fields, and where
    /// the component came from.
    pub fn to_json(&self) -> serde_json::Value {
        let b = &self.built;
        serde_json::json!({"rebuilt": false, "taken": b.rebuilt, "component": b.component_path,
            "manifest_path": b.manifest_path, "manifest": b.manifest, "registry": self.registry,
            "version": self.version, "signed_by": self.signed_by})
    }
}

impl std::fmt::Display for SignedBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (b, m) = (&self.built, &self.built.manifest);
        write!(
            f,
            "{}: {} {} (signed by {} in {} as built from these sources)\n  component {}  {}\n  source    {}",
            if b.rebuilt { "taken" } else { "up to date" },
            m.name,
            m.version,
            self.signed_by,
            self.registry.display(),
            b.component_path.display(),
            m.component_digest,
            m.source_digest
        )
    }
}

/// `bl plugin build --signed`: when a key this project trusts signed a
/// build of exactly the crate's sources (its source digest) in the
/// registry (`BL_REGISTRY`, else the one shipped with bl), that component,
/// read only when its bytes are the signed ones, is written where a build
/// would write its own (`out`, else `target/plugins` under the crate's
/// workspace), with the same manifest. `None`: no registry, or none signed
/// these sources (the caller compiles). Crates with no Cargo.toml (Python,
/// JavaScript) and page modules are always compiled.
pub fn take_signed_build(dir: &Path, out: Option<PathBuf>) -> AppResult<Option<SignedBuild>> {
    if bl_pluginbuild::polyglot::is_polyglot_plugin(dir) {
        return Ok(None);
    }
    let refused = |e: bl_pluginbuild::BuildError| {
        AppError::refused(format!("plugin build {}: {e}", dir.display()))
    };
    let sources = bl_pluginbuild::source_digest(dir).map_err(refused)?;
    if sources.package.page_module {
        return Ok(None);
    }
    // No registry anywhere is not an error: the crate is compiled.
    let Ok(registry_dir) = registry_dir(None) else {
        return Ok(None);
    };
    let registry_dir = registry_dir.canonicalize().unwrap_or(registry_dir);
    let registry = open_registry(&Project::current()?, &registry_dir)?;
    let name = &sources.package.name;
    let Some((version, signed_by)) = registry.signed_build_of(name, &sources.digest) else {
        return Ok(None);
    };
    let component = registry.component(name, version).map_err(registry_error)?;
    let defaults = bl_pluginbuild::BuildOptions::beside_sources(&sources);
    let options = bl_pluginbuild::BuildOptions {
        out_dir: out.unwrap_or(defaults.out_dir),
        ..defaults
    };
    let built =
        bl_pluginbuild::adopt_signed(dir, &sources, component, &options).map_err(refused)?;
    Ok(Some(SignedBuild {
        built,
        registry: registry_dir,
        version: version.version.clone(),
        signed_by: signed_by.to_string(),
    }))
}

/// What `install` is asked for.
pub struct InstallRequest<'a> {
    pub registry: &'a Path,
    pub name: &'a str,
    /// A semver requirement (`*` for the highest).
    pub wanted: &'a str,
    /// The plugins the operator allows to be installed unsigned (or signed
    /// by a key the project does not trust), by name. Never a failed signature.
    pub allowed_unsigned: &'a BTreeSet<String>,
    /// Capabilities the operator grants beyond what the lock granted.
    pub grants: &'a [String],
}

/// What was installed.
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    pub name: String,
    pub locked: Locked,
    pub path: PathBuf,
    pub lock: PathBuf,
}

/// `NAME[@REQ]` split into the name and its requirement (`*` when none).
pub fn parse_wanted(arg: &str) -> (&str, &str) {
    arg.split_once('@').unwrap_or((arg, "*"))
}

/// Installs `name` into the project: resolves it, reads its component only
/// when the bytes are the signed ones, checks what it asks for against the
/// component itself and against what the lock granted, and only then
/// writes it under `.bl/plugins`, compiles it into the cache and pins it
/// in the lock. A refusal leaves the project and the cache as they were.
pub fn install(project: &Project, request: &InstallRequest) -> AppResult<Installed> {
    let name = request.name;
    if !bl_registry::valid_name(name) {
        return Err(AppError::refused(format!(
            "{name:?} is not a plugin name: 1-64 of a-z, 0-9 and '-', starting with a letter"
        )));
    }
    let allow_unsigned = request.allowed_unsigned.contains(name);
    let registry = open_registry(project, request.registry)?;
    let version = registry
        .resolve_among(name, request.wanted, |trust| match trust {
            Trust::Verified { .. } => true,
            Trust::NotSigned | Trust::UntrustedKey { .. } => allow_unsigned,
            Trust::VerificationFailed { .. } => false,
        })
        .map_err(|e| {
            let RegistryError::NoMatch { .. } = e else {
                return registry_error(e);
            };
            // The version that would match, whatever its trust: one whose
            // signature fails is refused however the operator trusts it.
            let broken = registry
                .resolve_among(name, request.wanted, |_| true)
                .ok()
                .and_then(|v| registry.trust_of(name, &v.version))
                .filter(|t| matches!(t, Trust::VerificationFailed { .. }));
            match broken {
                // `e` already says why its signature does not hold.
                Some(_) => AppError::refused(format!(
                    "{e}. The index or the component changed after it was signed, so it is refused whatever you trust, and --allow-unsigned does not apply; ask the publisher to publish it again"
                )),
                None if !allow_unsigned => AppError::refused(format!(
                    "{e}. Unsigned and untrusted plugins are refused: trust the publisher's key (`bl plugin trust KEY.pub`), or, knowing what it is, install it with --allow-unsigned {name}"
                )),
                None => registry_error(e),
            }
        })?;
    let trust = registry
        .trust_of(name, &version.version)
        .cloned()
        .unwrap_or(Trust::NotSigned);
    crate::registry_mirror::fetch_component(request.registry, name, version)?;
    let bytes = registry.component(name, version).map_err(registry_error)?;
    // What the component imports is what it can ask for, whatever the
    // index says: a component asking for more than its signed entry is refused.
    let summary = bl_pluginbuild::summarize(&bytes)
        .map_err(|e| AppError::refused(format!("{name}@{}: {e}", version.version)))?;
    if summary.world.as_deref() != Some(version.world.as_str()) {
        return Err(AppError::refused(format!(
            "{name}@{}: its signed entry says it is a {} plugin, but the component is {}; refused",
            version.version,
            version.world,
            summary.world.as_deref().unwrap_or("no bl plugin")
        )));
    }
    let signed: BTreeSet<&String> = version.capabilities.iter().collect();
    let unsigned_asks: Vec<&String> = summary
        .capabilities
        .iter()
        .filter(|c| !signed.contains(c))
        .collect();
    if !unsigned_asks.is_empty() {
        return Err(AppError::refused(format!(
            "{name}@{}: the component imports {} but its signed entry asks only for [{}]; refused",
            version.version,
            join(&unsigned_asks),
            join(&version.capabilities.iter().collect::<Vec<_>>())
        )));
    }
    let mut lock = project.lock()?;
    let mut granted: BTreeSet<String> = request.grants.iter().cloned().collect();
    if let Some(before) = lock.plugins.get(name) {
        granted.extend(before.granted.iter().cloned());
        let more: Vec<&String> = version
            .capabilities
            .iter()
            .filter(|c| !granted.contains(*c))
            .collect();
        if !more.is_empty() {
            return Err(AppError::refused(format!(
                "{name}@{} asks for {} that {}@{} was not granted; nothing was installed. Grant them again if you mean to: {}",
                version.version,
                join(&more),
                name,
                before.version,
                more.iter()
                    .map(|c| format!("--grant {c}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )));
        }
    } else {
        granted.extend(version.capabilities.iter().cloned());
    }
    // Compiled first (into the cache, keyed by digest): a component that
    // will not compile leaves the project as it was.
    crate::plugin_host::shared()
        .runtime()
        .and_then(|runtime| runtime.exports(name, &bytes))
        .map_err(|e| AppError::Undecided(format!("{name}: {e}")))?;
    let dir = project.installed_dir();
    let path = dir.join(format!("{name}.wasm"));
    write_replacing(&path, &bytes)?;
    let manifest = PluginManifest {
        name: name.to_string(),
        version: version.version.clone(),
        // What the publisher signed of its manifest, so a config is
        // checked here as where it was built, before anything runs.
        description: version.description.clone(),
        world: version.world.clone(),
        wit_package: format!("bl:plugin@{}", version.wit_version),
        capabilities: version.capabilities.clone(),
        config_schema: version.config_schema.clone(),
        contract_patterns: version.contract_patterns.clone(),
        source_digest: version.source.digest.clone().unwrap_or_default(),
        component_digest: version.component_sha256.clone(),
    };
    let manifest_text = serde_json::to_string_pretty(&manifest).expect("a manifest serialises");
    write_replacing(
        &dir.join(format!("{name}.plugin.json")),
        manifest_text.as_bytes(),
    )?;
    let locked = Locked {
        version: version.version.clone(),
        component_sha256: version.component_sha256.clone(),
        world: version.world.clone(),
        wit_version: version.wit_version.clone(),
        capabilities: version.capabilities.clone(),
        granted: granted.into_iter().collect(),
        // Its URL, or an absolute path, so `bl plugin verify` finds it from
        // anywhere in the project.
        registry: crate::registry_mirror::source_of(request.registry).unwrap_or_else(|| {
            std::path::absolute(request.registry)
                .unwrap_or_else(|_| request.registry.to_path_buf())
                .display()
                .to_string()
        }),
        publisher_key_id: version.publisher_key_id.clone(),
        trust: trust.label().to_string(),
        allowed_unsigned: !matches!(trust, Trust::Verified { .. }),
    };
    lock.plugins.insert(name.to_string(), locked.clone());
    project.write_lock(&lock)?;
    Ok(Installed {
        name: name.to_string(),
        locked,
        path,
        lock: project.lock_path(),
    })
}

fn join(items: &[&String]) -> String {
    items
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One installed plugin, re-checked.
#[derive(Debug, Clone, Serialize)]
pub struct Checked {
    pub name: String,
    pub version: String,
    /// Verified, NotSigned or VerificationFailed.
    pub trust: String,
    pub component_sha256: String,
    pub capabilities: Vec<String>,
    /// Why it does not hold, when it does not.
    pub problem: Option<String>,
}

/// Re-checks every plugin in the lock: the installed bytes against the
/// pinned digest, and the registry's signed entry (when the registry can
/// still be read) against the lock.
pub fn verify(project: &Project) -> AppResult<Vec<Checked>> {
    let lock = project.lock()?;
    let trusted = project.trusted()?;
    // Each registry read once: `Ok(None)` when it cannot be reached (a
    // web registry offline, a directory no longer there), `Err` when it is
    // there but does not read as a registry (then nothing of it is trusted).
    let mut registries: BTreeMap<String, AppResult<Option<Registry>>> = BTreeMap::new();
    let mut checked = Vec::new();
    for (name, locked) in &lock.plugins {
        let path = project.installed_dir().join(format!("{name}.wasm"));
        let problem = match std::fs::read(&path) {
            Err(e) => Some(format!("{}: {e}", path.display())),
            Ok(bytes) => {
                let found = bl_core::Sha256Digest::of(&bytes).to_string();
                (found != locked.component_sha256).then(|| {
                    format!(
                        "{} has {found}, but the lock pins {}",
                        path.display(),
                        locked.component_sha256
                    )
                })
            }
        };
        let registry = registries
            .entry(locked.registry.clone())
            .or_insert_with(|| read_locked_registry(&locked.registry, &trusted));
        let problem = problem.or_else(|| match registry {
            // Offline from its registry, the pin still holds.
            Ok(None) => None,
            Err(why) => Some(format!(
                "its registry {} does not read: {why}",
                locked.registry
            )),
            Ok(Some(registry)) => {
                let entry = registry
                    .index
                    .plugins
                    .get(name)
                    .and_then(|vs| vs.iter().find(|v| v.version == locked.version));
                match (entry, registry.trust_of(name, &locked.version)) {
                    (None, _) | (_, None) => Some(format!(
                        "{name}@{} is no longer in its registry {}",
                        locked.version, locked.registry
                    )),
                    (Some(v), _) if v.component_sha256 != locked.component_sha256 => Some(format!(
                        "the registry now signs {} for {name}@{}, but the lock pins {}",
                        v.component_sha256, locked.version, locked.component_sha256
                    )),
                    (_, Some(Trust::VerificationFailed { why })) => {
                        Some(format!("its registry entry does not verify: {why}"))
                    }
                    (_, Some(Trust::NotSigned)) if !locked.allowed_unsigned => Some(
                        "its registry entry is no longer signed, but it was installed as signed"
                            .to_string(),
                    ),
                    (_, Some(Trust::UntrustedKey { key_id })) if !locked.allowed_unsigned => {
                        Some(format!(
                            "its publisher key {key_id} is no longer in {}",
                            project.trust_path().display()
                        ))
                    }
                    _ => None,
                }
            }
        });
        checked.push(Checked {
            name: name.clone(),
            version: locked.version.clone(),
            trust: if problem.is_some() {
                "VerificationFailed".into()
            } else if locked.allowed_unsigned {
                "NotSigned".into()
            } else {
                "Verified".into()
            },
            component_sha256: locked.component_sha256.clone(),
            capabilities: locked.capabilities.clone(),
            problem,
        });
    }
    Ok(checked)
}

/// A version added to a registry.
#[derive(Debug, Clone, Serialize)]
pub struct Published {
    /// The plugin's name.
    pub published: String,
    pub version: bl_registry::Version,
    pub registry: PathBuf,
}

impl std::fmt::Display for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = &self.version;
        write!(
            f,
            "published {} {} ({}) to {}, signed by key {}",
            self.published,
            v.version,
            v.component_sha256,
            self.registry.display(),
            v.publisher_key_id
        )
    }
}

/// What `publish` is asked for.
pub struct PublishRequest<'a> {
    /// A plugin crate (it holds Cargo.toml) or a component (`.wasm`, with
    /// its `.plugin.json` beside it).
    pub plugin: &'a Path,
    pub registry: &'a Path,
    pub key: &'a Path,
}

/// Builds (when given a crate), signs and adds a plugin version to a
/// registry directory (made when it does not exist).
pub fn publish(request: &PublishRequest) -> AppResult<Published> {
    let key = crate::keys::read_signing_key(request.key)?;
    let (component, manifest, recipe) = if bl_pluginbuild::polyglot::is_polyglot_plugin(
        request.plugin,
    ) {
        let crate::plugin_scaffold::BuildReport {
            built,
            toolchain: tool,
        } = crate::plugin_scaffold::build(request.plugin, None, None, false)?;
        let bl_pluginbuild::Built::Plugin(built) = built else {
            unreachable!("a Python or JavaScript plugin builds into a plugin")
        };
        let language = bl_pluginbuild::polyglot::read_plugin_file(request.plugin)
            .map_err(|e| AppError::refused(e.to_string()))?
            .language;
        let recipe = bl_registry::Recipe {
            language,
            toolchain: tool,
            command: "bl plugin build .".into(),
        };
        (built.component_path, built.manifest, recipe)
    } else if request.plugin.join("Cargo.toml").is_file() {
        let defaults = bl_pluginbuild::BuildOptions::beside(request.plugin)
            .map_err(|e| AppError::refused(format!("{}: {e}", request.plugin.display())))?;
        let (built, toolchain) = crate::plugin_scaffold::build_plugin(
            request.plugin,
            defaults.out_dir,
            defaults.target_dir.join("reproducible"),
        )?;
        let recipe = bl_registry::Recipe {
            language: "rust".into(),
            toolchain: format!("{} ({toolchain} wasm toolchain)", rustc_version()),
            command: "bl plugin build .".into(),
        };
        (built.component_path, built.manifest, recipe)
    } else {
        let package = bl_plugins::PluginPackage::open(request.plugin)
            .map_err(|e| AppError::refused(e.to_string()))?;
        let manifest = package.manifest.clone().ok_or_else(|| {
            AppError::refused(format!(
                "{}: no manifest beside it ({}); write one with `bl plugin build`, or publish the plugin's crate directory",
                request.plugin.display(),
                request.plugin.with_extension("plugin.json").display()
            ))
        })?;
        let recipe = bl_registry::Recipe {
            language: "unknown".into(),
            toolchain: "unknown".into(),
            command: "unknown".into(),
        };
        (request.plugin.to_path_buf(), manifest, recipe)
    };
    let bytes = std::fs::read(&component)
        .map_err(|e| AppError::refused(format!("{}: {e}", component.display())))?;
    let version = bl_registry::Version {
        version: manifest.version.clone(),
        component_sha256: String::new(),
        world: manifest.world.clone(),
        wit_version: manifest
            .wit_package
            .rsplit_once('@')
            .map(|(_, v)| v.to_string())
            .unwrap_or_default(),
        capabilities: manifest.capabilities.clone(),
        source: bl_registry::Source {
            repository: None,
            commit: None,
            digest: Some(manifest.source_digest.clone()),
        },
        recipe,
        description: manifest.description.clone(),
        config_schema: manifest.config_schema.clone(),
        contract_patterns: manifest.contract_patterns.clone(),
        publisher_key_id: String::new(),
        signature: None,
    };
    let version = bl_registry::publish(request.registry, &manifest.name, version, &bytes, &key)
        .map_err(registry_error)?;
    Ok(Published {
        published: manifest.name,
        version,
        registry: request.registry.to_path_buf(),
    })
}
fn rustc_version() -> String {
    std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "rustc (version unknown)".into())
}

/// One component on the plugin path, as `bl plugin list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub name: String,
    pub path: PathBuf,
    /// The directory whose component of the same name is used instead.
    pub shadowed_by: Option<PathBuf>,
    pub world: Option<String>,
    /// The version its manifest declares, when the manifest is of these bytes.
    pub version: Option<String>,
    pub manifest_matches: Option<bool>,
    pub component_digest: Option<String>,
    pub capabilities: Vec<String>,
    pub wit_package: Option<String>,
    /// Verified (its bytes are the ones the lock pins, or a trusted key
    /// signed them), NotSigned, or VerificationFailed (not the pinned bytes).
    pub trust: Option<String>,
    /// Whether it runs, and why: `pinned`, `ships with bl`, `signed`,
    /// `allowed unsigned`, or `refused: …`.
    pub runs: Option<String>,
    /// Why it could not be read.
    pub error: Option<String>,
}

/// Every component on the plugin path, in the order it is searched.
#[derive(Debug, Clone, Serialize)]
pub struct PluginList {
    pub search_path: Vec<PathBuf>,
    pub plugins: Vec<Listed>,
}

/// Every component on the plugin path (the project's installed ones
/// first), in order, with the search path as shown, each with its trust
/// and whether a run may use it.
pub fn list_plugins() -> PluginList {
    let host = crate::plugin_host::shared();
    // Shown as the directories they are (`bin/../plugins` once).
    let mut search: Vec<PathBuf> = Vec::new();
    for dir in host.search_path() {
        let dir = dir.canonicalize().unwrap_or(dir.clone());
        if !search.contains(&dir) {
            search.push(dir);
        }
    }
    let mut found: Vec<Listed> = Vec::new();
    for dir in &search {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut wasm: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
            .collect();
        wasm.sort();
        for path in wasm {
            let listed = listed(&host, path, &found);
            found.push(listed);
        }
    }
    PluginList {
        search_path: search,
        plugins: found,
    }
}

/// Why a run refuses a component bl.lock pins other bytes of.
const PIN_MISMATCH: &str = "refused: not the bytes bl.lock pins";

/// One component read for the list; `before` is what was listed already.
fn listed(host: &bl_plugins::PluginHost, path: PathBuf, before: &[Listed]) -> Listed {
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let shadowed_by = before
        .iter()
        .find(|l| l.name == name && l.shadowed_by.is_none())
        .and_then(|l| l.path.parent().map(Path::to_path_buf));
    let mut listed = Listed {
        name,
        path,
        shadowed_by,
        world: None,
        version: None,
        manifest_matches: None,
        component_digest: None,
        capabilities: Vec::new(),
        wit_package: None,
        trust: None,
        runs: None,
        error: None,
    };
    let read = bl_plugins::PluginPackage::open(&listed.path)
        .map_err(|e| e.to_string())
        .and_then(|package| {
            let bytes = package.bytes().map_err(|e| e.to_string())?;
            bl_pluginbuild::summarize(bytes)
                .map(|summary| (summary, package.manifest.clone()))
                .map_err(|e| e.to_string())
        });
    let found = host.find(&listed.path.display().to_string());
    let (summary, manifest) = match read {
        Ok(read) => read,
        Err(why) => {
            // Bytes changed after bl.lock pinned them are said as such,
            // whether or not they still read as a component.
            let (trust, runs) = match found {
                Err(bl_plugins::FindError::PinMismatch { .. }) => {
                    (Some("VerificationFailed".into()), PIN_MISMATCH)
                }
                _ => (None, "refused: it cannot be read"),
            };
            listed.trust = trust;
            listed.runs = Some(runs.into());
            listed.error = Some(why);
            return listed;
        }
    };
    let matches = manifest
        .as_ref()
        .map(|m| m.component_digest == summary.component_digest);
    listed.version = manifest
        .filter(|m| m.component_digest == summary.component_digest)
        .map(|m| m.version);
    listed.manifest_matches = matches;
    // What a run would decide about these bytes, by the same rules.
    let signed = host.is_signed(&summary.component_digest);
    let (trust, runs) = match found {
        Ok(found) => match found.provenance {
            Some(bl_plugins::Provenance::Pinned) => ("Verified", "pinned".to_string()),
            Some(bl_plugins::Provenance::Signed) => ("Verified", "signed".into()),
            Some(bl_plugins::Provenance::Bundled) if signed => ("Verified", "ships with bl".into()),
            Some(bl_plugins::Provenance::Bundled) => ("NotSigned", "ships with bl".into()),
            Some(bl_plugins::Provenance::Unsigned) | None => {
                ("NotSigned", "allowed unsigned".into())
            }
        },
        Err(bl_plugins::FindError::PinMismatch { .. }) => {
            ("VerificationFailed", PIN_MISMATCH.into())
        }
        Err(bl_plugins::FindError::Unsigned { .. }) => (
            "NotSigned",
            format!("refused unless --allow-unsigned {}", listed.name),
        ),
        Err(e) => ("NotSigned", format!("refused: {e}")),
    };
    listed.trust = Some(trust.into());
    listed.runs = Some(runs);
    listed.world = summary.world;
    listed.component_digest = Some(summary.component_digest);
    listed.capabilities = summary.capabilities;
    listed.wit_package = summary.wit_package;
    listed
}

impl std::fmt::Display for PluginList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.plugins.is_empty() {
            let dirs: Vec<String> = self
                .search_path
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            return write!(
                f,
                "No plugins found in {}. Build the first-party ones with `scripts/dev setup`, install one with `bl plugin install NAME`, or point BL_PLUGIN_PATH at a directory of .wasm components.",
                dirs.join(", ")
            );
        }
        let header = [
            "NAME",
            "WORLD",
            "VERSION",
            "TRUST",
            "RUNS",
            "DIGEST",
            "CAPABILITIES",
            "WHERE",
        ];
        let mut rows = vec![header.map(String::from)];
        for l in &self.plugins {
            let mut place = l.path.display().to_string();
            if let Some(dir) = &l.shadowed_by {
                place = format!("{place} (shadowed by {})", dir.display());
            }
            if let Some(why) = &l.error {
                place = format!("{place}: {why}");
            }
            let version = match l.manifest_matches {
                Some(false) => "(manifest is stale)".into(),
                _ => l.version.clone().unwrap_or_else(|| "-".into()),
            };
            let world = match (&l.error, &l.world) {
                (Some(_), _) => "(unreadable)".into(),
                (None, world) => world.clone().unwrap_or_else(|| "(not a bl plugin)".into()),
            };
            let digest = l.component_digest.as_deref().map_or("-".into(), |d| {
                format!("{}…", &d[..d.len().min("sha256:".len() + 12)])
            });
            let capabilities = match (&l.error, l.capabilities.is_empty()) {
                (Some(_), _) => "-".into(),
                (None, true) => "none".into(),
                (None, false) => l.capabilities.join(","),
            };
            let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
            rows.push([
                l.name.clone(),
                world,
                version,
                or_dash(&l.trust),
                or_dash(&l.runs),
                digest,
                capabilities,
                place,
            ]);
        }
        for line in bl_core::table::table_lines(&rows) {
            writeln!(f, "{line}")?;
        }
        write!(
            f,
            "\n`bl plugin inspect NAME` shows one in full. TRUST: Verified (the bytes bl.lock pins, or signed by a key this project trusts), NotSigned, or VerificationFailed; RUNS says whether a run may use it, and why."
        )
    }
}

/// A plugin read for `bl plugin inspect`: where it is, its summary, and
/// its manifest (with whether the manifest is of these bytes).
#[derive(Debug, Clone, Serialize)]
pub struct Inspected {
    pub path: PathBuf,
    pub summary: bl_pluginbuild::ComponentSummary,
    pub manifest: Option<PluginManifest>,
    pub manifest_matches: Option<bool>,
}

/// Reads `plugin` (a path, or a name on the plugin path) for inspection.
pub fn inspect(plugin: &str) -> AppResult<Inspected> {
    let path = crate::plugin_host::shared()
        .resolve(plugin)
        .map_err(|e| AppError::refused(e.to_string()))?;
    let package =
        bl_plugins::PluginPackage::open(&path).map_err(|e| AppError::refused(e.to_string()))?;
    let bytes = package
        .bytes()
        .map_err(|e| AppError::refused(e.to_string()))?;
    let summary = bl_pluginbuild::summarize(bytes)
        .map_err(|e| AppError::refused(format!("{}: {e}", path.display())))?;
    let manifest_matches = package
        .manifest
        .as_ref()
        .map(|m| m.component_digest == summary.component_digest);
    Ok(Inspected {
        path,
        summary,
        manifest: package.manifest,
        manifest_matches,
    })
}

/// What `rebuild` is asked for.
pub struct RebuildRequest<'a> {
    pub name: &'a str,
    /// The plugin's source: the crate directory its recipe builds. When
    /// `None`, the directory whose source digest is the signed one is
    /// looked for (see [`find_source`]).
    pub source: Option<&'a Path>,
    pub registry: &'a Path,
    /// The version to rebuild: the locked one by default, else the highest
    /// that verifies.
    pub version: Option<&'a str>,
    /// Cargo's target directory (default: a fresh one, so nothing built
    /// before takes part).
    pub target_dir: Option<&'a Path>,
}

/// A rebuild, compared with what was signed.
#[derive(Debug, Clone, Serialize)]
pub struct Rebuilt {
    pub name: String,
    pub version: String,
    /// The source built.
    pub source: PathBuf,
    pub signed: String,
    pub built: String,
    pub reproduced: bool,
    pub recipe: bl_registry::Recipe,
}

/// Follows a published version's recipe from `source`, in a fresh target
/// directory, and compares the component's digest with the signed one.
/// Source that is not what was published is refused before building.
pub fn rebuild(project: &Project, request: &RebuildRequest) -> AppResult<Rebuilt> {
    let name = request.name;
    let registry = open_registry(project, request.registry)?;
    let wanted = match request.version {
        Some(v) => format!("={v}"),
        None => project
            .lock()?
            .plugins
            .get(name)
            .map_or_else(|| "*".to_string(), |l| format!("={}", l.version)),
    };
    let version = registry
        .resolve_among(name, &wanted, |t| {
            !matches!(t, Trust::VerificationFailed { .. })
        })
        .map_err(registry_error)?;
    if version.recipe.language != "rust" {
        return Err(AppError::refused(format!(
            "{name}@{} is a {} plugin, built with {}: that toolchain does not give the same bytes twice (its pre-initialised snapshot differs from build to build), so only Rust plugins can be rebuilt and compared; its signed source digest ({}) still names the source it was built from",
            version.version,
            version.recipe.language,
            version.recipe.toolchain,
            version.source.digest.as_deref().unwrap_or("none recorded")
        )));
    }
    let source_dir = match request.source {
        Some(dir) => dir.to_path_buf(),
        None => find_source(version, request.registry)?,
    };
    let failed = |e: bl_pluginbuild::BuildError| {
        AppError::refused(format!("rebuild {}: {e}", source_dir.display()))
    };
    let source = bl_pluginbuild::source_digest(&source_dir).map_err(failed)?;
    if version.source.digest.as_deref() != Some(source.digest.as_str()) {
        return Err(AppError::refused(format!(
            "{} has source {}, but {name}@{} was published from {}; check out the source it was built from",
            source_dir.display(),
            source.digest,
            version.version,
            version
                .source
                .digest
                .as_deref()
                .unwrap_or("a source with no digest")
        )));
    }
    let scratch = tempfile::tempdir()
        .map_err(|e| AppError::refused(format!("a scratch directory for the build: {e}")))?;
    let target = request
        .target_dir
        .map_or_else(|| scratch.path().join("target"), Path::to_path_buf);
    let (built, _) =
        crate::plugin_scaffold::build_plugin(&source_dir, scratch.path().join("out"), target)?;
    let built = built.manifest.component_digest;
    Ok(Rebuilt {
        name: name.to_string(),
        version: version.version.clone(),
        source: source_dir.clone(),
        reproduced: built == version.component_sha256,
        signed: version.component_sha256.clone(),
        built,
        recipe: version.recipe.clone(),
    })
}

/// The source a version was published from, found by its signed source
/// digest: the first crate directory (at most three levels down, skipping
/// `target` and hidden ones) under the current directory, the registry's
/// parent, or the checkout bl was built from, whose source digest is the
/// one the registry signed. The digest decides, so a directory found this
/// way is exactly the source that was published.
pub fn find_source(version: &bl_registry::Version, registry: &Path) -> AppResult<PathBuf> {
    let wanted = version.source.digest.as_deref().ok_or_else(|| {
        AppError::refused(format!(
            "{}: its entry records no source digest to look for; give --source DIR",
            version.version
        ))
    })?;
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let roots = [here, registry.join(".."), checkout];
    let mut searched = Vec::new();
    for root in roots.iter().filter_map(|r| r.canonicalize().ok()) {
        if searched.contains(&root) {
            continue;
        }
        let mut crates = Vec::new();
        crate_dirs(&root, 3, &mut crates);
        let found = crates
            .into_iter()
            .find(|dir| bl_pluginbuild::source_digest(dir).is_ok_and(|s| s.digest == wanted));
        if let Some(dir) = found {
            return Ok(dir);
        }
        searched.push(root);
    }
    Err(AppError::refused(format!(
        "no crate with source {wanted} under {}; check out the source it was published from and give --source DIR",
        searched
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Directories holding a `Cargo.toml` under `dir`, `depth` levels down.
fn crate_dirs(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if dir.join("Cargo.toml").is_file() {
        found.push(dir.to_path_buf());
    }
    let Some(depth) = depth.checked_sub(1) else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subdirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            !name.starts_with('.') && name != "target" && name != "node_modules"
        })
        .map(|e| e.path())
        .collect();
    subdirs.sort();
    for sub in subdirs {
        crate_dirs(&sub, depth, found);
    }
}

impl std::fmt::Display for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.locked;
        write!(
            f,
            "installed {} {} ({}, {}) into {}; pinned in {}",
            self.name,
            l.version,
            l.trust,
            l.component_sha256,
            self.path.display(),
            self.lock.display()
        )
    }
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {} {}",
            self.name, self.version, self.trust, self.component_sha256
        )?;
        match &self.problem {
            Some(problem) => write!(f, " — {problem}"),
            None => Ok(()),
        }
    }
}

impl std::fmt::Display for Rebuilt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = if self.reproduced {
            "reproduced"
        } else {
            "DIFFERS"
        };
        write!(
            f,
            "{verdict}: {} {} from {} built {}, signed {}",
            self.name,
            self.version,
            self.source.display(),
            self.built,
            self.signed
        )
    }
}

impl std::fmt::Display for Inspected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.summary;
        let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".into());
        writeln!(f, "{}", self.path.display())?;
        writeln!(f, "  world         {}", or_none(&s.world))?;
        writeln!(f, "  wit           {}", or_none(&s.wit_package))?;
        writeln!(f, "  exports       {}", s.exports.join(", "))?;
        writeln!(f, "  imports       {}", s.imports.join(", "))?;
        let asks = match s.capabilities.is_empty() {
            true => "(none requested)".to_string(),
            false => s.capabilities.join(", "),
        };
        writeln!(f, "  capabilities  {asks}")?;
        writeln!(f, "  digest        {}", s.component_digest)?;
        writeln!(f, "  source        {}", or_none(&s.source_digest))?;
        match (&self.manifest, self.manifest_matches) {
            (Some(m), Some(true)) => {
                write!(
                    f,
                    "  manifest      {} {}: {}",
                    m.name, m.version, m.description
                )?;
                if !m.contract_patterns.is_empty() {
                    write!(f, "\n  contracts     {}", m.contract_patterns.join(", "))?;
                }
                if m.config_schema.is_some() {
                    write!(f, "\n  config        has a JSON Schema (see --json)")?;
                }
                Ok(())
            }
            (Some(_), _) => write!(
                f,
                "  manifest      DOES NOT MATCH these bytes (rebuild the plugin)"
            ),
            (None, _) => write!(
                f,
                "  manifest      (none beside it; `bl plugin manifest {}` writes one)",
                self.path.display()
            ),
        }
    }
}

/// Writes the manifest (`NAME.plugin.json`) of a component that has none,
/// from what the component itself says: its world, WIT package and the
/// capabilities it imports. For a component built by another toolchain.
/// An existing manifest is kept unless `force`.
pub fn write_manifest(component: &Path, version: &str, force: bool) -> AppResult<Inspected> {
    let found = inspect(&component.display().to_string())?;
    let path = found.path.with_extension("plugin.json");
    if path.exists() && !force {
        return Err(AppError::refused(format!(
            "{} exists; give --force to write it again from the component",
            path.display()
        )));
    }
    semver::Version::parse(version).map_err(|e| {
        AppError::refused(format!("--version {version}: not MAJOR.MINOR.PATCH ({e})"))
    })?;
    let s = &found.summary;
    let world = s.world.clone().ok_or_else(|| {
        AppError::refused(format!(
            "{}: not a bl plugin: it exports {}, which matches no bl world",
            found.path.display(),
            s.exports.join(", ")
        ))
    })?;
    let name = found
        .path
        .file_stem()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let manifest = PluginManifest {
        name,
        version: version.to_string(),
        description: String::new(),
        world,
        wit_package: s.wit_package.clone().unwrap_or_default(),
        capabilities: s.capabilities.clone(),
        config_schema: None,
        contract_patterns: Vec::new(),
        source_digest: s.source_digest.clone().unwrap_or_default(),
        component_digest: s.component_digest.clone(),
    };
    let text = serde_json::to_string_pretty(&manifest).expect("a manifest serialises");
    write_replacing(&path, text.as_bytes())?;
    inspect(&found.path.display().to_string())
}
