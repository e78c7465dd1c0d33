//! The plugin registry, end to end with the real `bl`: a third party's
//! plugin published to a registry directory, installed into a fresh
//! project only when its signature and digest hold, pinned in `bl.lock`,
//! and used by a loop and by a graph run; and every way a registry can be
//! wrong refused with its own error, leaving nothing installed or cached.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bl_e2e::{bl_binary, plugin_dir, repo_root};
use bl_store::RunDir;
use serde_json::{Value, json};

use crate::graph_artifacts::{Case, agent, graph, replies, text};

/// `bl ARGS` in `project`, with its own compiled-component cache.
fn bl_in(project: &Path, cache: &Path, args: &[&str]) -> Output {
    Command::new(bl_binary())
        .args(args)
        .current_dir(project)
        .env("BL_PLUGIN_PATH", plugin_dir())
        .env("BL_CACHE_DIR", cache)
        .env_remove("BL_REGISTRY")
        .output()
        .unwrap()
}

/// A publisher's key pair, as `bl keys generate` writes it: (private, public).
fn keys(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let out = Command::new(bl_binary())
        .args(["keys", "generate", "--name", name, "--out"])
        .arg(&private)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    (private.clone(), private.with_extension("pub"))
}

/// A first-party component renamed `name` at `version`, with its manifest
/// saying so and asking for `capabilities`, ready to publish.
fn staged(dir: &Path, from: &str, name: &str, version: &str, capabilities: &[&str]) -> PathBuf {
    let stage = dir.join(format!("stage-{name}-{version}"));
    std::fs::create_dir_all(&stage).unwrap();
    let component = stage.join(format!("{name}.wasm"));
    // Bytes of its own (a custom section naming it ends the component), as
    // a third party's plugin has: never the first-party build, whose
    // signed bytes any project trusts (`scripts/dev setup` takes them).
    let mut bytes = std::fs::read(plugin_dir().join(format!("{from}.wasm"))).unwrap();
    append_custom_section(
        &mut bytes,
        "bl-test:staged",
        format!("{name}@{version}").as_bytes(),
    );
    std::fs::write(&component, bytes).unwrap();
    let mut manifest: Value = serde_json::from_slice(
        &std::fs::read(plugin_dir().join(format!("{from}.plugin.json"))).unwrap(),
    )
    .unwrap();
    manifest["name"] = json!(name);
    manifest["version"] = json!(version);
    manifest["capabilities"] = json!(capabilities);
    std::fs::write(
        component.with_extension("plugin.json"),
        manifest.to_string(),
    )
    .unwrap();
    component
}

/// Appends a custom section (id 0: its name, then its data, each behind
/// a LEB128 length) to a wasm binary.
fn append_custom_section(wasm: &mut Vec<u8>, name: &str, data: &[u8]) {
    fn leb128(out: &mut Vec<u8>, mut n: usize) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let mut body = Vec::new();
    leb128(&mut body, name.len());
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(data);
    wasm.push(0);
    leb128(wasm, body.len());
    wasm.extend_from_slice(&body);
}

