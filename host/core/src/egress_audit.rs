//! The egress audit port: every decision of the egress broker, and where
//! it goes. The broker (bl-egress) produces [`EgressEvent`]s; adapters
//! (the run's `egress-events.jsonl` in bl-store, stderr in the CLI, memory
//! in tests) record them.

use serde_json::Value;

/// One decision of the broker, for the run's record. Never carries a
/// credential or request/response bytes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EgressEvent {
    /// `lease.issued`, `egress.denied`, `egress.authorized`,
    /// `egress.redirect` or `egress.completed`.
    pub kind: &'static str,
    pub connection_id: String,
    pub lease_id: Option<String>,
    pub detail: Value,
}

/// Where the broker's decisions go (a run's `egress-events.jsonl`). A
/// decision that lets a request out must be recorded first: if recording
/// `egress.authorized` or `egress.redirect` fails, the request is not sent.
pub trait EgressAudit: Send + Sync {
    fn record(&self, event: EgressEvent) -> Result<(), AuditError>;
}

/// Why a decision could not be recorded. Either way the request it would
/// have let out is not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    /// The record could not be written; the store's reason, which names
    /// the file.
    #[error("{0}")]
    Unwritable(String),
    /// A writer panicked while holding the shared record.
    #[error("the egress log's lock is poisoned")]
    Poisoned,
}
