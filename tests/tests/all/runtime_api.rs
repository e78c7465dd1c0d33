//! The runtime API of bl-app, driven in-process as the pages, the MCP
//! server and remote workers will drive it: a run started on its own
//! thread, followed by log position across a reconnect, approved only
//! against the request digest that was shown, cancelled and resumed, then
//! verified. The graph is the newcomer's first graph, with its recorded
//! replies: real plugins, a real log, no key and no network.

use std::path::{Path, PathBuf};

use bl_app::graph_run::DriveOptions;
use bl_app::loop_runtime::LoopStatus;
use bl_app::runtime::GraphRuntime;
use bl_e2e::{first_graph, repo_root};
use bl_run::executor::RunEnd;

fn runtime(dir: &Path) -> GraphRuntime {
    GraphRuntime::new(DriveOptions {
        inputs: Some(dir.join("inputs.json")),
        recorded: Some(dir.join("replies.json")),
        concurrency: Some(2),
        ..Default::default()
    })
}

fn start(runtime: &GraphRuntime, dir: &Path) -> bl_app::runtime::RunHandle {
    runtime.run(
        dir.join("graph.yaml"),
        Some(dir.join("connections.json")),
        dir.join("run"),
    )
}

fn approvals_file(run: &Path) -> Option<String> {
    std::fs::read_to_string(bl_store::RunDir::new(run).approvals()).ok()
}

#[test]
fn a_run_is_followed_by_position_and_approved_only_as_it_was_shown() {
    let case = first_graph();
    let runtime = runtime(case.path());
    let handle = start(&runtime, case.path());
    let run: PathBuf = handle.dir().to_path_buf();
    let mut watcher = runtime.subscribe(&run, 0);
    let driven = handle.wait().unwrap();
    assert!(
        matches!(&driven.end, RunEnd::AwaitingApproval(nodes) if nodes == &["review".to_string()]),
        "{:?}",
        driven.end
    );

    // Every event once, in order, from the first.
    let seen = watcher.poll().unwrap();
    assert!(seen.len() > 5, "{seen:?}");
    for (at, event) in seen.iter().enumerate() {
        assert_eq!(event.sequence, at as u64 + 1);
    }
    assert_eq!(watcher.position(), seen.len() as u64);
    assert!(
        watcher.poll().unwrap().is_empty(),
        "nothing new, nothing given"
    );
    // A watcher that reconnects from a position gets exactly the rest.
    let mut reconnected = runtime.subscribe(&run, 3);
    let rest = reconnected.poll().unwrap();
    assert_eq!(rest.len(), seen.len() - 3);
    assert_eq!(rest[0].sequence, 4);
    assert_eq!(rest[0].line, seen[3].line);

    // The approval waits with what a decision is bound to.
    let pending = runtime.pending_approvals(&run).unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].node_id, "review");
    assert!(!pending[0].evidence.is_empty(), "{pending:?}");
    assert!(pending[0].request_digest.starts_with("sha256:"));

    // A decision on something else than what was shown is refused, and
    // nothing is recorded.
    let before = approvals_file(&run);
    let stale = format!("sha256:{}", "0".repeat(64));
    let refused = runtime.approve(&run, "review", &stale, None).err().unwrap();
    assert!(
        refused.message().contains("changed since it was shown"),
        "{refused}"
    );
    assert_eq!(approvals_file(&run), before);
    let refused = runtime
        .approve(&run, "publish", &pending[0].request_digest, None)
        .err()
        .unwrap();
    assert!(
        refused.message().contains("not waiting for a decision"),
        "{refused}"
    );
    assert_eq!(runtime.status(&run).unwrap().view.run_state, "RUNNING");

    // Approved as shown: the run goes on to publish and ends.
    let approved = runtime
        .approve(&run, "review", &pending[0].request_digest, None)
        .unwrap();
    assert_eq!(approved.view.run_state, "SUCCEEDED");
    assert!(matches!(approved.end, Some(RunEnd::Succeeded)));
    assert!(runtime.pending_approvals(&run).unwrap().is_empty());

    // The first watcher carries on where it stopped.
    let after = watcher.poll().unwrap();
    assert_eq!(
        after.first().map(|e| e.sequence),
        Some(seen.len() as u64 + 1)
    );
    assert!(
        after.iter().any(|e| e.event_type == "run.succeeded"),
        "{:?}",
        after.iter().map(|e| &e.event_type).collect::<Vec<_>>()
    );

    let artifacts = runtime.artifacts(&run).unwrap();
    assert!(
        artifacts
            .iter()
            .any(|a| a["path"] == "workspace/brief.md" && a["producer"]["node_id"] == "write-brief"),
        "{artifacts:?}"
    );
    let report = runtime
        .verify(&run, &bl_verify::Options::default())
        .unwrap();
    assert!(report.ok(), "{report:?}");

    // A line appended that does not chain is refused to the watcher that
    // had read the rest, as it is to a new one; so is a log cut short.
    let log = bl_store::RunDir::new(&run).events();
    let whole = std::fs::read(&log).unwrap();
    let mut forged = whole.clone();
    let last = whole[..whole.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1);
    forged.extend_from_slice(&whole[last..]);
    std::fs::write(&log, &forged).unwrap();
    assert!(watcher.poll().is_err(), "a replayed line was handed out");
    assert!(runtime.subscribe(&run, 0).poll().is_err());
    let mut reader = runtime.subscribe(&run, 0);
    std::fs::write(&log, &whole).unwrap();
    reader.poll().unwrap();
    std::fs::write(&log, &whole[..last]).unwrap();
    let shrank = reader.poll().err().unwrap();
    assert!(shrank.message().contains("shrank"), "{shrank}");
}

