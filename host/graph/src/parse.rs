//! Reading a manifest's text into a [`Node`] tree.
//!
//! JSON follows Python's `json` module (what bounded-loops 0.7 reads with):
//! the same error names, `NaN`/`Infinity` accepted, integers unbounded, and
//! duplicate keys refused. YAML follows PyYAML's safe loader: YAML 1.1
//! scalars (`yes`/`no`/`on`/`off` are booleans, `0x10` and `1_000` are
//! integers, dates are timestamps), one document only, string keys only and
//! duplicate keys refused.

use std::sync::LazyLock;

use regex::Regex;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use crate::doc::{Kind, Node, Pos, py_repr};

/// Why a manifest's text could not be read. `code` is upstream's refusal
/// code: `invalid_json`, `duplicate_key` or `invalid_yaml`.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    pub code: &'static str,
    pub message: String,
    pub pos: Option<Pos>,
}

/// Maps byte offsets to 1-based line and (byte) column.
struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { text, starts }
    }

    /// Columns count bytes: counting characters would cost a pass over the
    /// line for every value, quadratic on minified one-line JSON.
    fn pos(&self, offset: usize) -> Pos {
        let line = self.starts.partition_point(|&s| s <= offset) - 1;
        let col = offset.min(self.text.len()) - self.starts[line];
        Pos {
            line: line as u32 + 1,
            col: col as u32 + 1,
        }
    }
}

// ---------------------------------------------------------------- JSON

pub fn parse_json(text: &str) -> Result<Node, ParseError> {
    let lines = Lines::new(text);
    let mut p = JsonParser {
        s: text.as_bytes(),
        i: 0,
        lines: &lines,
    };
    p.ws();
    let node = p.value()?;
    p.ws();
    if p.i < p.s.len() {
        return Err(p.err("Extra data", p.i));
    }
    Ok(node)
}

struct JsonParser<'a> {
    s: &'a [u8],
    i: usize,
    lines: &'a Lines<'a>,
}

