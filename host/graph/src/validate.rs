//! graph/v1 validation: every refusal code of bounded-loops 0.7, in its
//! order of checks, with its JSON pointers (quirks included: the whole-
//! document scans point with a leading `//`, and reference errors name a
//! node by id rather than by index).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::doc::{Kind, Node, py_repr};
use crate::error::{Refusal, RefusalCode};
use crate::model::*;

pub use crate::model::API_VERSION;

type Result<T> = std::result::Result<T, Refusal>;

fn err<T>(code: RefusalCode, pointer: impl Into<String>, message: impl Into<String>) -> Result<T> {
    Refusal::err(code, pointer, message)
}

static IDENTIFIER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9_-]{0,62}$").expect("regex"));
static GRAPH_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9-]{0,62}$").expect("regex"));
static SEMVER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?$").expect("regex"));
static DIGEST: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^sha256:[0-9a-f]{64}$").expect("regex"));
static WINDOWS_ABSOLUTE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z]:[\\/]").expect("regex"));

const TOP_KEYS: &[&str] = &[
    "api_version",
    "graph_id",
    "version",
    "nodes",
    "edges",
    "connection_slots",
    "policies",
];
/// The fields every node must have.
pub const NODE_KEYS: &[&str] = &[
    "id",
    "kind",
    "inputs",
    "outputs",
    "budget",
    "effects",
    "isolation",
];
/// The fields any node may have.
pub const NODE_OPTIONAL: &[&str] = &["connection_slot", "on_failure"];
const BUDGET_REQUIRED: &[&str] = &["max_attempts", "max_wallclock_s"];
/// The most attempts a node's budget may declare (per repair round).
pub const MAX_ATTEMPTS_CEILING: i64 = 100;
/// The longest deadline, in seconds, a node's budget may declare (per attempt).
pub const MAX_WALLCLOCK_S_CEILING: i64 = 86_400;
/// The `on_failure` policies a graph may declare and the runtime routes.
pub const FAILURE_POLICIES_HONOURED: &[&str] = &["fail_graph", "repair"];
/// The ones bounded-loops declares but no runtime routes yet: refused.
pub const FAILURE_POLICIES_REFUSED: &[&str] = &["await_human", "continue"];
const BUDGET_OPTIONAL: &[&str] = &["max_tokens", "max_cost_microunits"];
const EDGE_KEYS: &[&str] = &["from_node", "from_port", "to_node", "to_port"];
const SLOT_KEYS: &[&str] = &["id", "requires", "data_class_max"];
const POLICY_KEYS: &[&str] = &["data_class", "fail_mode"];
const SECRET_WORDS: &[&str] = &["api_key", "credential", "password", "secret", "token"];

/// Validates a parsed manifest and returns the typed graph.
pub fn validate(doc: &Node) -> Result<Graph> {
    scan_document(doc, &mut String::new())?;
    let top = object(doc, "")?;
    closed_keys(top, "", TOP_KEYS, &["presentation", "extensions"])?;
    let extensions = extensions(doc.get("extensions"))?;
    let ports_ext = extensions.iter().any(|e| e == "artifact-ports");

    if doc.get("api_version").and_then(Node::as_str) != Some(API_VERSION) {
        return err(
            RefusalCode::ApiVersion,
            "/api_version",
            format!("must be {API_VERSION}"),
        );
    }
    let graph_id = string(field(doc, "graph_id"), "/graph_id")?;
    if !GRAPH_ID.is_match(&graph_id) {
        return err(
            RefusalCode::Identifier,
            "/graph_id",
            "is not a stable portable identifier",
        );
    }
    let version = string(field(doc, "version"), "/version")?;
    if !SEMVER.is_match(&version) {
        return err(
            RefusalCode::Version,
            "/version",
            "must be a pinned semantic version",
        );
    }

    let node_docs = array(field(doc, "nodes"), "/nodes", 1)?;
    let mut nodes = Vec::with_capacity(node_docs.len());
    for (i, n) in node_docs.iter().enumerate() {
        nodes.push(node(n, &format!("/nodes/{i}"), ports_ext)?);
    }
    let mut seen = HashMap::with_capacity(nodes.len());
    if let Some((second, first)) = nodes
        .iter()
        .enumerate()
        .find_map(|(i, n)| seen.insert(n.id.as_str(), i).map(|first| (i, first)))
    {
        return Err(Refusal::new(
            RefusalCode::DuplicateNodeId,
            "/nodes",
            "node IDs must be unique",
        )
        .focused(format!("/nodes/{second}/id"))
        .hint(format!(
            "{} is the id of /nodes/{first} and of /nodes/{second}",
            py_repr(&nodes[second].id)
        )));
    }
    let by_id: HashMap<&str, &GraphNode> = nodes.iter().map(|n| (n.id.as_str(), n)).collect();

    let edge_docs = array(field(doc, "edges"), "/edges", 0)?;
    let mut edges = Vec::with_capacity(edge_docs.len());
    for (i, e) in edge_docs.iter().enumerate() {
        edges.push(edge(e, &format!("/edges/{i}"), &by_id)?);
    }

    let slot_docs = array(field(doc, "connection_slots"), "/connection_slots", 0)?;
    let mut slots = Vec::with_capacity(slot_docs.len());
    for (i, s) in slot_docs.iter().enumerate() {
        slots.push(slot(s, &format!("/connection_slots/{i}"))?);
    }
    let mut slot_ids: HashSet<String> = HashSet::new();
    if !slots.iter().all(|s| slot_ids.insert(s.id.clone())) {
        return err(
            RefusalCode::DuplicateSlotId,
            "/connection_slots",
            "slot IDs must be unique",
        );
    }

    let policies = policies(field(doc, "policies"))?;
    let presentation = match doc.get("presentation") {
        None => Value::Object(Default::default()),
        Some(p) => {
            object(p, "/presentation")?;
            p.to_json()
        }
    };

    let graph = Graph {
        graph_id,
        version,
        nodes,
        edges,
        slots,
        policies,
        presentation,
        extensions,
    };
    check_references(&graph, &slot_ids)?;
    check_guards(&graph)?;
    check_repairs(&graph)?;
    crate::artifacts::check(&graph)?;
    Ok(graph)
}

