//! `bl graph schema` against the recorded corpus: every manifest
//! bounded-loops accepts validates against the schema, and every manifest it
//! refuses for a structural reason (a wrong type, a missing or unknown key,
//! an out-of-range value, a bad identifier or enum value) does not.

use std::path::Path;

use serde_json::Value;

/// Refusal codes a JSON Schema can express; the others (cycles, port
/// types, repair rules…) need the whole graph and are the compiler's job.
const STRUCTURAL: &[&str] = &[
    "type",
    "missing_field",
    "unknown_field",
    "range",
    "enum",
    "identifier",
    "api_version",
];

/// Refused upstream for a reason JSON Schema cannot see: `1.0` is an
/// integer to JSON Schema but a float to bounded-loops.
const BEYOND_A_SCHEMA: &[&str] = &["budget_attempts_float.json"];

#[test]
fn the_schema_accepts_what_bounded_loops_accepts_and_refuses_structural_errors() {
    let schema = bl_graph::schema::manifest_schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema is a valid JSON Schema");
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/graph/cases");
    let (mut accepted, mut refused) = (0, 0);
    for entry in std::fs::read_dir(&cases).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(format!("{}.expected", path.display())).unwrap(),
        )
        .unwrap();
        let Ok(manifest) = serde_json::from_str::<Value>(&std::fs::read_to_string(&path).unwrap())
        else {
            continue; // invalid_json and duplicate_key cases
        };
        let name = path.file_name().unwrap().to_string_lossy();
        if expected["exit"] == 0 {
            let errors: Vec<String> = validator
                .iter_errors(&manifest)
                .map(|e| format!("{} at {}", e, e.instance_path))
                .collect();
            assert!(errors.is_empty(), "{name} is valid upstream: {errors:?}");
            accepted += 1;
        } else if let Some(code) = expected["json"]["code"].as_str()
            && STRUCTURAL.contains(&code)
            && !BEYOND_A_SCHEMA.contains(&name.as_ref())
        {
            assert!(
                !validator.is_valid(&manifest),
                "{name} ({code}) passes the schema"
            );
            refused += 1;
        }
    }
    assert!(
        accepted >= 10 && refused >= 40,
        "{accepted} accepted, {refused} refused"
    );
}

/// bl's extension is in the schema too: the reference manifest that uses
/// it validates, and a misspelt extension field does not.
#[test]
fn the_schema_describes_the_artifact_ports_extension() {
    let schema = bl_graph::schema::manifest_schema();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/graphs/refactor-audit.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let manifest = bl_graph::yaml::parse_yaml(&text).unwrap().to_json();
    let errors: Vec<String> = validator
        .iter_errors(&manifest)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    let mut changed = manifest.clone();
    let node = changed["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n.get("gate").is_some())
        .expect("a node with a gate");
    node["gate"]["plugn"] = Value::from("x");
    assert!(!validator.is_valid(&changed));
}
