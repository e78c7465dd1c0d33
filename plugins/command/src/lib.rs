//! The `command` gate: runs one argv through the `command` capability (in
//! the workspace, in whatever sandbox tier the operator granted) and passes
//! iff it exits 0. The tails of stdout and stderr are the evidence.
//!
//! Config: `{ "argv": ["make", "check"], "timeout_ms": 60000, "tail_bytes": 4000 }`
//!
//! A command that cannot start is an error (the gate could not decide); a
//! command that runs past its timeout is a failure.

use bl_plugin_sdk::command::{CommandRequest, describe_exit, run_to_verdict};
use bl_plugin_sdk::{PluginError, Verdict, Workspace};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub argv: Vec<String>,
    pub timeout_ms: Option<u32>,
    #[serde(default = "default_tail")]
    pub tail_bytes: usize,
}

fn default_tail() -> usize {
    4000
}

pub struct CommandGate;

impl bl_plugin_sdk::Gate for CommandGate {
    type Config = Config;

    fn check(_ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        if config.argv.is_empty() {
            return Err(PluginError::BadConfig("`argv` is empty".into()));
        }
        let mut request = CommandRequest::new(&config.argv);
        request.timeout_ms = config.timeout_ms;
        let shown = config.argv.join(" ");
        run_to_verdict(&request, config.tail_bytes, |out| {
            Ok((
                out.exit_code == Some(0),
                format!("`{shown}` {}", describe_exit(out)),
            ))
        })
    }
}

bl_plugin_sdk::export_gate!(CommandGate);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::testing::{NativeWorkspace, with_command_dir};

    fn run(config: &str) -> Result<Verdict, PluginError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x"), "hi").unwrap();
        let ws = NativeWorkspace::new(dir.path()).unwrap();
        with_command_dir(dir.path(), || {
            bl_plugin_sdk::run_gate::<CommandGate>(&ws, config)
        })
    }

    #[test]
    fn passes_on_exit_zero_and_fails_otherwise_with_tails_as_evidence() {
        let v = run(r#"{"argv": ["cat", "x"]}"#).unwrap();
        assert!(v.passed, "{v:?}");
        assert_eq!(v.findings[0].rule.as_deref(), Some("command/exit"));
        assert!(v.findings[1].message.contains("hi"));
        let v = run(r#"{"argv": ["sh", "-c", "echo boom >&2; exit 3"]}"#).unwrap();
        assert!(!v.passed);
        assert!(v.summary.contains("exited 3"), "{}", v.summary);
        assert!(v.findings.iter().any(|f| f.message.contains("boom")));
        assert!(v.evidence_digest.unwrap().starts_with("sha256:"));
    }

    #[test]
    fn a_program_that_cannot_start_is_an_error() {
        let err = run(r#"{"argv": ["/no/such/program"]}"#).unwrap_err();
        assert!(matches!(err, PluginError::Internal(_)), "{err:?}");
    }
}
