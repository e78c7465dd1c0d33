//! `bl graph connect`: a connections file a graph's slots are admitted
//! with — one local binding per slot, for the user to review. Pure: the
//! graph in, the candidates (graph/v1's 17 keys) out.

use serde_json::{Value, json};

use crate::Graph;
use crate::model::{Effect, Isolation, Named};

/// What the connections are made for.
#[derive(Debug, Clone)]
pub struct Wanted<'a> {
    /// `claude`, `codex`, …, or `recorded` (recorded replies: no key, no network).
    pub provider: &'a str,
    pub model: &'a str,
    /// The isolation every binding provides; `None`: what the slot's
    /// nodes ask for at most.
    pub isolation: Option<Isolation>,
}

/// One admitted candidate per slot, in the graph's slot order: the slot's
/// capabilities and data class, the effects its nodes declare (but those
/// that reach the network, which a local binding never carries), and an
/// isolation at least what its nodes ask for. The two digests identify the
/// admission and the route: sha256 of their canonical JSON.
pub fn candidates(graph: &Graph, wanted: &Wanted) -> Vec<Value> {
    let recorded = wanted.provider == "recorded";
    graph
        .slots
        .iter()
        .map(|slot| {
            let nodes: Vec<_> = graph
                .nodes
                .iter()
                .filter(|n| n.connection_slot.as_deref() == Some(slot.id.as_str()))
                .collect();
            let mut effects: Vec<&str> = nodes
                .iter()
                .flat_map(|n| n.effects.iter())
                .filter(|e| !e.reaches_network())
                .map(|e| e.name())
                .collect();
            if effects.is_empty() {
                effects.push(Effect::ReadOnly.name());
            }
            effects.sort_unstable();
            effects.dedup();
            let isolation = wanted.isolation.unwrap_or_else(|| {
                nodes
                    .iter()
                    .map(|n| n.isolation)
                    .max_by_key(|i| i.rank())
                    .unwrap_or(Isolation::WorkspaceOnly)
            });
            let route = json!({
                "fallback": false, "model_target": wanted.model,
                "provider_id": wanted.provider, "region": "local",
            });
            let admission = json!({
                "capabilities": slot.requires, "data_class_max": slot.data_class_max.name(),
                "allowed_effects": effects, "isolation": isolation.name(), "route": route,
                "slot_id": slot.id,
            });
            json!({
                "admission_digest": bl_core::digest(&admission),
                "admitted": true,
                "allowed_effects": effects,
                "binding_id": format!("bind-{}", slot.id),
                "capabilities": slot.requires,
                "connection_id": format!("conn-{}", slot.id),
                "connector_id": if recorded { "recorded" } else { "local_cli" },
                "connector_version": "1.0.0",
                "data_class_max": slot.data_class_max.name(),
                "fallback": false,
                "isolation": isolation.name(),
                "model_target": wanted.model,
                "provider_id": wanted.provider,
                "region": "local",
                "route_policy_digest": bl_core::digest(&route),
                "slot_id": slot.id,
                "transport": "local_cli",
            })
        })
        .collect()
}

/// The nodes that ask for more isolation than `given`, with their slot
/// and what they ask for: a binding at `given` could serve none of them
/// (the plan would find no admitted connection for their slots).
pub fn asking_more_than(graph: &Graph, given: Isolation) -> Vec<(&str, &str, Isolation)> {
    graph
        .nodes
        .iter()
        .filter_map(|n| {
            let slot = n.connection_slot.as_deref()?;
            (n.isolation.rank() > given.rank()).then_some((n.id.as_str(), slot, n.isolation))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node `a`, process_restricted, writing its workspace, on slot `llm`.
    fn one_agent_on_one_slot() -> Graph {
        let text = r#"{"api_version": "bounded-loops.dev/graph/v1", "graph_id": "g", "version": "1.0.0",
            "nodes": [{"id": "a", "kind": "research_claim", "inputs": {}, "outputs": {},
                       "budget": {"max_attempts": 1, "max_wallclock_s": 60},
                       "effects": ["workspace_write"], "isolation": "process_restricted",
                       "connection_slot": "llm"}],
            "edges": [],
            "connection_slots": [{"id": "llm", "requires": ["chat"], "data_class_max": "internal"}],
            "policies": {"data_class": "internal", "fail_mode": "fail_closed"}}"#;
        crate::lint(text, crate::Format::Json).unwrap()
    }

    #[test]
    fn every_slot_gets_one_candidate_the_plan_admits() {
        let graph = one_agent_on_one_slot();
        let made = candidates(
            &graph,
            &Wanted {
                provider: "claude",
                model: "sonnet",
                isolation: None,
            },
        );
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].as_object().unwrap().len(), 17);
        assert_eq!(made[0]["isolation"], "process_restricted");
        let connections = crate::parse_connections(&Value::Array(made)).unwrap();
        let input = crate::CompileInput {
            connections: Some(&connections),
            available_packages: None,
            policy_digest: crate::plan::DEFAULT_POLICY_DIGEST,
        };
        let plan = crate::compile(&graph, &input).unwrap();
        assert_eq!(plan.node_bindings["a"].provider_id, "claude");
    }

    #[test]
    fn an_isolation_weaker_than_a_node_asks_for_is_named() {
        let graph = one_agent_on_one_slot();
        assert_eq!(
            asking_more_than(&graph, Isolation::WorkspaceOnly),
            [("a", "llm", Isolation::ProcessRestricted)]
        );
        assert!(asking_more_than(&graph, Isolation::ProcessRestricted).is_empty());
        assert!(asking_more_than(&graph, Isolation::ContainerRestricted).is_empty());
    }
}
