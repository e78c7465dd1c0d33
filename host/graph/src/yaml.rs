//! Reading a YAML manifest as bounded-loops 0.7 reads it: PyYAML's safe
//! loader over the text, YAML 1.1 scalars (`yes`/`no`/`on`/`off` are
//! booleans, `0x10`, `0o7`, `1_000` and `1:30` are integers, dates are
//! timestamps), one document only, string keys only, duplicate keys refused,
//! and no merge keys (`<<` has no constructor there).
//!
//! yaml-rust2 does the scanning. Where it reads differently from PyYAML
//! (control characters, NEL and the Unicode line separators as line breaks,
//! tabs, block scalars and `?` inside flow collections, quoted scalars
//! continued at a low indentation, `%YAML` versions) the difference is closed
//! here, so a manifest is refused exactly when bounded-loops refuses it.
//! Errors that PyYAML reports with a position carry PyYAML's own rendering of
//! it (`in "<unicode string>", line L, column C:` and the source excerpt with
//! a caret) and, where the two parsers agree on what went wrong, PyYAML's
//! words, since that text is bounded-loops' `invalid_yaml` message.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, ScanError, TScalarStyle};

use crate::doc::{Kind, Node, Pos, py_repr};
use crate::error::Refusal as ParseError;
use crate::error::RefusalCode;

pub fn parse_yaml(text: &str) -> Result<Node, ParseError> {
    if let Some(error) = unprintable_character(text) {
        return Err(error);
    }
    let mut text = normalize(text);
    // yaml-rust2 wants a quoted scalar's continuation lines indented past
    // the enclosing block; PyYAML does not care (and drops their leading
    // spaces anyway). Indent them and read again, at most once per line.
    for _ in 0..=text.matches('\n').count() {
        match parse_normalized(&text) {
            Err(Reread::Indent { line, col }) => match indent_quoted(&text, line, col) {
                Some(patched) => text = Cow::Owned(patched),
                None => break,
            },
            Err(Reread::Done(error)) => return Err(error),
            Ok(node) => return Ok(node),
        }
    }
    parse_normalized(&text).map_err(|reread| match reread {
        Reread::Done(error) => error,
        Reread::Indent { line, col } => ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message: "invalid indentation in quoted scalar".into(),
            pos: Some(Pos {
                line: line as u32,
                col: col as u32 + 1,
            }),
        },
    })
}

enum Reread {
    /// The quoted scalar starting here needs its continuation lines indented.
    Indent {
        line: usize,
        col: usize,
    },
    Done(ParseError),
}

/// The text with the continuation lines of the quoted scalar that starts at
/// (line, col) indented past its first line's column, or `None` if there is
/// no quoted scalar there.
fn indent_quoted(text: &str, line: usize, col: usize) -> Option<String> {
    let source = Source::new(text);
    let start = source.byte_of(line, col);
    if !matches!(text.as_bytes().get(start), Some(b'"' | b'\'')) {
        return None;
    }
    let end = quoted_end(text, start);
    // A document marker inside stays where it is: PyYAML refuses it there.
    let marker = |line: &str| {
        (line.starts_with("---") || line.starts_with("..."))
            && line[3..].chars().next().is_none_or(char::is_whitespace)
    };
    if text[start..end].split('\n').skip(1).any(marker) {
        return None;
    }
    let pad = " ".repeat(col + 1);
    let mut out = String::with_capacity(text.len() + 64);
    out.push_str(&text[..start]);
    for (i, piece) in text[start..end].split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
            // Blank lines need no indent (and the end of the stream stays
            // where PyYAML reports it).
            if !piece.is_empty() {
                out.push_str(&pad);
            }
        }
        out.push_str(piece);
    }
    out.push_str(&text[end..]);
    Some(out)
}

