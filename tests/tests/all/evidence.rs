//! `bl evidence serve` over real HTTP on loopback: the app's requests, its
//! refusals, a person's signed review, the real `deny-all` policy plugin,
//! a restart that reads the state back from the log, and `bl verify` with
//! the workspace's public key alone.

use std::path::Path;
use std::process::Command;

use bl_e2e::{KillOnDrop, bl_binary, bl_in, http_request, serving};
use serde_json::{Value, json};

struct Service {
    child: std::process::Child,
    url: String,
    token: String,
}

impl Drop for Service {
    /// Stops it as Ctrl-C does, so its last checkpoint is written; killed
    /// only if it does not stop.
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        for _ in 0..100 {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    /// The service for workspace `ws`, deciding with the policy plugin `policy`.
    fn start(dir: &Path, ws: &str, policy: &str) -> Service {
        Service::start_with(dir, ws, policy, "{}")
    }

    /// [`start`](Service::start), the policy given `config`.
    fn start_with(dir: &Path, ws: &str, policy: &str, config: &str) -> Service {
        let (child, url) = serving(&mut Service::command(dir, ws, policy, config), "evidence");
        let token = std::fs::read_to_string(dir.join("token")).unwrap();
        Service { child, url, token }
    }

    /// `bl evidence serve` for workspace `ws` in `dir`, with the keys
    /// [`keys`] made and the policy `policy` given `config`.
    fn command(dir: &Path, ws: &str, policy: &str, config: &str) -> Command {
        let mut command = Command::new(bl_binary());
        command.current_dir(dir).args([
            "evidence",
            "serve",
            "--workspace",
            ws,
            "--key",
            "ws.key",
            "--token-file",
            "token",
            "--reviewer",
            "bob.pub",
            "--policy",
            policy,
            "--policy-config",
            config,
        ]);
        command
    }

    /// (status code, JSON answer)
    fn call(&self, method: &str, path: &str, body: &Value) -> (u16, Value) {
        let auth = format!("Authorization: Bearer {}", self.token.trim());
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let (status, text) = http_request(
            &self.url,
            method,
            path,
            &[&auth, "Content-Type: application/json"],
            &body,
        );
        let code = status.split(' ').nth(1).unwrap_or("0").parse().unwrap();
        (
            code,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

fn keys(dir: &Path) {
    for (name, file) in [
        ("evidence", "ws.key"),
        ("bob", "bob.key"),
        ("mallory", "mallory.key"),
    ] {
        let made = bl_in(dir, &["keys", "generate", "--name", name, "--out", file]);
        assert!(made.status.success(), "{made:?}");
    }
}

/// `review` signed with `key` by `bl evidence sign-review`.
fn sign(dir: &Path, key: &str, review: &Value) -> Value {
    std::fs::write(dir.join("review.json"), review.to_string()).unwrap();
    let signed = bl_in(
        dir,
        &[
            "evidence",
            "sign-review",
            "--key",
            key,
            "--for",
            "ws.pub",
            "review.json",
        ],
    );
    assert!(signed.status.success(), "{signed:?}");
    serde_json::from_slice(&signed.stdout).unwrap()
}

fn decision(op: &str) -> Value {
    json!({"operation_id": op, "thread_id": "t-1", "identity": "alice", "tool": "refund", "args_digest": "sha256:aa"})
}

#[test]
fn an_app_records_decisions_through_the_service_and_anyone_verifies_them_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir);
    let service = Service::start(dir, "ws", "deny-all");

    // No token, no service; the scheme's name in any case.
    let (status, said) = http_request(&service.url, "GET", "/decisions/op-1", &[], b"");
    assert!(status.contains(" 401 "), "{status}");
    assert!(said.contains("no Authorization header"), "{said}");
    let lower = format!("Authorization: bearer {}", service.token.trim());
    let (status, said) = http_request(&service.url, "GET", "/decisions/op-1", &[&lower], b"");
    assert!(
        status.contains(" 404 ") && said.contains("NotCreated"),
        "{status} {said}"
    );
    // A path or a method the API has not is said in its JSON.
    let (code, said) = service.call("GET", "/decision/op-1", &Value::Null);
    assert_eq!(
        (code, said["error"]["code"].clone()),
        (404, json!("NoSuchRoute")),
        "{said}"
    );
    let (code, said) = service.call("DELETE", "/decisions/op-1", &Value::Null);
    assert_eq!(
        (code, said["error"]["code"].clone()),
        (405, json!("NoSuchMethod")),
        "{said}"
    );

    let (code, created) = service.call("POST", "/decisions", &decision("op-1"));
    assert_eq!(
        (code, created["sequence"].clone()),
        (200, json!(1)),
        "{created}"
    );
    let (code, retry) = service.call("POST", "/decisions", &decision("op-1"));
    assert_eq!(
        (code, retry["retry"].clone(), retry["sequence"].clone()),
        (200, json!(true), json!(1))
    );

    // The app cannot record what only a person, the policy or a proposal
    // may, whatever the shape.
    let approval = json!({"event": "human_approved", "reviewer": "bob", "operation_id": "op-1",
        "tool": "refund", "identity": "alice", "thread_id": "t-1", "checkpoint_ns": "ns",
        "interrupt_id": "i", "args_digest": "sha256:aa", "policy_id": "p", "policy_version": "1",
        "expires_at": 4_000_000_000u64});
    let policy = json!({"event": "policy_evaluated", "policy_id": "p", "version": "1",
        "component_digest": "sha256:cc", "input_commitment": "sha256:ii", "allow": true,
        "needs_approval": false, "reason": "forged"});
    let mut create = decision("op-1");
    create["event"] = json!("decision_created");
    for forged in [
        // Named alone, without the fields such an event holds.
        json!({"event": "human_approved"}),
        json!({"event": "policy_evaluated"}),
        json!({"event": "human_rejected", "reviewer": "bob", "reason": "forged"}),
        json!({"event": "reconciled", "reviewer": "bob", "executed": true}),
        approval,
        policy,
        create,
    ] {
        let (code, refused) = service.call("POST", "/decisions/op-1/events", &forged);
        assert_eq!(
            (code, refused["refused"]["code"].clone()),
            (403, json!("NotFromTheApp")),
            "{forged}: {refused}"
        );
    }

    // Nothing is requested before a policy decides.
    let reserve = json!({"event": "tool_requested", "tool": "refund", "args_digest": "sha256:aa"});
    let (code, refused) = service.call("POST", "/decisions/op-1/events", &reserve);
    assert_eq!(
        (code, refused["refused"]["code"].clone()),
        (409, json!("NoPolicy")),
        "{refused}"
    );

    // The policy is the operator's: an app that names one is refused.
    let (code, refused) = service.call(
        "POST",
        "/decisions/op-1/policy",
        &json!({"plugin": "allow-everything"}),
    );
    assert_eq!(
        (code, refused["refused"]["code"].clone()),
        (403, json!("NotFromTheApp"))
    );
    let mut naming = decision("op-1");
    naming["policy"] = json!("allow-everything");
    let (code, refused) = service.call("POST", "/proposals", &naming);
    assert_eq!(
        (
            code,
            refused["refused"]["code"].clone(),
            refused["refused"]["field"].clone()
        ),
        (403, json!("NotFromTheApp"), json!("policy")),
        "{refused}"
    );
    // `reserve` is true or false, and a decision the policy blocks is
    // reserved by no proposal.
    let mut reserving = decision("op-2");
    reserving["reserve"] = json!("yes");
    let (code, refused) = service.call("POST", "/proposals", &reserving);
    assert_eq!(code, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`reserve` is \"yes\""),
        "{refused}"
    );
    reserving["reserve"] = json!(true);
    let (code, blocked) = service.call("POST", "/proposals", &reserving);
    assert_eq!(
        (
            code,
            blocked["stage"].clone(),
            blocked["reservation"].clone()
        ),
        (200, json!("blocked"), Value::Null),
        "{blocked}"
    );

    // The real deny-all policy blocks it, and a block is final.
    let (code, blocked) = service.call("POST", "/decisions/op-1/policy", &Value::Null);
    assert_eq!(
        (code, blocked["stage"].clone()),
        (200, json!("blocked")),
        "{blocked}"
    );
    let (code, refused) = service.call("POST", "/decisions/op-1/events", &reserve);
    assert_eq!(
        (code, refused["refused"]["code"].clone()),
        (409, json!("Blocked"))
    );

    // A review signed by a key the workspace does not trust is no authority.
    let review = json!({"review": "reject", "operation_id": "op-1", "reviewer": "mallory", "reason": "mine"});
    let (code, refused) = service.call("POST", "/reviews", &sign(dir, "mallory.key", &review));
    assert_eq!(
        (code, refused["refused"]["code"].clone()),
        (403, json!("NotAuthority")),
        "{refused}"
    );
    // A review naming someone else than the key's owner is not signed.
    std::fs::write(
        dir.join("review.json"),
        json!({"review": "reject", "operation_id": "op-1", "reviewer": "alice", "reason": "x"})
            .to_string(),
    )
    .unwrap();
    let unsigned = bl_in(
        dir,
        &[
            "evidence",
            "sign-review",
            "--key",
            "bob.key",
            "--for",
            "ws.pub",
            "review.json",
        ],
    );
    assert_eq!(unsigned.status.code(), Some(2), "{unsigned:?}");
    assert!(String::from_utf8_lossy(&unsigned.stderr).contains("names \"alice\""));
    // Bob's, trusted: his rejection of the blocked decision is recorded.
    let review = json!({"review": "reject", "operation_id": "op-1", "reviewer": "bob", "reason": "over the limit"});
    let (code, recorded) = service.call("POST", "/reviews", &sign(dir, "bob.key", &review));
    assert_eq!(
        (code, recorded["stage"].clone()),
        (200, json!("rejected")),
        "{recorded}"
    );

    // A restarted service reads the state back from the log.
    drop(service);
    let service = Service::start(dir, "ws", "deny-all");
    let (code, shown) = service.call("GET", "/decisions/op-1", &Value::Null);
    assert_eq!(
        (code, shown["stage"].clone(), shown["rejected_by"].clone()),
        (200, json!("rejected"), json!("bob"))
    );
    drop(service);

    // A policy that cannot be found, or is configured wrong, could answer
    // nothing: the service refuses to start, naming it.
    for (policy, config, says) in [
        ("no-such-policy", "{}", "no-such-policy"),
        (
            "tool-policy",
            r#"{"allow": "lookup"}"#,
            "the config is not one plugin 'tool-policy' takes: at /allow: ",
        ),
        (
            "tool-policy",
            r#"{"allow": ["lookup"], "deny": []}"#,
            "at /: ",
        ),
    ] {
        let refused = Service::command(dir, "ws2", policy, config)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{said}");
        assert!(
            said.contains(says) && said.contains("nothing was served"),
            "{said}"
        );
    }

    // Anyone with the workspace's public key alone verifies it.
    let public = bl_in(dir, &["keys", "public", "ws.key"]);
    let public = String::from_utf8(public.stdout).unwrap();
    let verified = bl_in(dir, &["verify", "ws", "--pubkey", public.trim(), "--json"]);
    assert!(verified.status.success(), "{verified:?}");
    let report: Value = serde_json::from_slice(&verified.stdout).unwrap();
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check: {report}"))
    };
    assert_eq!(check("signatures")["status"], json!("ok"), "{report}");
    // Its people's decisions are in the log ("evidence"), so there is no
    // approvals.json to report as missing.
    assert!(
        !report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "approvals"),
        "{report}"
    );
    let evidence = check("evidence");
    let detail = evidence["detail"].as_str().unwrap();
    assert!(
        detail.contains("1 rejected")
            && detail.contains("op-1 rejected by bob")
            && detail.contains("Not established"),
        "{detail}"
    );
    // Another key is not the workspace's.
    let other = bl_in(dir, &["keys", "public", "mallory.key"]);
    let other = String::from_utf8(other.stdout).unwrap();
    let refused = bl_in(dir, &["verify", "ws", "--pubkey", other.trim()]);
    assert_eq!(refused.status.code(), Some(1));
    // Bob's review names the workspace's key: the report says it differs
    // from the key given, not that the review is for another workspace.
    let said = String::from_utf8_lossy(&refused.stdout);
    assert!(
        said.contains("not the key given with --pubkey") && !said.contains("another workspace"),
        "{said}"
    );
    // The reviewers you trust: bob's key holds; a list without it fails,
    // naming the review and the key that signed it.
    let verify_trusting = |reviewer: &str| {
        bl_in(
            dir,
            &["verify", "ws", "--pubkey", "ws.pub", "--reviewer", reviewer],
        )
    };
    let trusted = verify_trusting("bob.pub");
    let said = String::from_utf8_lossy(&trusted.stdout);
    assert!(trusted.status.success(), "{said}");
    assert!(
        said.contains("Every review is signed by one of the 1 reviewer key(s) given"),
        "{said}"
    );
    let untrusted = verify_trusting("mallory.pub");
    let said = String::from_utf8_lossy(&untrusted.stdout);
    assert_eq!(untrusted.status.code(), Some(1), "{said}");
    assert!(
        said.contains("op-1 rejected by bob (key ")
            && said.contains("not one of the reviewer keys given (--reviewer)"),
        "{said}"
    );
}

