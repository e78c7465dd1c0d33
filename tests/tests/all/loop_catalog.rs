//! bounded-loops 0.7.6's catalog of 69 loops under `bl run DIR --yes
//! --json`, compared with what bounded-loops itself did on the same loops
//! (`tests/corpus/loops/expected.json`, recorded as a black box by
//! `tests/corpus/loops/record.py`). The catalog is not in this repository:
//! `scripts/dev test` downloads bounded-loops' published wheel (pinned by
//! its sha256) and unpacks the catalog into `target/upstream/`. Every file
//! of every loop is checked against the digests the corpus recorded, so
//! the comparison is always with the catalog the corpus came from.

use std::path::{Path, PathBuf};
use std::process::Command;

use bl_e2e::{bl_binary, plugin_dir, repo_root};
use serde_json::Value;

fn catalog_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("BL_UPSTREAM_CATALOG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/upstream/bounded-loops-0.7.6/loops"));
    if dir.join("a11y/loop.yaml").is_file() {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but bounded-loops' catalog is not at {}: scripts/dev test should have unpacked it",
        dir.display()
    );
    eprintln!(
        "SKIPPED: bounded-loops' catalog is not at {} (run scripts/dev test, or set BL_UPSTREAM_CATALOG)",
        dir.display()
    );
    None
}