fn parse_normalized(text: &str) -> Result<Node, Reread> {
    let source = Source::new(text);
    if let Some(error) = yaml_directive_error(&source) {
        return Err(Reread::Done(error));
    }
    let mut builder = YamlBuilder::new(&source);
    let mut parser = Parser::new_from_str(text);
    // Reading stops at the first problem in the text (a syntax error, or a
    // second document: PyYAML checks for the end of the stream right after
    // composing the first one).
    let mut stopped_by_tab = false;
    let stopped: Option<(usize, ParseError)> = match parser.load(&mut builder, false) {
        Err(scan) if scan.info() == "invalid indentation in quoted scalar" => {
            let mark = scan.marker();
            return Err(Reread::Indent {
                line: mark.line(),
                col: mark.col(),
            });
        }
        Err(scan) => Some({
            // yaml-rust2 may notice a tab only on the line after it.
            stopped_by_tab = scan.info().contains("tab");
            builder
                .unclosed_flow(&scan)
                .or_else(|| builder.block_end_error(&scan))
                .unwrap_or_else(|| source.scan_failure(&scan))
        }),
        Ok(()) => match parser.peek() {
            Err(scan) => Some(source.scan_failure(&scan.clone())),
            Ok((Event::StreamEnd, _)) => None,
            Ok((_, mark)) => {
                let (line, col) = first_token(&source);
                let error = source.error(
                    [
                        Some("expected a single document in the stream".to_string()),
                        Some(source.mark_at(line, col)),
                        Some("but found another document".to_string()),
                        Some(source.mark(mark)),
                    ],
                    *mark,
                );
                Some((source.index_of(mark.line(), mark.col()), error))
            }
        },
    };
    // PyYAML composes the document before constructing it, so the earliest
    // composition problem wins (an undefined alias, a block scalar in a flow
    // collection, a tab where a token should start), and only then a bad tag,
    // key type or duplicate key.
    let mut earliest = stopped;
    earlier(&mut earliest, builder.compose_error.take());
    if let Some(tabs) = &builder.tabs {
        let limit = match &earliest {
            Some(_) if stopped_by_tab => text.len(),
            // Up to and including the character the error is at.
            Some((_, error)) => error.pos.map_or(text.len(), |p| {
                let at = source.byte_of(p.line as usize, p.col as usize - 1);
                at + text[at..].chars().next().map_or(0, char::len_utf8)
            }),
            None => text.len(),
        };
        let tab = tabs.first_illegal(&source, limit).map(|(line, col)| {
            let message = cannot_start_token('\t', &source.mark_at(line, col));
            let (at, error) = source.failure_at(message, line, col);
            // When yaml-rust2 stopped because of a tab, that tab is the one.
            (if stopped_by_tab { 0 } else { at }, error)
        });
        earlier(&mut earliest, tab);
    }
    if let Some((_, error)) = earliest {
        return Err(Reread::Done(error));
    }
    if let Some(error) = builder.construct_error {
        return Err(Reread::Done(error));
    }
    Ok(builder
        .document
        .unwrap_or_else(|| Node::new(Kind::Null, Pos { line: 1, col: 1 })))
}

/// PyYAML reads only YAML 1.x and one `%YAML` directive per document. A
/// line starting with `%` at column 0 is a directive wherever it stands (it
/// ends the document before it), and a bad version is refused as soon as the
/// directives are read, before anything else is checked.
fn yaml_directive_error(source: &Source) -> Option<ParseError> {
    let mut seen = false;
    for (index, line) in source.text.split('\n').enumerate() {
        let Some(directive) = line.strip_prefix('%') else {
            if !(line.trim().is_empty() || line.trim_start().starts_with('#')) {
                seen = false;
            }
            continue;
        };
        let mut words = directive.split_whitespace();
        if words.next() != Some("YAML") {
            continue;
        }
        let problem = if seen {
            "found duplicate YAML directive"
        } else if words.next().and_then(|v| v.split('.').next()) != Some("1") {
            "found incompatible YAML document (version 1.* is required)"
        } else {
            seen = true;
            continue;
        };
        return Some(source.node_error(problem.into(), (index + 1, 0)));
    }
    None
}

/// Keeps whichever problem comes first in the text (the earlier on a tie).
fn earlier(earliest: &mut Option<(usize, ParseError)>, candidate: Option<(usize, ParseError)>) {
    if let Some((at, error)) = candidate
        && earliest.as_ref().is_none_or(|(first, _)| at <= *first)
    {
        *earliest = Some((at, error));
    }
}

/// PyYAML refuses, before scanning, any character outside YAML 1.1's
/// printable set, naming it and its position (a char index).
fn unprintable_character(text: &str) -> Option<ParseError> {
    let printable = |c: char| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{7e}' | '\u{85}' | '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..);
    let (index, c) = text.chars().enumerate().find(|&(_, c)| !printable(c))?;
    Some(ParseError {
        pointer: "/".into(),
        code: RefusalCode::InvalidYaml,
        message: format!(
            "unacceptable character #x{:04x}: special characters are not allowed\n  in \"<unicode string>\", position {index}",
            c as u32
        ),
        pos: None,
    })
}

