//! `bl graph studio`: the studio page for a manifest (or a first graph to
//! start from), with bl-graph's linter, built as a page module, inline.

use std::path::{Path, PathBuf};

use bl_graph::Format;

use crate::{AppError, AppResult};

/// The graph the studio opens with when no manifest is named.
pub const STARTER: &str = include_str!("studio-starter.yaml");

/// The page module's file name, as `bl plugin build host/studio` names it.
pub const LINTER_FILE: &str = "bl-studio-lint.wasm";

/// The studio page for `from` (or the starter graph).
pub fn studio_page(from: Option<&Path>) -> AppResult<String> {
    let (name, text, format) = match from {
        None => (
            "first-graph.yaml".to_string(),
            STARTER.to_string(),
            Format::Yaml,
        ),
        Some(path) => read_manifest(path)?,
    };
    let linter = read_linter()?;
    Ok(bl_pages::studio_html(&name, &text, format, &linter))
}

/// The manifest's text, even when it does not lint: the studio is where
/// it gets fixed.
fn read_manifest(path: &Path) -> AppResult<(String, String, Format)> {
    let format = Format::from_path(path).ok_or_else(|| {
        AppError::refused(format!(
            "graph studio: {} is neither .yaml, .yml nor .json; the studio reads a graph/v1 manifest by its extension",
            path.display()
        ))
    })?;
    let cannot = |why: String| {
        AppError::refused(format!(
            "graph studio: cannot read {}: {why}",
            path.display()
        ))
    };
    let bytes = crate::paths::read_capped(path, bl_graph::MAX_DOCUMENT_BYTES)
        .map_err(|e| cannot(e.to_string()))?;
    if bytes.len() > bl_graph::MAX_DOCUMENT_BYTES {
        return Err(cannot(format!(
            "it is larger than bl's limit of {} MiB for a manifest",
            bl_graph::MAX_DOCUMENT_BYTES >> 20
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        cannot(format!(
            "it is not UTF-8 text (byte {} is not)",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok((name, text, format))
}

/// The linter module, from the first place that has it.
fn read_linter() -> AppResult<Vec<u8>> {
    let search = crate::paths::page_module_search_path();
    for dir in &search {
        if let Ok(bytes) = std::fs::read(dir.join(LINTER_FILE)) {
            return Ok(bytes);
        }
    }
    let looked: Vec<String> = search.iter().map(|d| d.display().to_string()).collect();
    Err(AppError::refused(format!(
        "graph studio: the studio's linter ({LINTER_FILE}) is in none of {}. Build it with `scripts/dev setup`, or `bl plugin build host/studio --out target/pages` in bl's checkout",
        looked.join(", ")
    )))
}

/// Where the page is written: `out`, else `studio.html` here.
pub fn default_out(out: Option<&Path>) -> PathBuf {
    out.map_or_else(|| PathBuf::from("studio.html"), Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_starter_graph_lints_with_no_warning() {
        let graph = bl_graph::lint(super::STARTER, bl_graph::Format::Yaml).unwrap();
        assert!(bl_graph::hazards::hazards(&graph, None).is_empty());
    }
}