#[test]
fn a_cancelled_run_starts_nothing_more_and_resumes_where_it_stopped() {
    let case = first_graph();
    let runtime = runtime(case.path());
    let handle = start(&runtime, case.path());
    handle.cancel();
    let run = handle.dir().to_path_buf();
    let driven = handle.wait().unwrap();
    assert!(
        matches!(driven.end, RunEnd::Interrupted { signal: 15, .. }),
        "{:?}",
        driven.end
    );
    let status = runtime.status(&run).unwrap();
    assert_eq!(status.view.run_state, "RUNNING", "stopped, not ended");
    assert!(!status.live, "no one writes it now");

    let resumed = runtime.resume(&run).wait().unwrap();
    assert!(
        matches!(&resumed.end, RunEnd::AwaitingApproval(nodes) if nodes == &["review".to_string()]),
        "{:?}",
        resumed.end
    );
    let report = runtime
        .verify(&run, &bl_verify::Options::default())
        .unwrap();
    assert!(report.ok(), "{report:?}");
}

/// A copy of a loop package to run in.
fn loop_copy(name: &str) -> tempfile::TempDir {
    let case = tempfile::tempdir().unwrap();
    let from = repo_root().join("examples/loops").join(name);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(case.path())
        .status()
        .unwrap();
    assert!(status.success());
    case
}

struct NoOneApproves;

impl bl_app::loop_runtime::Approver for NoOneApproves {
    fn approved(&mut self, _lap: u32, _detail: &str) -> bool {
        false
    }
}

fn loop_request(dir: &Path, run_id: &str) -> bl_app::loop_run::LoopRequest {
    bl_app::loop_run::LoopRequest {
        loop_dir: dir.to_path_buf(),
        run_id: Some(run_id.into()),
        redact: "off".into(),
        ..Default::default()
    }
}

