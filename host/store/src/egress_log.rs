//! The run's egress record, `<run>/egress-events.jsonl`: every decision of
//! the egress broker, in the event log's hash-chained format with the run's
//! identity, each durable before the broker goes on (an authorization is on
//! disk before the request leaves). It mirrors `controller-events.jsonl`
//! and is kept apart from it, whose readers (bounded-loops' among them)
//! accept only the controller's own event types.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bl_core::egress_audit::{AuditError, EgressAudit, EgressEvent};

use crate::chain::ChainError;
use crate::log::{EventLog, StoreError};
use crate::provable::EVENTS_FILE;

/// The file name, in the run directory.
pub const EGRESS_EVENTS: &str = "egress-events.jsonl";

/// Why the egress record could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum EgressLogError {
    #[error(
        "{}: {source}; the egress record belongs in a run directory with an event log",
        path.display()
    )]
    NoRun {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Chain { path: PathBuf, source: ChainError },
    #[error("{} is empty: the run has no identity yet", path.display())]
    NoIdentity { path: PathBuf },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no randomness for the record's nonce: {0}")]
    Random(String),
}

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
    pub fn open(run_dir: &Path, clock: fn() -> String) -> Result<EgressLog, EgressLogError> {
        let controller = run_dir.join(EVENTS_FILE);
        // The controller's lines may still be staged beside its log.
        let bytes =
            crate::staged::read_log(&controller).map_err(|source| EgressLogError::NoRun {
                path: controller.clone(),
                source,
            })?;
        let (head, _) = crate::verify_chain(&bytes).map_err(|source| EgressLogError::Chain {
            path: controller.clone(),
            source,
        })?;
        let identity = head
            .identity
            .ok_or(EgressLogError::NoIdentity { path: controller })?;
        let log = EventLog::open(&run_dir.join(EGRESS_EVENTS), identity)?;
        let mut nonce = [0u8; 6];
        getrandom::fill(&mut nonce).map_err(|e| EgressLogError::Random(e.to_string()))?;
        Ok(EgressLog {
            log: Mutex::new(log),
            nonce: hex::encode(nonce),
            count: AtomicU64::new(0),
            clock,
        })
    }
}

impl EgressAudit for EgressLog {
    fn record(&self, event: EgressEvent) -> Result<(), AuditError> {
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
            .map_err(|_| AuditError::Poisoned)?
            .append_durable(&key, event.kind, &payload, &(self.clock)())
            .map(|_| ())
            .map_err(|e| AuditError::Unwritable(e.to_string()))
    }
}
