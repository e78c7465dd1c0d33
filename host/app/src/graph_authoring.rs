//! Writing a graph with an agent, as bounded-loops 0.7's MCP tools do:
//! compose a draft from nodes (filling what is left out at the safe end
//! of its range, and naming what cannot be invented), interview a
//! manifest for the choices only a person should make, and configure a
//! saved graph by JSON-pointer changes (previewed, written only when
//! confirmed). Each result is linted, never run.

use std::path::{Path, PathBuf};

use bl_graph::Format;
use bl_graph::doc::{Kind, Node};
use serde_json::{Value, json};

/// The node kinds a graph can hold.
pub const NODE_KINDS: [&str; 10] = [
    "approval",
    "audit",
    "join",
    "loop",
    "publish",
    "research_claim",
    "research_source",
    "router",
    "subgraph",
    "tool",
];

/// Why a saved graph, a manifest or a change cannot be used, in the words
/// the agent gets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unusable(pub String);

/// Where the saved graphs a name refers to live.
pub fn saved_graphs(workspace: &Path) -> PathBuf {
    workspace.join(".bounded-loops/graphs")
}

/// A JSON value as a manifest node (positions unknown).
pub fn node_of(value: &Value) -> Node {
    let kind = match value {
        Value::Null => Kind::Null,
        Value::Bool(b) => Kind::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Kind::Int(i.into()),
            None => Kind::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Kind::Str(s.clone()),
        Value::Array(items) => Kind::Seq(items.iter().map(node_of).collect()),
        Value::Object(fields) => Kind::Map(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), node_of(v)))
                .collect(),
        ),
    };
    Node::new(kind, bl_graph::Pos::default())
}

fn map(entries: Vec<(&str, Node)>) -> Node {
    Node::new(
        Kind::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        ),
        bl_graph::Pos::default(),
    )
}

/// A refusal as the MCP tools say it: code, pointer (with line and
/// column where known), message, what it means and how to fix it.
pub fn refusal_for_agents(refusal: &bl_graph::Refusal) -> Value {
    let mut detail = bl_graph::report::refusal_json(refusal);
    if let Some(fields) = detail.as_object_mut() {
        fields.remove("valid");
        fields.insert("means".into(), Value::Null);
        let fix = fields.remove("hints").and_then(|h| {
            h.as_array().map(|lines| {
                lines
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("\n")
            })
        });
        fields.insert("fix".into(), json!(fix));
    }
    detail
}

/// The YAML of `doc` and, when it does not lint, the refusal.
fn written_and_linted(doc: &Node) -> (String, Option<Value>) {
    let text = bl_graph::yaml::to_yaml(doc);
    let refusal = bl_graph::lint(&text, Format::Yaml)
        .err()
        .map(|r| refusal_for_agents(&r));
    (text, refusal)
}

const DEFAULTS_APPLIED: &str = "Unstated required fields were filled at the safe end of their range: one attempt, a 300s deadline, NO declared effects, workspace_only isolation, fail_closed, and no repair budget. Widen each one deliberately. In particular, effects default to empty because a declared effect is a grant of authority, and the narrowest declaration is the correct starting point. Note this does NOT make an approval node inert: approving a gate releases every effect reachable downstream of it, whatever the gate itself declares.";

/// What `graph_compose` is given.
#[derive(Debug, Clone)]
pub struct Draft {
    pub graph_id: String,
    pub nodes: Vec<Value>,
    pub edges: Vec<Value>,
    pub version: String,
    pub policies: Option<Value>,
    pub connection_slots: Vec<Value>,
}

