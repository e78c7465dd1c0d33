//! `loop.yaml` and `bounds.yaml`, read as bounded-loops 0.7 reads them:
//! PyYAML's safe loader (via bl-graph's reader: duplicate keys refused,
//! YAML 1.1 scalars), closed key sets per section, strict booleans and
//! integers (a boolean is not an integer), the hard ceiling of 1000 laps,
//! and the derived defaults (`max_wallclock_s: null` is an hour, the
//! handoff reserve is a third of it up to 90 s, `require_approval: null`
//! is false at rung L1 and true at L2 and L3). Messages are bounded-loops'
//! words; bl adds where the value was written.

use std::fmt;

use bl_graph::doc::{Kind, Node, Pos};

use crate::bounds::{Bounds, DEFAULT_WALLCLOCK_S};

/// The most laps any loop may declare; there is no flag to raise it.
pub const MAX_ITERATIONS_CEILING: i128 = 1000;

const LOOP_KEYS: &[&str] = &[
    "bounds",
    "description",
    "forbid",
    "gate",
    "inputs",
    "memory",
    "name",
    "outputs",
    "pattern",
    "role",
    "rung",
    "runner",
    "spec",
];
const LOOP_REQUIRED: &[&str] = &[
    "name",
    "description",
    "pattern",
    "role",
    "rung",
    "runner",
    "gate",
];
const RUNNER_KEYS: &[&str] = &[
    "agent_cmd",
    "approve_policy",
    "cassette",
    "default",
    "env_passthrough",
    "function_name",
    "image",
    "module_path",
];
const GATE_KEYS: &[&str] = &[
    "checkpoint",
    "config",
    "gates",
    "kind",
    "mode",
    "plugin",
    "run",
    "schema",
    "severity",
];
const BOUNDS_KEYS: &[&str] = &[
    "handoff_reserve_s",
    "max_iterations",
    "max_tokens",
    "max_wallclock_s",
    "no_progress_window",
    "quarantine_inputs",
    "require_approval",
    "sandbox",
    "schema",
    "trace",
];
/// Anthropic's seven agentic patterns, which `pattern` must name.
pub const PATTERNS: &[&str] = &[
    "agents",
    "augmented-llm",
    "evaluator-optimizer",
    "orchestrator-workers",
    "parallelization",
    "prompt-chaining",
    "routing",
];
/// bl's own gate kind: a gate plugin named by `gate.plugin`.
pub const PLUGIN_GATE: &str = "plugin";

/// Gate kinds a loop may declare (bounded-loops' own).
pub const GATE_KINDS: &[&str] = &[
    "axe",
    "checkov",
    "command",
    "composite",
    "gitleaks",
    "great_expectations",
    "jsonschema",
    "osv",
    "promptfoo",
    "pytest",
    "semgrep",
    "trivy",
];
/// Runners a manifest may default to (keyless ones); the agent CLIs are
/// chosen on the command line.
pub const DEFAULT_RUNNERS: &[&str] = &["stub", "shell", "python_callable"];

/// Which file an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum File {
    Loop,
    Bounds,
}

impl File {
    pub fn name(self) -> &'static str {
        match self {
            File::Loop => "loop.yaml",
            File::Bounds => "bounds.yaml",
        }
    }
}

/// A manifest bl will not run: bounded-loops' message, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: File,
    pub message: String,
    pub pos: Option<Pos>,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ManifestError {}

