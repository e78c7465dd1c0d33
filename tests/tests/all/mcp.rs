//! `bl mcp` driven by a real MCP client: the `mcp` package from PyPI
//! (pinned; `scripts/dev test` installs it in a throwaway venv), through
//! `tests/mcp/client.py`, over stdio. The tools bl offers have
//! bounded-loops' names and argument shapes (as recorded from its own MCP
//! server in `tests/corpus/mcp/upstream-tools.json`), answer as it does,
//! name runs only by name, and page a result too long for one answer.

use std::path::{Path, PathBuf};
use std::process::Command;

use bl_e2e::{bl_binary, repo_root};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The venv's python with the `mcp` client; None (said loudly) without
/// it, except under CI=true, where setup must have made it.
fn client_python() -> Option<PathBuf> {
    let python = repo_root().join("target/mcp/venv/bin/python3");
    if python.is_file() {
        return Some(python);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but the MCP client is not installed at {}: scripts/dev test should have made that venv",
        python.display()
    );
    eprintln!(
        "SKIPPED: the MCP client is not installed ({})",
        python.display()
    );
    None
}

/// What the client made of `calls` ([tool, arguments] pairs) against
/// `bl mcp --workspace workspace`.
fn drive(python: &Path, workspace: &Path, calls: &Value) -> Value {
    drive_with(python, workspace, calls, &[], &[])
}

/// [`drive`], the server having `env` set too, and `args` after `bl mcp`'s.
fn drive_with(
    python: &Path,
    workspace: &Path,
    calls: &Value,
    env: &[(&str, &Path)],
    args: &[&str],
) -> Value {
    let script = workspace.join("calls.json");
    std::fs::write(&script, calls.to_string()).unwrap();
    let extra = workspace.join("extra.json");
    std::fs::write(&extra, json!(args).to_string()).unwrap();
    let out = Command::new(python)
        .arg(repo_root().join("tests/mcp/client.py"))
        .arg(bl_binary())
        .arg(workspace)
        .arg(&script)
        .arg(&extra)
        .env(
            "MCP_SERVER_ENV",
            Value::Object(env.iter().map(|(k, v)| (k.to_string(), json!(v))).collect()).to_string(),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the MCP client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn bl(args: &[&str], dir: &Path) -> std::process::Output {
    bl_e2e::bl_in(dir, args)
}

/// The first graph, run in `workspace` as `first` until it waits on its
/// `review` approval.
fn paused_first_graph(workspace: &Path) {
    let first = bl_e2e::first_graph();
    let out = workspace.join(".bounded-loops/runs/first");
    let run = bl(
        &[
            bl_e2e::RECORDED_GRAPH_RUN,
            &["--out", out.to_str().unwrap()],
        ]
        .concat(),
        first.path(),
    );
    assert_eq!(run.status.code(), Some(3), "paused for approval: {run:?}");
}

/// A workspace with two runs: `first` (the first graph, paused at its
/// approval) and `wide` (400 independent nodes, ended); and the
/// records-shell loop package under `loops/records`.
fn workspace() -> tempfile::TempDir {
    let workspace = tempfile::tempdir().unwrap();
    bl_e2e::copy_tree(
        &repo_root().join("examples/loops/records-shell"),
        &workspace.path().join("loops/records"),
    );
    paused_first_graph(workspace.path());
    let wide = workspace.path().join("wide");
    let made = Command::new("python3")
        .arg(repo_root().join("benchmarks/graph/make_graph.py"))
        .args(["400", "workspace_only"])
        .arg(&wide)
        .status()
        .unwrap();
    assert!(made.success());
    let run = Command::new(bl_binary())
        .args(&bl_e2e::GRAPH_RUN[..bl_e2e::GRAPH_RUN.len() - 1])
        .arg(workspace.path().join(".bounded-loops/runs/wide"))
        .current_dir(&wide)
        .env("PATH", bl_e2e::path_with_fakes(&wide))
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    workspace
}

/// An agent reads what a run produced: the artifacts its log names, and
/// one's content checked against its digest; never a system_only output.
#[test]
fn an_agent_reads_a_runs_artifacts_but_never_a_system_only_one() {
    let Some(python) = client_python() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    let maker = json!({
        "id": "maker", "kind": "tool", "inputs": {},
        "tool_ref": "command:sh -c 'mkdir -p workspace/system/maker && printf \"the report\\n\" > workspace/report.md && printf \"{\\\"secret\\\": 1}\" > workspace/system/maker/map.json'",
        "outputs": {
            "report": {"type": "markdown", "path": "workspace/report.md"},
            "map": {"type": "json", "path": "workspace/system/maker/map.json", "visibility": "system_only"},
        },
        "budget": {"max_attempts": 1, "max_wallclock_s": 60},
        "effects": ["workspace_write"], "isolation": "workspace_only",
    });
    let manifest = json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": "sys", "version": "1.0.0",
        "extensions": ["artifact-ports"], "nodes": [maker], "edges": [], "connection_slots": [],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"},
    });
    std::fs::write(workspace.path().join("graph.json"), manifest.to_string()).unwrap();
    let out = workspace.path().join(".bounded-loops/runs/sys");
    let run = bl(
        &[
            "graph",
            "run",
            "--execute",
            "graph.json",
            "--out",
            out.to_str().unwrap(),
        ],
        workspace.path(),
    );
    assert!(run.status.success(), "{run:?}");
    let digest_of = |bytes: &[u8]| format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
    let report = digest_of(b"the report\n");
    let map = digest_of(b"{\"secret\": 1}");
    let calls = json!([
        ["graph_artifacts", {"run": "sys"}],
        ["graph_artifacts", {"run": "sys", "digest": report}],
        ["graph_artifacts", {"run": "sys", "digest": map}],
        ["graph_artifacts", {"run": "sys", "digest": digest_of(b"never written")}],
        ["graph_artifacts", {"run": "../sys"}],
    ]);
    let answers = drive(&python, workspace.path(), &calls);
    let call = |i: usize| answers["calls"][i]["result"].clone();
    let listed = call(0);
    assert_eq!(listed["ok"], true, "{listed}");
    let rows = listed["artifacts"].as_array().unwrap();
    let row = |digest: &str| rows.iter().find(|r| r["digest"] == digest).cloned();
    assert_eq!(row(&report).unwrap()["visibility"], "consumer", "{listed}");
    assert_eq!(row(&map).unwrap()["visibility"], "system_only", "{listed}");
    assert!(
        rows.iter().all(|r| r.get("text").is_none()),
        "a listing holds no content"
    );
    let read = call(1);
    assert_eq!(read["artifact"]["text"], "the report\n", "{read}");
    assert_eq!(read["artifact"]["producer"]["node_id"], "maker", "{read}");
    let kept = call(2);
    assert_eq!(kept["ok"], false, "{kept}");
    let why = kept["error"].as_str().unwrap();
    assert!(
        why.contains("system_only") && why.contains("'maker'"),
        "{kept}"
    );
    assert!(!kept.to_string().contains("secret"), "{kept}");
    let unknown = call(3);
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("names no artifact"),
        "{unknown}"
    );
    assert!(
        call(4)["error"]
            .as_str()
            .unwrap()
            .starts_with("run_id must be"),
        "{}",
        call(4)
    );
}

