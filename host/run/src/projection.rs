//! The run's state, folded from its recorded events: what `bl graph
//! status` shows and what `approve` and `resume` decide from. Pure: it
//! takes the events (type and payload, in log order) and returns a view.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub state: String,
    pub attempt: u64,
    pub gate_passed: Option<bool>,
    pub gate_reason: Option<String>,
    pub artifact_digests: Vec<String>,
    /// `[provider_id, model_id, region, fallback, policy_digest]`.
    pub route: Option<Value>,
    pub transport: Option<String>,
    pub spend_tokens: u64,
    pub spend_cost_microunits: u64,
    /// False once a spend was recorded without usage (an unmetered worker).
    pub spend_complete: bool,
    /// Why it failed or was skipped (or why its last attempt failed), on
    /// one line.
    pub reason: Option<String>,
}

impl Default for NodeView {
    fn default() -> Self {
        NodeView {
            state: "PENDING".into(),
            attempt: 0,
            gate_passed: None,
            gate_reason: None,
            artifact_digests: Vec::new(),
            route: None,
            transport: None,
            spend_tokens: 0,
            spend_cost_microunits: 0,
            spend_complete: true,
            reason: None,
        }
    }
}

/// Why a node or an attempt failed, on one line: the worker's own words
/// where it left some (how it ended, and its last line on stderr), else
/// the gate's, else the record's.
pub fn why(payload: &Value) -> String {
    let reason = payload["reason"].as_str().unwrap_or_default();
    let extended = [crate::events::WORKER_FAILED, crate::events::POLICY_DENIED]
        .iter()
        .any(|words| reason.starts_with(&format!("{words}: ")));
    let text = if extended {
        reason
    } else {
        payload["verdict"]["reason"].as_str().unwrap_or(reason)
    };
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    match (lines.next(), lines.next_back()) {
        (Some(first), Some(last)) => format!(
            "{}: {}",
            first.split(';').next().unwrap_or(first),
            last.trim()
        ),
        (Some(first), None) => first.to_string(),
        _ => String::new(),
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunView {
    pub run_state: String,
    pub nodes: BTreeMap<String, NodeView>,
    pub budget_pause: Option<Value>,
    pub resumes: u32,
    /// Pauses recorded: approvals reached and budget pauses.
    pub pauses: u32,
    pub tokens: u64,
    pub cost_microunits: u64,
    pub spend_complete: bool,
}

impl RunView {
    pub fn node(&self, id: &str) -> NodeView {
        self.nodes.get(id).cloned().unwrap_or_default()
    }

    /// The ordinal of the next `run.resumed`: bounded-loops numbers a
    /// resume by the pauses recorded before it (at least 1), so resuming
    /// the same pause twice records it once.
    pub fn resume_ordinal(&self) -> u32 {
        self.pauses.max(1)
    }

    pub fn is_terminal(&self) -> bool {
        matches!(self.run_state.as_str(), "SUCCEEDED" | "FAILED")
    }

    /// Nodes waiting for a human decision, in `order`.
    pub fn awaiting<'a>(&self, order: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        order
            .into_iter()
            .filter(|id| self.node(id).state == "AWAITING_APPROVAL")
            .map(str::to_string)
            .collect()
    }
}

/// Folds `(event_type, payload)` pairs, in log order.
pub fn project<'a>(events: impl IntoIterator<Item = (&'a str, &'a Value)>) -> RunView {
    let mut run = RunView {
        run_state: "PENDING".into(),
        spend_complete: true,
        ..RunView::default()
    };
    for (kind, payload) in events {
        let node_id = payload["node_id"].as_str();
        match (kind, node_id) {
            ("run.created", _) => run.run_state = "PENDING".into(),
            ("run.started", _) => run.run_state = "RUNNING".into(),
            ("run.succeeded", _) => run.run_state = "SUCCEEDED".into(),
            ("run.failed", _) => run.run_state = "FAILED".into(),
            ("run.resumed", _) => run.resumes += 1,
            ("run.budget.paused", _) => {
                run.pauses += 1;
                run.budget_pause = Some(payload.clone());
            }
            (_, Some(id)) => {
                if kind == "node.awaiting_approval" {
                    run.pauses += 1;
                }
                let node = run.nodes.entry(id.to_string()).or_default();
                fold_node(node, kind, payload);
                if kind == "node.spend" {
                    match payload.get("usage") {
                        Some(u) => {
                            let tokens = u["input_tokens"].as_u64().unwrap_or(0)
                                + u["output_tokens"].as_u64().unwrap_or(0);
                            run.tokens += tokens;
                            run.cost_microunits += u["cost_microunits"].as_u64().unwrap_or(0);
                        }
                        None => run.spend_complete = false,
                    }
                }
            }
            _ => {}
        }
    }
    run
}

fn fold_node(node: &mut NodeView, kind: &str, p: &Value) {
    let attempt = p["attempt"].as_u64();
    match kind {
        "node.ready"
        | "node.starting"
        | "node.running"
        | "node.gating"
        | "node.awaiting_approval" => {
            node.state = p["state"].as_str().unwrap_or_default().to_string();
            node.attempt = attempt.unwrap_or(node.attempt);
        }
        "node.spend" => match p.get("usage") {
            Some(u) => {
                node.spend_tokens += u["input_tokens"].as_u64().unwrap_or(0)
                    + u["output_tokens"].as_u64().unwrap_or(0);
                node.spend_cost_microunits += u["cost_microunits"].as_u64().unwrap_or(0);
            }
            None => node.spend_complete = false,
        },
        "node.attempt.failed" => node.reason = Some(why(p)),
        "node.succeeded" | "node.failed" => {
            node.reason = (kind == "node.failed").then(|| why(p));
            node.state = p["state"].as_str().unwrap_or_default().to_string();
            node.attempt = attempt.unwrap_or(node.attempt);
            node.artifact_digests = p["artifact_digests"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|d| d.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            node.gate_passed = p["verdict"]["passed"].as_bool();
            node.gate_reason = p["verdict"]["reason"].as_str().map(str::to_string);
            node.route = p.get("route").map(|r| {
                Value::Array(vec![
                    r["provider_id"].clone(),
                    r["model_id"].clone(),
                    r["region"].clone(),
                    r["fallback"].clone(),
                    r["policy_digest"].clone(),
                ])
            });
            node.transport = p["transport"].as_str().map(str::to_string);
        }
        "node.skipped" => {
            node.state = "SKIPPED".into();
            node.attempt = 0;
            node.reason = p["reason"].as_str().map(str::to_string);
        }
        // Kept in the annex, folded after the log: it speaks only of an
        // attempt nothing ended since.
        "node.interrupted" if node.state == "RUNNING" => {
            node.reason = Some(why(p));
        }
        "node.repaired" => {
            let (tokens, cost, complete) = (
                node.spend_tokens,
                node.spend_cost_microunits,
                node.spend_complete,
            );
            *node = NodeView {
                spend_tokens: tokens,
                spend_cost_microunits: cost,
                spend_complete: complete,
                ..NodeView::default()
            };
        }
        _ => {}
    }
}