fn err(file: File, node: Option<&Node>, message: impl Into<String>) -> ManifestError {
    ManifestError {
        file,
        message: message.into(),
        pos: node.map(|n| n.pos),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rung {
    L1,
    L2,
    L3,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunnerSpec {
    pub default: String,
    pub cassette: Option<String>,
    pub agent_cmd: Option<String>,
    pub module_path: Option<String>,
    pub function_name: Option<String>,
    pub env_passthrough: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct GateSpec {
    pub kind: String,
    pub run: Option<String>,
    pub mode: Option<String>,
    pub gates: Vec<GateSpec>,
    pub schema: Option<String>,
    /// Free-form settings for the gate's plugin (JSON).
    pub config: Option<serde_json::Value>,
    /// For `kind: plugin` (a bl extension): the gate plugin, by name, as a
    /// project installs it or the plugin path holds it.
    pub plugin: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LoopManifest {
    pub name: String,
    pub description: String,
    pub pattern: String,
    pub role: Vec<String>,
    pub rung: Rung,
    pub spec: Option<String>,
    pub runner: RunnerSpec,
    pub gate: GateSpec,
    /// The bounds file, relative to the package (`bounds.yaml` by default).
    pub bounds: String,
    pub memory: Option<String>,
    pub forbid: Vec<String>,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

fn parse(file: File, text: &str) -> Result<Node, ManifestError> {
    bl_graph::yaml::parse_yaml(text).map_err(|refusal| {
        let message = if let Some(key) = refusal.message.strip_prefix("duplicate key ") {
            format!("{}: duplicate key {key}", file.name())
        } else {
            format!("{} is not valid YAML: {}", file.name(), refusal.message)
        };
        ManifestError {
            file,
            message,
            pos: refusal.pos,
        }
    })
}

fn closed(
    file: File,
    section: &str,
    map: &[(String, Node)],
    keys: &[&str],
) -> Result<(), ManifestError> {
    for (key, node) in map {
        if !keys.contains(&key.as_str()) {
            return Err(err(
                file,
                Some(node),
                format!(
                    "{} [{section}]: unknown key '{key}'. Valid keys for this section: {}. Remove or rename this key, or check for a typo.",
                    file.name(),
                    py_list(keys)
                ),
            ));
        }
    }
    Ok(())
}

fn py_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

fn string(file: File, node: &Node, what: &str) -> Result<String, ManifestError> {
    match &node.kind {
        Kind::Str(s) => Ok(s.clone()),
        _ => Err(err(file, Some(node), format!("{what} must be a string"))),
    }
}

fn opt_string(
    file: File,
    node: Option<&Node>,
    what: &str,
) -> Result<Option<String>, ManifestError> {
    match node {
        None => Ok(None),
        Some(n) if n.is_null() => Ok(None),
        Some(n) => string(file, n, what).map(Some),
    }
}

/// A string or a list of strings.
fn strings(file: File, node: Option<&Node>, what: &str) -> Result<Vec<String>, ManifestError> {
    match node.map(|n| &n.kind) {
        None | Some(Kind::Null) => Ok(Vec::new()),
        Some(Kind::Str(s)) => Ok(vec![s.clone()]),
        Some(Kind::Seq(items)) => items.iter().map(|i| string(file, i, what)).collect(),
        Some(_) => Err(err(file, node, format!("{what} must be a list of strings"))),
    }
}

impl LoopManifest {
    pub fn parse(text: &str) -> Result<LoopManifest, ManifestError> {
        let file = File::Loop;
        let root = parse(file, text)?;
        let Some(map) = root.as_map() else {
            return Err(err(
                file,
                Some(&root),
                "loop.yaml must contain a mapping at the document root",
            ));
        };
        closed(file, "loop", map, LOOP_KEYS)?;
        for key in LOOP_REQUIRED {
            if root.get(key).is_none() {
                return Err(err(
                    file,
                    None,
                    format!("loop.yaml missing required key '{key}'"),
                ));
            }
        }
        let get = |k: &str| root.get(k);
        let name = string(file, get("name").unwrap(), "name")?;
        let description = string(file, get("description").unwrap(), "description")?;
        let pattern_node = get("pattern").unwrap();
        let pattern = string(file, pattern_node, "pattern")?;
        if !PATTERNS.contains(&pattern.as_str()) {
            return Err(err(
                file,
                Some(pattern_node),
                format!(
                    "loop.yaml: pattern '{pattern}' is not one of Anthropic's seven agentic patterns. Valid values: {}. See https://www.anthropic.com/engineering/building-effective-agents for definitions.",
                    py_list(PATTERNS)
                ),
            ));
        }
        let role = strings(file, get("role"), "role")?;
        let rung_node = get("rung").unwrap();
        let rung = match rung_node.as_str() {
            Some("L1") => Rung::L1,
            Some("L2") => Rung::L2,
            Some("L3") => Rung::L3,
            _ => {
                let got = rung_node
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| render(rung_node));
                return Err(err(
                    file,
                    Some(rung_node),
                    format!("rung must be L1|L2|L3, got '{got}'"),
                ));
            }
        };
        let runner = runner(get("runner").unwrap())?;
        let gate = gate(get("gate").unwrap(), true)?;
        Ok(LoopManifest {
            name,
            description,
            pattern,
            role,
            rung,
            spec: opt_string(file, get("spec"), "spec")?,
            runner,
            gate,
            bounds: opt_string(file, get("bounds"), "bounds")?
                .unwrap_or_else(|| "bounds.yaml".into()),
            memory: opt_string(file, get("memory"), "memory")?,
            forbid: strings(file, get("forbid"), "forbid")?,
            inputs: strings(file, get("inputs"), "inputs")?,
            outputs: strings(file, get("outputs"), "outputs")?,
        })
    }
}

fn render(node: &Node) -> String {
    match &node.kind {
        Kind::Str(s) => s.clone(),
        _ => node.to_json().to_string(),
    }
}

fn runner(node: &Node) -> Result<RunnerSpec, ManifestError> {
    let file = File::Loop;
    let Some(map) = node.as_map() else {
        return Err(err(file, Some(node), "runner must be a mapping"));
    };
    closed(file, "runner", map, RUNNER_KEYS)?;
    let default_node = node.get("default");
    let default =
        opt_string(file, default_node, "runner.default")?.unwrap_or_else(|| "stub".into());
    if !DEFAULT_RUNNERS.contains(&default.as_str()) {
        return Err(err(
            file,
            default_node,
            format!(
                "runner.default must be stub|shell|python_callable (keyless) for a default manifest; got '{default}'. Use --runner on the CLI to override at runtime."
            ),
        ));
    }
    Ok(RunnerSpec {
        default,
        cassette: opt_string(file, node.get("cassette"), "runner.cassette")?,
        agent_cmd: opt_string(file, node.get("agent_cmd"), "runner.agent_cmd")?,
        module_path: opt_string(file, node.get("module_path"), "runner.module_path")?,
        function_name: opt_string(file, node.get("function_name"), "runner.function_name")?,
        env_passthrough: strings(file, node.get("env_passthrough"), "runner.env_passthrough")?,
    })
}

fn gate(node: &Node, top: bool) -> Result<GateSpec, ManifestError> {
    let file = File::Loop;
    let Some(map) = node.as_map() else {
        return Err(err(file, Some(node), "gate must be a mapping"));
    };
    closed(file, "gate", map, GATE_KEYS)?;
    let kind_node = node.get("kind");
    let kind = opt_string(file, kind_node, "gate.kind")?.unwrap_or_else(|| "command".into());
    let plugin = opt_string(file, node.get("plugin"), "gate.plugin")?;
    if kind == PLUGIN_GATE {
        if plugin.as_deref().is_none_or(|p| p.trim().is_empty()) {
            return Err(err(
                file,
                Some(node),
                "loop.yaml: gate.plugin is required when gate.kind=plugin. Name the gate plugin, for example gate.plugin: word-count (`bl plugin list` shows what is installed)",
            ));
        }
    } else if plugin.is_some() {
        return Err(err(
            file,
            node.get("plugin"),
            "loop.yaml: gate.plugin is only for gate.kind=plugin",
        ));
    }
    if kind != PLUGIN_GATE && !GATE_KINDS.contains(&kind.as_str()) {
        return Err(err(
            file,
            kind_node,
            format!(
                "loop.yaml: gate.kind '{kind}' is not a recognized kind. Valid kinds: {}. Check for a typo. Use --gate-override on the CLI for a gate that is not one of these.",
                py_list(GATE_KINDS)
            ),
        ));
    }
    let run = opt_string(file, node.get("run"), "gate.run")?;
    if run.as_deref().is_some_and(|r| r.trim().is_empty()) {
        return Err(err(
            file,
            node.get("run"),
            "gate.run must be a non-empty string",
        ));
    }
    if kind == "command" && run.is_none() {
        return Err(err(
            file,
            Some(node),
            "loop.yaml: gate.run is required when gate.kind=command. Add gate.run: \"<your-check-command>\" — for example: gate.run: \"python3 seed/check.py\" or gate.run: \"pytest -q\".",
        ));
    }
    let mut gates = Vec::new();
    if kind == "composite" {
        if !top {
            return Err(err(
                file,
                Some(node),
                "loop.yaml: a composite gate may not contain another composite gate",
            ));
        }
        let mode = opt_string(file, node.get("mode"), "gate.mode")?.unwrap_or_else(|| "all".into());
        if mode != "all" {
            return Err(err(
                file,
                node.get("mode"),
                format!("loop.yaml: composite gate mode must be 'all', got '{mode}'"),
            ));
        }
        let children = node.get("gates").and_then(Node::as_seq).unwrap_or_default();
        if children.is_empty() {
            return Err(err(
                file,
                Some(node),
                "loop.yaml: a composite gate needs a non-empty gates list",
            ));
        }
        for child in children {
            gates.push(gate(child, false)?);
        }
    }
    Ok(GateSpec {
        kind,
        run,
        mode: opt_string(file, node.get("mode"), "gate.mode")?,
        gates,
        schema: opt_string(file, node.get("schema"), "gate.schema")?,
        config: node.get("config").map(Node::to_json),
        plugin,
    })
}

/// An integer field: a boolean is not an integer, and `"5"` is not either.
fn int(node: &Node, what: &str, nullable: bool) -> Result<Option<i128>, ManifestError> {
    match &node.kind {
        Kind::Int(i) => Ok(Some(*i)),
        Kind::Null if nullable => Ok(None),
        _ if nullable => Err(err(
            File::Bounds,
            Some(node),
            format!("{what} must be an integer or null"),
        )),
        _ => Err(err(
            File::Bounds,
            Some(node),
            format!("{what} must be an integer"),
        )),
    }
}

fn boolean(node: Option<&Node>, what: &str, default: bool) -> Result<bool, ManifestError> {
    match node.map(|n| &n.kind) {
        None => Ok(default),
        Some(Kind::Bool(b)) => Ok(*b),
        Some(_) => Err(err(File::Bounds, node, format!("{what} must be a boolean"))),
    }
}

fn at_least_one(node: &Node, value: i128, what: &str) -> Result<(), ManifestError> {
    if value < 1 {
        return Err(err(
            File::Bounds,
            Some(node),
            format!("{what} must be at least 1"),
        ));
    }
    Ok(())
}

impl Bounds {
    /// Reads `bounds.yaml`; `rung` gives `require_approval`'s default.
    pub fn parse(text: &str, rung: &Rung) -> Result<Bounds, ManifestError> {
        let file = File::Bounds;
        let root = parse(file, text)?;
        let Some(map) = root.as_map() else {
            return Err(err(
                file,
                Some(&root),
                "bounds.yaml must contain a mapping at the document root",
            ));
        };
        closed(file, "bounds", map, BOUNDS_KEYS)?;
        let Some(max_node) = root.get("max_iterations") else {
            return Err(err(file, None, "bounds.yaml: max_iterations is required"));
        };
        let max_iterations = int(max_node, "max_iterations", false)?.unwrap_or_default();
        at_least_one(max_node, max_iterations, "max_iterations")?;
        if max_iterations > MAX_ITERATIONS_CEILING {
            return Err(err(
                file,
                Some(max_node),
                format!(
                    "max_iterations={max_iterations} exceeds the {MAX_ITERATIONS_CEILING} ceiling, which is hard and non-overridable in v1 — no CLI flag exists to raise it. Split the loop or lower max_iterations."
                ),
            ));
        }
        let no_progress_window = match root.get("no_progress_window") {
            None => 3,
            Some(n) => {
                let v = int(n, "no_progress_window", false)?.unwrap_or_default();
                at_least_one(n, v, "no_progress_window")?;
                v
            }
        };
        let max_tokens = match root.get("max_tokens") {
            None => None,
            Some(n) => match int(n, "max_tokens", true)? {
                Some(v) => {
                    at_least_one(n, v, "max_tokens")?;
                    Some(v as u64)
                }
                None => None,
            },
        };
        let max_wallclock_s = match root.get("max_wallclock_s") {
            None => DEFAULT_WALLCLOCK_S,
            Some(n) => match int(n, "max_wallclock_s", true)? {
                Some(v) => {
                    at_least_one(n, v, "max_wallclock_s")?;
                    v.min(u64::MAX as i128) as u64
                }
                None => DEFAULT_WALLCLOCK_S,
            },
        };
        let handoff_reserve_s = match root.get("handoff_reserve_s") {
            None => Bounds::default_reserve(max_wallclock_s),
            Some(n) => match int(n, "handoff_reserve_s", true).map_err(|e| ManifestError {
                message: "handoff_reserve_s must be an integer".into(),
                ..e
            })? {
                None => Bounds::default_reserve(max_wallclock_s),
                Some(v) if v < 0 => {
                    return Err(err(file, Some(n), "handoff_reserve_s must be at least 0"));
                }
                Some(v) if v * 2 >= max_wallclock_s as i128 => {
                    return Err(err(
                        file,
                        Some(n),
                        format!(
                            "handoff_reserve_s={v} is at least half of max_wallclock_s={max_wallclock_s}, leaving {}s for the work itself. The reserve is taken OUT of the ceiling, not added to it — raise max_wallclock_s or lower the reserve.",
                            max_wallclock_s as i128 - v
                        ),
                    ));
                }
                Some(v) => v as u64,
            },
        };
        let schema = match root.get("schema") {
            None => None,
            Some(n) if n.is_null() => None,
            Some(n) => Some(string(file, n, "schema")?),
        };
        let require_approval = match root.get("require_approval") {
            None => *rung != Rung::L1,
            Some(n) if n.is_null() => *rung != Rung::L1,
            Some(n) => boolean(Some(n), "require_approval", false).map_err(|e| ManifestError {
                message: "require_approval must be a boolean or null".into(),
                ..e
            })?,
        };
        Ok(Bounds {
            max_iterations: max_iterations as u32,
            no_progress_window: no_progress_window.min(u32::MAX as i128) as u32,
            max_tokens,
            max_wallclock_s,
            handoff_reserve_s,
            sandbox: boolean(root.get("sandbox"), "sandbox", true)?,
            quarantine_inputs: boolean(root.get("quarantine_inputs"), "quarantine_inputs", true)?,
            schema,
            trace: boolean(root.get("trace"), "trace", true)?,
            require_approval,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOP: &str = "name: a\ndescription: d\npattern: routing\nrole: [x]\nrung: L2\nrunner:\n  default: stub\ngate:\n  kind: command\n  run: python3 check.py\n";
    const BOUNDS: &str = "max_iterations: 10\nno_progress_window: 3\nmax_tokens: null\nmax_wallclock_s: 990\nsandbox: true\nquarantine_inputs: true\nschema: null\ntrace: true\n";

    fn bounds_err(text: &str) -> ManifestError {
        Bounds::parse(text, &Rung::L1).unwrap_err()
    }

    #[test]
    fn a_catalog_shaped_loop_reads_with_its_derived_defaults() {
        let m = LoopManifest::parse(LOOP).unwrap();
        assert_eq!(
            (m.name.as_str(), m.bounds.as_str(), m.rung.clone()),
            ("a", "bounds.yaml", Rung::L2)
        );
        let b = Bounds::parse(BOUNDS, &m.rung).unwrap();
        assert_eq!(
            (b.max_iterations, b.max_wallclock_s, b.handoff_reserve_s),
            (10, 990, 90)
        );
        assert!(b.require_approval, "null require_approval is true at L2");
        assert!(!Bounds::parse(BOUNDS, &Rung::L1).unwrap().require_approval);
        let b = Bounds::parse("max_iterations: 2\nmax_wallclock_s: null\n", &Rung::L1).unwrap();
        assert_eq!((b.max_wallclock_s, b.handoff_reserve_s), (3600, 90));
    }

    #[test]
    fn refusals_carry_bounded_loops_words_and_the_place() {
        let e = bounds_err("max_iterations: \"5\"\n");
        assert_eq!(e.message, "max_iterations must be an integer");
        assert_eq!(e.pos, Some(Pos { line: 1, col: 17 }));
        assert_eq!(
            bounds_err("max_iterations: true\n").message,
            "max_iterations must be an integer"
        );
        assert!(
            bounds_err("max_iterations: 1001\n")
                .message
                .starts_with("max_iterations=1001 exceeds the 1000 ceiling")
        );
        assert_eq!(
            bounds_err("max_iterations: 2\nsandbox: \"yes\"\n").message,
            "sandbox must be a boolean"
        );
        assert_eq!(
            bounds_err("max_iterations: 2\nmax_tokens: 1.5\n").message,
            "max_tokens must be an integer or null"
        );
        assert_eq!(
            bounds_err("max_iterations: 2\nno_progress_window: 0\n").message,
            "no_progress_window must be at least 1"
        );
        assert!(
            bounds_err("max_iterations: 2\nbogus: 1\n")
                .message
                .starts_with("bounds.yaml [bounds]: unknown key 'bogus'. Valid keys")
        );
        assert_eq!(
            bounds_err("- a\n").message,
            "bounds.yaml must contain a mapping at the document root"
        );
        let e = LoopManifest::parse(&format!("{LOOP}name: b\n")).unwrap_err();
        assert_eq!(e.message, "loop.yaml: duplicate key 'name'");
        let e = LoopManifest::parse(&LOOP.replace("rung: L2", "rung: L4")).unwrap_err();
        assert_eq!(e.message, "rung must be L1|L2|L3, got 'L4'");
        let e = LoopManifest::parse(&LOOP.replace("pattern: routing\n", "")).unwrap_err();
        assert_eq!(e.message, "loop.yaml missing required key 'pattern'");
        let e = LoopManifest::parse(&LOOP.replace("  run: python3 check.py\n", "")).unwrap_err();
        assert!(
            e.message
                .starts_with("loop.yaml: gate.run is required when gate.kind=command.")
        );
        let e = LoopManifest::parse(&LOOP.replace("default: stub", "default: claude-code"))
            .unwrap_err();
        assert!(
            e.message
                .starts_with("runner.default must be stub|shell|python_callable")
        );
    }
}
