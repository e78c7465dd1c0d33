//! Plugins written in Python and JavaScript, with the real componentize-py,
//! componentize-js and `bl`: every scaffold kind builds as it is and asks
//! for no capability, and an uncaught error reaches the operator; the Python
//! and JavaScript word-counts give the Rust word-count's verdict JSON, byte
//! for byte, over a corpus of ordinary and hostile workspaces; and each
//! travels through a registry into a project and decides a graph run's node.

use std::path::{Path, PathBuf};
use std::process::Command;

use bl_e2e::{bl_binary, copy_tree, repo_root, test_plugin_dir};
use serde_json::Value;

use crate::graph_artifacts::{Case, text};
use crate::plugin_registry::{gated_graph, ledger_laps, word_count_gate, word_count_loop};

/// Whether both plugin toolchains are here; under CI they must be (setup
/// installs them).
fn polyglot_toolchains() -> bool {
    let polyglot = repo_root().join("target/polyglot");
    let installed = polyglot.join("venv/bin/componentize-py").is_file()
        && polyglot
            .join("node_modules/@bytecodealliance/componentize-js/src/cli.js")
            .is_file();
    if installed {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "componentize-py or componentize-js is missing: scripts/dev test installs them under target/polyglot"
    );
    eprintln!(
        "skipped: componentize-py or componentize-js is not installed (scripts/dev test installs them)"
    );
    false
}

fn bl(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bl_binary())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_python_and_javascript_scaffold_builds_as_it_is_runs_and_asks_for_no_capability() {
    if !polyglot_toolchains() {
        return;
    }
    for (lang, uncaught, says) in [
        (
            "python",
            "import wit_world\n\nclass WitWorld(wit_world.WitWorld):\n    def check(self, root, config):\n        raise ValueError('the gate broke here')\n",
            "ValueError: the gate broke here",
        ),
        (
            "js",
            "export function check(root, config) {\n  null.boom();\n}\n",
            "TypeError: can't access property \"boom\" of null (at check@app.js:2:",
        ),
    ] {
        scaffolds_of(lang, uncaught, says);
    }
}

