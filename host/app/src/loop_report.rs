//! A loop run's report page (`bl report`): the run's metadata and its
//! ledger's laps, the ledger verified as `bl verify` verifies it, drawn by
//! the pages adapter.

use std::path::Path;

use serde_json::Value;

use crate::error::AppError;

/// The report of the loop run at `run_dir` (what `bl run --run-id` wrote).
pub fn page(run_dir: &Path) -> Result<String, AppError> {
    let dir = bl_store::LoopRunDir::new(run_dir);
    if let Some(said) = dir.unrecorded() {
        return Err(AppError::refused(said));
    }
    let read = |path: &Path| {
        std::fs::read_to_string(path).map_err(|e| {
            AppError::refused(format!(
                "{} is not a loop run directory (bl run --run-id writes one): cannot read {}: {e}",
                run_dir.display(),
                path.display()
            ))
        })
    };
    let metadata: Value = serde_json::from_str(&read(&dir.metadata())?)
        .map_err(|e| AppError::refused(format!("{}: not JSON: {e}", dir.metadata().display())))?;
    // A line that is not JSON is still a lap of the page (shown empty);
    // the verification below says what is wrong with it.
    let laps: Vec<Value> = read(&dir.ledger())?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
        .collect();
    let report = bl_verify::verify(run_dir, &bl_verify::Options::default())
        .map_err(|e| AppError::refused(e.to_string()))?;
    let bl_verify::Report::Loop(report) = report else {
        return Err(AppError::refused(format!(
            "{} is a graph run: `bl graph arena --run` draws it",
            run_dir.display()
        )));
    };
    let chain = &report.chain;
    let verification = format!(
        "{} of {} rows chained, head {}; {}",
        chain.verified_lines, chain.lines, chain.head, chain.detail
    );
    let title = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(bl_pages::loop_report_html(&bl_pages::LoopReportInput {
        title: &title,
        metadata: &metadata,
        laps: &laps,
        verified: report.verified(),
        verification: &verification,
    }))
}

/// Writes the report to `out`, or beside the run as `<run>.report.html`;
/// returns where.
pub fn write(run_dir: &Path, out: Option<&Path>) -> Result<std::path::PathBuf, AppError> {
    crate::arena::write_page(&page(run_dir)?, run_dir, "report", out)
}
