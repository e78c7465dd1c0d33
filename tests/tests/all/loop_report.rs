//! `bl report`: a loop run drawn as one page (outcome, each lap's verdict,
//! decision and spend, whether its ledger verifies), rendered by real
//! headless Chromium; a ledger altered after the run is reported as not
//! verified.

use std::path::Path;

use bl_e2e::{copy_tree, repo_root};

use crate::browser::{available, headless};

fn bl(args: &[&str], dir: &Path) -> std::process::Output {
    bl_e2e::bl_in(dir, args)
}

/// The DOM Chromium made of `page`.
fn rendered(page: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = headless(profile.path())
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_loop_runs_report_shows_each_lap_and_whether_its_ledger_verifies() {
    if !available(false) {
        return;
    }
    let case = tempfile::tempdir().unwrap();
    let package = case.path().join("readme-sections");
    copy_tree(
        &repo_root().join("examples/loops/readme-sections"),
        &package,
    );
    let ran = bl(
        &["run", "readme-sections", "--yes", "--run-id", "r1"],
        case.path(),
    );
    assert!(ran.status.success(), "{ran:?}");
    let run = package.join(".bounded-loops/runs/r1");
    let made = bl(&["report", run.to_str().unwrap()], case.path());
    assert!(made.status.success(), "{made:?}");
    let page = package.join(".bounded-loops/runs/r1.report.html");
    let dom = rendered(&page);
    assert!(
        dom.contains(r#"<p id="trust" class="verified">Ledger verified when this page was made: 2 of 2 rows chained"#),
        "{dom}"
    );
    assert!(dom.contains(r#"<tr class="failed"><td>1</td>"#), "{dom}");
    assert!(dom.contains(r#"<tr class="passed"><td>2</td>"#), "{dom}");
    assert!(dom.contains("DONE: gate-passed; 2 laps"), "{dom}");
    // Each lap's spend so far is the ledger's own.
    let ledger: Vec<serde_json::Value> = bl_e2e::json_lines(&run.join("ledger.jsonl"));
    for lap in &ledger {
        let spent = &lap["budget_spent"];
        let cell = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => String::new(),
            other => other.to_string(),
        };
        let tail = format!(
            "<td>{}</td><td>{}</td></tr>",
            cell(&spent["tokens"]),
            cell(&spent["wallclock_s"])
        );
        let row = format!("<td>{}</td>", lap["lap"]);
        let at = dom
            .find(&format!(r#"">{}"#, &row[..row.len()]))
            .unwrap_or(0);
        assert!(
            dom[at..]
                .split("</tr>")
                .next()
                .map(|r| format!("{r}</tr>"))
                .is_some_and(|r| r.ends_with(&tail)),
            "lap {}: {tail} in {dom}",
            lap["lap"]
        );
    }
    assert!(
        ledger
            .iter()
            .any(|l| l["budget_spent"]["wallclock_s"].is_number()),
        "the ledger records spend"
    );

    // One byte of the first lap, changed after the run.
    let ledger = run.join("ledger.jsonl");
    let text = std::fs::read_to_string(&ledger).unwrap();
    std::fs::write(
        &ledger,
        text.replacen("missing section", "missing sectioN", 1),
    )
    .unwrap();
    let made = bl(
        &["report", run.to_str().unwrap(), "--out", "tampered.html"],
        case.path(),
    );
    assert!(made.status.success(), "{made:?}");
    let dom = rendered(&case.path().join("tampered.html"));
    assert!(
        dom.contains(r#"<p id="trust" class="unverified">Ledger NOT verified"#),
        "{dom}"
    );
}

#[test]
fn a_directory_that_is_no_loop_run_is_refused() {
    let case = tempfile::tempdir().unwrap();
    let made = bl(&["report", "."], case.path());
    assert!(!made.status.success());
    assert!(
        String::from_utf8_lossy(&made.stderr).contains("not a loop run directory"),
        "{made:?}"
    );
}
