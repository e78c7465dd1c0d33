//! Stopping, crashing and resuming a graph run, through the real `bl`,
//! with real agent processes: a signal is a pause that loses no work and
//! counts against no budget; a killed controller leaves no agent running,
//! and its resume makes the interrupted turn once; a daemonising agent
//! leaves nothing behind in any tier; as root, a caged agent in a home
//! directory reads its login and nothing else; why a worker failed is kept.

use bl_store::RunDir;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use bl_e2e::{bl_binary, cage_works, copy_tree, live_command_lines, repo_root};
use serde_json::{Value, json};

/// A graph of `ids`, every node an agent node on its own slot, with
/// `edges` (from, to) and `isolation`.
fn graph(ids: &[&str], edges: &[(&str, &str)], isolation: &str) -> (Value, Value) {
    let nodes: Vec<Value> = ids
        .iter()
        .map(|id| {
            let inputs: serde_json::Map<String, Value> = edges
                .iter()
                .filter(|(_, to)| to == id)
                .map(|(from, _)| (format!("in_{from}"), json!("text")))
                .collect();
            json!({"id": id, "kind": "research_claim", "inputs": inputs, "outputs": {"out": "text"},
                   "budget": {"max_attempts": 2, "max_wallclock_s": 60}, "effects": ["read_only"],
                   "isolation": isolation, "connection_slot": format!("slot-{id}")})
        })
        .collect();
    let edges: Vec<Value> = edges
        .iter()
        .map(|(from, to)| json!({"from_node": from, "from_port": "out", "to_node": to, "to_port": format!("in_{from}")}))
        .collect();
    let slots = bl_e2e::slots_of(&nodes);
    let connections: Vec<Value> = slots
        .iter()
        .map(|s| bl_e2e::connection(s["id"].as_str().unwrap(), json!({"isolation": isolation})))
        .collect();
    let manifest = json!({"api_version": "bounded-loops.dev/graph/v1", "graph_id": "stop-test",
        "version": "1.0.0", "nodes": nodes, "edges": edges, "connection_slots": slots,
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"}});
    (manifest, Value::Array(connections))
}

/// Writes a case: the graph, its connections, `prompts`, and the agent
/// CLIs in `fake-bin/` (the recorded corpus's, unless `agent` is given:
/// then `claude` is that script).
fn write_case(
    dir: &Path,
    (manifest, connections): (Value, Value),
    prompts: &Value,
    agent: Option<&str>,
) {
    match agent {
        None => copy_tree(
            &repo_root().join("tests/corpus/graph-runs/chain_succeeds/fake-bin"),
            &dir.join("fake-bin"),
        ),
        Some(script) => {
            std::fs::create_dir_all(dir.join("fake-bin")).unwrap();
            let path = dir.join("fake-bin/claude");
            std::fs::write(&path, script).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let write = |name: &str, v: &Value| {
        std::fs::write(dir.join(name), serde_json::to_vec_pretty(v).unwrap()).unwrap()
    };
    write("manifest.json", &manifest);
    write("connections.json", &connections);
    write("inputs.json", prompts);
}

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(bl_binary());
    command
        .args(args)
        .current_dir(dir)
        .env("PATH", bl_e2e::path_with_fakes(dir));
    command
}

fn bl_in(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().unwrap()
}

const RUN: &[&str] = bl_e2e::GRAPH_RUN;

const RESUME: &[&str] = &["graph", "resume", "--run", "run", "--inputs", "inputs.json"];

fn start(dir: &Path, args: &[&str]) -> Child {
    command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name}");
}

fn lines(path: &Path) -> Vec<Value> {
    bl_e2e::json_lines(path)
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits until the run's log holds an event whose key ends with `marker`.
fn wait_logged(run: &Path, marker: &str) {
    let log = run.join(RunDir::EVENTS);
    let since = Instant::now();
    while !bl_e2e::log_text(&log).contains(&format!("{marker}\"")) {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "{marker} never logged"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The processes alive now whose command line holds `marker`.
fn alive_with(marker: &str) -> Vec<String> {
    live_command_lines()
        .into_iter()
        .filter(|l| l.contains(marker))
        .collect()
}

/// Each live process marked `marker`, for a failure to say what it is:
/// its pid, state, parent (and the parent's command) and pid namespace.
fn described_with(marker: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let field = |status: &str, name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    entries
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("cmdline")).is_ok_and(|c| c.contains(marker))
        })
        .map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
            let parent = field(&status, "PPid:");
            let parent_command =
                std::fs::read_to_string(format!("/proc/{parent}/cmdline")).unwrap_or_default();
            let ns = std::fs::read_link(e.path().join("ns/pid")).unwrap_or_default();
            format!(
                "pid {} {} parent {parent} ({}) NSpid {} {}",
                e.file_name().to_string_lossy(),
                field(&status, "State:"),
                parent_command.replace('\0', " "),
                field(&status, "NSpid:"),
                ns.display()
            )
        })
        .collect()
}

