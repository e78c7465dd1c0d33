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