/// The text as PyYAML's scanner sees it: a leading byte-order mark skipped,
/// and NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR and a lone CR read as line
/// breaks (yaml-rust2 reads only LF and CR LF as breaks). Every replacement is
/// one character for one, so lines and columns stay where PyYAML counts them.
fn normalize(text: &str) -> Cow<'_, str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let needs = text.contains(['\u{85}', '\u{2028}', '\u{2029}'])
        || text
            .match_indices('\r')
            .any(|(i, _)| text.as_bytes().get(i + 1) != Some(&b'\n'));
    if !needs {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{85}' | '\u{2028}' | '\u{2029}' => out.push('\n'),
            '\r' if chars.peek() != Some(&'\n') => out.push('\n'),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The normalised text, for rendering positions the way PyYAML does and for
/// looking at the characters around an event.
struct Source<'a> {
    text: &'a str,
    /// Byte offset of each line's start.
    lines: Vec<usize>,
    /// The last position `byte_of` answered: (line, column, byte).
    cursor: std::cell::Cell<(usize, usize, usize)>,
}

impl<'a> Source<'a> {
    fn new(text: &'a str) -> Self {
        let mut lines = vec![0];
        lines.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Source {
            text,
            lines,
            cursor: Default::default(),
        }
    }

    /// The text of 1-based `line`, without its line break.
    fn line(&self, line: usize) -> &'a str {
        let Some(&start) = self.lines.get(line.saturating_sub(1)) else {
            return "";
        };
        let rest = &self.text[start..];
        let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
        &rest[..end]
    }

    /// Where the stream ends: (1-based line, 0-based char column).
    fn end(&self) -> (usize, usize) {
        let last = self.lines.last().copied().unwrap_or(0);
        (self.lines.len(), self.text[last..].chars().count())
    }

    /// Char index of (1-based line, 0-based char column).
    fn index_of(&self, line: usize, col: usize) -> usize {
        let start = self.lines.get(line.saturating_sub(1)).copied().unwrap_or(0);
        self.text[..start].chars().count() + col
    }

    /// Byte offset of (1-based line, 0-based char column). Events arrive in
    /// text order, so the walk resumes from the last answer on the same line
    /// (a one-line flow document would otherwise cost a quadratic time).
    fn byte_of(&self, line: usize, col: usize) -> usize {
        let (cached_line, cached_col, cached_byte) = self.cursor.get();
        let (mut at, mut byte) = if cached_line == line && cached_col <= col {
            (cached_col, cached_byte)
        } else {
            let start = self.lines.get(line.saturating_sub(1)).copied().unwrap_or(0);
            (0, start)
        };
        while at < col {
            match self.text[byte..].chars().next() {
                Some(c) if c != '\n' => byte += c.len_utf8(),
                _ => break,
            }
            at += 1;
        }
        self.cursor.set((line, at, byte));
        byte
    }

    /// `  in "<unicode string>", line L, column C:` and the excerpt of the
    /// line around the column with a caret under it: at most 75 characters,
    /// cut with ` ... ` on a side that is longer than 36 from the column.
    fn mark_at(&self, line: usize, col: usize) -> String {
        let chars: Vec<char> = self.line(line).chars().collect();
        let pointer = col.min(chars.len());
        let (mut start, mut head) = (pointer, "");
        while start > 0 {
            start -= 1;
            if pointer - start >= 37 {
                head = " ... ";
                start += 5;
                break;
            }
        }
        let (mut end, mut tail) = (pointer, "");
        while end < chars.len() {
            end += 1;
            if end - pointer >= 37 {
                tail = " ... ";
                end -= 5;
                break;
            }
        }
        let snippet: String = chars[start..end].iter().collect();
        format!(
            "  in \"<unicode string>\", line {line}, column {}:\n    {head}{snippet}{tail}\n{}^",
            col + 1,
            " ".repeat(4 + pointer - start + head.len())
        )
    }

    fn mark(&self, mark: &Marker) -> String {
        self.mark_at(mark.line(), mark.col())
    }

    fn error<const N: usize>(&self, parts: [Option<String>; N], at: Marker) -> ParseError {
        ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message: parts.into_iter().flatten().collect::<Vec<_>>().join("\n"),
            pos: Some(pos_of(&at)),
        }
    }

    /// An `invalid_yaml` error reported at (1-based line, 0-based column),
    /// with the char index that orders it against other problems.
    fn failure_at(&self, message: String, line: usize, col: usize) -> (usize, ParseError) {
        let error = ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message,
            pos: Some(Pos {
                line: line as u32,
                col: col as u32 + 1,
            }),
        };
        (self.index_of(line, col), error)
    }

    /// A construction error as PyYAML words it: the problem, then where the
    /// node starts.
    fn node_error(&self, problem: String, start: (usize, usize)) -> ParseError {
        ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message: format!("{problem}\n{}", self.mark_at(start.0, start.1)),
            pos: Some(Pos {
                line: start.0 as u32,
                col: start.1 as u32 + 1,
            }),
        }
    }

    /// A scan error with the char index it was reported at.
    fn scan_failure(&self, error: &ScanError) -> (usize, ParseError) {
        let mark = error.marker();
        (
            self.index_of(mark.line(), mark.col()),
            self.scan_error(error),
        )
    }

    /// yaml-rust2's scan error, in PyYAML's words where the two agree on
    /// what went wrong.
    fn scan_error(&self, error: &ScanError) -> ParseError {
        let mark = *error.marker();
        let info = error.info();
        let at = self.byte_of(mark.line(), mark.col());
        let found = self.text[at..].chars().next();
        let message = match (info, found) {
            (i, _) if i.contains("unknown anchor") => {
                let name: String = self.text[at..]
                    .chars()
                    .skip(1)
                    .take_while(|c| !c.is_whitespace() && !",[]{}".contains(*c))
                    .collect();
                format!(
                    "found undefined alias {}\n{}",
                    py_repr(&name),
                    self.mark(&mark)
                )
            }
            ("while scanning a quoted scalar, found unexpected end of stream", _) => {
                let (end_line, end_col) = self.end();
                format!(
                    "while scanning a quoted scalar\n{}\nfound unexpected end of stream\n{}",
                    self.mark(&mark),
                    self.mark_at(end_line, end_col)
                )
            }
            ("while scanning a quoted scalar, found unexpected document indicator", _) => {
                let separator = (mark.line() + 1..=self.lines.len())
                    .find(|&l| {
                        let t = self.line(l);
                        (t.starts_with("---") || t.starts_with("..."))
                            && t[3..].chars().next().is_none_or(|c| c == ' ' || c == '\t')
                    })
                    .unwrap_or(mark.line());
                format!(
                    "while scanning a quoted scalar\n{}\nfound unexpected document separator\n{}",
                    self.mark(&mark),
                    self.mark_at(separator, 0)
                )
            }
            ("mapping values are not allowed in this context", _) => {
                format!("mapping values are not allowed here\n{}", self.mark(&mark))
            }
            ("block sequence entries are not allowed in this context", _) => {
                format!(
                    "sequence entries are not allowed here\n{}",
                    self.mark(&mark)
                )
            }
            ("\"-\" is only valid inside a block", _) => format!(
                "while parsing a flow node\nexpected the node content, but found '-'\n{}",
                self.mark(&mark)
            ),
            (i, Some(c)) if i.starts_with("unexpected character") => {
                cannot_start_token(c, &self.mark(&mark))
            }
            ("simple key expect ':'", _) => {
                // The key is the text on the last line before this one.
                let key_line = (1..mark.line())
                    .rev()
                    .find(|&l| {
                        let t = self.line(l).trim_start_matches(' ');
                        !t.is_empty() && !t.starts_with('#')
                    })
                    .unwrap_or(mark.line());
                let key_col =
                    self.line(key_line).len() - self.line(key_line).trim_start_matches(' ').len();
                format!(
                    "while scanning a simple key\n{}\ncould not find expected ':'\n{}",
                    self.mark_at(key_line, key_col),
                    self.mark(&mark)
                )
            }
            _ => info.to_string(),
        };
        ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message,
            pos: Some(pos_of(&mark)),
        }
    }

    /// Where a node whose content starts at `mark` really starts: PyYAML
    /// counts its properties (`!tag`, `&anchor`) as part of it.
    fn node_start(&self, mark: &Marker) -> (usize, usize) {
        let (line, mut col) = (mark.line(), mark.col());
        let chars: Vec<char> = self.line(line).chars().collect();
        loop {
            let mut end = col.min(chars.len());
            while end > 0 && chars[end - 1] == ' ' {
                end -= 1;
            }
            let mut start = end;
            while start > 0 && !matches!(chars[start - 1], ' ' | ',' | '[' | '{' | ':') {
                start -= 1;
            }
            if start < end && matches!(chars[start], '!' | '&') {
                col = start;
            } else {
                return (line, col);
            }
        }
    }

    /// The character an event's mark points at.
    fn char_at(&self, mark: &Marker) -> Option<char> {
        self.text[self.byte_of(mark.line(), mark.col())..]
            .chars()
            .next()
    }
}

