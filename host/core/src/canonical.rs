//! Canonical JSON and digests.
//!
//! `canonical(v)`: object keys sorted by code point, separators `,` and `:`
//! with no spaces, non-ASCII written raw as UTF-8, no trailing newline. This is
//! the byte format every hashed record in bl (and in bounded-loops 0.7) uses.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The canonical bytes of a JSON value.
///
/// `serde_json::Map` is a `BTreeMap` here (the `preserve_order` feature is
/// off), and byte order of UTF-8 keys equals code-point order, so the compact
/// serializer already emits keys sorted as the format requires.
pub fn canonical_json(value: &Value) -> String {
    // Serializing a `Value` to a string cannot fail: keys are strings and
    // numbers are finite by construction.
    serde_json::to_string(value).expect("a serde_json::Value always serializes")
}

/// The canonical bytes of any serializable value.
pub fn canonical_json_of<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    // Going through `Value` sorts the keys of structs and maps alike.
    Ok(canonical_json(&serde_json::to_value(value)?))
}

/// Lower-case hex SHA-256 of some bytes, with no prefix (event and ledger hashes).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `sha256:` + hex(sha256(canonical(v))).
pub fn digest(value: &Value) -> String {
    crate::Sha256Digest::of(canonical_json(value).as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_and_separators_compact() {
        let v = json!({"b": 1, "a": [true, null, {"z": "x", "y": 2}]});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":[true,null,{"y":2,"z":"x"}],"b":1}"#
        );
    }

    #[test]
    fn non_ascii_is_raw_and_sorted_by_code_point() {
        // U+00E9 sorts after 'z' (U+007A); U+10000 sorts after U+FFFD.
        let v = json!({"é": "ü", "z": 1, "\u{10000}": 2, "\u{fffd}": 3});
        assert_eq!(
            canonical_json(&v),
            "{\"z\":1,\"é\":\"ü\",\"\u{fffd}\":3,\"\u{10000}\":2}"
        );
    }

    #[test]
    fn control_characters_are_escaped_like_python() {
        let v = json!("a\nb\u{1}\"\\");
        assert_eq!(canonical_json(&v), r#""a\nb\u0001\"\\""#);
    }

    #[test]
    fn non_ascii_is_escaped_as_python_does() {
        assert_eq!(
            ascii_escaped(r#"{"a":"é😀\u007f"}"#),
            r#"{"a":"\u00e9\ud83d\ude00\u007f"}"#
        );
        assert_eq!(ascii_escaped("{\"a\":\"\u{7f}\"}"), r#"{"a":"\u007f"}"#);
        assert_eq!(
            ascii_escaped("{\n  \"a\": \"—\"\n}"),
            "{\n  \"a\": \"\\u2014\"\n}"
        );
    }

    #[test]
    fn digest_of_empty_object_is_sha256_of_braces() {
        // sha256("{}")
        assert_eq!(
            digest(&json!({})),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}

/// Escapes every character above `~` (DEL and all of non-ASCII) as
/// `\uXXXX` (surrogate pairs above the BMP), as Python's `json.dumps` does
/// by default. JSON's structure is ASCII, so such characters only ever
/// occur inside strings, where the escape means the same character; the
/// control characters there are already escaped by the serializer, and
/// the layout's newlines stay as they are.
pub fn ascii_escaped(json: &str) -> String {
    if json.bytes().all(|b| b < 0x7f) {
        return json.to_string();
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if c < '\u{7f}' {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// JSON as Python's `json.dumps(v, sort_keys=True)` writes it: keys sorted,
/// `", "` and `": "` separators, and every non-ASCII character escaped as
/// `\uXXXX` (surrogate pairs above the BMP). bounded-loops' CLI prints its
/// `--json` output this way, so bl does too.
pub fn python_json(value: &Value) -> String {
    let mut out = String::new();
    write_python(value, &mut out);
    out
}

fn write_python(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_python_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_str(k, out);
                out.push_str(": ");
                write_python(v, out);
            }
            out.push('}');
        }
    }
}

fn write_python_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod python_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_json_matches_json_dumps_sort_keys() {
        let v = json!({"b": [1, null], "a": "é\u{1F600}\u{7f}"});
        assert_eq!(
            python_json(&v),
            r#"{"a": "\u00e9\ud83d\ude00\u007f", "b": [1, null]}"#
        );
    }
}
