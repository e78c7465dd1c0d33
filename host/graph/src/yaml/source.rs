//! Positions in the text and PyYAML's rendering of them: the mark
//! (`in "<unicode string>", line L, column C:`), the excerpt with its caret,
//! and PyYAML's words for the errors both parsers agree on.

use yaml_rust2::scanner::{Marker, ScanError};

use crate::doc::{Pos, py_repr};
use crate::error::Refusal as ParseError;
use crate::error::RefusalCode;

pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    /// Byte offset of each line's start.
    pub(super) lines: Vec<usize>,
    /// The last position `byte_of` answered: (line, column, byte).
    pub(super) cursor: std::cell::Cell<(usize, usize, usize)>,
}

impl<'a> Source<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        let mut lines = vec![0];
        lines.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Source {
            text,
            lines,
            cursor: Default::default(),
        }
    }

    /// The text of 1-based `line`, without its line break.
    pub(super) fn line(&self, line: usize) -> &'a str {
        let Some(&start) = self.lines.get(line.saturating_sub(1)) else {
            return "";
        };
        let rest = &self.text[start..];
        let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
        &rest[..end]
    }

    /// Where the stream ends: (1-based line, 0-based char column).
    pub(super) fn end(&self) -> (usize, usize) {
        let last = self.lines.last().copied().unwrap_or(0);
        (self.lines.len(), self.text[last..].chars().count())
    }

    /// Char index of (1-based line, 0-based char column).
    pub(super) fn index_of(&self, line: usize, col: usize) -> usize {
        let start = self.lines.get(line.saturating_sub(1)).copied().unwrap_or(0);
        self.text[..start].chars().count() + col
    }

    /// Byte offset of (1-based line, 0-based char column). Events arrive in
    /// text order, so the walk resumes from the last answer on the same line
    /// (a one-line flow document would otherwise cost a quadratic time).
    pub(super) fn byte_of(&self, line: usize, col: usize) -> usize {
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
    pub(super) fn mark_at(&self, line: usize, col: usize) -> String {
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

    pub(super) fn mark(&self, mark: &Marker) -> String {
        self.mark_at(mark.line(), mark.col())
    }

    pub(super) fn error<const N: usize>(
        &self,
        parts: [Option<String>; N],
        at: Marker,
    ) -> ParseError {
        ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message: parts.into_iter().flatten().collect::<Vec<_>>().join("\n"),
            pos: Some(pos_of(&at)),
            focus: None,
            hints: Vec::new(),
        }
    }

    /// An `invalid_yaml` error reported at (1-based line, 0-based column),
    /// with the char index that orders it against other problems.
    pub(super) fn failure_at(
        &self,
        message: String,
        line: usize,
        col: usize,
    ) -> (usize, ParseError) {
        let error = ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message,
            pos: Some(Pos {
                line: line as u32,
                col: col as u32 + 1,
            }),
            focus: None,
            hints: Vec::new(),
        };
        (self.index_of(line, col), error)
    }

    /// A construction error as PyYAML words it: the problem, then where the
    /// node starts.
    pub(super) fn node_error(&self, problem: String, start: (usize, usize)) -> ParseError {
        ParseError {
            pointer: "/".into(),
            code: RefusalCode::InvalidYaml,
            message: format!("{problem}\n{}", self.mark_at(start.0, start.1)),
            pos: Some(Pos {
                line: start.0 as u32,
                col: start.1 as u32 + 1,
            }),
            focus: None,
            hints: Vec::new(),
        }
    }

    /// A scan error with the char index it was reported at.
    pub(super) fn scan_failure(&self, error: &ScanError) -> (usize, ParseError) {
        let mark = error.marker();
        (
            self.index_of(mark.line(), mark.col()),
            self.scan_error(error),
        )
    }

    /// yaml-rust2's scan error, in PyYAML's words where the two agree on
    /// what went wrong.
    pub(super) fn scan_error(&self, error: &ScanError) -> ParseError {
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
            focus: None,
            hints: Vec::new(),
        }
    }

    /// Where a node whose content starts at `mark` really starts: PyYAML
    /// counts its properties (`!tag`, `&anchor`) as part of it.
    pub(super) fn node_start(&self, mark: &Marker) -> (usize, usize) {
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
    pub(super) fn char_at(&self, mark: &Marker) -> Option<char> {
        self.text[self.byte_of(mark.line(), mark.col())..]
            .chars()
            .next()
    }
}

/// PyYAML's words for a character no token can start with.
pub(super) fn cannot_start_token(c: char, mark: &str) -> String {
    format!(
        "while scanning for the next token\nfound character {} that cannot start any token\n{mark}",
        py_repr(&c.to_string())
    )
}

pub(super) fn pos_of(mark: &Marker) -> Pos {
    Pos {
        line: mark.line() as u32,
        col: mark.col() as u32 + 1,
    }
}