/// PyYAML's words for a character no token can start with.
fn cannot_start_token(c: char, mark: &str) -> String {
    format!(
        "while scanning for the next token\nfound character {} that cannot start any token\n{mark}",
        py_repr(&c.to_string())
    )
}

fn pos_of(mark: &Marker) -> Pos {
    Pos {
        line: mark.line() as u32,
        col: mark.col() as u32 + 1,
    }
}

enum Frame {
    Seq {
        node: Node,
        anchor: usize,
        flow: bool,
        /// Where PyYAML says the collection starts (a block sequence at its
        /// first `-`, a block mapping at its first key): (line, column).
        start: Option<(usize, usize)>,
    },
    Map {
        node: Node,
        anchor: usize,
        flow: bool,
        start: Option<(usize, usize)>,
        pending_key: Option<(String, Pos)>,
    },
}

impl Frame {
    fn flow(&self) -> bool {
        match self {
            Frame::Seq { flow, .. } | Frame::Map { flow, .. } => *flow,
        }
    }

    fn start(&self) -> Option<(usize, usize)> {
        match self {
            Frame::Seq { start, .. } | Frame::Map { start, .. } => *start,
        }
    }
}

struct YamlBuilder<'s, 'a> {
    source: &'s Source<'a>,
    stack: Vec<Frame>,
    document: Option<Node>,
    anchors: std::collections::HashMap<usize, Node>,
    /// The first composition error (undefined alias, block scalar in a flow
    /// collection), with its char index.
    compose_error: Option<(usize, ParseError)>,
    /// The first construction error (tag, key type, duplicate key).
    construct_error: Option<ParseError>,
    /// Where tabs may stand, tracked only when the text has one.
    tabs: Option<TabSpans>,
}

