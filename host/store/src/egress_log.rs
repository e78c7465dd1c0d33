//! The run's egress record, `<run>/egress-events.jsonl`: every decision of
//! the egress broker, in the event log's hash-chained format with the run's
//! identity, each durable before the broker goes on (an authorization is on
//! disk before the request leaves). It mirrors `controller-events.jsonl`
//! and is kept apart from it, whose readers (bounded-loops' among them)
//! accept only the controller's own event types.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bl_core::egress_audit::{EgressAudit, EgressEvent};

use crate::log::EventLog;
use crate::provable::EVENTS_FILE;

/// The file name, in the run directory.
pub const EGRESS_EVENTS: &str = "egress-events.jsonl";

/// An open egress record, as an [`EgressAudit`] adapter.
pub struct EgressLog {
    log: Mutex<EventLog>,
    /// Distinguishes this process's keys for decisions without a lease.
    nonce: String,
    count: AtomicU64,
    clock: fn() -> String,
}

impl EgressLog {
    /// Opens (or continues) the egress record of the run in `run_dir`,
    /// under the identity its event log carries. `clock` gives each
    /// record's RFC 3339 time.
    pub fn open(run_dir: &Path, clock: fn() -> String) -> Result<EgressLog, String> {
        let controller = run_dir.join(EVENTS_FILE);
        let bytes = std::fs::read(&controller).map_err(|e| {
            format!(
                "{}: {e}; the egress record belongs in a run directory with an event log",
                controller.display()
            )
        })?;
        let (head, _) =
            crate::verify_chain(&bytes).map_err(|e| format!("{}: {e}", controller.display()))?;
        let identity = head.identity.ok_or_else(|| {
            format!(
                "{} is empty: the run has no identity yet",
                controller.display()
            )
        })?;
        let log =
            EventLog::open(&run_dir.join(EGRESS_EVENTS), identity).map_err(|e| e.to_string())?;
        let mut nonce = [0u8; 6];
        getrandom::fill(&mut nonce).map_err(|e| e.to_string())?;
        Ok(EgressLog {
            log: Mutex::new(log),
            nonce: hex::encode(nonce),
            count: AtomicU64::new(0),
            clock,
        })
    }
}

impl EgressAudit for EgressLog {
    fn record(&self, event: EgressEvent) -> Result<(), String> {
        let n = self.count.fetch_add(1, Ordering::SeqCst);
        let key = format!(
            "egress:{}:{n}",
            event.lease_id.as_deref().unwrap_or(&self.nonce)
        );
        let payload = serde_json::json!({
            "connection_id": event.connection_id, "lease_id": event.lease_id, "detail": event.detail,
        });
        self.log
            .lock()
            .map_err(|_| "the egress log's lock is poisoned".to_string())?
            .append_durable(&key, event.kind, &payload, &(self.clock)())
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}
