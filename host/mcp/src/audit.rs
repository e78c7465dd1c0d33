//! The MCP audit log: every call that acts on a run (confirmed), whatever
//! came of it, appended to `mcp-audit.jsonl` in that run's directory. It
//! is an event log of its own, chained and checked as the run's log is
//! (`bl verify` checks it), one `mcp.call` event a call: the tool, its
//! arguments (a manifest by its digest), who called (the client the
//! session says it is) and the answer's outcome. The answer carries, in
//! its `_meta`, the line's place in the log and its Merkle inclusion proof
//! against the log's root, so the caller can hold bl to what it recorded.

use std::path::Path;

use bl_store::{EventLog, RunIdentity, StoreError};
use serde_json::{Value, json};

/// The audit log's name in a run's directory.
pub const AUDIT_LOG: &str = bl_store::RunDir::MCP_AUDIT;

/// The identity every audit log of a run carries (its run named by the
/// directory): a log moved to another run is refused on its next append.
fn identity(run_dir: &Path) -> RunIdentity {
    let none = format!("sha256:{}", "0".repeat(64));
    RunIdentity {
        organization_id: "local-org".into(),
        project_id: "bl-mcp".into(),
        run_id: run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        graph_digest: none.clone(),
        plan_digest: none.clone(),
        policy_digest: none,
    }
}

/// What is kept of a call's arguments: a manifest's text by its digest,
/// the rest as given.
fn kept(arguments: &Value) -> Value {
    let mut kept = arguments.clone();
    if let Some(text) = arguments["manifest_yaml"].as_str() {
        kept["manifest_yaml"] = json!({"sha256": bl_core::Sha256Digest::of(text.as_bytes()).to_string(), "bytes": text.len()});
    }
    kept
}

/// Appends `tool`'s call to the audit log in `run_dir` (durably) and
/// returns the `_meta` that proves it is there.
pub fn record(
    run_dir: &Path,
    tool: &str,
    arguments: &Value,
    outcome: &Value,
    client: &str,
) -> Result<Value, StoreError> {
    let path = run_dir.join(AUDIT_LOG);
    let mut log = EventLog::open(&path, identity(run_dir))?;
    let sequence = log.head().sequence + 1;
    let payload = json!({
        "tool": tool,
        "arguments": kept(arguments),
        "client": client,
        "outcome": outcome,
    });
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    log.append_durable(&format!("call-{sequence}"), "mcp.call", &payload, &now)?;
    // Read while the log is still held: another call's line appended in
    // between would make the proof one of its line, not this one's.
    let bytes = std::fs::read(&path).map_err(|source| StoreError::Io {
        path: path.clone(),
        source,
    })?;
    drop(log);
    let leaves: Vec<bl_store::merkle::Hash> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(bl_store::merkle::leaf_hash)
        .collect();
    let index = usize::try_from(sequence - 1)
        .unwrap_or(usize::MAX)
        .min(leaves.len() - 1);
    let proof = bl_store::merkle::inclusion_proof(&leaves, index).unwrap_or_default();
    Ok(json!({
        "bl/audit": {
            "log": AUDIT_LOG,
            "sequence": sequence,
            "size": leaves.len(),
            "leaf": hex::encode(leaves[index]),
            "root": hex::encode(bl_store::merkle::root(&leaves)),
            "proof": proof.iter().map(hex::encode).collect::<Vec<_>>(),
        }
    }))
}
