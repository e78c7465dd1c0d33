//! Audit plans and their reconciliation (seed 000's audit plan service and
//! `reconcile_audit`), in bounded-loops 0.7's formats.
//!
//! An audit plan names the cells of an artifact that must be audited and
//! assigns each to an auditor. Audit nodes' outputs are audit results: one
//! auditor's finding on one cell, each saying who assessed it and who
//! produced what was assessed. [`reconcile`] folds the results into a
//! coverage table and a release verdict:
//! - a cell's severity is the highest any lane found (never lowered);
//! - lanes that disagree are DISSENT, which alone blocks nothing;
//! - a mandatory cell blocks release when no one audited it, when only its
//!   producer did, or when an S0 or S1 finding on it is not resolved;
//! - every blocking cell is reported in one pass, in the plan's order.
//!
//! Independence is what each result asserts (its assessor differs from its
//! producer); nothing here checks who really ran the audit. The verdict is
//! advice for a human release owner; the event log remains the authority.

use serde::Serialize;
use serde_json::Value;

/// A plan or result that is not well formed: its code, the JSON pointer of
/// the value, and what is wrong (shown as `<code> at <pointer>: <message>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code} at {pointer}: {message}")]
pub struct AuditRefusal {
    pub code: &'static str,
    pub pointer: String,
    pub message: String,
}

fn refusal(
    code: &'static str,
    pointer: impl Into<String>,
    message: impl Into<String>,
) -> AuditRefusal {
    AuditRefusal {
        code,
        pointer: pointer.into(),
        message: message.into(),
    }
}

/// A cell of the plan: a name results are matched to exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub name: String,
    pub mandatory: bool,
}

/// Who audits a cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    pub cell: String,
    pub model_id: String,
    pub tool_id: String,
    pub version: String,
    pub rubric_digest: String,
    pub independence: String,
}

/// An audit plan (`--audit-plan`, kept as `audit-plan.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditPlan {
    pub artifact_digest: String,
    pub rubric_digest: String,
    pub cells: Vec<Cell>,
    pub assignments: Vec<Assignment>,
}

fn is_sha256(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// `bytes` as JSON, or where they are not.
fn json_of(bytes: &[u8]) -> Result<Value, AuditRefusal> {
    serde_json::from_slice(bytes).map_err(|e| {
        refusal(
            "invalid_json",
            "",
            format!("line {} column {}: {e}", e.line(), e.column()),
        )
    })
}

fn object<'a>(
    value: &'a Value,
    pointer: &str,
    code: &'static str,
) -> Result<&'a serde_json::Map<String, Value>, AuditRefusal> {
    value
        .as_object()
        .ok_or_else(|| refusal(code, pointer, "must be a JSON object"))
}

fn field<'a>(
    fields: &'a serde_json::Map<String, Value>,
    pointer: &str,
    name: &str,
) -> Result<&'a Value, AuditRefusal> {
    fields.get(name).ok_or_else(|| {
        refusal(
            "missing_field",
            format!("{pointer}/{name}"),
            format!("'{name}' is required"),
        )
    })
}

/// A string that must not be empty.
fn text(
    fields: &serde_json::Map<String, Value>,
    pointer: &str,
    name: &str,
    code: &'static str,
) -> Result<String, AuditRefusal> {
    match field(fields, pointer, name)?.as_str() {
        Some(s) if !s.is_empty() => Ok(s.to_string()),
        _ => Err(refusal(
            code,
            format!("{pointer}/{name}"),
            format!("{name} must be a non-empty string"),
        )),
    }
}

fn digest(
    fields: &serde_json::Map<String, Value>,
    pointer: &str,
    name: &str,
) -> Result<String, AuditRefusal> {
    let value = field(fields, pointer, name)?;
    match value.as_str() {
        Some(s) if is_sha256(s) => Ok(s.to_string()),
        _ => Err(refusal(
            "audit_digest",
            format!("{pointer}/{name}"),
            "must be a SHA-256 digest (sha256: and 64 lowercase hex digits)",
        )),
    }
}

fn list<'a>(
    fields: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Result<&'a Vec<Value>, AuditRefusal> {
    field(fields, "", name)?
        .as_array()
        .ok_or_else(|| refusal("audit_plan", format!("/{name}"), "must be a list"))
}