/// Waits (at most `within`) for every process marked `marker` to be gone.
fn gone_within(marker: &str, within: Duration) -> Vec<String> {
    let since = Instant::now();
    loop {
        let alive = alive_with(marker);
        if alive.is_empty() || since.elapsed() >= within {
            return alive;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Agent calls made so far, by the node their prompt names.
fn calls_by_node(dir: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut calls = std::collections::BTreeMap::new();
    for call in lines(&dir.join("state/calls.jsonl")) {
        let prompt = call["prompt"].as_str().unwrap_or_default().to_string();
        let node = prompt.rsplit(':').next().unwrap_or_default().to_string();
        *calls.entry(node).or_insert(0) += 1;
    }
    calls
}

/// The ids of a 12-node run: three waves of four (r → m → e).
fn twelve() -> (Vec<String>, Vec<(String, String)>) {
    let mut ids = Vec::new();
    let mut edges = Vec::new();
    for i in 1..=4 {
        ids.extend([format!("r{i}"), format!("m{i}"), format!("e{i}")]);
        edges.push((format!("r{i}"), format!("m{i}")));
        edges.push((format!("m{i}"), format!("e{i}")));
    }
    (ids, edges)
}

#[test]
fn a_signal_at_any_point_is_a_pause_and_resume_finishes_the_work_once() {
    let (ids, edges) = twelve();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let edges: Vec<(&str, &str)> = edges
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    // Each node's prompt names it, so each agent call says whose it was.
    let prompts: serde_json::Map<String, Value> = ids
        .iter()
        .map(|id| (id.to_string(), json!(format!("sleep:0.3:{id}"))))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let mut interrupted_runs = 0;
    let mut run_dirs = Vec::new();
    for (i, delay) in bl_e2e::pseudo_random(20, 900, 0x2545_f491_4f6c_dd1d)
        .into_iter()
        .enumerate()
    {
        let dir = tmp.path().join(format!("case-{i}"));
        write_case(
            &dir,
            graph(&ids, &edges, "workspace_only"),
            &Value::Object(prompts.clone()),
            None,
        );
        let (name, number) = if i % 2 == 0 { ("INT", 2) } else { ("TERM", 15) };
        let mut args = RUN.to_vec();
        args.extend(["--concurrency", "4"]);
        let child = start(&dir, &args);
        std::thread::sleep(Duration::from_millis(100 + delay));
        signal(&child, name);
        let out = child.wait_with_output().unwrap();
        let run = dir.join("run");
        let events = lines(&run.join(RunDir::EVENTS));
        if out.status.code() == Some(0) {
            continue; // it had ended before the signal came
        }
        assert_eq!(
            out.status.code(),
            Some(128 + number),
            "run {i}, SIG{name} after {} ms: {}",
            100 + delay,
            said(&out)
        );
        if events.iter().any(|e| e["event_type"] == "run.succeeded") {
            // The signal came after the run had ended: there is nothing to
            // resume, and bl says it was stopped by its code alone.
            assert!(!said(&out).contains("bl graph resume"), "run {i}");
            continue;
        }
        interrupted_runs += 1;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("bl graph resume --run run --inputs inputs.json"),
            "run {i}: no resume line: {stderr}"
        );
        // A pause: nothing failed, no attempt beyond the first, no end.
        for e in &events {
            let kind = e["event_type"].as_str().unwrap();
            assert!(
                !matches!(
                    kind,
                    "node.failed" | "node.attempt.failed" | "run.failed" | "run.succeeded"
                ),
                "run {i}: SIG{name} recorded {kind}: {e}"
            );
            assert!(
                e["payload"]["attempt"].as_u64().unwrap_or(0) <= 1,
                "run {i}: a second attempt: {e}"
            );
        }
        let stopped: Vec<String> = lines(&run.join(RunDir::ANNEX))
            .iter()
            .filter(|e| e["event_type"] == "node.interrupted")
            .map(|e| e["payload"]["node_id"].as_str().unwrap().to_string())
            .collect();
        // Each node still running when the signal came is on record.
        let running: Vec<String> = {
            let mut open = std::collections::BTreeSet::new();
            for e in &events {
                let node = e["payload"]["node_id"].as_str().unwrap_or_default();
                match e["event_type"].as_str().unwrap() {
                    "node.running" => {
                        open.insert(node.to_string());
                    }
                    "node.succeeded" => {
                        open.remove(node);
                    }
                    _ => {}
                }
            }
            open.into_iter().collect()
        };
        // Each node still running is on record as interrupted (one whose
        // turn came back whole during the stop was kept as it ended).
        for node in &running {
            assert!(
                stopped.contains(node),
                "run {i}: {node} was running and is not on record: {stopped:?}"
            );
        }
        // The stop's report names what it interrupted as such.
        let report = String::from_utf8_lossy(&out.stdout);
        for node in running.iter().filter(|n| stopped.contains(n)) {
            assert!(
                report.contains(&format!(
                    "‖ node '{node}': INTERRUPTED (taken up again on resume)"
                )),
                "run {i}: {node}: {report}"
            );
        }
        let ended: Vec<&str> = events
            .iter()
            .filter(|e| e["event_type"] == "node.succeeded")
            .map(|e| e["payload"]["node_id"].as_str().unwrap())
            .collect();
        let open = ids.len() - ended.len();
        if open == 0 {
            // The stop came as the last nodes were ending, and each ended
            // within the moment it gives a finishing command: the resume
            // has nothing to start, needs no prompt, and ends the run.
            let bare = bl_in(&dir, &["graph", "resume", "--run", "run"]);
            assert_eq!(bare.status.code(), Some(0), "run {i}: {}", said(&bare));
            assert_eq!(
                calls_by_node(&dir).values().sum::<usize>(),
                ids.len(),
                "run {i}"
            );
            continue;
        }
        // A resume without the prompts is refused, naming every agent node
        // it may start (bounded-loops' first line names one), and changes
        // nothing: the resume below is the run's first.
        let bare = bl_in(&dir, &["graph", "resume", "--run", "run"]);
        assert_eq!(bare.status.code(), Some(2), "run {i}: {}", said(&bare));
        let refusal = said(&bare);
        match refusal.split_once("it needs the prompt of each agent node it may start: ") {
            Some((_, rest)) => {
                let listed = rest.split(';').next().unwrap();
                let named: Vec<&str> = listed.split(", ").filter(|n| !n.starts_with('…')).collect();
                assert_eq!(named.len(), open.min(10), "run {i}: {refusal}");
                assert!(
                    named.iter().all(|n| ids.contains(n) && !ended.contains(n)),
                    "run {i}: {refusal}"
                );
                assert_eq!(listed.contains("more)"), open > 10, "run {i}: {refusal}");
            }
            None => assert_eq!(
                open, 1,
                "run {i}: one line for {open} open nodes: {refusal}"
            ),
        }
        let resumed = bl_in(&dir, RESUME);
        assert_eq!(
            resumed.status.code(),
            Some(0),
            "run {i}: {}",
            said(&resumed)
        );
        // Its progress shows what is new: the nodes that had ended are
        // counted, not shown as if they ended again, and each interrupted
        // attempt is said to be taken up again.
        let progress = String::from_utf8_lossy(&resumed.stderr);
        for node in &ended {
            assert!(
                !progress.contains(&format!("  ✓ {node}\n")),
                "run {i}: {node}: {progress}"
            );
        }
        if !ended.is_empty() {
            let said = format!(
                "  {} node(s) had already ended: kept as they were, not run again",
                ended.len()
            );
            assert!(progress.contains(&said), "run {i}: {progress}");
        }
        for node in running.iter().filter(|n| stopped.contains(n)) {
            let said = format!("  ↻ {node}: its unfinished attempt is taken up again");
            assert!(progress.contains(&said), "run {i}: {progress}");
        }
        // One agent call per node, plus one per interrupted attempt (an
        // attempt the stop caught before its agent had started makes none).
        let calls = calls_by_node(&dir);
        for id in &ids {
            let made = calls.get(*id).copied().unwrap_or(0);
            let most = 1 + usize::from(stopped.iter().any(|s| s == id));
            assert!(
                (1..=most).contains(&made),
                "run {i}: {made} agent calls for {id} ({stopped:?} interrupted): {calls:?}"
            );
        }
        let verify = bl_in(&dir, &["verify", "run"]);
        assert!(verify.status.success(), "run {i}: {}", said(&verify));
        // A run that has ended is not resumed again.
        let again = bl_in(&dir, RESUME);
        assert_eq!(again.status.code(), Some(2), "run {i}: {}", said(&again));
        run_dirs.push(run);
    }
    assert!(
        interrupted_runs >= 15,
        "only {interrupted_runs} of 20 signals interrupted a run: the delays do not fit it"
    );
    if let Some(statuses) = bl_e2e::upstream_status(&run_dirs) {
        for (dir, code, stderr) in statuses {
            assert_eq!(code, 0, "bounded-loops refuses {}: {stderr}", dir.display());
        }
    }
}

/// An agent that has printed its reply and is still exiting when the
/// stop comes (a CLI's teardown) is given a moment to end by itself: its
/// finished turn is kept, and the resume does not pay for it again.
#[test]
fn a_turn_that_ends_just_after_the_stop_is_kept_not_taken_again() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (state, printed) = (dir.join("state"), dir.join("state/printed"));
    let agent = format!(
        "#!/bin/sh\ncat >/dev/null\necho call >> {calls}\nprintf '%s\\n' '{reply}'\ntouch {printed}\nsleep 0.1\n",
        calls = state.join("calls").display(),
        reply = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,"session_id":"s","total_cost_usd":0.0,"usage":{"input_tokens":1,"output_tokens":1}}"#,
        printed = printed.display(),
    );
    write_case(
        dir,
        graph(&["a"], &[], "workspace_only"),
        &json!({"a": "ok"}),
        Some(&agent),
    );
    let child = start(dir, RUN);
    let since = Instant::now();
    while !printed.exists() {
        assert!(
            since.elapsed() < Duration::from_secs(30),
            "the agent never replied"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    signal(&child, "INT");
    let stopped = child.wait_with_output().unwrap();
    let calls = || {
        std::fs::read_to_string(state.join("calls"))
            .unwrap()
            .lines()
            .count()
    };
    let ended: Vec<Value> = lines(&dir.join("run").join(RunDir::EVENTS))
        .into_iter()
        .filter(|e| e["event_type"] == "node.succeeded")
        .collect();
    assert_eq!(
        ended.len(),
        1,
        "the finished turn was not kept: {}",
        said(&stopped)
    );
    let resumed = bl_in(dir, RESUME);
    assert!(resumed.status.code().is_some(), "{}", said(&resumed));
    assert_eq!(
        calls(),
        1,
        "the turn was paid for again: {}",
        said(&resumed)
    );
    assert!(bl_in(dir, &["verify", "run"]).status.success());
}

#[test]
fn a_second_signal_stops_at_once_with_the_same_record() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_case(
        dir,
        graph(&["a", "b"], &[], "workspace_only"),
        &json!({"a": "sleep:30:a", "b": "sleep:30:b"}),
        None,
    );
    let mut args = RUN.to_vec();
    args.extend(["--concurrency", "2"]);
    let child = start(dir, &args);
    wait_logged(&dir.join("run"), "b:node.running");
    // While it runs, status says so; once stopped, it says how to go on.
    let state_line = |dir: &Path| {
        let status = bl_in(dir, &["graph", "status", "--run", "run"]);
        String::from_utf8_lossy(&status.stdout)
            .lines()
            .find(|l| l.starts_with("state "))
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(state_line(dir), "state     : RUNNING");
    std::thread::sleep(Duration::from_millis(200));
    signal(&child, "INT");
    signal(&child, "INT");
    let asked = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "took {:?}",
        asked.elapsed()
    );
    assert_eq!(out.status.code(), Some(130), "{}", said(&out));
    // Whether the run reported before the second signal ended bl or not,
    // bl says how to go on.
    let told = String::from_utf8_lossy(&out.stderr);
    assert!(
        told.contains("Continue it:  bl graph resume --run "),
        "{told}"
    );
    let stopped: Vec<Value> = lines(&dir.join("run").join(RunDir::ANNEX));
    let nodes: Vec<&str> = stopped
        .iter()
        .map(|e| e["payload"]["node_id"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["a", "b"], "{stopped:?}");
    assert!(gone_within("sleep:30", Duration::from_secs(2)).is_empty());
    assert_eq!(
        state_line(dir),
        "state     : STOPPED before it ended: `bl graph resume` continues it"
    );
    // The same record as a patient stop: both re-driven once, nothing else.
    std::fs::write(
        dir.join("inputs.json"),
        json!({"a": "quick:a", "b": "quick:b"}).to_string(),
    )
    .unwrap();
    let resumed = bl_in(dir, RESUME);
    assert_eq!(resumed.status.code(), Some(0), "{}", said(&resumed));
    let calls = calls_by_node(dir);
    assert_eq!(calls.get("a"), Some(&2), "{calls:?}");
    assert_eq!(calls.get("b"), Some(&2), "{calls:?}");
}

/// A stand-in agent CLI (`claude`): for a prompt `work:<marker>` it starts a
/// helper, and a daemon that leaves its session (setsid, fork, fork), all
/// marked, then works a long while; for `daemon:<marker>` it starts them,
/// and one more that hides (its containment marker cleared, moved out of
/// its cgroup where it can), and answers at once; otherwise it answers at
/// once. Each call is counted
/// in `../state/calls.jsonl` when that is reachable.
const MARKED_AGENT: &str = r#"#!/bin/sh
prompt=$(cat)
here=$(dirname "$0")
printf '{"prompt": "%s"}\n' "$prompt" >> "$here/../state/calls.jsonl" 2>/dev/null
marker=${prompt#*:}
linger() { python3 -c 'import time; time.sleep(300)' "$marker" ; }
case "$prompt" in
  work:*|daemon:*)
    linger &
    ( setsid sh -c "python3 -c 'import time; time.sleep(300)' $marker & python3 -c 'import os, time; os.fork() or time.sleep(300)' $marker" & )
    ;;
esac
case "$prompt" in
  daemon:*)
    # Hiding: its marker cleared, and out of its cgroup where it may write
    # the root one (root, uncaged). bl, alive, still finds it: an orphan.
    ( env -u BL_CONTAINED setsid sh -c "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs; do echo 0 > \$f 2>/dev/null; done; exec python3 -c 'import time; time.sleep(300)' $marker" & )
    ;;
esac
case "$prompt" in
  work:*) sleep 300 ;;
