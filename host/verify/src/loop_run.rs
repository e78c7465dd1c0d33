//! Loop runs and loop ledgers, checked and reported the way bounded-loops'
//! `bl verify` does: `chain`, `anchor` (the head against a witness) and
//! `completeness` (rows against the run's metadata).

use std::path::{Path, PathBuf};

use bl_store::loop_ledger::{ChainStatus, LedgerChain, verify_ledger};
use serde_json::Value;

use crate::Options;

/// Where the expected head came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// `--expect-head`, kept outside the run directory (the strong check).
    External,
    /// `metadata.json` beside the ledger (an editor of both satisfies it).
    CoLocated,
    /// No witness at all.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopReport {
    pub ledger_path: PathBuf,
    pub chain: LedgerChain,
    pub anchor: Anchor,
    /// `None` without a witness; otherwise whether the head matched.
    pub anchor_matches: Option<bool>,
    pub anchor_detail: String,
    /// `Some(recorded rows)` when metadata records them.
    pub recorded_rows: Option<u64>,
    pub completeness_detail: String,
    /// The calls an MCP client made on the run (`bl mcp`), when it made any.
    pub mcp_audit: Option<McpAuditCheck>,
}

/// Whether a run's MCP audit log holds as a chain, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpAuditCheck {
    pub passed: bool,
    pub detail: String,
}

const NO_WITNESS: &str = "no recorded head to compare against, so the chain is only evidence against an adversary who cannot recompute it: pass --expect-head with the digest printed when the run ended";
const NO_RECEIPT: &str = "no run metadata beside the ledger, so a removed tail would present as a shorter run: verify against a receipt written with --run-id";

impl LoopReport {
    pub fn chain_passed(&self) -> bool {
        self.chain.status == ChainStatus::Verified
    }

    pub fn anchor_passed(&self) -> bool {
        self.anchor_matches == Some(true)
    }

    pub fn completeness_passed(&self) -> bool {
        self.recorded_rows
            .is_some_and(|rows| self.chain.lines as u64 >= rows)
    }

    pub fn verified(&self) -> bool {
        self.chain_passed()
            && self.anchor_passed()
            && self.completeness_passed()
            && self.mcp_audit.as_ref().is_none_or(|a| a.passed)
    }

    pub fn anchor_status(&self) -> &'static str {
        match self.anchor_matches {
            None => "NO_WITNESS",
            Some(false) => "MISMATCH",
            Some(true) if self.anchor == Anchor::External => "MATCH_EXTERNAL",
            Some(true) => "MATCH_COLOCATED",
        }
    }

    pub fn completeness_status(&self) -> &'static str {
        match self.recorded_rows {
            None => "NO_RECEIPT",
            Some(_) if self.completeness_passed() => "COMPLETE",
            Some(_) => "TRUNCATED",
        }
    }

    /// The report as bounded-loops' `bl verify --json` writes it: Python's
    /// `json.dumps` of dicts in insertion order, so the key order is fixed.
    pub fn to_json_text(&self) -> String {
        let text = |v: &str| bl_core::python_json(&Value::from(v));
        let check = |name: &str,
                     passed: bool,
                     status: &str,
                     witness: Option<&str>,
                     detail: &str| {
            let witness = witness
                .map(|w| format!(", \"witness\": {}", text(w)))
                .unwrap_or_default();
            format!(
                "{{\"check\": {}, \"passed\": {passed}, \"status\": {}{witness}, \"detail\": {}}}",
                text(name),
                text(status),
                text(detail)
            )
        };
        let anchor_witness = self.anchor_matches.map(|_| match self.anchor {
            Anchor::External => "external",
            _ => "co-located",
        });
        let mut checks = vec![
            check(
                "chain",
                self.chain_passed(),
                self.chain.status.as_str(),
                None,
                &self.chain.detail,
            ),
            check(
                "anchor",
                self.anchor_passed(),
                self.anchor_status(),
                anchor_witness,
                &self.anchor_detail,
            ),
            check(
                "completeness",
                self.completeness_passed(),
                self.completeness_status(),
                self.recorded_rows.map(|_| "row-count"),
                &self.completeness_detail,
            ),
        ];
        // Only a run an MCP client touched has this check (bounded-loops'
        // runs never do).
        if let Some(audit) = &self.mcp_audit {
            let status = if audit.passed { "VERIFIED" } else { "BROKEN" };
            checks.push(check(
                "mcp audit",
                audit.passed,
                status,
                None,
                &audit.detail,
            ));
        }
        format!(
            "{{\"subcommand\": \"verify\", \"ledger_path\": {}, \"verified\": {}, \"head\": {}, \"lines\": {}, \"verified_lines\": {}, \"checks\": [{}]}}",
            text(&self.ledger_path.display().to_string()),
            self.verified(),
            text(&self.chain.head),
            self.chain.lines,
            self.chain.verified_lines,
            checks.join(", ")
        )
    }
}

