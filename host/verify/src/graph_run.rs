//! Graph run directories and controller event logs: the chain, the plan,
//! the artifacts, the checkpoints (Merkle roots, signatures, the files they
//! seal) and the approvals.

use std::path::{Path, PathBuf};

use bl_store::RunDir;
use serde_json::Value;

use crate::{Check, EVENT_LOG, GraphReport, Options};

/// The broker's decisions for a run, in the event log's format.
pub use bl_store::EGRESS_EVENTS;

/// What a failed check of a graph run found, naming the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Finding {
    #[error("{}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Chain {
        path: PathBuf,
        source: bl_store::ChainError,
    },
    #[error(
        "{}: line {line} is torn ({len} bytes with no newline); `bl log recover {}` moves them aside",
        path.display(),
        path.display()
    )]
    Torn {
        path: PathBuf,
        line: usize,
        len: usize,
    },
    #[error("head is {found}, expected {expected}")]
    Head { found: String, expected: String },
    #[error("the controller log has no identity to compare with")]
    NoIdentity,
    #[error("{} belongs to another run than controller-events.jsonl", path.display())]
    OtherRun { path: PathBuf },
    #[error("{file}: {source}")]
    NotJson {
        file: &'static str,
        source: serde_json::Error,
    },
    #[error("plan.json hashes to {plan_id}, but run-meta.json field plan_id is {recorded}")]
    PlanId { plan_id: String, recorded: Value },
    #[error("manifest.yaml: [{}] {} — {}", .0.code, .0.pointer, .0.message)]
    Manifest(bl_graph::Refusal),
    #[error("connections.json: {0}")]
    Connections(bl_graph::ConnectionsError),
    #[error("recompiling: [{}] {} — {}", .0.code, .0.pointer, .0.message)]
    Recompile(bl_graph::Refusal),
    #[error("manifest.yaml and connections.json compile to {0}, not to plan.json")]
    PlanDiffers(String),
    #[error("{0}")]
    Handoff(String),
    #[error("{0}")]
    Causality(String),
    #[error("{0}")]
    Evidence(String),
}

fn read(path: &Path) -> Result<Vec<u8>, Finding> {
    std::fs::read(path).map_err(|source| Finding::Unreadable {
        path: path.to_path_buf(),
        source,
    })
}

/// An event log with the lines its writer staged and has not moved in: the
/// run as far as it went.
fn read_log(path: &Path) -> Result<Vec<u8>, Finding> {
    bl_store::read_log(path).map_err(|source| Finding::Unreadable {
        path: path.to_path_buf(),
        source,
    })
}

/// The whole lines of an event log (with its staged ones): a torn last
/// line is the chain check's finding, said once there, not again by every
/// check that reads the events.
fn read_whole_lines(path: &Path) -> Result<Vec<u8>, Finding> {
    let mut bytes = read_log(path)?;
    let whole = bytes
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    bytes.truncate(whole);
    Ok(bytes)
}

/// An event log's verified head; a torn tail is a finding.
fn chain_head(path: &Path) -> Result<bl_store::ChainHead, Finding> {
    let bytes = read_log(path)?;
    let (head, torn) = bl_store::verify_chain(&bytes).map_err(|source| Finding::Chain {
        path: path.to_path_buf(),
        source,
    })?;
    match torn {
        Some(tail) => Err(Finding::Torn {
            path: path.to_path_buf(),
            line: tail.line,
            len: tail.len,
        }),
        None => Ok(head),
    }
}

/// The annex's own chain, and that it belongs to this run.
fn verify_annex(controller: &Path, annex: &Path) -> Result<String, Finding> {
    let head = chain_head(annex)?;
    let run = chain_head(controller)
        .ok()
        .and_then(|h| h.identity)
        .ok_or(Finding::NoIdentity)?;
    if head.sequence > 0 && head.identity.as_ref() != Some(&run) {
        return Err(Finding::OtherRun {
            path: annex.to_path_buf(),
        });
    }
    // What the events are, by kind: its chain verified, each line is JSON.
    let kinds: Vec<String> = read_log(annex)
        .unwrap_or_default()
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter_map(|event| event["event_type"].as_str().map(str::to_string))
        .collect();
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    Ok(format!(
        "{} interruption(s) and {} finished turn(s) marked for their gate, head {}",
        count("node.interrupted"),
        count("node.replied"),
        head.hash
    ))
}