impl AuditPlan {
    /// Reads and checks a plan: every field present, digests well formed,
    /// at least one cell, cell names unique, each mandatory cell assigned.
    /// Extra fields are ignored, as bounded-loops ignores them.
    pub fn parse(bytes: &[u8]) -> Result<AuditPlan, AuditRefusal> {
        let value = json_of(bytes)?;
        let top = object(&value, "", "audit_plan")?;
        let artifact_digest = digest(top, "", "artifact_digest")?;
        let rubric_digest = digest(top, "", "rubric_digest")?;
        let mut cells = Vec::new();
        for (i, cell) in list(top, "mandatory_cells")?.iter().enumerate() {
            let at = format!("/mandatory_cells/{i}");
            let fields = object(cell, &at, "audit_plan")?;
            let name = text(fields, &at, "name", "audit_plan")?;
            let mandatory = field(fields, &at, "mandatory")?.as_bool().ok_or_else(|| {
                refusal(
                    "audit_plan",
                    format!("{at}/mandatory"),
                    "must be true or false",
                )
            })?;
            cells.push(Cell { name, mandatory });
        }
        if cells.is_empty() {
            return Err(refusal(
                "audit_plan",
                "/mandatory_cells",
                "audit plan must have at least one mandatory cell (fail-closed: empty plan would vacuously pass)",
            ));
        }
        let mut names: Vec<&str> = cells.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(refusal(
                "audit_plan",
                "/mandatory_cells",
                format!(
                    "duplicate cell names in mandatory cells ('{}' twice)",
                    twice[0]
                ),
            ));
        }
        let mut assignments = Vec::new();
        for (i, assignment) in list(top, "assignments")?.iter().enumerate() {
            let at = format!("/assignments/{i}");
            let fields = object(assignment, &at, "audit_assignment")?;
            let string = |name| text(fields, &at, name, "audit_assignment");
            assignments.push(Assignment {
                cell: string("cell")?,
                model_id: string("model_id")?,
                tool_id: string("tool_id")?,
                version: string("version")?,
                rubric_digest: digest(fields, &at, "rubric_digest")?,
                independence: string("independence")?,
            });
        }
        if let Some(unassigned) = cells
            .iter()
            .find(|c| c.mandatory && !assignments.iter().any(|a| a.cell == c.name))
        {
            return Err(refusal(
                "audit_plan",
                format!("/assignments/{}", unassigned.name),
                format!("mandatory cell '{}' has no assignment", unassigned.name),
            ));
        }
        Ok(AuditPlan {
            artifact_digest,
            rubric_digest,
            cells,
            assignments,
        })
    }
}

/// How serious a finding is, from S3 (least) to S0 (most).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    S3,
    S2,
    S1,
    S0,
}

impl Severity {
    pub fn name(self) -> &'static str {
        match self {
            Severity::S0 => "S0",
            Severity::S1 => "S1",
            Severity::S2 => "S2",
            Severity::S3 => "S3",
        }
    }

    fn parse(text: &str) -> Option<Severity> {
        Some(match text {
            "S0" => Severity::S0,
            "S1" => Severity::S1,
            "S2" => Severity::S2,
            "S3" => Severity::S3,
            _ => return None,
        })
    }
}

/// One finding of one auditor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub finding_id: String,
    pub severity: Severity,
    /// `resolved` clears an S0 or S1 finding; anything else leaves it open.
    pub disposition: String,
}

/// One auditor's result on one cell: an audit node's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditResult {
    pub cell: String,
    pub assessor: String,
    pub producer: String,
    /// None: the auditor found nothing (a clean lane).
    pub finding: Option<Finding>,
}

