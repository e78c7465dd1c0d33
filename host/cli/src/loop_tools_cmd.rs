//! The loop commands around `bl run`: `lint`, `list`, `show`, `gates`,
//! `receipt`, `capabilities`, `new`, and `loops list|install` (bl's own
//! keyless catalog, embedded in the binary so it works offline and from
//! any install).

use std::path::{Path, PathBuf};

use bl_app::bundled_loops::{CATALOG, catalog_loop, extract};
use clap::Subcommand;
use serde_json::{Value, json};

use crate::exit::{CliError, Exit};
use crate::output::{errln, outln};

/// Templates `bl new` starts from: a catalog loop for each gate kind.
const TEMPLATES: &[(&str, &str)] = &[
    ("command", "readme-sections"),
    ("pytest", "tests-green"),
    ("jsonschema", "order-schema"),
];

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `bl lint DIR...`: `[PASS]`/`[FAIL]` per package on stdout, the reason
/// on stderr; exit 1 when any fails.
pub fn lint(dirs: &[PathBuf]) -> Result<Exit, CliError> {
    let mut failed = false;
    for dir in dirs {
        let shown = absolute(dir);
        match bl_app::loop_info::lint(dir) {
            None => outln!("[PASS] {}", shown.display()),
            Some(why) => {
                outln!("[FAIL] {}", shown.display());
                for line in why.lines() {
                    errln!("       {}", line.trim_start());
                }
                failed = true;
            }
        }
    }
    Ok(if failed { Exit::No } else { Exit::Success })
}

/// A JSON list of strings, joined by `sep` (anything else: empty).
fn joined(list: &Value, sep: &str) -> String {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(sep)
        })
        .unwrap_or_default()
}

/// `bl list [DIR]`.
pub fn list(root: Option<&Path>, json_out: bool) -> Result<Exit, CliError> {
    let root = root
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let rows = bl_app::loop_info::list(&root);
    if json_out {
        let loops: Vec<Value> = rows.iter().map(|(_, row)| row.clone()).collect();
        outln!("{}", json!({"loops": loops}));
        return Ok(Exit::Success);
    }
    outln!("{:<30} {:<20} {:<6} {:<20}", "NAME", "ROLE", "RUNG", "GATE");
    outln!("{}", "-".repeat(79));
    for (dir, row) in &rows {
        match row["error"].as_str() {
            None => outln!(
                "{:<30} {:<20} {:<6} {:<20}",
                row["name"].as_str().unwrap_or_default(),
                joined(&row["role"], ","),
                row["rung"].as_str().unwrap_or_default(),
                row["gate"].as_str().unwrap_or_default()
            ),
            Some(e) => errln!("{}: {e}", dir.display()),
        }
    }
    if rows.is_empty() {
        outln!(
            "No loops found under {} (looked in ./loops/*/ and ./*/).",
            root.display()
        );
    }
    Ok(Exit::Success)
}

/// `bl gates`.
pub fn gates(json_out: bool) -> Result<Exit, CliError> {
    let table = bl_app::loop_info::gates();
    if json_out {
        outln!("{}", json!({"gates": table}));
        return Ok(Exit::Success);
    }
    for g in &table {
        let deps = joined(&g["dependencies"], ",");
        outln!(
            "{:<20} {:<10} deps={:<20} {}",
            g["kind"].as_str().unwrap_or_default(),
            if g["available"] == true {
                "available"
            } else {
                "missing"
            },
            if deps.is_empty() { "none".into() } else { deps },
            g["description"].as_str().unwrap_or_default()
        );
    }
    Ok(Exit::Success)
}

/// `bl show DIR`.
pub fn show(dir: &Path, json_out: bool) -> Result<Exit, CliError> {
    let shown = bl_app::loop_info::show(dir)?;
    if json_out {
        outln!("{shown}");
        return Ok(Exit::Success);
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    outln!("name: {}", text(&shown["name"]));
    outln!("path: {}", text(&shown["path"]));
    outln!("pattern: {}", text(&shown["pattern"]));
    outln!("role: {}", joined(&shown["role"], ", "));
    outln!("rung: {}", text(&shown["rung"]));
    outln!("runner: {}", text(&shown["runner"]["kind"]));
    match shown["gate"]["run"].as_str() {
        Some(run) => outln!("gate: {} [{run}]", text(&shown["gate"]["kind"])),
        None => outln!("gate: {}", text(&shown["gate"]["kind"])),
    }
    outln!(
        "approval_required: {}",
        if shown["approval_required"] == true {
            "True"
        } else {
            "False"
        }
    );
    if let Some(prod) = shown["production_bounds"].as_str() {
        outln!("production_bounds: {prod}");
    }
    outln!("risk: {}", joined(&shown["risk"], ", "));
    outln!("content_hash: {}", text(&shown["content_hash"]));
    Ok(Exit::Success)
}

/// `bl receipt RUN_DIR`: the receipt derived from the run's ledger now.
pub fn receipt(run_dir: &Path, write: bool, json_out: bool) -> Result<Exit, CliError> {
    let receipt = bl_app::loop_info::receipt(run_dir)?;
    if write {
        for path in bl_app::loop_info::write_receipt(run_dir, &receipt)? {
            outln!("wrote {}", path.display());
        }
    } else if json_out {
        outln!("{}", receipt.json_text);
    } else {
        crate::output::out!("{}", receipt.markdown);
    }
    Ok(Exit::Success)
}

/// `bl capabilities`: what this bl can do here, and what it only declares.
pub fn capabilities(json_out: bool) -> Result<Exit, CliError> {
    let caps = bl_app::loop_info::capabilities();
    let bwrap = caps["isolation"]["bubblewrap"] == json!(true);
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&caps).expect("json"));
    } else {
        outln!(
            "bl {} — compatible with bounded-loops 0.7",
            env!("CARGO_PKG_VERSION")
        );
        outln!("loop statuses: DONE (success); HALT, PAUSE, KILLED (exit 1); ERROR (exit 3)");
        outln!("bounds:");
        for b in caps["bounds"].as_array().into_iter().flatten() {
            outln!(
                "  {:<20} {}",
                b["field"].as_str().unwrap_or_default(),
                b["enforced"].as_str().unwrap_or_default()
            );
        }
        outln!(
            "runners: {}",
            caps["runners"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        );
        outln!(
            "bubblewrap: {}",
            if bwrap { "available" } else { "missing" }
        );
        outln!("(--json for everything, including the gates)");
    }
    Ok(Exit::Success)
}