/// The ledger a path names: the file itself, or `ledger.jsonl` (a loop run
/// directory) or else `.ledger.jsonl` (a loop package) inside a directory.
pub(crate) fn ledger_of(path: &Path) -> PathBuf {
    let path = &bl_core::python::pathlib_normal(path);
    if path.is_dir() {
        let run_ledger = bl_core::python::pathlib_normal(&path.join(bl_store::LoopRunDir::LEDGER));
        let package_ledger = bl_core::python::pathlib_normal(&path.join(bl_store::LoopDir::LEDGER));
        if !run_ledger.exists() && package_ledger.exists() {
            return package_ledger;
        }
        return run_ledger;
    }
    path.to_path_buf()
}

pub fn verify(path: &Path, options: &Options) -> LoopReport {
    let ledger_path = ledger_of(path);
    let chain = match std::fs::read(&ledger_path) {
        Ok(bytes) => verify_ledger(&bytes),
        Err(_) => LedgerChain {
            status: ChainStatus::Broken,
            detail: format!("no ledger at {}", ledger_path.display()),
            lines: 0,
            verified_lines: 0,
            head: bl_store::GENESIS_HASH.to_string(),
        },
    };
    // The run's metadata sits beside the ledger; unreadable means absent.
    let metadata: Option<Value> = ledger_path
        .parent()
        .and_then(|dir| std::fs::read(dir.join(bl_store::LoopRunDir::METADATA)).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok());
    let recorded_head = metadata
        .as_ref()
        .and_then(|m| m.get("ledger_head"))
        .and_then(Value::as_str);
    let (anchor, expected) = match (&options.expect_head, recorded_head) {
        (Some(head), _) => (Anchor::External, Some(head.as_str())),
        (None, Some(head)) => (Anchor::CoLocated, Some(head)),
        (None, None) => (Anchor::None, None),
    };
    let anchor_matches = expected.map(|e| e == chain.head);
    let anchor_detail = match (anchor_matches, anchor) {
        (None, _) => NO_WITNESS.to_string(),
        (Some(true), Anchor::External) => "head matches the digest you supplied. This is the strong check ONLY IF you kept that digest outside this directory: verify cannot see where you got it, and a digest copied out of the run directory proves nothing about an editor of that directory".to_string(),
        (Some(true), _) => "head matches the digest in the run receipt \u{2014} but that file sits beside the ledger, so an editor of both satisfies this. Re-run with --expect-head <digest> from your terminal or CI log for the strong check".to_string(),
        (Some(false), Anchor::External) => format!(
            "--expect-head records {} but the ledger now heads at {}",
            expected.unwrap_or_default(),
            chain.head
        ),
        (Some(false), _) => format!(
            "the run receipt records {} but the ledger now heads at {}",
            expected.unwrap_or_default(),
            chain.head
        ),
    };
    let recorded_rows = metadata
        .as_ref()
        .and_then(|m| m.get("ledger_rows"))
        .and_then(Value::as_u64);
    let completeness_detail = match recorded_rows {
        None => NO_RECEIPT.to_string(),
        Some(rows) if chain.lines as u64 >= rows => {
            format!("{} ledger rows for {rows} recorded rows", chain.lines)
        }
        Some(rows) => format!(
            "the run recorded {rows} rows but the ledger holds {}",
            chain.lines
        ),
    };
    let audit = ledger_path
        .parent()
        .map(|dir| dir.join(bl_store::RunDir::MCP_AUDIT))
        .filter(|audit| audit.is_file());
    let mcp_audit = audit.map(|audit| match crate::graph_run::verify_mcp_audit(&audit) {
        Ok(detail) => McpAuditCheck {
            passed: true,
            detail,
        },
        Err(finding) => McpAuditCheck {
            passed: false,
            detail: finding.to_string(),
        },
    });
    LoopReport {
        mcp_audit,
        ledger_path,
        chain,
        anchor,
        anchor_matches,
        anchor_detail,
        recorded_rows,
        completeness_detail,
    }
}
