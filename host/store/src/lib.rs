//! bl's run store. This crate owns the run directory's records on disk:
//! today the hash-chained event log (`controller-events.jsonl`, in
//! bounded-loops 0.7's exact format) and the checks `bl verify` runs over a
//! run directory, with signed checkpoints and Merkle proofs ([`merkle`],
//! [`checkpoint`], [`provable`]). [`chain`] is the pure part (the line format and chain
//! verification over bytes); [`log`] is the file adapter (exclusive lock,
//! verify-once open, O(1) appends, durable group commit, torn-tail
//! recovery); [`staged`] keeps a graph run's lines beside the log until what
//! they name is durable. [`egress_log`] is the run's record of the egress broker's
//! decisions, in the same format. [`loop_ledger`] checks a bounded loop's lap ledger.
//!
//! It never runs nodes, calls plugins or reaches the network, and it never
//! rewrites a recorded line: recovery only moves an incomplete tail aside.

pub mod approvals;
pub mod artifacts;
pub mod chain;
pub mod checkpoint;
mod durable;
pub mod egress_log;
pub mod ledger;
mod line;
pub mod log;
pub mod loop_dir;
pub mod loop_ledger;
pub mod merkle;
pub mod proof_check;
pub mod provable;
pub mod run_dir;
pub mod staged;

pub use approvals::{
    ApprovalError, ApprovalRecord, Approvals, SignatureError, approval_id, verify_approvals,
};
pub use artifacts::{ArtifactError, ArtifactMeta, ArtifactStore, verify_artifacts};
pub use chain::TornTail;
pub use chain::{ChainError, ChainHead, EVENT_KEYS, GENESIS_HASH, RunIdentity, verify_chain};
pub use checkpoint::{Checkpoint, NoteError, SigningKey, VerifierKey};
pub use durable::sync_name_of;
pub use egress_log::{EGRESS_EVENTS, EgressLog, EgressLogError};
pub use ledger::{Ledger, LedgerError, Publish, Reconciliation, effect_key};
pub use log::{Appended, EventLog, StoreError, has_live_writer, recover_torn_tail, set_aside_from};
pub use loop_dir::{LoopDir, LoopRunDir};
pub use run_dir::RunDir;
pub use staged::read_log;