esac
printf '{"type":"result","subtype":"success","is_error":false,"result":"done %s","usage":{"input_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}\n' "$prompt"
"#;

/// The watchdog bl started (its child, running as `bl-watchdog`).
fn watchdog_of(bl: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read_to_string(e.path().join("cmdline")).ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let ppid: u32 = stat[stat.rfind(')')? + 2..]
            .split(' ')
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == bl && cmdline.starts_with("bl-watchdog")).then_some(pid)
    })
}

#[test]
fn a_killed_controller_leaves_no_agent_running_and_resume_makes_the_turn_once() {
    let mut cases = vec![("workspace_only", "auto"), ("workspace_only", "subreaper")];
    if cage_works() {
        cases.push(("process_restricted", "auto"));
    }
    for (tier, containment) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let marker = format!("bl-e2e-kill-{tier}-{containment}-{}", std::process::id());
        write_case(
            dir,
            graph(&["a"], &[], tier),
            &json!({"a": format!("work:{marker}")}),
            Some(MARKED_AGENT),
        );
        let mut child = command(dir, RUN)
            .env("BL_SANDBOX_CONTAINMENT", containment)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_logged(&dir.join("run"), "a:node.running");
        // The agent, its helper and its daemon are up.
        let since = Instant::now();
        while alive_with(&marker).len() < 3 && since.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            alive_with(&marker).len() >= 3,
            "{tier}/{containment}: {:?}",
            alive_with(&marker)
        );
        child.kill().unwrap();
        child.wait().unwrap();
        let left = gone_within(&marker, Duration::from_secs(2));
        assert!(
            left.is_empty(),
            "{tier}/{containment}: 2 s after bl was killed, still alive: {left:?}\n{}",
            described_with(&marker).join("\n")
        );
        // Without its prompt the re-driven attempt would fail: refused,
        // and the run is left as it was.
        let bare = bl_in(dir, &["graph", "resume", "--run", "run"]);
        assert_eq!(bare.status.code(), Some(2), "{}", said(&bare));
        assert!(
            said(&bare).contains("connector node 'a' was stopped while RUNNING"),
            "{}",
            said(&bare)
        );
        // The turn is made again once, by the resume alone.
        std::fs::write(dir.join("inputs.json"), json!({"a": "quick:a"}).to_string()).unwrap();
        let resumed = bl_in(dir, RESUME);
        assert_eq!(resumed.status.code(), Some(0), "{}", said(&resumed));
        if tier == "workspace_only" {
            // (A caged agent, another user, cannot write the test's record.)
            let calls = lines(&dir.join("state/calls.jsonl"));
            assert_eq!(calls.len(), 2, "{containment}: {calls:?}");
            assert_eq!(calls[1]["prompt"], "quick:a");
        }
    }
}

