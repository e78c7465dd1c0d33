//! The graph-run use case: `run`, `resume`, `approve`, `status` and
//! `artifacts` of a graph/v1 manifest. It compiles the plan, refuses before
//! anything runs what the run would deny or fail on, lays out the run
//! directory as bounded-loops 0.7 does ([`bl_store::RunDir`]), wires the
//! executor's ports to bl-store, bl-workers, bl-handoff and the node workers
//! of [`crate::graph_nodes`], and returns what happened; a front end shows
//! it.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bl_core::python_json;
use bl_graph::model::{Named, NodeKind};
use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_graph::{CompileInput, Graph, Plan};
use bl_run::executor::{self, Caps, Ports, RunEnd, RunSettings};
use bl_run::projection::{self, NodeState, RunState, RunView};
use bl_run::schedule::{Driver, NodeInfo, Schedule};
use bl_store::{RunDir, RunIdentity};
use bl_workers::{Catalog, LocalCli, Network, Transport, Workers};
use serde_json::{Value, json};

use crate::approvals::{self, ApprovalEntry};
use crate::error::AppError;
use crate::run_adapters::{
    FileDecisions, LogJournal, Recorded, RunArtifacts, RunLedger, read_events,
};

pub use crate::approvals::{ORGANIZATION, PROJECT, RUN_ID};

/// How many nodes run at once when the run does not say: the cores plus
/// four, at most 32 (the pool size Python's executors, and so LangGraph,
/// use). A node spends most of its time waiting, on a model's API or on
/// the kernel setting up and tearing down its cage, so as many nodes as
/// cores would leave the cores idle.
pub fn default_concurrency() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores + 4).min(32)
}

/// What `run`, `approve` and `resume` take besides the run itself.
#[derive(Debug, Clone, Default)]
pub struct DriveOptions {
    /// JSON object mapping node_id -> prompt (never recorded).
    pub inputs: Option<PathBuf>,
    /// Ceiling on the tokens the whole run may spend; reaching it pauses the run.
    pub max_tokens: Option<u64>,
    /// Ceiling on the run's cost in USD (needs prices from --budget-file).
    pub max_cost_usd: Option<String>,
    /// A JSON budget file: {"max_tokens": N, "max_cost_usd": "2.50", "prices": {...}}.
    pub budget_file: Option<PathBuf>,
    /// A provider catalog (TOML) adding or overriding agent CLIs.
    pub providers: Option<PathBuf>,
    /// How many nodes run at once (default: the number of cores).
    pub concurrency: Option<usize>,
    /// Sign the checkpoint written at every pause and at the end with this
    /// private key (from `bl keys generate`); unsigned without it.
    pub checkpoint_key: Option<PathBuf>,
    /// A loop-package root (repeatable); loop and subgraph nodes' packages
    /// must be found here. Kept with the run for resume.
    pub loop_roots: Vec<PathBuf>,
    /// A JSON file mapping connection_id -> admitted-connection record, for
    /// https connector nodes (their requests go through the egress broker).
    pub admitted: Option<PathBuf>,
    /// Recorded replies (bl.dev/recorded-replies/v1) for connector nodes
    /// bound to the `recorded` provider: no key, no network. Kept with the run.
    pub recorded: Option<PathBuf>,
    /// Recorded approval decisions (bl.dev/recorded-decisions/v1), taken
    /// when the run reaches each approval node. Kept with the run.
    pub decisions: Option<PathBuf>,
    /// Grant a node's gate plugin a capability: NODE=CAP (repeatable). The
    /// plugin must also request it.
    pub grants: Vec<String>,
    /// Run what the preflight would refuse (a connection slot several nodes
    /// share, an effect a local run denies, a node without a prompt) and
    /// let those nodes fail when the run reaches them, as bounded-loops 0.7
    /// does.
    pub deny_at_run_time: bool,
    /// An audit plan (JSON) whose coverage table and release verdict the
    /// run's arena shows; checked before anything runs, kept with the run
    /// as `audit-plan.json`, and its digest recorded in the log.
    pub audit_plan: Option<PathBuf>,
    /// Who watches a top-level drive's events (a child run is unwatched).
    pub watch: Option<Watcher>,
    /// A stop asked of this drive alone (besides a process-wide signal).
    pub cancel: Option<Arc<crate::stop::Cancel>>,
}

/// A run directory, loaded and its plan recompiled.
pub struct LoadedRun {
    pub dir: PathBuf,
    pub graph: Graph,
    pub plan: Plan,
    pub meta: Value,
}

fn refused(message: impl Into<String>) -> AppError {
    AppError::Refused(message.into())
}

fn read_json(path: &Path, what: &str) -> Result<Value, AppError> {
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

/// Node id → the prompt its worker is given (never recorded).
pub type Prompts = HashMap<String, String>;

fn read_prompts(flags: &DriveOptions) -> Result<Prompts, AppError> {
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
        match prompt {
            Value::String(p) => {
                prompts.insert(node, p);
            }
            // A subgraph node's prompts for its child run's nodes.
            Value::Object(_) => {}
            _ => {
                return Err(refused(format!(
                    "{}: /{node}: a prompt must be a string (or, for a subgraph node, an object of its child nodes' prompts)",
                    path.display()
                )));
            }
        }
    }
    Ok(prompts)
}

/// The prompts `--inputs` gives subgraph nodes for their child runs:
/// `{"<subgraph node>": {"<child node>": "prompt"}}`.
fn read_child_prompts(flags: &DriveOptions) -> Result<HashMap<String, Value>, AppError> {
    let Some(path) = &flags.inputs else {
        return Ok(HashMap::new());
    };
    let value = read_json(path, "inputs")?;
    Ok(value
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, v)| v.is_object())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default())
}

/// The provider catalog a run was given: `--providers`, else
/// `BOUNDED_LOOPS_PROVIDERS`.
fn providers_given(flags: &DriveOptions) -> Option<PathBuf> {
    flags
        .providers
        .clone()
        .or_else(|| std::env::var_os("BOUNDED_LOOPS_PROVIDERS").map(PathBuf::from))
}

