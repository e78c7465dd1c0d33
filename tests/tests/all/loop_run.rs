//! `bl run` end to end: the real binary, real wasm gates, real bubblewrap,
//! real processes, on loop packages written here or taken from bl's own
//! catalog (`examples/loops`). Each test checks one bound or record the
//! way a user would see it: the exit code, the outcome, `BL_EVENT`, the
//! ledger (which `bl verify` must accept) and the files left behind.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bl_e2e::{bl_binary, cage_works, plugin_dir, repo_root};
use serde_json::{Value, json};

struct Loop {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
    cache: PathBuf,
}

fn cache() -> PathBuf {
    // One compiled-component cache for the whole module.
    let dir = std::env::temp_dir().join("bl-e2e-loop-cache");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Loop {
    /// A copy of a catalog loop.
    fn catalog(name: &str) -> Loop {
        let l = Loop::empty();
        bl_e2e::copy_tree(&repo_root().join("examples/loops").join(name), &l.pkg());
        l
    }

    fn empty() -> Loop {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("pkg")).unwrap();
        Loop {
            dir,
            home: tempfile::tempdir().unwrap(),
            cache: cache(),
        }
    }

    /// A package with a stub runner, a command gate and these bounds.
    fn stub(gate: &str, bounds: &str, interactions: Value) -> Loop {
        let l = Loop::empty();
        l.write("loop.yaml", &format!(
            "name: probe\ndescription: a probe loop\npattern: evaluator-optimizer\nrole: [test]\nrung: L1\nspec: PROMPT.md\nforbid: [seed/check.py]\nrunner:\n  default: stub\ngate:\n  kind: command\n  run: {gate}\nbounds: bounds.yaml\n"
        ));
        l.write("bounds.yaml", bounds);
        l.write("PROMPT.md", "Make seed/doc.txt say done.\n");
        l.write("seed/doc.txt", "draft\n");
        l.write(
            "seed/check.py",
            "import sys\nsys.exit(0 if open('seed/doc.txt').read().strip() == 'done' else 1)\n",
        );
        l.write(
            "cassettes/default.json",
            &json!({"interactions": interactions}).to_string(),
        );
        l
    }

    /// A package whose worker is `python3 worker` (a shell runner) and whose
    /// gate runs `gate`, without a cage or a trace: for stopping a run.
    fn shell(worker: &Path, gate: &str) -> Loop {
        let l = Loop::empty();
        l.write(
            "loop.yaml",
            &format!(
                "name: stopped\ndescription: a loop stopped by a signal\npattern: evaluator-optimizer\nrole: [test]\nrung: L1\nspec: PROMPT.md\nrunner:\n  default: shell\n  agent_cmd: python3 {}\ngate:\n  kind: command\n  run: {gate}\nbounds: bounds.yaml\n",
                worker.display()
            ),
        );
        l.write(
            "bounds.yaml",
            &BOUNDS
                .replace("sandbox: true", "sandbox: false")
                .replace("trace: true", "trace: false"),
        );
        l.write("PROMPT.md", "Make seed/doc.txt say done.\n");
        l.write("seed/doc.txt", "draft\n");
        l
    }

    fn pkg(&self) -> PathBuf {
        self.dir.path().join("pkg")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.pkg().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(bl_binary());
        c.args(args)
            .current_dir(self.dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", self.home.path())
            .env("BL_PLUGIN_PATH", plugin_dir())
            .env("BL_CACHE_DIR", &self.cache)
            .stdin(Stdio::null());
        c
    }

    fn bl(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().unwrap())
    }

    fn run(&self, extra: &[&str]) -> Run {
        Run::from(self.run_command(extra).output().unwrap())
    }

    /// `bl run pkg --yes --json` and `extra`, for a test to add to.
    fn run_command(&self, extra: &[&str]) -> Command {
        let mut args = vec!["run", "pkg", "--yes", "--json"];
        args.extend_from_slice(extra);
        self.command(&args)
    }

    fn ledger(&self, path: &str) -> Vec<Value> {
        std::fs::read_to_string(self.pkg().join(path))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Run {
    /// The `--json` outcome: the last stdout line (after an approval
    /// prompt, on the prompt's line).
    fn outcome(&self) -> Value {
        let last = self.stdout.lines().last().unwrap_or("null");
        let json = last.find("{\"subcommand\"").map_or(last, |at| &last[at..]);
        serde_json::from_str(json)
            .unwrap_or_else(|_| panic!("no JSON outcome:\n{}\n{}", self.stdout, self.stderr))
    }

    fn event(&self) -> Value {
        let line = self
            .stderr
            .lines()
            .find_map(|l| l.strip_prefix("BL_EVENT "))
            .unwrap_or_else(|| panic!("no BL_EVENT:\n{}", self.stderr));
        serde_json::from_str(line).unwrap()
    }

    /// The outcome's reason.
    fn reason(&self) -> String {
        self.outcome()["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    fn status(&self) -> (i32, String, String, u64) {
        let o = self.outcome();
        (
            self.code,
            o["status"].as_str().unwrap().into(),
            o["reason"].as_str().unwrap().into(),
            o["laps"].as_u64().unwrap(),
        )
    }
}

const BOUNDS: &str = "max_iterations: 5\nno_progress_window: 3\nmax_tokens: null\nmax_wallclock_s: 300\nsandbox: true\nquarantine_inputs: true\nschema: null\ntrace: true\nrequire_approval: false\n";

fn write_doc(lap: Value, text: &str, tokens: u64) -> Value {
    json!({"lap": lap, "agent_output": format!("wrote {text}"), "tokens": tokens,
           "actions": [{"type": "write_file", "path": "seed/doc.txt", "content": format!("{text}\n")}]})
}

/// `bl verify` accepts the chain and the head. A package's own ledger
/// has no run metadata, so its completeness is not checkable (as
/// bounded-loops says too); a run directory's must verify outright.
fn verify(l: &Loop, target: &Path, head: &str) {
    let v = l.bl(&[
        "verify",
        &target.display().to_string(),
        "--expect-head",
        head,
        "--json",
    ]);
    let report: Value =
        serde_json::from_str(&v.stdout).unwrap_or_else(|_| panic!("{}\n{}", v.stdout, v.stderr));
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .unwrap()["passed"]
            .clone()
    };
    assert_eq!(
        (check("chain"), check("anchor")),
        (json!(true), json!(true)),
        "bl verify refused the ledger: {report}"
    );
    if target.join("metadata.json").exists() {
        assert_eq!(
            (v.code, report["verified"].clone()),
            (0, json!(true)),
            "{report}"
        );
    }
}

#[test]
fn a_catalog_loop_runs_done_and_its_ledger_verifies() {
    if !cage_works() {
        return;
    }
    let l = Loop::catalog("readme-sections");
    let r = l.run(&[]);
    assert_eq!(
        r.status(),
        (0, "DONE".into(), "gate-passed".into(), 2),
        "{}",
        r.stderr
    );
    let o = r.outcome();
    let event = r.event();
    assert_eq!(
        (
            event["status"].as_str(),
            event["alert"].as_bool(),
            event["subject"].as_str()
        ),
        (Some("DONE"), Some(false), Some("pkg"))
    );
    assert_eq!(event["ledger_head"], o["ledger_head"]);
    let rows = l.ledger(".ledger.jsonl");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0]["decision"].as_str(), rows[1]["decision"].as_str()),
        (Some("continue"), Some("done"))
    );
    assert_eq!(
        rows[1]["verdict"]["evidence"]["cmd"],
        "python3 seed/check_readme.py seed/README.md"
    );
    assert!(
        rows[1]["gate"]["component"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "the ledger names the gate's component"
    );
    verify(&l, &l.pkg(), o["ledger_head"].as_str().unwrap());
    // Under --json stdout is the outcome alone, one JSON object; the
    // preview is on stderr.
    assert_eq!(r.stdout.lines().count(), 1, "{}", r.stdout);
    assert!(
        serde_json::from_str::<Value>(&r.stdout).is_ok(),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr
            .starts_with("[bounded-loops] About to run loop 'readme-sections':\n  runner : stub\n"),
        "{}",
        r.stderr
    );
    // A rejected lap left a memory note in the package; STATE.md is untouched.
    let memory = std::fs::read_to_string(l.pkg().join(".STATE.md.runtime")).unwrap();
    assert!(
        memory.contains("<!-- bl:lap:1 ") && memory.contains("verdict:FAIL decision:continue"),
        "{memory}"
    );
    // A second run appends to the same chain.
    let again = l.run(&[]);
    assert_eq!(again.code, 0);
    let rows = l.ledger(".ledger.jsonl");
    assert_eq!((rows.len(), rows[2]["lap"].as_u64()), (4, Some(1)));
    verify(
        &l,
        &l.pkg(),
        again.outcome()["ledger_head"].as_str().unwrap(),
    );
}

#[test]
fn every_catalog_loop_is_done_under_bl_and_lints() {
    if !cage_works() {
        return;
    }
    for (name, laps) in [
        ("readme-sections", 2),
        ("order-schema", 2),
        ("tests-green", 1),
        ("config-contract", 2),
        ("records-shell", 3),
    ] {
        let l = Loop::catalog(name);
        assert_eq!(l.bl(&["lint", "pkg"]).code, 0, "{name} lints");
        let r = l.run(&[]);
        assert_eq!(
            (r.code, r.outcome()["laps"].as_u64()),
            (0, Some(laps)),
            "{name}: {}\n{}",
            r.stdout,
            r.stderr
        );
    }
}

