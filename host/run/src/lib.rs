//! bl's graph controller. [`machine`] is its scheduling core: seed 000's
//! rules (conditional edges, joins and the skip cascade, fail modes,
//! retries, repair rounds under one global budget, approvals) as a state
//! machine that decides what may run next and records why. It owns no I/O:
//! no clock, no files, no processes. [`schedule`] turns a compiled plan
//! (bl-graph) into the machine's [`machine::Spec`]; [`events`] is the
//! event vocabulary of bounded-loops 0.7; [`projection`] folds a recorded
//! log into the run's status, and [`timeline`] into when each attempt ran.
//! [`executor`] drives the machine on tokio
//! through ports (worker, event log, artifacts, decisions, ledger) whose
//! adapters live elsewhere (bl-workers, bl-store) and are composed by the CLI.

pub mod events;
pub mod executor;
pub mod machine;
pub mod projection;
pub mod reply;
pub mod schedule;
pub mod timeline;

pub use machine::{
    AttemptEnd, EdgeSpec, FailMode, Failure, Guard, Incoming, Join, Machine, MachineError,
    NodeSpec, NodeState, RunStatus, Spec, Transition, admit, admits_early,
};