/// The shipped providers and those the run was given; a run driven on
/// (`kept`: its directory) uses the copy it kept when none is given now.
fn catalog(flags: &DriveOptions, kept: Option<&Path>) -> Result<Catalog, AppError> {
    let mut catalog = Catalog::shipped();
    let path = providers_given(flags).or_else(|| {
        kept.map(|dir| dir.join(KEPT_PROVIDERS))
            .filter(|p| p.is_file())
    });
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
fn prices(flags: &DriveOptions) -> Result<HashMap<String, executor::Price>, AppError> {
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
) -> Result<(), AppError> {
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

fn caps(flags: &DriveOptions) -> Result<Caps, AppError> {
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

fn usd_to_micro(text: &str) -> Result<u64, AppError> {
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
) -> Result<Plan, bl_graph::Refusal> {
    bl_graph::compile(
        graph,
        &CompileInput {
            connections,
            available_packages: packages,
            policy_digest: DEFAULT_POLICY_DIGEST,
        },
    )
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
    bl_graph::lint(text, manifest_format(bytes)).map_err(GraphFailure::Refused)
}

/// A manifest's format by its first character: run directories keep the
/// manifest as manifest.yaml whatever it was.
fn manifest_format(bytes: &[u8]) -> bl_graph::Format {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => bl_graph::Format::Json,
        _ => bl_graph::Format::Yaml,
    }
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

/// What a run reads besides its manifest, its connections and its prompts,
/// resolved from the flags, or, on resume, from what the run kept.
pub struct RunContext {
    pub recorded: Option<bl_workers::recorded::RecordedReplies>,
    /// Where the recorded decisions came from (for errors).
    pub decisions_file: Option<PathBuf>,
    /// node id → (approved, decided_by).
    pub decisions: HashMap<String, (bool, String)>,
    pub admitted: Option<std::collections::BTreeMap<String, bl_egress::AdmittedConnection>>,
    pub packages: bl_packages::Catalogue,
    pub loop_roots: Vec<PathBuf>,
    /// node id → capabilities granted to its gate plugin.
    pub gate_grants: HashMap<String, Vec<String>>,
    pub child_prompts: HashMap<String, Value>,
    /// What a new run keeps in its directory (name, text), written once the
    /// preflight has passed.
    keep: Vec<(&'static str, String)>,
}

impl RunContext {
    /// Writes the copies a new run keeps.
    fn keep(&self, dir: &Path) -> Result<(), AppError> {
        for (name, text) in &self.keep {
            std::fs::write(dir.join(name), text)
                .map_err(|e| refused(format!("graph run: cannot keep {name} — {e}")))?;
        }
        Ok(())
    }
}

/// The `audit.plan.created` payload of the audit plan kept in `dir`, when
/// there is one that reads (one that does not is shown failed closed by
/// the arena, and not recorded).
fn audit_plan_event(dir: &Path) -> Option<Value> {
    let bytes = std::fs::read(RunDir::new(dir).audit_plan()).ok()?;
    let plan = bl_graph::audit::AuditPlan::parse(&bytes).ok()?;
    Some(json!({
        "artifact_digest": plan.artifact_digest,
        "cell_count": plan.cells.len(),
        "plan_digest": bl_core::Sha256Digest::of(&bytes).to_string(),
        "rubric_digest": plan.rubric_digest,
    }))
}

/// Files a run keeps so that `resume` and `approve` see what `run` saw.
const KEPT_RECORDED: &str = RunDir::RECORDED_REPLIES;
const KEPT_DECISIONS: &str = RunDir::RECORDED_DECISIONS;
const KEPT_INPUTS: &str = RunDir::INPUTS;
const KEPT_PROVIDERS: &str = RunDir::PROVIDERS;
pub const DECISIONS_API: &str = "bl.dev/recorded-decisions/v1";

fn read_text(path: &Path, what: &str) -> Result<String, AppError> {
    let bytes = crate::paths::read_capped(path, bl_graph::MAX_DOCUMENT_BYTES)
        .map_err(|e| refused(format!("cannot read {what} {} — {e}", path.display())))?;
    String::from_utf8(bytes)
        .map_err(|_| refused(format!("{}: {what} is not UTF-8", path.display())))
}

/// Reads recorded decisions: `{"api_version": "bl.dev/recorded-decisions/v1",
/// "decisions": [{"node_id", "decision": "approved"|"rejected", "decided_by"}]}`.
fn parse_decisions(path: &Path, text: &str) -> Result<HashMap<String, (bool, String)>, AppError> {
    let at = |pointer: String| refused(format!("{}: {pointer}", path.display()));
    let doc: Value = serde_json::from_str(text).map_err(|e| {
        refused(format!(
            "{}: recorded decisions are not valid JSON (line {}, column {}): {e}",
            path.display(),
            e.line(),
            e.column()
        ))
    })?;
    if doc["api_version"] != DECISIONS_API {
        return Err(at(format!("/api_version: must be \"{DECISIONS_API}\"")));
    }
    if let Some(k) = doc.as_object().and_then(|o| {
        o.keys()
            .find(|k| !["api_version", "decisions"].contains(&k.as_str()))
    }) {
        return Err(at(format!(
            "/{k}: unknown field (known: api_version, decisions)"
        )));
    }
    let list = doc["decisions"]
        .as_array()
        .ok_or_else(|| at("/decisions: must be a list".into()))?;
    let mut out = HashMap::new();
    for (i, d) in list.iter().enumerate() {
        if let Some(k) = d.as_object().and_then(|o| {
            o.keys()
                .find(|k| !["node_id", "decision", "decided_by"].contains(&k.as_str()))
        }) {
            return Err(at(format!(
                "/decisions/{i}/{k}: unknown field (known: node_id, decision, decided_by)"
            )));
        }
        if d.get("decided_by").is_some_and(|v| !v.is_string()) {
            return Err(at(format!("/decisions/{i}/decided_by: must be a string")));
        }
        let node = d["node_id"]
            .as_str()
            .ok_or_else(|| at(format!("/decisions/{i}/node_id: must be a node id")))?;
        let approved = match d["decision"].as_str() {
            Some("approved") => true,
            Some("rejected") => false,
            _ => {
                return Err(at(format!(
                    "/decisions/{i}/decision: must be \"approved\" or \"rejected\""
                )));
            }
        };
        let by = d["decided_by"].as_str().unwrap_or("recorded").to_string();
        if out.insert(node.to_string(), (approved, by)).is_some() {
            return Err(at(format!(
                "/decisions/{i}/node_id: node '{node}' is decided twice"
            )));
        }
    }
    Ok(out)
}

/// Resolves what the run reads. `fresh`: a new run, which keeps copies in
/// `dir`; otherwise a flag overrides what the run kept.
fn run_context(dir: &Path, flags: &DriveOptions, fresh: bool) -> Result<RunContext, AppError> {
    let kept = |name: &str| dir.join(name);
    let pick = |flag: &Option<PathBuf>, name: &str| -> Option<PathBuf> {
        flag.clone()
            .or_else(|| (!fresh && kept(name).is_file()).then(|| kept(name)))
    };
    let recorded = match pick(&flags.recorded, KEPT_RECORDED) {
        Some(path) => {
            let text = read_text(&path, "recorded replies")?;
            let replies =
                bl_workers::recorded::RecordedReplies::parse(&path.display().to_string(), &text)
                    .map_err(|e| refused(e.to_string()))?;
            Some((replies, text))
        }
        None => None,
    };
    let decisions_file = pick(&flags.decisions, KEPT_DECISIONS);
    let decisions = match &decisions_file {
        Some(path) => {
            let text = read_text(path, "recorded decisions")?;
            Some((parse_decisions(path, &text)?, text))
        }
        None => None,
    };
    let recorded_inputs: Value = if !fresh && kept(KEPT_INPUTS).is_file() {
        read_json(&kept(KEPT_INPUTS), KEPT_INPUTS)?
    } else {
        json!({})
    };
    let loop_roots: Vec<PathBuf> = if flags.loop_roots.is_empty() && !fresh {
        recorded_inputs["loop_roots"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(PathBuf::from))
                    .collect()
            })
            .unwrap_or_default()
    } else {
        flags
            .loop_roots
            .iter()
            .map(|r| std::path::absolute(r).unwrap_or(r.clone()))
            .collect()
    };
    let admitted_path = flags.admitted.clone().or_else(|| {
        recorded_inputs["admitted"]
            .as_str()
            .filter(|_| !fresh)
            .map(PathBuf::from)
    });
    let admitted = match &admitted_path {
        Some(path) => {
            let value = read_json(path, "admitted connections")?;
            Some(
                bl_egress::admitted::parse_admitted(&value)
                    .map_err(|e| refused(format!("graph run: {}: {e}", path.display())))?,
            )
        }
        None => None,
    };
    let packages = bl_packages::Catalogue::discover(&loop_roots).map_err(|e| {
        refused(format!(
            "graph run: the loop-package catalogue on this host is unusable — {e}"
        ))
    })?;
    let mut gate_grants: HashMap<String, Vec<String>> = HashMap::new();
    for grant in &flags.grants {
        let Some((node, cap)) = grant.split_once('=') else {
            return Err(refused(format!(
                "--grant {grant}: write NODE=CAPABILITY, for example --grant check=command"
            )));
        };
        bl_plugins::Capability::parse(cap).map_err(|e| refused(format!("--grant {grant}: {e}")))?;
        gate_grants
            .entry(node.to_string())
            .or_default()
            .push(cap.to_string());
    }
    let mut keep = Vec::new();
    if fresh {
        if let Some((_, text)) = &recorded {
            keep.push((KEPT_RECORDED, text.clone()));
        }
        if let Some((_, text)) = &decisions {
            keep.push((KEPT_DECISIONS, text.clone()));
        }
        let inputs = json!({
            "admitted": admitted_path.as_ref().map(|p| std::path::absolute(p).unwrap_or(p.clone()).display().to_string()),
            "loop_roots": loop_roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>(),
        });
        keep.push((KEPT_INPUTS, python_json(&inputs)));
        if let Some(path) = providers_given(flags) {
            keep.push((KEPT_PROVIDERS, read_text(&path, "providers")?));
        }
        if let Some(path) = &flags.audit_plan {
            let text = read_text(path, "audit plan")?;
            bl_graph::audit::AuditPlan::parse(text.as_bytes()).map_err(|e| {
                refused(format!(
                    "graph run: --audit-plan {}: {e}; nothing was run",
                    path.display()
                ))
            })?;
            keep.push((RunDir::AUDIT_PLAN, text));
        }
    }
    Ok(RunContext {
        recorded: recorded.map(|(r, _)| r),
        decisions_file,
        decisions: decisions.map(|(d, _)| d).unwrap_or_default(),
        admitted,
        packages,
        loop_roots,
        gate_grants,
        child_prompts: read_child_prompts(flags)?,
        keep,
    })
}

/// The plugins the graph names are installed and are what the node needs:
/// each gate a gate, each transform a transform of the major version asked
/// for, each contract a completion contract (and the first-party contracts
/// when an output's name calls for them). Refused before anything runs.
fn check_plugins(schedule: &Schedule, source: Option<Source>) -> Result<(), AppError> {
    // Each component is found and trusted (pinned, shipped with bl, signed,
    // or allowed by name) before anything runs; it is loaded when a node
    // uses it. Its version (the lock's, else its manifest's) must meet
    // what the manifest asks for.
    let manifest = |node: &str,
                    name: &str,
                    world: &str|
     -> Result<Option<bl_plugins::FoundPlugin>, AppError> {
        // The version is checked below, to say which was found where.
        let bare = match std::path::Path::new(name).is_file() {
            true => name,
            false => bl_plugins::split_requirement(name).0,
        };
        let found = crate::plugin_host::shared().find(bare).map_err(|e| {
            let said = e.to_string();
            let tail = match said.contains("nothing was run") {
                true => "",
                false => "; nothing was run",
            };
            refused(format!(
                "graph run: node '{node}' needs plugin '{name}': {said}{tail}"
            ))
        })?;
        // The version a pinned plugin has is the lock's; else its manifest's.
        if let (plugin, Some(wanted)) = bl_plugins::split_requirement(name)
            && bare != name
            && !found
                .version
                .as_deref()
                .is_some_and(|v| bl_plugins::meets_requirement(v, wanted))
        {
            return Err(refused(format!(
                "graph run: node '{node}' needs {plugin} {wanted}, but {} is version {}; install one that meets it (`bl plugin install {name}`); nothing was run",
                found.path.display(),
                found.version.as_deref().unwrap_or("unknown (no manifest)")
            )));
        }
        let Some(m) = &found.package.manifest else {
            return Ok(None);
        };
        if m.world != world {
            return Err(refused(format!(
                "graph run: node '{node}' needs '{name}' as a {world} plugin, but it is a {} plugin; nothing was run",
                m.world
            )));
        }
        Ok(Some(found))
    };
    for node in &schedule.nodes {
        if let Some(gate) = &node.gate
            && let Some(found) = manifest(&node.id, &gate.plugin, "gate")?
        {
            let at = format!("{}/gate/config", node.at);
            check_config(node, &gate.plugin, &found, &gate.config, &at, source)?;
        }
        if let Driver::Transform { plugin, major } = &node.driver {
            let dashed = plugin.replace('.', "-");
            let name = if crate::plugin_host::shared().resolve(plugin).is_ok() {
                plugin.as_str()
            } else {
                dashed.as_str()
            };
            if let Some(found) = manifest(&node.id, name, "transform")?
                && let Some(m) = &found.package.manifest
            {
                bl_handoff::plugins::check_major(plugin, *major, m).map_err(|e| {
                    refused(format!(
                        "graph run: node '{}': {e}; nothing was run",
                        node.id
                    ))
                })?;
                let at = format!("{}/config", node.at);
                check_config(node, plugin, &found, &node.config, &at, source)?;
            }
        }
        for output in &node.outputs {
            for (_, plugin, _) in bl_handoff::contracts_for(output) {
                manifest(&node.id, &plugin, "completion-contract")?;
            }
        }
    }
    Ok(())
}

/// The manifest a new run was read from, and its bytes: where a refusal
/// points to a line and column.
type Source<'a> = (&'a Path, &'a [u8]);

/// A node's config for the plugin `found` (JSON text, at the pointer
/// `within` in the manifest), refused before anything runs when it breaks
/// the schema the plugin's manifest declares: the plugin would refuse it
/// only when first called, after the work before it was paid for.
fn check_config(
    node: &NodeInfo,
    plugin: &str,
    found: &bl_plugins::FoundPlugin,
    config: &str,
    within: &str,
    source: Option<Source>,
) -> Result<(), AppError> {
    let config: Value = serde_json::from_str(config).map_err(|e| {
        refused(format!(
            "graph run: node '{}': its config for plugin '{plugin}' is not JSON ({e}); nothing was run",
            node.id
        ))
    })?;
    found
        .check_config(&config, within, |pointer| match source {
            Some((manifest, bytes)) => place(manifest, bytes, pointer),
            None => pointer.to_string(),
        })
        .map_err(|e| {
            refused(format!(
                "graph run: node '{}': {e}; nothing was run",
                node.id
            ))
        })
}

/// Preflight, fail-closed, before anything is written: the graph is one
/// this version can run (its routers, its tools), every connector node's
/// binding has what its transport needs (a profile, recorded replies, an
/// admitted record), every package and plugin a node names is here.
fn preflight(
    schedule: &Schedule,
    catalog: &Catalog,
    ctx: &RunContext,
    source: Option<Source>,
) -> Result<(), AppError> {
    if let Some((pointer, why)) = schedule.problems.first() {
        return Err(refused(format!(
            "graph run: {pointer} — {why}; nothing was run"
        )));
    }
    if let Some(file) = &ctx.decisions_file {
        let approvals: Vec<&str> = schedule
            .nodes
            .iter()
            .filter(|n| n.driver == Driver::Approval)
            .map(|n| n.id.as_str())
            .collect();
        let mut named: Vec<&String> = ctx.decisions.keys().collect();
        named.sort();
        if let Some(stray) = named.into_iter().find(|n| !approvals.contains(&n.as_str())) {
            return Err(refused(format!(
                "graph run: {}: a decision names '{stray}', which is not an approval node of this graph (approval nodes: {}); nothing was run",
                file.display(),
                if approvals.is_empty() {
                    "none".to_string()
                } else {
                    approvals.join(", ")
                }
            )));
        }
    }
    check_plugins(schedule, source)?;
    for node in &schedule.nodes {
        match &node.driver {
            Driver::Loop { package } if ctx.packages.get(package).is_none() => {
                return Err(refused(format!(
                    "graph run: loop node '{}' names package {package}, which no --loop-roots directory holds now; nothing was run",
                    node.id
                )));
            }
            Driver::Subgraph { package } => {
                let found = ctx.packages.get(package);
                if !found.is_some_and(|d| d.join(bl_packages::GRAPH_MANIFEST).is_file()) {
                    return Err(refused(format!(
                        "graph run: subgraph node '{}' names package {package}, and no --loop-roots directory holds a graph package (a directory with {}) with that digest; nothing was run",
                        node.id,
                        bl_packages::GRAPH_MANIFEST
                    )));
                }
            }
            _ => {}
        }
        let Some(binding) = &node.binding else {
            continue;
        };
        if binding.provider_id == bl_workers::recorded::PROVIDER {
            match &ctx.recorded {
                None => {
                    return Err(refused(format!(
                        "node '{}' binds the recorded connector, but no recorded replies were given: pass --recorded FILE (bl.dev/recorded-replies/v1). Refused before any attempt starts.",
                        node.id
                    )));
                }
                Some(r) if !r.nodes().any(|n| n == node.id) => {
                    return Err(refused(format!(
                        "node '{}' binds the recorded connector, but the recorded replies ({}) hold none for it: add a reply whose node_id is '{}' (the format: docs/graph-run.md, \"Recorded replies and decisions\"). Refused before any attempt starts.",
                        node.id,
                        r.source(),
                        node.id
                    )));
                }
                Some(_) => continue,
            }
        }
        match binding.transport.as_str() {
            "https" => {
                let admitted = ctx
                    .admitted
                    .as_ref()
                    .is_some_and(|a| a.contains_key(&binding.connection_id));
                if !admitted {
                    return Err(refused(format!(
                        "node '{}' binds https connection '{}', which no --admitted record admits; pass --admitted FILE with a record for it. Refused before any attempt starts.",
                        node.id, binding.connection_id
                    )));
                }
                continue;
            }
            "local_cli" => {}
            other => {
                return Err(refused(format!(
                    "node '{}' binds transport '{other}', which this version cannot execute (local_cli, https, or the recorded connector). Refused before any attempt starts.",
                    node.id
                )));
            }
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

/// Refuses recorded replies for nodes the connections bind to a live
/// agent: those agents would be called, and the replies never read.
fn refuse_unused_replies(
    manifest: &Path,
    schedule: &Schedule,
    ctx: &RunContext,
) -> Result<(), AppError> {
    let Some(replies) = &ctx.recorded else {
        return Ok(());
    };
    let mut live: Vec<&str> = schedule
        .nodes
        .iter()
        .filter(|n| {
            n.binding
                .as_ref()
                .is_some_and(|b| b.provider_id != bl_workers::recorded::PROVIDER)
                && replies.nodes().any(|r| r == n.id)
        })
        .map(|n| n.id.as_str())
        .collect();
    if live.is_empty() {
        return Ok(());
    }
    live.sort_unstable();
    Err(refused(format!(
        "graph run: {} holds recorded replies for {}, but the connections bind {} to a live agent, which would be called instead; to replay them, connect with `bl graph connect {} --provider recorded > connections.json`, or leave out --recorded to call the agents. Nothing was run",
        replies.source(),
        live.join(", "),
        if live.len() == 1 { "it" } else { "them" },
        manifest.display()
    )))
}

/// Where a run goes when --out is left out:
/// `<workspace>/.bounded-loops/runs/<UTC stamp>-<8 hex>/`, the workspace
/// being --workspace, else $BOUNDED_LOOPS_WORKSPACE, else here.
pub fn default_out(workspace: Option<PathBuf>) -> Result<PathBuf, AppError> {
    let root = workspace
        .or_else(|| std::env::var_os("BOUNDED_LOOPS_WORKSPACE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("."));
    Ok(root.join(".bounded-loops/runs").join(fresh_run_name()?))
}

/// A new run's name: the time in UTC, then a random suffix
/// (`20261203T071500Z-1a2b3c4d`), so names sort by when runs began.
pub fn fresh_run_name() -> Result<String, AppError> {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(['-', ':'], "");
    let mut nonce = [0u8; 4];
    getrandom::fill(&mut nonce).map_err(|e| {
        refused(format!(
            "no entropy to name the run directory ({e}): pass --out DIR (or --run-id ID)"
        ))
    })?;
    Ok(format!("{stamp}-{}", hex::encode(nonce)))
}

/// Whether a run is the operator's or a subgraph's child (how deep).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    Top,
    Child(u32),
}

pub use crate::graph_nodes::MAX_SUBGRAPH_DEPTH;

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

/// Runs a manifest into `out`: compile, preflight, lay out the run
/// directory, drive. Prints nothing of the outcome (the caller does).
pub fn run_manifest(
    manifest: &Path,
    bytes: Vec<u8>,
    conn_value: Option<Value>,
    out: &Path,
    flags: &DriveOptions,
    depth: Depth,
) -> Result<(LoadedRun, RunEnd, RunView), AppError> {
    // bounded-loops' words for a manifest it will not run, then bl's lines:
    // where in the file, and the hints.
    let not_run = |mut refusal: bl_graph::Refusal| {
        if refusal.pos.is_none() {
            let text = String::from_utf8_lossy(&bytes);
            refusal.pos = bl_graph::locate(&text, manifest_format(&bytes), &refusal.pointer);
        }
        AppError::manifest(crate::graph_plan::ManifestRefusal {
            path: manifest.to_path_buf(),
            what: "compile failed".into(),
            refusal,
            early: None,
        })
    };
    let graph = parse_graph(&bytes).map_err(|e| match e {
        GraphFailure::Refused(r) => not_run(r),
        other => refused(format!("graph run: {}", other.at(manifest))),
    })?;
    let conns = match &conn_value {
        Some(v) => Some(
            bl_graph::parse_connections(v)
                .map_err(|e| refused(format!("graph run: connections: {e}")))?,
        ),
        None => None,
    };
    let ctx = run_context(out, flags, true)?;
    let packages: BTreeSet<String> = ctx.packages.digests().map(str::to_owned).collect();
    let plan = compile(&graph, conns.as_deref(), Some(&packages)).map_err(|refusal| {
        not_run(match refusal.code {
            bl_graph::RefusalCode::NoAdmittedConnection if conns.is_none() => refusal.hint(format!(
                "`bl graph connect {} --provider claude > connections.json` writes one for you to review; then add --connections connections.json",
                manifest.display()
            )),
            _ => refusal,
        })
    })?;
    let schedule = Schedule::of(&graph, &plan);
    let catalog = catalog(flags, None)?;
    preflight(&schedule, &catalog, &ctx, Some((manifest, &bytes)))?;
    if depth == Depth::Top {
        refuse_unused_replies(manifest, &schedule, &ctx)?;
    }
    let prompts = read_prompts(flags)?;
    check_prompt_keys(&schedule, &prompts, flags)?;
    if !flags.deny_at_run_time {
        refuse_denials(manifest, &bytes, &graph, &plan)?;
        check_every_prompt(&schedule, &prompts, flags)?;
    }
    let caps = caps(flags)?;
    check_priced(&schedule, &caps, &prices(flags)?)?;
    caging_posture(&schedule)?;
    if RunDir::new(out).holds_a_run() {
        return Err(refused(match view_of(out) {
            Ok((view, _, _)) if view.is_terminal() => format!(
                "graph run: {} already holds a run, which has ended ({}); give another --out for a new run (that directory is the old run's record: `bl graph status --run {}` shows how it ended)",
                out.display(),
                view.run_state,
                out.display()
            ),
            _ => format!(
                "graph run: {} already holds a run; continue it with `bl graph resume --run {}`",
                out.display(),
                out.display()
            ),
        }));
    }
    std::fs::create_dir_all(out)
        .map_err(|e| refused(format!("graph run: cannot make {} — {e}", out.display())))?;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(out.join(name), bytes)
            .map_err(|e| refused(format!("graph run: cannot write {name} — {e}")))
    };
    write(RunDir::MANIFEST, &bytes)?;
    if let Some(v) = &conn_value {
        write(RunDir::CONNECTIONS, python_json(v).as_bytes())?;
    }
    write(RunDir::PLAN, plan.bytes.as_bytes())?;
    let meta = json!({
        "compiler_version": "bounded-loops.graph-compiler/v1", "execution": true,
        "fail_mode": graph.policies.fail_mode.name(), "mode": "local_cli",
        "organization_id": ORGANIZATION, "plan_id": plan.plan_id, "platform": std::env::consts::OS,
        "policy_digest": plan.policy_digest, "project_id": PROJECT, "run_id": RUN_ID,
    });
    write(RunDir::META, python_json(&meta).as_bytes())?;
    ctx.keep(out)?;
    let loaded = LoadedRun {
        dir: out.to_path_buf(),
        graph,
        plan,
        meta,
    };
    let (end, view) = drive(
        &loaded, &schedule, catalog, prompts, caps, None, flags, &ctx, depth,
    )?;
    Ok((loaded, end, view))
}

/// Loads a run directory and recompiles its plan; refuses when the plan
/// differs from the one recorded.
pub fn load_run(dir: &Path, verb: &str) -> Result<LoadedRun, AppError> {
    let files = RunDir::new(dir);
    let meta_path = files.meta();
    if !meta_path.exists() {
        return Err(refused(format!(
            "graph {verb}: cannot reconstruct plan — {} not found in {}",
            RunDir::META,
            dir.display()
        )));
    }
    let meta = read_json(&meta_path, RunDir::META)?;
    let manifest = files.manifest();
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
    let conn_path = files.connections();
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

/// What a crash left, made whole before a run is continued: a torn last
/// line (a controller killed mid-write; it was never a record) is moved
/// aside, kept beside the log, and said so; so are the lines a power loss
/// kept without their artifacts ([`crate::unsynced_tail`]).
pub fn recover_after_a_crash(dir: &Path) -> Result<(), AppError> {
    recover_torn_tail(dir)?;
    crate::unsynced_tail::set_aside(dir)
}

fn recover_torn_tail(dir: &Path) -> Result<(), AppError> {
    for name in [RunDir::EVENTS, RunDir::ANNEX] {
        let log = dir.join(name);
        if !log.exists() {
            continue;
        }
        match bl_store::recover_torn_tail(&log) {
            Ok(Some(tail)) => crate::notes::note(format!(
                "note: the last line of {} was torn ({} bytes, as after a crash); it was moved aside to {}.torn-{}",
                log.display(),
                tail.len,
                log.display(),
                tail.offset
            )),
            Ok(None) => {}
            Err(e) => return Err(refused(e.to_string())),
        }
    }
    Ok(())
}

pub fn view_of(dir: &Path) -> Result<(RunView, Vec<Recorded>, bl_store::ChainHead), AppError> {
    let (events, head) =
        read_events(dir).map_err(|e| refused(format!("the event log is unusable: {e}")))?;
    // bl's own events (an interrupted attempt) say why, after the log's.
    let annex = crate::run_adapters::read_annex(dir)
        .map_err(|e| refused(format!("the log's annex is unusable: {e}")))?;
    let view = projection::project(
        events
            .iter()
            .chain(&annex)
            .map(|r| (r.kind.as_str(), &r.payload)),
    );
    Ok((view, events, head))
}

#[allow(clippy::too_many_arguments)]
fn drive(
    run: &LoadedRun,
    schedule: &Schedule,
    catalog: Catalog,
    prompts: Prompts,
    caps: Caps,
    resume_ordinal: Option<u32>,
    flags: &DriveOptions,
    ctx: &RunContext,
    depth: Depth,
) -> Result<(RunEnd, RunView), AppError> {
    // Held until the run's record is complete: a stop waits for it.
    let _running = bl_core::interrupt::Running::start();
    let stop = Arc::new(crate::stop::ProcessStop::new(flags.cancel.clone()));
    let mut journal =
        LogJournal::open(&run.dir, identity(&run.plan)).map_err(|e| refused(e.to_string()))?;
    // The log is ours alone now: whatever a dead controller of this run
    // left running is ended before anything is re-driven.
    let spawn_log = RunDir::new(&run.dir).processes();
    let survivors = bl_sandbox::containment::kill_survivors(&spawn_log);
    if survivors > 0 && depth == Depth::Top {
        crate::notes::note(format!(
            "note: {survivors} process(es) a previous controller of this run left running were ended before resuming"
        ));
    }
    if let Some(parent) = spawn_log.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    // Every command this process starts while the run is driven, whoever
    // starts it (a child run's, or another run's beside it), is recorded
    // in the run's log: a resume then ends what this controller left.
    let _spawns = bl_sandbox::containment::record_spawns(spawn_log);
    let artifacts = RunArtifacts {
        // Remembered: the checkpoint seals what it wrote without reading
        // each artifact back.
        store: bl_store::ArtifactStore::with_group_commit(
            RunDir::new(&run.dir).artifacts(),
            64 << 20,
        )
        .remembering_writes(),
        organization_id: ORGANIZATION.into(),
        project_id: PROJECT.into(),
        sensitivity: schedule.data_class.clone(),
    };
    let decisions = approvals::RecordedDecisions {
        file: FileDecisions::read(&run.dir).map_err(|e| refused(e.to_string()))?,
        recorded: ctx.decisions.clone(),
        run_dir: run.dir.clone(),
        plan_id: run.plan.plan_id.clone(),
    };
    let ledger = RunLedger {
        dir: run.dir.clone(),
        run_id: RUN_ID.into(),
        plan_id: run.plan.plan_id.clone(),
    };
    let work_root = RunDir::new(&run.dir).work().join(RUN_ID);
    let (network, _proxy) = egress_network(schedule, &run.dir)?;
    // The run's gates, contracts and transforms run their commands caged.
    let plugins = Arc::new(bl_handoff::Plugins::new(
        crate::plugin_host::shared(),
        Arc::new(bl_sandbox::Sandbox::new(
            bl_sandbox::Tier::ProcessRestricted,
        )),
    ));
    let mut handoff = bl_handoff::Handoff::new(&run.dir, &work_root, plugins.clone());
    handoff.subgraphs = Some(Arc::new(crate::graph_nodes::ChildRuns {
        run_dir: run.dir.clone(),
    }));
    let handoff = Arc::new(handoff);
    let mut workers = Workers::new()
        .with_tools(vec![run.dir.clone()])
        .route(
            Transport::LocalCli,
            Arc::new(
                LocalCli::new(catalog, work_root.clone())
                    .with_network(network)
                    .hiding(vec![run.dir.clone()]),
            ),
        )
        .route(
            Transport::Transform,
            Arc::new(bl_handoff::TransformWorker { plugins }),
        )
        .route(
            Transport::Loop,
            Arc::new(crate::graph_nodes::LoopNodes {
                packages: ctx.packages.clone(),
                hidden: vec![run.dir.clone()],
            }),
        )
        .route(
            Transport::Subgraph,
            Arc::new(crate::graph_nodes::SubgraphNodes {
                run_dir: run.dir.clone(),
                packages: ctx.packages.clone(),
                connections: RunDir::new(&run.dir)
                    .connections()
                    .is_file()
                    .then(|| read_json(&RunDir::new(&run.dir).connections(), "connections"))
                    .transpose()?,
                runner: Arc::new(ChildDrives {
                    options: child_flags(flags, ctx, &run.dir),
                }),
                prompts: ctx.child_prompts.clone(),
                depth: match depth {
                    Depth::Top => 1,
                    Depth::Child(d) => d + 1,
                },
            }),
        );
    if let Some(recorded) = &ctx.recorded {
        workers = workers.route(Transport::Recorded, Arc::new(recorded.clone()));
    }
    if let Some(admitted) = &ctx.admitted {
        let https = crate::graph_nodes::https_worker(&run.dir, admitted.clone())?;
        workers = workers.route(Transport::Https, Arc::new(https));
    }
    let worker = Arc::new(workers);
    let mut progress: Box<dyn Watch> = match (&flags.watch, depth) {
        (Some(watcher), Depth::Top) => (watcher.0)(schedule),
        _ => Box::new(Unwatched),
    };
    let replayed = Replayed::after(&journal, progress.as_mut());
    let mut observer = |e: &bl_run::events::Event| replayed.pass(e, progress.as_mut());
    let mut ports = Ports {
        journal: &mut journal,
        artifacts: &artifacts,
        decisions: &decisions,
        ledger: &ledger,
        worker,
        stage: handoff.clone(),
        judge: handoff,
        observer: &mut observer,
        stop: stop.clone(),
    };
    let prices = prices(flags)?;
    check_priced(schedule, &caps, &prices)?;
    let settings = RunSettings {
        run_id: RUN_ID.into(),
        plan_id: run.plan.plan_id.clone(),
        concurrency: flags.concurrency.unwrap_or_else(default_concurrency),
        caps,
        prompts,
        resume_ordinal,
        prices,
        gate_grants: ctx.gate_grants.clone(),
        audit_plan: audit_plan_event(&run.dir),
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
    let head = journal
        .synced_tree_head()
        .map_err(|e| refused(format!("graph run: {e}")))?;
    checkpoint(&run.dir, flags, &head, &artifacts.store.written())?;
    drop(journal);
    Ok((end, view))
}

/// The flags a subgraph's child run gets: the parent's, with what the
/// parent resolved or kept (loop roots, recorded replies and decisions,
/// admitted records), so a resumed parent runs its children as it began.
fn child_flags(flags: &DriveOptions, ctx: &RunContext, dir: &Path) -> DriveOptions {
    let kept = |flag: &Option<PathBuf>, name: &str| {
        flag.clone()
            .or_else(|| dir.join(name).is_file().then(|| dir.join(name)))
    };
    let mut child = flags.clone();
    child.loop_roots = ctx.loop_roots.clone();
    child.recorded = kept(&flags.recorded, KEPT_RECORDED);
    child.decisions = kept(&flags.decisions, KEPT_DECISIONS);
    child.providers = kept(&flags.providers, KEPT_PROVIDERS);
    child.admitted = flags.admitted.clone().or_else(|| {
        read_json(&dir.join(KEPT_INPUTS), KEPT_INPUTS)
            .ok()
            .and_then(|v| v["admitted"].as_str().map(PathBuf::from))
    });
    child
}

/// The egress posture (BOUNDED_LOOPS_EGRESS_POSTURE, else the config `bl
/// graph init` writes, else open) when it cages the run's local CLIs;
/// `None` for open. It fails closed: a posture that needs a cage where
/// none can run is refused, before anything runs.
fn caging_posture(
    schedule: &Schedule,
) -> Result<Option<bl_egress::posture::EgressConfig>, AppError> {
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
) -> Result<(Network, Option<crate::egress_proxy::ProxyGuard>), AppError> {
    let Some(config) = caging_posture(schedule)? else {
        return Ok((Network::Open, None));
    };
    if config.posture == bl_egress::posture::Posture::Allowlist {
        let record = RunDir::new(run_dir).egress_decisions();
        let guard = crate::egress_proxy::start_proxy(&config, Some(&record))
            .map_err(|e| refused(format!("the allowlist proxy could not start: {e}")))?;
        return Ok((Network::Allowlist(guard.bridge.clone()), Some(guard)));
    }
    Ok((Network::Closed, None))
}

/// Seals the run as it stands into `checkpoints/`: `head`, the tree of the
/// log its journal wrote, and the records' digests.
fn checkpoint(
    dir: &Path,
    flags: &DriveOptions,
    head: &bl_store::provable::TreeHead<'_>,
    written: &bl_store::provable::Written,
) -> Result<(), AppError> {
    let key = match &flags.checkpoint_key {
        Some(path) => Some(
            crate::keys::read_signing_key(path)
                .map_err(|e| refused(format!("--checkpoint-key: {e}")))?,
        ),
        None => None,
    };
    bl_store::provable::write_checkpoint_knowing(
        dir,
        head,
        key.as_ref(),
        bl_store::provable::Durability::Synced,
        written,
    )
    .map(|_| ())
    .map_err(|e| refused(format!("the run's checkpoint could not be written: {e}")))
}

/// Refuses, before anything runs, a graph whose run would deny nodes
/// (bounded-loops lets the run find out, node by node: `policy_denied`):
/// each place, the rule and the fix.
fn refuse_denials(
    manifest: &Path,
    bytes: &[u8],
    graph: &Graph,
    plan: &Plan,
) -> Result<(), AppError> {
    let hazards = bl_graph::hazards::hazards(graph, Some(&plan.node_bindings));
    if hazards.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = hazard_lines(manifest, bytes, &hazards)
        .iter()
        .map(|line| format!("  {line}"))
        .collect();
    Err(refused(format!(
        "graph run: the run would deny {} node(s); nothing was run:\n{}\n(--deny-at-run-time runs it anyway: those nodes then fail when the run reaches them, as in bounded-loops)",
        hazards.len(),
        lines.join("\n")
    )))
}

/// Each hazard as `file:line:col: pointer: [rule] message`, the manifest
/// read once for all their places. A message many nodes share (a slot a
/// fan-out of hundreds shares) is said once, at its first place, with the
/// count of the others: a page of the same sentence helps no one.
pub fn hazard_lines(
    manifest: &Path,
    bytes: &[u8],
    hazards: &[bl_graph::hazards::Hazard],
) -> Vec<String> {
    const EACH_UP_TO: usize = 4;
    let format = bl_graph::Format::from_path(manifest).unwrap_or(bl_graph::Format::Yaml);
    let document = bl_graph::parse_document(&String::from_utf8_lossy(bytes), format).ok();
    let place = |pointer: &str| match document.as_ref().and_then(|d| d.locate(pointer)) {
        Some(pos) => format!("{}:{}:{}: {pointer}", manifest.display(), pos.line, pos.col),
        None => format!("{}: {pointer}", manifest.display()),
    };
    let mut sharing: HashMap<(&str, &str), usize> = HashMap::new();
    for h in hazards {
        *sharing.entry((h.rule, h.message.as_str())).or_default() += 1;
    }
    let mut said = std::collections::HashSet::new();
    let mut lines = Vec::new();
    for h in hazards {
        let key = (h.rule, h.message.as_str());
        let count = sharing[&key];
        if count > EACH_UP_TO && !said.insert(key) {
            continue;
        }
        let others = if count > EACH_UP_TO {
            format!(" (said once for the {count} nodes it denies)")
        } else {
            String::new()
        };
        lines.push(format!(
            "{}: [{}] {}{others}",
            place(&h.pointer),
            h.rule,
            h.message
        ));
    }
    lines
}

/// `file:line:col: pointer`, the place a message is about.
pub fn place(manifest: &Path, bytes: &[u8], pointer: &str) -> String {
    let format = bl_graph::Format::from_path(manifest).unwrap_or(bl_graph::Format::Yaml);
    let text = String::from_utf8_lossy(bytes);
    match bl_graph::locate(&text, format, pointer) {
        Some(pos) => format!("{}:{}:{}: {pointer}", manifest.display(), pos.line, pos.col),
        None => format!("{}: {pointer}", manifest.display()),
    }
}

/// Refuses a prompt for a node the graph does not have (a typo would leave
/// the node it meant without one), naming the closest id.
fn check_prompt_keys(
    schedule: &Schedule,
    prompts: &Prompts,
    flags: &DriveOptions,
) -> Result<(), AppError> {
    let (Some(file), false) = (&flags.inputs, flags.deny_at_run_time) else {
        return Ok(());
    };
    let ids: Vec<&str> = schedule.nodes.iter().map(|n| n.id.as_str()).collect();
    let known: std::collections::HashSet<&str> = ids.iter().copied().collect();
    let mut keys: Vec<&String> = prompts.keys().collect();
    keys.sort();
    // The node a typo meant is most likely one still without a prompt.
    let unprompted = without_prompt(schedule, prompts);
    // A prompt for a node no agent runs (a join, an approval) is unused,
    // as in bounded-loops; said, not refused.
    let unused: Vec<&str> = schedule
        .nodes
        .iter()
        .filter(|n| {
            matches!(
                n.driver,
                Driver::Join(_)
                    | Driver::Approval
                    | Driver::Publish { .. }
                    | Driver::Transform { .. }
                    | Driver::Tool { .. }
                    | Driver::Probe
            ) && prompts.contains_key(&n.id)
        })
        .map(|n| n.id.as_str())
        .collect();
    if !unused.is_empty() {
        crate::notes::note(format!(
            "note: {}: the prompts for {} are not used: no agent runs those nodes (only agent and subgraph nodes take one)",
            file.display(),
            first_of(&unused)
        ));
    }
    for key in keys {
        if !known.contains(key.as_str()) {
            let guess = bl_graph::error::did_you_mean(key, unprompted.iter().copied())
                .or_else(|| bl_graph::error::did_you_mean(key, ids.iter().copied()));
            let hint = match guess {
                // It starts a sentence here: "Did you mean …?"
                Some(h) => format!(" D{}", h.strip_prefix('d').unwrap_or(&h)),
                None if !unprompted.is_empty() => format!(
                    " The agent nodes still without a prompt: {}.",
                    first_of(&unprompted)
                ),
                None => String::new(),
            };
            return Err(refused(format!(
                "graph run: {}: /{key} gives a prompt for '{key}', which is not a node of this graph.{hint} (nodes: {}); nothing was run",
                file.display(),
                first_of(&ids)
            )));
        }
    }
    Ok(())
}

/// At most the first ten of `items`, joined, and how many more there are:
/// a message about a graph of thousands of nodes stays readable.
fn first_of<S: AsRef<str>>(items: &[S]) -> String {
    const SHOWN: usize = 10;
    let shown: Vec<&str> = items.iter().take(SHOWN).map(AsRef::as_ref).collect();
    match items.len().saturating_sub(SHOWN) {
        0 => shown.join(", "),
        more => format!("{}, … ({more} more)", shown.join(", ")),
    }
}

/// The agent nodes `prompts` gives no prompt, in the graph's order.
fn without_prompt<'a>(schedule: &'a Schedule, prompts: &Prompts) -> Vec<&'a str> {
    schedule
        .nodes
        .iter()
        .filter(|n| n.driver == Driver::Worker && !prompts.contains_key(&n.id))
        .map(|n| n.id.as_str())
        .collect()
}

/// Refuses a new run in which an agent would have no prompt: it would fail
/// at run time, and spend its retries on the same error.
fn check_every_prompt(
    schedule: &Schedule,
    prompts: &Prompts,
    flags: &DriveOptions,
) -> Result<(), AppError> {
    let missing = without_prompt(schedule, prompts);
    if missing.is_empty() {
        return Ok(());
    }
    let example: Vec<String> = missing
        .iter()
        .map(|id| format!("\"{id}\": \"…\""))
        .collect();
    Err(refused(match &flags.inputs {
        None => format!(
            "graph run: agent node(s) {} need a prompt, and no --inputs was given: pass --inputs FILE, a JSON object such as {{{}}}; nothing was run",
            first_of(&missing),
            first_of(&example)
        ),
        Some(file) => format!(
            "graph run: {}: no prompt for agent node(s) {}; add {} to it; nothing was run",
            file.display(),
            first_of(&missing),
            first_of(&example)
        ),
    }))
}

/// Refuses to drive on while a connector node that has not run has no
/// prompt (bounded-loops' words: its `node_prompts` are `--inputs`).
fn check_prompts(
    verb: &str,
    schedule: &Schedule,
    view: &RunView,
    prompts: &Prompts,
) -> Result<(), AppError> {
    let needing: Vec<(&str, NodeState)> = schedule
        .nodes
        .iter()
        .filter(|n| n.driver == Driver::Worker && !prompts.contains_key(&n.id))
        .map(|n| (n.id.as_str(), view.node(&n.id).state))
        .filter(|(_, state)| matches!(state, NodeState::Pending | NodeState::Running))
        .collect();
    let Some(&(first, state)) = needing.first() else {
        return Ok(());
    };
    let mut message = if state == NodeState::Pending {
        format!(
            "graph {verb}: cannot resume: connector node '{first}' is PENDING but no prompt was re-supplied; pass its prompt with --inputs FILE (the node prompts, as the run was given them) and retry"
        )
    } else {
        // bl's words: without its prompt, the attempt a stop or a crash
        // left would fail, and spend the node's attempts on that.
        format!(
            "graph {verb}: cannot resume: connector node '{first}' was stopped while RUNNING and is re-driven now, but no prompt was re-supplied; pass its prompt with --inputs FILE (the node prompts, as the run was given them) and retry; nothing was changed"
        )
    };
    // bounded-loops names the first; bl says, indented below, every one
    // this drive may start, so one --inputs file answers them all.
    if needing.len() > 1 {
        let ids: Vec<&str> = needing.iter().map(|(id, _)| *id).collect();
        let example: Vec<String> = ids.iter().map(|id| format!("\"{id}\": \"…\"")).collect();
        message.push_str(&format!(
            "\n  it needs the prompt of each agent node it may start: {}; one --inputs file holds them all, such as {{{}}}",
            first_of(&ids),
            first_of(&example)
        ));
    }
    Err(refused(message))
}

/// Drives a recorded run on (after `resume` or a decision), with the same
/// preflight as a new run.
fn continue_run(
    run: &LoadedRun,
    schedule: &Schedule,
    view: &RunView,
    prompts: Prompts,
    flags: &DriveOptions,
    depth: Depth,
) -> Result<(RunEnd, RunView), AppError> {
    let catalog = catalog(flags, Some(&run.dir))?;
    let ctx = run_context(&run.dir, flags, false)?;
    preflight(schedule, &catalog, &ctx, None)?;
    let caps = caps(flags)?;
    drive(
        run,
        schedule,
        catalog,
        prompts,
        caps,
        Some(view.resume_ordinal()),
        flags,
        &ctx,
        depth,
    )
}

/// A subgraph's child run that an earlier drive began (the parent was
/// interrupted mid-attempt): continued where it stopped, or, when it has
/// ended, taken as it is.
pub fn continue_child(
    dir: &Path,
    flags: &DriveOptions,
    depth: Depth,
) -> Result<(LoadedRun, RunEnd, RunView), AppError> {
    let run = load_run(dir, "resume")?;
    recover_after_a_crash(dir)?;
    let (view, _, _) = view_of(dir)?;
    if view.is_terminal() {
        let end = if view.run_state == RunState::Succeeded {
            RunEnd::Succeeded
        } else {
            RunEnd::Failed
        };
        return Ok((run, end, view));
    }
    let schedule = Schedule::of(&run.graph, &run.plan);
    let prompts = read_prompts(flags)?;
    let (end, after) = continue_run(&run, &schedule, &view, prompts, flags, depth)?;
    Ok((run, end, after))
}

/// The graph-run use case as a subgraph node's child runner: a child run
/// with the parent's options, its own prompts, one level deeper.
struct ChildDrives {
    options: DriveOptions,
}

impl crate::graph_nodes::ChildRunner for ChildDrives {
    fn run_child(
        &self,
        manifest: &Path,
        bytes: Vec<u8>,
        connections: Option<Value>,
        child: &Path,
        inputs: Option<PathBuf>,
        depth: u32,
    ) -> Result<crate::graph_nodes::ChildRun, AppError> {
        let mut options = self.options.clone();
        options.inputs = inputs;
        let depth = Depth::Child(depth);
        // A child an interrupted drive began is continued, never begun again.
        let (run, end, view) = if RunDir::new(child).holds_a_run() {
            continue_child(child, &options, depth)?
        } else {
            run_manifest(manifest, bytes, connections, child, &options, depth)?
        };
        Ok(crate::graph_nodes::ChildRun {
            plan_id: run.plan.plan_id,
            graph_digest: run.plan.graph_digest,
            run_state: view.run_state.to_string(),
            awaiting: match end {
                RunEnd::AwaitingApproval(nodes) => nodes,
                _ => Vec::new(),
            },
        })
    }
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

/// Records the decision on `node` with the evidence it has now; with
/// `shown` (the request digest the person was shown), only if that
/// evidence is still what they saw: the check is made on the very
/// evidence the record commits to.
fn record_decision(
    run: &LoadedRun,
    node: &str,
    approved: bool,
    round: u64,
    shown: Option<&str>,
    key: Option<&Path>,
    by: DecidedBy<'_>,
) -> Result<(), AppError> {
    let key = match key {
        Some(path) => Some(
            crate::keys::read_signing_key(path)
                .map_err(|e| refused(format!("graph approve: {e}")))?,
        ),
        None => None,
    };
    let view = view_of(&run.dir)?.0;
    let evidence = approvals::evidence(&run.graph, &view, node);
    if let Some(shown) = shown {
        let now = approvals::request_digest(&run.plan.plan_id, node, round, &evidence);
        if now != shown {
            return Err(refused(format!(
                "what node '{node}' would approve has changed since it was shown ({shown}); it is now {now}. Look at it again; nothing was recorded"
            )));
        }
    }
    let (decided_by, source) = match by {
        DecidedBy::Person => (
            std::env::var("USER").unwrap_or_else(|_| "operator".into()),
            "os_user",
        ),
        DecidedBy::Agent(name) => (name.to_string(), "agent"),
    };
    let entry = ApprovalEntry {
        node,
        approved,
        round,
        evidence: &evidence,
        decided_by,
        source,
    };
    approvals::commit(&run.dir, &run.plan.plan_id, &entry, key.as_ref())
        .map_err(|e| refused(format!("graph approve: {}", e.message())))
}

/// Who watches a drive: each event as it is appended, then the end.
pub trait Watch {
    fn event(&mut self, _event: &bl_run::events::Event) {}
    /// Once, before anything new, when a drive continues a run in which
    /// nodes had already ended (`failed` of them failed): their events
    /// are not shown again.
    fn earlier(&mut self, _ended: usize, _failed: usize) {}
    fn finish(&mut self) {}
}

/// Keeps a drive's watcher to what is new. A resume drives the run from
/// its start and records again nothing its log already holds: those
/// events are not shown as if they happened now; the watcher hears once,
/// first, how many nodes had ended.
struct Replayed {
    keys: std::collections::HashSet<String>,
}

impl Replayed {
    fn after(journal: &LogJournal, watch: &mut dyn Watch) -> Self {
        let ended: Vec<NodeState> = (journal.view().nodes.values())
            .map(|n| n.state)
            .filter(|s| s.is_final())
            .collect();
        if !ended.is_empty() {
            let failed = ended.iter().filter(|&&s| s == NodeState::Failed).count();
            watch.earlier(ended.len(), failed);
        }
        Replayed {
            keys: journal.keys().map(str::to_string).collect(),
        }
    }

    fn pass(&self, event: &bl_run::events::Event, watch: &mut dyn Watch) {
        // A finished turn judged again is observed under the key its turn
        // was recorded with: it is news all the same.
        if event.kind == "node.replied" || !self.keys.contains(&event.key) {
            watch.event(event);
        }
    }
}

/// No one watches (a subgraph's child run).
pub struct Unwatched;

impl Watch for Unwatched {}

/// Makes the watcher of a top-level drive, once its schedule is known.
#[derive(Clone)]
pub struct Watcher(pub Arc<MakeWatch>);

/// What makes a drive's watcher from its schedule.
pub type MakeWatch = dyn Fn(&Schedule) -> Box<dyn Watch> + Send + Sync;

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watcher")
    }
}

/// A drive that has stopped: the run, how the drive ended, and the run's
/// state after it.
pub struct Driven {
    pub run: LoadedRun,
    pub end: RunEnd,
    pub view: RunView,
}

impl Driven {
    /// What `graph run --json` and `graph resume --json` print: the run's
    /// state, each node's, and how to continue a stopped run (given
    /// `--inputs`, if any).
    pub fn answer(&self, inputs: Option<&Path>) -> Value {
        let (view, dir) = (&self.view, &self.run.dir);
        let order = self.run.graph.nodes.iter().map(|n| n.id.as_str());
        let nodes: Vec<Value> = order
            .clone()
            .map(|id| {
                let n = view.node(id);
                json!({"node_id": id, "state": n.state, "artifact_digests": n.artifact_digests})
            })
            .collect();
        let mut answer = json!({
            "out": dir.display().to_string(), "run_id": RUN_ID,
            "run_state": view.run_state, "awaiting_approval": view.awaiting(order),
            "paused": matches!(self.end, RunEnd::AwaitingApproval(_)),
            "budget_pause": view.budget_pause, "nodes": nodes,
            "spend_tokens": view.tokens, "spend_cost_microunits": view.cost_microunits,
        });
        if let RunEnd::Interrupted { signal, nodes } = &self.end {
            answer["interrupted"] = json!({
                "signal": signal, "nodes": nodes, "resume": resume_command(dir, inputs),
            });
        }
        answer
    }
}

/// `bl graph run --execute MANIFEST --out D ...`
pub fn run(
    manifest: &Path,
    connections: Option<&Path>,
    out: &Path,
    options: &DriveOptions,
) -> Result<Driven, AppError> {
    let bytes = crate::paths::read_capped(manifest, bl_graph::MAX_DOCUMENT_BYTES).map_err(|e| {
        refused(format!(
            "graph run: cannot read {} — {e}",
            manifest.display()
        ))
    })?;
    bl_graph::check_size(bytes.len(), bl_graph::Format::Yaml)
        .map_err(|e| refused(format!("graph run: {}: {e}", manifest.display())))?;
    let connections = match connections {
        Some(p) => Some(read_json(p, "connections")?),
        None => None,
    };
    let (run, end, view) = run_manifest(manifest, bytes, connections, out, options, Depth::Top)?;
    Ok(Driven { run, end, view })
}

/// `bl graph run --execute --out D` with no manifest: the sandbox probe.
pub fn run_probe(out: &Path, options: &DriveOptions) -> Result<Driven, AppError> {
    if cfg!(target_os = "linux") && bl_sandbox::find_bwrap().is_none() {
        return Err(refused(
            "graph run: the built-in sandbox probe runs in the container_restricted tier, which needs bubblewrap, and it is not installed: install the `bubblewrap` package (or run `scripts/dev setup`), then run this again",
        ));
    }
    let bytes =
        serde_json::to_vec_pretty(&probe_manifest()).expect("the probe manifest serializes");
    let (run, end, view) = run_manifest(
        Path::new("built-in sandbox probe"),
        bytes,
        None,
        out,
        options,
        Depth::Top,
    )?;
    Ok(Driven { run, end, view })
}

/// `bl graph resume --run D [--inputs J] [caps]`
pub fn resume(dir: &Path, options: &DriveOptions) -> Result<Driven, AppError> {
    let run = load_run(dir, "resume")?;
    recover_after_a_crash(dir)?;
    let (view, _, _) = view_of(dir)?;
    if view.is_terminal() {
        // bounded-loops exits 0 here; a run that has ended cannot be
        // continued, and a script must not take that for a success.
        return Err(refused(format!(
            "graph resume: the run in {} has ended ({}): there is nothing to resume. `bl graph status --run {}` shows how it ended; start a new run, with another --out, to try again",
            dir.display(),
            view.run_state,
            dir.display()
        )));
    }
    let schedule = Schedule::of(&run.graph, &run.plan);
    let prompts = read_prompts(options)?;
    check_prompt_keys(&schedule, &prompts, options)?;
    check_prompts("resume", &schedule, &view, &prompts)?;
    let (end, after) = continue_run(&run, &schedule, &view, prompts, options, Depth::Top)?;
    Ok(Driven {
        run,
        end,
        view: after,
    })
}

/// The command that continues a run a stop interrupted.
pub fn resume_command(dir: &Path, inputs: Option<&Path>) -> String {
    let mut command = format!("bl graph resume --run {}", dir.display());
    if let Some(inputs) = inputs {
        command.push_str(&format!(" --inputs {}", inputs.display()));
    }
    command
}

/// What a decision on an approval node did.
pub struct Approved {
    pub node_id: String,
    /// `approved` or `rejected`.
    pub decision: &'static str,
    /// It was on record already: nothing changed.
    pub idempotent: bool,
    pub run: LoadedRun,
    /// The run's state after the decision (and the drive it set off).
    pub view: RunView,
    /// How the drive the decision set off ended (none when idempotent).
    pub end: Option<RunEnd>,
}

impl Approved {
    /// What `approve --json` prints, as bounded-loops prints it.
    pub fn answer(&self) -> Value {
        let order: Vec<&str> = self.run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
        approve_answer(
            &self.run.dir,
            &self.node_id,
            self.decision,
            self.idempotent,
            &self.view,
            &order,
        )
    }
}

/// How many repair rounds the log has begun: the round a decision now
/// belongs to.
fn repair_rounds(events: &[Recorded]) -> u64 {
    events
        .iter()
        .filter(|e| e.kind == "run.repair.round")
        .count() as u64
}

/// The repair round the run in `dir` is in.
pub fn repair_round(dir: &Path) -> Result<u64, AppError> {
    Ok(repair_rounds(&view_of(dir)?.1))
}

/// `bl graph approve --run D --node N --decision approved|rejected`: the
/// decision is recorded (signed with `key`) and the run driven on. A
/// decision is final: the opposite one is refused, naming the first.
/// Who a decision is recorded as made by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy<'a> {
    /// The person at this machine (`$USER`): `decided_by_source: os_user`.
    Person,
    /// An agent, allowed by its operator to decide (`bl mcp
    /// --agent-approvals`), named here: `decided_by_source: agent`.
    Agent(&'a str),
}

pub fn approve(
    dir: &Path,
    node_id: &str,
    approved: bool,
    shown: Option<&str>,
    key: Option<&Path>,
    by: DecidedBy<'_>,
    options: &DriveOptions,
) -> Result<Approved, AppError> {
    let run = load_run(dir, "approve")?;
    let (view, events, _) = view_of(dir)?;
    let schedule = Schedule::of(&run.graph, &run.plan);
    let prompts = read_prompts(options)?;
    let decision = if approved { "approved" } else { "rejected" };
    let target = decision_target(&run, &view, &events, node_id, node_id, approved)?;
    // A child run's node decided in the child itself: the parent, still
    // paused on it, is driven on as the decision would have driven it.
    let order: Vec<&str> = run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let parent_waits = node_id.contains('/') && view.awaiting(order).iter().any(|p| p == node_id);
    if target.is_some() && node_id.contains('/') && view.is_terminal() {
        return Err(refused(format!(
            "graph approve: the run in {} has ended ({}), so its subgraph nodes wait on nothing and '{node_id}' was not decided; start a new run to decide it",
            dir.display(),
            view.run_state
        )));
    }
    if target.is_none() && !parent_waits {
        // Idempotent: the decision is already in the record.
        return Ok(Approved {
            node_id: node_id.to_string(),
            decision,
            idempotent: true,
            run,
            view,
            end: None,
        });
    }
    check_prompt_keys(&schedule, &prompts, options)?;
    check_prompts("approve", &schedule, &view, &prompts)?;
    if let Some(target) = &target {
        record_decision(
            &target.run,
            &target.node,
            approved,
            target.round,
            shown,
            key,
            by,
        )?;
    }
    let (end, after) = continue_run(&run, &schedule, &view, prompts, options, Depth::Top)?;
    Ok(Approved {
        node_id: node_id.to_string(),
        decision,
        idempotent: target.is_none(),
        run,
        view: after,
        end: Some(end),
    })
}

/// Where a decision is to be recorded: an approval node of `run`, or, for
/// a path `sub/gate`, one of the child run of its subgraph node `sub`
/// (`sub/inner/gate` a level further down).
struct DecisionTarget {
    run: LoadedRun,
    node: String,
    round: u64,
}

/// The run and node a decision on `path` is recorded in; `None` when that
/// same decision is on record already. A decision that differs from the
/// one on record is refused: a decision is final. `asked` is the path as
/// the person gave it, for the refusals.
fn decision_target(
    run: &LoadedRun,
    view: &RunView,
    events: &[Recorded],
    path: &str,
    asked: &str,
    approved: bool,
) -> Result<Option<DecisionTarget>, AppError> {
    if let Some((sub, rest)) = path.split_once('/') {
        let child = child_run_of(run, view, sub, asked)?;
        let (view, events, _) = view_of(&child.dir)?;
        return decision_target(&child, &view, &events, rest, asked, approved);
    }
    let Some(node) = run.graph.node(path) else {
        return Err(refused(format!(
            "graph approve: approval_node at /node_id: node '{path}' is not in the graph{}{}",
            in_child_run(run, path, asked),
            approval_nodes_hint(run, path)
        )));
    };
    if node.kind != NodeKind::Approval {
        return Err(refused(format!(
            "graph approve: approval_node at /node_id: node '{path}' is not an approval node{}{}",
            in_child_run(run, path, asked),
            approval_nodes_hint(run, path)
        )));
    }
    let round = repair_rounds(events);
    if let Some(first) = approvals::recorded(&run.dir, path, round)?
        && first.approved != approved
    {
        return Err(refused(format!(
            "graph approve: node '{asked}' was already {} by {} at {}; a decision is final, so this {} was not recorded. To decide again, start a new run",
            if first.approved {
                "approved"
            } else {
                "rejected"
            },
            first.by,
            first.at,
            if approved { "approval" } else { "rejection" },
        )));
    }
    if matches!(
        view.node(path).state,
        NodeState::Succeeded | NodeState::Failed
    ) {
        return Ok(None);
    }
    Ok(Some(DecisionTarget {
        run: load_run(&run.dir, "approve")?,
        node: path.to_string(),
        round,
    }))
}

/// The run directory holding the approval node `path` names, and the
/// node's id there: `dir` and `path` for a node of the run itself, the
/// child run's for `sub/gate` (of subgraph node `sub`).
pub fn decision_run(dir: &Path, path: &str) -> Result<(PathBuf, String), AppError> {
    let Some((sub, rest)) = path.split_once('/') else {
        return Ok((dir.to_path_buf(), path.to_string()));
    };
    let run = load_run(dir, "approve")?;
    let child = child_run_of(&run, &view_of(dir)?.0, sub, path)?;
    decision_run(&child.dir, rest)
}

/// The child run a subgraph node `sub` of `run` began in its last attempt
/// (in the repair round that attempt started in), for a decision on one of
/// the child's approval nodes.
fn child_run_of(
    run: &LoadedRun,
    view: &RunView,
    sub: &str,
    asked: &str,
) -> Result<LoadedRun, AppError> {
    match run.graph.node(sub) {
        Some(node) if node.kind == NodeKind::Subgraph => {}
        Some(_) => {
            return Err(refused(format!(
                "graph approve: approval_node at /node_id: node '{sub}' is not a subgraph node, so '{asked}' names no approval node; a path `node/gate` names approval node `gate` of subgraph node `node`'s child run"
            )));
        }
        None => {
            return Err(refused(format!(
                "graph approve: approval_node at /node_id: node '{sub}' of '{asked}' is not in the graph"
            )));
        }
    }
    let dir = view.node(sub).started_in().map(|(attempt, round)| {
        let (attempt, round) = (u32::try_from(attempt), u32::try_from(round));
        let number = |n: Result<u32, _>| n.unwrap_or(u32::MAX);
        run.dir.join(crate::graph_nodes::child_dir(
            sub,
            number(round),
            number(attempt),
        ))
    });
    let Some(dir) = dir.filter(|d| RunDir::new(d).holds_a_run()) else {
        return Err(refused(format!(
            "graph approve: subgraph node '{sub}' has not begun a child run yet, so '{asked}' cannot be decided; decide it once `bl graph status --run {}` lists it as awaiting approval",
            run.dir.display()
        )));
    };
    load_run(&dir, "approve")
}

/// " of the child run in DIR (asked: 'PATH')" when `path` is the end of a
/// longer `asked`; nothing when they are the same.
/// What a mistyped or wrong node id to decide can be told: the nearest
/// approval node's id, and every approval node of the graph.
fn approval_nodes_hint(run: &LoadedRun, asked: &str) -> String {
    let approvals: Vec<&str> = run
        .graph
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Approval)
        .map(|n| n.id.as_str())
        .collect();
    // On a line of its own: the first is bounded-loops' to the byte.
    if approvals.is_empty() {
        return "\n  this graph has no approval node, so nothing in it waits for a decision".into();
    }
    let nearest = bl_core::spelling::closest(asked, approvals.iter().copied())
        .map(|near| format!("did you mean '{near}'? "))
        .unwrap_or_default();
    format!("\n  {nearest}its approval nodes: {}", approvals.join(", "))
}

fn in_child_run(run: &LoadedRun, path: &str, asked: &str) -> String {
    if path == asked {
        String::new()
    } else {
        format!(
            " of the child run in {} (asked: '{asked}')",
            run.dir.display()
        )
    }
}

/// A run as its log says it stands.
pub struct RunStatus {
    pub run: LoadedRun,
    pub view: RunView,
    pub head: bl_store::ChainHead,
    /// A process is writing the run now.
    pub live: bool,
}

impl RunStatus {
    /// bounded-loops' status object (`graph status --json`).
    pub fn to_json(&self) -> Value {
        let (run, view, head) = (&self.run, &self.view, &self.head);
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
        json!({
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
        })
    }
}

/// `bl graph status --run D`: the run as its log says it stands.
pub fn status(dir: &Path) -> Result<RunStatus, AppError> {
    let run = load_run(dir, "status")?;
    let (view, _, head) = view_of(dir)?;
    Ok(RunStatus {
        run,
        view,
        head,
        live: RunDir::new(dir).has_live_writer(),
    })
}

/// One artifact of a run, as an agent may read it: its row of
/// [`artifacts`] and its bytes, checked against its digest.
pub struct ArtifactContent {
    pub row: Value,
    pub bytes: Vec<u8>,
}

/// The artifact `digest` of the run at `dir`, when the run's verified log
/// names it and no node keeps it `system_only` (such an artifact is for
/// transforms and the operator, who reads the run directory, never for an
/// agent): refused otherwise, saying which.
pub fn artifact_content(dir: &Path, digest: &str) -> Result<ArtifactContent, AppError> {
    let rows: Vec<Value> = artifacts(dir)?
        .into_iter()
        .filter(|row| row["digest"] == digest)
        .collect();
    let Some(row) = rows.first() else {
        return Err(refused(format!(
            "the run's log names no artifact {digest}: its artifacts are listed without a digest"
        )));
    };
    if let Some(kept) = rows.iter().find(|r| r["visibility"] == "system_only") {
        return Err(refused(format!(
            "{digest} is node '{}''s system_only output ({}): only transforms and the operator read it",
            kept["producer"]["node_id"].as_str().unwrap_or_default(),
            kept["port"].as_str().unwrap_or_default(),
        )));
    }
    let store = bl_store::ArtifactStore::new(RunDir::new(dir).artifacts(), u64::MAX);
    let bytes = store
        .get(digest)
        .map_err(|e| refused(format!("{digest}: {e}")))?;
    Ok(ArtifactContent {
        row: row.clone(),
        bytes,
    })
}

/// `bl graph artifacts --run D`: every artifact the run's log names, with
/// its producer, digest, size, media type, role, visibility and consumers.
pub fn artifacts(dir: &Path) -> Result<Vec<Value>, AppError> {
    let run = load_run(dir, "artifacts")?;
    let (_, events, _) = view_of(dir)?;
    // Consumers by (producer, port): the ported edges of the manifest.
    let mut consumers: HashMap<(String, String), Vec<String>> = HashMap::new();
    for e in &run.graph.edges {
        let target = run.graph.node(&e.to_node);
        let ported = target.is_some_and(|t| {
            t.artifact(bl_graph::model::Direction::Input, &e.to_port)
                .is_some()
        });
        if ported {
            consumers
                .entry((e.from_node.clone(), e.from_port.clone()))
                .or_default()
                .push(format!("{}.{}", e.to_node, e.to_port));
        }
    }
    let meta = |digest: &str| -> (u64, String) {
        let path = bl_store::artifacts::metadata_path(&RunDir::new(dir).artifacts(), digest);
        let v: Value = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        (
            v["size"].as_u64().unwrap_or(0),
            v["media_type"].as_str().unwrap_or("").to_string(),
        )
    };
    let mut rows: Vec<Value> = Vec::new();
    let mut seen = BTreeSet::new();
    for e in &events {
        let p = &e.payload;
        let node = p["node_id"].as_str().unwrap_or_default();
        let attempt = p["attempt"].clone();
        let outputs = p["outputs"].as_array().cloned().unwrap_or_default();
        let mut add = |digest: &str, role: &str, extra: Value| {
            if !seen.insert((digest.to_string(), node.to_string())) {
                return;
            }
            let (size, media_type) = meta(digest);
            let mut row = json!({
                "digest": digest, "size": size, "media_type": media_type, "role": role,
                "producer": {"node_id": node, "attempt": attempt, "event": e.kind},
                "port": null, "path": null, "visibility": null, "consumers": [],
            });
            if let (Some(r), Some(x)) = (row.as_object_mut(), extra.as_object()) {
                r.extend(x.clone());
            }
            rows.push(row);
        };
        for o in &outputs {
            let port = o["port"].as_str().unwrap_or_default();
            let used: Vec<String> = consumers
                .get(&(node.to_string(), port.to_string()))
                .cloned()
                .unwrap_or_default();
            add(
                o["digest"].as_str().unwrap_or_default(),
                "output",
                json!({"port": port, "path": o["path"], "kind": o["kind"],
                       "visibility": o["visibility"], "consumers": used}),
            );
        }
        for plugin in p["plugins"].as_array().into_iter().flatten() {
            add(
                plugin["component_digest"].as_str().unwrap_or_default(),
                "plugin",
                json!({"plugin": plugin["plugin"], "plugin_role": plugin["role"]}),
            );
        }
        for d in p["artifact_digests"].as_array().into_iter().flatten() {
            let d = d.as_str().unwrap_or_default();
            let role = match e.kind.as_str() {
                "node.succeeded"
                    if p["verdict"]["reason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("join causality")) =>
                {
                    "join-evidence"
                }
                "node.succeeded"
                    if p["verdict"]["reason"]
                        .as_str()
                        .is_some_and(|r| r.starts_with("publish receipt")) =>
                {
                    "publish-receipt"
                }
                _ => "reply",
            };
            add(d, role, json!({}));
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::first_of;

    #[test]
    fn a_long_list_in_a_message_shows_its_first_ten_and_counts_the_rest() {
        let few = ["a", "b"];
        assert_eq!(first_of(&few), "a, b");
        let many: Vec<String> = (0..500).map(|i| format!("n{i:03}")).collect();
        let said = first_of(&many);
        assert!(said.starts_with("n000, n001,"), "{said}");
        assert!(said.ends_with("n009, … (490 more)"), "{said}");
    }
}
