//! `bl graph console`: the newcomer's first graph, paused at its `review`
//! approval, approved from the console page in real headless Chromium
//! (a real click, through chromedriver), after which the run completes and
//! the console stops by itself; and, over raw HTTP, every request the
//! console must refuse: a wrong token, a foreign or missing Origin, a body
//! over 8 KiB, a body that is not JSON, and a decision on evidence other
//! than what the page showed.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use bl_e2e::{bl_binary, http_request as request};

/// The first graph, run until it waits on `review`.
fn paused_run() -> tempfile::TempDir {
    let case = bl_e2e::first_graph();
    let run = Command::new(bl_binary())
        .args(bl_e2e::RECORDED_GRAPH_RUN)
        .args(["--out", "run"])
        .current_dir(case.path())
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(3), "paused for approval: {run:?}");
    case
}

/// `bl graph console` on a free port, and the page's address.
fn console(dir: &Path) -> (Child, String) {
    console_with(dir, &[])
}

/// `bl graph console` with `extra` arguments.
fn console_with(dir: &Path, extra: &[&str]) -> (Child, String) {
    bl_e2e::serving(
        Command::new(bl_binary())
            .args([
                "graph",
                "console",
                "--run",
                "run",
                "--inputs",
                "inputs.json",
                "--recorded",
                "replies.json",
            ])
            .args(extra)
            .current_dir(dir),
        "console",
    )
}

