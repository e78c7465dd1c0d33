//! `bl mcp`: bl as a Model Context Protocol server, for agents. It offers
//! bounded-loops 0.7's MCP tools by the same names and argument shapes,
//! each a thin call into the application layer (`bl_app`), and answers as
//! bounded-loops does: one text block holding a JSON object, with a tool's
//! own failure inside it (`ok: false`, or `status: "error"`) and `isError`
//! only for a call that could not be made at all.
//!
//! What it owns: the protocol (rmcp, over stdio), the tools' argument
//! types (their JSON Schemas are generated from them), where a run named
//! by a model may be (only under the workspace's `.bounded-loops/runs`,
//! by name, never by path), and the cap on a result's size (a longer one
//! comes back in pages, by `cursor`).
//!
//! The tools that read: `graph_lint`, `graph_runs`, `graph_status`,
//! `graph_state_md`, `graph_metrics`, `bl_runs`, `bl_gates` and
//! `bl_capabilities`. The one that runs something, `bl_run`, previews
//! first: a run starts only when the call brings back the preview's
//! confirm token ([`confirm`]), and no pass a person must approve is ever
//! approved here.

pub mod approve;
pub mod audit;
pub mod confirm;
pub mod evidence;
pub mod graph_runs;
pub mod http;
pub mod library;
pub mod paging;
mod tasks;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bl_app::loop_run::LoopRequest;
use bl_app::loop_runtime::{LoopHandle, LoopRuntime, NoOneHere};
use bl_app::runtime::GraphRuntime;
use bl_graph::model::Named;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

pub use paging::MAX_RESULT_BYTES;

/// Where the server works.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// The directory whose `.bounded-loops/runs` holds the runs the tools
    /// name (as `bl graph run` puts them without `--out`).
    pub workspace: PathBuf,
    /// Signs the decisions people make on the consoles graph_approve opens.
    pub key: Option<PathBuf>,
    /// Agents may decide approvals (recorded as theirs): the operator's
    /// choice, never the default.
    pub agent_approvals: bool,
    /// Seconds a preview's confirm token holds (15 minutes, or less when
    /// the operator says so).
    pub token_lifetime_s: u64,
}

impl McpConfig {
    /// The server of `workspace`, else of `$BOUNDED_LOOPS_WORKSPACE`, else
    /// of the directory it was started in (as an absolute path).
    pub fn new(workspace: Option<PathBuf>) -> McpConfig {
        let workspace = workspace
            .or_else(|| std::env::var_os("BOUNDED_LOOPS_WORKSPACE").map(Into::into))
            .unwrap_or_else(|| ".".into());
        McpConfig {
            workspace: std::path::absolute(&workspace).unwrap_or(workspace),
            key: None,
            agent_approvals: false,
            token_lifetime_s: confirm::TOKEN_LIFETIME_S,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("the MCP server could not start: {0}")]
    Start(std::io::Error),
    #[error("{0}: the bearer token cannot be read or written: {1}")]
    Token(PathBuf, std::io::Error),
    #[error(
        "{0} is not a loopback address: bl mcp serves HTTP on this machine only (127.0.0.1 or ::1)"
    )]
    NotLoopback(std::net::SocketAddr),
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// Serves MCP on this process's stdin and stdout until the client closes
/// them.
pub fn serve_stdio(config: McpConfig) -> Result<(), McpError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(McpError::Start)?;
    let server = BlServer::new(config).map_err(|e| McpError::Start(std::io::Error::other(e)))?;
    let loops = server.started.clone();
    let consoles = server.consoles.clone();
    let graphs = server.graphs.clone();
    let served = runtime.block_on(async move {
        let service = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| McpError::Session(e.to_string()))?;
        service
            .waiting()
            .await
            .map_err(|e| McpError::Session(e.to_string()))?;
        Ok(())
    });
    stop_started(&loops, &graphs, &consoles);
    served
}