#[test]
fn max_iterations_halts_with_a_wind_down_turn_and_a_handoff() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "python3 seed/check.py",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: 2"),
        json!([
            write_doc(json!(1), "one", 10),
            write_doc(json!("*"), "still drafting", 5)
        ]),
    );
    // A checker that says what is wrong.
    l.write(
        "seed/check.py",
        "import sys\ntext = open('seed/doc.txt').read().strip()\nif text != 'done':\n    print('doc.txt is not done yet')\n    sys.exit(1)\n",
    );
    let r = l.run(&[]);
    assert_eq!(
        r.status(),
        (
            1,
            "HALT".into(),
            "max_iterations 2 reached at lap 3".into(),
            3
        )
    );
    let rows = l.ledger(".ledger.jsonl");
    let halt = &rows[2];
    assert_eq!(
        (
            halt["decision"].as_str(),
            halt["attempted"].as_bool(),
            halt["handoff"].as_str()
        ),
        (Some("halt"), Some(false), Some("HANDOFF.md"))
    );
    assert_eq!(
        halt["budget_spent"]["tokens"],
        10 + 5 + 5,
        "the wind-down turn's tokens are counted"
    );
    let handoff = std::fs::read_to_string(l.pkg().join("HANDOFF.md")).unwrap();
    assert!(
        handoff.contains("max_iterations 2 reached at lap 3"),
        "{handoff}"
    );
    assert!(
        handoff.contains("attempt 2: changed the workspace — gate failed (exit 1)"),
        "{handoff}"
    );
    assert!(
        handoff.contains("wrote still drafting"),
        "the wind-down account is kept: {handoff}"
    );
    // What the gate said last: the verdict of lap 2, with the checker's
    // own words, though the halting lap reached none.
    let said = handoff
        .split("## What the gate said last\n\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .unwrap_or_default();
    assert!(
        said.starts_with("(no verdict was reached in lap 3, where the run stopped; the last one, at lap 2:)\n\ngate failed (exit 1)")
            && said.contains("doc.txt is not done yet"),
        "{handoff}"
    );
    assert_eq!(r.event()["alert"], true);
}

#[test]
fn no_progress_is_measured_by_the_workspace_not_the_worker_s_claim() {
    if !cage_works() {
        return;
    }
    // Every lap writes the same bytes and claims `changed: true`: the
    // workspace's content does not move, so the run halts.
    let mut same = write_doc(json!("*"), "same", 1);
    same["changed"] = json!(true);
    let l = Loop::stub(
        "python3 seed/check.py",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: 10"),
        json!([same]),
    );
    let r = l.run(&[]);
    assert_eq!(
        r.status(),
        (1, "HALT".into(), "no progress in last 3 laps".into(), 4)
    );
    let rows = l.ledger(".ledger.jsonl");
    assert_eq!(
        (
            rows[3]["attempted"].as_bool(),
            rows[3]["verdict"]["evidence"].clone()
        ),
        (Some(true), json!({}))
    );
}

#[test]
fn the_token_budget_and_the_kill_switch_stop_the_loop() {
    if !cage_works() {
        return;
    }
    let interactions = json!([
        write_doc(json!(1), "a", 30),
        write_doc(json!(2), "b", 30),
        write_doc(json!("*"), "c", 30)
    ]);
    let l = Loop::stub(
        "python3 seed/check.py",
        &BOUNDS.replace("max_tokens: null", "max_tokens: 50"),
        interactions.clone(),
    );
    let r = l.run(&[]);
    assert_eq!(
        r.status(),
        (
            1,
            "HALT".into(),
            "token budget 50 exceeded (60 spent)".into(),
            3
        )
    );

    let l = Loop::stub("python3 seed/check.py", BOUNDS, interactions);
    for value in ["1", "0", "false"] {
        let out = Run::from(
            l.command(&["run", "pkg", "--yes", "--json"])
                .env("BOUNDED_LOOPS_KILL", value)
                .output()
                .unwrap(),
        );
        assert_eq!(
            out.status(),
            (1, "KILLED".into(), "killed".into(), 1),
            "BOUNDED_LOOPS_KILL={value}"
        );
    }
    let rows = l.ledger(".ledger.jsonl");
    assert!(
        rows.iter()
            .all(|r| r["budget_spent"] == json!({}) && r["attempted"] == false)
    );
    assert_eq!(
        std::fs::read_to_string(l.pkg().join("seed/doc.txt")).unwrap(),
        "draft\n",
        "no turn ran"
    );
    // An empty value is not set.
    let out = Run::from(
        l.command(&["run", "pkg", "--yes", "--json"])
            .env("BOUNDED_LOOPS_KILL", "")
            .output()
            .unwrap(),
    );
    assert_ne!(out.outcome()["status"], "KILLED");
}

#[test]
fn the_wallclock_bound_stops_a_turn_that_runs_too_long() {
    if !cage_works() {
        return;
    }
    let l = Loop::empty();
    l.write("loop.yaml", "name: slow\ndescription: slow agent\npattern: agents\nrole: [test]\nrung: L1\nrunner:\n  default: shell\n  agent_cmd: python3 seed/agent.py\ngate:\n  kind: command\n  run: python3 -c \"raise SystemExit(1)\"\n");
    l.write(
        "bounds.yaml",
        "max_iterations: 10\nmax_wallclock_s: 3\nhandoff_reserve_s: 1\n",
    );
    l.write("seed/agent.py", "import time\ntime.sleep(30)\n");
    let started = std::time::Instant::now();
    let r = l.run(&[]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "the turn was stopped inside the attempt"
    );
    let (code, status, reason, laps) = r.status();
    assert_eq!((code, status.as_str(), laps), (1, "HALT", 1), "{reason}");
    assert!(
        reason.starts_with("wallclock limit 3s exceeded (")
            && reason.ends_with("1s of it reserved for the handoff)"),
        "{reason}"
    );
}

#[test]
fn a_gate_that_cannot_decide_is_an_error_never_a_verdict() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "no-such-gate-tool seed/doc.txt",
        BOUNDS,
        json!([write_doc(json!("*"), "done", 1)]),
    );
    let r = l.run(&[]);
    let (code, status, reason, _) = r.status();
    assert_eq!((code, status.as_str()), (3, "ERROR"));
    assert!(reason.starts_with("gate error: GateError: CommandGate: OS error launching command 'no-such-gate-tool seed/doc.txt'"), "{reason}");
    assert_eq!(
        l.ledger(".ledger.jsonl")[0]["verdict"]["evidence"],
        json!({"component": "gate", "error_type": "GateError"})
    );

    let l = Loop::stub(
        "python3 -c \"raise SystemExit(2)\"",
        BOUNDS,
        json!([write_doc(json!("*"), "done", 1)]),
    );
    let r = l.run(&[]);
    assert_eq!(r.code, 3);
    assert!(r.reason().contains("command exited with unexpected code 2"));
}

#[test]
fn forbidden_paths_are_refused_to_the_stub_and_guarded_against_a_real_process() {
    if !cage_works() {
        return;
    }
    let cheat = json!({"lap": "*", "agent_output": "made the checker pass", "tokens": 1,
                       "actions": [{"type": "write_file", "path": "seed/check.py", "content": "pass\n"}]});
    let l = Loop::stub("python3 seed/check.py", BOUNDS, json!([cheat]));
    let r = l.run(&[]);
    assert_eq!(r.code, 3);
    assert!(
        r.reason()
            .contains("matches a forbidden path in the loop's spec")
    );

    // A shell agent that rewrites the gate's anchor: caught after its turn,
    // before any gate could be fooled.
    let l = Loop::empty();
    l.write("loop.yaml", "name: cheat\ndescription: cheat\npattern: agents\nrole: [test]\nrung: L1\nforbid: [seed/check.py]\nrunner:\n  default: shell\n  agent_cmd: python3 seed/agent.py\ngate:\n  kind: command\n  run: python3 seed/check.py\n");
    l.write("bounds.yaml", BOUNDS);
    l.write("seed/check.py", "raise SystemExit(1)\n");
    l.write(
        "seed/agent.py",
        "open('seed/check.py', 'w').write('pass\\n')\n",
    );
    let r = l.run(&[]);
    assert_eq!(r.code, 3, "{}", r.stdout);
    assert!(
        r.reason()
            .contains("SECURITY: the gate's verification anchor 'seed/check.py' was MODIFIED")
    );
}

