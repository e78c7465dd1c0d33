//! Reading a graph/v1 manifest and planning it, before anything runs:
//! `lint` (read and validate), `plan` (bind connections, admit loop
//! packages, compile) and `connect` (write one admitted binding per slot
//! for review). A refusal keeps bounded-loops' code and JSON pointer, and
//! the place in the file where one is known.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bl_graph::model::{Isolation, Named};
use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_graph::{CompileInput, Format, Graph, Plan, Refusal, RefusalCode};
use serde_json::Value;

use crate::error::AppError;
use crate::notes::note;

/// A manifest (or connections file) that was refused, as bounded-loops
/// refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestRefusal {
    /// The file refused (`-` for stdin).
    pub path: PathBuf,
    /// What refused it, as bounded-loops words it (`graph plan: compile
    /// failed`).
    pub what: String,
    pub refusal: Refusal,
    /// bounded-loops' whole line, when the file could not even be read.
    pub early: Option<String>,
}

impl ManifestRefusal {
    /// What a person reads: bounded-loops' line (`early` when the file
    /// could not even be read), then bl's own lines: where in the file, and
    /// the hints (a close name, the names allowed).
    pub fn describe(&self) -> String {
        let refusal = &self.refusal;
        let mut message = self.early.clone().unwrap_or_else(|| {
            format!(
                "{} [{}] {} — {}",
                self.what, refusal.code, refusal.pointer, refusal.message
            )
        });
        if let Some(pos) = refusal.pos.filter(|p| p.line > 0) {
            let shown = if self.path == Path::new("-") {
                "<stdin>".to_string()
            } else {
                self.path.display().to_string()
            };
            message.push_str(&format!("\n  at {shown}:{}:{}", pos.line, pos.col));
        }
        for hint in &refusal.hints {
            message.push_str(&format!("\n  {hint}"));
        }
        message
    }
}

/// Why planning stopped.
#[derive(Debug, Clone)]
pub enum PlanFailure {
    /// The manifest or the connections were refused.
    Manifest(Box<ManifestRefusal>),
    /// Anything else (an unreadable file, a missing `--connections`).
    App(AppError),
}

impl From<AppError> for PlanFailure {
    fn from(e: AppError) -> Self {
        PlanFailure::App(e)
    }
}

impl From<Box<ManifestRefusal>> for PlanFailure {
    fn from(e: Box<ManifestRefusal>) -> Self {
        PlanFailure::Manifest(e)
    }
}

/// Reads and validates a manifest. `-` reads it from stdin: JSON when it
/// starts with `{`, else YAML (a JSON document is YAML too, but errors read
/// better as JSON's). `what` names the refuser in the refusal.
pub fn load(path: &Path, verb: &str, what: &str) -> Result<Graph, Box<ManifestRefusal>> {
    let refusal = |refusal: Refusal, early: Option<String>| {
        Box::new(ManifestRefusal {
            path: path.to_path_buf(),
            what: what.to_string(),
            refusal,
            early,
        })
    };
    let stdin = path == Path::new("-");
    let sniffed = || {
        let mut bytes = Vec::new();
        use std::io::Read;
        let read = std::io::stdin()
            .lock()
            .take(bl_graph::MAX_DOCUMENT_BYTES as u64 + 1)
            .read_to_end(&mut bytes);
        let format = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Format::Json,
            _ => Format::Yaml,
        };
        read.map(|_| (bytes, format))
    };
    let Some(format) = Format::from_path(path).or(stdin.then_some(Format::Yaml)) else {
        let ext = path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let message = format!(
            "graph {verb}: unsupported extension {}; expected .yaml or .json",
            bl_graph::doc::py_repr(&ext)
        );
        return Err(refusal(
            Refusal::new(RefusalCode::UnsupportedExtension, "/", message.clone()),
            Some(message),
        ));
    };
    let unreadable = |message: String| {
        refusal(
            Refusal::new(RefusalCode::IoError, "/", message.clone()),
            Some(format!(
                "graph {verb}: cannot read {} — {message}",
                bl_graph::doc::py_repr(&path.display().to_string())
            )),
        )
    };
    let read = if stdin {
        sniffed()
    } else {
        crate::paths::read_capped(path, bl_graph::MAX_DOCUMENT_BYTES).map(|b| (b, format))
    };
    let (bytes, format) = match read {
        Ok(read) => read,
        Err(e) => return Err(unreadable(bl_core::python::os_error(&e, path))),
    };
    bl_graph::check_size(bytes.len(), format).map_err(|r| refusal(r, None))?;
    let text = String::from_utf8(bytes)
        .map_err(|e| unreadable(bl_core::python::utf8_error(e.as_bytes(), e.utf8_error())))?;
    bl_graph::lint(&text, format).map_err(|r| refusal(r, None))
}