/// The client is gone: the loops it started stop before their next lap
/// (the lap in flight is finished and recorded), its graph runs at their
/// next step (resumable), and the approval pages it opened close.
pub(crate) fn stop_started(
    loops: &Mutex<Vec<(String, LoopHandle)>>,
    graphs: &graph_runs::Started,
    consoles: &approve::Consoles,
) {
    let loops = std::mem::take(&mut *loops.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, run) in &loops {
        run.cancel();
    }
    for (_, run) in loops {
        let _ = run.wait();
    }
    graphs.stop();
    consoles.close();
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A manifest given as text.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ManifestArgs {
    /// The graph manifest (graph/v1), as YAML (or JSON) text.
    pub manifest_yaml: String,
    /// Where to go on in a result that came back in pages.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// A run, by its name under the workspace's `.bounded-loops/runs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// The run's name (a directory under `.bounded-loops/runs`), never a path.
    pub run: String,
    /// Where to go on in a result that came back in pages.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `graph_artifacts`' arguments: a run, and the artifact to read.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArtifactsArgs {
    /// The run's name (a directory under `.bounded-loops/runs`), never a path.
    pub run: String,
    /// One artifact's digest (`sha256:…`, as `graph_status` gives a node's
    /// `artifact_digests`): its content too. Without it: every artifact of
    /// the run, without content.
    #[serde(default)]
    pub digest: Option<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `graph_status`'s arguments: a run, and whether to give its history.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusArgs {
    /// The run's name (a directory under `.bounded-loops/runs`), never a path.
    pub run: String,
    /// Also give the run's event history, every event as its log holds it
    /// (long: it comes in pages). Without it the history is given by its
    /// digest only: the log's head (`receipt_head_hash`) and length
    /// (`receipt_sequence`).
    #[serde(default)]
    pub events: bool,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// Only where to go on, for the tools that take nothing else.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageArgs {
    /// Where to go on in a result that came back in pages.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `bl_run`'s arguments (bounded-loops' shape).
#[derive(Debug, Deserialize, serde::Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunLoopArgs {
    /// The loop package's directory, relative to the workspace (or absolute, inside it).
    pub loop_dir: String,
    /// false: preview, change nothing, and hand out a confirm_token;
    /// true: run, with the confirm_token of that preview.
    pub confirm: bool,
    /// Overrides loop.yaml's runner.default.
    #[serde(default)]
    pub runner: Option<String>,
    /// A command that replaces the loop's gate (exit 0 passes).
    #[serde(default)]
    pub gate_override: Option<String>,
    #[serde(default)]
    pub max_iterations: Option<u32>,
    /// Keep the records under the package's .bounded-loops/runs/<run_id>
    /// (default: a fresh name).
    #[serde(default)]
    pub run_id: Option<String>,
    /// Continue the run run_id names, in its workspace.
    #[serde(default)]
    pub resume: bool,
    /// The token the preview handed out (confirm=true only).
    #[serde(default)]
    pub confirm_token: Option<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `bl_graph_terminal_runs`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TerminalRunsArgs {
    /// At most this many runs.
    #[serde(default = "a_hundred")]
    pub limit: u64,
    #[serde(default)]
    pub cursor: Option<String>,
}

fn a_hundred() -> u64 {
    100
}

/// The evidence tools' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRefArgs {
    /// A finished run's name under .bounded-loops/runs (bl_graph_terminal_runs' run_ref).
    pub run_ref: String,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `bl_lint`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LintLoopsArgs {
    /// Loop package directories, relative to the workspace (or absolute, inside it).
    pub loop_dirs: Vec<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `bl_runs`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoopDirArgs {
    /// The loop package's directory, relative to the workspace (or absolute, inside it).
    pub loop_dir: String,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `bl_catalog`'s filters.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CatalogArgs {
    /// Only loops with this role (any case).
    #[serde(default)]
    pub role: Option<String>,
    /// Only loops whose gate is of this kind (any case).
    #[serde(default)]
    pub gate_kind: Option<String>,
    /// true: only loops that need no key; false: only those that do.
    #[serde(default)]
    pub keyless: Option<bool>,
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `bl_search_loops`' arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchLoopsArgs {
    /// The task, in a person's words.
    pub task_description: String,
    /// At most this many candidates (1 to 50).
    #[serde(default = "eight")]
    pub limit: i64,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

fn eight() -> i64 {
    8
}

/// `bl_audit_loops`' arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditLoopsArgs {
    /// Directories inside the workspace: a loop package, or one holding
    /// packages (in `loops/` or directly). Omitted: the workspace.
    #[serde(default)]
    pub dirs: Option<Vec<String>>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `graph_compose`'s arguments (bounded-loops' shape).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ComposeArgs {
    pub graph_id: String,
    /// The nodes, each a mapping with at least a string `id` and a `kind`.
    pub nodes: Vec<Value>,
    #[serde(default)]
    pub edges: Option<Vec<Value>>,
    #[serde(default = "first_version")]
    pub version: String,
    /// Replaces the default policies wholesale when given (and not empty).
    #[serde(default)]
    pub policies: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub connection_slots: Option<Vec<Value>>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

fn first_version() -> String {
    "1.0.0".into()
}

/// `graph_interview`'s arguments: a saved graph's name, or a manifest.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InterviewArgs {
    /// A graph saved as .bounded-loops/graphs/<name>.yaml.
    #[serde(default)]
    pub name: Option<String>,
    /// A manifest as YAML text (taken over `name` when both are given).
    #[serde(default)]
    pub manifest_yaml: Option<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// One change `graph_configure` makes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigureArgs {
    /// A graph saved as .bounded-loops/graphs/<name>.yaml.
    pub name: String,
    /// Each `{pointer, value}`: a JSON pointer into the manifest (as
    /// graph_interview gives them) and the value to put there.
    pub changes: Vec<Value>,
    /// false: the proposed manifest and a confirm_token, nothing written;
    /// true: write it, with that token.
    #[serde(default)]
    pub confirm: bool,
    /// The token the preview handed out (confirm=true only).
    #[serde(default)]
    pub confirm_token: Option<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

#[derive(Clone)]
pub struct BlServer {
    config: McpConfig,
    confirmations: Arc<confirm::Confirmations>,
    /// The loops started here (by run id), stopped when the client goes.
    started: Arc<Mutex<Vec<(String, LoopHandle)>>>,
    /// The approval consoles opened for people, closed when the client goes.
    consoles: Arc<approve::Consoles>,
    /// The graph runs started here, stopped (resumable) when the client goes.
    graphs: Arc<graph_runs::Started>,
    /// Long answers, kept for their pages.
    pages: Arc<paging::Pages>,
    /// The long calls made tasks of, for clients that asked ([`tasks`]).
    tasks: rmcp::task_manager::TaskManager,
    tool_router: ToolRouter<BlServer>,
}

/// A run name as bounded-loops accepts one: 1-128 letters, digits, `.`,
/// `_` or `-`, starting with a letter or digit (so never a path).
pub(crate) fn valid_run_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The answer: `value` as one text block of JSON (a long one goes back in
/// pages, by [`paging`]).
fn answer(value: &Value) -> Result<CallToolResult, ErrorData> {
    let text = serde_json::to_string_pretty(value).expect("a JSON value serialises");
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

/// A manifest's refusal as bounded-loops' MCP server says it: its code,
/// JSON pointer (and line and column, which bl adds), message, and fix.
fn refused_manifest(refusal: &bl_graph::Refusal) -> Value {
    json!({"ok": false, "refusal": bl_app::graph_authoring::refusal_for_agents(refusal)})
}

/// Who the session says its client is (never what a model's arguments say).
fn client_of(peer: &rmcp::Peer<rmcp::RoleServer>) -> String {
    peer.peer_info().map_or_else(
        || "mcp-client".to_string(),
        |info| format!("mcp:{}", info.client_info.name),
    )
}

/// Waits (up to 5 s) for `path` to exist: a run makes its directory as it
/// starts, on its own thread, and its audit record goes in there.
async fn appeared(path: &Path) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !path.exists() && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The answer to a confirmed call on the run at `run_dir`, recorded in its
/// MCP audit log first, with the record's inclusion proof in `_meta`. A
/// run directory that does not exist (nothing was started) records nothing.
fn audited(
    run_dir: Option<&Path>,
    tool: &str,
    arguments: &Value,
    value: &Value,
    client: &str,
) -> Result<CallToolResult, ErrorData> {
    let mut result = answer(value)?;
    let Some(dir) = run_dir.filter(|d| d.is_dir()) else {
        return Ok(result);
    };
    // What came of it, without the bulk (plans, evidence, projections).
    let mut outcome = value.clone();
    if let Some(fields) = outcome.as_object_mut() {
        // (And never the console link: it is a person's capability.)
        for bulky in [
            "nodes",
            "edges",
            "evidence",
            "projection",
            "preview",
            "console_url",
        ] {
            fields.remove(bulky);
        }
    }
    let meta = match audit::record(dir, tool, arguments, &outcome, client) {
        Ok(meta) => meta,
        // The call was made; say plainly that its record was not.
        Err(e) => json!({"bl/audit": {"error": e.to_string()}}),
    };
    result.meta = meta.as_object().cloned().map(rmcp::model::MetaObject);
    Ok(result)
}

/// What a run of `graph` would deny, node by node, as the command line's
/// lint and plan warn of it (`bl graph run` refuses such a graph).
pub(crate) fn warnings(
    graph: &bl_graph::Graph,
    bindings: Option<&std::collections::BTreeMap<String, bl_graph::model::Connection>>,
) -> Value {
    bl_graph::hazards::hazards(graph, bindings)
        .into_iter()
        .map(
            |h| json!({"node": h.node, "pointer": h.pointer, "rule": h.rule, "message": h.message}),
        )
        .collect()
}

/// What a run refuses before it starts though the plan compiles (a tool it
/// cannot run, a route to nowhere), each `{pointer, message}`.
pub(crate) fn run_problems(graph: &bl_graph::Graph, plan: &bl_graph::Plan) -> Vec<Value> {
    bl_run::schedule::Schedule::of(graph, plan)
        .problems
        .into_iter()
        .map(|(pointer, message)| json!({"pointer": pointer, "message": message}))
        .collect()
}

/// A compiled manifest's plan, with what a run would deny, or why it was
/// refused.
pub(crate) fn plan_answer(
    compiled: Result<(bl_graph::Graph, bl_graph::Plan), bl_app::graph_plan::PlanFailure>,
) -> Value {
    match compiled {
        Ok((graph, plan)) => {
            let mut summary = bl_app::graph_plan::plan_summary(&graph, &plan);
            summary["warnings"] = warnings(&graph, Some(&plan.node_bindings));
            summary
        }
        Err(bl_app::graph_plan::PlanFailure::Manifest(m)) => refused_manifest(&m.refusal),
        Err(bl_app::graph_plan::PlanFailure::App(e)) => {
            json!({"ok": false, "error": {"code": "graph_plan", "pointer": "/", "message": e.message()}})
        }
    }
}

#[tool_router]
impl BlServer {
    /// A server for `config`, with a fresh key for its confirm tokens.
    pub fn new(config: McpConfig) -> Result<BlServer, getrandom::Error> {
        Ok(BlServer {
            confirmations: Arc::new(confirm::Confirmations::lasting(config.token_lifetime_s)?),
            config,
            started: Arc::default(),
            consoles: Arc::default(),
            graphs: Arc::default(),
            pages: Arc::default(),
            tasks: rmcp::task_manager::TaskManager::new(),
            tool_router: Self::tool_router(),
        })
    }

    /// `path` (relative to the workspace, or absolute), resolved, only
    /// when it is inside the workspace: a model names nothing outside it.
    fn contained(&self, path: &str) -> Result<PathBuf, Value> {
        let refused = |message: String| json!({"status": "error", "error_type": "ManifestError", "message": message});
        let outside = |root: &Path| {
            refused(format!(
                "'{path}' is outside the workspace this server was started with ({}); only paths inside it are taken",
                root.display()
            ))
        };
        let joined = self.config.workspace.join(path);
        if self.outside_by_name(path) {
            return Err(outside(&self.config.workspace));
        }
        let real = std::fs::canonicalize(&joined).map_err(|_| {
            refused(format!(
                "'{}' is not a directory or does not exist.",
                joined.display()
            ))
        })?;
        let root = std::fs::canonicalize(&self.config.workspace)
            .unwrap_or_else(|_| self.config.workspace.clone());
        if !real.starts_with(&root) {
            return Err(outside(&root));
        }
        Ok(real)
    }

    /// Whether `path` names a place outside the workspace by its words
    /// alone (`..`, an absolute path elsewhere): refused before anything is
    /// looked at, so a refusal never tells whether such a path exists.
    fn outside_by_name(&self, path: &str) -> bool {
        let mut lexical = PathBuf::new();
        for part in self.config.workspace.join(path).components() {
            match part {
                std::path::Component::ParentDir => {
                    lexical.pop();
                }
                std::path::Component::CurDir => {}
                other => lexical.push(other),
            }
        }
        !lexical.starts_with(&self.config.workspace)
    }

    /// bl_run: the preview, or the run started with the preview's token.
    fn run_loop(&self, args: RunLoopArgs) -> Value {
        let error = |message: String| json!({"status": "error", "error_type": "ManifestError", "message": message});
        let dir = match self.contained(&args.loop_dir) {
            Ok(dir) => dir,
            Err(refused) => return refused,
        };
        let request = LoopRequest {
            loop_dir: dir.clone(),
            runner: args.runner.clone(),
            gate_override: args.gate_override.clone(),
            max_iterations: args.max_iterations,
            run_id: args.run_id.clone(),
            resume: args.resume,
            redact: "off".into(),
            ..Default::default()
        };
        let prepared = match bl_app::loop_run::prepare(&request) {
            Ok(prepared) => prepared,
            Err(e) => return error(e.message().to_string()),
        };
        let manifest = &prepared.package.manifest;
        let preview = json!({
            "loop": manifest.name,
            "runner": prepared.runner,
            "gate": args.gate_override.clone().or_else(|| manifest.gate.run.clone()).unwrap_or_else(|| manifest.gate.kind.clone()),
            "agent_cmd": manifest.runner.agent_cmd.clone().unwrap_or_default(),
            "cassette": manifest.runner.cassette.clone().unwrap_or_default(),
        });
        // The token binds the exact request and the package's content: a
        // loop changed since its preview is previewed again.
        let package = match bl_packages::digest(&dir) {
            Ok(digest) => digest,
            Err(e) => return error(format!("{}: {e}", dir.display())),
        };
        let bound = json!({
            "loop_dir": dir, "runner": args.runner, "gate_override": args.gate_override,
            "max_iterations": args.max_iterations, "run_id": args.run_id, "resume": args.resume,
            "package": package,
        });
        let now = unix_now();
        let token = self.confirmations.issue("bl_run", &bound, now);
        if !args.confirm {
            return json!({"status": "not_confirmed", "preview": preview, "confirm_token": token});
        }
        if let Err(refused) =
            self.confirmations
                .take("bl_run", &bound, args.confirm_token.as_deref(), now)
        {
            return json!({"status": "not_confirmed", "error": refused.to_string(), "preview": preview, "confirm_token": token});
        }
        let run_id = match args
            .run_id
            .clone()
            .map_or_else(bl_app::graph_run::fresh_run_name, Ok)
        {
            Ok(id) => id,
            Err(e) => return error(e.message().to_string()),
        };
        let request = LoopRequest {
            run_id: Some(run_id.clone()),
            ..request
        };
        match LoopRuntime::new().run(request, Box::new(NoOneHere)) {
            Ok(run) => {
                self.started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((run_id.clone(), run));
                json!({
                    "status": "started",
                    "run_id": run_id,
                    "loop": manifest.name,
                    "follow": "bl_runs with this loop_dir: each run's status and laps",
                })
            }
            Err(e) => error(e.message().to_string()),
        }
    }

    /// bl_runs: the package's runs, newest name last.
    fn loop_runs(&self, loop_dir: &str) -> Value {
        let dir = match self.contained(loop_dir) {
            Ok(dir) => dir,
            Err(refused) => return refused,
        };
        let runs_dir = dir.join(".bounded-loops/runs");
        let going = self.started.lock().unwrap_or_else(|e| e.into_inner());
        // A run started here is listed even before its records appear.
        let mut names: Vec<String> = std::fs::read_dir(&runs_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .chain(
                going
                    .iter()
                    .filter(|(_, run)| run.ledger().starts_with(&runs_dir))
                    .map(|(id, _)| id.clone()),
            )
            .collect();
        names.sort();
        names.dedup();
        let runs: Vec<Value> = names
            .iter()
            .filter_map(|name| {
                let running = going
                    .iter()
                    .any(|(id, run)| id == name && !run.is_finished());
                let run = bl_app::loop_info::loop_run_summary(name, &runs_dir.join(name));
                let (status, laps, reason) = match &run {
                    Some(run) if !(running && run["state"] == "UNFINISHED") => (
                        run["state"].clone(),
                        run["laps"].clone(),
                        run["reason"].clone(),
                    ),
                    _ if running => (
                        json!("RUNNING"),
                        run.map_or(json!(0), |r| r["laps"].clone()),
                        Value::Null,
                    ),
                    _ => return None,
                };
                Some(json!({"run_id": name, "status": status, "laps": laps, "reason": reason}))
            })
            .collect();
        json!({"status": "ok", "runs": runs})
    }

    /// Where a call's audit record goes: nowhere for a preview; the run's
    /// own log when the call has a run; else (a refused start, a saved
    /// graph's change) the workspace's, `.bounded-loops/mcp-audit.jsonl`.
    fn audit_place(&self, confirmed: bool, run_dir: Option<PathBuf>) -> Option<PathBuf> {
        if !confirmed {
            return None;
        }
        run_dir.filter(|d| d.is_dir()).or_else(|| {
            let workspace = self.config.workspace.join(".bounded-loops");
            std::fs::create_dir_all(&workspace).ok().map(|()| workspace)
        })
    }

    /// The answer to `tool`'s call, recorded first when it was confirmed
    /// (see [`BlServer::audit_place`] for where).
    fn recorded(
        &self,
        confirmed: bool,
        run_dir: Option<PathBuf>,
        tool: &str,
        asked: &Value,
        value: &Value,
        peer: &rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let place = self.audit_place(confirmed, run_dir);
        audited(place.as_deref(), tool, asked, value, &client_of(peer))
    }

    fn runs_dir(&self) -> PathBuf {
        self.config.workspace.join(".bounded-loops/runs")
    }

    /// The run named `run`, or the answer that says why not.
    fn run_dir(&self, run: &str) -> Result<PathBuf, Value> {
        if !valid_run_name(run) {
            return Err(
                json!({"ok": false, "error": "run_id must be 1-128 chars: letters, digits, '.', '_', '-' only; must start with a letter or digit"}),
            );
        }
        let dir = self.runs_dir().join(run);
        if !dir.is_dir() {
            return Err(
                json!({"ok": false, "error": format!("no run named '{run}' in {}", self.runs_dir().display())}),
            );
        }
        Ok(dir)
    }

    /// Reads the run `run` with `read`, as `{ok, run, <key>: ...}`, off the
    /// server's thread (reading and verifying a long log takes a while, and
    /// the session goes on meanwhile).
    async fn about_run(
        &self,
        run: &str,
        key: &str,
        read: impl FnOnce(&GraphRuntime, &Path) -> Result<Value, bl_app::AppError> + Send + 'static,
    ) -> Result<Value, ErrorData> {
        let dir = match self.run_dir(run) {
            Ok(dir) => dir,
            Err(refused) => return Ok(refused),
        };
        let read = tokio::task::spawn_blocking(move || read(&GraphRuntime::default(), &dir))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(match read {
            Ok(value) => json!({"ok": true, "run": run, key: value}),
            Err(e) => json!({"ok": false, "run": run, "error": e.message()}),
        })
    }

    #[tool(
        description = "Lint a graph/v1 manifest (YAML text): its id, version, nodes and edge count, or the refusal with its code, JSON pointer, line and column, and the fix. Nothing runs."
    )]
    async fn graph_lint(
        &self,
        Parameters(args): Parameters<ManifestArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let format = if args.manifest_yaml.trim_start().starts_with('{') {
            bl_graph::Format::Json
        } else {
            bl_graph::Format::Yaml
        };
        let value = match bl_graph::lint(&args.manifest_yaml, format) {
            Ok(graph) => json!({
                "ok": true,
                "graph_id": graph.graph_id,
                "version": graph.version,
                "nodes": graph.nodes.iter().map(|n| json!({"id": n.id, "kind": n.kind.name()})).collect::<Vec<_>>(),
                "edges": graph.edges.len(),
                "warnings": warnings(&graph, None),
            }),
            Err(refusal) => refused_manifest(&refusal),
        };
        answer(&value)
    }

    #[tool(
        description = "Compile a graph/v1 manifest (YAML text) into its plan: the plan id, each node's kind, isolation, effects and budget, the edges, and where the run would wait for a person. Nothing runs and no run directory is made."
    )]
    async fn graph_plan(
        &self,
        Parameters(args): Parameters<ManifestArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let roots = vec![self.config.workspace.clone()];
        let value = tokio::task::spawn_blocking(move || {
            plan_answer(bl_app::graph_plan::compile_text(
                &args.manifest_yaml,
                None,
                &roots,
            ))
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    #[tool(
        description = "The graph runs in this workspace (the names under .bounded-loops/runs), newest name last."
    )]
    async fn graph_runs(
        &self,
        Parameters(_page): Parameters<PageArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let mut runs: Vec<String> = std::fs::read_dir(self.runs_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().join("run-meta.json").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        runs.sort();
        let value = json!({
            "ok": true,
            "workspace": self.config.workspace.join(".bounded-loops").display().to_string(),
            "runs": runs,
        });
        answer(&value)
    }

    #[tool(
        description = "A graph run's state, projected from its verified event log (bounded-loops' status object: the run's state, each node's state, attempts, gate and spend). The history itself is given by its digest (receipt_head_hash, receipt_sequence) unless `events` is true. `run` is a run's name under .bounded-loops/runs."
    )]
    async fn graph_status(
        &self,
        Parameters(args): Parameters<StatusArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let with_events = args.events;
        let value = self
            .about_run(&args.run, "projection", move |runtime, dir| {
                let mut projection = runtime.status(dir)?.to_json();
                if with_events {
                    // Read through the same check as every reader: each
                    // line chained to the last.
                    let events = runtime.subscribe(dir, 0).read_to_end()?;
                    projection["events"] =
                        Value::Array(events.into_iter().map(|e| e.line).collect());
                }
                Ok(projection)
            })
            .await?;
        answer(&value)
    }

    #[tool(
        description = "A graph run's state as Markdown (STATE.md): a projection of its event log, not a record. `run` is a run's name under .bounded-loops/runs."
    )]
    async fn graph_state_md(
        &self,
        Parameters(args): Parameters<RunArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        // An agent is told where the run is inside the workspace, never
        // this machine's paths (as every other tool).
        let workspace = self.config.workspace.clone();
        let value = self
            .about_run(&args.run, "markdown", move |runtime, dir| {
                let markdown = runtime.status(dir)?.to_markdown();
                Ok(json!(match dir.strip_prefix(&workspace) {
                    Ok(inside) =>
                        markdown.replace(&dir.display().to_string(), &inside.display().to_string()),
                    Err(_) => markdown,
                }))
            })
            .await?;
        answer(&value)
    }

    #[tool(
        description = "A graph run's artifacts, from its verified log: each one's digest, producer (node, attempt), size, media type, role (an output with its port and path, a reply, join evidence, a publish receipt, a plugin component), visibility and consumers. With `digest`: that artifact's content too, checked against its digest (`text` when it is UTF-8, else `content_base64`). An output a node keeps system_only is never given. `run` is a run's name under .bounded-loops/runs."
    )]
    async fn graph_artifacts(
        &self,
        Parameters(args): Parameters<ArtifactsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let value = match args.digest {
            None => {
                self.about_run(&args.run, "artifacts", |runtime, dir| {
                    Ok(Value::Array(runtime.artifacts(dir)?))
                })
                .await?
            }
            Some(digest) => {
                self.about_run(&args.run, "artifact", move |runtime, dir| {
                    let content = runtime.artifact_content(dir, &digest)?;
                    let mut artifact = content.row;
                    match String::from_utf8(content.bytes) {
                        Ok(text) => artifact["text"] = json!(text),
                        Err(e) => {
                            use base64::Engine as _;
                            let encoded =
                                base64::engine::general_purpose::STANDARD.encode(e.as_bytes());
                            artifact["content_base64"] = json!(encoded);
                        }
                    }
                    Ok(artifact)
                })
                .await?
            }
        };
        answer(&value)
    }

    #[tool(
        description = "A graph run's counts, durations, spend, queue and approval waits, and the parallelism it achieved, per node and for the run, read from its verified log. `run` is a run's name under .bounded-loops/runs."
    )]
    async fn graph_metrics(
        &self,
        Parameters(args): Parameters<RunArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let value = self
            .about_run(&args.run, "metrics", |runtime, dir| {
                Ok(runtime.metrics(dir)?.to_json())
            })
            .await?;
        answer(&value)
    }

    #[tool(
        description = "Run a bounded loop. confirm=false previews it (its loop, runner and gate) and hands out a confirm_token; confirm=true with that token starts it, in the background (bl_runs follows it). The token holds for the exact arguments and the package as previewed, for 15 minutes, once. A pass that needs a human's approval is never approved here: the run stops PAUSED. `loop_dir` is inside the workspace."
    )]
    async fn bl_run(
        &self,
        Parameters(args): Parameters<RunLoopArgs>,
        peer: rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let asked = serde_json::to_value(&args).unwrap_or_default();
        let confirmed = args.confirm;
        let package = self.contained(&args.loop_dir).ok();
        let server = self.clone();
        let value = tokio::task::spawn_blocking(move || server.run_loop(args))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let run_dir = match (confirmed, package, value["run_id"].as_str()) {
            (true, Some(package), Some(id)) => Some(package.join(".bounded-loops/runs").join(id)),
            _ => None,
        };
        if let Some(dir) = &run_dir {
            appeared(dir).await;
        }
        self.recorded(confirmed, run_dir, "bl_run", &asked, &value, &peer)
    }

    #[tool(
        description = "A loop package's runs (under its .bounded-loops/runs): each run's id, status (DONE, HALT, PAUSE, KILLED, ERROR, RUNNING, or UNFINISHED when no end was recorded), laps and reason."
    )]
    async fn bl_runs(
        &self,
        Parameters(args): Parameters<LoopDirArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        answer(&self.loop_runs(&args.loop_dir))
    }

    #[tool(
        description = "The loop packages in the workspace (./loops/*/ and ./*/): each one's name, role, rung, gate kind and path, or why it does not read."
    )]
    async fn bl_list(
        &self,
        Parameters(_page): Parameters<PageArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let root = self.config.workspace.clone();
        let rows = tokio::task::spawn_blocking(move || bl_app::loop_info::list(&root))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let loops: Vec<Value> = rows
            .into_iter()
            .map(|(_, row)| {
                let broken = row["error"].is_string();
                json!({
                    "name": if broken { row["path"].as_str().and_then(|p| p.rsplit('/').next()).map(Value::from).unwrap_or_default() } else { row["name"].clone() },
                    "role": if broken { json!([]) } else { row["role"].clone() },
                    "rung": if broken { json!("?") } else { row["rung"].clone() },
                    "gate_kind": if broken { json!("?") } else { row["gate"].clone() },
                    "path": row["path"],
                    "error": row["error"],
                })
            })
            .collect();
        answer(&json!({"loops": loops}))
    }

    #[tool(
        description = "Lint loop packages (loop.yaml, bounds.yaml): whether each passes, and why not. Nothing runs. Each directory is inside the workspace."
    )]
    async fn bl_lint(
        &self,
        Parameters(args): Parameters<LintLoopsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let server = self.clone();
        let results = tokio::task::spawn_blocking(move || {
            args.loop_dirs
                .iter()
                .map(|dir| {
                    let shown = std::path::absolute(server.config.workspace.join(dir))
                        .unwrap_or_else(|_| dir.into());
                    let why = match server.contained(dir) {
                        Ok(real) => bl_app::loop_info::lint(&real),
                        Err(refused) if server.outside_by_name(dir) || shown.is_dir() => {
                            Some(refused["message"].as_str().unwrap_or_default().to_string())
                        }
                        Err(_) => Some(format!("'{}' is not a directory", shown.display())),
                    };
                    json!({"path": shown, "passed": why.is_none(), "errors": why.into_iter().collect::<Vec<_>>()})
                })
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let all_passed = results.iter().all(|r| r["passed"] == true);
        answer(&json!({"results": results, "all_passed": all_passed}))
    }

    #[tool(
        description = "A loop package's runner, gate, bounds, content hash and risk flags. `loop_dir` is inside the workspace."
    )]
    async fn bl_show(
        &self,
        Parameters(args): Parameters<LoopDirArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let server = self.clone();
        let value = tokio::task::spawn_blocking(move || match server.contained(&args.loop_dir) {
            Ok(dir) => match bl_app::loop_info::show(&dir) {
                Ok(shown) => json!({"status": "ok", "loop": shown}),
                Err(e) => json!({"status": "error", "error_type": "ManifestError", "message": e.message()}),
            },
            Err(refused) => refused,
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    /// What `graph_run` and `graph_resume` work with, now.
    fn graph_tools<'a>(
        &'a self,
        contained: &'a dyn Fn(&str) -> Result<PathBuf, Value>,
    ) -> graph_runs::GraphRuns<'a> {
        graph_runs::GraphRuns {
            workspace: &self.config.workspace,
            runs_dir: self.runs_dir(),
            confirmations: &self.confirmations,
            started: &self.graphs,
            contained,
            now: unix_now(),
        }
    }

    #[tool(
        description = "Run a graph/v1 manifest (YAML text). confirm=false gives its plan (nodes, edges, where it waits for a person) and a confirm_token, and runs nothing; confirm=true with that token starts the run in the background and answers at once with its name and state (graph_status follows it). A graph with agent nodes needs `connections` (and `inputs`, or `recorded` replies to run keyless), files inside the workspace. An approval node waits for a person."
    )]
    async fn graph_run(
        &self,
        Parameters(args): Parameters<graph_runs::GraphRunArgs>,
        peer: rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let asked = serde_json::to_value(&args).unwrap_or_default();
        let confirmed = args.confirm;
        let server = self.clone();
        let value = tokio::task::spawn_blocking(move || {
            let contained = |p: &str| server.contained(p);
            server.graph_tools(&contained).run(&args)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let run_dir = value["run"].as_str().map(|run| self.runs_dir().join(run));
        if let Some(dir) = &run_dir {
            appeared(&dir.join(bl_store::RunDir::META)).await;
        }
        self.recorded(confirmed, run_dir, "graph_run", &asked, &value, &peer)
    }

    #[tool(
        description = "Resume a graph run that a stop, a crash or a spent budget left unfinished, optionally with new ceilings (max_tokens, max_cost_usd). confirm=false says what it would do and gives a confirm_token; confirm=true with that token resumes it in the background (graph_status follows it). It never approves anything. `run` is a run's name under .bounded-loops/runs."
    )]
    async fn graph_resume(
        &self,
        Parameters(args): Parameters<graph_runs::GraphResumeArgs>,
        peer: rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let asked = serde_json::to_value(&args).unwrap_or_default();
        let confirmed = args.confirm;
        let dir = match self.run_dir(&args.run) {
            Ok(dir) => dir,
            // No such run: a confirmed call is still recorded (in the
            // workspace's log).
            Err(refused) => {
                return self.recorded(confirmed, None, "graph_resume", &asked, &refused, &peer);
            }
        };
        let run_dir = Some(dir.clone());
        let server = self.clone();
        let value = tokio::task::spawn_blocking(move || {
            let contained = |p: &str| server.contained(p);
            server.graph_tools(&contained).resume(&dir, &args)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        self.recorded(confirmed, run_dir, "graph_resume", &asked, &value, &peer)
    }

    #[tool(
        description = "Approve or reject an approval node of a paused graph run. Only a person approves: confirm=false previews (the evidence and its digest); confirm=true hands back a one-time link on this machine where a person sees the evidence and decides, and nothing is recorded by the call itself. Call again to see the decision. `run` is a run's name under .bounded-loops/runs."
    )]
    async fn graph_approve(
        &self,
        Parameters(args): Parameters<approve::ApproveArgs>,
        peer: rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let asked = serde_json::to_value(&args).unwrap_or_default();
        let confirmed = args.confirm;
        let dir = match self.run_dir(&args.run) {
            Ok(dir) => dir,
            // No such run: a confirmed call is still recorded (in the
            // workspace's log).
            Err(refused) => {
                return self.recorded(confirmed, None, "graph_approve", &asked, &refused, &peer);
            }
        };
        let run_dir = Some(dir.clone());
        // Who decides, when agents may: the client the session says it is,
        // never a name from the model's arguments.
        let agent = client_of(&peer);
        let server = self.clone();
        let value = tokio::task::spawn_blocking(move || {
            approve::Approver {
                consoles: &server.consoles,
                key: server.config.key.clone(),
                agent_approvals: server.config.agent_approvals,
                agent,
                confirmations: &server.confirmations,
                now: unix_now(),
            }
            .answer(&args.run, &dir, &args)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        self.recorded(confirmed, run_dir, "graph_approve", &asked, &value, &peer)
    }

    #[tool(
        description = "The finished graph runs of this workspace (SUCCEEDED or FAILED), last name first: each run's run_ref (its name), run_id, state and when it ended."
    )]
    async fn bl_graph_terminal_runs(
        &self,
        Parameters(args): Parameters<TerminalRunsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let runs_dir = self.runs_dir();
        let limit = usize::try_from(args.limit).unwrap_or(usize::MAX);
        let value = tokio::task::spawn_blocking(move || evidence::terminal_runs(&runs_dir, limit))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    #[tool(
        description = "What a finished graph run proves, from its verified log: outcome, identity, digests, receipt head and each node's state, gate, attempts and artifact digests (contract slm-bridge/v1). `run_ref` is a run's name from bl_graph_terminal_runs."
    )]
    async fn bl_graph_evidence(
        &self,
        Parameters(args): Parameters<RunRefArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let (workspace, runs_dir) = (self.config.workspace.clone(), self.runs_dir());
        let run_ref = args.run_ref.clone();
        let value = tokio::task::spawn_blocking(move || {
            evidence::evidence(&workspace, &runs_dir, &run_ref)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    #[tool(
        description = "A finished graph run's execution-learning signal (contract slm-bridge/v2). bl records none, so this says so for every finished run. `run_ref` is a run's name from bl_graph_terminal_runs."
    )]
    async fn bl_graph_execution_evidence(
        &self,
        Parameters(args): Parameters<RunRefArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let runs_dir = self.runs_dir();
        let value = tokio::task::spawn_blocking(move || {
            evidence::execution_evidence(&runs_dir, &args.run_ref)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    #[tool(
        description = "The loop packages this workspace offers (itself, ./loops, or the nearest loops/ above), each with its roles, gate kind, runner, whether it needs a key, its description's first line, and its content digest (loop_package) to pin in a graph's loop node. Filters: role, gate_kind, keyless. Packages that do not read are listed with why, whatever the filters."
    )]
    async fn bl_catalog(
        &self,
        Parameters(args): Parameters<CatalogArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let root = self.config.workspace.clone();
        let filter = bl_app::loop_library::CatalogFilter {
            role: args.role,
            gate_kind: args.gate_kind,
            keyless: args.keyless,
        };
        let value =
            tokio::task::spawn_blocking(move || bl_app::loop_library::catalog(&root, &filter))
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    #[tool(
        description = "Loop packages that share words with a task description, best first (a name counts 5, a role or the gate kind 3, the description 1). Word overlap only: read each candidate's gate before trusting it for the task."
    )]
    async fn bl_search_loops(
        &self,
        Parameters(args): Parameters<SearchLoopsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let root = self.config.workspace.clone();
        let value = tokio::task::spawn_blocking(move || {
            bl_app::loop_library::search(&root, &args.task_description, args.limit)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    #[tool(
        description = "Audit loop packages for what a shippable one carries beyond lint: PROMPT.md, README.md, bounds.yaml and seed/, a cassette for a stub runner, a schema for a jsonschema gate, guardrails in the prompt, production guidance in the README. `dirs` are inside the workspace (default: the workspace)."
    )]
    async fn bl_audit_loops(
        &self,
        Parameters(args): Parameters<AuditLoopsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let server = self.clone();
        let value = tokio::task::spawn_blocking(move || {
            let dirs = args
                .dirs
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| vec![".".into()]);
            let mut bases = Vec::new();
            for dir in &dirs {
                match server.contained(dir) {
                    Ok(real) => bases.push(real),
                    Err(refused) if server.outside_by_name(dir) => return refused,
                    // A directory that is not there holds no package.
                    Err(_) if !server.config.workspace.join(dir).exists() => {}
                    Err(refused) => return refused,
                }
            }
            bl_app::loop_library::audit(&bases)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&value)
    }

    #[tool(
        description = "Draft a graph/v1 manifest from nodes (each at least an id and a kind), edges, policies and connection slots. What is left out is filled at the safe end of its range (one attempt, 300 s, no effects, workspace_only; fail closed, no repair budget) and said so; what cannot be invented (a loop node's package digest) comes back as a gap. The draft is linted, never run or saved."
    )]
    async fn graph_compose(
        &self,
        Parameters(args): Parameters<ComposeArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let draft = bl_app::graph_authoring::Draft {
            graph_id: args.graph_id,
            nodes: args.nodes,
            edges: args.edges.unwrap_or_default(),
            version: args.version,
            policies: args.policies.map(Value::Object),
            connection_slots: args.connection_slots.unwrap_or_default(),
        };
        answer(&bl_app::graph_authoring::compose(&draft))
    }

    #[tool(
        description = "The questions a person should answer about a graph before it runs, weightiest first: what each node may change, who approves, spend and retry limits, failure handling, data sensitivity, confinement. Each names the JSON pointer its answer goes to (graph_configure takes them). Give manifest_yaml, or the name of a graph saved under .bounded-loops/graphs. Reads only."
    )]
    async fn graph_interview(
        &self,
        Parameters(args): Parameters<InterviewArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let value = bl_app::graph_authoring::interview(
            &self.config.workspace,
            args.name.as_deref(),
            args.manifest_yaml.as_deref(),
        );
        answer(&value)
    }

    #[tool(
        description = "Change a graph saved under .bounded-loops/graphs/<name>.yaml by JSON-pointer assignments ({pointer, value}; an existing list item or any key of an existing mapping, never new structure). The result is linted; confirm=false shows the proposed manifest and writes nothing, confirm=true writes it (only when it lints)."
    )]
    async fn graph_configure(
        &self,
        Parameters(args): Parameters<ConfigureArgs>,
        peer: rmcp::Peer<rmcp::RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        // The token binds the changes and the file as it is now: a graph
        // changed since its preview is previewed again.
        // (Only a name that is a saved graph's is read.)
        let file = bl_app::graph_authoring::saved(&self.config.workspace, &args.name)
            .ok()
            .and_then(|path| std::fs::read(path).ok())
            .map(|bytes| bl_core::Sha256Digest::of(&bytes).to_string());
        let bound = json!({"name": args.name, "changes": args.changes, "file": file});
        let now = unix_now();
        let token = self.confirmations.issue("graph_configure", &bound, now);
        let refused = if args.confirm {
            self.confirmations
                .take(
                    "graph_configure",
                    &bound,
                    args.confirm_token.as_deref(),
                    now,
                )
                .err()
        } else {
            None
        };
        // A refused token is answered with the preview itself (and a fresh
        // token), so confirming always follows a preview.
        let previewing = !args.confirm || refused.is_some();
        let mut value = bl_app::graph_authoring::configure(
            &self.config.workspace,
            &args.name,
            &args.changes,
            !previewing,
        );
        if previewing && value["ok"] == true {
            value["confirm_token"] = json!(token);
            value["next"] = json!(
                "call again with confirm=true and this confirm_token to write it (it holds 15 minutes, once)"
            );
        }
        if let Some(refused) = refused {
            value["ok"] = json!(false);
            value["error"] = json!({"code": "confirm_token", "pointer": "/confirm_token", "message": refused.to_string()});
        }
        let asked = serde_json::to_value(&args.changes).unwrap_or_default();
        let asked = json!({"name": args.name, "changes": asked, "confirm": args.confirm});
        self.recorded(args.confirm, None, "graph_configure", &asked, &value, &peer)
    }

    #[tool(
        description = "The gate kinds a bounded loop can use, whether each is available on this machine, and what it needs."
    )]
    async fn bl_gates(
        &self,
        Parameters(_page): Parameters<PageArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let gates = tokio::task::spawn_blocking(bl_app::loop_info::gates)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(&json!({"gates": gates}))
    }

    #[tool(
        description = "What this engine can do: node kinds, gates, isolation tiers, budgets, failure policies, run states, data classes and refusal codes."
    )]
    async fn bl_capabilities(
        &self,
        Parameters(_page): Parameters<PageArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let capabilities = bl_app::loop_info::capabilities();
        answer(&json!({"status": "ok", "capabilities": capabilities}))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BlServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_prompts()
                .enable_tasks()
                .build(),
        )
            .with_server_info(Implementation::new("bl", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "bl runs AI-agent work so that the agent never grades itself: an independent gate decides each turn. These tools lint and inspect graphs and their runs; a run is named by its name under the workspace's .bounded-loops/runs.",
            )
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        // The next page of a long answer: read from where it is kept;
        // nothing runs again.
        if let Some(cursor) = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("cursor"))
            .and_then(Value::as_str)
        {
            return Ok(self.pages.next(cursor)?.into());
        }
        if tasks::wanted(&request, &context) {
            return Ok(tasks::start(self, request, context));
        }
        let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        Ok(match self.tool_router.call(call).await? {
            rmcp::model::CallToolResponse::Complete(result) => self.pages.first(result).into(),
            other => other,
        })
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, ErrorData> {
        Ok(rmcp::model::GetTaskResult::new(
            self.tasks.get_task(&request.task_id)?,
        ))
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, ErrorData> {
        Ok(rmcp::model::ListResourcesResult::with_all_items(
            library::resources(),
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, ErrorData> {
        Ok(rmcp::model::ListResourceTemplatesResult::with_all_items(
            library::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        let workspace = self.config.workspace.clone();
        let read = tokio::task::spawn_blocking(move || library::read(&workspace, &request.uri))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))??;
        Ok(rmcp::model::ReadResourceResult::new(vec![read]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, ErrorData> {
        Ok(rmcp::model::ListPromptsResult::with_all_items(
            library::prompts(),
        ))
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        Ok(library::prompt(&request.name, &arguments)?.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_named_never_given_as_a_path() {
        for bad in ["", "../x", "/tmp/run", ".hidden", "a/b", &"x".repeat(129)] {
            assert!(!valid_run_name(bad), "{bad}");
        }
        assert!(valid_run_name("20261203T071500Z-1a2b3c4d"));
    }
}