/// The whole-document scan for secret-shaped keys and absolute paths, in
/// document order. Pointers start with `//`, as upstream writes them.
fn scan_document(node: &Node, pointer: &mut String) -> Result<()> {
    match &node.kind {
        Kind::Map(entries) => {
            for (key, value) in entries {
                let exempt = matches!(key.as_str(), "max_tokens" | "max_cost_microunits")
                    && matches!(value.kind, Kind::Int(_));
                if !exempt && is_secret_shaped(key) {
                    return err(
                        RefusalCode::SecretField,
                        format!("/{pointer}"),
                        "authoring graphs cannot contain secret-shaped fields",
                    );
                }
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(key);
                scan_document(value, pointer)?;
                pointer.truncate(len);
            }
        }
        Kind::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = pointer.len();
                pointer.push('/');
                pointer.push_str(&i.to_string());
                scan_document(item, pointer)?;
                pointer.truncate(len);
            }
        }
        Kind::Str(s) if is_absolute_path(s) => {
            return err(
                RefusalCode::AbsolutePath,
                format!("/{pointer}"),
                "authoring graphs cannot contain absolute local paths",
            );
        }
        _ => {}
    }
    Ok(())
}

fn is_secret_shaped(key: &str) -> bool {
    // Lower-casing allocates; most keys are already lower-case ASCII.
    if key.bytes().all(|b| !b.is_ascii_uppercase()) && key.is_ascii() {
        SECRET_WORDS.iter().any(|w| key.contains(w))
    } else {
        let lower = key.to_lowercase();
        SECRET_WORDS.iter().any(|w| lower.contains(w))
    }
}

fn is_absolute_path(s: &str) -> bool {
    s.starts_with('/') || s.starts_with('\\') || s.starts_with("~/") || WINDOWS_ABSOLUTE.is_match(s)
}

// ------------------------------------------------------------ shape helpers

fn shown(pointer: &str) -> &str {
    if pointer.is_empty() { "/" } else { pointer }
}

/// A missing field reads as `null`: the shape check that follows refuses it
/// (after the missing_field check has had its turn).
static NULL: Node = Node {
    kind: Kind::Null,
    pos: crate::doc::Pos { line: 0, col: 0 },
    key_pos: None,
};

/// bl's line naming the value a check refused: `found "x" (a string)`.
fn found(node: &Node) -> String {
    let what = match &node.kind {
        Kind::Null if node.pos.line == 0 => return "the field is missing".to_string(),
        Kind::Null => "null",
        Kind::Bool(_) => "a boolean",
        Kind::Int(_) => "an integer",
        Kind::Float(_) => "a number with a fraction",
        Kind::Str(s) if s.is_empty() => "an empty string",
        Kind::Str(_) => "a string",
        Kind::Other(name) => name,
        Kind::Seq(_) => "a list",
        Kind::Map(_) => "a mapping",
    };
    match &node.kind {
        Kind::Seq(_) | Kind::Map(_) | Kind::Null => format!("found {what}"),
        _ => format!("found {} ({what})", node.to_json()),
    }
}

fn field<'a>(node: &'a Node, key: &str) -> &'a Node {
    node.get(key).unwrap_or(&NULL)
}