/// A manifest planned against its connections and the loop packages found.
pub struct Planned {
    pub graph: Graph,
    pub plan: Plan,
    /// How many loop packages the roots admitted.
    pub packages_admitted: usize,
    /// The loop-package roots, as bounded-loops shows them.
    pub roots: Vec<String>,
}

/// Reads the connections file a plan binds its slots with.
fn read_connections(file: &Path) -> Result<Vec<bl_graph::Connection>, PlanFailure> {
    let refused = |m: String| PlanFailure::App(AppError::refused(m));
    let bytes = crate::paths::read_capped(file, bl_graph::MAX_DOCUMENT_BYTES).map_err(|e| {
        refused(format!(
            "graph plan: cannot read connections {} — {}",
            file.display(),
            bl_core::python::os_error(&e, file)
        ))
    })?;
    if let Err(refusal) = bl_graph::check_size(bytes.len(), Format::Json) {
        return Err(refused(format!(
            "graph plan: {}: connections refused: {refusal}",
            file.display()
        )));
    }
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        refused(format!(
            "graph plan: {}: connections are not valid JSON: {e}",
            file.display()
        ))
    })?;
    match bl_graph::parse_connections(&value) {
        Ok(c) => Ok(c),
        Err(e @ bl_graph::ConnectionsError::NotAnArray(_)) => {
            Err(refused(format!("graph plan: {e}")))
        }
        Err(bl_graph::ConnectionsError::Refused(refusal)) => {
            Err(PlanFailure::Manifest(Box::new(ManifestRefusal {
                path: file.to_path_buf(),
                what: "graph plan: compile failed".into(),
                refusal,
                early: None,
            })))
        }
    }
}

/// `bl graph plan MANIFEST [--connections C] [--loop-roots R]... [--out P]`:
/// the plan, written to `out` when given.
pub fn plan(
    path: &Path,
    connections: Option<&Path>,
    loop_roots: &[PathBuf],
    out: Option<&Path>,
) -> Result<Planned, PlanFailure> {
    let graph = load(path, "plan", "graph plan: validation failed")?;
    let connections = connections.map(read_connections).transpose()?;
    let needs_connections =
        !graph.slots.is_empty() || graph.nodes.iter().any(|n| n.connection_slot.is_some());
    if needs_connections && connections.is_none() {
        return Err(AppError::refused(format!(
            "graph plan: compile requires --connections for connection-bound nodes\n  `bl graph connect {} --provider claude > connections.json` writes one for you to review",
            path.display()
        ))
        .into());
    }
    let packages: BTreeSet<String> = bl_packages::Catalogue::discover(loop_roots)
        .map_err(|e| {
            AppError::refused(format!(
                "graph plan: the loop-package catalogue on this host is unusable — {e}"
            ))
        })?
        .digests()
        .map(str::to_owned)
        .collect();
    let input = CompileInput {
        connections: connections.as_deref(),
        available_packages: Some(&packages),
        policy_digest: DEFAULT_POLICY_DIGEST,
    };
    let plan = bl_graph::compile(&graph, &input).map_err(|refusal| {
        Box::new(ManifestRefusal {
            path: path.to_path_buf(),
            what: "graph plan: compile failed".into(),
            refusal,
            early: None,
        })
    })?;
    if let Some(out) = out {
        std::fs::write(out, &plan.bytes).map_err(|e| {
            AppError::refused(format!("graph plan: cannot write {} — {e}", out.display()))
        })?;
    }
    let roots = loop_roots
        .iter()
        .map(|r| bl_core::python::pathlib_normal(r).display().to_string())
        .collect();
    Ok(Planned {
        graph,
        plan,
        packages_admitted: packages.len(),
        roots,
    })
}

