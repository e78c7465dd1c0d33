//! `bl plugin publish|search|install|verify|rebuild|test|trust`: plugins from a registry.

use std::path::PathBuf;

use bl_app::plugin_registry::{
    self as registry, InstallRequest, Project, PublishRequest, RebuildRequest,
};
use clap::Subcommand;
use serde_json::json;

use crate::exit::{CliResult, Exit};
use crate::output::{answer, outln};

#[derive(Subcommand)]
#[command(defer = true)]
pub enum RegistryCommand {
    /// Build a plugin crate (or take a built component), sign it with your
    /// key and add it to a registry directory.
    Publish {
        /// The plugin's crate directory, or a component with its .plugin.json.
        dir: PathBuf,
        /// The registry directory to add it to (made when missing).
        #[arg(long)]
        registry: PathBuf,
        /// Your private key (`bl keys generate`).
        #[arg(long)]
        key: PathBuf,
    },
    /// Find plugins in a registry by name.
    Search {
        /// Text in the plugin's name (all plugins when empty).
        #[arg(default_value = "")]
        text: String,
        /// The registry (default: BL_REGISTRY, then the one shipped with bl).
        #[arg(long)]
        registry: Option<PathBuf>,
    },
    /// Install NAME[@REQ] into this project: verified, compiled, pinned in bl.lock.
    Install {
        /// NAME, or NAME@REQ with a semver requirement such as ^1.2 or =1.0.0.
        plugin: String,
        /// The registry (default: BL_REGISTRY, then the one bl.lock says it came from, then bl's).
        #[arg(long)]
        registry: Option<PathBuf>,
        /// Grant a capability a new version asks for beyond what was granted.
        #[arg(long = "grant", value_name = "CAPABILITY")]
        grants: Vec<String>,
    },
    /// Re-check every installed plugin against bl.lock and its registry.
    Verify,
    /// Run a gate over a conformance corpus (exit 1 when a case disagrees).
    Test {
        /// The gate: a component path, or a name on the plugin path.
        plugin: String,
        /// The corpus: a directory of cases (config.json, workspace/, expected.json).
        #[arg(long)]
        corpus: PathBuf,
        /// Record this gate's verdicts as the cases' expectations.
        #[arg(long)]
        record: bool,
    },
    /// Follow a published version's recipe from its source and compare digests.
    Rebuild {
        /// The plugin's name in the registry.
        name: String,
        /// The plugin's crate directory, as published (default: the one
        /// whose source digest is the signed one, looked for here, beside
        /// the registry, and in bl's checkout).
        #[arg(long)]
        source: Option<PathBuf>,
        /// The registry (default: BL_REGISTRY, then the one shipped with bl).
        #[arg(long)]
        registry: Option<PathBuf>,
        /// The version (default: the locked one, else the highest).
        #[arg(long = "plugin-version", value_name = "VERSION")]
        plugin_version: Option<String>,
        /// Cargo's target directory to build in (default: a fresh one).
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
    /// Trust a publisher's verifier key (NAME.pub) in this project's bl.trust.
    Trust {
        /// The key: a NAME.pub file, or its text.
        key: String,
    },
}

pub fn run(cmd: RegistryCommand) -> CliResult {
    let project = Project::current()?;
    match cmd {
        RegistryCommand::Publish { dir, registry, key } => {
            let request = PublishRequest {
                plugin: &dir,
                registry: &registry,
                key: &key,
            };
            let published = registry::publish(&request)?;
            answer(|| json!(published), || published.to_string());
        }
        RegistryCommand::Search { text, registry } => {
            let dir = registry::registry_dir(registry.as_deref())?;
            let found = registry::open_registry(&project, &dir)?.search(&text);
            if crate::output::json() {
                outln!("{}", json!({"registry": dir, "plugins": found}));
                return Ok(Exit::Success);
            }
            let mut rows =
                vec![["NAME", "VERSION", "WORLD", "TRUST", "CAPABILITIES"].map(String::from)];
            for h in found {
                let caps = h.capabilities.join(",");
                rows.push([h.name, h.version, h.world, h.trust.into(), caps]);
            }
            for line in crate::output::table_lines(&rows) {
                outln!("{line}");
            }
        }
        RegistryCommand::Install {
            plugin,
            registry,
            grants,
        } => {
            let (name, wanted) = registry::parse_wanted(&plugin);
            let dir = registry::install_registry_dir(&project, name, registry.as_deref())?;
            let request = InstallRequest {
                registry: &dir,
                name,
                wanted,
                allowed_unsigned: &bl_app::plugin_host::allowed_unsigned(),
                grants: &grants,
            };
            let done = registry::install(&project, &request)?;
            answer(|| json!(done), || done.to_string());
        }
        RegistryCommand::Verify => {
            let checked = registry::verify(&project)?;
            let failed = checked.iter().filter(|c| c.problem.is_some()).count();
            if crate::output::json() {
                outln!(
                    "{}",
                    json!({"lock": project.lock_path(), "plugins": checked, "failed": failed})
                );
            } else {
                checked.iter().for_each(|c| outln!("{c}"));
                let lock = project.lock_path();
                outln!(
                    "{} plugin(s) in {}, {failed} failed",
                    checked.len(),
                    lock.display()
                );
            }
            return Ok(if failed == 0 { Exit::Success } else { Exit::No });
        }
        RegistryCommand::Rebuild {
            name,
            source,
            registry,
            plugin_version,
            target_dir,
        } => {
            let dir = registry::registry_dir(registry.as_deref())?;
            let request = RebuildRequest {
                name: &name,
                source: source.as_deref(),
                registry: &dir,
                version: plugin_version.as_deref(),
                target_dir: target_dir.as_deref(),
            };
            let r = registry::rebuild(&project, &request)?;
            answer(|| json!(r), || r.to_string());
            return Ok(if r.reproduced {
                Exit::Success
            } else {
                Exit::No
            });
        }
        RegistryCommand::Test {
            plugin,
            corpus,
            record,
        } => {
            let run = bl_app::plugin_conformance::test(&plugin, &corpus, record)?;
            answer(|| json!(run), || run.to_string());
            return Ok(if run.disagreements() == 0 {
                Exit::Success
            } else {
                Exit::No
            });
        }
        RegistryCommand::Trust { key } => {
            let key = bl_app::keys::read_verifier_key(&key)?;
            let added = project.trust(&key)?;
            let (name, file) = (key.name(), project.trust_path());
            answer(
                || json!({"trusted": name, "added": added, "trust_file": file}),
                || format!("{name} is trusted in {} (added: {added})", file.display()),
            );
        }
    }
    Ok(Exit::Success)
}