fn object<'a>(node: &'a Node, pointer: &str) -> Result<&'a [(String, Node)]> {
    node.as_map().ok_or_else(|| {
        Refusal::new(
            RefusalCode::Type,
            shown(pointer),
            "must be an object with string keys",
        )
        .hint(format!("{}; expected a mapping", found(node)))
    })
}

fn array<'a>(node: &'a Node, pointer: &str, min: usize) -> Result<&'a [Node]> {
    match node.as_seq() {
        Some(items) if items.len() >= min => Ok(items),
        _ => Err(Refusal::new(
            RefusalCode::Type,
            pointer,
            format!("must be an array with at least {min} item(s)"),
        )
        .hint(format!("{}; expected a list", found(node)))),
    }
}

fn string(node: &Node, pointer: &str) -> Result<String> {
    match node.as_nonempty_str() {
        Some(s) => Ok(s.to_string()),
        None => Err(
            Refusal::new(RefusalCode::Type, pointer, "must be a non-empty string")
                .hint(format!("{}; expected a non-empty string", found(node))),
        ),
    }
}

/// `doc[key]` as a portable identifier (node, slot and port names).
fn identifier_in(doc: &Node, p: &str, key: &str) -> Result<String> {
    let id = string_in(doc, p, key)?;
    if !IDENTIFIER.is_match(&id) {
        return err(
            RefusalCode::Identifier,
            format!("{p}/{key}"),
            "is not a stable portable identifier",
        );
    }
    Ok(id)
}

/// `doc[key]` as a non-empty string; the pointer is built only on failure.
fn string_in(doc: &Node, p: &str, key: &str) -> Result<String> {
    string(field(doc, key), &format!("{p}/{key}"))
}

fn closed_keys(
    entries: &[(String, Node)],
    pointer: &str,
    required: &[&str],
    optional: &[&str],
) -> Result<()> {
    // The common case, every key known and present, allocates nothing.
    let all_known = entries
        .iter()
        .all(|(k, _)| required.contains(&k.as_str()) || optional.contains(&k.as_str()));
    let all_present = required.iter().all(|r| entries.iter().any(|(k, _)| k == r));
    if all_known && all_present {
        return Ok(());
    }
    let unknown: BTreeSet<&str> = entries
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !required.contains(k) && !optional.contains(k))
        .collect();
    if !unknown.is_empty() {
        let list: Vec<&str> = unknown.into_iter().collect();
        let mut refusal = Refusal::new(
            RefusalCode::UnknownField,
            shown(pointer),
            format!("unknown field(s): {}", list.join(", ")),
        )
        // The line of the first unknown key as written, not of the object.
        .focused(format!(
            "{pointer}/{}",
            entries
                .iter()
                .map(|(k, _)| k.as_str())
                .find(|k| list.contains(k))
                .unwrap_or(list[0])
        ));
        let known = || required.iter().chain(optional).copied();
        for key in &list {
            if let Some(line) = crate::error::did_you_mean(key, known()) {
                refusal = refusal.hint(line);
            }
        }
        let mut allowed: Vec<&str> = known().collect();
        allowed.sort();
        return Err(refusal.hint(format!("the fields allowed here: {}", allowed.join(", "))));
    }
    let missing: BTreeSet<&str> = required
        .iter()
        .copied()
        .filter(|r| !entries.iter().any(|(k, _)| k == r))
        .collect();
    if !missing.is_empty() {
        let list: Vec<&str> = missing.into_iter().collect();
        return Err(Refusal::new(
            RefusalCode::MissingField,
            shown(pointer),
            format!("missing field(s): {}", list.join(", ")),
        )
        .hint(format!("add {}", list.join(", "))));
    }
    Ok(())
}

fn int_in(node: &Node, lo: i128, hi: Option<i128>) -> Option<i64> {
    node.as_int()
        .filter(|v| *v >= lo && hi.is_none_or(|h| *v <= h))
        .and_then(|v| i64::try_from(v).ok())
}

/// The named value `node` holds, if it is a string naming one.
fn one_of<T: Named>(node: &Node) -> Option<T> {
    node.as_str().and_then(T::parse)
}

/// The named value `node` holds, or the refusal with bl's hints: the value
/// found, "did you mean", and the names allowed.
fn named<T: Named>(
    node: &Node,
    code: RefusalCode,
    pointer: impl Into<String>,
    message: &str,
) -> Result<T> {
    one_of::<T>(node).ok_or_else(|| {
        let mut refusal = Refusal::new(code, pointer, message).hint(found(node));
        if let Some(line) = node
            .as_str()
            .and_then(|s| crate::error::did_you_mean(s, T::NAMES.iter().copied()))
        {
            refusal = refusal.hint(line);
        }
        refusal.hint(format!("allowed: {}", T::NAMES.join(", ")))
    })
}

