//! A graph run's arena page: the run's records, read and verified through
//! the runtime API (status, subscribe, artifacts), handed as recorded to
//! the pages adapter, which draws them and checks them again in the
//! browser.

use std::path::Path;

use serde_json::{Value, json};

use crate::error::AppError;
use crate::runtime::GraphRuntime;

/// The page for the run at `dir`. Refused when its plan does not match
/// the plan id it records, or its log's chain is broken; a page whose
/// checkpoint or signature does not hold is made, and says so.
pub(crate) fn page(
    runtime: &GraphRuntime,
    dir: &Path,
    verifier: Option<&str>,
) -> Result<String, AppError> {
    Ok(live_page(runtime, dir, verifier, None)?.0)
}

/// The page with, for a live one, the URL its events come from; and how
/// many events it holds (the live URL's stream starts after them).
pub(crate) fn live_page(
    runtime: &GraphRuntime,
    dir: &Path,
    verifier: Option<&str>,
    live: Option<&dyn Fn(u64) -> String>,
) -> Result<(String, u64), AppError> {
    let run = records(runtime, dir, "", 0)?;
    let audit = audit_coverage(runtime, dir)?;
    let run_dir = bl_store::RunDir::new(dir);
    let title = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let held = run.events.len() as u64;
    let live = live.map(|url| url(held));
    let page = bl_pages::arena_html(&bl_pages::ArenaInput {
        title: &title,
        plan: &run.plan,
        plan_id: &run.plan_id,
        events: &run.events,
        checkpoint: run.checkpoint.as_deref(),
        verifier,
        artifacts: &run.artifacts,
        live: live.as_deref(),
        children: &run.children,
        audit: audit.as_ref(),
        decisions: &decisions(dir)?,
    })
    .map_err(|e| AppError::refused(format!("{}: {e}", run_dir.plan().display())))?;
    Ok((page, held))
}

/// The decisions recorded on the run's approval nodes, approvals and
/// rejections, as the page shows them.
fn decisions(dir: &Path) -> Result<Vec<Value>, AppError> {
    let record = bl_store::approvals::Approvals::new(dir)
        .read()
        .map_err(|e| AppError::refused(e.to_string()))?;
    let approved = record.commits.iter().map(|c| {
        json!({"node_id": c.node_id, "decision": "approved", "decided_by": c.decided_by,
               "decided_by_source": c.decided_by_source, "decided_at": c.decided_at,
               "repair_round": c.repair_round, "signed": c.signature.is_some()})
    });
    let rejected = record.rejections.iter().map(|r| {
        json!({"node_id": r.node_id, "decision": "rejected", "decided_by": r.decided_by,
               "decided_by_source": r.decided_by_source, "decided_at": r.decided_at,
               "repair_round": r.repair_round, "signed": r.signature.is_some()})
    });
    Ok(approved.chain(rejected).collect())
}

/// The coverage table and release verdict of the run's audit plan
/// (`audit-plan.json`, which `--audit-plan` keeps), from the audit results
/// its succeeded audit nodes produced (each artifact read and checked
/// against its digest); None without a plan. A plan that cannot be read,
/// is not a plain file, or is not the plan the log recorded gives the
/// verdict failed closed: release blocked, and why.
pub fn audit_coverage(
    runtime: &GraphRuntime,
    dir: &Path,
) -> Result<Option<serde_json::Value>, AppError> {
    use bl_graph::audit::{self, AuditPlan, AuditResult, Lane};
    let path = bl_store::RunDir::new(dir).audit_plan();
    let Ok(file) = std::fs::symlink_metadata(&path) else {
        return Ok(None);
    };
    let status = runtime.status(dir)?;
    let events = runtime.subscribe(dir, 0).read_to_end()?;
    let logged: Option<String> = events
        .iter()
        .find(|e| e.event_type == "audit.plan.created")
        .and_then(|e| e.payload["plan_digest"].as_str().map(str::to_string));
    let plan = if file.is_file() {
        std::fs::read(&path).map_err(|e| e.to_string())
    } else {
        Err(format!("{} is not a plain file", bl_store::RunDir::AUDIT_PLAN))
    }
    .and_then(|bytes| {
        let digest = bl_core::Sha256Digest::of(&bytes).to_string();
        match &logged {
            Some(recorded) if *recorded != digest => Err(format!(
                "{} is {digest}, not the plan the run's log recorded ({recorded}): it was altered after the run began",
                bl_store::RunDir::AUDIT_PLAN
            )),
            _ => Ok((AuditPlan::parse(&bytes).map_err(|e| e.to_string())?, digest)),
        }
    });
    let (plan, digest) = match plan {
        Ok(read) => read,
        Err(why) => {
            let mut failed = serde_json::to_value(audit::failed_closed(&why)).expect("json");
            failed["plan_digest"] = serde_json::json!(null);
            failed["logged_plan_digest"] = serde_json::json!(logged);
            return Ok(Some(failed));
        }
    };
    let store = bl_store::ArtifactStore::new(bl_store::RunDir::new(dir).artifacts(), 64 << 20);
    let mut lanes = Vec::new();
    for node in &status.run.graph.nodes {
        if node.kind != bl_graph::model::NodeKind::Audit
            || status.view.node(&node.id).state.as_str() != "SUCCEEDED"
        {
            continue;
        }
        // What the node's success published: its outputs as bl records
        // them, or (a bounded-loops run) the success's artifact digests.
        let Some(success) = events
            .iter()
            .rev()
            .find(|e| e.event_type == "node.succeeded" && e.payload["node_id"] == node.id)
        else {
            continue;
        };
        let published: Vec<&str> = match success.payload["outputs"].as_array() {
            Some(outputs) => outputs
                .iter()
                .filter_map(|o| o["digest"].as_str())
                .collect(),
            None => success.payload["artifact_digests"]
                .as_array()
                .map(|a| a.iter().filter_map(|d| d.as_str()).collect())
                .unwrap_or_default(),
        };
        for artifact in published {
            let result = match store.get(artifact) {
                Ok(bytes) => AuditResult::parse(&bytes),
                Err(e) => Err(audit::AuditRefusal {
                    code: "artifact",
                    pointer: String::new(),
                    message: e.to_string(),
                }),
            };
            lanes.push(Lane {
                source: format!("node '{}' artifact '{artifact}'", node.id),
                result,
            });
        }
    }
    let mut coverage = serde_json::to_value(audit::reconcile(&plan, &lanes)).expect("json");
    coverage["plan_digest"] = serde_json::json!(digest);
    coverage["logged_plan_digest"] = serde_json::json!(logged);
    Ok(Some(coverage))
}

