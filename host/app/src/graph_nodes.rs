//! The node kinds a graph run composes beyond agent CLIs: loop nodes
//! (the loop engine, by package digest), subgraph nodes (a child run of a
//! graph package, verified), https connector nodes (the egress broker) and
//! the subgraph check the judge makes. Each is an adapter of one of
//! bl-run's ports; a subgraph runs its child through a [`ChildRunner`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bl_run::executor::{Task, WorkFuture, WorkReply, WorkRequest, Worker};
use serde_json::{Value, json};

use bl_handoff::ChildRunRefused;
use bl_run::projection::RunState;

use crate::error::AppError;

/// Loop nodes: the package the plan admitted, found by digest under the
/// run's loop roots, runs through the loop engine in the attempt's
/// workspace and replies with its `loop-outcome.json`.
pub struct LoopNodes {
    pub packages: bl_packages::Catalogue,
    /// What the loop's cages hide (the graph run's directory).
    pub hidden: Vec<PathBuf>,
}

impl Worker for LoopNodes {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let Task::Loop { package } = &request.task else {
            return fault(format!("node '{}' is not a loop node", request.node_id));
        };
        let Some(dir) = self.packages.get(package).map(Path::to_path_buf) else {
            return fault(format!(
                "loop package {package} is not under the run's loop roots"
            ));
        };
        let package = package.clone();
        let hidden = self.hidden.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let node = crate::loop_run::LoopNode {
                    package_dir: &dir,
                    package_digest: &package,
                    run_id: &request.run_id,
                    node: &request.node_id,
                    attempt: request.attempt,
                    round: request.round,
                    workspace: &request.workspace,
                    hidden,
                };
                match crate::loop_run::run_node_loop(&node) {
                    Ok(outcome) => WorkReply::text(outcome, "bl:loop"),
                    Err(e) => WorkReply::Fault(format!("the loop could not run: {e}")),
                }
            })
            .await
            .unwrap_or_else(|e| WorkReply::Fault(format!("loop task failed: {e}")))
        })
    }
}

fn fault(why: String) -> WorkFuture {
    Box::pin(std::future::ready(WorkReply::Fault(why)))
}

/// Where a subgraph node's child run lives in its parent's directory:
/// `subgraphs/<node>` for the first attempt of round 0, then
/// `subgraphs/<node>.r<round>.a<attempt>`.
pub fn child_dir(node: &str, round: u32, attempt: u32) -> String {
    if round == 0 && attempt == 1 {
        format!("{}/{node}", bl_store::RunDir::SUBGRAPHS)
    } else {
        format!("{}/{node}.r{round}.a{attempt}", bl_store::RunDir::SUBGRAPHS)
    }
}

/// Subgraph nodes: the graph package (by digest) runs as a child run in
/// the parent's `subgraphs/`, with the parent's connections, recorded
/// replies, loop roots and the prompts `--inputs` gives the node. The
/// reply is a receipt naming the child run and its log's head, which the
/// judge checks against the child's verified log ([`ChildRuns`]).
pub struct SubgraphNodes {
    pub run_dir: PathBuf,
    pub packages: bl_packages::Catalogue,
    pub connections: Option<Value>,
    pub runner: Arc<dyn ChildRunner>,
    pub prompts: HashMap<String, Value>,
    pub depth: u32,
}

/// How deep subgraphs may nest.
pub const MAX_SUBGRAPH_DEPTH: u32 = 8;

/// A child run, as a subgraph node's receipt names it.
pub struct ChildRun {
    pub plan_id: String,
    pub graph_digest: String,
    pub run_state: String,
    /// The approval nodes it paused at (paths from the child run), if it
    /// paused so.
    pub awaiting: Vec<String>,
}

/// Runs a subgraph node's child: begins it in `child`, or continues the run
/// an interrupted drive began there. The graph-run use case gives it, with
/// the parent's options; `inputs` is the child's prompts file.
pub trait ChildRunner: Send + Sync {
    fn run_child(
        &self,
        manifest: &Path,
        bytes: Vec<u8>,
        connections: Option<Value>,
        child: &Path,
        inputs: Option<PathBuf>,
        depth: u32,
    ) -> Result<ChildRun, AppError>;
}

