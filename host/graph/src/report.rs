//! What `bl graph lint` and `bl graph plan` print, as bounded-loops 0.7
//! prints it: the JSON documents (rendered by the caller with
//! `bl_core::python_json`) and the human text. Pure: the CLI reads files
//! and writes these out.

use serde_json::{Value, json};

use crate::model::{Effect, Named, NodeKind};
use crate::plan::{ExecutionBound, Plan};
use crate::{Graph, Refusal, graph_digest};

/// `lint --json` for a valid manifest.
pub fn lint_json(graph: &Graph) -> Value {
    let node_ids: Vec<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let slot_ids: Vec<&str> = graph.slots.iter().map(|s| s.id.as_str()).collect();
    json!({
        "digest": graph_digest(graph), "edge_count": graph.edges.len(), "node_ids": node_ids,
        "schema_version": 1, "slot_ids": slot_ids, "valid": true,
    })
}

/// `lint` for a valid manifest, line by line.
pub fn lint_text(graph: &Graph) -> String {
    let node_ids: Vec<&str> = graph.nodes.iter().map(|n| n.id.as_str()).collect();
    let slot_ids: Vec<&str> = graph.slots.iter().map(|s| s.id.as_str()).collect();
    format!(
        "digest  : {}\nnodes   : {} ({})\nedges   : {}\nslots   : {} ({})\nOK\n",
        graph_digest(graph),
        node_ids.len(),
        node_ids.join(", "),
        graph.edges.len(),
        slot_ids.len(),
        slot_ids.join(", ")
    )
}

/// `lint --json` for a refused manifest: bounded-loops' keys, and bl's own
/// `line` and `column` (1-based) when the place is known, and `hints` when
/// bl has more to say.
pub fn refusal_json(refusal: &Refusal) -> Value {
    let mut value = json!({"code": refusal.code, "message": refusal.message, "pointer": refusal.pointer, "valid": false});
    if let Some(pos) = refusal.pos.filter(|p| p.line > 0) {
        value["line"] = json!(pos.line);
        value["column"] = json!(pos.col);
    }
    if !refusal.hints.is_empty() {
        value["hints"] = json!(refusal.hints);
    }
    value
}

/// What a plan was admitted against, for its report.
pub struct Admission<'a> {
    /// The `--loop-roots`, as Python's pathlib shows them.
    pub loop_package_roots: &'a [String],
    pub loop_packages_admitted: usize,
}

/// `plan --json`.
pub fn plan_json(graph: &Graph, plan: &Plan, admission: &Admission) -> Value {
    let ExecutionBound {
        attempts_per_round,
        repair_rounds,
    } = plan.bound;
    let bindings: Vec<Value> = plan
        .bindings
        .iter()
        .map(|c| json!({"binding_id": c.binding_id, "provider_id": c.provider_id, "transport": c.transport}))
        .collect();
    let nodes: Vec<Value> = graph
        .nodes
        .iter()
        .map(|n| {
            json!({
                "binding_id": plan.node_bindings.get(&n.id).map(|c| c.binding_id.clone()),
                "effects": n.effects, "isolation": n.isolation, "kind": n.kind, "node_id": n.id,
            })
        })
        .collect();
    json!({
        "admission": {
            "loop_package_roots": admission.loop_package_roots,
            "loop_packages_admitted": admission.loop_packages_admitted,
        },
        "bindings": bindings,
        "execution_bound": {
            "attempts_per_round": attempts_per_round, "repair_rounds": repair_rounds,
            "total_attempt_slots": plan.bound.total(),
        },
        "levels": plan.levels, "nodes": nodes, "plan_id": plan.plan_id,
        "policy_digest": plan.policy_digest, "schema_version": 1,
        "source_graph_digest": plan.graph_digest,
    })
}

/// What `plan` says of the policy: its digest, or, for bounded-loops'
/// stand-in digest (all `a`s, "no policy file"), that none was given.
/// (bounded-loops prints the stand-in; `--json` still records it.)
pub fn policy_in_words(digest: &str) -> String {
    if digest == crate::plan::DEFAULT_POLICY_DIGEST {
        "none given: the default execution policy applies".into()
    } else {
        digest.to_string()
    }
}

/// `plan`, line by line.
pub fn plan_text(graph: &Graph, plan: &Plan, admission: &Admission) -> String {
    let ExecutionBound {
        attempts_per_round,
        repair_rounds,
    } = plan.bound;
    let mut out = format!(
        "plan_id : {}\ngraph   : {}\npolicy  : {}\n\
         bound   : {} attempt slots max = (1 + {repair_rounds} repair rounds) x {attempts_per_round} attempts/round\n\
         pkgroots: {} ({} loop packages admitted)\n",
        plan.plan_id,
        plan.graph_digest,
        policy_in_words(&plan.policy_digest),
        plan.bound.total(),
        admission.loop_package_roots.join(", "),
        admission.loop_packages_admitted
    );
    for (i, wave) in plan.levels.iter().enumerate() {
        out.push_str(&format!("wave {i:<3}: [{}]\n", wave.join(", ")));
    }
    for n in &graph.nodes {
        out.push_str(&format!(
            "  node '{}': kind={}  effects=[{}]  isolation={}\n",
            n.id,
            n.kind,
            n.effects
                .iter()
                .map(|e| e.name())
                .collect::<Vec<_>>()
                .join(", "),
            n.isolation
        ));
    }
    out
}

/// The approvals a run of the graph would wait on, and the nodes that
/// would act on the world (publish nodes, and any node with an effect that
/// reaches the network), each with the approvals upstream of it.
pub fn dry_run(graph: &Graph) -> Value {
    let approvals_before = |id: &str| -> Vec<&str> {
        let upstream = crate::dag::ancestors(graph, id);
        graph
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Approval && upstream.contains(n.id.as_str()))
            .map(|n| n.id.as_str())
            .collect()
    };
    let detail = |node: &crate::model::GraphNode, key: &str| {
        node.details
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or(Value::Null)
    };
    let approvals: Vec<Value> = graph
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Approval)
        .map(|n| json!({"node": n.id, "required_role": detail(n, "required_role"), "after_approvals": approvals_before(&n.id)}))
        .collect();
    let effects: Vec<Value> = graph
        .nodes
        .iter()
        .filter(|n| {
            n.kind == NodeKind::Publish || n.effects.iter().any(|e| Effect::reaches_network(*e))
        })
        .map(|n| {
            json!({
                "node": n.id, "kind": n.kind.name(),
                "effects": n.effects.iter().map(|e| e.name()).collect::<Vec<_>>(),
                "publication_policy": detail(n, "publication_policy"),
                "after_approvals": approvals_before(&n.id),
            })
        })
        .collect();
    json!({ "approvals": approvals, "effects": effects })
}
