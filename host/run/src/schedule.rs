//! A compiled plan turned into what the executor runs: the machine's
//! [`Spec`] and, per node, what its driver needs (kind, binding, budget).
//! Nodes are ordered as bounded-loops runs them one at a time: by plan
//! wave, then by id, so that at concurrency 1 bl's log is upstream's.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bl_graph::model::{EdgeGuard, JoinMode, Named, NodeKind};
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
    /// A node kind this version cannot run without a worker.
    Unsupported,
}

#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub kind: NodeKind,
    pub driver: Driver,
    pub binding: Option<Connection>,
    /// The binding is shared with another node: bounded-loops denies it.
    pub shared_binding: bool,
    /// An effect that needs the network (denied on local runs).
    pub network_effect: bool,
    pub isolation: String,
    pub max_attempts: u32,
    pub max_tokens: Option<u64>,
    pub deadline: Duration,
    /// A publish node's publication_policy, when it has one.
    pub publication_policy: Option<String>,
    /// Incoming edges in manifest order: (source index, guard name).
    pub incoming: Vec<(usize, Option<&'static str>)>,
}

impl NodeInfo {
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
        let by_id: HashMap<&str, &bl_graph::model::GraphNode> =
            graph.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
        let mut nodes = Vec::with_capacity(order.len());
        let mut specs = Vec::with_capacity(order.len());
        for (_, id) in &order {
            let node = by_id[*id];
            let binding = plan.node_bindings.get(*id).cloned();
            let driver = match node.kind {
                NodeKind::Join => Driver::Join(node.join_mode().unwrap_or(JoinMode::AllSuccessful)),
                NodeKind::Approval => Driver::Approval,
                _ if binding.is_some() => Driver::Worker,
                NodeKind::Tool
                    if node.detail("tool_ref").and_then(|v| v.as_str()) == Some(PROBE_TOOL) =>
                {
                    Driver::Probe
                }
                NodeKind::Publish => Driver::Publish {
                    policy: node
                        .detail("publication_policy")
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_string(),
                },
                _ => Driver::Unsupported,
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
                kind: node.kind,
                shared_binding: binding
                    .as_ref()
                    .is_some_and(|c| binding_uses.get(c.binding_id.as_str()) > Some(&1)),
                driver,
                binding,
                network_effect: node.effects.iter().any(|e| e.reaches_network()),
                isolation: node.isolation.name().to_string(),
                max_attempts,
                max_tokens: node.budget.max_tokens.map(|t| t.max(0) as u64),
                deadline: Duration::from_secs(node.budget.max_wallclock_s.max(1) as u64),
                publication_policy: node
                    .detail("publication_policy")
                    .and_then(|v| v.as_str())
                    .map(str::to_string),
                incoming: Vec::new(),
            });
        }
        let mut edges = Vec::with_capacity(graph.edges.len());
        for e in &graph.edges {
            let (from, to) = (index[e.from_node.as_str()], index[e.to_node.as_str()]);
            let guard = match e.when {
                None => Guard::Default,
                Some(EdgeGuard::Succeeded) => Guard::Succeeded,
                Some(EdgeGuard::Failed) => Guard::Failed,
                Some(EdgeGuard::Skipped) => Guard::Skipped,
                Some(EdgeGuard::Terminal) => Guard::Terminal,
            };
            nodes[to].incoming.push((from, e.when.map(|g| g.name())));
            edges.push(EdgeSpec { from, to, guard });
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
        }
    }
}
