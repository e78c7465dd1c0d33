//! When each attempt of a run ran, folded from its recorded events: the
//! spans behind `bl graph metrics` and the arena's timeline. Pure: events
//! in, spans out; the clock is the one the log recorded.
//!
//! The log's timestamps have one-second resolution (bounded-loops'
//! format), so durations are whole seconds. The order of events is exact,
//! so how many attempts ran at once is counted from it, not from times.

use serde_json::Value;

/// One recorded event, as the timeline reads it.
#[derive(Debug, Clone, Copy)]
pub struct TimedEvent<'a> {
    pub sequence: u64,
    /// `2026-12-03T04:09:14Z`, as recorded.
    pub timestamp: &'a str,
    pub event_type: &'a str,
    pub payload: &'a Value,
}

/// A point in the run: its place in the log, and its time when the
/// timestamp reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub sequence: u64,
    /// Seconds since the Unix epoch.
    pub unix_s: Option<u64>,
}

impl Mark {
    fn of(event: &TimedEvent) -> Mark {
        Mark {
            sequence: event.sequence,
            unix_s: humantime::parse_rfc3339(event.timestamp)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
        }
    }

    /// Whole seconds from `self` to `later`, when both times read.
    pub fn seconds_to(&self, later: &Mark) -> Option<u64> {
        Some(later.unix_s?.saturating_sub(self.unix_s?))
    }
}

/// One attempt of one node: from the moment it was started to the event
/// that ended it. An approval node's wait is a [`Wait`], not a span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub node: String,
    pub attempt: u64,
    /// When the node became ready, for the first attempt of a round (a
    /// retry starts at once, with no wait in the queue).
    pub ready: Option<Mark>,
    pub start: Mark,
    /// `None` while it runs (or when the log ends with it running).
    pub end: Option<Mark>,
    /// `succeeded`, `failed` (a retry may follow), or `running`.
    pub outcome: &'static str,
}

impl Span {
    /// Seconds in the queue: from ready to started.
    pub fn queue_s(&self) -> Option<u64> {
        self.ready?.seconds_to(&self.start)
    }

    /// Seconds it ran.
    pub fn duration_s(&self) -> Option<u64> {
        self.start.seconds_to(self.end.as_ref()?)
    }
}

/// An approval node waiting for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub node: String,
    pub from: Mark,
    /// The decision, when one was recorded.
    pub until: Option<Mark>,
}

/// Every span and wait of a run, in the order they began.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    pub spans: Vec<Span>,
    pub waits: Vec<Wait>,
    pub first: Option<Mark>,
    pub last: Option<Mark>,
    /// The most attempts running at one time, counted in log order.
    pub max_concurrent: usize,
    /// Repair rounds: nodes sent back to run again by a repair.
    pub repairs: usize,
}

impl Timeline {
    /// Seconds from the first event to the last.
    pub fn wall_s(&self) -> Option<u64> {
        self.first?.seconds_to(self.last.as_ref()?)
    }

    /// Seconds of attempts, summed (what ran in parallel counts each time).
    pub fn busy_s(&self) -> u64 {
        self.spans.iter().filter_map(Span::duration_s).sum()
    }
}

