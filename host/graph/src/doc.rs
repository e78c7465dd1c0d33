//! A parsed manifest: a JSON-like tree in which every value remembers where
//! it was written, so an error can name the line and column as well as the
//! JSON pointer.

use serde_json::{Map, Number, Value};

/// 1-based line and column of a value in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: u32,
    pub col: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    /// A YAML value with no JSON equivalent (a timestamp); never valid where
    /// a typed value is expected.
    Other(&'static str),
    Seq(Vec<Node>),
    /// Entries in document order. Keys are strings: a non-string key is a
    /// parse error.
    Map(Vec<(String, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: Kind,
    pub pos: Pos,
    /// Where its key was written, when it is a map's value: an unknown
    /// field is named where its key is, not where its value starts.
    pub key_pos: Option<Pos>,
}

impl Node {
    pub fn new(kind: Kind, pos: Pos) -> Self {
        Node {
            kind,
            pos,
            key_pos: None,
        }
    }

    /// The same value, as the value of a key written at `key_pos`.
    pub fn under_key(mut self, key_pos: Pos) -> Self {
        self.key_pos = Some(key_pos);
        self
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A non-empty string.
    pub fn as_nonempty_str(&self) -> Option<&str> {
        self.as_str().filter(|s| !s.is_empty())
    }

    /// An integer that is not a boolean.
    pub fn as_int(&self) -> Option<i128> {
        match self.kind {
            Kind::Int(i) => Some(i),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(String, Node)]> {
        match &self.kind {
            Kind::Map(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.kind {
            Kind::Seq(s) => Some(s),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.kind, Kind::Null)
    }

    /// The entry for `key` in a map.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// The value as plain JSON (for digests and output).
    pub fn to_json(&self) -> Value {
        match &self.kind {
            Kind::Null | Kind::Other(_) => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Int(i) => i64::try_from(*i)
                .map(Value::from)
                .or_else(|_| u64::try_from(*i).map(Value::from))
                .unwrap_or_else(|_| Value::String(i.to_string())),
            Kind::Float(f) => Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Kind::Str(s) => Value::String(s.clone()),
            Kind::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            Kind::Map(entries) => {
                let mut map = Map::new();
                for (k, v) in entries {
                    map.insert(k.clone(), v.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// Finds the value a JSON pointer (as bl and bounded-loops write them,
    /// without escaping) names, for line/column reporting; where the
    /// pointer goes on past what is written, the deepest value it reaches.
    pub fn locate(&self, pointer: &str) -> Option<Pos> {
        let rest = pointer.trim_start_matches('/');
        if rest.is_empty() {
            return Some(self.pos);
        }
        let (child, tail) = self.step(rest)?;
        child.locate(tail).or(Some(child.pos))
    }

    /// Where the key of the map entry `pointer` names was written.
    pub fn locate_key(&self, pointer: &str) -> Option<Pos> {
        let rest = pointer.trim_start_matches('/');
        if rest.is_empty() {
            return self.key_pos;
        }
        let (child, tail) = self.step(rest)?;
        child.locate_key(tail)
    }

    /// The child the first step of `rest` names, and the rest of it. Map
    /// keys are matched first, longest first, so a key that contains `/`
    /// is still found when the pointer was built from it.
    fn step<'a>(&self, rest: &'a str) -> Option<(&Node, &'a str)> {
        match &self.kind {
            Kind::Map(entries) => {
                let mut best: Option<(&String, &Node)> = None;
                for (k, v) in entries {
                    let matches = rest == k || rest.starts_with(&format!("{k}/"));
                    if matches && best.is_none_or(|(b, _)| k.len() > b.len()) {
                        best = Some((k, v));
                    }
                }
                let (k, v) = best?;
                Some((v, &rest[k.len()..]))
            }
            Kind::Seq(items) => {
                let (head, tail) = rest.split_once('/').unwrap_or((rest, ""));
                let item = match head.parse::<usize>() {
                    Ok(index) => items.get(index),
                    // Some refusals name a node by its id (`/nodes/gather`),
                    // as bounded-loops writes them: the item with that id.
                    Err(_) => items.iter().find(|item| {
                        matches!(&item.kind, Kind::Map(entries)
                            if entries.iter().any(|(k, v)| k == "id" && matches!(&v.kind, Kind::Str(id) if id == head)))
                    }),
                };
                Some((item?, tail))
            }
            _ => None,
        }
    }
}

pub use bl_core::python::repr as py_repr;

#[cfg(test)]
mod tests {
    use crate::{Format, locate};

    /// A pointer that names a node by its id finds that node's line, not
    /// the list's.
    #[test]
    fn a_node_named_by_its_id_is_found_on_its_own_line() {
        let text = "nodes:\n  - id: first\n    kind: tool\n  - id: gather\n    kind: join\n";
        let at = |pointer| locate(text, Format::Yaml, pointer).map(|p| (p.line, p.col));
        assert_eq!(at("/nodes/gather"), at("/nodes/1"));
        assert_eq!(at("/nodes/gather").map(|(line, _)| line), Some(4));
        assert_eq!(at("/nodes/gather/kind"), at("/nodes/1/kind"));
        assert_eq!(at("/nodes/nowhere"), at("/nodes"), "the deepest it reaches");
    }
}
