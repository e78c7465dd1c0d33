//! The `scanner` gate: runs one security scanner in the workspace through
//! the `command` capability, reads its JSON report from stdout and counts
//! the findings. No finding and exit 0 passes; findings (with exit 0 or 1)
//! fail; a report it cannot read, or a scanner that cannot start, means the
//! gate could not decide: an error, never a verdict.
//!
//! Config: `{ "kind": "gitleaks", "timeout_ms": 60000 }`
//!
//! The verdict carries, as data for the host's record: the command
//! (`scanner/cmd`), its exit code (`command/exit`) and the finding count
//! (`scanner/findings`).

use bl_plugin_sdk::command::{CommandError, CommandRequest, run};
use bl_plugin_sdk::{Finding, Gate, PluginError, Severity, Verdict, Workspace};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kind: String,
    pub timeout_ms: Option<u32>,
}

/// The program a scanner kind runs, and its argv (its JSON on stdout).
pub fn scanner_argv(kind: &str) -> Option<(&'static str, &'static [&'static str])> {
    Some(match kind {
        "osv" => (
            "osv-scanner",
            &["osv-scanner", "--format", "json", "-r", "."],
        ),
        "checkov" => ("checkov", &["checkov", "-d", ".", "-o", "json", "--quiet"]),
        "gitleaks" => (
            "gitleaks",
            &[
                "gitleaks",
                "detect",
                "--no-git",
                "--source",
                ".",
                "--report-format",
                "json",
                "--report-path",
                "/dev/stdout",
            ],
        ),
        "semgrep" => (
            "semgrep",
            &[
                "semgrep", "scan", "--config", "auto", "--json", "--quiet", ".",
            ],
        ),
        "trivy" => (
            "trivy",
            &["trivy", "fs", "--format", "json", "--exit-code", "1", "."],
        ),
        _ => return None,
    })
}

/// How many findings a scanner's JSON report holds; `None` when it is not
/// a report of that scanner.
pub fn count_findings(tool: &str, stdout: &str) -> Option<u64> {
    let report: Value = serde_json::from_str(stdout.trim()).ok()?;
    let len = |v: &Value| v.as_array().map(|a| a.len() as u64);
    match tool {
        "osv-scanner" => Some(
            report["results"]
                .as_array()?
                .iter()
                .flat_map(|r| r["packages"].as_array().cloned().unwrap_or_default())
                .map(|p| len(&p["vulnerabilities"]).unwrap_or(0))
                .sum(),
        ),
        "checkov" => {
            let one = |r: &Value| r["summary"]["failed"].as_u64();
            match &report {
                Value::Array(items) => Some(items.iter().filter_map(one).sum()),
                r => one(r),
            }
        }
        "gitleaks" => len(&report),
        "semgrep" => len(&report["results"]),
        "trivy" => Some(
            report["Results"]
                .as_array()
                .map(|rs| {
                    rs.iter()
                        .map(|r| {
                            len(&r["Vulnerabilities"]).unwrap_or(0)
                                + len(&r["Misconfigurations"]).unwrap_or(0)
                                + len(&r["Secrets"]).unwrap_or(0)
                        })
                        .sum()
                })
                .unwrap_or(0),
        ),
        _ => None,
    }
}

/// What a finished scan shows: `Ok((passed, summary, count))`, or why the
/// report decides nothing (the gate could not decide).
pub fn judge_report(
    tool: &str,
    code: i64,
    stdout: &str,
) -> Result<(bool, String, u64), PluginError> {
    match count_findings(tool, stdout) {
        Some(0) if code == 0 => Ok((true, format!("{tool}: no findings"), 0)),
        Some(n) if n > 0 && (0..=1).contains(&code) => {
            Ok((false, format!("{tool}: {n} finding(s)"), n))
        }
        _ => Err(PluginError::Internal(format!(
            "{tool} exited {code} without a report bl could read (its JSON on stdout, whole)"
        ))),
    }
}

pub struct ScannerGate;

impl Gate for ScannerGate {
    type Config = Config;

    fn check(_ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        let (tool, argv) = scanner_argv(&config.kind).ok_or_else(|| {
            PluginError::BadConfig(format!(
                "no scanner of kind {:?} (osv, checkov, gitleaks, semgrep, trivy)",
                config.kind
            ))
        })?;
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        let mut request = CommandRequest::new(&argv);
        request.timeout_ms = config.timeout_ms;
        let output = run(&request).map_err(|e| match e {
            CommandError::Denied(m) => PluginError::Capability(format!("command refused: {m}")),
            CommandError::Spawn(m) => PluginError::Internal(format!(
                "could not launch {tool} (is it installed and on PATH?): {m}"
            )),
        })?;
        if output.timed_out {
            return Err(PluginError::Internal(format!(
                "{tool} did not finish in time: a scan that does not finish decides nothing"
            )));
        }
        let code = output.exit_code.map_or(-1, i64::from);
        let stdout = String::from_utf8_lossy(&output.stdout_tail);
        let (passed, summary, count) = judge_report(tool, code, &stdout)?;
        let data = |rule: &str, message: String| Finding::new(Severity::Info, message).rule(rule);
        let mut evidence = output.stdout_tail.clone();
        evidence.extend_from_slice(&output.stderr_tail);
        Ok(Verdict {
            passed,
            summary,
            findings: vec![
                data("scanner/cmd", argv.join(" ")),
                data("command/exit", code.to_string()),
                data("scanner/findings", count.to_string()),
            ],
            evidence_digest: Some(bl_plugin_sdk::digest(&evidence)),
        })
    }
}

bl_plugin_sdk::export_gate!(ScannerGate);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scanners_report_is_counted_in_its_own_shape() {
        let cases = [
            (
                "osv-scanner",
                r#"{"results": [{"packages": [{"vulnerabilities": [{}, {}]}, {"vulnerabilities": [{}]}]}]}"#,
                3,
            ),
            ("checkov", r#"{"summary": {"failed": 2}}"#, 2),
            (
                "checkov",
                r#"[{"summary": {"failed": 1}}, {"summary": {"failed": 4}}]"#,
                5,
            ),
            ("gitleaks", r#"[{"RuleID": "aws"}]"#, 1),
            ("semgrep", r#"{"results": []}"#, 0),
            (
                "trivy",
                r#"{"Results": [{"Vulnerabilities": [{}], "Secrets": [{}, {}]}]}"#,
                3,
            ),
        ];
        for (tool, report, n) in cases {
            assert_eq!(count_findings(tool, report), Some(n), "{tool}: {report}");
        }
        assert_eq!(count_findings("gitleaks", "not json"), None);
    }

    #[test]
    fn no_findings_pass_findings_fail_and_an_unread_report_decides_nothing() {
        assert_eq!(
            judge_report("gitleaks", 0, "[]").unwrap(),
            (true, "gitleaks: no findings".into(), 0)
        );
        assert_eq!(
            judge_report("gitleaks", 1, r#"[{}, {}]"#).unwrap(),
            (false, "gitleaks: 2 finding(s)".into(), 2)
        );
        let err = judge_report("gitleaks", 2, "panic: oops").unwrap_err();
        assert!(
            matches!(&err, PluginError::Internal(m) if m.contains("gitleaks exited 2 without a report")),
            "{err:?}"
        );
        // No findings but a failing exit: the report is not to be trusted.
        assert!(judge_report("semgrep", 2, r#"{"results": []}"#).is_err());
    }

    #[test]
    fn an_unknown_kind_is_bad_config() {
        let dir = tempfile::tempdir().unwrap();
        let ws = bl_plugin_sdk::testing::NativeWorkspace::new(dir.path()).unwrap();
        let err = bl_plugin_sdk::run_gate::<ScannerGate>(&ws, r#"{"kind": "nmap"}"#).unwrap_err();
        assert!(matches!(err, PluginError::BadConfig(_)), "{err:?}");
    }
}
