//! `bl monitor`: a project holding the newcomer's first graph and a run
//! made before the monitor started. In real headless Chromium (through
//! chromedriver) the page lists the earlier run, previews the graph,
//! starts it, and approves the new run's `review` from its console; the
//! run then completes. It previews the project's loop package, starts it,
//! and opens the ended loop run's report, whose ledger verifies. Over raw
//! HTTP: a wrong token, a foreign Origin, and a start that does not name
//! its preview's digest are refused.

use std::process::{Child, Command};
use std::time::Duration;

use bl_e2e::{bl_binary, http_request};

/// A project with the first graph under `graphs/first`, one run of it
/// made by `bl graph run` into `.bounded-loops/runs/earlier`, and the
/// records-shell loop package under `loops/records`.
fn project() -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    bl_e2e::copy_tree(
        &bl_e2e::repo_root().join("examples/loops/records-shell"),
        &project.path().join("loops/records"),
    );
    let example = bl_e2e::first_graph();
    let graph = project.path().join("graphs/first");
    std::fs::create_dir_all(&graph).unwrap();
    for entry in std::fs::read_dir(example.path()).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), graph.join(entry.file_name())).unwrap();
    }
    let earlier = Command::new(bl_binary())
        .args(bl_e2e::RECORDED_GRAPH_RUN)
        .args(["--out", "../../.bounded-loops/runs/earlier"])
        .current_dir(&graph)
        .output()
        .unwrap();
    assert_eq!(
        earlier.status.code(),
        Some(3),
        "paused for approval: {earlier:?}"
    );
    project
}

fn monitor(project: &std::path::Path) -> (Child, String) {
    bl_e2e::serving(
        Command::new(bl_binary())
            .args(["monitor", "--no-browser", "--project"])
            .arg(project),
        "monitor",
    )
}

