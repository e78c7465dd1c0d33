//! Careless and hostile input, through the real `bl` binary: every answer
//! is bounded in time and memory, and tells the truth about what went
//! wrong.

use std::path::Path;
use std::process::{Command, Output};

use bl_e2e::bl_binary;

fn bl_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .env("BL_CACHE_DIR", dir.join(".cache"))
        .output()
        .expect("bl runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn an_alias_bomb_manifest_is_refused_as_invalid_yaml_naming_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = String::from("a0: &a0 [lol]\n");
    for level in 0..9 {
        let items = vec![format!("*a{level}"); 9].join(",");
        manifest.push_str(&format!("a{}: &a{} [{items}]\n", level + 1, level + 1));
    }
    assert!(manifest.len() < 500);
    std::fs::write(dir.path().join("bomb.yaml"), &manifest).unwrap();
    let out = bl_in(dir.path(), &["graph", "lint", "bomb.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("[invalid_yaml]"), "{stderr}");
    assert!(stderr.contains("200000 nodes"), "{stderr}");
    assert!(
        stderr.contains("bomb.yaml:"),
        "names the file and place: {stderr}"
    );
}

#[test]
fn oversized_manifests_and_connections_are_refused_with_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let big = format!("# {}\n", "x".repeat(5 << 20));
    std::fs::write(dir.path().join("big.yaml"), &big).unwrap();
    let out = bl_in(dir.path(), &["graph", "lint", "big.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[invalid_yaml]") && stderr.contains("4194304 bytes"),
        "{stderr}"
    );

    std::fs::write(
        dir.path().join("big.json"),
        format!("[{}]", " ".repeat(5 << 20)),
    )
    .unwrap();
    let some_manifest = bl_e2e::repo_root().join("tests/corpus/graph/plans/plan_bad_shape.json");
    let out = bl_in(
        dir.path(),
        &[
            "graph",
            "plan",
            some_manifest.to_str().unwrap(),
            "--connections",
            "big.json",
        ],
    );
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("[invalid_json]") && stderr.contains("4194304 bytes"),
        "{stderr}"
    );
}

/// Runs `bl` and kills it if it takes longer than `limit`: a hang is a
/// failure of the test, not of the suite.
fn bl_within(dir: &Path, args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .env("BL_PLUGIN_PATH", bl_e2e::plugin_dir())
        .env("BL_CACHE_DIR", dir.join(".cache"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("bl starts");
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("bl {args:?} still ran after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// An agent controls its workspace: a FIFO where the files gate expects a
/// file neither hangs the gate nor passes it.
#[test]
fn the_files_gate_fails_a_fifo_without_opening_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    for name in ["report.md", "notes.md"] {
        nix::unistd::mkfifo(&ws.join(name), nix::sys::stat::Mode::S_IRWXU).unwrap();
    }
    let config = r#"{"required": ["notes.md"], "contains": {"report.md": ["done"]}}"#;
    let out = bl_within(
        dir.path(),
        &[
            "plugin",
            "run",
            "files",
            "--workspace",
            ws.to_str().unwrap(),
            "--config",
            config,
        ],
        std::time::Duration::from_secs(30),
    );
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "FAIL: {stdout}{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("report.md is not a regular file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("notes.md is not a regular file"),
        "{stdout}"
    );
}

/// A granted command that runs into its own timeout leaves the stock gate
/// undecided (ERROR, exit 3), never FAIL.
#[test]
fn a_command_gate_whose_command_times_out_is_an_error_not_a_fail() {
    let dir = tempfile::tempdir().unwrap();
    let config = r#"{"argv": ["sleep", "5"], "timeout_ms": 300}"#;
    let out = bl_within(
        dir.path(),
        &[
            "plugin",
            "run",
            "command",
            "--workspace",
            dir.path().to_str().unwrap(),
            "--grant",
            "command",
            "--config",
            config,
        ],
        std::time::Duration::from_secs(30),
    );
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(3), "{all}");
    assert!(all.contains("timed out after"), "{all}");
    assert!(!all.contains("FAIL"), "{all}");
}