impl JsonParser<'_> {
    fn err(&self, message: &str, at: usize) -> ParseError {
        ParseError {
            code: "invalid_json",
            message: message.to_string(),
            pos: Some(self.lines.pos(at)),
        }
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn starts_with(&self, lit: &str) -> bool {
        self.s[self.i..].starts_with(lit.as_bytes())
    }

    fn value(&mut self) -> Result<Node, ParseError> {
        let start = self.i;
        let pos = self.lines.pos(start);
        let kind = match self.peek() {
            Some(b'{') => return self.object(),
            Some(b'[') => return self.array(),
            Some(b'"') => Kind::Str(self.string()?),
            Some(b'n') if self.starts_with("null") => {
                self.i += 4;
                Kind::Null
            }
            Some(b't') if self.starts_with("true") => {
                self.i += 4;
                Kind::Bool(true)
            }
            Some(b'f') if self.starts_with("false") => {
                self.i += 5;
                Kind::Bool(false)
            }
            Some(b'N') if self.starts_with("NaN") => {
                self.i += 3;
                Kind::Float(f64::NAN)
            }
            Some(b'I') if self.starts_with("Infinity") => {
                self.i += 8;
                Kind::Float(f64::INFINITY)
            }
            Some(b'-') if self.starts_with("-Infinity") => {
                self.i += 9;
                Kind::Float(f64::NEG_INFINITY)
            }
            Some(b'-' | b'0'..=b'9') => match self.number() {
                Some(kind) => kind,
                None => return Err(self.err("Expecting value", start)),
            },
            _ => return Err(self.err("Expecting value", start)),
        };
        Ok(Node::new(kind, pos))
    }

    fn number(&mut self) -> Option<Kind> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.i += 1;
            }
            p.i - s
        };
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => {
                self.i = start;
                return None;
            }
        }
        let int_end = self.i;
        let mut float = false;
        if self.peek() == Some(b'.') && self.s.get(self.i + 1).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
            digits(self);
            float = true;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let save = self.i;
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if digits(self) == 0 {
                self.i = save;
            } else {
                float = true;
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        if float {
            return text.parse().ok().map(Kind::Float);
        }
        let int_text = std::str::from_utf8(&self.s[start..int_end]).ok()?;
        Some(
            int_text
                .parse::<i128>()
                .map(Kind::Int)
                .unwrap_or(Kind::Float(int_text.parse().ok()?)),
        )
    }

    fn string(&mut self) -> Result<String, ParseError> {
        let start = self.i;
        self.i += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err("Unterminated string starting at", start));
            };
            match c {
                b'"' => {
                    self.i += 1;
                    return Ok(out);
                }
                b'\\' => {
                    let esc = self.s.get(self.i + 1).copied();
                    self.i += 2;
                    match esc {
                        Some(b'"') => out.push('"'),
                        Some(b'\\') => out.push('\\'),
                        Some(b'/') => out.push('/'),
                        Some(b'b') => out.push('\u{8}'),
                        Some(b'f') => out.push('\u{c}'),
                        Some(b'n') => out.push('\n'),
                        Some(b'r') => out.push('\r'),
                        Some(b't') => out.push('\t'),
                        Some(b'u') => {
                            let hi = self
                                .hex4()
                                .ok_or_else(|| self.err("Invalid \\uXXXX escape", self.i - 1))?;
                            let code = if (0xd800..0xdc00).contains(&hi) && self.starts_with("\\u")
                            {
                                self.i += 2;
                                match self.hex4() {
                                    Some(lo) if (0xdc00..0xe000).contains(&lo) => {
                                        0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                                    }
                                    Some(lo) => {
                                        out.push(char::REPLACEMENT_CHARACTER);
                                        lo
                                    }
                                    None => {
                                        return Err(self.err("Invalid \\uXXXX escape", self.i - 1));
                                    }
                                }
                            } else {
                                hi
                            };
                            // Lone surrogates cannot live in a Rust string.
                            out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                        }
                        _ => return Err(self.err("Invalid \\escape", self.i - 2)),
                    }
                }
                0..=0x1f => return Err(self.err("Invalid control character at", self.i)),
                _ => {
                    // Copy the run of plain bytes up to the next quote,
                    // escape or control byte in one go.
                    let run_end = self.s[self.i..]
                        .iter()
                        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                        .map_or(self.s.len(), |n| self.i + n);
                    // The input is a &str, and the run ends on an ASCII
                    // byte, so it is whole UTF-8.
                    out.push_str(std::str::from_utf8(&self.s[self.i..run_end]).unwrap_or_default());
                    self.i = run_end;
                }
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.s.get(self.i..self.i + 4)?;
        let v = u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        self.i += 4;
        Some(v)
    }

    fn object(&mut self) -> Result<Node, ParseError> {
        let pos = self.lines.pos(self.i);
        self.i += 1;
        let mut entries: Vec<(String, Node)> = Vec::new();
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(Node::new(Kind::Map(entries), pos));
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(self.err("Expecting property name enclosed in double quotes", self.i));
            }
            let key_at = self.i;
            let key = self.string()?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.err("Expecting ':' delimiter", self.i));
            }
            self.i += 1;
            self.ws();
            let value = self.value()?;
            if entries.iter().any(|(k, _)| *k == key) {
                return Err(ParseError {
                    code: "duplicate_key",
                    message: format!("duplicate key {}", py_repr(&key)),
                    pos: Some(self.lines.pos(key_at)),
                });
            }
            entries.push((key, value));
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(Node::new(Kind::Map(entries), pos));
                }
                _ => return Err(self.err("Expecting ',' delimiter", self.i)),
            }
        }
    }

    fn array(&mut self) -> Result<Node, ParseError> {
        let pos = self.lines.pos(self.i);
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(Node::new(Kind::Seq(items), pos));
        }
        loop {
            self.ws();
            items.push(self.value()?);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(Node::new(Kind::Seq(items), pos));
                }
                _ => return Err(self.err("Expecting ',' delimiter", self.i)),
            }
        }
    }
}

// ---------------------------------------------------------------- YAML

pub fn parse_yaml(text: &str) -> Result<Node, ParseError> {
    let mut builder = YamlBuilder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, true).map_err(|e| ParseError {
        code: "invalid_yaml",
        message: e.info().to_string(),
        pos: Some(Pos {
            line: e.marker().line() as u32,
            col: e.marker().col() as u32 + 1,
        }),
    })?;
    if let Some(error) = builder.error {
        return Err(error);
    }
    match builder.documents.len() {
        0 => Ok(Node::new(Kind::Null, Pos { line: 1, col: 1 })),
        1 => Ok(builder.documents.pop().expect("one document")),
        _ => Err(ParseError {
            code: "invalid_yaml",
            message: "expected a single document in the stream".into(),
            pos: builder.second_document,
        }),
    }
}

enum Frame {
    Seq(Node, usize),
    Map {
        node: Node,
        anchor: usize,
        pending_key: Option<(String, Pos)>,
    },
}

