//! A loop's gate as bl runs it: every kind is a first-party wasm plugin
//! (`command`, `pytest`, `jsonschema`; scanners through `command`, their
//! JSON read for the evidence; `composite` is the host judging each child
//! and requiring all). What the plugin decides is turned into the ledger's
//! terms as bounded-loops records them: `gate passed (exit 0)`,
//! `{cmd, code, tail}` evidence, and `gate error: GateError: …` when the
//! gate could not decide (a missing tool, a bad config, a crash): an
//! ERROR, never a pass and never a fail.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bl_loops::engine::{Gate, Judgement, Outcome, error_evidence};
use bl_loops::ledger::{GateRecord, Ordered};
use bl_loops::manifest::GateSpec;
use std::sync::Arc;

use bl_core::CommandRunner;
use bl_plugins::{GatePlugin, Grant, Grants, Invocation, PluginError, PluginHost, Verdict};
use serde_json::{Value, json};

/// `{"cmd": …, "code": …, "tail": …}`, a command gate's evidence.
fn command_evidence(cmd: &str, code: i64, tail: String) -> Ordered {
    Ordered::object([
        ("cmd", cmd.into()),
        ("code", code.into()),
        ("tail", tail.into()),
    ])
}

/// The most of a command's output the ledger keeps.
const TAIL_CHARS: usize = 2000;

/// A gate ready to judge one workspace, lap after lap.
pub struct LoopGate {
    plugins: GatePlugins,
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
        kind: String,
        tool: String,
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
    /// A gate plugin a project installed (`kind: plugin`), judging with its config.
    Plugin {
        plugin: GatePlugin,
        name: String,
        config: String,
        /// Installed unsigned, as the operator allowed.
        unsigned: bool,
    },
    All(Vec<Judge>),
}

/// Why a loop's gate could not be prepared (a plugin missing or refused, a
/// bad schema, a bad command), in words. Nothing is judged without it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GateUnprepared(pub String);

fn unprepared(e: impl std::fmt::Display) -> GateUnprepared {
    GateUnprepared(e.to_string())
}

/// Where a loop's gate plugins come from: the process's plugin host, what
/// their commands run through, and how long each call may take.
pub struct GatePlugins {
    pub host: Arc<PluginHost>,
    pub commands: Arc<dyn CommandRunner>,
    pub deadline: Duration,
}

impl GatePlugins {
    /// A plugin, loaded once for the run.
    fn load(&self, name: &str, grants: &[&str]) -> Result<(GatePlugin, String), GateUnprepared> {
        self.load_pinned(name, grants)
            .map(|(plugin, digest, ..)| (plugin, digest))
    }

    /// As [`GatePlugins::load`], with whether a project's lock says the
    /// plugin was installed unsigned, and what was found (its manifest).
    fn load_pinned(
        &self,
        name: &str,
        grants: &[&str],
    ) -> Result<(GatePlugin, String, bool, bl_plugins::FoundPlugin), GateUnprepared> {
        let found = self.host.find(name).map_err(unprepared)?;
        let grants = Grants::parse(grants).map_err(unprepared)?;
        if grants.allows(bl_core::plugin::Capability::Command) {
            self.commands.expect_commands();
        }
        let grant = Grant {
            grants,
            commands: Some(self.commands.clone()),
            // A gate may take what the run may; the engine stops laps at the budget.
            deadline: Some(self.deadline),
            command_timeout: Some(self.deadline),
        };
        let plugin = self.host.load_gate(&found, &grant).map_err(unprepared)?;
        Ok((plugin, found.digest.clone(), found.unsigned, found))
    }

    fn check(
        &self,
        plugin: &GatePlugin,
        workspace: &Path,
        config: &str,
    ) -> Result<Invocation<Verdict>, PluginError> {
        self.host.runtime()?.check(plugin, workspace, config)
    }
}

