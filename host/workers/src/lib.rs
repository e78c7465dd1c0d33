//! bl's worker adapters: how a graph node's turn is taken. Today that is
//! [`LocalCli`], an agent CLI run on this machine (claude, codex, grok,
//! muse, agy and dsh as bounded-loops 0.7 ships them, plus any a
//! `--providers` TOML catalog adds), in the isolation tier the node asks
//! for, through bl-sandbox. It implements bl-run's [`Worker`] port: it
//! returns the reply and the usage the CLI reported, never a verdict.

pub mod catalog;
pub mod failure;
pub mod loops;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bl_core::{CommandRunner, CommandSpec};
use bl_run::events::Usage;
use bl_run::executor::{WorkFuture, WorkReply, WorkRequest, Worker};

pub use bl_run::executor::Transport;
use bl_sandbox::{Sandbox, Subprocess, Tier};
use serde_json::Value;

pub use catalog::{Catalog, CatalogError, Envelope, Profile, PromptVia};
pub use probe::SandboxProbe;

pub mod https;
mod probe;
pub mod recorded;
pub mod tool;

/// Routes each request to the worker composed for its [`Transport`]. A
/// transport with none is denied, naming it; routers need none.
#[derive(Default, Clone)]
pub struct Workers {
    routes: std::collections::HashMap<Transport, Arc<dyn Worker>>,
}

impl Workers {
    pub fn new() -> Workers {
        Workers::default()
    }

    /// Sends `transport`'s requests to `worker` (replacing any before).
    pub fn route(mut self, transport: Transport, worker: Arc<dyn Worker>) -> Workers {
        self.routes.insert(transport, worker);
        self
    }

    /// bl's own tools, which every run has: the sandbox probe and commands.
    pub fn with_tools(self, hidden: Vec<PathBuf>) -> Workers {
        self.route(Transport::Probe, Arc::new(SandboxProbe))
            .route(Transport::Command, Arc::new(tool::CommandTool { hidden }))
    }
}

impl Worker for Workers {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let transport = request.transport;
        if transport == Transport::Router {
            return Box::pin(std::future::ready(WorkReply::text(Vec::new(), "bl:router")));
        }
        match self.routes.get(&transport) {
            Some(worker) => worker.work(request),
            None => {
                let why = format!("no {} worker is composed into this run", transport.name());
                Box::pin(std::future::ready(WorkReply::Denied(why)))
            }
        }
    }
}

/// The sandbox tier that holds a node of `isolation`.
pub fn tier(isolation: bl_graph::model::Isolation) -> Tier {
    use bl_graph::model::Isolation;
    match isolation {
        Isolation::WorkspaceOnly => Tier::WorkspaceOnly,
        Isolation::ProcessRestricted => Tier::ProcessRestricted,
        Isolation::ContainerRestricted => Tier::ContainerRestricted,
        Isolation::CustomerManagedWorker => Tier::CustomerManagedWorker,
    }
}

/// The operator's variables every agent CLI gets, as bounded-loops passes
/// them; nothing else of the operator's environment reaches it.
pub const BASE_ENV: &[&str] = &["PATH", "HOME", "SHELL", "LANG", "TERM"];

/// The most bytes of a reply kept; a longer one is a worker fault.
pub const REPLY_CAP: usize = 8 << 20;

