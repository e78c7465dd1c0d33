//! A newcomer's first graph, as docs/first-graph.md walks it: two
//! researchers in parallel, a writer reading both, an approval and a
//! publish (examples/graphs/first-graph). First with the mistakes people
//! make, each refused before anything runs with words that say the rule and
//! the fix; then fixed, run to a named file in the outbox. And a claude
//! envelope without the cache fields counts against a token budget.

use bl_store::RunDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bl_e2e::{bl_binary, plugin_dir, repo_root};
use serde_json::{Value, json};

struct Said {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn bl(dir: &Path, args: &[&str]) -> Said {
    let out: Output = Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .env("BL_PLUGIN_PATH", plugin_dir())
        .output()
        .unwrap();
    Said {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Asserts `said` was refused (exit 2) with every one of `words` on
/// stderr, and that no run directory was made.
fn refused(dir: &Path, said: &Said, words: &[&str]) {
    assert_eq!(said.code, Some(2), "{said}");
    for w in words {
        assert!(said.stderr.contains(w), "missing {w:?} in:\n{said}");
    }
    assert!(!dir.join("run").exists(), "a refused run left a directory");
}

fn example() -> PathBuf {
    repo_root().join("examples/graphs/first-graph")
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{from:?} not in {}", path.display());
    std::fs::write(path, text.replace(from, to)).unwrap();
}

const RUN: &[&str] = bl_e2e::RECORDED_GRAPH_RUN;

fn run_to(dir: &Path, out: &str) -> Said {
    let mut args = RUN.to_vec();
    args.extend(["--out", out]);
    bl(dir, &args)
}

/// Puts `to` where `from` is in `args`.
fn swap<'a>(args: &mut [&'a str], from: &str, to: &'a str) {
    let at = args.iter().position(|a| *a == from).unwrap();
    args[at] = to;
}

/// `bl graph approve` on the `review` node of the run in `run`.
fn decide(dir: &Path, run: &str, decision: &str) -> Said {
    bl(
        dir,
        &[
            "graph",
            "approve",
            "--run",
            run,
            "--node",
            "review",
            "--decision",
            decision,
        ],
    )
}

/// `bl graph connect`, as the docs say, into connections.json.
fn connect(dir: &Path, provider: &str) {
    let said = bl(
        dir,
        &["graph", "connect", "graph.yaml", "--provider", provider],
    );
    assert_eq!(said.code, Some(0), "{said}");
    std::fs::write(dir.join("connections.json"), &said.stdout).unwrap();
}

#[test]
fn a_newcomers_five_node_graph_is_refused_for_each_mistake_then_publishes_a_named_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for file in ["graph.yaml", "inputs.json", "replies.json"] {
        std::fs::copy(example().join(file), dir.join(file)).unwrap();
    }
    let graph = dir.join("graph.yaml");
    let fixed = std::fs::read_to_string(&graph).unwrap();

    // A misspelt node in an edge: run says where, and what was meant, as
    // lint does (bounded-loops' line first, to the byte).
    connect(dir, "recorded");
    edit(
        &graph,
        "{from_node: research-costs,",
        "{from_node: research-cost,",
    );
    let mut args = RUN.to_vec();
    args.extend(["--out", "run"]);
    refused(
        dir,
        &bl(dir, &args),
        &[
            "error: compile failed [unknown_edge_node] /edges/1 — edge references an unknown node\n  at graph.yaml:56:",
            "\n  did you mean `research-costs` (not `research-cost`)?",
        ],
    );
    // A script asking for JSON gets the same place and hints as fields.
    let mut json_args = args.clone();
    json_args.push("--json");
    let as_json = bl(dir, &json_args);
    refused(dir, &as_json, &[]);
    let error: Value = serde_json::from_str(&as_json.stdout).unwrap();
    let error = &error["error"];
    assert_eq!(
        (
            &error["code"],
            &error["path"],
            &error["pointer"],
            &error["line"]
        ),
        (
            &json!("unknown_edge_node"),
            &json!("graph.yaml"),
            &json!("/edges/1"),
            &json!(56)
        ),
        "{as_json}"
    );
    assert_eq!(
        error["hints"],
        json!([
            "from_node 'research-cost' names no node",
            "did you mean `research-costs` (not `research-cost`)?"
        ]),
        "{as_json}"
    );
    edit(&graph, "{from_node: research-cost,", "{from_node: summary,");
    refused(
        dir,
        &bl(dir, &args),
        &["\n  the nodes: publish, research-costs, research-users, review, write-brief"],
    );
    std::fs::write(&graph, &fixed).unwrap();

