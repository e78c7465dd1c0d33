//! Admitted-connection records: the `--admitted` file bounded-loops reads,
//! a JSON object mapping `connection_id` to the endpoint a connection may
//! reach and the *name* of the environment variable that holds its
//! credential (never the credential itself).

use std::collections::BTreeMap;

use serde_json::Value;

const EFFECTS: [&str; 5] = [
    "read_only",
    "workspace_write",
    "external_write",
    "financial",
    "irreversible",
];
const DATA_CLASSES: [&str; 4] = ["public", "internal", "confidential", "restricted"];
const REQUEST_STYLES: [&str; 1] = ["openai_chat"];
const RECORD_FIELDS: [&str; 9] = [
    "allowed_effect",
    "connection_id",
    "credential_env_var_name",
    "endpoint_host",
    "endpoint_path",
    "endpoint_scheme",
    "expires_at",
    "request_style",
    "route_policy",
];

/// Where a connection's requests may go, and under what policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePolicy {
    pub policy_digest: String,
    pub data_class_max: String,
    pub allowed_providers: Vec<String>,
    pub allowed_models: Vec<String>,
    pub allowed_regions: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedConnection {
    pub connection_id: String,
    /// The one effect a request on this connection has.
    pub allowed_effect: String,
    /// The environment variable the broker reads the credential from.
    pub credential_env_var_name: String,
    pub endpoint_scheme: String,
    pub endpoint_host: String,
    pub endpoint_path: String,
    pub expires_at: String,
    pub request_style: String,
    pub route_policy: RoutePolicy,
}

impl AdmittedConnection {
    /// The one URL requests on this connection go to.
    pub fn endpoint_url(&self) -> String {
        format!(
            "{}://{}{}",
            self.endpoint_scheme, self.endpoint_host, self.endpoint_path
        )
    }
}

/// A refused record: bounded-loops' code (`admitted_connection`, or
/// `secret_value` when a credential itself was pasted in), a JSON pointer
/// into the record, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[{code}] {pointer}: {message}")]
pub struct AdmittedError {
    pub code: &'static str,
    pub pointer: String,
    pub message: String,
}

fn refuse(pointer: &str, message: impl Into<String>) -> AdmittedError {
    AdmittedError {
        code: "admitted_connection",
        pointer: pointer.to_string(),
        message: message.into(),
    }
}

fn text<'a>(
    record: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Result<&'a str, AdmittedError> {
    record
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            refuse(
                &format!("/{field}"),
                format!("{field} must be a non-empty string"),
            )
        })
}

fn one_of(value: &str, pointer: &str, field: &str, allowed: &[&str]) -> Result<(), AdmittedError> {
    if allowed.contains(&value) {
        Ok(())
    } else {
        Err(refuse(
            pointer,
            format!("{field} must be one of {}", python_list(allowed)),
        ))
    }
}

