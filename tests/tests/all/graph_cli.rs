//! `bl graph lint` and `bl graph plan` against the outputs bounded-loops
//! 0.7.6 printed for the same files (tests/corpus/graph, see generate.py):
//! stdout byte for byte, the exit code, and the first line of stderr.

use bl_store::RunDir;
use std::path::{Path, PathBuf};
use std::process::Command;

use bl_e2e::{bl_binary, repo_root};
use serde_json::Value;

fn corpus(dir: &str) -> PathBuf {
    repo_root().join("tests/corpus/graph").join(dir)
}

fn run(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let out = Command::new(bl_binary())
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("bl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The case files in a corpus directory that `keep` selects, sorted.
fn case_names(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| keep(n))
        .collect();
    names.sort();
    names
}

fn assert_no_differences(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// bl's `--json` refusal adds `line`, `column` and `hints` beside
/// bounded-loops' keys; the rest must be bounded-loops' bytes. Returns
/// stdout as bounded-loops would print it.
fn without_bl_keys(stdout: &str) -> String {
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(stdout) else {
        return stdout.to_string();
    };
    if object.get("valid") != Some(&Value::Bool(false)) {
        return stdout.to_string();
    }
    for key in ["line", "column"] {
        if let Some(n) = object.remove(key) {
            assert!(n.as_u64().is_some_and(|n| n >= 1), "{key}: {stdout}");
        }
    }
    if let Some(hints) = object.remove("hints") {
        assert!(hints.as_array().is_some_and(|h| !h.is_empty()), "{stdout}");
    }
    format!("{}\n", bl_core::python_json(&Value::Object(object)))
}

/// stderr without bl's own lines (warnings, notes, bindings), which come
/// on top of what bounded-loops prints.
fn bounded_loops_lines(stderr: &str) -> String {
    stderr
        .lines()
        .filter(|l| {
            !["warning: ", "note: ", "binding : "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn lint_output_matches_the_reference() {
    let dir = corpus("cases");
    let mut failures = Vec::new();
    let names = case_names(&dir, |n| !n.ends_with(".expected"));
    for name in &names {
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.expected"))).unwrap(),
        )
        .unwrap();
        let (code, stdout, stderr) = run(&["graph", "lint", name, "--json"], &dir);
        let stderr = bounded_loops_lines(&stderr);
        let stdout = without_bl_keys(&stdout);
        // The expected files store the parsed JSON; re-render it as Python's
        // json.dumps(sort_keys=True) printed it.
        let want_stdout = format!("{}\n", bl_core::python_json(&expected["json"]));
        let want_stderr = expected["stderr"]
            .as_str()
            .unwrap()
            .replace("<MANIFEST>", name);
        if code as i64 != expected["exit"].as_i64().unwrap() || stdout != want_stdout {
            failures.push(format!(
                "{name}: exit {code}, stdout {stdout:?}\n   want exit {}, stdout {want_stdout:?}",
                expected["exit"]
            ));
        }
        if first_line(&stderr) != first_line(&want_stderr) {
            failures.push(format!(
                "{name}: stderr {:?}\n   want {:?}",
                first_line(&stderr),
                first_line(&want_stderr)
            ));
        }
    }
    assert!(names.len() > 100);
    assert_no_differences(&failures);
}

#[test]
fn plan_output_matches_the_reference() {
    let dir = corpus("plans");
    let mut failures = Vec::new();
    let names = case_names(&dir, |n| {
        n.ends_with(".json") && !n.ends_with(".connections.json")
    });
    for name in &names {
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.expected"))).unwrap(),
        )
        .unwrap();
        let connections = name.replace(".json", ".connections.json");
        let roots: Vec<&str> = expected["loop_roots"]
            .as_array()
            .map(|roots| roots.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        // Catalogue errors name resolved package paths; the reference's were
        // recorded relative to this directory.
        let absolute = format!("{}/", dir.canonicalize().unwrap().display());
        for (mode, flag) in [("json", Some("--json")), ("human", None)] {
            let mut args = vec!["graph", "plan", name.as_str()];
            if dir.join(&connections).is_file() {
                args.extend(["--connections", connections.as_str()]);
            }
            for root in &roots {
                args.extend(["--loop-roots", root]);
            }
            args.extend(flag);
            let (code, stdout, stderr) = run(&args, &dir);
            let stderr = bounded_loops_lines(&stderr.replace(&absolute, ""));
            // Where bl deviates on purpose: bounded-loops prints its
            // stand-in policy digest (all `a`s), which reads as a bug; bl
            // says no policy was given (--json keeps the digest).
            let stdout = stdout.replace(
                "policy  : none given: the default execution policy applies\n",
                &format!("policy  : sha256:{}\n", "a".repeat(64)),
            );
            let want = &expected[mode];
            let want_stderr = want["stderr"].as_str().unwrap();
            if code as i64 != want["exit"].as_i64().unwrap()
                || stdout != want["stdout"].as_str().unwrap()
                || first_line(&stderr) != first_line(want_stderr)
            {
                failures.push(format!(
                    "{name} ({mode}): exit {code}\n  stdout {stdout:?}\n  stderr {:?}\n want exit {}\n  stdout {:?}\n  stderr {:?}",
                    first_line(&stderr),
                    want["exit"],
                    want["stdout"],
                    first_line(want_stderr)
                ));
            }
        }
    }
    assert!(names.len() >= 20);
    assert_no_differences(&failures);
}

#[test]
fn human_lint_errors_show_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("graph.yaml");
    std::fs::write(
        &manifest,
        "api_version: bounded-loops.dev/graph/v1\ngraph_id: g\nversion: 1.0.0\nnodes:\n  - id: a\n    kind: research_claim\n    inputs: {}\n    outputs: {}\n    budget: {max_attempts: 0, max_wallclock_s: 5}\n    effects: []\n    isolation: workspace_only\nedges: []\nconnection_slots: []\npolicies: {data_class: internal, fail_mode: fail_closed}\n",
    )
    .unwrap();
    let (code, _, stderr) = run(&["graph", "lint", manifest.to_str().unwrap()], dir.path());
    assert_eq!(code, 2);
    let mut lines = stderr.lines();
    assert_eq!(
        lines.next(),
        Some(
            "error: graph lint: [range] /nodes/0/budget/max_attempts — must be an integer from 1 to 100"
        )
    );
    assert_eq!(
        lines.next(),
        Some(format!("  at {}:9:28", manifest.display()).as_str())
    );
}

/// A refusal whose message is bounded-loops' own says, on bl's lines
/// below it, what was found and what would do.
#[test]
fn a_bad_join_mode_and_an_unrouted_failure_policy_say_what_would_do() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("graph.yaml");
    let write = |join: &str, on_failure: &str| {
        std::fs::write(
            &manifest,
            format!("api_version: bounded-loops.dev/graph/v1\ngraph_id: j\nversion: 1.0.0\nconnection_slots: []\nnodes:\n- {{id: a, kind: research_claim, inputs: {{}}, outputs: {{out: text}}, effects: [], isolation: workspace_only, budget: {{max_attempts: 1, max_wallclock_s: 300}}{on_failure}}}\n- {{id: m, kind: join, mode: {join}, inputs: {{a: text}}, outputs: {{out: text}}, effects: [], isolation: workspace_only, budget: {{max_attempts: 1, max_wallclock_s: 300}}}}\nedges:\n- {{from_node: a, from_port: out, to_node: m, to_port: a}}\npolicies: {{data_class: internal, fail_mode: fail_closed}}\n"),
        )
        .unwrap();
        let (code, _, stderr) = run(&["graph", "lint", manifest.to_str().unwrap()], dir.path());
        assert_eq!(code, 2, "{stderr}");
        stderr
    };
    let said = write("all", "");
    assert!(
        said.contains("found \"all\"")
            && said.contains("allowed: all_selected, all_successful, any_successful"),
        "{said}"
    );
    let said = write("all_successful", ", on_failure: continue");
    assert!(
        said.contains("honoured: fail_graph (the default), or {mode: repair"),
        "{said}"
    );
}

#[test]
fn plan_out_writes_the_bytes_the_plan_id_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan.json");
    let manifest = corpus("cases").join("valid_repair.json");
    let (code, stdout, stderr) = run(
        &[
            "graph",
            "plan",
            manifest.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{stderr}");
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    use sha2::Digest;
    let id = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
    assert_eq!(printed["plan_id"], id.as_str());
    let plan: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(plan["api_version"], "bounded-loops.dev/plan/v1");
    assert_eq!(plan["source_graph_digest"], printed["source_graph_digest"]);
}

#[test]
fn schema_is_json_schema_and_digest_names_a_package() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, _) = run(&["graph", "schema"], dir.path());
    assert_eq!(code, 0);
    let schema: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(
        schema["properties"]["api_version"]["const"],
        "bounded-loops.dev/graph/v1"
    );

    let package = dir.path().join("my-loop");
    std::fs::create_dir_all(package.join("cassettes")).unwrap();
    std::fs::write(package.join("loop.yaml"), "name: my-loop\n").unwrap();
    std::fs::write(package.join("cassettes/default.json"), "{}").unwrap();
    let (code, stdout, _) = run(&["graph", "digest", "my-loop", "--json"], dir.path());
    assert_eq!(code, 0);
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(printed["package"], "my-loop");
    let digest = printed["loop_package"].as_str().unwrap().to_string();
    assert!(digest.starts_with("sha256:") && digest.len() == 71);
    // A loop node naming that digest plans when its root is given, and is
    // refused without it.
    let graph = serde_json::json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": "g", "version": "1.0.0",
        "nodes": [{"id": "l", "kind": "loop", "loop_package": digest, "inputs": {}, "outputs": {},
                   "budget": {"max_attempts": 1, "max_wallclock_s": 5}, "effects": [], "isolation": "workspace_only"}],
        "edges": [], "connection_slots": [], "policies": {"data_class": "internal", "fail_mode": "fail_closed"}});
    std::fs::write(dir.path().join("g.json"), graph.to_string()).unwrap();
    let (code, _, stderr) = run(&["graph", "plan", "g.json"], dir.path());
    assert_eq!(
        (code, first_line(&stderr)),
        (
            2,
            "error: graph plan: compile failed [package_unavailable] /nodes/l/loop_package — package digest is not admitted"
        )
    );
    let (code, stdout, stderr) = run(
        &["graph", "plan", "g.json", "--loop-roots", "."],
        dir.path(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("pkgroots: . (1 loop packages admitted)"),
        "{stdout}"
    );
    // Changing any file of the package changes its digest.
    std::fs::write(package.join("cassettes/default.json"), "{ }").unwrap();
    let (_, stdout, _) = run(&["graph", "digest", "my-loop"], dir.path());
    assert_ne!(stdout.trim(), digest);
}

/// `bl graph digest` prints what bounded-loops 0.7.6 prints for the same
/// package, in both forms, and refuses what it refuses with its words. (The
/// digest's rules are tested tree by tree in `host/packages/tests`.)
#[test]
fn the_package_digest_is_bounded_loops_digest() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("p1/inner")).unwrap();
    std::fs::write(root.join("p1/loop.yaml"), "x").unwrap();
    std::fs::write(root.join("p1/inner/loop.yaml"), "y").unwrap();
    for file in ["p1/loop.yaml", "p1/inner/loop.yaml"] {
        std::fs::set_permissions(root.join(file), PermissionsExt::from_mode(0o644)).unwrap();
    }
    const P1: &str = "sha256:13791bf7286d519802104fb153843557b6921c203f36ee39587c1b2884f42ebb";

    let (code, stdout, stderr) = run(&["graph", "digest", "root/p1"], dir.path());
    assert_eq!(
        (code, stdout.as_str()),
        (0, format!("{P1}\n").as_str()),
        "{stderr}"
    );
    let (code, stdout, _) = run(&["graph", "digest", "--json", "./root/p1/"], dir.path());
    assert_eq!(
        (code, stdout.trim()),
        (
            0,
            format!(r#"{{"loop_package": "{P1}", "package": "root/p1"}}"#).as_str()
        )
    );

    let (code, _, stderr) = run(&["graph", "digest", "root"], dir.path());
    assert_eq!(
        (code, stderr.trim()),
        (
            2,
            "error: graph digest: no loop.yaml in 'root' — a loop package is a directory containing loop.yaml. Point this at the package, not at its parent."
        )
    );
    let (code, _, stderr) = run(&["graph", "digest", "missing"], dir.path());
    assert_eq!(
        (code, stderr.trim()),
        (2, "error: graph digest: 'missing' is not a directory")
    );
    std::os::unix::fs::symlink("/nowhere", root.join("p1/inner/dangling")).unwrap();
    let (code, _, stderr) = run(&["graph", "digest", "root/p1"], dir.path());
    assert_eq!(
        (code, stderr.trim()),
        (
            2,
            "error: graph digest: loop package root/p1 contains a symlink (inner/dangling); a package must be self-contained to be content-addressed"
        )
    );
    // In a catalogue, such a package makes every plan refuse: a digest must
    // say which directory runs.
    let graph = serde_json::json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": "g", "version": "1.0.0",
        "nodes": [{"id": "l", "kind": "loop", "loop_package": P1, "inputs": {}, "outputs": {},
                   "budget": {"max_attempts": 1, "max_wallclock_s": 5}, "effects": [], "isolation": "workspace_only"}],
        "edges": [], "connection_slots": [], "policies": {"data_class": "internal", "fail_mode": "fail_closed"}});
    std::fs::write(dir.path().join("g.json"), graph.to_string()).unwrap();
    let resolved = root.canonicalize().unwrap();
    let (code, _, stderr) = run(
        &["graph", "plan", "g.json", "--loop-roots", "root"],
        dir.path(),
    );
    assert_eq!(
        (code, stderr.trim().to_string()),
        (
            2,
            format!(
                "error: graph plan: the loop-package catalogue on this host is unusable — loop package {} contains a symlink (inner/dangling); a package must be self-contained to be content-addressed",
                resolved.join("p1").display()
            )
        )
    );
    std::fs::remove_file(root.join("p1/inner/dangling")).unwrap();
    let copy = dir.path().join("copy");
    std::fs::create_dir_all(copy.join("same")).unwrap();
    std::fs::write(copy.join("same/loop.yaml"), "x").unwrap();
    std::fs::create_dir_all(copy.join("same/inner")).unwrap();
    std::fs::write(copy.join("same/inner/loop.yaml"), "y").unwrap();
    let (code, _, stderr) = run(
        &[
            "graph",
            "plan",
            "g.json",
            "--loop-roots",
            "copy",
            "--loop-roots",
            "root",
        ],
        dir.path(),
    );
    assert_eq!(
        (code, stderr.trim().to_string()),
        (
            2,
            format!(
                "error: graph plan: the loop-package catalogue on this host is unusable — two loop packages share digest {}: {} and {}",
                P1.trim_start_matches("sha256:"),
                copy.canonicalize().unwrap().join("same").display(),
                resolved.join("p1").display()
            )
        )
    );
    let (code, stdout, stderr) = run(
        &["graph", "plan", "g.json", "--loop-roots", "./root/"],
        dir.path(),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("pkgroots: root (1 loop packages admitted)"),
        "{stdout}"
    );
}