#[derive(Subcommand)]
#[command(defer = true)]
pub enum LoopsCommand {
    /// List bl's own catalog of loops (keyless, offline).
    List,
    /// Copy a catalog loop into ./loops/NAME (or --dest).
    Install {
        /// The catalog loop's name (see `bl loops list`).
        name: String,
        /// Where to copy it (default: ./loops/NAME).
        #[arg(long)]
        dest: Option<PathBuf>,
    },
}

pub fn loops(cmd: LoopsCommand, json_out: bool) -> Result<Exit, CliError> {
    match cmd {
        LoopsCommand::List => {
            let mut rows = Vec::new();
            for dir in CATALOG.dirs() {
                let Some(file) = dir.get_file(dir.path().join("loop.yaml")) else {
                    continue;
                };
                let text = file.contents_utf8().unwrap_or_default();
                let Ok(m) = bl_loops::manifest::LoopManifest::parse(text) else {
                    continue;
                };
                rows.push((
                    m.name,
                    m.role.join(", "),
                    m.gate.kind,
                    m.runner.default,
                    m.description,
                ));
            }
            rows.sort();
            if json_out {
                let loops: Vec<Value> = rows.iter().map(|(n, r, g, run, d)| json!({"name": n, "role": r, "gate": g, "runner": run, "keyless": true, "description": d})).collect();
                outln!("{}", json!({"loops": loops}));
                return Ok(Exit::Success);
            }
            outln!(
                "bl's loop catalog — {} loop(s), all keyless and offline\n",
                rows.len()
            );
            outln!(
                "  {:<18} {:<20} {:<11} {:<7} DESCRIPTION",
                "NAME",
                "ROLE(S)",
                "GATE",
                "RUNNER"
            );
            for (n, r, g, run, d) in &rows {
                let short: String = d.chars().take(60).collect();
                outln!("  {n:<18} {r:<20} {g:<11} {run:<7} {short}…");
            }
            outln!("\nInstall one with: bl loops install NAME   then: bl run loops/NAME --yes");
            Ok(Exit::Success)
        }
        LoopsCommand::Install { name, dest } => {
            let dir = catalog_loop(&name).ok_or_else(|| {
                let names: Vec<String> = CATALOG
                    .dirs()
                    .map(|d| d.path().display().to_string())
                    .collect();
                CliError::refused(format!(
                    "bl loops install: no loop '{name}' in bl's catalog ({}); see bl loops list",
                    names.join(", ")
                ))
            })?;
            let dest = dest.unwrap_or_else(|| PathBuf::from("loops").join(&name));
            if dest.exists() {
                return Err(CliError::refused(format!(
                    "bl loops install: {} already exists — refusing to overwrite",
                    dest.display()
                )));
            }
            extract(dir, &dest).map_err(|e| {
                CliError::refused(format!("bl loops install: {}: {e}", dest.display()))
            })?;
            outln!("Installed {name} at {}", dest.display());
            outln!("Next: bl run {} --yes", dest.display());
            Ok(Exit::Success)
        }
    }
}

/// `bl new NAME`: a loop that lints and runs, from a template per gate kind.
pub fn new(name: &str, template: &str, dest: Option<&Path>) -> Result<Exit, CliError> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(CliError::refused(format!(
            "bl new: '{name}' is not a loop name: use letters, digits, '-' and '_'"
        )));
    }
    let source = TEMPLATES
        .iter()
        .find(|(kind, _)| *kind == template)
        .and_then(|(_, loop_name)| catalog_loop(loop_name))
        .ok_or_else(|| {
            let kinds: Vec<&str> = TEMPLATES.iter().map(|(k, _)| *k).collect();
            CliError::refused(format!(
                "bl new: no template '{template}'; templates: {}",
                kinds.join(", ")
            ))
        })?;
    let dest = dest
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(name));
    if dest.exists() {
        return Err(CliError::refused(format!(
            "bl new: destination '{}' already exists — refusing to overwrite.",
            absolute(&dest).display()
        )));
    }
    extract(source, &dest)
        .map_err(|e| CliError::refused(format!("bl new: {}: {e}", dest.display())))?;
    // The template's name becomes the new loop's.
    let manifest = dest.join("loop.yaml");
    let text = std::fs::read_to_string(&manifest).map_err(|e| CliError::refused(e.to_string()))?;
    let renamed: String = text
        .lines()
        .map(|l| {
            if l.starts_with("name: ") {
                format!("name: {name}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&manifest, format!("{renamed}\n"))
        .map_err(|e| CliError::refused(e.to_string()))?;
    outln!("Created loop at {}", absolute(&dest).display());
    outln!("Next: bl lint {0} && bl run {0} --yes", dest.display());
    Ok(Exit::Success)
}

/// Writes a loop run's report page and says where.
pub fn report(run_dir: &Path, out: Option<&Path>) -> Result<Exit, CliError> {
    let out = bl_app::loop_report::write(run_dir, out)?;
    outln!("report: {}", out.display());
    Ok(Exit::Success)
}
