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
    /// 3: a graph run is paused, waiting for a human decision.
    Paused,
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
            Exit::Undecided | Exit::Paused => 3,
            Exit::TimedOut => 124,
            Exit::SandboxRefused => 125,
            Exit::NotFound => 127,
            Exit::Code(code) => code,
            Exit::Signalled(signal) => (128 + signal).clamp(0, 255) as u8,
        }
    }

    /// How a child process ended, as bl passes it on: its own code, or
    /// 128 + N when signal N ended it.
    pub fn of_status(status: std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code.clamp(0, 255) as u8),
            (None, Some(signal)) => Exit::Code((128 + signal).clamp(0, 255) as u8),
            _ => Exit::No,
        }
    }

    /// The `code` of a `--json` error object that says no more than this.
    pub fn name(self) -> String {
        match self {
            Exit::Success => "ok".into(),
            Exit::No => "failed".into(),
            Exit::Refused => "refused".into(),
            Exit::Undecided => "undecided".into(),
            Exit::Paused => "paused".into(),
            Exit::TimedOut => "timed_out".into(),
            Exit::SandboxRefused => "sandbox_refused".into(),
            Exit::NotFound => "not_found".into(),
            Exit::Code(code) => format!("exit_{code}"),
            Exit::Signalled(_) => "interrupted".into(),
        }
    }
}

/// Why a command stopped: what to tell the user (printed by `main` after
/// `error: `) and how to exit.
#[derive(Debug)]
pub struct CliError {
    pub exit: Exit,
    pub message: String,
    /// What a `--json` error object says beyond the message (boxed: most
    /// errors carry none, and `Result<Exit, CliError>` stays small).
    pub detail: Box<ErrorDetail>,
}

/// The fields of a `--json` error object: `code` (a refusal code, or the
/// exit's name), and where they apply `path`, `pointer`, `line`, `column`.
#[derive(Debug, Default)]
pub struct ErrorDetail {
    pub code: Option<String>,
    pub path: Option<String>,
    pub pointer: Option<String>,
    pub line: Option<u32>,
    pub column: Option<u32>,
    /// What may fix it (a close name, the names allowed).
    pub hints: Vec<String>,
    /// The command already printed its JSON answer for this failure (as
    /// bounded-loops defines it): `main` adds nothing to stdout.
    pub reported: bool,
}

impl ErrorDetail {
    /// A refused manifest's code and place.
    pub fn of_manifest(refused: &bl_app::graph_plan::ManifestRefusal) -> ErrorDetail {
        let refusal = &refused.refusal;
        ErrorDetail {
            code: Some(refusal.code.to_string()),
            path: Some(refused.path.display().to_string()),
            pointer: Some(refusal.pointer.clone()),
            line: refusal.pos.map(|p| p.line),
            column: refusal.pos.map(|p| p.col),
            hints: refusal.hints.clone(),
            reported: false,
        }
    }
}

impl CliError {
    /// Exit 2, with `message`.
    pub fn refused(message: impl Into<String>) -> CliError {
        CliError::with_exit(Exit::Refused, message)
    }

    /// Exit 125: the sandbox would not run the command.
    pub fn sandbox(message: impl Into<String>) -> CliError {
        CliError::with_exit(Exit::SandboxRefused, message)
    }

    pub fn with_exit(exit: Exit, message: impl Into<String>) -> CliError {
        CliError {
            exit,
            message: message.into(),
            detail: Box::default(),
        }
    }

    /// Marks the failure as already answered on stdout the way
    /// bounded-loops answers it (see [`ErrorDetail::reported`]).
    pub fn reported(mut self) -> CliError {
        self.detail.reported = true;
        self
    }

    pub fn with_detail(mut self, detail: ErrorDetail) -> CliError {
        self.detail = Box::new(detail);
        self
    }

    /// The `--json` error object: `{"error": {"code", "message", …}}`.
    pub fn to_json(&self) -> serde_json::Value {
        let d = &self.detail;
        let mut error = serde_json::json!({
            "code": d.code.clone().unwrap_or_else(|| self.exit.name()),
            "message": self.message,
        });
        for (key, value) in [
            ("path", d.path.clone().map(serde_json::Value::from)),
            ("pointer", d.pointer.clone().map(serde_json::Value::from)),
            ("line", d.line.map(serde_json::Value::from)),
            ("column", d.column.map(serde_json::Value::from)),
        ] {
            if let Some(value) = value {
                error[key] = value;
            }
        }
        if !d.hints.is_empty() {
            error["hints"] = serde_json::Value::from(d.hints.clone());
        }
        serde_json::json!({ "error": error })
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

impl From<bl_app::AppError> for CliError {
    fn from(e: bl_app::AppError) -> CliError {
        use bl_app::AppError;
        let exit = match &e {
            AppError::Refused(_) => Exit::Refused,
            AppError::Manifest { refusal, .. } => {
                return CliError::refused(e.message())
                    .with_detail(ErrorDetail::of_manifest(refusal));
            }
            AppError::Undecided(_) => Exit::Undecided,
            AppError::Sandbox(_) => Exit::SandboxRefused,
        };
        CliError::with_exit(exit, e.message())
    }
}

/// What every command returns.
pub type CliResult = Result<Exit, CliError>;
