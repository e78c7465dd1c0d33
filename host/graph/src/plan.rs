//! Compiling a validated graph: its normalised digest, admission of
//! connections, Kahn waves, and the canonical plan whose sha256 is the
//! plan_id. All byte-compatible with bounded-loops 0.7.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

pub use crate::dag::{is_strict_ancestor, kahn_levels};
use bl_core::python::list_repr as py_list;

use crate::doc::py_repr;
use crate::error::{Refusal, RefusalCode};
use crate::model::*;
use crate::records;

pub const PLAN_API_VERSION: &str = "bounded-loops.dev/plan/v1";
pub const COMPILER_VERSION: &str = "bounded-loops.graph-compiler/v1";
/// The policy digest the CLI uses when no policy is given.
pub const DEFAULT_POLICY_DIGEST: &str =
    "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn sorted(items: &[String]) -> Vec<String> {
    let mut out = items.to_vec();
    out.sort();
    out
}

/// `sha256:` over the canonical normalised graph: the same graph written
/// in YAML or JSON, in any key order, digests the same.
pub fn graph_digest(graph: &Graph) -> String {
    let bytes = records::canonical_bytes(&records::GraphRecord::of(graph));
    bl_core::Sha256Digest::of(bytes.as_bytes()).to_string()
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

pub use crate::model::Connection;

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

/// A refusal while compiling (the one refusal type of the crate).
pub type CompileError = Refusal;

fn compile_err<T>(
    code: RefusalCode,
    pointer: impl Into<String>,
    message: impl Into<String>,
) -> Result<T, CompileError> {
    Refusal::err(code, pointer, message)
}

/// Why connections.json cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionsError {
    /// Not an array: refused with no code, as upstream's CLI refuses it
    /// before compiling. Holds the JSON type found, in Python's words.
    #[error("connections must be a JSON array of connection objects, got {0}")]
    NotAnArray(&'static str),
    /// An entry of the wrong shape: a `connection_snapshot` refusal.
    #[error("{0}")]
    Refused(#[from] Refusal),
}

/// Reads connections.json.
pub fn parse_connections(value: &Value) -> Result<Vec<Connection>, ConnectionsError> {
    let Value::Array(items) = value else {
        return Err(ConnectionsError::NotAnArray(bl_core::python::type_name(
            value,
        )));
    };
    let shape_refusal = || {
        Refusal::new(
            RefusalCode::ConnectionSnapshot,
            "/connections",
            "connection snapshot has an invalid shape",
        )
    };
    let shape = || ConnectionsError::Refused(shape_refusal());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::Object(map) = item else {
            return Err(shape());
        };
        let keys: BTreeSet<&str> = map.keys().map(String::as_str).collect();
        let expected: BTreeSet<&str> = CONNECTION_KEYS.iter().copied().collect();
        if keys != expected {
            let mut refusal = shape_refusal();
            let missing: Vec<&str> = expected.difference(&keys).copied().collect();
            let unknown: Vec<&str> = keys.difference(&expected).copied().collect();
            if !missing.is_empty() {
                refusal = refusal.hint(format!(
                    "connection {i} lacks field(s): {}",
                    missing.join(", ")
                ));
            }
            if !unknown.is_empty() {
                refusal = refusal.hint(format!(
                    "connection {i} has unknown field(s): {}",
                    unknown.join(", ")
                ));
            }
            return Err(ConnectionsError::Refused(refusal));
        }
        for key in ["admitted", "fallback"] {
            if !map[key].is_boolean() {
                return Err(ConnectionsError::Refused(Refusal::new(
                    RefusalCode::ConnectionSnapshot,
                    format!("/connections/{key}"),
                    "must be boolean",
                )));
            }
        }
        let admitted = map["admitted"].as_bool().unwrap_or(false);
        let text = |key: &str| map[key].as_str().map(str::to_string).ok_or_else(shape);
        let list = |key: &str| -> Result<Vec<String>, ConnectionsError> {
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

fn names<T: Named>(values: &[T]) -> Vec<String> {
    values.iter().map(|v| v.name().to_string()).collect()
}

/// Picks the connection for a node's slot: the first candidate by
/// binding_id that passes every filter. When none does, the error names the
/// filter that removed the last candidates.
fn admit<'c>(
    graph: &Graph,
    node: &GraphNode,
    slot: &Slot,
    connections: &'c [Connection],
    by_slot: &std::collections::HashMap<&str, Vec<&'c Connection>>,
) -> Result<&'c Connection, CompileError> {
    let at = format!("/nodes/{}/connection_slot", node.id);
    if connections.is_empty() {
        return compile_err(
            RefusalCode::NoAdmittedConnection,
            at,
            "no connections were provided — pass a connections.json via --connections or supply connections programmatically",
        );
    }
    let mut candidates: Vec<&Connection> =
        by_slot.get(slot.id.as_str()).cloned().unwrap_or_default();
    if candidates.is_empty() {
        let available: BTreeSet<String> = connections.iter().map(|c| c.slot_id.clone()).collect();
        let available: Vec<String> = available.into_iter().collect();
        return compile_err(
            RefusalCode::NoAdmittedConnection,
            at,
            format!(
                "no connection targets slot {}; available slot_ids in connections.json: {}",
                py_repr(&slot.id),
                py_list(&available)
            ),
        );
    }
    candidates.sort_by(|a, b| a.binding_id.cmp(&b.binding_id));
    let node_isolation = node.isolation.rank();
    let graph_class = graph.policies.data_class.rank();
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
            Box::new(|c| {
                DataClass::parse(&c.data_class_max).is_some_and(|d| d.rank() >= graph_class)
            }),
            Box::new(|c| {
                format!(
                    "graph data_class {} exceeds the data_class_max {} of the admitted connection for slot {}",
                    py_repr(graph.policies.data_class.name()),
                    py_repr(&c.data_class_max),
                    py_repr(&slot.id)
                )
            }),
        ),
        (
            Box::new(|c| {
                node.effects
                    .iter()
                    .all(|e| c.allowed_effects.iter().any(|a| a == e.name()))
            }),
            Box::new(|_| {
                format!(
                    "node {} declares effects {} that the admitted connection for slot {} does not permit",
                    py_repr(&node.id),
                    py_list(&sorted(&names(&node.effects))),
                    py_repr(&slot.id)
                )
            }),
        ),
        (
            Box::new(|c| {
                Isolation::parse(&c.isolation).is_some_and(|i| i.rank() >= node_isolation)
            }),
            Box::new(|c| {
                format!(
                    "node {} requires isolation {} but the admitted connection for slot {} only provides {}",
                    py_repr(&node.id),
                    py_repr(node.isolation.name()),
                    py_repr(&slot.id),
                    py_repr(&c.isolation)
                )
            }),
        ),
    ];
    for (keep, reason) in &filters {
        let survivors: Vec<&Connection> = candidates.iter().copied().filter(|c| keep(c)).collect();
        if survivors.is_empty() {
            return compile_err(RefusalCode::NoAdmittedConnection, at, reason(candidates[0]));
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
                RefusalCode::NoAdmittedConnection,
                "/connections",
                "compile requires --connections for connection-bound nodes",
            );
        };
        // Indexed once: a graph of n slots and n candidates compiles in
        // O(n log n), not O(n²).
        let slots: std::collections::HashMap<&str, &Slot> =
            graph.slots.iter().map(|s| (s.id.as_str(), s)).collect();
        let mut by_slot: std::collections::HashMap<&str, Vec<&Connection>> =
            std::collections::HashMap::new();
        for c in connections {
            by_slot.entry(c.slot_id.as_str()).or_default().push(c);
        }
        for node in &graph.nodes {
            let Some(slot_id) = &node.connection_slot else {
                continue;
            };
            let slot = slots[slot_id.as_str()];
            node_bindings.insert(
                node.id.clone(),
                admit(graph, node, slot, connections, &by_slot)?.clone(),
            );
        }
    }

    let package_digests: BTreeSet<String> = graph
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Loop)
        .filter_map(|n| {
            n.detail("loop_package")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    if let Some(available) = input.available_packages {
        // A subgraph's graph_package is looked up in the same catalogue,
        // as bounded-loops does.
        for (node, field) in graph.nodes.iter().filter_map(|n| match n.kind {
            NodeKind::Loop => Some((n, "loop_package")),
            NodeKind::Subgraph => Some((n, "graph_package")),
            _ => None,
        }) {
            let digest = node
                .detail(field)
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !available.contains(digest) {
                return Err(Refusal::new(
                    RefusalCode::PackageUnavailable,
                    format!("/nodes/{}/{field}", node.id),
                    "package digest is not admitted",
                )
                .hint(format!(
                    "no package under --loop-roots has digest {digest}; pass --loop-roots DIR for the directory holding it ({} admitted now)",
                    available.len()
                )));
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
    let plan_id = bl_core::Sha256Digest::of(bytes.as_bytes()).to_string();
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