/// A turn that finished is never paid for twice: a controller stopped at
/// once (a second Ctrl-C) or killed while its gate judges the workspace
/// leaves that turn marked, and the resume judges it again instead of
/// calling the agent again.
#[test]
fn a_turn_stopped_or_killed_in_its_gate_is_judged_again_on_resume_not_taken_again() {
    for how in ["two Ctrl-C", "kill -9"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut manifest, connections) = graph(&["a"], &[], "workspace_only");
        manifest["extensions"] = json!(["artifact-ports"]);
        manifest["nodes"][0]["outputs"] = json!({});
        manifest["nodes"][0]["gate"] = json!({"plugin": "command", "grants": ["command"],
            "config": {"argv": ["sleep", "2"]}});
        write_case(dir, (manifest, connections), &json!({"a": "ok"}), None);
        let plugins = bl_e2e::plugin_dir();
        let mut child = command(dir, RUN)
            .env("BL_PLUGIN_PATH", &plugins)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_logged(&dir.join("run"), "a:node.gating");
        if how == "kill -9" {
            child.kill().unwrap();
        } else {
            signal(&child, "INT");
            std::thread::sleep(Duration::from_millis(200));
            signal(&child, "INT");
        }
        let stopped = child.wait_with_output().unwrap();
        if how != "kill -9" {
            assert!(
                said(&stopped)
                    .contains("a: stopped in its gate; the resume judges its finished turn again"),
                "{}",
                said(&stopped)
            );
        }
        let calls = || lines(&dir.join("state/calls.jsonl")).len();
        assert_eq!(calls(), 1, "{how}");
        let resumed = command(dir, RESUME)
            .env("BL_PLUGIN_PATH", &plugins)
            .output()
            .unwrap();
        assert_eq!(resumed.status.code(), Some(0), "{how}: {}", said(&resumed));
        assert!(
            said(&resumed).contains("a: judging again the turn its worker finished"),
            "{how}: {}",
            said(&resumed)
        );
        assert_eq!(calls(), 1, "{how}: the resume took no new turn");
        let events = lines(&dir.join("run").join(RunDir::EVENTS));
        let spends = events
            .iter()
            .filter(|e| e["event_type"] == "node.spend")
            .count();
        assert_eq!(spends, 1, "{how}: one turn paid for: {events:?}");
        let verified = bl_in(dir, &["verify", "run"]);
        assert!(verified.status.success(), "{how}: {}", said(&verified));
        // The marks are no interruptions: a kill -9 recorded none.
        let interruptions = if how == "kill -9" { 0 } else { 1 };
        assert!(
            said(&verified).contains(&format!(
                "{interruptions} interruption(s) and 2 finished turn(s) marked"
            )),
            "{how}: {}",
            said(&verified)
        );
    }
}