// ------------------------------------------------------------ nodes

fn extensions(doc: Option<&Node>) -> Result<Vec<String>> {
    let Some(doc) = doc else {
        return Ok(Vec::new());
    };
    let names = string_list(doc, "/extensions")?;
    for (i, name) in names.iter().enumerate() {
        if !EXTENSIONS.contains(&name.as_str()) {
            return err(
                RefusalCode::Extension,
                format!("/extensions/{i}"),
                format!(
                    "unknown bl extension {}; known: {}",
                    py_repr(name),
                    EXTENSIONS.join(", ")
                ),
            );
        }
    }
    Ok(names)
}

fn node(doc: &Node, p: &str, ports_ext: bool) -> Result<GraphNode> {
    let entries = object(doc, p)?;
    let kind_name = string_in(doc, p, "kind")?;
    let Some(kind) = NodeKind::parse(&kind_name) else {
        let mut refusal = Refusal::new(
            RefusalCode::UnknownNodeKind,
            format!("{p}/kind"),
            "node kind is not supported",
        );
        if let Some(line) = crate::error::did_you_mean(&kind_name, NodeKind::NAMES.iter().copied())
        {
            refusal = refusal.hint(line);
        }
        return Err(refusal.hint(format!("the kinds: {}", NodeKind::NAMES.join(", "))));
    };
    let kind_fields = kind.fields();
    let required: Vec<&str> = NODE_KEYS.iter().chain(kind_fields).copied().collect();
    let optional: &[&str] = if ports_ext {
        &["connection_slot", "on_failure", "gate", "config"]
    } else {
        NODE_OPTIONAL
    };
    closed_keys(entries, p, &required, optional)?;

    let mut artifact_ports = Vec::new();
    let inputs = ports(
        field(doc, "inputs"),
        &format!("{p}/inputs"),
        ports_ext.then_some((Direction::Input, &mut artifact_ports)),
    )?;
    let outputs = ports(
        field(doc, "outputs"),
        &format!("{p}/outputs"),
        ports_ext.then_some((Direction::Output, &mut artifact_ports)),
    )?;
    let budget = budget(field(doc, "budget"), &format!("{p}/budget"))?;
    let effects = effects(field(doc, "effects"), &format!("{p}/effects"))?;
    if budget.max_attempts > 1 && effects.iter().any(|e| e.reaches_network()) {
        return err(
            RefusalCode::RetryOfEffectfulNode,
            format!("{p}/budget/max_attempts"),
            "a node carrying an external / irreversible effect cannot retry without a per-effect idempotency key (D7); declare max_attempts: 1",
        );
    }
    let isolation = named::<Isolation>(
        field(doc, "isolation"),
        RefusalCode::Enum,
        format!("{p}/isolation"),
        "must be a supported isolation",
    )?;
    let connection_slot = match doc.get("connection_slot") {
        None => None,
        Some(slot) => Some(string(slot, &format!("{p}/connection_slot"))?),
    };
    let on_failure = on_failure(doc.get("on_failure"), &format!("{p}/on_failure"))?;
    let details = node_details(doc, p, kind)?;

    let id = identifier_in(doc, p, "id")?;
    let gate = match doc.get("gate") {
        None => None,
        Some(g) => Some(gate(g, &format!("{p}/gate"))?),
    };
    let config = match doc.get("config") {
        None => None,
        Some(c) => {
            let at = format!("{p}/config");
            object(c, &at)?;
            let is_transform = kind == NodeKind::Tool
                && details.iter().any(|(k, v)| {
                    k == "tool_ref" && v.as_str().is_some_and(|r| r.starts_with("transform:"))
                });
            if !is_transform {
                return err(
                    RefusalCode::UnknownField,
                    at,
                    "config is a transform's config: only a tool node whose tool_ref is transform:<plugin>@<version> takes one",
                );
            }
            Some(c.to_json())
        }
    };
    Ok(GraphNode {
        id,
        kind,
        inputs,
        outputs,
        budget,
        effects,
        isolation,
        connection_slot,
        on_failure,
        details,
        artifact_ports,
        gate,
        config,
    })
}

/// `gate: {plugin: NAME, config: {...}, grants: [CAP]}` (extension
/// artifact-ports).
fn gate(doc: &Node, p: &str) -> Result<Value> {
    let entries = object(doc, p)?;
    closed_keys(entries, p, &["plugin"], &["config", "grants"])?;
    string_in(doc, p, "plugin")?;
    if let Some(config) = doc.get("config") {
        object(config, &format!("{p}/config"))?;
    }
    if let Some(grants) = doc.get("grants") {
        string_list(grants, &format!("{p}/grants"))?;
    }
    Ok(doc.to_json())
}

