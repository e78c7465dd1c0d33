//! The plugin pipeline end to end: components built from the current source,
//! loaded by the real `bl` binary, judging real directories.

use std::path::Path;

use bl_e2e::{bl, copy_tree, first_party_plugin_crates, plugin_dir, repo_root};
use bl_pluginbuild::{PluginManifest, ProvenanceError, check_provenance};
use serde_json::Value;

fn component_for(crate_dir: &Path) -> std::path::PathBuf {
    let name = crate_dir
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    plugin_dir().join(format!("{name}.wasm"))
}

#[test]
fn every_first_party_component_was_built_from_the_current_source() {
    let crates = first_party_plugin_crates();
    assert!(!crates.is_empty(), "no plugin crates under plugins/");
    for crate_dir in crates {
        let component = component_for(&crate_dir);
        assert!(
            component.is_file(),
            "{} is missing: run `scripts/dev setup` to build the plugins",
            component.display()
        );
        if let Err(e) = check_provenance(&crate_dir, &component) {
            panic!("{e}");
        }
        // The manifest beside the component describes exactly these bytes.
        let manifest: PluginManifest = serde_json::from_slice(
            &std::fs::read(component.with_extension("plugin.json")).unwrap(),
        )
        .unwrap();
        let bytes = std::fs::read(&component).unwrap();
        assert_eq!(
            manifest.component_digest,
            format!("sha256:{}", sha256_hex(&bytes))
        );
        assert!(
            bl_plugins::World::from_wit_name(&manifest.world).is_some(),
            "{}",
            manifest.world
        );
        // What the manifest says is requested is what the component imports.
        let summary = bl_pluginbuild::summarize(&bytes).unwrap();
        assert_eq!(manifest.capabilities, summary.capabilities);
        assert_eq!(manifest.wit_package, bl_pluginbuild::WIT_PACKAGE);
    }
}

#[test]
fn a_component_from_other_sources_is_reported_stale() {
    // Copy the plugin's whole source set, change one byte of the WIT, and the
    // very same component no longer matches.
    let scratch = tempfile::tempdir().unwrap();
    for dir in ["plugins", "sdk", "wit"] {
        copy_tree(&repo_root().join(dir), &scratch.path().join(dir));
    }
    let crate_dir = scratch.path().join("plugins/files");
    let component = component_for(&repo_root().join("plugins/files"));
    check_provenance(&crate_dir, &component).expect("an exact copy of the sources matches");

    let wit = scratch.path().join("wit/plugin/types.wit");
    let text = std::fs::read_to_string(&wit).unwrap();
    std::fs::write(&wit, text.replacen("critical", "kritical", 1)).unwrap();
    match check_provenance(&crate_dir, &component) {
        Err(ProvenanceError::Stale { .. }) => {}
        other => panic!("expected Stale, got {other:?}"),
    }
}

fn run_gate(workspace: &str, config: &str) -> (i32, Value) {
    let cache = tempfile::tempdir().unwrap();
    let out = bl(
        &[
            "plugin",
            "run",
            "files",
            "--workspace",
            workspace,
            "--config",
            config,
            "--json",
        ],
        cache.path(),
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bl printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), json)
}

fn report_config() -> String {
    std::fs::read_to_string(repo_root().join("examples/gates/report.json")).unwrap()
}

#[test]
fn files_gate_passes_a_finished_workspace() {
    let (code, json) = run_gate("examples/workspaces/report-done", &report_config());
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["outcome"], "pass");
    assert_eq!(json["verdict"]["passed"], true);
    assert_eq!(json["verdict"]["findings"], Value::Array(vec![]));
}

#[test]
fn files_gate_fails_an_unfinished_workspace_whatever_the_worker_claimed() {
    let (code, json) = run_gate("examples/workspaces/report-unfinished", &report_config());
    assert_eq!(code, 1, "{json}");
    assert_eq!(json["outcome"], "fail");
    let rules: Vec<&str> = json["verdict"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["files/non-empty", "files/contains", "files/forbid"]);
    assert_eq!(json["verdict"]["findings"][2]["location"]["line"], 4);
}

#[test]
fn a_gate_that_cannot_decide_is_an_error_never_a_verdict() {
    // A path that leaves the workspace: the host refuses it, the gate errs.
    let (code, json) = run_gate(
        "examples/workspaces/report-done",
        r#"{"required":["../report-unfinished/report.md"]}"#,
    );
    assert_eq!(
        (code, json["outcome"].as_str()),
        (3, Some("error")),
        "{json}"
    );
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tried to reach `../report-unfinished/report.md` outside its workspace"),
        "{json}"
    );
    assert!(json.get("verdict").is_none());

    // A config the gate does not understand.
    let (code, json) = run_gate(
        "examples/workspaces/report-done",
        r#"{"requird":["report.md"]}"#,
    );
    assert_eq!(code, 3, "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bad config"),
        "{json}"
    );

    // A workspace that does not exist.
    let (code, json) = run_gate("examples/workspaces/no-such-dir", &report_config());
    assert_eq!(code, 3, "{json}");
}

#[test]
fn a_symlink_out_of_the_workspace_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        ws.path().join("link.txt"),
    )
    .unwrap();
    let (code, json) = run_gate(
        ws.path().to_str().unwrap(),
        r#"{"contains":{"link.txt":["secret"]}}"#,
    );
    assert_eq!(code, 3, "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tried to reach `link.txt` outside its workspace"),
        "{json}"
    );
}

#[test]
fn cli_reports_version_and_help() {
    let cache = tempfile::tempdir().unwrap();
    let out = bl(&["--version"], cache.path());
    assert!(out.status.success());
    let version = String::from_utf8_lossy(&out.stdout);
    assert!(
        version.starts_with(&format!("bl {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let out = bl(&["--help"], cache.path());
    assert!(String::from_utf8_lossy(&out.stdout).contains("plugin"));
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[test]
fn a_missing_wasm_toolchain_is_one_clear_message() {
    // With nothing on PATH, neither the rustup path nor the Debian path
    // (which needs wasm-ld-19 on PATH) can work.
    let out = std::process::Command::new(bl_e2e::bl_binary())
        .args(["plugin", "build", "plugins/files", "--out"])
        .arg(tempfile::tempdir().unwrap().path())
        .current_dir(repo_root())
        .env("PATH", "")
        .env_remove("BL_WASM_TOOLCHAIN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(
            "error: no wasm toolchain: rustup path: rustc is not on PATH; Debian path: "
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("To fix: run `scripts/dev setup`"),
        "{stderr}"
    );

    let out = std::process::Command::new(bl_e2e::bl_binary())
        .args(["plugin", "build", "plugins/files"])
        .current_dir(repo_root())
        .env("BL_WASM_TOOLCHAIN", "gcc")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("BL_WASM_TOOLCHAIN=gcc is not one of `rustup`, `debian`")
    );
}