fn publish(dir: &Path, what: &Path, registry: &Path, key: &Path) {
    let out = bl_in(
        dir,
        &dir.join("cache"),
        &[
            "plugin",
            "publish",
            what.to_str().unwrap(),
            "--registry",
            registry.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
}

/// A fresh project `name` under `dir` that trusts the key `public`, with a
/// compiled-component cache of its own: (project, cache).
fn trusting_project(dir: &Path, name: &str, public: &Path) -> (PathBuf, PathBuf) {
    let (project, cache) = (dir.join(name), dir.join(format!("{name}-cache")));
    std::fs::create_dir_all(&project).unwrap();
    let trusted = bl_in(
        &project,
        &cache,
        &["plugin", "trust", public.to_str().unwrap()],
    );
    assert!(trusted.status.success(), "{}", text(&trusted));
    (project, cache)
}

/// Changes `registry/index.json`.
fn edit_index(registry: &Path, change: impl FnOnce(&mut Value)) {
    let path = registry.join("index.json");
    let mut index: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut index);
    std::fs::write(&path, serde_json::to_string_pretty(&index).unwrap()).unwrap();
}

/// Files in `dir` and under it (none when it does not exist).
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// A graph of one node, `writer`, gated by the plugin `gate` names (with
/// its config), whose recorded reply writes `report` to workspace/report.md.
pub(crate) fn gated_graph(case: &Case, gate: Value, report: &str) {
    graph(
        case,
        vec![agent("writer", json!({"gate": gate}))],
        vec![],
        "continue_declared",
    );
    replies(
        case,
        &[("writer", "wrote it", &[("workspace/report.md", report)])],
    );
}

/// The gate config the word-count examples take, in every language.
pub(crate) fn word_count_gate(plugin: &str) -> Value {
    json!({"plugin": plugin, "config": {"file": "workspace/report.md", "min_words": 3}})
}

/// A loop package, `loops/wc` in `case`, gated by the word-count plugin
/// `plugin` names: its recorded worker writes two words, then five, so the
/// gate rejects the first lap and passes the second.
pub(crate) fn word_count_loop(case: &Case, plugin: &str) -> PathBuf {
    let package = case.path("loops/wc");
    std::fs::create_dir_all(package.join("cassettes")).unwrap();
    std::fs::create_dir_all(package.join("seed")).unwrap();
    std::fs::write(package.join("seed/notes.md"), "one\n").unwrap();
    std::fs::write(package.join("PROMPT.md"), "Write at least five words.\n").unwrap();
    std::fs::write(
        package.join("loop.yaml"),
        format!("name: wc\ndescription: Five words in notes.md.\npattern: evaluator-optimizer\nrole: [docs]\nrung: L1\nspec: PROMPT.md\nrunner:\n  default: stub\ngate:\n  kind: plugin\n  plugin: {plugin}\n  config: {{file: seed/notes.md, min_words: 5}}\nbounds: bounds.yaml\n"),
    )
    .unwrap();
    std::fs::write(package.join("bounds.yaml"), "max_iterations: 3\n").unwrap();
    let lap = |n: u32, words: &str| {
        json!({"lap": n, "agent_output": "wrote", "agent_claimed_done": true, "changed": true, "tokens": 10,
               "actions": [{"type": "write_file", "path": "seed/notes.md", "content": words}]})
    };
    std::fs::write(
        package.join("cassettes/default.json"),
        json!({"version": 1, "loop": "wc", "interactions": [lap(1, "one two"), lap(2, "one two three four five")]})
            .to_string(),
    )
    .unwrap();
    package
}

/// A loop's plugin gate whose config breaks the schema the plugin's
/// manifest declares is refused before the first lap, naming the place in
/// loop.yaml; with a config the plugin takes, the loop runs.
#[test]
fn a_loop_gate_config_its_plugin_would_refuse_is_refused_before_the_first_lap() {
    let case = Case::new();
    let package = word_count_loop(&case, "jsonschema");
    let manifest = package.join("loop.yaml");
    let with_config = |config: &str| {
        let text = std::fs::read_to_string(&manifest).unwrap();
        let start = text.find("  config: ").unwrap();
        let end = start + text[start..].find('\n').unwrap();
        std::fs::write(
            &manifest,
            format!("{}  config: {config}{}", &text[..start], &text[end..]),
        )
        .unwrap();
    };
    with_config("{schema: {type: string}, files: seed/notes.md}");
    let run = |id: &str| {
        let mut command = Command::new(bl_binary());
        command
            .current_dir(case.path(""))
            .args(["run", "loops/wc", "--yes", "--run-id", id]);
        command.output().unwrap()
    };
    let lint = || {
        let out = Command::new(bl_binary())
            .current_dir(case.path(""))
            .args(["lint", "loops/wc"])
            .output()
            .unwrap();
        (out.status.code(), text(&out))
    };
    // `bl lint` prepares the gate as a run would, without running anything.
    let (code, said) = lint();
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("[FAIL]") && said.contains("at /gate/config/files"),
        "{said}"
    );
    let refused = run("refused");
    let said = text(&refused);
    assert_ne!(refused.status.code(), Some(0), "{said}");
    assert!(
        said.contains("is not one plugin 'jsonschema' takes: at /gate/config/files: "),
        "{said}"
    );
    assert!(
        !package
            .join(".bounded-loops/runs/refused/ledger.jsonl")
            .exists(),
        "no lap ran: {said}"
    );
    // notes.md is no JSON string: the gate judges (and rejects) each lap.
    with_config("{schema: {type: string}, files: [seed/notes.md]}");
    assert_eq!(lint().0, Some(0), "{}", lint().1);
    let judged = run("judged");
    assert!(
        !ledger_laps(&package, "judged").is_empty(),
        "{}",
        text(&judged)
    );
    // A gate plugin that is nowhere: lint says so, and a run ends before
    // its first lap with exit 3 (the gate cannot decide), as loops.md says.
    let linted_with = |plugin: &str| {
        let text_now = std::fs::read_to_string(&manifest).unwrap();
        let start = text_now.find("  plugin: ").unwrap();
        let end = start + text_now[start..].find('\n').unwrap();
        let edited = format!(
            "{}  plugin: {plugin}{}",
            &text_now[..start],
            &text_now[end..]
        );
        std::fs::write(&manifest, edited).unwrap();
        let (code, said) = lint();
        assert_eq!(code, Some(1), "{said}");
        said
    };
    let said = linted_with("no-such-gate");
    assert!(said.contains("plugin \"no-such-gate\" not found"), "{said}");
    let missing = run("missing");
    assert_eq!(missing.status.code(), Some(3), "{}", text(&missing));
    // A name one slip away from a plugin on the path is offered.
    let said = linted_with("jsonschemx");
    assert!(said.contains("Did you mean \"jsonschema\"?"), "{said}");
}