/// A loop run from the runtime API: the handle comes back at once, the
/// ledger is followed lap by lap (across a reconnect by position), and the
/// receipt and verification agree with what was followed.
#[test]
fn a_loop_runs_on_its_own_thread_and_its_ledger_is_followed_lap_by_lap() {
    let case = loop_copy("records-shell");
    let runtime = bl_app::loop_runtime::LoopRuntime::new();
    let handle = runtime
        .run(loop_request(case.path(), "first"), Box::new(NoOneApproves))
        .unwrap();
    let mut seen = Vec::new();
    let mut lines = runtime.subscribe(handle.ledger(), 0);
    while !handle.is_finished() {
        seen.extend(lines.wait(std::time::Duration::from_millis(200)).unwrap());
        if let Some(last) = seen.last() {
            // A watcher that reconnects asks again from where it was.
            lines = runtime.subscribe(handle.ledger(), last.number);
        }
    }
    let run = handle.wait().unwrap();
    seen.extend(lines.poll().unwrap());
    assert_eq!(
        run.outcome.status,
        LoopStatus::Done,
        "{}",
        run.outcome.reason
    );
    let numbers: Vec<usize> = seen.iter().map(|l| l.number).collect();
    let all: Vec<usize> = (1..=run.outcome.laps as usize).collect();
    assert_eq!(numbers, all, "every lap once, in order");
    let run_dir = run.run_dir.clone().unwrap();
    assert_eq!(
        run_dir,
        case.path()
            .canonicalize()
            .unwrap()
            .join(".bounded-loops/runs/first")
    );
    let receipt = runtime.receipt(&run_dir).unwrap();
    assert!(
        receipt.json_text.contains("\"DONE\""),
        "{}",
        receipt.json_text
    );
    let report = runtime.verify(&run_dir, &Default::default()).unwrap();
    assert!(report.ok(), "{report:?}");
}

/// A cancel stops that loop alone before its next lap: it ends KILLED, and
/// the laps it made stay on record.
#[test]
fn a_cancelled_loop_ends_killed_before_its_next_lap() {
    let case = loop_copy("records-shell");
    // An agent that makes progress slowly and never satisfies the gate.
    let yaml = std::fs::read_to_string(case.path().join("loop.yaml")).unwrap();
    let yaml = yaml.replace(
        "agent_cmd: python3 seed/agent.py",
        r#"agent_cmd: python3 -c "import time; time.sleep(0.4); open('progress.txt', 'a').write('x')""#,
    );
    std::fs::write(case.path().join("loop.yaml"), yaml).unwrap();
    let runtime = bl_app::loop_runtime::LoopRuntime::new();
    let handle = runtime
        .run(
            loop_request(case.path(), "stopped"),
            Box::new(NoOneApproves),
        )
        .unwrap();
    let mut lines = runtime.subscribe(handle.ledger(), 0);
    let mut first = Vec::new();
    while first.is_empty() && !handle.is_finished() {
        first = lines.wait(std::time::Duration::from_millis(100)).unwrap();
    }
    assert_eq!(
        first.first().map(|l| l.number),
        Some(1),
        "the loop ended before its first lap"
    );
    handle.cancel();
    let run = handle.wait().unwrap();
    assert_eq!(
        run.outcome.status,
        LoopStatus::Killed,
        "{}",
        run.outcome.reason
    );
    assert!(run.outcome.laps <= 3, "stopped at lap {}", run.outcome.laps);
    let recorded = runtime.subscribe(&run.ledger, 0).poll().unwrap();
    assert_eq!(recorded.len() as u32, run.outcome.laps);
}

