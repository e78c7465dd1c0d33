//! The parser's events turned into the [`Node`] tree, with anchors,
//! duplicate keys, key types and tags checked as PyYAML's constructor
//! checks them.

use super::*;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Tag};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

use crate::doc::{Kind, Node, Pos, py_repr};
use crate::error::Refusal as ParseError;
use crate::error::RefusalCode;

pub(super) enum Frame {
    Seq {
        node: Node,
        anchor: usize,
        /// [`YamlBuilder::expanded`] and `expanded_bytes` when the
        /// collection started.
        expanded_at: (usize, usize),
        flow: bool,
        /// Where PyYAML says the collection starts (a block sequence at its
        /// first `-`, a block mapping at its first key): (line, column).
        start: Option<(usize, usize)>,
    },
    Map {
        node: Node,
        anchor: usize,
        expanded_at: (usize, usize),
        flow: bool,
        start: Option<(usize, usize)>,
        pending_key: Option<(String, Pos)>,
    },
}

impl Frame {
    pub(super) fn flow(&self) -> bool {
        match self {
            Frame::Seq { flow, .. } | Frame::Map { flow, .. } => *flow,
        }
    }

    pub(super) fn start(&self) -> Option<(usize, usize)> {
        match self {
            Frame::Seq { start, .. } | Frame::Map { start, .. } => *start,
        }
    }
}

/// The most nodes a document may hold with every alias expanded. Real
/// manifests hold a few thousand; an alias bomb of a few hundred bytes
/// would hold billions.
pub const MAX_EXPANDED_NODES: usize = 200_000;

/// The most scalar text a document may hold with every alias expanded:
/// eight times the largest document bl reads.
pub const MAX_EXPANDED_BYTES: usize = 32 << 20;

pub(super) struct YamlBuilder<'s, 'a> {
    pub(super) source: &'s Source<'a>,
    pub(super) stack: Vec<Frame>,
    pub(super) document: Option<Node>,
    /// Each anchor's node, and how many nodes and scalar bytes it expands to.
    pub(super) anchors: std::collections::HashMap<usize, (Node, usize, usize)>,
    /// Nodes in the document so far, every alias counted as a copy of its
    /// anchor (what the tree holds), bounded by [`MAX_EXPANDED_NODES`].
    pub(super) expanded: usize,
    /// Scalar bytes in the document so far, counted the same way, bounded
    /// by [`MAX_EXPANDED_BYTES`] (a few long strings aliased many times).
    pub(super) expanded_bytes: usize,
    /// The first composition error (undefined alias, block scalar in a flow
    /// collection), with its char index.
    pub(super) compose_error: Option<(usize, ParseError)>,
    /// The first construction error (tag, key type, duplicate key).
    pub(super) construct_error: Option<ParseError>,
    /// Where tabs may stand, tracked only when the text has one.
    pub(super) tabs: Option<TabSpans>,
}

impl<'s, 'a> YamlBuilder<'s, 'a> {
    pub(super) fn new(source: &'s Source<'a>) -> Self {
        YamlBuilder {
            source,
            stack: Vec::new(),
            document: None,
            anchors: Default::default(),
            expanded: 0,
            expanded_bytes: 0,
            compose_error: None,
            construct_error: None,
            tabs: source.text.contains('\t').then(TabSpans::default),
        }
    }

    pub(super) fn construct_failed(&mut self, error: ParseError) {
        if self.construct_error.is_none() {
            self.construct_error = Some(error);
        }
    }

