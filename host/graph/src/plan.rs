//! Compiling a validated graph: its normalised digest, admission of
//! connections, Kahn waves, and the canonical plan whose sha256 is the
//! plan_id. All byte-compatible with bounded-loops 0.7.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde_json::Value;

use crate::doc::py_repr;
use crate::model::*;
use crate::records;

pub const PLAN_API_VERSION: &str = "bounded-loops.dev/plan/v1";
pub const COMPILER_VERSION: &str = "bounded-loops.graph-compiler/v1";
/// The policy digest the CLI uses when no policy is given.
pub const DEFAULT_POLICY_DIGEST: &str =
    "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// Kahn's waves, each sorted; `None` when the edges hold a cycle.
///
/// For plain graph/v1, in-degrees count every edge while successors are a
/// set, as upstream counts them: two edges between the same pair of nodes
/// never drain and read as a cycle. Manifests that opt into bl's extensions
/// (where several ports between two nodes are normal) count each edge once
/// on both sides.
pub fn kahn_levels(graph: &Graph) -> Option<Vec<Vec<String>>> {
    let index: HashMap<&str, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let mut indegree = vec![0usize; graph.nodes.len()];
    let mut successors: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); graph.nodes.len()];
    for edge in &graph.edges {
        let (from, to) = (index[edge.from_node.as_str()], index[edge.to_node.as_str()]);
        let first_edge_of_pair = successors[from].insert(to);
        if first_edge_of_pair || graph.extensions.is_empty() {
            indegree[to] += 1;
        }
    }
    let mut wave: Vec<usize> = (0..graph.nodes.len())
        .filter(|&i| indegree[i] == 0)
        .collect();
    let mut levels = Vec::new();
    let mut done = 0;
    while !wave.is_empty() {
        done += wave.len();
        let mut next = Vec::new();
        for &u in &wave {
            for &v in &successors[u] {
                indegree[v] -= 1;
                if indegree[v] == 0 {
                    next.push(v);
                }
            }
        }
        let mut ids: Vec<String> = wave.iter().map(|&i| graph.nodes[i].id.clone()).collect();
        ids.sort();
        levels.push(ids);
        wave = next;
    }
    (done == graph.nodes.len()).then_some(levels)
}

/// Whether `ancestor` reaches `node` through one or more edges.
pub fn is_strict_ancestor(graph: &Graph, ancestor: &str, node: &str) -> bool {
    let mut successors: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in &graph.edges {
        successors
            .entry(e.from_node.as_str())
            .or_default()
            .push(e.to_node.as_str());
    }
    let mut stack = vec![ancestor];
    let mut seen = HashSet::new();
    while let Some(u) = stack.pop() {
        for &v in successors.get(u).map(Vec::as_slice).unwrap_or_default() {
            if v == node {
                return true;
            }
            if seen.insert(v) {
                stack.push(v);
            }
        }
    }
    false
}

fn sorted(items: &[String]) -> Vec<String> {
    let mut out = items.to_vec();
    out.sort();
    out
}

/// `sha256:` over the canonical normalised graph: the same graph written
/// in YAML or JSON, in any key order, digests the same.
pub fn graph_digest(graph: &Graph) -> String {
    let bytes = records::canonical_bytes(&records::GraphRecord::of(graph));
    format!("sha256:{}", bl_core::sha256_hex(bytes.as_bytes()))
}

/// The execution bound: (1 + repair_budget) × Σ max_attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionBound {
    pub attempts_per_round: i64,
    pub repair_rounds: i64,
}

impl ExecutionBound {
    pub fn of(graph: &Graph) -> Self {
        ExecutionBound {
            attempts_per_round: graph.nodes.iter().map(|n| n.budget.max_attempts).sum(),
            repair_rounds: graph.policies.repair_budget,
        }
    }

    pub fn total(&self) -> i64 {
        (1 + self.repair_rounds) * self.attempts_per_round
    }
}

// ------------------------------------------------------------ connections

/// One candidate from connections.json (exactly these 17 keys).
#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    pub binding_id: String,
    pub slot_id: String,
    pub connector_id: String,
    pub connector_version: String,
    pub connection_id: String,
    pub admission_digest: String,
    pub route_policy_digest: String,
    pub provider_id: String,
    pub model_target: String,
    pub region: String,
    pub fallback: bool,
    pub capabilities: Vec<String>,
    pub data_class_max: String,
    pub allowed_effects: Vec<String>,
    pub isolation: String,
    pub transport: String,
    pub admitted: bool,
}

const CONNECTION_KEYS: [&str; 17] = [
    "admission_digest",
    "admitted",
    "allowed_effects",
    "binding_id",
    "capabilities",
    "connection_id",
    "connector_id",
    "connector_version",
    "data_class_max",
    "fallback",
    "isolation",
    "model_target",
    "provider_id",
    "region",
    "route_policy_digest",
    "slot_id",
    "transport",
];

/// A refusal while compiling: upstream's code, message and pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError {
    pub code: &'static str,
    pub message: String,
    pub pointer: String,
}

