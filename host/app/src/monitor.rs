//! `bl monitor`: a project's window. It lists every run under the
//! project's `.bounded-loops/runs/` and under each of its loop packages'
//! (graph runs through the runtime API's `status`, loop runs from their
//! metadata), the graph manifests and loop packages already in the
//! project, and starts one of them after a preview whose digest the start
//! must name, so what runs is exactly what was previewed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::Serialize;
use serde_json::{Value, json};

use crate::graph_run::DriveOptions;
use crate::loop_run::LoopRequest;
use crate::loop_runtime::{LoopHandle, LoopRuntime};
use crate::runtime::{GraphRuntime, RunHandle};
use crate::{AppError, AppResult};

/// Where a project keeps its runs.
pub const RUNS: &str = ".bounded-loops/runs";

/// The files a graph's directory may hold beside its manifest, which a
/// run started from the monitor takes (as `bl graph run` takes them).
const BESIDE: [(&str, &str); 4] = [
    ("connections", "connections.json"),
    ("inputs", "inputs.json"),
    ("recorded replies", "replies.json"),
    ("recorded decisions", "decisions.json"),
];

/// What a manifest in the project starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A graph/v1 manifest: `bl graph run`.
    Graph,
    /// A loop package's `loop.yaml`: `bl run`.
    Loop,
}

/// A manifest the monitor can start, by its path in the project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Startable {
    pub path: String,
    pub kind: Kind,
}

/// A run the monitor started, going on in the background.
pub enum Started {
    Graph(RunHandle),
    Loop(LoopHandle),
}

impl Started {
    /// Asks the run to stop; what it recorded stays (a graph stays
    /// resumable, a loop ends KILLED before its next lap).
    pub fn cancel(&self) {
        match self {
            Started::Graph(run) => run.cancel(),
            Started::Loop(run) => run.cancel(),
        }
    }

    pub fn is_finished(&self) -> bool {
        match self {
            Started::Graph(run) => run.is_finished(),
            Started::Loop(run) => run.is_finished(),
        }
    }

    /// Waits for the run to end (its outcome is in its records).
    pub fn wait(self) {
        match self {
            Started::Graph(run) => drop(run.wait()),
            Started::Loop(run) => drop(run.wait()),
        }
    }
}

/// One project, as the monitor sees it.
#[derive(Debug, Clone)]
pub struct Project {
    pub root: PathBuf,
    /// Summaries of runs that can no longer change (ended, not live),
    /// by run directory, with the stamp of the file they were read from:
    /// a refresh reads and verifies only what changed.
    settled: Arc<Mutex<HashMap<PathBuf, (Stamp, Value)>>>,
}

/// A file's length and modification time: when either moves, what was
/// read from it is read again.
type Stamp = (u64, Option<SystemTime>);

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()))
}

impl Project {
    pub fn new(root: impl Into<PathBuf>) -> Project {
        Project {
            root: root.into(),
            settled: Arc::default(),
        }
    }

    fn runs_dir(&self) -> PathBuf {
        self.root.join(RUNS)
    }

    /// A run's directory by its name, only when it is one of the project's
    /// runs (a name is never a path).
    pub fn run_dir(&self, name: &str) -> Option<PathBuf> {
        let dir = self.runs_dir().join(name);
        (plain_name(name) && dir.is_dir()).then_some(dir)
    }

