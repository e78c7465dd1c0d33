//! Plugins written in Python and JavaScript, with the real componentize-py,
//! componentize-js and `bl`: every scaffold kind builds as it is and asks
//! for no capability, and an uncaught error reaches the operator; the Python
//! and JavaScript word-counts give the Rust word-count's verdict JSON, byte
//! for byte, over a corpus of ordinary and hostile workspaces; and each
//! travels through a registry into a project and decides a graph run's node.

use std::path::{Path, PathBuf};
use std::process::Command;

use bl_e2e::{bl_binary, repo_root, test_plugin_dir};
use serde_json::{Value, json};

use crate::graph_artifacts::{Case, text};
use crate::plugin_registry::{gated_graph, word_count_gate};

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
            "TypeError",
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
        bl(here, &args).0
    };
    assert_eq!(decide("ok=me"), 0);
    assert_eq!(decide("ok=me:rejected"), 1);
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
    assert!(
        out.contains("its stderr ended with") && out.contains(says),
        "{out}"
    );
}

/// A workspace's files, as (relative path, bytes).
type Files = Vec<(String, Vec<u8>)>;

/// The conformance corpus: workspaces and configs, ordinary and hostile.
fn corpus() -> Vec<(String, Files, Value)> {
    let mut cases = Vec::new();
    let separators = [
        " ", "\t", "\n", "\r\n", "  \n\t ", "\u{a0}", "\u{2003}", "\u{3000}", "\u{1f}", "\u{85}",
    ];
    for (i, sep) in separators.iter().enumerate() {
        for words in [0usize, 1, 2, 5, 9] {
            let text: String = (0..words)
                .map(|w| format!("w{w}"))
                .collect::<Vec<_>>()
                .join(sep);
            for min in [1u64, 5] {
                cases.push((
                    format!("sep{i}-{words}-words-min{min}"),
                    vec![("r.md".to_string(), format!("{sep}{text}{sep}").into_bytes())],
                    json!({"file": "r.md", "min_words": min}),
                ));
            }
        }
    }
    let hostile: Vec<(&str, Files, Value)> = vec![
        ("missing", vec![], json!({"file": "r.md", "min_words": 1})),
        (
            "not-utf8",
            vec![("r.md".into(), vec![0xff, 0xfe, b' ', b'a'])],
            json!({"file": "r.md", "min_words": 1}),
        ),
        (
            "nested",
            vec![("a/b/r.md".into(), b"one two".to_vec())],
            json!({"file": "a/b/r.md", "min_words": 2}),
        ),
        (
            "a-directory",
            vec![("d/x".into(), b"x".to_vec())],
            json!({"file": "d", "min_words": 1}),
        ),
        ("escape", vec![], json!({"file": "../r.md", "min_words": 1})),
        (
            "absolute",
            vec![],
            json!({"file": "/etc/hostname", "min_words": 1}),
        ),
        (
            "empty-file",
            vec![("r.md".into(), vec![])],
            json!({"file": "r.md", "min_words": 1}),
        ),
        (
            "unicode-words",
            vec![("r.md".into(), "héllo wörld 世界".as_bytes().to_vec())],
            json!({"file": "r.md", "min_words": 3}),
        ),
        (
            "big",
            vec![("r.md".into(), "word ".repeat(200_000).into_bytes())],
            json!({"file": "r.md", "min_words": 199_999}),
        ),
        (
            "zero-min",
            vec![("r.md".into(), vec![])],
            json!({"file": "r.md", "min_words": 0}),
        ),
        (
            "bad-config-type",
            vec![],
            json!({"file": 1, "min_words": 1}),
        ),
        ("bad-config-missing", vec![], json!({"file": "r.md"})),
        (
            "bad-config-extra",
            vec![],
            json!({"file": "r.md", "min_words": 1, "x": 1}),
        ),
        (
            "bad-config-negative",
            vec![],
            json!({"file": "r.md", "min_words": -1}),
        ),
        (
            "bad-config-bool",
            vec![],
            json!({"file": "r.md", "min_words": true}),
        ),
        ("bad-config-array", vec![], json!([1, 2])),
        (
            "nul-in-name",
            vec![],
            json!({"file": "r\u{0}.md", "min_words": 1}),
        ),
        (
            "float-min",
            vec![],
            json!({"file": "r.md", "min_words": 1.5}),
        ),
        (
            "whole-float-min",
            vec![("r.md".into(), b"a".to_vec())],
            json!({"file": "r.md", "min_words": 1.0}),
        ),
        (
            "min-past-u64",
            vec![],
            json!({"file": "r.md", "min_words": 18_446_744_073_709_551_616_f64}),
        ),
        ("empty-path", vec![], json!({"file": "", "min_words": 1})),
        (
            "min-past-u32",
            vec![("r.md".into(), b"a".to_vec())],
            json!({"file": "r.md", "min_words": 5_000_000_000_u64}),
        ),
        (
            "min-at-u32-max",
            vec![("r.md".into(), b"a".to_vec())],
            json!({"file": "r.md", "min_words": 4_294_967_295_u64}),
        ),
        ("dot-path", vec![], json!({"file": ".", "min_words": 1})),
        (
            "symlink-out",
            vec![],
            json!({"file": "link", "min_words": 1}),
        ),
    ];
    cases.extend(hostile.into_iter().map(|(n, f, c)| (n.to_string(), f, c)));
    cases
}