/// How deep subgraphs nest (the executor's own limit).
const MAX_CHILD_DEPTH: usize = 8;

/// A run's records, as recorded, read through the runtime API, with those
/// of its subgraph nodes' child runs. Refused when its plan is not the
/// plan it ran or its log's chain is broken.
fn records(
    runtime: &GraphRuntime,
    dir: &Path,
    node: &str,
    depth: usize,
) -> Result<bl_pages::ChildRun, AppError> {
    let status = runtime.status(dir)?;
    let logged = runtime.subscribe(dir, 0).read_to_end()?;
    let run_dir = bl_store::RunDir::new(dir);
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| AppError::refused(format!("cannot read {}: {e}", path.display())))
    };
    let plan = read(&run_dir.plan())?;
    // The page draws plan.json as recorded: it must be the plan the run ran.
    let digest = bl_core::Sha256Digest::of(plan.as_bytes()).to_string();
    if digest != status.run.plan.plan_id {
        return Err(AppError::refused(format!(
            "{} is {digest}, not the plan this run ran ({}): the run directory was altered; no page is made",
            run_dir.plan().display(),
            status.run.plan.plan_id
        )));
    }
    let checkpoint = match latest_checkpoint(&run_dir.checkpoints()) {
        Some(path) => Some(read(&path)?),
        None => None,
    };
    // A child run that cannot be read is shown as such; the parent's page
    // is still made.
    let mut named: Vec<(&str, &str)> = logged
        .iter()
        .filter(|_| depth < MAX_CHILD_DEPTH)
        .filter_map(|e| {
            Some((
                e.payload["node_id"].as_str()?,
                e.payload["child_run"]["path"].as_str()?,
            ))
        })
        .collect();
    named.sort_unstable();
    named.dedup();
    let children = named
        .into_iter()
        .map(|(node, path)| {
            let inside = path.starts_with(&format!("{}/", bl_store::RunDir::SUBGRAPHS))
                && !path.split('/').any(|part| part == "..");
            let read = if inside {
                records(runtime, &dir.join(path), node, depth + 1)
            } else {
                Err(AppError::refused(format!(
                    "the child run path {path:?} is not under {}/",
                    bl_store::RunDir::SUBGRAPHS
                )))
            };
            match read {
                Ok(child) => bl_pages::ChildRun {
                    path: path.to_string(),
                    ..child
                },
                Err(e) => bl_pages::ChildRun {
                    node: node.to_string(),
                    path: path.to_string(),
                    unreadable: Some(e.message().to_string()),
                    ..Default::default()
                },
            }
        })
        .collect();
    Ok(bl_pages::ChildRun {
        node: node.to_string(),
        path: String::new(),
        unreadable: None,
        plan,
        plan_id: status.run.plan.plan_id,
        events: logged.into_iter().map(|e| e.raw).collect(),
        checkpoint,
        artifacts: runtime.artifacts(dir)?,
        children,
    })
}

/// The checkpoint over the most events (`<size>.checkpoint`, zero-padded,
/// so the greatest name).
pub(crate) fn latest_checkpoint(dir: &Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "checkpoint"))
        .max()
}

/// Where a page of the run or loop run at `dir` goes unless told: beside
/// it, as `<name>.<kind>.html` (a file inside a run directory would fall
/// outside its seal).
fn beside(dir: &Path, kind: &str) -> std::path::PathBuf {
    let name = dir.file_name().unwrap_or(dir.as_os_str()).to_string_lossy();
    dir.with_file_name(format!("{name}.{kind}.html"))
}

/// Writes `page` to `out`, or beside `dir`; returns where.
pub(crate) fn write_page(
    page: &str,
    dir: &Path,
    kind: &str,
    out: Option<&Path>,
) -> Result<std::path::PathBuf, AppError> {
    let out = out.map_or_else(|| beside(dir, kind), Path::to_path_buf);
    std::fs::write(&out, page)
        .map_err(|e| AppError::refused(format!("cannot write {}: {e}", out.display())))?;
    Ok(out)
}
