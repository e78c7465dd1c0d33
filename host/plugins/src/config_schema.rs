//! A plugin's config checked against the JSON Schema its manifest declares
//! (`config-schema` in the plugin's crate), so that a config the plugin
//! would refuse is refused before anything runs, with the place in it that
//! is wrong, rather than when the plugin is first called.

use serde_json::Value;

/// At most this many violations are reported for one config.
const MOST_REPORTED: usize = 5;

/// One place where a config breaks its plugin's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfigViolation {
    /// A JSON pointer into the config (`""` for the config as a whole).
    pointer: String,
    message: String,
}

/// Why a config was refused before its plugin ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigRefused {
    /// The schema cannot check anything: the plugin's author's mistake.
    #[error(
        "plugin '{plugin}': its manifest's config schema is not a JSON Schema bl can use ({reason}); rebuild or reinstall the plugin"
    )]
    UnusableSchema { plugin: String, reason: String },
    #[error(
        "the config is not one plugin '{plugin}' takes: {places}. Fix the config (`bl plugin inspect {plugin} --json` shows the schema it must match)"
    )]
    Mismatch { plugin: String, places: String },
}

/// Checks `config` (found at the JSON pointer `within` in the user's file)
/// against `plugin`'s config `schema`. Each place that is wrong is named by
/// `place`, given its pointer in the user's file.
pub(crate) fn check_config(
    plugin: &str,
    schema: &Value,
    config: &Value,
    within: &str,
    place: impl Fn(&str) -> String,
) -> Result<(), ConfigRefused> {
    let violations =
        config_violations(schema, config).map_err(|e| ConfigRefused::UnusableSchema {
            plugin: plugin.to_string(),
            reason: e.to_string(),
        })?;
    if violations.is_empty() {
        return Ok(());
    }
    Err(ConfigRefused::Mismatch {
        plugin: plugin.to_string(),
        places: describe_violations(&violations, within, place),
    })
}

/// Where `config` breaks `schema`: empty when it matches, or why the schema
/// cannot check anything. The draft is the schema's `$schema` (2020-12
/// when it names none).
fn config_violations(
    schema: &Value,
    config: &Value,
) -> Result<Vec<ConfigViolation>, Box<jsonschema::ValidationError<'static>>> {
    let validator = jsonschema::validator_for(schema).map_err(Box::new)?;
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
fn describe_violations(
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
            config_violations(&schema, &json!({"schema": "s.json", "files": ["r.json"]})).unwrap(),
            vec![]
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
        let err =
            check_config("p", &json!({"type": 12}), &json!({}), "", str::to_string).unwrap_err();
        assert!(matches!(err, ConfigRefused::UnusableSchema { .. }), "{err}");
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
