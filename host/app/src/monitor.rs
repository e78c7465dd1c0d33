//! `bl monitor`: a project's window. It lists every run under the
//! project's `.bounded-loops/runs/` (graph runs through the runtime API's
//! `status`, loop runs from their metadata), the graph manifests already
//! in the project, and starts one of them after a preview whose digest
//! the start must name, so what runs is exactly what was previewed.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::graph_run::DriveOptions;
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

/// One project, as the monitor sees it.
#[derive(Debug, Clone)]
pub struct Project {
    pub root: PathBuf,
}

impl Project {
    pub fn new(root: impl Into<PathBuf>) -> Project {
        Project { root: root.into() }
    }

    fn runs_dir(&self) -> PathBuf {
        self.root.join(RUNS)
    }

    /// A run's directory by its name, only when it is one of the project's
    /// runs (a name is never a path).
    pub fn run_dir(&self, name: &str) -> Option<PathBuf> {
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && !name.contains(['/', '\\'])
            && name != "..";
        let dir = self.runs_dir().join(name);
        (plain && dir.is_dir()).then_some(dir)
    }

    /// Every run, newest name first, each with its state, spend against
    /// its caps, and each node's state and receipt (for a graph run).
    pub fn runs(&self, runtime: &GraphRuntime) -> Vec<Value> {
        let mut names: Vec<String> = std::fs::read_dir(self.runs_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        names.sort_unstable_by(|a, b| b.cmp(a));
        names
            .into_iter()
            .map(|name| {
                let dir = self.runs_dir().join(&name);
                summary(runtime, &name, &dir)
            })
            .collect()
    }

    /// The graph/v1 manifests in the project (relative paths), found at
    /// most three folders down, outside hidden folders and `target/`.
    pub fn manifests(&self) -> Vec<String> {
        let mut found = Vec::new();
        walk(&self.root, &self.root, 0, &mut found);
        found.sort();
        found
    }

    /// What starting `manifest` would do: its lint, its dry run (the
    /// approvals it would wait on, the effects after them), the files
    /// beside it the run takes, and where the run would go; and a digest
    /// of all of that, which [`Project::start`] must be given back.
    pub fn preview(&self, manifest: &str) -> AppResult<Value> {
        let path = self.manifest_path(manifest)?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| AppError::refused(format!("cannot read {}: {e}", path.display())))?;
        let format = bl_graph::Format::from_path(&path).unwrap_or(bl_graph::Format::Yaml);
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

    /// Starts `manifest` as previewed: refused unless it lints and nothing
    /// changed since the preview whose `digest` is given. Returns the new
    /// run's name and its handle (the run goes on in the background).
    pub fn start(
        &self,
        manifest: &str,
        digest: &str,
        options: &DriveOptions,
    ) -> AppResult<(String, RunHandle)> {
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
        let path = self.manifest_path(manifest)?;
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        let take = |file: &str| Some(dir.join(file)).filter(|p| p.is_file());
        let options = DriveOptions {
            inputs: take("inputs.json"),
            recorded: take("replies.json"),
            decisions: take("decisions.json"),
            ..options.clone()
        };
        let out = crate::graph_run::default_out(Some(self.root.clone()))?;
        let name = out
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let handle = GraphRuntime::new(options).run(path, take("connections.json"), out);
        Ok((name, handle))
    }

    /// A manifest named by its path in the project, only when it is one
    /// the project lists.
    fn manifest_path(&self, manifest: &str) -> AppResult<PathBuf> {
        if !self.manifests().iter().any(|m| m == manifest) {
            return Err(AppError::refused(format!(
                "{manifest} is not a graph manifest of this project"
            )));
        }
        Ok(self.root.join(manifest))
    }
}

/// One run's summary: a graph run through the runtime API, a loop run
/// from its metadata, and what could not be read said as such.
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
    let loop_dir = bl_store::LoopRunDir::new(dir);
    match std::fs::read(loop_dir.metadata())
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    {
        Some(meta) => json!({
            "name": name, "kind": "loop",
            "state": meta["outcome"].as_str().or(meta["status"].as_str()).unwrap_or("RUNNING"),
            "loop": meta["loop"].clone(),
            "iterations": meta["iterations"].clone(),
        }),
        None => json!({"name": name, "kind": "unknown", "state": "UNREADABLE",
                        "error": "neither a graph run nor a loop run"}),
    }
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

fn walk(root: &Path, dir: &Path, depth: usize, found: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        if path.is_dir() {
            if depth < 3 {
                walk(root, &path, depth + 1, found);
            }
        } else if bl_graph::Format::from_path(&path).is_some()
            && std::fs::metadata(&path).is_ok_and(|m| m.len() < 1 << 20)
            && std::fs::read_to_string(&path)
                .is_ok_and(|t| t.contains("bounded-loops.dev/graph/v1"))
            && let Ok(rel) = path.strip_prefix(root)
        {
            found.push(rel.to_string_lossy().into_owned());
        }
    }
}
