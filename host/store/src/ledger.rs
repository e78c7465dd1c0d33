//! The publication ledger: a publish node's effect happens exactly once per
//! `<run_id>/<plan_id>/<node_id>`, across concurrent processes and crashes.
//!
//! `published-effects.json` keeps bounded-loops' format
//! (`{effect_key: payload_digest}`). Beside it, `published-effects.intents.jsonl`
//! records an intent, durably, before the effect runs, and the outcome after.
//! Everything happens under an exclusive lock on
//! `published-effects.json.lock`, so the check, the effect and the record
//! are one compare-and-swap. An intent with no outcome (a crash in between)
//! is ambiguous: it yields [`Publish::ReconciliationRequired`] until an
//! operator says what happened with [`Ledger::reconcile`]. There is no
//! automatic replay.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::Flock;
use serde_json::{Value, json};

/// Effect key → payload digest, as the ledger and its intents record them.
type KeyDigests = BTreeMap<String, String>;

pub const LEDGER_FILE: &str = "published-effects.json";
pub const INTENTS_FILE: &str = "published-effects.intents.jsonl";

/// The three outcomes of publishing, plus the ambiguous one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Publish {
    /// The effect ran now, and is recorded.
    Fired,
    /// The same key was already published with the same payload digest.
    AlreadyPublished,
    /// The key was published with another payload: the run must halt.
    Halt { recorded_digest: String },
    /// An earlier attempt recorded an intent but no outcome; an operator
    /// must reconcile before anything fires.
    ReconciliationRequired { intent_digest: String },
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: corrupt ({message}); refusing to treat it as empty, since that would fire every effect again"
    )]
    Corrupt { path: PathBuf, message: String },
    #[error("the effect for {key} failed: {message}")]
    EffectFailed { key: String, message: String },
    #[error("{key} has no unresolved intent to reconcile")]
    NothingToReconcile { key: String },
}

/// What an operator found out about an ambiguous effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciliation {
    /// The effect did happen: record it as published.
    Published,
    /// The effect did not happen: clear the intent so it may fire again.
    NotPublished,
}

pub struct Ledger {
    dir: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LedgerError + '_ {
    move |source| LedgerError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `<run_id>/<plan_id>/<node_id>`: attempt and repair round are left out on
/// purpose, so retries and repairs cannot publish twice.
pub fn effect_key(run_id: &str, plan_id: &str, node_id: &str) -> String {
    format!("{run_id}/{plan_id}/{node_id}")
}

impl Ledger {
    pub fn new(run_dir: &Path) -> Self {
        Ledger {
            dir: run_dir.to_path_buf(),
        }
    }

    fn lock(&self) -> Result<Flock<File>, LedgerError> {
        let path = self.dir.join(format!("{LEDGER_FILE}.lock"));
        crate::durable::lock_exclusive(&path).map_err(io(&path))
    }

