//! bl's `artifact-ports` extension (seed 002's artifact graph): named files
//! handed from producer to consumer along ported edges, each verified by
//! hash at run time. These compile-time checks run only for manifests that
//! list `artifact-ports` in their top-level `extensions`, after every
//! graph/v1 check has passed, so plain graph/v1 behaves exactly as upstream.

use std::collections::HashMap;
use std::path::{Component, Path};

use crate::doc::py_repr;
use crate::error::{Refusal, RefusalCode};
use crate::model::{Direction, Graph, NodeKind, Visibility};

/// Paths the run's artifact ledger owns; no node may publish into them.
pub const RESERVED_PREFIXES: &[&str] = &["workspace/manifests/", "workspace/inputs/"];
/// Where every output is published.
pub const WORKSPACE_PREFIX: &str = "workspace/";
/// Where only `system_only` receipts may be published.
pub const SYSTEM_PREFIX: &str = "workspace/system/";

fn refuse(code: RefusalCode, pointer: String, message: String) -> Result<(), Refusal> {
    Refusal::err(code, pointer, message)
}

/// What `node` is, when it never writes a file of its own: the controller
/// decides a join, a person an approval, and a publish with no connection
/// sends what it was handed (one with a connection is an agent's turn).
fn writes_no_file(node: &crate::model::GraphNode) -> Option<&'static str> {
    match node.kind {
        NodeKind::Join => Some("a join (it waits for its parents and records how each ended)"),
        NodeKind::Approval => Some("an approval (a person's decision)"),
        NodeKind::Publish if node.connection_slot.is_none() => {
            Some("a publish node with no connection (it sends what it was handed)")
        }
        _ => None,
    }
}

pub fn check(graph: &Graph) -> Result<(), Refusal> {
    if !graph.extensions.iter().any(|e| e == "artifact-ports") {
        return Ok(());
    }
    // Duplicate port names: one name for an input and an output of a node.
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Some((name, _)) = node
            .outputs
            .iter()
            .find(|(name, _)| node.input_type(name).is_some())
        {
            return refuse(
                RefusalCode::PortDuplicate,
                format!("/nodes/{i}/outputs/{name}"),
                format!(
                    "port {} is declared as both an input and an output of node {}",
                    py_repr(name),
                    py_repr(&node.id)
                ),
            );
        }
    }
    // Output paths: relative, inside the workspace, outside the ledger, owned once.
    let mut owners: HashMap<&str, &str> = HashMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        for port in node
            .artifact_ports
            .iter()
            .filter(|p| p.direction == Direction::Output)
        {
            let Some(path) = port.path.as_deref() else {
                continue;
            };
            let at = format!("/nodes/{i}/outputs/{}/path", port.name);
            if let Some(what) = writes_no_file(node) {
                return refuse(
                    RefusalCode::ArtifactHandoff,
                    at,
                    format!(
                        "{}.{} would never be published: node {} is {what}, and writes no file. Hand the files to the node that reads them straight from the nodes that write them (an input port and an edge from each){}",
                        node.id,
                        port.name,
                        py_repr(&node.id),
                        if node.kind == NodeKind::Join {
                            "; a join there only waits for them"
                        } else {
                            ""
                        }
                    ),
                );
            }
            let escapes = Path::new(path)
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
            if escapes {
                return refuse(
                    RefusalCode::ReservedPath,
                    at,
                    format!(
                        "{} must be a relative path inside the run workspace, without '..'",
                        py_repr(path)
                    ),
                );
            }
            // Published outputs land in the run directory at their path;
            // everything outside its workspace/ is the ledger's own record.
            if !path.starts_with(WORKSPACE_PREFIX) {
                return refuse(
                    RefusalCode::ReservedPath,
                    at,
                    format!(
                        "{} must lie under {WORKSPACE_PREFIX}: the rest of the run directory is the ledger's",
                        py_repr(path)
                    ),
                );
            }
            if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| path.starts_with(**p)) {
                return refuse(
                    RefusalCode::ReservedPath,
                    at,
                    format!(
                        "{} is under {prefix}, which the artifact ledger owns",
                        py_repr(path)
                    ),
                );
            }
            if path.starts_with(SYSTEM_PREFIX) && port.visibility != Visibility::SystemOnly {
                return refuse(
                    RefusalCode::ReservedPath,
                    at,
                    format!(
                        "{} is under {SYSTEM_PREFIX}, which only system_only outputs may use",
                        py_repr(path)
                    ),
                );
            }
            if let Some(owner) = owners.insert(path, node.id.as_str()) {
                return refuse(
                    RefusalCode::OutputPathConflict,
                    at,
                    format!(
                        "{} is already published by node {}; an output path has one owner",
                        py_repr(path),
                        py_repr(owner)
                    ),
                );
            }
        }
    }
    // Edges into long-form inputs: the producer publishes a file, and a
    // system_only file reaches transforms only.
    for (i, edge) in graph.edges.iter().enumerate() {
        let source = graph.node(&edge.from_node).expect("validated edge");
        let target = graph.node(&edge.to_node).expect("validated edge");
        let produced = source.artifact(Direction::Output, &edge.from_port);
        if target.artifact(Direction::Input, &edge.to_port).is_some()
            && produced.is_none_or(|p| p.path.is_none())
        {
            let fix = match writes_no_file(source) {
                Some(what) => format!(
                    "{} is {what}, which writes no file: hand {} the files straight from the nodes that write them (an input port and an edge from each)",
                    py_repr(&source.id),
                    py_repr(&target.id)
                ),
                None => "declare it in long form with a path".to_string(),
            };
            return refuse(
                RefusalCode::ArtifactHandoff,
                format!("/edges/{i}"),
                format!(
                    "input {}.{} is an artifact port, but {}.{} publishes no file ({fix})",
                    edge.to_node, edge.to_port, edge.from_node, edge.from_port
                ),
            );
        }
        let guarded = edge
            .when
            .is_some_and(|w| w != crate::model::EdgeGuard::Succeeded);
        if target.artifact(Direction::Input, &edge.to_port).is_some() && guarded {
            return refuse(
                RefusalCode::ArtifactHandoff,
                format!("/edges/{i}/when"),
                format!(
                    "the edge into artifact input {}.{} is guarded by more than success, but a consumer is handed only what its producer published on success: drop the `when`",
                    edge.to_node, edge.to_port
                ),
            );
        }
        if produced.is_some_and(|p| p.visibility == Visibility::SystemOnly)
            && !target.is_transform()
        {
            return refuse(
                RefusalCode::Visibility,
                format!("/edges/{i}"),
                format!(
                    "{}.{} is system_only: only a transform node (a tool whose tool_ref is transform:<plugin>) may consume it, and {} is not one",
                    edge.from_node,
                    edge.from_port,
                    py_repr(&edge.to_node)
                ),
            );
        }
    }
    // Required inputs that nothing produces.
    for (i, node) in graph.nodes.iter().enumerate() {
        for port in node
            .artifact_ports
            .iter()
            .filter(|p| p.direction == Direction::Input && p.required)
        {
            let bound = graph
                .edges
                .iter()
                .any(|e| e.to_node == node.id && e.to_port == port.name);
            if !bound {
                return refuse(
                    RefusalCode::InputUnbound,
                    format!("/nodes/{i}/inputs/{}", port.name),
                    format!(
                        "required input {}.{} has no producer; bind it with an edge or declare required: false",
                        node.id, port.name
                    ),
                );
            }
        }
    }
    Ok(())
}