/// `graph_compose`: a manifest from `draft`, with what was left out filled
/// at the safe end of its range (one attempt, 300 s, no effects,
/// workspace_only; fail closed, no repair budget), the gaps that cannot be
/// filled (a loop node's package digest), and the lint's verdict.
pub fn compose(draft: &Draft) -> Value {
    let refused = |code: &str, pointer: String, message: String, fix: &str| json!({"ok": false, "refusal": {"code": code, "pointer": pointer, "message": message, "fix": fix}});
    let mut nodes = Vec::new();
    let mut gaps = Vec::new();
    for (i, node) in draft.nodes.iter().enumerate() {
        let Some(fields) = node.as_object().filter(|f| f["id"].is_string()) else {
            return refused(
                "missing_field",
                format!("/nodes/{i}"),
                "every node needs at least an 'id' and a 'kind'".into(),
                "Give each node a string id and one of the supported kinds.",
            );
        };
        let kind = &fields.get("kind").cloned().unwrap_or(Value::Null);
        if !kind.as_str().is_some_and(|k| NODE_KINDS.contains(&k)) {
            return refused(
                "unknown_node_kind",
                format!("/nodes/{i}/kind"),
                format!("{kind} is not a node kind this engine runs"),
                "Use one of: approval, audit, join, loop, publish, research_claim, research_source, router, subgraph, tool. bl_capabilities lists what each one requires.",
            );
        }
        // The id and kind first, then what was given, then the defaults.
        let mut entries: Vec<(String, Node)> = ["id", "kind"]
            .iter()
            .map(|k| (k.to_string(), node_of(&fields[*k])))
            .collect();
        for (key, value) in fields
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "id" | "kind" | "budget"))
        {
            entries.push((key.clone(), node_of(value)));
        }
        for (key, default) in [
            ("inputs", json!({})),
            ("outputs", json!({})),
            ("effects", json!([])),
            ("isolation", json!("workspace_only")),
        ] {
            if !fields.contains_key(key) {
                entries.push((key.to_string(), node_of(&default)));
            }
        }
        let mut budget = fields
            .get("budget")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        budget.entry("max_attempts").or_insert(json!(1));
        budget.entry("max_wallclock_s").or_insert(json!(300));
        entries.push(("budget".into(), node_of(&Value::Object(budget))));
        if kind == "loop"
            && fields
                .get("loop_package")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        {
            gaps.push(json!({
                "node_id": fields["id"], "gap": "no loop_package digest",
                "why": "A loop node runs a content-addressed package; the digest cannot be invented because it names the exact bytes that will execute.",
                "next_step": "Find a shipped package with bl_search_loops, or author one and pin it with `bl graph digest <dir>`.",
            }));
        }
        nodes.push(Node::new(Kind::Map(entries), bl_graph::Pos::default()));
    }
    let policies = draft
        .policies
        .clone()
        .filter(|p| p.as_object().is_some_and(|p| !p.is_empty()))
        .unwrap_or_else(
            || json!({"data_class": "internal", "fail_mode": "fail_closed", "repair_budget": 0}),
        );
    let doc = map(vec![
        ("api_version", node_of(&json!("bounded-loops.dev/graph/v1"))),
        ("graph_id", node_of(&json!(draft.graph_id))),
        ("version", node_of(&json!(draft.version))),
        ("connection_slots", node_of(&json!(draft.connection_slots))),
        (
            "nodes",
            Node::new(Kind::Seq(nodes), bl_graph::Pos::default()),
        ),
        ("edges", node_of(&json!(draft.edges))),
        ("policies", node_of(&policies)),
    ]);
    let (manifest, refusal) = written_and_linted(&doc);
    let mut answer = json!({
        "ok": refusal.is_none(), "manifest": manifest, "gaps": gaps,
        "defaults_applied": DEFAULTS_APPLIED,
    });
    if let Some(refusal) = refusal {
        answer["refusal"] = refusal;
    }
    answer
}

/// The saved graph `name`'s path (a plain file under the workspace's
/// `.bounded-loops/graphs`), or why a name cannot be one.
pub fn saved(workspace: &Path, name: &str) -> Result<PathBuf, Unusable> {
    let plain: String = name.chars().filter(|c| !matches!(c, '-' | '_')).collect();
    if name.chars().count() > 64 || plain.is_empty() || !plain.chars().all(char::is_alphanumeric) {
        return Err(Unusable(
            "a graph name may hold only letters, digits, '-' and '_' — no paths or dots".into(),
        ));
    }
    let path = saved_graphs(workspace).join(format!("{name}.yaml"));
    if path.is_symlink() {
        return Err(Unusable(format!(
            "{name}.yaml is a symlink; refusing to follow it"
        )));
    }
    if !path.is_file() {
        return Err(Unusable(format!("no saved graph named '{name}'")));
    }
    Ok(path)
}

