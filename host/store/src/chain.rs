//! The event line format and chain verification, over bytes (no I/O).
//!
//! A line is the canonical JSON of exactly 15 keys. `event_hash` is the hex
//! sha256 of the canonical JSON of the same object without `event_hash`;
//! `previous_hash` is the previous line's `event_hash` (64 zeros first);
//! `sequence` counts from 1 without gaps; `event_id` and `idempotency_key`
//! are `<run_id>:<key>`; the identity fields are the same on every line.

use std::collections::HashMap;

use serde_json::Value;

pub use crate::line::EVENT_KEYS;
use crate::line::{self, ScannedLine, field};

pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

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
    /// idempotency_key → byte offset of its line, so a writer can read the
    /// recorded line back when a key is appended again.
    pub keys: HashMap<String, u64, foldhash::fast::RandomState>,
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
    match line::scan(line) {
        Some(scanned) => verify_scanned(head, line_no, line.len(), &scanned),
        None => verify_parsed(head, line_no, line),
    }
}

/// What both readers hand to [`check_and_advance`] once the hash holds:
/// each field as text, `None` where the line does not have it in the right
/// type.
struct Fields<'a> {
    previous_hash: Option<&'a str>,
    sequence: Option<u64>,
    /// In [`IDENTITY_KEYS`] order; `None` unless all six are strings.
    identity: Option<[&'a str; 6]>,
    idempotency_key: Option<&'a str>,
    event_id: Option<&'a str>,
    timestamp: Option<&'a str>,
    event_type_is_text: bool,
}

/// The chain rules after the hash: the line follows the head, carries the
/// run's identity and a new key. Advances the head when they hold.
fn check_and_advance(
    head: &mut ChainHead,
    line_no: usize,
    line_len: usize,
    hash: &str,
    fields: Fields<'_>,
) -> Result<(), ChainError> {
    let expected_prev = if head.sequence == 0 {
        GENESIS_HASH
    } else {
        head.hash.as_str()
    };
    if fields.previous_hash != Some(expected_prev) {
        return fail(
            line_no,
            "previous_hash",
            format!("does not chain to the previous line ({expected_prev})"),
        );
    }
    if fields.sequence != Some(head.sequence + 1) {
        return fail(
            line_no,
            "sequence",
            format!("expected {}", head.sequence + 1),
        );
    }
    let Some(identity) = fields.identity else {
        return fail(line_no, "run_id", "identity fields must be strings");
    };
    if let Some(first) = &head.identity {
        for (key, value) in IDENTITY_KEYS.iter().zip(identity) {
            if first.get(key) != value {
                return fail(
                    line_no,
                    field_name(key),
                    format!("differs from line 1 ({})", first.get(key)),
                );
            }
        }
    }
    let run_id = identity[2];
    let Some(key) = fields.idempotency_key else {
        return fail(line_no, "idempotency_key", "not a string");
    };
    if !key
        .strip_prefix(run_id)
        .is_some_and(|rest| rest.starts_with(':'))
    {
        return fail(line_no, "idempotency_key", "must start with <run_id>:");
    }
    if fields.event_id != Some(key) {
        return fail(line_no, "event_id", "must equal idempotency_key");
    }
    if !fields.timestamp.is_some_and(is_timestamp) {
        return fail(line_no, "timestamp", "must be %Y-%m-%dT%H:%M:%SZ");
    }
    if !fields.event_type_is_text {
        return fail(line_no, "event_type", "not a string");
    }
    if head
        .keys
        .insert(key.to_string(), head.verified_len)
        .is_some()
    {
        return fail(line_no, "idempotency_key", format!("{key} appears twice"));
    }
    head.sequence += 1;
    // Reuse the buffer: one allocation for the whole log, not one per line.
    head.hash.clear();
    head.hash.push_str(hash);
    head.identity.get_or_insert_with(|| RunIdentity {
        organization_id: identity[0].to_string(),
        project_id: identity[1].to_string(),
        run_id: identity[2].to_string(),
        graph_digest: identity[3].to_string(),
        plan_digest: identity[4].to_string(),
        policy_digest: identity[5].to_string(),
    });
    head.verified_len += line_len as u64 + 1;
    Ok(())
}

