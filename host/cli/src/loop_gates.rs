//! A loop's gate as bl runs it: every kind is a first-party wasm plugin
//! (`command`, `pytest`, `jsonschema`; scanners through `command`, their
//! JSON read for the evidence; `composite` is the host judging each child
//! and requiring all). What the plugin decides is turned into the ledger's
//! terms as bounded-loops records them: `gate passed (exit 0)`,
//! `{cmd, code, tail}` evidence, and `gate error: GateError: …` when the
//! gate could not decide (a missing tool, a bad config, a crash): an
//! ERROR, never a pass and never a fail.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bl_loops::engine::{Gate, Judgement, Outcome};
use bl_loops::ledger::GateRecord;
use bl_loops::manifest::GateSpec;
use bl_plugins::{GatePlugin, Grants, LoadOptions, PluginPackage, Runtime, Verdict};
use serde_json::{Value, json};

use crate::paths;

/// The most of a command's output the ledger keeps.
const TAIL_CHARS: usize = 2000;

/// A gate ready to judge one workspace, lap after lap.
pub struct LoopGate {
    runtime: Runtime,
    judge: Judge,
    record: GateRecord,
    workspace: PathBuf,
}

enum Judge {
    Command {
        plugin: GatePlugin,
        cmd: String,
        argv: Vec<String>,
        implementation: String,
    },
    Scanner {
        plugin: GatePlugin,
        tool: String,
        argv: Vec<String>,
        implementation: String,
    },
    Pytest {
        plugin: GatePlugin,
        args: Vec<String>,
    },
    Schema {
        plugin: GatePlugin,
        file: String,
        schema: Value,
    },
    All(Vec<Judge>),
}

/// A plugin, loaded once for the run.
fn load(runtime: &Runtime, name: &str, grants: &[&str]) -> Result<(GatePlugin, String), String> {
    let path = paths::resolve_plugin(name)?;
    let package = PluginPackage::open(&path).map_err(|e| e.to_string())?;
    let declared = package.declared().map_err(|e| e.to_string())?;
    let options = LoadOptions {
        declared: declared.as_deref(),
        grants: Grants::parse(grants).map_err(|e| e.to_string())?,
    };
    let digest = package.component_digest();
    let plugin = runtime
        .load_gate(&package.name(), &package.bytes, &options)
        .map_err(|e| e.to_string())?;
    Ok((plugin, digest))
}