#[test]
fn unreadable_manifests_are_io_errors_as_upstream_words_them() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stdout, stderr) = run(&["graph", "lint", "missing.yaml", "--json"], dir.path());
    assert_eq!(code, 2);
    assert_eq!(
        stdout,
        "{\"code\": \"io_error\", \"message\": \"[Errno 2] No such file or directory: 'missing.yaml'\", \"pointer\": \"/\", \"valid\": false}\n"
    );
    assert_eq!(
        first_line(&stderr),
        "error: graph lint: cannot read 'missing.yaml' — [Errno 2] No such file or directory: 'missing.yaml'"
    );
    std::fs::create_dir(dir.path().join("dir.json")).unwrap();
    let (code, stdout, _) = run(&["graph", "lint", "dir.json", "--json"], dir.path());
    assert_eq!(code, 2);
    assert!(
        stdout.contains("[Errno 21] Is a directory: 'dir.json'"),
        "{stdout}"
    );
    // Text that is not UTF-8, in the words of Python's decoder (recorded
    // from bounded-loops 0.7.6).
    for (bytes, message) in [
        (
            &b"{\"a\": \"\xff\"}"[..],
            "'utf-8' codec can't decode byte 0xff in position 7: invalid start byte",
        ),
        (
            b"{\"a\": \"\xe2\x28\xa1\"}",
            "'utf-8' codec can't decode byte 0xe2 in position 7: invalid continuation byte",
        ),
        (
            b"{\"a\": \"\xf0\x9f\x98\x28\"}",
            "'utf-8' codec can't decode bytes in position 7-9: invalid continuation byte",
        ),
        (
            b"\xf0\x9f",
            "'utf-8' codec can't decode bytes in position 0-1: unexpected end of data",
        ),
    ] {
        std::fs::write(dir.path().join("bytes.json"), bytes).unwrap();
        let (code, stdout, _) = run(&["graph", "lint", "bytes.json", "--json"], dir.path());
        assert_eq!(code, 2);
        assert_eq!(
            stdout,
            format!(
                "{{\"code\": \"io_error\", \"message\": \"{message}\", \"pointer\": \"/\", \"valid\": false}}\n"
            )
        );
    }
    // Nesting deeper than any manifest needs is refused, not a crash.
    std::fs::write(
        dir.path().join("deep.json"),
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    let (code, _, stderr) = run(&["graph", "lint", "deep.json"], dir.path());
    assert_eq!(
        (code, first_line(&stderr)),
        (
            2,
            "error: graph lint: [invalid_json] / — nesting is deeper than 1000 levels"
        )
    );
}

#[test]
fn a_reference_run_directory_plans_to_the_same_plan_json() {
    let run_dir = repo_root().join("tests/corpus/runs/upstream-demo");
    let out = tempfile::tempdir().unwrap();
    let plan = out.path().join("plan.json");
    let args = [
        "graph",
        "plan",
        "manifest.yaml",
        "--connections",
        "connections.json",
        "--out",
        plan.to_str().unwrap(),
    ];
    let (code, stdout, stderr) = run(&args, &run_dir);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        std::fs::read(&plan).unwrap(),
        std::fs::read(run_dir.join(RunDir::PLAN)).unwrap()
    );
    let meta: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join(RunDir::META)).unwrap()).unwrap();
    assert!(
        stdout.starts_with(&format!(
            "plan_id : {}\n",
            meta["plan_id"].as_str().unwrap()
        )),
        "{stdout}"
    );
}