/// Folds events, in log order, into the run's timeline.
pub fn timeline<'a>(events: impl IntoIterator<Item = TimedEvent<'a>>) -> Timeline {
    let mut line = Timeline::default();
    let mut ready: std::collections::HashMap<String, Mark> = Default::default();
    let mut running = 0usize;
    for event in events {
        let mark = Mark::of(&event);
        line.first.get_or_insert(mark);
        line.last = Some(mark);
        let Some(node) = event.payload["node_id"].as_str() else {
            continue;
        };
        let attempt = event.payload["attempt"].as_u64().unwrap_or(1);
        let open = line
            .spans
            .iter()
            .rposition(|s| s.node == node && s.end.is_none());
        match event.event_type {
            "node.ready" => {
                ready.insert(node.to_string(), mark);
            }
            "node.starting" | "node.running" if open.is_none() => {
                line.spans.push(Span {
                    node: node.to_string(),
                    attempt,
                    ready: ready.remove(node),
                    start: mark,
                    end: None,
                    outcome: "running",
                });
                running += 1;
                line.max_concurrent = line.max_concurrent.max(running);
            }
            "node.succeeded" | "node.failed" | "node.attempt.failed" => {
                if let Some(i) = open {
                    let span = &mut line.spans[i];
                    span.end = Some(mark);
                    span.outcome = if event.event_type == "node.succeeded" {
                        "succeeded"
                    } else {
                        "failed"
                    };
                    running -= 1;
                } else if let Some(wait) = line
                    .waits
                    .iter_mut()
                    .rfind(|w| w.node == node && w.until.is_none())
                {
                    wait.until = Some(mark);
                }
            }
            "node.repaired" => line.repairs += 1,
            "node.awaiting_approval" => line.waits.push(Wait {
                node: node.to_string(),
                from: mark,
                until: None,
            }),
            _ => {}
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(events: &[(u64, &str, &str, Value)]) -> Timeline {
        timeline(events.iter().map(|(seq, ts, kind, payload)| TimedEvent {
            sequence: *seq,
            timestamp: ts,
            event_type: kind,
            payload,
        }))
    }

    #[test]
    fn two_attempts_that_overlap_count_as_two_at_once_and_a_retry_is_a_new_span() {
        let t = "2026-12-03T04:00:0";
        let line = at(&[
            (1, &format!("{t}0Z"), "run.started", json!({})),
            (
                2,
                &format!("{t}0Z"),
                "node.ready",
                json!({"node_id": "a", "attempt": 1}),
            ),
            (
                3,
                &format!("{t}1Z"),
                "node.starting",
                json!({"node_id": "a", "attempt": 1}),
            ),
            (
                4,
                &format!("{t}1Z"),
                "node.starting",
                json!({"node_id": "b", "attempt": 1}),
            ),
            (
                5,
                &format!("{t}3Z"),
                "node.attempt.failed",
                json!({"node_id": "a", "attempt": 1}),
            ),
            (
                6,
                &format!("{t}3Z"),
                "node.running",
                json!({"node_id": "a", "attempt": 2}),
            ),
            (
                7,
                &format!("{t}4Z"),
                "node.succeeded",
                json!({"node_id": "b", "attempt": 1}),
            ),
            (
                8,
                &format!("{t}6Z"),
                "node.succeeded",
                json!({"node_id": "a", "attempt": 2}),
            ),
            (
                9,
                &format!("{t}6Z"),
                "node.awaiting_approval",
                json!({"node_id": "r", "attempt": 1}),
            ),
            (
                10,
                &format!("{t}9Z"),
                "node.succeeded",
                json!({"node_id": "r", "attempt": 1}),
            ),
        ]);
        assert_eq!(line.max_concurrent, 2);
        assert_eq!(line.spans.len(), 3);
        let (a1, b, a2) = (&line.spans[0], &line.spans[1], &line.spans[2]);
        assert_eq!(
            (a1.outcome, a1.queue_s(), a1.duration_s()),
            ("failed", Some(1), Some(2))
        );
        assert_eq!((b.queue_s(), b.duration_s()), (None, Some(3)));
        assert_eq!(
            (a2.attempt, a2.outcome, a2.duration_s()),
            (2, "succeeded", Some(3))
        );
        assert_eq!(
            line.waits[0].from.seconds_to(&line.waits[0].until.unwrap()),
            Some(3)
        );
        assert_eq!((line.wall_s(), line.busy_s()), (Some(9), 8));
    }

    #[test]
    fn an_attempt_the_log_ends_in_is_still_running() {
        let line = at(&[(
            1,
            "2026-12-03T04:00:00Z",
            "node.starting",
            json!({"node_id": "a"}),
        )]);
        assert_eq!(line.spans[0].outcome, "running");
        assert_eq!(line.spans[0].duration_s(), None);
    }
}