#[test]
fn the_sandbox_keeps_the_runner_off_the_network_and_out_of_the_host() {
    if !cage_works() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let outside = tempfile::tempdir().unwrap();
    let l = Loop::empty();
    l.write("loop.yaml", "name: escape\ndescription: escape\npattern: agents\nrole: [test]\nrung: L1\nrunner:\n  default: shell\n  agent_cmd: python3 seed/agent.py\ngate:\n  kind: command\n  run: python3 -c \"raise SystemExit(0 if open('seed/result.txt').read() == 'contained' else 1)\"\n");
    l.write(
        "bounds.yaml",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: 1"),
    );
    l.write("seed/agent.py", &format!(
        "import socket\nresult = 'contained'\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    result = 'reached the host network'\nexcept OSError:\n    pass\ntry:\n    open({:?}, 'w').write('x')\n    result = 'wrote outside the workspace'\nexcept OSError:\n    pass\nopen('seed/result.txt', 'w').write(result)\n",
        outside.path().join("escaped").display().to_string()
    ));
    let r = l.run(&[]);
    assert_eq!(r.status().1, "DONE", "{}\n{}", r.stdout, r.stderr);
    assert!(!outside.path().join("escaped").exists());
    // And with `sandbox: false` the same agent does reach the host: the
    // bound is what made the difference.
    l.write(
        "bounds.yaml",
        &BOUNDS
            .replace("max_iterations: 5", "max_iterations: 1")
            .replace("sandbox: true", "sandbox: false"),
    );
    let r = l.run(&[]);
    assert_eq!(r.status().1, "HALT", "{}", r.stdout);
    drop(listener);
}

#[test]
fn quarantine_withholds_credential_files_and_says_which() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "python3 -c \"import os; raise SystemExit(1 if os.path.exists('seed/.env') else 0)\"",
        BOUNDS,
        json!([write_doc(json!("*"), "done", 1)]),
    );
    l.write("seed/.env", "API_KEY=secret\n");
    let r = l.run(&[]);
    assert_eq!(r.status().1, "DONE", "{}", r.stderr);
    assert!(
        r.stderr.contains(
            "[bounded-loops] quarantine withheld 1 seed entries from the sandbox: seed/.env."
        ),
        "{}",
        r.stderr
    );
    l.write(
        "bounds.yaml",
        &BOUNDS.replace("quarantine_inputs: true", "quarantine_inputs: false"),
    );
    let r = l.run(&[]);
    assert_eq!(
        r.status().1,
        "ERROR".to_string().replace("ERROR", "HALT"),
        "with quarantine off the file is there and the gate rejects"
    );
}

#[test]
fn approval_is_read_from_stdin_even_with_yes() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "python3 seed/check.py",
        &BOUNDS.replace("require_approval: false", "require_approval: true"),
        json!([write_doc(json!("*"), "done", 1)]),
    );
    let paused = l.run(&[]);
    assert_eq!(
        paused.status(),
        (1, "PAUSE".into(), "awaiting-approval".into(), 1)
    );
    assert!(
        paused
            .stdout
            .contains("[bounded-loops] Approve this result and mark DONE? [y/N] ")
    );
    let mut child = l
        .command(&["run", "pkg", "--yes", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let approved = Run::from(child.wait_with_output().unwrap());
    assert_eq!(approved.status().1, "DONE");
    // A null require_approval is true at L2.
    l.write(
        "bounds.yaml",
        &BOUNDS.replace("require_approval: false", "require_approval: null"),
    );
    let yaml = std::fs::read_to_string(l.pkg().join("loop.yaml"))
        .unwrap()
        .replace("rung: L1", "rung: L2");
    l.write("loop.yaml", &yaml);
    assert_eq!(l.run(&[]).status().1, "PAUSE");
}

/// Refused before its first lap (its gate plugin is nowhere), a run gives
/// its run id back: the same command is refused for the same reason, never
/// for an id that "already exists".
#[test]
fn a_run_refused_before_its_first_lap_gives_its_run_id_back() {
    let l = Loop::stub("python3 seed/check.py", BOUNDS, json!([]));
    let yaml = std::fs::read_to_string(l.pkg().join("loop.yaml"))
        .unwrap()
        .replace(
            "gate:\n  kind: command\n  run: python3 seed/check.py\n",
            "gate:\n  kind: plugin\n  plugin: no-such-gate\n",
        );
    assert!(yaml.contains("no-such-gate"), "{yaml}");
    l.write("loop.yaml", &yaml);
    for _ in 0..2 {
        let refused = l.run(&["--run-id", "r1"]);
        assert_ne!(refused.code, 0, "{}", refused.stderr);
        assert!(
            refused.stderr.contains("no-such-gate") && !refused.stderr.contains("already exists"),
            "{}",
            refused.stderr
        );
        assert!(!l.pkg().join(".bounded-loops/runs/r1").exists());
    }
}

#[test]
fn a_run_id_keeps_its_records_refuses_reuse_and_resumes_in_its_workspace() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "python3 seed/check.py",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: 1"),
        json!([
            write_doc(json!(1), "halfway", 3),
            json!({"lap": "*", "agent_output": "finishing", "tokens": 2, "actions": [{"type": "write_file", "path": "seed/doc.txt", "content": "done\n"}]})
        ]),
    );
    let first = l.run(&["--run-id", "r1"]);
    assert_eq!(first.status().1, "HALT");
    let run_dir = l.pkg().join(".bounded-loops/runs/r1");
    for file in [
        "ledger.jsonl",
        "metadata.json",
        "receipt.json",
        "receipt.md",
        "HANDOFF.md",
        "workspace/seed/doc.txt",
        "workspace/.bounded-loops-scratch",
    ] {
        assert!(run_dir.join(file).exists(), "{file}");
    }
    let meta: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("metadata.json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            meta["run_id"].as_str(),
            meta["status"].as_str(),
            meta["ledger_rows"].as_u64()
        ),
        (Some("r1"), Some("HALT"), Some(2))
    );
    assert_eq!(first.event()["run_id"], "r1");
    let raw = first
        .stderr
        .lines()
        .find(|l| l.starts_with("BL_EVENT "))
        .unwrap();
    assert!(
        raw.contains(r#""subject":"pkg","run_id":"r1","laps":2"#),
        "upstream's key order: {raw}"
    );
    assert!(
        l.pkg().join(".bounded-loops/runs.jsonl").is_file(),
        "the runs index"
    );

    let reuse = l.run(&["--run-id", "r1"]);
    assert_eq!(reuse.code, 2);
    assert!(
        reuse
            .stderr
            .contains("run_id 'r1' already exists. Use --resume"),
        "{}",
        reuse.stderr
    );
    assert_eq!(l.run(&["--run-id", "../x"]).code, 2);
    assert_eq!(l.run(&["--run-id", "nope", "--resume"]).code, 2);

    // Resumed: fresh laps and budgets (the cassette replays from lap 1),
    // the same workspace, the same chain.
    let resumed = l.run(&["--run-id", "r1", "--resume", "--max-iterations", "2"]);
    assert_eq!(
        resumed.status(),
        (0, "DONE".into(), "gate-passed".into(), 2),
        "{}",
        resumed.stderr
    );
    let rows = l.ledger(".bounded-loops/runs/r1/ledger.jsonl");
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[2]["lap"], 1);
    verify(
        &l,
        &run_dir,
        resumed.outcome()["ledger_head"].as_str().unwrap(),
    );
    let receipt: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("receipt.json")).unwrap())
            .unwrap();
    assert_eq!(
        (
            receipt["segments"].as_u64(),
            receipt["run"]["status"].as_str()
        ),
        (Some(2), Some("DONE"))
    );
    let md = l.bl(&["receipt", &run_dir.display().to_string()]);
    assert!(
        md.stdout.starts_with("# Run receipt — r1\n\n**DONE**"),
        "{}",
        md.stdout
    );
}

