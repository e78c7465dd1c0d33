//! The adapters the graph executor's ports are composed with: the event
//! log, the artifact store, the approvals file and the publication ledger
//! of one run directory (all bl-store).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bl_run::events::Event;
use bl_run::executor::{
    Artifacts, Decisions, Journal, Ledger, PluginUse, Publication, PublishOrder, Published,
    RunError,
};
use bl_store::{ArtifactMeta, ArtifactStore, EventLog, RunDir, RunIdentity};
use serde_json::Value;

use crate::error::AppError;

/// One recorded event, as the projection and the journal need it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub key: String,
    pub kind: String,
    pub payload: Value,
}

/// Reads a run's log after verifying its whole chain.
pub fn read_events(run_dir: &Path) -> Result<(Vec<Recorded>, bl_store::ChainHead), AppError> {
    read_chain(&RunDir::new(run_dir).events())
}

/// Reads a run's annex (none: empty) after verifying its chain.
pub fn read_annex(run_dir: &Path) -> Result<Vec<Recorded>, AppError> {
    let path = RunDir::new(run_dir).annex();
    if !path.exists() {
        return Ok(Vec::new());
    }
    read_chain(&path).map(|(events, _)| events)
}

/// Reads a log with the lines its writer staged and has not moved in yet:
/// a run as far as it went.
fn read_chain(path: &Path) -> Result<(Vec<Recorded>, bl_store::ChainHead), AppError> {
    let bytes = bl_store::read_log(path)
        .map_err(|e| AppError::Refused(format!("{}: {e}", path.display())))?;
    let (head, torn) = bl_store::verify_chain(&bytes)
        .map_err(|e| AppError::Refused(format!("{}: {e}", path.display())))?;
    if let Some(tail) = torn {
        return Err(AppError::Refused(format!(
            "{}: line {} is torn (as after a crash); `bl graph resume` moves it aside and goes on, or `bl log recover {}` moves it aside alone",
            path.display(),
            tail.line,
            path.display()
        )));
    }
    let mut out = Vec::new();
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let v: Value = serde_json::from_slice(line)
            .map_err(|e| AppError::Refused(format!("{}: {e}", path.display())))?;
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

/// The event log of one run, with what it already holds by key, and its
/// annex (opened when first written).
pub struct LogJournal {
    log: EventLog,
    annex: Option<EventLog>,
    annex_path: PathBuf,
    identity: RunIdentity,
    /// What the annex holds, in order: folded after the log, as a run
    /// read back from its directory is.
    annexed: Vec<(String, Value)>,
    /// Idempotency key → position in `annexed`.
    annexed_by_key: HashMap<String, usize>,
    /// Every event in the log, in order: what the run's view is folded
    /// from, without reading the log back.
    events: Vec<(String, Value)>,
    /// Idempotency key → position in `events`.
    by_key: HashMap<String, usize>,
}

impl LogJournal {
    /// The idempotency key of every event recorded so far, in the log and
    /// its annex.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_key
            .keys()
            .chain(self.annexed_by_key.keys())
            .map(String::as_str)
    }
    pub fn open(run_dir: &Path, identity: RunIdentity) -> Result<Self, AppError> {
        let log = RunDir::new(run_dir)
            .open_log(identity.clone())
            .map_err(|e| AppError::Refused(e.to_string()))?
            .staged();
        let mut by_key = HashMap::new();
        let mut events = Vec::new();
        if log.head().sequence > 0 {
            for r in read_events(run_dir)?.0 {
                by_key.insert(r.key, events.len());
                events.push((r.kind, r.payload));
            }
        }
        let mut annexed = Vec::new();
        let mut annexed_by_key = HashMap::new();
        for r in read_annex(run_dir)? {
            annexed_by_key.insert(r.key, annexed.len());
            annexed.push((r.kind, r.payload));
        }
        Ok(LogJournal {
            log,
            annex: None,
            annex_path: RunDir::new(run_dir).annex(),
            identity,
            annexed,
            annexed_by_key,
            events,
            by_key,
        })
    }

    /// The run's state, folded from the log (then its annex) as they now stand.
    pub fn view(&self) -> bl_run::projection::RunView {
        bl_run::projection::project(
            self.events
                .iter()
                .chain(&self.annexed)
                .map(|(k, p)| (k.as_str(), p)),
        )
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

    fn annex(&mut self, event: &Event) -> Result<(), RunError> {
        let fail = |e: bl_store::StoreError| RunError::Journal(format!("{}: {e}", RunDir::ANNEX));
        if self.annex.is_none() {
            let log = EventLog::open(&self.annex_path, self.identity.clone()).map_err(fail)?;
            self.annex = Some(log.staged());
        }
        let annex = self.annex.as_mut().expect("opened above");
        let appended = annex
            .append(&event.key, event.kind, &event.payload, &now())
            .map_err(fail)?;
        if let bl_store::Appended::Written { .. } = appended {
            self.annexed_by_key
                .insert(event.key.clone(), self.annexed.len());
            self.annexed
                .push((event.kind.to_string(), event.payload.clone()));
        }
        Ok(())
    }

    fn recorded(&self, key: &str) -> Option<Value> {
        self.by_key
            .get(key)
            .map(|&i| self.events[i].1.clone())
            .or_else(|| {
                self.annexed_by_key
                    .get(key)
                    .map(|&i| self.annexed[i].1.clone())
            })
    }

    fn sync(&mut self) -> Result<(), RunError> {
        self.log_then_annex(EventLog::sync)
    }

    fn flush(&mut self) -> Result<(), RunError> {
        self.log_then_annex(EventLog::flush)
    }
}

impl LogJournal {
    /// The log made durable, and the head of its tree, for the run's
    /// checkpoint: kept as the log grew, not read back. Called after the
    /// run's last sync made its artifacts durable.
    pub fn synced_tree_head(&mut self) -> Result<bl_store::provable::TreeHead<'_>, RunError> {
        self.log_then_annex(EventLog::sync)?;
        Ok(self.log.tree_head())
    }

    /// `step` (a flush or a sync) on the log, then on the annex: an annex
    /// event speaks of what the log holds (a turn's spend, its re-drive),
    /// so it is never on disk without it. Lost the other way, the annex
    /// only tells less.
    fn log_then_annex(
        &mut self,
        step: fn(&mut EventLog) -> Result<(), bl_store::StoreError>,
    ) -> Result<(), RunError> {
        step(&mut self.log).map_err(|e| RunError::Journal(e.to_string()))?;
        match &mut self.annex {
            Some(annex) => {
                step(annex).map_err(|e| RunError::Journal(format!("{}: {e}", RunDir::ANNEX)))
            }
            None => Ok(()),
        }
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

    fn get(&self, digest: &str) -> Result<Vec<u8>, RunError> {
        self.store
            .get(digest)
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
    /// The run's decisions, once the ledger's invariants and every signed
    /// decision's signature hold: a run never acts on an altered decision.
    pub fn read(run_dir: &Path) -> Result<Self, AppError> {
        bl_store::verify_approvals(run_dir, None).map_err(|e| AppError::Refused(e.to_string()))?;
        let record = bl_store::Approvals::new(run_dir)
            .read()
            .map_err(|e| AppError::Refused(e.to_string()))?;
        Ok(FileDecisions { record })
    }
}

impl Decisions for FileDecisions {
    fn decision(&self, node: &str, round: u32, _evidence: &[String]) -> Option<bool> {
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

/// bounded-loops' built-in policy: the receipt in the ledger is the whole
/// effect.
pub const LOCAL_LEDGER: &str = "local-ledger";
/// bl's first-party local effect: the published artifacts are written to
/// `<run>/outbox/<node>/`, if the `outbox-policy` plugin allows it.
pub const OUTBOX: &str = "outbox";

impl RunLedger {
    /// Asks the node's publication policy (a wasm plugin) whether the
    /// effect may fire. `Err` is the refusal: an unknown policy, a plugin
    /// that cannot decide and a denial all fail closed.
    fn allowed(
        &self,
        order: &PublishOrder,
        key: &str,
        used: &mut Vec<PluginUse>,
    ) -> Result<(), AppError> {
        if order.policy == LOCAL_LEDGER {
            return Ok(());
        }
        let plugin = if order.policy == OUTBOX {
            "outbox-policy"
        } else {
            order.policy
        };
        let host = crate::plugin_host::shared();
        let found = host.find(plugin).map_err(|e| match e {
            bl_plugins::FindError::NotFound { .. } => AppError::Refused(format!(
                "publication policy '{}' is not installed ({e}); nothing was published",
                order.policy
            )),
            e => AppError::Refused(e.to_string()),
        })?;
        used.push(PluginUse {
            role: "policy".into(),
            plugin: found.name(),
            component_digest: found.digest.clone(),
            component: std::sync::Arc::new(
                found
                    .verified_bytes()
                    .map_err(|e| AppError::Refused(e.to_string()))?,
            ),
            unsigned: found.unsigned,
        });
        let approvals: Vec<bl_plugins::Approval> = order
            .approvals
            .iter()
            .map(|(name, approved)| bl_plugins::Approval {
                name: name.clone(),
                approver: "operator".into(),
                approved: *approved,
            })
            .collect();
        let (kind, target, config) = if order.policy == OUTBOX {
            let names: Vec<&String> = order.approvals.iter().map(|(n, _)| n).collect();
            (
                "local-outbox".to_string(),
                format!("{}/{}", RunDir::OUTBOX, order.node),
                serde_json::json!({"outbox": RunDir::OUTBOX, "required_approvals": names})
                    .to_string(),
            )
        } else {
            ("publish".to_string(), key.to_string(), "{}".to_string())
        };
        let request = bl_plugins::PublishRequest {
            effect_key: key.to_string(),
            kind,
            target,
            payload_digest: format!("sha256:{}", order.payload_digest),
            approvals,
        };
        // A policy is granted nothing: it decides from the request alone.
        let decision = host
            .load_policy(&found, &bl_plugins::Grant::default())
            .and_then(|policy| host.runtime()?.decide(&policy, &request, &config))
            .map_err(|e| {
                AppError::Refused(format!(
                    "publication policy '{}' could not decide: {e}",
                    order.policy
                ))
            })?
            .value;
        if decision.allow {
            Ok(())
        } else {
            Err(AppError::Refused(format!(
                "publication policy '{}' denied the effect: {}",
                order.policy, decision.reason
            )))
        }
    }

    /// The outbox effect: each published artifact, verified, into
    /// `<run>/outbox/<node>/<its name>`, with `manifest.json` beside them
    /// (each file's name, digest, size and producer).
    fn write_outbox(&self, order: &PublishOrder) -> Result<(), AppError> {
        let files = RunDir::new(&self.dir);
        let store = ArtifactStore::new(files.artifacts(), 64 << 20);
        let dir = files.outbox(order.node);
        std::fs::create_dir_all(&dir)
            .map_err(|e| AppError::Refused(format!("{}: {e}", dir.display())))?;
        let mut manifest = Vec::new();
        for file in order.files {
            if file.name == bl_run::executor::OUTBOX_INDEX
                || file.name.contains('/')
                || file.name.starts_with('.')
            {
                return Err(AppError::Refused(format!(
                    "outbox: '{}' cannot be published under that name",
                    file.name
                )));
            }
            let bytes = store
                .get(&file.digest)
                .map_err(|e| AppError::Refused(e.to_string()))?;
            let path = dir.join(&file.name);
            std::fs::write(&path, &bytes)
                .map_err(|e| AppError::Refused(format!("{}: {e}", path.display())))?;
            manifest.push(serde_json::json!({
                "digest": file.digest, "name": file.name, "producer": file.producer,
                "size": bytes.len(),
            }));
        }
        let path = dir.join(bl_run::executor::OUTBOX_INDEX);
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&manifest).unwrap_or_default(),
        )
        .map_err(|e| AppError::Refused(format!("{}: {e}", path.display())))
    }
}

impl Ledger for RunLedger {
    fn publish(&self, order: &PublishOrder) -> Result<Publication, RunError> {
        let key = bl_store::effect_key(&self.run_id, &self.plan_id, order.node);
        let mut plugins = Vec::new();
        if let Err(why) = self.allowed(order, &key, &mut plugins) {
            return Ok(Publication {
                published: Published::Refused(why.message().to_string()),
                effect_key: key,
                plugins,
            });
        }
        let ledger = bl_store::Ledger::new(&self.dir);
        let outcome = ledger
            .publish(&key, order.payload_digest, || {
                if order.policy == OUTBOX {
                    self.write_outbox(order)?;
                }
                Ok(())
            })
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
        Ok(Publication {
            published,
            effect_key: key,
            plugins,
        })
    }
}