/// A disk that refuses a write half way (the log's file may grow no more:
/// RLIMIT_FSIZE, a real short write and then EFBIG) stops the service
/// recording: the request that hit it is not recorded, and every one
/// after it is refused until a restart. The restart refuses the torn log
/// and says how to recover it; recovered, what was answered stands, the
/// refused decision is unknown, and the workspace verifies.
#[test]
fn a_write_the_disk_refuses_stops_recording_until_the_torn_log_is_recovered() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir);
    let serve = Service::command(dir, "ws", "deny-all", "{}");
    // The shell ignores SIGXFSZ (which would kill bl) and caps any file
    // bl writes at 16 KiB (32 blocks of 512 bytes; a soft limit, so that
    // the room can be given back below); ignored, the signal stays
    // ignored through the exec.
    let mut limited = Command::new("sh");
    limited
        .current_dir(dir)
        .arg("-c")
        .arg(r#"trap "" XFSZ; ulimit -S -f 32; exec "$0" "$@""#)
        .arg(serve.get_program())
        .args(serve.get_args());
    let (child, url) = serving(&mut limited, "evidence");
    let token = std::fs::read_to_string(dir.join("token")).unwrap();
    let service = Service { child, url, token };

    let mut answered = Vec::new();
    let failed = loop {
        let op = format!("op-{}", answered.len());
        let (code, body) = service.call("POST", "/decisions", &decision(&op));
        if code != 200 {
            break (op, code, body);
        }
        answered.push(op);
        assert!(answered.len() < 100, "the log was never refused a write");
    };
    assert!(answered.len() >= 5, "{answered:?} {failed:?}");
    assert_eq!(failed.1, 500, "{failed:?}");
    assert!(
        failed.2["error"]["message"]
            .as_str()
            .unwrap()
            .contains("events.jsonl"),
        "{failed:?}"
    );
    // Broken: nothing more is recorded, not even a decision that would fit.
    let (code, after) = service.call("POST", "/decisions", &decision("op-after"));
    assert_eq!(
        (code, after["error"]["code"].clone()),
        (503, json!("NotRecorded")),
        "{after}"
    );
    assert!(
        after["error"]["message"]
            .as_str()
            .unwrap()
            .contains("restart the service"),
        "{after}"
    );
    // Nor is what it holds in memory shown: it may be ahead of its log.
    for path in [
        format!("/decisions/{}", answered[0]),
        "/decisions".to_string(),
    ] {
        let (code, shown) = service.call("GET", &path, &Value::Null);
        assert_eq!(
            (code, shown["error"]["code"].clone()),
            (503, json!("NotRecorded")),
            "{path}: {shown}"
        );
    }
    // The disk has room again before the service stops (Ctrl-C, so its
    // log is dropped as it would be): what it failed to write is not
    // written again after the part that reached the file.
    let pid = service.child.id() as nix::libc::pid_t;
    let mut room = nix::libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit with a pid, a resource and limits owned here: the
    // service's soft limit raised to its hard one.
    let raised = unsafe {
        nix::libc::prlimit(pid, nix::libc::RLIMIT_FSIZE, std::ptr::null(), &mut room);
        room.rlim_cur = room.rlim_max;
        nix::libc::prlimit(pid, nix::libc::RLIMIT_FSIZE, &room, std::ptr::null_mut())
    };
    assert_eq!(raised, 0, "{}", std::io::Error::last_os_error());
    drop(service);

    // The torn line is never read as an event, nor quietly cut off.
    let mut again = Service::command(dir, "ws", "deny-all", "{}");
    let refused = again.output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    // The error names the file, the line and the command that recovers it.
    let fix = said
        .split_once("run `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(command, _)| command)
        .unwrap_or_else(|| panic!("no fix named: {said}"));
    assert!(said.contains("controller-events.jsonl: line "), "{said}");
    assert!(said.contains("is torn"), "{said}");
    let args: Vec<&str> = fix.split(' ').collect();
    assert_eq!(args[..3], ["bl", "log", "recover"], "{said}");
    let recovered = bl_in(dir, &args[1..]);
    assert!(recovered.status.success(), "{recovered:?}");
    let service = Service::start(dir, "ws", "deny-all");
    let verified = bl_in(dir, &["verify", "ws", "--pubkey", "ws.pub"]);
    assert!(verified.status.success(), "{verified:?}");
    for op in &answered {
        let (code, shown) = service.call("GET", &format!("/decisions/{op}"), &Value::Null);
        assert_eq!(
            (code, shown["stage"].clone()),
            (200, json!("created")),
            "{op}"
        );
    }
    let (code, _) = service.call("GET", &format!("/decisions/{}", failed.0), &Value::Null);
    assert_eq!(code, 404, "the refused decision was recorded");
    let (code, _) = service.call("POST", "/decisions", &decision(&failed.0));
    assert_eq!(code, 200);
    drop(service);
    let verified = bl_in(dir, &["verify", "ws", "--pubkey", "ws.pub"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// The venv with LangGraph and bl's Python client; None (said loudly)
/// without it, except under CI=true, where setup must have made it.
fn langgraph_python() -> Option<std::path::PathBuf> {
    let python = bl_e2e::repo_root().join("target/evidence/venv/bin/python3");
    let ready = python.is_file()
        && Command::new(&python)
            .args(["-c", "import langgraph, bl_evidence"])
            .status()
            .is_ok_and(|s| s.success());
    if ready {
        return Some(python);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but LangGraph and bl_evidence are not installed at {}: scripts/dev test should have made that venv",
        python.display()
    );
    eprintln!("SKIPPED: no LangGraph venv at {}", python.display());
    None
}

/// Runs tests/evidence/SCRIPT with `python` against `service`; its last
/// stdout line, as JSON.
fn run_app(python: &Path, script: &str, dir: &Path, service: &Service) -> Value {
    let out = Command::new(python)
        .arg(script)
        .current_dir(bl_e2e::repo_root().join("tests/evidence"))
        .env("BL", bl_binary())
        .env("BL_EVIDENCE_URL", &service.url)
        .env("BL_EVIDENCE_TOKEN_FILE", dir.join("token"))
        .env("REVIEWER_KEY", dir.join("bob.key"))
        .env("EFFECTS", dir.join(format!("{script}.effects")))
        .env("WORK", dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{script}: {e}: {stdout}"))
}

/// The LangGraph app's policy: lookups pass, refunds need a person,
/// everything else is blocked.
const REFUND_POLICY: &str = r#"{"allow": ["lookup"], "needs_approval": ["refund"]}"#;

/// The LangGraph venv's python, a fresh directory with the keys, and the
/// service deciding with [`REFUND_POLICY`] there; None where the venv is
/// truly absent.
fn langgraph_app_service() -> Option<(std::path::PathBuf, tempfile::TempDir, Service)> {
    let python = langgraph_python()?;
    let tmp = tempfile::tempdir().unwrap();
    keys(tmp.path());
    let service = Service::start_with(tmp.path(), "ws", "tool-policy", REFUND_POLICY);
    Some((python, tmp, service))
}

#[test]
fn a_real_langgraph_app_is_guarded_end_to_end_and_verifies_offline_with_the_key_alone() {
    let Some((python, tmp, service)) = langgraph_app_service() else {
        return;
    };
    let dir = tmp.path();
    let summary = run_app(&python, "scenarios.py", dir, &service);
    let passed: Vec<&str> = summary["passed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for case in [
        "allow",
        "block",
        "approve",
        "reject",
        "resume_is_not_approval",
        "forged_state_is_not_approval",
        "changed_args_are_refused",
        "crash_after_reservation",
        "crash_with_durability_exit",
        "tool_raises",
        "expired_approval",
        "restart_on_sqlite",
        "interrupt_in_a_loop",
        "subgraph_resume",
        "stale_resume_value",
        "two_pauses_in_one_node",
        "model_completed_only_from_the_app",
        "dispatch_lease",
        "async_app",
        "observed_outcomes",
        "user_mistakes",
        "leases",
        "one_node",
    ] {
        assert!(passed.contains(&case), "{case} did not run: {summary}");
    }
    drop(service);

    // Offline, with the workspace's public key alone: the whole workspace,
    // and the bundle exported from it.
    let verified = bl_in(dir, &["verify", "ws", "--pubkey", "ws.pub"]);
    let report = String::from_utf8_lossy(&verified.stdout);
    assert!(verified.status.success(), "{report}");
    assert!(
        report.contains("approved by bob (key ")
            && report.contains("for alice@example.com")
            && report.contains("rejected by bob")
            && report.contains("Not established"),
        "{report}"
    );
    let exported = bl_in(dir, &["evidence", "export", "ws", "--out", "bundle"]);
    assert!(exported.status.success(), "{exported:?}");
    let bundle = bl_in(dir, &["verify", "bundle", "--pubkey", "ws.pub"]);
    assert!(bundle.status.success(), "{bundle:?}");
    let other = bl_in(dir, &["verify", "bundle", "--pubkey", "mallory.pub"]);
    assert!(
        !other.status.success(),
        "a bundle verified with another key"
    );
    // A bundle stripped of its checkpoints is anyone's to have written.
    for entry in std::fs::read_dir(dir.join("bundle/checkpoints")).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let stripped = bl_in(dir, &["verify", "bundle", "--pubkey", "ws.pub"]);
    assert!(!stripped.status.success(), "{stripped:?}");
    assert!(
        String::from_utf8_lossy(&stripped.stdout).contains("under no checkpoint signed by the key"),
        "{stripped:?}"
    );
    // Without a key it passes, and says what that does not establish.
    let unkeyed = bl_in(dir, &["verify", "bundle"]);
    let said = String::from_utf8_lossy(&unkeyed.stdout);
    assert!(unkeyed.status.success(), "{said}");
    assert!(
        said.lines().last().is_some_and(
            |l| l.starts_with("VERIFIED (integrity only: without --pubkey, not who wrote it")
        ),
        "{said}"
    );
    let keyed = String::from_utf8_lossy(&verified.stdout);
    assert_eq!(keyed.lines().last(), Some("VERIFIED"), "{keyed}");
}

#[test]
fn an_app_killed_at_every_step_boundary_never_repeats_an_effect() {
    let Some((python, tmp, service)) = langgraph_app_service() else {
        return;
    };
    let dir = tmp.path();
    let summary = run_app(&python, "torture.py", dir, &service);
    // Six recordings, each killed in flight and after its answer, and the
    // tool's own effect: a kill at each, and one run never killed.
    assert_eq!(summary["boundaries"], json!(13), "{summary}");
    assert_eq!(summary["duplicates"], json!(0), "{summary}");
    let ended = summary["executed_once"].as_u64().unwrap()
        + summary["reconciliation_required"].as_u64().unwrap();
    assert_eq!(ended, 14, "{summary}");
    // Killed inside the tool, after its effect: whether it ran is for a
    // person to say, never replayed.
    let in_tool = summary["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kill_at"] == "tool")
        .unwrap();
    assert_eq!(in_tool["stage"], "reconciliation_required", "{summary}");
    assert_eq!(in_tool["effects"], json!(1), "{summary}");
}

/// The app docs/evidence.md shows, as written there: it pauses for a
/// person, `bl evidence approve` approves from another process, and the
/// refund is made once.
#[test]
fn the_documented_langgraph_app_runs_as_written() {
    use std::io::BufRead;
    let Some(python) = langgraph_python() else {
        return;
    };
    let doc = std::fs::read_to_string(bl_e2e::repo_root().join("docs/evidence.md")).unwrap();
    let example = doc
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("docs/evidence.md shows a Python app");
    assert!(
        example.lines().count() < 40,
        "the example is 40 lines or more"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir);
    std::fs::write(dir.join("app.py"), example).unwrap();
    let service = Service::start_with(
        dir,
        "ws",
        "tool-policy",
        r#"{"needs_approval": ["refund"]}"#,
    );
    let mut app = Command::new(&python)
        .arg("app.py")
        .current_dir(dir)
        .env("BL_EVIDENCE_URL", &service.url)
        .env("BL_EVIDENCE_TOKEN_FILE", dir.join("token"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(app.stdout.take().unwrap()).lines();
    let waiting = lines.next().unwrap().unwrap();
    let operation = waiting
        .strip_prefix("waiting for: bl evidence approve ")
        .unwrap_or_else(|| panic!("{waiting}"));
    // `bl evidence VERB OPERATION` as bob, at `url`, with `extra`.
    let review = |verb: &str, url: &str, extra: &[&str]| {
        let mut args = vec![
            "evidence",
            verb,
            operation,
            "--key",
            "bob.key",
            "--url",
            url,
            "--token-file",
            "token",
        ];
        args.extend_from_slice(extra);
        bl_in(dir, &args)
    };
    // A dry run shows what would be signed, and signs nothing.
    let shown = review("approve", &service.url, &["--dry-run"]);
    let said = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success(), "{shown:?}");
    assert!(
        said.contains(&format!(
            "would be approved {operation}: refund for alice@example.com"
        )) && said.contains("dry run: nothing was signed or submitted")
            && said.contains("would be signed by bob for workspace evidence+"),
        "{said}"
    );
    let (_, standing) = service.call("GET", &format!("/decisions/{operation}"), &Value::Null);
    assert_eq!(standing["stage"], "awaiting_approval", "{standing}");
    // An approval for ever is no bound: refused before anything is signed.
    for forever in ["99999999999h", "0s"] {
        let refused = review("approve", &service.url, &["--valid-for", forever]);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{said}");
        assert!(said.contains("an approval holds from 1s to"), "{said}");
    }
    let approved = review("approve", &service.url, &["--for", "ws.pub"]);
    assert!(approved.status.success(), "{approved:?}");
    let done = lines.next().unwrap().unwrap();
    assert_eq!(done, "executed {'refunded': '42', 'amount': 30}");
    assert!(app.wait().unwrap().success());
    let reject = |url: &str, extra: &[&str]| {
        let mut args = vec!["--reason", "x"];
        args.extend_from_slice(extra);
        review("reject", url, &args)
    };
    // A reviewer who expects another workspace's key signs nothing.
    let elsewhere = reject(&service.url, &["--for", "mallory.pub"]);
    assert_eq!(elsewhere.status.code(), Some(2), "{elsewhere:?}");
    assert!(String::from_utf8_lossy(&elsewhere.stderr).contains("nothing was signed"));
    // A service that is gone decides nothing: exit 3, not a refusal.
    let url = service.url.clone();
    drop(service);
    let unreached = reject(&url, &[]);
    assert_eq!(unreached.status.code(), Some(3), "{unreached:?}");
}

/// `serve --socket`: a socket only its owner may open, an existing file
/// never replaced, the Python client and `bl evidence reject` over it,
/// the socket gone when the service stops; and a service killed (-9)
/// with a tool reserved, under an app whose client stays open.
#[test]
fn the_service_listens_on_an_owner_only_unix_socket() {
    use std::io::BufRead;
    use std::os::unix::fs::PermissionsExt;
    let Some(python) = langgraph_python() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir);
    let start = |ws: &str| {
        Service::command(dir, ws, "tool-policy", REFUND_POLICY)
            .args(["--socket", "ev.sock"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut child = start("ws");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "evidence: unix:ev.sock");
    let mode = std::fs::metadata(dir.join("ev.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "the socket is open to others: {mode:o}");

    // A second service is refused the same path, and leaves it alone.
    let second = start("ws2").wait_with_output().unwrap();
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("ev.sock exists"));
    assert!(dir.join("ev.sock").exists());

    let script = r#"
import sys
from bl_evidence import CoreClient, Refused
client = CoreClient("unix:ev.sock", token_file="token")
lookup = client.propose(operation_id="op-l", thread_id="t", identity="alice", tool="lookup", args_digest="sha256:aa")
assert lookup.stage == "cleared", lookup
assert not client.reserve("op-l", tool="lookup", args_digest="sha256:aa").retry
assert client.executed("op-l", ok=True).stage == "executed"
refund = client.propose(operation_id="op-r", thread_id="t", identity="alice", tool="refund", args_digest="sha256:bb")
assert refund.stage == "awaiting_approval", refund
print("ok")
"#;
    let ran = Command::new(&python)
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(ran.status.success(), "{ran:?}");
    // A reviewer's mistakes are said plainly, and decide nothing: a token
    // that is not the service's, and a key the service was not started with.
    std::fs::write(dir.join("other-token"), "not-the-token\n").unwrap();
    std::fs::set_permissions(
        dir.join("other-token"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // The service's own token, in a copy others may read: no secret, so
    // refused by the reviewer's command and the app's client as by serve.
    std::fs::copy(dir.join("token"), dir.join("shared-token")).unwrap();
    std::fs::set_permissions(
        dir.join("shared-token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let shared = Command::new(&python)
        .args([
            "-c",
            "from bl_evidence import CoreClient\ntry:\n    CoreClient('unix:ev.sock', token_file='shared-token')\nexcept PermissionError as e:\n    print(e)",
        ])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&shared.stdout)
            .contains("others may read this token file: chmod 600 it"),
        "{shared:?}"
    );
    let reject_as = |key: &str, token: &str, more: &[&str]| {
        let mut args = vec![
            "evidence",
            "reject",
            "op-r",
            "--reason",
            "no",
            "--key",
            key,
            "--url",
            "unix:ev.sock",
            "--token-file",
            token,
        ];
        args.extend_from_slice(more);
        bl_in(dir, &args)
    };
    for (key, token, says) in [
        (
            "bob.key",
            "other-token",
            "the service refused the token (bl evidence: the token is not this server's;",
        ),
        (
            "mallory.key",
            "token",
            "restart `bl evidence serve` with --reviewer KEY.pub",
        ),
        (
            "bob.key",
            "shared-token",
            "shared-token: others may read it: chmod 600 it",
        ),
    ] {
        let refused = reject_as(key, token, &[]);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{refused:?}");
        assert!(said.contains(says) && !said.contains("\\\""), "{said}");
    }
    let help = bl_in(dir, &["evidence", "approve", "--help"]);
    assert!(
        String::from_utf8_lossy(&help.stdout).starts_with("Approve the pause a decision is at"),
        "{help:?}"
    );
    let rejected = reject_as("bob.key", "token", &["--for", "ws.pub"]);
    assert!(rejected.status.success(), "{rejected:?}");
    assert!(String::from_utf8_lossy(&rejected.stdout).contains("op-r: now rejected"));

    // Stopped, it takes its socket with it.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let stopped = child.wait().unwrap();
    assert!(
        stopped.code().is_some(),
        "it did not stop by itself: {stopped:?}"
    );
    assert!(!dir.join("ev.sock").exists());
    let down = reject_as("bob.key", "token", &[]);
    assert!(
        String::from_utf8_lossy(&down.stderr)
            .contains("no evidence service answers there (No such file or directory (os error 2)); start it with `bl evidence serve`"),
        "{down:?}"
    );

    // A killed service leaves its socket: the next one replaces it. A
    // file that is not a socket is never replaced.
    let serving_at = |child: &mut std::process::Child| {
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line.trim().to_string()
    };
    // An app's client keeps its connection open across the service's
    // death: its next call goes out on a fresh connection to whichever
    // service listens now, and while none does, it says so (Unavailable).
    // A service killed with a tool reserved finds, restarted, that whether
    // it ran is unknown: reconciliation, and no second reservation.
    let mut app = Command::new(&python)
        .args(["-c", KEPT_OPEN])
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut asks = app.stdin.take().unwrap();
    let mut answers = std::io::BufReader::new(app.stdout.take().unwrap()).lines();
    let mut ask = |expression: &str| {
        use std::io::Write;
        writeln!(asks, "{expression}").unwrap();
        answers.next().unwrap().unwrap()
    };
    let stage = "client.decision('op-k')['stage']";
    let reserve = "client.reserve('op-k', tool='lookup', args_digest='sha256:kk').retry";
    let mut killed = start("ws");
    assert_eq!(serving_at(&mut killed), "evidence: unix:ev.sock");
    assert_eq!(
        ask(
            "client.propose(operation_id='op-k', thread_id='t', identity='alice', tool='lookup', args_digest='sha256:kk').stage"
        ),
        "ok cleared"
    );
    assert_eq!(ask(reserve), "ok False");
    // Threads sharing the client (as a LangGraph step's nodes may) each
    // get their own answer.
    assert_eq!(
        ask(
            "all(__import__('concurrent.futures').futures.ThreadPoolExecutor(8).map(lambda i: client.decision(('op-k', 'op-l')[i % 2])['operation_id'] == ('op-k', 'op-l')[i % 2], range(400)))"
        ),
        "ok True"
    );
    killed.kill().unwrap();
    killed.wait().unwrap();
    assert!(dir.join("ev.sock").exists());
    let mut again = start("ws");
    assert_eq!(serving_at(&mut again), "evidence: unix:ev.sock");
    assert_eq!(
        ask(stage),
        "ok reconciliation_required",
        "the kept connection was to the killed service"
    );
    assert_eq!(ask(reserve), "refused: ReconciliationRequired");
    again.kill().unwrap();
    again.wait().unwrap();
    // The operator is told at the start, not only whoever asks.
    let mut told = String::new();
    std::io::Read::read_to_string(&mut again.stderr.take().unwrap(), &mut told).unwrap();
    assert!(
        told.contains("1 decision(s) were reserved when the service last stopped (op-k); whether their tools ran is unknown, so they now await reconciliation: bl evidence reconcile op-k --executed true|false"),
        "{told}"
    );
    let down = ask(stage);
    assert!(
        down.starts_with("unavailable: the evidence service at ev.sock"),
        "{down}"
    );
    let mut back = start("ws");
    assert_eq!(serving_at(&mut back), "evidence: unix:ev.sock");
    assert_eq!(ask(stage), "ok reconciliation_required");
    back.kill().unwrap();
    back.wait().unwrap();
    let _ = app.kill();
    let _ = app.wait();
    std::fs::remove_file(dir.join("ev.sock")).unwrap();
    std::fs::write(dir.join("ev.sock"), "not a socket").unwrap();
    let refused = start("ws").wait_with_output().unwrap();
    assert!(!refused.status.success());
    assert_eq!(
        std::fs::read_to_string(dir.join("ev.sock")).unwrap(),
        "not a socket"
    );
}

/// An app on one kept-open client: each line it reads is a Python
/// expression on `client`; it prints what came of it.
const KEPT_OPEN: &str = r#"
import sys
from bl_evidence import CoreClient, Refused, Unavailable
client = CoreClient("unix:ev.sock", token_file="token")
for line in sys.stdin:
    try:
        print("ok", eval(line), flush=True)
    except Refused as e:
        print("refused:", e.code, flush=True)
    except Unavailable as e:
        print("unavailable:", e, flush=True)
"#;

/// The digest the console page shows on `operation`'s card.
fn shown_on(page: &str, operation: &str) -> String {
    page.split(&format!(r#"data-operation="{operation}""#))
        .nth(1)
        .and_then(|card| card.split("shown ").nth(1))
        .and_then(|s| s.split('<').next())
        .unwrap_or_else(|| panic!("no card for {operation}: {page}"))
        .to_string()
}

/// The `Origin` header of the page at `url`.
fn origin_of(url: &str) -> String {
    format!(
        "Origin: {}",
        url.split('/').take(3).collect::<Vec<_>>().join("/")
    )
}

/// `bl evidence console`: a reviewer's page in a real browser. It lists
/// what waits for a person; a click signs with the reviewer's key, bound
/// to what the card showed; a decision that changed since is refused with
/// nothing signed, and a key the workspace does not trust is no authority.
#[test]
fn a_reviewer_decides_in_the_evidence_console_and_signs_only_what_they_saw() {
    if !crate::browser::available(true) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    keys(dir);
    let service = Service::start_with(dir, "ws", "tool-policy", REFUND_POLICY);
    let propose = |op: &str, tool: &str| {
        let mut asked = decision(op);
        asked["tool"] = json!(tool);
        let (code, proposed) = service.call("POST", "/proposals", &asked);
        assert_eq!(code, 200, "{proposed}");
        proposed["stage"].as_str().unwrap().to_string()
    };
    let event = |op: &str, event: Value| {
        let (code, answer) = service.call("POST", &format!("/decisions/{op}/events"), &event);
        assert_eq!(code, 200, "{answer}");
    };
    let pause = |op: &str, interrupt: &str| {
        event(
            op,
            json!({"event": "approval_requested", "checkpoint_ns": "refund:1", "interrupt_id": interrupt}),
        );
    };
    for op in ["op-a", "op-c", "op-e"] {
        assert_eq!(propose(op, "refund"), "awaiting_approval");
        pause(op, &format!("{op}-1"));
    }
    // op-b and op-f: reserved, then their calls' outcomes were lost.
    for op in ["op-b", "op-f"] {
        assert_eq!(propose(op, "lookup"), "cleared");
        event(
            op,
            json!({"event": "tool_requested", "tool": "lookup", "args_digest": "sha256:aa"}),
        );
        event(
            op,
            json!({"event": "reconciliation_required", "cause": "the callback raised"}),
        );
    }
    // Created, never paused: nothing a person can answer yet.
    assert_eq!(propose("op-d", "refund"), "awaiting_approval");

    let console = |key: &str| {
        let mut command = Command::new(bl_binary());
        command.current_dir(dir).args([
            "evidence",
            "console",
            "--key",
            key,
            "--url",
            &service.url,
            "--token-file",
            "token",
            "--for",
            "ws.pub",
        ]);
        let (child, url) = serving(&mut command, "console");
        (KillOnDrop(child), url)
    };
    let (_bob, url) = console("bob.key");
    let origin = origin_of(&url);
    let post = |url: &str, headers: &[&str], body: &Value| {
        let (status, text) =
            http_request(url, "POST", "decide", headers, body.to_string().as_bytes());
        (
            status
                .split(' ')
                .nth(1)
                .unwrap_or("0")
                .parse::<u16>()
                .unwrap(),
            text,
        )
    };
    let (status, page) = http_request(&url, "GET", "", &[], b"");
    assert!(status.contains("200"), "{status}");
    for shown in ["op-a", "op-b", "op-c"] {
        assert!(
            page.contains(&format!(r#"data-operation="{shown}""#)),
            "{page}"
        );
    }
    assert!(
        !page.contains(r#"data-operation="op-d""#),
        "op-d is not paused: {page}"
    );
    let shown_c = shown_on(&page, "op-c");
    let wrong_token = url.replace(&url[url.len() - 9..url.len() - 1], "00000000");
    assert_eq!(post(&wrong_token, &[&origin], &json!({})).0, 404);
    let asked = json!({"operation_id": "op-c", "decision": "approved", "shown": shown_c});
    let json = "Content-Type: application/json";
    assert_eq!(post(&url, &[json], &asked).0, 403, "no Origin");
    assert_eq!(
        post(&url, &[&origin, "Content-Type: text/plain"], &asked).0,
        415,
        "not JSON"
    );
    assert_eq!(
        post(&url, &["Origin: http://127.0.0.1:1", json], &asked).0,
        403,
        "a foreign Origin"
    );
    // The app paused op-c again (a new interrupt) after the page was shown:
    // the card's approval would answer a pause that is no longer current.
    pause("op-c", "op-c-2");
    let (code, said) = post(&url, &[&origin, json], &asked);
    assert_eq!(code, 409, "{said}");
    assert!(
        said.contains("changed since it was shown") && said.contains("nothing was signed"),
        "{said}"
    );
    let (_, standing) = service.call("GET", "/decisions/op-c", &Value::Null);
    assert_eq!(standing["approval"], Value::Null, "{standing}");

    let (approved, reconciled, rejected, ran) =
        crate::browser::Driver::start().drive(async |client| {
            use fantoccini::Locator;
            crate::browser::open(client, &url).await;
            crate::browser::assert_not_blank(client, "evidence console").await;
            let card = |op: &str| format!(r#"section.approval[data-operation="{op}"]"#);
            let approved = crate::browser::decide(client, &card("op-a"), "approved").await;
            let reconciled = crate::browser::decide(client, &card("op-b"), "not_executed").await;
            client
                .find(Locator::Css(&format!("{} input.reason", card("op-e"))))
                .await
                .unwrap()
                .send_keys("over the limit")
                .await
                .unwrap();
            let rejected = crate::browser::decide(client, &card("op-e"), "rejected").await;
            let ran = crate::browser::decide(client, &card("op-f"), "executed").await;
            (approved, reconciled, rejected, ran)
        });
    assert!(
        approved.contains("approved op-a: refund for alice in thread t-1, arguments sha256:aa")
            && approved.contains("at pause refund:1 / op-a-1")
            && approved.contains("op-a: now cleared"),
        "{approved}"
    );
    assert!(
        reconciled.contains("reconciled op-b: the tool did not run")
            && reconciled.contains("op-b: now abandoned"),
        "{reconciled}"
    );
    assert!(
        rejected.contains("rejected op-e: over the limit")
            && rejected.contains("op-e: now rejected"),
        "{rejected}"
    );
    assert!(
        ran.contains("reconciled op-f: the tool did run") && ran.contains("op-f: now executed"),
        "{ran}"
    );
    let (_, standing) = service.call("GET", "/decisions/op-a", &Value::Null);
    assert_eq!(
        (&standing["stage"], &standing["approval"]["reviewer"]),
        (&json!("cleared"), &json!("bob")),
        "{standing}"
    );

    // Mallory's console signs, and the service refuses her: no authority.
    let (_mallory, url) = console("mallory.key");
    let (_, page) = http_request(&url, "GET", "", &[], b"");
    let shown_c = shown_on(&page, "op-c");
    let origin = origin_of(&url);
    let mallory_rejects =
        json!({"operation_id": "op-c", "decision": "rejected", "shown": shown_c, "reason": "mine"});
    let (code, said) = post(&url, &[&origin, json], &mallory_rejects);
    assert_eq!(code, 409, "{said}");
    assert!(said.contains("NotAuthority"), "{said}");
    let (_, standing) = service.call("GET", "/decisions/op-c", &Value::Null);
    assert_eq!(standing["stage"], "awaiting_approval", "{standing}");

    // With the service gone, nothing is decided, and the console says so
    // as a failed gateway, not as a refusal.
    drop(service);
    let (code, said) = post(&url, &[&origin, json], &mallory_rejects);
    assert_eq!(code, 502, "{said}");
    assert!(said.contains("evidence: "), "{said}");
    let (status, _) = http_request(&url, "GET", "", &[], b"");
    assert!(status.contains(" 502 "), "{status}");
}

/// Without `--key`, a workspace gets a signing key of its own on first use:
/// 0600, in bl's keys directory with its public half beside it, never
/// inside the workspace (a copy of it carries no key); the same workspace
/// reached by another path is served with the same key, not a new one.
#[test]
fn a_workspace_served_without_a_key_gets_its_own_and_keeps_it() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = dir.join("config");
    let keys_dir = config.join("bl/keys");
    let serve = |ws: &str| {
        let mut command = Command::new(bl_binary());
        command
            .current_dir(dir)
            .env("XDG_CONFIG_HOME", &config)
            .args([
                "evidence",
                "serve",
                "--workspace",
                ws,
                "--token-file",
                "token",
                "--policy",
                "deny-all",
            ]);
        let (mut child, _) = serving(&mut command, "evidence");
        let _ = child.kill();
        let _ = child.wait();
    };
    let key_files = || {
        let mut names: Vec<String> = std::fs::read_dir(&keys_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    serve("ws");
    let made = key_files();
    assert_eq!(made.len(), 2, "{made:?}");
    assert!(
        made[0].starts_with("evidence-") && made[0].ends_with(".key"),
        "{made:?}"
    );
    assert_eq!(made[1], made[0].replace(".key", ".pub"), "{made:?}");
    let key = keys_dir.join(&made[0]);
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the workspace's key is its owner's alone");
    let text = std::fs::read(&key).unwrap();
    let in_workspace: Vec<_> = walk(&dir.join("ws"))
        .into_iter()
        .filter(|p| std::fs::read(p).is_ok_and(|b| b == text))
        .collect();
    assert!(in_workspace.is_empty(), "{in_workspace:?}");
    std::os::unix::fs::symlink(dir.join("ws"), dir.join("alias")).unwrap();
    serve("alias");
    assert_eq!(key_files(), made, "the same workspace, the same key");
    assert_eq!(std::fs::read(&key).unwrap(), text);
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