fn verdict_of(dir: &Path, component: &Path, workspace: &Path, config: &Value) -> Value {
    let (code, out, err) = bl(
        dir,
        &[
            "plugin",
            "run",
            component.to_str().unwrap(),
            "--workspace",
            workspace.to_str().unwrap(),
            "--config",
            &config.to_string(),
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    // What is compared: the verdict, byte for byte, or that it is an error.
    match code {
        0 | 1 => json!({"verdict": v["verdict"]}),
        3 => json!({"outcome": "error"}),
        other => panic!("exit {other}: {out}{err}"),
    }
}

#[test]
fn the_python_and_javascript_word_counts_give_the_rust_word_counts_verdicts_over_the_corpus() {
    if !polyglot_toolchains() {
        return;
    }
    let rust = test_plugin_dir().join("word-count.wasm");
    let python = test_plugin_dir().join("word-count-py.wasm");
    let js = test_plugin_dir().join("word-count-js.wasm");
    for c in [&rust, &python, &js] {
        assert!(
            c.is_file(),
            "{} is missing: run scripts/dev test (it builds the examples)",
            c.display()
        );
    }
    let scratch = tempfile::tempdir().unwrap();
    let cases = corpus();
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let mut decided = 0;
    for (name, files, config) in &cases {
        let ws = scratch.path().join(name);
        std::fs::create_dir_all(&ws).unwrap();
        for (path, bytes) in files {
            std::fs::create_dir_all(ws.join(path).parent().unwrap()).unwrap();
            std::fs::write(ws.join(path), bytes).unwrap();
        }
        if name == "symlink-out" {
            std::os::unix::fs::symlink("/etc/hostname", ws.join("link")).unwrap();
        }
        let from_rust = verdict_of(scratch.path(), &rust, &ws, config);
        for (lang, other) in [("Python", &python), ("JavaScript", &js)] {
            let theirs = verdict_of(scratch.path(), other, &ws, config);
            assert_eq!(
                from_rust.to_string(),
                theirs.to_string(),
                "{name}: the Rust and the {lang} gate disagree"
            );
        }
        decided += usize::from(from_rust.get("verdict").is_some());
    }
    assert!(
        decided >= 80,
        "most cases are decided, not errors: {decided}"
    );
}

#[test]
fn python_and_javascript_plugins_are_published_installed_and_decide_a_graph_run() {
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