    /// Every run, newest name first, each with its state, spend against
    /// its caps, and each node's state and receipt (for a graph run). The
    /// project's own runs have `package` ""; a loop package's runs (kept in
    /// the package, as `bl run` keeps them) name the package.
    pub fn runs(&self, runtime: &GraphRuntime) -> Vec<Value> {
        let mut places = vec![(String::new(), self.runs_dir())];
        for package in self.loop_packages() {
            let dir = self.root.join(&package).join(RUNS);
            places.push((package, dir));
        }
        let mut found: Vec<(String, String, PathBuf)> = Vec::new();
        for (package, runs) in places {
            for entry in std::fs::read_dir(&runs).into_iter().flatten().flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.path().is_dir() && !name.starts_with('.') {
                    found.push((name, package.clone(), entry.path()));
                }
            }
        }
        found.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        found
            .into_iter()
            .map(|(name, package, dir)| {
                let mut run = self.summary(runtime, &name, &dir);
                run["package"] = json!(package);
                run
            })
            .collect()
    }

    /// The graph/v1 manifests and loop packages' `loop.yaml` in the
    /// project (relative paths), found at most three folders down, outside
    /// hidden folders and `target/`.
    pub fn manifests(&self) -> Vec<Startable> {
        let mut found = Vec::new();
        walk(&self.root, &self.root, 0, &mut found);
        found.sort_by(|a, b| a.path.cmp(&b.path));
        found
    }

    /// The loop packages below the project's root (relative paths); the
    /// root's own runs are the project's.
    fn loop_packages(&self) -> Vec<String> {
        self.manifests()
            .into_iter()
            .filter(|m| m.kind == Kind::Loop)
            .filter_map(|m| {
                let dir = Path::new(&m.path).parent()?.to_string_lossy().into_owned();
                (!dir.is_empty()).then_some(dir)
            })
            .collect()
    }

    /// A loop run's directory, by its package (as [`Project::runs`] names
    /// it) and its name, only when both are the project's.
    pub fn loop_run_dir(&self, package: &str, name: &str) -> Option<PathBuf> {
        if package.is_empty() {
            return self.run_dir(name);
        }
        if !self.loop_packages().iter().any(|p| p == package) || !plain_name(name) {
            return None;
        }
        let dir = self.root.join(package).join(RUNS).join(name);
        dir.is_dir().then_some(dir)
    }

    /// What starting `manifest` would do, and a digest of all of it, which
    /// [`Project::start`] must be given back. For a graph: its lint, its
    /// dry run (the approvals it would wait on, the effects after them),
    /// the files beside it the run takes, and where the run would go. For
    /// a loop: whether its package is sound, its runner, gate and bounds,
    /// and where its runs go.
    pub fn preview(&self, manifest: &str) -> AppResult<Value> {
        let found = self.startable(manifest)?;
        let path = self.root.join(&found.path);
        match found.kind {
            Kind::Graph => self.preview_graph(manifest, &path),
            Kind::Loop => preview_loop(manifest, &path),
        }
    }

    fn preview_graph(&self, manifest: &str, path: &Path) -> AppResult<Value> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| AppError::refused(format!("cannot read {}: {e}", path.display())))?;
        let format = bl_graph::Format::from_path(path).unwrap_or(bl_graph::Format::Yaml);
        let graph = bl_graph::lint(&text, format);
        let dir = path.parent().unwrap_or(&self.root);
        let mut digest_input = text.clone().into_bytes();
        let mut beside = serde_json::Map::new();
        for (what, file) in BESIDE {
            if let Ok(bytes) = std::fs::read(dir.join(file)) {
                beside.insert(what.to_string(), json!(file));
                digest_input.extend_from_slice(file.as_bytes());
                digest_input.extend_from_slice(&bytes);
            }
        }
        let mut preview = json!({
            "manifest": manifest,
            "kind": Kind::Graph,
            "beside": beside,
            "runs_into": RUNS,
        });
        match graph {
            Ok(graph) => {
                preview["lint"] = bl_graph::report::lint_json(&graph);
                preview["dry_run"] = bl_graph::report::dry_run(&graph);
                preview["nodes"] = json!(graph.nodes.iter().map(|n| &n.id).collect::<Vec<_>>());
            }
            Err(refusal) => preview["lint"] = bl_graph::report::refusal_json(&refusal),
        }
        preview["digest"] = json!(bl_core::Sha256Digest::of(&digest_input).to_string());
        Ok(preview)
    }

    /// Starts `manifest` as previewed: refused unless it is sound and
    /// nothing changed since the preview whose `digest` is given. Returns
    /// the new run's name and the run (it goes on in the background).
    pub fn start(
        &self,
        manifest: &str,
        digest: &str,
        options: &DriveOptions,
    ) -> AppResult<(String, Started)> {
        let preview = self.preview(manifest)?;
        if preview["digest"] != digest {
            return Err(AppError::refused(format!(
                "{manifest} or the files beside it changed since the preview (now {}): preview it again",
                preview["digest"].as_str().unwrap_or_default()
            )));
        }
        if preview["lint"]["valid"] != true {
            return Err(AppError::refused(format!(
                "{manifest} does not lint: [{}] {}",
                preview["lint"]["code"].as_str().unwrap_or_default(),
                preview["lint"]["message"].as_str().unwrap_or_default()
            )));
        }
        let path = self.root.join(manifest);
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        let name = crate::graph_run::fresh_run_name()?;
        if preview["kind"] == json!(Kind::Loop) {
            let request = LoopRequest {
                loop_dir: dir,
                run_id: Some(name.clone()),
                redact: "off".into(),
                ..Default::default()
            };
            let run = LoopRuntime::new().run(request, Box::new(crate::loop_runtime::NoOneHere))?;
            return Ok((name, Started::Loop(run)));
        }
        let take = |file: &str| Some(dir.join(file)).filter(|p| p.is_file());
        let options = DriveOptions {
            inputs: take("inputs.json"),
            recorded: take("replies.json"),
            decisions: take("decisions.json"),
            ..options.clone()
        };
        let out = self.runs_dir().join(&name);
        let handle = GraphRuntime::new(options).run(path, take("connections.json"), out);
        Ok((name, Started::Graph(handle)))
    }

    /// A manifest named by its path in the project, only when it is one
    /// the project lists.
    fn startable(&self, manifest: &str) -> AppResult<Startable> {
        self.manifests()
            .into_iter()
            .find(|m| m.path == manifest)
            .ok_or_else(|| {
                AppError::refused(format!(
                    "{manifest} is not a graph manifest or loop package of this project"
                ))
            })
    }

    /// One run's summary: a graph run through the runtime API, a loop run
    /// from its metadata, and what could not be read said as such. A run
    /// that can no longer change is read once, while its file stays put.
    fn summary(&self, runtime: &GraphRuntime, name: &str, dir: &Path) -> Value {
        let run_dir = bl_store::RunDir::new(dir);
        let loop_dir = bl_store::LoopRunDir::new(dir);
        let source = if run_dir.events().is_file() {
            run_dir.events()
        } else {
            loop_dir.metadata()
        };
        let now = stamp(&source);
        let mut settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(now), Some((then, summary))) = (now, settled.get(dir))
            && *then == now
        {
            return summary.clone();
        }
        drop(settled);
        let summary = summary(runtime, name, dir);
        let state = summary["state"].as_str().unwrap_or_default();
        let ended = summary["live"] != true
            && !matches!(state, "RUNNING" | "UNFINISHED" | "UNREADABLE" | "PENDING");
        if let (Some(now), true) = (now, ended) {
            settled = self.settled.lock().unwrap_or_else(|e| e.into_inner());
            settled.insert(dir.to_path_buf(), (now, summary.clone()));
        }
        summary
    }
}