/// The egress record's own chain, and that it belongs to this run.
fn verify_egress_log(controller: &Path, egress: &Path) -> Result<String, Finding> {
    let head = chain_head(egress)?;
    if head.sequence == 0 {
        return Ok("no broker decisions recorded".into());
    }
    let run = chain_head(controller)
        .ok()
        .and_then(|h| h.identity)
        .ok_or(Finding::NoIdentity)?;
    if head.identity.as_ref() != Some(&run) {
        return Err(Finding::OtherRun {
            path: egress.to_path_buf(),
        });
    }
    Ok(format!(
        "{} broker decisions, head {}",
        head.sequence, head.hash
    ))
}

/// The chain of the calls an MCP client made on the run (`bl mcp`).
pub(crate) fn verify_mcp_audit(audit: &Path) -> Result<String, Finding> {
    let head = chain_head(audit)?;
    Ok(format!(
        "{} MCP call(s) recorded, head {}",
        head.sequence, head.hash
    ))
}

/// A run directory, or (when `path` is a file) its event log alone plus the
/// checkpoints and approvals beside it.
pub fn verify(path: &Path, options: &Options) -> GraphReport {
    let expect_head = options.expect_head.as_deref();
    let key = options.verifier.as_ref();
    let mut checks = Vec::new();
    // An evidence workspace keeps its people's decisions in its log (the
    // "evidence" check), never in an approvals.json.
    let mut evidence = false;
    if path.is_dir() {
        let log = path.join(EVENT_LOG);
        if log.is_file() {
            checks.push(Check::from_result("chain", verify_log(&log, expect_head)));
            match crate::evidence::verify_evidence(&log, key, options.reviewers.as_deref()) {
                Ok(None) => {}
                Ok(Some(detail)) => {
                    evidence = true;
                    checks.push(Check::from_result("evidence", Ok::<_, Finding>(detail)))
                }
                Err(e) => {
                    evidence = true;
                    checks.push(Check::from_result("evidence", Err::<String, _>(e)))
                }
            }
        } else {
            checks.push(Check::not_applicable("chain", "no controller-events.jsonl"));
        }
        let annex = path.join(RunDir::ANNEX);
        if annex.is_file() {
            checks.push(Check::from_result("annex", verify_annex(&log, &annex)));
        }
        let egress = path.join(EGRESS_EVENTS);
        if egress.is_file() {
            checks.push(Check::from_result(
                "egress",
                verify_egress_log(&log, &egress),
            ));
        } else {
            checks.push(Check::not_applicable(
                "egress",
                "no egress-events.jsonl (no broker request)",
            ));
        }
        let audit = path.join(RunDir::MCP_AUDIT);
        if audit.is_file() {
            checks.push(Check::from_result("mcp audit", verify_mcp_audit(&audit)));
        }
        if path.join(RunDir::PLAN).is_file() {
            checks.push(Check::from_result("plan", verify_plan(path)));
            if log.is_file() {
                checks.push(Check::from_result(
                    "causality",
                    verify_causality(path, &log),
                ));
            }
        } else {
            checks.push(Check::not_applicable("plan", "no plan.json"));
        }
        checks.push(Check::from_result(
            "artifacts",
            bl_store::verify_artifacts(&path.join(RunDir::ARTIFACTS))
                .map(|n| format!("{n} objects match their digests")),
        ));
        if log.is_file() {
            checks.push(match verify_handoff(path, &log) {
                Ok(Some(detail)) => Check::from_result("handoff", Ok::<_, Finding>(detail)),
                Ok(None) => Check::not_applicable(
                    "handoff",
                    "no plugin, published output or child run is named in the log",
                ),
                Err(e) => Check::from_result("handoff", Err::<String, _>(e)),
            });
        }
    } else {
        checks.push(Check::from_result("chain", verify_log(path, expect_head)));
    }
    let run_dir = if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    };
    match bl_store::provable::verify_checkpoints(&run_dir, key) {
        Ok(None) => {
            checks.push(Check::not_applicable(
                "merkle",
                "no checkpoints/ beside the log",
            ));
            checks.push(Check::not_applicable(
                "files",
                "no checkpoint seals the run directory's files",
            ));
            checks.push(Check::not_applicable(
                "signatures",
                "no checkpoints to check",
            ));
        }
        Ok(Some(report)) => {
            checks.push(Check::from_result(
                "merkle",
                Ok::<_, Finding>(format!(
                    "{} checkpoint(s) match the Merkle roots of the log",
                    report.checked
                )),
            ));
            checks.push(match report.files {
                bl_store::provable::FilesSeal::Intact(n) => Check::from_result(
                    "files",
                    Ok::<_, Finding>(format!("{n} files are exactly as the last checkpoint seals them")),
                ),
                bl_store::provable::FilesSeal::Open { events_after } => Check::not_applicable(
                    "files",
                    format!(
                        "{events_after} events after the last checkpoint: files are sealed again at the next one"
                    ),
                ),
            });
            checks.push(if report.signatures_checked {
                Check::from_result(
                    "signatures",
                    Ok::<_, Finding>(format!(
                        "{} checkpoint(s) signed by the given key",
                        report.checked
                    )),
                )
            } else {
                Check::not_applicable(
                    "signatures",
                    "no --pubkey given: the roots were checked, not who signed them",
                )
            });
        }
        Err(e) => checks.push(Check::from_result(
            match e {
                bl_store::provable::CheckpointError::Merkle(_) => "merkle",
                bl_store::provable::CheckpointError::Signature(_) => "signatures",
                bl_store::provable::CheckpointError::Files(_) => "files",
            },
            Err(e),
        )),
    }
    match bl_store::verify_approvals(&run_dir, key) {
        Ok(None) if evidence => {}
        Ok(None) => checks.push(Check::not_applicable("approvals", "no approvals.json")),
        Ok(Some(report)) => {
            // Said every time: a decision an agent made is not a person's.
            let agents = match report.by_agents {
                0 => String::new(),
                n => format!("; {n} made by an agent, not a person (decided_by_source: agent)"),
            };
            checks.push(Check::from_result(
                "approvals",
                Ok::<_, Finding>(match &key {
                    Some(_) => format!(
                        "{} decisions, {} signatures hold{agents}",
                        report.decisions, report.signed
                    ),
                    None => format!(
                        "{} decisions consistent; signatures not checked (no --pubkey){agents}",
                        report.decisions
                    ),
                }),
            ))
        }
        Err(e) => checks.push(Check::from_result("approvals", Err(e))),
    }
    GraphReport {
        path: path.to_path_buf(),
        checks,
    }
}