impl<'s, 'a> YamlBuilder<'s, 'a> {
    fn new(source: &'s Source<'a>) -> Self {
        YamlBuilder {
            source,
            stack: Vec::new(),
            document: None,
            anchors: Default::default(),
            compose_error: None,
            construct_error: None,
            tabs: source.text.contains('\t').then(TabSpans::default),
        }
    }

    fn construct_failed(&mut self, error: ParseError) {
        if self.construct_error.is_none() {
            self.construct_error = Some(error);
        }
    }

    fn push_value(&mut self, node: Node, anchor: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, node.clone());
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
                            });
                            return;
                        }
                        entries.push((key, node));
                    }
                }
            },
        }
    }

    /// The text ended inside a flow collection: PyYAML names the
    /// collection and the end of the stream.
    fn unclosed_flow(&self, scan: &ScanError) -> Option<(usize, ParseError)> {
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
    fn plain_in_flow_error(&self, mark: &Marker) -> Option<(usize, ParseError)> {
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
    fn note_block_start(&mut self, child: &Event, mark: &Marker) {
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
    fn block_end_error(&self, scan: &ScanError) -> Option<(usize, ParseError)> {
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
    fn innermost_flow(&self) -> Option<(&'static str, char, Pos)> {
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

    fn in_flow(&self) -> bool {
        self.stack.iter().any(Frame::flow)
    }

    /// A collection's tag: `!!map`, `!!seq` and the other standard
    /// collection tags are read as the plain collection (the graph schema
    /// refuses what it cannot use); any other tag has no constructor.
    fn collection_tag(&mut self, tag: Option<&Tag>, mark: &Marker, sequence: bool) {
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

const YAML_TAG: &str = "tag:yaml.org,2002:";

fn full_tag(tag: &Tag) -> String {
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
                        let error = self.source.node_error(problem, start);
                        self.construct_failed(error);
                        Kind::Null
                    }
                };
                self.push_value(Node::new(kind, pos), anchor);
            }
            Event::SequenceStart(anchor, tag) => {
                self.collection_tag(tag.as_ref(), &mark, true);
                let flow = self.source.char_at(&mark) == Some('[');
                self.stack.push(Frame::Seq {
                    node: Node::new(Kind::Seq(Vec::new()), pos),
                    anchor,
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
                    flow,
                    start: flow.then(|| (mark.line(), mark.col())),
                    pending_key: None,
                })
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq { node, anchor, .. }) | Some(Frame::Map { node, anchor, .. }) => {
                    self.push_value(node, anchor)
                }
                None => {}
            },
            Event::Alias(id) => match self.anchors.get(&id).cloned() {
                Some(mut node) => {
                    node.pos = pos;
                    self.push_value(node, 0)
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

/// PyYAML separates tokens with spaces only: a tab is legal inside a quoted
/// scalar, a block scalar's body or a comment, and anywhere else stops the
/// scanner. yaml-rust2 accepts tabs in more places, so the text is checked
/// against the scalars the events found.
#[derive(Default)]
struct TabSpans {
    /// Byte ranges inside quoted and block scalars, in text order.
    spans: Vec<(usize, usize)>,
    /// A block scalar whose end is where the next event starts.
    open: Option<usize>,
}

impl TabSpans {
    fn on_event(&mut self, text: &str, event: &Event, at: usize) {
        if let Some(start) = self.open.take() {
            self.spans.push((start, at.max(start)));
        }
        if let Event::Scalar(_, style, ..) = event {
            match style {
                TScalarStyle::SingleQuoted | TScalarStyle::DoubleQuoted => {
                    self.spans.push((at, quoted_end(text, at)));
                }
                TScalarStyle::Literal | TScalarStyle::Folded => self.open = Some(at),
                _ => {}
            }
        }
    }

    fn allows(&self, byte: usize) -> bool {
        let i = self.spans.partition_point(|&(start, _)| start <= byte);
        i > 0 && byte < self.spans[i - 1].1 || self.open.is_some_and(|start| byte >= start)
    }

    /// The first tab before `limit` that PyYAML's scanner would stop at.
    fn first_illegal(&self, source: &Source, limit: usize) -> Option<(usize, usize)> {
        let text = &source.text[..limit.min(source.text.len())];
        for (byte, _) in text.match_indices('\t') {
            if self.allows(byte) {
                continue;
            }
            let line_start = text[..byte].rfind('\n').map_or(0, |i| i + 1);
            let in_comment = text[line_start..byte].char_indices().any(|(i, c)| {
                let at = line_start + i;
                c == '#' && !self.allows(at) && (i == 0 || text[..at].ends_with([' ', '\t']))
            });
            if in_comment {
                continue;
            }
            let line = text[..byte].matches('\n').count() + 1;
            let col = text[line_start..byte].chars().count();
            return Some((line, col));
        }
        None
    }
}

/// The byte after a quoted scalar's closing quote (`''` and `\"` escapes).
fn quoted_end(text: &str, start: usize) -> usize {
    let bytes = text.as_bytes();
    let Some(&quote) = bytes.get(start) else {
        return start;
    };
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b if b == quote && quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 2,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// Where the first token of the stream starts (PyYAML's start of the first
/// document): past blank lines, spaces and comments.
fn first_token(source: &Source) -> (usize, usize) {
    let mut line = 1;
    for text in source.text.split('\n') {
        let trimmed = text.trim_start_matches(' ');
        if !(trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "\r") {
            let col = text.len() - trimmed.len();
            return (line, col);
        }
        line += 1;
    }
    (line - 1, 0)
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
static BASE64: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9+/=\s]*$").expect("valid regex"));

/// A scalar's value: its explicit tag's constructor, else PyYAML's implicit
/// resolution of a plain scalar (YAML 1.1). `Err` is the construction
/// problem in PyYAML's words.
fn construct_scalar(value: &str, style: TScalarStyle, tag: Option<&Tag>) -> Result<Kind, String> {
    let Some(tag) = tag else {
        return if style == TScalarStyle::Plain {
            resolve_plain(value)
        } else {
            Ok(Kind::Str(value.to_string()))
        };
    };
    let full = full_tag(tag);
    let invalid = |what: &str| format!("invalid {what} value: {}", py_repr(value));
    match full.strip_prefix(YAML_TAG) {
        Some("str") => Ok(Kind::Str(value.to_string())),
        Some("null") => Ok(Kind::Null),
        Some("bool") => match value.to_lowercase().as_str() {
            "yes" | "true" | "on" => Ok(Kind::Bool(true)),
            "no" | "false" | "off" => Ok(Kind::Bool(false)),
            _ => Err(invalid("boolean")),
        },
        Some("int") => yaml_int(value)
            .map(Kind::Int)
            .ok_or_else(|| invalid("integer")),
        Some("float") => yaml_float(value)
            .map(Kind::Float)
            .ok_or_else(|| invalid("float")),
        Some("binary") if BASE64.is_match(value) => Ok(Kind::Other("bytes")),
        Some("binary") => Err(invalid("base64")),
        Some("timestamp") if TIMESTAMP.is_match(value) => Ok(Kind::Other("timestamp")),
        Some("timestamp") => Err(invalid("timestamp")),
        Some("seq" | "omap" | "pairs") => Err("expected a sequence node, but found scalar".into()),
        Some("map" | "set") => Err("expected a mapping node, but found scalar".into()),
        _ => Err(format!(
            "could not determine a constructor for the tag {}",
            py_repr(&full)
        )),
    }
}

fn resolve_plain(value: &str) -> Result<Kind, String> {
    Ok(match value {
        "" | "~" | "null" | "Null" | "NULL" => Kind::Null,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => Kind::Bool(true),
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            Kind::Bool(false)
        }
        // Implicitly tagged, with no constructor in the safe loader.
        "<<" => {
            return Err(format!(
                "could not determine a constructor for the tag '{YAML_TAG}merge'"
            ));
        }
        "=" => {
            return Err(format!(
                "could not determine a constructor for the tag '{YAML_TAG}value'"
            ));
        }
        v if INT.is_match(v) => {
            Kind::Int(yaml_int(v).ok_or_else(|| format!("integer out of range: {v}"))?)
        }
        v if FLOAT.is_match(v) => Kind::Float(yaml_float(v).unwrap_or(f64::NAN)),
        v if TIMESTAMP.is_match(v) => Kind::Other("timestamp"),
        v => Kind::Str(v.to_string()),
    })
}

/// An integer as YAML 1.1 writes one (also under an explicit `!!int`):
/// underscores ignored, `0b`, `0x`, leading-`0` octal, `a:b:c` base 60.
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

/// A float as YAML 1.1 writes one (also under an explicit `!!float`, where
/// `1` is `1.0`).
fn yaml_float(v: &str) -> Option<f64> {
    let cleaned = v.replace('_', "").to_lowercase();
    let (sign, body) = match cleaned.strip_prefix('-') {
        Some(rest) => (-1.0, rest.to_string()),
        None => (1.0, cleaned.trim_start_matches('+').to_string()),
    };
    if body == ".inf" {
        return Some(sign * f64::INFINITY);
    }
    if body == ".nan" {
        return Some(f64::NAN);
    }
    if body.contains(':') {
        let total = body.split(':').try_fold(0.0, |acc, part| {
            Some(acc * 60.0 + part.parse::<f64>().ok()?)
        })?;
        return Some(sign * total);
    }
    Some(sign * body.parse::<f64>().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn marks_are_rendered_as_pyyaml_renders_them() {
        let source = Source::new("key: short\n");
        assert_eq!(
            source.mark_at(1, 5),
            "  in \"<unicode string>\", line 1, column 6:\n    key: short\n         ^"
        );
        // Lines longer than the excerpt are cut 36 characters from the column.
        let long = format!("k: {}: v\n", "x".repeat(100));
        let source = Source::new(&long);
        assert_eq!(
            source.mark_at(1, 103),
            format!(
                "  in \"<unicode string>\", line 1, column 104:\n     ... {}: v\n{}^",
                "x".repeat(32),
                " ".repeat(41)
            )
        );
    }

    #[test]
    fn tabs_are_refused_where_pyyaml_refuses_them() {
        for text in ["a: 1\t\n", "a: x\ty\n", "a:\n\tb: 1\n", "a: [1,\t2]\n"] {
            let err = parse_yaml(text).unwrap_err();
            assert!(
                err.message
                    .starts_with("while scanning for the next token\nfound character '\\t'"),
                "{text:?}: {}",
                err.message
            );
        }
        for text in [
            "a: 1 # a\tcomment\n",
            "a: \"x\ty\"\n",
            "a: 'x\ty'\n",
            "a: |\n  x\ty\n",
        ] {
            assert!(parse_yaml(text).is_ok(), "{text:?}");
        }
    }

    #[test]
    fn control_characters_breaks_and_bom_follow_pyyaml() {
        assert_eq!(
            parse_yaml("a: \u{7}\n").unwrap_err().message,
            "unacceptable character #x0007: special characters are not allowed\n  in \"<unicode string>\", position 3"
        );
        let node = parse_yaml("\u{feff}a: 1\n").unwrap();
        assert_eq!(node.get("a").unwrap().kind, Kind::Int(1));
        // NEL is a line break, so `x` is a key without a value.
        assert!(
            parse_yaml("a: b\u{85}x\nc: 1\n")
                .unwrap_err()
                .message
                .starts_with("while scanning a simple key")
        );
    }

    #[test]
    fn tags_and_merge_keys_follow_the_safe_loader() {
        let node = parse_yaml("a: !!float 1\nb: !!int '0x10'\nc: !!str 1\n").unwrap();
        assert_eq!(node.get("a").unwrap().kind, Kind::Float(1.0));
        assert_eq!(node.get("b").unwrap().kind, Kind::Int(16));
        assert_eq!(node.get("c").unwrap().kind, Kind::Str("1".into()));
        let merge = parse_yaml("a:\n  <<: {b: 1}\n").unwrap_err();
        assert!(
            merge
                .message
                .starts_with("could not determine a constructor for the tag 'tag:yaml.org,2002:merge'\n  in \"<unicode string>\", line 2, column 3:"),
            "{}",
            merge.message
        );
        let custom = parse_yaml("a: &x !custom 1\n").unwrap_err();
        assert!(
            custom.message.contains("line 1, column 4:"),
            "{}",
            custom.message
        );
    }

    #[test]
    fn the_first_problem_in_the_text_wins() {
        // A syntax error before a bad tag: composition comes first.
        let err = parse_yaml("a: b: c\nd: !custom 1\n").unwrap_err();
        assert!(
            err.message
                .starts_with("mapping values are not allowed here")
        );
        // A bad tag before a syntax error: still the syntax error.
        let err = parse_yaml("d: !custom 1\na: b: c\n").unwrap_err();
        assert!(
            err.message
                .starts_with("mapping values are not allowed here")
        );
        // A block scalar in a flow mapping before a syntax error.
        let err = parse_yaml("a: {b: |\n  x}\nc: d: e\n").unwrap_err();
        assert!(
            err.message.contains("found character '|'"),
            "{}",
            err.message
        );
    }

    #[test]
    fn errors_next_to_multibyte_characters_do_not_panic() {
        for text in [
            "a: [1]\u{e9}\t\n",
            "a: \u{e9}: b\n\tc: 1\n",
            "\u{e9}: [1,\t\u{e9}]\n",
            "\u{e9}\u{e9}: {\u{e9}",
            "a: [\u{e9}\n",
        ] {
            assert!(parse_yaml(text).is_err(), "{text:?}");
        }
    }

    #[test]
    fn a_later_tab_does_not_replace_an_earlier_error_that_mentions_a_table() {
        let err = parse_yaml("stable: x: y\nb: 1\t\n").unwrap_err();
        assert!(
            err.message
                .starts_with("mapping values are not allowed here"),
            "{}",
            err.message
        );
    }

    #[test]
    fn quoted_scalars_may_continue_at_any_indentation() {
        let node = parse_yaml("a:\n  b: \"one\n  two\"\n  c: 'x\ny'\n").unwrap();
        let a = node.get("a").unwrap();
        assert_eq!(a.get("b").unwrap().kind, Kind::Str("one two".into()));
        assert_eq!(a.get("c").unwrap().kind, Kind::Str("x y".into()));
        let unclosed = parse_yaml("a: \"abc\nb: 3\n").unwrap_err();
        assert!(
            unclosed.message.ends_with("found unexpected end of stream\n  in \"<unicode string>\", line 3, column 1:\n    \n    ^"),
            "{}",
            unclosed.message
        );
        let separator = parse_yaml("a: \"x\n---\ny\"\n").unwrap_err();
        assert!(
            separator
                .message
                .contains("found unexpected document separator"),
            "{}",
            separator.message
        );
    }
}
