//! What a valid graph will run into: conditions bounded-loops 0.7 lets a
//! run discover at a node, and deny there (`policy_denied`), and a publish
//! bl's outbox policy could not decide, which bl names before anything
//! runs. Pure: the graph, and the bindings a plan admitted when they are
//! known.

use std::collections::BTreeMap;

use crate::Graph;
use crate::model::Connection;
use crate::model::{Named, NodeKind};

/// Every rule a hazard may name.
pub const RULES: &[&str] = &[
    "shared_slot",
    "shared_binding",
    "network_effect",
    "outbox_without_approval",
];

/// One node the run would deny, and why, in words that say the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hazard {
    pub node: String,
    /// A JSON pointer into the manifest, at the value that causes it.
    pub pointer: String,
    /// One of [`RULES`].
    pub rule: &'static str,
    pub message: String,
}

/// Every node the run would deny, in document order. With `bindings` (a
/// plan's, by node id) an effect is judged by its binding's transport;
/// without, a connector node is warned about unless it could be https.
pub fn hazards(graph: &Graph, bindings: Option<&BTreeMap<String, Connection>>) -> Vec<Hazard> {
    let mut out = Vec::new();
    // Nodes sharing one binding (one slot): every one of them is denied.
    let mut sharing: BTreeMap<String, Vec<(usize, &str, &str)>> = BTreeMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        let Some(slot) = &node.connection_slot else {
            continue;
        };
        let key = bindings
            .and_then(|b| b.get(&node.id))
            .map_or_else(|| format!("slot {slot}"), |c| c.binding_id.clone());
        sharing
            .entry(key)
            .or_default()
            .push((i, node.id.as_str(), slot.as_str()));
    }
    // Each group's words once, and each node's group by its index: a
    // fan-out of thousands on one slot costs no more than its size.
    let mut shared: BTreeMap<usize, (&'static str, String)> = BTreeMap::new();
    for group in sharing.values().filter(|g| g.len() > 1) {
        let (_, first, slot) = group[0];
        let ids = some_of(group.iter().map(|(_, id, _)| *id));
        let one_slot = group.iter().all(|(_, _, s)| *s == slot);
        let said = if one_slot {
            (
                "shared_slot",
                format!(
                    "nodes {ids} share the connection slot '{slot}', so one connection (binding) would serve several nodes; the run's execution policy lets a connection serve one node only, and denies each of them (policy_denied). Give each node a slot of its own, and a connection for each slot in connections.json"
                ),
            )
        } else {
            // Slots of their own, and connections.json gave their
            // connections one binding_id: that is one binding.
            let binding = bindings
                .and_then(|b| b.get(first))
                .map(|c| c.binding_id.as_str())
                .unwrap_or_default();
            let slots = some_of(group.iter().map(|(_, _, s)| *s));
            (
                "shared_binding",
                format!(
                    "nodes {ids} are bound through one binding_id '{binding}' (the connections for slots {slots} in connections.json share it), so one connection would serve several nodes; the run's execution policy lets a connection serve one node only, and denies each of them (policy_denied). Give each connection in connections.json a binding_id of its own"
                ),
            )
        };
        for (i, _, _) in group {
            shared.insert(*i, said.clone());
        }
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Some((rule, message)) = shared.get(&i) {
            out.push(Hazard {
                node: node.id.clone(),
                pointer: format!("/nodes/{i}/connection_slot"),
                rule,
                message: message.clone(),
            });
        }
        let Some((k, effect)) = node
            .effects
            .iter()
            .enumerate()
            .find(|(_, e)| e.reaches_network())
        else {
            continue;
        };
        let binding = bindings.and_then(|b| b.get(&node.id));
        let via_broker = binding.is_some_and(|c| c.transport == "https");
        let connector = node.connection_slot.is_some();
        let denied = match (connector, bindings.is_some()) {
            // A publish or tool with no connection never goes through the broker.
            (false, _) => node.kind == NodeKind::Publish,
            (true, true) => !via_broker,
            // Not yet bound: denied unless its connection will be https.
            (true, false) => true,
        };
        if !denied {
            continue;
        }
        let what = if connector {
            match binding {
                Some(c) => format!("its connection is {} ({}), not https through the egress broker", c.transport, c.provider_id),
                None => "unless its connection is https (through the egress broker), a local agent may not".into(),
            }
        } else {
            "a publish node with no connection publishes locally, and may not".into()
        };
        out.push(Hazard {
            node: node.id.clone(),
            pointer: format!("/nodes/{i}/effects/{k}"),
            rule: "network_effect",
            message: format!(
                "node '{}' declares the effect '{}', which reaches the network: {what}, so the run's execution policy denies it (policy_denied). A local publish (to the outbox) needs only workspace_write: drop '{}'{}",
                node.id,
                effect.name(),
                effect.name(),
                if connector {
                    ", or bind the node to an https connection"
                } else {
                    ""
                }
            ),
        });
    }
    // bl's outbox policy publishes only what approvals before it allowed:
    // with no approval node on any way in, it cannot decide, and the
    // publish node fails when the run reaches it.
    for (i, node) in graph.nodes.iter().enumerate() {
        let outbox = node.detail("publication_policy").and_then(|v| v.as_str()) == Some("outbox");
        let approved_before = || {
            crate::dag::ancestors(graph, &node.id)
                .into_iter()
                .any(|id| graph.node(id).is_some_and(|n| n.kind == NodeKind::Approval))
        };
        if node.kind == NodeKind::Publish && outbox && !approved_before() {
            out.push(Hazard {
                node: node.id.clone(),
                pointer: format!("/nodes/{i}/publication_policy"),
                rule: "outbox_without_approval",
                message: format!(
                    "publish node '{}' uses the outbox policy, which publishes only what a person approved before it, and no approval node comes before it: the policy cannot decide, and the node would fail. Put an approval node (kind: approval) on its way in, with an edge into '{}'",
                    node.id, node.id
                ),
            });
        }
    }
    out
}

