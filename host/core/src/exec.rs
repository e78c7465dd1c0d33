//! The port through which bl runs an argv on the operator's behalf: the
//! plugins' command-runner capability today, local CLI nodes later.
//!
//! Adapters (a plain subprocess, bubblewrap, Seatbelt) live in `bl-sandbox`;
//! this module only says what is asked and what comes back.

use std::path::PathBuf;
use std::time::Duration;

/// One command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    pub argv: Vec<String>,
    /// The working directory, and the only tree the command may see as its
    /// workspace. Adapters that can enforce it keep it read-only.
    pub workspace: PathBuf,
    /// Whether the command may write its workspace (a node's turn) or only
    /// read it (a plugin's check). Adapters that cannot enforce read-only
    /// ignore it; the confining ones do.
    pub workspace_writable: bool,
    pub stdin: Vec<u8>,
    pub timeout: Duration,
    /// The most bytes kept from the end of stdout and of stderr, each.
    pub output_cap: usize,
    /// Connect the command to the caller's terminal: the caller's stdin is
    /// passed through (`stdin` is ignored), and stdout and stderr are
    /// copied to the caller's as they are written (the tails are still
    /// kept). Off for plugins, whose commands' output is theirs to read.
    pub stream: bool,
    /// Variables set on top of the scrubbed environment, after its
    /// defaults (an agent CLI gets the operator's PATH and HOME, and the
    /// names its provider profile was granted, with the operator's values).
    pub env: Vec<(String, String)>,
    /// A directory the caller made for this command alone, used as its
    /// HOME and TMPDIR. `None`: the adapter makes a private one and
    /// removes it afterwards. (A graph run keeps one per node attempt in
    /// the run directory, and so avoids creating and deleting directories
    /// for every node.)
    pub private_dir: Option<PathBuf>,
    /// What of the operator's home a caged command sees: only these paths,
    /// where its CLI keeps its login and session files (a provider
    /// profile's `home_paths`), read-write; the rest of that home stays
    /// hidden. `None`: the tier's own view of the host.
    pub home: Option<HomeGrant>,
}

/// Paths of the operator's home lent to a caged command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HomeGrant {
    /// The operator's home (`$HOME`).
    pub dir: PathBuf,
    /// Relative to `dir`; those that do not exist are left out.
    pub paths: Vec<PathBuf>,
    /// Within those, what the command may read but not change: the CLI's
    /// own settings, which an uncaged run of it would act on (hooks, MCP
    /// servers), so a caged turn cannot plant code for a later one.
    pub read_only: Vec<PathBuf>,
}

/// What a finished (or killed) command left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandResult {
    /// `None` when a signal or the timeout ended it.
    pub exit_code: Option<i32>,
    pub stdout_tail: Vec<u8>,
    pub stderr_tail: Vec<u8>,
    /// True when output before the tails was dropped to keep to the cap.
    pub truncated: bool,
    pub timed_out: bool,
    pub duration: Duration,
}

/// Why a command did not run at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// The request is refused before anything starts (empty argv, a tier the
    /// machine cannot provide).
    Denied(String),
    /// The program could not be started.
    Spawn(String),
    /// `bl` was asked to stop (by this signal number); the command's whole
    /// process group was killed and waited for.
    Interrupted(i32),
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommandError::Denied(m) => write!(f, "refused: {m}"),
            CommandError::Spawn(m) => write!(f, "could not start: {m}"),
            CommandError::Interrupted(signal) => {
                write!(f, "was stopped: bl received signal {signal}")
            }
        }
    }
}

impl std::error::Error for CommandError {}

/// Runs commands. Implementations decide how strongly they are contained.
pub trait CommandRunner: Send + Sync {
    /// A short name for records and errors, e.g. `subprocess`.
    fn name(&self) -> &str;
    fn run(&self, spec: &CommandSpec) -> Result<CommandResult, CommandError>;
    /// Commands will run: make ahead what the first one would wait for.
    /// A runner that needs nothing made ahead ignores it.
    fn expect_commands(&self) {}
}
