//! Progress of a graph run on stderr. On a terminal: one live line per
//! running node and a summary bar (indicatif). Otherwise: one plain line
//! per node as it ends, and a summary. Nothing with `--json`, where stdout
//! carries only the result.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use bl_run::events::Event;
use bl_run::schedule::Schedule;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::output::errln;

/// The live view on a terminal.
struct Live {
    bars: MultiProgress,
    summary: ProgressBar,
    running: HashMap<String, ProgressBar>,
}

pub struct Progress {
    enabled: bool,
    live: Option<Live>,
    total: usize,
    done: usize,
    failed: usize,
    started: Instant,
    /// Why a node's last attempt failed, said if another one starts.
    retrying: HashMap<String, String>,
    /// Nodes whose finished turn their gate is judging.
    gating: std::collections::HashSet<String>,
}

impl Progress {
    pub fn new(schedule: &Schedule) -> Self {
        let enabled = !crate::output::json();
        let total = schedule.nodes.len();
        let live = (enabled && std::io::stderr().is_terminal()).then(|| {
            let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let summary = bars.add(ProgressBar::new(total as u64));
            summary.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} nodes ended  {msg}  {elapsed}")
                    .expect("a valid template"),
            );
            Live {
                bars,
                summary,
                running: HashMap::new(),
            }
        });
        Progress {
            enabled,
            live,
            total,
            done: 0,
            failed: 0,
            started: Instant::now(),
            retrying: HashMap::new(),
            gating: Default::default(),
        }
    }

    /// A line for the record of what happened, above the live lines.
    fn line(&self, text: String) {
        match &self.live {
            Some(live) => live.bars.suspend(|| errln!("{text}")),
            None => errln!("{text}"),
        }
    }

    fn ended(&mut self, node: &str) {
        self.done += 1;
        self.stopped(node);
    }

    /// A node's live line goes: it ended, or a stop interrupted it.
    fn stopped(&mut self, node: &str) {
        if let Some(live) = &mut self.live {
            if let Some(bar) = live.running.remove(node) {
                bar.finish_and_clear();
                live.bars.remove(&bar);
            }
            live.summary.set_position(self.done as u64);
            live.summary.set_message(format!("{} failed", self.failed));
        }
    }
}

impl bl_app::graph_run::Watch for Progress {
    fn event(&mut self, event: &Event) {
        if !self.enabled {
            return;
        }
        let node = event.payload["node_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match event.kind {
            "node.running" => {
                self.gating.remove(&node);
                if let Some(line) = self.retrying.remove(&node) {
                    self.line(line);
                }
                if let Some(live) = &mut self.live {
                    let bar = live.running.entry(node.clone()).or_insert_with(|| {
                        let bar = live
                            .bars
                            .insert_before(&live.summary, ProgressBar::new_spinner());
                        bar.enable_steady_tick(Duration::from_millis(120));
                        bar
                    });
                    bar.set_message(format!(
                        "{node}: running (attempt {})",
                        event.payload["attempt"]
                    ));
                }
            }
            "node.gating" => {
                self.gating.insert(node.clone());
                if let Some(bar) = self.live.as_ref().and_then(|l| l.running.get(&node)) {
                    bar.set_message(format!("{node}: gating"));
                }
            }
            "node.succeeded" => {
                self.ended(&node);
                self.line(format!("  ✓ {node}"));
            }
            "node.failed" => {
                self.retrying.remove(&node);
                self.failed += 1;
                self.ended(&node);
                self.line(format!(
                    "  ✗ {node} ({}): {}",
                    event.payload["cause"].as_str().unwrap_or_default(),
                    bl_run::projection::why(&event.payload)
                ));
            }
            // Said when the next attempt starts: a last attempt's failure
            // is the node's, said once by its ✗ line.
            "node.attempt.failed" => {
                self.retrying.insert(
                    node.clone(),
                    format!(
                        "  ! {node}: attempt {} failed ({}): {}; trying again",
                        event.payload["attempt"],
                        event.payload["cause"].as_str().unwrap_or_default(),
                        bl_run::projection::why(&event.payload)
                    ),
                );
            }
            "node.interrupted" => {
                self.stopped(&node);
                let in_gate = self.gating.remove(&node);
                self.line(if in_gate {
                    format!("  ‖ {node}: stopped in its gate; the resume judges its finished turn again")
                } else {
                    format!("  ‖ {node}: interrupted, to be re-driven on resume")
                });
            }
            "node.redrive" => self.line(format!("  ↻ {node}: its unfinished attempt is taken up again")),
            // Observed only when a resume judges a finished turn again.
            "node.replied" => self.line(format!(
                "  ↻ {node}: judging again the turn its worker finished before the stop (no new turn)"
            )),
            "node.skipped" => {
                self.ended(&node);
                self.line(format!("  - {node} skipped"));
            }
            "node.awaiting_approval" => self.line(format!("  ⏸ {node} awaits your decision")),
            _ => {}
        }
    }

    fn earlier(&mut self, ended: usize, failed: usize) {
        (self.done, self.failed) = (ended, failed);
        self.stopped("");
        if self.enabled {
            self.line(format!(
                "  {ended} node(s) had already ended: kept as they were, not run again"
            ));
        }
    }

    fn finish(&mut self) {
        if !self.enabled {
            return;
        }
        if let Some(live) = &self.live {
            for bar in live.running.values() {
                bar.finish_and_clear();
            }
            live.summary.finish_and_clear();
        }
        errln!(
            "{}/{} nodes ended ({} failed) in {:.1?}",
            self.done,
            self.total,
            self.failed,
            self.started.elapsed()
        );
    }
}
