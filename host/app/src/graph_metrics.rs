//! `bl graph metrics`: a run's counts, times, spend and the parallelism it
//! achieved, per node and for the run, from its verified event log (the
//! runtime API's `status` and `subscribe`).
//!
//! Times are whole seconds, as the log records them; how many attempts
//! ran at once is counted from the order of events, which is exact.

use std::fmt::Write as _;
use std::path::Path;

use bl_graph::model::Named;
use bl_run::timeline::{TimedEvent, Timeline, timeline};
use serde_json::{Value, json};

use crate::AppError;
use crate::graph_run::RunStatus;
use crate::runtime::GraphRuntime;

/// A run's metrics: its status, and when each attempt ran.
pub struct RunMetrics {
    pub status: RunStatus,
    pub timeline: Timeline,
}

/// One node's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFigures {
    pub node: String,
    pub kind: String,
    pub state: String,
    pub attempts: usize,
    pub failed_attempts: usize,
    /// Seconds its attempts ran, summed.
    pub run_s: u64,
    /// Seconds it waited to start once ready.
    pub queue_s: u64,
    /// Seconds an approval node waited for a person.
    pub waited_s: u64,
    pub tokens: u64,
    pub cost_microunits: u64,
}

impl GraphRuntime {
    /// The run's metrics, read through the verified log.
    pub fn metrics(&self, dir: &Path) -> Result<RunMetrics, AppError> {
        let status = self.status(dir)?;
        let events = self.subscribe(dir, 0).read_to_end()?;
        let timeline = timeline(events.iter().map(|e| TimedEvent {
            sequence: e.sequence,
            timestamp: e.line["timestamp"].as_str().unwrap_or_default(),
            event_type: &e.event_type,
            payload: &e.payload,
        }));
        Ok(RunMetrics { status, timeline })
    }
}

impl RunMetrics {
    /// Each node's figures, in the manifest's order.
    pub fn nodes(&self) -> Vec<NodeFigures> {
        let (graph, view) = (&self.status.run.graph, &self.status.view);
        graph
            .nodes
            .iter()
            .map(|n| {
                let spans = || self.timeline.spans.iter().filter(|s| s.node == n.id);
                let seen = view.node(&n.id);
                NodeFigures {
                    node: n.id.clone(),
                    kind: n.kind.name().to_string(),
                    state: seen.state.as_str().to_string(),
                    attempts: spans().count(),
                    failed_attempts: spans().filter(|s| s.outcome == "failed").count(),
                    run_s: spans().filter_map(|s| s.duration_s()).sum(),
                    queue_s: spans().filter_map(|s| s.queue_s()).sum(),
                    waited_s: self
                        .timeline
                        .waits
                        .iter()
                        .filter(|w| w.node == n.id)
                        .filter_map(|w| w.from.seconds_to(w.until.as_ref()?))
                        .sum(),
                    tokens: seen.spend_tokens,
                    cost_microunits: seen.spend_cost_microunits,
                }
            })
            .collect()
    }

    /// Attempt-seconds over wall seconds: how many ran at once on average
    /// (`None` for a run shorter than the log's one-second clock).
    pub fn mean_parallelism(&self) -> Option<f64> {
        let wall = self.timeline.wall_s().filter(|w| *w > 0)?;
        Some(self.timeline.busy_s() as f64 / wall as f64)
    }

