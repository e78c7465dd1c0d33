//! `bl verify PATH`, `bl log recover PATH` and `bl ledger reconcile`.

use std::path::{Path, PathBuf};

use bl_core::python_json;
use serde_json::{Value, json};

const EVENT_LOG: &str = "controller-events.jsonl";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    Fail,
    NotApplicable,
}

struct Check {
    name: &'static str,
    status: Status,
    detail: String,
}

fn check(name: &'static str, result: Result<String, String>) -> Check {
    match result {
        Ok(detail) => Check {
            name,
            status: Status::Ok,
            detail,
        },
        Err(detail) => Check {
            name,
            status: Status::Fail,
            detail,
        },
    }
}

fn not_applicable(name: &'static str, why: &str) -> Check {
    Check {
        name,
        status: Status::NotApplicable,
        detail: why.to_string(),
    }
}

fn verify_log(path: &Path, expect_head: Option<&str>) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (head, torn) =
        bl_store::verify_chain(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(tail) = torn {
        return Err(format!(
            "{}: line {} is torn ({} bytes with no newline); `bl log recover {}` moves them aside",
            path.display(),
            tail.line,
            tail.len,
            path.display()
        ));
    }
    if let Some(expected) = expect_head
        && expected != head.hash
    {
        return Err(format!("head is {}, expected {expected}", head.hash));
    }
    Ok(format!("{} events, head {}", head.sequence, head.hash))
}

/// plan.json hashes to run-meta's plan_id, and the manifest and
/// connections recompile to exactly those bytes.
fn verify_plan(dir: &Path) -> Result<String, String> {
    let plan = std::fs::read(dir.join("plan.json")).map_err(|e| format!("plan.json: {e}"))?;
    let meta: Value = serde_json::from_slice(
        &std::fs::read(dir.join("run-meta.json")).map_err(|e| format!("run-meta.json: {e}"))?,
    )
    .map_err(|e| format!("run-meta.json: {e}"))?;
    let plan_id = format!("sha256:{}", bl_core::sha256_hex(&plan));
    if meta["plan_id"].as_str() != Some(plan_id.as_str()) {
        return Err(format!(
            "plan.json hashes to {plan_id}, but run-meta.json field plan_id is {}",
            meta["plan_id"]
        ));
    }
    let manifest = std::fs::read_to_string(dir.join("manifest.yaml"))
        .map_err(|e| format!("manifest.yaml: {e}"))?;
    let graph = bl_graph::lint(&manifest, bl_graph::Format::Yaml)
        .map_err(|r| format!("manifest.yaml: [{}] {} — {}", r.code, r.pointer, r.message))?;
    let connections = match std::fs::read_to_string(dir.join("connections.json")) {
        Ok(text) => {
            let value: Value =
                serde_json::from_str(&text).map_err(|e| format!("connections.json: {e}"))?;
            Some(
                bl_graph::parse_connections(&value)
                    .map_err(|e| format!("connections.json: {e:?}"))?,
            )
        }
        Err(_) => None,
    };
    let policy = meta["policy_digest"]
        .as_str()
        .unwrap_or(bl_graph::plan::DEFAULT_POLICY_DIGEST);
    let input = bl_graph::CompileInput {
        connections: connections.as_deref(),
        available_packages: None,
        policy_digest: policy,
    };
    let compiled = bl_graph::compile(&graph, &input)
        .map_err(|e| format!("recompiling: [{}] {} — {}", e.code, e.pointer, e.message))?;
    if compiled.bytes.as_bytes() != plan.as_slice() {
        return Err(format!(
            "manifest.yaml and connections.json compile to {}, not to plan.json",
            compiled.plan_id
        ));
    }
    Ok(format!(
        "plan_id {plan_id} matches the manifest and connections"
    ))
}