/// A name of one directory in a runs folder (never a path).
fn plain_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\\']) && name != ".."
}

/// A loop's preview: the package read and checked as `bl run` checks it
/// (nothing runs), and its content digest, which is what the start binds.
fn preview_loop(manifest: &str, path: &Path) -> AppResult<Value> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let package = bl_packages::digest(dir).map_err(|e| {
        AppError::refused(format!(
            "{manifest}: the package cannot be digested, so a start could not be bound to it: {e}"
        ))
    })?;
    let runs_into = Path::new(manifest)
        .parent()
        .map(|p| p.join(RUNS).to_string_lossy().into_owned())
        .unwrap_or_else(|| RUNS.into());
    let request = LoopRequest {
        loop_dir: dir.to_path_buf(),
        redact: "off".into(),
        ..Default::default()
    };
    let lint = match crate::loop_run::prepare(&request) {
        Ok(loop_) => {
            let (manifest, bounds) = (&loop_.package.manifest, &loop_.bounds);
            json!({
                "valid": true,
                "name": manifest.name,
                "runner": loop_.runner,
                "gate": gate_in_words(&manifest.gate),
                "bounds": {
                    "max_iterations": bounds.max_iterations,
                    "max_tokens": bounds.max_tokens,
                    "max_wallclock_s": bounds.max_wallclock_s,
                    "no_progress_window": bounds.no_progress_window,
                },
                "needs_approval": bounds.require_approval,
            })
        }
        Err(e) => json!({"valid": false, "code": "loop_package", "message": e.to_string()}),
    };
    let digest_input = format!("loop\0{manifest}\0{package}");
    Ok(json!({
        "manifest": manifest,
        "kind": Kind::Loop,
        "lint": lint,
        "package_digest": package,
        "runs_into": runs_into,
        "digest": bl_core::Sha256Digest::of(digest_input.as_bytes()).to_string(),
    }))
}

