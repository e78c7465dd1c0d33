//! Judging a worker's reply: what a connector's reply must show (bounded-
//! loops' structural gate), the sandbox probe's gate, a loop node's
//! receipt, and a router's pick. These are the standard rulings a
//! [`Judge`](crate::executor::Judge) gives; the controller only asks.

use serde_json::Value;

use crate::events::Verdict;
use crate::schedule::{Driver, NodeInfo, Routes};

/// What a node's reply is checked for, by the node's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyCheck {
    /// A connector's reply: non-empty UTF-8; a publish node's must be its
    /// JSON receipt.
    Structural { publish: bool },
    /// The sandbox probe's observations: the OS denied everything.
    Probe,
    /// A loop node's `loop-outcome.json`, from the package the plan admitted.
    LoopOutcome { package: String },
    /// A router without a gate: its worker's reply names the route.
    WorkerRoute(Routes),
    /// Nothing in the reply decides: the workspace is judged.
    WorkspaceOnly,
}

impl ReplyCheck {
    pub fn for_node(info: &NodeInfo) -> ReplyCheck {
        match &info.driver {
            Driver::Probe => ReplyCheck::Probe,
            Driver::Loop { package } => ReplyCheck::LoopOutcome {
                package: package.clone(),
            },
            Driver::Worker if info.gate.is_none() && info.routes.is_some() => {
                ReplyCheck::WorkerRoute(info.routes.clone().expect("a router"))
            }
            Driver::Subgraph { .. } | Driver::Router => ReplyCheck::WorkspaceOnly,
            _ if info.judged() => ReplyCheck::WorkspaceOnly,
            _ => ReplyCheck::Structural {
                publish: info.kind == bl_graph::model::NodeKind::Publish,
            },
        }
    }
}

/// One reply to rule on.
#[derive(Debug, Clone, Copy)]
pub struct ReplyRequest<'a> {
    pub node_id: &'a str,
    pub attempt: u32,
    pub round: u32,
    pub check: &'a ReplyCheck,
    pub reply: &'a [u8],
    /// Where the reply is stored (a loop's receipt verdict names it).
    pub reply_digest: Option<&'a str>,
}

/// How a reply was ruled on.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyRuling {
    /// It shows what it must; `route` is a router's pick.
    Pass {
        verdict: Verdict,
        route: Option<u32>,
    },
    Reject(Verdict),
    /// Nothing in the reply decides: the workspace is judged.
    WorkspaceOnly,
}

/// The standard ruling on a reply.
pub fn rule(request: &ReplyRequest) -> ReplyRuling {
    let id = request.node_id;
    let verdict = match request.check {
        ReplyCheck::WorkspaceOnly => return ReplyRuling::WorkspaceOnly,
        ReplyCheck::WorkerRoute(routes) => {
            let (route, verdict) = pick_route(id, routes, request.reply);
            return ReplyRuling::Pass {
                verdict,
                route: Some(route),
            };
        }
        ReplyCheck::Probe => gate_probe(id, request.reply),
        ReplyCheck::Structural { publish } => gate_reply(id, *publish, request.reply),
        ReplyCheck::LoopOutcome { package } => {
            let mut v =
                gate_loop_outcome(id, package, request.round, request.attempt, request.reply);
            if v.evidence_digest.is_some() {
                v.evidence_digest = request.reply_digest.map(str::to_string);
            }
            v
        }
    };
    if verdict.passed {
        ReplyRuling::Pass {
            verdict,
            route: None,
        }
    } else {
        ReplyRuling::Reject(verdict)
    }
}

/// A gated router's pick: its `pass` route when the gate passed, its
/// `fail` route otherwise (preflight made sure it declares both).
pub fn route_of_gate(routes: &Routes, passed: bool) -> u32 {
    let name = if passed { "pass" } else { "fail" };
    routes.index(name).unwrap_or(routes.default)
}

/// bounded-loops' receipt gate for a loop node: its `loop-outcome.json`
/// must be the outcome of this node's package, node, round and attempt,
/// and say DONE. (A verdict on the outcome's status carries an
/// evidence digest; one on its provenance does not.)
fn gate_loop_outcome(id: &str, package: &str, round: u32, attempt: u32, bytes: &[u8]) -> Verdict {
    let plain = |reason: String| Verdict {
        passed: false,
        reason,
        evidence_digest: None,
    };
    if bytes.is_empty() {
        return plain(format!("loop node '{id}' produced no outcome artifact"));
    }
    let outcome: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return plain(format!("loop node '{id}' outcome is not valid JSON: {e}")),
    };
    let Some(o) = outcome.as_object() else {
        return plain(format!("loop node '{id}' outcome is not a JSON object"));
    };
    let bare = |d: &str| d.trim_start_matches("sha256:").to_string();
    let declared = o.get("package_digest").and_then(Value::as_str);
    if declared.map(bare) != Some(bare(package)) {
        let declared = declared.map_or("None".to_string(), |d| format!("'{d}'"));
        return plain(format!(
            "loop node '{id}' outcome names package digest {declared} but the plan admitted '{package}'"
        ));
    }
    let node = o.get("node_id").and_then(Value::as_str).unwrap_or_default();
    if node != id {
        return plain(format!("loop outcome names node '{node}', not '{id}'"));
    }
    let r = o.get("repair_round").and_then(Value::as_u64).unwrap_or(0);
    if r != u64::from(round) {
        return plain(format!(
            "loop node '{id}' outcome is from repair round {r}, not round {round}"
        ));
    }
    let a = o.get("attempt").and_then(Value::as_u64).unwrap_or(0);
    if a != u64::from(attempt) {
        return plain(format!(
            "loop node '{id}' outcome is from attempt {a}, not attempt {attempt}"
        ));
    }
    let reason = match o.get("reason").and_then(Value::as_str) {
        Some(r) if !r.is_empty() => r.to_string(),
        _ => "(no reason recorded)".to_string(),
    };
    let status = o.get("status").and_then(Value::as_str).unwrap_or_default();
    let (passed, reason) = match status {
        "DONE" => (true, format!("loop reached DONE: {reason}")),
        "HALT" | "KILLED" => (false, format!("loop did not converge ({status}): {reason}")),
        "PAUSE" => (
            false,
            format!(
                "loop paused awaiting a human decision: {reason}. Its own gate passed \u{2014} this is NOT a convergence failure. Lift the checkpoint to a graph `approval` node so the run can pause and resume instead of failing here."
            ),
        ),
        other => (
            false,
            format!("loop node '{id}' reported an unrecognised status '{other}': {reason}"),
        ),
    };
    Verdict {
        passed,
        reason,
        // The caller fills in the outcome's digest.
        evidence_digest: Some(String::new()),
    }
}

