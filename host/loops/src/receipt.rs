//! A run's receipt (`receipt.json`, `receipt.md`), derived from its ledger
//! and its metadata as bounded-loops derives it. The receipt is a reading
//! aid, never evidence: it says so, and names the `bl verify` command that
//! checks the ledger it came from. Pure: the caller reads the files.

use serde_json::{Value, json};

/// One invocation's rows (laps restart at 1 with every `bl run`).
fn segments(rows: &[Value]) -> Vec<&[Value]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, row) in rows.iter().enumerate() {
        if i > start && row["lap"].as_u64() == Some(1) {
            out.push(&rows[start..i]);
            start = i;
        }
    }
    if start < rows.len() {
        out.push(&rows[start..]);
    }
    out
}

/// The status a ledger's last decision means.
pub fn status_of(decision: &str) -> &'static str {
    match decision {
        "done" => "DONE",
        "halt" => "HALT",
        "pause" => "PAUSE",
        "killed" => "KILLED",
        "error" => "ERROR",
        _ => "INCOMPLETE",
    }
}

const NOTE: &str = "This file is derived from ledger.jsonl and is NOT itself tamper-evident: anyone who can edit this directory can edit it. The ledger is the record; check it against the head printed when the run ended.";

/// `receipt.json`'s value for a run directory's ledger rows and metadata.
pub fn receipt(rows: &[Value], metadata: &Value, run_id: &str, run_dir: &str) -> Value {
    let segs = segments(rows);
    let last = rows.last().cloned().unwrap_or(Value::Null);
    let declared = &last["budget_declared"];
    let sum = |key: &str| -> f64 {
        segs.iter()
            .filter_map(|s| s.last())
            .filter_map(|r| r["budget_spent"][key].as_f64())
            .sum()
    };
    let attempts = rows.iter().filter(|r| r["attempted"] == true).count();
    let distinct = |key: &str| {
        let mut seen: Vec<Value> = Vec::new();
        for s in &segs {
            if let Some(v) = s.last().map(|r| r[key].clone())
                && !seen.contains(&v)
            {
                seen.push(v);
            }
        }
        seen
    };
    let declarations = distinct("budget_declared");
    let gates = distinct("gate");
    let status = status_of(last["decision"].as_str().unwrap_or_default());
    let tokens = sum("tokens");
    let wallclock = (sum("wallclock_s") * 100.0).round() / 100.0;
    json!({
        "bounds": {
            "attempts": {"consumed": attempts, "declared": declared["attempts"]},
            "tokens": {"consumed": tokens as u64, "declared": declared["tokens"]},
            "wallclock_s": {"consumed": wallclock, "declared": declared["wallclock_s"]},
        },
        "bounds_changed_during_run": declarations.len() > 1,
        "bounds_recorded": rows.iter().all(|r| r.get("budget_declared").is_some()),
        "declarations": if declarations.len() > 1 { declarations } else { Vec::new() },
        "gate": last["gate"],
        "gate_changed_during_run": gates.len() > 1,
        "gates": if gates.len() > 1 { gates } else { Vec::new() },
        "integrity": {
            "authoritative_record": "ledger.jsonl",
            "ledger_head_in_this_directory": metadata["ledger_head"],
            "note": NOTE,
            "verify_command": format!("bl verify {run_dir} --expect-head <the-digest-printed-when-the-run-ended>"),
        },
        "laps": rows.iter().map(|r| json!({
            "attempted": r["attempted"],
            "decision": r["decision"],
            "detail": r["verdict"]["detail"],
            "lap": r["lap"],
            "passed": r["verdict"]["passed"],
        })).collect::<Vec<_>>(),
        "run": {
            "attempts": attempts,
            "id": run_id,
            "ledger_rows": rows.len(),
            "reason": last["verdict"]["detail"],
            "reason_in_metadata": metadata["reason"],
            "status": status,
            "status_disagrees_with_metadata": metadata["status"].as_str() != Some(status),
            "status_in_metadata": metadata["status"],
        },
        "segments": segs.len(),
        "work_ceiling_s": declared["wallclock_work_s"],
    })
}