/// The argv a scanner kind runs, its JSON on stdout.
fn scanner_argv(kind: &str) -> Option<(&'static str, Vec<&'static str>)> {
    Some(match kind {
        "osv" => (
            "osv-scanner",
            vec!["osv-scanner", "--format", "json", "-r", "."],
        ),
        "checkov" => (
            "checkov",
            vec!["checkov", "-d", ".", "-o", "json", "--quiet"],
        ),
        "gitleaks" => (
            "gitleaks",
            vec![
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
            vec![
                "semgrep", "scan", "--config", "auto", "--json", "--quiet", ".",
            ],
        ),
        "trivy" => (
            "trivy",
            vec!["trivy", "fs", "--format", "json", "--exit-code", "1", "."],
        ),
        "promptfoo" => (
            "promptfoo",
            vec!["promptfoo", "eval", "--output", "/dev/stdout"],
        ),
        "great_expectations" => (
            "great_expectations",
            vec!["great_expectations", "checkpoint", "run"],
        ),
        "axe" => ("axe", vec!["axe", "--exit"]),
        _ => return None,
    })
}

fn implementation(kind: &str) -> String {
    match kind {
        "command" => "CommandGate".into(),
        "pytest" => "PytestGate".into(),
        "jsonschema" => "JsonSchemaGate".into(),
        "composite" => "CompositeGate".into(),
        "osv" => "OsvGate".into(),
        "great_expectations" => "GreatExpectationsGate".into(),
        other => {
            let mut name: String = other[..1].to_uppercase();
            name.push_str(&other[1..]);
            format!("{name}Gate")
        }
    }
}

impl LoopGate {
    /// The gate `spec` declares, or `--gate-override`'s command.
    pub fn new(
        runtime: Runtime,
        spec: &GateSpec,
        override_cmd: Option<&str>,
        package: &Path,
        workspace: &Path,
        outputs: &[String],
        schema: Option<&str>,
    ) -> Result<LoopGate, String> {
        let mut digests = Vec::new();
        let (judge, record) = match override_cmd {
            Some(cmd) => {
                let judge = command_judge(&runtime, cmd, &mut digests)?;
                (
                    judge,
                    GateRecord {
                        kind: "command".into(),
                        source: "override".into(),
                        implementation: "CommandGate".into(),
                        component: None,
                    },
                )
            }
            None => {
                let judge = build(&runtime, spec, package, outputs, schema, &mut digests)?;
                (
                    judge,
                    GateRecord {
                        kind: spec.kind.clone(),
                        source: "shipped".into(),
                        implementation: implementation(&spec.kind),
                        component: None,
                    },
                )
            }
        };
        digests.sort();
        digests.dedup();
        let record = GateRecord {
            component: Some(digests.join(",")),
            ..record
        };
        Ok(LoopGate {
            runtime,
            judge,
            record,
            workspace: workspace.to_path_buf(),
        })
    }

    /// How the preview names this gate.
    pub fn describe(spec: &GateSpec, override_cmd: Option<&str>) -> String {
        if let Some(cmd) = override_cmd {
            return cmd.to_string();
        }
        match spec.kind.as_str() {
            "command" => spec.run.clone().unwrap_or_default(),
            "composite" => format!(
                "composite ({})",
                spec.gates
                    .iter()
                    .map(|g| Self::describe(g, None))
                    .collect::<Vec<_>>()
                    .join(" AND ")
            ),
            "jsonschema" => format!(
                "jsonschema {}",
                spec.schema.as_deref().unwrap_or("(bounds.schema)")
            ),
            kind => spec.run.clone().unwrap_or_else(|| kind.to_string()),
        }
    }
}

fn command_judge(runtime: &Runtime, cmd: &str, digests: &mut Vec<String>) -> Result<Judge, String> {
    let argv =
        shlex::split(cmd).ok_or_else(|| format!("gate command {cmd:?} has unbalanced quotes"))?;
    if argv.is_empty() {
        return Err("the gate command is empty".into());
    }
    let (plugin, digest) = load(runtime, "command", &["command"])?;
    digests.push(digest);
    Ok(Judge::Command {
        plugin,
        cmd: cmd.to_string(),
        argv,
        implementation: "CommandGate".into(),
    })
}

fn build(
    runtime: &Runtime,
    spec: &GateSpec,
    package: &Path,
    outputs: &[String],
    bounds_schema: Option<&str>,
    digests: &mut Vec<String>,
) -> Result<Judge, String> {
    Ok(match spec.kind.as_str() {
        "command" => command_judge(runtime, spec.run.as_deref().unwrap_or_default(), digests)?,
        "pytest" => {
            let (plugin, digest) = load(runtime, "pytest", &["command"])?;
            digests.push(digest);
            // `run: pytest -q` names pytest's own arguments after the program.
            let mut args: Vec<String> = spec
                .run
                .as_deref()
                .and_then(shlex::split)
                .unwrap_or_default()
                .into_iter()
                .skip_while(|a| a != "pytest")
                .skip(1)
                .collect();
            args.retain(|a| a != "-q");
            Judge::Pytest { plugin, args }
        }
        "jsonschema" => {
            let (plugin, digest) = load(runtime, "jsonschema", &[])?;
            digests.push(digest);
            let schema_path = spec.schema.as_deref().or(bounds_schema).ok_or(
                "a jsonschema gate needs a schema: set gate.schema or schema in bounds.yaml",
            )?;
            let text = std::fs::read_to_string(package.join(schema_path)).map_err(|e| {
                format!(
                    "cannot read the gate's schema {}: {e}",
                    package.join(schema_path).display()
                )
            })?;
            let schema: Value = serde_json::from_str(&text)
                .map_err(|e| format!("the gate's schema {schema_path} is not JSON: {e}"))?;
            let file = outputs
                .first()
                .cloned()
                .unwrap_or_else(|| "output.json".into());
            Judge::Schema {
                plugin,
                file,
                schema,
            }
        }
        "composite" => Judge::All(
            spec.gates
                .iter()
                .map(|g| build(runtime, g, package, outputs, bounds_schema, digests))
                .collect::<Result<_, _>>()?,
        ),
        kind => {
            let (tool, argv) =
                scanner_argv(kind).ok_or_else(|| format!("no gate for kind {kind}"))?;
            let (plugin, digest) = load(runtime, "command", &["command"])?;
            digests.push(digest);
            Judge::Scanner {
                plugin,
                tool: tool.into(),
                argv: argv.into_iter().map(String::from).collect(),
                implementation: implementation(kind),
            }
        }
    })
}

/// A finding's message by its rule.
fn finding<'a>(verdict: &'a Verdict, rule: &str) -> Option<&'a str> {
    verdict
        .findings
        .iter()
        .find(|f| f.rule.as_deref() == Some(rule))
        .map(|f| f.message.as_str())
}