    pub fn to_json(&self) -> Value {
        let view = &self.status.view;
        let nodes = self.nodes();
        let count = |state: &str| nodes.iter().filter(|n| n.state == state).count();
        let spans: Vec<Value> = self
            .timeline
            .spans
            .iter()
            .map(|s| {
                json!({
                    "node": s.node, "attempt": s.attempt, "outcome": s.outcome,
                    "start_sequence": s.start.sequence,
                    "end_sequence": s.end.map(|e| e.sequence),
                    "queue_s": s.queue_s(), "run_s": s.duration_s(),
                })
            })
            .collect();
        let nodes_json: Vec<Value> = nodes
            .iter()
            .map(|n| {
                json!({
                    "node": n.node, "kind": n.kind, "state": n.state, "attempts": n.attempts,
                    "failed_attempts": n.failed_attempts, "run_s": n.run_s, "queue_s": n.queue_s,
                    "waited_for_approval_s": n.waited_s, "tokens": n.tokens,
                    "cost_microunits": n.cost_microunits,
                })
            })
            .collect();
        json!({
            "run": self.status.run.dir.display().to_string(),
            "state": view.run_state.as_str(),
            "clock_resolution_s": 1,
            "totals": {
                "nodes": nodes.len(),
                "succeeded": count("SUCCEEDED"),
                "failed": count("FAILED"),
                "skipped": count("SKIPPED"),
                "attempts": self.timeline.spans.len(),
                "failed_attempts": nodes.iter().map(|n| n.failed_attempts).sum::<usize>(),
                "repairs": self.timeline.repairs,
                "resumes": view.resumes,
                "events": self.status.head.sequence,
                "wall_s": self.timeline.wall_s(),
                "attempt_s": self.timeline.busy_s(),
                "queue_s": nodes.iter().map(|n| n.queue_s).sum::<u64>(),
                "waited_for_approval_s": nodes.iter().map(|n| n.waited_s).sum::<u64>(),
                "tokens": view.tokens,
                "cost_microunits": view.cost_microunits,
                "spend_complete": view.spend_complete,
            },
            "parallelism": {
                "max_at_once": self.timeline.max_concurrent,
                "mean": self.mean_parallelism(),
            },
            "nodes": nodes_json,
            "attempts": spans,
        })
    }

    /// The metrics as text: the run's figures, then a table of the nodes.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        let doc = self.to_json();
        let (totals, parallel) = (&doc["totals"], &doc["parallelism"]);
        let seconds = |v: &Value| v.as_u64().map_or("—".to_string(), |s| format!("{s} s"));
        writeln!(
            text,
            "run          : {} ({})",
            self.status.run.dir.display(),
            self.status.run_in_words()
        )
        .expect("a String takes any text");
        writeln!(
            text,
            "nodes        : {} ({} succeeded, {} failed, {} skipped)",
            totals["nodes"], totals["succeeded"], totals["failed"], totals["skipped"]
        )
        .expect("a String takes any text");
        writeln!(
            text,
            "attempts     : {} ({} failed), {} repairs, {} resumes, {} events",
            totals["attempts"],
            totals["failed_attempts"],
            totals["repairs"],
            totals["resumes"],
            totals["events"]
        )
        .expect("a String takes any text");
        writeln!(
            text,
            "time         : {} wall, {} in attempts, {} queued, {} waiting for approval",
            seconds(&totals["wall_s"]),
            seconds(&totals["attempt_s"]),
            seconds(&totals["queue_s"]),
            seconds(&totals["waited_for_approval_s"])
        )
        .expect("a String takes any text");
        writeln!(
            text,
            "parallelism  : at most {} at once (counted in log order), {} on average",
            parallel["max_at_once"],
            parallel["mean"].as_f64().map_or(
                "— (shorter than the log's one-second clock)".to_string(),
                |m| format!("{m:.2}")
            )
        )
        .expect("a String takes any text");
        writeln!(
            text,
            "spend        : {} tokens, {} microunits{}",
            totals["tokens"],
            totals["cost_microunits"],
            if totals["spend_complete"] == true {
                ""
            } else {
                " (some spend was not reported)"
            }
        )
        .expect("a String takes any text");
        writeln!(text, "times are whole seconds, as the log records them\n")
            .expect("a String takes any text");
        let mut rows = vec![
            [
                "NODE", "KIND", "STATE", "ATTEMPTS", "RUN", "QUEUED", "WAITED", "TOKENS", "COST",
            ]
            .map(String::from),
        ];
        for n in self.nodes() {
            rows.push([
                n.node,
                n.kind,
                n.state,
                format!("{} ({} failed)", n.attempts, n.failed_attempts),
                format!("{} s", n.run_s),
                format!("{} s", n.queue_s),
                format!("{} s", n.waited_s),
                n.tokens.to_string(),
                n.cost_microunits.to_string(),
            ]);
        }
        for row in bl_core::table::table_lines(&rows) {
            text.push_str(&row);
            text.push('\n');
        }
        text
    }
}