fn compile_err<T>(
    code: &'static str,
    pointer: impl Into<String>,
    message: impl Into<String>,
) -> Result<T, CompileError> {
    Err(CompileError {
        code,
        message: message.into(),
        pointer: pointer.into(),
    })
}

/// Reads connections.json. A document that is not an array is refused
/// with no code (`Err(None)`), as upstream's CLI refuses it before compiling.
pub fn parse_connections(value: &Value) -> Result<Vec<Connection>, Option<CompileError>> {
    let Value::Array(items) = value else {
        return Err(None);
    };
    let shape = || {
        Some(CompileError {
            code: "connection_snapshot",
            message: "connection snapshot has an invalid shape".into(),
            pointer: "/connections".into(),
        })
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let Value::Object(map) = item else {
            return Err(shape());
        };
        let keys: BTreeSet<&str> = map.keys().map(String::as_str).collect();
        if keys != CONNECTION_KEYS.iter().copied().collect() {
            return Err(shape());
        }
        for key in ["admitted", "fallback"] {
            if !map[key].is_boolean() {
                return Err(Some(CompileError {
                    code: "connection_snapshot",
                    message: "must be boolean".into(),
                    pointer: format!("/connections/{key}"),
                }));
            }
        }
        let admitted = map["admitted"].as_bool().unwrap_or(false);
        let text = |key: &str| map[key].as_str().map(str::to_string).ok_or_else(shape);
        let list = |key: &str| -> Result<Vec<String>, Option<CompileError>> {
            map[key]
                .as_array()
                .ok_or_else(shape)?
                .iter()
                .map(|v| v.as_str().map(str::to_string).ok_or_else(shape))
                .collect()
        };
        out.push(Connection {
            binding_id: text("binding_id")?,
            slot_id: text("slot_id")?,
            connector_id: text("connector_id")?,
            connector_version: text("connector_version")?,
            connection_id: text("connection_id")?,
            admission_digest: text("admission_digest")?,
            route_policy_digest: text("route_policy_digest")?,
            provider_id: text("provider_id")?,
            model_target: text("model_target")?,
            region: text("region")?,
            fallback: map["fallback"].as_bool().unwrap_or(false),
            capabilities: list("capabilities")?,
            data_class_max: text("data_class_max")?,
            allowed_effects: list("allowed_effects")?,
            isolation: text("isolation")?,
            transport: text("transport")?,
            admitted,
        });
    }
    Ok(out)
}

fn py_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_repr(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// Picks the connection for a node's slot: the first candidate by
/// binding_id that passes every filter. When none does, the error names the
/// filter that removed the last candidates.
fn admit<'c>(
    graph: &Graph,
    node: &GraphNode,
    slot: &Slot,
    connections: &'c [Connection],
) -> Result<&'c Connection, CompileError> {
    let at = format!("/nodes/{}/connection_slot", node.id);
    if connections.is_empty() {
        return compile_err(
            "no_admitted_connection",
            at,
            "no connections were provided — pass a connections.json via --connections or supply connections programmatically",
        );
    }
    let mut candidates: Vec<&Connection> = connections
        .iter()
        .filter(|c| c.slot_id == slot.id)
        .collect();
    if candidates.is_empty() {
        let available: BTreeSet<String> = connections.iter().map(|c| c.slot_id.clone()).collect();
        let available: Vec<String> = available.into_iter().collect();
        return compile_err(
            "no_admitted_connection",
            at,
            format!(
                "no connection targets slot {}; available slot_ids in connections.json: {}",
                py_repr(&slot.id),
                py_list(&available)
            ),
        );
    }
    candidates.sort_by(|a, b| a.binding_id.cmp(&b.binding_id));
    let node_isolation = rank(ISOLATIONS, &node.isolation).unwrap_or(0);
    let graph_class = rank(DATA_CLASSES, &graph.policies.data_class).unwrap_or(0);
    type Filter<'f> = (
        Box<dyn Fn(&Connection) -> bool + 'f>,
        Box<dyn Fn(&Connection) -> String + 'f>,
    );
    let filters: Vec<Filter> = vec![
        (
            Box::new(|c| c.admitted),
            Box::new(|_| {
                format!(
                    "connection for slot {} exists but is not marked admitted",
                    py_repr(&slot.id)
                )
            }),
        ),
        (
            Box::new(|c| slot.requires.iter().all(|r| c.capabilities.contains(r))),
            Box::new(|_| {
                format!(
                    "slot {} requires capabilities {} that the admitted connection does not advertise",
                    py_repr(&slot.id),
                    py_list(&sorted(&slot.requires))
                )
            }),
        ),
        (
            Box::new(|c| rank(DATA_CLASSES, &c.data_class_max).is_some_and(|r| r >= graph_class)),
            Box::new(|c| {
                format!(
                    "graph data_class {} exceeds the data_class_max {} of the admitted connection for slot {}",
                    py_repr(&graph.policies.data_class),
                    py_repr(&c.data_class_max),
                    py_repr(&slot.id)
                )
            }),
        ),
        (
            Box::new(|c| node.effects.iter().all(|e| c.allowed_effects.contains(e))),
            Box::new(|_| {
                format!(
                    "node {} declares effects {} that the admitted connection for slot {} does not permit",
                    py_repr(&node.id),
                    py_list(&sorted(&node.effects)),
                    py_repr(&slot.id)
                )
            }),
        ),
        (
            Box::new(|c| rank(ISOLATIONS, &c.isolation).is_some_and(|r| r >= node_isolation)),
            Box::new(|c| {
                format!(
                    "node {} requires isolation {} but the admitted connection for slot {} only provides {}",
                    py_repr(&node.id),
                    py_repr(&node.isolation),
                    py_repr(&slot.id),
                    py_repr(&c.isolation)
                )
            }),
        ),
    ];
    for (keep, reason) in &filters {
        let survivors: Vec<&Connection> = candidates.iter().copied().filter(|c| keep(c)).collect();
        if survivors.is_empty() {
            return compile_err("no_admitted_connection", at, reason(candidates[0]));
        }
        candidates = survivors;
    }
    Ok(candidates[0])
}