/// stdout, then stderr under a `[stderr]` line, at most the last
/// [`TAIL_CHARS`] characters.
fn tail(verdict: &Verdict) -> String {
    let part = |rule: &str, label: &str| {
        finding(verdict, rule).map(|m| {
            let body = m.strip_prefix(label).unwrap_or(m);
            format!("{body}\n")
        })
    };
    let mut text = part("command/stdout", "stdout (tail):\n").unwrap_or_default();
    if let Some(stderr) = part("command/stderr", "stderr (tail):\n") {
        text.push_str("\n[stderr]\n");
        text.push_str(&stderr);
    }
    let chars: Vec<char> = text.chars().collect();
    chars[chars.len().saturating_sub(TAIL_CHARS)..]
        .iter()
        .collect()
}

fn gate_error(implementation: &str, message: &str) -> Judgement {
    Judgement {
        outcome: Outcome::Error,
        detail: format!("gate error: GateError: {implementation}: {message}"),
        evidence: json!({"component": "gate", "error_type": "GateError"}),
    }
}

impl LoopGate {
    fn run_judge(&self, judge: &Judge) -> Judgement {
        let ws = &self.workspace;
        match judge {
            Judge::Command {
                plugin,
                cmd,
                argv,
                implementation,
            } => {
                let config = json!({"argv": argv, "tail_bytes": TAIL_CHARS}).to_string();
                match self.runtime.check(plugin, ws, &config) {
                    Ok(inv) => {
                        let v = inv.value;
                        let code: i64 = finding(&v, "command/exit")
                            .and_then(|c| c.parse().ok())
                            .unwrap_or(-1);
                        let evidence = json!({"cmd": cmd, "code": code, "tail": tail(&v)});
                        match code {
                            0 => Judgement {
                                outcome: Outcome::Pass,
                                detail: "gate passed (exit 0)".into(),
                                evidence,
                            },
                            1 => Judgement {
                                outcome: Outcome::Fail,
                                detail: "gate failed (exit 1)".into(),
                                evidence,
                            },
                            // The verdict contract: 2 and above mean the gate itself broke.
                            code => Judgement {
                                outcome: Outcome::Error,
                                detail: format!(
                                    "gate error: GateError: {implementation}: '{cmd}' exited {code}; a gate exits 0 (pass) or 1 (reject), anything else means it could not decide"
                                ),
                                evidence: json!({"component": "gate", "error_type": "GateError", "cmd": cmd, "code": code, "tail": tail(&v)}),
                            },
                        }
                    }
                    Err(e) => gate_error(
                        implementation,
                        &format!("could not run '{cmd}': {}", plain(&e.to_string())),
                    ),
                }
            }
            Judge::Scanner {
                plugin,
                tool,
                argv,
                implementation,
            } => {
                let config = json!({"argv": argv, "tail_bytes": 64_000}).to_string();
                match self.runtime.check(plugin, ws, &config) {
                    Ok(inv) => {
                        let v = inv.value;
                        let code: i64 = finding(&v, "command/exit")
                            .and_then(|c| c.parse().ok())
                            .unwrap_or(-1);
                        let stdout = finding(&v, "command/stdout")
                            .map(|m| m.trim_start_matches("stdout (tail):\n"))
                            .unwrap_or("");
                        let findings = scanner_findings(tool, stdout);
                        let evidence =
                            json!({"cmd": argv.join(" "), "code": code, "findings": findings});
                        match (code, findings) {
                            (0, Some(0) | None) => Judgement {
                                outcome: Outcome::Pass,
                                detail: format!("{tool}: no findings"),
                                evidence,
                            },
                            (0 | 1, Some(n)) if n > 0 => Judgement {
                                outcome: Outcome::Fail,
                                detail: format!("{tool}: {n} finding(s)"),
                                evidence,
                            },
                            (1, _) => Judgement {
                                outcome: Outcome::Fail,
                                detail: format!("{tool} reported findings (exit 1)"),
                                evidence,
                            },
                            (code, _) => gate_error(
                                implementation,
                                &format!("{tool} exited {code} without a readable report"),
                            ),
                        }
                    }
                    Err(e) => gate_error(
                        implementation,
                        &format!(
                            "could not launch {tool} (is it installed and on PATH?): {}",
                            plain(&e.to_string())
                        ),
                    ),
                }
            }
            Judge::Pytest { plugin, args } => {
                let config = json!({"args": args}).to_string();
                match self.runtime.check(plugin, ws, &config) {
                    Ok(inv) => {
                        let v = inv.value;
                        let code: i64 = finding(&v, "command/exit")
                            .and_then(|c| c.parse().ok())
                            .unwrap_or(-1);
                        let cmd = format!(
                            "python3 -B -m pytest -q -p no:cacheprovider{}",
                            args.iter().map(|a| format!(" {a}")).collect::<String>()
                        );
                        let evidence = json!({"cmd": cmd, "code": code, "invocation": "python3-module", "tail": tail(&v)});
                        let (outcome, word) = if v.passed {
                            (Outcome::Pass, "passed")
                        } else {
                            (Outcome::Fail, "failed")
                        };
                        Judgement {
                            outcome,
                            detail: format!(
                                "gate {word} (exit {code}); pytest via python3 -m pytest"
                            ),
                            evidence,
                        }
                    }
                    Err(e) => gate_error("PytestGate", &plain(&e.to_string())),
                }
            }
            Judge::Schema {
                plugin,
                file,
                schema,
            } => {
                let config = json!({"schema": schema, "files": [file]}).to_string();
                match self.runtime.check(plugin, ws, &config) {
                    Ok(inv) if inv.value.passed => Judgement {
                        outcome: Outcome::Pass,
                        detail: format!("{file} validates against schema"),
                        evidence: json!({}),
                    },
                    Ok(inv) => {
                        let problems: Vec<&str> = inv
                            .value
                            .findings
                            .iter()
                            .map(|f| f.message.as_str())
                            .collect();
                        Judgement {
                            outcome: Outcome::Fail,
                            detail: format!(
                                "{file} does not validate against schema: {}",
                                inv.value.summary
                            ),
                            evidence: json!({"violations": problems}),
                        }
                    }
                    Err(e) => gate_error("JsonSchemaGate", &plain(&e.to_string())),
                }
            }
            Judge::All(children) => {
                let results: Vec<Judgement> = children.iter().map(|c| self.run_judge(c)).collect();
                let evidence = json!({
                    "children": results.iter().map(|r| json!({"detail": r.detail, "evidence": r.evidence, "passed": r.outcome == Outcome::Pass})).collect::<Vec<_>>(),
                    "mode": "all",
                });
                let n = results.len();
                if let Some(broken) = results.iter().find(|r| r.outcome == Outcome::Error) {
                    return Judgement {
                        outcome: Outcome::Error,
                        detail: format!(
                            "gate error: GateError: CompositeGate: a child gate could not decide: {}",
                            broken.detail
                        ),
                        evidence: json!({"component": "gate", "error_type": "GateError", "children": evidence["children"]}),
                    };
                }
                let failed = results
                    .iter()
                    .filter(|r| r.outcome == Outcome::Fail)
                    .count();
                if failed == 0 {
                    Judgement {
                        outcome: Outcome::Pass,
                        detail: format!("composite gate passed: {n} child gate(s) passed"),
                        evidence,
                    }
                } else {
                    Judgement {
                        outcome: Outcome::Fail,
                        detail: format!(
                            "composite gate failed: {failed} of {n} child gate(s) failed"
                        ),
                        evidence,
                    }
                }
            }
        }
    }
}

