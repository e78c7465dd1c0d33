//! The limits every plugin call runs under: its deadline, memory, fuel and
//! the most it may read, say, publish, log or run.

use std::time::Duration;

/// Per-invocation limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wall clock for one call, from instantiation to return.
    pub deadline: Duration,
    /// The most linear memory a plugin instance may grow to.
    pub memory_bytes: usize,
    /// Wasm instructions' worth of fuel per call; `None` runs on the deadline alone.
    pub fuel: Option<u64>,
    /// The largest file one `workspace.dir.read` returns.
    pub max_read_bytes: u64,
    /// The most bytes of summary and findings text a verdict may carry.
    pub max_output_bytes: usize,
    /// The most bytes a transform may publish across all its outputs.
    pub max_artifact_bytes: usize,
    /// The most bytes of messages and fields a plugin may log in one call.
    pub max_log_bytes: usize,
    /// The longest one `command.run` may take (never past the deadline).
    pub command_timeout: Duration,
    /// The tail of stdout and of stderr a command's result keeps.
    pub command_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_secs(10),
            memory_bytes: 256 << 20,
            fuel: None,
            max_read_bytes: 16 << 20,
            max_output_bytes: 1 << 20,
            max_artifact_bytes: 64 << 20,
            max_log_bytes: 256 << 10,
            command_timeout: Duration::from_secs(300),
            command_output_bytes: 64 << 10,
        }
    }
}