/// Every kind scaffolded in `lang` builds, inspects as its world, runs;
/// then a gate whose code throws `uncaught` errs, saying `says`.
fn scaffolds_of(lang: &str, uncaught: &str, says: &str) {
    let scratch = tempfile::tempdir().unwrap();
    let here = scratch.path();
    for (kind, world) in [
        ("gate", "gate"),
        ("contract", "completion-contract"),
        ("transform", "transform"),
        ("policy", "publication-policy"),
    ] {
        let name = format!("{lang}-{kind}");
        let (code, _, err) = bl(
            here,
            &["plugin", "new", &name, "--kind", kind, "--lang", lang],
        );
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = bl(here, &["plugin", "build", &name, "--out", "out", "--json"]);
        assert_eq!(code, 0, "{lang} {kind}: {out}{err}");
        let built: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(built["manifest"]["world"], world, "{out}");
        let component = here.join(format!("out/{name}.wasm"));
        let (code, out, err) = bl(
            here,
            &["plugin", "inspect", component.to_str().unwrap(), "--json"],
        );
        assert_eq!(code, 0, "{err}");
        let inspected: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(inspected["summary"]["world"], world, "{out}");
        assert_eq!(inspected["manifest_matches"], true);
        // The minimal worlds: no bl capability but the world's own. (A
        // runtime's clock and randomness are WASI's, served deny-all:
        // clocks at zero, fixed bytes.)
        for cap in inspected["summary"]["capabilities"].as_array().unwrap() {
            assert!(
                cap == "clock" || cap == "random",
                "{lang} {kind} asks for {cap}: {out}"
            );
        }
        // A second build with no edits is up to date.
        let (_, out, _) = bl(here, &["plugin", "build", &name, "--out", "out", "--json"]);
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap()["rebuilt"],
            false,
            "{out}"
        );
    }
    // The gate decides from the workspace, granted nothing.
    std::fs::create_dir(here.join("ws")).unwrap();
    let gate = here.join(format!("out/{lang}-gate.wasm"));
    let run_gate = |config: &str| {
        bl(
            here,
            &[
                "plugin",
                "run",
                gate.to_str().unwrap(),
                "--workspace",
                "ws",
                "--config",
                config,
            ],
        )
    };
    assert_eq!(run_gate(r#"{"file": "report.md"}"#).0, 1, "missing: fail");
    std::fs::write(here.join("ws/report.md"), "# report\n").unwrap();
    let (code, out, err) = run_gate(r#"{"file": "report.md"}"#);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run_gate(r#"{"file": 7}"#);
    assert_eq!(code, 3, "a bad config is an error, never a verdict: {out}");
    assert!(out.contains("bad config"), "{out}");
    let (code, out, _) = run_gate(r#"{"file": "../../etc/passwd"}"#);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("outside its workspace"), "{out}");
    // The policy decides on the approvals.
    std::fs::write(here.join("payload.txt"), "p").unwrap();
    let policy = here.join(format!("out/{lang}-policy.wasm"));
    let decide = |approval: &str| {
        let args = [
            "plugin",
            "run",
            policy.to_str().unwrap(),
            "--effect-key",
            "k",
            "--effect-kind",
            "outbox",
            "--target",
            "t",
            "--payload",
            "payload.txt",
            "--approval",
            approval,
        ];
        let (code, out, err) = bl(here, &args);
        (code, format!("{out}{err}"))
    };
    let (code, said) = decide("ok=me");
    assert_eq!(code, 0, "{lang}: {said}");
    let (code, said) = decide("ok=me:rejected");
    assert_eq!(code, 1, "{lang}: {said}");
    // An error the plugin does not catch is an error, and what the
    // runtime said about it reaches the operator.
    let entry = if lang == "js" { "app.js" } else { "app.py" };
    std::fs::write(here.join(format!("{lang}-gate/{entry}")), uncaught).unwrap();
    let (code, out, err) = bl(
        here,
        &["plugin", "build", &format!("{lang}-gate"), "--out", "out"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run_gate(r#"{"file": "report.md"}"#);
    assert_eq!(code, 3, "{out}");
    // Python's traceback is what its runtime wrote; JavaScript's error is
    // caught by the SDK's guard and said with where in the plugin it was,
    // never as a trap in the runtime's glue.
    let told = if lang == "js" {
        "could not decide: "
    } else {
        "its stderr ended with"
    };
    assert!(out.contains(told) && out.contains(says), "{out}");
    assert!(!out.contains("invalid variant tag"), "{out}");
    // The runtime's own wasm stack does not follow the plugin's words.
    assert!(!out.contains("wasm backtrace"), "{out}");
    assert!(
        !out.contains("RUST_BACKTRACE") && !out.contains("Python function threw"),
        "{out}"
    );
}

/// A config key the plugin gives a default may be left out, in Python and
/// JavaScript alike; a count past a Rust `usize` in wasm32 is refused,
/// naming the largest one.
#[test]
fn a_config_key_with_a_default_may_be_left_out_in_python_and_javascript() {
    if !polyglot_toolchains() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let here = scratch.path();
    std::fs::create_dir(here.join("ws")).unwrap();
    std::fs::write(here.join("ws/r.md"), "three short words\n").unwrap();
    for (lang, entry, source) in [
        (
            "python",
            "app.py",
            "import bl_plugin\nimport wit_world\n\n\nclass WitWorld(wit_world.WitWorld):\n    def check(self, root, config):\n        c = bl_plugin.config(config, {\"file\": str, \"min_words\": bl_plugin.COUNT}, {\"min_words\": 2})\n        n = len(bl_plugin.split_words(bl_plugin.read_text(root, c[\"file\"]) or \"\"))\n        return bl_plugin.passed(f\"{n} words\") if n >= c[\"min_words\"] else bl_plugin.failed(f\"{n} words\")\n",
        ),
        (
            "js",
            "app.js",
            "import * as bl from './bl_plugin.js';\n\nexport function check(root, config) {\n  const c = bl.config(config, { file: 'string', min_words: bl.COUNT }, { min_words: 2 });\n  const n = bl.splitWords(bl.readText(root, c.file) ?? '').length;\n  return n >= c.min_words ? bl.passed(`${n} words`) : bl.failed(`${n} words`);\n}\n",
        ),
    ] {
        let name = format!("{lang}-defaults");
        let (code, _, err) = bl(
            here,
            &["plugin", "new", &name, "--kind", "gate", "--lang", lang],
        );
        assert_eq!(code, 0, "{err}");
        std::fs::write(here.join(&name).join(entry), source).unwrap();
        let (code, out, err) = bl(here, &["plugin", "build", &name, "--out", "out"]);
        assert_eq!(code, 0, "{lang}: {out}{err}");
        let gate = here.join(format!("out/{name}.wasm"));
        let run = |config: &str| {
            let args = [
                "plugin",
                "run",
                gate.to_str().unwrap(),
                "--workspace",
                "ws",
                "--config",
                config,
            ];
            let (code, out, err) = bl(here, &args);
            (code, format!("{out}{err}"))
        };
        let (code, said) = run(r#"{"file": "r.md"}"#);
        assert_eq!(code, 0, "{lang}: the default of 2 words is met: {said}");
        let (code, said) = run(r#"{"file": "r.md", "min_words": 5}"#);
        assert_eq!(code, 1, "{lang}: 5 words asked: {said}");
        let (code, said) = run(r#"{"file": "r.md", "min_words": 5000000000}"#);
        assert_eq!(code, 3, "{lang}: {said}");
        assert!(
            said.contains("must be a whole number from 0 to 4294967295"),
            "{lang}: {said}"
        );
        let (code, said) = run(r#"{"min_words": 1}"#);
        assert_eq!(
            code, 3,
            "{lang}: a key with no default is still needed: {said}"
        );
        assert!(said.contains("missing field `file`"), "{lang}: {said}");
    }
}

/// A Python plugin is built from its own files and bl's SDK alone. A
/// package the builder has installed (in an active venv, or in python3's
/// own or the user's site-packages, which componentize-py adds by itself)
/// is never taken into the component: the build says to copy it into the
/// plugin's directory, and once there it is built in, under the digest.
#[test]
fn a_python_plugin_never_takes_packages_from_the_builders_machine() {
    if !polyglot_toolchains() {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let here = scratch.path();
    let package = "pass_word = 'open sesame'\n";
    let venv_site = here.join("venv/lib/python3/site-packages/builders_only");
    std::fs::create_dir_all(&venv_site).unwrap();
    std::fs::write(venv_site.join("__init__.py"), package).unwrap();
    let user_base = here.join("user");
    let user_site = Command::new("python3")
        .args(["-c", "import site; print(site.getusersitepackages())"])
        .env("PYTHONUSERBASE", &user_base)
        .output()
        .unwrap();
    let user_site = PathBuf::from(String::from_utf8(user_site.stdout).unwrap().trim());
    std::fs::create_dir_all(user_site.join("builders_only")).unwrap();
    std::fs::write(user_site.join("builders_only/__init__.py"), package).unwrap();

    let (code, _, err) = bl(
        here,
        &[
            "plugin",
            "new",
            "uses-a-package",
            "--kind",
            "gate",
            "--lang",
            "python",
        ],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::write(
        here.join("uses-a-package/app.py"),
        "import bl_plugin\nimport builders_only\nimport wit_world\n\n\nclass WitWorld(wit_world.WitWorld):\n    def check(self, root, config):\n        return bl_plugin.passed(builders_only.pass_word)\n",
    )
    .unwrap();
    let build = |env: (&str, &Path)| {
        let out = Command::new(bl_binary())
            .args(["plugin", "build", "uses-a-package", "--out", "out"])
            .current_dir(here)
            .env_remove("VIRTUAL_ENV")
            .env(env.0, env.1)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), said)
    };
    for builders in [
        ("VIRTUAL_ENV", here.join("venv")),
        ("PYTHONUSERBASE", user_base),
    ] {
        let (code, said) = build((builders.0, &builders.1));
        assert_ne!(code, Some(0), "built with {}'s package: {said}", builders.0);
        assert!(
            said.contains("builders_only")
                && said
                    .contains("copy a pure-Python package it imports into the plugin's directory"),
            "{said}"
        );
        assert!(!here.join("out/uses-a-package.wasm").exists());
        // The plugin's own traceback, once, without componentize-py's.
        assert_eq!(said.matches("ModuleNotFoundError").count(), 1, "{said}");
        assert!(!said.contains("Caused by"), "{said}");
    }
    copy_tree(&venv_site, &here.join("uses-a-package/builders_only"));
    let (code, said) = build(("VIRTUAL_ENV", &here.join("venv")));
    assert_eq!(code, Some(0), "{said}");
    std::fs::create_dir(here.join("ws")).unwrap();
    let (code, out, err) = bl(
        here,
        &[
            "plugin",
            "run",
            "out/uses-a-package.wasm",
            "--workspace",
            "ws",
            "--config",
            "{}",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("open sesame"), "{out}");
}

/// The shipped conformance corpus (conformance/word-count, written by its
/// make.py, expectations recorded from the Rust gate): 125 workspaces and
/// configs, ordinary and hostile. `bl plugin test` runs a gate over it.
#[test]
fn the_python_and_javascript_word_counts_give_the_rust_word_counts_verdicts_over_the_corpus() {
    if !polyglot_toolchains() {
        return;
    }
    let corpus = repo_root().join("conformance/word-count");
    let here = repo_root();
    for name in ["word-count", "word-count-py", "word-count-js"] {
        let component = test_plugin_dir().join(format!("{name}.wasm"));
        assert!(
            component.is_file(),
            "{} is missing: run scripts/dev test",
            component.display()
        );
        let (code, out, err) = bl(
            &here,
            &[
                "plugin",
                "test",
                component.to_str().unwrap(),
                "--corpus",
                corpus.to_str().unwrap(),
                "--json",
            ],
        );
        let run: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        let cases = run["cases"].as_array().unwrap();
        assert!(cases.len() >= 100, "{} cases", cases.len());
        let differs: Vec<&Value> = cases.iter().filter(|c| c["agrees"] != true).collect();
        assert!(
            differs.is_empty(),
            "{name} disagrees with the Rust gate: {differs:#?}"
        );
        assert_eq!(code, 0, "{err}");
        let decided = cases
            .iter()
            .filter(|c| c["got"].get("verdict").is_some())
            .count();
        assert!(
            decided >= 80,
            "most cases are decided, not errors: {decided}"
        );
        // An error is compared by its kind: a key given twice is bad
        // config in every language, though JSON readers differ on it.
        let case = |id: &str| {
            cases
                .iter()
                .find(|c| c["case"] == id)
                .unwrap_or_else(|| panic!("{id}"))["got"]
                .clone()
        };
        for id in ["dup-key-file", "lone-surrogate", "bom-config", "nan-min"] {
            assert_eq!(
                case(id),
                serde_json::json!({"outcome": "error", "kind": "bad-config"}),
                "{name} {id}"
            );
        }
        assert_eq!(case("escape")["kind"], "escape", "{name}");
    }
    // Another gate does not pass for this one: the disagreements are named.
    let (code, out, _) = bl(
        &here,
        &[
            "plugin",
            "test",
            "files",
            "--corpus",
            corpus.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("DIFFERS sep0-5-words-min5"), "{out}");
}

#[test]
fn python_and_javascript_plugins_are_published_installed_and_decide_a_graph_run_and_a_loop() {
    if !polyglot_toolchains() {
        return;
    }
    published_installed_and_used("word-count-py", "python");
    published_installed_and_used("word-count-js", "js");
}

fn published_installed_and_used(name: &str, language: &str) {
    let publisher = tempfile::tempdir().unwrap();
    let key = publisher.path().join("acme.key");
    let (code, _, err) = bl(
        publisher.path(),
        &[
            "keys",
            "generate",
            "--name",
            "acme",
            "--out",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let registry = publisher.path().join("registry");
    let example: PathBuf = repo_root().join("examples/plugins").join(name);
    let (code, out, err) = bl(
        publisher.path(),
        &[
            "plugin",
            "publish",
            example.to_str().unwrap(),
            "--registry",
            registry.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let published: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        published["version"]["recipe"]["language"], language,
        "{out}"
    );
    assert!(
        published["version"]["recipe"]["toolchain"]
            .as_str()
            .unwrap()
            .starts_with("componentize-"),
        "{out}"
    );
    let signed = published["version"]["component_sha256"]
        .as_str()
        .unwrap()
        .to_string();
    // Its toolchain gives other bytes on every build: a rebuild is refused,
    // saying why, rather than reported as differing.
    let (code, out, err) = bl(
        publisher.path(),
        &[
            "plugin",
            "rebuild",
            name,
            "--registry",
            registry.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("does not give the same bytes twice"), "{err}");

    let case = Case::new();
    let project = case.path("");
    let pubkey = key.with_extension("pub");
    let (code, _, err) = bl(&project, &["plugin", "trust", pubkey.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = bl(
        &project,
        &[
            "plugin",
            "install",
            name,
            "--registry",
            registry.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    gated_graph(&case, word_count_gate(name), "one two three");
    let run = case.run("run-1", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let done = case.event("run-1", "writer", "node.succeeded").unwrap();
    assert_eq!(done["plugins"][0]["plugin"], name, "{done}");
    assert_eq!(done["plugins"][0]["component_digest"], signed.as_str());

    // A loop gated by it: lap 1 (two words) fails, lap 2 (five) passes,
    // and the ledger names the signed component.
    let package = word_count_loop(&case, &format!("{name}@^0.1"));
    let (code, out, err) = bl(&project, &["run", "loops/wc", "--yes", "--run-id", "wc-1"]);
    assert_eq!(code, 0, "{out}{err}");
    let laps = ledger_laps(&package, "wc-1");
    assert_eq!(laps.len(), 2, "{laps:?}");
    assert_eq!(laps[0]["verdict"]["passed"], false, "{laps:?}");
    assert_eq!(laps[1]["verdict"]["passed"], true, "{laps:?}");
    assert_eq!(laps[1]["gate"]["component"], signed.as_str(), "{laps:?}");
    assert_eq!(laps[1]["gate"]["source"], "plugin", "{laps:?}");
}

/// A component another toolchain built has no manifest: `bl plugin
/// manifest` writes one from the component itself, and keeps it unless told.
#[test]
fn a_manifest_is_written_for_a_component_from_another_toolchain() {
    let built = test_plugin_dir().join("word-count-py.wasm");
    if !built.is_file() {
        if !polyglot_toolchains() {
            return;
        }
        panic!("{} is missing: run scripts/dev test", built.display());
    }
    let scratch = tempfile::tempdir().unwrap();
    let here = scratch.path();
    std::fs::copy(&built, here.join("bare.wasm")).unwrap();
    let (code, out, err) = bl(
        here,
        &[
            "plugin",
            "manifest",
            "bare.wasm",
            "--plugin-version",
            "1.2.3",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let written: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(written["manifest_matches"], true, "{out}");
    assert_eq!(written["manifest"]["world"], "gate");
    assert_eq!(written["manifest"]["version"], "1.2.3");
    assert_eq!(written["manifest"]["name"], "bare");
    let (code, _, err) = bl(here, &["plugin", "manifest", "bare.wasm"]);
    assert_eq!(code, 2, "an existing manifest is kept: {err}");
    assert!(err.contains("--force"), "{err}");
    let (code, _, err) = bl(here, &["plugin", "manifest", "bare.wasm", "--force"]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(here.join("not.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let (code, _, err) = bl(here, &["plugin", "manifest", "not.wasm"]);
    assert_eq!(code, 2, "{err}");
}
