//! `bl graph …`: lint, plan, digest and schema for graph/v1 manifests.
//! Output, exit codes and messages follow bounded-loops 0.7's `bl graph`.

use crate::output::{out, outln};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use bl_core::python_json;
use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_graph::report;
use bl_graph::{CompileInput, Format, Graph, Refusal, RefusalCode};
use clap::Subcommand;
use serde_json::{Value, json};

use crate::exit::{CliError, CliResult, Exit};

#[derive(Subcommand)]
pub enum GraphCommand {
    /// Parse and validate a graph manifest (.yaml or .json). Exit 0 valid, 2 invalid.
    Lint {
        /// The graph manifest (.yaml or .json).
        manifest: PathBuf,
    },
    /// Validate, then compile a graph to an execution plan.
    Plan {
        /// The graph manifest (.yaml or .json).
        manifest: PathBuf,
        /// A JSON file of connection candidates (needed when the graph has slots).
        #[arg(long)]
        connections: Option<PathBuf>,
        /// A loop-package root (repeatable); loop nodes' packages must be found here.
        #[arg(long = "loop-roots")]
        loop_roots: Vec<PathBuf>,
        /// Write the canonical plan bytes (plan.json) to this file.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Execute a graph: its nodes run in parallel (bounded), each decided by
    /// an independent gate, and everything goes into the run directory's
    /// hash-chained event log. Exit 0 SUCCEEDED, 2 failed or refused, 3 paused.
    Run {
        /// The graph manifest (.yaml or .json).
        manifest: Option<PathBuf>,
        /// Actually execute (without it, the plan is printed).
        #[arg(long)]
        execute: bool,
        /// A JSON file of connection candidates.
        #[arg(long)]
        connections: Option<PathBuf>,
        /// The run directory to write (default:
        /// .bounded-loops/runs/<stamp>-<rand>/ in the workspace).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The directory whose .bounded-loops/ holds runs when --out is
        /// left out (also $BOUNDED_LOOPS_WORKSPACE; default: here).
        #[arg(long)]
        workspace: Option<PathBuf>,
        #[command(flatten)]
        flags: crate::graph_exec_cmd::DriveFlags,
    },
    /// Write a connections file for a graph: one admitted local binding per
    /// connection slot, for you to review (`> connections.json`).
    Connect {
        /// The graph manifest (.yaml or .json).
        manifest: PathBuf,
        /// The agent CLI every slot is bound to: claude, codex, grok, muse,
        /// agy, dsh (or one your --providers catalog adds), or `recorded`
        /// for recorded replies (no key, no network).
        #[arg(long)]
        provider: String,
        /// The model the binding names (`model_target`).
        #[arg(long, default_value = "default")]
        model: String,
        /// The isolation every binding provides (default: what the slot's
        /// nodes ask for at most).
        #[arg(long)]
        isolation: Option<String>,
    },
    /// Show a run's state, projected from its verified event log.
    Status {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
    },
    /// Record a human decision on an approval node, and resume the run.
    Approve {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
        /// The approval node to decide.
        #[arg(long)]
        node: String,
        /// approved or rejected. A decision is final: the opposite one is
        /// refused afterwards.
        #[arg(long, value_parser = ["approved", "rejected"])]
        decision: String,
        /// Sign the decision with this private key (from `bl keys generate`).
        #[arg(long)]
        key: Option<PathBuf>,
        #[command(flatten)]
        flags: crate::graph_exec_cmd::DriveFlags,
    },
    /// Continue a paused or interrupted run. SUCCEEDED nodes are never run again.
    Resume {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
        #[command(flatten)]
        flags: crate::graph_exec_cmd::DriveFlags,
    },
    /// List every artifact of a run (node outputs, replies, receipts, plugin
    /// components) with its producer, digest, size, visibility and consumers,
    /// from its verified event log.
    Artifacts {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
    },
    /// Print the content digest of a loop package, for a loop node's loop_package.
    Digest {
        /// The directory holding the package's loop.yaml.
        loop_dir: PathBuf,
    },
    /// Print a JSON Schema of the graph/v1 manifest, for editors.
    Schema,
    /// Write the egress posture config (open, allowlist or broker) that
    /// graph runs read: ~/.bounded-loops/egress.json, or --config, or
    /// $BOUNDED_LOOPS_EGRESS_CONFIG. Written atomically with mode 0600.
    Init {
        /// open (the default): no cage; allowlist: only --allowlist hosts,
        /// through a CONNECT proxy; broker: no network but the broker.
        #[arg(long, value_parser = ["open", "allowlist", "broker"], default_value = "open")]
        posture: String,
        /// host[:port] to allow (repeatable, or comma-separated); port 443
        /// when left out. Only with --posture allowlist.
        #[arg(long)]
        allowlist: Vec<String>,
        /// Replace an existing config without asking.
        #[arg(long)]
        yes: bool,
        /// Write here instead of the default path.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Make the config's directory when it is missing (the default
        /// directory, ~/.bounded-loops, is always made).
        #[arg(long)]
        parents: bool,
    },
}

pub fn run(cmd: GraphCommand) -> CliResult {
    match cmd {
        // bounded-loops defines lint's and plan's output, failures included.
        GraphCommand::Lint { manifest } => {
            lint(&manifest, crate::output::json()).map_err(CliError::reported)
        }
        GraphCommand::Plan {
            manifest,
            connections,
            loop_roots,
            out,
        } => plan(
            &manifest,
            connections.as_deref(),
            &loop_roots,
            out.as_deref(),
            crate::output::json(),
        )
        .map_err(CliError::reported),
        GraphCommand::Run {
            manifest,
            execute,
            connections,
            out,
            workspace,
            flags,
        } => match (manifest, execute) {
            (Some(manifest), true) => {
                let out = match out {
                    Some(out) => out,
                    None => crate::graph_exec_cmd::default_out(workspace)?,
                };
                crate::graph_exec_cmd::run(&manifest, connections.as_deref(), &out, &flags)
            }
            (Some(manifest), false) => plan(
                &manifest,
                connections.as_deref(),
                &flags.loop_roots,
                None,
                crate::output::json(),
            )
            .map_err(CliError::reported),
            (None, true) if connections.is_some() || flags.inputs.is_some() => {
                let given = match (&connections, &flags.inputs) {
                    (Some(_), Some(_)) => "--connections and --inputs",
                    (Some(_), None) => "--connections",
                    _ => "--inputs",
                };
                Err(CliError::refused(format!(
                    "graph run: {given} given without a manifest. Name the graph first: `bl graph run --execute MANIFEST --connections C --inputs I --out D`. (Without a manifest, bl runs its built-in sandbox probe, which takes neither; nothing was run.)"
                )))
            }
            (None, true) => {
                let out = match out {
                    Some(out) => out,
                    None => crate::graph_exec_cmd::default_out(workspace)?,
                };
                crate::graph_exec_cmd::run_probe(&out, &flags)
            }
            (None, false) => Err(CliError::refused(
                "graph run: give a manifest, or --execute to run the built-in sandbox probe",
            )),
        },
        GraphCommand::Connect {
            manifest,
            provider,
            model,
            isolation,
        } => connect(&manifest, &provider, &model, isolation.as_deref()),
        GraphCommand::Status { run } => crate::graph_exec_cmd::status(&run),
        GraphCommand::Artifacts { run } => crate::graph_exec_cmd::artifacts(&run),
        GraphCommand::Approve {
            run,
            node,
            decision,
            key,
            flags,
        } => crate::graph_exec_cmd::approve(
            &run,
            &node,
            decision == "approved",
            key.as_deref(),
            &flags,
        ),
        GraphCommand::Resume { run, flags } => crate::graph_exec_cmd::resume(&run, &flags),
        GraphCommand::Digest { loop_dir } => digest(&loop_dir, crate::output::json()),
        GraphCommand::Init {
            posture,
            allowlist,
            yes,
            config,
            parents,
        } => init(&posture, &allowlist, yes, config, parents),
        GraphCommand::Schema => {
            outln!(
                "{}",
                serde_json::to_string_pretty(&bl_graph::schema::manifest_schema())
                    .expect("schema serializes")
            );
            Ok(Exit::Success)
        }
    }
}

/// Reads and lints a manifest. `Err` carries the refusal and whether it
/// came before validation (extension and I/O errors print differently).
enum Loaded {
    Graph(Graph),
    Refused {
        refusal: Refusal,
        early: Option<String>,
    },
}

/// `-` reads the manifest from stdin: JSON when it starts with `{`, else
/// YAML (a JSON document is YAML too, but errors read better as JSON's).
fn load(path: &Path, verb: &str) -> Loaded {
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
        return Loaded::Refused {
            refusal: Refusal::new(RefusalCode::UnsupportedExtension, "/", message.clone()),
            early: Some(message),
        };
    };
    let unreadable = |message: String| Loaded::Refused {
        early: Some(format!(
            "graph {verb}: cannot read {} — {message}",
            bl_graph::doc::py_repr(&path.display().to_string())
        )),
        refusal: Refusal::new(RefusalCode::IoError, "/", message),
    };
    let read = if stdin {
        sniffed()
    } else {
        bl_app::paths::read_capped(path, bl_graph::MAX_DOCUMENT_BYTES).map(|b| (b, format))
    };
    let (bytes, format) = match read {
        Ok(read) => read,
        Err(e) => return unreadable(bl_core::python::os_error(&e, path)),
    };
    if let Err(refusal) = bl_graph::check_size(bytes.len(), format) {
        return Loaded::Refused {
            refusal,
            early: None,
        };
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => return unreadable(bl_core::python::utf8_error(e.as_bytes(), e.utf8_error())),
    };
    match bl_graph::lint(&text, format) {
        Ok(graph) => Loaded::Graph(graph),
        Err(refusal) => Loaded::Refused {
            refusal,
            early: None,
        },
    }
}