fn cell(consumed: &Value, declared: &Value, unit: &str, changed: bool) -> (String, String) {
    let allowed = if changed {
        "**changed**".to_string()
    } else if declared.is_null() {
        "no ceiling".to_string()
    } else {
        format!("{declared}{unit}")
    };
    (allowed, format!("{consumed}{unit}"))
}

/// `receipt.md`: the same receipt for people.
pub fn receipt_markdown(r: &Value) -> String {
    let run = &r["run"];
    let changed = r["bounds_changed_during_run"] == true;
    let b = &r["bounds"];
    let (a_allowed, a_used) = cell(
        &b["attempts"]["consumed"],
        &b["attempts"]["declared"],
        "",
        changed,
    );
    let (t_allowed, t_used) = cell(
        &b["tokens"]["consumed"],
        &b["tokens"]["declared"],
        "",
        changed,
    );
    let (w_allowed, w_used) = cell(
        &b["wallclock_s"]["consumed"],
        &b["wallclock_s"]["declared"],
        "s",
        changed,
    );
    let mut s = format!(
        "# Run receipt — {}\n\n**{}** — {}\n\n## What this run was allowed, and what it used\n\n| | allowed | used |\n|---|---|---|\n| attempts | {a_allowed} | {a_used} |\n| tokens | {t_allowed} | {t_used} |\n| wall clock | {w_allowed} | {w_used} |\n\n",
        run["id"].as_str().unwrap_or_default(),
        run["status"].as_str().unwrap_or_default(),
        run["reason"].as_str().unwrap_or_default(),
    );
    if changed {
        s.push_str("The bounds changed between the invocations of this run:\n\n");
        for (i, d) in r["declarations"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let tokens = if d["tokens"].is_null() {
                "no ceiling".to_string()
            } else {
                d["tokens"].to_string()
            };
            s.push_str(&format!(
                "> {}. attempts {}, tokens {tokens}, wall clock {}s\n",
                i + 1,
                d["attempts"],
                d["wallclock_s"]
            ));
        }
        s.push('\n');
    }
    s.push_str(&format!(
        "The wall-clock figure is the whole ceiling. Work stops at **{}s**: the rest is kept for the wind-down turn of a run a bound stops, taken out of the ceiling and never added to it.\n\n",
        r["work_ceiling_s"]
    ));
    let g = &r["gate"];
    let kind = g["kind"].as_str().unwrap_or_default();
    s.push_str(&format!(
        "## What decided it\n\nThe `{kind}` gate{}: {}.\n\n## Laps\n\n| lap | verdict | decision | attempted | detail |\n|---|---|---|---|---|\n",
        if g["source"] == "shipped" {
            ", shipped with bl"
        } else {
            ""
        },
        gate_in_words(kind)
    ));
    for lap in r["laps"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            lap["lap"],
            // A gate that could not decide gave no verdict: ERROR, never FAIL.
            match (lap["passed"] == true, lap["decision"].as_str()) {
                (true, _) => "PASS",
                (false, Some("error")) => "ERROR",
                (false, _) => "FAIL",
            },
            lap["decision"].as_str().unwrap_or_default(),
            if lap["attempted"] == true {
                "yes"
            } else {
                "no"
            },
            // One line, and no `|`, to keep the table a table.
            lap["detail"]
                .as_str()
                .unwrap_or_default()
                .replace(['\n', '\r'], " ")
                .replace('|', "\\|")
        ));
    }
    s.push_str(&format!(
        "\n## Verifying this receipt\n\n{NOTE}\n\n```bash\n{}\n```\n",
        r["integrity"]["verify_command"]
            .as_str()
            .unwrap_or_default()
    ));
    s
}

