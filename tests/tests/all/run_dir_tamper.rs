//! A run directory written the way the executor will write one (plan,
//! metadata, event log, artifacts, signed approvals, a published effect and
//! a signed checkpoint at run end), then every byte of every file in it
//! changed, one at a time: `bl verify` must notice each one.

use bl_store::RunDir;
use std::path::{Path, PathBuf};

use bl_e2e::repo_root;
use bl_store::{
    Approvals, ArtifactMeta, ArtifactStore, EventLog, Ledger, RunIdentity, SigningKey,
    approvals::Commit,
};
use serde_json::json;

const RUN_INPUTS: [&str; 4] = [
    "manifest.yaml",
    "connections.json",
    "plan.json",
    "run-meta.json",
];

fn generate_run(run: &Path, key: &SigningKey) {
    std::fs::create_dir_all(run).unwrap();
    // The compiled inputs, as `bl graph run` writes them before any node runs.
    let reference = repo_root().join("tests/corpus/runs/upstream-demo");
    for name in RUN_INPUTS {
        std::fs::copy(reference.join(name), run.join(name)).unwrap();
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join(RunDir::META)).unwrap()).unwrap();
    let text = |k: &str| meta[k].as_str().unwrap().to_string();
    let identity = RunIdentity {
        organization_id: text("organization_id"),
        project_id: text("project_id"),
        run_id: text("run_id"),
        graph_digest: "sha256:049c39bf2ca3d0d6eeb846b0000b25b4e0bfcd7393bee1164a4971f6f9262e33"
            .into(),
        plan_digest: text("plan_id"),
        policy_digest: text("policy_digest"),
    };

    let store = ArtifactStore::new(run.join("artifacts"), 1 << 20);
    let artifact_meta = ArtifactMeta {
        organization_id: &identity.organization_id,
        project_id: &identity.project_id,
        media_type: "text/plain",
        producer_attempt: "research:1",
        sensitivity: "internal",
    };
    let report = store
        .put(b"findings: three sources agree\n", &artifact_meta)
        .unwrap();
    let notes = store.put(b"raw notes\n", &artifact_meta).unwrap();

    let mut log = EventLog::open(&run.join(RunDir::EVENTS), identity.clone()).unwrap();
    let at = "2026-11-30T02:00:00Z";
    let node = |state: &str| json!({"attempt": 1, "node_id": "research", "state": state});
    log.append(
        "run.created",
        "run.created",
        &json!({"state": "PENDING"}),
        at,
    )
    .unwrap();
    log.append(
        "run.started",
        "run.started",
        &json!({"state": "RUNNING"}),
        at,
    )
    .unwrap();
    for state in [
        "READY",
        "STARTING",
        "RUNNING",
        "GATING",
        "AWAITING_APPROVAL",
    ] {
        let key = format!("node.{}:research:1", state.to_lowercase());
        log.append(
            &key,
            &format!("node.{}", state.to_lowercase()),
            &node(state),
            at,
        )
        .unwrap();
    }
    Approvals::new(run)
        .commit(
            Commit {
                approval_id: bl_store::approval_id(
                    &identity.organization_id,
                    &identity.project_id,
                    &identity.run_id,
                    "research",
                ),
                new_resource_version: 0,
                idempotency_key: "approve-research-1".into(),
                node_id: "research".into(),
                actor_id: "ops".into(),
                decided_by: "ops".into(),
                decided_by_source: "cli".into(),
                decided_at: at.into(),
                nonce: "n-1".into(),
                request_digest: report.clone(),
                repair_round: 0,
                signature: None,
            },
            Approvals::new(run).read().unwrap().resource_version,
            Some(key),
        )
        .unwrap();
    let effect = bl_store::effect_key(&identity.run_id, &identity.plan_digest, "research");
    let fired = Ledger::new(run)
        .publish(&effect, &report, || Ok(()))
        .unwrap();
    assert_eq!(fired, bl_store::Publish::Fired);
    log.append(
        "node.succeeded:research:1",
        "node.succeeded",
        &json!({"attempt": 1, "node_id": "research", "state": "SUCCEEDED",
                "artifact_digests": [report, notes]}),
        at,
    )
    .unwrap();
    log.append(
        "run.succeeded",
        "run.succeeded",
        &json!({"state": "SUCCEEDED"}),
        at,
    )
    .unwrap();
    log.sync().unwrap();
    drop(log);
    bl_store::provable::write_checkpoint(run, Some(key)).unwrap();
}

