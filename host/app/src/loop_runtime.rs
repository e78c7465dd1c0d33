//! The runtime API for bounded loops, as [`crate::runtime::GraphRuntime`]
//! is for graphs: [`LoopRuntime::run`] checks the request, starts the loop
//! on its own thread and hands back a [`LoopHandle`] at once; a loop's
//! ledger is followed lap by lap from any position
//! ([`LedgerSubscription`]), its receipt read, and its records verified.
//! A cancel is the kill switch for that one loop: it ends KILLED before its
//! next lap starts, and what was recorded stays.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use bl_app::loop_run::LoopRequest;
//! use bl_app::loop_runtime::{Approver, LoopRuntime};
//!
//! struct NoOneApproves;
//! impl Approver for NoOneApproves {
//!     fn approved(&mut self, _lap: u32, _detail: &str) -> bool {
//!         false
//!     }
//! }
//!
//! fn main() -> Result<(), bl_app::AppError> {
//!     let runtime = LoopRuntime::new();
//!     let request = LoopRequest {
//!         loop_dir: "examples/loops/records-shell".into(),
//!         run_id: Some("first".into()),
//!         redact: "off".into(),
//!         ..Default::default()
//!     };
//!     let handle = runtime.run(request, Box::new(NoOneApproves))?;
//!     let mut laps = runtime.subscribe(handle.ledger(), 0);
//!     while !handle.is_finished() {
//!         for lap in laps.wait(Duration::from_millis(500))? {
//!             println!("lap {}: {}", lap.number, lap.line["verdict"]["detail"]);
//!         }
//!     }
//!     let run = handle.wait()?;
//!     println!("{} after {} laps", run.outcome.status.as_str(), run.outcome.laps);
//!     Ok(())
//! }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub use bl_loops::engine::{Approver, Status as LoopStatus};
use bl_store::LoopDir;
use serde_json::Value;

use crate::error::AppError;
use crate::loop_info::{self, LoopReceipt};
use crate::loop_run::{self, LoopRequest, LoopRun};
use crate::runtime::{VerifyOptions, VerifyReport};
use crate::stop::Cancel;

/// The approver of a front end with no person at it (the monitor, MCP): a
/// pass that needs a human's approval is not approved, and the run stops
/// PAUSED there. A model's own say-so is never an approval.
pub struct NoOneHere;

impl Approver for NoOneHere {
    fn approved(&mut self, _lap: u32, _detail: &str) -> bool {
        false
    }
}

/// Runs loops and answers about them. Every call names the loop or run
/// directory it is about, so one runtime serves many loops.
#[derive(Clone, Debug, Default)]
pub struct LoopRuntime;

/// A loop being run on its own thread.
pub struct LoopHandle {
    ledger: PathBuf,
    cancel: Arc<Cancel>,
    thread: JoinHandle<Result<LoopRun, AppError>>,
}

impl LoopHandle {
    /// The ledger the loop appends a line to per lap: what `subscribe` takes.
    pub fn ledger(&self) -> &Path {
        &self.ledger
    }

    /// Stops the loop before its next lap (it ends KILLED); the lap in
    /// flight finishes and is recorded.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the loop to end.
    pub fn wait(self) -> Result<LoopRun, AppError> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(AppError::refused("the loop's thread panicked")))
    }
}

impl LoopRuntime {
    pub fn new() -> LoopRuntime {
        LoopRuntime
    }

    /// Checks `request` (a bad package or flag is refused here, before
    /// anything runs), then runs the loop on its own thread; `approver`
    /// decides the passes that need a human.
    pub fn run(
        &self,
        mut request: LoopRequest,
        mut approver: Box<dyn Approver + Send>,
    ) -> Result<LoopHandle, AppError> {
        let prepared = loop_run::prepare(&request)?;
        let cancel = Arc::new(Cancel::default());
        request.cancel = Some(cancel.clone());
        let loop_dir = std::fs::canonicalize(&prepared.package.dir)
            .unwrap_or_else(|_| prepared.package.dir.clone());
        let ledger = LoopDir::new(loop_dir).ledger_of(request.run_id.as_deref());
        let thread =
            std::thread::spawn(move || loop_run::run(prepared, &request, approver.as_mut()));
        Ok(LoopHandle {
            ledger,
            cancel,
            thread,
        })
    }

    /// The receipt of the loop run in `run_dir` (a run with an id): its
    /// status, laps, spend and verdicts, from its ledger and metadata.
    pub fn receipt(&self, run_dir: &Path) -> Result<LoopReceipt, AppError> {
        loop_info::receipt(run_dir)
    }

    /// Verifies a loop run directory, package or ledger as `bl verify` does.
    pub fn verify(&self, dir: &Path, options: &VerifyOptions) -> Result<VerifyReport, AppError> {
        bl_verify::verify(dir, options).map_err(|e| AppError::refused(e.to_string()))
    }

    /// Follows a loop's ledger from after line `after` (0: from the start).
    pub fn subscribe(&self, ledger: &Path, after: usize) -> LedgerSubscription {
        LedgerSubscription {
            ledger: ledger.to_path_buf(),
            position: after,
        }
    }
}

/// One lap's line of a loop's ledger.
#[derive(Debug, Clone)]
pub struct LedgerLine {
    /// Its position: 1 for the first line.
    pub number: usize,
    pub line: Value,
}

/// A reader of one loop's ledger that remembers how far it got.
#[derive(Debug, Clone)]
pub struct LedgerSubscription {
    ledger: PathBuf,
    position: usize,
}

impl LedgerSubscription {
    /// The number of the last line handed out.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The lines appended since the last call. Only whole lines the chain
    /// accepts are handed out; a line being written waits for the next
    /// call, and a broken chain is an error.
    pub fn poll(&mut self) -> Result<Vec<LedgerLine>, AppError> {
        let unreadable = |e: &dyn std::fmt::Display| {
            AppError::refused(format!("{}: {e}", self.ledger.display()))
        };
        let bytes = match std::fs::read(&self.ledger) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(unreadable(&e)),
        };
        let whole = crate::runtime::memchr_last_newline(&bytes);
        let chain = bl_store::loop_ledger::verify_ledger(&bytes[..whole]);
        if chain.status == bl_store::loop_ledger::ChainStatus::Broken {
            return Err(unreadable(&chain.detail));
        }
        let mut lines = Vec::new();
        for (index, line) in bytes[..whole]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .enumerate()
            .skip(self.position)
        {
            let line: Value = serde_json::from_slice(line).map_err(|e| unreadable(&e))?;
            lines.push(LedgerLine {
                number: index + 1,
                line,
            });
        }
        if let Some(last) = lines.last() {
            self.position = last.number;
        }
        Ok(lines)
    }

    /// Waits up to `timeout` for at least one new line.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<LedgerLine>, AppError> {
        crate::runtime::wait_for(timeout, || self.poll())
    }
}
