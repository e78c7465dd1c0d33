//! `bl verify PATH`: printing what bl-verify found.

use crate::output::outln;
use std::path::Path;

use bl_core::python_json;
use serde_json::{Value, json};

use crate::exit::{CliError, CliResult, Exit};

pub fn verify(
    path: &Path,
    expect_head: Option<&str>,
    pubkey: Option<&str>,
    reviewers: &[String],
    as_json: bool,
) -> CliResult {
    let verifier = pubkey
        .map(bl_app::keys::read_verifier_key)
        .transpose()
        .map_err(|e| CliError::refused(format!("verify: {e}")))?;
    let options = bl_verify::Options {
        expect_head: expect_head.map(str::to_string),
        verifier,
        reviewers: (!reviewers.is_empty())
            .then(|| {
                reviewers
                    .iter()
                    .map(|k| bl_app::keys::read_verifier_key_for("--reviewer", k))
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
            .map_err(|e| CliError::refused(format!("verify: {e}")))?,
    };
    let report = bl_verify::verify(path, &options).map_err(|e| {
        CliError::refused(format!("verify: {e}")).with_detail(crate::exit::ErrorDetail {
            code: Some("nothing_to_verify".into()),
            path: Some(path.display().to_string()),
            ..Default::default()
        })
    })?;
    match &report {
        bl_verify::Report::Graph(graph) => print_graph(graph, as_json, pubkey.is_some()),
        bl_verify::Report::Loop(ledger) => print_loop(ledger, as_json),
    }
    Ok(if report.ok() { Exit::Success } else { Exit::No })
}

fn print_graph(report: &bl_verify::GraphReport, as_json: bool, keyed: bool) {
    use bl_verify::Status;
    if as_json {
        let list: Vec<Value> = report
            .checks
            .iter()
            .map(|c| {
                let status = match c.status {
                    Status::Ok => "ok",
                    Status::Fail => "fail",
                    Status::NotApplicable => "not_applicable",
                };
                json!({"name": c.name, "status": status, "detail": c.detail})
            })
            .collect();
        let path = report.path.display().to_string();
        outln!(
            "{}",
            python_json(&json!({"ok": report.ok(), "path": path, "checks": list}))
        );
        return;
    }
    for c in &report.checks {
        let label = match c.status {
            Status::Ok => "ok  ",
            Status::Fail => "FAIL",
            Status::NotApplicable => "n/a ",
        };
        outln!("{label} {:<10} {}", c.name, c.detail);
    }
    outln!("{}", report.verdict(keyed));
}

/// bounded-loops' report for a loop ledger, in its words.
fn print_loop(report: &bl_verify::LoopReport, as_json: bool) {
    if as_json {
        outln!("{}", report.to_json_text());
        return;
    }
    let chain = &report.chain;
    outln!("Ledger: {}", report.ledger_path.display());
    outln!("Head:   {}", chain.head);
    outln!(
        "Rows:   {} ({} covered by the chain)\n",
        chain.lines,
        chain.verified_lines
    );
    let mut rows = vec![
        (
            "chain",
            report.chain_passed(),
            chain.status.as_str(),
            &chain.detail,
        ),
        (
            "anchor",
            report.anchor_passed(),
            report.anchor_status(),
            &report.anchor_detail,
        ),
        (
            "completeness",
            report.completeness_passed(),
            report.completeness_status(),
            &report.completeness_detail,
        ),
    ];
    if let Some(audit) = &report.mcp_audit {
        let status = if audit.passed { "VERIFIED" } else { "BROKEN" };
        rows.push(("mcp audit", audit.passed, status, &audit.detail));
    }
    for (name, passed, status, detail) in rows {
        let mark = if passed { "\u{2713}" } else { "\u{2717}" };
        outln!("{mark} {name:<13} {status}\n  {detail}");
    }
    outln!();
    use bl_store::loop_ledger::ChainStatus;
    if report.verified() {
        if report.anchor == bl_verify::Anchor::External {
            outln!(
                "Verified: this run's LEDGER is intact and accounts for every lap it claims, and its head matches the digest you supplied.\n  Not checked: receipt.md / receipt.json, which are renderings of the ledger and are not covered by its hash chain.\n  Established only if that digest was kept outside this run directory. A digest read out of the directory cannot show it was not rewritten wholesale."
            );
        } else {
            outln!(
                "Verified: this run's LEDGER is internally consistent and accounts for every lap it claims.\n  Not established: that the run directory was not rewritten wholesale. Only --expect-head with a digest kept elsewhere can show that."
            );
        }
        return;
    }
    let verdict = match chain.status {
        ChainStatus::Broken => "the ledger was edited after it was written.",
        ChainStatus::TornTail => "the final row is a partial write \u{2014} an interrupted run.",
        ChainStatus::Unchained => "written before 0.6.6, which is when chaining began.",
        ChainStatus::Mixed => "",
        ChainStatus::Verified => "one check could not be satisfied. See above.",
    };
    if chain.status == ChainStatus::Mixed {
        outln!("NOT VERIFIED in full: an unchained prefix predates chaining.");
    } else {
        outln!("NOT VERIFIED: {verdict}");
    }
}