#[test]
fn redaction_is_applied_before_hashing() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "python3 seed/check.py",
        BOUNDS,
        json!([write_doc(json!("*"), "done", 1)]),
    );
    let gate = format!("python3 {}", l.pkg().join("seed/check.py").display());
    let r = l.run(&["--redact", "strict", "--gate-override", &gate]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let row = &l.ledger(".ledger.jsonl")[0];
    assert_eq!(
        row["verdict"]["evidence"]["cmd"],
        "python3 <workspace>/seed/check.py"
    );
    assert!(
        row["verdict"]["evidence"]["tail"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(row["gate"]["kind"], "command-override");
    verify(&l, &l.pkg(), r.outcome()["ledger_head"].as_str().unwrap());
}

#[test]
fn bad_manifests_and_unconfirmed_runs_are_refused_with_exit_2() {
    let l = Loop::stub(
        "python3 seed/check.py",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: \"5\""),
        json!([]),
    );
    let r = l.run(&[]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("error: bl run: manifest error — max_iterations must be an integer"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("pkg/bounds.yaml:1:17"),
        "the place: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("BL_EVENT"), "nothing ran");
    let lint = l.bl(&["lint", "pkg"]);
    assert_eq!(lint.code, 1);
    assert!(lint.stdout.starts_with("[FAIL] "), "{}", lint.stdout);
    assert!(
        lint.stderr
            .contains("       max_iterations must be an integer")
    );

    let l = Loop::stub("python3 seed/check.py", BOUNDS, json!([]));
    let r = l.bl(&["run", "pkg"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("bl run: not confirmed. Pass --yes to skip this prompt"),
        "{}",
        r.stderr
    );
    assert!(!l.pkg().join(".ledger.jsonl").exists());
    let yaml = std::fs::read_to_string(l.pkg().join("loop.yaml")).unwrap();
    l.write(
        "loop.yaml",
        &yaml.replace(
            "  default: stub\n",
            "  default: shell\n  agent_cmd: bash seed/agent.sh\n",
        ),
    );
    let r = l.bl(&["run", "pkg", "--yes"]);
    assert_eq!(r.code, 2, "bash is not on the agent_cmd allowlist");
    assert!(
        r.stderr
            .contains("runner.agent_cmd first token 'bash' is not in the agent_cmd allowlist"),
        "{}",
        r.stderr
    );
    let r = Run::from(
        l.command(&["run", "pkg", "--yes", "--json"])
            .env("BOUNDED_LOOPS_EXTRA_AGENT_CMDS", "bash")
            .output()
            .unwrap(),
    );
    assert!(
        r.stderr
            .contains("is permitted only by the operator extension"),
        "{}",
        r.stderr
    );
}

#[test]
fn laps_are_traced_over_otlp_when_a_collector_is_named() {
    if !cage_works() {
        return;
    }
    // A real HTTP collector on loopback that keeps what it is sent.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let keep = received.clone();
    std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Read};
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut line, mut length, mut path) = (String::new(), 0usize, String::new());
            reader.read_line(&mut line).unwrap();
            path.push_str(line.split_whitespace().nth(1).unwrap_or_default());
            loop {
                line.clear();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            keep.lock()
                .unwrap()
                .push(format!("{path} {}", String::from_utf8_lossy(&body)));
            let mut s = stream;
            s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
            )
            .unwrap();
        }
    });
    let l = Loop::catalog("readme-sections");
    let r = Run::from(
        l.command(&["run", "pkg", "--yes", "--json"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let bodies = received.lock().unwrap().clone();
    let spans: Vec<&String> = bodies
        .iter()
        .filter(|b| b.starts_with("/v1/traces "))
        .collect();
    let all = spans.iter().map(|s| s.as_str()).collect::<String>();
    assert_eq!(
        all.matches("\"bl.loop.lap\"").count(),
        2,
        "one span per lap: {all}"
    );
    assert!(all.contains("gate failed (exit 1)") && all.contains("gate passed (exit 0)"));
    // With trace: false, nothing is sent.
    let before = received.lock().unwrap().len();
    let bounds = std::fs::read_to_string(l.pkg().join("bounds.yaml"))
        .unwrap()
        .replace("trace: true", "trace: false");
    l.write("bounds.yaml", &bounds);
    let r = Run::from(
        l.command(&["run", "pkg", "--yes", "--json"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 0);
    assert_eq!(received.lock().unwrap().len(), before);
}

#[test]
fn new_scaffolds_loops_that_lint_and_run_and_the_catalog_installs() {
    if !cage_works() {
        return;
    }
    let l = Loop::empty();
    for template in ["command", "pytest", "jsonschema"] {
        let name = format!("my-{template}");
        assert_eq!(l.bl(&["new", &name, "--template", template]).code, 0);
        assert_eq!(l.bl(&["lint", &name]).code, 0);
        let r = l.bl(&["run", &name, "--yes", "--json"]);
        assert_eq!(r.outcome()["status"], "DONE", "{template}: {}", r.stderr);
    }
    assert_eq!(l.bl(&["new", "my-command"]).code, 2, "never overwrites");
    let list = l.bl(&["loops", "list", "--json"]);
    let names: Vec<String> = serde_json::from_str::<Value>(&list.stdout).unwrap()["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "config-contract",
            "order-schema",
            "readme-sections",
            "records-shell",
            "tests-green"
        ]
    );
    assert_eq!(l.bl(&["loops", "install", "records-shell"]).code, 0);
    let r = l.bl(&["run", "loops/records-shell", "--yes", "--json"]);
    assert_eq!(r.outcome()["status"], "DONE");
    let show = l.bl(&["show", "loops/records-shell", "--json"]);
    let show: Value = serde_json::from_str(&show.stdout).unwrap();
    assert!(
        show["content_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    // The risk flags, as bounded-loops 0.7.6 shows them for the same
    // manifests (observed across its catalog and variants of it).
    assert_eq!(
        show["risk"],
        json!(["local-runner-command", "local-gate-command"])
    );
    let pkg = l.dir.path().join("loops/records-shell");
    let edit = |file: &str, from: &str, to: &str| {
        let path = pkg.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file}: {from}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    };
    let risk = || {
        let out = l.bl(&["show", "loops/records-shell"]);
        out.stdout
            .lines()
            .find_map(|line| line.strip_prefix("risk: ").map(str::to_string))
            .unwrap_or_else(|| panic!("{}{}", out.stdout, out.stderr))
    };
    edit("loop.yaml", "rung: L1", "rung: L2");
    assert_eq!(
        risk(),
        "local-runner-command, local-gate-command, demo-approval-bypass"
    );
    edit(
        "bounds.yaml",
        "require_approval: false",
        "require_approval: true",
    );
    std::fs::write(pkg.join("bounds.production.yaml"), "max_iterations: 3\n").unwrap();
    assert_eq!(
        risk(),
        "local-runner-command, local-gate-command, approval-required, production-bounds-available"
    );
    let caps: Value = serde_json::from_str(&l.bl(&["capabilities", "--json"]).stdout).unwrap();
    assert_eq!(
        caps["loop_statuses"]["all"],
        json!(["DONE", "HALT", "PAUSE", "KILLED", "ERROR"])
    );
    let gates: Value = serde_json::from_str(&l.bl(&["gates", "--json"]).stdout).unwrap();
    assert_eq!(gates["gates"][0]["kind"], "command");
    assert_eq!(gates["gates"][0]["available"], true);
    // bl's own kind is listed with the others, so a loop author finds it.
    assert!(
        gates["gates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["kind"] == "plugin"),
        "{gates}"
    );
}

/// bounded-loops' own `bl verify` accepts the run directories bl writes.
/// It needs bounded-loops installed (a throwaway venv), so it runs only
/// when `BL_UPSTREAM_BL` names its `bl`; CI does not install it.
#[test]
fn bounded_loops_verify_accepts_bl_s_ledgers() {
    let Some(upstream) = std::env::var_os("BL_UPSTREAM_BL") else {
        eprintln!("SKIPPED: set BL_UPSTREAM_BL to bounded-loops' bl to compare");
        return;
    };
    if !cage_works() {
        return;
    }
    let l = Loop::catalog("readme-sections");
    let r = l.run(&["--run-id", "r1"]);
    assert_eq!(r.code, 0);
    let head = r.outcome()["ledger_head"].as_str().unwrap().to_string();
    let run_dir = l.pkg().join(".bounded-loops/runs/r1");
    let out = Command::new(&upstream)
        .args([
            "verify",
            &run_dir.display().to_string(),
            "--expect-head",
            &head,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Opens a directory to the caged user (bl's cage runs commands as nobody
/// when bl runs as root), as a user's own checkout would be.
fn open_to_cage(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn an_agent_cli_takes_turns_in_the_cage_and_its_usage_counts() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub("python3 seed/check.py", BOUNDS, json!([]));
    open_to_cage(l.dir.path());
    let bin = l.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    open_to_cage(&bin);
    // A stand-in `claude`: reads the task on stdin, edits the workspace,
    // answers in Claude Code's JSON envelope with its usage.
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/usr/bin/python3\nimport json, sys\ntask = sys.stdin.read()\nassert 'Make seed/doc.txt say done.' in task, task\nopen('seed/doc.txt', 'w').write('done\\n')\nprint(json.dumps({'type': 'result', 'result': 'I fixed it', 'usage': {'input_tokens': 100, 'output_tokens': 20, 'cache_creation_input_tokens': 0, 'cache_read_input_tokens': 0}}))\n").unwrap();
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let r = Run::from(
        l.command(&["run", "pkg", "--yes", "--json", "--runner", "claude-code"])
            .env("PATH", &path)
            .output()
            .unwrap(),
    );
    assert_eq!(
        r.status(),
        (0, "DONE".into(), "gate-passed".into(), 1),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        l.ledger(".ledger.jsonl")[0]["budget_spent"]["tokens"],
        120,
        "tokens from the CLI's usage"
    );
    // Without the CLI the run is refused before any lap.
    let r = l.bl(&["run", "pkg", "--yes", "--runner", "codex"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("the codex runner needs 'codex' on PATH"),
        "{}",
        r.stderr
    );
}

/// A caged agent CLI reaches its provider, and nothing else, through the
/// allowlist proxy: its profile's host is let through to resolution, any
/// other host is refused, a direct connection finds no network, and every
/// decision is kept beside the ledger.
#[test]
fn a_caged_agent_cli_reaches_only_its_provider_through_the_proxy() {
    if !cage_works() {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let l = Loop::stub("python3 seed/check.py", BOUNDS, json!([]));
    open_to_cage(l.dir.path());
    let bin = l.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    open_to_cage(&bin);
    let claude = bin.join("claude");
    let script = format!(
        "#!/usr/bin/python3\nimport json, os, socket, sys\nsys.stdin.read()\nproxy = os.environ['HTTPS_PROXY'].rsplit('/', 1)[-1].split(':')\nseen = []\nfor target in ('api.anthropic.com:443', 'blocked.invalid:443'):\n    s = socket.create_connection((proxy[0], int(proxy[1])), 5)\n    s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (target, target)).encode())\n    seen.append(s.recv(200).split(b'\\r\\n')[0].decode())\n    s.close()\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 2).close(); seen.append('direct:open')\nexcept OSError:\n    seen.append('direct:denied')\nopen('seed/doc.txt', 'w').write('done\\n')\nopen('seed/net.txt', 'w').write('|'.join(seen))\nprint(json.dumps({{'type': 'result', 'result': 'ok', 'usage': {{'input_tokens': 1, 'output_tokens': 1, 'cache_creation_input_tokens': 0, 'cache_read_input_tokens': 0}}}}))\n"
    );
    std::fs::write(&claude, script).unwrap();
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let r = Run::from(
        l.command(&[
            "run",
            "pkg",
            "--yes",
            "--json",
            "--runner",
            "claude-code",
            "--run-id",
            "net",
            "--keep-workspace",
        ])
        .env("PATH", &path)
        .env_remove("BOUNDED_LOOPS_EGRESS_POSTURE")
        .output()
        .unwrap(),
    );
    assert_eq!(r.status().0, 0, "{}\n{}", r.stdout, r.stderr);
    let run = l.pkg().join(".bounded-loops/runs/net");
    let seen = std::fs::read_to_string(run.join("workspace/seed/net.txt")).unwrap();
    let parts: Vec<&str> = seen.split('|').collect();
    assert_eq!(parts.len(), 3, "{seen}");
    assert!(
        parts[0].starts_with("HTTP/1.1"),
        "the proxy answered for the provider: {seen}"
    );
    assert!(
        parts[1].starts_with("HTTP/1.1") && !parts[1].contains(" 200"),
        "{seen}"
    );
    assert_eq!(parts[2], "direct:denied", "{seen}");
    let decisions: Vec<Value> = std::fs::read_to_string(run.join("egress-decisions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert_eq!(decisions[0]["target"], "api.anthropic.com:443");
    // Allowed by the allowlist: only resolution (no DNS here) or the tunnel decides.
    assert!(
        decisions[0]["decision"] == "tunnel"
            || !decisions[0]["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("allowlist"),
        "{decisions:?}"
    );
    assert_eq!(decisions[1]["target"], "blocked.invalid:443");
    assert_eq!(decisions[1]["decision"], "refused");
    assert_eq!(decisions[1]["reason"], "not on the egress allowlist");
}

#[test]
fn a_python_callable_takes_turns_from_the_directory_bl_runs_in() {
    if !cage_works() {
        return;
    }
    let l = Loop::empty();
    open_to_cage(l.dir.path());
    l.write("loop.yaml", "name: callable\ndescription: a callable\npattern: agents\nrole: [test]\nrung: L1\nrunner:\n  default: python_callable\n  module_path: helpers.turns\n  function_name: run_turn\ngate:\n  kind: command\n  run: python3 -c \"raise SystemExit(0 if open('seed/doc.txt').read() == 'done' else 1)\"\n");
    l.write("bounds.yaml", BOUNDS);
    l.write("seed/doc.txt", "draft");
    let helpers = l.dir.path().join("helpers");
    std::fs::create_dir_all(&helpers).unwrap();
    open_to_cage(&helpers);
    std::fs::write(helpers.join("__init__.py"), "").unwrap();
    std::fs::write(helpers.join("turns.py"), "def run_turn(prompt, workspace):\n    open(workspace + '/seed/doc.txt', 'w').write('done')\n    return {'output': 'wrote it', 'tokens': 7}\n").unwrap();
    let r = l.run(&[]);
    assert_eq!(
        r.status(),
        (0, "DONE".into(), "gate-passed".into(), 1),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(l.ledger(".ledger.jsonl")[0]["budget_spent"]["tokens"], 7);
    // A module that does not import is a runner error, in upstream's words.
    let yaml = std::fs::read_to_string(l.pkg().join("loop.yaml"))
        .unwrap()
        .replace("helpers.turns", "missing.module");
    l.write("loop.yaml", &yaml);
    let r = l.run(&[]);
    assert_eq!(r.code, 3);
    assert!(r.reason().starts_with("runner error: RunnerError: PythonCallableRunner: missing.module.run_turn raised: could not import 'missing.module'"), "{}", r.stdout);
}

#[test]
fn writes_never_follow_a_symlink_out_of_the_workspace() {
    if !cage_works() {
        return;
    }
    let outside = tempfile::tempdir().unwrap();
    open_to_cage(outside.path());
    let target = outside.path().join("host-file.txt");
    std::fs::write(&target, "untouched").unwrap();

    // A seed that carries a symlink to a host directory: the cassette's
    // write through it is refused before anything is written.
    let l = Loop::stub(
        "python3 seed/check.py",
        BOUNDS,
        json!([{"lap": "*", "agent_output": "x", "tokens": 1,
        "actions": [{"type": "write_file", "path": "seed/out/host-file.txt", "content": "overwritten"}]}]),
    );
    std::os::unix::fs::symlink(outside.path(), l.pkg().join("seed/out")).unwrap();
    let r = l.run(&[]);
    assert_eq!(r.code, 3, "{}", r.stdout);
    assert!(
        r.reason().contains("outside the workspace"),
        "{}",
        r.reason()
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");

    // A caged agent that leaves agent_output.txt as a symlink to a host
    // file: bl replaces the link, it never writes through it.
    let l = Loop::empty();
    open_to_cage(l.dir.path());
    l.write("loop.yaml", "name: link\ndescription: link\npattern: agents\nrole: [test]\nrung: L1\nrunner:\n  default: shell\n  agent_cmd: python3 seed/agent.py\ngate:\n  kind: command\n  run: python3 -c \"raise SystemExit(1)\"\n");
    l.write(
        "bounds.yaml",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: 2"),
    );
    l.write("seed/agent.py", &format!(
        "import os\ntry:\n    os.remove('agent_output.txt')\nexcept OSError:\n    pass\nos.symlink({:?}, 'agent_output.txt')\nprint('pwned')\n",
        target.display().to_string()
    ));
    let r = l.run(&[]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
}

#[test]
fn a_resumed_run_still_sees_an_anchor_a_previous_run_tampered_with() {
    if !cage_works() {
        return;
    }
    let l = Loop::empty();
    l.write("loop.yaml", "name: cheat\ndescription: cheat\npattern: agents\nrole: [test]\nrung: L1\nforbid: [seed/check.py]\nrunner:\n  default: shell\n  agent_cmd: python3 seed/agent.py\ngate:\n  kind: command\n  run: python3 seed/check.py\n");
    l.write("bounds.yaml", BOUNDS);
    l.write("seed/check.py", "raise SystemExit(1)\n");
    l.write(
        "seed/agent.py",
        "open('seed/check.py', 'w').write('pass\\n')\n",
    );
    let first = l.run(&["--run-id", "r1"]);
    assert_eq!(first.code, 3);
    // The next run's agent does nothing; the anchor is still the tampered one.
    l.write("seed/agent.py", "print('nothing to do')\n");
    std::fs::write(
        l.pkg()
            .join(".bounded-loops/runs/r1/workspace/seed/agent.py"),
        "print('nothing to do')\n",
    )
    .unwrap();
    let resumed = l.run(&["--run-id", "r1", "--resume"]);
    assert_eq!(resumed.code, 3, "{}", resumed.stdout);
    assert!(
        resumed
            .reason()
            .contains("SECURITY: the gate's verification anchor 'seed/check.py' was MODIFIED")
    );
}

#[test]
fn a_gate_still_running_when_the_work_time_ends_is_the_wallclock_bound() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "python3 -c \"import time; time.sleep(30)\"",
        "max_iterations: 5\nmax_wallclock_s: 3\nhandoff_reserve_s: 1\n",
        json!([write_doc(json!("*"), "x", 1)]),
    );
    let started = std::time::Instant::now();
    let r = l.run(&[]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(12),
        "the gate was stopped at the budget"
    );
    let (code, status, reason, _) = r.status();
    assert_eq!((code, status.as_str()), (1, "HALT"), "{reason}");
    assert!(
        reason.starts_with("wallclock limit 3s exceeded"),
        "{reason}"
    );
}

#[test]
fn allowed_passthrough_variables_reach_the_runner_and_others_are_refused() {
    if !cage_works() {
        return;
    }
    let l = Loop::empty();
    l.write("loop.yaml", "name: env\ndescription: env\npattern: agents\nrole: [test]\nrung: L1\nrunner:\n  default: shell\n  agent_cmd: python3 seed/agent.py\n  env_passthrough: [GREETING]\ngate:\n  kind: command\n  run: python3 -c \"raise SystemExit(0 if open('seed/seen.txt').read() == 'hello' else 1)\"\n");
    l.write(
        "bounds.yaml",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: 1"),
    );
    l.write(
        "seed/agent.py",
        "import os\nopen('seed/seen.txt', 'w').write(os.environ.get('GREETING', 'unset'))\n",
    );
    let refused = Run::from(
        l.command(&["run", "pkg", "--yes"])
            .env("GREETING", "hello")
            .output()
            .unwrap(),
    );
    assert_eq!(refused.code, 2);
    assert!(
        refused
            .stderr
            .contains("not in the operator allowlist (BOUNDED_LOOPS_ENV_PASSTHROUGH_ALLOW)"),
        "{}",
        refused.stderr
    );
    let r = Run::from(
        l.command(&["run", "pkg", "--yes", "--json"])
            .env("GREETING", "hello")
            .env("BOUNDED_LOOPS_ENV_PASSTHROUGH_ALLOW", "GREETING")
            .output()
            .unwrap(),
    );
    assert_eq!(r.status().1, "DONE", "{}\n{}", r.stdout, r.stderr);
}

/// `bl run A B C`: each loop ends as it ends alone, the answers come in the
/// order given, and the batch exits with the largest code.
#[test]
fn several_loops_run_side_by_side_each_as_it_would_alone() {
    if !cage_works() {
        return;
    }
    let done: Vec<(Loop, u64)> = [
        ("readme-sections", 2),
        ("tests-green", 1),
        ("records-shell", 3),
    ]
    .into_iter()
    .map(|(name, laps)| (Loop::catalog(name), laps))
    .collect();
    let halts = Loop::stub(
        "python3 seed/check.py",
        &BOUNDS.replace("max_iterations: 5", "max_iterations: 1"),
        json!([write_doc(json!("*"), "still drafting", 5)]),
    );
    let broken = Loop::stub("python3 seed/check.py", "max_iterations: [\n", json!([]));
    let mut dirs: Vec<String> = done.iter().map(|(l, _)| path_arg(&l.pkg())).collect();
    dirs.push(path_arg(&halts.pkg()));
    let mut args: Vec<&str> = vec!["run"];
    args.extend(dirs.iter().map(String::as_str));
    args.extend(["--yes", "--json", "--jobs", "2"]);
    let r = halts.bl(&args);
    let outcomes: Vec<Value> = json_lines(&r.stdout);
    let got: Vec<(String, u64, String)> = outcomes
        .iter()
        .map(|o| {
            (
                o["status"].as_str().unwrap().to_string(),
                o["laps"].as_u64().unwrap(),
                o["ledger_path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut want: Vec<(String, u64, String)> = done
        .iter()
        .map(|(l, laps)| ("DONE".into(), *laps, ledger_of(&l.pkg())))
        .collect();
    want.push(("HALT".into(), 2, ledger_of(&halts.pkg())));
    assert_eq!(got, want, "in the order given:\n{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.code, 1, "the largest code: one loop halted");
    let events: Vec<String> = r
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("BL_EVENT "))
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["status"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(events, ["DONE", "DONE", "DONE", "HALT"], "{}", r.stderr);
    assert!(
        r.stderr
            .trim_end()
            .lines()
            .last()
            .unwrap()
            .starts_with("BL_EVENT "),
        "with --json, each loop's own lines and nothing else: {}",
        r.stderr
    );
    // Each ledger is the loop's own, and verifies.
    for (o, l) in outcomes
        .iter()
        .zip(done.iter().map(|(l, _)| l).chain([&halts]))
    {
        verify(l, &l.pkg(), o["ledger_head"].as_str().unwrap());
    }

    // A loop that is refused says so in its place; the others still run.
    let broken_dir = path_arg(&broken.pkg());
    let r = halts.bl(&["run", &dirs[0], &broken_dir, "--yes", "--json"]);
    let answers = json_lines(&r.stdout);
    assert_eq!(
        (
            answers[0]["status"].as_str(),
            answers[1]["error"]["code"].as_str(),
            r.code
        ),
        (Some("DONE"), Some("refused"), 2),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    // For people, a last line sums the batch up.
    let r = halts.bl(&[
        "run",
        &dirs[1],
        &broken_dir,
        &dirs[3],
        "--yes",
        "--jobs",
        "3",
    ]);
    let summary = format!(
        "bl run: 3 loops (3 at a time): 1 exited 0; exit 1: {}; exit 2: {broken_dir}",
        dirs[3]
    );
    assert_eq!(
        (r.code, r.stderr.trim_end().lines().last()),
        (2, Some(summary.as_str())),
        "{}",
        r.stderr
    );
}

/// Refused before anything runs: several loops unconfirmed, or one loop
/// named twice (two runs would append to one ledger at once).
#[test]
fn several_loops_unconfirmed_or_one_named_twice_are_refused() {
    let loops = unconfined_pair();
    let (a, b) = (path_arg(&loops[0].pkg()), path_arg(&loops[1].pkg()));
    let again = format!("{a}/../pkg");
    for (args, says) in [
        (vec!["run", &a, &b], "pass --yes to confirm them all"),
        (vec!["run", &a, &b, &again, "--yes"], "are the same loop"),
    ] {
        let r = loops[0].bl(&args);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert!(r.stderr.contains(says), "{}", r.stderr);
        for l in &loops {
            assert!(!l.pkg().join(".ledger.jsonl").exists(), "nothing ran");
        }
    }
}

/// Two stub loops without a cage (their gates meet through a directory the
/// test names), stopping at their first failed lap.
fn unconfined_pair() -> [Loop; 2] {
    let bounds = BOUNDS
        .replace("sandbox: true", "sandbox: false")
        .replace("max_iterations: 5", "max_iterations: 1");
    [0, 1].map(|_| {
        Loop::stub(
            "python3 seed/check.py",
            &bounds,
            json!([write_doc(json!("*"), "x", 1)]),
        )
    })
}

/// A python gate for `--gate-override`: it leaves its pid in `room`, then
/// (with `wait`) passes once another gate has too, or fails after `wait`
/// seconds; without `wait` it just holds for a minute.
fn room_gate(script_dir: &Path, room: &Path, wait: Option<&str>) -> String {
    let script = script_dir.join("room.py");
    std::fs::write(
        &script,
        "import os, sys, time\nd = sys.argv[1]\nopen(os.path.join(d, str(os.getpid())), 'w').close()\nif len(sys.argv) < 3:\n    time.sleep(60)\nend = time.time() + float(sys.argv[2])\nwhile time.time() < end:\n    if len(os.listdir(d)) >= 2:\n        sys.exit(0)\n    time.sleep(0.05)\nsys.exit(1)\n",
    )
    .unwrap();
    format!(
        "python3 {} {} {}",
        script.display(),
        room.display(),
        wait.unwrap_or("")
    )
    .trim_end()
    .to_string()
}

/// Live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    bl_e2e::live_command_lines()
        .into_iter()
        .filter(|c| c.contains(needle))
        .collect()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed().as_secs() < 30, "{what}: not within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The loops really run at once, `--jobs` at a time, and their answers
/// still come in the order given.
#[test]
fn jobs_run_at_once_and_answer_in_the_order_given() {
    let scripts = tempfile::tempdir().unwrap();
    let statuses = |jobs: &str, wait: &str| -> Vec<String> {
        let room = tempfile::tempdir().unwrap();
        let gate = room_gate(scripts.path(), room.path(), Some(wait));
        let loops = unconfined_pair();
        let (a, b) = (path_arg(&loops[0].pkg()), path_arg(&loops[1].pkg()));
        let r = loops[0].bl(&[
            "run",
            &a,
            &b,
            "--json",
            "--jobs",
            jobs,
            "--gate-override",
            &gate,
        ]);
        json_lines(&r.stdout)
            .iter()
            .map(|o| o["status"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    // Two gates that each wait for the other pass side by side; one at a
    // time, the first gives up.
    assert_eq!(statuses("2", "30"), ["DONE", "DONE"]);
    assert_eq!(
        statuses("1", "1"),
        ["HALT", "DONE"],
        "one at a time, the first waits alone"
    );

    // The first loop's gate takes a second, the second's none: the first
    // still answers first.
    let loops = unconfined_pair();
    let yaml = std::fs::read_to_string(loops[0].pkg().join("loop.yaml")).unwrap();
    loops[0].write(
        "loop.yaml",
        &yaml.replace("run: python3 seed/check.py", "run: sleep 1"),
    );
    loops[1].write(
        "loop.yaml",
        &yaml.replace("run: python3 seed/check.py", "run: 'true'"),
    );
    let (a, b) = (path_arg(&loops[0].pkg()), path_arg(&loops[1].pkg()));
    let r = loops[0].bl(&["run", &a, &b, "--yes", "--json", "--jobs", "2"]);
    let order: Vec<String> = json_lines(&r.stdout)
        .iter()
        .map(|o| o["ledger_path"].as_str().unwrap_or("?").to_string())
        .collect();
    assert_eq!(
        order,
        [ledger_of(&loops[0].pkg()), ledger_of(&loops[1].pkg())],
        "{}",
        r.stderr
    );
}

/// SIGTERM reaches every running loop, which ends its gate and answers; a
/// loop still queued never starts. A bl that dies (here: its stdout closed)
/// takes its loops with it.
#[test]
fn a_signal_or_a_dying_bl_ends_every_running_loop() {
    use std::os::unix::process::ExitStatusExt;
    let scripts = tempfile::tempdir().unwrap();
    let room = tempfile::tempdir().unwrap();
    let gate = room_gate(scripts.path(), room.path(), None);
    let [first, second] = unconfined_pair();
    let [queued, _] = unconfined_pair();
    let dirs = [&first, &second, &queued].map(|l| path_arg(&l.pkg()));
    let batch = first
        .command(&[
            "run",
            &dirs[0],
            &dirs[1],
            &dirs[2],
            "--json",
            "--jobs",
            "2",
            "--gate-override",
            &gate,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let gates = || std::fs::read_dir(room.path()).unwrap().count();
    wait_until("both gates started", || gates() == 2);
    let pid = nix::unistd::Pid::from_raw(batch.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = batch.wait_with_output().unwrap();
    assert_eq!((out.status.code(), out.status.signal()), (Some(143), None));
    assert!(processes_mentioning(&room.path().display().to_string()).is_empty());
    let answered: Vec<Value> = json_lines(&String::from_utf8_lossy(&out.stdout));
    for l in [&first, &second] {
        assert!(
            answered
                .iter()
                .any(|o| o["ledger_path"] == ledger_of(&l.pkg())),
            "every running loop answered: {answered:?}"
        );
    }
    assert_eq!(
        answered.last().unwrap()["error"]["code"],
        "interrupted",
        "{answered:?}"
    );
    assert!(
        !queued.pkg().join(".ledger.jsonl").exists(),
        "the queued loop never started"
    );
    assert_eq!(gates(), 2);

    // bl's stdout closes under it: it exits 141, and its loops end with it.
    // The first loop answers (and bl dies writing it) once the second
    // loop's gate is holding.
    let room = tempfile::tempdir().unwrap();
    let [quick, held] = unconfined_pair();
    let yaml = std::fs::read_to_string(quick.pkg().join("loop.yaml")).unwrap();
    for (l, wait) in [(&quick, Some("30")), (&held, None)] {
        let gate = room_gate(scripts.path(), room.path(), wait);
        l.write(
            "loop.yaml",
            &yaml.replace("run: python3 seed/check.py", &format!("run: '{gate}'")),
        );
    }
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let status = quick
        .command(&[
            "run",
            &path_arg(&quick.pkg()),
            &path_arg(&held.pkg()),
            "--yes",
            "--jobs",
            "2",
        ])
        .stdout(Stdio::from(write))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(141));
    // Neither the held loop's bl nor its gate outlives the batch.
    let (held_bl, held_gate) = (path_arg(&held.pkg()), path_arg(room.path()));
    wait_until("the held loop ended with bl", || {
        processes_mentioning(&held_bl).is_empty() && processes_mentioning(&held_gate).is_empty()
    });
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

fn ledger_of(pkg: &Path) -> String {
    std::fs::canonicalize(pkg)
        .unwrap()
        .join(".ledger.jsonl")
        .display()
        .to_string()
}

/// The JSON answers among a batch's stdout lines, one per loop.
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The gate's findings reach the agent: a stand-in agent that fixes exactly
/// what it is told brings the README up to standard on its second lap. The
/// same agent behind a gate that says only its exit code has to guess, and
/// takes a lap per guess.
#[test]
fn the_agent_is_told_what_the_gate_found_and_fixes_it_in_fewer_laps() {
    let laps_for = |gate: &str| {
        let l = Loop::catalog("readme-sections");
        l.write(
            "loop.yaml",
            &std::fs::read_to_string(l.pkg().join("loop.yaml"))
                .unwrap()
                .replace(
                    "runner:\n  default: stub\n",
                    "runner:\n  default: shell\n  agent_cmd: python3 seed/agent.py\n",
                )
                .replace(
                    "run: python3 seed/check_readme.py seed/README.md",
                    &format!("run: {gate}"),
                )
                .replace("forbid:\n", "forbid:\n  - seed/quiet.py\n"),
        );
        l.write(
            "bounds.yaml",
            &std::fs::read_to_string(l.pkg().join("bounds.yaml"))
                .unwrap()
                .replace("max_iterations: 5", "max_iterations: 9")
                .replace("no_progress_window: 3", "no_progress_window: 9"),
        );
        // The same check, saying nothing but its exit code.
        l.write(
            "seed/quiet.py",
            "import subprocess, sys\nsys.exit(subprocess.run([sys.executable, 'seed/check_readme.py', 'seed/README.md'], capture_output=True).returncode)\n",
        );
        l.write(
            "seed/agent.py",
            r#"import re, sys
prompt = sys.stdin.read()
readme = open('seed/README.md').read()

def fix(text, name):
    # Give a section some words: add it, or fill it where it is empty.
    header = '## %s\n' % name
    words = '\nSome words about %s.\n' % name.lower()
    if header not in text:
        return text + '\n' + header + words
    return text.replace(header, header + words, 1)

told = re.findall(r'(?:missing|empty) section: (\w+)', prompt)
if not told:
    # Told nothing: guess the next likely section not yet written.
    def done(name):
        at = readme.find('## %s\n' % name)
        return at >= 0 and readme[at:].split('\n## ')[0].strip().count('\n') > 0
    told = [g for g in ['Overview', 'Install', 'Contributing', 'Usage', 'FAQ', 'License']
            if not done(g)][:1]
for name in told:
    readme = fix(readme, name)
open('seed/README.md', 'w').write(readme)
print('fixed', told)
"#,
        );
        let r = l.run(&[]);
        let (code, status, reason, laps) = r.status();
        assert_eq!(
            (code, status.as_str()),
            (0, "DONE"),
            "{reason}\n{}",
            r.stderr
        );
        laps
    };
    let told = laps_for("python3 seed/check_readme.py seed/README.md");
    let guessing = laps_for("python3 seed/quiet.py");
    assert_eq!(told, 2, "told what is missing, the agent fixes it at once");
    assert!(
        guessing > told + 2,
        "told nothing, the agent guesses: {guessing} laps against {told}"
    );
}

/// A scanner gate goes through the scanner plugin, which runs the scanner
/// (on the cage's fixed PATH) and reads its report; the host only records
/// what the plugin found. No scanner is installed on these machines, so
/// this checks the path every machine without one takes: the gate could
/// not decide, an ERROR naming the missing program, never a pass. (The
/// plugin's own tests count each scanner's report shape.)
#[test]
fn a_scanner_that_is_not_installed_is_an_error_from_the_scanner_plugin() {
    let l = Loop::stub("unused", BOUNDS, json!([write_doc(json!("*"), "done", 1)]));
    let yaml = std::fs::read_to_string(l.pkg().join("loop.yaml")).unwrap();
    for (kind, tool) in [("trivy", "trivy"), ("osv", "osv-scanner")] {
        if std::path::Path::new("/usr/bin").join(tool).exists() {
            continue;
        }
        l.write(
            "loop.yaml",
            &yaml.replace(
                "gate:\n  kind: command\n  run: unused\n",
                &format!("gate:\n  kind: {kind}\n"),
            ),
        );
        let run = l.run(&[]);
        let (code, status, reason, _) = run.status();
        assert_eq!((code, status.as_str()), (3, "ERROR"), "{reason}");
        assert!(
            reason.contains(&format!(
                "could not launch {tool} (is it installed and on PATH?)"
            )),
            "{reason}"
        );
        let ledger = l.ledger(".ledger.jsonl");
        let gate = &ledger.last().unwrap()["gate"];
        assert_eq!(gate["kind"], kind);
        let scanner = bl_e2e::component_bytes(&plugin_dir(), "scanner");
        assert_eq!(
            gate["component"],
            bl_core::Sha256Digest::of(&scanner).to_string(),
            "the ledger names the scanner plugin's component"
        );
    }
}

/// Under `--json` a stopped run answers with one object, even when a second
/// signal comes while it answers: here the answer waits on a stdout pipe
/// nobody reads yet when the second signal comes, and once the pipe is
/// read it is the only object there (bl used to add a stopped one).
#[test]
fn a_second_signal_while_a_stopped_run_answers_adds_no_second_answer() {
    use std::io::Read;
    let outside = tempfile::tempdir().unwrap();
    let started = outside.path().join("started");
    let worker = outside.path().join("worker.py");
    std::fs::write(
        &worker,
        format!(
            "import os\nopen({:?}, 'w').close()\nos.execvp('sleep', ['sleep', '30'])\n",
            started.display().to_string()
        ),
    )
    .unwrap();
    let l = Loop::shell(&worker, "'true'");
    let (mut reader, writer) = std::io::pipe().unwrap();
    let capacity = nix::fcntl::fcntl(&writer, nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap() as usize;
    // Full but for a few bytes: the answer stops half way.
    let mut filler = vec![b'#'; capacity - 16];
    filler.push(b'\n');
    std::io::Write::write_all(&mut &writer, &filler).unwrap();
    let child = l
        .command(&["run", "pkg", "--yes", "--json", "--run-id", "twice"])
        .stdout(writer)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    wait_until("the worker's turn", || started.exists());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    // Past the moment a stop gives a command to end by itself, and the
    // answer's start.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut said = Vec::new();
    reader.read_to_end(&mut said).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let said = String::from_utf8_lossy(&said[filler.len()..]).into_owned();
    let answers: Vec<&str> = said.lines().collect();
    assert_eq!(answers.len(), 1, "{answers:#?}");
    let answer: Value = serde_json::from_str(answers[0]).unwrap();
    assert_eq!(answer["status"], "KILLED", "{answer}");
}

/// Stopped while its gate judged a turn the worker had finished, a run
/// records that, and `--resume` judges that turn without paying for a new
/// one; stopped during the turn, `--resume` takes the turn again.
#[test]
fn a_stop_during_the_gate_keeps_the_finished_turn_for_the_resume_to_judge() {
    use std::os::unix::process::ExitStatusExt;
    let outside = tempfile::tempdir().unwrap();
    let turns = outside.path().join("turns.log");
    let judging = outside.path().join("judging");
    let release = outside.path().join("release");
    let slow = outside.path().join("slow");
    let worker = outside.path().join("worker.py");
    std::fs::write(
        &worker,
        format!(
            "import os, sys, time\nsys.stdin.read()\nopen({turns:?}, 'a').write('turn\\n')\nif os.path.exists({slow:?}):\n    time.sleep(60)\nopen('seed/doc.txt', 'w').write('done\\n')\n",
            turns = turns.display().to_string(),
            slow = slow.display().to_string()
        ),
    )
    .unwrap();
    let gate = outside.path().join("gate.py");
    std::fs::write(
        &gate,
        format!(
            "import os, sys, time\nif not os.path.exists({release:?}):\n    open({judging:?}, 'w').close()\n    time.sleep(60)\nsys.exit(0 if open('seed/doc.txt').read().strip() == 'done' else 1)\n",
            release = release.display().to_string(),
            judging = judging.display().to_string()
        ),
    )
    .unwrap();
    let l = Loop::shell(&worker, &format!("python3 {}", gate.display()));
    let stopped =
        |run_id: &str, ready: &dyn Fn() -> bool, signal: nix::sys::signal::Signal, json: bool| {
            let mut args = vec!["run", "pkg", "--yes", "--run-id", run_id];
            if json {
                args.push("--json");
            }
            let child = l
                .command(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            wait_until("the moment to stop it", ready);
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            nix::sys::signal::kill(pid, signal).unwrap();
            let out = child.wait_with_output().unwrap();
            if signal == nix::sys::signal::Signal::SIGINT {
                assert_eq!((out.status.code(), out.status.signal()), (Some(130), None));
            }
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
    let interrupted = |run_id: &str, ready: &dyn Fn() -> bool| {
        stopped(run_id, ready, nix::sys::signal::Signal::SIGINT, false)
    };
    let turns_taken = || {
        std::fs::read_to_string(&turns)
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == "turn")
            .count()
    };

    // Stopped in the gate: the lap says so, and the resume judges the
    // finished turn without a new one.
    let said = interrupted("in-gate", &|| judging.exists());
    assert!(
        said.contains(
            "[KILLED] stopped by signal 2 while the gate judged the worker's finished turn"
        ),
        "{said}"
    );
    let ledger = l.ledger(".bounded-loops/runs/in-gate/ledger.jsonl");
    let last = ledger.last().unwrap();
    assert_eq!(
        (&last["decision"], &last["verdict"]["evidence"]["stopped"]),
        (&json!("killed"), &json!("gate")),
        "{last}"
    );
    std::fs::write(&release, "").unwrap();
    let resumed = l.bl(&[
        "run", "pkg", "--yes", "--json", "--run-id", "in-gate", "--resume",
    ]);
    assert_eq!(resumed.status().1, "DONE", "{}", resumed.stderr);
    assert_eq!(turns_taken(), 1, "the finished turn was paid for once");
    let ledger = l.ledger(".bounded-loops/runs/in-gate/ledger.jsonl");
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[1]["decision"], "done");

    // Stopped during the turn: the turn never finished, and the resume
    // takes it again.
    std::fs::remove_file(&release).unwrap();
    std::fs::remove_file(&turns).unwrap();
    std::fs::write(&slow, "").unwrap();
    // Under --json its answer is one object, the run's own (the stop is
    // its reason), as for a run that was not stopped.
    let said = stopped(
        "in-turn",
        &|| turns_taken() == 1,
        nix::sys::signal::Signal::SIGINT,
        true,
    );
    let answer: Value = serde_json::from_str(&said).expect("one JSON object");
    assert_eq!(answer["status"], "KILLED", "{said}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .contains("stopped by signal 2 during the worker's turn, before it finished"),
        "{said}"
    );
    std::fs::remove_file(&slow).unwrap();
    std::fs::write(&release, "").unwrap();
    let resumed = l.bl(&[
        "run", "pkg", "--yes", "--json", "--run-id", "in-turn", "--resume",
    ]);
    assert_eq!(resumed.status().1, "DONE", "{}", resumed.stderr);
    assert_eq!(turns_taken(), 2);

    // Killed outright while the gate judged: nothing could be recorded
    // then, but the finished turn was marked before the gate began, so the
    // resume still judges it without a new one.
    std::fs::remove_file(&release).unwrap();
    std::fs::remove_file(&turns).unwrap();
    std::fs::remove_file(&judging).unwrap();
    stopped(
        "killed",
        &|| judging.exists(),
        nix::sys::signal::Signal::SIGKILL,
        false,
    );
    assert!(
        !l.pkg()
            .join(".bounded-loops/runs/killed/ledger.jsonl")
            .exists(),
        "a killed bl recorded no lap"
    );
    // verify, receipt and report say what the directory is, and how to go on.
    for tool in ["verify", "receipt", "report"] {
        let said = l.bl(&[tool, "pkg/.bounded-loops/runs/killed"]);
        assert_eq!(said.code, 2, "{tool}: {}", said.stderr);
        assert!(
            said.stderr
                .contains("stopped before its first lap was on record")
                && said.stderr.contains("--run-id killed --resume"),
            "{tool}: {}",
            said.stderr
        );
    }
    std::fs::write(&release, "").unwrap();
    let resumed = l.bl(&[
        "run", "pkg", "--yes", "--json", "--run-id", "killed", "--resume",
    ]);
    assert_eq!(resumed.status().1, "DONE", "{}", resumed.stderr);
    assert_eq!(turns_taken(), 1, "the finished turn was paid for once");
    // No line of the killed run counts that turn: the one that judged it does.
    let ledger = l.ledger(".bounded-loops/runs/killed/ledger.jsonl");
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0]["attempted"], true, "{ledger:?}");
    assert!(
        !l.pkg()
            .join(".bounded-loops/runs/killed/turn-finished.json")
            .exists(),
        "the mark goes once the lap is on record"
    );
}

/// A killed bl leaves nothing of its cage running, even when the caged
/// gate first gives up the death signal bl set for it: it clears it, and a
/// thread of its replaces it by exec (a new image keeps no thread's death
/// signal). bl's watchdog ends the cage's cgroup when bl dies.
#[test]
fn a_killed_bl_leaves_nothing_of_its_cage_running_even_when_the_gate_drops_its_death_signal() {
    if !bl_e2e::cage_works() {
        return;
    }
    let marker = format!("bl-e2e-cage-death-{}", std::process::id());
    let l = Loop::stub(
        "sh seed/gate.sh",
        BOUNDS,
        json!([write_doc(json!(1), "done", 1)]),
    );
    l.write("seed/gate.sh", "exec python3 seed/gate.py\n");
    l.write(
        "seed/gate.py",
        &format!(
            "import ctypes, os, threading\n\
             ctypes.CDLL(None).prctl({}, 0, 0, 0, 0)\n\
             script = \"setsid sh -c 'sleep 300; : {marker}' & sh -c 'sleep 300; : {marker}'\"\n\
             threading.Thread(target=lambda: os.execv('/bin/sh', ['sh', '-c', script])).start()\n\
             threading.Event().wait()\n",
            nix::libc::PR_SET_PDEATHSIG
        ),
    );
    let alive = || {
        bl_e2e::live_command_lines()
            .iter()
            .filter(|line| line.contains(&marker))
            .count()
    };
    let mut child = l
        .command(&["run", "pkg", "--yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the gate's daemons", || alive() >= 2);
    child.kill().unwrap();
    child.wait().unwrap();
    wait_until("nothing of the cage left", || alive() == 0);
}

/// A run's throwaway workspace is gone when bl returns (it is removed on
/// a thread of its own while the run finishes, and waited for); one asked
/// to be kept stays, with what the worker wrote.
#[test]
fn the_scratch_workspace_is_gone_when_bl_returns_unless_it_is_kept() {
    if !cage_works() {
        return;
    }
    let l = Loop::stub(
        "python3 seed/check.py",
        BOUNDS,
        json!([write_doc(json!(1), "done", 1)]),
    );
    let temp = tempfile::tempdir().unwrap();
    let scratches = || -> Vec<PathBuf> {
        std::fs::read_dir(temp.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("bounded-loops-")
            })
            .collect()
    };
    let run = |extra: &[&str]| {
        Run::from(
            l.run_command(extra)
                .env("TMPDIR", temp.path())
                .output()
                .unwrap(),
        )
    };
    let r = run(&[]);
    assert_eq!(r.status().0, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(scratches(), Vec::<PathBuf>::new(), "{}", r.stderr);
    let r = run(&["--keep-workspace"]);
    assert_eq!(r.status().0, 0, "{}\n{}", r.stdout, r.stderr);
    let kept = scratches();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        std::fs::read_to_string(kept[0].join("seed/doc.txt")).unwrap(),
        "done\n"
    );
    assert!(
        r.stderr
            .contains(&format!("workspace kept at {}", kept[0].display())),
        "{}",
        r.stderr
    );
}