/// What the log says the run's nodes handed on, checked against the run
/// directory: every plugin component it names is kept in the artifact store
/// under that digest (and is wasm); every published output is stored, and
/// its copy in the run's workspace still has its digest; every subgraph's
/// child run verifies and ends at the head the parent recorded.
fn verify_handoff(dir: &Path, log: &Path) -> Result<Option<String>, Finding> {
    let bytes = read_whole_lines(log)?;
    let objects = dir.join("artifacts/objects");
    let stored = |digest: &str| -> Result<Vec<u8>, Finding> {
        let hex = digest.trim_start_matches("sha256:");
        let object = objects.join(hex);
        let bytes = std::fs::read(&object).map_err(|e| {
            Finding::Handoff(format!(
                "{digest} is named in the log but not kept in artifacts/objects ({e})"
            ))
        })?;
        if bl_core::Sha256Digest::of(&bytes).to_string() != digest {
            return Err(Finding::Handoff(format!(
                "{} does not hash to {digest}",
                object.display()
            )));
        }
        Ok(bytes)
    };
    let (mut components, mut outputs, mut children) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeMap::new(),
        Vec::new(),
    );
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let event: Value = serde_json::from_slice(line).map_err(|source| Finding::NotJson {
            file: EVENT_LOG,
            source,
        })?;
        let payload = &event["payload"];
        let node = payload["node_id"].as_str().unwrap_or_default().to_string();
        for plugin in payload["plugins"].as_array().into_iter().flatten() {
            let digest = plugin["component_digest"].as_str().unwrap_or_default();
            components.insert((
                digest.to_string(),
                plugin["plugin"].as_str().unwrap_or_default().to_string(),
            ));
        }
        if event["event_type"] == "node.succeeded" {
            for output in payload["outputs"].as_array().into_iter().flatten() {
                let path = output["path"].as_str().unwrap_or_default().to_string();
                let digest = output["digest"].as_str().unwrap_or_default().to_string();
                // The last success of a node wins (a repair round publishes again).
                outputs.insert(path, (digest, node.clone()));
            }
            if let Some(child) = payload.get("child_run") {
                children.push((node.clone(), child.clone()));
            }
        }
    }
    if components.is_empty() && outputs.is_empty() && children.is_empty() {
        return Ok(None);
    }
    for (digest, plugin) in &components {
        let bytes = stored(digest)?;
        if !bytes.starts_with(b"\0asm") {
            return Err(Finding::Handoff(format!(
                "plugin {plugin}'s component {digest} is not a wasm component"
            )));
        }
    }
    for (path, (digest, node)) in &outputs {
        stored(digest)?;
        let published = dir.join(path);
        let now = std::fs::read(&published).map_err(|e| {
            Finding::Handoff(format!("{path} (published by {node}) is missing: {e}"))
        })?;
        let actual = bl_core::Sha256Digest::of(&now).to_string();
        if actual != *digest {
            return Err(Finding::Handoff(format!(
                "{path} (published by {node} as {digest}) now hashes to {actual}"
            )));
        }
    }
    for (node, child) in &children {
        let rel = child["path"].as_str().unwrap_or_default();
        if !rel.starts_with(&format!("{}/", bl_store::RunDir::SUBGRAPHS)) || rel.contains("..") {
            return Err(Finding::Handoff(format!(
                "subgraph node {node} names child run '{rel}'"
            )));
        }
        let head = chain_head(&dir.join(rel).join(EVENT_LOG))?;
        if child["head_hash"] != head.hash.as_str() || child["head_sequence"] != head.sequence {
            return Err(Finding::Handoff(format!(
                "subgraph node {node}'s child run {rel} now ends at {} (sequence {}), not at the head the parent recorded ({})",
                head.hash, head.sequence, child["head_hash"]
            )));
        }
    }
    Ok(Some(format!(
        "{} plugin component(s), {} published output(s) and {} child run(s) match what the log records",
        components.len(),
        outputs.len(),
        children.len()
    )))
}

