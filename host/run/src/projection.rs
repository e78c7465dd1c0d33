//! The run's state, folded from its recorded events: what `bl graph
//! status` shows and what `approve` and `resume` decide from. Pure: it
//! takes the events (type and payload, in log order) and returns a view.

use std::collections::BTreeMap;

use serde_json::Value;

/// Defines a state as the log names it: bounded-loops' upper-case word,
/// shown and serialized as that word, and compared with it.
macro_rules! logged_state {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $word:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub enum $name {
            #[default]
            $($variant,)*
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The word the log records.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)*
                }
            }

            /// The state the log's `word` names.
            pub fn parse(word: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|s| s.as_str() == word)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, word: &&str) -> bool {
                self.as_str() == *word
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, state: &$name) -> bool {
                *self == state.as_str()
            }
        }
    };
}

logged_state! {
    /// A node's state, as its last event records it.
    NodeState {
        Pending => "PENDING",
        Ready => "READY",
        Starting => "STARTING",
        Running => "RUNNING",
        Gating => "GATING",
        AwaitingApproval => "AWAITING_APPROVAL",
        Succeeded => "SUCCEEDED",
        Failed => "FAILED",
        Skipped => "SKIPPED",
        Cancelled => "CANCELLED",
    }
}

logged_state! {
    /// A run's state, as its log records it. A run waiting for a decision
    /// or a budget is still `RUNNING` here, as bounded-loops has it.
    RunState {
        Pending => "PENDING",
        Running => "RUNNING",
        Succeeded => "SUCCEEDED",
        Failed => "FAILED",
    }
}