/// What a gate kind checks, in the words of someone reading the receipt
/// (the ledger keeps bounded-loops' class name, e.g. `CommandGate`).
fn gate_in_words(kind: &str) -> &'static str {
    match kind {
        "command" => "it runs the loop's check command in the workspace, and exit 0 passes",
        "pytest" => "it runs the loop's tests with pytest, and every test must pass",
        "jsonschema" => "it checks the loop's JSON file against its schema",
        "composite" => "it asks several gates and combines their verdicts as loop.yaml says",
        "osv" => "it checks the dependencies for known vulnerabilities",
        "great_expectations" => "it runs a data-quality checkpoint",
        "axe" => "it checks the pages for accessibility problems",
        _ => "a plugin gate named in loop.yaml decides",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        lap: u64,
        decision: &str,
        attempted: bool,
        tokens: u64,
        secs: f64,
        attempts: u64,
    ) -> Value {
        json!({"lap": lap, "decision": decision, "attempted": attempted,
               "verdict": {"passed": decision == "done", "detail": format!("{decision} at {lap}")},
               "budget_spent": {"laps": lap, "tokens": tokens, "wallclock_s": secs},
               "gate": {"kind": "command", "source": "shipped", "implementation": "CommandGate"},
               "budget_declared": {"attempts": attempts, "tokens": null, "wallclock_s": 990, "wallclock_work_s": 900.0}})
    }

    #[test]
    fn a_resumed_run_sums_its_segments_and_notes_changed_bounds() {
        let rows = vec![
            row(1, "continue", true, 5, 0.1, 1),
            row(2, "halt", false, 5, 0.2, 1),
            row(1, "done", true, 7, 0.3, 3),
        ];
        let meta = json!({"ledger_head": "h", "reason": "gate-passed", "status": "DONE"});
        let r = receipt(&rows, &meta, "r1", "/x/runs/r1");
        assert_eq!(r["segments"], 2);
        assert_eq!(r["bounds"]["attempts"]["consumed"], 2);
        assert_eq!(r["bounds"]["tokens"]["consumed"], 12);
        assert_eq!(r["bounds"]["wallclock_s"]["consumed"], 0.5);
        assert_eq!(r["run"]["status"], "DONE");
        assert_eq!(r["run"]["status_disagrees_with_metadata"], false);
        assert_eq!(r["bounds_changed_during_run"], true);
        let md = receipt_markdown(&r);
        assert!(
            md.starts_with("# Run receipt — r1\n\n**DONE** — done at 1\n"),
            "{md}"
        );
        assert!(md.contains("| attempts | **changed** | 2 |"), "{md}");
        assert!(
            md.contains("> 2. attempts 3, tokens no ceiling, wall clock 990s"),
            "{md}"
        );
        assert!(md.contains("| 2 | FAIL | halt | no | halt at 2 |"), "{md}");
        // The gate is named in the reader's words, not by a class name.
        assert!(
            md.contains("The `command` gate, shipped with bl: it runs the loop's check command in the workspace, and exit 0 passes."),
            "{md}"
        );
        assert!(!md.contains("CommandGate"), "{md}");
    }

    /// A lap whose gate could not decide is ERROR, never FAIL, and a
    /// detail of several lines stays on its row.
    #[test]
    fn an_error_lap_reads_error_on_one_row() {
        let mut broke = row(1, "error", true, 5, 0.2, 1);
        broke["verdict"]["detail"] = json!("plugin: could not decide\nTypeError | at app.js:3");
        let meta = json!({"ledger_head": "h", "reason": "gate-error", "status": "ERROR"});
        let md = receipt_markdown(&receipt(&[broke], &meta, "r1", "/x/runs/r1"));
        assert!(
            md.contains(
                "| 1 | ERROR | error | yes | plugin: could not decide TypeError \\| at app.js:3 |\n"
            ),
            "{md}"
        );
    }
}
