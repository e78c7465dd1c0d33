//! `bl verify` and `bl log recover` on a run directory bounded-loops wrote.

use bl_store::RunDir;
use std::path::{Path, PathBuf};
use std::process::Command;

use bl_e2e::{bl_binary, copy_tree, repo_root};
use serde_json::Value;

fn copy_run() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    copy_tree(&repo_root().join("tests/corpus/runs/upstream-demo"), &run);
    (dir, run)
}

fn verify(path: &Path) -> (i32, Value) {
    let out = Command::new(bl_binary())
        .arg("verify")
        .arg(path)
        .arg("--json")
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap(), json)
}

fn status_of<'a>(report: &'a Value, name: &str) -> (&'a str, &'a str) {
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap();
    (
        check["status"].as_str().unwrap(),
        check["detail"].as_str().unwrap(),
    )
}

#[test]
fn a_reference_run_directory_verifies_and_says_what_could_not_apply() {
    let (_keep, run) = copy_run();
    let (code, report) = verify(&run);
    assert_eq!(code, 0, "{report}");
    assert_eq!(status_of(&report, "chain").0, "ok");
    assert_eq!(status_of(&report, "plan").0, "ok");
    assert_eq!(status_of(&report, "artifacts").0, "ok");
    assert_eq!(status_of(&report, "signatures").0, "not_applicable");
}

#[test]
fn tampering_is_named_by_line_and_field() {
    let (_keep, run) = copy_run();
    let log = run.join(RunDir::EVENTS);
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(
        &log,
        text.replacen("\"state\":\"RUNNING\"", "\"state\":\"SUCCEEDED\"", 1),
    )
    .unwrap();
    let (code, report) = verify(&run);
    assert_eq!(code, 1);
    let (status, detail) = status_of(&report, "chain");
    assert_eq!(status, "fail");
    assert!(detail.contains("line 2, field event_hash"), "{detail}");
}

#[test]
fn a_tampered_artifact_or_manifest_fails_verification() {
    let (_keep, run) = copy_run();
    let object = std::fs::read_dir(run.join("artifacts/objects"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&object, "forged").unwrap();
    let (code, report) = verify(&run);
    assert_eq!((code, status_of(&report, "artifacts").0), (1, "fail"));

    let (_keep, run) = copy_run();
    let manifest = run.join(RunDir::MANIFEST);
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replace("max_wallclock_s: 1}", "max_wallclock_s: 2}"),
    )
    .unwrap();
    let (code, report) = verify(&run);
    assert_eq!(
        (code, status_of(&report, "plan").0),
        (1, "fail"),
        "{report}"
    );
}

#[test]
fn a_torn_tail_is_reported_and_recovered_only_on_request() {
    let (_keep, run) = copy_run();
    let log = run.join(RunDir::EVENTS);
    let whole = std::fs::read(&log).unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(b"{\"actor\":\"graph");
    std::fs::write(&log, &torn).unwrap();
    let (code, report) = verify(&run);
    assert_eq!(code, 1);
    assert!(
        status_of(&report, "chain").1.contains("line 10 is torn"),
        "{report}"
    );
    // Said once, by the chain: the checks that read the events read the
    // whole lines, with no JSON error of their own about the torn one.
    let failed: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(failed, ["chain"], "{report}");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        torn,
        "verify must not change the log"
    );

    let out = Command::new(bl_binary())
        .args(["log", "recover"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(std::fs::read(&log).unwrap(), whole);
    assert_eq!(verify(&run).0, 0);
}

/// Every loop ledger case (bounded-loops' own run, and tampered, torn,
/// truncated, unchained ones) gets bounded-loops' exact `--json` report,
/// human report and exit code.
#[test]
fn loop_ledgers_are_verified_as_bounded_loops_verifies_them() {
    let corpus = repo_root().join("tests/corpus/loop-ledgers");
    let mut cases: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    assert!(cases.len() >= 20, "{cases:?}");
    let run = |args: &[&str]| {
        let out = Command::new(bl_binary())
            .arg("verify")
            .args(args)
            .current_dir(&corpus)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
        )
    };
    let expected = |name: &str| std::fs::read_to_string(corpus.join(name)).unwrap();
    for case in &cases {
        let (code, json) = run(&[case, "--json"]);
        assert_eq!(json, expected(&format!("{case}.expected.json")), "{case}");
        assert_eq!(
            code.to_string(),
            expected(&format!("{case}.expected.rc")).trim(),
            "{case}"
        );
        let (_, text) = run(&[case]);
        assert_eq!(text, expected(&format!("{case}.expected.txt")), "{case}");
    }
    let head = "43d000ab82728d6bbd445355bfefe73d94562b3ce612e113f9dae728c482984f";
    let (code, json) = run(&["ok", "--expect-head", head, "--json"]);
    assert_eq!((code, json), (0, expected("ok.expect-head.expected.json")));
    let (_, text) = run(&["ok", "--expect-head", head]);
    assert_eq!(text, expected("ok.expect-head.expected.txt"));
    // A ledger file named directly is read the same way.
    let (code, json) = run(&["ok/ledger.jsonl", "--json"]);
    assert_eq!(code, 0);
    assert!(
        json.contains("\"ledger_path\": \"ok/ledger.jsonl\""),
        "{json}"
    );
}
