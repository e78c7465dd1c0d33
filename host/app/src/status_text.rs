//! A run's status as a person reads it (`bl graph status` without
//! `--json`): its state in words, which agents worked, and a table of the
//! nodes. Like the Markdown view, a projection of the local log.

use std::fmt::Write as _;

use bl_graph::model::Named;
use bl_run::projection::{NodeState, NodeView, RunState, RunView};

use crate::graph_run::RunStatus;

impl RunStatus {
    /// The status as text: the run's state, agents and where it was read
    /// from, then a table of the nodes.
    pub fn to_text(&self) -> String {
        let (run, view) = (&self.run, &self.view);
        let mut text = String::new();
        writeln!(text, "run       : {}", run.dir.display()).expect("a String takes any text");
        writeln!(text, "state     : {}", self.run_in_words()).expect("a String takes any text");
        writeln!(text, "agents    : {}", agents_in_words(&run.plan))
            .expect("a String takes any text");
        writeln!(
            text,
            "read from : this run's own event log, on this machine (`bl verify {}` checks it)",
            run.dir.display()
        )
        .expect("a String takes any text");
        text.push('\n');
        let mut rows = vec![
            [
                "NODE",
                "KIND",
                "STATE",
                "ISOLATION",
                "EFFECTS",
                "ARTIFACTS",
                "REASON",
            ]
            .map(String::from),
        ];
        for node in &run.graph.nodes {
            let n = view.node(&node.id);
            let effects: Vec<&str> = node.effects.iter().map(|e| e.name()).collect();
            let artifact = shown_artifact(node, &n.artifact_digests, 20);
            let (state, reason) = self.node_in_words(&n);
            rows.push([
                node.id.clone(),
                node.kind.name().to_string(),
                state,
                node.isolation.name().to_string(),
                effects.join(","),
                artifact,
                reason.unwrap_or_else(|| "-".into()),
            ]);
        }
        for row in bl_core::table::table_lines(&rows) {
            text.push_str(&row);
            text.push('\n');
        }
        // Who decided each approval, and whether a person did.
        if let Ok(record) = bl_store::Approvals::new(&run.dir).read() {
            let decisions = record
                .commits
                .iter()
                .map(|c| {
                    (
                        "approved",
                        &c.node_id,
                        &c.decided_by,
                        &c.decided_by_source,
                        c.repair_round,
                    )
                })
                .chain(record.rejections.iter().map(|r| {
                    (
                        "rejected",
                        &r.node_id,
                        &r.decided_by,
                        &r.decided_by_source,
                        r.repair_round,
                    )
                }));
            for (decision, node, by, source, round) in decisions {
                let who = match source.as_str() {
                    "agent" => format!("{by}, an agent (not a person)"),
                    "recorded" => format!("{by}, from recorded decisions"),
                    _ => by.clone(),
                };
                writeln!(
                    text,
                    "decision  : {node} {decision} by {who}, round {round}"
                )
                .expect("a String takes any text");
            }
        }
        text
    }
}

impl RunStatus {
    /// The run's state in words (see [`state_in_words`]).
    pub(crate) fn run_in_words(&self) -> String {
        let order = self.run.graph.nodes.iter().map(|n| n.id.as_str());
        state_in_words(&self.view, &self.view.awaiting(order), self.live)
    }

    /// A node's state and why, as a person reads them. One in flight in a
    /// run no process drives is INTERRUPTED: a stop or a death cut its
    /// attempt short (`--json` says RUNNING, as bounded-loops does).
    pub(crate) fn node_in_words(&self, n: &NodeView) -> (String, Option<String>) {
        let cut_short = matches!(
            n.state,
            NodeState::Starting | NodeState::Running | NodeState::Gating
        ) && !self.live
            && self.view.run_state == RunState::Running;
        let reason = match (n.state, &n.reason) {
            (NodeState::Succeeded, _) => None,
            // An earlier attempt's failure does not say why this one was
            // cut short.
            (_, Some(reason)) if !(cut_short && n.reason_is_earlier()) => Some(reason.clone()),
            // Its controller died (kill -9, a crash) with no stop on record.
            (_, _) if cut_short => Some(
                "its controller ended before the attempt did (killed, or the machine stopped); `bl graph resume` re-drives it".into(),
            ),
            (_, _) => None,
        };
        let state = if cut_short {
            "INTERRUPTED".to_string()
        } else {
            n.state.to_string()
        };
        (state, reason)
    }
}

/// The run's state as a person reads it: a run waiting for a decision or a
/// larger budget is PAUSED, though its log (and `--json`, as bounded-loops
/// defines it) still says RUNNING.
pub fn state_in_words(view: &RunView, awaiting: &[String], live: bool) -> String {
    if view.run_state != RunState::Running {
        return view.run_state.to_string();
    }
    if !awaiting.is_empty() {
        return format!(
            "PAUSED, waiting for your decision on {}",
            awaiting.join(", ")
        );
    }
    if let Some(pause) = &view.budget_pause {
        let reason = pause["reason"]
            .as_str()
            .unwrap_or("a budget ceiling was reached");
        return format!("PAUSED, {reason}");
    }
    if live {
        "RUNNING".into()
    } else {
        "STOPPED before it ended: `bl graph resume` continues it".into()
    }
}

/// Which agents did the work: the providers the plan bound, and whether
/// they were live or recorded replies.
pub fn agents_in_words(plan: &bl_graph::Plan) -> String {
    let providers: std::collections::BTreeSet<&str> = plan
        .node_bindings
        .values()
        .map(|b| b.provider_id.as_str())
        .collect();
    if providers.is_empty() {
        return "none (no node calls an agent)".into();
    }
    providers
        .into_iter()
        .map(|p| {
            if p == bl_workers::recorded::PROVIDER {
                "recorded replies (no agent was called)".to_string()
            } else {
                format!("{p} (live)")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The artifact a person looks for in a node's line, cut to `width`: its
/// first declared file (what reaches the outbox), which the log lists
/// after its reply; else its first artifact. `+N` counts the others
/// (`bl graph artifacts` lists them all).
pub fn shown_artifact(
    node: &bl_graph::model::GraphNode,
    digests: &[String],
    width: usize,
) -> String {
    let files = node
        .artifact_ports
        .iter()
        .filter(|p| p.direction == bl_graph::model::Direction::Output && p.path.is_some())
        .count();
    let at = if files > 0 && digests.len() >= files {
        digests.len() - files
    } else {
        0
    };
    let Some(digest) = digests.get(at) else {
        return "-".into();
    };
    let more = match digests.len() - 1 {
        0 => String::new(),
        n => format!(" +{n}"),
    };
    format!("{}...{more}", &digest[..digest.len().min(width)])
}