/// Every file under `dir`, relative, sorted.
fn files_of(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn every_single_byte_flip_in_a_generated_run_directory_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let key = SigningKey::generate("ops").unwrap();
    generate_run(&run, &key);
    let options = bl_verify::Options {
        verifier: Some(key.verifier()),
        ..Default::default()
    };
    let report = bl_verify::verify(&run, &options).unwrap();
    assert!(report.ok(), "{report:#?}");
    let bl_verify::Report::Graph(graph) = &report else {
        panic!("a graph run: {report:?}")
    };
    for check in [
        "chain",
        "plan",
        "artifacts",
        "merkle",
        "files",
        "signatures",
        "approvals",
    ] {
        let found = graph.checks.iter().find(|c| c.name == check).unwrap();
        assert_eq!(found.status, bl_verify::Status::Ok, "{found:?}");
    }

    let files = files_of(&run);
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    for expected in RUN_INPUTS.iter().copied().chain([
        "controller-events.jsonl",
        "approvals.json",
        "published-effects.json",
    ]) {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    assert!(names.iter().any(|n| n.starts_with("checkpoints/")));
    assert!(names.iter().any(|n| n.starts_with("artifacts/metadata/")));

    let mut flipped = 0;
    for file in &files {
        let path = run.join(file);
        let original = std::fs::read(&path).unwrap();
        for at in 0..original.len() {
            let mut changed = original.clone();
            changed[at] ^= 0x01;
            std::fs::write(&path, &changed).unwrap();
            assert!(
                !bl_verify::verify(&run, &options).unwrap().ok(),
                "{}: a change at byte {at} went unnoticed",
                file.display()
            );
            flipped += 1;
        }
        std::fs::write(&path, &original).unwrap();
    }
    assert!(flipped > 5_000, "{flipped}");
    assert!(bl_verify::verify(&run, &options).unwrap().ok());
}

/// Without a key the checkpoint is unsigned, and it still seals every file.
#[test]
fn an_unsigned_checkpoint_still_seals_the_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let key = SigningKey::generate("ops").unwrap();
    generate_run(&run, &key);
    std::fs::remove_dir_all(run.join("checkpoints")).unwrap();
    bl_store::provable::write_checkpoint(&run, None).unwrap();
    let options = bl_verify::Options::default();
    assert!(bl_verify::verify(&run, &options).unwrap().ok());
    // A byte changed in a file nothing else cross-checks.
    let meta = run.join(RunDir::META);
    let text = std::fs::read_to_string(&meta).unwrap();
    std::fs::write(&meta, text.replace("demo-project", "demo-projeKt")).unwrap();
    let bl_verify::Report::Graph(report) = bl_verify::verify(&run, &options).unwrap() else {
        panic!()
    };
    let files = report.checks.iter().find(|c| c.name == "files").unwrap();
    assert_eq!(files.status, bl_verify::Status::Fail);
    assert!(
        files.detail.starts_with("run-meta.json changed"),
        "{files:?}"
    );
    // A file added after the seal is named too.
    std::fs::write(&meta, text).unwrap();
    std::fs::write(run.join("extra.txt"), "x").unwrap();
    let bl_verify::Report::Graph(report) = bl_verify::verify(&run, &options).unwrap() else {
        panic!()
    };
    let files = report.checks.iter().find(|c| c.name == "files").unwrap();
    assert!(files.detail.starts_with("extra.txt was added"), "{files:?}");
}
