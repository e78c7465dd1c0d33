//! The server's resources and prompts, by bounded-loops' names: the
//! workspace's loop catalog (`bounded-loops://catalog`), each loop's
//! manifest (as `bl show` states it) and prompt
//! (`bounded-loops://loop/{name}/manifest`, `…/prompt`), and the prompts
//! `run_loop`, `write_loop` and `audit_loop`, which walk an agent through
//! bl's tools in the safe order (inspect, lint, preview, then run).

use std::path::{Path, PathBuf};

use rmcp::ErrorData;
use rmcp::model::{
    GetPromptResult, Prompt, PromptArgument, PromptMessage, Resource, ResourceContents,
    ResourceTemplate, Role,
};
use serde_json::Value;

pub const CATALOG: &str = "bounded-loops://catalog";
const LOOP: &str = "bounded-loops://loop/";

pub fn resources() -> Vec<Resource> {
    vec![
        Resource::new(CATALOG, "catalog")
            .with_description("The loop packages of this workspace: its catalog/README.md when it has one, else a table of the loops it holds")
            .with_mime_type("text/markdown"),
    ]
}

pub fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{LOOP}{{name}}/manifest"), "loop-manifest")
            .with_description("A loop's runner, gate, bounds, content hash and risk flags, as bl_show states them")
            .with_mime_type("application/json"),
        ResourceTemplate::new(format!("{LOOP}{{name}}/prompt"), "loop-prompt")
            .with_description("A loop's task, its PROMPT.md")
            .with_mime_type("text/markdown"),
    ]
}

/// The loop package named `name` (its loop.yaml's name) in `workspace`.
fn package(workspace: &Path, name: &str) -> Option<PathBuf> {
    bl_app::loop_info::list(workspace)
        .into_iter()
        .find(|(_, row)| row["name"] == name)
        .map(|(dir, _)| dir)
}

fn text(uri: &str, mime: &str, text: String) -> ResourceContents {
    ResourceContents::TextResourceContents {
        uri: uri.to_string(),
        mime_type: Some(mime.to_string()),
        text,
        meta: None,
    }
}

/// The resource at `uri`, read from `workspace`.
pub fn read(workspace: &Path, uri: &str) -> Result<ResourceContents, ErrorData> {
    let unknown = || ErrorData::resource_not_found(format!("no resource {uri}"), None);
    if uri == CATALOG {
        if let Ok(readme) = std::fs::read_to_string(workspace.join("catalog/README.md")) {
            return Ok(text(uri, "text/markdown", readme));
        }
        let mut table = String::from(
            "# Loops in this workspace\n\n| name | role | rung | gate | path |\n|---|---|---|---|---|\n",
        );
        for (dir, row) in bl_app::loop_info::list(workspace) {
            let cell = |v: &Value| v.as_str().unwrap_or("?").replace('|', "\\|");
            let role = row["role"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            table.push_str(&format!(
                "| {} | {role} | {} | {} | {} |\n",
                cell(&row["name"]),
                cell(&row["rung"]),
                cell(&row["gate"]),
                dir.strip_prefix(workspace).unwrap_or(&dir).display()
            ));
        }
        return Ok(text(uri, "text/markdown", table));
    }
    let rest = uri.strip_prefix(LOOP).ok_or_else(unknown)?;
    let (name, part) = rest.rsplit_once('/').ok_or_else(unknown)?;
    let dir = package(workspace, name).ok_or_else(unknown)?;
    match part {
        "manifest" => {
            let shown = bl_app::loop_info::show(&dir)
                .map_err(|e| ErrorData::internal_error(e.message().to_string(), None))?;
            Ok(text(uri, "application/json", shown.to_string()))
        }
        "prompt" => {
            let spec = bl_app::loop_run::read_package(&dir)
                .ok()
                .and_then(|p| p.manifest.spec.clone())
                .unwrap_or_else(|| "PROMPT.md".into());
            // Only a file inside the package: its spec is the package's
            // word, not a way out of it.
            let file = dir
                .join(&spec)
                .canonicalize()
                .ok()
                .filter(|f| dir.canonicalize().is_ok_and(|d| f.starts_with(d)))
                .ok_or_else(|| {
                    ErrorData::internal_error(
                        format!("{uri}: its spec {spec} is not a file inside the package"),
                        None,
                    )
                })?;
            let prompt = std::fs::read_to_string(file)
                .map_err(|e| ErrorData::internal_error(format!("{uri}: {e}"), None))?;
            Ok(text(uri, "text/markdown", prompt))
        }
        _ => Err(unknown()),
    }
}

pub fn prompts() -> Vec<Prompt> {
    let arg = |name: &str, what: &str, required: bool| {
        PromptArgument::new(name)
            .with_description(what)
            .with_required(required)
    };
    vec![
        Prompt::new(
            "run_loop",
            Some("Inspect, lint, preview and run a bounded loop, in that order."),
            Some(vec![arg("loop_dir", "the loop package's directory", true)]),
        ),
        Prompt::new(
            "write_loop",
            Some("Write a bounded loop whose gate a worker cannot talk its way past."),
            Some(vec![
                arg("loop_name", "the new loop's name", true),
                arg(
                    "gate_kind",
                    "command, pytest or jsonschema (default pytest)",
                    false,
                ),
            ]),
        ),
        Prompt::new(
            "audit_loop",
            Some("Check a bounded loop before anyone relies on it."),
            Some(vec![arg("loop_dir", "the loop package's directory", true)]),
        ),
    ]
}

/// The prompt `name` with `arguments`.
pub fn prompt(
    name: &str,
    arguments: &serde_json::Map<String, Value>,
) -> Result<GetPromptResult, ErrorData> {
    let given = |key: &str| arguments.get(key).and_then(Value::as_str);
    let needed = |key: &str| {
        given(key).ok_or_else(|| {
            ErrorData::invalid_params(format!("prompt {name} needs the argument {key}"), None)
        })
    };
    let (description, text) = match name {
        "run_loop" => (
            "Inspect, lint, preview and run a bounded loop, in that order.",
            format!(
                "Run this bounded loop with bl, safely. Look at it first with bl_show, check that this machine has its gate with bl_gates, and lint it with bl_lint. Then call bl_run with confirm=false and show the person the preview. Only once they agree, call bl_run again with confirm=true, the same arguments and the preview's confirm_token, and follow it with bl_runs. The gate decides whether the work is done, never you. Loop directory: {}",
                needed("loop_dir")?
            ),
        ),
        "write_loop" => (
            "Write a bounded loop whose gate a worker cannot talk its way past.",
            format!(
                "Write a bounded loop package: loop.yaml, bounds.yaml, PROMPT.md, README.md and seed/. Its gate must check the result mechanically from the workspace alone, and the files the gate relies on must be listed under forbid so that the worker cannot change them. Keep the bounds small, and say in the README how to tighten them for production. Check it with bl_lint, then run it with bl_run (preview first). Loop name: {}. Gate kind: {}.",
                needed("loop_name")?,
                given("gate_kind").unwrap_or("pytest")
            ),
        ),
        "audit_loop" => (
            "Check a bounded loop before anyone relies on it.",
            format!(
                "Audit this bounded loop before anyone relies on it. Use bl_show and bl_lint, then read its README, PROMPT, seed, gate and bounds: can the worker change what the gate reads, are the bounds finite, does the gate decide from the workspace alone? Report what fails before what merely warns. Loop directory: {}",
                needed("loop_dir")?
            ),
        ),
        _ => {
            return Err(ErrorData::invalid_params(
                format!("no prompt named {name}"),
                None,
            ));
        }
    };
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
            .with_description(description),
    )
}
