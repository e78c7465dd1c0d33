//! `bl graph run --execute`, `status`, `approve` and `resume`: the
//! composition root of the graph executor. It compiles the plan, lays out
//! the run directory as bounded-loops 0.7 does (manifest.yaml,
//! connections.json, plan.json, run-meta.json, controller-events.jsonl,
//! artifacts/, approvals.json, published-effects.json), wires the
//! executor's ports to bl-store and bl-workers, and prints the outcome.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bl_core::python_json;
use bl_graph::model::{Named, NodeKind};
use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_graph::{CompileInput, Graph, Plan};
use bl_run::executor::{self, Caps, Ports, RunEnd, RunSettings};
use bl_run::projection::{self, RunView};
use bl_run::schedule::{Driver, Schedule};
use bl_store::RunIdentity;
use bl_workers::{Catalog, LocalCli, Network, SandboxProbe, Workers};
use serde_json::{Value, json};

use crate::exit::{CliError, CliResult, Exit};
use crate::output::outln;
use crate::run_adapters::{
    FileDecisions, LogJournal, Recorded, RunArtifacts, RunLedger, read_events,
};

pub const RUN_ID: &str = "graph-run";
pub const ORGANIZATION: &str = "local-org";
pub const PROJECT: &str = "local-project";

/// The flags `run`, `approve` and `resume` share.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DriveFlags {
    /// JSON object mapping node_id -> prompt (never recorded).
    #[arg(long)]
    pub inputs: Option<PathBuf>,
    /// Ceiling on the tokens the whole run may spend; reaching it pauses the run.
    #[arg(long = "max-tokens")]
    pub max_tokens: Option<u64>,
    /// Ceiling on the run's cost in USD (needs prices from --budget-file).
    #[arg(long = "max-cost-usd")]
    pub max_cost_usd: Option<String>,
    /// A JSON budget file: {"max_tokens": N, "max_cost_usd": "2.50", "prices": {...}}.
    #[arg(long = "budget-file")]
    pub budget_file: Option<PathBuf>,
    /// A provider catalog (TOML) adding or overriding agent CLIs.
    #[arg(long)]
    pub providers: Option<PathBuf>,
    /// How many nodes run at once (default: the number of cores).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Sign the checkpoint written at every pause and at the end with this
    /// private key (from `bl keys generate`); unsigned without it.
    #[arg(long = "checkpoint-key")]
    pub checkpoint_key: Option<PathBuf>,
}

/// A run directory, loaded and its plan recompiled.
struct LoadedRun {
    dir: PathBuf,
    graph: Graph,
    plan: Plan,
    meta: Value,
}

fn refused(message: impl Into<String>) -> CliError {
    CliError::refused(message.into())
}

fn read_json(path: &Path, what: &str) -> Result<Value, CliError> {
    let bytes = crate::paths::read_capped(path, bl_graph::MAX_DOCUMENT_BYTES)
        .map_err(|e| refused(format!("cannot read {what} {} — {e}", path.display())))?;
    bl_graph::check_size(bytes.len(), bl_graph::Format::Json)
        .map_err(|e| refused(format!("{}: {what} refused: {e}", path.display())))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        refused(format!(
            "{}: {what} is not valid JSON (line {}, column {}): {e}",
            path.display(),
            e.line(),
            e.column()
        ))
    })
}

fn read_prompts(flags: &DriveFlags) -> Result<HashMap<String, String>, CliError> {
    let Some(path) = &flags.inputs else {
        return Ok(HashMap::new());
    };
    let value = read_json(path, "inputs")?;
    let Value::Object(map) = value else {
        return Err(refused(format!(
            "{}: inputs must be a JSON object mapping node_id to a prompt",
            path.display()
        )));
    };
    let mut prompts = HashMap::new();
    for (node, prompt) in map {
        let Value::String(p) = prompt else {
            return Err(refused(format!(
                "{}: /{node}: a prompt must be a string",
                path.display()
            )));
        };
        prompts.insert(node, p);
    }
    Ok(prompts)
}

fn catalog(flags: &DriveFlags) -> Result<Catalog, CliError> {
    let mut catalog = Catalog::shipped();
    let path = flags
        .providers
        .clone()
        .or_else(|| std::env::var_os("BOUNDED_LOOPS_PROVIDERS").map(PathBuf::from));
    if let Some(path) = path {
        let bytes = crate::paths::read_capped(&path, bl_graph::MAX_DOCUMENT_BYTES)
            .map_err(|e| refused(format!("cannot read providers {} — {e}", path.display())))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| refused(format!("{}: not UTF-8", path.display())))?;
        catalog
            .merge_toml(&path.display().to_string(), &text)
            .map_err(|e| refused(format!("graph run: catalog rejected — {e}")))?;
    }
    Ok(catalog)
}

