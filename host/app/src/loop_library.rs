//! Finding and judging loop packages, as bounded-loops 0.7's catalog,
//! search and audit tools do: the catalog of the packages a workspace
//! holds (with each one's content digest, to pin in a graph's loop node),
//! a word-overlap search over it, and an audit of what a shippable
//! package should carry beyond what `bl lint` requires.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::loop_run::{Package, read_package};

/// The runners that need no key: a recorded cassette, or a local command.
const KEYLESS_RUNNERS: [&str; 2] = ["stub", "shell"];

/// Words too common to tell loops apart.
const STOPWORDS: [&str; 54] = [
    "a", "an", "and", "any", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
    "get", "has", "have", "how", "i", "if", "in", "is", "it", "its", "make", "me", "my", "need",
    "of", "on", "or", "our", "should", "that", "the", "then", "there", "these", "this", "to", "up",
    "use", "want", "was", "we", "what", "when", "which", "who", "will", "with", "would", "you",
    "your",
];

/// Why a package does not read, without the command's prefix.
fn why_unreadable(e: &crate::AppError) -> String {
    e.message()
        .trim_start_matches("bl run: manifest error — ")
        .trim_start_matches("bl run: ")
        .to_string()
}

/// The packages in `dir` itself and its direct subdirectories.
fn packages_in(dir: &Path, found: &mut Vec<PathBuf>) {
    if dir.join("loop.yaml").is_file() {
        found.push(dir.to_path_buf());
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.path().join("loop.yaml").is_file() {
            found.push(entry.path());
        }
    }
}

/// The loop packages a workspace offers: `root` and `root/loops` (each
/// itself and its subdirectories); when there are none, bl's own catalog
/// ([`crate::bundled_loops`]). Each package once, in path order.
pub fn discover(root: &Path) -> Vec<PathBuf> {
    offered(root).0
}

/// The packages [`discover`] finds, and whether they are bl's own catalog.
fn offered(root: &Path) -> (Vec<PathBuf>, bool) {
    let found = in_workspace(root);
    if !found.is_empty() {
        return (found, false);
    }
    // Nothing here: bl's own catalog, unpacked (an unpackable one is none).
    let mut bundled = Vec::new();
    if let Ok(catalog) = crate::bundled_loops::unpacked() {
        packages_in(&catalog, &mut bundled);
    }
    bundled.sort();
    (bundled, true)
}

fn in_workspace(root: &Path) -> Vec<PathBuf> {
    // Only the workspace: bounded-loops also lists the `loops/` of the
    // nearest directory above, but a server is contained to its workspace.
    let mut found = Vec::new();
    packages_in(root, &mut found);
    packages_in(&root.join("loops"), &mut found);
    let home = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut seen = BTreeSet::new();
    let mut unique: Vec<(String, PathBuf)> = found
        .into_iter()
        .filter_map(|dir| {
            let real = std::fs::canonicalize(&dir).ok()?;
            // A link to a package elsewhere is not the workspace's.
            (real.starts_with(&home) && seen.insert(real.clone()))
                .then(|| (real.to_string_lossy().into_owned(), dir))
        })
        .collect();
    unique.sort();
    unique.into_iter().map(|(_, dir)| dir).collect()
}

/// One catalog entry: bounded-loops' fields, and the package when it reads.
pub struct Entry {
    pub value: Value,
    pub package: Option<Package>,
}

/// The first line of a description that says anything.
fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
        .to_string()
}

fn entry(dir: &Path) -> Entry {
    let shown = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    match read_package(dir) {
        Ok(package) => {
            let m = &package.manifest;
            let (digest, digest_error) = match bl_packages::digest(dir) {
                Ok(d) => (json!(d), Value::Null),
                Err(e) => (
                    Value::Null,
                    json!(format!("cannot digest this package — {e}")),
                ),
            };
            let value = json!({
                "name": m.name, "roles": m.role, "gate_kind": m.gate.kind,
                "keyless": KEYLESS_RUNNERS.contains(&m.runner.default.as_str()),
                "runner": m.runner.default, "rung": format!("{:?}", m.rung),
                "description": first_line(&m.description), "path": shown, "error": null,
                "loop_package": digest, "loop_package_error": digest_error,
            });
            Entry {
                value,
                package: Some(package),
            }
        }
        Err(e) => Entry {
            value: json!({
                "name": dir.file_name().map(|n| n.to_string_lossy().into_owned()),
                "roles": [], "gate_kind": "?", "keyless": false, "runner": "?", "rung": "?",
                "description": "", "path": shown, "error": why_unreadable(&e),
            }),
            package: None,
        },
    }
}

