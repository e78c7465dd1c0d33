//! A loop run's report: its outcome, each lap's verdict, decision and
//! spend against its bounds, and whether its ledger verified when the
//! page was made. Plain HTML and one stylesheet (allowed by its hash); no
//! script, nothing fetched.

use serde_json::Value;

use crate::arena::{STYLE, csp_hash, escape, head};

/// What a loop report is drawn from.
pub struct LoopReportInput<'a> {
    pub title: &'a str,
    /// The run's `metadata.json` (status, reason, laps, ledger head).
    pub metadata: &'a Value,
    /// Each line of its ledger, in order.
    pub laps: &'a [Value],
    /// Whether `bl verify` accepted the ledger, and its words.
    pub verified: bool,
    pub verification: &'a str,
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The report page.
pub fn loop_report_html(input: &LoopReportInput) -> String {
    let m = input.metadata;
    let mut rows = String::new();
    for lap in input.laps {
        let verdict = &lap["verdict"];
        let passed = verdict["passed"].as_bool();
        rows.push_str(&format!(
            r#"<tr class="{class}"><td>{lap}</td><td>{ts}</td><td>{verdict}</td><td>{detail}</td><td>{decision}</td><td>{tokens}</td><td>{seconds}</td></tr>"#,
            class = match passed {
                Some(true) => "passed",
                Some(false) => "failed",
                None => "undecided",
            },
            lap = escape(&text(&lap["lap"])),
            ts = escape(&text(&lap["ts"])),
            verdict = match passed {
                Some(true) => "passed",
                Some(false) => "failed",
                None => "no verdict",
            },
            detail = escape(&text(&verdict["detail"])),
            decision = escape(&text(&lap["decision"])),
            tokens = escape(&text(&lap["budget_spent"]["tokens"])),
            seconds = escape(&text(&lap["budget_spent"]["wallclock_s"])),
        ));
    }
    let declared = input
        .laps
        .last()
        .map(|l| &l["budget_declared"])
        .unwrap_or(&Value::Null);
    let csp = format!(
        "default-src 'none'; style-src '{}'; base-uri 'none'; form-action 'none'",
        csp_hash(STYLE)
    );
    format!(
        r#"{head}<header>
<h1>bl report <span class="run">{title}</span></h1>
<p id="trust" class="{trust_class}">{trust}</p>
<p id="summary">{status}: {reason}; {laps} laps; ledger head <code>{ledger_head}</code></p>
<p id="bounds">Bounds declared: {attempts} attempts, {tokens} tokens, {wallclock} s.</p>
</header>
<main class="report">
<table id="laps">
<tr><th>lap</th><th>when</th><th>verdict</th><th>what the gate found</th><th>decision</th><th>tokens so far</th><th>seconds so far</th></tr>
{rows}
</table>
</main>
</body>
</html>
"#,
        head = head("report", input.title, &csp),
        title = escape(input.title),
        trust_class = if input.verified {
            "verified"
        } else {
            "unverified"
        },
        trust = escape(&format!(
            "{}: {}",
            if input.verified {
                "Ledger verified when this page was made"
            } else {
                "Ledger NOT verified"
            },
            input.verification
        )),
        status = escape(&text(&m["status"])),
        reason = escape(&text(&m["reason"])),
        laps = escape(&text(&m["laps"])),
        ledger_head = escape(&text(&m["ledger_head"])),
        attempts = escape(&text(&declared["attempts"])),
        tokens = escape(&text(&declared["tokens"])),
        wallclock = escape(&text(&declared["wallclock_s"])),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_lap_is_a_row_and_run_text_is_escaped() {
        let metadata =
            json!({"status": "DONE", "reason": "gate-passed", "laps": 1, "ledger_head": "ab"});
        let laps = vec![
            json!({"lap": 1, "verdict": {"passed": true, "detail": "<b>ok</b>"}, "decision": "done"}),
        ];
        let page = loop_report_html(&LoopReportInput {
            title: "r1",
            metadata: &metadata,
            laps: &laps,
            verified: true,
            verification: "2 rows",
        });
        assert!(page.contains(r#"<tr class="passed"><td>1</td>"#));
        assert!(page.contains("&lt;b&gt;ok&lt;/b&gt;"));
        assert!(page.contains("DONE: gate-passed"));
        assert!(!page.contains("<script"));
    }
}