/// The error for a refused manifest: bounded-loops' line (`early` when the
/// file could not even be read), then bl's own line with the place.
fn refused(path: &Path, what: &str, refusal: &Refusal, early: Option<String>) -> CliError {
    let mut message = early.unwrap_or_else(|| {
        format!(
            "{what} [{}] {} — {}",
            refusal.code, refusal.pointer, refusal.message
        )
    });
    if let Some(pos) = refusal.pos.filter(|p| p.line > 0) {
        let shown = if path == Path::new("-") {
            "<stdin>".to_string()
        } else {
            path.display().to_string()
        };
        message.push_str(&format!("\n  at {shown}:{}:{}", pos.line, pos.col));
    }
    for hint in &refusal.hints {
        message.push_str(&format!("\n  {hint}"));
    }
    // bounded-loops defines what lint and plan print on stdout for a
    // refusal (lint --json its own object, plan nothing): nothing is added.
    CliError::refused(message).with_detail(crate::exit::ErrorDetail {
        code: Some(refusal.code.to_string()),
        path: Some(path.display().to_string()),
        pointer: Some(refusal.pointer.clone()),
        line: refusal.pos.map(|p| p.line),
        column: refusal.pos.map(|p| p.col),
        reported: true,
    })
}

/// What the run would deny, said on stderr with each place (stdout keeps
/// the bytes bounded-loops defines).
fn warn_hazards(path: &Path, hazards: &[bl_graph::hazards::Hazard]) {
    let bytes = std::fs::read(path).unwrap_or_default();
    for h in hazards {
        crate::output::errln!(
            "warning: {}: [{}] {} (bl graph run refuses this before anything runs)",
            crate::graph_exec_cmd::place(path, &bytes, &h.pointer),
            h.rule,
            h.message
        );
    }
}

