//! The validated graph: typed, and only ever built by validation.

use serde_json::Value;

/// The `api_version` every graph/v1 manifest declares.
pub const API_VERSION: &str = "bounded-loops.dev/graph/v1";

/// An enum whose values a manifest writes by name.
pub trait Named: Copy + PartialEq + Sized + 'static {
    /// Every value, in the order bounded-loops lists them (for the ranked
    /// tables, weakest first).
    const ALL: &'static [Self];
    /// Every name, in the same order.
    const NAMES: &'static [&'static str];

    /// The name a manifest writes.
    fn name(self) -> &'static str;

    /// The value with this exact name.
    fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }

    /// Its position in [`Named::ALL`]: the rank of ranked tables.
    fn rank(self) -> usize {
        Self::ALL
            .iter()
            .position(|v| *v == self)
            .expect("every value is in ALL")
    }
}

macro_rules! named {
    ($(#[$doc:meta])* $enum:ident { $($(#[$vdoc:meta])* $variant:ident => $name:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $enum {
            $($(#[$vdoc])* $variant,)*
        }

        impl Named for $enum {
            const ALL: &'static [Self] = &[$($enum::$variant,)*];
            const NAMES: &'static [&'static str] = &[$($name,)*];
            fn name(self) -> &'static str {
                match self {
                    $($enum::$variant => $name,)*
                }
            }
        }

        impl std::fmt::Display for $enum {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl serde::Serialize for $enum {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> serde::Deserialize<'de> for $enum {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(d)?;
                $enum::parse(&name).ok_or_else(|| {
                    serde::de::Error::unknown_variant(&name, $enum::NAMES)
                })
            }
        }

        impl PartialEq<&str> for $enum {
            fn eq(&self, other: &&str) -> bool {
                self.name() == *other
            }
        }
    };
}

named! {
    /// What a node does; each kind has its own required fields.
    NodeKind {
        ResearchClaim => "research_claim",
        ResearchSource => "research_source",
        Audit => "audit",
        Tool => "tool",
        Loop => "loop",
        Subgraph => "subgraph",
        Router => "router",
        Join => "join",
        Approval => "approval",
        Publish => "publish",
    }
}

impl NodeKind {
    /// The kind-specific fields this kind requires.
    pub fn fields(self) -> &'static [&'static str] {
        match self {
            NodeKind::Loop => &["loop_package"],
            NodeKind::Tool => &["tool_ref"],
            NodeKind::Router => &["routes", "default_route"],
            NodeKind::Join => &["mode"],
            NodeKind::Approval => &["required_role"],
            NodeKind::Audit => &["audit_profile"],
            NodeKind::ResearchSource => &["source_policy"],
            NodeKind::Subgraph => &["graph_package"],
            NodeKind::Publish => &["publication_policy"],
            NodeKind::ResearchClaim => &[],
        }
    }
}

named! {
    /// What a node may do to the world.
    Effect {
        ReadOnly => "read_only",
        WorkspaceWrite => "workspace_write",
        ExternalWrite => "external_write",
        Financial => "financial",
        Irreversible => "irreversible",
    }
}

impl Effect {
    /// Effects that reach the network: a node carrying one may not retry.
    pub fn reaches_network(self) -> bool {
        matches!(
            self,
            Effect::ExternalWrite | Effect::Financial | Effect::Irreversible
        )
    }
}

named! {
    /// How much of the host a node may touch, weakest first.
    Isolation {
        WorkspaceOnly => "workspace_only",
        ProcessRestricted => "process_restricted",
        ContainerRestricted => "container_restricted",
        CustomerManagedWorker => "customer_managed_worker",
    }
}

named! {
    /// How sensitive data is, least sensitive first.
    DataClass {
        Public => "public",
        Internal => "internal",
        Confidential => "confidential",
        Restricted => "restricted",
    }
}

named! {
    /// How a join node waits for its parents.
    JoinMode {
        AllSelected => "all_selected",
        AllSuccessful => "all_successful",
        AnySuccessful => "any_successful",
    }
}

named! {
    /// What a failed node does to the run.
    FailMode {
        FailClosed => "fail_closed",
        ContinueDeclared => "continue_declared",
    }
}

named! {
    /// The source node's outcome an edge waits for (no guard: succeeded).
    EdgeGuard {
        Succeeded => "succeeded",
        Failed => "failed",
        Skipped => "skipped",
        Terminal => "terminal",
    }
}

pub const NODE_KINDS: &[&str] = NodeKind::NAMES;
pub const EFFECTS: &[&str] = Effect::NAMES;
pub const ISOLATIONS: &[&str] = Isolation::NAMES;
pub const DATA_CLASSES: &[&str] = DataClass::NAMES;
pub const JOIN_MODES: &[&str] = JoinMode::NAMES;
pub const FAIL_MODES: &[&str] = FailMode::NAMES;
pub const EDGE_GUARDS: &[&str] = EdgeGuard::NAMES;

/// The kind-specific fields each node kind requires (none for an unknown kind).
pub fn kind_fields(kind: &str) -> &'static [&'static str] {
    NodeKind::parse(kind).map_or(&[], NodeKind::fields)
}

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
    pub kind: NodeKind,
    /// Port name → type, in document order.
    pub inputs: Vec<(String, String)>,
    pub outputs: Vec<(String, String)>,
    pub budget: Budget,
    pub effects: Vec<Effect>,
    pub isolation: Isolation,
    pub connection_slot: Option<String>,
    pub on_failure: OnFailure,
    /// The kind's own fields, as written.
    pub details: Vec<(String, Value)>,
    /// bl extension `artifact-ports`: the long-form ports of this node.
    pub artifact_ports: Vec<ArtifactPort>,
    /// bl extension `artifact-ports`: the gate plugin that decides this node.
    pub gate: Option<Value>,
    /// bl extension `artifact-ports`: a transform node's config for its plugin.
    pub config: Option<Value>,
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
        self.kind == NodeKind::Tool
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
    /// A join node's mode (validation made sure a join has one).
    pub fn join_mode(&self) -> Option<JoinMode> {
        self.detail("mode")
            .and_then(Value::as_str)
            .and_then(JoinMode::parse)
    }

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
    /// `None` is the default (succeeded).
    pub when: Option<EdgeGuard>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub id: String,
    pub requires: Vec<String>,
    pub data_class_max: DataClass,
    pub preferred_modalities: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Policies {
    pub data_class: DataClass,
    pub fail_mode: FailMode,
    pub required_audit_profile: Option<String>,
    pub repair_budget: i64,
}

/// A graph that passed validation. It is `non_exhaustive`, so outside this
/// crate nothing but [`crate::validate`] (through [`crate::lint`]) can make
/// one: every `Graph` a caller holds has unique ids, resolved references,
/// no cycle, and repair targets upstream of their nodes.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
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

/// One candidate from connections.json (exactly these 17 keys).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
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
