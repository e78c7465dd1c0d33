//! Offline verification of what a run left behind. This crate owns the
//! decision of what `bl verify PATH` checks and what each check concluded;
//! it reads files and never writes, runs or reaches the network.
//!
//! PATH may be a graph run directory, its `controller-events.jsonl`, a loop
//! run directory (`ledger.jsonl` and `metadata.json`), a loop package (its
//! `.ledger.jsonl`), or a loop ledger file. Every check that applies runs;
//! the ones that cannot apply say why. The formats themselves live in
//! `bl-store` (event chain, checkpoints, artifacts, approvals, loop
//! ledgers) and `bl-graph` (recompiling the plan).

mod evidence;
mod graph_run;
mod loop_run;

use std::path::{Path, PathBuf};

use bl_store::VerifierKey;

pub use evidence::{ReviewSignatureError, review_signer};
pub use graph_run::EGRESS_EVENTS;
pub use loop_run::{Anchor, LoopReport, McpAuditCheck};

/// What a check concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Fail,
    NotApplicable,
}

/// One named check of a graph run and its finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

impl Check {
    /// A check that passed with `Ok(detail)`, or failed with the error's
    /// message as its detail.
    fn from_result<E: std::fmt::Display>(name: &'static str, result: Result<String, E>) -> Check {
        match result {
            Ok(detail) => Check {
                name,
                status: Status::Ok,
                detail,
            },
            Err(e) => Check {
                name,
                status: Status::Fail,
                detail: e.to_string(),
            },
        }
    }

    fn not_applicable(name: &'static str, why: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::NotApplicable,
            detail: why.into(),
        }
    }
}

/// The checks of a graph run directory or event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphReport {
    pub path: PathBuf,
    pub checks: Vec<Check>,
}

impl GraphReport {
    /// Every applicable check holds.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    /// The verdict's line: `VERIFIED` only when a key was checked (`keyed`);
    /// without one, whole and consistent, but anyone could have written a
    /// log that passes (as the pages say LOCAL/UNVERIFIED).
    pub fn verdict(&self, keyed: bool) -> &'static str {
        match (self.ok(), keyed) {
            (true, true) => "VERIFIED",
            (true, false) => {
                "VERIFIED (integrity only: without --pubkey, not who wrote it; a log cut short with its checkpoints passes too)"
            }
            (false, _) => "NOT VERIFIED",
        }
    }
}

/// What was verified, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Graph(GraphReport),
    Loop(LoopReport),
}

impl Report {
    pub fn ok(&self) -> bool {
        match self {
            Report::Graph(report) => report.ok(),
            Report::Loop(report) => report.verified(),
        }
    }
}

/// What the caller knows from outside the run directory.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The head hash recorded when the run ended (event or ledger head).
    pub expect_head: Option<String>,
    /// The key that must have signed the checkpoints and approvals.
    pub verifier: Option<VerifierKey>,
    /// An evidence workspace's trusted reviewers: when given, every
    /// person's decision in it must be signed by one of these keys.
    pub reviewers: Option<Vec<VerifierKey>>,
}

pub const EVENT_LOG: &str = bl_store::RunDir::EVENTS;

/// Verifies whatever `path` is (see the crate documentation).
pub fn verify(path: &Path, options: &Options) -> Result<Report, NothingToVerify> {
    if path.is_dir() {
        if path.join(EVENT_LOG).is_file() || path.join(bl_store::RunDir::PLAN).is_file() {
            return Ok(Report::Graph(graph_run::verify(path, options)));
        }
        let ledger = loop_run::ledger_of(path);
        if let Some(said) = bl_store::LoopRunDir::new(path).unrecorded() {
            return Err(NothingToVerify::Unrecorded(said));
        }
        if !ledger.is_file() {
            return Err(NothingToVerify::EmptyDirectory {
                path: path.to_path_buf(),
            });
        }
        readable(&ledger)?;
        return Ok(Report::Loop(loop_run::verify(path, options)));
    }
    if !path.exists() {
        return Err(NothingToVerify::Missing {
            path: path.to_path_buf(),
        });
    }
    // Checked before anything opens it: a FIFO or a device is never read.
    if !path.is_file() {
        return Err(NothingToVerify::NotARecord {
            path: path.to_path_buf(),
        });
    }
    readable(path)?;
    if is_event_log(path) {
        return Ok(Report::Graph(graph_run::verify(path, options)));
    }
    if !looks_like_ledger(path) {
        return Err(NothingToVerify::NotARecord {
            path: path.to_path_buf(),
        });
    }
    Ok(Report::Loop(loop_run::verify(path, options)))
}

/// A loop ledger by its name (`*.jsonl`), or by a first line that is a
/// JSON object (a ledger row, whatever has become of the rest). Any other
/// file is not a record at all, and verifying it is not a verdict on
/// tampering.
fn looks_like_ledger(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "jsonl")
        || first_line_json(path).is_some_and(|v| v.is_object())
}

/// A path that holds nothing to verify. Never a verdict: a typo is not
/// tampering.
#[derive(Debug, thiserror::Error)]
pub enum NothingToVerify {
    #[error(
        "{} does not exist: nothing to verify. Pass a graph run directory, its controller-events.jsonl, a loop run directory or a ledger.jsonl",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error(
        "{} holds no run to verify: no controller-events.jsonl or plan.json (a graph run), and no ledger.jsonl or .ledger.jsonl (a loop run or package)",
        path.display()
    )]
    EmptyDirectory { path: PathBuf },
    /// A loop run stopped before its first lap was on record.
    #[error("{0}")]
    Unrecorded(String),
    #[error(
        "{} is not a run directory, an event log or a ledger: nothing to verify. Pass a graph run directory, its controller-events.jsonl, a loop run directory or a ledger.jsonl",
        path.display()
    )]
    NotARecord { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn readable(path: &Path) -> Result<(), NothingToVerify> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|source| NothingToVerify::Unreadable {
            path: path.to_path_buf(),
            source,
        })
}

/// A controller event log by name, or by its first line's shape.
fn is_event_log(path: &Path) -> bool {
    if path.file_name().is_some_and(|n| n == EVENT_LOG) {
        return true;
    }
    first_line_json(path)
        .is_some_and(|v| v.get("event_hash").is_some() && v.get("previous_hash").is_some())
}

/// The file's first line as JSON, reading no more than 64 KiB of it.
fn first_line_json(path: &Path) -> Option<serde_json::Value> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 << 10).read_to_end(&mut head))
        .ok()?;
    let first = head.split(|b| *b == b'\n').next().unwrap_or_default();
    serde_json::from_slice(first).ok()
}