impl AuditResult {
    pub fn parse(bytes: &[u8]) -> Result<AuditResult, AuditRefusal> {
        let value = json_of(bytes)?;
        let top = object(&value, "", "audit_result")?;
        let string = |name| text(top, "", name, "audit_result");
        let (cell, assessor, producer) =
            (string("cell")?, string("assessor")?, string("producer")?);
        let finding = match field(top, "", "finding")? {
            Value::Null => None,
            Value::Object(fields) => {
                let at = "/finding";
                let severity = field(fields, at, "severity")?;
                Some(Finding {
                    finding_id: text(fields, at, "finding_id", "audit_finding")?,
                    severity: severity.as_str().and_then(Severity::parse).ok_or_else(|| {
                        refusal(
                            "audit_finding",
                            "/finding/severity",
                            format!("unknown finding severity {severity} (S0, S1, S2 or S3)"),
                        )
                    })?,
                    disposition: text(fields, at, "disposition", "audit_finding")?,
                })
            }
            _ => {
                return Err(refusal(
                    "audit_result",
                    "/finding",
                    "finding must be a JSON object or null",
                ));
            }
        };
        Ok(AuditResult {
            cell,
            assessor,
            producer,
            finding,
        })
    }

    fn independent(&self) -> bool {
        self.assessor != self.producer
    }

    /// Whether this lane holds an S0 or S1 finding that is not resolved.
    fn blocker(&self) -> Option<&str> {
        self.finding
            .as_ref()
            .filter(|f| f.severity >= Severity::S1 && f.disposition != "resolved")
            .map(|f| f.finding_id.as_str())
    }
}

/// One cell's row of the coverage table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CellCoverage {
    pub cell: String,
    pub mandatory: bool,
    /// The assessors, each once, in the order their results came; one who
    /// audited their own output is shown as `<id> (self)`.
    pub covered_by: Vec<String>,
    /// The highest severity any lane found, or `none`.
    pub verdict_severity: &'static str,
    pub dissent: bool,
    /// Mandatory, and no one audited it.
    pub missing: bool,
    /// Mandatory, audited, but only by its producer.
    pub producer_only: bool,
    pub blocking: bool,
    /// The open S0/S1 findings, each once.
    pub blocking_finding_ids: Vec<String>,
}

/// The coverage table and release verdict (bounded-loops' arena
/// `audit_coverage`, plus the open findings per cell).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coverage {
    pub cells: Vec<CellCoverage>,
    pub released: bool,
    pub reason: String,
    pub blocking_cells: Vec<String>,
    /// Results that could not be read, and results for no cell of the plan.
    pub notes: Vec<String>,
}

/// At most this many notes are kept; the rest are counted.
const MAX_NOTES: usize = 100;

/// A result as an audit node produced it: where it came from (for notes)
/// and what it says, or why it could not be read.
pub struct Lane {
    pub source: String,
    pub result: Result<AuditResult, AuditRefusal>,
}

/// Folds the results into the coverage table and the release verdict. A
/// result that cannot be read covers nothing and is noted.
pub fn reconcile(plan: &AuditPlan, lanes: &[Lane]) -> Coverage {
    let mut notes = Vec::new();
    let mut read: Vec<&AuditResult> = Vec::new();
    for lane in lanes {
        match &lane.result {
            Ok(result) if plan.cells.iter().any(|c| c.name == result.cell) => read.push(result),
            Ok(result) => notes.push(format!(
                "{}: cell '{}' is not in the audit plan; ignored",
                lane.source, result.cell
            )),
            Err(e) => notes.push(format!("{}: {e}", lane.source)),
        }
    }
    if notes.len() > MAX_NOTES {
        let more = notes.len() - MAX_NOTES;
        notes.truncate(MAX_NOTES);
        notes.push(format!("... {more} more note(s) omitted"));
    }
    let cells: Vec<CellCoverage> = plan
        .cells
        .iter()
        .map(|cell| {
            let on: Vec<&AuditResult> = read
                .iter()
                .copied()
                .filter(|r| r.cell == cell.name)
                .collect();
            let mut covered_by: Vec<String> = Vec::new();
            for r in &on {
                let who = if r.independent() {
                    r.assessor.clone()
                } else {
                    format!("{} (self)", r.assessor)
                };
                if !covered_by.contains(&who) {
                    covered_by.push(who);
                }
            }
            let highest = on
                .iter()
                .filter_map(|r| r.finding.as_ref())
                .map(|f| f.severity)
                .max();
            let mut outcomes: Vec<Option<Severity>> = on
                .iter()
                .map(|r| r.finding.as_ref().map(|f| f.severity))
                .collect();
            outcomes.sort_unstable();
            outcomes.dedup();
            let mut blocking_finding_ids: Vec<String> = Vec::new();
            for id in on.iter().filter_map(|r| r.blocker()) {
                if !blocking_finding_ids.iter().any(|b| b == id) {
                    blocking_finding_ids.push(id.to_string());
                }
            }
            let missing = cell.mandatory && on.is_empty();
            let producer_only =
                cell.mandatory && !on.is_empty() && on.iter().all(|r| !r.independent());
            let blocking =
                missing || producer_only || (cell.mandatory && !blocking_finding_ids.is_empty());
            CellCoverage {
                cell: cell.name.clone(),
                mandatory: cell.mandatory,
                covered_by,
                verdict_severity: highest.map_or("none", Severity::name),
                dissent: outcomes.len() > 1,
                missing,
                producer_only,
                blocking,
                blocking_finding_ids,
            }
        })
        .collect();
    let blocking_cells: Vec<String> = cells
        .iter()
        .filter(|c| c.blocking)
        .map(|c| c.cell.clone())
        .collect();
    let (released, reason) = if !plan.cells.iter().any(|c| c.mandatory) {
        (
            false,
            "release blocked: no mandatory release cells defined".to_string(),
        )
    } else if blocking_cells.is_empty() {
        (
            true,
            "release cleared: every mandatory cell is independently covered with no unresolved S0/S1"
                .to_string(),
        )
    } else {
        (
            false,
            format!("release blocked on cells: {}", blocking_cells.join(", ")),
        )
    };
    Coverage {
        cells,
        released,
        reason,
        blocking_cells,
        notes,
    }
}

