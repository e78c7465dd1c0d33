//! The artifact graph at run time (seed 002), through the real binary: the
//! keyless demo end to end; outputs published with their digests and
//! handed to consumers only after a re-check (a flipped byte stops the
//! run); artifact-based completion (fresh, non-empty, well-formed), the
//! completion contracts and gate plugins, each plugin's digest recorded and
//! checked by `bl verify`; system_only outputs that never reach an agent;
//! and every node kind: loop, router, subgraph, command tool, https and
//! recorded connectors.

use bl_store::RunDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bl_e2e::{bl_binary, repo_root};
use serde_json::{Value, json};

/// A graph case in a temporary directory: its manifest, connections,
/// recorded replies and prompts, and the runs made from them.
pub(crate) struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    pub(crate) fn new() -> Case {
        let dir = tempfile::tempdir().unwrap();
        // The caged user (nobody) must be able to reach attempt workspaces.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        Case { dir }
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub(crate) fn write(&self, name: &str, value: &Value) {
        let path = self.path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, serde_json::to_string_pretty(value).unwrap()).unwrap();
    }

    /// Reads the JSON file `name`, changes it, writes it back.
    fn patch(&self, name: &str, change: impl FnOnce(&mut Value)) {
        let mut v: Value =
            serde_json::from_str(&std::fs::read_to_string(self.path(name)).unwrap()).unwrap();
        change(&mut v);
        self.write(name, &v);
    }

    pub(crate) fn bl(&self, args: &[&str]) -> Output {
        Command::new(bl_binary())
            .args(args)
            .current_dir(self.dir.path())
            .env("BL_PLUGIN_PATH", bl_e2e::plugin_dir())
            .output()
            .unwrap()
    }

    /// `graph run --execute graph.json` with the case's files, into `out`.
    pub(crate) fn run(&self, out: &str, extra: &[&str]) -> Output {
        self.bl(&Case::run_args(out, extra))
    }

    /// The arguments of [`Case::run`], for a `bl` run another way.
    pub(crate) fn run_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "graph",
            "run",
            "--execute",
            "graph.json",
            "--connections",
            "connections.json",
            "--inputs",
            "inputs.json",
            "--recorded",
            "replies.json",
            "--out",
            out,
        ];
        args.extend(extra);
        args
    }

    pub(crate) fn events(&self, out: &str) -> Vec<Value> {
        bl_e2e::log_text(&self.path(out).join(RunDir::EVENTS))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The payload of `node`'s last event of `kind`.
    pub(crate) fn event(&self, out: &str, node: &str, kind: &str) -> Option<Value> {
        self.events(out)
            .into_iter()
            .rev()
            .find(|e| e["event_type"] == kind && e["payload"]["node_id"] == node)
            .map(|e| e["payload"].clone())
    }

    /// Each node's final state, from `bl graph status --json`.
    pub(crate) fn states(&self, out: &str) -> Value {
        let status = self.bl(&["--json", "graph", "status", "--run", out]);
        let v: Value = serde_json::from_slice(&status.stdout).unwrap();
        let mut states = serde_json::Map::new();
        for n in v["nodes"].as_array().unwrap() {
            states.insert(n["node_id"].as_str().unwrap().into(), n["state"].clone());
        }
        Value::Object(states)
    }

    fn verify(&self, out: &str) -> (i32, Value) {
        let v = self.bl(&["--json", "verify", out]);
        (
            v.status.code().unwrap(),
            serde_json::from_slice(&v.stdout).unwrap_or(Value::Null),
        )
    }
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A node with the given kind and fields, in the workspace_only tier.
pub(crate) fn node(id: &str, kind: &str, fields: Value) -> Value {
    let mut n = json!({
        "id": id, "kind": kind, "inputs": {}, "outputs": {},
        "budget": {"max_attempts": 1, "max_wallclock_s": 120},
        "effects": ["workspace_write"], "isolation": "workspace_only",
    });
    for (k, v) in fields.as_object().unwrap() {
        n[k] = v.clone();
    }
    n
}

/// An approval node a reviewer decides, with `fields` besides.
fn approval_node(id: &str, fields: Value) -> Value {
    let mut n = node(id, "approval", fields);
    n["required_role"] = json!("reviewer");
    n["effects"] = json!(["read_only"]);
    n
}

/// A connector node on its own slot (named after it), publishing `outputs`.
pub(crate) fn agent(id: &str, fields: Value) -> Value {
    let mut n = node(id, "research_claim", fields);
    n["connection_slot"] = json!(format!("slot-{id}"));
    n
}

fn edge(from: &str, from_port: &str, to: &str, to_port: &str) -> Value {
    json!({"from_node": from, "from_port": from_port, "to_node": to, "to_port": to_port})
}

/// A graph using the artifact-ports extension, with a slot (and a recorded
/// connection) for every connector node.
pub(crate) fn graph(case: &Case, nodes: Vec<Value>, edges: Vec<Value>, fail_mode: &str) {
    let slots = bl_e2e::slots_of(&nodes);
    let connections: Vec<Value> = slots
        .iter()
        .map(|s| {
            bl_e2e::connection(
                s["id"].as_str().unwrap(),
                json!({"connector_id": "recorded", "provider_id": "recorded", "model_target": "recorded",
                       "allowed_effects": ["read_only", "workspace_write", "external_write"],
                       "isolation": "container_restricted"}),
            )
        })
        .collect();
    let mut policies = json!({"data_class": "internal", "fail_mode": fail_mode});
    if fail_mode == "continue_declared" {
        policies["repair_budget"] = json!(0);
    }
    case.write(
        "graph.json",
        &json!({
            "api_version": "bounded-loops.dev/graph/v1", "graph_id": "artifact-case",
            "version": "1.0.0", "extensions": ["artifact-ports"],
            "nodes": nodes, "edges": edges, "connection_slots": slots, "policies": policies,
        }),
    );
    case.write("connections.json", &Value::Array(connections));
    let prompts: serde_json::Map<String, Value> = case_nodes(case)
        .into_iter()
        .map(|id| (id, json!("do the work")))
        .collect();
    case.write("inputs.json", &Value::Object(prompts));
}

fn case_nodes(case: &Case) -> Vec<String> {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(case.path("graph.json")).unwrap()).unwrap();
    g["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

/// One recorded reply: (node, reply, the files it writes as (path, content)).
pub(crate) type Reply<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

pub(crate) fn replies(case: &Case, entries: &[Reply]) {
    let list: Vec<Value> = entries
        .iter()
        .map(|(node, reply, files)| {
            json!({
                "node_id": node, "attempt": "*", "reply": reply,
                "usage": {"input_tokens": 10, "output_tokens": 5},
                "files": files.iter().map(|(p, c)| json!({"path": p, "content": c})).collect::<Vec<_>>(),
            })
        })
        .collect();
    case.write(
        "replies.json",
        &json!({"api_version": "bl.dev/recorded-replies/v1", "replies": list}),
    );
}

fn output(path: &str, kind: &str) -> Value {
    json!({"type": kind, "path": path})
}

/// Every file under `dir`, as (relative path, bytes).
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

/// The attempt workspaces of `node` under a run.
fn workspaces(run: &Path, node: &str) -> Vec<PathBuf> {
    let root = run.join("work/graph-run");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .strip_prefix(&format!("{node}-"))
                .is_some_and(|rest| rest.len() == 32)
        })
        .collect()
}

/// Runs the case into `out` and checks that it was refused (exit 2) with
/// `needle` in what bl said, before anything ran.
fn refused_before_running(case: &Case, out: &str, extra: &[&str], needle: &str) {
    let run = case.run(out, extra);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    assert!(text(&run).contains(needle), "{}", text(&run));
    assert!(
        !case.path(out).join(RunDir::EVENTS).exists(),
        "something ran"
    );
}

fn demo_run(case: &Case, out: &str) -> Output {
    let run = demo_command(case, out);
    if run.status.code() != Some(0) {
        let failures: Vec<Value> = case
            .events(out)
            .into_iter()
            .filter(|e| {
                e["event_type"] == "node.attempt.failed" || e["event_type"] == "node.failed"
            })
            .map(|e| e["payload"].clone())
            .collect();
        panic!("the demo failed: {}\n{failures:?}", text(&run));
    }
    run
}

fn demo_command(case: &Case, out: &str) -> Output {
    let demo = repo_root().join("examples/graphs/panel-demo");
    let arg = |name: &str| demo.join(name).display().to_string();
    Command::new(bl_binary())
        .args(["graph", "run", "--execute"])
        .arg(arg("graph.yaml"))
        .args(["--connections", &arg("connections.json")])
        .args(["--inputs", &arg("inputs.json")])
        .args(["--recorded", &arg("replies.json")])
        .args(["--decisions", &arg("decisions.json")])
        .args(["--out", out])
        .current_dir(case.dir.path())
        .output()
        .unwrap()
}