pub fn verify(path: &Path, expect_head: Option<&str>, pubkey: Option<&str>, as_json: bool) -> u8 {
    let key = match pubkey.map(crate::keys_cmd::read_verifier_key).transpose() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: verify: {e}");
            return 2;
        }
    };
    let mut checks = Vec::new();
    if path.is_dir() {
        let log = path.join(EVENT_LOG);
        if log.is_file() {
            checks.push(check("chain", verify_log(&log, expect_head)));
        } else {
            checks.push(not_applicable("chain", "no controller-events.jsonl"));
        }
        if path.join("plan.json").is_file() {
            checks.push(check("plan", verify_plan(path)));
        } else {
            checks.push(not_applicable("plan", "no plan.json"));
        }
        checks.push(check(
            "artifacts",
            bl_store::verify_artifacts(&path.join("artifacts"))
                .map(|n| format!("{n} objects match their digests")),
        ));
    } else if path.is_file() {
        checks.push(check("chain", verify_log(path, expect_head)));
    } else {
        eprintln!("error: verify: {} does not exist", path.display());
        return 2;
    }
    let run_dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    match bl_store::provable::verify_checkpoints(&run_dir, key.as_ref()) {
        Ok(None) => {
            checks.push(not_applicable("merkle", "no checkpoints/ beside the log"));
            checks.push(not_applicable(
                "files",
                "no checkpoint seals the run directory's files",
            ));
            checks.push(not_applicable("signatures", "no checkpoints to check"));
        }
        Ok(Some(report)) => {
            checks.push(check(
                "merkle",
                Ok(format!(
                    "{} checkpoint(s) match the Merkle roots of the log",
                    report.checked
                )),
            ));
            checks.push(match report.files {
                bl_store::provable::FilesSeal::Intact(n) => check(
                    "files",
                    Ok(format!("{n} files are exactly as the last checkpoint seals them")),
                ),
                bl_store::provable::FilesSeal::Open { events_after } => not_applicable(
                    "files",
                    &format!(
                        "{events_after} events after the last checkpoint: files are sealed again at the next one"
                    ),
                ),
            });
            checks.push(if report.signatures_checked {
                check(
                    "signatures",
                    Ok(format!(
                        "{} checkpoint(s) signed by the given key",
                        report.checked
                    )),
                )
            } else {
                not_applicable(
                    "signatures",
                    "no --pubkey given: the roots were checked, not who signed them",
                )
            });
        }
        Err(e) => checks.push(check(
            match e {
                bl_store::provable::CheckpointError::Merkle(_) => "merkle",
                bl_store::provable::CheckpointError::Signature(_) => "signatures",
                bl_store::provable::CheckpointError::Files(_) => "files",
            },
            Err(e.to_string()),
        )),
    }
    match bl_store::verify_approvals(&run_dir, key.as_ref()) {
        Ok(None) => checks.push(not_applicable("approvals", "no approvals.json")),
        Ok(Some(report)) => checks.push(check(
            "approvals",
            Ok(match &key {
                Some(_) => format!(
                    "{} decisions, {} signatures hold",
                    report.decisions, report.signed
                ),
                None => format!(
                    "{} decisions consistent; signatures not checked (no --pubkey)",
                    report.decisions
                ),
            }),
        )),
        Err(e) => checks.push(check("approvals", Err(e))),
    }
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    if as_json {
        let list: Vec<Value> = checks
            .iter()
            .map(|c| {
                let status = match c.status {
                    Status::Ok => "ok",
                    Status::Fail => "fail",
                    Status::NotApplicable => "not_applicable",
                };
                json!({"name": c.name, "status": status, "detail": c.detail})
            })
            .collect();
        println!(
            "{}",
            python_json(&json!({"ok": ok, "path": path.display().to_string(), "checks": list}))
        );
    } else {
        for c in &checks {
            let label = match c.status {
                Status::Ok => "ok  ",
                Status::Fail => "FAIL",
                Status::NotApplicable => "n/a ",
            };
            println!("{label} {:<10} {}", c.name, c.detail);
        }
        println!("{}", if ok { "VERIFIED" } else { "NOT VERIFIED" });
    }
    if ok { 0 } else { 1 }
}

pub fn recover(path: PathBuf) -> u8 {
    let log = if path.is_dir() {
        path.join(EVENT_LOG)
    } else {
        path
    };
    match bl_store::recover_torn_tail(&log) {
        Ok(None) => {
            println!("{}: no torn tail; nothing changed", log.display());
            0
        }
        Ok(Some(tail)) => {
            println!(
                "{}: moved {} torn bytes (line {}) to {}.torn-{}",
                log.display(),
                tail.len,
                tail.line,
                log.display(),
                tail.offset
            );
            0
        }
        Err(e) => {
            eprintln!("error: log recover: {e}");
            2
        }
    }
}

pub fn reconcile(run_dir: &Path, key: &str, published: bool) -> u8 {
    let decision = if published {
        bl_store::Reconciliation::Published
    } else {
        bl_store::Reconciliation::NotPublished
    };
    match bl_store::Ledger::new(run_dir).reconcile(key, decision) {
        Ok(()) => {
            let what = if published {
                "recorded as published"
            } else {
                "cleared; it may fire again"
            };
            println!("{key}: {what}");
            0
        }
        Err(e) => {
            eprintln!("error: ledger reconcile: {e}");
            2
        }
    }
}