/// Prices from `--budget-file`'s `prices`: `{"provider/model":
/// {"input_microunits_per_mtok": N, "output_microunits_per_mtok": N}}`.
fn prices(flags: &DriveFlags) -> Result<HashMap<String, executor::Price>, CliError> {
    let Some(path) = &flags.budget_file else {
        return Ok(HashMap::new());
    };
    let v = read_json(path, "budget file")?;
    let mut prices = HashMap::new();
    if let Some(table) = v.get("prices") {
        let Some(table) = table.as_object() else {
            return Err(refused(format!(
                "{}: /prices must be an object of \"provider/model\": {{input_microunits_per_mtok, output_microunits_per_mtok}}",
                path.display()
            )));
        };
        for (route, p) in table {
            let rate = |k: &str| {
                p[k].as_u64().ok_or_else(|| {
                    refused(format!(
                        "{}: /prices/{route}/{k} must be a whole number of microunits per million tokens",
                        path.display()
                    ))
                })
            };
            prices.insert(
                route.clone(),
                executor::Price {
                    input_microunits_per_mtok: rate("input_microunits_per_mtok")?,
                    output_microunits_per_mtok: rate("output_microunits_per_mtok")?,
                },
            );
        }
    }
    Ok(prices)
}

/// A cost cap is only as good as the prices: every route a worker node
/// takes must have one, or the run is refused before it starts.
fn check_priced(
    schedule: &Schedule,
    caps: &Caps,
    prices: &HashMap<String, executor::Price>,
) -> Result<(), CliError> {
    if caps.max_cost_microunits.is_none() {
        return Ok(());
    }
    for node in &schedule.nodes {
        if let Some(b) = &node.binding {
            let route = format!("{}/{}", b.provider_id, b.model_target);
            if !prices.contains_key(&route) {
                return Err(refused(format!(
                    "a cost cap is set, but node '{}' takes route '{route}', which has no price; a provider reports tokens, not money, so add \"{route}\" to the prices of --budget-file, or drop the cost cap",
                    node.id
                )));
            }
        }
    }
    Ok(())
}

fn caps(flags: &DriveFlags) -> Result<Caps, CliError> {
    let mut caps = Caps::default();
    if let Some(path) = &flags.budget_file {
        let v = read_json(path, "budget file")?;
        caps.max_tokens = v["max_tokens"].as_u64();
        if let Some(usd) = v["max_cost_usd"].as_str() {
            caps.max_cost_microunits = Some(usd_to_micro(usd)?);
        }
    }
    if let Some(t) = flags.max_tokens {
        caps.max_tokens = Some(t);
    }
    if let Some(usd) = &flags.max_cost_usd {
        caps.max_cost_microunits = Some(usd_to_micro(usd)?);
    }
    Ok(caps)
}

fn usd_to_micro(text: &str) -> Result<u64, CliError> {
    let v: f64 = text
        .parse()
        .map_err(|_| refused(format!("--max-cost-usd: '{text}' is not an amount")))?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(refused(format!(
            "--max-cost-usd: '{text}' is not an amount"
        )));
    }
    Ok((v * 1_000_000.0).round() as u64)
}

/// Compiles the plan. `packages`: the loop packages admitted (a run
/// checks its loop nodes against them); `None` when a recorded run's plan
/// is recompiled, where the recorded plan_id is the check.
fn compile(
    graph: &Graph,
    connections: Option<&[bl_graph::Connection]>,
    packages: Option<&BTreeSet<String>>,
) -> Result<Plan, String> {
    bl_graph::compile(
        graph,
        &CompileInput {
            connections,
            available_packages: packages,
            policy_digest: DEFAULT_POLICY_DIGEST,
        },
    )
    .map_err(|e| e.to_string())
}

/// Why a manifest could not be read as a graph.
enum GraphFailure {
    NotUtf8,
    Refused(bl_graph::Refusal),
}

impl GraphFailure {
    /// `<path>: <why>`, with the place the refusal points at.
    fn at(&self, path: &Path) -> String {
        match self {
            GraphFailure::NotUtf8 => format!("{}: not UTF-8", path.display()),
            GraphFailure::Refused(r) => format!("{}: {r}", path.display()),
        }
    }
}

fn parse_graph(bytes: &[u8]) -> Result<Graph, GraphFailure> {
    let text = std::str::from_utf8(bytes).map_err(|_| GraphFailure::NotUtf8)?;
    // run directories keep the manifest as manifest.yaml whatever it was.
    let format = if text.trim_start().starts_with('{') {
        bl_graph::Format::Json
    } else {
        bl_graph::Format::Yaml
    };
    bl_graph::lint(text, format).map_err(GraphFailure::Refused)
}

fn identity(plan: &Plan) -> RunIdentity {
    RunIdentity {
        organization_id: ORGANIZATION.into(),
        project_id: PROJECT.into(),
        run_id: RUN_ID.into(),
        graph_digest: plan.graph_digest.clone(),
        plan_digest: plan.plan_id.clone(),
        policy_digest: plan.policy_digest.clone(),
    }
}