/// The README's first command runs this graph: it must succeed keyless,
/// publish the plan to the outbox once, verify, keep the label map away
/// from every agent, and publish byte-identical panels on a re-run.
#[test]
fn the_keyless_demo_runs_end_to_end_and_verifies() {
    let case = Case::new();
    let run = demo_run(&case, "one");
    let failures: Vec<Value> = case
        .events("one")
        .into_iter()
        .filter(|e| e["event_type"] == "node.attempt.failed" || e["event_type"] == "node.failed")
        .map(|e| e["payload"].clone())
        .collect();
    assert_eq!(run.status.code(), Some(0), "{}\n{failures:?}", text(&run));
    let states = case.states("one");
    for (node, state) in states.as_object().unwrap() {
        assert_eq!(state, "SUCCEEDED", "{node}: {states}");
    }
    let (code, report) = case.verify("one");
    assert_eq!(code, 0, "{report}");
    let handoff = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "handoff")
        .unwrap()
        .clone();
    assert!(
        handoff["detail"]
            .as_str()
            .unwrap()
            .starts_with("4 plugin component(s), 6 published output(s)"),
        "{handoff}"
    );
    // The plan reached the outbox, exactly as the synthesizer published it.
    let plan = std::fs::read(case.path("one/workspace/plan.json")).unwrap();
    let outbox = files_under(&case.path("one/outbox/publish-plan"));
    assert!(outbox.iter().any(|(_, b)| *b == plan), "{outbox:?}");
    let effects = std::fs::read_to_string(case.path("one/published-effects.json")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&effects)
            .unwrap()
            .as_object()
            .unwrap()
            .len(),
        1
    );
    // The approval was the recorded reviewer's, bound to the plan.
    let approvals = std::fs::read_to_string(case.path("one/approvals.json")).unwrap();
    assert!(
        approvals.contains("\"decided_by_source\":\"recorded\"")
            || approvals.contains("\"decided_by_source\": \"recorded\""),
        "{approvals}"
    );
    // The label map is system_only: published for operators, in no agent's workspace.
    let map =
        std::fs::read(case.path("one/workspace/system/anonymize-panel/label-map.json")).unwrap();
    let run_dir = case.path("one");
    for agent in [
        "lens-security",
        "lens-performance",
        "lens-maintainability",
        "synthesizer",
    ] {
        let dirs = workspaces(&run_dir, agent);
        assert_eq!(dirs.len(), 1, "{agent}");
        for (rel, bytes) in files_under(&dirs[0]) {
            assert!(
                !rel.contains("label-map") && bytes != map,
                "{agent} was handed {rel}"
            );
        }
    }
    // The synthesizer saw only the panel, staged read-only with its digest.
    let staged = &workspaces(&run_dir, "synthesizer")[0];
    let panel = staged.join("workspace/inputs/synthesizer/panel/panel-responses.md");
    assert_eq!(
        std::fs::read(&panel).unwrap(),
        std::fs::read(case.path("one/workspace/panel-responses.md")).unwrap()
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&panel).unwrap().permissions().mode() & 0o222,
        0
    );
    // A re-run of the same inputs publishes the same panel and label map.
    let again = demo_run(&case, "two");
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    for file in [
        "workspace/panel-responses.md",
        "workspace/system/anonymize-panel/label-map.json",
    ] {
        assert_eq!(
            std::fs::read(case.path("one").join(file)).unwrap(),
            std::fs::read(case.path("two").join(file)).unwrap(),
            "{file} differs between runs"
        );
    }
    // Every plugin's component digest is in the node's events.
    let transform = case
        .event("one", "anonymize-panel", "node.succeeded")
        .unwrap();
    assert_eq!(transform["plugins"][0]["plugin"], "panel-anonymize");
    assert_eq!(transform["plugins"][0]["role"], "transform");
    let synth = case.event("one", "synthesizer", "node.succeeded").unwrap();
    let roles: Vec<&str> = synth["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["contract", "gate"]);
    let publish = case.event("one", "publish-plan", "node.succeeded").unwrap();
    assert_eq!(publish["plugins"][0]["plugin"], "outbox-policy");
}

/// A producer's published file changed while the run was paused: the
/// consumer is never started, the run stops with an integrity error, and
/// `bl verify` names the file.
#[test]
fn a_consumer_never_sees_a_tampered_input() {
    let case = Case::new();
    graph(
        &case,
        vec![
            agent(
                "writer",
                json!({"outputs": {"notes": output("workspace/notes.md", "markdown")}}),
            ),
            approval_node("hold", json!({})),
            agent("reader", json!({"inputs": {"notes": {"type": "markdown"}}})),
        ],
        vec![
            edge("writer", "notes", "reader", "notes"),
            json!({"from_node": "writer", "from_port": "notes", "to_node": "hold", "to_port": "notes"}),
            json!({"from_node": "hold", "from_port": "go", "to_node": "reader", "to_port": "go"}),
        ],
        "fail_closed",
    );
    // The approval node's short-form ports carry the ordering only.
    case.patch("graph.json", |g| {
        g["nodes"][1]["inputs"] = json!({"notes": "markdown"});
        g["nodes"][1]["outputs"] = json!({"go": "text"});
        g["nodes"][2]["inputs"]["go"] = json!("text");
    });
    replies(
        &case,
        &[
            (
                "writer",
                "wrote notes",
                &[("workspace/notes.md", "# notes\nthe original\n")],
            ),
            ("reader", "read them", &[]),
        ],
    );
    let run = case.run("r", &[]);
    assert_eq!(
        run.status.code(),
        Some(3),
        "paused for the approval: {}",
        text(&run)
    );
    let published = case.path("r/workspace/notes.md");
    let mut bytes = std::fs::read(&published).unwrap();
    bytes[3] ^= 0x20;
    std::fs::write(&published, &bytes).unwrap();
    let approve = case.bl(&[
        "graph",
        "approve",
        "--run",
        "r",
        "--node",
        "hold",
        "--decision",
        "approved",
        "--recorded",
        "replies.json",
        "--inputs",
        "inputs.json",
    ]);
    assert_eq!(approve.status.code(), Some(2), "{}", text(&approve));
    let failed = case.event("r", "reader", "node.failed").unwrap();
    assert_eq!(failed["cause"], "artifact_unverified", "{failed}");
    let reason = failed["reason"].as_str().unwrap();
    assert!(
        reason.contains("workspace/notes.md") && reason.contains("changed after it was published"),
        "{reason}"
    );
    assert!(
        case.event("r", "reader", "node.spend").is_none(),
        "the reader never ran"
    );
    assert_eq!(case.states("r")["reader"], "FAILED");
    let (code, report) = case.verify("r");
    assert_eq!(code, 1, "{report}");
    assert!(
        report
            .to_string()
            .contains("workspace/notes.md (published by writer"),
        "{report}"
    );
}

