//! A compiled plan turned into what the executor runs: the machine's
//! [`Spec`] and, per node, what its driver needs (kind, binding, budget).
//! Nodes are ordered as bounded-loops runs them one at a time: by plan
//! wave, then by id, so that at concurrency 1 bl's log is upstream's.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bl_graph::model::{Direction, EdgeGuard, JoinMode, Named, NodeKind, Visibility};
use bl_graph::{Connection, Graph, Plan};

use crate::events::Route;
use crate::machine::{EdgeSpec, FailMode, Guard, Join, NodeSpec, Spec};

/// The `tool_ref` of bl's built-in sandbox probe.
pub const PROBE_TOOL: &str = "bl:sandbox-probe";

/// How a node is driven.
#[derive(Debug, Clone, PartialEq)]
pub enum Driver {
    /// A worker takes the turn (connector nodes: a slot and a binding).
    Worker,
    /// A join: the controller checks causality and writes the evidence.
    Join(JoinMode),
    /// A human decides.
    Approval,
    /// A publish node with no worker: it fires through the ledger.
    Publish { policy: String },
    /// bl's built-in sandbox probe (a tool node with `tool_ref:
    /// bl:sandbox-probe`): a worker runs the probe in the node's tier and
    /// the gate passes only if the OS denied what it tried.
    Probe,
    /// A deterministic transform (`tool_ref: transform:<plugin>@v<N>`): a
    /// wasm plugin turns the node's verified inputs into its outputs.
    Transform { plugin: String, major: u32 },
    /// A tool node with no connection (`tool_ref: command:<argv>`): the
    /// command runs in the node's own sandbox tier.
    Tool { argv: Vec<String> },
    /// A loop node: its package (found by digest) runs through the loop
    /// engine, and the receipt gate reads its `loop-outcome.json`.
    Loop { package: String },
    /// A subgraph node: its graph package runs as a child run.
    Subgraph { package: String },
    /// A router with no connection: its gate plugin's verdict picks the
    /// route, or the default route is taken.
    Router,
    /// A node this version cannot run; why.
    Unsupported(String),
}

/// What `tool_ref` names, for a tool node with no connection.
fn tool_driver(tool_ref: &str) -> Driver {
    if tool_ref == PROBE_TOOL {
        return Driver::Probe;
    }
    if let Some(rest) = tool_ref.strip_prefix("transform:") {
        let parsed = rest.rsplit_once("@v").and_then(|(name, major)| {
            let major = major.parse::<u32>().ok()?;
            (!name.is_empty()).then(|| (name.to_string(), major))
        });
        return match parsed {
            Some((plugin, major)) => Driver::Transform { plugin, major },
            None => Driver::Unsupported(format!(
                "tool_ref '{tool_ref}' is not transform:<plugin>@v<major> (for example transform:panel.anonymize@v1)"
            )),
        };
    }
    if let Some(command) = tool_ref.strip_prefix("command:") {
        return match shlex::split(command) {
            Some(argv) if !argv.is_empty() => Driver::Tool { argv },
            _ => Driver::Unsupported(format!(
                "tool_ref '{tool_ref}': the command after 'command:' must be a non-empty argv in shell quoting"
            )),
        };
    }
    Driver::Unsupported(format!(
        "tool_ref '{tool_ref}' names no tool this version can run without a connection; use command:<argv>, transform:<plugin>@v<N>, or {PROBE_TOOL}"
    ))
}

/// A declared output (the `artifact-ports` extension): the file the node
/// must publish, relative to its workspace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputPort {
    pub port: String,
    pub path: String,
    /// The port's type (`markdown`, `json`, …): what the file must parse as.
    pub kind: String,
    /// `system_only`: only transforms and operators may read it.
    pub system_only: bool,
    /// A completion contract named on the port.
    pub contract: Option<String>,
}

/// An input bound by an edge to a producer's declared output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputPort {
    pub port: String,
    /// The producer (a node index) and its output port.
    pub from: usize,
    pub from_port: String,
    pub required: bool,
}

/// A node's `gate: {plugin, config, grants}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSpec {
    pub plugin: String,
    /// The config as JSON text (`{}` when none).
    pub config: String,
    /// Capabilities the manifest grants the plugin.
    pub grants: Vec<String>,
}

/// A router's routes: `routes: {name: [node ids] | node id}` and
/// `default_route: name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    /// Route names, sorted (a route's index is its position here).
    pub names: Vec<String>,
    pub default: u32,
    /// (route, node id) for every node a route leads to.
    pub leads: Vec<(u32, String)>,
}