/// With its watchdog killed first, a killed bl does leave agents running:
/// the resume ends them (from the run's record of what it started) before
/// it re-drives the turn.
#[test]
fn resume_ends_what_a_dead_controller_left_running_before_it_re_drives() {
    for containment in ["auto", "subreaper"] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let marker = format!("bl-e2e-survivor-{containment}-{}", std::process::id());
        write_case(
            dir,
            graph(&["a"], &[], "workspace_only"),
            &json!({"a": format!("work:{marker}")}),
            Some(MARKED_AGENT),
        );
        let mut child = command(dir, RUN)
            .env("BL_SANDBOX_CONTAINMENT", containment)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_logged(&dir.join("run"), "a:node.running");
        let since = Instant::now();
        while alive_with(&marker).len() < 3 && since.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let watchdog = watchdog_of(child.id()).expect("bl runs a watchdog");
        assert!(
            Command::new("kill")
                .args(["-KILL", &watchdog.to_string()])
                .status()
                .unwrap()
                .success()
        );
        std::thread::sleep(Duration::from_millis(100));
        child.kill().unwrap();
        child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        // Another bl starting meanwhile (tests run side by side) ends a
        // dead bl's cgroup too; the walk's leftovers wait for this resume.
        let survivors = alive_with(&marker);
        assert!(
            containment == "auto" || !survivors.is_empty(),
            "{containment}: nothing survived, so nothing is shown here"
        );
        // Status says `a` was cut short, and why: its controller died.
        let status = bl_in(dir, &["graph", "status", "--run", "run"]);
        let row = String::from_utf8_lossy(&status.stdout)
            .lines()
            .find(|l| l.starts_with("a "))
            .unwrap_or_default()
            .to_string();
        assert!(
            row.contains("INTERRUPTED")
                && row.contains("its controller ended before the attempt did"),
            "{row}"
        );
        std::fs::write(dir.join("inputs.json"), json!({"a": "quick:a"}).to_string()).unwrap();
        let resumed = command(dir, RESUME)
            .env("BL_SANDBOX_CONTAINMENT", containment)
            .output()
            .unwrap();
        assert_eq!(resumed.status.code(), Some(0), "{}", said(&resumed));
        let left = gone_within(&marker, Duration::from_secs(2));
        assert!(left.is_empty(), "{containment}: after resume: {left:?}");
        let calls = lines(&dir.join("state/calls.jsonl"));
        assert_eq!(calls.len(), 2, "{containment}: {calls:?}");
    }
}