    // Mistakes in the graph: one slot for both researchers, and a publish
    // that declares a network effect.
    edit(
        &graph,
        "connection_slot: users-researcher",
        "connection_slot: researcher",
    );
    edit(
        &graph,
        "connection_slot: costs-researcher",
        "connection_slot: researcher",
    );
    edit(
        &graph,
        "  - {id: users-researcher, requires: [research], data_class_max: internal}\n  - {id: costs-researcher, requires: [research], data_class_max: internal}\n",
        "  - {id: researcher, requires: [research], data_class_max: internal}\n",
    );
    edit(
        &graph,
        "outputs: {}\n    budget: {max_attempts: 1, max_wallclock_s: 60}\n    effects: [workspace_write]",
        "outputs: {}\n    budget: {max_attempts: 1, max_wallclock_s: 60}\n    effects: [external_write]",
    );
    // Lint passes it (bounded-loops' verdict, on stdout) and warns, with
    // the place, on stderr.
    let lint = bl(dir, &["graph", "lint", "graph.yaml"]);
    assert_eq!(lint.code, Some(0), "{lint}");
    assert!(lint.stdout.ends_with("OK\n"), "{lint}");
    for place in [
        "warning: graph.yaml:11:22: /nodes/0/connection_slot: [shared_slot]",
        "warning: graph.yaml:20:22: /nodes/1/connection_slot: [shared_slot]",
        "/nodes/4/effects/0: [network_effect] node 'publish' declares the effect 'external_write'",
    ] {
        assert!(lint.stderr.contains(place), "missing {place:?}:\n{lint}");
    }
    let unconnected = bl(dir, &["graph", "plan", "graph.yaml"]);
    assert_eq!(unconnected.code, Some(2), "{unconnected}");
    assert!(
        unconnected.stderr.contains(
            "`bl graph connect graph.yaml --provider claude > connections.json` writes one"
        ),
        "{unconnected}"
    );
    connect(dir, "recorded");
    // A binding weaker than the nodes ask for would admit none of them.
    let weak = bl(
        dir,
        &[
            "graph",
            "connect",
            "graph.yaml",
            "--provider",
            "recorded",
            "--isolation",
            "workspace_only",
        ],
    );
    assert_eq!(weak.code, Some(2), "{weak}");
    assert!(
        weak.stderr.contains("--isolation workspace_only is weaker than what these nodes ask for: 'research-users' (slot 'researcher'): process_restricted"),
        "{weak}"
    );
    // Plan says which connection each node got, and no placeholder digest.
    let plan = bl(
        dir,
        &[
            "graph",
            "plan",
            "graph.yaml",
            "--connections",
            "connections.json",
        ],
    );
    assert_eq!(plan.code, Some(0), "{plan}");
    assert!(!plan.stdout.contains("aaaaaaaa"), "{plan}");
    assert!(
        plan.stdout
            .contains("policy  : none given: the default execution policy applies"),
        "{plan}"
    );
    assert!(
        plan.stderr.contains(
            "binding : node 'research-users' -> bind-researcher (recorded, model default)"
        ),
        "{plan}"
    );

    // Forgetting the manifest runs nothing else in its place.
    let forgot = bl(
        dir,
        &[
            "graph",
            "run",
            "--execute",
            "--connections",
            "connections.json",
            "--inputs",
            "inputs.json",
            "--out",
            "run",
        ],
    );
    refused(
        dir,
        &forgot,
        &[
            "--connections and --inputs given without a manifest",
            "bl graph run --execute MANIFEST",
            "nothing was run",
        ],
    );

