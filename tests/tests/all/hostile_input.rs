//! Careless and hostile input, through the real `bl` binary: every answer
//! is bounded in time and memory, and tells the truth about what went
//! wrong.

use bl_store::RunDir;
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
    let big = format!("# {}\n", "x".repeat(17 << 20));
    std::fs::write(dir.path().join("big.yaml"), &big).unwrap();
    let out = bl_in(dir.path(), &["graph", "lint", "big.yaml"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("[invalid_yaml]") && stderr.contains("16777216 bytes"),
        "{stderr}"
    );

    std::fs::write(
        dir.path().join("big.json"),
        format!("[{}]", " ".repeat(17 << 20)),
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
        stderr.contains("[invalid_json]") && stderr.contains("16777216 bytes"),
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

/// A command that starts a grandchild sleeping for a number of seconds no
/// other test uses, so the test can look for exactly that process.
fn sleeper() -> (String, String) {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seconds = 7000 + NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    (
        format!("sleep {seconds} & echo started > started; wait"),
        format!("sleep\0{seconds}\0"),
    )
}

/// Starts bl with `args` (after which come the workspace and the command),
/// running a command that starts a grandchild and sleeps; sends `signal`
/// once the grandchild runs, and checks that bl exits with 128 + signal
/// having killed the group and removed its temporary directories (bl's
/// TMPDIR is private to the test).
fn signal_ends_everything(
    isolation: &str,
    signal: nix::sys::signal::Signal,
    with_workspace: impl Fn(&Path, &str) -> Vec<String>,
) {
    let (command, cmdline) = sleeper();
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    // The caged user must pass through it to reach its staging directory.
    for d in [dir.path(), &ws, &tmp] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let child = Command::new(bl_binary())
        .args(with_workspace(&ws, &command))
        .env("TMPDIR", &tmp)
        .env("BL_PLUGIN_PATH", bl_e2e::plugin_dir())
        .env("BL_CACHE_DIR", dir.path().join("cache"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !ws.join("started").exists() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "{isolation}: the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, signal).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + signal as i32),
        "{isolation}: {}",
        text(&out.stderr)
    );
    let sleepers = bl_e2e::live_command_lines()
        .into_iter()
        .filter(|c| *c == cmdline)
        .count();
    assert_eq!(sleepers, 0, "{isolation}: the command's group still runs");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{isolation}: left behind {left:?}");
}

#[test]
fn sigint_and_sigterm_end_the_command_and_its_temp_dirs_in_every_tier() {
    use nix::sys::signal::Signal::{SIGINT, SIGTERM};
    let sandbox_run = |tier: &'static str| {
        move |ws: &Path, command: &str| -> Vec<String> {
            let mut args: Vec<String> = ["sandbox", "run", "--isolation", tier, "--workspace"]
                .map(String::from)
                .to_vec();
            args.push(ws.display().to_string());
            args.extend(["--", "sh", "-c", command].map(String::from));
            args
        }
    };
    let mut tiers = vec!["workspace_only"];
    if bl_e2e::cage_works() {
        tiers.extend(["process_restricted", "container_restricted"]);
    }
    for tier in tiers {
        signal_ends_everything(tier, SIGINT, sandbox_run(tier));
        signal_ends_everything(tier, SIGTERM, sandbox_run(tier));
    }
}

/// The same through a plugin's granted command: the gate's command is
/// killed with its group, and bl exits by the signal, not with a verdict.
#[test]
fn a_signal_during_a_plugins_granted_command_ends_it() {
    use nix::sys::signal::Signal::{SIGINT, SIGTERM};
    for (tier, signal) in [("workspace_only", SIGTERM), ("workspace_only", SIGINT)] {
        signal_ends_everything(tier, signal, |ws: &Path, command: &str| {
            let config = serde_json::json!({"argv": ["sh", "-c", command]}).to_string();
            [
                "plugin",
                "run",
                "command",
                "--grant",
                "command",
                "--isolation",
                tier,
                "--config",
                &config,
                "--workspace",
                &ws.display().to_string(),
            ]
            .map(String::from)
            .to_vec()
        });
    }
}

/// Runs bl with stdout (or stderr) a pipe nobody reads: its read end is
/// closed before bl starts, so every write fails with EPIPE.
fn with_closed(stream: &str, args: &[&str]) -> Output {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let mut command = Command::new(bl_binary());
    command
        .args(args)
        .current_dir(bl_e2e::repo_root())
        .env("BL_PLUGIN_PATH", bl_e2e::plugin_dir());
    match stream {
        "stdout" => command.stdout(std::process::Stdio::from(write)),
        _ => command.stderr(std::process::Stdio::from(write)),
    };
    command.output().unwrap()
}

#[test]
fn a_closed_stdout_or_stderr_never_panics() {
    for args in [
        &["graph", "schema"][..],
        &[
            "graph",
            "lint",
            "tests/corpus/graph/plans/plan_all_kinds.json",
        ],
        &["plugin", "inspect", "files"],
        &["verify", "tests/corpus/runs/upstream-demo"],
    ] {
        let out = with_closed("stdout", args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // A refusal said to a closed stderr still exits with its own code.
    let out = with_closed("stderr", &["graph", "lint", "no-such-manifest.yaml"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `bl verify` of a path holding nothing to verify says so with exit 2:
/// a typo is never reported as tampering.
#[test]
fn verify_of_a_path_with_nothing_to_verify_is_exit_2_not_a_tampering_verdict() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
    std::fs::create_dir(dir.path().join("empty")).unwrap();
    for (target, expected) in [
        ("no-such-run", "does not exist: nothing to verify"),
        ("empty", "holds no run to verify"),
    ] {
        let out = bl_in(dir.path(), &["verify", target]);
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "{target}: {all}");
        assert!(all.contains(expected), "{target}: {all}");
        assert!(!all.contains("edited"), "{target}: {all}");
    }
    // A verifier key that is a mistyped path is a missing file.
    let out = bl_in(dir.path(), &["verify", "empty", "--pubkey", "ops.pub"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ops.pub: no such file"), "{stderr}");
}

/// Only a run's record files make a directory a run directory: a project
/// that happens to hold a `plan.json` may hold keys beneath it.
#[test]
fn keys_generate_recognises_run_directories_by_their_records_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(RunDir::PLAN), "{}").unwrap();
    let out = bl_in(
        dir.path(),
        &["keys", "generate", "--name", "ops", "--out", "keys/ops.key"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::fs::write(dir.path().join(RunDir::META), "{}").unwrap();
    let out = bl_in(
        dir.path(),
        &[
            "keys",
            "generate",
            "--name",
            "ops2",
            "--out",
            "keys/ops2.key",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("inside the run directory"), "{stderr}");
}

/// `bl graph init` judges every allowlist entry as the egress broker
/// judges a destination, refuses a missing folder unless asked to make it,
/// and `bl doctor` fails on a broken config, naming the file and the fix.
#[test]
fn egress_config_is_validated_where_it_is_written_and_where_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("egress.json");
    let config_arg = config.to_str().unwrap();
    for (entry, reason) in [
        ("localhost", "names this machine or an internal network"),
        ("10.1.2.3", "is private"),
        ("127.0.0.1:8080", "loopback"),
        ("exa mple.com", "is not a host name"),
    ] {
        let out = bl_in(
            dir.path(),
            &[
                "graph",
                "init",
                "--posture",
                "allowlist",
                "--allowlist",
                entry,
                "--config",
                config_arg,
            ],
        );
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{entry}: {stderr}");
        assert!(stderr.contains(reason), "{entry}: {stderr}");
        assert!(!config.exists(), "{entry}: nothing is written");
    }

    let nested = dir.path().join("missing/egress.json");
    let nested_arg = nested.to_str().unwrap();
    let out = bl_in(dir.path(), &["graph", "init", "--config", nested_arg]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--parents"),
        "{}",
        text(&out.stderr)
    );
    assert!(!nested.parent().unwrap().exists());
    let out = bl_in(
        dir.path(),
        &["graph", "init", "--config", nested_arg, "--parents"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    std::fs::write(
        &config,
        r#"{"posture": "allowlist", "allowlist": ["localhost"]}"#,
    )
    .unwrap();
    let out = Command::new(bl_binary())
        .args(["doctor", "--json"])
        .env("BOUNDED_LOOPS_EGRESS_CONFIG", &config)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "egress config")
        .expect("doctor checks the egress config")
        .clone();
    assert_eq!(check["status"], "fail", "{check}");
    let detail = check.to_string();
    assert!(
        detail.contains(config_arg) && detail.contains("bl graph init"),
        "{detail}"
    );
    assert_ne!(out.status.code(), Some(0));
}

/// A small manifest the lint tests break in one place at a time.
fn cycle_manifest() -> String {
    std::fs::read_to_string(bl_e2e::repo_root().join("tests/corpus/graph/cases/cycle_yaml.yaml"))
        .unwrap()
}

/// Writes `manifest` as `name` in `dir` and lints it: refused (exit 2),
/// with this stderr.
fn refused_lint(dir: &Path, name: &str, manifest: &str) -> String {
    std::fs::write(dir.join(name), manifest).unwrap();
    let out = bl_in(dir, &["graph", "lint", name]);
    assert_eq!(out.status.code(), Some(2));
    text(&out.stderr)
}

/// Lint keeps bounded-loops' first line and adds bl's own beneath it: the
/// exact place, the bad value, "did you mean", the cycle's members.
#[test]
fn lint_points_at_the_mistake_and_says_what_was_meant() {
    let base = cycle_manifest();
    let dir = tempfile::tempdir().unwrap();
    let lint = |name: &str, manifest: &str| refused_lint(dir.path(), name, manifest);
    let line_of =
        |body: &str, needle: &str| body.lines().position(|l| l.contains(needle)).unwrap() + 1;

    let stderr = lint("cycle.yaml", &base);
    assert!(stderr.contains("the cycle: a → b → a"), "{stderr}");

    let typo = base.replace("connection_slots: []", "connection_slots: []\nedgez: 1");
    let stderr = lint("top.yaml", &typo);
    let first = stderr.lines().next().unwrap();
    assert_eq!(
        first,
        "error: graph lint: [unknown_field] / — unknown field(s): edgez"
    );
    let at = format!("at top.yaml:{}:", line_of(&typo, "edgez"));
    assert!(stderr.contains(&at), "points at the key: {stderr}");
    assert!(stderr.contains("did you mean `edges`"), "{stderr}");

    let kind = base.replacen("kind: research_claim", "kind: researh_claim", 1);
    let stderr = lint("kind.yaml", &kind);
    assert!(stderr.contains("did you mean `research_claim`"), "{stderr}");

    let value = base.replacen("max_attempts: 1", "max_attempts: \"x\"", 1);
    let stderr = lint("value.yaml", &value);
    assert!(stderr.contains(r#"found "x" (a string)"#), "{stderr}");

    let id = base.replacen("to_node: b", "to_node: bb", 1);
    let stderr = lint("id.yaml", &id);
    assert!(stderr.contains("did you mean `b`"), "{stderr}");

    // --json: bounded-loops' keys plus line and column; `-` reads stdin.
    let mut child = Command::new(bl_binary())
        .args(["graph", "lint", "-", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(typo.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["code"], "unknown_field");
    assert_eq!(json["line"], line_of(&typo, "edgez") as u64, "{json}");
    assert!(json["column"].as_u64().is_some(), "{json}");
    assert!(text(&out.stderr).contains("at <stdin>:"));
}

/// Plan names what is missing: a loop package's --loop-roots, and the
/// fields a connection snapshot lacks.
#[test]
fn plan_names_the_loop_roots_and_the_missing_connection_field() {
    let plans = bl_e2e::repo_root().join("tests/corpus/graph/plans");
    let out = bl_in(
        &plans,
        &["graph", "plan", "plan_loop_package_no_roots.json"],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--loop-roots"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let mut snapshot: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(plans.join("plan_bad_shape.connections.json")).unwrap(),
    )
    .unwrap();
    let first = snapshot[0].as_object_mut().unwrap();
    first.remove("extra");
    first.remove("region");
    std::fs::write(dir.path().join("c.json"), snapshot.to_string()).unwrap();
    let out = bl_in(
        dir.path(),
        &[
            "graph",
            "plan",
            plans.join("plan_bad_shape.json").to_str().unwrap(),
            "--connections",
            "c.json",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("connection 0 lacks field(s): region"),
        "{stderr}"
    );
}

/// Every command of bl's own answers `--json` with one JSON object on
/// stdout, and a failure with `{"error": {"code", "message", …}}`.
#[test]
fn every_bl_command_answers_json_with_one_object_and_fails_with_an_error_object() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p).display().to_string();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let one_object = |args: &[&str]| {
        let out = bl_in(dir.path(), args);
        let stdout = text(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{args:?}: {stdout}");
        let value: serde_json::Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"));
        assert!(value.is_object(), "{args:?}: {stdout}");
        (out.status.code(), value)
    };
    let key = d("keys/ops.key");
    for args in [
        vec!["--json", "keys", "generate", "--name", "ops", "--out", &key],
        vec!["keys", "public", &key, "--json"],
        vec!["graph", "init", "--config", &d("egress.json"), "--json"],
        vec![
            "plugin",
            "new",
            "json-gate",
            "--kind",
            "gate",
            "--dir",
            &d("json-gate"),
            "--json",
        ],
        vec![
            "sandbox",
            "run",
            "--isolation",
            "workspace_only",
            "--workspace",
            &d("ws"),
            "--json",
            "--",
            "echo",
            "hi",
        ],
        vec!["doctor", "--json"],
    ] {
        let (code, value) = one_object(&args);
        assert_eq!(code, Some(0), "{args:?}: {value}");
        assert!(value.get("error").is_none(), "{args:?}: {value}");
    }
    let (_, value) = one_object(&[
        "sandbox",
        "run",
        "--isolation",
        "workspace_only",
        "--workspace",
        &d("ws"),
        "--json",
        "--",
        "echo",
        "hi",
    ]);
    assert_eq!(value["stdout"], "hi\n");

    for (args, code) in [
        (vec!["verify", "nowhere", "--json"], "nothing_to_verify"),
        (vec!["keys", "public", "missing.key", "--json"], "refused"),
        (vec!["plugin", "new", "x", "--json"], "usage"),
        (
            vec![
                "graph",
                "init",
                "--config",
                &d("no/such/egress.json"),
                "--json",
            ],
            "refused",
        ),
    ] {
        let (exit, value) = one_object(&args);
        assert_eq!(exit, Some(2), "{args:?}: {value}");
        assert_eq!(value["error"]["code"], code, "{args:?}: {value}");
        assert!(
            value["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let (_, value) = one_object(&["verify", "nowhere", "--json"]);
    assert_eq!(value["error"]["path"], "nowhere");
}

/// `--version` names the commit; completions and man pages come from
/// clap's own generators, for every subcommand.
#[test]
fn version_names_the_commit_and_completions_and_man_pages_are_generated() {
    let dir = tempfile::tempdir().unwrap();
    let out = bl_in(dir.path(), &["--version"]);
    let version = text(&out.stdout);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(bl_e2e::repo_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| text(&o.stdout).trim().to_string());
    match head {
        Some(head) => assert!(version.contains(&format!("(commit {head})")), "{version}"),
        None => assert!(version.contains("(commit "), "{version}"),
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = bl_in(dir.path(), &["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        let script = text(&out.stdout);
        assert!(
            script.contains("graph") && script.contains("sandbox"),
            "{shell}"
        );
    }
    let man = dir.path().join("man");
    let out = bl_in(dir.path(), &["man", man.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(man.join("bl-graph-lint.1")).unwrap();
    assert!(page.starts_with(".ie") || page.contains(".TH"), "{page}");
    assert!(man.join("bl-sandbox-run.1").is_file());
}

/// bl links its unwinder statically (host/cli/build.rs): the shared
/// libgcc_s runs a CPU-model constructor at every start, which costs a
/// virtual machine that traps CPUID about 0.13 ms of each bl and each
/// watchdog start. The binary names no libgcc_s to load, and still starts.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn bl_loads_no_shared_unwinder() {
    let binary = std::fs::read(bl_e2e::bl_binary()).unwrap();
    let needed = b"libgcc_s.so.1";
    assert!(
        !binary.windows(needed.len()).any(|w| w == needed),
        "bl names libgcc_s.so.1: the static unwinder was not linked"
    );
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(bl_in(dir.path(), &["--version"]).status.code(), Some(0));
}

/// A `bl` copied elsewhere still finds the plugins its checkout built, and
/// a plugin it cannot find is reported with every place it looked.
#[test]
fn a_copied_bl_finds_its_plugins_or_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("bin/bl");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(bl_binary(), &copy).unwrap();
    let run = |args: &[&str]| {
        let mut command = Command::new(&copy);
        command
            .args(args)
            .current_dir(dir.path())
            .env_remove("BL_PLUGIN_PATH");
        // Another test thread that forks while the copy's write handle is
        // open keeps it open until its child execs; exec then fails with
        // "text file busy" for a moment. Wait that moment out.
        let mut tries = 0;
        loop {
            match command.output() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other.unwrap(),
            }
        }
    };
    let out = run(&["plugin", "inspect", "files"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = run(&["plugin", "inspect", "no-such-plugin"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let beside = dir.path().join("bin/plugins");
    assert!(stderr.contains(&beside.display().to_string()), "{stderr}");
    assert!(stderr.contains("BL_PLUGIN_PATH"), "{stderr}");

    // What ships with bl is what is beside it: the checkout's plugins are
    // not this copy's, and a directory others may write to is no one's.
    let runs_of = |dir_of: &std::path::Path| -> String {
        let out = run(&["plugin", "list", "--json"]);
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let dir_of = dir_of.canonicalize().unwrap();
        list["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| {
                p["name"] == "files"
                    && std::path::Path::new(p["path"].as_str().unwrap()).parent()
                        == Some(dir_of.as_path())
            })
            .unwrap_or_else(|| panic!("files in {}: {list}", dir_of.display()))["runs"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_ne!(runs_of(&bl_e2e::plugin_dir()), "ships with bl");
    std::fs::create_dir_all(&beside).unwrap();
    for file in ["files.wasm", "files.plugin.json"] {
        std::fs::copy(bl_e2e::plugin_dir().join(file), beside.join(file)).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(runs_of(&beside), "ships with bl");
    std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o775)).unwrap();
    assert_ne!(runs_of(&beside), "ships with bl");
}

/// `bl sandbox run` is connected to the terminal: stdin goes in, output
/// comes out as it is written (not when the command ends), and a timeout
/// is said.
#[test]
fn sandbox_run_streams_output_passes_stdin_and_says_it_timed_out() {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_str().unwrap();
    let mut child = Command::new(bl_binary())
        .args([
            "sandbox",
            "run",
            "--isolation",
            "workspace_only",
            "--workspace",
            ws,
        ])
        .args([
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\"; while [ ! -f go ]; do sleep 0.05; done; echo second",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let _ = lines.send(line.unwrap());
        }
    });
    let first = received
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the first line arrives while the command still runs");
    assert_eq!(first, "got hello");
    std::fs::write(dir.path().join("go"), "").unwrap();
    let second = received
        .recv_timeout(std::time::Duration::from_secs(30))
        .unwrap();
    assert_eq!(second, "second");
    assert_eq!(child.wait().unwrap().code(), Some(0));

    let out = bl_in(
        dir.path(),
        &[
            "sandbox",
            "run",
            "--isolation",
            "workspace_only",
            "--workspace",
            ws,
            "--timeout-s",
            "1",
            "--",
            "sleep",
            "30",
        ],
    );
    assert_eq!(out.status.code(), Some(124));
    assert!(
        text(&out.stderr).contains("timed out after 1 s"),
        "{}",
        text(&out.stderr)
    );
}

/// A file that is no record at all (a README, a FIFO) is nothing to
/// verify, not a ledger "edited after it was written".
#[test]
fn verify_of_a_file_that_is_no_record_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("README.md"), "# notes\n").unwrap();
    nix::unistd::mkfifo(&dir.path().join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    for target in ["README.md", "pipe"] {
        let out = bl_within(
            dir.path(),
            &["verify", target],
            std::time::Duration::from_secs(30),
        );
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "{target}: {all}");
        assert!(
            all.contains("is not a run directory, an event log or a ledger"),
            "{all}"
        );
        assert!(!all.contains("edited"), "{all}");
    }
}

/// Paths named on the command line that are FIFOs are refused, never
/// read: nothing blocks.
#[test]
fn a_fifo_named_on_the_command_line_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    nix::unistd::mkfifo(&dir.path().join("m.yaml"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let out = bl_within(
        dir.path(),
        &["graph", "lint", "m.yaml"],
        std::time::Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not a regular file"),
        "{}",
        text(&out.stderr)
    );
    let out = bl_within(
        dir.path(),
        &[
            "plugin",
            "run",
            "deny-all",
            "--effect-key",
            "k",
            "--effect-kind",
            "outbox",
            "--target",
            "t",
            "--payload",
            "m.yaml",
        ],
        std::time::Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// A command that leaves its process group (setsid) and keeps the output
/// pipes open cannot hold bl past the timeout.
#[test]
fn a_process_that_leaves_the_group_cannot_outlast_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("{}", 9000 + std::process::id() % 1000);
    let started = std::time::Instant::now();
    let out = bl_within(
        dir.path(),
        &[
            "sandbox",
            "run",
            "--isolation",
            "workspace_only",
            "--workspace",
            dir.path().to_str().unwrap(),
            "--timeout-s",
            "1",
            "--",
            "sh",
            "-c",
            &format!("setsid sleep {marker} & sleep 30"),
        ],
        std::time::Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // workspace_only is no cage: the escaped process is the test's to end.
    let _ = Command::new("pkill")
        .args(["-f", &format!("sleep {marker}")])
        .status();
}

/// An egress config named on purpose but missing is an error wherever it
/// is read, never a silent open posture.
#[test]
fn a_named_egress_config_that_is_missing_is_an_error_not_open() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere/egress.json");
    let out = Command::new(bl_binary())
        .args(["doctor", "--json"])
        .env("BOUNDED_LOOPS_EGRESS_CONFIG", &missing)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "egress config")
        .unwrap()
        .clone();
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"].as_str().unwrap().contains("does not exist"),
        "{check}"
    );
}

/// Enum mistakes name the value and what is allowed; a duplicate id points
/// at the duplicate.
#[test]
fn enum_mistakes_and_duplicate_ids_are_explained() {
    let base = cycle_manifest();
    let dir = tempfile::tempdir().unwrap();
    let lint = |name: &str, manifest: &str| refused_lint(dir.path(), name, manifest);
    let stderr = lint(
        "iso.yaml",
        &base.replacen("isolation: workspace_only", "isolation: workspace-only", 1),
    );
    assert!(
        stderr.contains(r#"found "workspace-only" (a string)"#),
        "{stderr}"
    );
    assert!(stderr.contains("did you mean `workspace_only`"), "{stderr}");
    assert!(
        stderr.contains("allowed: workspace_only, process_restricted"),
        "{stderr}"
    );

    let dup = base.replacen("- id: b", "- id: a", 1);
    let second = dup.lines().position(|l| l.trim() == "- id: a").unwrap();
    let second = second
        + 1
        + dup
            .lines()
            .skip(second + 1)
            .position(|l| l.trim() == "- id: a")
            .unwrap()
        + 1;
    let stderr = lint("dup.yaml", &dup);
    assert!(
        stderr.contains(&format!("at dup.yaml:{second}:")),
        "{stderr}"
    );
    assert!(
        stderr.contains("is the id of /nodes/0 and of /nodes/1"),
        "{stderr}"
    );
}

/// Under --json, a run stopped by a signal answers with the error object.
#[test]
fn a_signal_under_json_answers_with_an_error_object() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bl_binary())
        .args([
            "--json",
            "sandbox",
            "run",
            "--isolation",
            "workspace_only",
            "--workspace",
        ])
        .arg(dir.path())
        .args(["--", "sh", "-c", "echo started > started; sleep 30"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !dir.path().join("started").exists() {
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143));
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["error"]["code"], "interrupted", "{value}");
}

/// Careless arguments get the truth: a public key where the private one
/// belongs, a workspace that does not exist.
#[test]
fn careless_arguments_are_named_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("ops.key");
    let out = bl_in(
        dir.path(),
        &[
            "keys",
            "generate",
            "--name",
            "ops",
            "--out",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = bl_in(dir.path(), &["keys", "public", "ops.pub"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds a verifier (public) key"), "{stderr}");
    assert!(!stderr.contains("chmod"), "{stderr}");

    let out = bl_in(
        dir.path(),
        &[
            "sandbox",
            "run",
            "--isolation",
            "workspace_only",
            "--workspace",
            "nope",
            "--",
            "true",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("workspace nope is not a directory"),
        "{stderr}"
    );
}
