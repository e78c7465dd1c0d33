//! A parsed manifest written back as YAML that bounded-loops reads to the
//! same values: block style, keys in document order, and every string that
//! a YAML 1.1 reader could take for something else (`yes`, `1_000`, a
//! date, a leading `-`) written double-quoted with JSON's escapes, which
//! are valid YAML.

use crate::doc::{Kind, Node};

/// The document as YAML text, ending in a newline.
pub fn to_yaml(doc: &Node) -> String {
    let mut out = String::new();
    match &doc.kind {
        Kind::Map(entries) if !entries.is_empty() => map(entries, 0, &mut out),
        Kind::Seq(items) if !items.is_empty() => seq(items, 0, &mut out),
        _ => {
            out.push_str(&scalar(doc));
            out.push('\n');
        }
    }
    out
}

fn map(entries: &[(String, Node)], indent: usize, out: &mut String) {
    for (i, (key, value)) in entries.iter().enumerate() {
        // The first entry of a map that is a sequence item sits on the
        // item's `- ` line, already indented.
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&string(key));
        out.push(':');
        child(value, indent, out);
    }
}

fn seq(items: &[Node], indent: usize, out: &mut String) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str("- ");
        match &item.kind {
            Kind::Map(entries) if !entries.is_empty() => map(entries, indent + 2, out),
            Kind::Seq(inner) if !inner.is_empty() => seq(inner, indent + 2, out),
            _ => {
                out.push_str(&scalar(item));
                out.push('\n');
            }
        }
    }
}

/// What follows `key:`: a scalar on the same line, or a nested block.
fn child(value: &Node, indent: usize, out: &mut String) {
    match &value.kind {
        Kind::Map(entries) if !entries.is_empty() => {
            out.push('\n');
            map(entries, indent + 2, out);
        }
        Kind::Seq(items) if !items.is_empty() => {
            out.push('\n');
            seq(items, indent + 2, out);
        }
        _ => {
            out.push(' ');
            out.push_str(&scalar(value));
            out.push('\n');
        }
    }
}

fn scalar(node: &Node) -> String {
    match &node.kind {
        Kind::Null | Kind::Other(_) => "null".into(),
        Kind::Bool(b) => b.to_string(),
        Kind::Int(i) => i.to_string(),
        Kind::Float(f) => float(*f),
        Kind::Str(s) => string(s),
        Kind::Seq(_) => "[]".into(),
        Kind::Map(_) => "{}".into(),
    }
}

/// A float as YAML 1.1 reads one back: it needs a `.` and a signed
/// exponent (`1e5` is a string there).
fn float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let text = format!("{f:?}");
    match text.split_once('e') {
        Some((mantissa, exp)) => {
            let mantissa = if mantissa.contains('.') {
                mantissa.to_string()
            } else {
                format!("{mantissa}.0")
            };
            let exp = if exp.starts_with('-') {
                exp.to_string()
            } else {
                format!("+{exp}")
            };
            format!("{mantissa}e{exp}")
        }
        None => text,
    }
}

/// Plain when it is a word that no YAML 1.1 reader takes for anything
/// but a string; else double-quoted with JSON's escapes.
fn string(s: &str) -> String {
    const WORDS: &[&str] = &["y", "n", "yes", "no", "true", "false", "on", "off", "null"];
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !WORDS.contains(&s.to_ascii_lowercase().as_str());
    if plain {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}
