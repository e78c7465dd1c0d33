//! The built-in sandbox probe as a worker: it runs bl-sandbox's probe in
//! the node's isolation tier and replies with the host's own observations
//! (taken from outside the probed process), which the executor's gate reads.

use std::path::PathBuf;

use bl_run::executor::{WorkFuture, WorkReply, WorkRequest, Worker};
use bl_sandbox::{Sandbox, Tier};
use serde_json::json;

pub struct SandboxProbe {
    /// Where each probe's workspace is made (`<run>/work/<run_id>`).
    pub work_root: PathBuf,
}

impl Worker for SandboxProbe {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let root = std::path::absolute(&self.work_root).unwrap_or(self.work_root.clone());
        Box::pin(async move {
            tokio::task::spawn_blocking(move || probe(&root, &request))
                .await
                .unwrap_or_else(|e| WorkReply::Fault(format!("probe task failed: {e}")))
        })
    }
}

fn probe(root: &std::path::Path, request: &WorkRequest) -> WorkReply {
    let tier = match Tier::parse(&request.isolation) {
        Ok(t) => t,
        Err(e) => return WorkReply::Fault(e.to_string()),
    };
    let out = root.join(format!(
        "{}-probe-{}-{}",
        request.node_id, request.attempt, request.execution
    ));
    if let Err(e) = std::fs::create_dir_all(&out) {
        return WorkReply::Fault(format!("{}: {e}", out.display()));
    }
    let sandbox = Sandbox::new(tier);
    match bl_sandbox::probe::run_probe(&sandbox, sandbox.host_ids(), &out) {
        Ok(outcome) => {
            let checks: Vec<_> = outcome
                .checks
                .iter()
                .map(|(name, ok, detail)| json!({"name": name, "ok": ok, "detail": detail}))
                .collect();
            let reply = json!({
                "tier": tier.name(), "passed": outcome.passed, "checks": checks,
                "probe_artifact_digest": outcome.artifact_digest,
            });
            WorkReply::Reply {
                bytes: bl_core::python_json(&reply).into_bytes(),
                usage: None,
                reported_by: "bl:sandbox-probe".into(),
            }
        }
        Err(e) => WorkReply::Fault(format!("the sandbox probe could not run: {e}")),
    }
}