/// The command line is a client of the runtime: `bl graph approve` with
/// the request digest the person was shown refuses a decision on anything
/// else, recording nothing, and records one on exactly that.
#[test]
fn the_command_line_approves_only_against_the_request_digest_it_is_given() {
    let case = first_graph();
    let dir = case.path();
    let bl = |args: &[&str]| {
        std::process::Command::new(bl_e2e::bl_binary())
            .args(args)
            .current_dir(dir)
            .env("BL_PLUGIN_PATH", bl_e2e::plugin_dir())
            .output()
            .unwrap()
    };
    let ran = bl(&[bl_e2e::RECORDED_GRAPH_RUN, &["--out", "run"]].concat());
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains("--node review"),
        "{}\n{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    let run = dir.join("run");
    let pending = GraphRuntime::default().pending_approvals(&run).unwrap();
    let stale = format!("sha256:{}", "0".repeat(64));
    let before = approvals_file(&run);
    let refused = bl(&[
        "graph",
        "approve",
        "--run",
        "run",
        "--node",
        "review",
        "--decision",
        "approved",
        "--request-digest",
        &stale,
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("changed since it was shown"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(approvals_file(&run), before, "nothing was recorded");
    let approved = bl(&[
        "graph",
        "approve",
        "--run",
        "run",
        "--node",
        "review",
        "--decision",
        "approved",
        "--request-digest",
        &pending[0].request_digest,
    ]);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    assert_eq!(
        GraphRuntime::default().status(&run).unwrap().view.run_state,
        "SUCCEEDED"
    );
}

/// A watcher's memory is bounded however long the log: a poll reads at
/// most `READ_AHEAD` bytes of lines, the next poll goes on from there, and
/// a watcher that starts late reads on until it has what it asked for.
#[test]
fn a_long_log_is_handed_out_in_bounded_pieces_in_order() {
    use bl_app::runtime::READ_AHEAD;
    let case = tempfile::tempdir().unwrap();
    let run = case.path().join("run");
    let log = bl_store::RunDir::new(&run).events();
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    let identity = bl_e2e::crash_run_identity();
    let mut head = bl_store::ChainHead::default();
    let mut bytes = Vec::new();
    let count = 5_000;
    for n in 0..count {
        let payload = serde_json::json!({"node_id": format!("n{n}"), "note": "x".repeat(700)});
        let (line, hash) = bl_store::chain::build_line(
            &head,
            &identity,
            &format!("e{n}"),
            "node.spend",
            &payload,
            "2026-12-03T10:00:00Z",
        );
        head.sequence += 1;
        head.hash = hash;
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    assert!(bytes.len() > 3 * READ_AHEAD, "{}", bytes.len());
    std::fs::write(&log, &bytes).unwrap();

    let runtime = GraphRuntime::new(DriveOptions::default());
    let mut watcher = runtime.subscribe(&run, 0);
    let mut seen = 0u64;
    let mut polls = 0;
    loop {
        let got = watcher.poll().unwrap();
        if got.is_empty() {
            break;
        }
        polls += 1;
        let read: usize = got.iter().map(|e| e.raw.len() + 1).sum();
        assert!(read <= READ_AHEAD, "one poll held {read} bytes");
        for event in got {
            seen += 1;
            assert_eq!(event.sequence, seen, "in order, each once");
        }
    }
    assert_eq!(seen, count);
    assert!(polls >= 3, "{polls} polls");
    // Starting near the end: the first poll has the last five, no more.
    let late = runtime.subscribe(&run, count - 5).poll().unwrap();
    let sequences: Vec<u64> = late.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (count - 4..=count).collect::<Vec<_>>());
    // Whole-log readers still get everything.
    assert_eq!(
        runtime.subscribe(&run, 0).read_to_end().unwrap().len() as u64,
        count
    );
    // A key appended again, pieces after its first line, is refused.
    let payload = serde_json::json!({"again": true});
    let (line, _) = bl_store::chain::build_line(
        &head,
        &identity,
        "e0",
        "node.spend",
        &payload,
        "2026-12-03T10:00:00Z",
    );
    bytes.extend_from_slice(line.as_bytes());
    bytes.push(b'\n');
    std::fs::write(&log, &bytes).unwrap();
    let refused = runtime.subscribe(&run, 0).read_to_end().unwrap_err();
    assert!(refused.message().contains("appears twice"), "{refused}");
}