fn hash_mismatch(line_no: usize, claimed: &str, computed: &str) -> Result<(), ChainError> {
    fail(
        line_no,
        "event_hash",
        format!("is {claimed}, but the line hashes to {computed}"),
    )
}

/// A line [`line::scan`] read in place.
fn verify_scanned(
    head: &mut ChainHead,
    line_no: usize,
    line_len: usize,
    scanned: &ScannedLine<'_>,
) -> Result<(), ChainError> {
    let text = |index: usize| {
        // The scanner only returns slices of a UTF-8 line, cut at ASCII quotes.
        std::str::from_utf8(scanned.fields[index]).expect("scanned fields are UTF-8")
    };
    let claimed = text(field::EVENT_HASH);
    let mut computed_hex = [0u8; 64];
    hex::encode_to_slice(scanned.computed_hash, &mut computed_hex).expect("64 bytes for 32");
    let computed = std::str::from_utf8(&computed_hex).expect("hex is ASCII");
    if claimed != computed {
        return hash_mismatch(line_no, claimed, computed);
    }
    let fields = Fields {
        previous_hash: Some(text(field::PREVIOUS_HASH)),
        sequence: text(field::SEQUENCE).parse().ok(),
        identity: Some([
            text(field::ORGANIZATION_ID),
            text(field::PROJECT_ID),
            text(field::RUN_ID),
            text(field::GRAPH_DIGEST),
            text(field::PLAN_DIGEST),
            text(field::POLICY_DIGEST),
        ]),
        idempotency_key: Some(text(field::IDEMPOTENCY_KEY)),
        event_id: Some(text(field::EVENT_ID)),
        timestamp: Some(text(field::TIMESTAMP)),
        event_type_is_text: true,
    };
    check_and_advance(head, line_no, line_len, computed, fields)
}

/// The full parser: any line, canonical or not, with the first problem named.
fn verify_parsed(head: &mut ChainHead, line_no: usize, line: &[u8]) -> Result<(), ChainError> {
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
        return hash_mismatch(line_no, &claimed, &computed);
    }
    let text_of = |key: &str| event[key].as_str();
    let identity = IDENTITY_KEYS.map(text_of);
    let fields = Fields {
        previous_hash: text_of("previous_hash"),
        sequence: event["sequence"].as_u64(),
        identity: identity
            .iter()
            .all(Option::is_some)
            .then(|| identity.map(Option::unwrap_or_default)),
        idempotency_key: text_of("idempotency_key"),
        event_id: text_of("event_id"),
        timestamp: text_of("timestamp"),
        event_type_is_text: event["event_type"].is_string(),
    };
    check_and_advance(head, line_no, line.len(), &computed, fields)
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

/// Logs at least this long are verified on several threads.
const PARALLEL_MIN_BYTES: usize = 1 << 20;

/// Verifies a whole log. A final line without its newline is a torn tail,
/// reported separately so a caller can decide (it is never dropped here).
pub fn verify_chain(bytes: &[u8]) -> Result<(ChainHead, Option<TornTail>), ChainError> {
    let whole_len = memchr::memrchr(b'\n', bytes).map_or(0, |at| at + 1);
    let (whole, tail) = bytes.split_at(whole_len);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    let head = match (whole.len() >= PARALLEL_MIN_BYTES && threads > 1)
        .then(|| verify_in_parallel(whole, threads))
        .flatten()
    {
        Some(head) => head,
        // One thread, or something is wrong: the sequential pass finds the
        // first broken line and names it.
        None => verify_sequentially(whole)?,
    };
    let torn = (!tail.is_empty()).then(|| TornTail {
        line: head.sequence as usize + 1,
        offset: whole_len as u64,
        len: tail.len(),
    });
    Ok((head, torn))
}

