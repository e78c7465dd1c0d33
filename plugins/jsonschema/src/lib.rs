//! The `jsonschema` gate: checks JSON files in the workspace against a JSON
//! Schema. The draft comes from the schema's `$schema` (7 and 2020-12 are
//! supported; 2020-12 when absent). Each violation is a finding located by
//! the file and the JSON pointer of the failing value.
//!
//! Config (JSON):
//! ```json
//! { "schema": "schemas/report.schema.json", "files": ["report.json"] }
//! ```
//! `schema` is a path in the workspace or an inline schema object.

use bl_plugin_sdk::{Finding, FsError, Gate, PluginError, Severity, Verdict, Workspace};
use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// A workspace path to the schema, or the schema itself.
    pub schema: Value,
    /// The JSON files to check.
    pub files: Vec<String>,
}

pub struct JsonSchemaGate;

fn capability(path: &str, e: FsError) -> PluginError {
    PluginError::Capability(format!("{path}: {}", bl_plugin_sdk::describe_fs_error(&e)))
}

impl Gate for JsonSchemaGate {
    type Config = Config;

    fn check(ws: &dyn Workspace, config: Config) -> Result<Verdict, PluginError> {
        if config.files.is_empty() {
            return Err(PluginError::BadConfig(
                "`files` is empty: name the JSON files to check".into(),
            ));
        }
        let schema = match &config.schema {
            Value::String(path) => {
                let text = ws.read_to_string(path).map_err(|e| capability(path, e))?;
                serde_json::from_str(&text).map_err(|e| {
                    PluginError::BadConfig(format!("schema {path} is not JSON: {e}"))
                })?
            }
            Value::Object(_) | Value::Bool(_) => config.schema.clone(),
            _ => {
                return Err(PluginError::BadConfig(
                    "`schema` must be a workspace path or a schema object".into(),
                ));
            }
        };
        let draft = match schema.get("$schema").and_then(Value::as_str) {
            None => validator::Draft::Draft202012,
            Some(uri) if uri.contains("draft-07") => validator::Draft::Draft7,
            Some(uri) if uri.contains("2020-12") => validator::Draft::Draft202012,
            Some(uri) => {
                return Err(PluginError::BadConfig(format!(
                    "schema draft {uri} is not supported; use draft-07 or 2020-12"
                )));
            }
        };
        let compiled = validator::options()
            .with_draft(draft)
            .build(&schema)
            .map_err(|e| PluginError::BadConfig(format!("the schema is invalid: {e}")))?;

        let mut findings = Vec::new();
        for path in &config.files {
            let text = match ws.read_to_string(path) {
                Ok(t) => t,
                Err(FsError::NotFound(_)) => {
                    findings.push(
                        Finding::new(Severity::High, format!("{path} is missing"))
                            .rule("jsonschema/missing")
                            .at(path),
                    );
                    continue;
                }
                Err(e) => return Err(capability(path, e)),
            };
            let instance: Value = match serde_json::from_str(&text) {
                Ok(v) => v,
                Err(e) => {
                    findings.push(
                        Finding::new(Severity::High, format!("{path} is not JSON: {e}"))
                            .rule("jsonschema/parse")
                            .at_line(path, e.line() as u32),
                    );
                    continue;
                }
            };
            for error in compiled.iter_errors(&instance) {
                let pointer = error.instance_path().to_string();
                let mut finding =
                    Finding::new(Severity::High, format!("{path}#{pointer}: {error}"))
                        .rule("jsonschema/violation")
                        .at(path);
                finding.rule = Some(format!("jsonschema{}", error.schema_path()));
                findings.push(finding);
            }
        }
        let summary = if findings.is_empty() {
            format!("{} file(s) match the schema", config.files.len())
        } else {
            format!("{} violation(s) of the schema", findings.len())
        };
        Ok(Verdict {
            passed: findings.is_empty(),
            summary,
            findings,
            evidence_digest: None,
        })
    }
}

bl_plugin_sdk::export_gate!(JsonSchemaGate);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::testing::NativeWorkspace;

    fn run(dir: &std::path::Path, config: &str) -> Result<Verdict, PluginError> {
        bl_plugin_sdk::run_gate::<JsonSchemaGate>(&NativeWorkspace::new(dir).unwrap(), config)
    }

    #[test]
    fn each_violation_is_a_finding_with_its_pointer_in_both_drafts() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("r.json"),
            r#"{"items": [1, "two"], "name": 3}"#,
        )
        .unwrap();
        for draft in [
            "http://json-schema.org/draft-07/schema#",
            "https://json-schema.org/draft/2020-12/schema",
        ] {
            let config = serde_json::json!({
                "schema": {"$schema": draft, "type": "object",
                           "properties": {"items": {"type": "array", "items": {"type": "integer"}},
                                          "name": {"type": "string"}}},
                "files": ["r.json"]});
            let v = run(dir.path(), &config.to_string()).unwrap();
            assert!(!v.passed);
            let messages: Vec<_> = v.findings.iter().map(|f| f.message.clone()).collect();
            assert_eq!(messages.len(), 2, "{messages:?}");
            assert!(
                messages.iter().any(|m| m.starts_with("r.json#/items/1:")),
                "{messages:?}"
            );
            assert!(
                messages.iter().any(|m| m.starts_with("r.json#/name:")),
                "{messages:?}"
            );
        }
    }

    #[test]
    fn a_matching_file_passes_and_a_bad_schema_is_bad_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("r.json"), r#"{"a": 1}"#).unwrap();
        std::fs::write(
            dir.path().join("s.json"),
            r#"{"type": "object", "required": ["a"]}"#,
        )
        .unwrap();
        assert!(
            run(dir.path(), r#"{"schema": "s.json", "files": ["r.json"]}"#)
                .unwrap()
                .passed
        );
        let err = run(
            dir.path(),
            r#"{"schema": {"type": 12}, "files": ["r.json"]}"#,
        )
        .unwrap_err();
        assert!(matches!(err, PluginError::BadConfig(_)), "{err:?}");
    }
}