/// Which entries a catalog call keeps (each filter optional).
#[derive(Debug, Default, Clone)]
pub struct CatalogFilter {
    pub role: Option<String>,
    pub gate_kind: Option<String>,
    pub keyless: Option<bool>,
}

impl CatalogFilter {
    /// An unreadable package passes every filter: it is shown so that it
    /// gets fixed, not hidden.
    fn keeps(&self, entry: &Entry) -> bool {
        let Some(package) = &entry.package else {
            return true;
        };
        let m = &package.manifest;
        let role = self
            .role
            .as_ref()
            .is_none_or(|r| m.role.iter().any(|have| have.eq_ignore_ascii_case(r)));
        let gate = self
            .gate_kind
            .as_ref()
            .is_none_or(|g| m.gate.kind.eq_ignore_ascii_case(g));
        let keyless = self.keyless.is_none_or(|k| entry.value["keyless"] == k);
        role && gate && keyless
    }
}

/// `bl_catalog`: the workspace's packages, filtered, each with its
/// content digest (`loop_package`), and the names of those that do not read.
pub fn catalog(root: &Path, filter: &CatalogFilter) -> Value {
    let (found, bundled) = offered(root);
    let all: Vec<Entry> = found.iter().map(|d| entry(d)).collect();
    let kept: Vec<&Entry> = all.iter().filter(|e| filter.keeps(e)).collect();
    let unreadable: Vec<&Value> = kept
        .iter()
        .filter(|e| e.package.is_none())
        .map(|e| &e.value["name"])
        .collect();
    let mut answer = json!({
        "status": "ok",
        "total_discovered": all.len(),
        "returned": kept.len(),
        "filters": {"role": filter.role, "gate_kind": filter.gate_kind, "keyless": filter.keyless},
        "loops": kept.iter().map(|e| &e.value).collect::<Vec<_>>(),
        "unreadable": unreadable,
    });
    if bundled {
        answer["hint"] = json!(
            "no loop packages in this workspace, so these are bl's own catalog: `bl loops install NAME` copies one into ./loops"
        );
    }
    answer
}

/// The words of `text`: lowercase runs of ASCII letters and digits.
fn words(text: &str) -> BTreeSet<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit()))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// `bl_search_loops`: the readable packages ranked by how many of the
/// task's words they share (a name counts 5, a role or the gate kind 3,
/// the description's first line 1). Word overlap only: it does not
/// understand the task.
pub fn search(root: &Path, task: &str, limit: i64) -> Value {
    let terms: BTreeSet<String> = words(task)
        .into_iter()
        .filter(|w| w.len() >= 3 && !STOPWORDS.contains(&w.as_str()))
        .collect();
    let mut scored: Vec<(u64, String, usize, Value)> = Vec::new();
    for (order, entry) in discover(root).iter().map(|d| entry(d)).enumerate() {
        let Some(package) = &entry.package else {
            continue;
        };
        let m = &package.manifest;
        let fields = [
            (5, words(&m.name)),
            (3, words(&m.role.join(" "))),
            (3, words(&m.gate.kind)),
            (1, words(&first_line(&m.description))),
        ];
        let mut score = 0;
        let mut matched = BTreeSet::new();
        for (weight, field) in &fields {
            for term in terms.iter().filter(|t| field.contains(*t)) {
                score += weight;
                matched.insert(term.clone());
            }
        }
        if score == 0 {
            continue;
        }
        let mut candidate = entry.value.clone();
        if let Some(fields) = candidate.as_object_mut() {
            fields.remove("loop_package");
            fields.remove("loop_package_error");
            fields.insert("score".into(), json!(score));
            fields.insert("matched_terms".into(), json!(matched));
        }
        scored.push((score, m.name.clone(), order, candidate));
    }
    scored.sort_by_key(|(score, name, order, _)| (Reverse(*score), name.clone(), *order));
    let total = scored.len();
    let limit = usize::try_from(limit.clamp(1, 50)).unwrap_or(1);
    let candidates: Vec<Value> = scored.into_iter().take(limit).map(|c| c.3).collect();
    json!({
        "status": "ok",
        "query_terms": terms,
        "ranking": "lexical",
        "ranking_caveat": "Word overlap only. This does not understand the task — read the candidates and check that each one's gate actually verifies what you need.",
        "total_scored": total,
        "returned": candidates.len(),
        "candidates": candidates,
        "no_match_means": (total == 0).then_some(
            "No shipped loop shares vocabulary with this description. Author a new loop with a mechanical gate, and record what it must check as a ticket."
        ),
    })
}

