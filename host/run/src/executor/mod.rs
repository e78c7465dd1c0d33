//! The executor: [`drive`] runs a compiled plan's [`Machine`](crate::Machine)
//! on tokio through [`ports`] (worker, stage, judge, event log, artifacts,
//! decisions, ledger) whose adapters are composed elsewhere. The controller
//! asks the [`Judge`] and records; it decides nothing itself.

mod controller;
mod ports;

pub use controller::{Caps, MAX_REDRIVES, Price, RunEnd, RunSettings, drive, media_type_of};
pub use ports::*;