/// `['a', 'b']`, as bounded-loops prints the allowed values.
fn python_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|i| format!("'{i}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// An environment variable's name, not a value pasted in its place.
fn is_env_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn strings(
    policy: &serde_json::Map<String, Value>,
    field: &str,
) -> Result<Vec<String>, AdmittedError> {
    let pointer = format!("/route_policy/{field}");
    let Some(Value::Array(items)) = policy.get(field) else {
        return Err(refuse(
            &pointer,
            format!("{field} must be a list of strings"),
        ));
    };
    let mut out = Vec::new();
    for item in items {
        let Some(s) = item.as_str() else {
            return Err(refuse(
                &pointer,
                format!("{field} must be a list of strings"),
            ));
        };
        if !s.is_empty() {
            out.push(s.to_string());
        }
    }
    if out.is_empty() {
        return Err(refuse(
            &pointer,
            format!("{field} must contain at least one non-empty string"),
        ));
    }
    Ok(out)
}

/// Parses one record.
pub fn parse_record(value: &Value) -> Result<AdmittedConnection, AdmittedError> {
    let Value::Object(record) = value else {
        return Err(refuse(
            "/admitted_connection",
            "an admitted connection record must be a JSON object",
        ));
    };
    let missing: Vec<&str> = RECORD_FIELDS
        .iter()
        .copied()
        .filter(|f| !record.contains_key(*f))
        .collect();
    if !missing.is_empty() {
        return Err(refuse(
            "/admitted_connection",
            format!(
                "admitted connection record is missing required fields: {}",
                missing.join(", ")
            ),
        ));
    }
    let mut unknown: Vec<&str> = record
        .keys()
        .map(String::as_str)
        .filter(|k| !RECORD_FIELDS.contains(k))
        .collect();
    unknown.sort();
    if !unknown.is_empty() {
        return Err(refuse(
            "/admitted_connection",
            format!(
                "admitted connection record has unknown fields: {}",
                unknown.join(", ")
            ),
        ));
    }
    let allowed_effect = text(record, "allowed_effect")?;
    one_of(
        allowed_effect,
        "/allowed_effect",
        "allowed_effect",
        &EFFECTS,
    )?;
    let credential = text(record, "credential_env_var_name")?;
    if !is_env_var_name(credential) {
        return Err(AdmittedError {
            code: "secret_value",
            pointer: "/admitted_connection/credential_env_var_name".into(),
            message: "credential_env_var_name must be an environment variable name (e.g. 'OPENAI_API_KEY'), not a secret value".into(),
        });
    }
    let endpoint_path = text(record, "endpoint_path")?;
    if !endpoint_path.starts_with('/') {
        return Err(refuse(
            "/endpoint_path",
            "endpoint_path must begin with '/'",
        ));
    }
    let endpoint_scheme = text(record, "endpoint_scheme")?;
    one_of(
        endpoint_scheme,
        "/endpoint_scheme",
        "endpoint_scheme",
        &["https", "http"],
    )?;
    let endpoint_host = text(record, "endpoint_host")?;
    let Some(Value::Object(policy)) = record.get("route_policy") else {
        return Err(refuse("/route_policy", "route_policy must be a mapping"));
    };
    let policy_digest = policy
        .get("policy_digest")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            refuse(
                "/route_policy/policy_digest",
                "route_policy/policy_digest must be a non-empty string",
            )
        })?;
    let data_class_max = policy
        .get("data_class_max")
        .and_then(Value::as_str)
        .unwrap_or("");
    one_of(
        data_class_max,
        "/route_policy/data_class_max",
        "data_class_max",
        &DATA_CLASSES,
    )?;
    let route_policy = RoutePolicy {
        policy_digest: policy_digest.to_string(),
        data_class_max: data_class_max.to_string(),
        allowed_providers: strings(policy, "allowed_providers")?,
        allowed_models: strings(policy, "allowed_models")?,
        allowed_regions: strings(policy, "allowed_regions")?,
    };
    let request_style = text(record, "request_style")?;
    one_of(
        request_style,
        "/request_style",
        "request_style",
        &REQUEST_STYLES,
    )?;
    Ok(AdmittedConnection {
        connection_id: text(record, "connection_id")?.to_string(),
        allowed_effect: allowed_effect.to_string(),
        credential_env_var_name: credential.to_string(),
        endpoint_scheme: endpoint_scheme.to_string(),
        endpoint_host: endpoint_host.to_string(),
        endpoint_path: endpoint_path.to_string(),
        expires_at: text(record, "expires_at")?.to_string(),
        request_style: request_style.to_string(),
        route_policy,
    })
}