/// The packages an audit of `base` covers: `base` itself when it is one,
/// else those in `base/loops`, else those in `base`'s subdirectories.
fn audited_under(base: &Path) -> Vec<PathBuf> {
    if base.join("loop.yaml").is_file() {
        return vec![base.to_path_buf()];
    }
    let within = if base.join("loops").is_dir() {
        base.join("loops")
    } else {
        base.to_path_buf()
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(&within)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("loop.yaml").exists())
        .collect();
    found.sort();
    found
}

/// Whether a prompt tells the agent what it must not do.
fn has_guardrails(prompt: &str) -> bool {
    prompt.contains("Do not")
        || prompt.contains("Never")
        || prompt.to_lowercase().contains("forbid")
}

/// What a shippable package lacks: errors (it fails) and warnings.
fn audit_one(dir: &Path) -> Value {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    for required in ["loop.yaml", "bounds.yaml", "PROMPT.md", "README.md"] {
        if !dir.join(required).is_file() {
            errors.push(format!("missing required file: {required}"));
        }
    }
    if !dir.join("seed").is_dir() {
        errors.push("missing required directory: seed/".to_string());
    }
    let package = read_package(dir);
    let name = match &package {
        Ok(p) => p.manifest.name.clone(),
        Err(_) => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    match &package {
        Err(e) => errors.push(format!("manifest error: {}", why_unreadable(e))),
        Ok(p) => {
            let m = &p.manifest;
            let cassette = m
                .runner
                .cassette
                .as_deref()
                .unwrap_or("cassettes/default.json");
            if m.runner.default == "stub" && !dir.join(cassette).is_file() {
                errors
                    .push("stub runner requires cassettes/default.json or runner.cassette".into());
            }
            if m.gate.kind == "jsonschema" && p.bounds.schema.as_deref().is_none_or(str::is_empty) {
                errors.push("jsonschema gate requires bounds.schema".into());
            }
        }
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).ok();
    if readme
        .as_deref()
        .is_some_and(|r| r.contains("/Users/") || r.contains("C:\\Users\\"))
    {
        errors.push("README contains machine-specific absolute paths".into());
    }
    if let Ok(p) = &package {
        let m = &p.manifest;
        // At L2 and L3 approval is on unless bounds.yaml switches it off
        // in so many words.
        let approval_off = !p.bounds.require_approval;
        if matches!(
            m.rung,
            bl_loops::manifest::Rung::L2 | bl_loops::manifest::Rung::L3
        ) && approval_off
            && !dir.join("bounds.production.yaml").is_file()
        {
            warnings
                .push("L2/L3 loop disables approval and lacks bounds.production.yaml".to_string());
        }
        if m.gate.kind == "command"
            && m.gate
                .run
                .as_deref()
                .is_some_and(|r| r.contains("seed/check"))
            && m.forbid.is_empty()
        {
            warnings.push("command gate has no forbid protection for verification anchors".into());
        }
        if m.gate.kind == "composite" && m.gate.gates.len() < 2 {
            warnings.push("composite gate should normally contain at least two child gates".into());
        }
    }
    if let Some(readme) = &readme {
        if !["Lift it into your own repo", "Make it real", "Production"]
            .iter()
            .any(|p| readme.contains(p))
        {
            warnings.push("README should include production adaptation guidance".into());
        }
        if readme.contains("Known limitation")
            && !(readme.contains("Production") || readme.contains("production"))
        {
            warnings.push("README documents a limitation without production mitigation".into());
        }
    }
    if let Ok(prompt) = std::fs::read_to_string(dir.join("PROMPT.md"))
        && !has_guardrails(&prompt)
    {
        warnings.push("PROMPT.md lacks explicit guardrail/forbidden-action language".into());
    }
    json!({
        "path": std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf()),
        "name": name, "passed": errors.is_empty(), "errors": errors, "warnings": warnings,
    })
}

/// `bl_audit_loops`: each package under `bases` (see [`audited_under`])
/// audited for what a shippable package carries: its files, a seed, a
/// cassette for a stub runner, a schema for a jsonschema gate, guardrails
/// in its prompt and production guidance in its README.
pub fn audit(bases: &[PathBuf]) -> Value {
    let results: Vec<Value> = bases
        .iter()
        .flat_map(|base| audited_under(base))
        .map(|dir| audit_one(&dir))
        .collect();
    let all_passed = results.iter().all(|r| r["passed"] == true);
    json!({"results": results, "all_passed": all_passed})
}
