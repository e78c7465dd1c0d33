//! The graph executor beyond the recorded corpus: parallel nodes, a
//! controller killed with SIGKILL at random points and resumed, and a
//! local_cli node caged by bubblewrap (process_restricted: no network).

use bl_store::RunDir;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use bl_e2e::{bl_binary, copy_tree, repo_root};
use serde_json::{Value, json};

/// A fan-out graph: `a`, then `b1..bN` in parallel, a join `j`, and a
/// publish node `pub` that fires once.
fn fan_out(n: usize, isolation: &str) -> (Value, Value) {
    let node = |id: &str, inputs: Value| {
        json!({"id": id, "kind": "research_claim", "inputs": inputs, "outputs": {"out": "text"},
               "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": ["read_only"],
               "isolation": isolation, "connection_slot": format!("slot-{id}")})
    };
    let mut nodes = vec![node("a", json!({}))];
    let mut edges = Vec::new();
    let mut join_inputs = serde_json::Map::new();
    for i in 1..=n {
        let id = format!("b{i}");
        nodes.push(node(&id, json!({"in_a": "text"})));
        edges.push(json!({"from_node": "a", "from_port": "out", "to_node": id, "to_port": "in_a"}));
        edges.push(json!({"from_node": id, "from_port": "out", "to_node": "j", "to_port": format!("in_{id}")}));
        join_inputs.insert(format!("in_{id}"), json!("text"));
    }
    nodes.push(
        json!({"id": "j", "kind": "join", "inputs": join_inputs, "outputs": {"out": "text"},
        "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": ["read_only"],
        "isolation": "workspace_only", "mode": "all_successful"}),
    );
    nodes.push(json!({"id": "pub", "kind": "publish", "inputs": {"in_j": "text"}, "outputs": {"out": "text"},
        "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": ["workspace_write"],
        "isolation": "workspace_only", "publication_policy": "local-ledger"}));
    edges.push(json!({"from_node": "j", "from_port": "out", "to_node": "pub", "to_port": "in_j"}));
    let slots = bl_e2e::slots_of(&nodes);
    let connections: Vec<Value> = slots
        .iter()
        .map(|s| bl_e2e::connection(s["id"].as_str().unwrap(), json!({"isolation": isolation})))
        .collect();
    let manifest = json!({"api_version": "bounded-loops.dev/graph/v1", "graph_id": "fan-out",
        "version": "1.0.0", "nodes": nodes, "edges": edges, "connection_slots": slots,
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"}});
    (manifest, Value::Array(connections))
}

/// A case directory with the manifest, connections, inputs and the fake
/// agent CLIs of the recorded corpus.
fn case_dir(root: &Path, n: usize, isolation: &str, prompt: &str) -> PathBuf {
    let dir = root.to_path_buf();
    copy_tree(
        &repo_root().join("tests/corpus/graph-runs/chain_succeeds/fake-bin"),
        &dir.join("fake-bin"),
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let (manifest, connections) = fan_out(n, isolation);
    let mut inputs = serde_json::Map::new();
    inputs.insert("a".into(), json!("ok"));
    for i in 1..=n {
        inputs.insert(format!("b{i}"), json!(prompt));
    }
    let write = |name: &str, v: &Value| {
        std::fs::write(dir.join(name), serde_json::to_vec_pretty(v).unwrap()).unwrap()
    };
    write("manifest.json", &manifest);
    write("connections.json", &connections);
    write("inputs.json", &Value::Object(inputs));
    dir
}

fn bl_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .env("PATH", bl_e2e::path_with_fakes(dir))
        .output()
        .unwrap()
}

fn run_args<'a>(out: &'a str, concurrency: &'a str) -> Vec<&'a str> {
    vec![
        "graph",
        "run",
        "--execute",
        "manifest.json",
        "--connections",
        "connections.json",
        "--inputs",
        "inputs.json",
        "--out",
        out,
        "--concurrency",
        concurrency,
    ]
}

fn events(run: &Path) -> Vec<Value> {
    bl_e2e::json_lines(&run.join(RunDir::EVENTS))
}

fn resume_args<'a>(run: &'a str, concurrency: &'a str) -> Vec<&'a str> {
    vec![
        "graph",
        "resume",
        "--run",
        run,
        "--inputs",
        "inputs.json",
        "--concurrency",
        concurrency,
    ]
}

fn final_states(dir: &Path, run: &str) -> Value {
    let out = bl_in(dir, &["graph", "status", "--run", run, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes: serde_json::Map<String, Value> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["node_id"].as_str().unwrap().to_string(),
                n["state"].clone(),
            )
        })
        .collect();
    json!({"run_state": status["run_state"], "nodes": nodes})
}

#[test]
fn ready_nodes_run_in_parallel_and_end_as_a_sequential_run_does() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 6, "workspace_only", "sleep:0.5");
    let one = bl_in(&dir, &run_args("one", "1"));
    assert_eq!(
        one.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&one.stderr)
    );
    let eight = bl_in(&dir, &run_args("eight", "8"));
    assert_eq!(
        eight.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&eight.stderr)
    );
    assert_eq!(final_states(&dir, "one"), final_states(&dir, "eight"));

    // The same events, in another order: keys and payloads are per node.
    let set = |run: &str| {
        let mut v: Vec<String> = events(&dir.join(run))
            .iter()
            .map(|e| format!("{} {}", e["idempotency_key"], e["payload"]))
            .collect();
        v.sort();
        v
    };
    assert_eq!(set("one"), set("eight"));

    // Parallel: at concurrency 8 every b-node is running before any
    // returns; at 1, each returns before the next runs.
    let running_before_first_spend = |run: &str| {
        let all = events(&dir.join(run));
        let a_done = all
            .iter()
            .position(|e| e["event_type"] == "node.succeeded" && e["payload"]["node_id"] == "a")
            .unwrap();
        all[a_done + 1..]
            .iter()
            .take_while(|e| e["event_type"] != "node.spend")
            .filter(|e| e["event_type"] == "node.running")
            .count()
    };
    assert_eq!(running_before_first_spend("eight"), 6);
    assert_eq!(running_before_first_spend("one"), 1);

    // The publish fired once, through the ledger.
    let ledger: Value =
        serde_json::from_slice(&std::fs::read(dir.join("eight").join(RunDir::LEDGER)).unwrap())
            .unwrap();
    assert_eq!(ledger.as_object().unwrap().len(), 1);
    let verify = bl_in(&dir, &["verify", "eight"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// A small deterministic generator, so a failure names a reproducible delay.
/// Without `--concurrency`, as many nodes run at once as the machine has
/// cores: read from the log, where a node is in flight from its
/// `node.running` to its end.
#[test]
fn by_default_the_cores_plus_four_nodes_run_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 12, "workspace_only", "sleep:0.3");
    let mut args = run_args("run", "1");
    args.truncate(args.len() - 2);
    let out = bl_in(&dir, &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut in_flight = 0i32;
    let mut most = 0;
    for e in events(&dir.join("run")) {
        match e["event_type"].as_str().unwrap() {
            "node.running" => in_flight += 1,
            "node.succeeded" | "node.failed" => in_flight -= 1,
            _ => {}
        }
        most = most.max(in_flight);
    }
    let cores = std::thread::available_parallelism().unwrap().get() as i32;
    assert_eq!(
        most,
        (cores + 4).min(12),
        "twelve ready nodes, {cores} cores"
    );
}

/// `count` pseudo-random delays below `limit_ms`.
fn delays(count: usize, limit_ms: u64) -> Vec<u64> {
    bl_e2e::pseudo_random(count, limit_ms, 0x9e37_79b9_7f4a_7c15)
}

#[test]
fn a_controller_killed_at_random_points_resumes_to_the_same_end() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 4, "workspace_only", "sleep:0.2");
    // The kill window is the fastest of three whole runs: one run slowed by
    // a busy moment (other tests share the machine) would stretch the
    // window past the run, and most kills would land after it ended.
    let mut took = u64::MAX;
    for timing in ["reference", "timing-1", "timing-2"] {
        let began = std::time::Instant::now();
        let run = bl_in(&dir, &run_args(timing, "2"));
        took = took.min(began.elapsed().as_millis() as u64);
        assert_eq!(run.status.code(), Some(0));
    }
    let want = final_states(&dir, "reference");
    // a, b1..b4 call the agent CLI; the join and the publish node do not.
    let worker_nodes = 5;
    let calls = dir.join("state/calls.jsonl");
    let mut interrupted = 0;
    // Every kill lands while a run like the reference would still be going.
    for (i, delay) in delays(50, took * 9 / 10).into_iter().enumerate() {
        let run = format!("killed-{i}");
        std::fs::write(&calls, "").unwrap();
        let mut child = Command::new(bl_binary())
            .args(run_args(&run, "2"))
            .current_dir(&dir)
            .env("PATH", bl_e2e::path_with_fakes(&dir))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let run_dir = dir.join(&run);
        if !run_dir.join(RunDir::META).exists() || !run_dir.join(RunDir::EVENTS).exists() {
            // Killed before the run began: nothing to resume, start again.
            interrupted += 1;
            let _ = std::fs::remove_dir_all(&run_dir);
            let again = bl_in(&dir, &run_args(&run, "2"));
            assert_eq!(
                again.status.code(),
                Some(0),
                "run {i}: {}",
                String::from_utf8_lossy(&again.stderr)
            );
        } else if !bl_e2e::log_text(&run_dir.join(RunDir::EVENTS)).contains("\"run.succeeded\"") {
            interrupted += 1;
        }
        let ended = bl_e2e::log_text(&run_dir.join(RunDir::EVENTS)).contains("\"run.succeeded\"");
        let out = bl_in(&dir, &resume_args(&run, "2"));
        // A run that had ended before the kill is not resumed: refused.
        assert_eq!(
            out.status.code(),
            Some(if ended { 2 } else { 0 }),
            "run {i} (killed after {delay} ms) does not resume: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            final_states(&dir, &run),
            want,
            "run {i}, killed after {delay} ms"
        );
        let verify = bl_in(&dir, &["verify", &run]);
        assert!(
            verify.status.success(),
            "run {i}: {}",
            String::from_utf8_lossy(&verify.stdout)
        );
        // No effect fired twice, and no node succeeded twice.
        let ledger: Value =
            serde_json::from_slice(&std::fs::read(run_dir.join(RunDir::LEDGER)).unwrap()).unwrap();
        assert_eq!(ledger.as_object().unwrap().len(), 1, "run {i}");
        let intents = std::fs::read_to_string(run_dir.join(RunDir::INTENTS)).unwrap();
        assert_eq!(
            intents.matches("\"published\"").count(),
            1,
            "run {i}: {intents}"
        );
        let log = events(&run_dir);
        let succeeded: Vec<String> = log
            .iter()
            .filter(|e| e["event_type"] == "node.succeeded")
            .map(|e| e["payload"]["node_id"].as_str().unwrap().to_string())
            .collect();
        let mut unique = succeeded.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), succeeded.len(), "run {i}: {succeeded:?}");
        // The agent was called once per node, plus once per re-driven
        // attempt: a node whose outcome was recorded never ran again.
        let redriven = log
            .iter()
            .filter(|e| e["event_type"] == "node.redrive")
            .count();
        let made = std::fs::read_to_string(&calls).unwrap().lines().count();
        assert!(
            (worker_nodes..=worker_nodes + redriven).contains(&made),
            "run {i}: {made} agent calls for {worker_nodes} nodes and {redriven} re-drives"
        );
    }
    assert!(
        interrupted >= 40,
        "only {interrupted} of 50 kills interrupted a run; the delays do not fit the run"
    );
}