#[test]
fn a_daemonising_agent_leaves_nothing_behind_in_any_tier() {
    let caged = cage_works();
    let mut cases = vec![("workspace_only", "auto"), ("workspace_only", "subreaper")];
    if caged {
        cases.extend([
            ("process_restricted", "auto"),
            ("process_restricted", "subreaper"),
            ("container_restricted", "auto"),
        ]);
    }
    for (tier, containment) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let marker = format!("bl-e2e-daemon-{tier}-{containment}-{}", std::process::id());
        write_case(
            dir,
            graph(&["a", "b"], &[("a", "b")], tier),
            &json!({"a": format!("daemon:{marker}"), "b": format!("daemon:{marker}")}),
            Some(MARKED_AGENT),
        );
        let out = command(dir, RUN)
            .env("BL_SANDBOX_CONTAINMENT", containment)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{tier}/{containment}: {}",
            said(&out)
        );
        let left = alive_with(&marker);
        assert!(
            left.is_empty(),
            "{tier}/{containment}: the run ended, and still alive: {left:?}"
        );
    }
}

/// As root, with the project under a 0700 directory and `$HOME` a 0700
/// directory holding the agent CLI in `~/.local/bin` (a symlink into
/// `~/.local/share`, as Claude Code's installer lays it out) and its login
/// in `~/.claude`.
#[test]
fn a_caged_agent_as_root_in_a_home_directory_reads_its_login_and_nothing_else() {
    let root = String::from_utf8(Command::new("id").arg("-u").output().unwrap().stdout)
        .unwrap()
        .trim()
        == "0";
    if !root {
        eprintln!("SKIPPED: not root; this checks the cage bl makes for root");
        return;
    }
    if !cage_works() {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap(); // 0700, as mktemp -d
    let home = tmp.path().join("home");
    let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    for d in [
        ".local/bin",
        ".local/share/claude/versions",
        ".claude",
        ".ssh",
        ".config",
        "work",
    ] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    // Readable by anyone, but for the cover: what hides the rest of the
    // home is the cage, not the modes. (The run lies under a 0700 parent.)
    mode(&home, 0o755).unwrap();
    mode(&home.join("work"), 0o700).unwrap();
    std::fs::write(
        home.join(".claude/.credentials.json"),
        "{\"token\":\"login\"}",
    )
    .unwrap();
    mode(&home.join(".claude/.credentials.json"), 0o600).unwrap();
    std::fs::write(home.join(".claude/settings.json"), "{}").unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "private key").unwrap();
    mode(&home.join(".ssh/id_ed25519"), 0o644).unwrap();
    std::fs::write(home.join(".config/other-secret"), "other").unwrap();
    mode(&home.join(".config/other-secret"), 0o644).unwrap();
    let agent = r#"#!/bin/sh
cat > /dev/null
login=denied; history=denied; ssh=denied; other=denied; rootssh=denied; settings=pinned
cat "$HOME/.claude/.credentials.json" >/dev/null 2>&1 && login=ok
echo '{"turn":1}' >> "$HOME/.claude/history.jsonl" 2>/dev/null && history=ok
echo '{"hooks":"planted"}' > "$HOME/.claude/settings.json" 2>/dev/null && settings=WRITTEN
cat "$HOME/.ssh/id_ed25519" >/dev/null 2>&1 && ssh=READ
cat "$HOME/.config/other-secret" >/dev/null 2>&1 && other=READ
ls /root/.ssh >/dev/null 2>&1 && rootssh=READ
printf '{"type":"result","subtype":"success","is_error":false,"result":"uid=%s login=%s history=%s ssh=%s other=%s rootssh=%s settings=%s","usage":{"input_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}\n' "$(id -u)" $login $history $ssh $other $rootssh $settings
"#;
    let real = home.join(".local/share/claude/versions/1.0.0");
    std::fs::write(&real, agent).unwrap();
    mode(&real, 0o700).unwrap();
    std::os::unix::fs::symlink(
        "../share/claude/versions/1.0.0",
        home.join(".local/bin/claude"),
    )
    .unwrap();
    let dir = home.join("work");
    let (manifest, connections) = graph(&["a"], &[], "process_restricted");
    for (name, v) in [
        ("manifest.json", &manifest),
        ("connections.json", &connections),
        ("inputs.json", &json!({"a": "go"})),
    ] {
        std::fs::write(dir.join(name), v.to_string()).unwrap();
    }
    let out = Command::new(bl_binary())
        .args(RUN)
        .current_dir(&dir)
        .env("HOME", &home)
        .env(
            "PATH",
            format!(
                "{}:{}",
                home.join(".local/bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
    let run = dir.join("run");
    let succeeded = lines(&run.join(RunDir::EVENTS))
        .into_iter()
        .find(|e| e["event_type"] == "node.succeeded")
        .unwrap();
    let digest = succeeded["payload"]["artifact_digests"][0]
        .as_str()
        .unwrap()
        .trim_start_matches("sha256:")
        .to_string();
    let reply = std::fs::read_to_string(run.join("artifacts/objects").join(digest)).unwrap();
    assert_eq!(
        reply,
        "uid=65534 login=ok history=ok ssh=denied other=denied rootssh=denied settings=pinned",
        "what the caged agent could reach"
    );
    // Its session file landed in the real home, as the operator's.
    let history = home.join(".claude/history.jsonl");
    assert_eq!(std::fs::read_to_string(&history).unwrap(), "{\"turn\":1}\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&history).unwrap().uid(), 0);
    // Nothing of the host was made readable to others on the way.
    let credentials = std::fs::metadata(home.join(".claude/.credentials.json")).unwrap();
    assert_eq!(credentials.mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(&home).unwrap().mode() & 0o777, 0o755);
    assert_eq!(
        std::fs::read_to_string(home.join(".claude/settings.json")).unwrap(),
        "{}"
    );
}

#[test]
fn why_a_worker_failed_is_kept_redacted_and_shown() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let agent = r#"#!/bin/sh
cat > /dev/null
echo "connecting with key $MY_API_KEY" >&2
echo "error: the provider said no (401)" >&2
exit 1
"#;
    write_case(
        dir,
        graph(&["a"], &[], "workspace_only"),
        &json!({"a": "go"}),
        Some(agent),
    );
    let catalog = dir.join("providers.toml");
    std::fs::write(
        &catalog,
        "[providers.claude]\nprompt_via = \"stdin\"\nenvelope = \"claude\"\nusage_args = [\"--output-format\", \"json\"]\nargs = [\"-p\"]\nenv_grant = [\"MY_API_KEY\"]\n",
    )
    .unwrap();
    let mut args = RUN.to_vec();
    args.extend(["--providers", "providers.toml"]);
    let out = command(dir, &args)
        .env("MY_API_KEY", "sk-test-0123456789abcdef")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("✗ a (worker_fault)") && stderr.contains("the provider said no (401)"),
        "{stderr}"
    );
    let log = bl_e2e::log_text(&dir.join("run").join(RunDir::EVENTS));
    assert!(
        !log.contains("sk-test-0123456789abcdef"),
        "the key is in the log"
    );
    let failed = lines(&dir.join("run").join(RunDir::EVENTS))
        .into_iter()
        .find(|e| e["event_type"] == "node.failed")
        .unwrap();
    let reason = failed["payload"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("worker execution failed: 'claude' exited with code 1")
            && reason.contains("connecting with key [redacted]")
            && reason.contains("the provider said no (401)"),
        "{reason}"
    );
    let status = bl_in(dir, &["graph", "status", "--run", "run"]);
    let text = String::from_utf8_lossy(&status.stdout);
    let row = text.lines().find(|l| l.starts_with("a ")).unwrap();
    assert!(
        text.contains("REASON") && row.contains("the provider said no (401)"),
        "{text}"
    );
    if let Some(statuses) = bl_e2e::upstream_status(&[dir.join("run")]) {
        assert_eq!(
            statuses[0].1, 0,
            "bounded-loops refuses it: {}",
            statuses[0].2
        );
    }
}