impl Routes {
    pub fn index(&self, name: &str) -> Option<u32> {
        self.names.iter().position(|n| n == name).map(|i| i as u32)
    }
}

#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    /// Where the node is in its manifest, as a JSON pointer (`/nodes/3`).
    pub at: String,
    pub kind: NodeKind,
    pub driver: Driver,
    pub binding: Option<Connection>,
    /// The binding is shared with another node: bounded-loops denies it.
    pub shared_binding: bool,
    /// An effect that needs the network (denied on local runs).
    pub network_effect: bool,
    /// Why the run's execution policy would deny it (the shared binding or
    /// the effect, and the fix), as `bl_graph::hazards` words it.
    pub hazard: Option<String>,
    pub isolation: bl_graph::model::Isolation,
    pub max_attempts: u32,
    pub max_tokens: Option<u64>,
    pub deadline: Duration,
    /// A publish node's publication_policy, when it has one.
    pub publication_policy: Option<String>,
    /// Incoming edges in manifest order: (source index, its `when`).
    pub incoming: Vec<(usize, Option<EdgeGuard>)>,
    /// Declared outputs the node must publish (artifact-ports).
    pub outputs: Vec<OutputPort>,
    /// The file name its reply is published under (`<port>.md|.json|.txt`),
    /// when a plain output port declares the reply; none without one.
    pub reply_name: Option<String>,
    /// Inputs bound to producers' outputs (artifact-ports).
    pub inputs: Vec<InputPort>,
    /// The gate plugin that decides the node, when it names one.
    pub gate: Option<GateSpec>,
    /// A transform's config (JSON text, `{}` when none).
    pub config: String,
    /// A router's routes.
    pub routes: Option<Routes>,
}

impl NodeInfo {
    /// Whether an attempt of this node runs work (and so counts against
    /// the run-wide caps).
    pub fn runs_work(&self) -> bool {
        let decided_inline = matches!(
            self.driver,
            Driver::Join(_) | Driver::Approval | Driver::Publish { .. } | Driver::Unsupported(_)
        ) || (self.driver == Driver::Router && self.gate.is_none());
        !decided_inline
    }

    /// Whether its connector goes through the egress broker (an `https`
    /// binding): a network effect is the broker's to bound, not denied.
    pub fn via_broker(&self) -> bool {
        self.binding
            .as_ref()
            .is_some_and(|b| b.transport == "https")
    }

    /// Whether the judge decides it from its workspace: it declares
    /// outputs or names a gate plugin, or it is a subgraph (whose child
    /// run is verified).
    pub fn judged(&self) -> bool {
        !self.outputs.is_empty()
            || self.gate.is_some()
            || matches!(self.driver, Driver::Subgraph { .. })
    }

    pub fn route(&self) -> Option<Route> {
        self.binding.as_ref().map(|c| Route {
            provider_id: c.provider_id.clone(),
            model_id: c.model_target.clone(),
            region: c.region.clone(),
            fallback: c.fallback,
            policy_digest: c.route_policy_digest.clone(),
        })
    }
}

#[derive(Debug, Clone)]
pub struct Schedule {
    pub nodes: Vec<NodeInfo>,
    pub spec: Spec,
    /// The data class artifacts are recorded under.
    pub data_class: String,
    /// What makes the graph unrunnable on this version, found while
    /// scheduling it: (JSON pointer, why). Preflight refuses the run.
    pub problems: Vec<(String, String)>,
}

impl Schedule {
    pub fn index(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }

