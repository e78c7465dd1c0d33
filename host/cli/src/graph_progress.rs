//! Progress of a graph run on stderr: one line per node as it starts and
//! ends, and a summary line. Nothing with `--json`, where stdout carries
//! only the result.

use std::io::IsTerminal;
use std::time::Instant;

use bl_run::events::Event;
use bl_run::schedule::Schedule;

use crate::output::errln;

pub struct Progress {
    enabled: bool,
    terminal: bool,
    total: usize,
    done: usize,
    failed: usize,
    started: Instant,
}

impl Progress {
    pub fn new(schedule: &Schedule) -> Self {
        Progress {
            enabled: !crate::output::json(),
            terminal: std::io::stderr().is_terminal(),
            total: schedule.nodes.len(),
            done: 0,
            failed: 0,
            started: Instant::now(),
        }
    }

    pub fn event(&mut self, event: &Event) {
        if !self.enabled {
            return;
        }
        let node = event.payload["node_id"].as_str().unwrap_or_default();
        let line = match event.kind {
            "node.running" if self.terminal => {
                format!("  … {node} running (attempt {})", event.payload["attempt"])
            }
            "node.succeeded" => {
                self.done += 1;
                format!("  ✓ {node}")
            }
            "node.failed" => {
                self.done += 1;
                self.failed += 1;
                format!(
                    "  ✗ {node} ({})",
                    event.payload["cause"].as_str().unwrap_or_default()
                )
            }
            "node.skipped" => {
                self.done += 1;
                format!("  - {node} skipped")
            }
            "node.awaiting_approval" => format!("  ? {node} awaits approval"),
            bl_run::executor::NOTE => format!(
                "  ! {node}: {}",
                event.payload["detail"].as_str().unwrap_or_default()
            ),
            _ => return,
        };
        errln!("{line}");
    }

    pub fn finish(&self) {
        if self.enabled {
            errln!(
                "{}/{} nodes ended ({} failed) in {:.1?}",
                self.done,
                self.total,
                self.failed,
                self.started.elapsed()
            );
        }
    }
}