fn lint(path: &Path, as_json: bool) -> CliResult {
    match load(path, "lint") {
        Loaded::Graph(graph) => {
            warn_hazards(path, &bl_graph::hazards::hazards(&graph, None));
            if as_json {
                outln!("{}", python_json(&report::lint_json(&graph)));
            } else {
                out!("{}", report::lint_text(&graph));
            }
            Ok(Exit::Success)
        }
        Loaded::Refused { refusal, early } => {
            if as_json {
                outln!("{}", python_json(&report::refusal_json(&refusal)));
            }
            Err(refused(path, "graph lint:", &refusal, early))
        }
    }
}

fn plan(
    path: &Path,
    connections: Option<&Path>,
    loop_roots: &[PathBuf],
    out: Option<&Path>,
    as_json: bool,
) -> CliResult {
    let graph = match load(path, "plan") {
        Loaded::Graph(graph) => graph,
        Loaded::Refused { refusal, early } => {
            return Err(refused(
                path,
                "graph plan: validation failed",
                &refusal,
                early,
            ));
        }
    };
    let connections = match connections {
        None => None,
        Some(file) => {
            let bytes = match bl_app::paths::read_capped(file, bl_graph::MAX_DOCUMENT_BYTES) {
                Ok(t) => t,
                Err(e) => {
                    return Err(CliError::refused(format!(
                        "graph plan: cannot read connections {} — {}",
                        file.display(),
                        bl_core::python::os_error(&e, file)
                    )));
                }
            };
            if let Err(refusal) = bl_graph::check_size(bytes.len(), bl_graph::Format::Json) {
                return Err(CliError::refused(format!(
                    "graph plan: {}: connections refused: {refusal}",
                    file.display()
                )));
            }
            let value: Value = match serde_json::from_slice(&bytes) {
                Ok(v) => v,
                Err(e) => {
                    return Err(CliError::refused(format!(
                        "graph plan: {}: connections are not valid JSON: {e}",
                        file.display()
                    )));
                }
            };
            match bl_graph::parse_connections(&value) {
                Ok(c) => Some(c),
                Err(e @ bl_graph::ConnectionsError::NotAnArray(_)) => {
                    return Err(CliError::refused(format!("graph plan: {e}")));
                }
                Err(bl_graph::ConnectionsError::Refused(e)) => {
                    return Err(refused(file, "graph plan: compile failed", &e, None));
                }
            }
        }
    };
    let needs_connections =
        !graph.slots.is_empty() || graph.nodes.iter().any(|n| n.connection_slot.is_some());
    if needs_connections && connections.is_none() {
        return Err(CliError::refused(format!(
            "graph plan: compile requires --connections for connection-bound nodes\n  `bl graph connect {} --provider claude > connections.json` writes one for you to review",
            path.display()
        )));
    }
    let packages: BTreeSet<String> = match bl_packages::Catalogue::discover(loop_roots) {
        Ok(catalogue) => catalogue.digests().map(str::to_owned).collect(),
        Err(e) => {
            return Err(CliError::refused(format!(
                "graph plan: the loop-package catalogue on this host is unusable — {e}"
            )));
        }
    };
    let input = CompileInput {
        connections: connections.as_deref(),
        available_packages: Some(&packages),
        policy_digest: DEFAULT_POLICY_DIGEST,
    };
    let plan = match bl_graph::compile(&graph, &input) {
        Ok(plan) => plan,
        Err(e) => return Err(refused(path, "graph plan: compile failed", &e, None)),
    };
    if let Some(out) = out
        && let Err(e) = std::fs::write(out, &plan.bytes)
    {
        return Err(CliError::refused(format!(
            "graph plan: cannot write {} — {e}",
            out.display()
        )));
    }
    let roots: Vec<String> = loop_roots
        .iter()
        .map(|r| bl_core::python::pathlib_normal(r).display().to_string())
        .collect();
    let admission = report::Admission {
        loop_package_roots: &roots,
        loop_packages_admitted: packages.len(),
    };
    if as_json {
        outln!(
            "{}",
            python_json(&report::plan_json(&graph, &plan, &admission))
        );
    } else {
        out!("{}", report::plan_text(&graph, &plan, &admission));
        say_bindings(&graph, &plan);
    }
    warn_hazards(
        path,
        &bl_graph::hazards::hazards(&graph, Some(&plan.node_bindings)),
    );
    Ok(Exit::Success)
}

