//! A JSON Schema (draft 2020-12) of the graph/v1 manifest, so editors can
//! validate and complete manifests. The compiler stays the authority: some
//! rules (ancestry, cycles, guards) are beyond what a schema can say.

use serde_json::{Value, json};

use crate::model::*;

/// A pattern matching any of `words` in any letter case, with blanks
/// around (JSON Schema patterns have no case-insensitive flag).
fn any_case_word(words: &[&str]) -> String {
    let alternatives: Vec<String> = words
        .iter()
        .map(|w| {
            w.chars()
                .map(|c| format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase()))
                .collect()
        })
        .collect();
    format!("^\\s*({})\\s*$", alternatives.join("|"))
}

pub fn manifest_schema() -> Value {
    let identifier = json!({"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,62}$"});
    let digest = json!({"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"});
    let text = json!({"type": "string", "minLength": 1});
    // A port is a type name, or (bl's `artifact-ports` extension) a long form.
    let long_port = json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["type"],
        "properties": {
            "type": text, "path": text, "visibility": {"enum": ["consumer", "system_only"]},
            "contract": text, "required": {"type": "boolean"},
        },
    });
    let ports = json!({
        "type": "object",
        "propertyNames": identifier,
        "additionalProperties": {"anyOf": [text, long_port]},
    });
    let mut kind_variants = Vec::new();
    for kind in NODE_KINDS {
        let mut properties = serde_json::Map::new();
        properties.insert("kind".into(), json!({"const": kind}));
        for field in kind_fields(kind) {
            let schema = match *field {
                "loop_package" | "graph_package" => digest.clone(),
                "mode" => json!({"enum": JOIN_MODES}),
                "routes" => {
                    json!({"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}})
                }
                "default_route" => json!({"type": "string"}),
                _ => text.clone(),
            };
            properties.insert(field.to_string(), schema);
        }
        kind_variants.push(json!({
            "if": {"properties": {"kind": {"const": kind}}},
            "then": {"properties": properties, "required": kind_fields(kind)},
        }));
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "bounded-loops graph/v1 manifest",
        "type": "object",
        "additionalProperties": false,
        "required": ["api_version", "graph_id", "version", "nodes", "edges", "connection_slots", "policies"],
        "properties": {
            "api_version": {"const": crate::model::API_VERSION},
            "graph_id": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,62}$"},
            "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.-]+)?$"},
            "presentation": {"type": "object"},
            "extensions": {
                "description": "bl's own additions (bounded-loops refuses this key)",
                "type": "array", "uniqueItems": true, "items": {"enum": ["artifact-ports"]},
            },
            "nodes": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/node"}},
            "edges": {"type": "array", "items": {"$ref": "#/$defs/edge"}},
            "connection_slots": {"type": "array", "items": {"$ref": "#/$defs/slot"}},
            "policies": {
                "type": "object",
                "additionalProperties": false,
                "required": ["data_class", "fail_mode"],
                "properties": {
                    "data_class": {"enum": DATA_CLASSES},
                    "fail_mode": {"enum": FAIL_MODES},
                    "required_audit_profile": {"type": ["string", "null"]},
                    "repair_budget": {"type": "integer", "minimum": 0, "maximum": 100},
                },
            },
        },
        "$defs": {
            "node": {
                "type": "object",
                "required": ["id", "kind", "inputs", "outputs", "budget", "effects", "isolation"],
                "properties": {
                    "id": identifier,
                    "kind": {"enum": NODE_KINDS},
                    "inputs": ports,
                    "outputs": ports,
                    "budget": {
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["max_attempts", "max_wallclock_s"],
                        "properties": {
                            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
                            "max_wallclock_s": {"type": "integer", "minimum": 1, "maximum": 86400},
                            "max_tokens": {"type": ["integer", "null"], "minimum": 1},
                            "max_cost_microunits": {"type": ["integer", "null"], "minimum": 0},
                        },
                    },
                    "effects": {"type": "array", "uniqueItems": true, "items": {"enum": EFFECTS}},
                    "isolation": {"enum": ISOLATIONS},
                    "connection_slot": text,
                    "gate": {
                        "description": "bl's artifact-ports extension: the gate plugin that decides this node",
                        "type": "object",
                        "additionalProperties": false,
                        "required": ["plugin"],
                        "properties": {"plugin": text, "config": {"type": "object"}},
                    },
                    "on_failure": {
                        "oneOf": [
                            {"type": "null"},
                            {"const": "fail_graph"},
                            {
                                "type": "object",
                                "additionalProperties": false,
                                "required": ["mode", "target"],
                                "properties": {"mode": {"const": "repair"}, "target": identifier},
                            },
                        ],
                    },
                },
                "allOf": kind_variants,
                // Closed: a key is allowed only if the node's own kind (or
                // every kind) declares it.
                "unevaluatedProperties": false,
            },
            "edge": {
                "type": "object",
                "additionalProperties": false,
                "required": ["from_node", "from_port", "to_node", "to_port"],
                "properties": {
                    "from_node": text, "from_port": text, "to_node": text, "to_port": text,
                    // bounded-loops trims and lower-cases `when` first.
                    "when": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": any_case_word(&["succeeded", "failed", "skipped", "terminal"])}]},
                },
            },
            "slot": {
                "type": "object",
                "additionalProperties": false,
                "required": ["id", "requires", "data_class_max"],
                "properties": {
                    "id": identifier,
                    "requires": {"type": "array", "minItems": 1, "uniqueItems": true, "items": text},
                    "data_class_max": {"enum": DATA_CLASSES},
                    "preferred_modalities": {"type": "array", "items": text},
                },
            },
        },
    })
}
