//! How bounded-loops (Python) spells things, so that bl's messages and
//! JSON match its output byte for byte: `repr` of strings and lists,
//! `json.dumps(sort_keys=True)`, `pathlib` paths, type names, and the words
//! of Python's OS and UTF-8 errors. Pure functions, in one place.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

pub use crate::canonical::python_json as json;

/// Python's `repr` of a string, as upstream's messages quote values.
pub fn repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr` of a list of strings.
pub fn list_repr(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| repr(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// Python's name for the type of a JSON value (`dict`, `list`, `NoneType`, …).
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's rendering of an OS error, as upstream prints it.
pub fn os_error(error: &std::io::Error, path: &Path) -> String {
    let text = error.to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    match error.raw_os_error() {
        Some(code) => format!(
            "[Errno {code}] {text}: {}",
            repr(&path.display().to_string())
        ),
        None => text,
    }
}

/// A UTF-8 decoding error in Python's words (bounded-loops reports the
/// `UnicodeDecodeError` as the `io_error` message): the offending byte or
/// bytes, their position, and why.
pub fn utf8_error(bytes: &[u8], error: std::str::Utf8Error) -> String {
    let at = error.valid_up_to();
    let (len, reason) = match error.error_len() {
        None => (bytes.len() - at, "unexpected end of data"),
        Some(1) if !(0xc2..=0xf4).contains(&bytes[at]) => (1, "invalid start byte"),
        Some(len) => (len, "invalid continuation byte"),
    };
    if len == 1 {
        format!(
            "'utf-8' codec can't decode byte 0x{:02x} in position {at}: {reason}",
            bytes[at]
        )
    } else {
        format!(
            "'utf-8' codec can't decode bytes in position {at}-{}: {reason}",
            at + len - 1
        )
    }
}

/// `path` as `pathlib.Path` normalises it: `.` components, empty components
/// and trailing slashes dropped, `..` kept; nothing left is `.`.
pub fn pathlib_normal(path: &Path) -> PathBuf {
    let normal: PathBuf = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if normal.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        normal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_quotes_as_python_does() {
        assert_eq!(repr("a'b"), "\"a'b\"");
        assert_eq!(repr("a\nb"), "'a\\nb'");
        assert_eq!(list_repr(&["x".into(), "y".into()]), "['x', 'y']");
        assert_eq!(type_name(&serde_json::json!({})), "dict");
    }

    #[test]
    fn normalises_like_pathlib() {
        for (given, shown) in [
            ("./root/p1/", "root/p1"),
            ("a//b/./c", "a/b/c"),
            ("/tmp/../x", "/tmp/../x"),
            ("./", "."),
            ("ledger.jsonl", "ledger.jsonl"),
        ] {
            assert_eq!(pathlib_normal(Path::new(given)), Path::new(shown));
        }
    }
}