/// A node's ports. With the artifact-ports extension (`long_form` is then
/// where long-form declarations go), a port may be an object
/// `{type, path, visibility, contract, required}` instead of a type string.
fn ports(
    doc: &Node,
    p: &str,
    mut long_form: Option<(Direction, &mut Vec<ArtifactPort>)>,
) -> Result<Vec<(String, String)>> {
    let entries = object(doc, p)?;
    let mut out = Vec::with_capacity(entries.len());
    for (name, value) in entries {
        let at = || format!("{p}/{name}");
        if !IDENTIFIER.is_match(name) {
            return err(
                RefusalCode::Identifier,
                at(),
                "is not a stable portable identifier",
            );
        }
        let ty = match (&value.kind, long_form.as_mut()) {
            (Kind::Map(fields), Some((direction, artifacts))) => {
                let at = at();
                closed_keys(
                    fields,
                    &at,
                    &["type"],
                    &["path", "visibility", "contract", "required"],
                )?;
                let ty = string(field(value, "type"), &format!("{at}/type"))?;
                let path = match value.get("path") {
                    None => None,
                    Some(path) => Some(string(path, &format!("{at}/path"))?),
                };
                let visibility = match value.get("visibility").map(|v| v.as_str()) {
                    None | Some(Some("consumer")) => Visibility::Consumer,
                    Some(Some("system_only")) => Visibility::SystemOnly,
                    Some(_) => {
                        return err(
                            RefusalCode::Enum,
                            format!("{at}/visibility"),
                            "must be consumer or system_only",
                        );
                    }
                };
                let contract = match value.get("contract") {
                    None => None,
                    Some(c) => Some(string(c, &format!("{at}/contract"))?),
                };
                let required = match value.get("required").map(|r| &r.kind) {
                    None => true,
                    Some(Kind::Bool(b)) => *b,
                    Some(_) => {
                        return err(
                            RefusalCode::Type,
                            format!("{at}/required"),
                            "must be a boolean",
                        );
                    }
                };
                artifacts.push(ArtifactPort {
                    name: name.clone(),
                    direction: *direction,
                    path,
                    visibility,
                    contract,
                    required,
                });
                ty
            }
            _ => match value.as_nonempty_str() {
                Some(ty) => ty.to_string(),
                None => return err(RefusalCode::Type, at(), "must be a non-empty string"),
            },
        };
        out.push((name.clone(), ty));
    }
    Ok(out)
}

fn budget(doc: &Node, p: &str) -> Result<Budget> {
    let entries = object(doc, p)?;
    closed_keys(entries, p, BUDGET_REQUIRED, BUDGET_OPTIONAL)?;
    let bounded = |key: &str, hi: i128| -> Result<i64> {
        let value = field(doc, key);
        int_in(value, 1, Some(hi)).ok_or_else(|| {
            Refusal::new(
                RefusalCode::Range,
                format!("{p}/{key}"),
                format!("must be an integer from 1 to {hi}"),
            )
            .hint(found(value))
        })
    };
    let max_attempts = bounded("max_attempts", MAX_ATTEMPTS_CEILING.into())?;
    let max_wallclock_s = bounded("max_wallclock_s", MAX_WALLCLOCK_S_CEILING.into())?;
    let nullable = |key: &str, lo: i128| -> Result<Option<i64>> {
        let value = field(doc, key);
        if value.is_null() {
            return Ok(None);
        }
        int_in(value, lo, None).map(Some).ok_or_else(|| {
            Refusal::new(
                RefusalCode::Range,
                format!("{p}/{key}"),
                format!("must be null or an integer >= {lo}"),
            )
            .hint(found(value))
        })
    };
    let max_tokens = nullable("max_tokens", 1)?;
    let max_cost_microunits = nullable("max_cost_microunits", 0)?;
    Ok(Budget {
        max_attempts,
        max_wallclock_s,
        max_tokens,
        max_cost_microunits,
    })
}

fn effects(doc: &Node, p: &str) -> Result<Vec<Effect>> {
    let items = array(doc, p, 0)?;
    let mut names = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item.as_nonempty_str() {
            Some(e) => names.push(e),
            None => {
                return err(
                    RefusalCode::Type,
                    format!("{p}/{i}"),
                    "must be a non-empty string",
                );
            }
        }
    }
    let Some(out) = names
        .iter()
        .map(|e| Effect::parse(e))
        .collect::<Option<Vec<Effect>>>()
    else {
        let mut refusal = Refusal::new(RefusalCode::Enum, p, "must be a supported effect");
        for name in names.iter().filter(|e| Effect::parse(e).is_none()) {
            refusal = refusal.hint(format!("found {}", py_repr(name)));
            if let Some(line) = crate::error::did_you_mean(name, Effect::NAMES.iter().copied()) {
                refusal = refusal.hint(line);
            }
        }
        return Err(refusal.hint(format!("allowed: {}", Effect::NAMES.join(", "))));
    };
    let mut seen = HashSet::new();
    if !out.iter().all(|e| seen.insert(*e)) {
        return err(RefusalCode::DuplicateEffect, p, "effects must be unique");
    }
    Ok(out)
}

