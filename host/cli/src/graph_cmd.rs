//! `bl graph …`: lint, plan, digest and schema for graph/v1 manifests.
//! Output, exit codes and messages follow bounded-loops 0.7's `bl graph`.

use crate::output::{out, outln};
use std::path::{Path, PathBuf};

use bl_app::graph_plan::{self, ManifestRefusal, PlanFailure, Planned};
use bl_core::python_json;
use bl_graph::report;
use clap::Subcommand;
use serde_json::{Value, json};

use crate::exit::{CliError, CliResult, Exit};

#[derive(Subcommand)]
#[command(defer = true)]
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
        /// An audit plan (JSON: cells, who audits each); the run's arena
        /// shows its coverage table and release verdict. Checked before
        /// anything runs and kept with the run.
        #[arg(long = "audit-plan", value_name = "FILE")]
        audit_plan: Option<PathBuf>,
        #[command(flatten)]
        flags: crate::graph_report::DriveFlags,
    },
    /// Write a connections file for a graph: one admitted local binding per
    /// connection slot, for you to review (`> connections.json`).
    Connect {
        /// The graph manifest (.yaml or .json).
        manifest: PathBuf,
        /// The agent CLI every slot is bound to: claude, codex, grok, muse,
        /// agy, dsh, any other name (then `graph run --providers` must
        /// describe it), or `recorded` for recorded replies (no key, no
        /// network).
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
        /// text (a table), or md: the state as Markdown (STATE.md), for a
        /// person or an agent to read.
        #[arg(long, default_value = "text", value_parser = ["text", "md"])]
        format: String,
    },
    /// Draw a run as one self-contained page (no network) that checks in
    /// the browser, against the run's checkpoint and the key you give,
    /// every event it shows.
    Arena {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
        /// Where to write the page (default: `<run>.arena.html` beside the
        /// run directory; a file inside it would not be in its seal).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The verifier key (text or file, from `bl keys generate`) the
        /// checkpoint's signature must verify with; without it the page
        /// says LOCAL/UNVERIFIED.
        #[arg(long)]
        pubkey: Option<String>,
    },
    /// A run's counts, times, spend and the parallelism it achieved, per
    /// node and for the run, from its verified event log.
    Metrics {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
    },
    /// Write the studio: one offline page where a manifest is drawn,
    /// edited and linted as you type (by bl graph lint itself, compiled to
    /// wasm), with a dry run of its approvals and effects, and exported
    /// as YAML.
    Studio {
        /// The manifest to open (default: a first graph to start from).
        #[arg(long)]
        from: Option<PathBuf>,
        /// Where to write the page (default: studio.html here).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Serve a run's arena live on 127.0.0.1, kept current as the run is
    /// written (by this process or another), until Ctrl-C.
    Watch {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
        /// The port on 127.0.0.1 (default: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// The verifier key the page checks the checkpoint's signature with.
        #[arg(long)]
        pubkey: Option<String>,
    },
    /// Serve a page on 127.0.0.1 to approve or reject, with its evidence in
    /// view, an approval the run waits on; it stops after one decision.
    Console {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
        /// The port on 127.0.0.1 (default: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
        /// Sign the decision with this private key (from `bl keys generate`).
        #[arg(long)]
        key: Option<PathBuf>,
        #[command(flatten)]
        flags: crate::graph_report::DriveFlags,
    },
    /// Record a human decision on an approval node, and resume the run.
    Approve {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
        /// The approval node to decide (`sub/gate`: node `gate` of subgraph node `sub`'s child run).
        #[arg(long)]
        node: String,
        /// approved or rejected. A decision is final: the opposite one is
        /// refused afterwards.
        #[arg(long, value_parser = ["approved", "rejected"])]
        decision: String,
        /// Sign the decision with this private key (from `bl keys generate`).
        #[arg(long)]
        key: Option<PathBuf>,
        /// The request digest you were shown for this approval (the runtime
        /// API's `pending_approvals` gives it): the decision is refused, with
        /// nothing recorded, if what the node approves has changed since.
        #[arg(long, value_name = "SHA256")]
        request_digest: Option<String>,
        #[command(flatten)]
        flags: crate::graph_report::DriveFlags,
    },
    /// Continue a paused or interrupted run. SUCCEEDED nodes are never run again.
    Resume {
        /// The run directory (what `graph run --out` wrote).
        #[arg(long)]
        run: PathBuf,
        #[command(flatten)]
        flags: crate::graph_report::DriveFlags,
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
            audit_plan,
            flags,
        } => match (manifest, execute) {
            (Some(manifest), true) => {
                let out = match out {
                    Some(out) => out,
                    None => crate::graph_report::default_out(workspace)?,
                };
                let run = crate::graph_report::Run {
                    manifest: &manifest,
                    connections: connections.as_deref(),
                    out: &out,
                    audit_plan,
                };
                crate::graph_report::run(run, &flags)
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
                    None => crate::graph_report::default_out(workspace)?,
                };
                crate::graph_report::run_probe(&out, &flags)
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
        GraphCommand::Status { run, format } => crate::graph_report::status(&run, format == "md"),
        GraphCommand::Console {
            run,
            port,
            key,
            flags,
        } => crate::graph_report::console(&run, port, key, &flags),
        GraphCommand::Watch { run, port, pubkey } => {
            crate::graph_report::watch(&run, port, pubkey.as_deref())
        }
        GraphCommand::Arena { run, out, pubkey } => {
            crate::graph_report::arena(&run, out.as_deref(), pubkey.as_deref())
        }
        GraphCommand::Metrics { run } => crate::graph_report::metrics(&run),
        GraphCommand::Studio { from, out } => {
            crate::graph_report::studio(from.as_deref(), out.as_deref())
        }
        GraphCommand::Artifacts { run } => crate::graph_report::artifacts(&run),
        GraphCommand::Approve {
            run,
            node,
            decision,
            key,
            request_digest,
            flags,
        } => crate::graph_report::approve(
            &run,
            &node,
            decision == "approved",
            request_digest.as_deref(),
            key.as_deref(),
            &flags,
        ),
        GraphCommand::Resume { run, flags } => crate::graph_report::resume(&run, &flags),
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

/// The error for a refused manifest: what `describe` says, with the code
/// and the place for `--json`.
fn refused(refused: ManifestRefusal) -> CliError {
    // bounded-loops defines what lint and plan print on stdout for a
    // refusal (lint --json its own object, plan nothing): nothing is added.
    let detail = crate::exit::ErrorDetail {
        reported: true,
        ..crate::exit::ErrorDetail::of_manifest(&refused)
    };
    CliError::refused(refused.describe()).with_detail(detail)
}

/// A plan's failure as the CLI answers it.
fn plan_failed(failure: PlanFailure) -> CliError {
    match failure {
        PlanFailure::Manifest(r) => refused(*r),
        PlanFailure::App(e) => e.into(),
    }
}

/// What the run would deny, said on stderr with each place (stdout keeps
/// the bytes bounded-loops defines).
fn warn_hazards(path: &Path, hazards: &[bl_graph::hazards::Hazard]) {
    let bytes = std::fs::read(path).unwrap_or_default();
    for line in bl_app::graph_run::hazard_lines(path, &bytes, hazards) {
        crate::output::errln!("warning: {line} (bl graph run refuses this before anything runs)");
    }
}

fn lint(path: &Path, as_json: bool) -> CliResult {
    match graph_plan::load(path, "lint", "graph lint:") {
        Ok(graph) => {
            warn_hazards(path, &bl_graph::hazards::hazards(&graph, None));
            if as_json {
                outln!("{}", python_json(&report::lint_json(&graph)));
            } else {
                out!("{}", report::lint_text(&graph));
            }
            Ok(Exit::Success)
        }
        Err(refusal) => {
            if as_json {
                outln!("{}", python_json(&report::refusal_json(&refusal.refusal)));
            }
            Err(refused(*refusal))
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
    let Planned {
        graph,
        plan,
        packages_admitted,
        roots,
    } = graph_plan::plan(path, connections, loop_roots, out).map_err(plan_failed)?;
    let admission = report::Admission {
        loop_package_roots: &roots,
        loop_packages_admitted: packages_admitted,
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
    let (graph, made) =
        graph_plan::connect(manifest, provider, model, isolation).map_err(plan_failed)?;
    outln!(
        "{}",
        serde_json::to_string_pretty(&Value::Array(made)).expect("JSON serializes")
    );
    crate::output::errln!(
        "note: one admitted {provider} binding per slot, for you to review (docs/manifest-reference.md, \"connections.json\"); then: bl graph plan {} --connections FILE (the file you saved this to)",
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
