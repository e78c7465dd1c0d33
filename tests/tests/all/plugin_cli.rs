//! `bl plugin new | build | inspect | run` through the real binary: the
//! scaffold for every kind builds as it is, the third-party example builds
//! and runs, and contracts run from the command line.

use std::path::Path;

use bl_e2e::{bl, repo_root, test_plugin_dir};
use serde_json::Value;

fn run_bl(args: &[&str]) -> (i32, String, String) {
    let cache = tempfile::tempdir().unwrap();
    let out = bl(args, cache.path());
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn build(dir: &Path, out: &Path) -> (i32, String, String) {
    let target = repo_root().join("target/wasm");
    run_bl(&[
        "plugin",
        "build",
        dir.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--target-dir",
        target.to_str().unwrap(),
    ])
}

#[test]
fn every_scaffold_kind_builds_as_it_is_and_inspects_as_its_world() {
    let scratch = tempfile::tempdir().unwrap();
    for (kind, world) in [
        ("gate", "gate"),
        ("contract", "completion-contract"),
        ("transform", "transform"),
        ("policy", "publication-policy"),
    ] {
        let name = format!("my-{kind}");
        let dir = scratch.path().join(&name);
        let (code, _, err) = run_bl(&[
            "plugin",
            "new",
            &name,
            "--kind",
            kind,
            "--dir",
            dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let out = scratch.path().join("out");
        let (code, stdout, err) = build(&dir, &out);
        assert_eq!(code, 0, "{kind}: {stdout}{err}");
        let component = out.join(format!("{name}.wasm"));
        let (code, stdout, err) =
            run_bl(&["plugin", "inspect", component.to_str().unwrap(), "--json"]);
        assert_eq!(code, 0, "{err}");
        let inspected: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(inspected["summary"]["world"], world, "{stdout}");
        assert_eq!(
            inspected["summary"]["wit_package"],
            bl_pluginbuild::WIT_PACKAGE
        );
        assert_eq!(inspected["manifest_matches"], true);
        assert!(
            inspected["manifest"]["config_schema"].is_object(),
            "{stdout}"
        );
    }
    plugin_list_shows_every_component_on_the_path(&scratch.path().join("out"));
    // The gate scaffold runs: README.md with a `#` passes.
    let ws = scratch.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::write(ws.join("README.md"), "# hi").unwrap();
    let gate = scratch.path().join("out/my-gate.wasm");
    let (code, stdout, _) = run_bl(&[
        "plugin",
        "run",
        gate.to_str().unwrap(),
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}");
    // So do the transform and the policy scaffolds, through the same command.
    std::fs::write(scratch.path().join("one.txt"), "1").unwrap();
    std::fs::write(scratch.path().join("two.txt"), "2").unwrap();
    let published = scratch.path().join("published");
    let transform = scratch.path().join("out/my-transform.wasm");
    let (code, stdout, err) = run_bl(&[
        "plugin",
        "run",
        transform.to_str().unwrap(),
        "--input",
        scratch.path().join("two.txt").to_str().unwrap(),
        "--input",
        scratch.path().join("one.txt").to_str().unwrap(),
        "--output",
        "joined.txt",
        "--out",
        published.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert_eq!(
        std::fs::read_to_string(published.join("joined.txt")).unwrap(),
        "12"
    );
    let policy = scratch.path().join("out/my-policy.wasm");
    let payload = scratch.path().join("one.txt");
    let decide = |approvals: &[&str]| {
        let mut args = vec![
            "plugin",
            "run",
            policy.to_str().unwrap(),
            "--effect-key",
            "k1",
            "--effect-kind",
            "outbox",
            "--target",
            "local",
            "--payload",
            payload.to_str().unwrap(),
        ];
        args.extend_from_slice(approvals);
        run_bl(&args)
    };
    let (code, stdout, err) = decide(&[]);
    assert_eq!(code, 1, "no approval, no effect: {stdout}{err}");
    assert!(stdout.starts_with("DENY"), "{stdout}");
    let (code, stdout, err) = decide(&["--approval", "lead=alice"]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(stdout.starts_with("ALLOW"), "{stdout}");
    // An existing directory is never overwritten.
    let (code, _, err) = run_bl(&[
        "plugin",
        "new",
        "my-gate",
        "--kind",
        "gate",
        "--dir",
        scratch.path().join("my-gate").to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("already exists"), "{err}");
}

#[test]
fn the_third_party_example_builds_from_its_own_crate_and_runs() {
    let out = tempfile::tempdir().unwrap();
    let (code, stdout, err) = build(&repo_root().join("examples/plugins/word-count"), out.path());
    assert_eq!(code, 0, "{stdout}{err}");
    let component = out.path().join("word-count.wasm");
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("r.md"), "one two three four").unwrap();
    let run = |min: &str| {
        run_bl(&[
            "plugin",
            "run",
            component.to_str().unwrap(),
            "--workspace",
            ws.path().to_str().unwrap(),
            "--config",
            &format!(r#"{{"file": "r.md", "min_words": {min}}}"#),
            "--json",
        ])
    };
    let (code, stdout, _) = run("4");
    assert_eq!(code, 0, "{stdout}");
    let (code, stdout, _) = run("5");
    assert_eq!(code, 1, "{stdout}");
    let (code, stdout, _) = run("\"many\"");
    assert_eq!(code, 3, "a config the plugin rejects is an error: {stdout}");
}

#[test]
fn run_handles_contracts_grants_and_refusals() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("change.diff"), "--- a/x\n+++ b/x\n").unwrap();
    std::fs::write(ws.path().join("marker.txt"), "m").unwrap();
    let ws_arg = ws.path().to_str().unwrap();
    let (code, stdout, _) = run_bl(&[
        "plugin",
        "run",
        "contracts",
        "--workspace",
        ws_arg,
        "--artifact",
        "change.diff",
    ]);
    assert_eq!(code, 0, "{stdout}");
    let (code, stdout, _) = run_bl(&["plugin", "run", "contracts", "--workspace", ws_arg]);
    assert_eq!(code, 3, "{stdout}");
    assert!(stdout.contains("--artifact"), "{stdout}");

    let wants = test_plugin_dir().join("wants-command.wasm");
    let wants = wants.to_str().unwrap();
    let (code, stdout, _) = run_bl(&["plugin", "run", wants, "--workspace", ws_arg, "--json"]);
    assert_eq!(code, 3);
    let value: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        value["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`command` capability, which was not granted"),
        "{stdout}"
    );
    let (code, stdout, _) = run_bl(&[
        "plugin",
        "run",
        wants,
        "--workspace",
        ws_arg,
        "--grant",
        "command",
        "--grant",
        "log",
    ]);
    assert_eq!(code, 0, "{stdout}");
    let (code, _, err) = run_bl(&[
        "plugin",
        "run",
        wants,
        "--workspace",
        ws_arg,
        "--grant",
        "network",
    ]);
    assert_eq!(code, 3);
    assert!(err.contains("unknown capability `network`"), "{err}");

    // A transform run as if it were a gate says what it needs instead.
    let (code, _, err) = run_bl(&["plugin", "run", "panel-anonymize", "--workspace", ws_arg]);
    assert_eq!(code, 2);
    assert!(
        err.contains("is a transform: declare what it must publish"),
        "{err}"
    );
}

#[test]
fn the_command_capability_runs_in_the_sandbox_with_a_read_only_workspace() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "a").unwrap();
    let ws_arg = ws.path().to_str().unwrap();
    let config = r#"{"argv": ["sh", "-c", "touch written.txt; cat a.txt"]}"#;
    let (code, stdout, _) = run_bl(&[
        "plugin",
        "run",
        "command",
        "--workspace",
        ws_arg,
        "--grant",
        "command",
        "--config",
        config,
    ]);
    assert_eq!(code, 0, "{stdout}");
    if !bl_e2e::cage_works() {
        return;
    }
    assert!(stdout.contains("Read-only file system"), "{stdout}");
    assert!(!ws.path().join("written.txt").exists());
    // Unconfined, on request, the same command can write.
    let (code, _, _) = run_bl(&[
        "plugin",
        "run",
        "command",
        "--workspace",
        ws_arg,
        "--grant",
        "command",
        "--isolation",
        "workspace_only",
        "--config",
        config,
    ]);
    assert_eq!(code, 0);
    assert!(ws.path().join("written.txt").exists());
}

/// The plugin guide's gate sample is the third-party example's code, word
/// for word, so the guide never drifts from what builds.
#[test]
fn the_plugin_guide_shows_the_example_as_it_is() {
    let guide = std::fs::read_to_string(repo_root().join("docs/plugins.md")).unwrap();
    let source =
        std::fs::read_to_string(repo_root().join("examples/plugins/word-count/src/lib.rs"))
            .unwrap();
    let heading = "## A gate, line by line\n\n```rust\n";
    let start = guide.find(heading).expect("the guide has the gate sample") + heading.len();
    let sample = &guide[start..start + guide[start..].find("```").unwrap()];
    let from = source.find("use bl_plugin_sdk::").unwrap();
    let end = "bl_plugin_sdk::export_gate!(WordCount);";
    let to = source.find(end).unwrap() + end.len();
    assert_eq!(sample.trim_end(), &source[from..to]);
}

/// A component copied without its manifest is still recognised: its world
/// comes from what it exports (`bl_plugins::PluginPackage`).
#[test]
fn a_component_without_its_manifest_is_known_by_its_exports() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["files", "contracts", "deny-all"] {
        std::fs::copy(
            bl_e2e::plugin_dir().join(format!("{name}.wasm")),
            dir.path().join(format!("{name}.wasm")),
        )
        .unwrap();
    }
    let at = |name: &str| {
        dir.path()
            .join(format!("{name}.wasm"))
            .display()
            .to_string()
    };
    let config = std::fs::read_to_string(repo_root().join("examples/gates/report.json")).unwrap();
    let workspace = repo_root().join("examples/workspaces/report-done");
    let ws = workspace.to_str().unwrap();
    let (code, out, _) = run_bl(&[
        "plugin",
        "run",
        &at("files"),
        "--workspace",
        ws,
        "--config",
        &config,
    ]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = run_bl(&["plugin", "run", &at("contracts"), "--workspace", ws]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("is a completion contract"), "{out}");
    let (code, _, err) = run_bl(&["plugin", "run", &at("deny-all"), "--workspace", ws]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("is a publication policy: give the effect's"),
        "{err}"
    );
}

/// A build writes nothing its own source digest covers (the first one
/// writes the Cargo.lock before taking the digest), so a second build with
/// no edits is up to date, from any directory; and with no `--out`, the
/// component lands under the plugin's own target/, not the caller's.
#[test]
fn a_second_build_with_no_edits_is_up_to_date_from_any_directory() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("fresh-gate");
    let (code, _, err) = run_bl(&[
        "plugin",
        "new",
        "fresh-gate",
        "--kind",
        "gate",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(!dir.join("Cargo.lock").exists());
    let target = repo_root().join("target/wasm");
    let build_from = |cwd: &Path| {
        let out = std::process::Command::new(bl_e2e::bl_binary())
            .args(["plugin", "build"])
            .arg(&dir)
            .arg("--target-dir")
            .arg(&target)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = build_from(scratch.path());
    assert!(first.starts_with("built: fresh-gate"), "{first}");
    assert!(dir.join("Cargo.lock").is_file());
    let component = dir.join("target/plugins/fresh-gate.wasm");
    assert!(component.is_file(), "{first}");
    let elsewhere = tempfile::tempdir().unwrap();
    let second = build_from(elsewhere.path());
    assert!(second.starts_with("up to date: fresh-gate"), "{second}");
    let digest = |text: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with("source"))
            .map(str::to_string)
    };
    assert_eq!(digest(&first), digest(&second));
    assert!(!elsewhere.path().join("target").exists());

    // A stale lock (a dependency added) is brought up to date before the
    // digest is taken: one build, then up to date again.
    let manifest = dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replacen(
            "[dependencies]\n",
            "[dependencies]\nserde_json = \"1\"\n",
            1,
        ),
    )
    .unwrap();
    assert!(build_from(scratch.path()).starts_with("built: fresh-gate"));
    let again = build_from(scratch.path());
    assert!(again.starts_with("up to date: fresh-gate"), "{again}");

    // An output folder inside the sources would change them at every build.
    let out = std::process::Command::new(bl_e2e::bl_binary())
        .args(["plugin", "build"])
        .arg(&dir)
        .arg("--out")
        .arg(dir.join("dist"))
        .arg("--target-dir")
        .arg(&target)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--out is inside the plugin's sources"),
        "{stderr}"
    );
}

/// `bl plugin list` over `built` (the four scaffolds) then the first-party
/// plugins: each with its world, version, digest and capabilities; a name
/// found again later marked shadowed; a file that is no component said so.
fn plugin_list_shows_every_component_on_the_path(built: &Path) {
    std::fs::copy(
        bl_e2e::plugin_dir().join("files.wasm"),
        built.join("files.wasm"),
    )
    .unwrap();
    std::fs::write(built.join("broken.wasm"), b"not a component").unwrap();
    let path = std::env::join_paths([built.to_path_buf(), bl_e2e::plugin_dir()]).unwrap();
    let list = |json: bool| {
        let mut cmd = std::process::Command::new(bl_e2e::bl_binary());
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .args(["plugin", "list"])
            .env("BL_PLUGIN_PATH", &path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let answer: Value = serde_json::from_str(&list(true)).unwrap();
    let plugins = answer["plugins"].as_array().unwrap();
    let find = |name: &str, dir: &Path| {
        plugins
            .iter()
            .find(|p| {
                p["name"] == name
                    && Path::new(p["path"].as_str().unwrap()).parent()
                        == Some(dir.canonicalize().unwrap().as_path())
            })
            .unwrap_or_else(|| panic!("{name} in {}: {answer}", dir.display()))
    };
    for (name, world) in [
        ("my-gate", "gate"),
        ("my-contract", "completion-contract"),
        ("my-transform", "transform"),
        ("my-policy", "publication-policy"),
    ] {
        let p = find(name, built);
        assert_eq!(p["world"], world, "{p}");
        assert_eq!(p["version"], "0.1.0", "{p}");
        assert_eq!(p["manifest_matches"], true, "{p}");
        assert!(
            p["component_digest"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
    }
    let command = find("command", &bl_e2e::plugin_dir());
    assert_eq!(command["capabilities"], serde_json::json!(["command"]));
    // The copy without its manifest comes first and is the one used.
    let copy = find("files", built);
    assert_eq!(
        (copy["shadowed_by"].is_null(), copy["version"].is_null()),
        (true, true)
    );
    let original = find("files", &bl_e2e::plugin_dir());
    assert_eq!(
        original["shadowed_by"].as_str().map(Path::new),
        Some(built.canonicalize().unwrap().as_path()),
        "{original}"
    );
    assert_eq!(copy["component_digest"], original["component_digest"]);
    assert!(find("broken", built)["error"].is_string());
    let text = list(false);
    let header = text.lines().next().unwrap();
    assert!(
        header.starts_with("NAME") && header.contains("WORLD") && header.contains("CAPABILITIES"),
        "{text}"
    );
    let row = text.lines().find(|l| l.starts_with("command ")).unwrap();
    assert!(
        row.contains("gate") && row.contains("sha256:") && row.contains("command"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("files ") && l.contains("(shadowed by")),
        "{text}"
    );
}
