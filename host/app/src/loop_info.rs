//! What a loop front end shows besides a run: the gate kinds and whether
//! this machine can run each, what this bl can do here (`capabilities`),
//! a loop run's receipt read back from its ledger, and the loop packages
//! of a directory (listed, linted, shown). The CLI prints them;
//! the MCP server will answer with them.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use bl_store::LoopRunDir;

use crate::error::AppError;

/// Whether `program` is on the operator's PATH.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// Every gate kind, what runs it, and whether this machine has it.
pub fn gates() -> Vec<Value> {
    let host = crate::plugin_host::shared();
    let plugin = |name: &str| host.resolve(name).is_ok();
    let pytest = std::process::Command::new("/usr/bin/python3")
        .args(["-c", "import pytest"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut gates = vec![
        json!({"kind": "command", "available": plugin("command"), "plugin": "command", "dependencies": [], "description": "Runs the loop's command (no shell) in the sandbox; exit 0 passes, 1 rejects, anything else is an error"}),
        json!({"kind": "pytest", "available": plugin("pytest") && pytest, "plugin": "pytest", "dependencies": ["python3 -m pytest"], "description": "Runs pytest -q in the workspace"}),
        json!({"kind": "jsonschema", "available": plugin("jsonschema"), "plugin": "jsonschema", "dependencies": [], "description": "Validates output.json against the loop's JSON Schema (drafts 7 and 2020-12), in wasm"}),
        json!({"kind": "composite", "available": true, "plugin": null, "dependencies": [], "description": "All child gates must pass (mode: all); any child error is an error"}),
        json!({"kind": "plugin", "available": true, "plugin": null, "dependencies": [],
               "description": "bl's own kind (bounded-loops refuses it): any gate plugin, named by gate.plugin (NAME or NAME@REQ), installed from a registry or on the plugin path (bl plugin list shows them), judging with gate.config; an unsigned one runs only with --allow-unsigned NAME"}),
    ];
    for (kind, tool) in [
        ("osv", "osv-scanner"),
        ("checkov", "checkov"),
        ("gitleaks", "gitleaks"),
        ("semgrep", "semgrep"),
        ("trivy", "trivy"),
    ] {
        gates.push(json!({"kind": kind, "available": plugin("scanner") && on_path(tool), "plugin": "scanner", "dependencies": [tool],
                          "description": format!("Runs {tool} through the scanner gate, which reads its JSON report and counts the findings; a missing {tool} is an error")}));
    }
    for (kind, tool) in [
        ("promptfoo", "promptfoo"),
        ("great_expectations", "great_expectations"),
        ("axe", "axe"),
    ] {
        gates.push(json!({"kind": kind, "available": false, "plugin": null, "dependencies": [tool],
                          "description": format!("No gate plugin reads {tool}'s report yet; a loop that names this kind is refused before it runs")}));
    }
    gates
}

/// What this bl can do on this machine, and what it only declares.
pub fn capabilities() -> Value {
    let bwrap = ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]
        .iter()
        .any(|p| Path::new(p).is_file());
    let mut caps = json!({
        "engine": {"name": "bl", "version": env!("CARGO_PKG_VERSION"), "graph_api_version": "bounded-loops.dev/graph/v1",
                   "compatible_with": "bounded-loops 0.7 (manifests, loop packages, ledgers, run directories, exit codes)",
                   "what_it_is": "A bounded loop drives one task to a finish an independent gate verifies; a graph is a DAG of gated nodes. Every run leaves a hash-chained record that bl verify checks."},
        "loop_statuses": {"all": ["DONE", "HALT", "PAUSE", "KILLED", "ERROR"], "success": ["DONE"],
                          "not_success": ["ERROR", "HALT", "KILLED", "PAUSE"],
                          "exit_codes": {"DONE": 0, "HALT": 1, "PAUSE": 1, "KILLED": 1, "ERROR": 3, "manifest or refusal": 2}},
        "bounds": [
            {"field": "max_iterations", "enforced": "before every lap; at most 1000"},
            {"field": "no_progress_window", "enforced": "a content digest of the workspace after every turn; that many unchanged laps in a row halt"},
            {"field": "max_tokens", "enforced": "before every lap, from the tokens the runner reported"},
            {"field": "max_wallclock_s", "enforced": "before every lap and inside every turn (the turn is stopped), less the handoff reserve"},
            {"field": "sandbox", "enforced": if bwrap { "runner and gate commands run in bubblewrap with no network (process_restricted)" } else { "bubblewrap is not installed: a loop asking for the sandbox is refused" }},
            {"field": "quarantine_inputs", "enforced": "credential-like seed entries are withheld from the workspace and named"},
            {"field": "schema", "enforced": "the jsonschema gate validates output.json against it"},
            {"field": "trace", "enforced": "one OpenTelemetry span per lap over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set"},
            {"field": "require_approval", "enforced": "a passing gate needs a y on stdin, else PAUSE; null means true at L2 and L3"},
        ],
        "kill_switch": {"variable": crate::loop_run::KILL_SWITCH, "rule": "any non-empty value stops every loop at the start of its next lap"},
        "runners": ["stub", "shell", "python_callable", "claude-code", "codex", "antigravity"],
        "gates": gates(),
        "isolation": {"bubblewrap": bwrap, "tiers": ["workspace_only", "process_restricted", "container_restricted"], "never_available": ["customer_managed_worker"],
                      "fails_closed": "a tier this machine cannot provide is refused, never downgraded"},
        "plugins": {"wit_package": bl_plugins::WIT_PACKAGE, "worlds": ["gate", "completion-contract", "transform", "publication-policy"]},
        "reporting_rule": "Report the status bl returned as it is. Only DONE means the gate passed (SUCCEEDED, for a graph run); an ERROR has no verdict at all.",
        "platform": {"platform": std::env::consts::OS, "bubblewrap": bwrap,
                     "caveat": "This describes this machine. A graph that plans here is still refused, before it runs, on a machine that cannot give a node its isolation tier."},
    });
    if let (Some(all), Value::Object(graphs)) = (caps.as_object_mut(), graph_capabilities()) {
        all.extend(graphs);
    }
    caps
}

/// What a graph/v1 manifest may say and what this engine does with it, in
/// the keys bounded-loops' `bl_capabilities` uses, from the compiler's
/// own lists.
fn graph_capabilities() -> Value {
    use bl_graph::model::{DATA_CLASSES, EFFECTS, Effect, NODE_KINDS, Named, kind_fields};
    use bl_graph::validate::{
        FAILURE_POLICIES_HONOURED, FAILURE_POLICIES_REFUSED, MAX_ATTEMPTS_CEILING,
        MAX_WALLCLOCK_S_CEILING,
    };
    let network: Vec<&str> = Effect::ALL
        .iter()
        .filter(|e| e.reaches_network())
        .map(|e| e.name())
        .collect();
    let codes: Vec<&str> = bl_graph::RefusalCode::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    let states: Vec<&str> = bl_run::projection::RunState::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    json!({
        "node_fields": {"required": bl_graph::validate::NODE_KEYS, "optional": bl_graph::validate::NODE_OPTIONAL},
        "values": {"join_mode": bl_graph::model::JOIN_MODES, "isolation": bl_graph::model::ISOLATIONS,
                   "edge_guard": bl_graph::model::EDGE_GUARDS, "fail_mode": bl_graph::model::FAIL_MODES,
                   "tool_ref": ["command:<argv>", "transform:<plugin>@v<N>", "bl:sandbox-probe"],
                   "publication_policy": "the name of a publication-policy plugin (bl plugin list shows them); bl's outbox policy publishes into the run's outbox what an approval before it allowed"},
        "node_kinds": NODE_KINDS.iter().map(|kind| json!({"kind": kind, "extra_required_fields": kind_fields(kind), "extra_optional_fields": []})).collect::<Vec<_>>(),
        "failure_policies": {"declared": FAILURE_POLICIES_HONOURED.iter().chain(FAILURE_POLICIES_REFUSED).collect::<Vec<_>>(),
                             "honoured": FAILURE_POLICIES_HONOURED, "refused": FAILURE_POLICIES_REFUSED,
                             "why_refused": "No runtime routes them yet: a graph declaring one is refused (on_failure_unimplemented) rather than run with its policy dropped."},
        "repair": {"how": "on_failure: {mode: repair, target: <an ancestor>} runs that ancestor and what follows it again, a round at a time",
                   "requires": "policies.repair_budget > 0 (the rounds a run may spend), else the graph is refused",
                   "attempts_reset_at_a_boundary": true,
                   "identity_warning": "attempt numbers start again in each round: a node's attempt is named by its round and its attempt together"},
        "effects": {"vocabulary": EFFECTS, "network_bearing": network, "retry_requires_idempotency_key": network,
                    "rule": "A node with an effect that reaches the world (external_write, financial, irreversible) may not be retried: declare max_attempts: 1.",
                    "approval": "An approval node authorizes the effects downstream of it; an outbox publish with no approval upstream is refused."},
        "budgets": [
            {"field": "max_attempts", "unit": "attempts", "ceiling": MAX_ATTEMPTS_CEILING, "enforced_by": "the controller, per node and per repair round"},
            {"field": "max_wallclock_s", "unit": "seconds", "ceiling": MAX_WALLCLOCK_S_CEILING, "enforced_by": "each attempt's deadline: its worker is stopped when it passes"},
            {"field": "max_tokens", "unit": "tokens", "enforced_by": "the tokens the worker reports; a worker that reports none fails the node (budget_unmeasurable)"},
            {"field": "max_cost_microunits", "unit": "microunits (1e-6 of the price table's currency)", "enforced_by": "the cost the worker reports, held as max_tokens is"},
        ],
        "graph_run_states": {"all": states, "success": ["SUCCEEDED"], "not_success": ["FAILED"], "non_terminal": ["PENDING", "RUNNING"],
                             "contract": "A graph run (bl graph run, graph_status) ends SUCCEEDED or FAILED; only SUCCEEDED is success. PENDING or RUNNING means it has not ended (it may be waiting for a person or a budget)."},
        "data_classes": DATA_CLASSES,
        "refusals": {"count": codes.len(), "codes": codes,
                     "before_a_run": bl_graph::hazards::RULES,
                     "before_a_run_means": "a graph that lints and plans, which bl graph run (and MCP graph_run's preview) refuses because its run would deny these nodes; lint and plan warn of them",
                     "where": "each refusal names its code, the JSON pointer (with line and column) and a fix; docs/manifest-reference.md lists every field"},
        "evidence_contracts": [
            {"id": "bounded-loops.dev/slm-bridge/v1", "tool": "bl_graph_evidence", "operation": "observe_terminal_run"},
            {"id": "bounded-loops.dev/slm-bridge/v2", "tool": "bl_graph_execution_evidence", "operation": "observe_verified_terminal_run"},
        ],
        "manifest_reference": "docs/manifest-reference.md",
    })
}

/// A loop run's receipt: as JSON text (ASCII-escaped, as bounded-loops
/// writes it) and as Markdown.
pub struct LoopReceipt {
    pub json_text: String,
    pub markdown: String,
}

/// The receipt of the loop run in `run_dir`, from its ledger and metadata.
pub fn receipt(run_dir: &Path) -> Result<LoopReceipt, AppError> {
    if let Some(said) = LoopRunDir::new(run_dir).unrecorded() {
        return Err(AppError::refused(format!("receipt: {said}")));
    }
    let unreadable = || {
        AppError::refused(format!(
            "receipt: {} is not a readable run directory (expected a ledger.jsonl inside it holding UTF-8 JSON lines)",
            run_dir.display()
        ))
    };
    let text =
        std::fs::read_to_string(LoopRunDir::new(run_dir).ledger()).map_err(|_| unreadable())?;
    let rows: Vec<Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|_| unreadable())?;
    let metadata: Value = std::fs::read_to_string(LoopRunDir::new(run_dir).metadata())
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    let run_id = metadata["run_id"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| {
            run_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
    let receipt =
        bl_loops::receipt::receipt(&rows, &metadata, &run_id, &run_dir.display().to_string());
    let json_text =
        bl_loops::ledger::ascii_escaped(&serde_json::to_string_pretty(&receipt).expect("json"));
    let markdown = bl_loops::receipt::receipt_markdown(&receipt);
    Ok(LoopReceipt {
        json_text,
        markdown,
    })
}

/// Writes `receipt.json` and `receipt.md` into `run_dir`; returns their
/// paths.
pub fn write_receipt(run_dir: &Path, receipt: &LoopReceipt) -> Result<Vec<PathBuf>, AppError> {
    let mut written = Vec::new();
    let records = LoopRunDir::new(run_dir);
    for (path, text) in [
        (records.receipt_json(), format!("{}\n", receipt.json_text)),
        (records.receipt_markdown(), receipt.markdown.clone()),
    ] {
        std::fs::write(&path, text).map_err(|e| {
            AppError::refused(format!("receipt: cannot write {}: {e}", path.display()))
        })?;
        written.push(path);
    }
    Ok(written)
}

/// A loop run's summary, from its metadata (its end) or, before it ends,
/// its ledger: `{name, kind: "loop", state, loop, laps, reason}`; None when
/// `dir` holds neither.
pub fn loop_run_summary(name: &str, dir: &Path) -> Option<Value> {
    let records = bl_store::LoopRunDir::new(dir);
    if let Some(meta) = std::fs::read(records.metadata())
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    {
        let loop_name = meta["loop_dir"]
            .as_str()
            .and_then(|d| Path::new(d).file_name())
            .map(|n| n.to_string_lossy().into_owned());
        return Some(json!({
            "name": name, "kind": "loop",
            "state": meta["status"].as_str().unwrap_or("UNREADABLE"),
            "loop": loop_name,
            "laps": meta["laps"].clone(),
            "reason": meta["reason"].clone(),
        }));
    }
    // No end recorded: a loop still running, or one stopped before its end.
    let ledger = std::fs::read_to_string(records.ledger()).ok()?;
    Some(json!({
        "name": name, "kind": "loop", "state": "UNFINISHED",
        "laps": ledger.lines().filter(|l| !l.trim().is_empty()).count(),
        "reason": "no end recorded yet: running, or stopped before its end",
    }))
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Loop packages under `root`: `root/loops/*` and `root/*`.
pub fn discover(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for base in [root.join("loops"), root.to_path_buf()] {
        let Ok(entries) = std::fs::read_dir(&base) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.join("loop.yaml").is_file() && !found.contains(&path) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The loop packages under `root` (see [`discover`]), each as bounded-loops
/// lists one: `{name, path, role, rung, gate}`, or `{path, error}` for a
/// package that does not read.
pub fn list(root: &Path) -> Vec<(PathBuf, Value)> {
    discover(root)
        .into_iter()
        .map(|dir| {
            let row = match crate::loop_run::read_package(&dir) {
                Ok(p) => json!({"name": p.manifest.name, "path": absolute(&dir), "role": p.manifest.role,
                                "rung": format!("{:?}", p.manifest.rung), "gate": p.manifest.gate.kind}),
                Err(e) => json!({"path": absolute(&dir), "error": e.to_string()}),
            };
            (dir, row)
        })
        .collect()
}

/// Whether the package at `dir` reads and lints (a `kind: plugin` gate is
/// also prepared: found, trusted, taking its config): None when it does,
/// else why not (as `bl lint` says it).
pub fn lint(dir: &Path) -> Option<String> {
    if !dir.is_dir() {
        return Some(format!("'{}' is not a directory", absolute(dir).display()));
    }
    crate::loop_run::read_package(dir)
        .and_then(|package| crate::loop_run::check_plugin_gates(&package))
        .err()
        .map(|e| {
            e.message()
                .trim_start_matches("bl run: manifest error — ")
                .trim_start_matches("bl run: ")
                .to_string()
        })
}

/// What `bl show` flags about a loop, as bounded-loops flags it: who takes
/// the turns (a keyless stub or callable, or a local command), what the
/// gate runs (a local command, an external scanner), the approval rung, and
/// whether production bounds are shipped beside the demo ones.
fn risk(p: &crate::loop_run::Package, production: bool) -> Vec<&'static str> {
    let m = &p.manifest;
    let mut flags = Vec::new();
    match m.runner.default.as_str() {
        "stub" | "python_callable" => flags.push("keyless-runner"),
        "shell" => flags.push("local-runner-command"),
        _ => {}
    }
    match m.gate.kind.as_str() {
        "command" => flags.push("local-gate-command"),
        // bounded-loops flags these two scanners only.
        "osv" | "checkov" => flags.push("external-scanner"),
        _ => {}
    }
    if p.bounds.require_approval {
        flags.push("approval-required");
    } else if !matches!(m.rung, bl_loops::manifest::Rung::L1) {
        flags.push("demo-approval-bypass");
    }
    if production {
        flags.push("production-bounds-available");
    }
    flags
}

/// A loop package as `bl show --json` (and bounded-loops) shows it: its
/// runner, gate, bounds, content hash and risk flags.
pub fn show(dir: &Path) -> Result<Value, AppError> {
    let p = crate::loop_run::read_package(dir)?;
    let (m, b) = (&p.manifest, &p.bounds);
    let digest = bl_packages::digest(dir).map_err(|e| AppError::refused(e.to_string()))?;
    let production = dir.join("bounds.production.yaml");
    let production = production.is_file().then(|| absolute(&production));
    let risk = risk(&p, production.is_some());
    Ok(json!({
        "name": m.name, "path": absolute(dir), "role": m.role, "pattern": m.pattern,
        "rung": format!("{:?}", m.rung),
        "runner": {"kind": m.runner.default, "cassette": m.runner.cassette.clone().unwrap_or_else(|| "cassettes/default.json".into()),
                   "agent_cmd": m.runner.agent_cmd, "env_passthrough": m.runner.env_passthrough},
        "gate": {"kind": m.gate.kind, "run": m.gate.run, "schema": m.gate.schema.clone().or(b.schema.clone())},
        "bounds": {"max_iterations": b.max_iterations, "no_progress_window": b.no_progress_window, "max_tokens": b.max_tokens,
                   "max_wallclock_s": b.max_wallclock_s, "handoff_reserve_s": b.handoff_reserve_s, "sandbox": b.sandbox,
                   "quarantine_inputs": b.quarantine_inputs, "schema": b.schema, "trace": b.trace, "require_approval": b.require_approval},
        "approval_required": b.require_approval,
        "production_bounds": production,
        "content_hash": digest,
        "risk": risk,
    }))
}