    fn read_ledger(&self) -> Result<KeyDigests, LedgerError> {
        let path = self.dir.join(LEDGER_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(LedgerError::Io { path, source: e }),
        };
        let value: Value = serde_json::from_str(&text).map_err(|e| LedgerError::Corrupt {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let Value::Object(map) = value else {
            return Err(LedgerError::Corrupt {
                path,
                message: "not a JSON object".into(),
            });
        };
        map.into_iter()
            .map(|(k, v)| match v {
                Value::String(d) => Ok((k, d)),
                _ => Err(LedgerError::Corrupt {
                    path: path.clone(),
                    message: format!("{k}: digest is not a string"),
                }),
            })
            .collect()
    }

    fn write_ledger(&self, ledger: &BTreeMap<String, String>) -> Result<(), LedgerError> {
        let bytes = serde_json::to_string(ledger).expect("strings serialize");
        crate::durable::replace_durably(&self.dir, LEDGER_FILE, bytes.as_bytes())
            .map_err(io(&self.dir.join(LEDGER_FILE)))
    }

    /// Unresolved intents: key → payload digest.
    fn open_intents(&self) -> Result<KeyDigests, LedgerError> {
        let path = self.dir.join(INTENTS_FILE);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(LedgerError::Io { path, source: e }),
        };
        let mut open = BTreeMap::new();
        for (i, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(io(&path))?;
            let record: Value = serde_json::from_str(&line).map_err(|e| LedgerError::Corrupt {
                path: path.clone(),
                message: format!("line {}: {e}", i + 1),
            })?;
            let key = record["key"].as_str().unwrap_or_default().to_string();
            match record["state"].as_str() {
                Some("intent") => {
                    open.insert(
                        key,
                        record["digest"].as_str().unwrap_or_default().to_string(),
                    );
                }
                Some(_) => {
                    open.remove(&key);
                }
                None => {
                    return Err(LedgerError::Corrupt {
                        path,
                        message: format!("line {}: no state", i + 1),
                    });
                }
            }
        }
        Ok(open)
    }

    fn record(&self, record: Value) -> Result<(), LedgerError> {
        let path = self.dir.join(INTENTS_FILE);
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        let mut line = bl_core::canonical_json(&record);
        line.push('\n');
        file.write_all(line.as_bytes()).map_err(io(&path))?;
        file.sync_data().map_err(io(&path))
    }

    /// Publishes `key` with `payload_digest`, running `effect` at most once
    /// across every process that shares this run directory. `effect`
    /// returning `Err` means the effect did not happen; its message is
    /// recorded as the reason.
    pub fn publish(
        &self,
        key: &str,
        payload_digest: &str,
        effect: impl FnOnce() -> Result<(), Box<dyn std::error::Error + Send + Sync>>,
    ) -> Result<Publish, LedgerError> {
        let _lock = self.lock()?;
        let mut ledger = self.read_ledger()?;
        if let Some(recorded) = ledger.get(key) {
            if recorded != payload_digest {
                return Ok(Publish::Halt {
                    recorded_digest: recorded.clone(),
                });
            }
            // A writer that died between the ledger's write and its intent's
            // close: the ledger is written only after the effect, so it
            // proves the effect happened; the intent is closed as published.
            if self.open_intents()?.contains_key(key) {
                self.record(json!({"key": key, "state": "published", "recovered": true}))?;
            }
            return Ok(Publish::AlreadyPublished);
        }
        if let Some(intent_digest) = self.open_intents()?.remove(key) {
            return Ok(Publish::ReconciliationRequired { intent_digest });
        }
        // Durable before the effect: a crash from here on is visible.
        self.record(json!({"key": key, "digest": payload_digest, "state": "intent"}))?;
        if let Err(failure) = effect() {
            let message = failure.to_string();
            self.record(json!({"key": key, "state": "not_published", "reason": message}))?;
            return Err(LedgerError::EffectFailed {
                key: key.to_string(),
                message,
            });
        }
        ledger.insert(key.to_string(), payload_digest.to_string());
        self.write_ledger(&ledger)?;
        self.record(json!({"key": key, "state": "published"}))?;
        Ok(Publish::Fired)
    }

    /// An operator's answer to [`Publish::ReconciliationRequired`].
    pub fn reconcile(&self, key: &str, decision: Reconciliation) -> Result<(), LedgerError> {
        let _lock = self.lock()?;
        let Some(digest) = self.open_intents()?.remove(key) else {
            return Err(LedgerError::NothingToReconcile {
                key: key.to_string(),
            });
        };
        match decision {
            Reconciliation::Published => {
                let mut ledger = self.read_ledger()?;
                ledger.insert(key.to_string(), digest);
                self.write_ledger(&ledger)?;
                self.record(json!({"key": key, "state": "published", "reconciled": true}))
            }
            Reconciliation::NotPublished => {
                self.record(json!({"key": key, "state": "not_published", "reconciled": true}))
            }
        }
    }
}
