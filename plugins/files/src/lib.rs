//! The `files` gate: passes when every required file exists and is
//! non-empty, every `contains` needle is present and no `forbid` needle is.
//!
//! Config (JSON):
//! ```json
//! { "required": ["report.md"],
//!   "contains": { "report.md": ["## Summary"] },
//!   "forbid":   { "report.md": ["TODO"] } }
//! ```

use std::collections::BTreeMap;

use bl_plugin_sdk::{EntryKind, Finding, FsError, Gate, PluginError, Severity, Verdict, Workspace};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Files that must exist and be non-empty.
    pub required: Vec<String>,
    /// Text each file must contain.
    pub contains: BTreeMap<String, Vec<String>>,
    /// Text each file must not contain.
    pub forbid: BTreeMap<String, Vec<String>>,
}

pub struct FilesGate;

impl Gate for FilesGate {
    type Config = Config;

    fn check(ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        if config.required.is_empty() && config.contains.is_empty() && config.forbid.is_empty() {
            return Err(PluginError::BadConfig(
                "config names no files: set `required`, `contains` or `forbid`".into(),
            ));
        }
        let mut findings = Vec::new();
        let mut checked = 0usize;

        for path in &config.required {
            checked += 1;
            match ws.stat(path) {
                Ok(None) => findings.push(missing(path)),
                Ok(Some(entry)) if entry.kind != EntryKind::File => findings.push(
                    Finding::new(
                        Severity::High,
                        format!(
                            "{path} is not a regular file (a directory, FIFO, socket or device)"
                        ),
                    )
                    .rule("files/regular")
                    .at(path),
                ),
                Ok(Some(entry)) if entry.size == 0 => findings.push(
                    Finding::new(Severity::High, format!("{path} is empty"))
                        .rule("files/non-empty")
                        .at(path),
                ),
                Ok(Some(_)) => {}
                Err(e) => return Err(capability_error(path, e)),
            }
        }

        for (path, needles, must_contain) in config
            .contains
            .iter()
            .map(|(p, n)| (p, n, true))
            .chain(config.forbid.iter().map(|(p, n)| (p, n, false)))
        {
            checked += 1;
            let text = match ws.read_to_string(path) {
                Ok(text) => text,
                Err(FsError::NotFound(_)) => {
                    findings.push(missing(path));
                    continue;
                }
                // Never opened: its text cannot hold or lack anything.
                Err(FsError::WrongKind(_)) => {
                    findings.push(
                        Finding::new(
                            Severity::High,
                            format!("{path} is not a regular file, so its text cannot be checked"),
                        )
                        .rule("files/regular")
                        .at(path),
                    );
                    continue;
                }
                Err(e) => return Err(capability_error(path, e)),
            };
            for needle in needles {
                let found = text.find(needle.as_str());
                match (must_contain, found) {
                    (true, None) => findings.push(
                        Finding::new(
                            Severity::High,
                            format!("{path} does not contain {needle:?}"),
                        )
                        .rule("files/contains")
                        .at(path),
                    ),
                    (false, Some(offset)) => {
                        let line = text[..offset].matches('\n').count() as u32 + 1;
                        let mut finding = Finding::new(
                            Severity::High,
                            format!("{path} contains forbidden text {needle:?}"),
                        )
                        .rule("files/forbid")
                        .at(path);
                        if let Some(location) = finding.location.as_mut() {
                            location.line = Some(line);
                        }
                        findings.push(finding);
                    }
                    _ => {}
                }
            }
        }

        let problems = findings.len();
        Ok(Verdict::from_findings(
            findings,
            &format!("all {checked} file checks hold"),
            &format!("{problems} of the file checks failed"),
        ))
    }
}

fn missing(path: &str) -> Finding {
    Finding::new(Severity::High, format!("{path} does not exist"))
        .rule("files/exists")
        .at(path)
}

/// A path the host refused (an escape, say) is the operator's config asking
/// for something the gate may not see: the gate cannot decide, so it errs.
fn capability_error(path: &str, error: FsError) -> PluginError {
    PluginError::Capability(format!(
        "{path}: {}",
        bl_plugin_sdk::describe_fs_error(&error)
    ))
}

#[cfg(target_arch = "wasm32")]
bl_plugin_sdk::export_gate!(FilesGate);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::run_gate;
    use bl_plugin_sdk::testing::NativeWorkspace;

    fn workspace(files: &[(&str, &str)]) -> (std::path::PathBuf, NativeWorkspace) {
        let dir = std::env::temp_dir().join(format!(
            "bl-files-gate-{}-{}",
            std::process::id(),
            files.len()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, body) in files {
            std::fs::write(dir.join(name), body).unwrap();
        }
        let ws = NativeWorkspace::new(&dir).unwrap();
        (dir, ws)
    }

    #[test]
    fn passes_when_all_checks_hold_and_fails_with_one_finding_each() {
        let (_dir, ws) = workspace(&[("a.md", "## Summary\nok\n"), ("b.md", "")]);
        let ok = run_gate::<FilesGate>(
            &ws,
            r#"{"required":["a.md"],"contains":{"a.md":["Summary"]}}"#,
        )
        .unwrap();
        assert!(ok.passed, "{ok:?}");
        let bad = run_gate::<FilesGate>(
            &ws,
            r#"{"required":["a.md","b.md","c.md"],"forbid":{"a.md":["ok"]}}"#,
        )
        .unwrap();
        assert!(!bad.passed);
        assert_eq!(bad.findings.len(), 3, "{:?}", bad.findings);
        assert_eq!(bad.findings[2].location.as_ref().unwrap().line, Some(2));
    }

    #[test]
    fn unknown_config_field_is_bad_config_not_a_verdict() {
        let (_dir, ws) = workspace(&[]);
        let err = run_gate::<FilesGate>(&ws, r#"{"requird":["a"]}"#).unwrap_err();
        assert!(matches!(err, PluginError::BadConfig(_)), "{err:?}");
    }

    #[test]
    fn escaping_path_is_an_error_not_a_failed_verdict() {
        let (_dir, ws) = workspace(&[]);
        let err = run_gate::<FilesGate>(&ws, r#"{"required":["../etc/passwd"]}"#).unwrap_err();
        assert!(matches!(err, PluginError::Capability(_)), "{err:?}");
    }
}