    // The graph's mistakes: refused before anything runs, rule and fix.
    let hazards = run_to(dir, "run");
    refused(
        dir,
        &hazards,
        &[
            "the run would deny 3 node(s); nothing was run",
            "graph.yaml:11:22: /nodes/0/connection_slot: [shared_slot] nodes 'research-users' and 'research-costs' share the connection slot 'researcher'",
            "Give each node a slot of its own, and a connection for each slot in connections.json",
            "graph.yaml:52:15: /nodes/4/effects/0: [network_effect]",
            "A local publish (to the outbox) needs only workspace_write: drop 'external_write'",
            "--deny-at-run-time",
        ],
    );
    // bounded-loops' way, on request: the run denies them (the first one
    // denied ends it, fail_closed), and says which rule did.
    let mut args = RUN.to_vec();
    args.extend(["--out", "denied", "--deny-at-run-time"]);
    let denied = bl(dir, &args);
    assert_eq!(denied.code, Some(2), "{denied}");
    assert!(
        denied
            .stderr
            .contains("✗ research-costs (policy_denied): execution policy denied worker: nodes 'research-users' and 'research-costs' share the connection slot 'researcher'"),
        "{denied}"
    );
    let status = bl(dir, &["graph", "status", "--run", "denied"]);
    let row = status
        .stdout
        .lines()
        .find(|l| l.starts_with("research-costs "))
        .unwrap_or_default();
    assert!(
        row.contains("execution policy denied worker: ")
            && row.contains("share the connection slot"),
        "{status}"
    );
    std::fs::remove_dir_all(dir.join("denied")).unwrap();

