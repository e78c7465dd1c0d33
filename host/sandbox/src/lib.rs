//! bl's command-runner adapters: the ways an argv runs on the operator's
//! behalf, behind the [`bl_core::CommandRunner`] port.
//!
//! This crate owns process spawning, environment scrubbing, output capping
//! and timeouts. [`Subprocess`] is the unconfined adapter: a cleared
//! environment, a private HOME and TMPDIR, the workspace as the working
//! directory, a timeout that kills the whole process group and capped
//! output. [`Sandbox`] runs a command in an isolation [`Tier`], caging it
//! with bubblewrap on Linux where the tier asks for it, and refusing (with
//! the fix) where the machine cannot.

mod bubblewrap;
pub mod probe;
pub mod seatbelt;
mod subprocess;
mod tail;

pub use bubblewrap::{
    BRIDGE_BINARY_INSIDE, EgressBridge, PROTECTED, PROXY_LISTEN_INSIDE, PROXY_SOCKET_INSIDE,
    Sandbox, Tier,
};
pub use subprocess::Subprocess;
pub use tail::TailBuffer;
