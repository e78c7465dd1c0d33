//! How `bl` ends: a named [`Exit`] for every outcome, with bounded-loops'
//! exit codes, and the one error type every command returns, which `main`
//! reports.

use std::fmt;

/// The ways a command ends, each with its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done; valid; a gate passed; every check holds.
    Success,
    /// 1: it ran, and the answer is no: a gate failed, a check does not
    /// hold, a probe found a hole.
    No,
    /// 2: refused: bad input, an unreadable file, a usage error
    /// (bounded-loops' code for an invalid manifest or a failed compile).
    Refused,
    /// 3: a plugin could not decide (an error, never a pass or a fail).
    Undecided,
    /// 124: the command ran out of time.
    TimedOut,
    /// 125: the sandbox refused to run the command at all.
    SandboxRefused,
    /// 127: the program to run was not found.
    NotFound,
    /// A command's own exit code, passed through (`bl sandbox run`).
    Code(u8),
    /// 128 + N: stopped by signal N (130 for SIGINT, 143 for SIGTERM),
    /// after ending everything it had started.
    Signalled(i32),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::No => 1,
            Exit::Refused => 2,
            Exit::Undecided => 3,
            Exit::TimedOut => 124,
            Exit::SandboxRefused => 125,
            Exit::NotFound => 127,
            Exit::Code(code) => code,
            Exit::Signalled(signal) => (128 + signal).clamp(0, 255) as u8,
        }
    }
}

/// Why a command stopped: what to tell the user (printed by `main` after
/// `error: `) and how to exit.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
}

impl CliError {
    /// Exit 2, with `message`.
    pub fn refused(message: impl Into<String>) -> CliError {
        CliError {
            exit: Exit::Refused,
            message: message.into(),
        }
    }

    /// Exit 125: the sandbox would not run the command.
    pub fn sandbox(message: impl Into<String>) -> CliError {
        CliError {
            exit: Exit::SandboxRefused,
            message: message.into(),
        }
    }

    pub fn with_exit(exit: Exit, message: impl Into<String>) -> CliError {
        CliError {
            exit,
            message: message.into(),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// What every command returns.
pub type CliResult = Result<Exit, CliError>;
