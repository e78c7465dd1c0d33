//! The hashed records of a graph, as typed structs that serialize straight
//! to canonical JSON: fields are declared in sorted order and maps are
//! `BTreeMap`s, so serde_json's compact output is already canonical. This
//! avoids building a `serde_json::Value` tree for every node, which
//! dominated compile time on large graphs.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::model::API_VERSION;
use crate::model::*;

static NULL: Value = Value::Null;

fn sorted_strs(items: &[String]) -> Vec<&str> {
    let mut out: Vec<&str> = items.iter().map(String::as_str).collect();
    out.sort_unstable();
    out
}

/// Names sorted as strings (Python's `sorted`), not in table order.
fn sorted_names<T: Named>(items: &[T]) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = items.iter().map(|v| v.name()).collect();
    out.sort_unstable();
    out
}

fn port_map(ports: &[(String, String)]) -> BTreeMap<&str, &str> {
    ports
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[derive(Serialize)]
pub struct EdgeRecord<'a> {
    from_node: &'a str,
    from_port: &'a str,
    to_node: &'a str,
    to_port: &'a str,
    when: Option<&'a str>,
}

impl<'a> EdgeRecord<'a> {
    pub fn of(e: &'a Edge) -> Self {
        EdgeRecord {
            from_node: &e.from_node,
            from_port: &e.from_port,
            to_node: &e.to_node,
            to_port: &e.to_port,
            when: e.when.map(Named::name),
        }
    }
}

#[derive(Serialize)]
struct BudgetRecord {
    max_attempts: i64,
    max_cost_microunits: Option<i64>,
    max_tokens: Option<i64>,
    max_wallclock_s: i64,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OnFailureRecord<'a> {
    Unset(()),
    Named(&'static str),
    Repair { mode: &'static str, target: &'a str },
}

#[derive(Serialize)]
struct ArtifactPortRecord<'a> {
    contract: Option<&'a str>,
    direction: &'static str,
    name: &'a str,
    path: Option<&'a str>,
    required: bool,
    visibility: &'static str,
}

#[derive(Serialize)]
struct NodeRecord<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact_ports: Option<Vec<ArtifactPortRecord<'a>>>,
    budget: BudgetRecord,
    #[serde(skip_serializing_if = "Option::is_none")]
    config: Option<&'a Value>,
    connection_slot: Option<&'a str>,
    details: BTreeMap<&'a str, &'a Value>,
    effects: Vec<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gate: Option<&'a Value>,
    id: &'a str,
    inputs: BTreeMap<&'a str, &'a str>,
    isolation: &'a str,
    kind: &'a str,
    on_failure: OnFailureRecord<'a>,
    outputs: BTreeMap<&'a str, &'a str>,
}

#[derive(Serialize)]
struct SlotRecord<'a> {
    data_class_max: &'a str,
    id: &'a str,
    preferred_modalities: Vec<&'a str>,
    requires: Vec<&'a str>,
}

#[derive(Serialize)]
struct PoliciesRecord<'a> {
    data_class: &'a str,
    fail_mode: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    repair_budget: Option<i64>,
    required_audit_profile: Option<&'a str>,
}

/// The normalised graph the graph digest covers. bl's extensions appear
/// only when a manifest uses them, so plain graph/v1 digests as upstream's.
#[derive(Serialize)]
pub struct GraphRecord<'a> {
    api_version: &'static str,
    connection_slots: Vec<SlotRecord<'a>>,
    edges: Vec<EdgeRecord<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    extensions: Option<&'a [String]>,
    graph_id: &'a str,
    nodes: Vec<NodeRecord<'a>>,
    policies: PoliciesRecord<'a>,
    presentation: &'a Value,
    version: &'a str,
}

impl<'a> GraphRecord<'a> {
    pub fn of(graph: &'a Graph) -> Self {
        let extended = !graph.extensions.is_empty();
        let nodes = graph
            .nodes
            .iter()
            .map(|n| NodeRecord {
                artifact_ports: extended.then(|| {
                    n.artifact_ports
                        .iter()
                        .map(|p| ArtifactPortRecord {
                            contract: p.contract.as_deref(),
                            direction: if p.direction == Direction::Input {
                                "input"
                            } else {
                                "output"
                            },
                            name: &p.name,
                            path: p.path.as_deref(),
                            required: p.required,
                            visibility: if p.visibility == Visibility::SystemOnly {
                                "system_only"
                            } else {
                                "consumer"
                            },
                        })
                        .collect()
                }),
                budget: BudgetRecord {
                    max_attempts: n.budget.max_attempts,
                    max_cost_microunits: n.budget.max_cost_microunits,
                    max_tokens: n.budget.max_tokens,
                    max_wallclock_s: n.budget.max_wallclock_s,
                },
                config: n.config.as_ref(),
                connection_slot: n.connection_slot.as_deref(),
                details: n.details.iter().map(|(k, v)| (k.as_str(), v)).collect(),
                effects: sorted_names(&n.effects),
                gate: extended.then(|| n.gate.as_ref().unwrap_or(&NULL)),
                id: &n.id,
                inputs: port_map(&n.inputs),
                isolation: n.isolation.name(),
                kind: n.kind.name(),
                on_failure: match &n.on_failure {
                    OnFailure::Unset => OnFailureRecord::Unset(()),
                    OnFailure::FailGraph => OnFailureRecord::Named("fail_graph"),
                    OnFailure::Repair { target } => OnFailureRecord::Repair {
                        mode: "repair",
                        target,
                    },
                },
                outputs: port_map(&n.outputs),
            })
            .collect();
        GraphRecord {
            api_version: API_VERSION,
            connection_slots: graph
                .slots
                .iter()
                .map(|s| SlotRecord {
                    data_class_max: s.data_class_max.name(),
                    id: &s.id,
                    preferred_modalities: s
                        .preferred_modalities
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .map(String::as_str)
                        .collect(),
                    requires: sorted_strs(&s.requires),
                })
                .collect(),
            edges: graph.edges.iter().map(EdgeRecord::of).collect(),
            extensions: extended.then_some(graph.extensions.as_slice()),
            graph_id: &graph.graph_id,
            nodes,
            policies: PoliciesRecord {
                data_class: graph.policies.data_class.name(),
                fail_mode: graph.policies.fail_mode.name(),
                repair_budget: (graph.policies.repair_budget > 0)
                    .then_some(graph.policies.repair_budget),
                required_audit_profile: graph.policies.required_audit_profile.as_deref(),
            },
            presentation: &graph.presentation,
            version: &graph.version,
        }
    }
}