/// `bl graph connect MANIFEST --provider P [--model M] [--isolation T]`:
/// one admitted binding per slot, for the person to review. Refuses an
/// isolation weaker than a slot's nodes ask for.
pub fn connect(
    manifest: &Path,
    provider: &str,
    model: &str,
    isolation: Option<&str>,
) -> Result<(Graph, Vec<Value>), PlanFailure> {
    let graph = load(manifest, "connect", "graph connect:")?;
    let isolation = match isolation {
        None => None,
        Some(name) => Some(Isolation::parse(name).ok_or_else(|| {
            AppError::refused(format!(
                "graph connect: --isolation {name}: use one of {}",
                Isolation::NAMES.join(", ")
            ))
        })?),
    };
    if let Some(given) = isolation {
        let asking = bl_graph::connect::asking_more_than(&graph, given);
        if !asking.is_empty() {
            let named: Vec<String> = asking
                .iter()
                .map(|(node, slot, asks)| format!("'{node}' (slot '{slot}'): {}", asks.name()))
                .collect();
            return Err(AppError::refused(format!(
                "graph connect: --isolation {} is weaker than what these nodes ask for: {}. None of them would be admitted through such a binding. Leave --isolation out (each binding then gives what its slot's nodes ask for), or lower the nodes' isolation in {}",
                given.name(),
                named.join(", "),
                manifest.display()
            ))
            .into());
        }
    }
    let known = bl_workers::Catalog::shipped();
    if provider != bl_workers::recorded::PROVIDER && known.get(provider).is_none() {
        note(format!(
            "warning: no shipped profile for provider '{provider}' (shipped: {}); a run needs one from --providers",
            known.names().collect::<Vec<_>>().join(", ")
        ));
    }
    if graph.slots.is_empty() {
        note(format!(
            "note: {} has no connection slots: its nodes need no connections",
            manifest.display()
        ));
    }
    let wanted = bl_graph::connect::Wanted {
        provider,
        model,
        isolation,
    };
    let made = bl_graph::connect::candidates(&graph, &wanted);
    Ok((graph, made))
}

/// A manifest given as text (an agent's), linted and compiled with
/// `connections` (a connections.json) against the loop packages under
/// `loop_roots`: its graph and plan, or the refusal. Without connections a
/// graph whose nodes need them is refused (`no_admitted_connection`), as
/// bounded-loops refuses it.
pub fn compile_text(
    text: &str,
    connections: Option<&Path>,
    loop_roots: &[PathBuf],
) -> Result<(Graph, Plan), PlanFailure> {
    let format = match text.bytes().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Format::Json,
        _ => Format::Yaml,
    };
    let given = |refusal: Refusal| {
        PlanFailure::Manifest(Box::new(ManifestRefusal {
            path: PathBuf::from("manifest_yaml"),
            what: "graph plan: compile failed".into(),
            refusal,
            early: None,
        }))
    };
    let graph = bl_graph::lint(text, format).map_err(given)?;
    let connections = connections.map(read_connections).transpose()?;
    // An unusable catalogue admits no package: a loop node is refused.
    let packages: BTreeSet<String> = bl_packages::Catalogue::discover(loop_roots)
        .map(|c| c.digests().map(str::to_owned).collect())
        .unwrap_or_default();
    let input = CompileInput {
        connections: connections.as_deref(),
        available_packages: Some(&packages),
        policy_digest: DEFAULT_POLICY_DIGEST,
    };
    let plan = bl_graph::compile(&graph, &input).map_err(given)?;
    Ok((graph, plan))
}

/// A compiled plan as an agent reads it (bounded-loops' MCP shape): each
/// node's kind, isolation, effects and budget, the edges, and the nodes
/// where the run would wait for a person.
pub fn plan_summary(graph: &Graph, plan: &Plan) -> Value {
    use bl_graph::model::NodeKind;
    let nodes: Vec<Value> = graph
        .nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "node_id": n.id, "kind": n.kind.name(), "isolation": n.isolation.name(),
                "effects": n.effects.iter().map(|e| e.name()).collect::<Vec<_>>(),
                "max_attempts": n.budget.max_attempts,
                "hard_deadline_ms": n.budget.max_wallclock_s * 1000,
                "max_tokens": n.budget.max_tokens,
                "max_cost_microunits": n.budget.max_cost_microunits,
                "pauses_for_a_human": n.kind == NodeKind::Approval,
            })
        })
        .collect();
    let edges: Vec<Value> = graph
        .edges
        .iter()
        .map(|e| {
            serde_json::json!({"from_node": e.from_node, "from_port": e.from_port,
                "to_node": e.to_node, "to_port": e.to_port, "when": e.when.map(|w| w.name())})
        })
        .collect();
    let pauses_at: Vec<&str> = graph
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Approval)
        .map(|n| n.id.as_str())
        .collect();
    serde_json::json!({
        "ok": true, "plan_id": plan.plan_id, "graph_digest": plan.graph_digest,
        "nodes": nodes, "edges": edges, "pauses_at": pauses_at,
        "compiled_only": "This is a plan. Nothing has run and no run directory exists.",
    })
}