/// Parses a whole `--admitted` file's JSON: `{connection_id: record}`. A
/// record filed under another connection's id is refused.
pub fn parse_admitted(
    value: &Value,
) -> Result<BTreeMap<String, AdmittedConnection>, AdmittedError> {
    let Value::Object(map) = value else {
        return Err(refuse(
            "/",
            "--admitted must be a JSON object mapping connection_id -> record",
        ));
    };
    let mut out = BTreeMap::new();
    for (id, record) in map {
        let parsed = parse_record(record)?;
        if parsed.connection_id != *id {
            return Err(refuse(
                "/connection_id",
                format!(
                    "the record filed under {id:?} names connection {:?}; file it under its own id",
                    parsed.connection_id
                ),
            ));
        }
        out.insert(id.clone(), parsed);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn record() -> Value {
        json!({
            "allowed_effect": "read_only", "connection_id": "c1",
            "credential_env_var_name": "MY_API_KEY", "endpoint_host": "api.example.com",
            "endpoint_path": "/v1/chat", "endpoint_scheme": "https",
            "expires_at": "2027-01-01T00:00:00Z", "request_style": "openai_chat",
            "route_policy": {"policy_digest": "sha256:22", "data_class_max": "public",
                "allowed_providers": ["anthropic"], "allowed_models": ["m"], "allowed_regions": ["eu"]}
        })
    }

    /// Each case: a change to a valid record and bounded-loops' message for it.
    #[test]
    fn refusals_match_bounded_loops_words() {
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "extra",
                json!(1),
                "[admitted_connection] /admitted_connection: admitted connection record has unknown fields: extra",
            ),
            (
                "allowed_effect",
                json!("bogus"),
                "[admitted_connection] /allowed_effect: allowed_effect must be one of ['read_only', 'workspace_write', 'external_write', 'financial', 'irreversible']",
            ),
            (
                "credential_env_var_name",
                json!("sk-abc"),
                "[secret_value] /admitted_connection/credential_env_var_name: credential_env_var_name must be an environment variable name (e.g. 'OPENAI_API_KEY'), not a secret value",
            ),
            (
                "endpoint_path",
                json!("v1"),
                "[admitted_connection] /endpoint_path: endpoint_path must begin with '/'",
            ),
            (
                "route_policy",
                json!("y"),
                "[admitted_connection] /route_policy: route_policy must be a mapping",
            ),
            (
                "route_policy",
                json!({}),
                "[admitted_connection] /route_policy/policy_digest: route_policy/policy_digest must be a non-empty string",
            ),
            (
                "route_policy",
                json!({"policy_digest": "d"}),
                "[admitted_connection] /route_policy/data_class_max: data_class_max must be one of ['public', 'internal', 'confidential', 'restricted']",
            ),
            (
                "route_policy",
                json!({"policy_digest": "d", "data_class_max": "public", "allowed_providers": []}),
                "[admitted_connection] /route_policy/allowed_providers: allowed_providers must contain at least one non-empty string",
            ),
            (
                "route_policy",
                json!({"policy_digest": "d", "data_class_max": "public", "allowed_providers": "a"}),
                "[admitted_connection] /route_policy/allowed_providers: allowed_providers must be a list of strings",
            ),
            (
                "request_style",
                json!("x"),
                "[admitted_connection] /request_style: request_style must be one of ['openai_chat']",
            ),
            (
                "expires_at",
                json!(5),
                "[admitted_connection] /expires_at: expires_at must be a non-empty string",
            ),
        ];
        for (field, value, expected) in cases {
            let mut changed = record();
            changed[field] = value;
            assert_eq!(
                parse_record(&changed).unwrap_err().to_string(),
                expected,
                "{field}"
            );
        }
        let mut missing = record();
        missing.as_object_mut().unwrap().clear();
        assert_eq!(
            parse_record(&missing).unwrap_err().to_string(),
            "[admitted_connection] /admitted_connection: admitted connection record is missing required fields: allowed_effect, connection_id, credential_env_var_name, endpoint_host, endpoint_path, endpoint_scheme, expires_at, request_style, route_policy"
        );
        assert_eq!(
            parse_admitted(&json!([1])).unwrap_err().message,
            "--admitted must be a JSON object mapping connection_id -> record"
        );
        let parsed = parse_admitted(&json!({"c1": record()})).unwrap();
        assert_eq!(
            parsed["c1"].endpoint_url(),
            "https://api.example.com/v1/chat"
        );
        assert!(parse_admitted(&json!({"c2": record()})).is_err());
    }
}