impl Worker for SubgraphNodes {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let Task::Subgraph { package } = &request.task else {
            return fault(format!("node '{}' is not a subgraph node", request.node_id));
        };
        if self.depth > MAX_SUBGRAPH_DEPTH {
            return Box::pin(std::future::ready(WorkReply::Denied(format!(
                "subgraphs nest deeper than {} levels here",
                MAX_SUBGRAPH_DEPTH
            ))));
        }
        let Some(dir) = self.packages.get(package).map(Path::to_path_buf) else {
            return fault(format!(
                "graph package {package} is not under the run's loop roots"
            ));
        };
        let rel = child_dir(&request.node_id, request.round, request.attempt);
        let child = self.run_dir.join(&rel);
        let runner = self.runner.clone();
        let prompts = self.prompts.get(&request.node_id).cloned();
        let connections = self.connections.clone();
        let depth = self.depth;
        let package = package.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                // The child's prompts, as a file of its own in its run.
                let inputs = if let Some(p) = prompts {
                    let path = child.with_extension("inputs.json");
                    if let Err(e) = std::fs::create_dir_all(child.parent().unwrap_or(&child))
                        .and_then(|_| std::fs::write(&path, p.to_string()))
                    {
                        return WorkReply::Fault(format!("{}: {e}", path.display()));
                    }
                    Some(path)
                } else {
                    None
                };
                let run = Child {
                    package_dir: &dir,
                    package: &package,
                    dir: &child,
                    rel: &rel,
                    depth,
                };
                run_child(&run, connections, inputs, &*runner)
            })
            .await
            .unwrap_or_else(|e| WorkReply::Fault(format!("subgraph task failed: {e}")))
        })
    }
}

/// Where a subgraph node's child runs, and from which package.
struct Child<'a> {
    package_dir: &'a Path,
    package: &'a str,
    dir: &'a Path,
    /// `dir`, relative to the parent run.
    rel: &'a str,
    depth: u32,
}

fn run_child(
    child: &Child,
    connections: Option<Value>,
    inputs: Option<PathBuf>,
    runner: &dyn ChildRunner,
) -> WorkReply {
    let (package_dir, package, rel) = (child.package_dir, child.package, child.rel);
    match bl_packages::digest(package_dir) {
        Ok(d) if d == package => {}
        Ok(d) => {
            return WorkReply::Denied(format!(
                "graph package {} now digests to {d}, not the {package} the plan admitted",
                package_dir.display()
            ));
        }
        Err(e) => return WorkReply::Fault(e.to_string()),
    }
    let manifest = package_dir.join(bl_packages::GRAPH_MANIFEST);
    let bytes = match std::fs::read(&manifest) {
        Ok(b) => b,
        Err(e) => return WorkReply::Fault(format!("{}: {e}", manifest.display())),
    };
    let ran = runner.run_child(
        &manifest,
        bytes,
        connections,
        child.dir,
        inputs,
        child.depth,
    );
    let done = match ran {
        Ok(r) => r,
        Err(e) => return WorkReply::Fault(format!("the child run was refused: {}", e.message())),
    };
    if !done.awaiting.is_empty() {
        // Not over: the attempt waits with its child for the decisions.
        return WorkReply::AwaitingApproval(done.awaiting);
    }
    let (events, head) = match crate::run_adapters::read_events(child.dir) {
        Ok(read) => read,
        Err(e) => return WorkReply::Fault(format!("the child run's log: {e}")),
    };
    // A rejection is final across the boundary too: the node stops, it is
    // not retried into a new child run that would ask again.
    let rejected: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "node.failed" && e.payload["cause"] == "approval_rejected")
        .filter_map(|e| e.payload["node_id"].as_str())
        .collect();
    if !rejected.is_empty() {
        return WorkReply::ApprovalRejected(format!(
            "human approval was rejected in the child run {rel} (at {})",
            rejected.join(", ")
        ));
    }
    let receipt = json!({
        "child_run": rel, "graph_digest": done.graph_digest,
        "graph_package": package, "head_hash": head.hash, "head_sequence": head.sequence,
        "plan_id": done.plan_id, "run_state": done.run_state,
    });
    WorkReply::text(bl_core::python_json(&receipt).into_bytes(), "bl:subgraph")
}