    pub fn of(graph: &Graph, plan: &Plan) -> Schedule {
        let mut order: Vec<(usize, &str)> = Vec::new();
        for (level, ids) in plan.levels.iter().enumerate() {
            for id in ids {
                order.push((level, id));
            }
        }
        order.sort();
        let index: HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, (_, id))| (*id, i))
            .collect();
        let mut binding_uses: BTreeMap<&str, usize> = BTreeMap::new();
        for c in plan.node_bindings.values() {
            *binding_uses.entry(&c.binding_id).or_default() += 1;
        }
        let by_id: HashMap<&str, (usize, &bl_graph::model::GraphNode)> = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(position, n)| (n.id.as_str(), (position, n)))
            .collect();
        let hazards = bl_graph::hazards::hazards(graph, Some(&plan.node_bindings));
        let mut nodes = Vec::with_capacity(order.len());
        let mut specs = Vec::with_capacity(order.len());
        for (_, id) in &order {
            let (position, node) = by_id[*id];
            let binding = plan.node_bindings.get(*id).cloned();
            let text = |key: &str| {
                node.detail(key)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_string()
            };
            let driver = match node.kind {
                NodeKind::Join => Driver::Join(node.join_mode().unwrap_or(JoinMode::AllSuccessful)),
                NodeKind::Approval => Driver::Approval,
                _ if binding.is_some() => Driver::Worker,
                NodeKind::Tool => tool_driver(&text("tool_ref")),
                NodeKind::Publish => Driver::Publish {
                    policy: text("publication_policy"),
                },
                NodeKind::Loop => Driver::Loop {
                    package: text("loop_package"),
                },
                NodeKind::Subgraph => Driver::Subgraph {
                    package: text("graph_package"),
                },
                NodeKind::Router => Driver::Router,
                kind => Driver::Unsupported(format!(
                    "node kind '{}' cannot run without a connection on this version",
                    kind.name()
                )),
            };
            let repair_target = match &node.on_failure {
                bl_graph::model::OnFailure::Repair { target } => {
                    index.get(target.as_str()).copied()
                }
                _ => None,
            };
            let join = match node.kind {
                NodeKind::Join => Some(match node.join_mode() {
                    Some(JoinMode::AllSelected) => Join::AllSelected,
                    Some(JoinMode::AnySuccessful) => Join::AnySuccessful,
                    _ => Join::AllSuccessful,
                }),
                _ => None,
            };
            let max_attempts = node.budget.max_attempts.clamp(1, i64::from(u32::MAX)) as u32;
            specs.push(NodeSpec {
                id: node.id.clone(),
                max_attempts,
                join,
                approval: node.kind == NodeKind::Approval,
                repair_target,
            });
            nodes.push(NodeInfo {
                id: node.id.clone(),
                at: format!("/nodes/{position}"),
                kind: node.kind,
                shared_binding: binding
                    .as_ref()
                    .is_some_and(|c| binding_uses.get(c.binding_id.as_str()) > Some(&1)),
                driver,
                binding,
                network_effect: node.effects.iter().any(|e| e.reaches_network()),
                hazard: hazards
                    .iter()
                    .find(|h| h.node == node.id)
                    .map(|h| h.message.clone()),
                isolation: node.isolation,
                max_attempts,
                max_tokens: node.budget.max_tokens.map(|t| t.max(0) as u64),
                deadline: Duration::from_secs(node.budget.max_wallclock_s.max(1) as u64),
                publication_policy: node
                    .detail("publication_policy")
                    .and_then(|v| v.as_str())
                    .map(str::to_string),
                incoming: Vec::new(),
                outputs: node
                    .artifact_ports
                    .iter()
                    .filter(|p| p.direction == Direction::Output)
                    .filter_map(|p| {
                        Some(OutputPort {
                            port: p.name.clone(),
                            path: p.path.clone()?,
                            kind: node.output_type(&p.name).unwrap_or_default().to_string(),
                            system_only: p.visibility == Visibility::SystemOnly,
                            contract: p.contract.clone(),
                        })
                    })
                    .collect(),
                reply_name: node
                    .outputs
                    .iter()
                    .find(|(name, _)| {
                        !node.artifact_ports.iter().any(|p| {
                            p.direction == Direction::Output && &p.name == name && p.path.is_some()
                        })
                    })
                    .map(|(name, kind)| {
                        let extension = match kind.as_str() {
                            "markdown" => "md",
                            "json" => "json",
                            _ => "txt",
                        };
                        format!("{name}.{extension}")
                    }),
                inputs: Vec::new(),
                gate: node.gate.as_ref().map(|g| GateSpec {
                    plugin: g["plugin"].as_str().unwrap_or_default().to_string(),
                    config: g
                        .get("config")
                        .map_or_else(|| "{}".to_string(), bl_core::canonical_json),
                    grants: g["grants"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default(),
                }),
                config: node
                    .config
                    .as_ref()
                    .map_or_else(|| "{}".to_string(), bl_core::canonical_json),
                routes: None,
            });
        }
        let mut problems = Vec::new();
        // Routers: route names and the nodes each route leads to.
        let mut route_targets: HashMap<usize, Vec<(u32, String)>> = HashMap::new();
        for (position, node) in graph.nodes.iter().enumerate() {
            if node.kind != NodeKind::Router {
                continue;
            }
            let at = format!("/nodes/{position}");
            let i = index[node.id.as_str()];
            let Some(table) = node.detail("routes").and_then(|v| v.as_object()) else {
                continue;
            };
            let mut names: Vec<String> = table.keys().cloned().collect();
            names.sort();
            let default = node
                .detail("default_route")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            let Some(default_index) = names.iter().position(|n| n == default) else {
                problems.push((
                    format!("{at}/default_route"),
                    format!(
                        "default_route '{default}' is not one of the routes ({})",
                        names.join(", ")
                    ),
                ));
                continue;
            };
            let mut targets = Vec::new();
            for (r, name) in names.iter().enumerate() {
                let listed: Vec<String> = match &table[name] {
                    serde_json::Value::String(s) => vec![s.clone()],
                    serde_json::Value::Array(a) if a.iter().all(|v| v.is_string()) => a
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect(),
                    _ => {
                        problems.push((
                            format!("{at}/routes/{name}"),
                            "a route lists the node ids it leads to: a node id or a list of them"
                                .to_string(),
                        ));
                        continue;
                    }
                };
                for target in listed {
                    let leads = graph
                        .edges
                        .iter()
                        .any(|e| e.from_node == node.id && e.to_node == target);
                    if !leads {
                        problems.push((
                            format!("{at}/routes/{name}"),
                            format!(
                                "route '{name}' leads to '{target}', but no edge goes from '{}' to '{target}'",
                                node.id
                            ),
                        ));
                    }
                    targets.push((r as u32, target));
                }
            }
            // A gated router picks `pass` or `fail` from its verdict: both
            // must be routes, or a failed gate could take a passing branch.
            if node.gate.is_some() {
                for needed in ["pass", "fail"] {
                    if !names.iter().any(|n| n == needed) {
                        problems.push((
                            format!("{at}/routes"),
                            format!(
                                "router '{}' is decided by its gate plugin, which picks route 'pass' or 'fail': declare both (it has {})",
                                node.id,
                                names.join(", ")
                            ),
                        ));
                        break;
                    }
                }
            }
            nodes[i].routes = Some(Routes {
                names,
                default: default_index as u32,
                leads: targets.clone(),
            });
            route_targets.insert(i, targets);
        }
        for (position, node) in graph.nodes.iter().enumerate() {
            if let Driver::Unsupported(why) = &nodes[index[node.id.as_str()]].driver
                && node.kind == NodeKind::Tool
            {
                problems.push((format!("/nodes/{position}/tool_ref"), why.clone()));
            }
            // A tier no machine of bl's provides: refused before the run,
            // never found out when the node is reached.
            if node.isolation == bl_graph::model::Isolation::CustomerManagedWorker {
                problems.push((
                    format!("/nodes/{position}/isolation"),
                    format!(
                        "node '{}' asks for customer_managed_worker, which runs on the customer's own worker: this version of bl cannot reach one. Choose workspace_only, process_restricted or container_restricted",
                        node.id
                    ),
                ));
            }
        }
        let mut edges = Vec::with_capacity(graph.edges.len());
        for e in &graph.edges {
            let (from, to) = (index[e.from_node.as_str()], index[e.to_node.as_str()]);
            let routes: Vec<u32> = route_targets
                .get(&from)
                .map(|t| {
                    t.iter()
                        .filter(|(_, target)| *target == e.to_node)
                        .map(|(r, _)| *r)
                        .collect()
                })
                .unwrap_or_default();
            let source = graph.node(&e.from_node).expect("validated edge");
            let target = graph.node(&e.to_node).expect("validated edge");
            if let Some(input) = target.artifact(Direction::Input, &e.to_port)
                && source.artifact(Direction::Output, &e.from_port).is_some()
            {
                nodes[to].inputs.push(InputPort {
                    port: input.name.clone(),
                    from,
                    from_port: e.from_port.clone(),
                    required: input.required,
                });
            }
            let guard = match e.when {
                None => Guard::Default,
                Some(EdgeGuard::Succeeded) => Guard::Succeeded,
                Some(EdgeGuard::Failed) => Guard::Failed,
                Some(EdgeGuard::Skipped) => Guard::Skipped,
                Some(EdgeGuard::Terminal) => Guard::Terminal,
            };
            nodes[to].incoming.push((from, e.when));
            edges.push(EdgeSpec {
                from,
                to,
                guard,
                routes,
            });
        }
        let fail_mode = match graph.policies.fail_mode {
            bl_graph::model::FailMode::FailClosed => FailMode::FailClosed,
            bl_graph::model::FailMode::ContinueDeclared => FailMode::ContinueDeclared,
        };
        Schedule {
            nodes,
            spec: Spec {
                nodes: specs,
                edges,
                fail_mode,
                repair_budget: graph.policies.repair_budget.clamp(0, i64::from(u32::MAX)) as u32,
            },
            data_class: graph.policies.data_class.name().to_string(),
            problems,
        }
    }
}
