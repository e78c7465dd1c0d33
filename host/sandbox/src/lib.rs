//! bl's command-runner adapters: the ways an argv runs on the operator's
//! behalf, behind the [`bl_core::CommandRunner`] port.
//!
//! This crate owns process spawning, environment scrubbing, output capping
//! and timeouts, and the OS cages. [`Subprocess`] is the unconfined
//! adapter: a cleared environment, a private HOME and TMPDIR, the workspace
//! as the working directory, a timeout that kills the whole process group
//! and capped output. [`Sandbox`] runs a command in an isolation [`Tier`],
//! caging it on Linux where the tier asks for it, with bubblewrap or, run
//! by root in the process tier, with a cage of bl's own (`root_cage`):
//! masked /proc, the [`seccomp`] table, never host root (see
//! [`caged_user`]). It refuses (with the fix) where the machine cannot.
//! [`probe`] proves the cage from outside it; [`inspect`] reads a caged
//! process from the host.
//! It knows nothing of graphs, plugins or runs.

mod bubblewrap;
pub mod caged_user;
pub mod containment;
pub mod doctor;
pub mod inspect;
pub mod probe;
#[cfg(target_os = "linux")]
mod root_cage;
mod sandbox;
pub mod seatbelt;
pub mod seccomp;
#[cfg(target_os = "linux")]
mod spare_net;
#[cfg(target_os = "linux")]
mod spawn;
mod subprocess;
mod tail;
mod tier;

pub use bubblewrap::{
    BRIDGE_BINARY_INSIDE, HIDDEN, PROTECTED, PROXY_LISTEN_INSIDE, PROXY_SOCKET_INSIDE,
    READ_ONLY_PROC,
};
pub use caged_user::{CagedUser, CagedUserError, Lending};
pub use sandbox::{EgressBridge, Sandbox, find_bwrap};
pub use subprocess::{SCRUBBED_PATH, Subprocess};
pub use tail::TailBuffer;
pub use tier::{Tier, UnknownTier};
