//! The built-in sandbox probe as a worker: it runs bl-sandbox's probe in
//! the node's isolation tier and replies with the host's own observations
//! (taken from outside the probed process), which the executor's gate reads.

use bl_run::executor::{WorkFuture, WorkReply, WorkRequest, Worker};
use bl_sandbox::Sandbox;
use serde_json::json;

#[derive(Default)]
pub struct SandboxProbe;

impl Worker for SandboxProbe {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        Box::pin(async move {
            tokio::task::spawn_blocking(move || probe(&request))
                .await
                .unwrap_or_else(|e| WorkReply::Fault(format!("probe task failed: {e}")))
        })
    }
}

fn probe(request: &WorkRequest) -> WorkReply {
    let tier = crate::tier(request.isolation);
    let out = request.workspace.clone();
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
            WorkReply::text(
                bl_core::python_json(&reply).into_bytes(),
                "bl:sandbox-probe",
            )
        }
        Err(e) => WorkReply::Fault(format!("the sandbox probe could not run: {e}")),
    }
}