#[derive(Default)]
struct YamlBuilder {
    stack: Vec<Frame>,
    documents: Vec<Node>,
    anchors: std::collections::HashMap<usize, Node>,
    error: Option<ParseError>,
    second_document: Option<Pos>,
}

fn yaml_pos(mark: &Marker) -> Pos {
    Pos {
        line: mark.line() as u32,
        col: mark.col() as u32 + 1,
    }
}

impl YamlBuilder {
    fn fail(&mut self, message: String, pos: Pos) {
        if self.error.is_none() {
            self.error = Some(ParseError {
                code: "invalid_yaml",
                message,
                pos: Some(pos),
            });
        }
    }

    fn push_value(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => {
                if self.documents.len() == 1 && self.second_document.is_none() {
                    self.second_document = Some(node.pos);
                }
                self.documents.push(node);
            }
            Some(Frame::Seq(seq, _)) => {
                if let Kind::Seq(items) = &mut seq.kind {
                    items.push(node);
                }
            }
            Some(Frame::Map {
                node: map,
                pending_key,
                ..
            }) => match pending_key.take() {
                None => match node.kind {
                    Kind::Str(key) => *pending_key = Some((key, node.pos)),
                    _ => {
                        let pos = node.pos;
                        self.fail("graph mapping keys must be strings".into(), pos);
                        // Keep the tree well-formed; the error wins anyway.
                        if let Some(Frame::Map { pending_key, .. }) = self.stack.last_mut() {
                            *pending_key = Some((String::new(), pos));
                        }
                    }
                },
                Some((key, key_pos)) => {
                    if let Kind::Map(entries) = &mut map.kind {
                        if entries.iter().any(|(k, _)| *k == key) {
                            let message = format!("duplicate key {}", py_repr(&key));
                            self.fail(message, key_pos);
                            return;
                        }
                        entries.push((key, node));
                    }
                }
            },
        }
    }
}

impl MarkedEventReceiver for YamlBuilder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let pos = yaml_pos(&mark);
        match event {
            Event::Scalar(value, style, anchor, tag) => {
                let kind = match resolve_scalar(&value, style, tag.as_ref()) {
                    Ok(kind) => kind,
                    Err(message) => return self.fail(message, pos),
                };
                self.push_value(Node::new(kind, pos), anchor);
            }
            Event::SequenceStart(anchor, _) => self
                .stack
                .push(Frame::Seq(Node::new(Kind::Seq(Vec::new()), pos), anchor)),
            Event::MappingStart(anchor, _) => self.stack.push(Frame::Map {
                node: Node::new(Kind::Map(Vec::new()), pos),
                anchor,
                pending_key: None,
            }),
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq(node, anchor)) | Some(Frame::Map { node, anchor, .. }) => {
                    self.push_value(node, anchor)
                }
                None => {}
            },
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(mut node) => {
                    node.pos = pos;
                    self.push_value(node, 0)
                }
                None => self.fail("found undefined alias".into(), pos),
            },
            _ => {}
        }
    }
}

static INT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$")
        .expect("valid regex")
});
static FLOAT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
    )
    .expect("valid regex")
});
static TIMESTAMP: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$",
    )
    .expect("valid regex")
});

/// PyYAML's implicit resolution of a plain scalar (YAML 1.1), and the
/// standard `!!` tags.
fn resolve_scalar(value: &str, style: TScalarStyle, tag: Option<&Tag>) -> Result<Kind, String> {
    if let Some(tag) = tag {
        let name = if tag.handle == "!!" || tag.handle == "tag:yaml.org,2002:" {
            tag.suffix.as_str()
        } else {
            ""
        };
        return match name {
            "str" => Ok(Kind::Str(value.to_string())),
            "null" => Ok(Kind::Null),
            "bool" | "int" | "float" => resolve_plain(value),
            _ => Err(format!(
                "could not determine a constructor for the tag '{}{}'",
                tag.handle, tag.suffix
            )),
        };
    }
    if style != TScalarStyle::Plain {
        return Ok(Kind::Str(value.to_string()));
    }
    resolve_plain(value)
}

fn resolve_plain(value: &str) -> Result<Kind, String> {
    Ok(match value {
        "" | "~" | "null" | "Null" | "NULL" => Kind::Null,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Kind::Bool(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Kind::Bool(false)
        }
        v if INT.is_match(v) => {
            Kind::Int(yaml_int(v).ok_or_else(|| format!("integer out of range: {v}"))?)
        }
        v if FLOAT.is_match(v) => Kind::Float(yaml_float(v)),
        v if TIMESTAMP.is_match(v) => Kind::Other("timestamp"),
        v => Kind::Str(v.to_string()),
    })
}

