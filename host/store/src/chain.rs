//! The event line format and chain verification, over bytes (no I/O).
//!
//! A line is the canonical JSON of exactly 15 keys. `event_hash` is the hex
//! sha256 of the canonical JSON of the same object without `event_hash`;
//! `previous_hash` is the previous line's `event_hash` (64 zeros first);
//! `sequence` counts from 1 without gaps; `event_id` and `idempotency_key`
//! are `<run_id>:<key>`; the identity fields are the same on every line.

use std::collections::HashMap;

use serde_json::{Map, Value};

pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

pub const EVENT_KEYS: [&str; 15] = [
    "actor",
    "event_hash",
    "event_id",
    "event_type",
    "graph_digest",
    "idempotency_key",
    "organization_id",
    "payload",
    "plan_digest",
    "policy_digest",
    "previous_hash",
    "project_id",
    "run_id",
    "sequence",
    "timestamp",
];

const IDENTITY_KEYS: [&str; 6] = [
    "organization_id",
    "project_id",
    "run_id",
    "graph_digest",
    "plan_digest",
    "policy_digest",
];

/// Who a run is: the fields every event line carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunIdentity {
    pub organization_id: String,
    pub project_id: String,
    pub run_id: String,
    pub graph_digest: String,
    pub plan_digest: String,
    pub policy_digest: String,
}

impl RunIdentity {
    fn get(&self, key: &str) -> &str {
        match key {
            "organization_id" => &self.organization_id,
            "project_id" => &self.project_id,
            "run_id" => &self.run_id,
            "graph_digest" => &self.graph_digest,
            "plan_digest" => &self.plan_digest,
            _ => &self.policy_digest,
        }
    }

    fn from_event(event: &Map<String, Value>) -> Option<Self> {
        let s = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_string);
        Some(RunIdentity {
            organization_id: s("organization_id")?,
            project_id: s("project_id")?,
            run_id: s("run_id")?,
            graph_digest: s("graph_digest")?,
            plan_digest: s("plan_digest")?,
            policy_digest: s("policy_digest")?,
        })
    }
}

/// The first thing wrong with a log: 1-based line, the field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, field {field}: {message}")]
pub struct ChainError {
    pub line: usize,
    pub field: &'static str,
    pub message: String,
}

/// What a verified log ends with; enough to append in O(1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChainHead {
    pub sequence: u64,
    pub hash: String,
    pub identity: Option<RunIdentity>,
    /// idempotency_key → (event_type, canonical payload) of every line.
    pub keys: HashMap<String, (String, String)>,
    /// Byte length of the verified, newline-terminated prefix.
    pub verified_len: u64,
}

fn fail<T>(line: usize, field: &'static str, message: impl Into<String>) -> Result<T, ChainError> {
    Err(ChainError {
        line,
        field,
        message: message.into(),
    })
}