#[test]
fn an_agent_lints_graphs_and_reads_runs_over_mcp_in_bounded_loops_shapes() {
    let Some(python) = client_python() else {
        return;
    };
    let workspace = workspace();
    // A package whose loop.yaml does not read.
    bl_e2e::copy_tree(
        &repo_root().join("examples/loops/records-shell"),
        &workspace.path().join("loops/broken"),
    );
    std::fs::write(
        workspace.path().join("loops/broken/loop.yaml"),
        "name: broken\n",
    )
    .unwrap();
    let manifest =
        std::fs::read_to_string(repo_root().join("examples/graphs/first-graph/graph.yaml"))
            .unwrap();
    let broken = manifest.replacen("kind: research_claim", "kind: no_such_kind", 1);
    let wide_manifest =
        std::fs::read_to_string(workspace.path().join("wide/manifest.json")).unwrap();
    let calls = json!([
        ["graph_lint", {"manifest_yaml": manifest}],
        ["graph_lint", {"manifest_yaml": broken}],
        ["graph_runs", {}],
        ["graph_status", {"run": "first"}],
        ["graph_state_md", {"run": "first"}],
        ["graph_metrics", {"run": "first"}],
        ["graph_status", {"run": "../first"}],
        ["graph_status", {"run": workspace.path().join(".bounded-loops/runs/first")}],
        ["graph_status", {"run": "nope"}],
        ["graph_status", {"run": "wide"}],
        ["bl_gates", {}],
        ["bl_capabilities", {}],
        ["graph_lint", {}],
        ["bl_list", {}],
        ["bl_lint", {"loop_dirs": ["loops/records", "loops/broken", "loops/nope", "/etc"]}],
        ["bl_show", {"loop_dir": "loops/records"}],
        ["bl_show", {"loop_dir": "loops/broken"}],
        ["bl_show", {"loop_dir": "/etc"}],
        ["$resource", {"uri": "bounded-loops://catalog"}],
        ["$resource", {"uri": "bounded-loops://loop/records-shell/manifest"}],
        ["$resource", {"uri": "bounded-loops://loop/records-shell/prompt"}],
        ["$resource", {"uri": "bounded-loops://loop/no-such-loop/manifest"}],
        ["$prompt", {"name": "run_loop", "arguments": {"loop_dir": "loops/records"}}],
        ["$prompt", {"name": "write_loop", "arguments": {"loop_name": "release-notes"}}],
        ["$prompt", {"name": "audit_loop", "arguments": {}}],
        ["bl_graph_terminal_runs", {}],
        ["bl_graph_terminal_runs", {"limit": 0}],
        ["bl_graph_evidence", {"run_ref": "wide"}],
        ["bl_graph_evidence", {"run_ref": "first"}],
        ["bl_graph_evidence", {"run_ref": "../etc"}],
        ["bl_graph_execution_evidence", {"run_ref": "wide"}],
        ["graph_run", {"manifest_yaml": wide_manifest, "connections": "wide/connections.json"}],
        ["graph_status", {"run": "first", "events": true}],
        ["graph_status", {"run": "first", "evnets": true}],
    ]);
    let report = drive(&python, workspace.path(), &calls);
    assert_eq!(report["protocol_version"], "2025-11-25");
    assert_eq!(report["server"]["name"], "bl");

    // Every tool is one of bounded-loops', with its required arguments
    // and its properties of the same types (bl adds only `cursor`).
    let upstream: Value = serde_json::from_slice(
        &std::fs::read(repo_root().join("tests/corpus/mcp/upstream-tools.json")).unwrap(),
    )
    .unwrap();
    let mut offered: Vec<&str> = Vec::new();
    for tool in report["tools"].as_array().unwrap() {
        let name = tool["name"].as_str().unwrap();
        offered.push(name);
        // bl's own tool: what an agent needs that bounded-loops lacks (the
        // content of what a run produced).
        if name == "graph_artifacts" {
            continue;
        }
        let theirs = upstream["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not one of bounded-loops' tools"));
        let schema = &tool["inputSchema"];
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().map(|v| v.as_str().unwrap()).collect())
            .unwrap_or_default();
        required.sort_unstable();
        assert_eq!(
            json!(required),
            theirs["required"],
            "{name}'s required arguments"
        );
        for (property, shape) in theirs["properties"].as_object().unwrap() {
            let mine = &schema["properties"][property];
            let types: Vec<Value> = match &mine["type"] {
                Value::Array(types) => types.clone(),
                one => vec![one.clone()],
            };
            for wanted in shape["type"].as_array().unwrap() {
                assert!(
                    types.contains(wanted),
                    "{name}.{property}: {mine} lacks {wanted}"
                );
            }
        }
        let extra: Vec<&String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| theirs["properties"].get(k.as_str()).is_none())
            .collect();
        // bl's additions: paging, and what running a graph for real needs
        // (a preview's token, and the files of a run with agent nodes).
        let added: &[&str] = match name {
            "graph_run" => &[
                "confirm",
                "confirm_token",
                "connections",
                "inputs",
                "recorded",
                "cursor",
            ],
            "graph_resume" => &["confirm_token", "inputs", "cursor"],
            "graph_configure" | "graph_approve" => &["confirm_token", "cursor"],
            "graph_status" => &["events", "cursor"],
            _ => &["cursor"],
        };
        assert!(
            extra.iter().all(|k| added.contains(&k.as_str())),
            "{name} adds {extra:?}"
        );
    }
    offered.sort_unstable();
    assert_eq!(
        offered,
        [
            "bl_audit_loops",
            "bl_capabilities",
            "bl_catalog",
            "bl_gates",
            "bl_graph_evidence",
            "bl_graph_execution_evidence",
            "bl_graph_terminal_runs",
            "bl_lint",
            "bl_list",
            "bl_run",
            "bl_runs",
            "bl_search_loops",
            "bl_show",
            "graph_approve",
            "graph_artifacts",
            "graph_compose",
            "graph_configure",
            "graph_interview",
            "graph_lint",
            "graph_metrics",
            "graph_plan",
            "graph_resume",
            "graph_run",
            "graph_runs",
            "graph_state_md",
            "graph_status",
        ]
    );

    let call = |i: usize| &report["calls"][i];
    let lint = &call(0)["result"];
    assert_eq!(lint["ok"], true, "{lint}");
    assert_eq!(lint["graph_id"], "first-graph");
    assert_eq!(lint["nodes"].as_array().unwrap().len(), 5);
    assert_eq!(lint["edges"], 4);
    let refused = &call(1)["result"];
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["refusal"]["code"], "unknown_node_kind", "{refused}");
    assert_eq!(refused["refusal"]["pointer"], "/nodes/0/kind");
    assert!(refused["refusal"]["line"].as_u64().is_some(), "{refused}");
    assert_eq!(call(2)["result"]["runs"], json!(["first", "wide"]));

    // The status is the command line's own.
    let status = &call(3)["result"];
    assert_eq!(status["ok"], true, "{status}");
    let cli = bl(
        &[
            "--json",
            "graph",
            "status",
            "--run",
            ".bounded-loops/runs/first",
        ],
        workspace.path(),
    );
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(status["projection"]["run_state"], cli["run_state"], "{cli}");
    assert_eq!(status["projection"]["nodes"], cli["nodes"]);
    let markdown = call(4)["result"]["markdown"].as_str().unwrap().to_string();
    assert!(markdown.contains("review"), "{markdown}");
    // The run is named inside the workspace, not by this machine's path.
    assert!(
        markdown.contains("`bl verify .bounded-loops/runs/first`")
            && !markdown.contains(&workspace.path().display().to_string()),
        "{markdown}"
    );
    assert_eq!(call(5)["result"]["ok"], true, "{}", call(5)["result"]);
    assert!(call(5)["result"]["metrics"].is_object());

    // A run is a name under .bounded-loops/runs, never a path.
    for i in [6, 7] {
        let refused = &call(i)["result"];
        assert_eq!(refused["ok"], false);
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .starts_with("run_id must be 1-128 chars"),
            "{refused}"
        );
    }
    assert!(
        call(8)["result"]["error"]
            .as_str()
            .unwrap()
            .starts_with("no run named 'nope'"),
        "{}",
        call(8)["result"]
    );

    // A status too long for one answer comes in pages that join to it,
    // each within the cap.
    let wide = call(9);
    assert!(wide["pages"].as_u64().unwrap() > 1, "{}", wide["pages"]);
    assert!(
        wide["largest_page"].as_u64().unwrap() <= 64 * 1024,
        "{}",
        wide["largest_page"]
    );
    // The history is given by its digest, unless asked for.
    let status = &call(3)["result"]["projection"];
    assert!(status.get("events").is_none(), "{status}");
    assert!(status["receipt_head_hash"].is_string());
    // A misspelled argument is refused, naming it, rather than ignored.
    assert_eq!(call(33)["is_error"], true, "{}", call(33));
    assert!(
        call(33).to_string().contains("unknown field `evnets`"),
        "{}",
        call(33)
    );
    let history = &call(32)["result"]["projection"];
    let events = history["events"].as_array().unwrap();
    assert_eq!(
        json!(events.len()),
        history["receipt_sequence"],
        "{history}"
    );
    assert_eq!(events[0]["event_type"], "run.created");
    assert_eq!(
        json!(events.last().unwrap()["event_hash"]),
        history["receipt_head_hash"],
        "the history ends at the head its digest names"
    );

    // So does a preview of 400 nodes, made once: its pages are one answer,
    // with one token.
    let preview = call(31);
    assert!(
        preview["pages"].as_u64().unwrap() > 1,
        "{}",
        preview["pages"]
    );
    assert!(preview["largest_page"].as_u64().unwrap() <= 64 * 1024);
    assert_eq!(preview["result"]["nodes"].as_array().unwrap().len(), 400);
    assert!(
        preview["result"]["confirm_token"].is_string(),
        "{}",
        preview["result"]
    );
    assert_eq!(wide["result"]["ok"], true);
    assert_eq!(
        wide["result"]["projection"]["nodes"]
            .as_array()
            .unwrap()
            .len(),
        400
    );

    assert!(call(10)["result"]["gates"].as_array().unwrap().len() > 3);
    assert_eq!(call(11)["result"]["status"], "ok");
    // What a manifest may say, in bounded-loops' keys, from the compiler's
    // own lists: an agent learns the kinds, policies and codes here.
    let capabilities = &call(11)["result"]["capabilities"];
    for key in [
        "node_kinds",
        "failure_policies",
        "effects",
        "budgets",
        "graph_run_states",
        "data_classes",
        "refusals",
        "evidence_contracts",
        "platform",
        "node_fields",
        "values",
    ] {
        assert!(capabilities.get(key).is_some(), "{key}: {capabilities}");
    }
    let loop_kind = capabilities["node_kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kind"] == "loop")
        .unwrap();
    assert_eq!(loop_kind["extra_required_fields"], json!(["loop_package"]));
    assert!(
        capabilities["node_fields"]["required"]
            .as_array()
            .unwrap()
            .contains(&json!("budget"))
    );
    assert!(
        capabilities["values"]["join_mode"]
            .as_array()
            .unwrap()
            .contains(&json!("all_successful"))
    );
    assert!(
        capabilities["refusals"]["before_a_run"]
            .as_array()
            .unwrap()
            .contains(&json!("outbox_without_approval"))
    );
    let codes = capabilities["refusals"]["codes"].as_array().unwrap();
    assert!(codes.contains(&json!("unknown_node_kind")), "{codes:?}");
    assert_eq!(
        capabilities["failure_policies"]["refused"],
        json!(["await_human", "continue"])
    );
    // A call without its required argument is not made.
    assert_eq!(call(12)["is_error"], true, "{}", call(12));

    // The loop packages: listed, linted and shown as bounded-loops does,
    // the same facts as the command line's, and nothing outside the
    // workspace.
    let listed = call(13)["result"]["loops"].as_array().unwrap().clone();
    let by_name = |dir: &str| {
        listed
            .iter()
            .find(|l| l["path"].as_str().unwrap().ends_with(dir))
            .cloned()
    };
    let records = by_name("/loops/records").expect("records is listed");
    assert_eq!(records["error"], Value::Null, "{records}");
    assert!(records["gate_kind"].is_string() && records["rung"].is_string());
    let broken = by_name("/loops/broken").expect("broken is listed");
    assert_eq!(broken["name"], "broken");
    assert_eq!(
        (&broken["rung"], &broken["gate_kind"]),
        (&json!("?"), &json!("?"))
    );
    assert!(broken["error"].is_string(), "{broken}");
    let lint = &call(14)["result"];
    assert_eq!(lint["all_passed"], false);
    let passed: Vec<&Value> = lint["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["passed"])
        .collect();
    assert_eq!(
        passed,
        [&json!(true), &json!(false), &json!(false), &json!(false)]
    );
    assert!(
        lint["results"][2]["errors"][0]
            .as_str()
            .unwrap()
            .ends_with("loops/nope' is not a directory"),
        "{lint}"
    );
    assert!(
        lint["results"][3]["errors"][0]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{lint}"
    );
    let shown = &call(15)["result"];
    assert_eq!(shown["status"], "ok");
    let cli = bl(&["--json", "show", "loops/records"], workspace.path());
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    assert_eq!(shown["loop"], cli, "the command line's own");
    assert_eq!(call(16)["result"]["status"], "error");
    assert_eq!(call(16)["result"]["error_type"], "ManifestError");
    assert!(
        call(17)["result"]["message"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{}",
        call(17)["result"]
    );

    // Resources and prompts by bounded-loops' names.
    let uris = |list: &str, key: &str| -> Vec<String> {
        report[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[key].as_str().unwrap().to_string())
            .collect()
    };
    let theirs = |list: &str| -> Vec<String> {
        let mut names: Vec<String> = upstream[list]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                v.as_str()
                    .map_or_else(|| v["name"].as_str().unwrap().to_string(), str::to_string)
            })
            .collect();
        names.sort();
        names
    };
    assert_eq!(uris("resources", "uri"), theirs("resources"));
    let mut templates = uris("resource_templates", "uriTemplate");
    templates.sort();
    assert_eq!(templates, theirs("resource_templates"));
    let mut prompts = uris("prompts", "name");
    prompts.sort();
    assert_eq!(prompts, theirs("prompts"));
    let contents = |i: usize| {
        call(i)["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{}", call(i)))
            .to_string()
    };
    assert!(
        contents(18).contains("| records-shell |"),
        "{}",
        contents(18)
    );
    let manifest: Value = serde_json::from_str(&contents(19)).unwrap();
    assert_eq!(manifest, cli, "bl show's own");
    let prompt = std::fs::read_to_string(workspace.path().join("loops/records/PROMPT.md")).unwrap();
    assert_eq!(contents(20), prompt);
    assert_eq!(report["calls"][21]["is_error"], true, "{}", call(21));
    let text = |i: usize| {
        call(i)["result"]["messages"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(
        text(22).ends_with("Loop directory: loops/records"),
        "{}",
        text(22)
    );
    assert!(text(22).contains("confirm=false"), "{}", text(22));
    assert!(
        text(23).ends_with("Loop name: release-notes. Gate kind: pytest."),
        "{}",
        text(23)
    );
    assert_eq!(
        report["calls"][24]["is_error"],
        true,
        "a missing argument: {}",
        call(24)
    );

    // The evidence tools: finished runs only, by name, never a path.
    let terminal = &call(25)["result"];
    assert_eq!(terminal["contract"], "bounded-loops.dev/slm-bridge/v1");
    let runs = terminal["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{terminal}");
    assert_eq!(runs[0]["run_ref"], "wide");
    assert_eq!(runs[0]["run_state"], "SUCCEEDED");
    assert!(runs[0]["terminal_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(call(26)["result"]["runs"], json!([]));
    let evidence = &call(27)["result"];
    assert_eq!(evidence["status"], "ok", "{evidence}");
    assert_eq!(evidence["evidence"]["outcome"], "SUCCEEDED");
    assert_eq!(evidence["evidence"]["nodes"].as_array().unwrap().len(), 400);
    assert_eq!(
        evidence["evidence"]["receipt"]["trust"],
        "local_hash_chain_only"
    );
    assert!(
        !evidence
            .to_string()
            .contains(workspace.path().to_str().unwrap()),
        "no path"
    );
    assert_eq!(
        call(28)["result"]["reason"],
        "this run is RUNNING, not finished"
    );
    assert_eq!(call(29)["result"]["reason"], "not a usable run reference");
    assert_eq!(
        call(30)["result"]["contract"],
        "bounded-loops.dev/slm-bridge/v2"
    );
    assert_eq!(call(30)["result"]["status"], "unavailable");
}

/// `bl_run` runs nothing without the preview's token: a token for other
/// arguments, none, a used one or another server's is refused; a path
/// outside the workspace is refused; the confirmed run goes on in the
/// background, `bl_runs` follows it, and it ends DONE.
#[test]
fn a_loop_runs_over_mcp_only_with_the_token_of_its_own_preview() {
    let Some(python) = client_python() else {
        return;
    };
    let workspace = workspace();
    let run = json!({"loop_dir": "loops/records", "gate_override": "true"});
    let with = |extra: Value| {
        let mut args = run.clone();
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };
    let calls = json!([
        ["bl_run", with(json!({"confirm": false}))],
        ["bl_run", with(json!({"confirm": true, "max_iterations": 5, "confirm_token": "$token:0"}))],
        ["bl_run", with(json!({"confirm": true}))],
        ["bl_run", with(json!({"confirm": true, "confirm_token": "$token:0"}))],
        ["bl_run", with(json!({"confirm": true, "confirm_token": "$token:0"}))],
        ["bl_run", {"loop_dir": "..", "confirm": false}],
        ["bl_runs", {"loop_dir": "loops/records"}],
        ["bl_runs", {"loop_dir": "loops/records"}, {"until": "DONE"}],
    ]);
    let report = drive(&python, workspace.path(), &calls);
    let call = |i: usize| report["calls"][i]["result"].clone();
    let preview = call(0);
    assert_eq!(preview["status"], "not_confirmed", "{preview}");
    assert_eq!(preview["preview"]["loop"], "records-shell");
    assert_eq!(preview["preview"]["gate"], "true");
    let token = preview["confirm_token"].as_str().unwrap().to_string();
    let (issued, tag) = token.split_once('.').unwrap();
    assert!(issued.parse::<u64>().is_ok() && tag.len() == 64, "{token}");
    assert!(
        call(1)["error"]
            .as_str()
            .unwrap()
            .starts_with("confirm_token does not match these arguments"),
        "{}",
        call(1)
    );
    assert!(
        call(2)["error"]
            .as_str()
            .unwrap()
            .starts_with("no confirm_token"),
        "{}",
        call(2)
    );
    let started = call(3);
    assert_eq!(started["status"], "started", "{started}");
    let run_id = started["run_id"].as_str().unwrap().to_string();
    assert!(
        call(4)["error"].as_str().unwrap().contains("already used"),
        "{}",
        call(4)
    );
    assert!(
        call(5)["message"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{}",
        call(5)
    );
    assert_eq!(call(6)["runs"][0]["run_id"], run_id.as_str(), "{}", call(6));
    // Only the confirmed call ran anything.
    let runs = workspace.path().join("loops/records/.bounded-loops/runs");
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 1);

    assert_eq!(call(7)["runs"][0]["status"], "DONE", "{}", call(7));
    // A new session: the run is listed from its records, and the old
    // server's token is not this one's.
    let calls = json!([
        ["bl_runs", {"loop_dir": "loops/records"}],
        ["bl_run", with(json!({"confirm": true, "confirm_token": token}))],
    ]);
    let report = drive(&python, workspace.path(), &calls);
    let runs = &report["calls"][0]["result"]["runs"];
    assert_eq!(runs[0]["status"], "DONE", "{runs}");
    assert_eq!(runs[0]["laps"], 1);
    assert!(
        report["calls"][1]["result"]["error"]
            .as_str()
            .unwrap()
            .starts_with("confirm_token does not match"),
        "{}",
        report["calls"][1]["result"]
    );

    // The confirmed calls that were refused made no run: they are in the
    // workspace's audit log (two mismatched or missing tokens, a used one,
    // another server's).
    let refused =
        std::fs::read_to_string(workspace.path().join(".bounded-loops/mcp-audit.jsonl")).unwrap();
    let tools: Vec<Value> = refused
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["payload"]["tool"].clone())
        .collect();
    assert_eq!(tools, vec![json!("bl_run"); 4], "{refused}");

    // A server whose operator shortened the tokens' lifetime to a second
    // refuses a token two seconds old as expired.
    let calls = json!([
        ["bl_run", with(json!({"confirm": false}))],
        ["$sleep", {"seconds": 2.5}],
        ["bl_run", with(json!({"confirm": true, "confirm_token": "$token:0"}))],
    ]);
    let report = drive_with(
        &python,
        workspace.path(),
        &calls,
        &[],
        &["--confirm-token-lifetime", "1"],
    );
    let expired = &report["calls"][2]["result"];
    assert_eq!(expired["status"], "not_confirmed", "{expired}");
    assert!(
        expired["error"]
            .as_str()
            .unwrap()
            .starts_with("confirm_token expired (1s limit)"),
        "{expired}"
    );

    // `bl verify` of the run checks the MCP audit log the confirmed call
    // left beside its ledger; an altered record fails it.
    let run_dir = runs_dir_of(&workspace, &run_id);
    let verified = bl(
        &["verify", "--json", run_dir.to_str().unwrap()],
        workspace.path(),
    );
    let said: Value = serde_json::from_slice(&verified.stdout).unwrap();
    let audit = said["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "mcp audit")
        .cloned();
    assert_eq!(
        audit.as_ref().map(|c| c["passed"].clone()),
        Some(json!(true)),
        "{said}"
    );
    assert!(
        audit.unwrap()["detail"]
            .as_str()
            .unwrap()
            .starts_with("1 MCP call(s) recorded")
    );
    let log = run_dir.join("mcp-audit.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, text.replacen("bl_run", "bl_ran", 1)).unwrap();
    let altered = bl(&["verify", run_dir.to_str().unwrap()], workspace.path());
    assert!(!altered.status.success(), "{altered:?}");
    assert!(
        String::from_utf8_lossy(&altered.stdout).contains("\u{2717} mcp audit"),
        "{altered:?}"
    );
}

fn runs_dir_of(workspace: &tempfile::TempDir, run_id: &str) -> PathBuf {
    workspace
        .path()
        .join("loops/records/.bounded-loops/runs")
        .join(run_id)
}

/// Only a person approves. Over MCP, `graph_approve` previews the
/// evidence, and confirmed it records nothing: it hands back a one-time
/// console link, even when the model sends a confirm token along. A person
/// opens the link in Chromium and approves; the next call reports that
/// decision, by a person, and the run has completed. With
/// `--agent-approvals`, the operator's choice, a decision is recorded as
/// the agent's, named by the client the session says it is.
#[test]
fn only_a_person_approves_on_the_link_graph_approve_hands_out() {
    let Some(python) = client_python() else {
        return;
    };
    if !crate::browser::available(true) {
        return;
    }
    let workspace = workspace();
    let approvals = workspace
        .path()
        .join(".bounded-loops/runs/first/approvals.json");
    let before = std::fs::read(&approvals).ok();
    let approve = json!({"run": "first", "node_id": "review", "decision": "approved"});
    let confirmed = json!({"run": "first", "node_id": "review", "decision": "approved",
        "confirm": true, "confirm_token": "$token:0"});
    let calls = json!([
        ["bl_run", {"loop_dir": "loops/records", "confirm": false}],
        ["graph_approve", approve],
        ["graph_approve", confirmed],
        ["graph_approve", {"run": "first", "node_id": "review", "decision": "maybe"}],
        ["graph_approve", {"run": "first", "node_id": "write-brief", "decision": "approved"}],
        ["graph_approve", approve, {"until": "by_a_person"}],
        // The decision is recorded before the console has driven the run on.
        ["graph_status", {"run": "first"}, {"until": "\"run_state\": \"SUCCEEDED\""}],
    ]);
    let script = workspace.path().join("calls.json");
    std::fs::write(&script, calls.to_string()).unwrap();
    let progress = workspace.path().join("progress.jsonl");
    // The server signs the decisions people make on its links.
    let key = workspace.path().join("reviewer.key");
    let made = bl(
        &[
            "keys",
            "generate",
            "--name",
            "reviewer",
            "--out",
            key.to_str().unwrap(),
        ],
        workspace.path(),
    );
    assert!(made.status.success(), "{made:?}");
    let extra = workspace.path().join("extra.json");
    std::fs::write(&extra, json!(["--key", key]).to_string()).unwrap();
    let client = Command::new(&python)
        .arg(repo_root().join("tests/mcp/client.py"))
        .arg(bl_binary())
        .arg(workspace.path())
        .arg(&script)
        .arg(&extra)
        .env("MCP_PROGRESS", &progress)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The link, as soon as the call that hands it out is made.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let link = loop {
        let made: Vec<Value> = std::fs::read_to_string(&progress)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if let Some(url) = made
            .get(2)
            .and_then(|c| c["result"]["console_url"].as_str())
        {
            break url.to_string();
        }
        assert!(std::time::Instant::now() < until, "no link came: {made:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(
        std::fs::read(&approvals).ok(),
        before,
        "the confirmed call recorded nothing"
    );
    // The person, in a browser: the evidence is in view; they approve.
    let (evidence, outcome) = crate::browser::Driver::start().drive(async |client| {
        use fantoccini::Locator;
        crate::browser::open(client, &link).await;
        let card = client
            .find(Locator::Css(r#"section.approval[data-node="review"]"#))
            .await
            .unwrap();
        let evidence = card.text().await.unwrap();
        (evidence, crate::browser::approve(client, "review").await)
    });
    assert!(
        evidence.contains("workspace/brief.md from write-brief"),
        "{evidence}"
    );
    assert_eq!(outcome, "approved: recorded. The run is now SUCCEEDED.");
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let call = |i: usize| report["calls"][i]["result"].clone();
    let preview = call(1);
    assert_eq!(preview["preview"], true, "{preview}");
    assert!(
        preview["request_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(
        preview["evidence"][0]["producer"], "write-brief",
        "{preview}"
    );
    let linked = call(2);
    assert_eq!(linked["needs_person"], true, "{linked}");
    assert_eq!(
        linked["refused"]["code"], "not_an_approval",
        "a token approves nothing: {linked}"
    );
    assert_eq!(linked["request_digest"], preview["request_digest"]);
    assert_eq!(call(3)["error"]["pointer"], "/decision", "{}", call(3));
    assert_eq!(call(4)["error"]["pointer"], "/node_id", "{}", call(4));
    let reported = call(5);
    assert_eq!(reported["by_a_person"], true, "{reported}");
    assert_eq!(reported["decided"]["decision"], "approved");
    assert_eq!(reported["decided"]["decided_by_source"], "os_user");
    assert_eq!(
        call(6)["projection"]["run_state"],
        "SUCCEEDED",
        "{}",
        call(6)
    );

    // The confirmed calls are in the run's audit log, and the link, a
    // person's capability, is not.
    let audit = std::fs::read_to_string(
        workspace
            .path()
            .join(".bounded-loops/runs/first/mcp-audit.jsonl"),
    )
    .unwrap();
    assert!(audit.contains("\"graph_approve\""), "{audit}");
    assert!(
        !audit.contains(&link) && !audit.contains("console_url"),
        "{audit}"
    );

    // The person's decision carries the server's signature, which
    // `bl verify --pubkey` holds.
    let recorded = std::fs::read_to_string(&approvals).unwrap();
    assert!(recorded.contains("\"signature\""), "{recorded}");
    let verified = bl(
        &[
            "verify",
            ".bounded-loops/runs/first",
            "--pubkey",
            workspace.path().join("reviewer.pub").to_str().unwrap(),
        ],
        workspace.path(),
    );
    // (The run's checkpoints are not the reviewer's to sign.)
    let said = String::from_utf8_lossy(&verified.stdout);
    assert!(
        said.contains("ok   approvals  1 decisions, 1 signatures hold"),
        "{said}"
    );

    // The operator's choice: agents decide, and it says so.
    let agents = tempfile::tempdir().unwrap();
    paused_first_graph(agents.path());
    let extra = agents.path().join("extra.json");
    std::fs::write(&extra, json!(["--agent-approvals"]).to_string()).unwrap();
    let decide = json!({"run": "first", "node_id": "review", "decision": "approved"});
    let mut confirmed = decide.clone();
    confirmed["confirm"] = json!(true);
    let mut with_token = confirmed.clone();
    with_token["confirm_token"] = json!("$token:1");
    let calls = json!([
        ["graph_approve", confirmed],
        ["graph_approve", decide],
        ["graph_approve", with_token],
        ["graph_status", {"run": "first"}],
    ]);
    std::fs::write(agents.path().join("calls.json"), calls.to_string()).unwrap();
    let out = Command::new(&python)
        .arg(repo_root().join("tests/mcp/client.py"))
        .arg(bl_binary())
        .arg(agents.path())
        .arg(agents.path().join("calls.json"))
        .arg(&extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Even an agent's decision needs its preview's token.
    let untokened = &report["calls"][0]["result"];
    assert_eq!(untokened["error"]["code"], "confirm_token", "{untokened}");
    let decided = &report["calls"][2]["result"];
    assert_eq!(decided["by_a_person"], false, "{decided}");
    assert_eq!(decided["decided"]["decided_by_source"], "agent");
    assert!(
        decided["decided"]["decided_by"]
            .as_str()
            .unwrap()
            .starts_with("mcp:"),
        "named by the session: {decided}"
    );
    assert_eq!(
        report["calls"][3]["result"]["projection"]["run_state"],
        "SUCCEEDED"
    );
    // Status and verify say an agent decided, not a person.
    let run = ".bounded-loops/runs/first";
    let status = bl(&["graph", "status", "--run", run], agents.path());
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(
        status.contains("decision  : review approved by mcp:")
            && status.contains("an agent (not a person)"),
        "{status}"
    );
    let verified = bl(&["verify", run], agents.path());
    let verified = String::from_utf8_lossy(&verified.stdout).into_owned();
    assert!(
        verified.contains("1 made by an agent, not a person"),
        "{verified}"
    );
    // And so does the arena, in the summary and in the gate's details.
    let made = bl(&["graph", "arena", "--run", run], agents.path());
    assert!(made.status.success(), "{made:?}");
    let page = agents.path().join(format!("{run}.arena.html"));
    let (summary, details) = crate::browser::Driver::start().drive(async |client| {
        use fantoccini::Locator;
        crate::browser::open(client, &format!("file://{}", page.display())).await;
        let text = async |id| crate::browser::text(client, id).await;
        client
            .find(Locator::Css(r#"g.node[data-node="review"]"#))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        (text("summary").await, text("details").await)
    });
    assert!(
        summary.ends_with("1 approval decision made by an agent, not a person"),
        "{summary}"
    );
    assert!(
        details.contains("approved by mcp:")
            && details.contains("an agent (not a person), round 0, unsigned"),
        "{details}"
    );
}

/// The graph tools that run something preview first. `graph_plan` gives a
/// slot-free graph's plan and refuses one whose nodes need connections,
/// as bounded-loops does; `graph_run` gives the plan and a token, runs
/// nothing without it, and with it starts the run in the background,
/// answering at once; `graph_status` follows it to its approval; and
/// `graph_resume` of that paused run resumes only with its own token, and
/// approves nothing.
#[test]
fn a_graph_runs_over_mcp_only_after_its_preview_and_waits_for_a_person() {
    let Some(python) = client_python() else {
        return;
    };
    let workspace = workspace();
    bl_e2e::copy_first_graph(workspace.path());
    let manifest = std::fs::read_to_string(workspace.path().join("graph.yaml")).unwrap();
    let mini = "api_version: bounded-loops.dev/graph/v1\ngraph_id: mini\nversion: 1.0.0\n\
        connection_slots: []\nnodes:\n\
        - {id: a, kind: research_claim, inputs: {}, outputs: {out: text}, effects: [], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}\n\
        - {id: ok, kind: approval, required_role: reviewer, inputs: {in: text}, outputs: {out: text}, effects: [read_only], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}\n\
        edges:\n- {from_node: a, from_port: out, to_node: ok, to_port: in}\n\
        policies: {data_class: internal, fail_mode: fail_closed}\n";
    // An outbox publish with no approval before it: a run would deny it.
    let unapproved = "api_version: bounded-loops.dev/graph/v1\ngraph_id: unapproved\nversion: 1.0.0\n\
        connection_slots: []\nnodes:\n\
        - {id: a, kind: research_claim, inputs: {}, outputs: {out: text}, effects: [], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}\n\
        - {id: ship, kind: publish, publication_policy: outbox, inputs: {in: text}, outputs: {}, effects: [workspace_write], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}\n\
        edges:\n- {from_node: a, from_port: out, to_node: ship, to_port: in}\n\
        policies: {data_class: internal, fail_mode: fail_closed}\n";
    // A tool no run can start.
    let no_such_tool = mini.replace(
        "{id: a, kind: research_claim,",
        "{id: a, kind: tool, tool_ref: nonsense,",
    );
    assert_ne!(no_such_tool, mini);
    // A tier no machine of bl's provides.
    let elsewhere = mini.replacen(
        "effects: [], isolation: workspace_only",
        "effects: [], isolation: customer_managed_worker",
        1,
    );
    assert_ne!(elsewhere, mini);
    let run = json!({"manifest_yaml": manifest, "connections": "connections.json",
        "inputs": "inputs.json", "recorded": "replies.json"});
    let with = |extra: Value| {
        let mut args = run.clone();
        args.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        args
    };
    let calls = json!([
        ["graph_plan", {"manifest_yaml": manifest}],
        ["graph_plan", {"manifest_yaml": mini}],
        ["graph_run", run],
        ["graph_run", with(json!({"confirm": true}))],
        ["graph_run", with(json!({"confirm": true, "inputs": "replies.json", "confirm_token": "$token:2"}))],
        ["graph_run", with(json!({"confirm": true, "confirm_token": "$token:2"}))],
        ["graph_status", {"run": "$run:5"}, {"until": "AWAITING_APPROVAL"}],
        ["graph_resume", {"run": "$run:5"}],
        ["graph_resume", {"run": "$run:5", "confirm": true, "confirm_token": "$token:7"}],
        ["graph_resume", {"run": "$run:5", "confirm": true, "confirm_token": "$token:7"}],
        ["graph_run", {"manifest_yaml": manifest, "connections": "/etc/passwd"}],
        ["graph_lint", {"manifest_yaml": unapproved}],
        ["graph_run", {"manifest_yaml": unapproved}],
        ["graph_run", {"manifest_yaml": no_such_tool}],
        ["graph_run", {"manifest_yaml": elsewhere}],
        ["graph_run", {"manifest_yaml": manifest, "connections": "nonexistent.json"}],
        ["graph_run", with(json!({"inputs": "noprompts.json"}))],
        ["graph_run", with(json!({"inputs": "noprompts.json", "confirm": true, "confirm_token": "$token:16"}))],
    ]);
    std::fs::write(workspace.path().join("noprompts.json"), "{}").unwrap();
    let before: Vec<_> = std::fs::read_dir(workspace.path().join(".bounded-loops/runs"))
        .unwrap()
        .collect();
    let report = drive(&python, workspace.path(), &calls);
    let call = |i: usize| report["calls"][i]["result"].clone();
    let refused = call(0);
    assert_eq!(
        refused["refusal"]["code"], "no_admitted_connection",
        "{refused}"
    );
    let plan = call(1);
    assert_eq!(plan["ok"], true, "{plan}");
    assert_eq!(plan["pauses_at"], json!(["ok"]));
    assert!(plan["plan_id"].as_str().unwrap().starts_with("sha256:"));
    let preview = call(2);
    assert_eq!(preview["executed"], false, "{preview}");
    assert_eq!(preview["pauses_at"], json!(["review"]));
    assert!(preview["confirm_token"].is_string());
    assert!(
        call(3)["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("no confirm_token"),
        "{}",
        call(3)
    );
    assert!(
        call(4)["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("confirm_token does not match"),
        "{}",
        call(4)
    );
    let started = call(5);
    assert_eq!(started["executed"], true, "{started}");
    assert_eq!(started["plan_id"], preview["plan_id"]);
    let name = started["run"].as_str().unwrap();
    let status = call(6);
    let review = status["projection"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == "review")
        .unwrap()
        .clone();
    assert_eq!(review["state"], "AWAITING_APPROVAL", "{status}");
    let resume = call(7);
    assert_eq!(resume["preview"], true, "{resume}");
    let resumed = call(8);
    assert_eq!(resumed["resumed"], true, "{resumed}");
    assert_eq!(
        resumed["state"], "AWAITING_APPROVAL",
        "approves nothing: {resumed}"
    );
    assert!(
        call(9)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already used"),
        "{}",
        call(9)
    );
    // What a run would deny: lint warns of it at its place, and the
    // preview refuses it, handing out no token.
    let linted = call(11);
    assert_eq!(linted["ok"], true, "{linted}");
    assert_eq!(
        linted["warnings"][0]["rule"], "outbox_without_approval",
        "{linted}"
    );
    assert_eq!(
        linted["warnings"][0]["pointer"],
        "/nodes/1/publication_policy"
    );
    let denied = call(12);
    assert_eq!(denied["ok"], false, "{denied}");
    assert_eq!(
        denied["error"]["code"], "outbox_without_approval",
        "{denied}"
    );
    assert!(denied.get("confirm_token").is_none(), "{denied}");
    let refused = call(13);
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["error"]["code"], "graph_run_refused", "{refused}");
    assert_eq!(
        refused["error"]["pointer"], "/nodes/0/tool_ref",
        "{refused}"
    );
    assert!(refused.get("confirm_token").is_none(), "{refused}");
    let refused = call(14);
    assert_eq!(
        refused["error"]["pointer"], "/nodes/0/isolation",
        "{refused}"
    );
    let missing = call(15);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'nonexistent.json' does not exist: connections names a file"),
        "{missing}"
    );
    // A confirmed run its runtime refuses before it begins (no prompts)
    // leaves nothing behind: no run, and not the manifest kept for one.
    let unprompted = call(17);
    assert_eq!(unprompted["ok"], false, "{unprompted}");
    assert!(
        unprompted["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no prompt for agent node"),
        "{unprompted}"
    );
    let kept: Vec<_> = std::fs::read_dir(workspace.path().join(".bounded-loops/mcp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        kept,
        [format!("{name}.yaml")],
        "only the run that began keeps its manifest"
    );
    // Refused in the graph tools' shape, naming the argument.
    assert_eq!(call(10)["ok"], false, "{}", call(10));
    assert_eq!(call(10)["error"]["pointer"], "/connections", "{}", call(10));
    assert!(
        call(10)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{}",
        call(10)
    );
    // Only the confirmed call made a run, and nothing decided its approval.
    let after: Vec<_> = std::fs::read_dir(workspace.path().join(".bounded-loops/runs"))
        .unwrap()
        .collect();
    assert_eq!(after.len(), before.len() + 1);
    let run = workspace.path().join(".bounded-loops/runs").join(name);
    assert!(!run.join("approvals.json").exists());
    let verified = bl(&["verify", run.to_str().unwrap()], workspace.path());
    assert!(verified.status.success(), "{verified:?}");

    // Every confirmed call on the run is in its MCP audit log, the refused
    // one too, and each answer proves its line is there.
    let log = std::fs::read_to_string(run.join("mcp-audit.jsonl")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    let tools: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["payload"]["tool"].clone())
        .collect();
    assert_eq!(
        tools,
        [
            json!("graph_run"),
            json!("graph_resume"),
            json!("graph_resume")
        ]
    );
    let first: Value = serde_json::from_str(lines[0]).unwrap();
    assert!(
        first["payload"]["arguments"]["manifest_yaml"]["sha256"].is_string(),
        "a manifest is kept by its digest: {first}"
    );
    assert!(
        first["payload"]["client"]
            .as_str()
            .unwrap()
            .starts_with("mcp:")
    );
    let hash = |hex_text: &Value| -> [u8; 32] {
        hex::decode(hex_text.as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap()
    };
    for (call_at, line_at) in [(5, 0), (8, 1), (9, 2)] {
        let proof = &report["calls"][call_at]["meta"]["bl/audit"];
        assert_eq!(proof["sequence"], line_at + 1, "{proof}");
        let leaf = bl_store::merkle::leaf_hash(lines[line_at].as_bytes());
        assert_eq!(leaf, hash(&proof["leaf"]));
        let path: Vec<[u8; 32]> = proof["proof"]
            .as_array()
            .unwrap()
            .iter()
            .map(hash)
            .collect();
        assert!(bl_store::merkle::verify_inclusion(
            &leaf,
            line_at,
            proof["size"].as_u64().unwrap() as usize,
            &path,
            &hash(&proof["root"])
        ));
    }
    let said = String::from_utf8_lossy(&verified.stdout).into_owned();
    assert!(said.contains("3 MCP call(s) recorded"), "{said}");
    // An altered record fails verification.
    std::fs::write(
        run.join("mcp-audit.jsonl"),
        log.replacen("graph_resume", "graph_resumf", 1),
    )
    .unwrap();
    let altered = bl(&["verify", run.to_str().unwrap()], workspace.path());
    assert!(!altered.status.success(), "{altered:?}");
}

/// `bl mcp --http`: the same tools over Streamable HTTP, on loopback only,
/// behind a bearer token. The PyPI client (protocol 2025-11-25, with its
/// session) lints and reads a run with the token; a request without it,
/// or with another, is refused before MCP; a foreign Host is refused; a
/// client of the stateless 2026-07-28 revision asks `server/discover`
/// with no session and is answered; and a non-loopback address is refused
/// before anything listens.
#[test]
fn over_http_it_needs_its_token_and_speaks_both_revisions() {
    let Some(python) = client_python() else {
        return;
    };
    let workspace = workspace();
    let token_file = workspace.path().join("mcp.token");
    let (mut server, url) = bl_e2e::serving(
        Command::new(bl_binary())
            .args(["mcp", "--http", "127.0.0.1:0", "--token-file"])
            .arg(&token_file)
            .arg("--workspace")
            .arg(workspace.path()),
        "mcp",
    );
    let token = std::fs::read_to_string(&token_file).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(token.len(), 64);

    let calls = json!([
        ["graph_runs", {}],
        ["graph_status", {"run": "first"}],
    ]);
    std::fs::write(workspace.path().join("calls.json"), calls.to_string()).unwrap();
    let over_http = |token: &str| {
        Command::new(&python)
            .arg(repo_root().join("tests/mcp/client.py"))
            .arg(bl_binary())
            .arg(workspace.path())
            .arg(workspace.path().join("calls.json"))
            .env("MCP_URL", &url)
            .env("MCP_TOKEN", token)
            .output()
            .unwrap()
    };
    let out = over_http(&token);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["protocol_version"], "2025-11-25");
    assert_eq!(
        report["calls"][0]["result"]["runs"],
        json!(["first", "wide"])
    );
    assert_eq!(report["calls"][1]["result"]["ok"], true);
    assert!(
        !over_http(&"0".repeat(64)).status.success(),
        "another token"
    );

    let initialize = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let accept = "Accept: application/json, text/event-stream";
    let json_body = "Content-Type: application/json";
    let bearer = format!("Authorization: Bearer {token}");
    let (status, _) = bl_e2e::http_request(&url, "POST", "", &[accept, json_body], initialize);
    assert!(status.contains("401"), "no token: {status}");
    let (status, _) = bl_e2e::http_request(
        &url,
        "POST",
        "",
        &[accept, json_body, "Authorization: Bearer nope"],
        initialize,
    );
    assert!(status.contains("401"), "a wrong token: {status}");
    // A page elsewhere that rebinds a name of its own to 127.0.0.1.
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    let rest = url.strip_prefix("http://").unwrap();
    let path = &rest[rest.find('/').unwrap()..];
    let mut stream = std::net::TcpStream::connect(&rest[..rest.find('/').unwrap()]).unwrap();
    use std::io::{Read, Write};
    write!(
        stream,
        "POST {path} HTTP/1.0\r\nHost: evil.example:{port}\r\n{accept}\r\n{json_body}\r\n{bearer}\r\nContent-Length: {}\r\n\r\n",
        initialize.len()
    )
    .unwrap();
    stream.write_all(initialize).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.0 403") || answer.starts_with("HTTP/1.1 403"),
        "{answer}"
    );

    // The stateless revision: discovery with no session at all.
    let discover = br#"{"jsonrpc":"2.0","id":7,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let (status, body) = bl_e2e::http_request(
        &url,
        "POST",
        "",
        &[
            accept,
            json_body,
            &bearer,
            "MCP-Protocol-Version: 2026-07-28",
            "Mcp-Method: server/discover",
        ],
        discover,
    );
    assert!(status.contains("200"), "{status}: {body}");
    assert!(
        body.contains("\"id\":7") && body.contains("\"name\":\"bl\""),
        "{body}"
    );
    assert!(body.contains("2026-07-28"), "{body}");

    let _ = server.kill();
    let _ = server.wait();
    let refused = bl(&["mcp", "--http", "0.0.0.0:0"], workspace.path());
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("not a loopback address"),
        "{refused:?}"
    );
}

/// The tools that find, audit and draft: the catalog, search and audit of
/// the workspace's loop packages (bl's example loops, the ones bounded-loops
/// was recorded with, so its answers are the reference), and composing,
/// interviewing and configuring a graph, where only a confirmed call with
/// its preview's token writes the saved graph.
#[test]
fn an_agent_finds_audits_and_drafts_loops_and_graphs_over_mcp() {
    let Some(python) = client_python() else {
        return;
    };
    let workspace = tempfile::tempdir().unwrap();
    for name in [
        "config-contract",
        "order-schema",
        "readme-sections",
        "records-shell",
        "tests-green",
    ] {
        bl_e2e::copy_tree(
            &repo_root().join("examples/loops").join(name),
            &workspace.path().join("loops").join(name),
        );
    }
    let broken = workspace.path().join("loops/broken-loop");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("loop.yaml"), "name: broken-loop\n").unwrap();
    let graphs = workspace.path().join(".bounded-loops/graphs");
    std::fs::create_dir_all(&graphs).unwrap();
    let demo = "api_version: bounded-loops.dev/graph/v1\ngraph_id: demo\nversion: 1.0.0\n\
        connection_slots: []\nnodes:\n\
        - {id: a, kind: research_claim, inputs: {}, outputs: {out: text}, effects: [], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}\n\
        - {id: ok, kind: approval, inputs: {in: text}, outputs: {out: text}, effects: [read_only], isolation: workspace_only, budget: {max_attempts: 1, max_wallclock_s: 300}}\n\
        edges:\n- {from_node: a, from_port: out, to_node: ok, to_port: in}\npolicies: {}\n";
    std::fs::write(graphs.join("demo.yaml"), demo).unwrap();
    let first = std::fs::read_to_string(repo_root().join("examples/graphs/first-graph/graph.yaml"))
        .unwrap();
    let role = json!({"pointer": "/nodes/1/required_role", "value": "reviewer"});
    let answers = json!([role,
        {"pointer": "/policies/data_class", "value": "internal"},
        {"pointer": "/policies/fail_mode", "value": "fail_closed"}]);
    let calls = json!([
        ["bl_catalog", {}],
        ["bl_catalog", {"role": "BACKEND"}],
        ["bl_catalog", {"keyless": false}],
        ["bl_search_loops", {"task_description": "make the failing pytest tests pass", "limit": 3}],
        ["bl_search_loops", {"task_description": "json schema order", "limit": 0}],
        ["bl_search_loops", {"task_description": "qqq zzzz"}],
        ["bl_audit_loops", {"dirs": ["loops/order-schema"]}],
        ["bl_audit_loops", {}],
        ["bl_audit_loops", {"dirs": ["/etc"]}],
        ["graph_compose", {"graph_id": "demo", "nodes": [{"id": "a", "kind": "research_claim"}]}],
        ["graph_compose", {"graph_id": "g", "nodes": [{"id": "check", "kind": "loop"}]}],
        ["graph_compose", {"graph_id": "g", "nodes": [{"id": "x", "kind": "nope"}]}],
        ["graph_interview", {}],
        ["graph_interview", {"manifest_yaml": first}],
        ["graph_interview", {"name": "demo"}],
        ["graph_interview", {"name": "../demo"}],
        ["graph_configure", {"name": "demo", "changes": [{"pointer": "/nodes/0/isolation", "value": "bogus"}]}],
        ["graph_configure", {"name": "demo", "changes": answers}],
        ["graph_configure", {"name": "demo", "changes": answers, "confirm": true}],
        ["graph_configure", {"name": "demo", "changes": answers, "confirm": true, "confirm_token": "$token:17"}],
        ["graph_configure", {"name": "demo", "changes": answers, "confirm": true, "confirm_token": "$token:17"}],
        ["graph_configure", {"name": "demo", "changes": [{"pointer": "/nodes/9/id", "value": "x"}]}],
        ["graph_interview", {"name": "demo"}],
    ]);
    let report = drive(&python, workspace.path(), &calls);
    let call = |i: usize| report["calls"][i]["result"].clone();
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap().to_string())
            .collect()
    };

    let catalog = call(0);
    assert_eq!(catalog["total_discovered"], 6, "{catalog}");
    assert_eq!(catalog["unreadable"], json!(["broken-loop"]));
    let records = catalog["loops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "records-shell")
        .unwrap()
        .clone();
    assert_eq!(records["keyless"], true);
    assert_eq!(records["runner"], "shell");
    let shown = bl(&["show", "--json", "loops/records-shell"], workspace.path());
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(
        records["loop_package"], shown["content_hash"],
        "the digest a loop node pins"
    );
    assert_eq!(
        names(&call(1)["loops"]),
        ["broken-loop", "order-schema", "tests-green"],
        "{}",
        call(1)
    );
    assert_eq!(
        names(&call(2)["loops"]),
        ["broken-loop"],
        "unreadable ones pass every filter"
    );

    // The rankings bounded-loops gave for the same packages.
    let found = call(3);
    assert_eq!(
        names(&found["candidates"]),
        ["tests-green", "config-contract"],
        "{found}"
    );
    assert_eq!(found["candidates"][0]["score"], 11);
    assert_eq!(found["candidates"][1]["score"], 1);
    assert_eq!(
        found["query_terms"],
        json!(["failing", "pass", "pytest", "tests"])
    );
    let found = call(4);
    assert_eq!(
        (found["total_scored"].clone(), found["returned"].clone()),
        (json!(3), json!(1)),
        "{found}"
    );
    assert_eq!(found["candidates"][0]["name"], "order-schema");
    assert_eq!(found["candidates"][0]["score"], 13);
    assert!(found["candidates"][0].get("loop_package").is_none());
    assert!(call(5)["no_match_means"].is_string());
    assert_eq!(call(3)["no_match_means"], Value::Null);

    let audit = call(6);
    assert_eq!(
        audit,
        json!({"results": [{"path": std::fs::canonicalize(workspace.path().join("loops/order-schema")).unwrap(),
            "name": "order-schema", "passed": false, "errors": ["missing required file: README.md"],
            "warnings": ["PROMPT.md lacks explicit guardrail/forbidden-action language"]}], "all_passed": false})
    );
    let audit = call(7);
    assert_eq!(audit["results"].as_array().unwrap().len(), 6, "{audit}");
    let errors = &audit["results"][0]["errors"];
    assert_eq!(audit["results"][0]["name"], "broken-loop");
    assert!(
        errors
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("manifest error: ")),
        "{errors}"
    );
    assert!(
        call(8)["message"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{}",
        call(8)
    );

    // Compose: bounded-loops' own draft, value for value (bl's YAML quotes
    // and indents its own way).
    let composed = call(9);
    assert_eq!(composed["ok"], true, "{composed}");
    let yaml = |text: &str| {
        bl_graph::parse_document(text, bl_graph::Format::Yaml)
            .unwrap()
            .to_json()
    };
    assert_eq!(
        yaml(composed["manifest"].as_str().unwrap()),
        yaml(
            "api_version: bounded-loops.dev/graph/v1\ngraph_id: demo\nversion: 1.0.0\nconnection_slots: []\nnodes:\n- id: a\n  kind: research_claim\n  inputs: {}\n  outputs: {}\n  effects: []\n  isolation: workspace_only\n  budget:\n    max_attempts: 1\n    max_wallclock_s: 300\nedges: []\npolicies:\n  data_class: internal\n  fail_mode: fail_closed\n  repair_budget: 0\n"
        )
    );
    assert!(
        composed["defaults_applied"]
            .as_str()
            .unwrap()
            .contains("NO declared effects")
    );
    let gap = call(10);
    assert_eq!(gap["gaps"][0]["gap"], "no loop_package digest", "{gap}");
    assert_eq!(gap["refusal"]["code"], "missing_field", "{gap}");
    assert_eq!(call(11)["refusal"]["pointer"], "/nodes/0/kind");
    assert_eq!(call(11)["refusal"]["code"], "unknown_node_kind");

    // Interview: what a person must answer.
    assert_eq!(
        call(12)["error"],
        "pass either a saved graph name or manifest_yaml"
    );
    assert_eq!(
        call(13)["questions"],
        json!([]),
        "the first graph states every field: {}",
        call(13)
    );
    let asked = call(14);
    assert_eq!(asked["must_ask"], json!(["required_role:ok"]), "{asked}");
    let keys: Vec<&str> = asked["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        keys,
        ["required_role:ok", "data_class", "fail_mode"],
        "{asked}"
    );
    assert_eq!(asked["questions"][0]["pointer"], "/nodes/1/required_role");
    assert!(
        call(15)["error"]
            .as_str()
            .unwrap()
            .contains("no paths or dots")
    );

    // Configure: previewed, then written only with the preview's token.
    let refused = call(16);
    assert_eq!(refused["ok"], false);
    assert_eq!(refused["refusal"]["code"], "enum", "{refused}");
    assert_eq!(refused["applied"][0]["from"], "workspace_only");
    let preview = call(17);
    assert_eq!(preview["written"], false, "{preview}");
    assert_eq!(
        preview["applied"][0],
        json!({"pointer": "/nodes/1/required_role", "from": null, "to": "reviewer"})
    );
    assert!(
        preview["manifest"]
            .as_str()
            .unwrap()
            .contains("required_role: reviewer")
    );
    assert!(
        call(18)["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("no confirm_token"),
        "{}",
        call(18)
    );
    let written = call(19);
    assert_eq!(written["written"], true, "{written}");
    // Its token is spent, and bound to the file as it was before.
    assert!(
        call(20)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Preview again"),
        "{}",
        call(20)
    );
    assert_eq!(
        call(21)["error"],
        "/nodes/9/id: index 9 is past the end of a 2-item list"
    );
    assert_eq!(
        call(22)["must_ask"],
        json!([]),
        "the answer is in the saved graph"
    );
    let saved = std::fs::read_to_string(graphs.join("demo.yaml")).unwrap();
    assert!(saved.contains("required_role: reviewer"), "{saved}");
    // Each confirmed call is recorded in the workspace's audit log, which
    // bl verify checks.
    let audit = workspace.path().join(".bounded-loops/mcp-audit.jsonl");
    let log = std::fs::read_to_string(&audit).unwrap();
    let verified = bl(&["verify", audit.to_str().unwrap()], workspace.path());
    assert!(verified.status.success(), "{verified:?}");
    assert!(
        String::from_utf8_lossy(&verified.stdout).contains("ok   chain      3 events"),
        "{verified:?}"
    );
    assert_eq!(
        log.lines().count(),
        3,
        "each confirmed call is recorded: {log}"
    );

    // A workspace with no packages is offered bl's own catalog, unpacked
    // once in the user's cache.
    let empty = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let calls = json!([
        ["bl_catalog", {}],
        ["bl_search_loops", {"task_description": "json schema order"}],
    ]);
    let report = drive_with(
        &python,
        empty.path(),
        &calls,
        &[("XDG_CACHE_HOME", cache.path())],
        &[],
    );
    let catalog = &report["calls"][0]["result"];
    assert_eq!(
        names(&catalog["loops"]),
        [
            "config-contract",
            "order-schema",
            "readme-sections",
            "records-shell",
            "tests-green"
        ],
        "{catalog}"
    );
    assert!(
        catalog["hint"]
            .as_str()
            .unwrap()
            .contains("bl's own catalog")
    );
    assert!(
        catalog["loops"][0]["path"]
            .as_str()
            .unwrap()
            .starts_with(cache.path().to_str().unwrap())
    );
    assert_eq!(
        report["calls"][1]["result"]["candidates"][0]["name"],
        "order-schema"
    );
}