fn yaml_int(v: &str) -> Option<i128> {
    let cleaned = v.replace('_', "");
    let (neg, body) = match cleaned.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, cleaned.strip_prefix('+').unwrap_or(&cleaned)),
    };
    let magnitude = if body == "0" {
        0
    } else if let Some(b) = body.strip_prefix("0b") {
        i128::from_str_radix(b, 2).ok()?
    } else if let Some(x) = body.strip_prefix("0x") {
        i128::from_str_radix(x, 16).ok()?
    } else if body.contains(':') {
        body.split(':').try_fold(0i128, |acc, part| {
            Some(acc * 60 + part.parse::<i128>().ok()?)
        })?
    } else if body.starts_with('0') {
        i128::from_str_radix(body, 8).ok()?
    } else {
        body.parse().ok()?
    };
    Some(if neg { -magnitude } else { magnitude })
}

fn yaml_float(v: &str) -> f64 {
    let cleaned = v.replace('_', "").to_lowercase();
    let (sign, body) = match cleaned.strip_prefix('-') {
        Some(rest) => (-1.0, rest.to_string()),
        None => (1.0, cleaned.trim_start_matches('+').to_string()),
    };
    if body == ".inf" {
        return sign * f64::INFINITY;
    }
    if body == ".nan" {
        return f64::NAN;
    }
    if body.contains(':') {
        let total = body.split(':').fold(0.0, |acc, part| {
            acc * 60.0 + part.parse::<f64>().unwrap_or(0.0)
        });
        return sign * total;
    }
    sign * body.parse::<f64>().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_positions_and_duplicates() {
        let node = parse_json("{\n  \"a\": [1, 2.5, \"x\"],\n  \"b\": null\n}").unwrap();
        assert_eq!(node.locate("/a/2"), Some(Pos { line: 2, col: 17 }));
        let err = parse_json(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            ("duplicate_key", "duplicate key 'a'")
        );
        assert_eq!(
            parse_json(r#"{"a": }"#).unwrap_err().message,
            "Expecting value"
        );
        assert_eq!(
            parse_json(r#"{"a" 1}"#).unwrap_err().message,
            "Expecting ':' delimiter"
        );
        assert_eq!(
            parse_json(r#"{"a": 1} x"#).unwrap_err().message,
            "Extra data"
        );
        assert_eq!(
            parse_json("[NaN, -Infinity, 123456789012345678901234]")
                .unwrap()
                .as_seq()
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn yaml_scalars_follow_yaml_1_1() {
        let node = parse_yaml(
            "a: yes\nb: 0x10\nc: 1_000\nd: '1.0'\ne: 1.0\nf: ~\ng: 2026-01-02\nh: 010\ni: 1:30\n",
        )
        .unwrap();
        let get = |k: &str| node.get(k).unwrap().kind.clone();
        assert_eq!(get("a"), Kind::Bool(true));
        assert_eq!(get("b"), Kind::Int(16));
        assert_eq!(get("c"), Kind::Int(1000));
        assert_eq!(get("d"), Kind::Str("1.0".into()));
        assert_eq!(get("e"), Kind::Float(1.0));
        assert_eq!(get("f"), Kind::Null);
        assert_eq!(get("g"), Kind::Other("timestamp"));
        assert_eq!(get("h"), Kind::Int(8));
        assert_eq!(get("i"), Kind::Int(90));
    }

    #[test]
    fn yaml_refuses_duplicates_non_string_keys_and_second_documents() {
        assert_eq!(
            parse_yaml("a: 1\na: 2\n").unwrap_err().message,
            "duplicate key 'a'"
        );
        assert_eq!(
            parse_yaml("1: a\n").unwrap_err().message,
            "graph mapping keys must be strings"
        );
        assert!(
            parse_yaml("a: 1\n---\nb: 2\n")
                .unwrap_err()
                .message
                .starts_with("expected a single document")
        );
        assert_eq!(parse_yaml("").unwrap().kind, Kind::Null);
    }

    #[test]
    fn yaml_anchors_resolve() {
        let node = parse_yaml("x: &b {k: 1}\ny: *b\n").unwrap();
        assert_eq!(node.get("y").unwrap().get("k").unwrap().kind, Kind::Int(1));
    }
}