    /// Adds a finished node of `size` nodes and `bytes` scalar bytes to its
    /// parent.
    pub(super) fn push_value(&mut self, node: Node, anchor: usize, size: usize, bytes: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, (node.clone(), size, bytes));
        }
        match self.stack.last_mut() {
            None => self.document = Some(node),
            Some(Frame::Seq { node: seq, .. }) => {
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
                        // Keep the tree well-formed; the error wins anyway.
                        *pending_key = Some((String::new(), pos));
                        self.construct_failed(ParseError {
                            pointer: "/".into(),
                            code: RefusalCode::InvalidYaml,
                            message: "graph mapping keys must be strings".into(),
                            pos: Some(pos),
                            focus: None,
                            hints: Vec::new(),
                        });
                    }
                },
                Some((key, key_pos)) => {
                    if let Kind::Map(entries) = &mut map.kind {
                        if entries.iter().any(|(k, _)| *k == key) {
                            let message = format!("duplicate key {}", py_repr(&key));
                            self.construct_failed(ParseError {
                                pointer: "/".into(),
                                code: RefusalCode::InvalidYaml,
                                message,
                                pos: Some(key_pos),
                                focus: None,
                                hints: Vec::new(),
                            });
                            return;
                        }
                        entries.push((key, node.under_key(key_pos)));
                    }
                }
            },
        }
    }

    /// The text ended inside a flow collection: PyYAML names the
    /// collection and the end of the stream.
    pub(super) fn unclosed_flow(&self, scan: &ScanError) -> Option<(usize, ParseError)> {
        let (kind, closer, start) = self.innermost_flow()?;
        let text = self.source.text;
        let at = self
            .source
            .byte_of(scan.marker().line(), scan.marker().col());
        if !text[at.min(text.len())..].trim().is_empty() {
            return None;
        }
        let (end_line, end_col) = self.source.end();
        // Right after `[`, `{`, `,` or `:` a node was due; otherwise a separator.
        let last = text
            .lines()
            .rev()
            .map(|line| match line.find(" #") {
                Some(comment) => &line[..comment],
                None if line.trim_start().starts_with('#') => "",
                None => line,
            })
            .find_map(|line| line.trim_end().chars().next_back());
        let message = if matches!(last, Some('[' | '{' | ',' | ':')) {
            format!(
                "while parsing a flow node\nexpected the node content, but found '<stream end>'\n{}",
                self.source.mark_at(end_line, end_col)
            )
        } else {
            format!(
                "while parsing a flow {kind}\n{}\nexpected ',' or '{closer}', but got '<stream end>'\n{}",
                self.source
                    .mark_at(start.line as usize, start.col as usize - 1),
                self.source.mark_at(end_line, end_col)
            )
        };
        Some(self.source.failure_at(message, end_line, end_col))
    }

    /// A plain scalar in a flow collection that PyYAML reads differently
    /// from yaml-rust2 (YAML 1.2): YAML 1.1 ends it at `?`, and a key that
    /// runs over a line break cannot be a key. PyYAML then finds the `?` or
    /// the `:` where a `,` or the closing bracket was due.
    pub(super) fn plain_in_flow_error(&self, mark: &Marker) -> Option<(usize, ParseError)> {
        let (kind, closer, start) = self.innermost_flow()?;
        let text = self.source.text;
        let from = self.source.byte_of(mark.line(), mark.col());
        let (mut line, mut col) = (mark.line(), mark.col());
        let mut crossed_line = false;
        let mut previous = ' ';
        let mut chars = text[from..].chars().peekable();
        let mut first = true;
        let found = loop {
            let c = chars.next()?;
            let next = chars.peek().copied();
            match c {
                '?' if !first => break '?',
                ':' if next.is_none_or(|n| n.is_whitespace() || ",[]{}".contains(n)) => {
                    if crossed_line {
                        break ':';
                    }
                    return None;
                }
                ',' | '[' | ']' | '{' | '}' => return None,
                '#' if previous.is_whitespace() => return None,
                '\n' => {
                    crossed_line = true;
                    line += 1;
                    col = 0;
                    previous = c;
                    first = false;
                    continue;
                }
                _ => {}
            }
            previous = c;
            first = false;
            col += 1;
        };
        let message = format!(
            "while parsing a flow {kind}\n{}\nexpected ',' or '{closer}', but got '{found}'\n{}",
            self.source
                .mark_at(start.line as usize, start.col as usize - 1),
            self.source.mark_at(line, col)
        );
        Some(self.source.failure_at(message, line, col))
    }

    /// The first child of a block collection fixes where PyYAML says the
    /// collection starts (yaml-rust2's own mark for a block collection is
    /// elsewhere): a mapping at its first key, a sequence at the `-` before
    /// its first entry.
    pub(super) fn note_block_start(&mut self, child: &Event, mark: &Marker) {
        let source = self.source;
        let (sequence, start) = match self.stack.last_mut() {
            Some(Frame::Seq {
                flow: false, start, ..
            }) if start.is_none() => (true, start),
            Some(Frame::Map {
                flow: false, start, ..
            }) if start.is_none() => (false, start),
            _ => return,
        };
        let (line, col) = if matches!(child, Event::Scalar(..)) {
            source.node_start(mark)
        } else {
            (mark.line(), mark.col())
        };
        *start = Some(if sequence {
            let chars: Vec<char> = source.line(line).chars().collect();
            let dash = (0..=col.min(chars.len().saturating_sub(1)))
                .rev()
                .find(|&i| {
                    chars.get(i) == Some(&'-') && chars.get(i + 1).is_none_or(|c| *c == ' ')
                });
            (line, dash.unwrap_or(col))
        } else if matches!(child, Event::MappingStart(..) | Event::SequenceStart(..)) {
            // A complex key: the first non-space of its line.
            let text = source.line(line);
            (line, text.len() - text.trim_start_matches(' ').len())
        } else {
            (line, col)
        });
    }

    /// yaml-rust2 found no key (or no `-`) where a block collection
    /// continues: PyYAML names the collection and the token it found instead
    /// of the block's end.
    pub(super) fn block_end_error(&self, scan: &ScanError) -> Option<(usize, ParseError)> {
        let kind = match scan.info() {
            "while parsing a block mapping, did not find expected key" => "mapping",
            "while parsing a block collection, did not find expected '-' indicator" => "collection",
            _ => return None,
        };
        let source = self.source;
        let mark = scan.marker();
        let line = mark.line();
        let chars: Vec<char> = source.line(line).chars().collect();
        // PyYAML stops at the start of the token it did not expect.
        // yaml-rust2 points at that token when it follows others on the line
        // (`a: [1]]`), and a little past it when it opens the line (the `:`
        // after a key, the entry after a `- `).
        let first = chars.iter().position(|c| *c != ' ').unwrap_or(0);
        let end = mark.col().min(chars.len());
        let before: String = chars[first.min(end)..end].iter().collect();
        let opens_line = !before.trim_start_matches("- ").contains([' ', '\t']);
        let col = match chars.get(mark.col()) {
            Some(']' | '}' | ',' | '[' | '{') => mark.col(),
            _ if opens_line => first,
            _ => mark.col(),
        };
        // The innermost block collection PyYAML still has open at that
        // column; an indentless sequence (a `-` at its parent key's column)
        // is not one of them.
        let mut open: Option<(bool, (usize, usize))> = None;
        let mut parent_col: Option<usize> = None;
        for frame in &self.stack {
            if frame.flow() {
                return None;
            }
            let Some(start) = frame.start() else { continue };
            let sequence = matches!(frame, Frame::Seq { .. });
            let indentless = sequence && parent_col == Some(start.1);
            if start.1 <= col && !indentless {
                open = Some((sequence, start));
            }
            parent_col = Some(start.1);
        }
        let (sequence, start) = open?;
        if (kind == "collection") != sequence {
            return None;
        }
        let deeper = col > start.1;
        let rest: String = chars[col.min(chars.len())..].iter().collect();
        let simple_key = rest
            .char_indices()
            .any(|(i, c)| c == ':' && rest[i + 1..].chars().next().is_none_or(|n| n == ' '));
        let found = match rest.chars().next() {
            Some(c @ (']' | '}' | ',' | '[' | '{')) => format!("'{c}'"),
            Some('-') if rest[1..].chars().next().is_none_or(|n| n == ' ') => {
                if deeper {
                    "'<block sequence start>'".into()
                } else {
                    "'-'".into()
                }
            }
            Some('&') => "'<anchor>'".into(),
            Some('!') => "'<tag>'".into(),
            Some('*') => "'<alias>'".into(),
            _ if simple_key => {
                if deeper {
                    "'<block mapping start>'".into()
                } else {
                    "'?'".into()
                }
            }
            _ => "'<scalar>'".into(),
        };
        let message = format!(
            "while parsing a block {kind}\n{}\nexpected <block end>, but found {found}\n{}",
            source.mark_at(start.0, start.1),
            source.mark_at(line, col)
        );
        Some(source.failure_at(message, line, col))
    }

    /// The innermost flow collection being read: its name in PyYAML's
    /// messages, its closing bracket and where it starts. (Block collections
    /// cannot sit inside a flow one, so it is the innermost collection.)
    pub(super) fn innermost_flow(&self) -> Option<(&'static str, char, Pos)> {
        self.stack.iter().rev().find_map(|frame| match frame {
            Frame::Seq {
                node, flow: true, ..
            } => Some(("sequence", ']', node.pos)),
            Frame::Map {
                node, flow: true, ..
            } => Some(("mapping", '}', node.pos)),
            _ => None,
        })
    }

    pub(super) fn in_flow(&self) -> bool {
        self.stack.iter().any(Frame::flow)
    }

    /// A collection's tag: `!!map`, `!!seq` and the other standard
    /// collection tags are read as the plain collection (the graph schema
    /// refuses what it cannot use); any other tag has no constructor.
    pub(super) fn collection_tag(&mut self, tag: Option<&Tag>, mark: &Marker, sequence: bool) {
        let Some(tag) = tag else { return };
        let full = full_tag(tag);
        let fits = match full.strip_prefix(YAML_TAG) {
            Some("seq" | "omap" | "pairs") => sequence,
            Some("map" | "set") => !sequence,
            _ => false,
        };
        if !fits {
            let start = self.source.node_start(mark);
            let problem = match full.strip_prefix(YAML_TAG) {
                Some("seq" | "omap" | "pairs") => {
                    "expected a sequence node, but found mapping".into()
                }
                Some("map" | "set") => "expected a mapping node, but found sequence".into(),
                _ => format!(
                    "could not determine a constructor for the tag {}",
                    py_repr(&full)
                ),
            };
            let error = self.source.node_error(problem, start);
            self.construct_failed(error);
        }
    }
}

