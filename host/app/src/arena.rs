//! A graph run's arena page: the run's records, read and verified through
//! the runtime API (status, subscribe, artifacts), handed as recorded to
//! the pages adapter, which draws them and checks them again in the
//! browser.

use std::path::Path;

use crate::error::AppError;
use crate::runtime::GraphRuntime;

/// The page for the run at `dir`. Refused when its plan does not match
/// the plan id it records, or its log's chain is broken; a page whose
/// checkpoint or signature does not hold is made, and says so.
pub(crate) fn page(
    runtime: &GraphRuntime,
    dir: &Path,
    verifier: Option<&str>,
) -> Result<String, AppError> {
    Ok(live_page(runtime, dir, verifier, None)?.0)
}

/// The page with, for a live one, the URL its events come from; and how
/// many events it holds (the live URL's stream starts after them).
pub(crate) fn live_page(
    runtime: &GraphRuntime,
    dir: &Path,
    verifier: Option<&str>,
    live: Option<&dyn Fn(u64) -> String>,
) -> Result<(String, u64), AppError> {
    let status = runtime.status(dir)?;
    let events: Vec<String> = runtime
        .subscribe(dir, 0)
        .poll()?
        .into_iter()
        .map(|e| e.raw)
        .collect();
    let run_dir = bl_store::RunDir::new(dir);
    let read = |path: &Path| {
        std::fs::read_to_string(path)
            .map_err(|e| AppError::refused(format!("cannot read {}: {e}", path.display())))
    };
    let plan = read(&run_dir.plan())?;
    // The page draws plan.json as recorded: it must be the plan the run ran.
    let digest = bl_core::Sha256Digest::of(plan.as_bytes()).to_string();
    if digest != status.run.plan.plan_id {
        return Err(AppError::refused(format!(
            "{} is {digest}, not the plan this run ran ({}): the run directory was altered; no page is made",
            run_dir.plan().display(),
            status.run.plan.plan_id
        )));
    }
    let checkpoint = match latest_checkpoint(&run_dir.checkpoints()) {
        Some(path) => Some(read(&path)?),
        None => None,
    };
    let artifacts = runtime.artifacts(dir)?;
    let title = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let held = events.len() as u64;
    let live = live.map(|url| url(held));
    let page = bl_pages::arena_html(&bl_pages::ArenaInput {
        title: &title,
        plan: &plan,
        plan_id: &status.run.plan.plan_id,
        events: &events,
        checkpoint: checkpoint.as_deref(),
        verifier,
        artifacts: &artifacts,
        live: live.as_deref(),
    })
    .map_err(|e| AppError::refused(format!("{}: {e}", run_dir.plan().display())))?;
    Ok((page, held))
}

/// The checkpoint over the most events (`<size>.checkpoint`, zero-padded,
/// so the greatest name).
pub(crate) fn latest_checkpoint(dir: &Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "checkpoint"))
        .max()
}

/// Where a page of the run or loop run at `dir` goes unless told: beside
/// it, as `<name>.<kind>.html` (a file inside a run directory would fall
/// outside its seal).
fn beside(dir: &Path, kind: &str) -> std::path::PathBuf {
    let name = dir.file_name().unwrap_or(dir.as_os_str()).to_string_lossy();
    dir.with_file_name(format!("{name}.{kind}.html"))
}

/// Writes `page` to `out`, or beside `dir`; returns where.
pub(crate) fn write_page(
    page: &str,
    dir: &Path,
    kind: &str,
    out: Option<&Path>,
) -> Result<std::path::PathBuf, AppError> {
    let out = out.map_or_else(|| beside(dir, kind), Path::to_path_buf);
    std::fs::write(&out, page)
        .map_err(|e| AppError::refused(format!("cannot write {}: {e}", out.display())))?;
    Ok(out)
}
