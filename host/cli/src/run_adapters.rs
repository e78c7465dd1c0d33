//! The adapters the graph executor's ports are composed with: the event
//! log, the artifact store, the approvals file and the publication ledger
//! of one run directory (all bl-store).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bl_run::events::Event;
use bl_run::executor::{Artifacts, Decisions, Journal, Ledger, Published, RunError};
use bl_store::{ArtifactMeta, ArtifactStore, EventLog, RunIdentity};
use serde_json::Value;

pub const EVENTS_FILE: &str = "controller-events.jsonl";

/// One recorded event, as the projection and the journal need it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub key: String,
    pub kind: String,
    pub payload: Value,
}

/// Reads a run's log after verifying its whole chain.
pub fn read_events(run_dir: &Path) -> Result<(Vec<Recorded>, bl_store::ChainHead), String> {
    let path = run_dir.join(EVENTS_FILE);
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (head, torn) =
        bl_store::verify_chain(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    if let Some(tail) = torn {
        return Err(format!(
            "{}: line {} is torn (as after a crash); run `bl log recover {}` first",
            path.display(),
            tail.line,
            path.display()
        ));
    }
    let mut out = Vec::new();
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
        let run_id = v["run_id"].as_str().unwrap_or_default();
        let key = v["idempotency_key"].as_str().unwrap_or_default();
        out.push(Recorded {
            key: key
                .strip_prefix(&format!("{run_id}:"))
                .unwrap_or(key)
                .to_string(),
            kind: v["event_type"].as_str().unwrap_or_default().to_string(),
            payload: v["payload"].clone(),
        });
    }
    Ok((out, head))
}

fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The event log of one run, with what it already holds by key.
pub struct LogJournal {
    log: EventLog,
    /// Every event in the log, in order: what the run's view is folded
    /// from, without reading the log back.
    events: Vec<(String, Value)>,
    /// Idempotency key → position in `events`.
    by_key: HashMap<String, usize>,
}

impl LogJournal {
    pub fn open(run_dir: &Path, identity: RunIdentity) -> Result<Self, String> {
        let path = run_dir.join(EVENTS_FILE);
        let log = EventLog::open(&path, identity).map_err(|e| e.to_string())?;
        let mut by_key = HashMap::new();
        let mut events = Vec::new();
        if log.head().sequence > 0 {
            for r in read_events(run_dir)?.0 {
                by_key.insert(r.key, events.len());
                events.push((r.kind, r.payload));
            }
        }
        Ok(LogJournal {
            log,
            events,
            by_key,
        })
    }

    /// The run's state, folded from the log as it now stands.
    pub fn view(&self) -> bl_run::projection::RunView {
        bl_run::projection::project(self.events.iter().map(|(k, p)| (k.as_str(), p)))
    }
}

impl Journal for LogJournal {
    fn append(&mut self, event: &Event) -> Result<(), RunError> {
        let appended = self
            .log
            .append(&event.key, event.kind, &event.payload, &now())
            .map_err(|e| RunError::Journal(e.to_string()))?;
        if let bl_store::Appended::Written { .. } = appended {
            self.by_key.insert(event.key.clone(), self.events.len());
            self.events
                .push((event.kind.to_string(), event.payload.clone()));
        }
        Ok(())
    }

    fn recorded(&self, key: &str) -> Option<Value> {
        self.by_key.get(key).map(|&i| self.events[i].1.clone())
    }

    fn sync(&mut self) -> Result<(), RunError> {
        self.log
            .sync()
            .map_err(|e| RunError::Journal(e.to_string()))
    }
}

pub struct RunArtifacts {
    pub store: ArtifactStore,
    pub organization_id: String,
    pub project_id: String,
    pub sensitivity: String,
}

impl Artifacts for RunArtifacts {
    fn put(&self, bytes: &[u8], media_type: &str, attempt: u32) -> Result<String, RunError> {
        let attempt = attempt.to_string();
        self.store
            .put(
                bytes,
                &ArtifactMeta {
                    organization_id: &self.organization_id,
                    project_id: &self.project_id,
                    media_type,
                    producer_attempt: &attempt,
                    sensitivity: &self.sensitivity,
                },
            )
            .map_err(|e| RunError::Artifacts(e.to_string()))
    }

    fn sync(&self) -> Result<(), RunError> {
        self.store
            .sync()
            .map_err(|e| RunError::Artifacts(e.to_string()))
    }
}

/// Decisions from the run's approvals.json.
pub struct FileDecisions {
    pub record: bl_store::ApprovalRecord,
}

impl FileDecisions {
    pub fn read(run_dir: &Path) -> Result<Self, String> {
        let record = bl_store::Approvals::new(run_dir)
            .read()
            .map_err(|e| e.to_string())?;
        Ok(FileDecisions { record })
    }
}

impl Decisions for FileDecisions {
    fn decision(&self, node: &str, round: u32) -> Option<bool> {
        let round = u64::from(round);
        if self
            .record
            .rejections
            .iter()
            .any(|r| r.node_id == node && r.repair_round == round)
        {
            return Some(false);
        }
        self.record
            .commits
            .iter()
            .any(|c| c.node_id == node && c.repair_round == round)
            .then_some(true)
    }
}

pub struct RunLedger {
    pub dir: PathBuf,
    pub run_id: String,
    pub plan_id: String,
}

impl Ledger for RunLedger {
    fn publish(&self, node: &str, payload_digest: &str) -> Result<(Published, String), RunError> {
        let key = bl_store::effect_key(&self.run_id, &self.plan_id, node);
        let ledger = bl_store::Ledger::new(&self.dir);
        let outcome = ledger
            .publish(&key, payload_digest, || Ok(()))
            .map_err(|e| RunError::Ledger(e.to_string()))?;
        let published = match outcome {
            bl_store::Publish::Fired => Published::Fired,
            bl_store::Publish::AlreadyPublished => Published::AlreadyPublished,
            bl_store::Publish::Halt { recorded_digest } => Published::Refused(format!(
                "effect {key} was already published with payload {recorded_digest}"
            )),
            bl_store::Publish::ReconciliationRequired { intent_digest } => {
                Published::Refused(format!(
                    "effect {key} has an intent ({intent_digest}) with no outcome; reconcile it with `bl ledger reconcile` first"
                ))
            }
        };
        Ok((published, key))
    }
}
