//! The `pytest` gate: runs `python3 -m pytest -q` in the workspace through
//! the `command` capability.
//!
//! pytest's exit codes decide: 0 passes; 1 (tests failed), 2 (interrupted,
//! which is how collection errors end) and 5 (no tests collected) are
//! rejections; 3 (internal error), 4 (usage error), a missing pytest, a
//! signal or anything else means the gate could not decide, an error.
//! Caches and bytecode are not written, so a read-only workspace works.

use bl_plugin_sdk::command::{CommandRequest, run_to_verdict};
use bl_plugin_sdk::{Gate, PluginError, Verdict, Workspace};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub args: Vec<String>,
    pub python: Option<String>,
    pub timeout_ms: Option<u32>,
}

pub struct PytestGate;

impl Gate for PytestGate {
    type Config = Config;

    fn check(_ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        let python = config.python.unwrap_or_else(|| "python3".into());
        let mut argv = vec![
            python,
            "-B".into(),
            "-m".into(),
            "pytest".into(),
            "-q".into(),
            "-p".into(),
            "no:cacheprovider".into(),
        ];
        argv.extend(config.args);
        let mut request = CommandRequest::new(&argv);
        request.timeout_ms = config.timeout_ms;
        run_to_verdict(&request, 4000, |out| {
            let stderr = String::from_utf8_lossy(&out.stderr_tail);
            match out.exit_code {
                Some(0) => Ok((true, "pytest: all tests passed".into())),
                Some(1) if stderr.contains("No module named pytest") => Err(PluginError::Internal(
                    "pytest is not installed for this python".into(),
                )),
                Some(1) => Ok((false, "pytest: tests failed".into())),
                Some(2) => Ok((false, "pytest: collection errors or interrupted".into())),
                Some(5) => Ok((false, "pytest: no tests were collected".into())),
                Some(code) => Err(PluginError::Internal(format!(
                    "pytest exited {code} (internal or usage error): {}",
                    stderr.trim()
                ))),
                None => Err(PluginError::Internal(
                    "pytest was killed by a signal".into(),
                )),
            }
        })
    }
}

bl_plugin_sdk::export_gate!(PytestGate);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::testing::{NativeWorkspace, with_command_dir};

    fn run(files: &[(&str, &str)]) -> Result<Verdict, PluginError> {
        let dir = tempfile::tempdir().unwrap();
        for (p, t) in files {
            std::fs::write(dir.path().join(p), t).unwrap();
        }
        let ws = NativeWorkspace::new(dir.path()).unwrap();
        with_command_dir(dir.path(), || {
            bl_plugin_sdk::run_gate::<PytestGate>(&ws, r#"{"python": "/usr/bin/python3"}"#)
        })
    }

    #[test]
    fn passing_failing_and_uncollectable_tests() {
        assert!(
            run(&[("test_ok.py", "def test_x():\n    assert True\n")])
                .unwrap()
                .passed
        );
        let failed = run(&[("test_bad.py", "def test_x():\n    assert False\n")]).unwrap();
        assert!(
            !failed.passed && failed.summary.contains("tests failed"),
            "{failed:?}"
        );
        let broken = run(&[("test_broken.py", "import no_such_module_here\n")]).unwrap();
        assert!(
            !broken.passed && broken.summary.contains("collection"),
            "{broken:?}"
        );
    }
}