/// Completion is decided from the declared outputs: missing, empty,
/// stale and malformed outputs are rejected whatever the worker said, and
/// a command tool's output counts like an agent's.
#[test]
fn outputs_must_be_fresh_non_empty_and_well_formed() {
    let case = Case::new();
    let json_out =
        |id: &str| json!({"outputs": {"data": output(&format!("workspace/{id}.json"), "json")}});
    graph(
        &case,
        vec![
            agent("missing", json_out("missing")),
            agent("empty", json_out("empty")),
            agent("malformed", json_out("malformed")),
            node(
                "stale",
                "tool",
                json!({
                    "tool_ref": "command:sh -c 'mkdir -p workspace && echo {} > workspace/stale.json && touch -d 2001-01-01 workspace/stale.json'",
                    "outputs": {"data": output("workspace/stale.json", "json")},
                }),
            ),
            node(
                "fresh",
                "tool",
                json!({
                    "tool_ref": "command:sh -c 'mkdir -p workspace && echo \"{\\\"ok\\\": true}\" > workspace/fresh.json'",
                    "outputs": {"data": output("workspace/fresh.json", "json")},
                }),
            ),
        ],
        vec![],
        "continue_declared",
    );
    replies(
        &case,
        &[
            ("missing", "done, I promise", &[]),
            ("empty", "done", &[("workspace/empty.json", "")]),
            (
                "malformed",
                "done",
                &[("workspace/malformed.json", "{not json")],
            ),
        ],
    );
    let run = case.run("r", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    assert!(
        case.path("r/controller-events.jsonl").is_file(),
        "{}",
        text(&run)
    );
    let reason = |node: &str| {
        let f = case
            .event("r", node, "node.failed")
            .unwrap_or_else(|| panic!("{node} did not fail"));
        assert_eq!(f["cause"], "gate_rejected", "{node}: {f}");
        f["verdict"]["reason"].as_str().unwrap().to_string()
    };
    assert!(
        reason("missing")
            .contains("workspace/missing.json: declared output 'data' was not written")
    );
    assert!(reason("empty").contains("workspace/empty.json: is empty"));
    assert!(reason("malformed").contains("is not valid JSON"));
    assert!(reason("stale").contains("is stale"));
    let fresh = case.event("r", "fresh", "node.succeeded").unwrap();
    assert_eq!(fresh["outputs"][0]["path"], "workspace/fresh.json");
    assert_eq!(
        std::fs::read_to_string(case.path("r/workspace/fresh.json")).unwrap(),
        "{\"ok\": true}\n"
    );
}

/// A completion contract that breaks stops the run even under
/// continue_declared; a gate plugin that rejects is a failed verdict, one
/// that cannot decide is an error, and the gate's grants come from the
/// manifest or the operator.
#[test]
fn contracts_and_gate_plugins_decide_and_a_broken_gate_is_an_error() {
    let case = Case::new();
    graph(
        &case,
        vec![
            agent(
                "planner",
                json!({"outputs": {"plan": output("workspace/plan.json", "json")}}),
            ),
            agent("then", json!({})),
        ],
        vec![],
        "continue_declared",
    );
    replies(
        &case,
        &[
            (
                "planner",
                "planned",
                &[("workspace/plan.json", "{\"steps\": []}")],
            ),
            ("then", "fine", &[]),
        ],
    );
    let run = case.run("contract", &["--concurrency", "1"]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let failed = case.event("contract", "planner", "node.failed").unwrap();
    assert_eq!(failed["cause"], "worker_contract", "{failed}");
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .starts_with("workspace/plan.json: plan.json contract:"),
        "{failed}"
    );
    assert!(
        case.event("contract", "then", "node.running").is_none(),
        "the run stopped at the contract break"
    );
    assert_eq!(failed["plugins"][0]["plugin"], "contracts");

    // Gate plugins: the files gate rejects, a bad config is an error.
    let gated =
        |id: &str, config: Value| agent(id, json!({"gate": {"plugin": "files", "config": config}}));
    graph(
        &case,
        vec![
            gated("rejected", json!({"required": ["workspace/report.md"]})),
            gated("passed", json!({"required": ["workspace/report.md"]})),
        ],
        vec![],
        "continue_declared",
    );
    replies(
        &case,
        &[
            ("rejected", "wrote it", &[]),
            (
                "passed",
                "wrote it",
                &[("workspace/report.md", "# report\n")],
            ),
        ],
    );
    let run = case.run("gates", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let rejected = case.event("gates", "rejected", "node.failed").unwrap();
    assert_eq!(rejected["cause"], "gate_rejected", "{rejected}");
    assert!(
        rejected["verdict"]["reason"]
            .as_str()
            .unwrap()
            .contains("gate plugin 'files' rejected"),
        "{rejected}"
    );
    let passed = case.event("gates", "passed", "node.succeeded").unwrap();
    assert_eq!(passed["plugins"][0]["role"], "gate");

    graph(
        &case,
        vec![gated("broken", json!({"no_such_key": 1}))],
        vec![],
        "continue_declared",
    );
    replies(&case, &[("broken", "wrote it", &[])]);
    let run = case.run("broken", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let broken = case.event("broken", "broken", "node.failed").unwrap();
    assert_eq!(broken["cause"], "gate_broken", "{broken}");
    assert!(
        broken.get("verdict").is_none(),
        "an error is no verdict: {broken}"
    );

    // The command gate needs the command capability: without a grant it
    // cannot load; the operator's --grant (or the manifest's grants) lets it.
    let command_gate = |grants: Value| {
        let mut g =
            json!({"plugin": "command", "config": {"argv": ["test", "-s", "workspace/out.txt"]}});
        if !grants.is_null() {
            g["grants"] = grants;
        }
        agent("checked", json!({"gate": g}))
    };
    replies(
        &case,
        &[("checked", "done", &[("workspace/out.txt", "content\n")])],
    );
    graph(
        &case,
        vec![command_gate(Value::Null)],
        vec![],
        "fail_closed",
    );
    let run = case.run("ungranted", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let ungranted = case.event("ungranted", "checked", "node.failed").unwrap();
    assert_eq!(ungranted["cause"], "gate_broken", "{ungranted}");
    assert!(
        ungranted["reason"].as_str().unwrap().contains("command"),
        "{ungranted}"
    );
    // The plugin that could not load is still on the record, by digest.
    assert_eq!(ungranted["plugins"][0]["plugin"], "command", "{ungranted}");
    let run = case.run("operator", &["--grant", "checked=command"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    graph(
        &case,
        vec![command_gate(json!(["command"]))],
        vec![],
        "fail_closed",
    );
    let run = case.run("manifest", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
}

/// A gate config that breaks the schema its plugin's manifest declares is
/// refused before anything runs (no paid turn first), naming each place in
/// the manifest that is wrong; the same gate with a config it takes runs.
#[test]
fn a_gate_config_its_plugin_would_refuse_is_refused_before_the_run() {
    let case = Case::new();
    let gated = |config: Value| {
        crate::plugin_registry::gated_graph(
            &case,
            json!({"plugin": "jsonschema", "config": config}),
            "{\"title\": \"done\"}",
        )
    };
    gated(json!({"schema": {"type": "object"}, "files": "workspace/report.md", "file": "x"}));
    refused_before_running(
        &case,
        "refused",
        &[],
        "node 'writer': the config is not one plugin 'jsonschema' takes",
    );
    let said = text(&case.run("refused-again", &[]));
    // Each place as file:line:col and its JSON pointer.
    let place = place_before(&said, "/nodes/0/gate/config/files: ");
    assert!(place.starts_with("graph.json:"), "{said}");
    for needle in [
        "/nodes/0/gate/config: Additional properties",
        "bl plugin inspect jsonschema --json",
    ] {
        assert!(said.contains(needle), "{said}");
    }

    gated(json!({"schema": {"type": "object"}, "files": ["workspace/report.md"]}));
    let run = case.run("taken", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let done = case.event("taken", "writer", "node.succeeded").unwrap();
    assert_eq!(done["plugins"][0]["plugin"], "jsonschema", "{done}");
}

/// The `file:line:col` said just before `pointer` (after the last "at ").
fn place_before(said: &str, pointer: &str) -> String {
    let end = said
        .find(pointer)
        .unwrap_or_else(|| panic!("{pointer} in {said}"));
    let start = said[..end].rfind("at ").map_or(0, |i| i + 3);
    said[start..end].trim_end_matches(": ").to_string()
}

/// `bl verify` checks the plugin components the log names: a changed
/// component in the run's store is found.
#[test]
fn verify_checks_the_recorded_plugin_digests() {
    let case = Case::new();
    graph(
        &case,
        vec![agent(
            "gated",
            json!({"gate": {"plugin": "files", "config": {"required": ["a.txt"]}}}),
        )],
        vec![],
        "fail_closed",
    );
    replies(&case, &[("gated", "ok", &[("a.txt", "a\n")])]);
    let run = case.run("r", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let digest =
        case.event("r", "gated", "node.succeeded").unwrap()["plugins"][0]["component_digest"]
            .as_str()
            .unwrap()
            .to_string();
    let object = case
        .path("r/artifacts/objects")
        .join(digest.trim_start_matches("sha256:"));
    let files = bl_e2e::component_bytes(&bl_e2e::plugin_dir(), "files");
    assert_eq!(
        std::fs::read(&object).unwrap(),
        files,
        "the component is kept with the run"
    );
    assert_eq!(case.verify("r").0, 0);
    std::fs::remove_file(&object).unwrap();
    let (code, report) = case.verify("r");
    assert_eq!(code, 1, "{report}");
    assert!(
        report
            .to_string()
            .contains(&format!("{digest} is named in the log but not kept")),
        "{report}"
    );
}

/// A loop node runs its package (found by digest under --loop-roots)
/// through the loop engine and is decided by the receipt gate over its
/// loop-outcome.json, as bounded-loops decides it.
#[test]
fn loop_nodes_run_their_package_and_the_receipt_gate_reads_the_outcome() {
    let case = Case::new();
    let roots = case.path("roots");
    bl_e2e::copy_tree(
        &repo_root().join("examples/loops/readme-sections"),
        &roots.join("readme-sections"),
    );
    // A second copy that cannot converge in one lap.
    bl_e2e::copy_tree(
        &repo_root().join("examples/loops/readme-sections"),
        &roots.join("short"),
    );
    let bounds = roots.join("short/bounds.yaml");
    let text_b = std::fs::read_to_string(&bounds).unwrap();
    let capped: String = text_b
        .lines()
        .map(|l| {
            if l.starts_with("max_iterations:") {
                "max_iterations: 1".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&bounds, capped + "\n").unwrap();
    let digest = |dir: &str| {
        let out = case.bl(&["graph", "digest", &format!("roots/{dir}")]);
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (done, short) = (digest("readme-sections"), digest("short"));
    assert_ne!(done, short);
    let loop_node = |id: &str, package: &str| {
        node(
            id,
            "loop",
            json!({"loop_package": package, "isolation": "process_restricted"}),
        )
    };
    graph(
        &case,
        vec![loop_node("converge", &done), loop_node("halt", &short)],
        vec![],
        "continue_declared",
    );
    replies(&case, &[]);
    let run = case.run("r", &["--loop-roots", "roots"]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let ok = case.event("r", "converge", "node.succeeded").unwrap();
    assert_eq!(
        ok["verdict"]["reason"], "loop reached DONE: gate-passed",
        "{ok}"
    );
    assert_eq!(ok["isolation"]["provider_id"], "native");
    // The outcome, as bounded-loops writes it, is the node's artifact.
    let outcome_digest = ok["artifact_digests"][0].as_str().unwrap();
    assert_eq!(ok["verdict"]["evidence_digest"], outcome_digest);
    let stored = std::fs::read(
        case.path("r/artifacts/objects")
            .join(outcome_digest.trim_start_matches("sha256:")),
    )
    .unwrap();
    let outcome: Value = serde_json::from_slice(&stored).unwrap();
    let keys: Vec<&String> = outcome.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "attempt",
            "inner_ledger_digest",
            "inner_run_id",
            "node_id",
            "package_digest",
            "reason",
            "repair_round",
            "status"
        ]
    );
    assert_eq!(outcome["status"], "DONE");
    assert_eq!(
        outcome["package_digest"],
        done.trim_start_matches("sha256:")
    );
    assert!(stored.ends_with(b"}\n"));
    let ws = &workspaces(&case.path("r"), "converge")[0];
    assert_eq!(std::fs::read(ws.join("loop-outcome.json")).unwrap(), stored);
    let inner = outcome["inner_run_id"].as_str().unwrap();
    assert!(inner.starts_with("graph-run.converge.r0.a1."), "{inner}");
    assert!(
        ws.join(".controller/runs")
            .join(inner)
            .join("ledger.jsonl")
            .is_file()
    );
    let failed = case.event("r", "halt", "node.failed").unwrap();
    assert_eq!(failed["cause"], "gate_rejected");
    assert!(
        failed["verdict"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("loop did not converge (HALT):"),
        "{failed}"
    );
    // The packages were never written.
    assert_eq!(digest("readme-sections"), done);
    // A package no root holds is refused before anything runs.
    let missing = case.run("none", &[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing).contains("[package_unavailable] /nodes/converge/loop_package"),
        "{}",
        text(&missing)
    );
    assert!(!case.path("none/controller-events.jsonl").exists());
}

/// `router` (id `triage`) leading to `fix` and `ship`; with `after`, each
/// branch leads on to `after-fix` / `after-ship`.
fn router_graph(case: &Case, router: Value, after: bool) {
    let branch = |id: &str| {
        let mut fields = json!({"inputs": {"in": "text"}});
        if after {
            fields["outputs"] = json!({"out": "text"});
        }
        agent(id, fields)
    };
    let mut nodes = vec![router, branch("fix"), branch("ship")];
    let mut edges = vec![
        edge("triage", "out", "fix", "in"),
        edge("triage", "out", "ship", "in"),
    ];
    if after {
        for b in ["fix", "ship"] {
            nodes.push(agent(
                &format!("after-{b}"),
                json!({"inputs": {"in": "text"}}),
            ));
            edges.push(edge(b, "out", &format!("after-{b}"), "in"));
        }
    }
    graph(case, nodes, edges, "fail_closed");
}

/// A router takes exactly one route: from its worker's reply, from its
/// gate plugin's verdict (`pass`/`fail`), or its default; the edges of the
/// other routes are excluded and what lies beyond them is SKIPPED.
#[test]
fn a_router_takes_one_route_and_what_lies_beyond_the_others_is_skipped() {
    let case = Case::new();
    let routed_graph = |router: Value| router_graph(&case, router, true);
    let routes = json!({"routes": {"fail": ["fix"], "pass": ["ship"]}, "default_route": "fail", "outputs": {"out": "text"}});
    let mut worker_router = agent("triage", routes.clone());
    worker_router["kind"] = json!("router");
    routed_graph(worker_router);
    let all = || -> Vec<Reply> {
        vec![
            ("fix", "fixed", &[]),
            ("ship", "shipped", &[]),
            ("after-fix", "ok", &[]),
            ("after-ship", "ok", &[]),
        ]
    };
    let mut entries = all();
    entries.push(("triage", "pass", &[]));
    replies(&case, &entries);
    let run = case.run("reply", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let states = case.states("reply");
    assert_eq!(
        states,
        json!({"triage": "SUCCEEDED", "fix": "SKIPPED", "ship": "SUCCEEDED", "after-fix": "SKIPPED", "after-ship": "SUCCEEDED"})
    );
    let triage = case.event("reply", "triage", "node.succeeded").unwrap();
    assert_eq!(triage["routed"], "pass");
    let skipped = case.event("reply", "fix", "node.skipped").unwrap();
    assert!(
        skipped["reason"]
            .as_str()
            .unwrap()
            .starts_with("branch not taken"),
        "{skipped}"
    );
    // The arena draws the edges into the skipped nodes as excluded, and
    // only those.
    if crate::browser::available(true) {
        let arena = case.bl(&["graph", "arena", "--run", "reply"]);
        assert!(arena.status.success(), "{}", text(&arena));
        let dom = crate::graph_arena::rendered(&case.path("reply.arena.html"), "");
        let edge = |to: &str| {
            let at = dom
                .find(&format!(r#"data-to="{to}""#))
                .unwrap_or_else(|| panic!("an edge into {to}"));
            let start = dom[..at].rfind('<').unwrap();
            dom[start..at].to_string()
        };
        for (to, out) in [
            ("fix", true),
            ("after-fix", true),
            ("ship", false),
            ("after-ship", false),
        ] {
            assert_eq!(
                edge(to).contains("excluded"),
                out,
                "the edge into {to}: {}",
                edge(to)
            );
        }
    }

    // A reply that names no route takes the default.
    let mut entries = all();
    entries.push(("triage", "I am not sure", &[]));
    replies(&case, &entries);
    let run = case.run("default", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(case.states("default")["fix"], "SUCCEEDED");
    assert_eq!(case.states("default")["ship"], "SKIPPED");

    // No connection: the gate plugin's verdict picks (here it fails: fail route).
    let mut gate_router = node("triage", "router", routes.clone());
    gate_router["gate"] = json!({"plugin": "files", "config": {"required": ["verdict.txt"]}});
    routed_graph(gate_router);
    replies(&case, &all());
    let run = case.run("gate", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(case.states("gate")["fix"], "SUCCEEDED");
    assert_eq!(case.states("gate")["after-ship"], "SKIPPED");
    let triage = case.event("gate", "triage", "node.succeeded").unwrap();
    assert_eq!(triage["routed"], "fail");
    assert_eq!(triage["plugins"][0]["plugin"], "files");

    // A route that leads to a node the router has no edge to is refused.
    let mut bad = agent(
        "triage",
        json!({"routes": {"fail": ["after-ship"], "pass": ["ship"]}, "default_route": "pass", "outputs": {"out": "text"}}),
    );
    bad["kind"] = json!("router");
    routed_graph(bad);
    refused_before_running(
        &case,
        "bad",
        &[],
        "/nodes/0/routes/fail — route 'fail' leads to 'after-ship', but no edge goes from 'triage' to 'after-ship'",
    );
}

/// A subgraph node runs a graph package (by digest) as a child run; the
/// child's log is verified and its head recorded in the parent; `bl
/// verify` of the parent finds a child log changed afterwards.
/// A graph whose node `inner` runs a one-node graph package as a child
/// run, and a node `after` that takes its output.
fn subgraph_graph(case: &Case) {
    subgraph_graph_with(case, Vec::new(), Vec::new());
}

/// [`subgraph_graph`], with more nodes (and edges) in the child graph
/// after its node `make`.
fn subgraph_graph_with(case: &Case, more: Vec<Value>, edges: Vec<Value>) {
    let mut nodes = vec![node(
        "make",
        "tool",
        json!({
            "tool_ref": "command:sh -c 'mkdir -p workspace && echo made > workspace/made.txt'",
            "outputs": {"made": output("workspace/made.txt", "text")},
        }),
    )];
    nodes.extend(more);
    let digest = graph_package(case, "child", nodes, edges);
    graph(
        case,
        vec![
            node("inner", "subgraph", json!({"graph_package": digest})),
            agent("after", json!({})),
        ],
        vec![
            json!({"from_node": "inner", "from_port": "done", "to_node": "after", "to_port": "done"}),
        ],
        "fail_closed",
    );
    case.patch("graph.json", |g| {
        g["nodes"][0]["outputs"] = json!({"done": "text"});
        g["nodes"][1]["inputs"] = json!({"done": "text"});
    });
    replies(case, &[("after", "ok", &[])]);
}

#[test]
fn a_subgraph_runs_as_a_verified_child_run() {
    let case = Case::new();
    subgraph_graph(&case);
    let run = case.run("r", &["--loop-roots", "roots"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let ok = case.event("r", "inner", "node.succeeded").unwrap();
    assert_eq!(ok["child_run"]["path"], "subgraphs/inner");
    assert_eq!(ok["child_run"]["run_state"], "SUCCEEDED");
    assert!(
        ok["verdict"]["reason"]
            .as_str()
            .unwrap()
            .contains("subgraph child run subgraphs/inner SUCCEEDED"),
        "{ok}"
    );
    assert_eq!(case.verify("r/subgraphs/inner").0, 0);
    let (code, report) = case.verify("r");
    assert_eq!(code, 0, "{report}");
    assert!(report.to_string().contains("1 child run(s)"), "{report}");
    // Change the child's log after the fact: the parent no longer verifies.
    let log = case.path("r/subgraphs/inner/controller-events.jsonl");
    let text_log = std::fs::read_to_string(&log).unwrap();
    let shorter: Vec<&str> = text_log.lines().collect();
    std::fs::write(&log, shorter[..shorter.len() - 1].join("\n") + "\n").unwrap();
    let (code, report) = case.verify("r");
    assert_eq!(code, 1, "{report}");
    assert!(
        report
            .to_string()
            .contains("not at the head the parent recorded"),
        "{report}"
    );
}

/// A graph package `roots/<name>` of these nodes; its digest.
fn graph_package(case: &Case, name: &str, nodes: Vec<Value>, edges: Vec<Value>) -> String {
    let package = case.path(&format!("roots/{name}"));
    std::fs::create_dir_all(&package).unwrap();
    let manifest = json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": name, "version": "1.0.0",
        "extensions": ["artifact-ports"], "nodes": nodes, "edges": edges, "connection_slots": [],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"},
    });
    let text_of = serde_json::to_string_pretty(&manifest).unwrap();
    std::fs::write(package.join("graph.yaml"), text_of).unwrap();
    let out = case.bl(&["graph", "digest", &format!("roots/{name}")]);
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The drive flags of `bl graph approve` and `resume` for a subgraph case.
const SUBGRAPH_DRIVE: [&str; 6] = [
    "--loop-roots",
    "roots",
    "--inputs",
    "inputs.json",
    "--recorded",
    "replies.json",
];

/// Runs the case's graph into `r`, which pauses (exit 3) naming `path`
/// as the approval node to decide.
fn run_to_pause_at(case: &Case, path: &str) {
    let run = case.run("r", &["--loop-roots", "roots"]);
    assert_eq!(run.status.code(), Some(3), "paused: {}", text(&run));
    let next = format!("bl graph approve --run r --node {path} ");
    assert!(text(&run).contains(&next), "{}", text(&run));
}

/// An approval node two subgraphs down is awaited and decided by its
/// path through both (`inner/deeper/hold`), and the three runs go on.
#[test]
fn an_approval_two_subgraphs_down_is_decided_by_its_whole_path() {
    let case = Case::new();
    let hold = approval_node("hold", json!({}));
    let grand = graph_package(&case, "grand", vec![hold], Vec::new());
    subgraph_graph_with(
        &case,
        vec![node("deeper", "subgraph", json!({"graph_package": grand}))],
        Vec::new(),
    );
    run_to_pause_at(&case, "inner/deeper/hold");
    let mut args = vec![
        "graph",
        "approve",
        "--run",
        "r",
        "--node",
        "inner/deeper/hold",
    ];
    args.extend(["--decision", "approved"]);
    args.extend(SUBGRAPH_DRIVE);
    let approved = case.bl(&args);
    assert_eq!(approved.status.code(), Some(0), "{}", text(&approved));
    let record =
        std::fs::read_to_string(case.path("r/subgraphs/inner/subgraphs/deeper/approvals.json"));
    assert!(record.unwrap().contains("\"hold\""));
    assert_eq!(case.states("r")["after"], "SUCCEEDED");
    assert_eq!(case.verify("r").0, 0);
}

/// A run `r` whose subgraph node `inner` (room for two attempts) waits on
/// approval node `hold` of its child run, after the child's `make`.
pub(crate) fn subgraph_paused_at_approval() -> Case {
    let case = Case::new();
    let hold = approval_node(
        "hold",
        json!({"inputs": {"made": "text"}, "outputs": {"approved": "text"}}),
    );
    let edge =
        json!({"from_node": "make", "from_port": "made", "to_node": "hold", "to_port": "made"});
    subgraph_graph_with(&case, vec![hold], vec![edge]);
    // Room for a retry, which a rejection must not take.
    case.patch("graph.json", |g| {
        g["nodes"][0]["budget"]["max_attempts"] = json!(2)
    });
    run_to_pause_at(&case, "inner/hold");
    assert_eq!(case.states("r")["inner"], "AWAITING_APPROVAL");
    assert!(case.event("r", "inner", "node.failed").is_none());
    case
}

/// A subgraph whose child run reaches an approval node pauses the parent
/// (exit 3) instead of failing its node; the parent's answer names the
/// child's node by path, `bl graph approve --node inner/hold` records the
/// decision in the child run and resumes both, and nothing is run twice.
/// A rejection there stops the node and the run, with no retry; a path that names no
/// approval node of a child run is refused with nothing recorded.
#[test]
fn an_approval_inside_a_subgraph_pauses_the_parent_and_is_decided_by_its_path() {
    let made_at = |case: &Case| {
        std::fs::metadata(case.path("r/subgraphs/inner/workspace/made.txt"))
            .and_then(|m| m.modified())
            .unwrap()
    };
    let approve = |case: &Case, decision: &str, extra: &[&str]| {
        let mut args = vec!["--json", "graph", "approve", "--run", "r"];
        args.extend(["--node", "inner/hold", "--decision", decision]);
        args.extend(extra);
        args.extend(SUBGRAPH_DRIVE);
        case.bl(&args)
    };
    let paused = subgraph_paused_at_approval;
    // `hold` approved in the child run itself.
    let approve_inside = |case: &Case| {
        let mut args = vec![
            "graph",
            "approve",
            "--run",
            "r/subgraphs/inner",
            "--node",
            "hold",
        ];
        args.extend(["--decision", "approved"]);
        let inside = case.bl(&args);
        assert_eq!(inside.status.code(), Some(0), "{}", text(&inside));
    };

    let case = paused();
    let made_before = made_at(&case);
    for (path, why) in [
        ("after/hold", "is not a subgraph node"),
        ("inner/nope", "is not in the graph of the child run"),
        (
            "inner/hodl",
            "\n  did you mean 'hold'? its approval nodes: hold",
        ),
        ("inner/make", "is not an approval node of the child run"),
        ("ghost/hold", "'ghost' of 'ghost/hold' is not in the graph"),
    ] {
        let refused = case.bl(&[
            "graph",
            "approve",
            "--run",
            "r",
            "--node",
            path,
            "--decision",
            "approved",
        ]);
        assert_eq!(refused.status.code(), Some(2), "{path}: {}", text(&refused));
        assert!(text(&refused).contains(why), "{path}: {}", text(&refused));
    }
    assert!(!case.path("r/subgraphs/inner/approvals.json").exists());
    // The library lists it by path, bound to what it approves in the child.
    let pending = bl_app::runtime::GraphRuntime::default()
        .pending_approvals(&case.path("r"))
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].node_id, "inner/hold");
    assert!(!pending[0].evidence.is_empty(), "what make produced");
    let stale = case.bl(&[
        "graph",
        "approve",
        "--run",
        "r",
        "--node",
        "inner/hold",
        "--decision",
        "approved",
        "--request-digest",
        &format!("sha256:{}", "0".repeat(64)),
    ]);
    assert!(
        text(&stale).contains("changed since it was shown"),
        "{}",
        text(&stale)
    );
    assert!(!case.path("r/subgraphs/inner/approvals.json").exists());
    let shown = ["--request-digest", pending[0].request_digest.as_str()];
    let approved = approve(&case, "approved", &shown);
    assert_eq!(approved.status.code(), Some(0), "{}", text(&approved));
    let answer: Value = serde_json::from_slice(&approved.stdout).unwrap();
    assert_eq!(answer["node_id"], "inner/hold", "{answer}");
    assert_eq!(answer["run_state"], "SUCCEEDED", "{answer}");
    assert_eq!(case.states("r")["after"], "SUCCEEDED");
    let ok = case.event("r", "inner", "node.succeeded").unwrap();
    assert_eq!(ok["child_run"]["run_state"], "SUCCEEDED", "{ok}");
    // The child went on where it stopped: its first node ran once.
    assert_eq!(
        made_before,
        made_at(&case),
        "the child's first node ran again"
    );
    let make_runs = case
        .events("r/subgraphs/inner")
        .iter()
        .filter(|e| e["event_type"] == "node.running" && e["payload"]["node_id"] == "make")
        .count();
    assert_eq!(make_runs, 1);
    let record = std::fs::read_to_string(case.path("r/subgraphs/inner/approvals.json")).unwrap();
    assert!(record.contains("\"hold\""), "{record}");
    let (code, report) = case.verify("r");
    assert_eq!(code, 0, "{report}");
    // The same decision again changes nothing; the other one is refused.
    let again: Value = serde_json::from_slice(&approve(&case, "approved", &[]).stdout).unwrap();
    assert_eq!(again["idempotent"], true, "{again}");
    let other = approve(&case, "rejected", &[]);
    assert_eq!(other.status.code(), Some(2), "{}", text(&other));
    assert!(
        text(&other).contains("already approved"),
        "{}",
        text(&other)
    );

    // Decided in the child run itself, then the parent resumed: the same.
    let case = paused();
    approve_inside(&case);
    let runtime = bl_app::runtime::GraphRuntime::default();
    assert!(
        runtime
            .pending_approvals(&case.path("r"))
            .unwrap()
            .is_empty()
    );
    let on_record = runtime.decision(&case.path("r"), "inner/hold").unwrap();
    assert!(on_record.is_some_and(|d| d.approved));
    let mut resume = vec!["graph", "resume", "--run", "r"];
    resume.extend(SUBGRAPH_DRIVE);
    let resumed = case.bl(&resume);
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed));
    assert_eq!(case.states("r")["after"], "SUCCEEDED");
    assert_eq!(case.verify("r").0, 0);

    // Decided in the child run, then asked again by path: the decision
    // stands, and the parent still waiting on it is driven on.
    let case = paused();
    approve_inside(&case);
    let again = approve(&case, "approved", &[]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    let again: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["idempotent"], true, "{again}");
    assert_eq!(again["run_state"], "SUCCEEDED", "{again}");

    // A run that failed elsewhere while its child waited has ended: its
    // subgraph node shows the wait it was left in (never RUNNING), in the
    // run's report and its status; nothing is offered to decide, and the
    // child's node is not decided after the fact.
    let case = Case::new();
    let hold = approval_node("hold", json!({}));
    subgraph_graph_with(&case, vec![hold], Vec::new());
    case.patch("graph.json", |g| {
        let boom = node(
            "boom",
            "tool",
            json!({"tool_ref": "command:sh -c 'exit 7'"}),
        );
        g["nodes"].as_array_mut().unwrap().push(boom);
    });
    let run = case.run("r", &["--loop-roots", "roots"]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let report = text(&run);
    assert!(
        report.contains("node 'inner': AWAITING_APPROVAL"),
        "{report}"
    );
    assert!(!report.contains("bl graph approve"), "{report}");
    let states = case.states("r");
    assert_eq!(states["inner"], "AWAITING_APPROVAL", "{states}");
    assert_eq!(states["boom"], "FAILED", "{states}");
    assert_eq!(
        case.states("r/subgraphs/inner")["hold"],
        "AWAITING_APPROVAL"
    );
    let pending = bl_app::runtime::GraphRuntime::default()
        .pending_approvals(&case.path("r"))
        .unwrap();
    assert!(pending.is_empty(), "{pending:?}");
    let late = approve(&case, "approved", &[]);
    assert_eq!(late.status.code(), Some(2), "{}", text(&late));
    assert!(
        text(&late).contains("has ended (FAILED)"),
        "{}",
        text(&late)
    );
    assert!(!case.path("r/subgraphs/inner/approvals.json").exists());
    assert_eq!(case.verify("r").0, 0);

    // Rejected: the child run fails, and its node stops as a rejected
    // approval node of the parent's own would: no retry asks again.
    let case = paused();
    let rejected = approve(&case, "rejected", &[]);
    assert_eq!(rejected.status.code(), Some(2), "{}", text(&rejected));
    assert_eq!(case.states("r")["inner"], "FAILED");
    assert_eq!(case.states("r")["after"], "PENDING", "never reached");
    let failed = case.event("r", "inner", "node.failed").unwrap();
    assert_eq!(failed["cause"], "approval_rejected", "{failed}");
    assert_eq!(
        failed["reason"], "human approval was rejected in the child run subgraphs/inner (at hold)",
        "{failed}"
    );
    assert!(!case.path("r/subgraphs/inner.r0.a2").exists(), "retried");
}

/// A tool node with no connection runs its command in the tier it
/// declares: in a cage it has no network and cannot write the host.
/// The arena of a run with a subgraph node expands it, on a click, into
/// its child run, checked in the browser as the run is (signed
/// checkpoint, same key) and held to the head the parent recorded; a
/// child log cut short afterwards makes the expanded child UNVERIFIED.
#[test]
fn the_arena_expands_a_subgraph_node_into_its_verified_child_run() {
    use crate::browser::{Driver, available, headless};
    if !available(true) {
        return;
    }
    let case = Case::new();
    let made = case.bl(&["keys", "generate", "--name", "sub", "--out", "sub.key"]);
    assert!(made.status.success(), "{}", text(&made));
    subgraph_graph(&case);
    let run = case.run(
        "r",
        &["--loop-roots", "roots", "--checkpoint-key", "sub.key"],
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let arena = case.bl(&["graph", "arena", "--run", "r", "--pubkey", "sub.pub"]);
    assert!(arena.status.success(), "{}", text(&arena));
    let page = case.path("r.arena.html");

    let (trust, child, mark) = Driver::start().drive(async |client| {
        use fantoccini::Locator;
        crate::browser::open(client, &format!("file://{}", page.display())).await;
        let mark = client
            .find(Locator::Css(
                r#"#graph g.node[data-node="inner"] text.state"#,
            ))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        client
            .find(Locator::Css(r#"#graph g.node[data-node="inner"]"#))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        client
            .find(Locator::Id("expand"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let section = client
            .wait()
            .for_element(Locator::Css(
                r#"#children section[data-child="inner"][data-verified]"#,
            ))
            .await
            .unwrap();
        let child = section.text().await.unwrap();
        let state = client
            .find(Locator::Css(r#"#children g.node[data-node="make"]"#))
            .await
            .unwrap()
            .attr("class")
            .await
            .unwrap();
        let trust = client
            .find(Locator::Id("trust"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        // Collapsed, the child run is gone from the page.
        section
            .find(Locator::Css("button"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let left = client
            .find_all(Locator::Css(r#"#children section[data-child="inner"]"#))
            .await
            .unwrap()
            .len();
        assert_eq!(left, 0, "Collapse removes the child run");
        (
            trust,
            format!("{child}\n{}", state.unwrap_or_default()),
            mark,
        )
    });
    assert!(trust.starts_with("Verified:"), "{trust}");
    assert!(mark.contains("child run"), "{mark}");
    assert!(child.contains("subgraphs/inner"), "{child}");
    assert!(
        child.contains("Verified:") && child.contains("end at the head its parent recorded"),
        "{child}"
    );
    assert!(child.contains("state-succeeded"), "{child}");

    // The child's log cut short after the run: the page still opens, and
    // says the child is not what its parent recorded.
    let log = case.path("r/subgraphs/inner/controller-events.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    std::fs::write(&log, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    let arena = case.bl(&["graph", "arena", "--run", "r", "--pubkey", "sub.pub"]);
    assert!(arena.status.success(), "{}", text(&arena));
    let profile = tempfile::tempdir().unwrap();
    let dom = headless(profile.path())
        .arg("--virtual-time-budget=10000")
        .arg("--dump-dom")
        .arg(format!("file://{}#expand=inner", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    let at = dom
        .find(r#"data-child="inner""#)
        .expect("the child is expanded");
    let child = &dom[at..];
    assert!(child.contains(r#"data-verified="false""#), "{child}");
    assert!(
        child.contains("does not end at the head its parent recorded"),
        "{child}"
    );
}

#[test]
fn a_command_tool_runs_in_its_declared_tier() {
    if !bl_e2e::cage_works() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let case = Case::new();
    let outside = case.path("outside.txt");
    let script = format!(
        "import socket, pathlib\npathlib.Path('workspace').mkdir(exist_ok=True)\nout = []\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2).close(); out.append('net:open')\nexcept OSError:\n    out.append('net:denied')\ntry:\n    open('{}', 'w').write('x'); out.append('host:written')\nexcept OSError:\n    out.append('host:denied')\npathlib.Path('workspace/probe.txt').write_text(' '.join(out))\n",
        outside.display()
    );
    std::fs::write(case.path("probe.py"), &script).unwrap();
    let tool = |id: &str, tier: &str| {
        node(
            id,
            "tool",
            json!({
                "tool_ref": format!("command:python3 -c {}", shell_quote(&script)),
                "isolation": tier,
                "outputs": {"probe": output("workspace/probe.txt", "text")},
            }),
        )
    };
    graph(
        &case,
        vec![tool("caged", "container_restricted")],
        vec![],
        "fail_closed",
    );
    replies(&case, &[]);
    let run = case.run("caged", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    // In the cage the write lands in its private tmpfs, never on the host.
    assert!(
        std::fs::read_to_string(case.path("caged/workspace/probe.txt"))
            .unwrap()
            .starts_with("net:denied")
    );
    assert!(!outside.exists(), "the caged command wrote the host");
    graph(
        &case,
        vec![tool("plain", "workspace_only")],
        vec![],
        "fail_closed",
    );
    let run = case.run("plain", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(
        std::fs::read_to_string(case.path("plain/workspace/probe.txt")).unwrap(),
        "net:open host:written"
    );
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// An https connector node goes through the egress broker with its
/// --admitted record: the lease and the broker's refusal of a private
/// endpoint are in the run's egress log, which `bl verify` checks; without
/// a record the run is refused before it starts.
#[test]
fn https_nodes_go_through_the_egress_broker() {
    let case = Case::new();
    graph(
        &case,
        vec![agent("ask", json!({"effects": ["read_only"]}))],
        vec![],
        "fail_closed",
    );
    case.patch("connections.json", |conns| {
        conns[0]["transport"] = json!("https");
        conns[0]["provider_id"] = json!("openai");
        conns[0]["connector_id"] = json!("https");
    });
    replies(&case, &[]);
    let refused = case.run("none", &[]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused).contains("which no --admitted record admits"),
        "{}",
        text(&refused)
    );
    case.write(
        "admitted.json",
        &json!({"conn-slot-ask": {
            "allowed_effect": "read_only", "connection_id": "conn-slot-ask",
            "credential_env_var_name": "BL_TEST_HTTPS_KEY", "endpoint_host": "10.20.30.40",
            "endpoint_path": "/v1/chat/completions", "endpoint_scheme": "https",
            "expires_at": "2099-01-01T00:00:00Z", "request_style": "openai_chat",
            "route_policy": {"policy_digest": "d", "data_class_max": "internal",
                "allowed_providers": ["openai"], "allowed_models": ["recorded"], "allowed_regions": ["local"]}
        }}),
    );
    let run = Command::new(bl_binary())
        .args([
            "graph",
            "run",
            "--execute",
            "graph.json",
            "--connections",
            "connections.json",
            "--inputs",
            "inputs.json",
            "--admitted",
            "admitted.json",
            "--out",
            "r",
        ])
        .current_dir(case.dir.path())
        .env("BL_TEST_HTTPS_KEY", "sk-never-printed")
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    assert!(!text(&run).contains("sk-never-printed"));
    assert!(
        case.path("r/controller-events.jsonl").is_file(),
        "{}",
        text(&run)
    );
    let failed = case
        .event("r", "ask", "node.failed")
        .unwrap_or_else(|| panic!("{}\n{:?}", text(&run), case.events("r")));
    assert_eq!(failed["cause"], "policy_denied", "{failed}");
    let egress = std::fs::read_to_string(case.path("r/egress-events.jsonl")).unwrap();
    let kinds = bl_e2e::event_types(&case.path("r/egress-events.jsonl"));
    assert_eq!(kinds, ["lease.issued", "egress.denied"], "{egress}");
    assert!(egress.contains("private"), "{egress}");
    let (code, report) = case.verify("r");
    assert_eq!(code, 0, "{report}");
}

/// `bl graph artifacts --json` lists every artifact with its producer,
/// digest, size, visibility and consumers.
#[test]
fn graph_artifacts_lists_producers_digests_visibility_and_consumers() {
    let case = Case::new();
    let run = demo_run(&case, "r");
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let out = case.bl(&["--json", "graph", "artifacts", "--run", "r"]);
    assert!(out.status.success(), "{}", text(&out));
    let listing: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = listing["artifacts"].as_array().unwrap();
    let find = |path: &str| {
        rows.iter()
            .find(|r| r["path"] == path)
            .unwrap_or_else(|| panic!("{path}: {listing}"))
    };
    let report = find("workspace/lens-security.md");
    assert_eq!(report["producer"]["node_id"], "lens-security");
    assert_eq!(report["visibility"], "consumer");
    assert_eq!(report["consumers"], json!(["anonymize-panel.security"]));
    let bytes = std::fs::read(case.path("r/workspace/lens-security.md")).unwrap();
    assert_eq!(report["size"], bytes.len());
    assert_eq!(
        report["digest"],
        format!(
            "sha256:{}",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes))
        )
    );
    let map = find("workspace/system/anonymize-panel/label-map.json");
    assert_eq!(map["visibility"], "system_only");
    assert_eq!(map["consumers"], json!([]));
    assert!(
        rows.iter()
            .any(|r| r["role"] == "plugin" && r["plugin"] == "panel-anonymize")
    );
    let human = case.bl(&["graph", "artifacts", "--run", "r"]);
    let human = String::from_utf8(human.stdout).unwrap();
    assert!(
        human.contains("workspace/panel-responses.md (panel_responses) -> synthesizer.panel"),
        "{human}"
    );
}

/// Seed 002's artifact completion: a worker that fails (here, exit 1)
/// after writing every declared output, fresh and well-formed, completes
/// from its artifacts, with a `node.artifact_completion` record; one that
/// left nothing keeps its failure.
#[test]
fn a_failed_worker_that_left_its_outputs_completes_from_them() {
    let case = Case::new();
    let tool = |id: &str, script: &str| {
        node(
            id,
            "tool",
            json!({
                "tool_ref": format!("command:sh -c {}", shell_quote(script)),
                "outputs": {"summary": output(&format!("workspace/{id}.json"), "json")},
            }),
        )
    };
    graph(
        &case,
        vec![
            tool(
                "landed",
                "mkdir -p workspace && echo '{\"done\": true}' > workspace/landed.json; exit 1",
            ),
            tool("nothing", "exit 1"),
        ],
        vec![],
        "continue_declared",
    );
    replies(&case, &[]);
    let run = case.run("r", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let completion = case
        .event("r", "landed", "node.artifact_completion")
        .unwrap();
    assert_eq!(completion["artifacts"], json!(["workspace/landed.json"]));
    assert!(
        completion["suppressed_finish_reason"]
            .as_str()
            .unwrap()
            .contains("exited with code 1"),
        "{completion}"
    );
    let ok = case.event("r", "landed", "node.succeeded").unwrap();
    assert_eq!(ok["outputs"][0]["path"], "workspace/landed.json");
    let failed = case.event("r", "nothing", "node.failed").unwrap();
    assert_eq!(failed["cause"], "worker_fault", "{failed}");
    assert!(
        failed["reason"]
            .as_str()
            .unwrap()
            .starts_with("worker execution failed: 'sh' exited with code 1"),
        "{failed}"
    );
    assert!(
        failed["verdict"]["reason"]
            .as_str()
            .unwrap()
            .contains("was not written"),
        "{failed}"
    );
}

/// A declared output reached through a symlinked directory is refused,
/// in every tier: the judge walks the path one name at a time and never
/// follows a link, so a node cannot publish a host file it could not read.
#[test]
fn an_output_through_a_symlinked_directory_is_refused() {
    let case = Case::new();
    let secret_dir = case.path("hostdir");
    std::fs::create_dir_all(&secret_dir).unwrap();
    std::fs::write(secret_dir.join("secret.txt"), "the host's secret\n").unwrap();
    let linker = node(
        "linker",
        "tool",
        json!({
            "tool_ref": format!("command:sh -c {}", shell_quote(&format!("mkdir -p workspace && ln -s {} workspace/d", secret_dir.display()))),
            "outputs": {"leak": output("workspace/d/secret.txt", "text")},
        }),
    );
    graph(&case, vec![linker], vec![], "fail_closed");
    replies(&case, &[]);
    let run = case.run("r", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let failed = case.event("r", "linker", "node.failed").unwrap();
    assert_eq!(failed["cause"], "gate_rejected", "{failed}");
    assert!(
        failed["verdict"]["reason"]
            .as_str()
            .unwrap()
            .contains("passes through a symlink"),
        "{failed}"
    );
    for (_, bytes) in files_under(&case.path("r/artifacts/objects")) {
        assert_ne!(bytes, b"the host's secret\n", "the host file was stored");
    }
    assert!(!case.path("r/workspace/d").exists());
}

/// A process_restricted node sees the host's file system, but not the run
/// directory it belongs to: another node's system_only output (published
/// for the operator) is not there to read.
#[test]
fn a_caged_node_cannot_read_the_run_directory() {
    if !bl_e2e::cage_works() {
        return;
    }
    let case = Case::new();
    let run_dir = case.path("r");
    let secret = run_dir.join("workspace/system/keeper/labels.json");
    let keeper = node(
        "keeper",
        "tool",
        json!({
            "tool_ref": "command:sh -c 'mkdir -p workspace/system/keeper && echo \"{\\\"a\\\": 1}\" > workspace/system/keeper/labels.json'",
            "outputs": {"labels": {"type": "json", "path": "workspace/system/keeper/labels.json", "visibility": "system_only"}, "done": "text"},
        }),
    );
    let reader = |tier: &str| {
        node(
            &format!("reader-{}", &tier[..4]),
            "tool",
            json!({
                "tool_ref": format!("command:sh -c {}", shell_quote(&format!(
                    "mkdir -p workspace; if cat {} >/dev/null 2>&1; then echo read > workspace/seen.txt; else echo hidden > workspace/seen.txt; fi",
                    secret.display()
                ))),
                "isolation": tier,
                "inputs": {"done": "text"},
                "outputs": {"seen": output(&format!("workspace/seen-{}.txt", &tier[..4]), "text")},
            }),
        )
    };
    let mut readers = vec![reader("process_restricted"), reader("container_restricted")];
    for r in &mut readers {
        let name = r["outputs"]["seen"]["path"].as_str().unwrap().to_string();
        let script = r["tool_ref"]
            .as_str()
            .unwrap()
            .replace("workspace/seen.txt", &name);
        r["tool_ref"] = json!(script);
    }
    let mut nodes = vec![keeper];
    nodes.extend(readers);
    graph(
        &case,
        nodes,
        vec![
            json!({"from_node": "keeper", "from_port": "done", "to_node": "reader-proc", "to_port": "done"}),
            json!({"from_node": "keeper", "from_port": "done", "to_node": "reader-cont", "to_port": "done"}),
        ],
        "fail_closed",
    );
    replies(&case, &[]);
    let run = case.run("r", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert!(secret.is_file(), "published for the operator");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o077,
        0
    );
    for tier in ["proc", "cont"] {
        let seen =
            std::fs::read_to_string(run_dir.join(format!("workspace/seen-{tier}.txt"))).unwrap();
        assert_eq!(seen, "hidden\n", "{tier}");
    }
}

/// A publish node publishes its parents' outputs, never a system_only one.
#[test]
fn a_publish_never_sends_a_system_only_output() {
    let case = Case::new();
    let maker = node(
        "maker",
        "tool",
        json!({
            "tool_ref": "command:sh -c 'mkdir -p workspace/system/maker && echo public > workspace/report.md && echo \"{\\\"private\\\": true}\" > workspace/system/maker/map.json'",
            "outputs": {
                "report": output("workspace/report.md", "markdown"),
                "map": {"type": "json", "path": "workspace/system/maker/map.json", "visibility": "system_only"},
            },
        }),
    );
    let publish = node(
        "ship",
        "publish",
        json!({"publication_policy": "outbox", "inputs": {"report": "markdown"}}),
    );
    let hold = approval_node(
        "hold",
        json!({"inputs": {"report": "markdown"}, "outputs": {"approved": "markdown"}}),
    );
    graph(
        &case,
        vec![maker, hold, publish],
        vec![
            json!({"from_node": "maker", "from_port": "report", "to_node": "hold", "to_port": "report"}),
            json!({"from_node": "hold", "from_port": "approved", "to_node": "ship", "to_port": "report"}),
        ],
        "fail_closed",
    );
    replies(&case, &[]);
    case.write(
        "decisions.json",
        &json!({"api_version": "bl.dev/recorded-decisions/v1", "decisions": [{"node_id": "hold", "decision": "approved"}]}),
    );
    let run = case.run("r", &["--decisions", "decisions.json"]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let sent = files_under(&case.path("r/outbox/ship"));
    assert!(sent.iter().any(|(_, b)| b == b"public\n"), "{sent:?}");
    assert!(
        !sent.iter().any(|(_, b)| b == b"{\"private\": true}\n"),
        "the system_only map was published"
    );
}

/// Routers: one with declared outputs keeps its worker's pick; one decided
/// by a gate must declare both `pass` and `fail`; a skipped branch says
/// which route the router took.
#[test]
fn router_picks_hold_with_outputs_and_gated_routers_need_both_routes() {
    let case = Case::new();
    let mut router = agent(
        "triage",
        json!({"routes": {"fix": ["fix"], "ship": ["ship"]}, "default_route": "fix",
               "outputs": {"out": "text", "notes": output("workspace/triage.md", "markdown")}}),
    );
    router["kind"] = json!("router");
    router_graph(&case, router, false);
    replies(
        &case,
        &[
            (
                "triage",
                "ship",
                &[("workspace/triage.md", "# looks good\n")],
            ),
            ("fix", "fixed", &[]),
            ("ship", "shipped", &[]),
        ],
    );
    let run = case.run("r", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    assert_eq!(
        case.states("r"),
        json!({"triage": "SUCCEEDED", "fix": "SKIPPED", "ship": "SUCCEEDED"})
    );
    let triage = case.event("r", "triage", "node.succeeded").unwrap();
    assert_eq!(triage["routed"], "ship");
    assert_eq!(triage["outputs"][0]["path"], "workspace/triage.md");
    let skipped = case.event("r", "fix", "node.skipped").unwrap();
    assert_eq!(
        skipped["reason"],
        "branch not taken: router 'triage' took route 'ship'"
    );

    let mut gated = node(
        "triage",
        "router",
        json!({"routes": {"pass": ["ship"], "revise": ["fix"]}, "default_route": "revise", "outputs": {"out": "text"},
               "gate": {"plugin": "files", "config": {"required": ["ok.txt"]}}}),
    );
    gated["isolation"] = json!("workspace_only");
    router_graph(&case, gated, false);
    refused_before_running(
        &case,
        "gated",
        &[],
        "/nodes/0/routes — router 'triage' is decided by its gate plugin, which picks route 'pass' or 'fail': declare both",
    );
}

/// What the run is given is checked before anything runs: a recorded
/// decision for a node that is no approval, an unknown field, a transform
/// of another major version.
#[test]
fn bad_decisions_and_wrong_plugins_are_refused_before_anything_runs() {
    let case = Case::new();
    graph(
        &case,
        vec![approval_node("hold", json!({}))],
        vec![],
        "fail_closed",
    );
    replies(&case, &[]);
    case.write(
        "decisions.json",
        &json!({"api_version": "bl.dev/recorded-decisions/v1", "decisions": [{"node_id": "hodl", "decision": "approved"}]}),
    );
    refused_before_running(
        &case,
        "stray",
        &["--decisions", "decisions.json"],
        "a decision names 'hodl', which is not an approval node of this graph (approval nodes: hold)",
    );
    case.write(
        "decisions.json",
        &json!({"api_version": "bl.dev/recorded-decisions/v1", "decisions": [{"node_id": "hold", "decision": "approved", "why": "x"}]}),
    );
    refused_before_running(
        &case,
        "field",
        &["--decisions", "decisions.json"],
        "decisions.json: /decisions/0/why: unknown field",
    );

    let transform = node(
        "anon",
        "tool",
        json!({
            "tool_ref": "transform:panel.anonymize@v2",
            "outputs": {"panel": output("workspace/panel.md", "markdown"),
                        "map": {"type": "json", "path": "workspace/system/anon/map.json", "visibility": "system_only"}},
        }),
    );
    graph(&case, vec![transform], vec![], "fail_closed");
    refused_before_running(
        &case,
        "major",
        &[],
        "transform:panel.anonymize@v2 asks for major version 2, but the installed plugin 'panel-anonymize' is version 1.0.1",
    );
}

/// A stop that has to wait (a gate plugin that never returns is judging
/// the node) ends at once on a second signal, with the same record (the
/// attempt interrupted, nothing failed) and the first signal's exit code.
#[test]
fn a_second_signal_ends_a_stop_that_waits_with_the_same_record() {
    let case = Case::new();
    graph(
        &case,
        vec![agent(
            "spin",
            json!({"outputs": {"report": output("workspace/report.md", "text")},
                   "gate": {"plugin": "hostile", "config": {"mode": "loop"}}}),
        )],
        vec![],
        "fail_closed",
    );
    replies(
        &case,
        &[("spin", "done", &[("workspace/report.md", "# Report\n")])],
    );
    let plugins = std::env::join_paths([bl_e2e::test_plugin_dir(), bl_e2e::plugin_dir()]).unwrap();
    let mut child = Command::new(bl_binary())
        .args(Case::run_args("run", &[]))
        .current_dir(case.path(""))
        .env("BL_PLUGIN_PATH", plugins)
        .env("BL_ALLOW_UNSIGNED", "hostile")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = case.path("run/controller-events.jsonl");
    let since = std::time::Instant::now();
    while !bl_e2e::log_text(&log).contains("spin:node.gating\"") {
        assert!(
            since.elapsed() < std::time::Duration::from_secs(60),
            "never judged"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = child.id().to_string();
    let kill = |sig: &str| {
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        )
    };
    kill("-INT");
    std::thread::sleep(std::time::Duration::from_millis(500));
    // The first stop waits for the gate (up to its 10 s grace).
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first signal alone ended it"
    );
    let asked = std::time::Instant::now();
    // Another signal hurries the stop; bl still ends by the first's code.
    kill("-TERM");
    let out = child.wait_with_output().unwrap();
    // The patient stop would wait for the gate (its grace is 10 s).
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(3),
        "a second signal took {:?}",
        asked.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The finished turn (marked for the resume to judge again), then the stop.
    let annex = bl_e2e::json_lines(&case.path("run/controller-annex.jsonl"));
    let kinds: Vec<_> = annex.iter().map(|e| e["event_type"].clone()).collect();
    assert_eq!(kinds, ["node.replied", "node.interrupted"], "{annex:?}");
    assert!(annex.iter().all(|e| e["payload"]["node_id"] == "spin"));
    let kinds = bl_e2e::event_types(&log);
    assert!(
        !kinds
            .iter()
            .any(|k| k == "node.failed" || k == "run.failed"),
        "{kinds:?}"
    );
}
