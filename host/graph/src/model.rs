//! The validated graph: typed, and only ever built by [`crate::validate`].

use serde_json::Value;

pub const NODE_KINDS: &[&str] = &[
    "research_claim",
    "research_source",
    "audit",
    "tool",
    "loop",
    "subgraph",
    "router",
    "join",
    "approval",
    "publish",
];

/// The kind-specific fields each node kind requires.
pub fn kind_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "loop" => &["loop_package"],
        "tool" => &["tool_ref"],
        "router" => &["routes", "default_route"],
        "join" => &["mode"],
        "approval" => &["required_role"],
        "audit" => &["audit_profile"],
        "research_source" => &["source_policy"],
        "subgraph" => &["graph_package"],
        "publish" => &["publication_policy"],
        _ => &[],
    }
}

pub const EFFECTS: &[&str] = &[
    "read_only",
    "workspace_write",
    "external_write",
    "financial",
    "irreversible",
];
/// Effects that reach the network: a node carrying one may not retry.
pub const NETWORK_EFFECTS: &[&str] = &["external_write", "financial", "irreversible"];
/// In rank order, weakest first.
pub const ISOLATIONS: &[&str] = &[
    "workspace_only",
    "process_restricted",
    "container_restricted",
    "customer_managed_worker",
];
/// In rank order, least sensitive first.
pub const DATA_CLASSES: &[&str] = &["public", "internal", "confidential", "restricted"];
pub const JOIN_MODES: &[&str] = &["all_selected", "all_successful", "any_successful"];
pub const FAIL_MODES: &[&str] = &["fail_closed", "continue_declared"];
pub const EDGE_GUARDS: &[&str] = &["succeeded", "failed", "skipped", "terminal"];
pub const PROVIDERS: &[&str] = &[
    "agy",
    "anthropic",
    "claude",
    "codex",
    "deepseek",
    "dsh",
    "grok",
    "kimi",
    "muse",
    "openai",
    "openrouter",
    "qwen",
];

pub fn rank(table: &[&str], value: &str) -> Option<usize> {
    table.iter().position(|v| *v == value)
}

#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub max_attempts: i64,
    pub max_wallclock_s: i64,
    pub max_tokens: Option<i64>,
    pub max_cost_microunits: Option<i64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OnFailure {
    /// Not written (or `null`): the default, which is `fail_graph`.
    Unset,
    FailGraph,
    Repair {
        target: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct GraphNode {
    pub id: String,
    pub kind: String,
    /// Port name → type, in document order.
    pub inputs: Vec<(String, String)>,
    pub outputs: Vec<(String, String)>,
    pub budget: Budget,
    pub effects: Vec<String>,
    pub isolation: String,
    pub connection_slot: Option<String>,
    pub on_failure: OnFailure,
    /// The kind's own fields, as written.
    pub details: Vec<(String, Value)>,
    /// bl extension `artifact-ports`: the long-form ports of this node.
    pub artifact_ports: Vec<ArtifactPort>,
    /// bl extension `artifact-ports`: the gate plugin that decides this node.
    pub gate: Option<Value>,
}

/// The extensions bl adds to graph/v1, named in a manifest's top-level
/// `extensions` list. A manifest without that key is plain graph/v1.
pub const EXTENSIONS: &[&str] = &["artifact-ports"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Input,
    Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visibility {
    /// Any declared consumer may read it (the default).
    Consumer,
    /// Only a deterministic transform node may read it; operators may inspect it.
    SystemOnly,
}

/// A port declared in long form: a named file handed off between nodes and
/// verified by hash (seed 002's artifact graph).
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactPort {
    pub name: String,
    pub direction: Direction,
    /// For outputs: the file the node must publish, relative to the run workspace.
    pub path: Option<String>,
    pub visibility: Visibility,
    /// A completion contract the published file must also pass.
    pub contract: Option<String>,
    /// For inputs: whether some producer must be bound to it (default true).
    pub required: bool,
}

impl GraphNode {
    /// Whether this node is a deterministic transform: a tool node whose
    /// tool_ref names a transform plugin (`transform:<name>@<version>`).
    pub fn is_transform(&self) -> bool {
        self.kind == "tool"
            && self
                .detail("tool_ref")
                .and_then(Value::as_str)
                .is_some_and(|r| r.starts_with("transform:"))
    }

    pub fn artifact(&self, direction: Direction, name: &str) -> Option<&ArtifactPort> {
        self.artifact_ports
            .iter()
            .find(|p| p.direction == direction && p.name == name)
    }
}

impl GraphNode {
    pub fn detail(&self, key: &str) -> Option<&Value> {
        self.details.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn output_type(&self, port: &str) -> Option<&str> {
        self.outputs
            .iter()
            .find(|(p, _)| p == port)
            .map(|(_, t)| t.as_str())
    }

    pub fn input_type(&self, port: &str) -> Option<&str> {
        self.inputs
            .iter()
            .find(|(p, _)| p == port)
            .map(|(_, t)| t.as_str())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Edge {
    pub from_node: String,
    pub from_port: String,
    pub to_node: String,
    pub to_port: String,
    /// Normalised (trimmed, lower-case); `None` is the default (succeeded).
    pub when: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub id: String,
    pub requires: Vec<String>,
    pub data_class_max: String,
    pub preferred_modalities: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policies {
    pub data_class: String,
    pub fail_mode: String,
    pub required_audit_profile: Option<String>,
    pub repair_budget: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub graph_id: String,
    pub version: String,
    pub nodes: Vec<GraphNode>,
    pub edges: Vec<Edge>,
    pub slots: Vec<Slot>,
    pub policies: Policies,
    /// A free object; `{}` when absent.
    pub presentation: Value,
    /// bl extensions the manifest opts into (empty for plain graph/v1).
    pub extensions: Vec<String>,
}

impl Graph {
    pub fn node(&self, id: &str) -> Option<&GraphNode> {
        self.nodes.iter().find(|n| n.id == id)
    }
}