/// Previews `manifest` on the monitor's page and starts it: what the
/// preview said, and the started run's name.
async fn preview_and_start(client: &fantoccini::Client, manifest: &str) -> (String, String) {
    use fantoccini::Locator;
    client
        .find(Locator::Css(&format!(
            r#"button[data-manifest="{manifest}"]"#
        )))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let start = client
        .wait()
        .for_element(Locator::Id("start"))
        .await
        .unwrap();
    let preview = client
        .find(Locator::Id("preview"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    start.click().await.unwrap();
    let said = client
        .wait()
        .for_element(Locator::Css("#started[data-run]"))
        .await
        .unwrap();
    (preview, said.attr("data-run").await.unwrap().unwrap())
}

#[test]
fn monitor_lists_a_projects_runs_starts_a_graph_after_a_preview_and_approves_it() {
    if !crate::browser::available(true) {
        return;
    }
    let project = project();
    let (mut child, url) = monitor(project.path());
    let (listed, preview, started, outcome, ended, looped, (receipts, watched)) =
        crate::browser::Driver::start().drive(async |client| {
            use fantoccini::Locator;
            crate::browser::open(client, &url).await;
            let listed = client
                .find(Locator::Css(r#"#runs tr[data-run="earlier"]"#))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            crate::browser::assert_not_blank(client, "monitor").await;
            // Its receipts: each node's state, gate, artifacts and spend
            // against its cap.
            client
                .find(Locator::Css(r#"#runs tr[data-run="earlier"] button"#))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
            let receipts = client
                .wait()
                .for_element(Locator::Css(r#"tr.receipts[data-receipts="earlier"]"#))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let (preview, started) = preview_and_start(client, "graphs/first/graph.yaml").await;
            // The new run pauses at review; its row offers its console.
            let approve = client
                .wait()
                .at_most(Duration::from_secs(60))
                .for_element(Locator::Css(&format!(
                    r#"#runs tr[data-run="{started}"] a.approve"#
                )))
                .await
                .unwrap();
            approve.click().await.unwrap();
            let outcome = crate::browser::approve(client, "review").await;
            crate::browser::open(client, &url).await;
            let row = client
                .wait()
                .for_element(Locator::Css(&format!(
                    r#"#runs tr[data-run="{started}"][data-state="SUCCEEDED"]"#
                )))
                .await
                .unwrap();
            let ended = row.text().await.unwrap();
            // Its watch link opens the run's live arena.
            row.find(Locator::Css("a.watch"))
                .await
                .unwrap()
                .click()
                .await
                .unwrap();
            let watched = client
                .wait()
                .for_element(Locator::Css(r#"body[data-ready="true"] #summary"#))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            crate::browser::open(client, &url).await;
            // The loop package: previewed, started, and its report opened.
            let (loop_preview, loop_run) =
                preview_and_start(client, "loops/records/loop.yaml").await;
            let report = client
                .wait()
                .at_most(Duration::from_secs(120))
                .for_element(Locator::Css(&format!(
                    r#"#runs tr[data-run="{loop_run}"][data-state="DONE"] a.report"#
                )))
                .await
                .unwrap();
            report.click().await.unwrap();
            let report = client
                .wait()
                .for_element(Locator::Css("header"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            (
                listed,
                preview,
                started,
                outcome,
                ended,
                (loop_preview, loop_run, report),
                (receipts, watched),
            )
        });
    let (loop_preview, loop_run, report) = looped;
    for shown in ["research-users", "SUCCEEDED", "passed", "sha256:", "20000"] {
        assert!(
            receipts.contains(shown),
            "{shown} in the receipts: {receipts}"
        );
    }
    assert!(
        watched.starts_with("run SUCCEEDED; 5 SUCCEEDED"),
        "the watch page: {watched}"
    );
    assert!(
        loop_preview.contains("sound: loop records-shell")
            && loop_preview.contains("command: python3 seed/check_records.py")
            && loop_preview.contains("loops/records/.bounded-loops/runs"),
        "{loop_preview}"
    );
    let loop_records = project
        .path()
        .join("loops/records/.bounded-loops/runs")
        .join(&loop_run);
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(loop_records.join("metadata.json")).unwrap())
            .unwrap();
    assert_eq!(metadata["status"], "DONE", "{metadata}");
    assert!(
        report.contains("DONE") && report.contains("Ledger verified"),
        "{report}"
    );
    assert!(
        listed.contains("graph") && listed.contains("review"),
        "{listed}"
    );
    assert!(preview.contains("valid, 5 nodes"), "{preview}");
    assert!(preview.contains("review (role reviewer)"), "{preview}");
    assert!(
        preview.contains("publish: publishes after review"),
        "{preview}"
    );
    assert!(
        project
            .path()
            .join(".bounded-loops/runs")
            .join(&started)
            .is_dir(),
        "{started}"
    );
    assert_eq!(outcome, "approved: recorded. The run is now SUCCEEDED.");
    assert!(ended.contains("SUCCEEDED"), "{ended}");
    // The monitor keeps serving after a decision (unlike a console).
    assert!(child.try_wait().unwrap().is_none());

    let origin = {
        let rest = url.strip_prefix("http://").unwrap();
        format!("Origin: http://{}", &rest[..rest.find('/').unwrap()])
    };
    let json = "Content-Type: application/json";
    let wrong = url.replace(&url[url.len() - 33..url.len() - 1], &"0".repeat(32));
    assert!(
        http_request(&wrong, "GET", "runs.json", &[], b"")
            .0
            .contains("404")
    );
    let body = br#"{"manifest":"graphs/first/graph.yaml","digest":"sha256:00"}"#;
    let (status, _) = http_request(
        &url,
        "POST",
        "start",
        &["Origin: http://evil.example", json],
        body,
    );
    assert!(status.contains("403"), "{status}");
    let (status, text) = http_request(&url, "POST", "start", &[&origin, json], body);
    assert!(
        status.contains("409") && text.contains("changed since the preview"),
        "{status} {text}"
    );
    let (status, _) = http_request(&url, "GET", "run/..%2F..%2Fgraphs/", &[], b"");
    assert!(status.contains("404"), "{status}");
    let _ = child.kill();
    let _ = child.wait();
}

/// A client that opens a connection and never finishes its request head
/// (slowloris) is cut off after the head timeout, not held forever; and a
/// complete request still gets its answer meanwhile.
#[test]
fn a_request_head_that_never_ends_is_cut_off() {
    use std::io::{Read, Write};
    let project = tempfile::tempdir().unwrap();
    let (mut child, url) = monitor(project.path());
    let host = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_string();
    let mut slow = std::net::TcpStream::connect(&host).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let began = std::time::Instant::now();
    slow.set_read_timeout(Some(Duration::from_secs(25)))
        .unwrap();
    // Meanwhile, the server answers others.
    let (status, _) = http_request(&url, "GET", "runs.json", &[], b"");
    assert!(status.contains("200"), "{status}");
    let mut answer = Vec::new();
    let ended = slow.read_to_end(&mut answer);
    let waited = began.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        ended.is_ok()
            || ended
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the connection was closed, not left open: {ended:?}"
    );
    assert!(
        waited >= Duration::from_secs(9) && waited < Duration::from_secs(20),
        "cut off after the 10 s head timeout, not {waited:?}"
    );
}