fn is_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Checks one complete line against the head so far, and advances the head.
pub fn verify_line(head: &mut ChainHead, line_no: usize, line: &[u8]) -> Result<(), ChainError> {
    let text = std::str::from_utf8(line).map_err(|_| ChainError {
        line: line_no,
        field: "-",
        message: "not UTF-8".into(),
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| ChainError {
        line: line_no,
        field: "-",
        message: format!("not JSON: {e}"),
    })?;
    let Value::Object(mut event) = value else {
        return fail(line_no, "-", "not a JSON object");
    };
    for key in EVENT_KEYS {
        if !event.contains_key(key) {
            return fail(line_no, key, "missing");
        }
    }
    if event.len() != EVENT_KEYS.len() {
        return fail(
            line_no,
            "-",
            format!("has {} keys, the format has exactly 15", event.len()),
        );
    }
    if bl_core::canonical_json(&Value::Object(event.clone())) != text {
        return fail(line_no, "-", "not canonical JSON (keys sorted, no spaces)");
    }
    let Some(Value::String(claimed)) = event.remove("event_hash") else {
        return fail(line_no, "event_hash", "not a string");
    };
    let computed =
        bl_core::sha256_hex(bl_core::canonical_json(&Value::Object(event.clone())).as_bytes());
    if claimed != computed {
        return fail(
            line_no,
            "event_hash",
            format!("is {claimed}, but the line hashes to {computed}"),
        );
    }
    let expected_prev = if head.sequence == 0 {
        GENESIS_HASH
    } else {
        head.hash.as_str()
    };
    if event["previous_hash"].as_str() != Some(expected_prev) {
        return fail(
            line_no,
            "previous_hash",
            format!("does not chain to the previous line ({expected_prev})"),
        );
    }
    if event["sequence"].as_u64() != Some(head.sequence + 1) {
        return fail(
            line_no,
            "sequence",
            format!("expected {}", head.sequence + 1),
        );
    }
    let identity = RunIdentity::from_event(&event).ok_or(ChainError {
        line: line_no,
        field: "run_id",
        message: "identity fields must be strings".into(),
    })?;
    if let Some(first) = &head.identity {
        for key in IDENTITY_KEYS {
            if first.get(key) != identity.get(key) {
                return fail(
                    line_no,
                    field_name(key),
                    format!("differs from line 1 ({})", first.get(key)),
                );
            }
        }
    }
    let Some(key) = event["idempotency_key"].as_str() else {
        return fail(line_no, "idempotency_key", "not a string");
    };
    if !key.starts_with(&format!("{}:", identity.run_id)) {
        return fail(line_no, "idempotency_key", "must start with <run_id>:");
    }
    if event["event_id"].as_str() != Some(key) {
        return fail(line_no, "event_id", "must equal idempotency_key");
    }
    if !event["timestamp"].as_str().is_some_and(is_timestamp) {
        return fail(line_no, "timestamp", "must be %Y-%m-%dT%H:%M:%SZ");
    }
    let Some(event_type) = event["event_type"].as_str() else {
        return fail(line_no, "event_type", "not a string");
    };
    let content = (
        event_type.to_string(),
        bl_core::canonical_json(&event["payload"]),
    );
    if head.keys.insert(key.to_string(), content).is_some() {
        return fail(line_no, "idempotency_key", format!("{key} appears twice"));
    }
    head.sequence += 1;
    head.hash = claimed;
    head.identity.get_or_insert(identity);
    head.verified_len += line.len() as u64 + 1;
    Ok(())
}

fn field_name(key: &str) -> &'static str {
    IDENTITY_KEYS
        .iter()
        .find(|k| **k == key)
        .copied()
        .unwrap_or("-")
}

/// Where a log stops being complete: the bytes after the last newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// 1-based number the incomplete line would have.
    pub line: usize,
    pub offset: u64,
    pub len: usize,
}

/// Verifies a whole log. A final line without its newline is a torn tail,
/// reported separately so a caller can decide (it is never dropped here).
pub fn verify_chain(bytes: &[u8]) -> Result<(ChainHead, Option<TornTail>), ChainError> {
    let mut head = ChainHead::default();
    let mut start = 0usize;
    let mut line_no = 0usize;
    while start < bytes.len() {
        line_no += 1;
        let Some(len) = bytes[start..].iter().position(|b| *b == b'\n') else {
            let tail = TornTail {
                line: line_no,
                offset: start as u64,
                len: bytes.len() - start,
            };
            return Ok((head, Some(tail)));
        };
        verify_line(&mut head, line_no, &bytes[start..start + len])?;
        start += len + 1;
    }
    Ok((head, None))
}

/// Builds one event line (without its newline) that follows `head`.
pub fn build_line(
    head: &ChainHead,
    identity: &RunIdentity,
    key: &str,
    event_type: &str,
    payload: &Value,
    timestamp: &str,
) -> (String, String) {
    let id = format!("{}:{key}", identity.run_id);
    let previous = if head.sequence == 0 {
        GENESIS_HASH.to_string()
    } else {
        head.hash.clone()
    };
    let mut event = Map::new();
    event.insert("actor".into(), Value::from("graph-controller"));
    event.insert("event_id".into(), Value::from(id.clone()));
    event.insert("event_type".into(), Value::from(event_type));
    event.insert(
        "graph_digest".into(),
        Value::from(identity.graph_digest.clone()),
    );
    event.insert("idempotency_key".into(), Value::from(id));
    event.insert(
        "organization_id".into(),
        Value::from(identity.organization_id.clone()),
    );
    event.insert("payload".into(), payload.clone());
    event.insert(
        "plan_digest".into(),
        Value::from(identity.plan_digest.clone()),
    );
    event.insert(
        "policy_digest".into(),
        Value::from(identity.policy_digest.clone()),
    );
    event.insert("previous_hash".into(), Value::from(previous));
    event.insert(
        "project_id".into(),
        Value::from(identity.project_id.clone()),
    );
    event.insert("run_id".into(), Value::from(identity.run_id.clone()));
    event.insert("sequence".into(), Value::from(head.sequence + 1));
    event.insert("timestamp".into(), Value::from(timestamp));
    let mut value = Value::Object(event);
    let hash = bl_core::sha256_hex(bl_core::canonical_json(&value).as_bytes());
    value["event_hash"] = Value::from(hash.clone());
    (bl_core::canonical_json(&value), hash)
}