fn verify_sequentially(whole: &[u8]) -> Result<ChainHead, ChainError> {
    let mut head = ChainHead::default();
    let mut start = 0;
    for (index, len) in memchr::memchr_iter(b'\n', whole).enumerate() {
        verify_line(&mut head, index + 1, &whole[start..len])?;
        start = len + 1;
    }
    Ok(head)
}

/// Verifies newline-aligned slices of the log on `threads` threads, each
/// from its own first line, then joins them: each slice must continue the
/// previous one's hash, sequence and identity, and no key may repeat.
/// `None` means "not shown valid"; the caller then verifies sequentially.
fn verify_in_parallel(whole: &[u8], threads: usize) -> Option<ChainHead> {
    let mut slices = Vec::with_capacity(threads);
    let mut start = 0;
    for part in 1..=threads {
        let target = whole.len() * part / threads;
        let end = if part == threads {
            whole.len()
        } else {
            match memchr::memchr(b'\n', &whole[target.max(start)..]) {
                Some(at) => target.max(start) + at + 1,
                None => whole.len(),
            }
        };
        if end > start {
            slices.push(&whole[start..end]);
        }
        start = end;
    }
    let verified: Vec<Option<VerifiedSlice>> = std::thread::scope(|scope| {
        let workers: Vec<_> = slices
            .iter()
            .map(|slice| scope.spawn(move || verify_slice(slice)))
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().ok().flatten())
            .collect()
    });
    let mut joined = ChainHead::default();
    for slice in verified {
        let slice = slice?;
        let continues = if joined.sequence == 0 {
            GENESIS_HASH
        } else {
            joined.hash.as_str()
        };
        if slice.after_sequence != joined.sequence || slice.after_hash != continues {
            return None;
        }
        if let Some(identity) = &joined.identity
            && *identity != slice.identity
        {
            return None;
        }
        joined.identity.get_or_insert(slice.identity);
        joined.sequence = slice.head.sequence;
        joined.hash = slice.head.hash;
        let slice_len = slice.head.verified_len;
        let expected = joined.keys.len() + slice.head.keys.len();
        if joined.keys.is_empty() {
            joined.keys = slice.head.keys;
        } else {
            // The slice's offsets count from its own start.
            let base = joined.verified_len;
            joined.keys.reserve(slice.head.keys.len());
            joined.keys.extend(
                slice
                    .head
                    .keys
                    .into_iter()
                    .map(|(key, at)| (key, base + at)),
            );
        }
        if joined.keys.len() != expected {
            return None;
        }
        joined.verified_len += slice_len;
    }
    Some(joined)
}

struct VerifiedSlice {
    /// The sequence and hash the slice's first line claims to follow.
    after_sequence: u64,
    after_hash: String,
    /// The identity on the slice's lines.
    identity: RunIdentity,
    /// The slice's own head: its last sequence and hash, its keys, its length.
    head: ChainHead,
}

/// One slice of a parallel verification: its own lines, starting from
/// whatever hash and sequence its first line claims to continue. Returns
/// the slice's head (with only this slice's keys and length) and the
/// identity of its first line, or `None` if anything in it is wrong.
fn verify_slice(slice: &[u8]) -> Option<VerifiedSlice> {
    let first = &slice[..memchr::memchr(b'\n', slice)?];
    let scanned = line::scan(first)?;
    let text = |index: usize| std::str::from_utf8(scanned.fields[index]).ok();
    let sequence: u64 = text(field::SEQUENCE)?.parse().ok()?;
    let after_hash = text(field::PREVIOUS_HASH)?.to_string();
    let identity = RunIdentity {
        organization_id: text(field::ORGANIZATION_ID)?.to_string(),
        project_id: text(field::PROJECT_ID)?.to_string(),
        run_id: text(field::RUN_ID)?.to_string(),
        graph_digest: text(field::GRAPH_DIGEST)?.to_string(),
        plan_digest: text(field::PLAN_DIGEST)?.to_string(),
        policy_digest: text(field::POLICY_DIGEST)?.to_string(),
    };
    let mut head = ChainHead {
        sequence: sequence.checked_sub(1)?,
        hash: after_hash.clone(),
        identity: Some(identity.clone()),
        ..ChainHead::default()
    };
    // Lines of one log are about the same length; growing the key map line
    // by line would rehash it again and again.
    head.keys.reserve(slice.len() / (first.len() + 1) + 1);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', slice) {
        // Line numbers are only for messages, and a failure here is
        // re-checked sequentially, which numbers lines properly.
        verify_line(&mut head, 0, &slice[start..end]).ok()?;
        start = end + 1;
    }
    Some(VerifiedSlice {
        after_sequence: sequence - 1,
        after_hash,
        identity,
        head,
    })
}

