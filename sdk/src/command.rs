//! The `command` capability: run an argv with the workspace as the working
//! directory, inside whatever sandbox tier the operator granted. Calling
//! [`run`] is what makes a plugin request `command`; bl refuses to load it
//! unless the operator grants it.

pub use crate::bindings::gate::bl::plugin::command::{CommandError, CommandOutput, CommandRequest};

use crate::{Finding, PluginError, Severity, Verdict};

impl CommandRequest {
    /// A request to run `argv`, with no stdin and the host's default timeout.
    pub fn new<S: AsRef<str>>(argv: &[S]) -> Self {
        CommandRequest {
            argv: argv.iter().map(|s| s.as_ref().to_string()).collect(),
            stdin: None,
            timeout_ms: None,
        }
    }
}

/// Runs one command. Natively (in unit tests) it runs a plain child process
/// in the directory set by [`native::with_command_dir`].
pub fn run(request: &CommandRequest) -> Result<CommandOutput, CommandError> {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::gate::bl::plugin::command::run(request)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        native::run_command_natively(request)
    }
}

/// Runs `request` and turns the result into a verdict with `judge`, adding
/// the tails of stdout and stderr as findings and their digest as evidence.
/// A refused command is a capability error; one that cannot start, or that
/// ran into its timeout, is an internal error: either way the gate could
/// not decide, so `judge` never sees it.
pub fn run_to_verdict(
    request: &CommandRequest,
    tail_bytes: usize,
    judge: impl FnOnce(&CommandOutput) -> Result<(bool, String), PluginError>,
) -> Result<Verdict, PluginError> {
    let output = run(request).map_err(|e| match e {
        CommandError::Denied(m) => PluginError::Capability(format!("command refused: {m}")),
        CommandError::Spawn(m) => PluginError::Internal(format!("command could not start: {m}")),
    })?;
    if output.timed_out {
        return Err(PluginError::Internal(format!(
            "`{}` {}: a command that does not finish decides nothing",
            request.argv.join(" "),
            describe_exit(&output)
        )));
    }
    let (passed, summary) = judge(&output)?;
    let stdout = tail(&output.stdout_tail, tail_bytes);
    let stderr = tail(&output.stderr_tail, tail_bytes);
    let mut evidence = Vec::new();
    evidence.extend_from_slice(&output.stdout_tail);
    evidence.extend_from_slice(&output.stderr_tail);
    let severity = if passed {
        Severity::Info
    } else {
        Severity::High
    };
    let mut findings = Vec::new();
    // The exit code as data, so a host can record it without parsing prose.
    if let Some(code) = output.exit_code {
        findings.push(Finding::new(Severity::Info, code.to_string()).rule("command/exit"));
    }
    if !stdout.is_empty() {
        findings.push(
            Finding::new(severity, format!("stdout (tail):\n{stdout}")).rule("command/stdout"),
        );
    }
    if !stderr.is_empty() {
        findings.push(
            Finding::new(severity, format!("stderr (tail):\n{stderr}")).rule("command/stderr"),
        );
    }
    Ok(Verdict {
        passed,
        summary,
        findings,
        evidence_digest: Some(crate::digest(&evidence)),
    })
}

fn tail(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..])
        .trim_end()
        .to_string()
}

/// How a command ended, in words: "exited 2", "timed out after 500 ms".
pub fn describe_exit(output: &CommandOutput) -> String {
    match (output.timed_out, output.exit_code) {
        (true, _) => format!("timed out after {} ms", output.duration_ms),
        (false, Some(code)) => format!("exited {code}"),
        (false, None) => "was killed by a signal".to_string(),
    }
}

/// What stands in for the host natively (the SDK's test harness,
/// re-exported by [`crate::testing`]).
pub mod native {
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};

    use super::{CommandError, CommandOutput, CommandRequest};

    thread_local! {
        static COMMAND_DIR: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
    }

    /// Runs `f` with native [`super::run`] calls working in `dir`, as
    /// the host runs them in the invocation's workspace.
    pub fn with_command_dir<T>(dir: &Path, f: impl FnOnce() -> T) -> T {
        COMMAND_DIR.with(|d| *d.borrow_mut() = Some(dir.to_path_buf()));
        let out = f();
        COMMAND_DIR.with(|d| *d.borrow_mut() = None);
        out
    }

    /// The native stand-in for the host's command runner: a child process with
    /// a cleared environment (PATH only) in the directory set by
    /// [`with_command_dir`].
    pub fn run_command_natively(request: &CommandRequest) -> Result<CommandOutput, CommandError> {
        use std::io::Write;
        let Some((program, args)) = request.argv.split_first() else {
            return Err(CommandError::Denied("the argv is empty".into()));
        };
        let dir = COMMAND_DIR.with(|d| d.borrow().clone()).ok_or_else(|| {
            CommandError::Denied("no workspace: wrap the call in testing::with_command_dir".into())
        })?;
        let started = std::time::Instant::now();
        let mut child = std::process::Command::new(program)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| CommandError::Spawn(format!("{program}: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(request.stdin.as_deref().unwrap_or_default());
        }
        let output = child
            .wait_with_output()
            .map_err(|e| CommandError::Spawn(format!("{program}: {e}")))?;
        Ok(CommandOutput {
            exit_code: output.status.code(),
            stdout_tail: output.stdout,
            stderr_tail: output.stderr,
            truncated: false,
            timed_out: false,
            duration_ms: started.elapsed().as_millis() as u64,
        })
    }
}
