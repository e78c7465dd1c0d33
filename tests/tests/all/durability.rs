//! How often a run makes its records durable. Artifacts and the events
//! that name them are synced together, in groups (at pauses, before a
//! publish, at the end), so the syncs of a run do not grow with its
//! nodes. Counted with strace on the real binary, over the benchmark's
//! fan-out (benchmarks/graph/make_graph.py, each node's reply its own
//! artifact) at two sizes.

use std::path::Path;
use std::process::Command;

use bl_e2e::{bl_binary, repo_root};

/// The benchmark's fan-out of `n` workspace_only nodes
/// (benchmarks/graph/make_graph.py), written in `dir`.
fn fan_out(n: usize, dir: &Path) {
    let made = Command::new("python3")
        .arg(repo_root().join("benchmarks/graph/make_graph.py"))
        .arg(n.to_string())
        .arg("workspace_only")
        .arg(dir)
        .status()
        .unwrap();
    assert!(made.success());
}

/// The calls that make files durable (fsync, fdatasync, syncfs) of one
/// `bl graph run` of `n` nodes.
fn syncs_of_a_run(n: usize) -> u64 {
    let case = tempfile::tempdir().unwrap();
    let dir = case.path().join("graph");
    fan_out(n, &dir);
    let counts = case.path().join("strace.txt");
    let path = bl_e2e::path_with_fakes(&dir);
    let run = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync,syncfs", "-o"])
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
    // Each node's reply is an artifact of its own: a sync per artifact
    // would show, not hide behind one object stored N times.
    let objects = std::fs::read_dir(dir.join("run/artifacts/objects"))
        .unwrap()
        .count();
    assert!(objects >= n, "{n} nodes stored only {objects} artifacts");
    count_syncs(&counts)
}

/// The calls column of strace's summary, for fsync, fdatasync and syncfs.
fn count_syncs(summary: &Path) -> u64 {
    std::fs::read_to_string(summary)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.last()?;
            ["fsync", "fdatasync", "syncfs"]
                .contains(name)
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

/// The directories a traced run fsynced, as the `openat` calls before each
/// fsync named them (`strace -f -e trace=openat,fsync,fdatasync`).
fn synced_dirs(trace: &Path) -> Vec<String> {
    let mut opened: std::collections::HashMap<String, String> = Default::default();
    let mut synced = Vec::new();
    for line in std::fs::read_to_string(trace).unwrap().lines() {
        if let Some(rest) = line.split_once("openat(").map(|(_, r)| r) {
            let path = rest.split('"').nth(1).unwrap_or_default().to_string();
            if let Some(fd) = rest
                .rsplit("= ")
                .next()
                .and_then(|f| f.trim().parse::<u32>().ok())
            {
                opened.insert(fd.to_string(), path);
            }
        } else if let Some(rest) = line.split_once("fsync(").map(|(_, r)| r) {
            let fd = rest.split(')').next().unwrap_or_default();
            if let Some(path) = opened.get(fd) {
                synced.push(path.clone());
            }
        }
    }
    synced
}

/// A record a run starts, a graph run's event log or a loop's ledger, has
/// its name made durable too: the directory holding it is fsynced after
/// the file was made. A file's own fsync covers what it holds, not the
/// entry that names it, so without this a crash could lose a whole record
/// whose lines were on disk.
#[test]
fn a_new_event_log_and_a_new_ledger_have_their_names_made_durable() {
    if !strace_works() || !bl_e2e::cage_works() {
        return;
    }
    let traced = |dir: &Path, args: &[&str], env_path: Option<String>| {
        let trace = dir.join("strace.txt");
        let mut command = Command::new("strace");
        command
            .args(["-f", "-e", "trace=openat,fsync,fdatasync", "-o"])
            .arg(&trace)
            .arg(bl_binary())
            .args(args)
            .current_dir(dir);
        if let Some(path) = env_path {
            command.env("PATH", path);
        }
        let run = command.output().unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        synced_dirs(&trace)
    };
    let case = tempfile::tempdir().unwrap();
    let graph = case.path().join("graph");
    fan_out(3, &graph);
    let synced = traced(
        &graph,
        bl_e2e::GRAPH_RUN,
        Some(bl_e2e::path_with_fakes(&graph)),
    );
    assert!(
        synced.iter().any(|d| d == "run" || d.ends_with("/run")),
        "the run directory, holding the new event log, was never fsynced: {synced:?}"
    );
    let loops = case.path().join("loops");
    bl_e2e::copy_tree(
        &repo_root().join("examples/loops/readme-sections"),
        &loops.join("pkg"),
    );
    let synced = traced(&loops, &["run", "pkg", "--yes", "--json"], None);
    assert!(
        synced.iter().any(|d| d == "pkg" || d.ends_with("/pkg")),
        "the loop's directory, holding its new ledger, was never fsynced: {synced:?}"
    );
}