/// A manifest's text parsed, as long as it is a mapping.
fn parsed(text: &str) -> Result<Node, Unusable> {
    let doc = bl_graph::parse_document(text, Format::Yaml)
        .map_err(|e| Unusable(format!("the manifest is not parseable YAML: {e}")))?;
    if doc.as_map().is_none() {
        return Err(Unusable("a manifest must be a mapping".into()));
    }
    Ok(doc)
}

fn absent_or_empty(node: Option<&Node>) -> bool {
    node.is_none_or(|n| match &n.kind {
        Kind::Null => true,
        Kind::Str(s) => s.is_empty(),
        Kind::Bool(b) => !b,
        Kind::Int(i) => *i == 0,
        _ => false,
    })
}

/// A question: its key, node, wording, why it matters and where the
/// answer goes; then the answers offered, the default, and its weight.
fn question(
    key: String,
    node_id: Value,
    ask: String,
    why: &str,
    pointer: String,
    (options, default, weight): (&[&str], Value, &str),
) -> Value {
    json!({"key": key, "node_id": node_id, "ask": ask, "why": why, "pointer": pointer,
           "options": options, "default": default, "weight": weight})
}

/// The effects that reach past this machine or cannot be taken back.
const IRREVERSIBLE: [&str; 3] = ["external_write", "financial", "irreversible"];