/// The laps a loop run recorded in its ledger.
pub(crate) fn ledger_laps(package: &Path, run: &str) -> Vec<Value> {
    let ledger = package.join(format!(".bounded-loops/runs/{run}/ledger.jsonl"));
    std::fs::read_to_string(&ledger)
        .unwrap_or_else(|e| panic!("{}: {e}", ledger.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_third_party_plugin_is_published_installed_pinned_and_used_by_a_loop_and_a_graph() {
    let publisher = tempfile::tempdir().unwrap();
    let (key, public) = keys(publisher.path(), "acme");
    let registry = publisher.path().join("registry");
    publish(
        publisher.path(),
        &repo_root().join("examples/plugins/word-count"),
        &registry,
        &key,
    );
    let index: Value =
        serde_json::from_slice(&std::fs::read(registry.join("index.json")).unwrap()).unwrap();
    let entry = &index["plugins"]["word-count"][0];
    assert_eq!(entry["recipe"]["language"], "rust", "{entry}");
    assert!(
        entry["source"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let signed = entry["component_sha256"].as_str().unwrap().to_string();
    // Its recipe, followed in a fresh target directory, gives the same bytes.
    let rebuilt = bl_in(
        publisher.path(),
        &publisher.path().join("cache"),
        &[
            "plugin",
            "rebuild",
            "word-count",
            "--source",
            repo_root()
                .join("examples/plugins/word-count")
                .to_str()
                .unwrap(),
            "--registry",
            registry.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(rebuilt.status.code(), Some(0), "{}", text(&rebuilt));
    let rebuilt: Value = serde_json::from_slice(&rebuilt.stdout).unwrap();
    assert_eq!(rebuilt["built"], signed.as_str(), "{rebuilt}");

    // A fresh project: the publisher's key is not trusted yet.
    let case = Case::new();
    let project = case.path("");
    let cache = case.path("cache");
    // `bl plugin verify` fails, saying `why`.
    let verify_fails = |why: &str| {
        let verify = bl_in(&project, &cache, &["plugin", "verify"]);
        assert_eq!(verify.status.code(), Some(1), "{}", text(&verify));
        assert!(text(&verify).contains(why), "{}", text(&verify));
    };
    let install = |extra: &[&str]| {
        let mut args = vec!["plugin", "install", "word-count@^0.1", "--registry"];
        args.push(registry.to_str().unwrap());
        args.extend(extra);
        bl_in(&project, &cache, &args)
    };
    let refused = install(&[]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let said = text(&refused);
    assert!(
        said.contains("UntrustedKey") && said.contains("bl plugin trust"),
        "{said}"
    );
    assert!(!case.path("bl.lock").exists() && files_in(&case.path(".bl")).is_empty());

    let trusted = bl_in(
        &project,
        &cache,
        &["plugin", "trust", public.to_str().unwrap()],
    );
    assert!(trusted.status.success(), "{}", text(&trusted));
    let installed = install(&["--json"]);
    assert!(installed.status.success(), "{}", text(&installed));
    let lock: Value =
        serde_json::from_slice(&std::fs::read(case.path("bl.lock")).unwrap()).unwrap();
    let pin = &lock["plugins"]["word-count"];
    assert_eq!(pin["component_sha256"], signed.as_str(), "{lock}");
    assert_eq!(pin["trust"], "Verified");
    assert_eq!(pin["version"], "0.1.0");
    // Compiled at install, so the first run does not pay for it.
    assert!(
        !files_in(&cache).is_empty(),
        "the component was precompiled"
    );

    let listed = bl_in(&project, &cache, &["plugin", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let first = &listed["plugins"][0];
    assert_eq!(
        (first["name"].as_str(), first["trust"].as_str()),
        (Some("word-count"), Some("Verified")),
        "the project's plugins come first: {listed}"
    );

    // Left unchanged a while, its digest is memoised by the runs below,
    // which then do not read it; the memo must not hide the change later.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    // A graph run uses it and records its digest.
    gated_graph(&case, word_count_gate("word-count"), "one two three four");
    let run = case.run("run-1", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let done = case.event("run-1", "writer", "node.succeeded").unwrap();
    assert_eq!(done["plugins"][0]["plugin"], "word-count", "{done}");
    assert_eq!(done["plugins"][0]["component_digest"], signed.as_str());
    assert!(done["plugins"][0].get("unsigned").is_none(), "{done}");
    // A manifest may name the version it needs: met, it runs; not met, the
    // run is refused before anything runs, naming both.
    gated_graph(
        &case,
        word_count_gate("word-count@^0.1"),
        "one two three four",
    );
    let run = case.run("run-versioned", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    gated_graph(
        &case,
        word_count_gate("word-count@^2"),
        "one two three four",
    );
    let run = case.run("run-too-old", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    let said = text(&run);
    assert!(
        said.contains("needs word-count ^2") && said.contains("is version 0.1.0"),
        "{said}"
    );
    assert!(said.contains("nothing was run"), "{said}");
    // The manifest beside it is only its author's word: edited to claim
    // 2.0.0, the pinned plugin is still the lock's 0.1.0.
    let manifest = case.path(".bl/plugins/word-count.plugin.json");
    let honest = std::fs::read_to_string(&manifest).unwrap();
    let claims = honest.replace("\"version\": \"0.1.0\"", "\"version\": \"2.0.0\"");
    assert_ne!(claims, honest);
    std::fs::write(&manifest, claims).unwrap();
    let run = case.run("run-claims-2", &[]);
    assert_eq!(run.status.code(), Some(2), "{}", text(&run));
    assert!(text(&run).contains("is version 0.1.0"), "{}", text(&run));
    std::fs::write(&manifest, honest).unwrap();
    gated_graph(&case, word_count_gate("word-count"), "one two three four");

    // A loop uses it too (gate.kind: plugin), and its ledger names the digest.
    let package = word_count_loop(&case, "word-count@^0.1");
    let looped = bl_in(
        &project,
        &cache,
        &["run", "loops/wc", "--yes", "--run-id", "wc-1", "--json"],
    );
    assert_eq!(looped.status.code(), Some(0), "{}", text(&looped));
    let laps = ledger_laps(&package, "wc-1");
    assert_eq!(
        laps.len(),
        2,
        "the gate rejected lap 1 and passed lap 2: {laps:?}"
    );
    assert_eq!(laps[0]["verdict"]["passed"], false);
    assert_eq!(laps[1]["gate"]["component"], signed.as_str(), "{laps:?}");
    assert_eq!(laps[1]["gate"]["source"], "plugin");
    // The installing project knows what the publisher signed of the
    // plugin's manifest: its description and its config's schema, so a
    // config the plugin would refuse is refused here before any lap.
    let installed: Value = serde_json::from_slice(
        &std::fs::read(case.path(".bl/plugins/word-count.plugin.json")).unwrap(),
    )
    .unwrap();
    let schema: Value = serde_json::from_slice(
        &std::fs::read(repo_root().join("examples/plugins/word-count/config.schema.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(installed["config_schema"], schema, "{installed}");
    assert!(
        installed["description"]
            .as_str()
            .unwrap()
            .starts_with("Example third-party gate"),
        "{installed}"
    );
    let loop_yaml = package.join("loop.yaml");
    let takes = std::fs::read_to_string(&loop_yaml).unwrap();
    std::fs::write(&loop_yaml, takes.replace("min_words: 5", "min_words: five")).unwrap();
    let linted = bl_in(&project, &cache, &["lint", "loops/wc"]);
    assert_eq!(linted.status.code(), Some(1), "{}", text(&linted));
    assert!(
        text(&linted).contains("at /gate/config/min_words"),
        "{}",
        text(&linted)
    );
    let refused = bl_in(
        &project,
        &cache,
        &["run", "loops/wc", "--yes", "--run-id", "wc-bad"],
    );
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused));
    assert!(
        !package
            .join(".bounded-loops/runs/wc-bad/ledger.jsonl")
            .exists(),
        "no lap ran"
    );
    std::fs::write(&loop_yaml, takes).unwrap();

    // The installed bytes changed: every run refuses, naming both digests,
    // and verify says so.
    let installed_at = case.path(".bl/plugins/word-count.wasm");
    let mut bytes = std::fs::read(&installed_at).unwrap();
    bytes.extend_from_slice(b"\0");
    std::fs::write(&installed_at, &bytes).unwrap();
    let run = case.run("run-2", &[]);
    assert_ne!(run.status.code(), Some(0), "{}", text(&run));
    let said = text(&run);
    assert!(
        said.contains(&signed) && said.contains("bl.lock pins"),
        "{said}"
    );
    // Run by its path, the refusal names the plugin to install again.
    let by_path = bl_in(
        &project,
        &cache,
        &[
            "plugin",
            "run",
            ".bl/plugins/word-count.wasm",
            "--workspace",
            ".",
            "--config",
            r#"{"file": "x.md", "min_words": 1}"#,
        ],
    );
    assert_ne!(by_path.status.code(), Some(0), "{}", text(&by_path));
    assert!(
        text(&by_path).contains("(`bl plugin install word-count`)"),
        "{}",
        text(&by_path)
    );
    verify_fails("VerificationFailed");
    // The list says the same, though the bytes no longer read as a component.
    let listed = bl_in(&project, &cache, &["plugin", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let first = &listed["plugins"][0];
    assert_eq!(
        (first["trust"].as_str(), first["runs"].as_str()),
        (
            Some("VerificationFailed"),
            Some("refused: not the bytes bl.lock pins")
        ),
        "{listed}"
    );
    let looped = bl_in(&project, &cache, &["run", "loops/wc", "--yes", "--json"]);
    assert_ne!(looped.status.code(), Some(0), "{}", text(&looped));
    assert!(text(&looped).contains("pins"), "{}", text(&looped));
    // Renaming the plugin in its manifest does not escape the pin.
    let manifest = case.path(".bl/plugins/word-count.plugin.json");
    let renamed = std::fs::read_to_string(&manifest)
        .unwrap()
        .replace("\"name\": \"word-count\"", "\"name\": \"not-pinned\"");
    std::fs::write(&manifest, renamed).unwrap();
    let run = case.run("run-3", &[]);
    assert_ne!(run.status.code(), Some(0), "{}", text(&run));
    assert!(text(&run).contains("bl.lock pins"), "{}", text(&run));

    // Installing again restores the pinned bytes, as the refusal says:
    // from the registry bl.lock says it came from, with no flag.
    let again = bl_in(&project, &cache, &["plugin", "install", "word-count"]);
    assert!(again.status.success(), "{}", text(&again));
    let verify = bl_in(&project, &cache, &["plugin", "verify"]);
    assert_eq!(verify.status.code(), Some(0), "{}", text(&verify));

    // The schema is signed with the rest: edited in the index, the entry
    // no longer verifies.
    let index_path = registry.join("index.json");
    let original = std::fs::read(&index_path).unwrap();
    edit_index(&registry, |i| {
        i["plugins"]["word-count"][0]["config_schema"] = json!({"type": "object"});
    });
    verify_fails("VerificationFailed");
    std::fs::write(&index_path, &original).unwrap();

    // The registry changed under the lock: an entry stripped of its
    // signature, then an index that no longer reads, each fails verify
    // (neither is taken for a registry that is merely out of reach).
    edit_index(&registry, |i| {
        i["plugins"]["word-count"][0]
            .as_object_mut()
            .unwrap()
            .remove("signature");
    });
    verify_fails("no longer signed");
    std::fs::write(&index_path, b"{not an index").unwrap();
    verify_fails("does not read");
    std::fs::write(&index_path, original).unwrap();
}

#[test]
fn every_wrong_registry_is_refused_with_its_own_error_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "acme");
    let (stranger, _) = keys(dir.path(), "stranger");
    let registry = dir.path().join("registry");
    publish(
        dir.path(),
        &staged(dir.path(), "files", "mygate", "1.0.0", &[]),
        &registry,
        &key,
    );

    let (project, cache) = trusting_project(dir.path(), "project", &public);
    let install_from = |registry: &Path, wanted: &str, extra: &[&str]| {
        let mut args = vec![
            "plugin",
            "install",
            wanted,
            "--registry",
            registry.to_str().unwrap(),
        ];
        args.extend(extra);
        bl_in(&project, &cache, &args)
    };
    // Each refusal: exit 2, its own words, and nothing installed, locked or compiled.
    let refused = |registry: &Path, wanted: &str, extra: &[&str], says: &[&str]| {
        let out = install_from(registry, wanted, extra);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{said}");
        for words in says {
            assert!(said.contains(words), "expected {words:?} in: {said}");
        }
        assert!(
            files_in(&project.join(".bl")).is_empty(),
            "nothing installed: {said}"
        );
        assert!(files_in(&cache).is_empty(), "nothing compiled: {said}");
        assert!(!project.join("bl.lock").exists(), "nothing locked: {said}");
    };
    // A copy of the good registry, damaged by `damage`.
    let copy = |name: &str, damage: &dyn Fn(&Path)| {
        let to = dir.path().join(name);
        let status = Command::new("cp")
            .arg("-r")
            .arg(&registry)
            .arg(&to)
            .status()
            .unwrap();
        assert!(status.success());
        damage(&to);
        to
    };
    let component = |root: &Path| root.join("plugins/mygate/1.0.0/mygate.wasm");

    let tampered = copy("tampered", &|r| {
        let mut bytes = std::fs::read(component(r)).unwrap();
        bytes[100] ^= 1;
        std::fs::write(component(r), bytes).unwrap();
    });
    refused(
        &tampered,
        "mygate",
        &[],
        &["the component's sha256 is", "the signed index says"],
    );

    let edited = copy("edited", &|r| {
        edit_index(r, |i| {
            i["plugins"]["mygate"][0]["capabilities"] = json!(["command"])
        });
    });
    refused(
        &edited,
        "mygate",
        &[],
        &[
            "VerificationFailed",
            "changed after signing",
            "--allow-unsigned does not apply",
        ],
    );
    // Allowing it unsigned does not let a failed signature through.
    refused(
        &edited,
        "mygate",
        &["--allow-unsigned", "mygate"],
        &["VerificationFailed"],
    );

    let truncated = copy("truncated", &|r| {
        edit_index(r, |i| {
            let cut = i["plugins"]["mygate"][0]["signature"].as_str().unwrap()[..40].to_string();
            i["plugins"]["mygate"][0]["signature"] = json!(cut);
        });
    });
    refused(&truncated, "mygate", &[], &["VerificationFailed", "not 64"]);

    let foreign = dir.path().join("foreign");
    publish(
        dir.path(),
        &staged(dir.path(), "files", "mygate", "1.0.0", &[]),
        &foreign,
        &stranger,
    );
    refused(
        &foreign,
        "mygate",
        &[],
        &["UntrustedKey", "--allow-unsigned mygate"],
    );

    let traversal = copy("traversal", &|r| {
        edit_index(r, |i| {
            let entry = i["plugins"]["mygate"].clone();
            i["plugins"]["../evil"] = entry;
        });
    });
    refused(
        &traversal,
        "mygate",
        &[],
        &["/plugins/../evil", "never a path"],
    );
    refused(&registry, "../evil", &[], &["is not a plugin name"]);

    let linked = copy("linked", &|r| {
        let real = r.join("real.wasm");
        std::fs::rename(component(r), &real).unwrap();
        std::os::unix::fs::symlink(&real, component(r)).unwrap();
    });
    refused(&linked, "mygate", &[], &["is a symlink"]);

    let oversized = copy("oversized", &|r| {
        let mut text = std::fs::read_to_string(r.join("index.json")).unwrap();
        text.push_str(&" ".repeat(4 * 1024 * 1024));
        std::fs::write(r.join("index.json"), text).unwrap();
    });
    refused(&oversized, "mygate", &[], &["over the 4194304-byte cap"]);

    // A component importing more than its signed entry asks for.
    let lying = dir.path().join("lying");
    publish(
        dir.path(),
        &staged(dir.path(), "command", "mygate", "1.0.0", &[]),
        &lying,
        &key,
    );
    refused(
        &lying,
        "mygate",
        &[],
        &["imports command", "asks only for []"],
    );

    // A new version asking for more than the lock granted needs the grant again.
    let ok = install_from(&registry, "mygate", &[]);
    assert!(ok.status.success(), "{}", text(&ok));
    let lock_before = std::fs::read(project.join("bl.lock")).unwrap();
    let installed_before = std::fs::read(project.join(".bl/plugins/mygate.wasm")).unwrap();
    publish(
        dir.path(),
        &staged(dir.path(), "command", "mygate", "1.1.0", &["command"]),
        &registry,
        &key,
    );
    let more = install_from(&registry, "mygate@^1", &[]);
    assert_eq!(more.status.code(), Some(2), "{}", text(&more));
    let said = text(&more);
    assert!(
        said.contains("asks for command") && said.contains("--grant command"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(project.join("bl.lock")).unwrap(),
        lock_before,
        "lock unchanged"
    );
    assert_eq!(
        std::fs::read(project.join(".bl/plugins/mygate.wasm")).unwrap(),
        installed_before,
        "the installed version stays"
    );
    let granted = install_from(&registry, "mygate@^1", &["--grant", "command", "--json"]);
    assert!(granted.status.success(), "{}", text(&granted));
    let lock: Value =
        serde_json::from_slice(&std::fs::read(project.join("bl.lock")).unwrap()).unwrap();
    assert_eq!(lock["plugins"]["mygate"]["version"], "1.1.0");
    assert_eq!(lock["plugins"]["mygate"]["granted"], json!(["command"]));
}

#[test]
fn versions_resolve_by_semver_and_an_unsigned_one_runs_only_when_allowed_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "acme");
    let registry = dir.path().join("registry");
    for version in ["1.0.0", "1.2.0", "2.0.0"] {
        publish(
            dir.path(),
            &staged(dir.path(), "files", "mygate", version, &[]),
            &registry,
            &key,
        );
    }
    let case = Case::new();
    let project = case.path("");
    let cache = case.path("cache");
    let reg = registry.to_str().unwrap();
    assert!(
        bl_in(
            &project,
            &cache,
            &["plugin", "trust", public.to_str().unwrap()]
        )
        .status
        .success()
    );
    let installed = |wanted: &str, extra: &[&str]| -> Result<String, String> {
        let mut args = vec!["plugin", "install", wanted, "--registry", reg, "--json"];
        args.extend(extra);
        let out = bl_in(&project, &cache, &args);
        if !out.status.success() {
            return Err(text(&out));
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        Ok(v["locked"]["version"].as_str().unwrap().to_string())
    };
    assert_eq!(installed("mygate@^1", &[]).unwrap(), "1.2.0");
    assert_eq!(installed("mygate@=1.0.0", &[]).unwrap(), "1.0.0");
    assert_eq!(installed("mygate", &[]).unwrap(), "2.0.0");
    assert_eq!(installed("mygate@~1.2", &[]).unwrap(), "1.2.0");
    let none = installed("mygate@^3", &[]).unwrap_err();
    assert!(none.contains("usable: 1.0.0, 1.2.0, 2.0.0"), "{none}");
    assert!(
        installed("mygate@not-a-version", &[])
            .unwrap_err()
            .contains("not a version requirement")
    );

    // An unsigned version: refused, unless the operator names it.
    publish(
        dir.path(),
        &staged(dir.path(), "files", "mygate", "2.1.0", &[]),
        &registry,
        &key,
    );
    edit_index(&registry, |i| {
        let versions = i["plugins"]["mygate"].as_array_mut().unwrap();
        versions
            .last_mut()
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("signature");
    });
    let unsigned = installed("mygate@=2.1.0", &[]).unwrap_err();
    assert!(unsigned.contains("2.1.0 is NotSigned"), "{unsigned}");
    let other = installed("mygate@=2.1.0", &["--allow-unsigned", "other"]).unwrap_err();
    assert!(other.contains("--allow-unsigned mygate"), "{other}");
    assert_eq!(
        installed("mygate@=2.1.0", &["--allow-unsigned", "mygate"]).unwrap(),
        "2.1.0"
    );
    let lock: Value =
        serde_json::from_slice(&std::fs::read(case.path("bl.lock")).unwrap()).unwrap();
    assert_eq!(lock["plugins"]["mygate"]["trust"], "NotSigned");
    assert_eq!(lock["plugins"]["mygate"]["allowed_unsigned"], true);

    // A run that uses it records that it was unsigned.
    let gate = json!({"plugin": "mygate", "config": {"required": ["workspace/report.md"]}});
    gated_graph(&case, gate, "done\n");
    let run = case.run("run-1", &[]);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run));
    let done = case.event("run-1", "writer", "node.succeeded").unwrap();
    assert_eq!(done["plugins"][0]["unsigned"], true, "{done}");
    let listed = bl_in(&project, &cache, &["plugin", "list"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .any(|l| l.starts_with("mygate") && l.contains("NotSigned")),
        "{}",
        text(&listed)
    );
}

/// The registry shipped in the repository: every first-party plugin in it
/// verifies under the project key, and `bl plugin rebuild NAME` (which
/// finds the source in `plugins/` by its signed digest) follows its recipe
/// to exactly the signed bytes.
#[test]
fn the_shipped_registry_verifies_and_each_first_party_plugin_rebuilds_to_its_signed_bytes() {
    let registry = repo_root().join("registry");
    let project = tempfile::tempdir().unwrap();
    let cache = project.path().join("cache");
    let search = bl_in(
        project.path(),
        &cache,
        &[
            "plugin",
            "search",
            "--registry",
            registry.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(search.status.success(), "{}", text(&search));
    let found: Value = serde_json::from_slice(&search.stdout).unwrap();
    let hits = found["plugins"].as_array().unwrap();
    let mut names: Vec<&str> = hits.iter().map(|h| h["name"].as_str().unwrap()).collect();
    names.dedup();
    let mut crates: Vec<String> = std::fs::read_dir(repo_root().join("plugins"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    crates.sort();
    assert_eq!(names, crates, "every first-party plugin is in registry/");
    for hit in hits {
        assert_eq!(hit["trust"], "Verified", "{hit}");
    }
    let index: Value =
        serde_json::from_slice(&std::fs::read(registry.join("index.json")).unwrap()).unwrap();
    let rustc = Command::new("rustc").arg("--version").output().unwrap();
    let rustc = String::from_utf8_lossy(&rustc.stdout).trim().to_string();
    for name in &names {
        let versions = index["plugins"][name].as_array().unwrap();
        let latest = versions.last().unwrap();
        let toolchain = latest["recipe"]["toolchain"].as_str().unwrap();
        // Another compiler gives other bytes, and no setup can install a
        // given rustc offline: that is a missing prerequisite, said so.
        if !toolchain.starts_with(&rustc) {
            eprintln!(
                "skipped: {name} was built with {toolchain}, and this machine has {rustc}; rebuild it with that compiler"
            );
            continue;
        }
        let out = bl_in(
            project.path(),
            &cache,
            &[
                "plugin",
                "rebuild",
                name,
                "--registry",
                registry.to_str().unwrap(),
                "--plugin-version",
                latest["version"].as_str().unwrap(),
                "--target-dir",
                repo_root()
                    .join("target/wasm-reproducible")
                    .to_str()
                    .unwrap(),
                "--json",
            ],
        );
        assert!(
            out.status.success(),
            "{name}: {}\nChanged a first-party plugin? Publish a new version of it to registry/ (docs/registry.md, The registry shipped with bl).",
            text(&out)
        );
        let rebuilt: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(rebuilt["reproduced"], true, "{rebuilt}");
        let source = Path::new(rebuilt["source"].as_str().unwrap());
        assert_eq!(
            source,
            repo_root()
                .join("plugins")
                .join(name)
                .canonicalize()
                .unwrap(),
            "found by its digest"
        );
    }
}

/// Where a registry directory keeps the component of `name@version`.
fn registered(registry: &Path, name: &str, version: &str) -> PathBuf {
    registry.join(format!("plugins/{name}/{version}/{name}.wasm"))
}

/// `bl plugin build --signed` (what `scripts/dev demo` runs): a
/// first-party plugin whose sources a trusted key signed a build of is
/// taken from the registry, byte for byte, with nothing compiled; an entry
/// whose signature no longer holds is never taken (the plugin is compiled
/// instead); a component whose bytes are not the signed ones is refused,
/// and nothing is written.
#[test]
fn a_plugin_whose_exact_sources_were_signed_is_taken_from_the_registry_not_compiled() {
    let dir = tempfile::tempdir().unwrap();
    let (project, cache) = (dir.path().join("project"), dir.path().join("cache"));
    std::fs::create_dir_all(&project).unwrap();
    let shipped = repo_root().join("registry");
    let index: Value =
        serde_json::from_slice(&std::fs::read(shipped.join("index.json")).unwrap()).unwrap();
    let latest = index["plugins"]["files"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    let files = repo_root().join("plugins/files");
    let build = |out: &Path, target: &Path, registry: Option<&Path>| {
        let mut command = Command::new(bl_binary());
        command
            .args(["plugin", "build", "--signed", "--json"])
            .arg(&files)
            .arg("--out")
            .arg(out)
            .arg("--target-dir")
            .arg(target)
            .current_dir(&project)
            .env("BL_CACHE_DIR", &cache)
            .env_remove("BL_REGISTRY");
        if let Some(registry) = registry {
            command.env("BL_REGISTRY", registry);
        }
        command.output().unwrap()
    };

    // Taken from the registry shipped with bl: its exact bytes, the
    // manifest a build writes, and no wasm build at all.
    let (out, target) = (dir.path().join("out"), dir.path().join("wasm"));
    let taken = build(&out, &target, None);
    assert!(taken.status.success(), "{}", text(&taken));
    let said: Value = serde_json::from_slice(&taken.stdout).unwrap();
    assert_eq!(said["taken"], true, "{said}");
    assert_eq!(said["version"], latest["version"], "{said}");
    assert_eq!(said["signed_by"], "bl-project", "{said}");
    let component = std::fs::read(out.join("files.wasm")).unwrap();
    let version = latest["version"].as_str().unwrap();
    let signed = std::fs::read(registered(&shipped, "files", version)).unwrap();
    assert!(component == signed, "the signed bytes, unchanged");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("files.plugin.json")).unwrap()).unwrap();
    assert_eq!(manifest["source_digest"], latest["source"]["digest"]);
    assert_eq!(manifest["component_digest"], latest["component_sha256"]);
    assert_eq!(manifest["world"], "gate");
    assert!(!target.exists(), "nothing was compiled");
    // It is a working gate.
    let gate = Command::new(bl_binary())
        .args(["plugin", "run"])
        .arg(out.join("files.wasm"))
        .args(["--workspace"])
        .arg(repo_root().join("examples/workspaces/report-done"))
        .arg("--config")
        .arg(std::fs::read_to_string(repo_root().join("examples/gates/report.json")).unwrap())
        .env("BL_CACHE_DIR", &cache)
        .output()
        .unwrap();
    assert_eq!(gate.status.code(), Some(0), "{}", text(&gate));
    let again = build(&out, &target, None);
    let said: Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(said["taken"], false, "up to date the second time: {said}");

    // A local build of the same sources there (the same stamp, other
    // bytes: paths of this checkout) is not taken for the signed one.
    for file in ["files.wasm", "files.plugin.json"] {
        std::fs::copy(plugin_dir().join(file), out.join(file)).unwrap();
    }
    let local = std::fs::read(out.join("files.wasm")).unwrap();
    let replaced = build(&out, &target, None);
    let said: Value = serde_json::from_slice(&replaced.stdout).unwrap();
    if local != signed {
        assert_eq!(said["taken"], true, "the signed bytes written: {said}");
    }
    assert!(std::fs::read(out.join("files.wasm")).unwrap() == signed);

    // Every first-party plugin on main has its signed build in the
    // registry (the demo compiles none): a changed plugin must be
    // published again (docs/registry.md).
    let all = dir.path().join("all");
    for entry in std::fs::read_dir(repo_root().join("plugins")).unwrap() {
        let crate_dir = entry.unwrap().path();
        if !crate_dir.join("Cargo.toml").is_file() {
            continue;
        }
        let out = Command::new(bl_binary())
            .args(["plugin", "build", "--signed", "--json", "--out"])
            .arg(&all)
            .arg(&crate_dir)
            .current_dir(&project)
            .env("BL_CACHE_DIR", &cache)
            .env("BL_REGISTRY", &shipped)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let said: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            said["taken"],
            true,
            "{}: no build signed for its sources in registry/; publish it (docs/registry.md): {said}",
            crate_dir.display()
        );
    }

    // A copy of the registry whose entry for these sources was edited
    // after signing: not taken, so the plugin is compiled from its source.
    let edited = dir.path().join("edited");
    bl_e2e::copy_tree(&shipped, &edited);
    edit_index(&edited, |index| {
        for version in index["plugins"]["files"].as_array_mut().unwrap() {
            version["capabilities"] = json!(["command"]);
        }
    });
    let (out, target) = (
        dir.path().join("out-edited"),
        repo_root().join("target/wasm"),
    );
    let compiled = build(&out, &target, Some(&edited));
    assert!(compiled.status.success(), "{}", text(&compiled));
    let said: Value = serde_json::from_slice(&compiled.stdout).unwrap();
    assert!(said.get("taken").is_none(), "compiled, not taken: {said}");
    assert!(said["toolchain"].is_string(), "{said}");

    // A copy whose component is not the bytes its entry signed: refused,
    // named, and nothing is written.
    let swapped = dir.path().join("swapped");
    bl_e2e::copy_tree(&shipped, &swapped);
    std::fs::copy(
        registered(&shipped, "deny-all", "0.1.1"),
        registered(&swapped, "files", version),
    )
    .unwrap();
    let out = dir.path().join("out-swapped");
    let refused = build(&out, &dir.path().join("wasm-swapped"), Some(&swapped));
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains(latest["component_sha256"].as_str().unwrap()),
        "names the signed digest: {}",
        text(&refused)
    );
    assert!(!out.exists(), "nothing written");
}

/// A registry served as a static web tree, on loopback: installed from by
/// URL, verified as a directory is, and a component changed on the server
/// is refused.
#[test]
fn a_registry_served_over_http_is_mirrored_and_verified_like_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = keys(dir.path(), "acme");
    let registry = dir.path().join("registry");
    publish(
        dir.path(),
        &staged(dir.path(), "files", "mygate", "1.0.0", &[]),
        &registry,
        &key,
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // A real static web server: Python's, on loopback only.
    let mut server = Command::new("python3")
        .args([
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            &port.to_string(),
            "--directory",
        ])
        .arg(&registry)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < until,
            "the web server did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let url = format!("http://127.0.0.1:{port}");
    let (project, cache) = trusting_project(dir.path(), "project", &public);
    let installed = bl_in(
        &project,
        &cache,
        &["plugin", "install", "mygate", "--registry", &url, "--json"],
    );
    let said = text(&installed);
    assert!(installed.status.success(), "{said}");
    let lock: Value =
        serde_json::from_slice(&std::fs::read(project.join("bl.lock")).unwrap()).unwrap();
    assert_eq!(
        lock["plugins"]["mygate"]["registry"],
        url.as_str(),
        "{lock}"
    );
    assert_eq!(lock["plugins"]["mygate"]["trust"], "Verified");
    let verify = bl_in(&project, &cache, &["plugin", "verify"]);
    assert!(verify.status.success(), "{}", text(&verify));
    // The server now serves other bytes: a fresh install refuses them.
    let served = registry.join("plugins/mygate/1.0.0/mygate.wasm");
    let mut bytes = std::fs::read(&served).unwrap();
    bytes[100] ^= 1;
    std::fs::write(&served, bytes).unwrap();
    let (other, other_cache) = trusting_project(dir.path(), "other", &public);
    let refused = bl_in(
        &other,
        &other_cache,
        &["plugin", "install", "mygate", "--registry", &url],
    );
    let said = text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("the signed index says"), "{said}");
    assert!(!other.join("bl.lock").exists() && files_in(&other.join(".bl")).is_empty());
    // Checked before it was written: no component reached the cache.
    let cached: Vec<PathBuf> = files_in(&other_cache)
        .into_iter()
        .filter(|f| f.extension().is_some_and(|x| x == "wasm" || x == "part"))
        .collect();
    assert!(cached.is_empty(), "{cached:?}");
    let _ = server.kill();
    let _ = server.wait();
}

/// A plugin no lock pins runs only when it ships with bl, a key the
/// project trusts signed its bytes, or the operator allows it by name, and
/// then what used it records that it was unsigned. Otherwise a graph run
/// is refused before anything runs, and a loop does not start.
#[test]
fn an_unpinned_plugin_runs_only_when_it_ships_with_bl_is_signed_or_is_allowed_by_name() {
    let case = Case::new();
    let project = case.path("");
    let cache = case.path("cache");
    // `mygate` (the files gate under another name) on BL_PLUGIN_PATH.
    let elsewhere = staged(&case.path("elsewhere"), "files", "mygate", "1.0.0", &[]);
    let path = std::env::join_paths([elsewhere.parent().unwrap(), &plugin_dir()]).unwrap();
    let bl = |args: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(bl_binary());
        command
            .args(args)
            .current_dir(&project)
            .env("BL_PLUGIN_PATH", &path)
            .env("BL_CACHE_DIR", &cache)
            .env_remove("BL_REGISTRY")
            .env_remove("BL_ALLOW_UNSIGNED");
        for (k, v) in env {
            command.env(k, v);
        }
        command.output().unwrap()
    };
    let run =
        |out: &str, extra: &[&str], env: &[(&str, &str)]| bl(&Case::run_args(out, extra), env);
    let gate = json!({"plugin": "mygate", "config": {"required": ["workspace/report.md"]}});
    gated_graph(&case, gate, "done\n");

    let refused = run("refused", &[], &[]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let said = text(&refused);
    assert!(
        said.contains("is not signed by a key this project trusts")
            && said.contains("--allow-unsigned mygate")
            && said.contains("nothing was run"),
        "{said}"
    );
    assert!(
        !case.path("refused").join(RunDir::EVENTS).exists(),
        "refused before the run began"
    );
    // Allowed by name, on the command line or in the environment: it runs,
    // and the node's record says it was unsigned.
    for (out, extra, env) in [
        ("allowed", &["--allow-unsigned", "mygate"][..], &[][..]),
        (
            "allowed-env",
            &[][..],
            &[("BL_ALLOW_UNSIGNED", "other,mygate")][..],
        ),
    ] {
        let allowed = run(out, extra, env);
        assert_eq!(allowed.status.code(), Some(0), "{}", text(&allowed));
        let done = case.event(out, "writer", "node.succeeded").unwrap();
        assert_eq!(done["plugins"][0]["unsigned"], true, "{done}");
    }
    let other = run("other", &["--allow-unsigned", "other"], &[]);
    assert_eq!(other.status.code(), Some(2), "{}", text(&other));
    // A name allowed that is not this plugin's is said; a close one as
    // the likely misspelling it is.
    assert!(
        text(&other).contains("Allowed unsigned now: other"),
        "{}",
        text(&other)
    );
    let misspelt = run("misspelt", &["--allow-unsigned", "mygat"], &[]);
    assert_eq!(misspelt.status.code(), Some(2), "{}", text(&misspelt));
    assert!(
        text(&misspelt).contains("\"mygat\" is close to \"mygate\": a misspelling?"),
        "{}",
        text(&misspelt)
    );

    // The same bytes, signed by a key the project trusts in the registry
    // BL_REGISTRY names: they run as signed.
    let (key, public) = keys(&case.path("keys"), "acme");
    let registry = case.path("registry");
    publish(&case.path("keys"), &elsewhere, &registry, &key);
    let signed_env = [("BL_REGISTRY", registry.to_str().unwrap())];
    let untrusted = run("untrusted", &[], &signed_env);
    assert_eq!(untrusted.status.code(), Some(2), "{}", text(&untrusted));
    let trusted = bl(&["plugin", "trust", public.to_str().unwrap()], &[]);
    assert!(trusted.status.success(), "{}", text(&trusted));
    let signed = run("signed", &[], &signed_env);
    assert_eq!(signed.status.code(), Some(0), "{}", text(&signed));
    let done = case.event("signed", "writer", "node.succeeded").unwrap();
    assert!(done["plugins"][0].get("unsigned").is_none(), "{done}");

    // The list says what a run would decide, and why.
    let listed = |env: &[(&str, &str)]| -> Value {
        let out = bl(&["plugin", "list", "--json"], env);
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let row = |list: &Value, name: &str| -> (String, String) {
        let p = list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {list}"))
            .clone();
        (
            p["trust"].as_str().unwrap().into(),
            p["runs"].as_str().unwrap().into(),
        )
    };
    let plain = listed(&[]);
    assert_eq!(
        row(&plain, "mygate"),
        (
            "NotSigned".into(),
            "refused unless --allow-unsigned mygate".into()
        )
    );
    assert_eq!(row(&plain, "files").1, "ships with bl");
    assert_eq!(
        row(&listed(&signed_env), "mygate"),
        ("Verified".into(), "signed".into())
    );
    assert_eq!(
        row(&listed(&[("BL_ALLOW_UNSIGNED", "mygate")]), "mygate"),
        ("NotSigned".into(), "allowed unsigned".into())
    );

    // A loop whose gate is unsigned does not start; allowed, its ledger
    // says the gate was an unsigned plugin.
    let package = word_count_loop(&case, "word-count");
    let wc = case.path("elsewhere/stage-word-count");
    std::fs::create_dir_all(&wc).unwrap();
    for file in ["word-count.wasm", "word-count.plugin.json"] {
        std::fs::copy(bl_e2e::test_plugin_dir().join(file), wc.join(file)).unwrap();
    }
    let path = std::env::join_paths([wc.as_path(), &plugin_dir()]).unwrap();
    let looped = |extra: &[&str]| {
        let mut args = vec!["run", "loops/wc", "--yes", "--json"];
        args.extend(extra);
        Command::new(bl_binary())
            .args(&args)
            .current_dir(&project)
            .env("BL_PLUGIN_PATH", &path)
            .env("BL_CACHE_DIR", &cache)
            .env_remove("BL_ALLOW_UNSIGNED")
            .output()
            .unwrap()
    };
    let refused = looped(&["--run-id", "wc-refused"]);
    assert_ne!(refused.status.code(), Some(0), "{}", text(&refused));
    assert!(
        text(&refused).contains("--allow-unsigned word-count"),
        "{}",
        text(&refused)
    );
    let allowed = looped(&["--run-id", "wc-allowed", "--allow-unsigned", "word-count"]);
    assert_eq!(allowed.status.code(), Some(0), "{}", text(&allowed));
    let laps = ledger_laps(&package, "wc-allowed");
    assert_eq!(laps[1]["gate"]["source"], "plugin-unsigned", "{laps:?}");

    // By hand, a plugin's file named on the command line runs (its author
    // trying it); by name from the path it is refused like any run.
    let workspace = case.path("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("done.md"), "done\n").unwrap();
    let config = r#"{"required": ["done.md"]}"#;
    let run_by_hand = |plugin: &str| {
        let ws = workspace.to_str().unwrap();
        bl(
            &[
                "plugin",
                "run",
                plugin,
                "--workspace",
                ws,
                "--config",
                config,
            ],
            &[],
        )
    };
    let by_name = run_by_hand("mygate");
    assert_eq!(by_name.status.code(), Some(3), "{}", text(&by_name));
    assert!(text(&by_name).contains("--allow-unsigned mygate"));
    let by_file = run_by_hand(elsewhere.to_str().unwrap());
    assert_eq!(by_file.status.code(), Some(0), "{}", text(&by_file));
}
