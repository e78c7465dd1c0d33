//! A plugin's config checked against the JSON Schema its manifest declares
//! (`config-schema` in the plugin's crate), so that a config the plugin
//! would refuse is refused before anything runs, with the place in it that
//! is wrong, rather than when the plugin is first called.

use serde_json::Value;

/// At most this many violations are reported for one config.
const MOST_REPORTED: usize = 5;

/// One place where a config breaks its plugin's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigViolation {
    /// A JSON pointer into the config (`""` for the config as a whole).
    pub pointer: String,
    pub message: String,
}

/// A schema that cannot check anything: the plugin's author's mistake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its manifest's config schema is not a JSON Schema bl can use ({0}); rebuild or reinstall the plugin"
)]
pub struct UnusableConfigSchema(pub String);

/// Where `config` breaks `schema`: empty when it matches. The draft is the
/// schema's `$schema` (2020-12 when it names none).
pub fn config_violations(
    schema: &Value,
    config: &Value,
) -> Result<Vec<ConfigViolation>, UnusableConfigSchema> {
    let validator =
        jsonschema::validator_for(schema).map_err(|e| UnusableConfigSchema(e.to_string()))?;
    Ok(validator
        .iter_errors(config)
        .take(MOST_REPORTED)
        .map(|error| ConfigViolation {
            pointer: error.instance_path.to_string(),
            message: error.to_string(),
        })
        .collect())
}

/// The violations in a few words each. Each is placed by `place`, given
/// the JSON pointer of its place in the user's file: `within` (where the
/// config sits there) and its own pointer.
pub fn describe_violations(
    violations: &[ConfigViolation],
    within: &str,
    place: impl Fn(&str) -> String,
) -> String {
    violations
        .iter()
        .map(|v| {
            let at = format!("{within}{}", v.pointer);
            let at = if at.is_empty() { "/" } else { &at };
            format!("at {}: {}", place(at), v.message)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn jsonschema_gate_schema() -> Value {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../plugins/jsonschema/config.schema.json"
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn each_violation_names_its_place_in_the_config() {
        let schema = jsonschema_gate_schema();
        assert_eq!(
            config_violations(&schema, &json!({"schema": "s.json", "files": ["r.json"]})),
            Ok(vec![])
        );
        let found = config_violations(
            &schema,
            &json!({"schema": "s.json", "files": "r.json", "file": "x"}),
        )
        .unwrap();
        let places: Vec<&str> = found.iter().map(|v| v.pointer.as_str()).collect();
        assert!(places.contains(&"/files"), "{found:?}");
        assert!(places.contains(&""), "the unknown key: {found:?}");
        let files = found.iter().find(|v| v.pointer == "/files").unwrap();
        assert!(files.message.contains("array"), "{files:?}");
    }

    #[test]
    fn violations_are_told_at_their_place_in_the_users_file() {
        let found = config_violations(&jsonschema_gate_schema(), &json!({"files": 3})).unwrap();
        let told = describe_violations(&found, "/gate/config", |p| format!("loop.yaml {p}"));
        assert!(
            told.contains("at loop.yaml /gate/config/files: 3 is not of type"),
            "{told}"
        );
        assert!(told.contains("at loop.yaml /gate/config: "), "{told}");
        let whole = describe_violations(&found, "", str::to_string);
        assert!(whole.contains("at /: "), "the config as a whole: {whole}");
    }

    #[test]
    fn a_schema_that_is_no_schema_is_the_plugins_fault_not_the_configs() {
        let err = config_violations(&json!({"type": 12}), &json!({})).unwrap_err();
        assert!(err.to_string().contains("rebuild or reinstall"), "{err}");
    }

    #[test]
    fn every_first_party_config_schema_is_usable() {
        let plugins = concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins");
        let mut checked = 0;
        for entry in std::fs::read_dir(plugins).unwrap() {
            let path = entry.unwrap().path().join("config.schema.json");
            if let Ok(text) = std::fs::read_to_string(&path) {
                let schema: Value = serde_json::from_str(&text).unwrap();
                config_violations(&schema, &json!({}))
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                checked += 1;
            }
        }
        assert!(checked >= 5, "found {checked} config schemas");
    }
}
