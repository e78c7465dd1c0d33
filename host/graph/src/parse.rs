//! Reading a manifest's text into a [`Node`] tree.
//!
//! JSON follows Python's `json` module (what bounded-loops 0.7 reads with):
//! the same error names, `NaN`/`Infinity` accepted, integers unbounded, and
//! duplicate keys refused. YAML is read in the `yaml` module.

use crate::doc::{Kind, Node, Pos, py_repr};
use crate::error::{Refusal, RefusalCode};

/// Why a manifest's text could not be read: a [`Refusal`] with code
/// `invalid_json`, `duplicate_key` or `invalid_yaml`, at pointer `/`.
pub type ParseError = Refusal;

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
    if text.starts_with('\u{feff}') {
        // Python's json refuses a byte-order mark rather than skipping it.
        return Err(ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidJson,
            message: "Unexpected UTF-8 BOM (decode using utf-8-sig)".into(),
            pos: Some(Pos { line: 1, col: 1 }),
            focus: None,
            hints: Vec::new(),
        });
    }
    let lines = Lines::new(text);
    let mut p = JsonParser {
        s: text.as_bytes(),
        i: 0,
        lines: &lines,
        depth: 0,
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
    /// Arrays and objects open around the current value.
    depth: usize,
}

/// Deeper nesting is refused rather than read: Python's `json` gives up near
/// this depth too (bounded-loops crashes with a RecursionError), and no
/// manifest needs it.
const MAX_JSON_DEPTH: usize = 1000;

impl JsonParser<'_> {
    fn err(&self, message: &str, at: usize) -> ParseError {
        ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidJson,
            message: message.to_string(),
            pos: Some(self.lines.pos(at)),
            focus: None,
            hints: Vec::new(),
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
            Some(b'{' | b'[') if self.depth >= MAX_JSON_DEPTH => {
                return Err(self.err(
                    &format!("nesting is deeper than {MAX_JSON_DEPTH} levels"),
                    start,
                ));
            }
            Some(b'{') => {
                self.depth += 1;
                let node = self.object();
                self.depth -= 1;
                return node;
            }
            Some(b'[') => {
                self.depth += 1;
                let node = self.array();
                self.depth -= 1;
                return node;
            }
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
                    pointer: "/".into(),
                    code: RefusalCode::DuplicateKey,
                    message: format!("duplicate key {}", py_repr(&key)),
                    pos: Some(self.lines.pos(key_at)),
                    focus: None,
                    hints: Vec::new(),
                });
            }
            entries.push((key, value.under_key(self.lines.pos(key_at))));
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
            (RefusalCode::DuplicateKey, "duplicate key 'a'")
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
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse_json(&deep(MAX_JSON_DEPTH)).is_ok());
        assert_eq!(
            parse_json(&deep(100_000)).unwrap_err().message,
            "nesting is deeper than 1000 levels"
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
}