#[test]
fn a_process_restricted_node_runs_caged_by_bubblewrap() {
    if !bl_e2e::cage_works() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // The caged user must reach the fake CLI.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dir = case_dir(tmp.path(), 1, "process_restricted", "ok");
    // A fake claude that tries to write outside its workspace and says
    // whether the OS let it.
    let outside = tmp.path().join("escaped");
    let claude = dir.join("fake-bin/claude");
    std::fs::remove_file(&claude).unwrap();
    std::fs::write(
        &claude,
        format!(
            "#!/bin/sh\ncat >/dev/null\nif touch {} 2>/dev/null; then r=escaped; else r=caged; fi\n\
             printf '{{\"type\":\"result\",\"result\":\"%s\",\"usage\":{{\"input_tokens\":1,\"output_tokens\":1,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}}}\\n' \"$r\"\n",
            outside.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = bl_in(&dir, &run_args("caged", "2"));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(final_states(&dir, "caged")["run_state"], "SUCCEEDED");
    assert!(
        !outside.exists(),
        "the caged node wrote outside its workspace"
    );
    let replies: Vec<String> = std::fs::read_dir(dir.join("caged/artifacts/objects"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(replies.iter().any(|r| r == "caged"), "{replies:?}");
}

#[test]
fn without_a_manifest_the_sandbox_probe_passes_only_because_the_os_denied_it() {
    if !bl_e2e::cage_works() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(bl_binary())
        .args(["graph", "run", "--execute", "--out", "probe"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let succeeded = events(&tmp.path().join("probe"))
        .into_iter()
        .find(|e| e["event_type"] == "node.succeeded")
        .expect("the probe node succeeded");
    let reason = succeeded["payload"]["verdict"]["reason"].as_str().unwrap();
    assert!(reason.contains("denied"), "{reason}");
    let verify = Command::new(bl_binary())
        .args(["verify", "probe"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// Where no sandbox can run, the probe is refused with the fix, before
/// anything is written. bubblewrap is hidden from bl in a private mount
/// namespace (needs root and util-linux's `unshare`, as CI has).
#[test]
fn without_a_sandbox_the_probe_is_refused_with_the_fix() {
    let root = nix::unistd::geteuid().is_root();
    let unshare = Path::new("/usr/bin/unshare").is_file();
    if !root || !unshare {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root with unshare; this test must run there"
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let script = format!(
        "for b in /usr/bin/bwrap /usr/local/bin/bwrap /bin/bwrap; do \
           [ -e \"$b\" ] && {{ mount --bind /dev/null \"$b\" || exit 99; }}; done; \
         exec {} graph run --execute --out probe",
        bl_binary().display()
    );
    let out = Command::new("/usr/bin/unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("needs bubblewrap") && stderr.contains("scripts/dev setup"),
        "{stderr}"
    );
    assert!(!tmp.path().join("probe").exists(), "nothing is written");
}

/// Resume verifies the whole log before it acts: one altered byte in an
/// event already recorded, and the run is refused, the log untouched.
#[test]
fn resume_refuses_a_log_altered_after_it_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("case");
    copy_tree(
        &repo_root().join("tests/corpus/graph-runs/approval_approved"),
        &dir,
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    assert_eq!(bl_in(&dir, bl_e2e::REPAIR_RUN).status.code(), Some(3));
    let log = dir.join("mine").join(RunDir::EVENTS);
    let text = std::fs::read_to_string(&log).unwrap();
    let altered = text.replacen("\"state\":\"READY\"", "\"state\":\"READZ\"", 1);
    assert_ne!(altered, text);
    std::fs::write(&log, &altered).unwrap();
    let resume: &[&str] = &[
        "graph",
        "resume",
        "--run",
        "mine",
        "--inputs",
        "inputs.json",
    ];
    for verb in [resume, bl_e2e::APPROVE_GATE] {
        let out = bl_in(&dir, verb);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{verb:?}: {stderr}");
        assert!(stderr.contains("controller-events.jsonl"), "{stderr}");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            altered,
            "nothing rewritten"
        );
    }
    assert!(
        !dir.join("mine").join(RunDir::APPROVALS).exists(),
        "no decision was recorded"
    );
}

/// A CLI that writes more than the reply cap (8 MiB) fails its attempt as
/// a worker fault; nothing of it is stored as a reply.
#[test]
fn a_reply_over_the_cap_is_a_worker_fault_never_a_reply() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 0, "workspace_only", "ok");
    one_node_with_provider(
        &dir,
        "flood",
        r#"[providers.flood]
binary = "/usr/bin/python3"
args = ["-c", "import sys\nsys.stdout.write('x' * (9 << 20))\n"]
prompt_via = "arg"
"#,
    );
    let mut args = run_args("run", "1");
    args.extend(["--providers", "providers.toml"]);
    let out = bl_in(&dir, &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("wrote more than 8388608 bytes"), "{stderr}");
    let log = events(&dir.join("run"));
    assert!(log.iter().any(|e| e["event_type"] == "node.failed"));
    assert!(!log.iter().any(|e| e["event_type"] == "node.succeeded"));
    let stored: u64 = std::fs::read_dir(dir.join("run/artifacts/objects"))
        .map(|d| d.map(|e| e.unwrap().metadata().unwrap().len()).sum())
        .unwrap_or(0);
    assert!(stored < 1 << 20, "no reply was stored ({stored} bytes)");
}

#[test]
fn a_cost_cap_needs_prices_and_pauses_the_run_when_spent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 1, "workspace_only", "ok");
    let mut args = run_args("capped", "1");
    args.extend(["--max-cost-usd", "0.0001"]);
    let refused = bl_in(&dir, &args);
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("has no price"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(!dir.join("capped").exists(), "a refused run writes nothing");

    // The fake claude reports 10 input and 5 output tokens: 10×3 + 5×15 = 105
    // microunits per node, over the cap of 100 after the first node.
    std::fs::write(
        dir.join("budget.json"),
        r#"{"prices": {"claude/fake-model": {"input_microunits_per_mtok": 3000000, "output_microunits_per_mtok": 15000000}}}"#,
    )
    .unwrap();
    args.extend(["--budget-file", "budget.json"]);
    let paused = bl_in(&dir, &args);
    assert_eq!(
        paused.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&paused.stderr)
    );
    let log = events(&dir.join("capped"));
    let spend = log
        .iter()
        .find(|e| e["event_type"] == "node.spend")
        .unwrap();
    assert_eq!(spend["payload"]["usage"]["cost_microunits"], 105);
    assert!(log.iter().any(|e| e["event_type"] == "run.budget.paused"));
    assert_eq!(final_states(&dir, "capped")["run_state"], "RUNNING");
    // The pause sealed the run.
    let sealed = std::fs::read_dir(dir.join("capped/checkpoints"))
        .unwrap()
        .count();
    assert_eq!(sealed, 1);

    let resumed = bl_in(
        &dir,
        &[
            "graph",
            "resume",
            "--run",
            "capped",
            "--inputs",
            "inputs.json",
            "--budget-file",
            "budget.json",
            "--max-cost-usd",
            "1",
        ],
    );
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(final_states(&dir, "capped")["run_state"], "SUCCEEDED");
}

#[test]
fn status_refuses_a_run_directory_whose_plan_no_longer_matches() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 1, "workspace_only", "ok");
    assert_eq!(bl_in(&dir, &run_args("run", "2")).status.code(), Some(0));
    let manifest = dir.join("run").join(RunDir::MANIFEST);
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("\"1.0.0\"", "\"1.0.1\"")).unwrap();
    let out = bl_in(&dir, &["graph", "status", "--run", "run"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("plan") && stderr.contains("changed"),
        "{stderr}"
    );
}

#[test]
fn a_signed_approval_is_bound_to_what_it_approves_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("case");
    copy_tree(
        &repo_root().join("tests/corpus/graph-runs/approval_approved"),
        &dir,
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let keygen = bl_in(
        &dir,
        &[
            "keys",
            "generate",
            "--name",
            "reviewer",
            "--out",
            "reviewer.key",
        ],
    );
    assert!(
        keygen.status.success(),
        "{}",
        String::from_utf8_lossy(&keygen.stderr)
    );
    let run = bl_in(
        &dir,
        &[
            "graph",
            "run",
            "--execute",
            "manifest.json",
            "--connections",
            "connections.json",
            "--inputs",
            "inputs.json",
            "--out",
            "signed",
            "--checkpoint-key",
            "reviewer.key",
        ],
    );
    assert_eq!(
        run.status.code(),
        Some(3),
        "paused for the approval: {}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let sealed = |run: &str| {
        std::fs::read_dir(dir.join(run).join("checkpoints"))
            .unwrap()
            .count()
    };
    assert_eq!(sealed("signed"), 1, "the pause sealed the run");
    let approve = bl_in(
        &dir,
        &[
            "graph",
            "approve",
            "--run",
            "signed",
            "--node",
            "gate",
            "--decision",
            "approved",
            "--inputs",
            "inputs.json",
            "--key",
            "reviewer.key",
            "--checkpoint-key",
            "reviewer.key",
        ],
    );
    assert_eq!(
        approve.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    assert_eq!(sealed("signed"), 2, "so did its end");
    let approvals: Value =
        serde_json::from_slice(&std::fs::read(dir.join("signed").join(RunDir::APPROVALS)).unwrap())
            .unwrap();
    let commit = &approvals["commits"][0];
    assert!(commit["signature"]["sig"].is_string(), "{approvals}");
    // The request digest covers the artifact the approval is about.
    let draft = events(&dir.join("signed"))
        .into_iter()
        .find(|e| e["event_type"] == "node.succeeded" && e["payload"]["node_id"] == "draft")
        .unwrap();
    let evidence = draft["payload"]["artifact_digests"].clone();
    let plan_id = serde_json::from_slice::<Value>(
        &std::fs::read(dir.join("signed").join(RunDir::META)).unwrap(),
    )
    .unwrap()["plan_id"]
        .clone();
    let request = json!({"evidence_digests": evidence, "node_id": "gate", "plan_id": plan_id, "repair_round": 0});
    let canonical = serde_json::to_string(&request).unwrap();
    let digest = format!("sha256:{}", bl_core::sha256_hex(canonical.as_bytes()));
    assert_eq!(commit["request_digest"], Value::from(digest));
    let public = std::fs::read_to_string(dir.join("reviewer.pub")).unwrap();
    let verify = bl_in(&dir, &["verify", "signed", "--pubkey", public.trim()]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    // An altered signed decision is never acted on: a second run of the
    // same graph, paused at the same approval, is handed the decision with
    // one field changed, and resume refuses it; `bl verify` refuses it too,
    // with or without the trusted key.
    let mut altered = approvals.clone();
    altered["commits"][0]["decided_by"] = Value::from("someone-else");
    let again = bl_in(
        &dir,
        &[
            "graph",
            "run",
            "--execute",
            "manifest.json",
            "--connections",
            "connections.json",
            "--inputs",
            "inputs.json",
            "--out",
            "again",
        ],
    );
    assert_eq!(again.status.code(), Some(3));
    for run in ["signed", "again"] {
        std::fs::write(
            dir.join(run).join(RunDir::APPROVALS),
            serde_json::to_vec_pretty(&altered).unwrap(),
        )
        .unwrap();
    }
    let resume = bl_in(
        &dir,
        &[
            "graph",
            "resume",
            "--run",
            "again",
            "--inputs",
            "inputs.json",
        ],
    );
    let stderr = String::from_utf8_lossy(&resume.stderr);
    assert_eq!(resume.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/commits/0/signature") && stderr.contains("altered"),
        "{stderr}"
    );
    for args in [
        vec!["verify", "signed"],
        vec!["verify", "signed", "--pubkey", public.trim()],
    ] {
        let verify = bl_in(&dir, &args);
        assert!(
            !verify.status.success(),
            "{args:?} passed an altered decision"
        );
    }
}

/// An approval inside a repaired part of the graph is asked again in the
/// new round: the decision of round 0 never approves round 1.
#[test]
fn a_decision_is_bound_to_its_repair_round() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("case");
    bl_e2e::approval_in_a_repair(&dir);
    let first = bl_in(&dir, bl_e2e::REPAIR_RUN);
    assert_eq!(
        first.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let approve = || bl_in(&dir, bl_e2e::APPROVE_GATE);
    let rounds = || -> Vec<u64> {
        let record: Value = serde_json::from_slice(
            &std::fs::read(dir.join("mine").join(RunDir::APPROVALS)).unwrap(),
        )
        .unwrap();
        record["commits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["repair_round"].as_u64().unwrap())
            .collect()
    };
    // Approved in round 0; verify fails, the repair resets fetch, gate and
    // verify, and the run waits for gate again.
    let second = approve();
    assert_eq!(
        second.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(rounds(), [0]);
    let log = events(&dir.join("mine"));
    assert!(log.iter().any(|e| e["event_type"] == "run.repair.round"));
    assert_eq!(
        final_states(&dir, "mine")["nodes"]["gate"],
        "AWAITING_APPROVAL"
    );
    // Approved in round 1, the run ends.
    let third = approve();
    assert_eq!(
        third.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert_eq!(rounds(), [0, 1]);
    assert_eq!(final_states(&dir, "mine")["run_state"], "SUCCEEDED");
}

/// draft (an agent) → review (an approval) → pub (a publish node under
/// `policy`), with `draft`'s reply the artifact published.
fn publish_case(root: &Path, policy: &str) -> PathBuf {
    let dir = case_dir(root, 0, "workspace_only", "ok");
    let (mut manifest, connections) = fan_out(0, "workspace_only");
    manifest["nodes"] = json!([
        manifest["nodes"][0].clone(),
        {"id": "review", "kind": "approval", "inputs": {"in_a": "text"}, "outputs": {"out": "text"},
         "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": ["read_only"],
         "isolation": "workspace_only", "required_role": "editor"},
        {"id": "pub", "kind": "publish", "inputs": {"in_review": "text"}, "outputs": {"out": "text"},
         "budget": {"max_attempts": 1, "max_wallclock_s": 60}, "effects": ["workspace_write"],
         "isolation": "workspace_only", "publication_policy": policy},
    ]);
    manifest["edges"] = json!([
        {"from_node": "a", "from_port": "out", "to_node": "review", "to_port": "in_a"},
        {"from_node": "review", "from_port": "out", "to_node": "pub", "to_port": "in_review"},
    ]);
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();
    let only_a: Vec<Value> = connections
        .as_array()
        .unwrap()
        .iter()
        .take(1)
        .cloned()
        .collect();
    std::fs::write(
        dir.join("connections.json"),
        serde_json::to_vec(&only_a).unwrap(),
    )
    .unwrap();
    dir
}

/// `bl graph approve` on the `review` node of a [`publish_case`] run.
fn decide(dir: &Path, decision: &str) -> Output {
    bl_in(
        dir,
        &[
            "graph",
            "approve",
            "--run",
            "run",
            "--node",
            "review",
            "--decision",
            decision,
            "--inputs",
            "inputs.json",
        ],
    )
}

#[test]
fn the_outbox_policy_publishes_once_after_the_approval_and_unknown_policies_fail_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = publish_case(&tmp.path().join("outbox"), "outbox");
    assert_eq!(bl_in(&dir, &run_args("run", "2")).status.code(), Some(3));
    let approve = decide(&dir, "approved");
    assert_eq!(
        approve.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&approve.stderr)
    );
    // a's reply, declared by its plain port `out: text`, goes by that
    // name, beside the outbox's index.
    let outbox = dir.join("run/outbox/pub");
    let mut names: Vec<String> = std::fs::read_dir(&outbox)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["manifest.json", "out.txt"]);
    assert_eq!(
        std::fs::read_to_string(outbox.join("out.txt")).unwrap(),
        "reply to: ok"
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(outbox.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        (&index[0]["name"], &index[0]["producer"], &index[0]["size"]),
        (&json!("out.txt"), &json!("a"), &json!(12))
    );
    let intents = std::fs::read_to_string(dir.join("run").join(RunDir::INTENTS)).unwrap();
    assert_eq!(intents.matches("\"published\"").count(), 1);
    // An approval is final: rejecting it now is refused, naming it, and
    // the record is as it was.
    let approvals = std::fs::read(dir.join("run").join(RunDir::APPROVALS)).unwrap();
    let late = decide(&dir, "rejected");
    assert_eq!(late.status.code(), Some(2));
    let said = String::from_utf8_lossy(&late.stderr);
    assert!(
        said.contains("node 'review' was already approved by ")
            && said.contains("a decision is final, so this rejection was not recorded"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(dir.join("run").join(RunDir::APPROVALS)).unwrap(),
        approvals
    );

    // A rejected approval: nothing reaches the outbox.
    let rejected = publish_case(&tmp.path().join("rejected"), "outbox");
    assert_eq!(
        bl_in(&rejected, &run_args("run", "2")).status.code(),
        Some(3)
    );
    let reject = decide(&rejected, "rejected");
    assert_eq!(reject.status.code(), Some(2));
    assert!(!rejected.join("run/outbox").exists());

    // A policy nobody installed fails the node closed, by policy.
    let unknown = publish_case(&tmp.path().join("unknown"), "no-such-policy");
    assert_eq!(
        bl_in(&unknown, &run_args("run", "2")).status.code(),
        Some(3)
    );
    let out = decide(&unknown, "approved");
    assert_eq!(out.status.code(), Some(2));
    let failed = events(&unknown.join("run"))
        .into_iter()
        .find(|e| e["event_type"] == "node.failed")
        .unwrap();
    assert_eq!(failed["payload"]["cause"], "policy_denied");
    assert!(
        failed["payload"]["reason"]
            .as_str()
            .unwrap()
            .contains("not installed"),
        "{failed}"
    );
    assert!(!unknown.join("run").join(RunDir::LEDGER).exists());
}

/// Rewrites a case into one node `a` bound to `provider`, which the
/// catalog `providers.toml` (written from `catalog`) defines.
fn one_node_with_provider(dir: &Path, provider: &str, catalog: &str) {
    std::fs::write(dir.join("providers.toml"), catalog).unwrap();
    let (mut manifest, connections) = fan_out(0, "workspace_only");
    manifest["nodes"] = json!([manifest["nodes"][0].clone()]);
    manifest["edges"] = json!([]);
    let mut connection = connections[0].clone();
    connection["provider_id"] = json!(provider);
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.join("connections.json"),
        serde_json::to_vec(&json!([connection])).unwrap(),
    )
    .unwrap();
}

/// A one-node case whose CLI (`provider` in `catalog`, the system python,
/// so that it is there inside any cage) is handed `port` as its prompt,
/// with an allowlist config (example.com only) written by `bl graph init`.
fn egress_case(root: &Path, provider: &str, catalog: &str, port: u16) -> PathBuf {
    std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dir = case_dir(root, 0, "workspace_only", "ok");
    one_node_with_provider(&dir, provider, catalog);
    std::fs::write(
        dir.join("inputs.json"),
        json!({"a": port.to_string()}).to_string(),
    )
    .unwrap();
    let init = bl_in(
        &dir,
        &[
            "graph",
            "init",
            "--posture",
            "allowlist",
            "--allowlist",
            "example.com",
            "--config",
            "egress.json",
            "--yes",
        ],
    );
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    dir
}

/// Runs the case under `posture` into `out`; it must succeed. Returns the
/// CLI's reply.
fn reply_under(dir: &Path, posture: &str, out: &str) -> String {
    let mut args = run_args(out, "1");
    args.extend(["--providers", "providers.toml"]);
    let run = Command::new(bl_binary())
        .args(&args)
        .current_dir(dir)
        .env("BOUNDED_LOOPS_EGRESS_POSTURE", posture)
        .env("BOUNDED_LOOPS_EGRESS_CONFIG", dir.join("egress.json"))
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{posture}: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let replies: Vec<String> = std::fs::read_dir(dir.join(out).join("artifacts/objects"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    replies.join(",")
}

#[test]
fn the_egress_posture_decides_whether_a_local_cli_reaches_the_network() {
    if !bl_e2e::cage_works() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    // A "CLI" that tries the host's listener and says what happened.
    let dir = egress_case(
        tmp.path(),
        "netcheck",
        r#"[providers.netcheck]
binary = "/usr/bin/python3"
args = ["-c", "import socket, sys\ntry:\n    socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2).close()\n    print('connected', end='')\nexcept OSError:\n    print('denied', end='')\n"]
prompt_via = "arg"
"#,
        port,
    );
    assert_eq!(reply_under(&dir, "open", "open"), "connected");
    assert_eq!(reply_under(&dir, "broker", "broker"), "denied");
    // Allowlist: a container cage whose only way out is the proxy.
    assert_eq!(reply_under(&dir, "allowlist", "allowlist"), "denied");
}

/// Under the allowlist posture a CLI's only way out is the CONNECT proxy,
/// and every decision it makes is kept with the run: here it refuses a
/// host off the allowlist and the host's own loopback (no DNS, no
/// traffic leaves the machine).
#[test]
fn the_allowlist_proxy_decisions_are_recorded_with_the_run() {
    if !bl_e2e::cage_works() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let dir = egress_case(
        tmp.path(),
        "proxycheck",
        r#"[providers.proxycheck]
binary = "/usr/bin/python3"
args = ["-c", "import socket, sys\nout = []\nfor target in ('blocked.invalid:443', '127.0.0.1:' + sys.argv[1]):\n    s = socket.create_connection(('127.0.0.1', 3128), 5)\n    s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (target, target)).encode())\n    out.append(s.recv(200).split(b'\\r\\n')[0].decode())\n    s.close()\nprint('|'.join(out), end='')\n"]
prompt_via = "arg"
"#,
        port,
    );
    let reply = reply_under(&dir, "allowlist", "run");
    assert!(
        reply.contains("HTTP/1.1") && !reply.contains(" 200"),
        "the proxy refused both: {reply}"
    );
    let recorded = std::fs::read_to_string(dir.join("run").join(RunDir::EGRESS_DECISIONS)).unwrap();
    let decisions: Vec<Value> = recorded
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let targets: Vec<&str> = decisions
        .iter()
        .map(|d| d["target"].as_str().unwrap())
        .collect();
    assert_eq!(
        targets,
        [
            "blocked.invalid:443".to_string(),
            format!("127.0.0.1:{port}")
        ],
        "{recorded}"
    );
    assert!(
        decisions
            .iter()
            .all(|d| d["decision"] == "refused" && d["reason"].is_string()),
        "{recorded}"
    );
}

#[test]
fn progress_is_live_on_a_terminal_plain_in_a_pipe_and_absent_with_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 3, "workspace_only", "ok");
    // A pipe: one plain line per node that ended, and the summary.
    let piped = bl_in(&dir, &run_args("piped", "2"));
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        stderr.contains("  ✓ b2") && stderr.contains("6/6 nodes ended (0 failed)"),
        "{stderr}"
    );
    // --json: stdout is the result alone, stderr is silent.
    let mut args = run_args("json", "2");
    args.push("--json");
    let json = bl_in(&dir, &args);
    assert!(
        json.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let result: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(result["run_state"], "SUCCEEDED");
    // A terminal (a pty from util-linux `script`), with nodes slow enough to
    // be seen running: a live line per running node and the live summary
    // bar (neither is ever printed in a pipe), then the run ends as there.
    let slow = case_dir(&tmp.path().join("slow"), 3, "workspace_only", "sleep:0.6");
    let command = format!(
        "{} graph run --execute manifest.json --connections connections.json --inputs inputs.json --out tty",
        bl_binary().display()
    );
    let tty = Command::new("script")
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .current_dir(&slow)
        .env("PATH", bl_e2e::path_with_fakes(&slow))
        .output()
        .expect("util-linux `script` runs a command on a pseudo-terminal");
    let screen = String::from_utf8_lossy(&tty.stdout);
    assert_eq!(tty.status.code(), Some(0), "{screen}");
    assert!(screen.contains("b1: running (attempt 1)"), "{screen}");
    assert!(screen.contains("/6 nodes ended  0 failed"), "{screen}");
    assert!(!stderr.contains(": running (attempt"), "{stderr}");
    assert!(screen.contains("6/6 nodes ended (0 failed)"), "{screen}");
    assert_eq!(final_states(&slow, "tty")["run_state"], "SUCCEEDED");
}

#[test]
fn an_agent_cli_gets_the_operators_path_and_home_and_nothing_else_of_the_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 0, "workspace_only", "ok");
    one_node_with_provider(
        &dir,
        "envcheck",
        r#"[providers.envcheck]
binary = "/usr/bin/python3"
args = ["-c", "import json, os\nprint(json.dumps({k: os.environ.get(k) for k in ['HOME', 'PATH', 'BL_TEST_SECRET', 'GRANTED_NAME']}), end='')\n"]
prompt_via = "arg"
env_grant = ["GRANTED_NAME"]
"#,
    );
    let mut args = run_args("run", "1");
    args.extend(["--providers", "providers.toml"]);
    let run = Command::new(bl_binary())
        .args(&args)
        .current_dir(&dir)
        .env("HOME", "/home/operator-test")
        .env("BL_TEST_SECRET", "must-not-leak")
        .env("GRANTED_NAME", "granted-value")
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let objects = dir.join("run/artifacts/objects");
    let entry = std::fs::read_dir(objects).unwrap().next().unwrap().unwrap();
    let seen: Value = serde_json::from_slice(&std::fs::read(entry.path()).unwrap()).unwrap();
    assert_eq!(seen["HOME"], "/home/operator-test");
    assert_eq!(seen["PATH"], Value::from(std::env::var("PATH").unwrap()));
    assert_eq!(seen["BL_TEST_SECRET"], Value::Null);
    assert_eq!(seen["GRANTED_NAME"], "granted-value");
}

#[test]
fn without_out_a_run_goes_under_the_workspace_and_admitted_records_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 1, "workspace_only", "ok");
    let run = bl_in(
        &dir,
        &[
            "graph",
            "run",
            "--execute",
            "manifest.json",
            "--connections",
            "connections.json",
            "--inputs",
            "inputs.json",
            "--workspace",
            "ws",
        ],
    );
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.join("ws/.bounded-loops/runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    assert!(runs[0].join("controller-events.jsonl").is_file());

    std::fs::write(dir.join("admitted.json"), "[1, 2]").unwrap();
    let refused = bl_in(
        &dir,
        &[
            "graph",
            "run",
            "--execute",
            "manifest.json",
            "--connections",
            "connections.json",
            "--inputs",
            "inputs.json",
            "--out",
            "never",
            "--admitted",
            "admitted.json",
        ],
    );
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("admitted.json"), "{stderr}");
    assert!(!dir.join("never").exists(), "a refused run writes nothing");
}

/// Starts `args` and kills the controller with SIGKILL as soon as the
/// run's log holds an event whose key ends with `marker`.
fn kill_when_logged(dir: &Path, args: &[&str], run: &str, marker: &str) {
    let mut child = Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .env("PATH", bl_e2e::path_with_fakes(dir))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = dir.join(run).join(RunDir::EVENTS);
    let started = std::time::Instant::now();
    loop {
        let text = bl_e2e::log_text(&log);
        if text.lines().any(|l| l.contains(&format!("{marker}\""))) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{marker} never logged"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The staged files beside a run's log and its annex.
fn staged_files(run_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(run_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".staged-"))
        .collect()
}

/// A power loss between two syncs may keep staged log lines whose
/// artifacts never reached the disk (the kernel writes files back in its
/// own order). The loss is made by hand here, as it cannot be made for
/// real: the controller is killed after `a` succeeded, and `a`'s reply is
/// emptied, as a file written but never synced comes back. A resume moves
/// the staged lines into the log up to the first naming it, keeps the rest
/// aside and says so, runs `a` again and ends as a run never cut short;
/// the run then verifies.
#[test]
fn lines_a_power_loss_kept_without_their_artifacts_are_set_aside_and_redone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 1, "workspace_only", "sleep:1");
    let reference = bl_in(&dir, &run_args("reference", "1"));
    assert_eq!(reference.status.code(), Some(0));
    let want = final_states(&dir, "reference");
    kill_when_logged(&dir, &run_args("run", "1"), "run", "a:node.succeeded");
    let run_dir = dir.join("run");
    let succeeded = events(&run_dir)
        .into_iter()
        .find(|e| e["event_type"] == "node.succeeded" && e["payload"]["node_id"] == "a")
        .expect("a succeeded before the kill");
    let lost = succeeded["payload"]["artifact_digests"][0]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let object = run_dir.join("artifacts/objects").join(&lost);
    std::fs::write(&object, b"").unwrap();
    let log_before = bl_e2e::log_text(&run_dir.join(RunDir::EVENTS));
    // The line naming the lost reply never reached the log itself: it
    // waits in the staged file, as the write-ahead order wants.
    let durable = std::fs::read_to_string(run_dir.join(RunDir::EVENTS)).unwrap();
    assert!(!durable.contains(&lost), "{durable}");
    assert!(
        staged_files(&run_dir).iter().any(|p| p
            .to_string_lossy()
            .contains("controller-events.jsonl.staged-")),
        "{:?}",
        staged_files(&run_dir)
    );

    let resumed = bl_in(&dir, &resume_args("run", "1"));
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("set aside") && stderr.contains(&lost[..12]),
        "the resume says what it set aside and why: {stderr}"
    );
    // Nothing is lost: the lines set aside are kept beside the log, whole.
    let aside: Vec<PathBuf> = std::fs::read_dir(&run_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".unsynced-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let kept = std::fs::read_to_string(&aside[0]).unwrap();
    assert!(
        aside[0].ends_with(format!(
            "{}.unsynced-{}",
            RunDir::EVENTS,
            log_before.len() - kept.len()
        )) && log_before.ends_with(&kept)
            && kept.contains(":a:node.succeeded\""),
        "{aside:?}: {kept}"
    );
    assert_eq!(final_states(&dir, "run"), want);
    assert!(
        staged_files(&run_dir).is_empty(),
        "{:?}",
        staged_files(&run_dir)
    );
    let verify = bl_in(&dir, &["verify", "run"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[test]
fn an_attempt_interrupted_again_and_again_is_redriven_three_times_then_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 1, "workspace_only", "sleep:8");
    kill_when_logged(&dir, &run_args("run", "1"), "run", "b1:node.running");
    let resume = [
        "graph",
        "resume",
        "--run",
        "run",
        "--inputs",
        "inputs.json",
        "--concurrency",
        "1",
    ];
    for redrive in 1..=3 {
        kill_when_logged(
            &dir,
            &resume,
            "run",
            &format!("b1:node.redrive:1:{redrive}"),
        );
    }
    let last = bl_in(&dir, &resume);
    assert_eq!(
        last.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&last.stderr)
    );
    let log = events(&dir.join("run"));
    let redrives = log
        .iter()
        .filter(|e| e["event_type"] == "node.redrive")
        .count();
    assert_eq!(redrives, 3);
    let failed = log
        .iter()
        .find(|e| e["event_type"] == "node.failed")
        .unwrap();
    assert_eq!(failed["payload"]["node_id"], "b1");
    assert!(
        failed["payload"]["reason"]
            .as_str()
            .unwrap()
            .contains("died 4 times"),
        "{failed}"
    );
    let verify = bl_in(&dir, &["verify", "run"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[test]
fn a_prompt_is_never_written_into_the_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 0, "workspace_only", "ok");
    one_node_with_provider(
        &dir,
        "quiet",
        "[providers.quiet]\nbinary = \"/usr/bin/python3\"\nargs = [\"-c\", \"print('done', end='')\"]\nprompt_via = \"arg\"\n",
    );
    let secret = "prompt-with-a-secret-7f3a9c";
    std::fs::write(dir.join("inputs.json"), json!({"a": secret}).to_string()).unwrap();
    let mut args = run_args("run", "1");
    args.extend(["--providers", "providers.toml"]);
    let run = bl_in(&dir, &args);
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out)
            } else {
                out.push(p)
            }
        }
    }
    let mut all = Vec::new();
    files(&dir.join("run"), &mut all);
    assert!(all.len() > 5);
    for f in all {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds the prompt",
            f.display()
        );
    }
}