impl NodeState {
    /// Whether the node has ended (nothing more will happen to it this
    /// round).
    pub fn is_final(self) -> bool {
        matches!(
            self,
            NodeState::Succeeded | NodeState::Failed | NodeState::Skipped | NodeState::Cancelled
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    pub state: NodeState,
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
    /// A subgraph node whose child run paused: the approval nodes it waits
    /// on, by path from this run (`node/gate`).
    pub child_awaiting: Vec<String>,
    /// The attempt and repair round of its last `node.running`.
    started: Option<(u64, u64)>,
    /// The last re-drive of that attempt on record (0: none).
    redrives: u64,
    /// The attempt `reason` speaks of.
    reason_attempt: u64,
}

impl NodeView {
    /// Whether `reason` is about an attempt before the one it is on (a
    /// failed first attempt's words, while a second one was cut short).
    pub fn reason_is_earlier(&self) -> bool {
        self.reason.is_some() && self.reason_attempt < self.attempt
    }

    /// The attempt and the repair round it last started (a subgraph
    /// node's child run lies in the directory they name).
    pub fn started_in(&self) -> Option<(u64, u64)> {
        self.started
    }
}

/// The repair round an event's payload names (0 when it names none).
fn round_of(p: &Value) -> u64 {
    p["repair_round"].as_u64().unwrap_or(0)
}

impl Default for NodeView {
    fn default() -> Self {
        NodeView {
            state: NodeState::Pending,
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
            child_awaiting: Vec::new(),
            started: None,
            redrives: 0,
            reason_attempt: 0,
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
    pub run_state: RunState,
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
        matches!(self.run_state, RunState::Succeeded | RunState::Failed)
    }

    /// Nodes waiting for a human decision, in `order`: an approval node by
    /// its id, and for a subgraph node whose child run paused, the paths
    /// of the child's approval nodes (`node/gate`).
    /// A run that ended waits on nothing.
    pub fn awaiting<'a>(&self, order: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        if self.is_terminal() {
            return Vec::new();
        }
        order
            .into_iter()
            .flat_map(|id| {
                let node = self.node(id);
                match node.state {
                    NodeState::AwaitingApproval if !node.child_awaiting.is_empty() => {
                        node.child_awaiting
                    }
                    NodeState::AwaitingApproval => vec![id.to_string()],
                    _ => Vec::new(),
                }
            })
            .collect()
    }
}

/// Folds `(event_type, payload)` pairs, in log order.
pub fn project<'a>(events: impl IntoIterator<Item = (&'a str, &'a Value)>) -> RunView {
    let mut run = RunView {
        run_state: RunState::Pending,
        spend_complete: true,
        ..RunView::default()
    };
    for (kind, payload) in events {
        let node_id = payload["node_id"].as_str();
        match (kind, node_id) {
            ("run.created", _) => run.run_state = RunState::Pending,
            ("run.started", _) => run.run_state = RunState::Running,
            ("run.succeeded", _) => run.run_state = RunState::Succeeded,
            ("run.failed", _) => run.run_state = RunState::Failed,
            ("run.resumed", _) => run.resumes += 1,
            ("run.budget.paused", _) => {
                run.pauses += 1;
                run.budget_pause = Some(payload.clone());
            }
            (_, Some(id)) => {
                // A run that ended (it failed elsewhere while a child run
                // waited) pauses no more; its node still shows the wait it
                // was left in, as an approval node left waiting does.
                let pauses =
                    kind == "node.awaiting_approval" || kind == "node.child_awaiting_approval";
                if pauses && !run.is_terminal() {
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

/// The state an event's payload records (a word this version does not
/// know leaves the state as it was).
fn logged(p: &Value, was: NodeState) -> NodeState {
    p["state"]
        .as_str()
        .and_then(NodeState::parse)
        .unwrap_or(was)
}

fn fold_node(node: &mut NodeView, kind: &str, p: &Value) {
    let attempt = p["attempt"].as_u64();
    match kind {
        "node.ready"
        | "node.starting"
        | "node.running"
        | "node.gating"
        | "node.awaiting_approval" => {
            node.state = logged(p, node.state);
            node.attempt = attempt.unwrap_or(node.attempt);
            let key = (node.attempt, round_of(p));
            if kind == "node.running" && node.started != Some(key) {
                node.started = Some(key);
                node.redrives = 0;
            }
        }
        "node.spend" => match p.get("usage") {
            Some(u) => {
                node.spend_tokens += u["input_tokens"].as_u64().unwrap_or(0)
                    + u["output_tokens"].as_u64().unwrap_or(0);
                node.spend_cost_microunits += u["cost_microunits"].as_u64().unwrap_or(0);
            }
            None => node.spend_complete = false,
        },
        "node.attempt.failed" => {
            node.reason = Some(why(p));
            node.reason_attempt = attempt.unwrap_or(node.attempt);
        }
        "node.succeeded" | "node.failed" => {
            node.reason = (kind == "node.failed").then(|| why(p));
            node.state = logged(p, node.state);
            node.attempt = attempt.unwrap_or(node.attempt);
            node.reason_attempt = node.attempt;
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
            node.state = NodeState::Skipped;
            node.attempt = 0;
            node.reason = p["reason"].as_str().map(str::to_string);
        }
        "node.redrive" if node.started == Some((attempt.unwrap_or(0), round_of(p))) => {
            node.redrives = p["redrive"].as_u64().unwrap_or(node.redrives);
        }
        // Kept in the annex, folded after the log: it speaks of the open
        // attempt only if nothing ended, re-drove or repaired it since.
        "node.child_awaiting_approval"
            if matches!(node.state, NodeState::Running | NodeState::Gating)
                && node.started == Some((attempt.unwrap_or(0), round_of(p)))
                && p["execution"].as_u64().unwrap_or(0) > node.redrives =>
        {
            node.state = NodeState::AwaitingApproval;
            node.reason = Some(why(p));
            node.reason_attempt = node.attempt;
            node.child_awaiting = p["awaiting_approval"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|path| path.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
        }
        // Kept in the annex, folded after the log: it speaks only of an
        // attempt nothing ended since, and only of its execution a resume
        // has not taken up again (a later one may have died unstopped).
        "node.interrupted"
            if matches!(node.state, NodeState::Running | NodeState::Gating)
                && p["execution"].as_u64().unwrap_or(0) > node.redrives =>
        {
            node.reason = Some(why(p));
            node.reason_attempt = node.attempt;
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A stop says why on a node stopped at work or in its gate.
    #[test]
    fn an_interrupted_attempt_has_its_reason_in_its_gate_too() {
        let gating = json!({"node_id": "a", "state": "GATING", "attempt": 1});
        let stopped = json!({"node_id": "a", "attempt": 1, "execution": 1, "signal": 2,
                             "reason": "stopped by SIGINT before the attempt ended"});
        let view = project([
            ("run.started", &json!({})),
            ("node.gating", &gating),
            ("node.interrupted", &stopped),
        ]);
        assert_eq!(view.node("a").state, NodeState::Gating);
        let reason = view.node("a").reason.unwrap_or_default();
        assert!(reason.contains("stopped by SIGINT"), "{reason}");
    }

    /// A stop's reason is its execution's: once a resume took the attempt
    /// up again, an earlier stop no longer explains it.
    #[test]
    fn a_stop_explains_only_the_execution_it_stopped() {
        let running = json!({"node_id": "a", "state": "RUNNING", "attempt": 1});
        let stopped = |execution: u64| {
            json!({"node_id": "a", "attempt": 1, "execution": execution, "signal": 2,
                   "reason": format!("stopped by SIGINT (execution {execution})")})
        };
        let redrive = json!({"node_id": "a", "attempt": 1, "redrive": 1});
        let (first, second) = (stopped(1), stopped(2));
        let fold = |events: &[(&str, &Value)]| project(events.iter().copied());
        let started = ("run.started", &json!({}));
        let view = fold(&[
            started,
            ("node.running", &running),
            ("node.redrive", &redrive),
            ("node.interrupted", &first),
        ]);
        assert_eq!(view.node("a").reason, None, "execution 2 was not stopped");
        let view = fold(&[
            started,
            ("node.running", &running),
            ("node.redrive", &redrive),
            ("node.interrupted", &first),
            ("node.interrupted", &second),
        ]);
        assert_eq!(
            view.node("a").reason.as_deref(),
            Some("stopped by SIGINT (execution 2)")
        );
    }

    /// A failed attempt's reason stays on the node (as bounded-loops
    /// shows it), and is known to be that attempt's once another starts.
    #[test]
    fn a_failed_attempts_reason_is_known_as_earlier_once_another_runs() {
        let fold = |events: &[(&str, &Value)]| project(events.iter().copied());
        let started = ("run.started", &json!({}));
        let first = json!({"node_id": "a", "state": "RUNNING", "attempt": 1});
        let failed = json!({"node_id": "a", "attempt": 1, "reason": "the attempt's controller died 4 times"});
        let second = json!({"node_id": "a", "state": "RUNNING", "attempt": 2});
        let view = fold(&[
            started,
            ("node.running", &first),
            ("node.attempt.failed", &failed),
        ]);
        assert!(!view.node("a").reason_is_earlier(), "its own attempt's");
        let view = fold(&[
            started,
            ("node.running", &first),
            ("node.attempt.failed", &failed),
            ("node.running", &second),
        ]);
        let node = view.node("a");
        assert_eq!(
            node.reason.as_deref(),
            Some("the attempt's controller died 4 times")
        );
        assert!(
            node.reason_is_earlier(),
            "attempt 1's, while attempt 2 runs"
        );
    }

    /// A subgraph node whose child run paused awaits the child's nodes by
    /// path, until its attempt is re-driven or the run ends.
    #[test]
    fn a_paused_child_run_is_awaited_until_a_redrive_or_the_runs_end() {
        let running = json!({"node_id": "sub", "state": "RUNNING", "attempt": 1});
        let paused = json!({"node_id": "sub", "attempt": 1, "execution": 1,
                            "awaiting_approval": ["sub/gate"], "reason": "its child run awaits approval of sub/gate"});
        let redrive = json!({"node_id": "sub", "attempt": 1, "redrive": 1});
        let fold = |events: &[(&str, &Value)]| project(events.iter().copied());
        let started = ("run.started", &json!({}));
        let view = fold(&[
            started,
            ("node.running", &running),
            ("node.child_awaiting_approval", &paused),
        ]);
        assert_eq!(view.node("sub").state, NodeState::AwaitingApproval);
        assert_eq!(view.awaiting(["sub"]), vec!["sub/gate".to_string()]);
        let view = fold(&[
            started,
            ("node.running", &running),
            ("node.redrive", &redrive),
            ("node.child_awaiting_approval", &paused),
        ]);
        assert_eq!(view.node("sub").state, NodeState::Running, "taken up again");
        let view = fold(&[
            started,
            ("node.running", &running),
            ("run.failed", &json!({})),
            ("node.child_awaiting_approval", &paused),
        ]);
        assert!(view.awaiting(["sub"]).is_empty());
        assert_eq!(
            view.node("sub").state,
            NodeState::AwaitingApproval,
            "not RUNNING"
        );
        assert_eq!(view.pauses, 0);
        // Attempt 1 paused, was re-driven and failed; attempt 2's child
        // paused at its first execution: attempt 2 is what waits.
        let second = json!({"node_id": "sub", "state": "RUNNING", "attempt": 2});
        let paused_again = json!({"node_id": "sub", "attempt": 2, "execution": 1,
                                  "awaiting_approval": ["sub/gate"], "reason": "again"});
        let view = fold(&[
            started,
            ("node.running", &running),
            ("node.redrive", &redrive),
            ("node.running", &second),
            ("node.child_awaiting_approval", &paused),
            ("node.child_awaiting_approval", &paused_again),
        ]);
        assert_eq!(view.node("sub").state, NodeState::AwaitingApproval);
        assert_eq!(view.node("sub").reason.as_deref(), Some("again"));
        // A repair round started the node again: round 0's pause is stale.
        let round_one =
            json!({"node_id": "sub", "state": "RUNNING", "attempt": 1, "repair_round": 1});
        let view = fold(&[
            started,
            ("node.running", &running),
            ("node.repaired", &json!({"node_id": "sub"})),
            ("node.running", &round_one),
            ("node.child_awaiting_approval", &paused),
        ]);
        assert_eq!(view.node("sub").state, NodeState::Running);
        assert_eq!(view.node("sub").started_in(), Some((1, 1)));
    }

    #[test]
    fn states_are_the_logs_words_and_an_unknown_word_changes_nothing() {
        for state in NodeState::ALL {
            assert_eq!(NodeState::parse(state.as_str()), Some(*state));
            assert_eq!(json!(state), json!(state.as_str()));
        }
        let started = json!({"node_id": "a", "state": "RUNNING", "attempt": 1});
        let odd = json!({"node_id": "a", "state": "SOMEWHERE_ELSE", "attempt": 1});
        let view = project([
            ("run.started", &json!({})),
            ("node.running", &started),
            ("node.gating", &odd),
        ]);
        assert_eq!(view.node("a").state, NodeState::Running);
        assert_eq!(view.node("a").state, "RUNNING");
        assert_eq!(view.run_state, RunState::Running);
        assert!(!view.is_terminal());
    }
}
