//! The first-party completion contracts (seed 002), chosen by the checked
//! output's basename:
//!
//! - `implementer-summary.json`: the claimed files (`files_changed` or
//!   `touched_files`) are non-empty, and each exists under the workspace
//!   root and was modified at or after the dispatch start. An empty claim
//!   passes only as an honest abstention: `ready_for_tier1` exactly `false`
//!   and a non-empty `block_reason`.
//! - `plan.json`: a JSON object with a non-empty list of object `steps`.
//! - `*.diff`, `*.patch`: at least one `---` / `+++` header pair.
//!
//! Config `{"kind": K}` checks the output as kind `K` whatever its name (a
//! port that names its contract). A failed verdict's summary is the
//! reason; the host prefixes it with `<path>: <pattern> contract: `.

use bl_plugin_sdk::{Contract, ContractRequest, FsError, PluginError, Verdict, Workspace};
use serde_json::Value;

pub struct Contracts;

fn read(ws: &dyn Workspace, path: &str) -> Result<Option<String>, PluginError> {
    match ws.read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(FsError::NotFound(_)) => Ok(None),
        Err(e) => Err(PluginError::Capability(format!(
            "{path}: {}",
            bl_plugin_sdk::describe_fs_error(&e)
        ))),
    }
}

pub fn implementer_summary(
    ws: &dyn Workspace,
    text: &str,
    since_ms: u64,
) -> Result<Verdict, PluginError> {
    let Ok(Value::Object(summary)) = serde_json::from_str::<Value>(text) else {
        return Ok(Verdict::fail("not a JSON object"));
    };
    let claims: Vec<&Value> = ["files_changed", "touched_files"]
        .iter()
        .filter_map(|k| summary.get(*k))
        .filter_map(Value::as_array)
        .flatten()
        .collect();
    if claims.is_empty() {
        let abstains = summary.get("ready_for_tier1") == Some(&Value::Bool(false))
            && summary
                .get("block_reason")
                .and_then(Value::as_str)
                .is_some_and(|r| !r.trim().is_empty());
        return Ok(if abstains {
            Verdict::pass("an honest abstention: nothing claimed, and a block_reason given")
        } else {
            Verdict::fail("files_changed/touched_files is empty")
        });
    }
    for claim in claims {
        let Some(path) = claim.as_str().filter(|p| !p.is_empty()) else {
            return Ok(Verdict::fail(format!(
                "claimed file {claim} is not a non-empty path"
            )));
        };
        if path.starts_with('/') || path.split('/').any(|c| c == "..") {
            return Ok(Verdict::fail(format!(
                "claimed file {path} is not a relative path under the root"
            )));
        }
        match ws.stat(path).map_err(|e| {
            PluginError::Capability(format!("{path}: {}", bl_plugin_sdk::describe_fs_error(&e)))
        })? {
            None => return Ok(Verdict::fail(format!("claimed file {path} does not exist"))),
            Some(entry) if entry.modified_ms < since_ms => {
                return Ok(Verdict::fail(format!(
                    "claimed file {path} was not modified since the dispatch started"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(Verdict::pass("every claimed file exists and is fresh"))
}

pub fn plan(text: &str) -> Verdict {
    let Ok(Value::Object(plan)) = serde_json::from_str::<Value>(text) else {
        return Verdict::fail("not a JSON object");
    };
    match plan.get("steps").and_then(Value::as_array) {
        None => Verdict::fail("no `steps` list"),
        Some(steps) if steps.is_empty() => Verdict::fail("`steps` is empty"),
        Some(steps) if steps.iter().any(|s| !s.is_object()) => {
            Verdict::fail("every step must be an object")
        }
        Some(steps) => Verdict::pass(format!("{} steps", steps.len())),
    }
}

pub fn diff(text: &str) -> Verdict {
    let lines: Vec<&str> = text.lines().collect();
    let pairs = lines
        .windows(2)
        .filter(|w| w[0].starts_with("--- ") && w[1].starts_with("+++ "))
        .count();
    if pairs == 0 {
        Verdict::fail("no ---/+++ header pair")
    } else {
        Verdict::pass(format!("{pairs} file header pair(s)"))
    }
}

impl Contract for Contracts {
    type Config = Value;

    fn check(
        ws: &dyn Workspace,
        request: &ContractRequest,
        config: Value,
    ) -> Result<Verdict, PluginError> {
        let path = request.artifact.as_str();
        // `{"kind": "plan.json"}` checks a file of another name as that kind
        // (a port that names its contract); otherwise the basename decides.
        let basename = config
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_else(|| path.rsplit('/').next().unwrap_or(path));
        let Some(text) = read(ws, path)? else {
            return Ok(Verdict::fail("missing"));
        };
        Ok(match basename {
            "implementer-summary.json" => {
                implementer_summary(ws, &text, request.dispatch_started_ms)?
            }
            "plan.json" => plan(&text),
            b if b.ends_with(".diff") || b.ends_with(".patch") => diff(&text),
            other => {
                return Err(PluginError::BadConfig(format!(
                    "no contract here checks `{other}` (this plugin handles implementer-summary.json, plan.json, *.diff, *.patch)"
                )));
            }
        })
    }
}

bl_plugin_sdk::export_contract!(Contracts);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::testing::NativeWorkspace;

    fn check(files: &[(&str, &str)], artifact: &str, since_ms: u64) -> Verdict {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            std::fs::write(dir.path().join(path), text).unwrap();
        }
        let ws = NativeWorkspace::new(dir.path()).unwrap();
        let request = ContractRequest {
            artifact: artifact.into(),
            dispatch_started_ms: since_ms,
        };
        bl_plugin_sdk::run_contract::<Contracts>(&ws, &request, "{}").unwrap()
    }

    #[test]
    fn implementer_summary_claims_must_exist_and_be_fresh() {
        let summary = r#"{"files_changed": ["a.py"]}"#;
        assert!(
            check(
                &[("implementer-summary.json", summary), ("a.py", "x")],
                "implementer-summary.json",
                0
            )
            .passed
        );
        let v = check(
            &[("implementer-summary.json", summary)],
            "implementer-summary.json",
            0,
        );
        assert_eq!(v.summary, "claimed file a.py does not exist");
        let future = u64::MAX / 2;
        let v = check(
            &[("implementer-summary.json", summary), ("a.py", "x")],
            "implementer-summary.json",
            future,
        );
        assert!(v.summary.contains("not modified since"), "{}", v.summary);
    }

    #[test]
    fn an_empty_claim_passes_only_as_an_honest_abstention() {
        let v = check(
            &[("implementer-summary.json", r#"{"files_changed": []}"#)],
            "implementer-summary.json",
            0,
        );
        assert_eq!(v.summary, "files_changed/touched_files is empty");
        let honest =
            r#"{"touched_files": [], "ready_for_tier1": false, "block_reason": "API key missing"}"#;
        assert!(
            check(
                &[("implementer-summary.json", honest)],
                "implementer-summary.json",
                0
            )
            .passed
        );
        let dishonest = r#"{"touched_files": [], "ready_for_tier1": true, "block_reason": "x"}"#;
        assert!(
            !check(
                &[("implementer-summary.json", dishonest)],
                "implementer-summary.json",
                0
            )
            .passed
        );
    }

    #[test]
    fn plan_and_diff_shapes() {
        assert!(plan(r#"{"steps": [{"do": "x"}]}"#).passed);
        assert!(!plan(r#"{"steps": []}"#).passed);
        assert!(!plan(r#"{"steps": ["x"]}"#).passed);
        assert!(!plan("[]").passed);
        assert!(diff("--- a/x\n+++ b/x\n@@ -1 +1 @@\n").passed);
        assert!(!diff("+++ b/x\n--- a/x\n").passed);
    }
}