fn run_state(dir: &Path) -> String {
    let out = Command::new(bl_binary())
        .args(["graph", "status", "--run", "run", "--json"])
        .current_dir(dir)
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    status["run_state"]
        .as_str()
        .or(status["state"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_console_refuses_a_wrong_token_a_foreign_origin_a_large_body_and_changed_evidence() {
    let case = paused_run();
    let (mut child, url) = console(case.path());
    let origin = {
        let rest = url.strip_prefix("http://").unwrap();
        format!("Origin: http://{}", &rest[..rest.find('/').unwrap()])
    };
    let approvals = || std::fs::read_to_string(case.path().join("run/approvals.json")).ok();
    let before = approvals();
    let stale = format!(
        r#"{{"node":"review","decision":"approved","request_digest":"sha256:{}"}}"#,
        "0".repeat(64)
    );
    let json = "Content-Type: application/json";

    let wrong = url.replace(&url[url.len() - 33..url.len() - 1], &"f".repeat(32));
    assert!(request(&wrong, "GET", "", &[], b"").0.contains("404"));
    let (status, page) = request(&url, "GET", "", &[], b"");
    assert!(status.contains("200"), "{status}");
    assert!(page.contains(r#"data-node="review""#), "{page}");
    // Hardened: not framed, not sniffed, not kept, no referrer, and a
    // policy in the page that runs only its own script.
    let headers = bl_e2e::http_headers(&url, "");
    for wanted in [
        "x-frame-options: deny",
        "x-content-type-options: nosniff",
        "cache-control: no-store",
        "referrer-policy: no-referrer",
        "content-security-policy: frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'",
    ] {
        assert!(
            headers.iter().any(|h| h == wanted),
            "{wanted} in {headers:?}"
        );
    }
    assert!(
        page.contains("script-src 'sha256-"),
        "the page's own policy"
    );
    assert!(
        request(&url, "POST", "decide", &[json], stale.as_bytes())
            .0
            .contains("403")
    );
    assert!(
        request(
            &url,
            "POST",
            "decide",
            &[json, "Origin: http://evil.example"],
            stale.as_bytes()
        )
        .0
        .contains("403")
    );
    let huge = format!(r#"{{"node":"{}"}}"#, "x".repeat(9000));
    assert!(
        request(&url, "POST", "decide", &[json, &origin], huge.as_bytes())
            .0
            .contains("413")
    );
    assert!(
        request(
            &url,
            "POST",
            "decide",
            &["Content-Type: text/plain", &origin],
            stale.as_bytes()
        )
        .0
        .contains("415")
    );
    // A body that never comes is given up on, not waited for.
    let started = Instant::now();
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut slow = std::net::TcpStream::connect(host).unwrap();
    use std::io::{Read, Write};
    write!(
        slow,
        "POST {path}decide HTTP/1.0\r\nHost: {host}\r\n{json}\r\n{origin}\r\nContent-Length: 64\r\n\r\n{{"
    )
    .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.0 4"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let (status, said) = request(&url, "POST", "decide", &[json, &origin], stale.as_bytes());
    assert!(status.contains("409"), "{status}");
    assert!(said.contains("changed since it was shown"), "{said}");
    assert_eq!(approvals(), before, "nothing was recorded");
    assert_eq!(run_state(case.path()), "RUNNING");
    assert!(
        child.try_wait().unwrap().is_none(),
        "still serving after refusals"
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// Two decisions sent at the same moment: one is recorded, the other is
/// refused, never both.
#[test]
fn two_decisions_at_once_record_one() {
    let case = paused_run();
    let (mut child, url) = console(case.path());
    let origin = {
        let rest = url.strip_prefix("http://").unwrap();
        format!("Origin: http://{}", &rest[..rest.find('/').unwrap()])
    };
    let (_, page) = request(&url, "GET", "", &[], b"");
    let at = page
        .find(r#"data-request=""#)
        .expect("the page names its request")
        + 14;
    let digest = page[at..at + page[at..].find('"').unwrap()].to_string();
    let answers: Vec<String> = std::thread::scope(|scope| {
        let sent: Vec<_> = ["approved", "rejected"]
            .into_iter()
            .map(|decision| {
                let (url, origin, digest) = (&url, &origin, &digest);
                scope.spawn(move || {
                    let body = format!(
                        r#"{{"node":"review","decision":"{decision}","request_digest":"{digest}"}}"#
                    );
                    let json = "Content-Type: application/json";
                    request(url, "POST", "decide", &[json, origin], body.as_bytes()).0
                })
            })
            .collect();
        sent.into_iter().map(|s| s.join().unwrap()).collect()
    });
    let recorded = answers.iter().filter(|a| a.contains(" 200")).count();
    let refused = answers.iter().filter(|a| a.contains(" 409")).count();
    assert_eq!((recorded, refused), (1, 1), "{answers:?}");
    let state = run_state(case.path());
    assert!(
        state == "SUCCEEDED" || state == "FAILED",
        "one decision drove the run: {state}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_click_on_approve_in_the_browser_records_the_decision_and_the_run_completes() {
    if !crate::browser::available(true) {
        return;
    }
    let case = paused_run();
    let (mut child, url) = console(case.path());
    let (evidence, outcome) = crate::browser::Driver::start().drive(async |client| {
        use fantoccini::Locator;
        crate::browser::open(client, &url).await;
        let card = client
            .find(Locator::Css(r#"section.approval[data-node="review"]"#))
            .await
            .unwrap();
        let evidence = card.text().await.unwrap();
        crate::browser::assert_not_blank(client, "console").await;
        let outcome = crate::browser::approve(client, "review").await;
        (evidence, outcome)
    });
    assert!(
        evidence.contains("sha256:")
            && evidence.contains("workspace/brief.md from write-brief")
            && evidence.contains(" bytes"),
        "the evidence is in view, named, with its size: {evidence}"
    );
    assert_eq!(outcome, "approved: recorded. The run is now SUCCEEDED.");
    // Used once, the console stops by itself.
    let until = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < until, "the console did not stop after use");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success());
    assert_eq!(run_state(case.path()), "SUCCEEDED");
}

/// An approval node inside a subgraph's child run is on the console by
/// its path, with the evidence it approves there; a click decides it and
/// drives the parent, whose child goes on to the end.
#[test]
fn a_click_in_the_console_approves_a_node_inside_a_subgraph() {
    if !crate::browser::available(true) {
        return;
    }
    let case = crate::graph_artifacts::subgraph_paused_at_approval();
    let (mut child, url) = bl_e2e::serving(
        Command::new(bl_binary())
            .args(["graph", "console", "--run", "r", "--inputs", "inputs.json"])
            .args(["--recorded", "replies.json", "--loop-roots", "roots"])
            .current_dir(case.path(".")),
        "console",
    );
    let (evidence, outcome) = crate::browser::Driver::start().drive(async |client| {
        use fantoccini::Locator;
        crate::browser::open(client, &url).await;
        let card = client
            .find(Locator::Css(r#"section.approval[data-node="inner/hold"]"#))
            .await
            .unwrap();
        let evidence = card.text().await.unwrap();
        let outcome = crate::browser::approve(client, "inner/hold").await;
        (evidence, outcome)
    });
    assert!(
        evidence.contains("workspace/made.txt from make"),
        "the child's evidence, named: {evidence}"
    );
    assert_eq!(outcome, "approved: recorded. The run is now SUCCEEDED.");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(case.states("r")["after"], "SUCCEEDED");
    assert_eq!(case.states("r")["inner"], "SUCCEEDED");
}

#[test]
fn the_state_of_a_paused_run_reads_as_markdown_with_what_waits_for_a_decision() {
    let case = paused_run();
    let out = Command::new(bl_binary())
        .args(["graph", "status", "--run", "run", "--format", "md"])
        .current_dir(case.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let md = String::from_utf8(out.stdout).unwrap();
    assert!(md.starts_with("# Run run\n\n> LOCAL/UNVERIFIED:"), "{md}");
    assert!(
        md.contains("- **Waiting for a decision:** review\n"),
        "{md}"
    );
    assert!(
        md.contains("| review | approval | AWAITING_APPROVAL | 1 |"),
        "{md}"
    );
    assert!(md.contains("| publish | publish | PENDING | 0 |"), "{md}");
    assert!(md.contains("| write-brief | review | — |"), "{md}");
}

/// With `--key`, a decision made in the console is signed on the same
/// path as `bl graph approve`: `bl verify` holds the signature against the
/// key's public half, and the run completes.
#[test]
fn a_decision_made_in_a_console_with_a_key_is_signed_and_verifies() {
    let case = paused_run();
    let made = bl_e2e::bl_in(
        case.path(),
        &[
            "keys",
            "generate",
            "--name",
            "reviewer",
            "--out",
            "reviewer.key",
        ],
    );
    assert!(made.status.success(), "{made:?}");
    let (mut child, url) = console_with(case.path(), &["--key", "reviewer.key"]);
    let (_, page) = request(&url, "GET", "", &[], b"");
    let digest = page
        .split(r#"data-node="review" data-request=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the page names the request it shows")
        .to_string();
    let origin = {
        let rest = url.strip_prefix("http://").unwrap();
        format!("Origin: http://{}", &rest[..rest.find('/').unwrap()])
    };
    let body = format!(r#"{{"node":"review","decision":"approved","request_digest":"{digest}"}}"#);
    let (status, said) = request(
        &url,
        "POST",
        "decide",
        &[&origin, "Content-Type: application/json"],
        body.as_bytes(),
    );
    assert!(status.contains("200"), "{status} {said}");
    let _ = child.wait();
    assert_eq!(run_state(case.path()), "SUCCEEDED");
    let verify = bl_e2e::bl_in(
        case.path(),
        &["verify", "run", "--json", "--pubkey", "reviewer.pub"],
    );
    let report: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap();
    let approvals = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "approvals")
        .unwrap();
    assert_eq!(approvals["status"], "ok", "{report}");
    assert!(
        approvals["detail"]
            .as_str()
            .unwrap()
            .contains("1 signatures hold"),
        "{approvals}"
    );
}

/// A page shown in one repair round cannot approve the next: `gate` is
/// shown in round 0, decided meanwhile on the command line, and asked
/// again in round 1 after the repair; the click on the page as it was
/// shown is refused, and nothing more is recorded.
#[test]
fn a_click_on_evidence_that_changed_since_the_page_was_shown_is_refused() {
    if !crate::browser::available(true) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("case");
    bl_e2e::approval_in_a_repair(&dir);
    let approve_on_the_command_line = || bl_e2e::bl_with_fakes(&dir, bl_e2e::APPROVE_GATE);
    let first = bl_e2e::bl_with_fakes(&dir, bl_e2e::REPAIR_RUN);
    assert_eq!(first.status.code(), Some(3), "{first:?}");
    let (mut child, url) = bl_e2e::serving(
        Command::new(bl_binary())
            .args([
                "graph",
                "console",
                "--run",
                "mine",
                "--inputs",
                "inputs.json",
            ])
            .current_dir(&dir)
            .env("PATH", bl_e2e::path_with_fakes(&dir)),
        "console",
    );
    let approvals = || std::fs::read_to_string(dir.join("mine/approvals.json")).unwrap();
    let (shown, outcome, recorded) = crate::browser::Driver::start().drive(async |client| {
        use fantoccini::Locator;
        crate::browser::open(client, &url).await;
        let card = client
            .find(Locator::Css(r#"section.approval[data-node="gate"]"#))
            .await
            .unwrap();
        let shown = card.attr("data-request").await.unwrap().unwrap();
        // Meanwhile: approved on the command line; verify fails, the
        // repair resets fetch and gate, and gate waits again in round 1.
        let second = approve_on_the_command_line();
        assert_eq!(second.status.code(), Some(3), "{second:?}");
        let recorded = approvals();
        (
            shown,
            crate::browser::approve(client, "gate").await,
            recorded,
        )
    });
    assert!(
        outcome.contains("has changed since it was shown") && outcome.contains(&shown),
        "{outcome}"
    );
    assert_eq!(approvals(), recorded, "the refused click recorded nothing");
    let record: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    let rounds: Vec<u64> = record["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["repair_round"].as_u64().unwrap())
        .collect();
    assert_eq!(rounds, [0], "only round 0 was decided");
    assert!(child.try_wait().unwrap().is_none(), "still serving");
    let _ = child.kill();
    let _ = child.wait();
    // Round 1, decided on the command line, ends the run.
    assert_eq!(approve_on_the_command_line().status.code(), Some(0));
}