/// Which connection each node got, on stderr (stdout keeps bounded-loops'
/// lines).
fn say_bindings(graph: &bl_graph::Graph, plan: &bl_graph::Plan) {
    use crate::output::errln;
    let catalog = bl_workers::Catalog::shipped();
    for node in &graph.nodes {
        let Some(c) = plan.node_bindings.get(&node.id) else {
            continue;
        };
        let profile = if c.transport == "local_cli"
            && c.provider_id != bl_workers::recorded::PROVIDER
            && catalog.get(&c.provider_id).is_none()
        {
            " — no shipped profile for this provider: add one with --providers"
        } else {
            ""
        };
        errln!(
            "binding : node '{}' -> {} ({}, model {}) via {}, connection '{}', {} tier{profile}",
            node.id,
            c.binding_id,
            c.provider_id,
            c.model_target,
            c.transport,
            c.connection_id,
            c.isolation
        );
    }
}

/// `bl graph connect MANIFEST --provider P [--model M] [--isolation T]`
fn connect(manifest: &Path, provider: &str, model: &str, isolation: Option<&str>) -> CliResult {
    use bl_graph::model::{Isolation, Named};
    let graph = match load(manifest, "connect") {
        Loaded::Graph(graph) => graph,
        Loaded::Refused { refusal, early } => {
            return Err(refused(manifest, "graph connect:", &refusal, early));
        }
    };
    let isolation = match isolation {
        None => None,
        Some(name) => Some(Isolation::parse(name).ok_or_else(|| {
            CliError::refused(format!(
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
            return Err(CliError::refused(format!(
                "graph connect: --isolation {} is weaker than what these nodes ask for: {}. None of them would be admitted through such a binding. Leave --isolation out (each binding then gives what its slot's nodes ask for), or lower the nodes' isolation in {}",
                given.name(),
                named.join(", "),
                manifest.display()
            )));
        }
    }
    let known = bl_workers::Catalog::shipped();
    if provider != bl_workers::recorded::PROVIDER && known.get(provider).is_none() {
        crate::output::errln!(
            "warning: no shipped profile for provider '{provider}' (shipped: {}); a run needs one from --providers",
            known.names().collect::<Vec<_>>().join(", ")
        );
    }
    if graph.slots.is_empty() {
        crate::output::errln!(
            "note: {} has no connection slots: its nodes need no connections",
            manifest.display()
        );
    }
    let wanted = bl_graph::connect::Wanted {
        provider,
        model,
        isolation,
    };
    let made = bl_graph::connect::candidates(&graph, &wanted);
    outln!(
        "{}",
        serde_json::to_string_pretty(&Value::Array(made)).expect("JSON serializes")
    );
    crate::output::errln!(
        "note: one admitted {provider} binding per slot, for you to review (docs/manifest-reference.md, \"connections.json\"); then: bl graph plan {} --connections connections.json",
        manifest.display()
    );
    warn_hazards(manifest, &bl_graph::hazards::hazards(&graph, None));
    Ok(Exit::Success)
}

fn digest(dir: &Path, as_json: bool) -> CliResult {
    // Paths are shown the way bounded-loops shows them (Python's pathlib):
    // `./pkg/` is `pkg`.
    let shown = bl_core::python::pathlib_normal(dir);
    match bl_packages::digest(&shown) {
        Ok(d) => {
            if as_json {
                let package = shown.display().to_string();
                outln!(
                    "{}",
                    python_json(&json!({"loop_package": d, "package": package}))
                );
            } else {
                outln!("{d}");
            }
            Ok(Exit::Success)
        }
        Err(e) => Err(CliError::refused(format!("graph digest: {e}"))),
    }
}

fn init(
    posture: &str,
    allowlist: &[String],
    yes: bool,
    config: Option<PathBuf>,
    parents: bool,
) -> CliResult {
    use bl_egress::posture::{EgressConfig, Posture, default_config_path, write_config};
    let result = Posture::parse(posture)
        .and_then(|posture| EgressConfig::new(posture, allowlist))
        .map_err(|e| e.to_string())
        .and_then(|egress| {
            let env = |name: &str| std::env::var(name).ok();
            let default = default_config_path(env);
            let path = config
                .clone()
                .or(default.clone())
                .ok_or("no HOME and no --config: say where the egress config goes".to_string())?;
            let create_parent = parents || default.as_deref() == Some(path.as_path());
            write_config(&path, &egress, yes, create_parent).map_err(|e| e.to_string())?;
            Ok((egress, path, default))
        });
    match result {
        Ok((egress, path, default)) => {
            let allowed: Vec<String> = egress.allowed().iter().map(|h| h.to_string()).collect();
            if crate::output::json() {
                outln!(
                    "{}",
                    serde_json::json!({
                        "path": path, "posture": egress.posture.as_str(), "allowlist": allowed,
                        "default_path": default.as_deref() == Some(path.as_path()),
                    })
                );
                return Ok(Exit::Success);
            }
            outln!("Wrote {}", path.display());
            if allowed.is_empty() {
                outln!("Posture: {}.", egress.posture.as_str());
            } else {
                outln!(
                    "Posture: {}, allowing {}.",
                    egress.posture.as_str(),
                    allowed.join(", ")
                );
            }
            if default.as_deref() != Some(path.as_path()) {
                outln!(
                    "NOTE: {} is not the default path; runs read it only with {}={}",
                    path.display(),
                    bl_egress::posture::CONFIG_VAR,
                    path.display()
                );
            }
            Ok(Exit::Success)
        }
        Err(e) => Err(CliError::refused(format!("graph init: {e}"))),
    }
}
