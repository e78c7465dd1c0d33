//! bl's graph controller. [`machine`] is its scheduling core: seed 000's
//! rules (conditional edges, joins and the skip cascade, fail modes,
//! retries, repair rounds under one global budget, approvals) as a state
//! machine that decides what may run next and records why. It owns no I/O:
//! no clock, no files, no processes. The executor that drives it through
//! ports (workers, gates, the event log) builds on it; the compiled plan
//! (bl-graph) is turned into its [`machine::Spec`].

pub mod machine;

pub use machine::{
    AttemptEnd, EdgeSpec, FailMode, Failure, Guard, Join, Machine, MachineError, NodeSpec,
    NodeState, RunStatus, Spec, Transition,
};
