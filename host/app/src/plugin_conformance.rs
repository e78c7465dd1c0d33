//! A gate's conformance test (`bl plugin test`): a corpus of cases, each a
//! workspace and a config with the verdict it expects, run against a gate
//! in one process. What is compared is what bl acts on: the verdict
//! (passed, summary, findings) as JSON, or that the gate could not decide
//! and the kind of failure (`bad-config`, `trap`, `timeout`, …), which is
//! the same in every language where the message is not.
//! A reference gate records the expectations (`--record`); any gate that
//! claims to be the same gate, in any language, must then agree.
//!
//! A corpus is a directory of cases: `CASE/config.json` (the config, as
//! text), `CASE/workspace/` (what the gate judges; empty when absent) and
//! `CASE/expected.json`.

use std::path::{Path, PathBuf};

use bl_core::Verdict;
use bl_plugins::{Invocation, PluginError, World};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::{AppError, AppResult};
use crate::plugin_run::{self, PluginRunRequest};

/// One case, run.
#[derive(Debug, Clone, Serialize)]
pub struct CaseRun {
    pub case: String,
    pub expected: Option<Value>,
    pub got: Value,
    pub agrees: bool,
}

/// A corpus, run against one gate.
#[derive(Debug, Clone, Serialize)]
pub struct Conformance {
    pub plugin: String,
    pub corpus: PathBuf,
    pub cases: Vec<CaseRun>,
    pub recorded: bool,
}

impl Conformance {
    pub fn disagreements(&self) -> usize {
        self.cases.iter().filter(|c| !c.agrees).count()
    }
}

/// What bl acts on in a gate's answer.
fn acted_on(answer: Result<Invocation<Verdict>, PluginError>) -> Value {
    match answer {
        Ok(Invocation { value: v, .. }) => json!({
            "verdict": {"passed": v.passed, "summary": v.summary, "findings": v.findings}
        }),
        Err(e) => json!({"outcome": "error", "kind": e.kind()}),
    }
}

/// Runs every case of `corpus` against the gate `plugin`; with `record`,
/// writes what it gives as each case's expectation instead.
pub fn test(plugin: &str, corpus: &Path, record: bool) -> AppResult<Conformance> {
    let refused = |m: String| AppError::refused(m);
    let mut names: Vec<String> = std::fs::read_dir(corpus)
        .map_err(|e| refused(format!("--corpus {}: {e}", corpus.display())))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("config.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    if names.is_empty() {
        return Err(refused(format!(
            "--corpus {}: no cases (a case is a directory with config.json, workspace/ and expected.json)",
            corpus.display()
        )));
    }
    let request = PluginRunRequest {
        isolation: "container_restricted",
        plugin,
        grants: &[],
        artifact: None,
        dispatched_ms: 0,
        deadline: None,
    };
    let opened = plugin_run::open(&request)?;
    if opened.world != World::Gate {
        return Err(refused(format!(
            "{plugin} is a {} plugin; bl plugin test runs gates",
            opened.world
        )));
    }
    // Loaded once: every case is a call of the same gate.
    let gate = opened
        .host
        .load_gate(&opened.found, &opened.grant)
        .and_then(|gate| opened.runtime().map(|runtime| (gate, runtime)));
    let empty = tempfile::tempdir().map_err(|e| refused(format!("a scratch directory: {e}")))?;
    let mut cases = Vec::new();
    for name in names {
        let dir = corpus.join(&name);
        let config = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| refused(format!("{}: {e}", dir.join("config.json").display())))?;
        let workspace = dir.join("workspace");
        let workspace = if workspace.is_dir() {
            workspace
        } else {
            empty.path().to_path_buf()
        };
        let answer = match &gate {
            Ok((gate, runtime)) => runtime.check(gate, &workspace, &config),
            Err(e) => Err(e.clone()),
        };
        let got = acted_on(answer);
        let expected_path = dir.join("expected.json");
        let expected = if record {
            let text = serde_json::to_string_pretty(&got).expect("JSON serialises") + "\n";
            std::fs::write(&expected_path, text)
                .map_err(|e| refused(format!("{}: {e}", expected_path.display())))?;
            Some(got.clone())
        } else {
            let text = std::fs::read_to_string(&expected_path).map_err(|e| {
                refused(format!(
                    "{}: {e}; record it with --record",
                    expected_path.display()
                ))
            })?;
            Some(
                serde_json::from_str(&text)
                    .map_err(|e| refused(format!("{}: not JSON: {e}", expected_path.display())))?,
            )
        };
        let agrees = expected.as_ref() == Some(&got);
        cases.push(CaseRun {
            case: name,
            expected,
            got,
            agrees,
        });
    }
    Ok(Conformance {
        plugin: plugin.to_string(),
        corpus: corpus.to_path_buf(),
        cases,
        recorded: record,
    })
}

impl std::fmt::Display for Conformance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in self.cases.iter().filter(|c| !c.agrees) {
            let expected = c.expected.clone().unwrap_or(Value::Null);
            writeln!(f, "DIFFERS {}: expected {expected}, got {}", c.case, c.got)?;
        }
        let verb = if self.recorded { "recorded" } else { "ran" };
        write!(
            f,
            "{} {verb} {} case(s) of {}: {} disagree",
            self.plugin,
            self.cases.len(),
            self.corpus.display(),
            self.disagreements()
        )
    }
}
