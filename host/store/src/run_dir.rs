//! The graph run directory: the one place that names its files and folders
//! (the layout bounded-loops 0.7 writes, plus bl's own files), opens its
//! event log with the single-writer lock, and says whether a writer is
//! live. Everything else asks a [`RunDir`] for a path.

use std::path::{Path, PathBuf};

use crate::{EventLog, RunIdentity, StoreError};

/// A graph run directory (it may not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// The hash-chained event log (bounded-loops' name).
    pub const EVENTS: &'static str = crate::provable::EVENTS_FILE;
    /// bl's records beside the log that bounded-loops' readers would refuse
    /// in it (interrupted attempts).
    pub const ANNEX: &'static str = "controller-annex.jsonl";
    pub const PLAN: &'static str = "plan.json";
    pub const META: &'static str = "run-meta.json";
    /// The manifest as it was run.
    pub const MANIFEST: &'static str = "manifest.yaml";
    pub const CONNECTIONS: &'static str = "connections.json";
    pub const APPROVALS: &'static str = crate::approvals::APPROVALS_FILE;
    /// The exactly-once publication ledger and its intents.
    pub const LEDGER: &'static str = crate::ledger::LEDGER_FILE;
    pub const INTENTS: &'static str = crate::ledger::INTENTS_FILE;
    pub const EGRESS_EVENTS: &'static str = crate::egress_log::EGRESS_EVENTS;
    /// The calls an MCP client made on this run (`bl mcp`), chained as an
    /// event log of their own.
    pub const MCP_AUDIT: &'static str = "mcp-audit.jsonl";
    /// The allowlist proxy's decisions for the run's local agent CLIs.
    pub const EGRESS_DECISIONS: &'static str = "egress-decisions.jsonl";
    pub const CHECKPOINTS: &'static str = crate::provable::CHECKPOINT_DIR;
    pub const ARTIFACTS: &'static str = "artifacts";
    pub const OUTBOX: &'static str = "outbox";
    /// Child runs of subgraph nodes, one directory each.
    pub const SUBGRAPHS: &'static str = "subgraphs";
    /// The run's shared workspace (published outputs land at their path).
    pub const WORKSPACE: &'static str = "workspace";
    /// Attempts' scratch space; not part of what is proven.
    pub const WORK: &'static str = crate::provable::WORK_DIR;
    /// What a run was given, kept so resume and approve see the same.
    pub const RECORDED_REPLIES: &'static str = "recorded-replies.json";
    pub const RECORDED_DECISIONS: &'static str = "recorded-decisions.json";
    pub const INPUTS: &'static str = "bl-inputs.json";
    /// The provider catalog `--providers` (or `BOUNDED_LOOPS_PROVIDERS`)
    /// gave the run, byte for byte.
    pub const PROVIDERS: &'static str = "providers.toml";
    /// The audit plan `--audit-plan` gave the run, byte for byte.
    pub const AUDIT_PLAN: &'static str = "audit-plan.json";
    /// Each attempt's process identity, under [`Self::WORK`].
    pub const PROCESSES: &'static str = "processes.jsonl";

    /// The files only a run directory holds: its records. (A `plan.json`
    /// alone is not one: any project may have a file of that name.)
    pub const RECORDS: [&'static str; 5] = [
        Self::EVENTS,
        Self::META,
        Self::LEDGER,
        Self::APPROVALS,
        Self::EGRESS_EVENTS,
    ];

    pub fn new(root: impl Into<PathBuf>) -> RunDir {
        RunDir { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn events(&self) -> PathBuf {
        self.root.join(Self::EVENTS)
    }
    pub fn annex(&self) -> PathBuf {
        self.root.join(Self::ANNEX)
    }
    pub fn plan(&self) -> PathBuf {
        self.root.join(Self::PLAN)
    }
    pub fn meta(&self) -> PathBuf {
        self.root.join(Self::META)
    }
    pub fn manifest(&self) -> PathBuf {
        self.root.join(Self::MANIFEST)
    }
    pub fn connections(&self) -> PathBuf {
        self.root.join(Self::CONNECTIONS)
    }
    pub fn approvals(&self) -> PathBuf {
        self.root.join(Self::APPROVALS)
    }
    pub fn ledger(&self) -> PathBuf {
        self.root.join(Self::LEDGER)
    }
    pub fn egress_events(&self) -> PathBuf {
        self.root.join(Self::EGRESS_EVENTS)
    }
    pub fn egress_decisions(&self) -> PathBuf {
        self.root.join(Self::EGRESS_DECISIONS)
    }
    pub fn checkpoints(&self) -> PathBuf {
        self.root.join(Self::CHECKPOINTS)
    }
    pub fn artifacts(&self) -> PathBuf {
        self.root.join(Self::ARTIFACTS)
    }
    /// Where a publish node's files go.
    pub fn outbox(&self, node: &str) -> PathBuf {
        self.root.join(Self::OUTBOX).join(node)
    }
    pub fn workspace(&self) -> PathBuf {
        self.root.join(Self::WORKSPACE)
    }
    pub fn work(&self) -> PathBuf {
        self.root.join(Self::WORK)
    }
    pub fn processes(&self) -> PathBuf {
        self.work().join(Self::PROCESSES)
    }
    pub fn recorded_replies(&self) -> PathBuf {
        self.root.join(Self::RECORDED_REPLIES)
    }
    pub fn recorded_decisions(&self) -> PathBuf {
        self.root.join(Self::RECORDED_DECISIONS)
    }
    pub fn inputs(&self) -> PathBuf {
        self.root.join(Self::INPUTS)
    }
    pub fn audit_plan(&self) -> PathBuf {
        self.root.join(Self::AUDIT_PLAN)
    }

    /// Whether the directory holds a run (its event log).
    pub fn holds_a_run(&self) -> bool {
        self.events().exists()
    }

    /// Opens (creating) the event log for `identity`, with its writer lock.
    pub fn open_log(&self, identity: RunIdentity) -> Result<EventLog, StoreError> {
        EventLog::open(&self.events(), identity)
    }

    /// Whether a live process writes the run now.
    pub fn has_live_writer(&self) -> bool {
        crate::log::has_live_writer(&self.events())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_bounded_loops_or_bls_own_and_paths_hang_off_the_root() {
        let run = RunDir::new("/runs/r1");
        assert_eq!(run.events(), Path::new("/runs/r1/controller-events.jsonl"));
        assert_eq!(run.outbox("pub"), Path::new("/runs/r1/outbox/pub"));
        assert_eq!(run.processes(), Path::new("/runs/r1/work/processes.jsonl"));
        assert_eq!(RunDir::APPROVALS, "approvals.json");
        assert_eq!(RunDir::LEDGER, "published-effects.json");
    }
}