/// Preflight, fail-closed, before anything is written: every worker node's
/// provider has a profile, and every binding's transport can run here.
fn preflight(schedule: &Schedule, catalog: &Catalog) -> Result<(), CliError> {
    for node in &schedule.nodes {
        let Some(binding) = &node.binding else {
            continue;
        };
        if binding.transport != "local_cli" {
            return Err(refused(format!(
                "node '{}' binds transport '{}', which this version cannot execute yet (only local_cli). Refused before any attempt starts.",
                node.id, binding.transport
            )));
        }
        if catalog.get(&binding.provider_id).is_none() {
            let known: Vec<&str> = catalog.names().collect();
            return Err(refused(format!(
                "node '{}' binds local-CLI provider '{}', which this deployment has no profile for (known: {}). Add a provider catalog entry for it (--providers / BOUNDED_LOOPS_PROVIDERS), or bind the node to a provider that is installed. Refused before any attempt starts: reaching this node would fail every attempt identically, having already paid for every node upstream of it.",
                node.id,
                binding.provider_id,
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// Where a run goes when --out is left out:
/// `<workspace>/.bounded-loops/runs/<UTC stamp>-<8 hex>/`, the workspace
/// being --workspace, else $BOUNDED_LOOPS_WORKSPACE, else here.
pub fn default_out(workspace: Option<PathBuf>) -> PathBuf {
    let root = workspace
        .or_else(|| std::env::var_os("BOUNDED_LOOPS_WORKSPACE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "");
    let mut nonce = [0u8; 4];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut nonce)
    });
    root.join(".bounded-loops/runs")
        .join(format!("{stamp}-{}", hex::encode(nonce)))
}

/// What `graph run` reads besides the manifest.
pub struct RunInputs<'a> {
    pub connections: Option<&'a Path>,
    pub admitted: Option<&'a Path>,
    pub loop_roots: &'a [PathBuf],
}

/// `bl graph run --execute MANIFEST --out D ...`
pub fn run(manifest: &Path, inputs: &RunInputs, out: &Path, flags: &DriveFlags) -> CliResult {
    let bytes = crate::paths::read_capped(manifest, bl_graph::MAX_DOCUMENT_BYTES).map_err(|e| {
        refused(format!(
            "graph run: cannot read {} — {e}",
            manifest.display()
        ))
    })?;
    bl_graph::check_size(bytes.len(), bl_graph::Format::Yaml)
        .map_err(|e| refused(format!("graph run: {}: {e}", manifest.display())))?;
    run_manifest(manifest, bytes, inputs, out, flags)
}

/// The built-in graph `bl graph run --execute` runs without a manifest: one
/// node that probes its own sandbox (network, writes outside the workspace,
/// a sysctl, the keyring); its gate passes only if the OS denied them all.
fn probe_manifest() -> Value {
    json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": "bl-sandbox-probe", "version": "1.0.0",
        "nodes": [{
            "id": "sandbox-probe", "kind": "tool", "tool_ref": bl_run::schedule::PROBE_TOOL,
            "inputs": {}, "outputs": {"report": "text"},
            "budget": {"max_attempts": 1, "max_wallclock_s": 120},
            "effects": ["read_only"], "isolation": "container_restricted",
        }],
        "edges": [],
        "connection_slots": [],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"},
    })
}

/// `bl graph run --execute --out D` with no manifest: the sandbox probe.
pub fn run_probe(out: &Path, flags: &DriveFlags) -> CliResult {
    if cfg!(target_os = "linux") && bl_sandbox::find_bwrap().is_none() {
        return Err(refused(
            "graph run: the built-in sandbox probe runs in the container_restricted tier, which needs bubblewrap, and it is not installed: install the `bubblewrap` package (or run `scripts/dev setup`), then run this again",
        ));
    }
    let bytes =
        serde_json::to_vec_pretty(&probe_manifest()).expect("the probe manifest serializes");
    let inputs = RunInputs {
        connections: None,
        admitted: None,
        loop_roots: &[],
    };
    run_manifest(
        Path::new("built-in sandbox probe"),
        bytes,
        &inputs,
        out,
        flags,
    )
}

fn run_manifest(
    manifest: &Path,
    bytes: Vec<u8>,
    inputs: &RunInputs,
    out: &Path,
    flags: &DriveFlags,
) -> CliResult {
    let connections = inputs.connections;
    // bounded-loops' words for a manifest it will not run (the pointer is
    // the place; `bl graph lint` adds the line and column).
    let graph = parse_graph(&bytes).map_err(|e| match e {
        GraphFailure::Refused(r) => refused(format!("compile failed {r}")),
        other => refused(format!("graph run: {}", other.at(manifest))),
    })?;
    let (conn_value, conns) = match connections {
        Some(p) => {
            let v = read_json(p, "connections")?;
            let c = bl_graph::parse_connections(&v)
                .map_err(|e| refused(format!("graph run: {}: {e}", p.display())))?;
            (Some(v), Some(c))
        }
        None => (None, None),
    };
    let packages: BTreeSet<String> = bl_packages::Catalogue::discover(inputs.loop_roots)
        .map_err(|e| {
            refused(format!(
                "graph run: the loop-package catalogue on this host is unusable — {e}"
            ))
        })?
        .digests()
        .map(str::to_owned)
        .collect();
    let plan = compile(&graph, conns.as_deref(), Some(&packages))
        .map_err(|e| refused(format!("compile failed {e}")))?;
    if let Some(path) = inputs.admitted {
        let value = read_json(path, "admitted connections")?;
        bl_egress::admitted::parse_admitted(&value)
            .map_err(|e| refused(format!("graph run: {}: {e}", path.display())))?;
    }
    let schedule = Schedule::of(&graph, &plan);
    let catalog = catalog(flags)?;
    preflight(&schedule, &catalog)?;
    let prompts = read_prompts(flags)?;
    let caps = caps(flags)?;
    check_priced(&schedule, &caps, &prices(flags)?)?;
    caging_posture(&schedule)?;
    if out.join(crate::run_adapters::EVENTS_FILE).exists() {
        return Err(refused(format!(
            "graph run: {} already holds a run; continue it with `bl graph resume --run {}`",
            out.display(),
            out.display()
        )));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| refused(format!("graph run: cannot make {} — {e}", out.display())))?;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(out.join(name), bytes)
            .map_err(|e| refused(format!("graph run: cannot write {name} — {e}")))
    };
    write("manifest.yaml", &bytes)?;
    if let Some(v) = &conn_value {
        write("connections.json", python_json(v).as_bytes())?;
    }
    write("plan.json", plan.bytes.as_bytes())?;
    let meta = json!({
        "compiler_version": "bounded-loops.graph-compiler/v1", "execution": true,
        "fail_mode": graph.policies.fail_mode.name(), "mode": "local_cli",
        "organization_id": ORGANIZATION, "plan_id": plan.plan_id, "platform": std::env::consts::OS,
        "policy_digest": plan.policy_digest, "project_id": PROJECT, "run_id": RUN_ID,
    });
    write("run-meta.json", python_json(&meta).as_bytes())?;
    let loaded = LoadedRun {
        dir: out.to_path_buf(),
        graph,
        plan,
        meta,
    };
    let (end, view) = drive(&loaded, &schedule, catalog, prompts, caps, None, flags)?;
    report_drive(&loaded, &end, &view, "Local-CLI graph run — REAL execution")
}

/// Loads a run directory and recompiles its plan; refuses when the plan
/// differs from the one recorded.
fn load_run(dir: &Path, verb: &str) -> Result<LoadedRun, CliError> {
    let meta_path = dir.join("run-meta.json");
    if !meta_path.exists() {
        return Err(refused(format!(
            "graph {verb}: cannot reconstruct plan — run-meta.json not found in {}",
            dir.display()
        )));
    }
    let meta = read_json(&meta_path, "run-meta.json")?;
    let manifest = dir.join("manifest.yaml");
    let bytes = std::fs::read(&manifest).map_err(|e| {
        refused(format!(
            "graph {verb}: cannot reconstruct plan — {}: {e}",
            manifest.display()
        ))
    })?;
    let graph = parse_graph(&bytes).map_err(|e| {
        refused(format!(
            "graph {verb}: cannot reconstruct plan — {}",
            e.at(&manifest)
        ))
    })?;
    let conn_path = dir.join("connections.json");
    let conns = if conn_path.exists() {
        let v = read_json(&conn_path, "connections")?;
        Some(
            bl_graph::parse_connections(&v)
                .map_err(|e| refused(format!("graph {verb}: {}: {e}", conn_path.display())))?,
        )
    } else {
        None
    };
    let plan = compile(&graph, conns.as_deref(), None)
        .map_err(|e| refused(format!("graph {verb}: cannot reconstruct plan — {e}")))?;
    let recorded = meta["plan_id"].as_str().unwrap_or_default();
    if recorded != plan.plan_id {
        return Err(refused(format!(
            "graph {verb}: the plan recompiled from {} is {}, but the run recorded {recorded}; the run directory was changed after the run began",
            dir.display(),
            plan.plan_id
        )));
    }
    Ok(LoadedRun {
        dir: dir.to_path_buf(),
        graph,
        plan,
        meta,
    })
}

/// A controller killed mid-write leaves a torn last line: it was never a
/// record, so it is moved aside (kept beside the log), and said so.
fn recover_torn_tail(dir: &Path) -> Result<(), CliError> {
    let log = dir.join(crate::run_adapters::EVENTS_FILE);
    if !log.exists() {
        return Ok(());
    }
    match bl_store::recover_torn_tail(&log) {
        Ok(Some(tail)) => {
            crate::output::errln!(
                "note: the log's last line was torn ({} bytes, as after a crash); it was moved aside to {}.torn-{}",
                tail.len,
                log.display(),
                tail.offset
            );
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(e) => Err(refused(e.to_string())),
    }
}

fn view_of(dir: &Path) -> Result<(RunView, Vec<Recorded>, bl_store::ChainHead), CliError> {
    let (events, head) =
        read_events(dir).map_err(|e| refused(format!("the event log is unusable: {e}")))?;
    let view = projection::project(events.iter().map(|r| (r.kind.as_str(), &r.payload)));
    Ok((view, events, head))
}

#[allow(clippy::too_many_arguments)]
fn drive(
    run: &LoadedRun,
    schedule: &Schedule,
    catalog: Catalog,
    prompts: HashMap<String, String>,
    caps: Caps,
    resume_ordinal: Option<u32>,
    flags: &DriveFlags,
) -> Result<(RunEnd, RunView), CliError> {
    let mut journal =
        LogJournal::open(&run.dir, identity(&run.plan)).map_err(|e| refused(e.to_string()))?;
    let artifacts = RunArtifacts {
        store: bl_store::ArtifactStore::with_group_commit(run.dir.join("artifacts"), 64 << 20),
        organization_id: ORGANIZATION.into(),
        project_id: PROJECT.into(),
        sensitivity: schedule.data_class.clone(),
    };
    let decisions = FileDecisions::read(&run.dir).map_err(|e| refused(e.to_string()))?;
    let ledger = RunLedger {
        dir: run.dir.clone(),
        run_id: RUN_ID.into(),
        plan_id: run.plan.plan_id.clone(),
    };
    let work_root = run.dir.join("work").join(RUN_ID);
    let (network, _proxy) = egress_network(schedule, &run.dir)?;
    let worker = Arc::new(Workers {
        local_cli: LocalCli::new(catalog, work_root.clone()).with_network(network),
        probe: SandboxProbe { work_root },
    });
    let mut progress = crate::graph_progress::Progress::new(schedule);
    let mut observer = |e: &bl_run::events::Event| progress.event(e);
    let mut ports = Ports {
        journal: &mut journal,
        artifacts: &artifacts,
        decisions: &decisions,
        ledger: &ledger,
        worker,
        observer: &mut observer,
    };
    let prices = prices(flags)?;
    check_priced(schedule, &caps, &prices)?;
    let settings = RunSettings {
        run_id: RUN_ID.into(),
        plan_id: run.plan.plan_id.clone(),
        concurrency: flags
            .concurrency
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        caps,
        prompts,
        resume_ordinal,
        prices,
    };
    // One thread drives the controller and polls the node tasks; workers
    // run on the blocking pool. A node then costs two thread hand-offs
    // (to its worker and back), not four.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| refused(format!("cannot start the runtime: {e}")))?;
    let end = runtime
        .block_on(executor::drive(schedule, &settings, &mut ports))
        .map_err(|e| refused(format!("graph run: {e}")))?;
    drop(ports);
    progress.finish();
    let view = journal.view();
    drop(journal);
    checkpoint(&run.dir, flags)?;
    Ok((end, view))
}

/// The egress posture (BOUNDED_LOOPS_EGRESS_POSTURE, else the config `bl
/// graph init` writes, else open) when it cages the run's local CLIs;
/// `None` for open. It fails closed: a posture that needs a cage where
/// none can run is refused, before anything runs.
fn caging_posture(
    schedule: &Schedule,
) -> Result<Option<bl_egress::posture::EgressConfig>, CliError> {
    use bl_egress::posture::{Posture, resolve_posture};
    let config = resolve_posture(|name| std::env::var(name).ok())
        .map_err(|e| refused(format!("egress posture: {e}")))?;
    if config.posture == Posture::Open || schedule.nodes.iter().all(|n| n.driver != Driver::Worker)
    {
        return Ok(None);
    }
    if cfg!(target_os = "linux") && bl_sandbox::find_bwrap().is_none() {
        return Err(refused(format!(
            "the egress posture is '{}', which cages every local CLI, and bubblewrap is not installed: install the `bubblewrap` package (or run `scripts/dev setup`), or choose the open posture; nothing was run",
            config.posture.as_str()
        )));
    }
    Ok(Some(config))
}

/// The network local CLIs get under the posture, with the allowlist
/// proxy's guard (it serves until dropped).
fn egress_network(
    schedule: &Schedule,
    run_dir: &Path,
) -> Result<(Network, Option<crate::sandbox_cmd::ProxyGuard>), CliError> {
    let Some(config) = caging_posture(schedule)? else {
        return Ok((Network::Open, None));
    };
    if config.posture == bl_egress::posture::Posture::Allowlist {
        let record = run_dir.join(EGRESS_DECISIONS);
        let guard = crate::sandbox_cmd::start_proxy(&config, Some(&record))
            .map_err(|e| refused(format!("the allowlist proxy could not start: {e}")))?;
        return Ok((Network::Allowlist(guard.bridge.clone()), Some(guard)));
    }
    Ok((Network::Closed, None))
}

/// Where the allowlist proxy's decisions for a run's local CLIs are kept.
const EGRESS_DECISIONS: &str = "egress-decisions.jsonl";

/// Seals the run as it stands (log head, Merkle root, the records' digests)
/// into `checkpoints/`, at every pause and at the end.
fn checkpoint(dir: &Path, flags: &DriveFlags) -> Result<(), CliError> {
    let key = match &flags.checkpoint_key {
        Some(path) => Some(
            crate::keys_cmd::read_signing_key(path)
                .map_err(|e| refused(format!("--checkpoint-key: {e}")))?,
        ),
        None => None,
    };
    bl_store::provable::write_checkpoint(dir, key.as_ref())
        .map(|_| ())
        .map_err(|e| refused(format!("the run's checkpoint could not be written: {e}")))
}

fn exit_of(end: &RunEnd) -> Exit {
    match end {
        RunEnd::Succeeded => Exit::Success,
        RunEnd::AwaitingApproval(_) => Exit::Paused,
        RunEnd::Failed | RunEnd::BudgetPaused(_) => Exit::Refused,
    }
}

fn report_drive(run: &LoadedRun, end: &RunEnd, view: &RunView, title: &str) -> CliResult {
    let order: Vec<&str> = run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let awaiting = view.awaiting(order.iter().copied());
    if crate::output::json() {
        let nodes: Vec<Value> = order
            .iter()
            .map(|id| {
                let n = view.node(id);
                json!({"node_id": id, "state": n.state, "artifact_digests": n.artifact_digests})
            })
            .collect();
        outln!(
            "{}",
            python_json(&json!({
                "out": run.dir.display().to_string(), "run_id": RUN_ID,
                "run_state": view.run_state, "awaiting_approval": awaiting,
                "paused": matches!(end, RunEnd::AwaitingApproval(_)),
                "budget_pause": view.budget_pause, "nodes": nodes,
                "spend_tokens": view.tokens, "spend_cost_microunits": view.cost_microunits,
            }))
        );
        return Ok(exit_of(end));
    }
    outln!("{title}");
    outln!("==============================================================");
    outln!("run_state : {}", view.run_state);
    if !awaiting.is_empty() {
        outln!(
            "pause_status : PAUSED — awaiting human decision on {} node(s): {}",
            awaiting.len(),
            awaiting.join(", ")
        );
    }
    for id in &order {
        let n = view.node(id);
        let mark = match n.state.as_str() {
            "SUCCEEDED" => "OK",
            "AWAITING_APPROVAL" => "~~",
            _ => "!!",
        };
        let artifact = n
            .artifact_digests
            .first()
            .map_or("-".to_string(), |d| format!("{}...", &d[..d.len().min(24)]));
        outln!("  {mark} node '{id}': {}  artifact={artifact}", n.state);
    }
    outln!("out       : {}", run.dir.display());
    outln!();
    match end {
        RunEnd::AwaitingApproval(nodes) => {
            outln!("To continue:");
            for n in nodes {
                outln!(
                    "  bl graph approve --run {} --node {n} --decision approved|rejected",
                    run.dir.display()
                );
            }
        }
        RunEnd::BudgetPaused(p) => {
            outln!("Paused: {}", p.reason);
            outln!(
                "Continue with a higher ceiling:  bl graph resume --run {} --max-tokens N",
                run.dir.display()
            );
        }
        RunEnd::Failed => {
            outln!("Run did not succeed; inspect the event log in the run directory.")
        }
        RunEnd::Succeeded => outln!("Verify it:  bl verify {}", run.dir.display()),
    }
    Ok(exit_of(end))
}

/// `bl graph status --run D [--json]`
pub fn status(dir: &Path) -> CliResult {
    let run = load_run(dir, "status")?;
    let (view, _, head) = view_of(dir)?;
    let edges: Vec<Value> = run
        .graph
        .edges
        .iter()
        .map(|e| json!([e.from_node, e.to_node]))
        .collect();
    let nodes: Vec<Value> = run
        .graph
        .nodes
        .iter()
        .map(|node| {
            let n = view.node(&node.id);
            json!({
                "artifact_digests": n.artifact_digests, "attempt": n.attempt,
                "gate_passed": n.gate_passed, "gate_reason": n.gate_reason,
                "hard_deadline_ms": node.budget.max_wallclock_s * 1000,
                "isolation": node.isolation.name(), "kind": node.kind.name(),
                "node_id": node.id,
                "required_effects": node.effects.iter().map(|e| e.name()).collect::<Vec<_>>(),
                "route": n.route, "spend_complete": n.spend_complete,
                "spend_cost_microunits": n.spend_cost_microunits, "spend_tokens": n.spend_tokens,
                "state": n.state, "transport": n.transport,
            })
        })
        .collect();
    let status = json!({
        "budget_pause": view.budget_pause, "demonstration": false, "edges": edges,
        "gate_passed": null, "gate_reason": null, "graph_digest": run.plan.graph_digest,
        "levels": run.plan.levels, "nodes": nodes,
        "notice": "LOCAL/UNVERIFIED — status is read from a local event log; not verified by an Arena server.",
        "organization_id": run.meta["organization_id"], "plan_digest": run.plan.plan_id,
        "policy_digest": run.plan.policy_digest, "project_id": run.meta["project_id"],
        "receipt_head_hash": head.hash, "receipt_sequence": head.sequence,
        "run_id": run.meta["run_id"], "run_state": view.run_state,
        "spend_complete": view.spend_complete, "spend_cost_microunits": view.cost_microunits,
        "spend_tokens": view.tokens, "verified": false,
    });
    if crate::output::json() {
        outln!("{}", python_json(&status));
        return Ok(Exit::Success);
    }
    outln!(
        "notice    : LOCAL/UNVERIFIED — status is read from a local event log; not verified by an Arena server."
    );
    outln!("demonstration: False");
    outln!("run_state : {}", view.run_state);
    outln!("run_id    : {}", RUN_ID);
    outln!();
    outln!(
        "{:<20} {:<20} {:<12} {:<22} {:<20} ARTIFACTS",
        "NODE",
        "KIND",
        "STATE",
        "ISOLATION",
        "EFFECTS"
    );
    outln!("{}", "-".repeat(108));
    for node in &run.graph.nodes {
        let n = view.node(&node.id);
        let effects: Vec<&str> = node.effects.iter().map(|e| e.name()).collect();
        let artifact = n
            .artifact_digests
            .first()
            .map_or("-".to_string(), |d| format!("{}...", &d[..d.len().min(20)]));
        outln!(
            "{:<20} {:<20} {:<12} {:<22} {:<20} {artifact}",
            node.id,
            node.kind.name(),
            n.state,
            node.isolation.name(),
            effects.join(",")
        );
    }
    Ok(Exit::Success)
}

/// Refuses to drive on while a connector node that has not run has no
/// prompt (bounded-loops' words: its `node_prompts` are `--inputs`).
fn check_prompts(
    verb: &str,
    schedule: &Schedule,
    view: &RunView,
    prompts: &HashMap<String, String>,
) -> Result<(), CliError> {
    for node in &schedule.nodes {
        if node.driver == Driver::Worker
            && view.node(&node.id).state == "PENDING"
            && !prompts.contains_key(&node.id)
        {
            return Err(refused(format!(
                "graph {verb}: cannot resume: connector node '{}' is PENDING but no prompt was re-supplied; add it to node_prompts and retry",
                node.id
            )));
        }
    }
    Ok(())
}

/// Drives a recorded run on (after `resume` or a decision), with the same
/// preflight as a new run.
fn continue_run(
    run: &LoadedRun,
    schedule: &Schedule,
    view: &RunView,
    prompts: HashMap<String, String>,
    flags: &DriveFlags,
) -> Result<(RunEnd, RunView), CliError> {
    let catalog = catalog(flags)?;
    preflight(schedule, &catalog)?;
    let caps = caps(flags)?;
    drive(
        run,
        schedule,
        catalog,
        prompts,
        caps,
        Some(view.resume_ordinal()),
        flags,
    )
}

/// `bl graph resume --run D [--inputs J] [caps]`
pub fn resume(dir: &Path, flags: &DriveFlags) -> CliResult {
    let run = load_run(dir, "resume")?;
    recover_torn_tail(dir)?;
    let (view, _, _) = view_of(dir)?;
    if view.is_terminal() {
        outln!("run_state : {}", view.run_state);
        outln!("The run has ended; nothing to resume.");
        return Ok(Exit::Success);
    }
    let schedule = Schedule::of(&run.graph, &run.plan);
    let prompts = read_prompts(flags)?;
    check_prompts("resume", &schedule, &view, &prompts)?;
    let (end, after) = continue_run(&run, &schedule, &view, prompts, flags)?;
    report_drive(
        &run,
        &end,
        &after,
        "Local-CLI graph resume — REAL execution",
    )
}

/// `bl graph approve --run D --node N --decision approved|rejected`
pub fn approve(
    dir: &Path,
    node_id: &str,
    approved: bool,
    key: Option<&Path>,
    flags: &DriveFlags,
) -> CliResult {
    let run = load_run(dir, "approve")?;
    let Some(node) = run.graph.node(node_id) else {
        return Err(refused(format!(
            "graph approve: approval_node at /node_id: node '{node_id}' is not in the graph"
        )));
    };
    if node.kind != NodeKind::Approval {
        return Err(refused(format!(
            "graph approve: approval_node at /node_id: node '{node_id}' is not an approval node"
        )));
    }
    let (view, events, _) = view_of(dir)?;
    let schedule = Schedule::of(&run.graph, &run.plan);
    let prompts = read_prompts(flags)?;
    let round = events
        .iter()
        .filter(|e| e.kind == "run.repair.round")
        .count() as u64;
    let state = view.node(node_id).state;
    let decided = matches!(state.as_str(), "SUCCEEDED" | "FAILED");
    if !decided {
        check_prompts("approve", &schedule, &view, &prompts)?;
        record_decision(&run, node_id, approved, round, key)?;
    }
    let decision = if approved { "approved" } else { "rejected" };
    let order: Vec<&str> = run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    if decided {
        // Idempotent: the decision is already in the record.
        let answer = approve_answer(dir, node_id, decision, true, &view, &order);
        let paused = answer["paused"] == json!(true);
        if crate::output::json() {
            outln!("{}", python_json(&answer));
        } else {
            outln!("node '{node_id}' decision : {decision}");
            outln!("run_state : {}", view.run_state);
        }
        return Ok(if paused {
            Exit::Paused
        } else if view.run_state == "FAILED" {
            Exit::Refused
        } else {
            Exit::Success
        });
    }
    let (end, after) = continue_run(&run, &schedule, &view, prompts, flags)?;
    if crate::output::json() {
        let answer = approve_answer(dir, node_id, decision, false, &after, &order);
        outln!("{}", python_json(&answer));
    } else {
        outln!("node '{node_id}' decision : {decision}");
        outln!("run_state : {}", after.run_state);
        for id in &order {
            outln!("  node '{id}': {}", after.node(id).state);
        }
    }
    Ok(exit_of(&end))
}

/// What `approve --json` prints, as bounded-loops prints it.
fn approve_answer(
    dir: &Path,
    node_id: &str,
    decision: &str,
    idempotent: bool,
    view: &RunView,
    order: &[&str],
) -> Value {
    let awaiting = view.awaiting(order.iter().copied());
    let next: Vec<String> = awaiting
        .iter()
        .map(|n| {
            format!(
                "bl graph approve --run {} --node {n} --decision approved|rejected",
                dir.display()
            )
        })
        .collect();
    json!({
        "awaiting_approval": awaiting, "decision": decision, "idempotent": idempotent,
        "next_commands": next, "node_id": node_id, "out": dir.display().to_string(),
        "paused": !awaiting.is_empty(), "run_id": RUN_ID, "run_state": view.run_state,
    })
}

fn record_decision(
    run: &LoadedRun,
    node: &str,
    approved: bool,
    round: u64,
    key: Option<&Path>,
) -> Result<(), CliError> {
    let approvals = bl_store::Approvals::new(&run.dir);
    let record = approvals.read().map_err(|e| refused(e.to_string()))?;
    let id = bl_store::approval_id(ORGANIZATION, PROJECT, RUN_ID, node);
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let actor = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    let mut nonce = [0u8; 32];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut nonce)
    });
    let key = match key {
        Some(path) => Some(
            crate::keys_cmd::read_signing_key(path)
                .map_err(|e| refused(format!("graph approve: {e}")))?,
        ),
        None => None,
    };
    let result = if approved {
        // Bound to what is approved: the artifacts its parents produced.
        let view = view_of(&run.dir)?.0;
        let evidence: Vec<String> = run
            .graph
            .edges
            .iter()
            .filter(|e| e.to_node == node)
            .flat_map(|e| view.node(&e.from_node).artifact_digests)
            .collect();
        let request = json!({
            "evidence_digests": evidence, "node_id": node,
            "plan_id": run.plan.plan_id, "repair_round": round,
        });
        approvals
            .commit(
                bl_store::approvals::Commit {
                    approval_id: id.clone(),
                    new_resource_version: 0,
                    idempotency_key: if round == 0 {
                        id.clone()
                    } else {
                        format!("{id}:r{round}")
                    },
                    node_id: node.into(),
                    actor_id: ORGANIZATION.into(),
                    decided_by: actor,
                    decided_by_source: "os_user".into(),
                    decided_at: now,
                    nonce: hex::encode(nonce),
                    request_digest: bl_core::Sha256Digest::of(
                        bl_core::canonical_json(&request).as_bytes(),
                    )
                    .to_string(),
                    repair_round: round,
                    signature: None,
                },
                record.resource_version,
                key.as_ref(),
            )
            .map(|_| ())
    } else {
        approvals
            .reject(
                bl_store::approvals::Rejection {
                    node_id: node.into(),
                    attempt: 1,
                    approval_id: id,
                    actor_id: ORGANIZATION.into(),
                    decided_at: now,
                    decided_by: actor,
                    decided_by_source: "os_user".into(),
                    repair_round: round,
                    signature: None,
                },
                key.as_ref(),
            )
            .map(|_| ())
    };
    result.map_err(|e| refused(format!("graph approve: {e}")))
}