/// A plugin error's message without the runtime's layers ("plugin
/// command: could not decide: command could not start: …").
fn plain(message: &str) -> String {
    const LAST_LAYER: &str = "could not start: ";
    match message.rfind(LAST_LAYER) {
        Some(at) => message[at + LAST_LAYER.len()..].to_string(),
        None => message.to_string(),
    }
}

/// Counts a scanner's findings from its JSON report, when it is readable.
fn scanner_findings(tool: &str, stdout: &str) -> Option<u64> {
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

impl Gate for LoopGate {
    fn judge(&mut self, _time_left: Duration) -> Judgement {
        self.run_judge(&self.judge)
    }

    fn record(&self) -> GateRecord {
        self.record.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanner_reports_are_counted() {
        assert_eq!(
            scanner_findings("gitleaks", "[{\"RuleID\":\"x\"},{}]"),
            Some(2)
        );
        assert_eq!(scanner_findings("semgrep", "{\"results\":[]}"), Some(0));
        assert_eq!(
            scanner_findings("checkov", "{\"summary\":{\"failed\":3}}"),
            Some(3)
        );
        assert_eq!(
            scanner_findings(
                "osv-scanner",
                "{\"results\":[{\"packages\":[{\"vulnerabilities\":[{},{}]}]}]}"
            ),
            Some(2)
        );
        assert_eq!(scanner_findings("trivy", "not json"), None);
    }
}