fn on_failure(doc: Option<&Node>, p: &str) -> Result<OnFailure> {
    let Some(doc) = doc else {
        return Ok(OnFailure::Unset);
    };
    match &doc.kind {
        Kind::Null => Ok(OnFailure::Unset),
        Kind::Str(s) => match s.as_str() {
            "fail_graph" => Ok(OnFailure::FailGraph),
            "continue" | "await_human" => Err(Refusal::new(
                RefusalCode::OnFailureUnimplemented,
                p,
                format!(
                    "on_failure='{s}' is declared but not yet routed by the runtime; only 'fail_graph' (the default) is honoured today"
                ),
            )
            .hint("honoured: fail_graph (the default), or {mode: repair, target: <an ancestor node>} with policies.repair_budget above 0")),
            "repair" => err(
                RefusalCode::OnFailure,
                p,
                "repair must name the ancestor to re-execute: use {mode: repair, target: <node_id>}. The bare string cannot express which node to repair, and a repair relation that is not written down cannot be bounded or checked.",
            ),
            _ => err(
                RefusalCode::OnFailure,
                p,
                "must be a declared failure policy",
            ),
        },
        Kind::Map(entries) => {
            closed_keys(entries, p, &["mode", "target"], &[])?;
            if doc.get("mode").and_then(Node::as_str) != Some("repair") {
                return err(
                    RefusalCode::OnFailure,
                    p,
                    "only 'repair' uses the object form; write the others as a bare string",
                );
            }
            let target = string_in(doc, p, "target")?;
            Ok(OnFailure::Repair { target })
        }
        _ => err(
            RefusalCode::OnFailure,
            p,
            "must be a policy name or a repair object",
        ),
    }
}

fn node_details(doc: &Node, p: &str, kind: NodeKind) -> Result<Vec<(String, Value)>> {
    let mut details = Vec::new();
    for key in kind.fields() {
        let value = field(doc, key);
        let at = format!("{p}/{key}");
        match *key {
            "loop_package" | "graph_package" => {
                let s = string(value, &at)?;
                if !DIGEST.is_match(&s) {
                    return err(
                        RefusalCode::MutablePackageReference,
                        at,
                        "must be a sha256 digest",
                    );
                }
            }
            "mode" => {
                named::<JoinMode>(
                    value,
                    RefusalCode::JoinMode,
                    at,
                    "join mode is not supported",
                )?;
            }
            "routes" => {
                let routes = object(value, &at)?;
                if routes.is_empty() {
                    return err(
                        RefusalCode::IncompleteBranches,
                        at,
                        "router must declare routes",
                    );
                }
            }
            "default_route" => match &value.kind {
                Kind::Null => {
                    return err(
                        RefusalCode::IncompleteBranches,
                        format!("{p}/routes"),
                        "router requires an explicit default",
                    );
                }
                Kind::Str(_) => {}
                _ => {
                    return err(
                        RefusalCode::IncompleteBranches,
                        at,
                        "must be a string or null",
                    );
                }
            },
            _ => {
                string(value, &at)?;
            }
        }
        details.push((key.to_string(), value.to_json()));
    }
    Ok(details)
}

// ------------------------------------------------------------ edges, slots, policies

