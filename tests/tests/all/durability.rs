//! How often a run makes its records durable. Artifacts and the events
//! that name them are synced together, in groups (at pauses, before a
//! publish, at the end), so the fsyncs of a run do not grow with its
//! nodes. Counted with strace on the real binary, over the benchmark's
//! fan-out (benchmarks/graph/make_graph.py) at two sizes.

use std::path::Path;
use std::process::Command;

use bl_e2e::{bl_binary, repo_root};

/// The fsync and fdatasync calls of one `bl graph run` of `n` nodes.
fn syncs_of_a_run(n: usize) -> u64 {
    let case = tempfile::tempdir().unwrap();
    let dir = case.path().join("graph");
    let made = Command::new("python3")
        .arg(repo_root().join("benchmarks/graph/make_graph.py"))
        .arg(n.to_string())
        .arg("workspace_only")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(made.success());
    let counts = case.path().join("strace.txt");
    let path = bl_e2e::path_with_fakes(&dir);
    let run = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&counts)
        .arg(bl_binary())
        .args(bl_e2e::GRAPH_RUN)
        .current_dir(&dir)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    count_syncs(&counts)
}

/// The calls column of strace's summary, for fsync and fdatasync.
fn count_syncs(summary: &Path) -> u64 {
    std::fs::read_to_string(summary)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.last()?;
            (*name == "fsync" || *name == "fdatasync")
                .then(|| fields[3].parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

fn strace_works() -> bool {
    let works = Command::new("strace")
        .args(["-f", "-c", "-o", "/dev/null", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !works && std::env::var("CI").as_deref() == Ok("true") {
        panic!("strace is missing or cannot trace here; scripts/dev test installs it");
    }
    works
}

#[test]
fn a_runs_fsyncs_do_not_grow_with_its_nodes() {
    if !strace_works() {
        eprintln!("skipped: strace cannot trace on this machine");
        return;
    }
    let small = syncs_of_a_run(10);
    let large = syncs_of_a_run(80);
    assert!(small > 0, "a run that syncs nothing is not durable");
    assert_eq!(
        small, large,
        "10 nodes made {small} fsyncs, 80 made {large}: a sync per node is back"
    );
    assert!(small <= 12, "{small} fsyncs for one run");
}
