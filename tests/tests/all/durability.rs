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

/// `bl graph run` of the fan-out in `dir` under `strace` with `options`,
/// its trace written to `trace`; the run must succeed.
fn run_traced(dir: &Path, options: &[&str], trace: &Path) {
    let run = Command::new("strace")
        .args(options)
        .arg("-o")
        .arg(trace)
        .arg(bl_binary())
        .args(bl_e2e::GRAPH_RUN)
        .current_dir(dir)
        .env("PATH", bl_e2e::path_with_fakes(dir))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

/// The calls that make files durable (fsync, fdatasync, syncfs) of one
/// `bl graph run` of `n` nodes.
fn syncs_of_a_run(n: usize) -> u64 {
    let case = tempfile::tempdir().unwrap();
    let dir = case.path().join("graph");
    fan_out(n, &dir);
    let counts = case.path().join("strace.txt");
    run_traced(
        &dir,
        &["-f", "-c", "-e", "trace=fsync,fdatasync,syncfs"],
        &counts,
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
/// fsync named them (`strace -f -e trace=openat,fsync,fdatasync`). A call
/// another thread's interrupts is split in two lines (`<unfinished ...>`,
/// then `<... openat resumed>`): its path is on the first, its fd the second.
/// strace pads the pid to five places, so a short one is followed by more
/// than one space.
fn synced_dirs(trace: &Path) -> Vec<String> {
    let result = |s: &str| {
        s.rsplit("= ")
            .next()
            .and_then(|f| f.trim().parse::<u32>().ok())
    };
    let mut opened: std::collections::HashMap<u32, String> = Default::default();
    let mut opening: std::collections::HashMap<String, String> = Default::default();
    let mut synced = Vec::new();
    for line in std::fs::read_to_string(trace).unwrap().lines() {
        let (pid, call) = line.split_once(' ').unwrap_or(("", line));
        let call = call.trim_start();
        if let Some(rest) = call.strip_prefix("openat(") {
            let path = rest.split('"').nth(1).unwrap_or_default().to_string();
            match result(rest) {
                Some(fd) if !rest.contains("<unfinished") => {
                    opened.insert(fd, path);
                }
                _ => {
                    opening.insert(pid.to_string(), path);
                }
            }
        } else if call.starts_with("<... openat resumed>") {
            if let (Some(path), Some(fd)) = (opening.remove(pid), result(call)) {
                opened.insert(fd, path);
            }
        } else if let Some(rest) = call.strip_prefix("fsync(") {
            let fd = rest.split([')', ' ']).next().unwrap_or_default();
            if let Some(path) = fd.parse::<u32>().ok().and_then(|fd| opened.get(&fd)) {
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

/// The write-ahead order, seen in the system calls of a real run: a line
/// of the event log that names an artifact is written to the log only
/// after a sync that came after the artifact was put in place. Between
/// syncs the lines wait in the log's staged file, where a killed run keeps
/// them; so the kernel, writing files back in its own order, can never put
/// a line in the log on the disk before what it names.
#[test]
fn a_log_line_naming_an_artifact_reaches_the_log_only_after_the_artifact_was_synced() {
    if !strace_works() {
        eprintln!("skipped: strace cannot trace on this machine");
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let dir = case.path().join("graph");
    fan_out(20, &dir);
    let trace = case.path().join("strace.txt");
    run_traced(
        &dir,
        &[
            "-f",
            "-y",
            "-s",
            "4000000",
            "-e",
            "trace=write,pwrite64,rename,renameat,renameat2,syncfs,fsync,fdatasync",
        ],
        &trace,
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let digests_in = |s: &str| -> Vec<String> {
        s.match_indices("sha256:")
            .filter_map(|(at, _)| s.get(at + 7..at + 71))
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_string)
            .collect()
    };
    // Per artifact, whether a sync completed since it was put in place.
    let mut synced: std::collections::HashMap<String, bool> = Default::default();
    let (mut logged, mut staged) = (0, 0);
    for line in text.lines() {
        // strace pads the pid to five places: "2050  rename(...)".
        let call = line
            .split_once(' ')
            .map_or(line, |(_, rest)| rest)
            .trim_start()
            .trim_start_matches("<... ");
        if call.starts_with("rename") && line.contains("/artifacts/objects/") {
            if let Some(target) = call.rsplit("/artifacts/objects/").next() {
                let hex: String = target.chars().take(64).collect();
                synced.insert(hex, false);
            }
        } else if (call.starts_with("syncfs") || call.starts_with("fsync")) && line.contains(" = 0")
        {
            synced.values_mut().for_each(|s| *s = true);
        } else if call.starts_with("write(") || call.starts_with("pwrite64(") {
            let target = call.split('>').next().unwrap_or_default();
            let named: Vec<String> = digests_in(call)
                .into_iter()
                .filter(|hex| synced.contains_key(hex))
                .collect();
            if target.ends_with("/controller-events.jsonl") {
                for hex in &named {
                    logged += 1;
                    assert!(
                        synced[hex],
                        "a line naming sha256:{hex} was written to the log before a sync made the artifact durable"
                    );
                }
            } else if target.contains("/controller-events.jsonl.staged-") {
                staged += named.len();
            }
        }
    }
    let sample = |what: &str| -> String {
        text.lines()
            .filter(|l| l.contains(what))
            .map(|l| l.chars().take(400).collect::<String>())
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        logged >= 20,
        "only {logged} lines naming artifacts reached the log ({} artifacts put in place, {staged} names staged); \
         renames:\n{}\nwrites to the log:\n{}\nsyncs:\n{}",
        synced.len(),
        sample("rename"),
        sample("controller-events.jsonl>"),
        sample("sync"),
    );
    // The check has teeth: the same lines were first written, unsynced,
    // to the staged file.
    assert!(staged >= 20, "only {staged} artifact names were staged");
}