    // Fixed graph; now the prompts.
    std::fs::write(&graph, &fixed).unwrap();
    connect(dir, "recorded");
    let mut args = RUN.to_vec();
    args.retain(|a| *a != "--inputs" && *a != "inputs.json");
    args.extend(["--out", "run"]);
    refused(
        dir,
        &bl(dir, &args),
        &[
            "agent node(s) research-costs, research-users, write-brief need a prompt, and no --inputs was given",
            "pass --inputs FILE",
        ],
    );
    let prompts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("inputs.json")).unwrap()).unwrap();
    let mut typo = prompts.clone();
    let text = typo["research-users"].take();
    typo.as_object_mut().unwrap().remove("research-users");
    typo["research-user"] = text;
    std::fs::write(dir.join("typo.json"), typo.to_string()).unwrap();
    let mut args = RUN.to_vec();
    swap(&mut args, "inputs.json", "typo.json");
    args.extend(["--out", "run"]);
    refused(
        dir,
        &bl(dir, &args),
        &[
            "typo.json: /research-user gives a prompt for 'research-user', which is not a node of this graph",
            "Did you mean `research-users`",
        ],
    );
    // Too far from any id to guess: the nodes that still lack one are named.
    let mut far = prompts.clone();
    let text = far["write-brief"].take();
    far.as_object_mut().unwrap().remove("write-brief");
    far["brief"] = text;
    std::fs::write(dir.join("typo.json"), far.to_string()).unwrap();
    refused(
        dir,
        &bl(dir, &args),
        &[
            "/brief gives a prompt for 'brief', which is not a node of this graph. The agent nodes still without a prompt: write-brief.",
        ],
    );
    let mut partial = prompts.clone();
    partial.as_object_mut().unwrap().remove("write-brief");
    // A prompt for the approval node is not used, and said so.
    partial["review"] = json!("approve it");
    std::fs::write(dir.join("partial.json"), partial.to_string()).unwrap();
    swap(&mut args, "typo.json", "partial.json");
    refused(
        dir,
        &bl(dir, &args),
        &[
            "note: partial.json: the prompts for review are not used: no agent runs those nodes",
            "no prompt for agent node(s) write-brief; add \"write-brief\": \"…\" to it",
        ],
    );
    // A provider bl has no profile for.
    let connections = std::fs::read_to_string(dir.join("connections.json")).unwrap();
    std::fs::write(
        dir.join("gemini.json"),
        connections.replace("\"recorded\"", "\"gemini\""),
    )
    .unwrap();
    let mut args = RUN.to_vec();
    swap(&mut args, "connections.json", "gemini.json");
    args.extend(["--out", "run"]);
    refused(
        dir,
        &bl(dir, &args),
        &["binds local-CLI provider 'gemini', which this deployment has no profile for"],
    );
    // Connected to a real agent, with --recorded still given: the agents
    // would be called, not replayed, so it is refused before they are.
    std::fs::write(
        dir.join("claude.json"),
        connections.replace("\"recorded\"", "\"claude\""),
    )
    .unwrap();
    swap(&mut args, "gemini.json", "claude.json");
    refused(
        dir,
        &bl(dir, &args),
        &[
            "replies.json holds recorded replies for research-costs, research-users, write-brief, but the connections bind them to a live agent",
            "`bl graph connect graph.yaml --provider recorded > connections.json`",
        ],
    );
    swap(&mut args, "claude.json", "gemini.json");

    // Two connections copied with one binding_id: the slots are the
    // graph's own, so the fix named is the binding_id, not the slots.
    std::fs::write(
        dir.join("one-binding.json"),
        connections.replace("\"bind-costs-researcher\"", "\"bind-users-researcher\""),
    )
    .unwrap();
    swap(&mut args, "gemini.json", "one-binding.json");
    refused(
        dir,
        &bl(dir, &args),
        &[
            "[shared_binding] nodes 'research-users' and 'research-costs' are bound through one binding_id 'bind-users-researcher'",
            "Give each connection in connections.json a binding_id of its own",
        ],
    );

    // The fixed graph runs, and pauses for the approval.
    let first = run_to(dir, "rejected");
    assert_eq!(first.code, Some(3), "{first}");
    assert!(
        first
            .stdout
            .contains("state     : PAUSED, waiting for your decision on review\nagents    : recorded replies (no agent was called)\n"),
        "{first}"
    );
    for line in [
        "  ✓ node 'research-users': SUCCEEDED",
        "  ⏸ node 'review': AWAITING_APPROVAL",
        "  · node 'publish': PENDING",
    ] {
        assert!(first.stdout.contains(line), "missing {line:?}:\n{first}");
    }
    // Status: PAUSED in words, its columns aligned with AWAITING_APPROVAL
    // in them; --json keeps bounded-loops' RUNNING.
    let status = bl(dir, &["graph", "status", "--run", "rejected"]);
    assert!(
        status
            .stdout
            .contains("state     : PAUSED, waiting for your decision on review\n"),
        "{status}"
    );
    assert!(!status.stdout.contains("Arena") && !status.stdout.contains("demonstration"));
    let table: Vec<&str> = status
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("NODE"))
        .collect();
    let column = |line: &str, word: &str| line.find(word).unwrap();
    let (state_at, isolation_at) = (column(table[0], "STATE"), column(table[0], "ISOLATION"));
    let review = table.iter().find(|l| l.starts_with("review ")).unwrap();
    assert_eq!(column(review, "AWAITING_APPROVAL"), state_at, "{status}");
    assert_eq!(column(review, "workspace_only"), isolation_at, "{status}");
    let as_json = bl(dir, &["--json", "graph", "status", "--run", "rejected"]);
    let as_json: Value = serde_json::from_str(&as_json.stdout).unwrap();
    assert_eq!(as_json["run_state"], "RUNNING");

    // A rejection is final: approving after it is refused, naming it, and
    // changes nothing on record.
    let reject = decide(dir, "rejected", "rejected");
    assert_eq!(reject.code, Some(2), "{reject}");
    assert!(reject.stdout.contains("state     : FAILED"), "{reject}");
    let approvals = std::fs::read(dir.join("rejected").join(RunDir::APPROVALS)).unwrap();
    let log = std::fs::read(dir.join("rejected").join(RunDir::EVENTS)).unwrap();
    let approve = decide(dir, "rejected", "approved");
    assert_eq!(approve.code, Some(2), "{approve}");
    assert!(
        approve
            .stderr
            .contains("node 'review' was already rejected by operator at ")
            && approve
                .stderr
                .contains("a decision is final, so this approval was not recorded"),
        "{approve}"
    );
    assert!(!approve.stdout.contains("decision : approved"), "{approve}");
    assert_eq!(
        std::fs::read(dir.join("rejected").join(RunDir::APPROVALS)).unwrap(),
        approvals
    );
    assert_eq!(
        std::fs::read(dir.join("rejected").join(RunDir::EVENTS)).unwrap(),
        log
    );
    let again = decide(dir, "rejected", "rejected");
    assert!(
        again
            .stdout
            .contains("decision : rejected (already recorded: nothing changed)"),
        "{again}"
    );
    assert!(!dir.join("rejected/outbox").exists());
    // Run again into the ended run's directory: it is its record, so a new
    // run needs another --out.
    let over = run_to(dir, "rejected");
    assert_eq!(over.code, Some(2), "{over}");
    assert!(
        over.stderr.contains(
            "rejected already holds a run, which has ended (FAILED); give another --out for a new run"
        ),
        "{over}"
    );

    // Approved, it publishes the brief under its declared name.
    let second = run_to(dir, "approved");
    assert_eq!(second.code, Some(3), "{second}");
    let approve = decide(dir, "approved", "approved");
    assert_eq!(approve.code, Some(0), "{approve}");
    assert!(
        approve.stdout.contains("state     : SUCCEEDED"),
        "{approve}"
    );
    let outbox = dir.join("approved/outbox/publish");
    let mut names: Vec<String> = std::fs::read_dir(&outbox)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // The brief and its index; never the writer's chat reply.
    assert_eq!(names, ["brief.md", "manifest.json"]);
    let brief = std::fs::read(outbox.join("brief.md")).unwrap();
    let replies: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("replies.json")).unwrap()).unwrap();
    let written = replies["replies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["node_id"] == "write-brief")
        .unwrap()["files"][0]["content"]
        .as_str()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&brief), written);
    let digest = format!("sha256:{}", bl_core::sha256_hex(&brief));
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(outbox.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(
        manifest,
        json!([{"name": "brief.md", "digest": digest, "size": brief.len(), "producer": "write-brief"}])
    );
    // The ledger binds that digest: the effect's payload digest is
    // bounded-loops' formula over the published artifacts' digests.
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("approved").join(RunDir::META)).unwrap(),
    )
    .unwrap();
    let payload = bl_core::sha256_hex(
        bl_core::python_json(&json!({
            "node_id": "publish", "plan_id": meta["plan_id"],
            "publication_policy": "outbox", "upstream_artifact_digests": [digest],
        }))
        .as_bytes(),
    );
    let ledger: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("approved").join(RunDir::LEDGER)).unwrap(),
    )
    .unwrap();
    let recorded: Vec<&Value> = ledger.as_object().unwrap().values().collect();
    assert_eq!(recorded, [&json!(payload)], "{ledger}");
    // The writer's line shows the brief's digest, the file in the outbox.
    assert!(
        second.stdout.contains(&format!(
            "✓ node 'write-brief': SUCCEEDED  artifact={}...",
            &digest[..24]
        )),
        "{second}"
    );
    let verify = bl(dir, &["verify", "approved"]);
    assert_eq!(verify.code, Some(0), "{verify}");
    // (bounded-loops' own tools do not read this run: its manifest uses
    // bl's artifact-ports extension, which they refuse by name.)
}