/// The judge's check of a subgraph node: its child run's log verifies
/// (every hash, every link), its head is the one the receipt names, and
/// the run it projects SUCCEEDED.
pub struct ChildRuns {
    pub run_dir: PathBuf,
}

impl bl_handoff::SubgraphCheck for ChildRuns {
    fn check(&self, receipt: &[u8]) -> Result<String, ChildRunRefused> {
        let r: Value = serde_json::from_slice(receipt)
            .map_err(|e| ChildRunRefused(format!("the subgraph receipt is not JSON: {e}")))?;
        let rel = r["child_run"].as_str().unwrap_or_default();
        if !rel.starts_with(&format!("{}/", bl_store::RunDir::SUBGRAPHS)) || rel.contains("..") {
            return Err(ChildRunRefused(format!(
                "the subgraph receipt names child run '{rel}'"
            )));
        }
        let child = self.run_dir.join(rel);
        let (events, head) = crate::run_adapters::read_events(&child)
            .map_err(|e| ChildRunRefused(format!("the child run {rel} does not verify: {e}")))?;
        if r["head_hash"] != head.hash.as_str() || r["head_sequence"] != head.sequence {
            return Err(ChildRunRefused(format!(
                "the child run {rel} ends at {} (sequence {}), not at the head its receipt names",
                head.hash, head.sequence
            )));
        }
        let view =
            bl_run::projection::project(events.iter().map(|e| (e.kind.as_str(), &e.payload)));
        if view.run_state != RunState::Succeeded {
            return Err(ChildRunRefused(format!(
                "the child run {rel} ended {}, not SUCCEEDED",
                view.run_state
            )));
        }
        Ok(format!(
            "subgraph child run {rel} SUCCEEDED; its log verifies to head {} at sequence {}",
            head.hash, head.sequence
        ))
    }
}

/// The run's `egress-events.jsonl`, opened at the broker's first decision
/// (the log takes the run's identity from its first event, which is on
/// disk by the time any node runs).
struct RunEgressLog {
    run_dir: PathBuf,
    log: std::sync::OnceLock<Result<bl_store::EgressLog, bl_egress::AuditError>>,
}

impl bl_egress::EgressAudit for RunEgressLog {
    fn record(&self, event: bl_egress::EgressEvent) -> Result<(), bl_egress::AuditError> {
        let log = self.log.get_or_init(|| {
            bl_store::EgressLog::open(&self.run_dir, || {
                humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
            })
            .map_err(|e| bl_egress::AuditError::Unwritable(e.to_string()))
        });
        match log {
            Ok(log) => log.record(event),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The broker for a run's https connector nodes: the admitted records,
/// the system resolver, production address policy, credentials from bl's
/// environment, every decision in the run's `egress-events.jsonl`.
pub fn https_worker(
    run_dir: &Path,
    admitted: std::collections::BTreeMap<String, bl_egress::AdmittedConnection>,
) -> Result<bl_workers::https::HttpsWorker, crate::error::AppError> {
    let refuse =
        |e: String| crate::error::AppError::refused(format!("graph run: the egress broker: {e}"));
    let resolver = bl_egress::Resolver::system().map_err(|e| refuse(e.to_string()))?;
    let broker = bl_egress::Broker::new(
        admitted,
        resolver,
        bl_egress::AddressPolicy::production(),
        bl_egress::BrokerLimits::default(),
        Box::new(bl_egress::EnvCredentials),
        Arc::new(RunEgressLog {
            run_dir: run_dir.to_path_buf(),
            log: std::sync::OnceLock::new(),
        }),
    );
    Ok(bl_workers::https::HttpsWorker {
        broker: Arc::new(broker),
    })
}