fn edge(doc: &Node, p: &str, nodes: &HashMap<&str, &GraphNode>) -> Result<Edge> {
    let entries = object(doc, p)?;
    closed_keys(entries, p, EDGE_KEYS, &["when"])?;
    let from_node = string_in(doc, p, "from_node")?;
    let from_port = string_in(doc, p, "from_port")?;
    let to_node = string_in(doc, p, "to_node")?;
    let to_port = string_in(doc, p, "to_port")?;
    let (Some(source), Some(target)) = (nodes.get(from_node.as_str()), nodes.get(to_node.as_str()))
    else {
        let (key, unknown) = if nodes.contains_key(from_node.as_str()) {
            ("to_node", &to_node)
        } else {
            ("from_node", &from_node)
        };
        let mut refusal = Refusal::new(
            RefusalCode::UnknownEdgeNode,
            p,
            "edge references an unknown node",
        )
        .focused(format!("{p}/{key}"))
        .hint(format!("{key} {} names no node", py_repr(unknown)));
        let mut ids: Vec<&str> = nodes.keys().copied().collect();
        ids.sort();
        refusal = refusal.hint(
            crate::error::did_you_mean(unknown, ids.iter().copied())
                .unwrap_or_else(|| format!("the nodes: {}", ids.join(", "))),
        );
        return Err(refusal);
    };
    // bounded-loops' words name neither the node nor the port: bl's
    // lines beneath say which, and what there is.
    let ports = |names: Vec<&str>| match names.as_slice() {
        [] => "none".to_string(),
        names => names.join(", "),
    };
    let Some(out_type) = source.output_type(&from_port) else {
        return Err(Refusal::new(
            RefusalCode::MissingOutputPort,
            format!("{p}/from_port"),
            "source output does not exist",
        )
        .hint(format!(
            "node {} has no output {} (its outputs: {})",
            py_repr(&from_node),
            py_repr(&from_port),
            ports(source.outputs.iter().map(|(n, _)| n.as_str()).collect())
        )));
    };
    let Some(in_type) = target.input_type(&to_port) else {
        return Err(Refusal::new(
            RefusalCode::MissingInputPort,
            format!("{p}/to_port"),
            "target input does not exist",
        )
        .hint(format!(
            "node {} has no input {} (its inputs: {}): name one of them, or declare {} under its inputs with the type of {from_node}.{from_port} ({out_type})",
            py_repr(&to_node),
            py_repr(&to_port),
            ports(target.inputs.iter().map(|(n, _)| n.as_str()).collect()),
            py_repr(&to_port)
        )));
    };
    if out_type != in_type {
        return Err(Refusal::new(
            RefusalCode::PortTypeMismatch,
            p,
            "edge port types must match",
        )
        .hint(format!(
            "{from_node}.{from_port} is {out_type}, and {to_node}.{to_port} is {in_type}: give both the same type"
        )));
    }
    let when = match doc.get("when").map(|w| &w.kind) {
        None | Some(Kind::Null) => None,
        Some(Kind::Str(raw)) => {
            let guard = raw.trim().to_lowercase();
            if guard.is_empty() {
                return err(
                    RefusalCode::EdgeCondition,
                    format!("{p}/when"),
                    "must not be blank; use null for the default or one of: succeeded, failed, skipped, terminal",
                );
            }
            let Some(guard) = EdgeGuard::parse(&guard) else {
                return err(
                    RefusalCode::EdgeCondition,
                    format!("{p}/when"),
                    format!(
                        "unknown edge guard {}; edge guards are limited to the source node's outcome and must be one of: succeeded, failed, skipped, terminal. Data-dependent conditions (for example \"result.status == 'failed'\") are not supported — earlier versions accepted and then IGNORED them, so such an edge never actually applied its condition.",
                        py_repr(raw)
                    ),
                );
            };
            Some(guard)
        }
        Some(_) => {
            return err(
                RefusalCode::EdgeCondition,
                format!("{p}/when"),
                "must be a string or null",
            );
        }
    };
    Ok(Edge {
        from_node,
        from_port,
        to_node,
        to_port,
        when,
    })
}

fn string_list(doc: &Node, p: &str) -> Result<Vec<String>> {
    let items = array(doc, p, 0)?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| string(item, &format!("{p}/{i}")))
        .collect()
}

fn slot(doc: &Node, p: &str) -> Result<Slot> {
    let entries = object(doc, p)?;
    closed_keys(entries, p, SLOT_KEYS, &["preferred_modalities"])?;
    let at = format!("{p}/requires");
    let requires = string_list(field(doc, "requires"), &at)?;
    let unique: HashSet<&str> = requires.iter().map(String::as_str).collect();
    if requires.is_empty() || unique.len() != requires.len() {
        return err(
            RefusalCode::DuplicateValue,
            at,
            "must contain unique declared values",
        );
    }
    if requires
        .iter()
        .any(|r| PROVIDERS.contains(&r.to_lowercase().as_str()))
    {
        return err(
            RefusalCode::ProviderInSlot,
            at,
            "slots declare capabilities, never providers",
        );
    }
    let preferred_modalities = match doc.get("preferred_modalities") {
        None => None,
        Some(m) => Some(string_list(m, &format!("{p}/preferred_modalities"))?),
    };
    let id = identifier_in(doc, p, "id")?;
    let data_class_max = named::<DataClass>(
        field(doc, "data_class_max"),
        RefusalCode::Enum,
        format!("{p}/data_class_max"),
        "must be a supported data class",
    )?;
    Ok(Slot {
        id,
        requires,
        data_class_max,
        preferred_modalities,
    })
}