fn copy_package(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "__pycache__" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_package(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn sha256_file(path: &Path) -> String {
    bl_core::sha256_hex(&std::fs::read(path).unwrap())
}

/// The parts of a ledger row that must agree. Times, the tails of gates'
/// output and the pytest invocation differ by machine and are left out;
/// the rest (lap, decision, verdict, spend, bounds, gate) must match.
fn comparable(row: &Value, pytest: bool, keep_tails: bool) -> Value {
    let mut row = row.clone();
    let obj = row.as_object_mut().unwrap();
    obj.remove("ts");
    obj.remove("prev");
    if let Some(spent) = obj.get_mut("budget_spent").and_then(Value::as_object_mut) {
        spent.remove("wallclock_s");
    }
    if let Some(gate) = obj.get_mut("gate").and_then(Value::as_object_mut) {
        gate.remove("component");
    }
    let verdict = obj.get_mut("verdict").unwrap().as_object_mut().unwrap();
    if pytest {
        // bounded-loops names its own interpreter; bl runs python3 -m pytest.
        let detail = verdict["detail"].as_str().unwrap().to_string();
        verdict.insert(
            "detail".into(),
            Value::String(detail.split(';').next().unwrap().to_string()),
        );
        if let Some(evidence) = verdict.get_mut("evidence").and_then(Value::as_object_mut) {
            evidence.remove("cmd");
            evidence.remove("invocation");
            evidence.remove("tail");
        }
    }
    strip_tails(verdict.get_mut("evidence").unwrap(), keep_tails);
    row
}

/// Tails compared without trailing whitespace, or not at all.
fn strip_tails(value: &mut Value, keep: bool) {
    match value {
        Value::Object(map) => {
            if keep {
                if let Some(Value::String(tail)) = map.get_mut("tail") {
                    *tail = tail.trim_end().to_string();
                }
            } else {
                map.remove("tail");
            }
            map.values_mut().for_each(|v| strip_tails(v, keep));
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip_tails(v, keep)),
        _ => {}
    }
}

/// Equal, except that an error's reason is each engine's own account after
/// its class: `gate error: GateError: CheckovGate: …` must agree up to the
/// component, and name the same missing program.
fn same(key: &str, ours: &Value, theirs: &Value) -> bool {
    let (Some(a), Some(b)) = (ours.as_str(), theirs.as_str()) else {
        return ours == theirs;
    };
    if key != "reason" || !(b.starts_with("gate error:") || b.starts_with("runner error:")) {
        return a == b;
    }
    let class = |s: &str| s.splitn(4, ':').take(3).collect::<Vec<_>>().join(":");
    let named = b.rsplit('\'').nth(1).unwrap_or_default();
    class(a) == class(b) && a.contains(named)
}

#[test]
fn the_upstream_catalog_ends_as_it_ends_under_bounded_loops() {
    let Some(catalog) = catalog_dir() else { return };
    let corpus: Value = serde_json::from_str(
        &std::fs::read_to_string(repo_root().join("tests/corpus/loops/expected.json")).unwrap(),
    )
    .unwrap();
    let loops = corpus["loops"].as_object().unwrap();
    assert_eq!(loops.len(), 69);
    let cache = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut done = 0;
    for (name, expected) in loops {
        let source = catalog.join(name);
        for (file, digest) in expected["package_files"].as_object().unwrap() {
            assert_eq!(
                sha256_file(&source.join(file)),
                digest.as_str().unwrap(),
                "{name}/{file} is not the file the corpus was recorded from"
            );
        }
        let tmp = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        copy_package(&source, &tmp.path().join(name));
        let out = Command::new(bl_binary())
            .args(["run", name, "--yes", "--json"])
            .current_dir(tmp.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", home.path())
            .env("BL_PLUGIN_PATH", plugin_dir())
            .env("BL_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut problems = Vec::new();
        if out.status.code() != expected["exit_code"].as_i64().map(|c| c as i32) {
            problems.push(format!(
                "exit {:?}, upstream {}",
                out.status.code(),
                expected["exit_code"]
            ));
        }
        // The preview lines, then the outcome as JSON.
        let outcome: Value = stdout
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        for key in ["status", "reason", "laps"] {
            if !same(key, &outcome[key], &expected["outcome"][key]) {
                problems.push(format!(
                    "{key} {} , upstream {}",
                    outcome[key], expected["outcome"][key]
                ));
            }
        }
        let event: Value = stderr
            .lines()
            .find_map(|l| l.strip_prefix("BL_EVENT "))
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        for key in ["event", "status", "alert", "reason", "subject", "laps"] {
            if !same(key, &event[key], &expected["event"][key]) {
                problems.push(format!(
                    "BL_EVENT {key} {} , upstream {}",
                    event[key], expected["event"][key]
                ));
            }
        }
        if event["ledger_head"] != outcome["ledger_head"] {
            problems.push("BL_EVENT and the outcome name different heads".into());
        }
        let ledger_bytes =
            std::fs::read(tmp.path().join(name).join(".ledger.jsonl")).unwrap_or_default();
        let chain = bl_store::loop_ledger::verify_ledger(&ledger_bytes);
        if chain.status != bl_store::loop_ledger::ChainStatus::Verified
            || Some(chain.head.as_str()) != outcome["ledger_head"].as_str()
        {
            problems.push(format!(
                "the ledger does not verify to the reported head: {:?}",
                chain.status
            ));
        }
        let pytest = expected["manifest"]["gate_kind"] == "pytest";
        // The output of a gate that did not pass depends on the machine
        // (content-fact-gate's link checker and the network it was given).
        let keep_tails = expected["outcome"]["status"] == "DONE";
        let ours: Vec<Value> = String::from_utf8_lossy(&ledger_bytes)
            .lines()
            .map(|l| comparable(&serde_json::from_str(l).unwrap(), pytest, keep_tails))
            .collect();
        let theirs: Vec<Value> = expected["ledger"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| comparable(r, pytest, keep_tails))
            .collect();
        // A runner or gate error's detail is each engine's own account of
        // the failure; its class and the decision must match.
        let errored = expected["outcome"]["status"] == "ERROR";
        if errored {
            if ours.len() != theirs.len()
                || ours.iter().zip(&theirs).any(|(a, b)| {
                    a["decision"] != b["decision"]
                        || a["verdict"]["evidence"] != b["verdict"]["evidence"]
                })
            {
                problems.push(format!(
                    "ledger rows differ:\n  bl:       {ours:?}\n  upstream: {theirs:?}"
                ));
            }
        } else if ours != theirs {
            problems.push(format!(
                "ledger rows differ:\n  bl:       {ours:?}\n  upstream: {theirs:?}"
            ));
        }
        if expected["outcome"]["status"] == "DONE" && problems.is_empty() {
            done += 1;
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{name}:\n  {}\n  stderr: {}",
                problems.join("\n  "),
                stderr.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 69 loops end differently from bounded-loops:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(done, 62, "62 loops reach DONE under bounded-loops on Linux");
}
