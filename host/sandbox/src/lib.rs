//! bl's command-runner adapters: the ways an argv runs on the operator's
//! behalf, behind the [`bl_core::CommandRunner`] port.
//!
//! This crate owns process spawning, environment scrubbing, output capping
//! and timeouts. [`Subprocess`] is the unconfined adapter: a cleared
//! environment, a private HOME and TMPDIR, the workspace as the working
//! directory, a timeout that kills the whole process group and capped
//! output. The OS sandbox adapters (bubblewrap, Seatbelt) take its place
//! behind the same port.

mod subprocess;
mod tail;

pub use subprocess::Subprocess;
pub use tail::TailBuffer;
