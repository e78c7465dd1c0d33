//! `bl graph metrics`: a real run of four agents that each take more than
//! a second, two at a time, and what its log says of counts, times, spend
//! and parallelism.

use std::process::Command;

use bl_e2e::{bl_binary, repo_root};
use serde_json::Value;

#[test]
fn metrics_count_attempts_spend_and_the_parallelism_the_run_achieved() {
    let case = tempfile::tempdir().unwrap();
    let dir = case.path();
    let made = Command::new("python3")
        .arg(repo_root().join("benchmarks/graph/make_graph.py"))
        .args(["4", "workspace_only"])
        .arg(dir)
        .status()
        .unwrap();
    assert!(made.success());
    // Each agent takes 1.2 s, so every attempt spans a tick of the log's
    // one-second clock.
    let claude = dir.join("fake-bin/claude");
    let script = std::fs::read_to_string(&claude).unwrap();
    std::fs::write(
        &claude,
        script.replacen("cat >/dev/null\n", "cat >/dev/null\nsleep 1.2\n", 1),
    )
    .unwrap();
    let path = bl_e2e::path_with_fakes(dir);
    let ran = Command::new(bl_binary())
        .args(bl_e2e::GRAPH_RUN)
        .args(["--concurrency", "2"])
        .current_dir(dir)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );

    let bl = |args: &[&str]| {
        Command::new(bl_binary())
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
    };
    let out = bl(&["graph", "metrics", "--run", "run", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let totals = &m["totals"];
    assert_eq!(m["state"], "SUCCEEDED");
    assert_eq!(totals["nodes"], 4);
    assert_eq!(totals["succeeded"], 4);
    assert_eq!(totals["attempts"], 4);
    assert_eq!(totals["failed_attempts"], 0);
    assert_eq!(totals["tokens"], 60, "10 in and 5 out per agent: {m}");
    assert_eq!(m["parallelism"]["max_at_once"], 2, "{m}");
    assert!(totals["wall_s"].as_u64().unwrap() >= 2, "{m}");
    for node in m["nodes"].as_array().unwrap() {
        assert_eq!(node["attempts"], 1);
        assert!(node["run_s"].as_u64().unwrap() >= 1, "{node}");
        assert_eq!(node["tokens"], 15);
    }
    let mean = m["parallelism"]["mean"].as_f64().unwrap();
    assert!(mean > 1.0 && mean <= 4.0, "{m}");
    let spans = m["attempts"].as_array().unwrap();
    assert_eq!(spans.len(), 4);
    assert!(spans.iter().all(|s| s["outcome"] == "succeeded"));

    let text = bl(&["graph", "metrics", "--run", "run"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("at most 2 at once"), "{text}");
    assert!(
        text.contains("n00003") && text.contains("whole seconds"),
        "{text}"
    );

    // A log altered after the run is refused, not measured.
    let log = dir.join("run/controller-events.jsonl");
    let altered = std::fs::read_to_string(&log)
        .unwrap()
        .replacen("\"n00001\"", "\"n00009\"", 1);
    std::fs::write(&log, altered).unwrap();
    let out = bl(&["graph", "metrics", "--run", "run"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