fn policies(doc: &Node) -> Result<Policies> {
    let p = "/policies";
    let entries = object(doc, p)?;
    closed_keys(
        entries,
        p,
        POLICY_KEYS,
        &["required_audit_profile", "repair_budget"],
    )?;
    let fail_mode = named::<FailMode>(
        field(doc, "fail_mode"),
        RefusalCode::FailMode,
        "/policies/fail_mode",
        "must be a declared graph failure mode",
    )?;
    let data_class = named::<DataClass>(
        field(doc, "data_class"),
        RefusalCode::Enum,
        "/policies/data_class",
        "must be a supported data class",
    )?;
    let required_audit_profile = match doc.get("required_audit_profile").map(|v| &v.kind) {
        None | Some(Kind::Null) => None,
        Some(Kind::Str(s)) => Some(s.clone()),
        Some(_) => {
            return err(
                RefusalCode::AuditProfile,
                "/policies/required_audit_profile",
                "must be a string or null",
            );
        }
    };
    let repair_budget = match doc.get("repair_budget") {
        None => 0,
        Some(v) => {
            let Some(n) = v.as_int() else {
                return err(
                    RefusalCode::RepairBudget,
                    "/policies/repair_budget",
                    "must be an integer",
                );
            };
            if !(0..=100).contains(&n) {
                return err(
                    RefusalCode::RepairBudget,
                    "/policies/repair_budget",
                    "must be between 0 and 100",
                );
            }
            n as i64
        }
    };
    Ok(Policies {
        data_class,
        fail_mode,
        required_audit_profile,
        repair_budget,
    })
}

// ------------------------------------------------------------ graph rules

fn check_references(graph: &Graph, slot_ids: &HashSet<String>) -> Result<()> {
    for node in &graph.nodes {
        if let Some(slot) = &node.connection_slot
            && !slot_ids.contains(slot)
        {
            return err(
                RefusalCode::UnknownConnectionSlot,
                format!("/nodes/{}/connection_slot", node.id),
                "slot does not exist",
            );
        }
    }
    let has_incoming: HashSet<&str> = graph.edges.iter().map(|e| e.to_node.as_str()).collect();
    for node in graph.nodes.iter().filter(|n| n.kind == NodeKind::Join) {
        if !has_incoming.contains(node.id.as_str()) {
            return err(
                RefusalCode::ImpossibleJoin,
                format!("/nodes/{}", node.id),
                "join requires an incoming edge",
            );
        }
    }
    if crate::dag::kahn_levels(graph).is_none() {
        let mut refusal = Refusal::new(
            RefusalCode::Cycle,
            "/edges",
            "authoring graph must be acyclic",
        );
        if let Some(cycle) = crate::dag::find_cycle(graph) {
            refusal = refusal.hint(format!("the cycle: {}", cycle.join(" → ")));
        }
        return Err(refusal);
    }
    Ok(())
}

fn check_guards(graph: &Graph) -> Result<()> {
    if graph.policies.fail_mode != FailMode::FailClosed {
        return Ok(());
    }
    for (i, edge) in graph.edges.iter().enumerate() {
        if let Some(guard @ (EdgeGuard::Failed | EdgeGuard::Skipped | EdgeGuard::Terminal)) =
            edge.when
        {
            return err(
                RefusalCode::EdgeCondition,
                format!("/edges/{i}/when"),
                format!(
                    "a '{guard}' condition can never be reached under 'fail_mode: fail_closed', because the run stops at the first node failure. Set 'fail_mode: continue_declared' to keep driving the graph past a node failure. Refused rather than accepted-and-ignored."
                ),
            );
        }
    }
    Ok(())
}

fn check_repairs(graph: &Graph) -> Result<()> {
    for (i, node) in graph.nodes.iter().enumerate() {
        let OnFailure::Repair { target } = &node.on_failure else {
            continue;
        };
        let at = format!("/nodes/{i}/on_failure/target");
        if graph.node(target).is_none() {
            return err(
                RefusalCode::RepairTarget,
                at,
                format!("names no node in this graph: {}", py_repr(target)),
            );
        }
        if !crate::dag::is_strict_ancestor(graph, target, &node.id) {
            return err(
                RefusalCode::RepairTarget,
                at,
                format!(
                    "{} is not an ancestor of {}; a repair re-executes an upstream node and everything reachable from it, so an unrelated target has no bounded suffix",
                    py_repr(target),
                    py_repr(&node.id)
                ),
            );
        }
        if graph.policies.repair_budget == 0 {
            return err(
                RefusalCode::RepairBudget,
                "/policies/repair_budget",
                "a graph declaring on_failure: repair needs a repair_budget above 0 — it is the GLOBAL bound on repair rounds and the only thing that makes termination provable",
            );
        }
        if graph.policies.fail_mode == "fail_closed" {
            return err(
                RefusalCode::OnFailure,
                "/policies/fail_mode",
                "on_failure: repair can never be reached under 'fail_mode: fail_closed', because the run stops at the first node failure. Set 'fail_mode: continue_declared'.",
            );
        }
    }
    Ok(())
}
