//! Where a bounded loop keeps its records, named as bounded-loops names
//! them: in the loop package itself (a run without an id) and in
//! `.bounded-loops/runs/<id>/` (a run with one). No other code writes these
//! names.

use std::path::{Path, PathBuf};

/// A loop package's directory (`loop.yaml`, `PROMPT.md`, ...) and the
/// records bl keeps in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDir {
    root: PathBuf,
}

impl LoopDir {
    /// The ledger of runs without an id.
    pub const LEDGER: &'static str = ".ledger.jsonl";
    /// The notes each rejected lap leaves the next turn (`STATE.md` itself
    /// is never touched).
    pub const MEMORY: &'static str = ".STATE.md.runtime";
    pub const RUNS: &'static str = ".bounded-loops/runs";
    /// One line per run with an id.
    pub const RUNS_INDEX: &'static str = ".bounded-loops/runs.jsonl";

    pub fn new(root: impl Into<PathBuf>) -> LoopDir {
        LoopDir { root: root.into() }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn ledger(&self) -> PathBuf {
        self.root.join(Self::LEDGER)
    }

    pub fn memory(&self) -> PathBuf {
        self.root.join(Self::MEMORY)
    }

    /// The handoff of a run without an id.
    pub fn handoff(&self) -> PathBuf {
        self.root.join(LoopRunDir::HANDOFF)
    }

    pub fn runs_index(&self) -> PathBuf {
        self.root.join(Self::RUNS_INDEX)
    }

    /// The records of the run `id`.
    pub fn run(&self, id: &str) -> LoopRunDir {
        LoopRunDir::new(self.root.join(Self::RUNS).join(id))
    }

    /// Where the run's ledger is: its run directory's, or the package's
    /// own for a run without an id.
    pub fn ledger_of(&self, run_id: Option<&str>) -> PathBuf {
        match run_id {
            Some(id) => self.run(id).ledger(),
            None => self.ledger(),
        }
    }
}

/// One loop run's directory: its ledger, metadata, persistent workspace,
/// handoff and receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopRunDir {
    root: PathBuf,
}

impl LoopRunDir {
    pub const LEDGER: &'static str = "ledger.jsonl";
    pub const METADATA: &'static str = "metadata.json";
    pub const WORKSPACE: &'static str = "workspace";
    pub const HANDOFF: &'static str = "HANDOFF.md";
    pub const MEMORY: &'static str = LoopDir::MEMORY;
    pub const RECEIPT_JSON: &'static str = "receipt.json";
    pub const RECEIPT_MARKDOWN: &'static str = "receipt.md";
    /// A worker's turn that finished before its gate judged it, waiting
    /// for the next resume to judge it: `{"head": …, "lap": …, "tokens":
    /// …}`, written before the gate starts, removed by the next ledger line.
    pub const TURN_MARK: &'static str = "turn-finished.json";

    pub fn new(root: impl Into<PathBuf>) -> LoopRunDir {
        LoopRunDir { root: root.into() }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    pub fn ledger(&self) -> PathBuf {
        self.root.join(Self::LEDGER)
    }

    pub fn metadata(&self) -> PathBuf {
        self.root.join(Self::METADATA)
    }

    pub fn workspace(&self) -> PathBuf {
        self.root.join(Self::WORKSPACE)
    }

    pub fn handoff(&self) -> PathBuf {
        self.root.join(Self::HANDOFF)
    }

    pub fn memory(&self) -> PathBuf {
        self.root.join(Self::MEMORY)
    }

    pub fn receipt_json(&self) -> PathBuf {
        self.root.join(Self::RECEIPT_JSON)
    }

    pub fn receipt_markdown(&self) -> PathBuf {
        self.root.join(Self::RECEIPT_MARKDOWN)
    }

    pub fn turn_mark(&self) -> PathBuf {
        self.root.join(Self::TURN_MARK)
    }

    /// When this directory is a run killed before its first lap was on
    /// record (a marked turn, no ledger yet): what it is, and the command
    /// that resumes it, in words.
    pub fn unrecorded(&self) -> Option<String> {
        if self.ledger().exists() || !self.turn_mark().is_file() {
            return None;
        }
        let id = self.root.file_name()?.to_string_lossy();
        // <loop>/.bounded-loops/runs/<id>
        let package = self.root.parent()?.parent()?.parent()?;
        Some(format!(
            "{} is a loop run stopped before its first lap was on record: its worker's turn finished and waits for its gate ({}), and nothing is recorded yet. Resume it: bl run {} --run-id {id} --resume",
            self.root.display(),
            Self::TURN_MARK,
            package.display()
        ))
    }
}