/// A run keeps the provider catalog it was given, so the command it prints
/// to resume a stopped run works without `--providers` again (and a
/// decision or a resume on another day finds the same providers).
#[test]
fn a_stopped_run_resumes_with_the_providers_it_was_given() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = case_dir(tmp.path(), 0, "workspace_only", "ok");
    one_node_with_provider(
        &dir,
        "sleepy",
        "[providers.sleepy]\nbinary = \"/usr/bin/python3\"\nargs = [\"-c\", \"import sys, time\\nif 'slow' in sys.argv[-1]:\\n    time.sleep(60)\\nprint('done', end='')\"]\nprompt_via = \"arg\"\n",
    );
    std::fs::write(dir.join("inputs.json"), json!({"a": "slow"}).to_string()).unwrap();
    let mut args = run_args("run", "1");
    args.extend(["--providers", "providers.toml"]);
    let child = Command::new(bl_binary())
        .args(&args)
        .current_dir(&dir)
        .env("PATH", bl_e2e::path_with_fakes(&dir))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let since = std::time::Instant::now();
    let running =
        || bl_e2e::log_text(&dir.join("run").join(RunDir::EVENTS)).contains("\"node.running\"");
    while !running() {
        assert!(since.elapsed() < Duration::from_secs(30), "never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let stopped = child.wait_with_output().unwrap();
    assert_eq!(stopped.status.code(), Some(130));
    assert_eq!(
        std::fs::read(dir.join("run").join(RunDir::PROVIDERS)).unwrap(),
        std::fs::read(dir.join("providers.toml")).unwrap(),
        "the run keeps its catalog"
    );
    std::fs::write(dir.join("inputs.json"), json!({"a": "quick"}).to_string()).unwrap();
    let resumed = bl_in(
        &dir,
        &["graph", "resume", "--run", "run", "--inputs", "inputs.json"],
    );
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
}

/// Each graph command's help opens with what that command does: the flags
/// they share add options, never a description of their own.
#[test]
fn each_graph_command_opens_its_help_with_what_it_does() {
    let first_lines: Vec<String> = ["run", "resume", "approve", "console"]
        .iter()
        .map(|command| {
            let out = Command::new(bl_binary())
                .args(["graph", command, "--help"])
                .output()
                .unwrap();
            let help = String::from_utf8_lossy(&out.stdout).into_owned();
            help.lines().next().unwrap_or_default().to_string()
        })
        .collect();
    let expected = [
        "Execute a graph",
        "Continue a paused or interrupted run",
        "Record a human decision",
        "Serve a page",
    ];
    for (line, expected) in first_lines.iter().zip(expected) {
        assert!(line.starts_with(expected), "{first_lines:?}");
    }
}