/// What is shown when the coverage cannot be computed (no readable plan):
/// release blocked, every cell counted as blocking, and why.
pub fn failed_closed(why: &str) -> Coverage {
    Coverage {
        cells: Vec::new(),
        released: false,
        reason: format!("audit plan present but projection failed closed: {why}"),
        blocking_cells: vec!["*".to_string()],
        notes: vec![format!("projection_error: {why}")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn plan(cells: &[(&str, bool)]) -> AuditPlan {
        let json = serde_json::json!({
            "artifact_digest": D, "rubric_digest": D,
            "mandatory_cells": cells.iter().map(|(n, m)| serde_json::json!({"name": n, "mandatory": m})).collect::<Vec<_>>(),
            "assignments": cells.iter().map(|(n, _)| serde_json::json!({
                "cell": n, "model_id": "m", "tool_id": "t", "version": "1",
                "rubric_digest": D, "independence": "assessor != producer"})).collect::<Vec<_>>(),
        });
        AuditPlan::parse(json.to_string().as_bytes()).unwrap()
    }

    fn lane(
        cell: &str,
        assessor: &str,
        producer: &str,
        finding: Option<(&str, &str, &str)>,
    ) -> Lane {
        let finding = finding.map(
            |(id, s, d)| serde_json::json!({"finding_id": id, "severity": s, "disposition": d}),
        );
        let json = serde_json::json!({"cell": cell, "assessor": assessor, "producer": producer, "finding": finding});
        Lane {
            source: format!("{cell}/{assessor}"),
            result: AuditResult::parse(json.to_string().as_bytes()),
        }
    }

    #[test]
    fn independent_clean_coverage_of_every_mandatory_cell_releases() {
        let p = plan(&[("facts", true), ("tone", false)]);
        let c = reconcile(&p, &[lane("facts", "b", "a", None)]);
        assert!(c.released, "{c:?}");
        assert_eq!(
            c.reason,
            "release cleared: every mandatory cell is independently covered with no unresolved S0/S1"
        );
        assert!(!c.cells[1].blocking, "an optional cell never blocks");
    }

    #[test]
    fn missing_self_only_and_open_blockers_all_block_in_one_pass() {
        let p = plan(&[
            ("facts", true),
            ("style", true),
            ("safety", true),
            ("ok", true),
        ]);
        let c = reconcile(
            &p,
            &[
                lane("style", "a", "a", None),
                lane("safety", "b", "a", Some(("F1", "S1", "waived"))),
                lane("ok", "b", "a", Some(("F2", "S0", "resolved"))),
            ],
        );
        assert!(!c.released);
        assert_eq!(c.blocking_cells, ["facts", "style", "safety"]);
        assert_eq!(c.reason, "release blocked on cells: facts, style, safety");
        assert!(c.cells[0].missing && c.cells[1].producer_only);
        assert_eq!(c.cells[1].covered_by, ["a (self)"]);
        assert_eq!(c.cells[2].blocking_finding_ids, ["F1"]);
        assert_eq!(
            c.cells[3].verdict_severity, "S0",
            "never lowered by resolving"
        );
    }

    #[test]
    fn dissent_is_shown_but_alone_blocks_nothing_and_severity_is_the_highest() {
        let p = plan(&[("facts", true)]);
        let c = reconcile(
            &p,
            &[
                lane("facts", "b", "a", None),
                lane("facts", "c", "a", Some(("F", "S3", "open"))),
            ],
        );
        assert!(c.released && c.cells[0].dissent);
        assert_eq!(c.cells[0].verdict_severity, "S3");
        let same = reconcile(
            &p,
            &[
                lane("facts", "b", "a", Some(("F", "S2", "open"))),
                lane("facts", "c", "a", Some(("F", "S2", "open"))),
            ],
        );
        assert!(!same.cells[0].dissent);
    }

    #[test]
    fn an_unreadable_result_covers_nothing_and_is_noted() {
        let p = plan(&[("facts", true)]);
        let bad = Lane {
            source: "node 'r'".into(),
            result: AuditResult::parse(br#"{"cell":"facts","assessor":"b","producer":"a","finding":{"finding_id":"F","severity":"S7","disposition":"open"}}"#),
        };
        let c = reconcile(&p, &[bad, lane("other", "b", "a", None)]);
        assert!(c.cells[0].missing && !c.released);
        assert_eq!(c.notes.len(), 2, "{:?}", c.notes);
        assert!(
            c.notes[0].contains("audit_finding at /finding/severity"),
            "{:?}",
            c.notes
        );
    }

    #[test]
    fn a_plan_without_a_mandatory_cell_never_releases() {
        let c = reconcile(&plan(&[("tone", false)]), &[]);
        assert!(!c.released);
        assert_eq!(
            c.reason,
            "release blocked: no mandatory release cells defined"
        );
    }

    #[test]
    fn bad_plans_are_refused_with_code_and_pointer() {
        let cases = [
            (r#"{"#, "invalid_json at "),
            (
                r#"{"rubric_digest":"x"}"#,
                "missing_field at /artifact_digest",
            ),
            (
                &format!(
                    r#"{{"artifact_digest":"{D}","rubric_digest":"sha256:AB","mandatory_cells":[],"assignments":[]}}"#
                ),
                "audit_digest at /rubric_digest",
            ),
            (
                &format!(
                    r#"{{"artifact_digest":"{D}","rubric_digest":"{D}","mandatory_cells":[],"assignments":[]}}"#
                ),
                "audit_plan at /mandatory_cells: audit plan must have at least one mandatory cell",
            ),
            (
                &format!(
                    r#"{{"artifact_digest":"{D}","rubric_digest":"{D}","mandatory_cells":[{{"name":"a","mandatory":true}},{{"name":"a","mandatory":false}}],"assignments":[]}}"#
                ),
                "audit_plan at /mandatory_cells: duplicate cell names",
            ),
            (
                &format!(
                    r#"{{"artifact_digest":"{D}","rubric_digest":"{D}","mandatory_cells":[{{"name":"a","mandatory":true}}],"assignments":[]}}"#
                ),
                "audit_plan at /assignments/a: mandatory cell 'a' has no assignment",
            ),
            (
                &format!(
                    r#"{{"artifact_digest":"{D}","rubric_digest":"{D}","mandatory_cells":[{{"name":"a","mandatory":"no"}}],"assignments":[]}}"#
                ),
                "audit_plan at /mandatory_cells/0/mandatory: must be true or false",
            ),
            (
                &format!(
                    r#"{{"artifact_digest":"{D}","rubric_digest":"{D}","mandatory_cells":[{{"name":"a","mandatory":true}}],"assignments":[{{"cell":"a","model_id":"","tool_id":"t","version":"1","rubric_digest":"{D}","independence":"i"}}]}}"#
                ),
                "audit_assignment at /assignments/0/model_id",
            ),
        ];
        for (text, says) in cases {
            let e = AuditPlan::parse(text.as_bytes()).unwrap_err().to_string();
            assert!(e.starts_with(says), "{text}: {e}");
        }
    }
}