#[derive(Serialize)]
pub struct BindingRecord<'a> {
    admission_digest: &'a str,
    binding_id: &'a str,
    connection_id: &'a str,
    connector_id: &'a str,
    connector_version: &'a str,
    fallback: bool,
    model_target: &'a str,
    provider_id: &'a str,
    region: &'a str,
    route_policy_digest: &'a str,
    slot_id: &'a str,
    transport: &'a str,
}

impl<'a> BindingRecord<'a> {
    pub fn of(c: &'a crate::model::Connection) -> Self {
        BindingRecord {
            admission_digest: &c.admission_digest,
            binding_id: &c.binding_id,
            connection_id: &c.connection_id,
            connector_id: &c.connector_id,
            connector_version: &c.connector_version,
            fallback: c.fallback,
            model_target: &c.model_target,
            provider_id: &c.provider_id,
            region: &c.region,
            route_policy_digest: &c.route_policy_digest,
            slot_id: &c.slot_id,
            transport: &c.transport,
        }
    }
}

#[derive(Serialize)]
struct ApprovalPolicyRecord<'a> {
    join_mode: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    repair_budget: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repair_target: Option<&'a str>,
    required: bool,
    required_role: &'a Value,
}

#[derive(Serialize)]
struct PlanBudgetRecord {
    max_attempts: i64,
    max_cost_microunits: Option<i64>,
    max_tokens: Option<i64>,
}

#[derive(Serialize)]
pub struct PlanNodeRecord<'a> {
    approval_policy: ApprovalPolicyRecord<'a>,
    binding_id: Option<&'a str>,
    budgets: PlanBudgetRecord,
    hard_deadline_ms: i64,
    isolation: &'a str,
    kind: &'a str,
    node_id: &'a str,
    package_digest: &'a Value,
    required_effects: Vec<&'a str>,
}

impl<'a> PlanNodeRecord<'a> {
    pub fn of(n: &'a GraphNode, repair_budget: i64, binding_id: Option<&'a str>) -> Self {
        PlanNodeRecord {
            approval_policy: ApprovalPolicyRecord {
                join_mode: n.detail("mode").unwrap_or(&NULL),
                repair_budget: (repair_budget > 0).then_some(repair_budget),
                repair_target: match &n.on_failure {
                    OnFailure::Repair { target } => Some(target),
                    _ => None,
                },
                required: n.kind == NodeKind::Approval,
                required_role: n.detail("required_role").unwrap_or(&NULL),
            },
            binding_id,
            budgets: PlanBudgetRecord {
                max_attempts: n.budget.max_attempts,
                max_cost_microunits: n.budget.max_cost_microunits,
                max_tokens: n.budget.max_tokens,
            },
            hard_deadline_ms: n.budget.max_wallclock_s * 1000,
            isolation: n.isolation.name(),
            kind: n.kind.name(),
            node_id: &n.id,
            package_digest: n.detail("loop_package").unwrap_or(&NULL),
            required_effects: sorted_names(&n.effects),
        }
    }
}

/// plan.json: its canonical bytes are the plan, and their sha256 the plan_id.
#[derive(Serialize)]
pub struct PlanRecord<'a> {
    pub api_version: &'static str,
    pub compiler_version: &'static str,
    pub connection_bindings: Vec<BindingRecord<'a>>,
    pub edges: Vec<EdgeRecord<'a>>,
    pub levels: &'a [Vec<String>],
    pub nodes: Vec<PlanNodeRecord<'a>>,
    pub package_digests: Vec<&'a str>,
    pub policy_digest: &'a str,
    pub source_graph_digest: &'a str,
}

/// The canonical JSON bytes of a record.
pub fn canonical_bytes<T: Serialize>(record: &T) -> String {
    serde_json::to_string(record).expect("records always serialize")
}