/// claude's envelope without the cache_* usage fields (as many versions
/// print it): its tokens still count, so a token budget is measurable.
#[test]
fn claudes_usage_without_cache_fields_counts_against_a_token_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(
        dir.join("graph.yaml"),
        "api_version: bounded-loops.dev/graph/v1\ngraph_id: ask\nversion: 1.0.0\nnodes:\n  - id: ask\n    kind: research_claim\n    connection_slot: asker\n    inputs: {}\n    outputs: {answer: text}\n    budget: {max_attempts: 1, max_wallclock_s: 60, max_tokens: 1000}\n    effects: [read_only]\n    isolation: workspace_only\nedges: []\nconnection_slots:\n  - {id: asker, requires: [research], data_class_max: internal}\npolicies: {data_class: internal, fail_mode: fail_closed}\n",
    )
    .unwrap();
    std::fs::write(dir.join("inputs.json"), r#"{"ask": "Say ok."}"#).unwrap();
    let bin = dir.join("fake-bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(
        bin.join("claude"),
        "#!/bin/sh\ncat > /dev/null\nprintf '%s\\n' '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"ok\",\"usage\":{\"input_tokens\":120,\"output_tokens\":30}}'\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("claude"), std::fs::Permissions::from_mode(0o755)).unwrap();
    connect(dir, "claude");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    // RUN without --recorded: claude is called.
    let run = Command::new(bl_binary())
        .args(&RUN[..8])
        .args(["--out", "run"])
        .current_dir(dir)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let status = bl(dir, &["--json", "graph", "status", "--run", "run"]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(
        (
            &status["spend_tokens"],
            &status["nodes"][0]["spend_complete"]
        ),
        (&json!(150), &json!(true)),
        "{status}"
    );
}

/// A newcomer's first fan-out puts every node on one slot: the refusal
/// says so in one sentence that names a few of them and counts the rest,
/// not in a line per node that lists every node (11 MB for a thousand).
#[test]
fn a_fan_out_on_one_slot_is_refused_in_one_short_sentence() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let count = 300;
    let nodes: Vec<Value> = (0..count)
        .map(|i| {
            json!({"id": format!("look-{i}"), "kind": "research_claim", "inputs": {},
                   "outputs": {"notes": "text"}, "budget": {"max_attempts": 1, "max_wallclock_s": 60},
                   "effects": ["read_only"], "isolation": "workspace_only",
                   "connection_slot": "researcher"})
        })
        .collect();
    let manifest = json!({"api_version": "bounded-loops.dev/graph/v1", "graph_id": "fan-out",
        "version": "1.0.0", "nodes": nodes, "edges": [],
        "connection_slots": [{"id": "researcher", "requires": ["research"], "data_class_max": "internal"}],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"}});
    std::fs::write(dir.join("graph.json"), manifest.to_string()).unwrap();
    let prompts: serde_json::Map<String, Value> = (0..count)
        .map(|i| (format!("look-{i}"), json!("look it up")))
        .collect();
    std::fs::write(dir.join("inputs.json"), Value::Object(prompts).to_string()).unwrap();
    let connected = bl(
        dir,
        &["graph", "connect", "graph.json", "--provider", "claude"],
    );
    assert_eq!(connected.code, Some(0), "{connected}");
    std::fs::write(dir.join("connections.json"), &connected.stdout).unwrap();

    let sentence = "[shared_slot] nodes 'look-0', 'look-1', 'look-2' and 297 more (300 in all) share the connection slot 'researcher'";
    let lint = bl(dir, &["graph", "lint", "graph.json"]);
    assert_eq!(lint.code, Some(0), "{lint}");
    assert_eq!(lint.stderr.lines().count(), 1, "{lint}");
    assert!(lint.stderr.contains(sentence), "{lint}");
    let mut args = bl_e2e::GRAPH_RUN.to_vec();
    swap(&mut args, "manifest.json", "graph.json");
    // Run before it has connections: the refusal says how to make them.
    let unconnected: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| !["--connections", "connections.json"].contains(a))
        .collect();
    refused(
        dir,
        &bl(dir, &unconnected),
        &[
            "compile failed [no_admitted_connection] /connections",
            "\n  `bl graph connect graph.json --provider claude > connections.json` writes one for you to review; then add --connections connections.json",
        ],
    );
    let run = bl(dir, &args);
    refused(
        dir,
        &run,
        &[
            "the run would deny 300 node(s); nothing was run",
            "graph.json:1:",
            sentence,
            "(said once for the 300 nodes it denies)",
        ],
    );
    assert!(run.stderr.len() < 2_000, "{run}");
}