/// `graph_interview`: the questions a person should answer about the
/// manifest (given as text, or a saved graph's name), one per choice it
/// leaves open: what each node may change, who approves, what may be spent
/// or retried, how failures and sensitive data are handled, how tightly a
/// node is confined. The weightiest first.
pub fn interview(workspace: &Path, name: Option<&str>, manifest: Option<&str>) -> Value {
    let text = match (manifest, name.filter(|n| !n.is_empty())) {
        (Some(text), _) => Ok(text.to_string()),
        (None, Some(name)) => saved(workspace, name).and_then(|p| {
            std::fs::read_to_string(&p)
                .map_err(|e| Unusable(format!("cannot read {name}.yaml: {e}")))
        }),
        (None, None) => Err(Unusable(
            "pass either a saved graph name or manifest_yaml".into(),
        )),
    };
    let doc = match text.and_then(|t| parsed(&t)) {
        Ok(doc) => doc,
        Err(error) => return json!({"ok": false, "error": error.to_string()}),
    };
    let nodes: Vec<&Node> = doc
        .get("nodes")
        .and_then(Node::as_seq)
        .map(|s| s.iter().filter(|n| n.as_map().is_some()).collect())
        .unwrap_or_default();
    let policies = doc.get("policies").filter(|p| p.as_map().is_some());
    let policy = |key: &str| policies.and_then(|p| p.get(key));
    let has_approval = nodes
        .iter()
        .any(|n| n.get("kind").and_then(Node::as_str) == Some("approval"));
    let mut questions = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let id = node.get("id").map_or_else(
            || format!("#{i}"),
            |n| match n.to_json() {
                Value::String(s) => s,
                other => other.to_string(),
            },
        );
        let effects: Vec<String> = node
            .get("effects")
            .and_then(Node::as_seq)
            .map(|s| {
                s.iter()
                    .map(|e| {
                        e.as_str()
                            .map_or_else(|| e.to_json().to_string(), str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default();
        let reaches_out = effects.iter().any(|e| IRREVERSIBLE.contains(&e.as_str()));
        if node.get("effects").is_none() {
            questions.push(question(format!("effects:{id}"), json!(id), format!("What does '{id}' actually change? Nothing outside its own workspace, files in this project, something outside this machine, money, or something that cannot be undone?"),
                "A declared effect is a grant of authority: the engine uses it to decide whether the node may retry, what isolation it needs, and whether a human has to approve it. Declaring nothing means the node is granted nothing — safe, but it will be refused if it then tries to reach out.",
                format!("/nodes/{i}/effects"), (&["read_only", "workspace_write", "external_write", "financial", "irreversible"], json!("[] — no authority granted"), "high")));
        }
        if reaches_out && !has_approval {
            questions.push(question(format!("approval:{id}"), json!(id), format!("'{id}' declares something irreversible. Should a person approve it before it happens?"),
                "There is no approval node in this graph, so nothing pauses for a human. An irreversible effect that runs unattended cannot be taken back, and the receipt will show it was never authorised by anyone.",
                "/nodes".into(), (&["yes — add an approval node", "no — run it unattended"], json!("no — nothing will pause"), "high")));
        }
        if node.get("kind").and_then(Node::as_str) == Some("approval")
            && absent_or_empty(node.get("required_role"))
        {
            questions.push(question(format!("required_role:{id}"), json!(id), format!("Who is allowed to approve '{id}'?"),
                "The role is recorded on the approval, so it is the evidence of who had the authority. An approval anyone can grant is not much of a gate.",
                format!("/nodes/{i}/required_role"), (&[], Value::Null, "high")));
        }
        let budget = node.get("budget").filter(|b| b.as_map().is_some());
        let unset = |key: &str| budget.and_then(|b| b.get(key)).is_none_or(Node::is_null);
        if !absent_or_empty(node.get("connection_slot"))
            && unset("max_tokens")
            && unset("max_cost_microunits")
        {
            questions.push(question(format!("spend:{id}"), json!(id), format!("How much should '{id}' be allowed to spend before it stops?"),
                "With no token or cost ceiling the node has none, and a run that goes wrong keeps going. This node reports its usage through a connection slot, so when a ceiling is reached the run PAUSES rather than failing and you can raise it deliberately and resume. A node whose worker cannot report usage is not asked this, because a ceiling it could never measure would fail the run instead of pausing it.",
                format!("/nodes/{i}/budget"), (&[], json!("no ceiling"), "medium")));
        }
        let attempts = budget
            .and_then(|b| b.get("max_attempts"))
            .map(Node::to_json);
        let once = attempts
            .as_ref()
            .is_none_or(|a| a.is_null() || a.as_f64() == Some(1.0) || *a == json!(true));
        if !once && reaches_out {
            questions.push(question(format!("retry:{id}"), json!(id), format!("'{id}' may retry and it reaches outside this machine. Is repeating its effect safe?"),
                "Retrying a node that already sent something sends it twice unless the effect carries an idempotency key. The compiler refuses this combination outright, so it must be resolved before the graph will run at all.",
                format!("/nodes/{i}/budget/max_attempts"), (&["safe — it has an idempotency key", "not safe — set max_attempts to 1"], Value::Null, "high")));
        }
        if absent_or_empty(node.get("isolation")) {
            questions.push(question(format!("isolation:{id}"), json!(id), format!("How tightly should '{id}' be confined while it runs?"),
                "The tiers differ in what is actually enforced, and a tier this machine cannot deliver is refused rather than quietly downgraded. Ask for what the work needs; `bl capabilities` shows what this host can enforce.",
                format!("/nodes/{i}/isolation"), (&["workspace_only", "process_restricted", "container_restricted"], json!("workspace_only"), "low")));
        }
    }
    if policy("fail_mode").is_none_or(Node::is_null) {
        questions.push(question("fail_mode".into(), Value::Null, "If one step fails, should the whole run stop, or should the rest continue?".into(),
            "Stopping at the first failure is the safe default and it makes the receipt unambiguous. Continuing is useful when the steps are genuinely independent, but then a run can finish with some work undone.",
            "/policies/fail_mode".into(), (&["fail_closed", "continue_declared"], json!("fail_closed"), "medium")));
    }
    let repairs = nodes.iter().any(|n| {
        n.get("on_failure")
            .is_some_and(|f| f.as_map().is_some() || f.as_str() == Some("repair"))
    });
    if repairs && absent_or_empty(policy("repair_budget")) {
        questions.push(question("repair_budget".into(), Value::Null, "How many times may the run go back and repair earlier work before giving up?".into(),
            "A node asks for repair but the graph sets no bound, and the compiler refuses that — the bound is what makes repair terminate. It is global across the whole run, not per node.",
            "/policies/repair_budget".into(), (&[], json!("0 — refused, because repair is requested"), "high")));
    }
    if absent_or_empty(policy("data_class")) {
        questions.push(question("data_class".into(), Value::Null, "How sensitive is the data this graph touches?".into(),
            "The data class constrains which connections a node may use, so declaring it too low is how confidential data reaches somewhere it should not.",
            "/policies/data_class".into(), (&["public", "internal", "confidential", "restricted"], json!("internal"), "medium")));
    }
    let rank = |q: &Value| match q["weight"].as_str() {
        Some("high") => 0,
        Some("medium") => 1,
        _ => 2,
    };
    questions.sort_by(|a, b| (rank(a), a["key"].as_str()).cmp(&(rank(b), b["key"].as_str())));
    let must_ask: Vec<&Value> = questions
        .iter()
        .filter(|q| q["weight"] == "high")
        .map(|q| &q["key"])
        .collect();
    json!({
        "ok": true, "graph": name, "questions": questions, "must_ask": must_ask,
        "how_to_use": "Ask the HIGH questions before running anything — each one concerns authority the engine will actually grant or a bound it will actually enforce. Ask MEDIUM ones when the person has patience. Never answer a HIGH question on someone's behalf and then tell them the graph is ready: say which defaults you applied.",
    })
}

fn type_name(node: &Node) -> &'static str {
    match node.kind {
        Kind::Null => "null",
        Kind::Bool(_) => "boolean",
        Kind::Int(_) => "integer",
        Kind::Float(_) => "number",
        Kind::Str(_) => "string",
        Kind::Other(_) => "timestamp",
        Kind::Seq(_) => "list",
        Kind::Map(_) => "mapping",
    }
}

fn list_index(segment: &str, len: usize) -> Result<usize, Unusable> {
    let index: usize = segment
        .parse()
        .ok()
        .filter(|_| segment.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| Unusable(format!("'{segment}' is not a list index")))?;
    if index >= len {
        return Err(Unusable(format!(
            "index {index} is past the end of a {len}-item list"
        )));
    }
    Ok(index)
}

/// Sets the value at `pointer` in `doc`: an existing list item, or any key
/// of an existing mapping; never new structure on the way. The value it
/// replaced (null when there was none).
pub fn set_at(doc: &mut Node, pointer: &str, value: &Value) -> Result<Value, Unusable> {
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(Unusable("a pointer must start with '/'".into()));
    };
    let segments: Vec<String> = rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, path) = segments
        .split_last()
        .expect("split gives at least one segment");
    let mut at = doc;
    for segment in path {
        let name = type_name(at);
        at = match &mut at.kind {
            Kind::Seq(items) => {
                let i = list_index(segment, items.len())?;
                &mut items[i]
            }
            Kind::Map(entries) => match entries.iter_mut().find(|(k, _)| k == segment) {
                Some((_, v)) => v,
                None => {
                    return Err(Unusable(format!(
                        "'{segment}' does not exist; this tool does not create new structure"
                    )));
                }
            },
            _ => return Err(Unusable(format!("cannot descend into a {name}"))),
        };
    }
    let name = type_name(at);
    match &mut at.kind {
        Kind::Seq(items) => {
            let i = list_index(last, items.len())?;
            Ok(std::mem::replace(&mut items[i], node_of(value)).to_json())
        }
        Kind::Map(entries) => match entries.iter_mut().find(|(k, _)| k == last) {
            Some((_, v)) => Ok(std::mem::replace(v, node_of(value)).to_json()),
            None => {
                entries.push((last.clone(), node_of(value)));
                Ok(Value::Null)
            }
        },
        _ => Err(Unusable(format!("cannot set '{last}' on a {name}"))),
    }
}

/// `graph_configure`: the saved graph `name` with `changes` (each
/// `{pointer, value}`, in order) applied and linted. Unconfirmed, the
/// proposed manifest; confirmed and linting, it is written.
pub fn configure(workspace: &Path, name: &str, changes: &[Value], confirm: bool) -> Value {
    let path = match saved(workspace, name) {
        Ok(path) => path,
        Err(error) => return json!({"ok": false, "error": error.to_string()}),
    };
    let mut doc = match std::fs::read_to_string(&path)
        .map_err(|e| Unusable(format!("cannot read {name}.yaml: {e}")))
        .and_then(|t| parsed(&t))
    {
        Ok(doc) => doc,
        Err(error) => return json!({"ok": false, "error": error.to_string()}),
    };
    let mut applied = Vec::new();
    for change in changes {
        let (Some(pointer), Some(value)) = (change.get("pointer"), change.get("value")) else {
            return json!({"ok": false, "error": "each change needs a 'pointer' and a 'value'"});
        };
        let shown = pointer
            .as_str()
            .map_or_else(|| pointer.to_string(), str::to_string);
        match set_at(&mut doc, &shown, value) {
            Ok(from) => applied.push(json!({"pointer": pointer, "from": from, "to": value})),
            Err(why) => return json!({"ok": false, "error": format!("{shown}: {why}")}),
        }
    }
    let (manifest, refusal) = written_and_linted(&doc);
    if let Some(refusal) = refusal {
        return json!({"ok": false, "applied": applied, "refusal": refusal, "written": false,
            "why": "These answers produce a graph the compiler refuses, so nothing was written. Fixing it now is cheaper than discovering it at run time."});
    }
    if !confirm {
        return json!({"ok": true, "applied": applied, "manifest": manifest, "written": false,
            "next": "call again with confirm=true to write it"});
    }
    match std::fs::write(&path, manifest) {
        Ok(()) => json!({"ok": true, "applied": applied, "written": true, "path": path}),
        Err(e) => json!({"ok": false, "error": format!("cannot write {name}.yaml: {e}")}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Node {
        bl_graph::parse_document(
            "nodes:\n- id: a\n  budget: {max_attempts: 1}\npolicies: {}\n",
            Format::Yaml,
        )
        .unwrap()
    }

    #[test]
    fn a_pointer_sets_what_exists_or_a_new_key_and_never_makes_structure() {
        let mut d = doc();
        assert_eq!(
            set_at(&mut d, "/nodes/0/budget/max_attempts", &json!(3)),
            Ok(json!(1))
        );
        assert_eq!(
            set_at(&mut d, "/policies/data_class", &json!("internal")),
            Ok(Value::Null)
        );
        assert_eq!(d.to_json()["nodes"][0]["budget"]["max_attempts"], 3);
        let refused = |pointer: &str| set_at(&mut doc(), pointer, &json!(1)).unwrap_err().0;
        assert_eq!(refused("nodes"), "a pointer must start with '/'");
        assert_eq!(
            refused("/nodes/1/id"),
            "index 1 is past the end of a 1-item list"
        );
        assert_eq!(refused("/nodes/-/id"), "'-' is not a list index");
        assert_eq!(
            refused("/edges/0"),
            "'edges' does not exist; this tool does not create new structure"
        );
        assert_eq!(refused("/nodes/0/id/x"), "cannot set 'x' on a string");
    }

    #[test]
    fn interview_questions_come_weightiest_first() {
        let asked = interview(
            Path::new("/nonexistent"),
            None,
            Some(
                "nodes:\n- {id: send, kind: publish, effects: [external_write], budget: {max_attempts: 2}}\n",
            ),
        );
        let keys: Vec<&str> = asked["questions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["key"].as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "approval:send",
                "retry:send",
                "data_class",
                "fail_mode",
                "isolation:send"
            ]
        );
        assert_eq!(asked["must_ask"], json!(["approval:send", "retry:send"]));
    }
}