fn verify_log(path: &Path, expect_head: Option<&str>) -> Result<String, Finding> {
    let head = chain_head(path)?;
    if let Some(expected) = expect_head
        && expected != head.hash
    {
        return Err(Finding::Head {
            found: head.hash,
            expected: expected.to_string(),
        });
    }
    Ok(format!("{} events, head {}", head.sequence, head.hash))
}

/// plan.json hashes to run-meta's plan_id, and the manifest and
/// connections recompile to exactly those bytes.
fn run_meta(dir: &Path) -> Result<Value, Finding> {
    serde_json::from_slice(&read(&dir.join(RunDir::META))?).map_err(|source| Finding::NotJson {
        file: RunDir::META,
        source,
    })
}

/// The run's manifest, and the plan it compiles to with its connections.
fn recompile(dir: &Path, meta: &Value) -> Result<(bl_graph::Graph, bl_graph::Plan), Finding> {
    let manifest_path = dir.join(RunDir::MANIFEST);
    let manifest =
        std::fs::read_to_string(&manifest_path).map_err(|source| Finding::Unreadable {
            path: manifest_path,
            source,
        })?;
    let graph = bl_graph::lint(&manifest, bl_graph::Format::Yaml).map_err(Finding::Manifest)?;
    let connections = match std::fs::read_to_string(dir.join(RunDir::CONNECTIONS)) {
        Ok(text) => {
            let value: Value = serde_json::from_str(&text).map_err(|source| Finding::NotJson {
                file: RunDir::CONNECTIONS,
                source,
            })?;
            Some(bl_graph::parse_connections(&value).map_err(Finding::Connections)?)
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
    let compiled = bl_graph::compile(&graph, &input).map_err(Finding::Recompile)?;
    Ok((graph, compiled))
}

/// bounded-loops' causality rule, checked on the log: a node leaves
/// PENDING (its `node.ready`, or its `node.skipped`) only once every plan
/// predecessor has ended in that round, but for an any_successful join over
/// unconditional edges after a success, and only on the exit the rule
/// gives for their states (bl_run's [`bl_run::admit`]).
fn verify_causality(dir: &Path, log: &Path) -> Result<String, Finding> {
    use bl_run::{Incoming, NodeState, admit, admits_early};
    let meta: Value =
        serde_json::from_slice(&read(&dir.join(RunDir::META))?).map_err(|source| {
            Finding::NotJson {
                file: RunDir::META,
                source,
            }
        })?;
    let (graph, plan) = recompile(dir, &meta)?;
    let schedule = bl_run::schedule::Schedule::of(&graph, &plan);
    let n = schedule.nodes.len();
    let mut parents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, e) in schedule.spec.edges.iter().enumerate() {
        parents[e.to].push(i);
    }
    let mut state = vec![NodeState::Pending; n];
    let mut left = vec![false; n];
    let mut picked: Vec<Option<u32>> = vec![None; n];
    let mut decided = 0;
    let bytes = read_whole_lines(log)?;
    for (line_no, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let event: Value = serde_json::from_slice(line).map_err(|source| Finding::NotJson {
            file: EVENT_LOG,
            source,
        })?;
        let kind = event["event_type"].as_str().unwrap_or_default();
        let payload = &event["payload"];
        let Some(node) = payload["node_id"]
            .as_str()
            .and_then(|id| schedule.index(id))
        else {
            continue;
        };
        match kind {
            "node.repaired" => {
                state[node] = NodeState::Pending;
                left[node] = false;
                picked[node] = None;
                continue;
            }
            "node.ready" | "node.skipped" if !left[node] => {
                left[node] = true;
                decided += 1;
                let incoming: Vec<Incoming> = parents[node]
                    .iter()
                    .map(|&e| {
                        let edge = &schedule.spec.edges[e];
                        let source = state[edge.from];
                        Incoming {
                            guard: edge.guard,
                            source,
                            routed_away: source == NodeState::Succeeded
                                && !edge.routes.is_empty()
                                && !picked[edge.from].is_some_and(|r| edge.routes.contains(&r)),
                        }
                    })
                    .collect();
                let join = schedule.spec.nodes[node].join;
                let started = kind == "node.ready";
                let id = &schedule.nodes[node].id;
                let at = format!("{kind} at line {}", line_no + 1);
                if started && admits_early(join, &incoming) {
                    continue;
                }
                if let Some(&e) = parents[node]
                    .iter()
                    .find(|&&e| !state[schedule.spec.edges[e].from].is_terminal())
                {
                    let from = schedule.spec.edges[e].from;
                    return Err(Finding::Causality(format!(
                        "node '{id}' left PENDING ({at}) while its plan predecessor '{}' was still {}",
                        schedule.nodes[from].id,
                        state[from].name()
                    )));
                }
                let expected = admit(join, &incoming);
                if expected != Some(started) {
                    let parents_said: Vec<String> = parents[node]
                        .iter()
                        .map(|&e| {
                            let from = schedule.spec.edges[e].from;
                            format!("'{}' {}", schedule.nodes[from].id, state[from].name())
                        })
                        .collect();
                    return Err(Finding::Causality(format!(
                        "node '{id}' was {} ({at}), but with its predecessors ended as {} the rule {}",
                        if started { "started" } else { "skipped" },
                        parents_said.join(", "),
                        match expected {
                            Some(true) => "starts it",
                            Some(false) => "skips it",
                            None => "leaves it PENDING",
                        }
                    )));
                }
            }
            _ => {}
        }
        match kind {
            "node.succeeded" => {
                state[node] = NodeState::Succeeded;
                picked[node] = payload["routed"]
                    .as_str()
                    .and_then(|r| schedule.nodes[node].routes.as_ref()?.index(r));
            }
            "node.failed" => state[node] = NodeState::Failed(bl_run::Failure::Outcome),
            "node.skipped" => state[node] = NodeState::Skipped,
            _ => {}
        }
    }
    Ok(format!(
        "{decided} node(s) left PENDING only once their predecessors allowed it"
    ))
}

fn verify_plan(dir: &Path) -> Result<String, Finding> {
    let plan = read(&dir.join(RunDir::PLAN))?;
    let meta = run_meta(dir)?;
    let plan_id = bl_core::Sha256Digest::of(&plan).to_string();
    if meta["plan_id"].as_str() != Some(plan_id.as_str()) {
        return Err(Finding::PlanId {
            plan_id,
            recorded: meta["plan_id"].clone(),
        });
    }
    let (_, compiled) = recompile(dir, &meta)?;
    if compiled.bytes.as_bytes() != plan.as_slice() {
        return Err(Finding::PlanDiffers(compiled.plan_id));
    }
    Ok(format!(
        "plan_id {plan_id} matches the manifest and connections"
    ))
}