/// Builds one event line (without its newline) that follows `head`.
///
/// The line is written directly in canonical form: its keys are fixed and
/// their sorted order is known, so only the payload goes through the
/// generic serializer, and the hash (over the line without `event_hash`)
/// and the line share every byte after the `event_hash` slot.
pub fn build_line(
    head: &ChainHead,
    identity: &RunIdentity,
    key: &str,
    event_type: &str,
    payload: &Value,
    timestamp: &str,
) -> (String, String) {
    use sha2::Digest;
    const PREFIX: &str = r#"{"actor":"graph-controller","#;
    let id = format!("{}:{key}", identity.run_id);
    let previous = if head.sequence == 0 {
        GENESIS_HASH
    } else {
        head.hash.as_str()
    };
    let mut tail = Vec::with_capacity(768);
    let mut field = |name: &str, value: &dyn erased::Json| {
        if !tail.is_empty() {
            tail.push(b',');
        }
        tail.push(b'"');
        tail.extend_from_slice(name.as_bytes());
        tail.extend_from_slice(b"\":");
        value.write(&mut tail);
    };
    // In canonical (sorted) key order; `actor` and `event_hash` come first.
    field("event_id", &id.as_str());
    field("event_type", &event_type);
    field("graph_digest", &identity.graph_digest.as_str());
    field("idempotency_key", &id.as_str());
    field("organization_id", &identity.organization_id.as_str());
    field("payload", payload);
    field("plan_digest", &identity.plan_digest.as_str());
    field("policy_digest", &identity.policy_digest.as_str());
    field("previous_hash", &previous);
    field("project_id", &identity.project_id.as_str());
    field("run_id", &identity.run_id.as_str());
    field("sequence", &(head.sequence + 1));
    field("timestamp", &timestamp);
    tail.push(b'}');
    let hash = hex::encode(
        sha2::Sha256::new()
            .chain_update(PREFIX.as_bytes())
            .chain_update(&tail)
            .finalize(),
    );
    let mut line = String::with_capacity(PREFIX.len() + 80 + tail.len());
    line.push_str(PREFIX);
    line.push_str(r#""event_hash":""#);
    line.push_str(&hash);
    line.push_str("\",");
    // The tail is serde_json output of strings, numbers and a Value: UTF-8.
    line.push_str(std::str::from_utf8(&tail).expect("serde_json writes UTF-8"));
    (line, hash)
}

/// The values an event line holds, each written as canonical JSON.
mod erased {
    pub trait Json {
        fn write(&self, out: &mut Vec<u8>);
    }

    impl Json for &str {
        fn write(&self, out: &mut Vec<u8>) {
            serde_json::to_writer(out, self).expect("a string always serializes");
        }
    }

    impl Json for u64 {
        fn write(&self, out: &mut Vec<u8>) {
            serde_json::to_writer(out, self).expect("a number always serializes");
        }
    }

    impl Json for serde_json::Value {
        fn write(&self, out: &mut Vec<u8>) {
            serde_json::to_writer(out, self).expect("a serde_json::Value always serializes");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The line as the generic canonical serializer writes it: the
    /// reference `build_line`'s direct writing must equal, byte for byte.
    fn generic_line(
        head: &ChainHead,
        id: &RunIdentity,
        key: &str,
        kind: &str,
        payload: &Value,
        ts: &str,
    ) -> (String, String) {
        let event_id = format!("{}:{key}", id.run_id);
        let previous = if head.sequence == 0 {
            GENESIS_HASH.to_string()
        } else {
            head.hash.clone()
        };
        let mut event = json!({
            "actor": "graph-controller", "event_id": event_id, "event_type": kind,
            "graph_digest": id.graph_digest, "idempotency_key": event_id,
            "organization_id": id.organization_id, "payload": payload,
            "plan_digest": id.plan_digest, "policy_digest": id.policy_digest,
            "previous_hash": previous, "project_id": id.project_id, "run_id": id.run_id,
            "sequence": head.sequence + 1, "timestamp": ts,
        });
        let hash = bl_core::sha256_hex(bl_core::canonical_json(&event).as_bytes());
        event["event_hash"] = Value::from(hash.clone());
        (bl_core::canonical_json(&event), hash)
    }

    #[test]
    fn built_lines_equal_the_generic_canonical_form() {
        let id = identity();
        let mut head = ChainHead::default();
        let payloads = [
            json!({}),
            json!({"node_id": "n\u{e9}\"q\\", "attempt": 2, "nested": {"b": [1, null, true], "a": 1.5}}),
            json!({"reason": "line\nbreak \u{1} \u{10000}"}),
        ];
        for (i, payload) in payloads.iter().enumerate() {
            let key = format!("n{i}:node.ready");
            let built = build_line(
                &head,
                &id,
                &key,
                "node.ready",
                payload,
                "2026-12-01T00:00:00Z",
            );
            let generic = generic_line(
                &head,
                &id,
                &key,
                "node.ready",
                payload,
                "2026-12-01T00:00:00Z",
            );
            assert_eq!(built, generic);
            head.sequence += 1;
            head.hash = built.1;
        }
    }

    fn identity() -> RunIdentity {
        RunIdentity {
            organization_id: "org".into(),
            project_id: "project".into(),
            run_id: "run-1".into(),
            graph_digest: format!("sha256:{}", "1".repeat(64)),
            plan_digest: format!("sha256:{}", "2".repeat(64)),
            policy_digest: format!("sha256:{}", "a".repeat(64)),
        }
    }

    /// Payloads meant to walk every branch of the in-place reader, and some
    /// that must send a line to the full parser.
    fn payloads() -> Vec<Value> {
        vec![
            json!({}),
            json!({"node_id": "a", "tokens": 12, "ok": true, "none": null, "neg": -7}),
            json!({"text": "quote \" backslash \\ newline \n tab \t cr \r bell \u{7} del \u{7f}"}),
            json!({"unicode": "é ü \u{2028} \u{10000}", "é": 1, "z": 2}),
            json!({"nested": [[], {}, [1, [2, {"a": [3]}]], {"b": {"c": "d"}}]}),
            json!({"big": 123456789012345678u64, "negative": -123456789012345678i64}),
            json!({"bigger": u64::MAX, "min": i64::MIN}),
            json!({"float": 1.5, "exp": 1e300}),
            json!({"key\nwith escape": 1}),
            json!("a string payload"),
            json!([1, "two", null]),
        ]
    }

    fn sample_log() -> Vec<u8> {
        let mut head = ChainHead::default();
        let mut bytes = Vec::new();
        for (n, payload) in payloads().iter().enumerate() {
            let (line, _) = build_line(
                &head,
                &identity(),
                &format!("k{n}"),
                "node.spend",
                payload,
                "2026-11-30T01:00:00Z",
            );
            verify_line(&mut head, n + 1, line.as_bytes()).unwrap();
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        bytes
    }

    /// Verifies with the full parser only, as the reference.
    fn verify_parsed_only(bytes: &[u8]) -> Result<ChainHead, ChainError> {
        let mut head = ChainHead::default();
        for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            verify_parsed(&mut head, n + 1, line)?;
        }
        Ok(head)
    }

    fn verify_fast(bytes: &[u8]) -> Result<ChainHead, ChainError> {
        let mut head = ChainHead::default();
        for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            verify_line(&mut head, n + 1, line)?;
        }
        Ok(head)
    }

    #[test]
    fn the_in_place_reader_takes_plain_lines_and_defers_the_rest() {
        let log = sample_log();
        let scanned: Vec<bool> = log
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| line::scan(l).is_some())
            .collect();
        // Integers near the type limits, floats, a key with an escape: the
        // full parser's job.
        assert_eq!(
            scanned,
            [
                true, true, true, true, true, true, false, false, false, true, true
            ]
        );
    }

    #[test]
    fn both_readers_agree_on_every_single_byte_change() {
        let log = sample_log();
        assert_eq!(verify_fast(&log), verify_parsed_only(&log));
        let replacements = [b'"', b'\\', b'0', 0xc3];
        let mut compared = 0;
        for at in 0..log.len() {
            if log[at] == b'\n' {
                continue;
            }
            for with in replacements.iter().copied().chain([log[at] ^ 0x01]) {
                if with == log[at] || with == b'\n' {
                    continue;
                }
                let mut changed = log.clone();
                changed[at] = with;
                let fast = verify_fast(&changed);
                let reference = verify_parsed_only(&changed);
                assert_eq!(fast, reference, "byte {at} set to {with:#x}");
                assert!(fast.is_err(), "byte {at} set to {with:#x} went unnoticed");
                compared += 1;
            }
        }
        assert!(compared > 10_000);
    }

    /// A log long enough to be verified on several threads; `key_of` picks
    /// each line's idempotency key.
    fn long_log(lines: usize, key_of: impl Fn(usize) -> String) -> Vec<u8> {
        let mut head = ChainHead::default();
        let mut bytes = Vec::new();
        for n in 0..lines {
            let payload =
                json!({"node_id": format!("n{}", n % 7), "tokens": n, "note": "x".repeat(300)});
            let (line, hash) = build_line(
                &head,
                &identity(),
                &key_of(n),
                "node.spend",
                &payload,
                "2026-11-30T01:00:00Z",
            );
            head.sequence += 1;
            head.hash = hash;
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        bytes
    }

    #[test]
    fn threads_and_one_pass_agree_on_long_logs() {
        let log = long_log(6000, |n| format!("k{n}"));
        assert!(log.len() > 2 * PARALLEL_MIN_BYTES);
        let (head, torn) = verify_chain(&log).unwrap();
        assert_eq!(torn, None);
        assert_eq!(head, verify_sequentially(&log).unwrap());
        assert_eq!(head.sequence, 6000);

        // Damage near every place the log could be cut into slices, and
        // elsewhere: the first broken line is named as one pass names it.
        let len = log.len();
        let mut places: Vec<usize> = (1..=8)
            .flat_map(|threads| (1..threads).map(move |part| len * part / threads))
            .flat_map(|at| [at.saturating_sub(700), at, at + 1, at + 500])
            .collect();
        places.extend([0, 17, log.len() - 2]);
        for at in places {
            let mut changed = log.clone();
            changed[at] = if changed[at] == b'\n' {
                b' '
            } else {
                changed[at] ^ 0x01
            };
            let threaded = verify_chain(&changed).map(|(head, _)| head);
            assert!(threaded.is_err(), "a change at byte {at} went unnoticed");
            assert_eq!(threaded, verify_sequentially(&changed), "byte {at}");
        }

        // A key recorded in one slice and again in another.
        let repeated = long_log(6000, |n| format!("k{}", if n == 5000 { 10 } else { n }));
        assert_eq!(
            verify_chain(&repeated).unwrap_err(),
            ChainError {
                line: 5001,
                field: "idempotency_key",
                message: "run-1:k10 appears twice".into()
            }
        );

        // A torn tail after many lines is still reported with its line.
        let mut torn_log = log.clone();
        torn_log.extend_from_slice(b"{\"actor\":");
        let (head, torn) = verify_chain(&torn_log).unwrap();
        assert_eq!(head.sequence, 6000);
        assert_eq!(torn.unwrap().line, 6001);
    }
}