/// A loop's gate as a person reads it: its kind and what it runs.
fn gate_in_words(gate: &bl_loops::manifest::GateSpec) -> String {
    match (&gate.run, gate.gates.is_empty()) {
        (Some(run), _) => format!("{}: {run}", gate.kind),
        (None, false) => format!(
            "{} of {}",
            gate.kind,
            gate.gates
                .iter()
                .map(gate_in_words)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (None, true) => gate.kind.clone(),
    }
}

/// One run's summary: a graph run through the runtime API, a loop run
/// from its metadata (or, before it ends, its ledger), and what could not
/// be read said as such.
fn summary(runtime: &GraphRuntime, name: &str, dir: &Path) -> Value {
    let run_dir = bl_store::RunDir::new(dir);
    if run_dir.events().is_file() {
        return match runtime.status(dir) {
            Ok(status) => graph_summary(name, &status),
            Err(e) => {
                json!({"name": name, "kind": "graph", "state": "UNREADABLE", "error": e.message()})
            }
        };
    }
    crate::loop_info::loop_run_summary(name, dir).unwrap_or_else(|| {
        json!({"name": name, "kind": "unknown", "state": "UNREADABLE",
               "error": "neither a graph run nor a loop run"})
    })
}

fn graph_summary(name: &str, status: &crate::graph_run::RunStatus) -> Value {
    let (run, view) = (&status.run, &status.view);
    let order: Vec<&str> = run.graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let nodes: Vec<Value> = run
        .graph
        .nodes
        .iter()
        .map(|node| {
            let (id, budget) = (&node.id, &node.budget);
            let n = view.node(id);
            json!({
                "node": id, "state": n.state.as_str(), "attempts": n.attempt,
                "caps": {"tokens": budget.max_tokens, "cost_microunits": budget.max_cost_microunits},
                "receipt": {
                    "artifacts": n.artifact_digests, "gate_passed": n.gate_passed,
                    "gate_reason": n.gate_reason, "reason": n.reason,
                },
                "tokens": n.spend_tokens, "cost_microunits": n.spend_cost_microunits,
            })
        })
        .collect();
    json!({
        "name": name, "kind": "graph", "state": view.run_state.as_str(), "live": status.live,
        "plan_id": run.plan.plan_id,
        "awaiting": view.awaiting(order.iter().copied()),
        "spend": {"tokens": view.tokens, "cost_microunits": view.cost_microunits,
                  "complete": view.spend_complete},
        // The run's caps are its nodes' budgets, summed (none if any
        // node is unbounded).
        "caps": {
            "tokens": sum_of(run.graph.nodes.iter().map(|n| n.budget.max_tokens)),
            "cost_microunits": sum_of(run.graph.nodes.iter().map(|n| n.budget.max_cost_microunits)),
        },
        "nodes": nodes,
    })
}

fn sum_of(caps: impl Iterator<Item = Option<i64>>) -> Option<i64> {
    caps.sum()
}

fn walk(root: &Path, dir: &Path, depth: usize, found: &mut Vec<Startable>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let rel = rel.to_string_lossy().into_owned();
        if path.is_dir() {
            if depth < 3 {
                walk(root, &path, depth + 1, found);
            }
        } else if name == bl_packages::MANIFEST {
            found.push(Startable {
                path: rel,
                kind: Kind::Loop,
            });
        } else if bl_graph::Format::from_path(&path).is_some()
            && std::fs::metadata(&path).is_ok_and(|m| m.len() < 1 << 20)
            && std::fs::read_to_string(&path)
                .is_ok_and(|t| t.contains("bounded-loops.dev/graph/v1"))
        {
            found.push(Startable {
                path: rel,
                kind: Kind::Graph,
            });
        }
    }
}
