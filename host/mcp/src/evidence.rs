//! The evidence tools, by bounded-loops' contract names: the finished
//! runs of a workspace (`bl_graph_terminal_runs`) and what one of them
//! proves (`bl_graph_evidence`, contract `slm-bridge/v1`): its outcome,
//! identity, digests, receipt head and each node's state, gate, attempts
//! and artifact digests, read from its verified log. No path is ever
//! returned. `bl_graph_execution_evidence` (`slm-bridge/v2`) answers that
//! a run has no verified execution-learning signal: bl records none.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use bl_app::runtime::GraphRuntime;
use serde_json::{Value, json};

pub const V1: &str = "bounded-loops.dev/slm-bridge/v1";
pub const V2: &str = "bounded-loops.dev/slm-bridge/v2";

/// The timestamp of the last whole line of the run's log.
fn last_timestamp(dir: &Path) -> Option<String> {
    let mut file = std::fs::File::open(bl_store::RunDir::new(dir).events()).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)))
        .ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let line = tail.split(|b| *b == b'\n').rev().find(|l| !l.is_empty())?;
    let event: Value = serde_json::from_slice(line).ok()?;
    event["timestamp"].as_str().map(str::to_string)
}

fn finished(state: &Value) -> bool {
    matches!(state.as_str(), Some("SUCCEEDED" | "FAILED"))
}

/// The finished runs under `runs_dir`, by name, last name first, at most
/// `limit`.
pub fn terminal_runs(runs_dir: &Path, limit: usize) -> Value {
    let mut names: Vec<String> = std::fs::read_dir(runs_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join(bl_store::RunDir::META).is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort_by(|a, b| b.cmp(a));
    let runtime = GraphRuntime::default();
    let runs: Vec<Value> = names
        .iter()
        .filter_map(|name| {
            let dir = runs_dir.join(name);
            let status = runtime.status(&dir).ok()?.to_json();
            finished(&status["run_state"]).then(|| {
                json!({"run_ref": name, "run_id": status["run_id"], "run_state": status["run_state"],
                       "terminal_at": last_timestamp(&dir)})
            })
        })
        .take(limit)
        .collect();
    json!({"status": "ok", "contract": V1, "runs": runs})
}

fn unavailable(contract: &str, reason: String) -> Value {
    json!({"status": "unavailable", "contract": contract, "reason": reason})
}

/// The status of the finished run `run_ref` names, or why there is none.
fn finished_status(
    runs_dir: &Path,
    run_ref: &str,
    contract: &str,
) -> Result<(std::path::PathBuf, Value), Value> {
    if !crate::valid_run_name(run_ref) {
        return Err(unavailable(contract, "not a usable run reference".into()));
    }
    let dir = runs_dir.join(run_ref);
    if !dir.join(bl_store::RunDir::META).is_file() {
        return Err(unavailable(
            contract,
            "no such run in this workspace".into(),
        ));
    }
    let status = GraphRuntime::default()
        .status(&dir)
        .map_err(|e| unavailable(contract, e.message().to_string()))?
        .to_json();
    if !finished(&status["run_state"]) {
        return Err(unavailable(
            contract,
            format!(
                "this run is {}, not finished",
                status["run_state"].as_str().unwrap_or("unknown")
            ),
        ));
    }
    Ok((dir, status))
}

/// What the finished run `run_ref` proves (contract v1). `workspace_id` is
/// the digest of the workspace's absolute path.
pub fn evidence(workspace: &Path, runs_dir: &Path, run_ref: &str) -> Value {
    let (dir, status) = match finished_status(runs_dir, run_ref, V1) {
        Ok(found) => found,
        Err(unavailable) => return unavailable,
    };
    let nodes: Vec<Value> = status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            json!({"node_id": n["node_id"], "state": n["state"], "gate_passed": n["gate_passed"],
                   "attempts": n["attempt"], "artifact_digests": n["artifact_digests"]})
        })
        .collect();
    let workspace_id =
        bl_core::Sha256Digest::of(workspace.as_os_str().as_encoded_bytes()).to_string();
    json!({
        "status": "ok",
        "evidence": {
            "contract": V1,
            "workspace_id": workspace_id,
            "run_id": status["run_id"],
            "run_ref": run_ref,
            "organization_id": status["organization_id"],
            "project_id": status["project_id"],
            "outcome": status["run_state"],
            "run_state": status["run_state"],
            "demonstration": status["demonstration"],
            "eligible_for_learning": false,
            "terminal_at": last_timestamp(&dir),
            "graph_digest": status["graph_digest"],
            "plan_digest": status["plan_digest"],
            "policy_digest": status["policy_digest"],
            "receipt": {
                "sequence": status["receipt_sequence"],
                "head_digest": format!("sha256:{}", status["receipt_head_hash"].as_str().unwrap_or_default()),
                "trust": "local_hash_chain_only",
            },
            "nodes": nodes,
        }
    })
}

/// Contract v2: a finished run's execution-learning signal, which bl never
/// records; said as bounded-loops says it.
pub fn execution_evidence(runs_dir: &Path, run_ref: &str) -> Value {
    match finished_status(runs_dir, run_ref, V2) {
        Ok(_) => unavailable(
            V2,
            "this run has no verified execution-learning signal".into(),
        ),
        Err(unavailable) => unavailable,
    }
}
