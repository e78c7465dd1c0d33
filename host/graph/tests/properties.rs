//! Property tests: generated valid graphs lint and plan (the same in JSON
//! and YAML); mutated ones are refused; nothing ever panics.

use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_graph::{CompileInput, Format, compile, graph_digest, lint};
use proptest::prelude::*;
use serde_json::{Value, json};

const KINDS: &[(&str, Option<(&str, &str)>)] = &[
    ("research_claim", None),
    ("research_source", Some(("source_policy", "web"))),
    ("audit", Some(("audit_profile", "standard"))),
    ("tool", Some(("tool_ref", "fmt"))),
    ("approval", Some(("required_role", "editor"))),
    ("publish", Some(("publication_policy", "outbox"))),
];
const EFFECTS: &[&str] = &[
    "read_only",
    "workspace_write",
    "external_write",
    "financial",
    "irreversible",
];
const ISOLATIONS: &[&str] = &[
    "workspace_only",
    "process_restricted",
    "container_restricted",
    "customer_managed_worker",
];

#[derive(Debug, Clone)]
struct NodeSpec {
    kind: usize,
    attempts: u32,
    wallclock: u32,
    effects: Vec<bool>,
    isolation: usize,
    parents: Vec<prop::sample::Index>,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        0..KINDS.len(),
        1u32..=100,
        1u32..=86_400,
        prop::collection::vec(any::<bool>(), EFFECTS.len()),
        0..ISOLATIONS.len(),
        prop::collection::vec(any::<prop::sample::Index>(), 0..3),
    )
        .prop_map(
            |(kind, attempts, wallclock, effects, isolation, parents)| NodeSpec {
                kind,
                attempts,
                wallclock,
                effects,
                isolation,
                parents,
            },
        )
}

/// A valid manifest: edges only run from earlier to later nodes, each pair
/// at most once, and effectful nodes never retry.
fn build(
    specs: &[NodeSpec],
    continue_declared: bool,
    repair: Option<prop::sample::Index>,
) -> Value {
    let mut nodes = Vec::new();
    let mut edges = Vec::new();
    for (i, spec) in specs.iter().enumerate() {
        let effects: Vec<&str> = EFFECTS
            .iter()
            .zip(&spec.effects)
            .filter(|(_, on)| **on)
            .map(|(e, _)| *e)
            .collect();
        let networked = effects
            .iter()
            .any(|e| ["external_write", "financial", "irreversible"].contains(e));
        let mut parents: Vec<usize> = if i == 0 {
            vec![]
        } else {
            spec.parents.iter().map(|p| p.index(i)).collect()
        };
        parents.sort();
        parents.dedup();
        let inputs: serde_json::Map<String, Value> = parents
            .iter()
            .map(|p| (format!("from_{p}"), json!("text")))
            .collect();
        for p in &parents {
            edges.push(json!({"from_node": format!("n{p}"), "from_port": "out", "to_node": format!("n{i}"), "to_port": format!("from_{p}")}));
        }
        let (kind, field) = KINDS[spec.kind];
        let mut node = json!({
            "id": format!("n{i}"), "kind": kind, "inputs": inputs, "outputs": {"out": "text"},
            "budget": {"max_attempts": if networked { 1 } else { spec.attempts }, "max_wallclock_s": spec.wallclock,
                       "max_tokens": 10, "max_cost_microunits": 0},
            "effects": effects, "isolation": ISOLATIONS[spec.isolation],
        });
        if let Some((key, value)) = field {
            node[key] = json!(value);
        }
        nodes.push(node);
    }
    let mut policies = json!({"data_class": "internal", "fail_mode": if continue_declared { "continue_declared" } else { "fail_closed" }});
    // A repair needs a strict ancestor: the first parent of some node.
    if let (true, Some(pick)) = (continue_declared, repair) {
        let with_parent: Vec<&Value> = edges.iter().collect();
        if !with_parent.is_empty() {
            let edge = with_parent[pick.index(with_parent.len())];
            let to: usize = edge["to_node"].as_str().unwrap()[1..].parse().unwrap();
            nodes[to]["on_failure"] = json!({"mode": "repair", "target": edge["from_node"]});
            policies["repair_budget"] = json!(2);
        }
    }
    json!({"api_version": "bounded-loops.dev/graph/v1", "graph_id": "generated", "version": "1.0.0",
           "nodes": nodes, "edges": edges, "connection_slots": [], "policies": policies})
}

fn graph_strategy() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(node_spec(), 1..24),
        any::<bool>(),
        any::<Option<prop::sample::Index>>(),
    )
        .prop_map(|(specs, continue_declared, repair)| build(&specs, continue_declared, repair))
}

