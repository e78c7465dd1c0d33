//! `bl graph arena`: a real run drawn as one page, opened in real headless
//! Chromium (Debian's, which `scripts/dev test` installs), whose script
//! checks the run's records with WebCrypto before it shows them as
//! verified. What the browser made of the page is read back from the DOM
//! it dumps after the script has run; a click is a real one, sent through
//! chromedriver (WebDriver, with the fantoccini client).

use std::path::{Path, PathBuf};
use std::process::Command;

use bl_e2e::{bl_binary, repo_root};

use crate::browser::{Driver, available, headless};

/// The page's DOM once its script has run (`fragment`: after `#`).
pub(crate) fn rendered(page: &Path, fragment: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = headless(profile.path())
        .arg("--virtual-time-budget=10000")
        .arg("--dump-dom")
        .arg(format!("file://{}#{fragment}", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        dom.contains(r#"data-ready="true""#),
        "the page's script did not finish: {}\n{dom}",
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

fn bl(args: &[&str], dir: &Path) -> std::process::Output {
    bl_e2e::bl_in(dir, args)
}

/// A run of three nodes with a checkpoint signed by a fresh key; returns
/// the graph directory and the key's public half.
fn signed_run(case: &Path) -> (PathBuf, PathBuf) {
    let key = case.join("arena.key");
    let made = bl(
        &[
            "keys",
            "generate",
            "--name",
            "arena-test",
            "--out",
            key.to_str().unwrap(),
        ],
        case,
    );
    assert!(made.status.success(), "{made:?}");
    let dir = case.join("graph");
    let graph = Command::new("python3")
        .arg(repo_root().join("benchmarks/graph/make_graph.py"))
        .args(["3", "workspace_only"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(graph.success());
    let path = bl_e2e::path_with_fakes(&dir);
    let run = Command::new(bl_binary())
        .args(bl_e2e::GRAPH_RUN)
        .args(["--checkpoint-key", key.to_str().unwrap()])
        .current_dir(&dir)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    (dir, case.join("arena.pub"))
}

/// A signed run's arena, made with the key's public half; the graph
/// directory and what `bl graph arena` said.
fn signed_arena(case: &Path) -> (PathBuf, std::process::Output) {
    let (dir, public) = signed_run(case);
    let made = bl(
        &[
            "graph",
            "arena",
            "--run",
            "run",
            "--pubkey",
            public.to_str().unwrap(),
        ],
        &dir,
    );
    assert!(made.status.success(), "{made:?}");
    (dir, made)
}

/// The opening tag of a node's drawing.
/// The digest and size of the artifact `node`'s success named in the run
/// `signed_run` made (each node's reply is its own).
fn artifact_of(graph: &Path, node: &str) -> (String, u64) {
    let run = graph.join("run");
    let log = bl_e2e::log_text(&run.join(bl_store::RunDir::EVENTS));
    let digest = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["event_type"] == "node.succeeded" && e["payload"]["node_id"] == node)
        .and_then(|e| {
            e["payload"]["artifact_digests"][0]
                .as_str()
                .map(str::to_string)
        })
        .expect("the node succeeded with an artifact");
    let object = run
        .join("artifacts/objects")
        .join(digest.trim_start_matches("sha256:"));
    (digest, std::fs::metadata(object).unwrap().len())
}

fn node_tag<'a>(dom: &'a str, node: &str) -> &'a str {
    let at = dom
        .find(&format!(r#"data-node="{node}""#))
        .unwrap_or_else(|| panic!("{node} is drawn"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    &dom[start..end]
}

/// The page with its records (gzipped JSON, in base64) changed by `change`.
fn with_records(page: &str, change: impl FnOnce(&str) -> String) -> String {
    use base64::Engine as _;
    use std::io::{Read, Write};
    let b64 = base64::engine::general_purpose::STANDARD;
    let open = r#"data-encoding="gzip+base64">"#;
    let start = page.find(open).expect("the page holds its records") + open.len();
    let end = start + page[start..].find("</script>").unwrap();
    let mut records = String::new();
    flate2::read::GzDecoder::new(&b64.decode(&page[start..end]).unwrap()[..])
        .read_to_string(&mut records)
        .unwrap();
    let changed = change(&records);
    assert_ne!(changed, records, "the change changes something");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(changed.as_bytes()).unwrap();
    format!(
        "{}{}{}",
        &page[..start],
        b64.encode(gz.finish().unwrap()),
        &page[end..]
    )
}

fn trust_line(dom: &str) -> &str {
    let start = dom
        .find(r#"<p id="trust""#)
        .expect("the page says what it verified");
    let end = dom[start..].find("</p>").unwrap() + start;
    &dom[start..end]
}

#[test]
fn the_arena_of_a_signed_run_is_verified_in_the_browser_with_every_node_drawn_in_its_state() {
    if !available(false) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let (dir, made) = signed_arena(case.path());
    let page = dir.join("run.arena.html");
    assert!(String::from_utf8_lossy(&made.stdout).contains("run.arena.html"));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains(" src=") && !html.contains("href="),
        "nothing is fetched"
    );
    let dom = rendered(&page, "node=n00001");
    let trust = trust_line(&dom);
    assert!(trust.contains(r#"class="verified""#), "{trust}");
    assert!(trust.contains("Verified: 21 events"), "{trust}");
    assert!(
        trust.contains("key arena-test (id ") && trust.contains("log bl.run/"),
        "who signed which log is said: {trust}"
    );
    assert!(dom.contains("run SUCCEEDED; 3 SUCCEEDED"), "{dom}");
    // The timeline: a bar per attempt, and how many ran at once (the three
    // are independent, so more than one did).
    assert_eq!(dom.matches(r#"class="bar succeeded""#).count(), 3, "{dom}");
    let most = dom
        .split(r#"data-most-at-once=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse::<u32>().ok())
        .expect("the timeline says how many ran at once");
    assert!((2..=3).contains(&most), "{most}");
    assert!(dom.contains("3 attempts; at most"), "{dom}");
    for node in ["n00000", "n00001", "n00002"] {
        let tag = node_tag(&dom, node);
        assert!(
            tag.contains("state-succeeded"),
            "{node} drawn as succeeded: {tag}"
        );
    }
    let frame = &dom[dom.find(r#"id="selected""#).expect("the selection's frame")..];
    assert!(
        frame[..frame.find('>').unwrap()].contains(r#"data-node="n00001""#),
        "the frame is on the node named in the address: {}",
        &frame[..200.min(frame.len())]
    );
    // The clicked node's details: its artifact's digest, size and producer.
    let details = &dom[dom.find("<h2>n00001</h2>").expect("details of n00001")..];
    let (digest, size) = artifact_of(&dir, "n00001");
    assert!(details.contains(&digest), "{digest}");
    assert!(
        details.contains(&format!("<td>{size}</td>")) && details.contains("n00001 (attempt 1)")
    );
    assert!(details.contains("node.succeeded"));
    // Each box says its state, attempts and how long it took; the details
    // add its duration and its repair rounds (none here).
    let mark = &dom[dom.find(r#"data-node="n00001""#).unwrap()..];
    let mark = &mark[mark.find(r#"class="state""#).unwrap()..];
    let mark = &mark[mark.find('>').unwrap() + 1..mark.find("</text>").unwrap()];
    let seconds = mark
        .strip_prefix("SUCCEEDED · 1 attempt · ")
        .and_then(|rest| rest.split(" s").next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(seconds.is_some(), "{mark}");
    assert!(
        details.contains("<dt>duration</dt>")
            && details.contains("<dt>repair rounds</dt><dd>none</dd>"),
        "{details}"
    );
    // The page renders to something, not a blank screen.
    let shot = case.path().join("arena.png");
    let profile = tempfile::tempdir().unwrap();
    let taken = headless(profile.path())
        .arg("--window-size=1200,800")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    assert!(taken.status.success(), "{taken:?}");
    let png = std::fs::read(&shot).unwrap();
    // Measured here: a blank page is 4.5 KB, a heading and a line 6.6 KB;
    // the arena draws 19 to 25 KB, depending on when the shot is taken.
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 12_000,
        "{} bytes",
        png.len()
    );
}

#[test]
fn an_altered_byte_a_missing_key_or_another_key_make_the_page_say_unverified() {
    if !available(false) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let (dir, _) = signed_arena(case.path());
    let page = std::fs::read_to_string(dir.join("run.arena.html")).unwrap();

    // One byte of one event, changed in the page's (gzipped) records.
    let altered = with_records(&page, |records| {
        records.replacen(
            "a non-empty, well-formed reply",
            "a non-empty, well-formed replz",
            1,
        )
    });
    assert_ne!(altered, page);
    let path = case.path().join("altered.html");
    std::fs::write(&path, altered).unwrap();
    let trust = trust_line(&rendered(&path, "")).to_string();
    assert!(trust.contains("LOCAL/UNVERIFIED"), "{trust}");
    assert!(
        trust.contains("do not hash to the checkpoint's root"),
        "{trust}"
    );

    // The checkpoint's signature altered, its key id kept: the page checks
    // the signature itself, not only whose it claims to be.
    let forged = with_records(&page, |records| {
        let mark = ["\\u2014 arena-test ", "— arena-test "]
            .iter()
            .find_map(|m| records.find(m).map(|at| at + m.len()))
            .expect("the checkpoint's signature line");
        // Past the key id's base64 (its first 4 bytes), inside the signature.
        let at = mark + 20;
        let flipped = if &records[at..=at] == "A" { "B" } else { "A" };
        format!("{}{flipped}{}", &records[..at], &records[at + 1..])
    });
    let path = case.path().join("forged.html");
    std::fs::write(&path, forged).unwrap();
    let trust = trust_line(&rendered(&path, "")).to_string();
    assert!(trust.contains("LOCAL/UNVERIFIED"), "{trust}");
    assert!(
        trust.contains("the signature by arena-test does not verify"),
        "checked by WebCrypto, the key id still matching: {trust}"
    );

    // No key: the signature is not checked, and the page says so.
    let made = bl(
        &["graph", "arena", "--run", "run", "--out", "nokey.html"],
        &dir,
    );
    assert!(made.status.success(), "{made:?}");
    let trust = trust_line(&rendered(&dir.join("nokey.html"), "")).to_string();
    assert!(
        trust.contains("LOCAL/UNVERIFIED") && trust.contains("no verifier key"),
        "{trust}"
    );

    // Another key of the same name: its signature is not on the checkpoint.
    let other = case.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let made = bl(
        &[
            "keys",
            "generate",
            "--name",
            "arena-test",
            "--out",
            "other.key",
        ],
        &other,
    );
    assert!(made.status.success(), "{made:?}");
    let made = bl(
        &[
            "graph",
            "arena",
            "--run",
            "run",
            "--out",
            "other.html",
            "--pubkey",
            other.join("other.pub").to_str().unwrap(),
        ],
        &dir,
    );
    assert!(made.status.success(), "{made:?}");
    let trust = trust_line(&rendered(&dir.join("other.html"), "")).to_string();
    assert!(
        trust.contains("LOCAL/UNVERIFIED")
            && trust.contains("the signature is by another key than arena-test"),
        "{trust}"
    );
}

#[test]
fn a_run_whose_plan_or_log_was_altered_is_refused_before_any_page_is_made() {
    let case = tempfile::tempdir().unwrap();
    let (dir, _) = signed_run(case.path());
    let plan = dir.join("run/plan.json");
    let original = std::fs::read_to_string(&plan).unwrap();
    std::fs::write(
        &plan,
        original.replacen("research_claim", "research_claiM", 1),
    )
    .unwrap();
    let made = bl(&["graph", "arena", "--run", "run"], &dir);
    assert!(!made.status.success(), "{made:?}");
    assert!(
        String::from_utf8_lossy(&made.stderr).contains("plan.json"),
        "{made:?}"
    );
    assert!(!dir.join("run.arena.html").exists());
    std::fs::write(&plan, original).unwrap();

    let log = dir.join("run/controller-events.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(
        &log,
        text.replacen("well-formed reply", "well-formed replz", 1),
    )
    .unwrap();
    let made = bl(&["graph", "arena", "--run", "run"], &dir);
    assert!(!made.status.success(), "{made:?}");
    let said = String::from_utf8_lossy(&made.stderr);
    assert!(said.contains("controller-events.jsonl"), "{said}");
    assert!(!dir.join("run.arena.html").exists());
}

#[test]
fn a_click_on_a_node_shows_its_artifact_digests() {
    if !available(true) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let (dir, _) = signed_arena(case.path());
    let page = dir.join("run.arena.html");
    let (trust, before, after) = Driver::start().drive(async |client| {
        use fantoccini::Locator;
        crate::browser::open(client, &format!("file://{}", page.display())).await;
        let text = async |id| crate::browser::text(client, id).await;
        let trust = text("trust").await;
        let before = text("details").await;
        client
            .find(Locator::Css(r#"g.node[data-node="n00002"]"#))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        (trust, before, text("details").await)
    });
    assert!(trust.starts_with("Verified:"), "{trust}");
    assert!(!before.contains("sha256:"), "{before}");
    assert!(after.starts_with("n00002"), "{after}");
    let (digest, _) = artifact_of(&dir, "n00002");
    assert!(after.contains(&digest), "{digest}: {after}");
    assert!(after.contains("n00002 (attempt 1)"), "{after}");
}

/// The README's first command ends by writing the demo run's arena, as
/// here: signed with a key of its own, the page verifies in the browser
/// and draws all seven nodes succeeded.
#[test]
fn the_demo_runs_arena_verifies_with_every_node_succeeded() {
    if !available(false) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let demo = repo_root().join("examples/graphs/panel-demo");
    let arg = |name: &str| demo.join(name).display().to_string();
    let key = bl(
        &["keys", "generate", "--name", "demo", "--out", "demo.key"],
        case.path(),
    );
    assert!(key.status.success(), "{key:?}");
    let run = bl(
        &[
            "graph",
            "run",
            "--execute",
            &arg("graph.yaml"),
            "--connections",
            &arg("connections.json"),
            "--inputs",
            &arg("inputs.json"),
            "--recorded",
            &arg("replies.json"),
            "--decisions",
            &arg("decisions.json"),
            "--checkpoint-key",
            "demo.key",
            "--out",
            "panel-demo",
        ],
        case.path(),
    );
    assert!(run.status.success(), "{run:?}");
    let made = bl(
        &[
            "graph",
            "arena",
            "--run",
            "panel-demo",
            "--pubkey",
            "demo.pub",
        ],
        case.path(),
    );
    assert!(made.status.success(), "{made:?}");
    let page = case.path().join("panel-demo.arena.html");
    assert!(
        String::from_utf8_lossy(&made.stdout).contains("panel-demo.arena.html"),
        "the path is printed: {made:?}"
    );
    let dom = rendered(&page, "");
    let trust = trust_line(&dom);
    assert!(trust.contains(r#"class="verified""#), "{trust}");
    assert!(trust.contains("key demo (id "), "{trust}");
    assert!(dom.contains("run SUCCEEDED; 7 SUCCEEDED"), "{dom}");
    for node in [
        "lens-security",
        "lens-performance",
        "lens-maintainability",
        "anonymize-panel",
        "synthesizer",
        "approve-plan",
        "publish-plan",
    ] {
        let tag = node_tag(&dom, node);
        assert!(tag.contains("state-succeeded"), "{node}: {tag}");
    }

    // A lens's details: its gate's verdict, its route, its spend (the
    // log's), and its report handed to the anonymizer.
    let status = bl(
        &["--json", "graph", "status", "--run", "panel-demo"],
        case.path(),
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let tokens = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node_id"] == "lens-security")
        .unwrap()["spend_tokens"]
        .as_u64()
        .unwrap();
    assert!(tokens > 0, "{status}");
    let dom = rendered(&page, "node=lens-security");
    let details = &dom[dom.find("<h2>lens-security</h2>").expect("its details")..];
    for fact in [
        "<dt>verdict</dt><dd>passed: artifact completion".to_string(),
        "<dt>route</dt><dd>recorded / recorded-replies (local)</dd>".to_string(),
        format!("<dt>spend</dt><dd>{tokens} tokens, 0 microunits</dd>"),
        "<td>consumer</td><td>lens-security (attempt 1)</td><td>anonymize-panel.security</td>"
            .to_string(),
    ] {
        assert!(details.contains(&fact), "{fact} in {details}");
    }
    assert!(
        dom.contains(&format!(" · {tokens} tok")),
        "the box shows its spend"
    );
    // The anonymizer's label map is kept from every agent.
    let dom = rendered(&page, "node=anonymize-panel");
    let details = &dom[dom.find("<h2>anonymize-panel</h2>").expect("its details")..];
    assert!(details.contains("<td>system_only</td>"), "{details}");
}

/// A run in which `verify` failed once and a repair round reset `fetch`
/// and `gate`: each reset node's details name the round; and a log longer
/// than a page is shown a page at a time, never whole.
#[test]
fn a_repaired_run_shows_its_rounds_and_a_long_log_a_page_at_a_time() {
    if !available(true) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("case");
    bl_e2e::approval_in_a_repair(&dir);
    let in_case = |dir: &Path, args: &[&str]| bl_e2e::bl_with_fakes(dir, args).status.code();
    assert_eq!(in_case(&dir, bl_e2e::REPAIR_RUN), Some(3));
    let approve = bl_e2e::APPROVE_GATE;
    assert_eq!(in_case(&dir, approve), Some(3), "round 1 waits again");
    assert_eq!(in_case(&dir, approve), Some(0));
    let arena = ["graph", "arena", "--run", "mine", "--out", "repaired.html"];
    assert_eq!(in_case(&dir, &arena), Some(0));

    // A long log: 20 independent nodes log well over a page of events.
    let wide = tmp.path().join("wide");
    let graph = Command::new("python3")
        .arg(repo_root().join("benchmarks/graph/make_graph.py"))
        .args(["20", "workspace_only"])
        .arg(&wide)
        .status()
        .unwrap();
    assert!(graph.success());
    assert_eq!(in_case(&wide, bl_e2e::GRAPH_RUN), Some(0));
    assert_eq!(
        in_case(
            &wide,
            &["graph", "arena", "--run", "run", "--out", "long.html"]
        ),
        Some(0)
    );
    let logged = bl_e2e::log_text(&wide.join("run/controller-events.jsonl"))
        .lines()
        .count();
    assert!((101..=200).contains(&logged), "{logged} events: two pages");

    let page_of = |path: PathBuf| format!("file://{}", path.display());
    let (fetch, verify, first, second) = Driver::start().drive(async |client| {
        use fantoccini::Locator;
        let text = async |css: &str| {
            client
                .find(Locator::Css(css))
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        };
        let click = async |css: &str| {
            client
                .find(Locator::Css(css))
                .await
                .unwrap()
                .click()
                .await
                .unwrap()
        };
        crate::browser::open(client, &page_of(dir.join("repaired.html"))).await;
        click(r#"g.node[data-node="fetch"]"#).await;
        let fetch = text("#details").await;
        click(r#"g.node[data-node="verify"]"#).await;
        let verify = text("#details").await;

        crate::browser::open(client, &page_of(wide.join("long.html"))).await;
        let listed = async || {
            let items = client.find_all(Locator::Css("#events li")).await.unwrap();
            let start = client
                .find(Locator::Id("events"))
                .await
                .unwrap()
                .attr("start")
                .await
                .unwrap();
            (items.len(), start, text("#page").await)
        };
        let first = listed().await;
        click("#next").await;
        let second = listed().await;
        (fetch, verify, first, second)
    });
    assert!(fetch.contains("round 1: reset from"), "{fetch}");
    assert!(verify.contains("round 1: reset from"), "{verify}");
    assert_eq!(first, (100, Some("1".into()), "page 1 of 2".into()));
    assert_eq!(
        second,
        (logged - 100, Some("101".into()), "page 2 of 2".into())
    );
}

/// A graph whose draft is audited by three audit nodes (recorded replies:
/// no key, no network), in `dir`.
fn audited_graph(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let audit = |id: &str| {
        format!(
            "  - id: {id}\n    kind: audit\n    audit_profile: editorial-v1\n    connection_slot: {id}\n    inputs: {{draft: markdown}}\n    outputs: {{result: json}}\n    budget: {{max_attempts: 1, max_wallclock_s: 60}}\n    effects: [workspace_write]\n    isolation: workspace_only\n"
        )
    };
    let manifest = format!(
        "api_version: bounded-loops.dev/graph/v1\ngraph_id: audited\nversion: 1.0.0\nnodes:\n  - id: draft\n    kind: research_claim\n    connection_slot: draft\n    inputs: {{}}\n    outputs: {{text: markdown}}\n    budget: {{max_attempts: 1, max_wallclock_s: 60}}\n    effects: [workspace_write]\n    isolation: workspace_only\n{}{}{}edges:\n{}connection_slots:\n{}policies: {{data_class: internal, fail_mode: fail_closed}}\n",
        audit("review-a"),
        audit("review-b"),
        audit("review-c"),
        ["review-a", "review-b", "review-c"]
            .map(|n| format!(
                "  - {{from_node: draft, from_port: text, to_node: {n}, to_port: draft}}\n"
            ))
            .concat(),
        ["draft", "review-a", "review-b", "review-c"]
            .map(|n| format!("  - {{id: {n}, requires: [research], data_class_max: internal}}\n"))
            .concat(),
    );
    std::fs::write(dir.join("graph.yaml"), manifest).unwrap();
    // Without artifact ports, a node's output is its reply.
    let result = |id: &str, content: serde_json::Value| serde_json::json!({"node_id": id, "attempt": "*", "reply": content.to_string()});
    let replies = serde_json::json!({
        "api_version": "bl.dev/recorded-replies/v1",
        "replies": [
            {"node_id": "draft", "attempt": "*", "reply": "# Draft"},
            result("review-a", serde_json::json!({"cell": "facts", "assessor": "model-b", "producer": "model-a", "finding": null})),
            result("review-b", serde_json::json!({"cell": "style", "assessor": "model-c", "producer": "model-a",
                "finding": {"finding_id": "F-1", "severity": "S1", "disposition": "open"}})),
            result("review-c", serde_json::json!({"cell": "safety", "assessor": "model-a", "producer": "model-a", "finding": null})),
        ]
    });
    std::fs::write(dir.join("replies.json"), replies.to_string()).unwrap();
    let inputs: serde_json::Map<String, serde_json::Value> =
        ["draft", "review-a", "review-b", "review-c"]
            .iter()
            .map(|n| (n.to_string(), serde_json::json!("Do your part.")))
            .collect();
    std::fs::write(
        dir.join("inputs.json"),
        serde_json::Value::Object(inputs).to_string(),
    )
    .unwrap();
    let key = bl(
        &[
            "keys",
            "generate",
            "--name",
            "audit-test",
            "--out",
            "audit.key",
        ],
        dir,
    );
    assert!(key.status.success(), "{key:?}");
    let connect = bl(
        &["graph", "connect", "graph.yaml", "--provider", "recorded"],
        dir,
    );
    assert!(connect.status.success(), "{connect:?}");
    std::fs::write(dir.join("connections.json"), &connect.stdout).unwrap();
}

/// An audit plan over `cells` (name, mandatory), each assigned.
fn audit_plan(cells: &[(&str, bool)]) -> String {
    let d = format!("sha256:{}", "ab".repeat(32));
    serde_json::json!({
        "artifact_digest": d, "rubric_digest": d,
        "mandatory_cells": cells.iter().map(|(n, m)| serde_json::json!({"name": n, "mandatory": m})).collect::<Vec<_>>(),
        "assignments": cells.iter().map(|(n, _)| serde_json::json!({"cell": n, "model_id": "model-b",
            "tool_id": "rubric", "version": "1", "rubric_digest": d, "independence": "assessor != producer"})).collect::<Vec<_>>(),
    })
    .to_string()
}

/// Runs the audited graph into `out` with `plan`, its checkpoints signed by
/// `audit.key` (made by `audited_graph`).
fn run_audited(dir: &Path, out: &str, plan: &str) -> std::process::Output {
    let with = [
        "--audit-plan",
        plan,
        "--checkpoint-key",
        "audit.key",
        "--out",
        out,
    ];
    bl(&[bl_e2e::RECORDED_GRAPH_RUN, &with].concat(), dir)
}

/// The arena of the audited run `run`, made with its key, as rendered.
fn audited_arena(dir: &Path, run: &str) -> String {
    let made = bl(
        &["graph", "arena", "--run", run, "--pubkey", "audit.pub"],
        dir,
    );
    assert!(made.status.success(), "{made:?}");
    rendered(&dir.join(format!("{run}.arena.html")), "")
}

/// The text of the element with `id` in the rendered DOM.
fn element_text(dom: &str, id: &str) -> String {
    let start = dom
        .find(&format!(r#"id="{id}""#))
        .unwrap_or_else(|| panic!("#{id} in {dom}"));
    let start = dom[..start].rfind('<').unwrap();
    let tag = dom[start + 1..].split([' ', '>']).next().unwrap();
    let end = start + dom[start..].find(&format!("</{tag}>")).unwrap();
    let mut text = String::new();
    let mut inside = false;
    for c in dom[start..end].chars() {
        match c {
            '<' => inside = true,
            '>' => {
                inside = false;
                text.push(' ');
            }
            c if !inside => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn an_audit_plan_gives_the_arena_its_coverage_table_and_release_verdict() {
    if !available(true) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let dir = case.path().join("audited");
    audited_graph(&dir);
    // A plan that is not well formed is refused before anything runs.
    std::fs::write(
        dir.join("bad-plan.json"),
        r#"{"artifact_digest":"sha256:00"}"#,
    )
    .unwrap();
    let refused = run_audited(&dir, "bad", "bad-plan.json");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("bad-plan.json") && said.contains("audit_digest at /artifact_digest"),
        "{said}"
    );
    assert!(!dir.join("bad").exists());

    // facts: independent and clean; style: an open S1; safety: only its
    // producer audited it; tone: optional and unaudited.
    let plan = audit_plan(&[
        ("facts", true),
        ("style", true),
        ("safety", true),
        ("tone", false),
    ]);
    std::fs::write(dir.join("plan.json"), &plan).unwrap();
    let run = run_audited(&dir, "blocked", "plan.json");
    assert!(run.status.success(), "{run:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("blocked/audit-plan.json")).unwrap(),
        plan,
        "kept byte for byte"
    );
    let dom = audited_arena(&dir, "blocked");
    assert!(
        trust_line(&dom).contains("Verified"),
        "{}",
        trust_line(&dom)
    );
    let audit = element_text(&dom, "audit");
    assert!(
        audit.contains("Cross-Model Audit")
            && audit.contains("is the one the verified log recorded"),
        "{audit}"
    );
    for (cell, status) in [
        ("facts", "clear"),
        ("style", "blocks"),
        ("safety", "self-only"),
        ("tone", "clear"),
    ] {
        assert!(
            dom.contains(&format!(r#"data-cell="{cell}" data-status="{status}""#)),
            "{cell} {status}: {audit}"
        );
    }
    assert!(
        audit.contains("model-a (self)") && audit.contains("S1 (open: F-1)"),
        "{audit}"
    );
    assert_eq!(
        element_text(&dom, "audit-verdict"),
        "BLOCKED: release blocked on cells: style, safety. Blocking: style, safety"
    );
    // bounded-loops reads the run, audit.plan.created event and all.
    if let Some(statuses) = bl_e2e::upstream_status(&[dir.join("blocked")]) {
        assert_eq!(
            statuses[0].1, 0,
            "bounded-loops refuses it: {}",
            statuses[0].2
        );
    }

    // Only facts mandatory: released.
    std::fs::write(
        dir.join("plan.json"),
        audit_plan(&[("facts", true), ("tone", false)]),
    )
    .unwrap();
    assert!(run_audited(&dir, "released", "plan.json").status.success());
    let dom = audited_arena(&dir, "released");
    assert!(
        dom.contains(r#"data-bound="true""#),
        "{}",
        element_text(&dom, "audit")
    );
    assert!(dom.contains(r#"data-released="true""#));
    assert!(
        element_text(&dom, "audit-verdict").starts_with("RELEASED: release cleared"),
        "{}",
        element_text(&dom, "audit-verdict")
    );
    assert!(
        dom.contains("cell 'style' is not in the audit plan; ignored"),
        "a result for no cell of the plan is noted: {}",
        element_text(&dom, "audit")
    );

    // The plan changed after the run: the verdict fails closed.
    let kept = dir.join("released/audit-plan.json");
    std::fs::write(&kept, audit_plan(&[("facts", false)])).unwrap();
    let dom = audited_arena(&dir, "released");
    let verdict = element_text(&dom, "audit-verdict");
    assert!(
        verdict.starts_with("BLOCKED: audit plan present but projection failed closed")
            && verdict.contains("altered after the run began"),
        "{verdict}"
    );
    assert!(dom.contains(r#"data-released="false""#));
}

/// bounded-loops' own runs with audit plans (tests/corpus/audit-runs):
/// bl reconciles each as bounded-loops' arena did, and differs only where
/// the corpus README says it does on purpose.
#[test]
fn audit_corpus_runs_reconcile_as_bounded_loops_reconciled_them() {
    let corpus = repo_root().join("tests/corpus/audit-runs");
    let runtime = bl_app::runtime::GraphRuntime::default();
    let mut cases = 0;
    for entry in std::fs::read_dir(&corpus).unwrap() {
        let case = entry.unwrap().path();
        let Ok(expected) = std::fs::read(case.join("expected.json")) else {
            continue;
        };
        cases += 1;
        let name = case.file_name().unwrap().to_string_lossy().into_owned();
        let theirs: serde_json::Value = serde_json::from_slice(&expected).unwrap();
        let theirs = &theirs["audit_coverage"];
        let copy = tempfile::tempdir().unwrap();
        bl_e2e::copy_tree(&case.join("run"), copy.path());
        let mine = runtime
            .audit_coverage(copy.path())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .unwrap_or_else(|| panic!("{name}: the run has an audit plan"));
        let failed_closed = |c: &serde_json::Value| {
            c["released"] == false
                && c["blocking_cells"] == serde_json::json!(["*"])
                && c["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("audit plan present but projection failed closed: ")
        };
        if failed_closed(theirs) {
            assert!(failed_closed(&mine), "{name}: {mine}");
            continue;
        }
        if name == "mandatory_str" {
            assert!(
                failed_closed(&mine)
                    && mine["reason"].to_string().contains("must be true or false"),
                "{name}: {mine}"
            );
            assert_eq!(
                theirs["released"], true,
                "what bl refuses, bounded-loops released"
            );
            continue;
        }
        let fields = [
            "cell",
            "mandatory",
            "covered_by",
            "verdict_severity",
            "dissent",
            "missing",
            "producer_only",
            "blocking",
        ];
        let cells = |c: &serde_json::Value| -> Vec<serde_json::Value> {
            c["cells"]
                .as_array()
                .unwrap()
                .iter()
                .map(|cell| {
                    fields
                        .iter()
                        .map(|f| (f.to_string(), cell[f].clone()))
                        .collect()
                })
                .collect()
        };
        assert_eq!(cells(&mine), cells(theirs), "{name}");
        for field in ["released", "reason", "blocking_cells"] {
            assert_eq!(mine[field], theirs[field], "{name}: {field}");
        }
        assert!(
            mine["notes"].as_array().unwrap().len() >= theirs["notes"].as_array().unwrap().len(),
            "{name}: every result bounded-loops could not use is noted: {mine}"
        );
    }
    assert_eq!(cases, 25, "the corpus has its 25 recorded runs");
}

/// Runs bounded-loops made open too: the arena of a run bounded-loops
/// 0.7.6 recorded (tests/corpus/audit-runs) draws every node in the state
/// its status gives, counts its events, and says plainly that nothing
/// signed it rather than claiming it verified.
#[test]
fn the_arena_opens_a_run_that_bounded_loops_made() {
    if !available(false) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let run = repo_root().join("tests/corpus/audit-runs/all_optional/run");
    let page = case.path().join("theirs.html");
    let made = bl(
        &[
            "graph",
            "arena",
            "--run",
            run.to_str().unwrap(),
            "--out",
            page.to_str().unwrap(),
        ],
        case.path(),
    );
    assert!(made.status.success(), "{made:?}");
    let dom = rendered(&page, "");
    let trust = trust_line(&dom);
    assert!(
        trust.contains("LOCAL/UNVERIFIED") && trust.contains("no checkpoint"),
        "{trust}"
    );
    let status = bl(
        &["--json", "graph", "status", "--run", run.to_str().unwrap()],
        case.path(),
    );
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let events = bl_e2e::log_text(&run.join("controller-events.jsonl"))
        .lines()
        .count();
    assert!(
        dom.contains(&format!("{events} events")),
        "every event counted: {events}"
    );
    for node in status["nodes"].as_array().unwrap() {
        let id = node["node_id"].as_str().unwrap();
        let state = node["state"].as_str().unwrap().to_lowercase();
        let tag = node_tag(&dom, id);
        assert!(tag.contains(&format!("state-{state}")), "{id}: {tag}");
    }
}