/// The program a scanner kind runs (the scanner plugin knows its argv and
/// reads its report).
fn scanner_tool(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "osv" => "osv-scanner",
        "checkov" => "checkov",
        "gitleaks" => "gitleaks",
        "semgrep" => "semgrep",
        "trivy" => "trivy",
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
        plugins: GatePlugins,
        spec: &GateSpec,
        override_cmd: Option<&str>,
        package: &Path,
        workspace: &Path,
        outputs: &[String],
        schema: Option<&str>,
    ) -> Result<LoopGate, GateUnprepared> {
        let mut digests = Vec::new();
        let (judge, record) = match override_cmd {
            Some(cmd) => {
                let judge = command_judge(&plugins, cmd, &mut digests)?;
                (
                    judge,
                    GateRecord {
                        kind: "command-override".into(),
                        source: "shipped".into(),
                        implementation: "CommandGate".into(),
                        component: None,
                    },
                )
            }
            None => {
                let judge = build(
                    &plugins,
                    spec,
                    "/gate",
                    package,
                    outputs,
                    schema,
                    &mut digests,
                )?;
                let unsigned = matches!(&judge, Judge::Plugin { unsigned: true, .. });
                (
                    judge,
                    GateRecord {
                        kind: spec.kind.clone(),
                        // A plugin gate is the project's own, and says so
                        // when the operator allowed it unsigned.
                        source: match (&spec.plugin, unsigned) {
                            (None, _) => "shipped".into(),
                            (Some(_), false) => "plugin".into(),
                            (Some(_), true) => "plugin-unsigned".into(),
                        },
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
            plugins,
            judge,
            record,
            workspace: workspace.to_path_buf(),
        })
    }
}

fn command_judge(
    plugins: &GatePlugins,
    cmd: &str,
    digests: &mut Vec<String>,
) -> Result<Judge, GateUnprepared> {
    let argv = shlex::split(cmd)
        .ok_or_else(|| GateUnprepared(format!("gate command {cmd:?} has unbalanced quotes")))?;
    if argv.is_empty() {
        return Err(GateUnprepared("the gate command is empty".into()));
    }
    let (plugin, digest) = plugins.load("command", &["command"])?;
    digests.push(digest);
    Ok(Judge::Command {
        plugin,
        cmd: cmd.to_string(),
        argv,
        implementation: "CommandGate".into(),
    })
}

/// The judge `spec` (at `at` in loop.yaml, a JSON pointer) declares.
fn build(
    plugins: &GatePlugins,
    spec: &GateSpec,
    at: &str,
    package: &Path,
    outputs: &[String],
    bounds_schema: Option<&str>,
    digests: &mut Vec<String>,
) -> Result<Judge, GateUnprepared> {
    Ok(match spec.kind.as_str() {
        "command" => command_judge(plugins, spec.run.as_deref().unwrap_or_default(), digests)?,
        "pytest" => {
            let (plugin, digest) = plugins.load("pytest", &["command"])?;
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
            let (plugin, digest) = plugins.load("jsonschema", &[])?;
            digests.push(digest);
            let schema_path = spec.schema.as_deref().or(bounds_schema).ok_or_else(|| {
                GateUnprepared(
                    "a jsonschema gate needs a schema: set gate.schema or schema in bounds.yaml"
                        .into(),
                )
            })?;
            let text = std::fs::read_to_string(package.join(schema_path)).map_err(|e| {
                GateUnprepared(format!(
                    "cannot read the gate's schema {}: {e}",
                    package.join(schema_path).display()
                ))
            })?;
            let schema: Value = serde_json::from_str(&text).map_err(|e| {
                GateUnprepared(format!("the gate's schema {schema_path} is not JSON: {e}"))
            })?;
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
        bl_loops::manifest::PLUGIN_GATE => {
            let name = spec.plugin.clone().unwrap_or_default();
            // Granted nothing: a loop's plugin gate judges the workspace alone.
            let (plugin, digest, unsigned, found) = plugins.load_pinned(&name, &[])?;
            digests.push(digest);
            let config = spec.config.clone().unwrap_or_else(|| json!({}));
            // Refused now, before the first lap pays for a turn the gate
            // could not judge.
            found
                .check_config(&config, &format!("{at}/config"), str::to_string)
                .map_err(|e| GateUnprepared(format!("the gate's config in loop.yaml: {e}")))?;
            let config = config.to_string();
            Judge::Plugin {
                plugin,
                name,
                config,
                unsigned,
            }
        }
        "composite" => Judge::All(
            spec.gates
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    let at = format!("{at}/gates/{i}");
                    build(plugins, g, &at, package, outputs, bounds_schema, digests)
                })
                .collect::<Result<_, _>>()?,
        ),
        kind => {
            let tool = scanner_tool(kind)
                .ok_or_else(|| GateUnprepared(format!("no gate for kind {kind}")))?;
            let (plugin, digest) = plugins.load("scanner", &["command"])?;
            digests.push(digest);
            Judge::Scanner {
                plugin,
                kind: kind.into(),
                tool: tool.into(),
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
        evidence: error_evidence("gate", "GateError"),
    }
}

/// The exit code the command gate reported (`-1` when it reported none:
/// a signal, which is never a pass).
fn exit_code(verdict: &Verdict) -> i64 {
    finding(verdict, "command/exit")
        .and_then(|c| c.parse().ok())
        .unwrap_or(-1)
}

impl LoopGate {
    /// Judges with every command bounded by the time left until `until`;
    /// a gate still running then is the wallclock bound, not an error.
    fn run_judge(&self, judge: &Judge, until: Instant) -> Judgement {
        let ws = &self.workspace;
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return out_of_time();
        }
        let timeout_ms = left.as_millis().clamp(1, u128::from(u32::MAX)) as u64;
        // The command's own timeout starts a little after `until` was set,
        // so an error this close to the end is the clock, not the gate.
        let ran_out = || Instant::now() + Duration::from_millis(250) >= until;
        match judge {
            Judge::Command {
                plugin,
                cmd,
                argv,
                implementation,
            } => {
                let config =
                    json!({"argv": argv, "tail_bytes": TAIL_CHARS, "timeout_ms": timeout_ms})
                        .to_string();
                match self.plugins.check(plugin, ws, &config) {
                    Ok(inv) => {
                        let v = inv.value;
                        let code = exit_code(&v);
                        match code {
                            0 => Judgement {
                                outcome: Outcome::Pass,
                                detail: "gate passed (exit 0)".into(),
                                evidence: command_evidence(cmd, code, tail(&v)),
                            },
                            1 => Judgement {
                                outcome: Outcome::Fail,
                                detail: "gate failed (exit 1)".into(),
                                evidence: command_evidence(cmd, code, tail(&v)),
                            },
                            // The verdict contract: 2 and above mean the gate itself broke.
                            code => {
                                let stderr = finding(&v, "command/stderr")
                                    .map(|m| m.trim_start_matches("stderr (tail):\n"))
                                    .unwrap_or("");
                                gate_error(
                                    implementation,
                                    &format!(
                                        "command exited with unexpected code {code} (a gate exits 0 to pass and 1 to reject). This means the gate could not run, not that it failed. cmd={} stderr={}",
                                        bl_core::python::repr(cmd),
                                        bl_core::python::repr(stderr)
                                    ),
                                )
                            }
                        }
                    }
                    Err(_) if ran_out() => out_of_time(),
                    Err(e) => gate_error(
                        implementation,
                        &format!(
                            "OS error launching command '{cmd}': {}",
                            plain(&e.to_string())
                        ),
                    ),
                }
            }
            Judge::Scanner {
                plugin,
                kind,
                tool,
                implementation,
            } => {
                let config = json!({"kind": kind, "timeout_ms": timeout_ms}).to_string();
                match self.plugins.check(plugin, ws, &config) {
                    Ok(inv) => {
                        let v = inv.value;
                        let findings =
                            finding(&v, "scanner/findings").and_then(|n| n.parse::<u64>().ok());
                        let evidence = Ordered::object([
                            (
                                "cmd",
                                finding(&v, "scanner/cmd").unwrap_or(tool.as_str()).into(),
                            ),
                            ("code", exit_code(&v).into()),
                            (
                                "findings",
                                findings.map_or(Ordered::Json(Value::Null), Ordered::from),
                            ),
                        ]);
                        Judgement {
                            outcome: if v.passed {
                                Outcome::Pass
                            } else {
                                Outcome::Fail
                            },
                            detail: v.summary,
                            evidence,
                        }
                    }
                    Err(_) if ran_out() => out_of_time(),
                    // The plugin words why the scan decides nothing.
                    Err(e) => gate_error(implementation, &plain(&e.to_string())),
                }
            }
            Judge::Pytest { plugin, args } => {
                let config = json!({"args": args, "timeout_ms": timeout_ms}).to_string();
                match self.plugins.check(plugin, ws, &config) {
                    Ok(inv) => {
                        let v = inv.value;
                        let code = exit_code(&v);
                        let cmd = format!(
                            "python3 -B -m pytest -q -p no:cacheprovider{}",
                            args.iter().map(|a| format!(" {a}")).collect::<String>()
                        );
                        let evidence = Ordered::object([
                            ("cmd", cmd.into()),
                            ("code", code.into()),
                            ("tail", tail(&v).into()),
                            ("invocation", "python3-module".into()),
                        ]);
                        // The verdict contract: 0 passes, 1 (tests failed)
                        // rejects, anything else (collection errors, no tests,
                        // usage) means the gate could not decide.
                        let (outcome, word) = match code {
                            0 => (Outcome::Pass, "passed"),
                            1 => (Outcome::Fail, "failed"),
                            _ => {
                                return gate_error(
                                    "PytestGate",
                                    &format!(
                                        "pytest exited {code} (collection errors, no tests or a usage error): the gate could not decide. tail={}",
                                        bl_core::python::repr(&tail(&v))
                                    ),
                                );
                            }
                        };
                        Judgement {
                            outcome,
                            detail: format!(
                                "gate {word} (exit {code}); pytest via python3 -m pytest"
                            ),
                            evidence,
                        }
                    }
                    Err(_) if ran_out() => out_of_time(),
                    Err(e) => gate_error("PytestGate", &plain(&e.to_string())),
                }
            }
            Judge::Schema {
                plugin,
                file,
                schema,
            } => {
                let config = json!({"schema": schema, "files": [file]}).to_string();
                let target =
                    || Ordered::object([("target", ws.join(file).display().to_string().into())]);
                match self.plugins.check(plugin, ws, &config) {
                    Ok(inv) if inv.value.passed => Judgement {
                        outcome: Outcome::Pass,
                        detail: format!("{file} validates against schema"),
                        evidence: Ordered::empty(),
                    },
                    Ok(inv) => {
                        let v = inv.value;
                        let (detail, evidence) = if finding(&v, "jsonschema/missing").is_some() {
                            (format!("{file} not found"), target())
                        } else if let Some(m) = finding(&v, "jsonschema/parse") {
                            (format!("{file} is not valid JSON: {m}"), target())
                        } else {
                            let first = v
                                .findings
                                .first()
                                .map_or(v.summary.as_str(), |f| f.message.as_str());
                            (
                                format!("schema validation failed: {first}"),
                                Ordered::object([("path", Ordered::Array(Vec::new()))]),
                            )
                        };
                        Judgement {
                            outcome: Outcome::Fail,
                            detail,
                            evidence,
                        }
                    }
                    Err(_) if ran_out() => out_of_time(),
                    Err(e) => gate_error("JsonSchemaGate", &plain(&e.to_string())),
                }
            }
            Judge::Plugin {
                plugin,
                name,
                config,
                ..
            } => match self.plugins.check(plugin, ws, config) {
                Ok(inv) => {
                    let v = inv.value;
                    let findings: Vec<Ordered> = v
                        .findings
                        .iter()
                        .map(|f| f.message.clone().into())
                        .collect();
                    Judgement {
                        outcome: if v.passed {
                            Outcome::Pass
                        } else {
                            Outcome::Fail
                        },
                        detail: format!("gate plugin {name}: {}", v.summary),
                        evidence: Ordered::object([
                            ("plugin", name.clone().into()),
                            ("findings", Ordered::Array(findings)),
                        ]),
                    }
                }
                Err(_) if ran_out() => out_of_time(),
                // The error names the plugin itself ("plugin NAME: …").
                Err(e) => gate_error("PluginGate", &plain(&e.to_string())),
            },
            Judge::All(children) => {
                let results: Vec<Judgement> =
                    children.iter().map(|c| self.run_judge(c, until)).collect();
                // Out of time, or a child that could not decide (in its words).
                for stop in [Outcome::OutOfTime, Outcome::Error] {
                    if let Some(child) = results.iter().find(|r| r.outcome == stop) {
                        return child.clone();
                    }
                }
                let children = results
                    .iter()
                    .map(|r| {
                        Ordered::object([
                            ("passed", (r.outcome == Outcome::Pass).into()),
                            ("detail", r.detail.clone().into()),
                            ("evidence", r.evidence.clone()),
                        ])
                    })
                    .collect();
                let evidence = Ordered::object([
                    ("mode", "all".into()),
                    ("children", Ordered::Array(children)),
                ]);
                let n = results.len();
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
                        detail: format!("composite gate failed: {failed} child gate(s) failed"),
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
    for layer in ["could not start: ", "could not decide: "] {
        if let Some(at) = message.rfind(layer) {
            return message[at + layer.len()..].to_string();
        }
    }
    message.to_string()
}

fn out_of_time() -> Judgement {
    Judgement {
        outcome: Outcome::OutOfTime,
        detail: "the gate was still running when the work time ran out".into(),
        evidence: Ordered::empty(),
    }
}

impl Gate for LoopGate {
    fn judge(&mut self, time_left: Duration) -> Judgement {
        self.run_judge(&self.judge, Instant::now() + time_left)
    }

    fn record(&self) -> GateRecord {
        self.record.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bl_core::exec::{CommandError, CommandResult, CommandSpec};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts how often it is told commands will run; runs none.
    #[derive(Default)]
    struct Expecting(AtomicUsize);

    impl CommandRunner for Expecting {
        fn name(&self) -> &str {
            "expecting"
        }
        fn run(&self, _: &CommandSpec) -> Result<CommandResult, CommandError> {
            Err(CommandError::Denied("no command runs here".into()))
        }
        fn expect_commands(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn only_a_gate_granted_commands_has_the_sandbox_make_its_cage_ahead() {
        let Some(host) = crate::test_support::first_party_plugins() else {
            return;
        };
        let commands = Arc::new(Expecting::default());
        let plugins = GatePlugins {
            host,
            commands: commands.clone(),
            deadline: Duration::from_secs(5),
        };
        plugins.load("jsonschema", &[]).unwrap();
        assert_eq!(
            commands.0.load(Ordering::SeqCst),
            0,
            "jsonschema runs no command"
        );
        plugins.load("command", &["command"]).unwrap();
        assert_eq!(commands.0.load(Ordering::SeqCst), 1);
    }
}