/// Every (pointer to an object, key) pair in a document.
fn object_keys(value: &Value, pointer: String, out: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                out.push((pointer.clone(), k.clone()));
                object_keys(v, format!("{pointer}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                object_keys(v, format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Keys whose removal is allowed by graph/v1.
fn optional_key(key: &str) -> bool {
    [
        "max_tokens",
        "max_cost_microunits",
        "on_failure",
        "repair_budget",
        "presentation",
        "connection_slot",
    ]
    .contains(&key)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn generated_graphs_lint_and_plan(doc in graph_strategy()) {
        let text = serde_json::to_string_pretty(&doc).unwrap();
        let graph = lint(&text, Format::Json).map_err(|r| TestCaseError::fail(format!("{r:?}\n{text}")))?;
        // JSON is YAML too: the YAML reader must see the same graph.
        let from_yaml = lint(&text, Format::Yaml).map_err(|r| TestCaseError::fail(format!("{r:?}")))?;
        prop_assert_eq!(graph_digest(&graph), graph_digest(&from_yaml));
        let input = CompileInput { connections: None, available_packages: None, policy_digest: DEFAULT_POLICY_DIGEST };
        let plan = compile(&graph, &input).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let planned: usize = plan.levels.iter().map(Vec::len).sum();
        prop_assert_eq!(planned, graph.nodes.len());
        prop_assert_eq!(plan.plan_id, format!("sha256:{}", bl_core::sha256_hex(plan.bytes.as_bytes())));
        // Compact JSON of the same document digests the same.
        let compact = lint(&doc.to_string(), Format::Json).unwrap();
        prop_assert_eq!(graph_digest(&compact), graph_digest(&graph));
    }

    #[test]
    fn removing_a_required_key_is_refused(doc in graph_strategy(), pick in any::<prop::sample::Index>()) {
        let mut keys = Vec::new();
        object_keys(&doc, String::new(), &mut keys);
        keys.retain(|(_, k)| !optional_key(k) && !k.starts_with("from_"));
        let (pointer, key) = &keys[pick.index(keys.len())];
        let mut broken = doc.clone();
        broken.pointer_mut(pointer).unwrap().as_object_mut().unwrap().remove(key);
        // Removing a port or a kind field is refused too (an edge names it,
        // or the kind needs it); removing an object's only port is not a
        // removal of a required key, so skip those maps.
        if ["inputs", "outputs"].iter().any(|m| pointer.ends_with(m)) {
            return Ok(());
        }
        prop_assert!(lint(&broken.to_string(), Format::Json).is_err(), "removing {}/{} was accepted", pointer, key);
    }

    #[test]
    fn an_unknown_key_is_refused(doc in graph_strategy(), pick in any::<prop::sample::Index>()) {
        let mut keys = Vec::new();
        object_keys(&doc, String::new(), &mut keys);
        let mut objects: Vec<String> = keys.into_iter().map(|(p, _)| p).collect();
        objects.dedup();
        // Port maps are open: any identifier is a port name.
        objects.retain(|p| !p.ends_with("inputs") && !p.ends_with("outputs"));
        let pointer = &objects[pick.index(objects.len())];
        let mut broken = doc.clone();
        broken.pointer_mut(pointer).unwrap().as_object_mut().unwrap().insert("surprise".into(), json!(1));
        let refusal = lint(&broken.to_string(), Format::Json).unwrap_err();
        prop_assert_eq!(refusal.code, "unknown_field");
    }

    #[test]
    fn any_value_swap_never_panics(
        doc in graph_strategy(),
        pick in any::<prop::sample::Index>(),
        replacement in prop_oneof![
            Just(json!(null)), Just(json!(-1)), Just(json!("")), Just(json!("/abs")), Just(json!(true)),
            Just(json!(1.5)), Just(json!("X Y")), Just(json!([])), Just(json!({})), Just(json!("failed")),
        ],
    ) {
        let mut keys = Vec::new();
        object_keys(&doc, String::new(), &mut keys);
        let (pointer, key) = &keys[pick.index(keys.len())];
        let mut broken = doc.clone();
        broken.pointer_mut(pointer).unwrap()[key.as_str()] = replacement;
        let text = broken.to_string();
        if let Ok(graph) = lint(&text, Format::Json) {
            let input = CompileInput { connections: None, available_packages: None, policy_digest: DEFAULT_POLICY_DIGEST };
            let _ = compile(&graph, &input);
        }
        let _ = lint(&text, Format::Yaml);
    }

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        let _ = lint(&text, Format::Json);
        let _ = lint(&text, Format::Yaml);
    }
}

/// A YAML document of nested anchors: level k+1 is a sequence of
/// `widths[k]` aliases of level k. Returns the text and how many nodes it
/// holds once every alias is expanded (keys, values and the top mapping).
fn alias_document(widths: &[usize]) -> (String, u128) {
    let mut text = String::from("a0: &a0 [x]\n");
    let mut size: u128 = 2;
    let mut total: u128 = 1 + 1 + size;
    for (level, width) in widths.iter().enumerate() {
        let items = vec![format!("*a{level}"); *width].join(", ");
        text.push_str(&format!("a{}: &a{} [{items}]\n", level + 1, level + 1));
        size = 1 + *width as u128 * size;
        total += 1 + size;
    }
    (text, total)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// However aliases nest, lint answers: documents that expand past the
    /// limit are refused as invalid_yaml naming the limit; smaller ones get
    /// past parsing (here, to validation's refusal of the unknown keys).
    #[test]
    fn alias_structures_are_bounded(widths in prop::collection::vec(1usize..12, 0..12)) {
        let (text, total) = alias_document(&widths);
        let limit = bl_graph::yaml::MAX_EXPANDED_NODES as u128;
        let refusal = lint(&text, Format::Yaml).expect_err("a0.. are not manifest keys");
        // The check runs at each alias; the two closing nodes after the last
        // one may take a document at most two past the limit.
        if total > limit + 2 {
            prop_assert_eq!(refusal.code.as_str(), "invalid_yaml");
            prop_assert!(refusal.message.contains(&limit.to_string()), "{}", refusal.message);
        } else if total <= limit {
            prop_assert_ne!(refusal.code.as_str(), "invalid_yaml", "{}", refusal.message);
        }
    }
}

/// The 450-byte manifest that made `bl graph lint` grow to 22 GB: nine
/// levels of nine aliases (9^9 copies of the leaf).
#[test]
fn the_billion_laughs_manifest_is_refused_with_the_limit() {
    let (text, total) = alias_document(&[9; 9]);
    assert!(text.len() < 600 && total > 300_000_000);
    let refusal = lint(&text, Format::Yaml).unwrap_err();
    assert_eq!(refusal.code.as_str(), "invalid_yaml");
    assert!(
        refusal.message.contains("200000 nodes"),
        "{}",
        refusal.message
    );
    assert!(refusal.pos.is_some(), "the refusal points at the alias");
}

#[test]
fn documents_over_the_size_limit_are_refused_with_their_format_code() {
    let big = format!("# {}\n", "x".repeat(bl_graph::MAX_DOCUMENT_BYTES));
    let yaml = lint(&big, Format::Yaml).unwrap_err();
    assert_eq!(yaml.code.as_str(), "invalid_yaml");
    assert!(
        yaml.message
            .contains(&bl_graph::MAX_DOCUMENT_BYTES.to_string())
    );
    let json = lint(&big, Format::Json).unwrap_err();
    assert_eq!(json.code.as_str(), "invalid_json");
}

/// A long string aliased many times holds few nodes but much text: it is
/// refused by the text bound, before the copies are made.
#[test]
fn a_long_string_aliased_many_times_is_refused_by_its_text() {
    let long = "x".repeat(1 << 20);
    let aliases = vec!["*s"; 1000].join(", ");
    let text = format!("s: &s {long}\nmany: [{aliases}]\n");
    assert!(text.len() < bl_graph::MAX_DOCUMENT_BYTES);
    let refusal = lint(&text, Format::Yaml).unwrap_err();
    assert_eq!(refusal.code.as_str(), "invalid_yaml");
    assert!(
        refusal
            .message
            .contains(&bl_graph::yaml::MAX_EXPANDED_BYTES.to_string()),
        "{}",
        refusal.message
    );
}

/// An unknown field is placed where its key is written, in both formats,
/// also when its value is a block that starts on the next line.
#[test]
fn an_unknown_field_is_placed_at_its_key() {
    let yaml = "api_version: bounded-loops.dev/graph/v1\ngraph_id: g\nversion: 1.0.0\nnodes: []\nedgs:\n  - {from_node: a}\n";
    let refusal = lint(yaml, Format::Yaml).unwrap_err();
    assert_eq!(refusal.code.as_str(), "unknown_field", "{refusal}");
    let pos = refusal.pos.expect("a place");
    assert_eq!((pos.line, pos.col), (5, 1), "{refusal}");
    let json = "{\"api_version\": \"bounded-loops.dev/graph/v1\", \"graph_id\": \"g\",\n  \"version\": \"1.0.0\", \"nodes\": [], \"edgs\":\n  []}";
    let refusal = lint(json, Format::Json).unwrap_err();
    assert_eq!(refusal.code.as_str(), "unknown_field", "{refusal}");
    let pos = refusal.pos.expect("a place");
    assert_eq!((pos.line, pos.col), (2, 36), "{refusal}");
}