pub(super) const YAML_TAG: &str = "tag:yaml.org,2002:";

pub(super) fn full_tag(tag: &Tag) -> String {
    if tag.handle == "!!" {
        format!("{YAML_TAG}{}", tag.suffix)
    } else {
        format!("{}{}", tag.handle, tag.suffix)
    }
}

impl MarkedEventReceiver for YamlBuilder<'_, '_> {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.compose_error.is_some() {
            return;
        }
        if let Some(tabs) = self.tabs.as_mut() {
            let at = self.source.byte_of(mark.line(), mark.col());
            tabs.on_event(self.source.text, &event, at);
        }
        if matches!(
            event,
            Event::Scalar(..)
                | Event::SequenceStart(..)
                | Event::MappingStart(..)
                | Event::Alias(_)
        ) {
            self.note_block_start(&event, &mark);
        }
        let pos = pos_of(&mark);
        match event {
            Event::Scalar(value, style, anchor, tag) => {
                // PyYAML has no block scalars inside a flow collection, and
                // `|` or `>` cannot start a plain one there either (yaml-rust2
                // reads `| 1` in a flow mapping as a plain scalar).
                let block = matches!(style, TScalarStyle::Literal | TScalarStyle::Folded)
                    || (style == TScalarStyle::Plain && value.starts_with(['|', '>']));
                if block && self.in_flow() {
                    let found = self.source.char_at(&mark).unwrap_or('|');
                    let message = cannot_start_token(found, &self.source.mark(&mark));
                    self.compose_error =
                        Some(self.source.failure_at(message, mark.line(), mark.col()));
                    return;
                }
                if style == TScalarStyle::Plain
                    && let Some(error) = self.plain_in_flow_error(&mark)
                {
                    self.compose_error = Some(error);
                    return;
                }
                let kind = match construct_scalar(&value, style, tag.as_ref()) {
                    Ok(kind) => kind,
                    Err(problem) => {
                        let start = self.source.node_start(&mark);
                        let error = self.source.node_error(problem.to_string(), start);
                        self.construct_failed(error);
                        Kind::Null
                    }
                };
                self.expanded += 1;
                self.expanded_bytes += value.len();
                self.push_value(Node::new(kind, pos), anchor, 1, value.len());
            }
            Event::SequenceStart(anchor, tag) => {
                self.collection_tag(tag.as_ref(), &mark, true);
                let flow = self.source.char_at(&mark) == Some('[');
                self.stack.push(Frame::Seq {
                    node: Node::new(Kind::Seq(Vec::new()), pos),
                    anchor,
                    expanded_at: (self.expanded, self.expanded_bytes),
                    flow,
                    start: flow.then(|| (mark.line(), mark.col())),
                })
            }
            Event::MappingStart(anchor, tag) => {
                self.collection_tag(tag.as_ref(), &mark, false);
                let flow = self.source.char_at(&mark) == Some('{');
                self.stack.push(Frame::Map {
                    node: Node::new(Kind::Map(Vec::new()), pos),
                    anchor,
                    expanded_at: (self.expanded, self.expanded_bytes),
                    flow,
                    start: flow.then(|| (mark.line(), mark.col())),
                    pending_key: None,
                })
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(
                    Frame::Seq {
                        node,
                        anchor,
                        expanded_at,
                        ..
                    }
                    | Frame::Map {
                        node,
                        anchor,
                        expanded_at,
                        ..
                    },
                ) => {
                    self.expanded += 1;
                    let size = self.expanded - expanded_at.0;
                    let bytes = self.expanded_bytes - expanded_at.1;
                    self.push_value(node, anchor, size, bytes)
                }
                None => {}
            },
            Event::Alias(id) => match self.anchors.get(&id) {
                // Checked before the copy is made: a few lines of nested
                // aliases can name more nodes than memory holds.
                Some((_, size, bytes))
                    if self.expanded + size > MAX_EXPANDED_NODES
                        || self.expanded_bytes + bytes > MAX_EXPANDED_BYTES =>
                {
                    let index = self.source.index_of(mark.line(), mark.col());
                    let message = format!(
                        "the document expands to more than {MAX_EXPANDED_NODES} nodes or {MAX_EXPANDED_BYTES} bytes of text once its aliases are resolved; bl refuses it so that reading stays bounded. Write the repeated parts out, or share less through anchors"
                    );
                    let error = self.source.error([Some(message)], mark);
                    self.compose_error = Some((index, error));
                }
                Some((node, size, bytes)) => {
                    let (mut node, size, bytes) = (node.clone(), *size, *bytes);
                    node.pos = pos;
                    self.expanded += size;
                    self.expanded_bytes += bytes;
                    self.push_value(node, 0, size, bytes)
                }
                None => {
                    let index = self.source.index_of(mark.line(), mark.col());
                    let error = self.source.error(
                        [
                            Some("found undefined alias".into()),
                            Some(self.source.mark(&mark)),
                        ],
                        mark,
                    );
                    self.compose_error = Some((index, error));
                }
            },
            _ => {}
        }
    }
}