/// Reads one variable of the operator's environment.
type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The network the egress posture leaves a local CLI (seed 000: `open` by
/// default; `allowlist` and `broker` are opt-in and fail closed).
#[derive(Debug, Clone, Default)]
pub enum Network {
    /// The posture `open`: the node's own tier decides.
    #[default]
    Open,
    /// `allowlist`: a container cage whose only way out is the CONNECT
    /// proxy behind this bridge.
    Allowlist(bl_sandbox::EgressBridge),
    /// `broker`: no network at all (a cage with its own network namespace).
    Closed,
}

/// Runs agent CLIs on this machine.
pub struct LocalCli {
    catalog: Catalog,
    /// Where per-node work directories are made (`<run>/work/<run_id>`).
    work_root: PathBuf,
    /// The PATH the CLIs are looked up in (the operator's).
    search_path: Option<std::ffi::OsString>,
    /// The operator's environment, for the names a profile is granted.
    lookup: EnvLookup,
    network: Network,
    /// One runner per caged tier for the whole run, so the cages share
    /// what they can (bwrap's path, the private mount point).
    cages: Arc<Cages>,
    /// Each profile's binary, looked up on PATH once per run.
    resolved: Arc<std::sync::Mutex<std::collections::HashMap<String, Option<PathBuf>>>>,
    /// The TMPDIR every workspace_only attempt shares, made on first use.
    shared_tmp: Arc<std::sync::OnceLock<PathBuf>>,
    /// What the process tier hides from the CLIs (the run's directory).
    hidden: Vec<PathBuf>,
}

struct Cages {
    process: Sandbox,
    container: Sandbox,
}

impl Cages {
    fn new(network: &Network, hidden: &[PathBuf]) -> Cages {
        let container = match network {
            Network::Allowlist(bridge) => {
                Sandbox::new(Tier::ContainerRestricted).with_egress(bridge.clone())
            }
            _ => Sandbox::new(Tier::ContainerRestricted),
        };
        Cages {
            process: Sandbox::new(Tier::ProcessRestricted).hiding(hidden.to_vec()),
            container,
        }
    }
}

impl LocalCli {
    pub fn new(catalog: Catalog, work_root: PathBuf) -> Self {
        LocalCli {
            catalog,
            // Absolute: cages bind these paths, and a relative one means
            // something else inside.
            work_root: std::path::absolute(&work_root).unwrap_or(work_root),
            search_path: std::env::var_os("PATH"),
            lookup: Arc::new(|name| std::env::var(name).ok()),
            network: Network::Open,
            cages: Arc::new(Cages::new(&Network::Open, &[])),
            resolved: Default::default(),
            shared_tmp: Default::default(),
            hidden: Vec::new(),
        }
    }

    /// Applies an egress posture to every CLI this worker runs.
    pub fn with_network(mut self, network: Network) -> Self {
        self.network = network;
        self.cages = Arc::new(Cages::new(&self.network, &self.hidden));
        self
    }

    /// Hides `dirs` (the run's directory) from the CLIs it cages.
    pub fn hiding(mut self, dirs: Vec<PathBuf>) -> Self {
        self.hidden = dirs;
        self.cages = Arc::new(Cages::new(&self.network, &self.hidden));
        self
    }

    /// The binary for `provider`, found on the operator's PATH (once).
    pub fn resolve(&self, binary: &str) -> Option<PathBuf> {
        let mut resolved = self.resolved.lock().unwrap_or_else(|e| e.into_inner());
        resolved
            .entry(binary.to_string())
            .or_insert_with(|| find_on_path(binary, self.search_path.as_deref()))
            .clone()
    }
}

fn find_on_path(binary: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if binary.contains('/') {
        return Some(PathBuf::from(binary));
    }
    std::env::split_paths(path?)
        .map(|dir| dir.join(binary))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The TMPDIR workspace_only attempts share, kept with the run
/// (`<root>/.tmp`). That tier is no cage: its commands can reach each
/// other's files anyway, and a directory per attempt costs a mkdir each.
fn shared_tmp(root: &Path, made: &std::sync::OnceLock<PathBuf>) -> std::io::Result<PathBuf> {
    if let Some(dir) = made.get() {
        return Ok(dir.clone());
    }
    let dir = root.join(".tmp");
    std::fs::create_dir_all(&dir)?;
    Ok(made.get_or_init(|| dir).clone())
}

impl Worker for LocalCli {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let Some(binding) = &request.binding else {
            return Box::pin(std::future::ready(WorkReply::Fault(format!(
                "node '{}' has no binding for a local CLI",
                request.node_id
            ))));
        };
        let provider = binding.provider_id.clone();
        let Some(profile) = self.catalog.get(&provider).cloned() else {
            return Box::pin(std::future::ready(WorkReply::Fault(format!(
                "no local-CLI profile for provider '{provider}'"
            ))));
        };
        let Some(binary) = self.resolve(&profile.binary) else {
            return Box::pin(std::future::ready(WorkReply::Fault(format!(
                "'{}' is not on PATH",
                profile.binary
            ))));
        };
        // What bounded-loops passes an agent CLI (its login session lives
        // in the operator's HOME), then what the profile is granted.
        let env: Vec<(String, String)> = BASE_ENV
            .iter()
            .map(|name| name.to_string())
            .chain(profile.env_grant.iter().cloned())
            .filter(|name| !profile.unset_env.contains(name))
            .filter_map(|name| (self.lookup)(&name).map(|v| (name, v)))
            .collect();
        let place = Place {
            root: self.work_root.clone(),
            network: self.network.clone(),
            cages: self.cages.clone(),
            shared_tmp: self.shared_tmp.clone(),
        };
        Box::pin(async move {
            let handle = tokio::task::spawn_blocking(move || {
                run_cli(&profile, &binary, &place, &request, env)
            });
            handle
                .await
                .unwrap_or_else(|e| WorkReply::Fault(format!("worker task failed: {e}")))
        })
    }
}

/// Where and how an attempt's CLI runs.
struct Place {
    root: PathBuf,
    network: Network,
    cages: Arc<Cages>,
    shared_tmp: Arc<std::sync::OnceLock<PathBuf>>,
}

fn run_cli(
    profile: &Profile,
    binary: &Path,
    place: &Place,
    request: &WorkRequest,
    env: Vec<(String, String)>,
) -> WorkReply {
    let workspace = request.workspace.clone();
    let (argv, stdin) = profile.argv(binary, &request.prompt, &workspace);
    let secrets = failure::secret_values(&env);
    let home = profile.home_grant(&env);
    let spec = CommandSpec {
        argv,
        workspace,
        workspace_writable: true,
        stdin,
        timeout: request.deadline.max(Duration::from_secs(1)),
        output_cap: REPLY_CAP,
        stream: false,
        env,
        private_dir: None,
        home,
    };
    let tier = tier(request.isolation);
    // A posture other than open lifts the node into a cage that can hold
    // it: only the container tier carries the proxy bridge, and any cage
    // has a network namespace of its own.
    let tier = match (&place.network, tier) {
        (_, Tier::CustomerManagedWorker) => tier,
        (Network::Open, tier) => tier,
        (Network::Allowlist(_), _) => Tier::ContainerRestricted,
        (Network::Closed, Tier::WorkspaceOnly) => Tier::ProcessRestricted,
        (Network::Closed, tier) => tier,
    };
    let result = match tier {
        Tier::WorkspaceOnly => match shared_tmp(&place.root, &place.shared_tmp) {
            Ok(tmp) => Subprocess.run(&CommandSpec {
                private_dir: Some(tmp),
                ..spec
            }),
            Err(e) => return WorkReply::Fault(format!("cannot make the work directory: {e}")),
        },
        // A cage mounts a private HOME of its own; one in the run directory
        // may lie where the caged user cannot reach.
        Tier::ContainerRestricted => place.cages.container.run(&spec),
        Tier::ProcessRestricted => place.cages.process.run(&spec),
        Tier::CustomerManagedWorker => Sandbox::new(tier).run(&spec),
    };
    let result = match result {
        Ok(r) => r,
        Err(e) => return WorkReply::Fault(failure::redact(&e.to_string(), &secrets)),
    };
    if result.timed_out || result.exit_code != Some(0) {
        return WorkReply::Fault(failure::describe(
            &profile.binary,
            &result,
            request.deadline,
            &secrets,
        ));
    }
    if result.truncated {
        return WorkReply::Fault(format!(
            "'{}' wrote more than {REPLY_CAP} bytes",
            profile.binary
        ));
    }
    read_reply(profile, result.stdout_tail)
}

/// Turns a CLI's stdout into the reply and its usage, by the profile's envelope.
pub fn read_reply(profile: &Profile, stdout: Vec<u8>) -> WorkReply {
    let reported_by = format!("cli:{}", profile.name);
    let refused = || {
        WorkReply::Contract(format!(
            "'{0}' was asked for a '{1}' JSON envelope but returned something this version cannot read; refusing to store the raw output as the node's reply",
            profile.name,
            profile.envelope.name()
        ))
    };
    match profile.envelope {
        Envelope::Plain => WorkReply::Reply {
            bytes: stdout,
            usage: None,
            reported_by,
            plugins: Vec::new(),
        },
        Envelope::Claude => {
            let Ok(Value::Object(env)) = serde_json::from_slice::<Value>(trim(&stdout)) else {
                return refused();
            };
            let Some(text) = env.get("result").and_then(Value::as_str) else {
                return refused();
            };
            if env.get("type").and_then(Value::as_str) != Some("result") {
                return refused();
            }
            // Tokens count whenever the envelope reports them (bounded-loops
            // counts them only with the two cache_* fields as well, and a
            // token budget then fails as unmeasurable).
            let usage = env.get("usage").and_then(|u| {
                let n = |k: &str| u.get(k).and_then(Value::as_u64);
                Some(Usage {
                    input_tokens: n("input_tokens")?,
                    output_tokens: n("output_tokens")?,
                    cost_microunits: 0,
                })
            });
            WorkReply::Reply {
                bytes: text.as_bytes().to_vec(),
                usage,
                reported_by,
                plugins: Vec::new(),
            }
        }
        Envelope::Grok | Envelope::Agy => {
            // bl's reading of these CLIs' JSON output: `response` is the
            // reply; `stats.input_tokens`/`stats.output_tokens` the usage.
            let Ok(Value::Object(env)) = serde_json::from_slice::<Value>(trim(&stdout)) else {
                return refused();
            };
            let Some(text) = env.get("response").and_then(Value::as_str) else {
                return refused();
            };
            let usage = env.get("stats").and_then(|s| {
                Some(Usage {
                    input_tokens: s.get("input_tokens")?.as_u64()?,
                    output_tokens: s.get("output_tokens")?.as_u64()?,
                    cost_microunits: 0,
                })
            });
            WorkReply::Reply {
                bytes: text.as_bytes().to_vec(),
                usage,
                reported_by,
                plugins: Vec::new(),
            }
        }
    }
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &bytes[start..end]
}