/// Names quoted and joined with "and"; past a handful, the first three and
/// how many more, so that one slot shared by a thousand nodes makes a
/// sentence, not a page.
fn some_of<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    const ALL_UP_TO: usize = 4;
    const FIRST: usize = 3;
    let count = names.len();
    if count <= ALL_UP_TO {
        return names
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(" and ");
    }
    let first: Vec<String> = names.take(FIRST).map(|n| format!("'{n}'")).collect();
    format!(
        "{} and {} more ({count} in all)",
        first.join(", "),
        count - FIRST
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(nodes: &str) -> Graph {
        graph_with(nodes, "[]")
    }

    fn graph_with(nodes: &str, edges: &str) -> Graph {
        let text = format!(
            r#"{{"api_version": "bounded-loops.dev/graph/v1", "graph_id": "g", "version": "1.0.0",
                "nodes": {nodes}, "edges": {edges},
                "connection_slots": [{{"id": "llm", "requires": ["chat"], "data_class_max": "internal"}}],
                "policies": {{"data_class": "internal", "fail_mode": "fail_closed"}}}}"#
        );
        crate::lint(&text, crate::Format::Json).unwrap()
    }

    fn node(id: &str, kind: &str, effects: &str, slot: bool, extra: &str) -> String {
        format!(
            r#"{{"id": "{id}", "kind": "{kind}", "inputs": {{}}, "outputs": {{}},
                "budget": {{"max_attempts": 1, "max_wallclock_s": 60}}, "effects": {effects},
                "isolation": "workspace_only"{}{extra}}}"#,
            if slot {
                r#", "connection_slot": "llm""#
            } else {
                ""
            }
        )
    }

    #[test]
    fn two_nodes_on_one_slot_and_a_network_effect_are_named_with_their_places() {
        let g = graph(&format!(
            "[{}, {}, {}]",
            node("a", "research_claim", r#"["read_only"]"#, true, ""),
            node("b", "research_claim", r#"["read_only"]"#, true, ""),
            node(
                "pub",
                "publish",
                r#"["workspace_write", "external_write"]"#,
                false,
                r#", "publication_policy": "outbox""#
            ),
        ));
        let found = hazards(&g, None);
        let places: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|h| (h.node.as_str(), h.rule, h.pointer.as_str()))
            .collect();
        assert_eq!(
            places,
            [
                ("a", "shared_slot", "/nodes/0/connection_slot"),
                ("b", "shared_slot", "/nodes/1/connection_slot"),
                ("pub", "network_effect", "/nodes/2/effects/1"),
                (
                    "pub",
                    "outbox_without_approval",
                    "/nodes/2/publication_policy"
                ),
            ]
        );
        assert!(
            found[0].message.contains("'a' and 'b'"),
            "{}",
            found[0].message
        );
        assert!(
            found[2].message.contains("drop 'external_write'"),
            "{}",
            found[2].message
        );
    }

    #[test]
    fn a_slot_a_whole_fan_out_shares_is_one_sentence_of_a_few_names() {
        let nodes: Vec<String> = (0..2000)
            .map(|i| {
                node(
                    &format!("n{i}"),
                    "research_claim",
                    r#"["read_only"]"#,
                    true,
                    "",
                )
            })
            .collect();
        let g = graph(&format!("[{}]", nodes.join(", ")));
        let found = hazards(&g, None);
        assert_eq!(found.len(), 2000, "every node on the slot is denied");
        assert!(found.iter().all(|h| h.rule == "shared_slot"));
        assert!(
            found[1999].message.starts_with(
                "nodes 'n0', 'n1', 'n2' and 1997 more (2000 in all) share the connection slot 'llm'"
            ),
            "{}",
            found[1999].message
        );
        assert!(found[0].message.len() < 500, "{}", found[0].message);
    }

    #[test]
    fn an_outbox_publish_needs_an_approval_on_a_way_in_however_far_back() {
        let node = |id: &str, kind: &str, inputs: &str, extra: &str| {
            format!(
                r#"{{"id": "{id}", "kind": "{kind}", "inputs": {inputs}, "outputs": {{"out": "text"}},
                    "budget": {{"max_attempts": 1, "max_wallclock_s": 60}}, "effects": ["workspace_write"],
                    "isolation": "workspace_only"{extra}}}"#
            )
        };
        let nodes = format!(
            "[{}, {}, {}]",
            node(
                "review",
                "approval",
                "{}",
                r#", "required_role": "reviewer""#
            ),
            node(
                "mid",
                "join",
                r#"{"a": "text"}"#,
                r#", "mode": "all_successful""#
            ),
            node(
                "pub",
                "publish",
                r#"{"b": "text"}"#,
                r#", "publication_policy": "outbox""#
            ),
        );
        let into_pub =
            r#"{"from_node": "mid", "from_port": "out", "to_node": "pub", "to_port": "b"}"#;
        let into_mid =
            r#"{"from_node": "review", "from_port": "out", "to_node": "mid", "to_port": "a"}"#;
        let chained = graph_with(&nodes, &format!("[{into_mid}, {into_pub}]"));
        assert!(
            hazards(&chained, None).is_empty(),
            "{:?}",
            hazards(&chained, None)
        );
        let apart = graph_with(&nodes, &format!("[{into_mid}]"));
        let rules: Vec<&str> = hazards(&apart, None).iter().map(|h| h.rule).collect();
        assert_eq!(rules, ["outbox_without_approval"]);
    }
}