// ------------------------------------------------------------ the plan

pub struct CompileInput<'a> {
    /// `None` when no --connections was given.
    pub connections: Option<&'a [Connection]>,
    /// Loop package digests that are available (from the loop roots).
    pub available_packages: Option<&'a BTreeSet<String>>,
    pub policy_digest: &'a str,
}

#[derive(Debug, Clone)]
pub struct Plan {
    /// The canonical plan bytes: plan.json, exactly.
    pub bytes: String,
    pub plan_id: String,
    pub graph_digest: String,
    pub policy_digest: String,
    pub levels: Vec<Vec<String>>,
    /// node id → the binding chosen for it.
    pub node_bindings: BTreeMap<String, Connection>,
    /// One entry per bound node, sorted by binding_id (the plan's
    /// connection_bindings).
    pub bindings: Vec<Connection>,
    pub bound: ExecutionBound,
    pub package_digests: BTreeSet<String>,
}

pub fn compile(graph: &Graph, input: &CompileInput) -> Result<Plan, CompileError> {
    let levels = kahn_levels(graph).expect("a validated graph is acyclic");
    let graph_digest = graph_digest(graph);

    let mut node_bindings = BTreeMap::new();
    if !graph.slots.is_empty() || graph.nodes.iter().any(|n| n.connection_slot.is_some()) {
        let Some(connections) = input.connections else {
            return compile_err(
                "no_admitted_connection",
                "/connections",
                "compile requires --connections for connection-bound nodes",
            );
        };
        for node in &graph.nodes {
            let Some(slot_id) = &node.connection_slot else {
                continue;
            };
            let slot = graph
                .slots
                .iter()
                .find(|s| &s.id == slot_id)
                .expect("validated slot reference");
            node_bindings.insert(
                node.id.clone(),
                admit(graph, node, slot, connections)?.clone(),
            );
        }
    }

    let package_digests: BTreeSet<String> = graph
        .nodes
        .iter()
        .filter(|n| n.kind == "loop")
        .filter_map(|n| {
            n.detail("loop_package")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    if let Some(available) = input.available_packages {
        for node in graph.nodes.iter().filter(|n| n.kind == "loop") {
            let digest = node
                .detail("loop_package")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !available.contains(digest) {
                return compile_err(
                    "package_unavailable",
                    format!("/nodes/{}/loop_package", node.id),
                    "package digest is not admitted",
                );
            }
        }
    }

    // One binding per bound node, in node order, then stably sorted by
    // binding_id: two nodes on one slot list the binding twice, as upstream does.
    let mut bindings: Vec<Connection> = graph
        .nodes
        .iter()
        .filter_map(|n| node_bindings.get(&n.id).cloned())
        .collect();
    bindings.sort_by(|a, b| a.binding_id.cmp(&b.binding_id));
    let repair_budget = graph.policies.repair_budget;
    let record = records::PlanRecord {
        api_version: PLAN_API_VERSION,
        compiler_version: COMPILER_VERSION,
        connection_bindings: bindings.iter().map(records::BindingRecord::of).collect(),
        edges: graph.edges.iter().map(records::EdgeRecord::of).collect(),
        levels: &levels,
        nodes: graph
            .nodes
            .iter()
            .map(|n| {
                let binding = node_bindings.get(&n.id).map(|c| c.binding_id.as_str());
                records::PlanNodeRecord::of(n, repair_budget, binding)
            })
            .collect(),
        package_digests: package_digests.iter().map(String::as_str).collect(),
        policy_digest: input.policy_digest,
        source_graph_digest: &graph_digest,
    };
    let bytes = records::canonical_bytes(&record);
    let plan_id = format!("sha256:{}", bl_core::sha256_hex(bytes.as_bytes()));
    Ok(Plan {
        bytes,
        plan_id,
        graph_digest,
        policy_digest: input.policy_digest.to_string(),
        levels,
        node_bindings,
        bindings,
        bound: ExecutionBound::of(graph),
        package_digests,
    })
}