/// A router's pick from its worker's reply: the reply (trimmed) names a
/// route, or is JSON `{"route": NAME}`; anything else takes the default.
fn pick_route(id: &str, routes: &Routes, bytes: &[u8]) -> (u32, Verdict) {
    let text = String::from_utf8_lossy(bytes);
    let named = serde_json::from_str::<Value>(text.trim())
        .ok()
        .and_then(|v| v.get("route").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| text.trim().to_string());
    let (route, reason) = match routes.index(&named) {
        Some(r) => (
            r,
            format!("router '{id}' took route '{named}', as its worker chose"),
        ),
        None => {
            let default = &routes.names[routes.default as usize];
            let shown: String = named.chars().take(80).collect();
            (
                routes.default,
                format!(
                    "router '{id}' took its default route '{default}': the reply named no route ('{shown}'; routes: {})",
                    routes.names.join(", ")
                ),
            )
        }
    };
    (
        route,
        Verdict {
            passed: true,
            reason,
            evidence_digest: None,
        },
    )
}

/// The default gate for connector nodes, bounded-loops' structural
/// acceptance: a non-empty UTF-8 reply. A publish node's reply must be its
/// JSON receipt.
fn gate_reply(id: &str, publish: bool, bytes: &[u8]) -> Verdict {
    let (passed, reason) = if bytes.is_empty() {
        (false, format!("node '{id}' produced an empty reply"))
    } else if std::str::from_utf8(bytes).is_err() {
        (
            false,
            format!("node '{id}' produced a reply that is not UTF-8"),
        )
    } else if publish {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(_)) => (true, format!("publish receipt verified for node '{id}'")),
            Ok(_) => (
                false,
                format!("publish node '{id}' receipt is not a JSON object"),
            ),
            Err(e) => (
                false,
                format!(
                    "publish node '{id}' receipt is not valid JSON: {}",
                    python_json_error(bytes, &e)
                ),
            ),
        }
    } else {
        (
            true,
            format!("independent gate: node '{id}' produced a non-empty, well-formed reply"),
        )
    };
    Verdict {
        passed,
        reason,
        evidence_digest: None,
    }
}

/// A JSON error as Python's `json` module words the common one ("Expecting
/// value: line 1 column 1 (char 0)"), since bounded-loops records that text.
fn python_json_error(bytes: &[u8], e: &serde_json::Error) -> String {
    let text = String::from_utf8_lossy(bytes);
    let (line, column) = (e.line().max(1), e.column().max(1));
    let before: usize = text
        .split('\n')
        .take(line - 1)
        .map(|l| l.chars().count() + 1)
        .sum();
    if e.to_string().starts_with("expected value") || e.is_eof() {
        format!(
            "Expecting value: line {line} column {column} (char {})",
            before + column - 1
        )
    } else {
        e.to_string()
    }
}

/// The sandbox probe's gate: the host's own observations (recorded by the
/// probe worker from outside the probed process) must show that the OS
/// denied everything the probe tried.
fn gate_probe(id: &str, bytes: &[u8]) -> Verdict {
    let verdict = |passed, reason| Verdict {
        passed,
        reason,
        evidence_digest: None,
    };
    let Ok(result) = serde_json::from_slice::<Value>(bytes) else {
        return verdict(false, format!("node '{id}': the probe result is not JSON"));
    };
    let Some(checks) = result["checks"].as_array() else {
        return verdict(
            false,
            format!("node '{id}': the probe result has no checks"),
        );
    };
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| c["ok"] != Value::Bool(true))
        .map(|c| {
            format!(
                "{}: {}",
                c["name"].as_str().unwrap_or("?"),
                c["detail"].as_str().unwrap_or("")
            )
        })
        .collect();
    if checks.is_empty() || !failed.is_empty() || result["passed"] != Value::Bool(true) {
        return verdict(
            false,
            format!(
                "sandbox probe: the OS did not deny everything: {}",
                failed.join("; ")
            ),
        );
    }
    verdict(
        true,
        format!(
            "sandbox probe: the OS denied all {} attempts (network, writes outside the workspace, sysctl, keyring)",
            checks.len()
        ),
    )
}
