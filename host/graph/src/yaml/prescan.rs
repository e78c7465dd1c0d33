//! Checks on the raw text, before and around the parser: unprintable
//! characters, the `%YAML` directive, line-break normalisation, and where
//! tabs may stand.

use super::*;
use std::borrow::Cow;

use yaml_rust2::parser::Event;
use yaml_rust2::scanner::TScalarStyle;

use crate::error::Refusal as ParseError;
use crate::error::RefusalCode;

pub(super) fn yaml_directive_error(source: &Source) -> Option<ParseError> {
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
pub(super) fn earlier(
    earliest: &mut Option<(usize, ParseError)>,
    candidate: Option<(usize, ParseError)>,
) {
    if let Some((at, error)) = candidate
        && earliest.as_ref().is_none_or(|(first, _)| at <= *first)
    {
        *earliest = Some((at, error));
    }
}

/// PyYAML refuses, before scanning, any character outside YAML 1.1's
/// printable set, naming it and its position (a char index).
pub(super) fn unprintable_character(text: &str) -> Option<ParseError> {
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
        focus: None,
        hints: Vec::new(),
    })
}

/// The text as PyYAML's scanner sees it: a leading byte-order mark skipped,
/// and NEL, LINE SEPARATOR, PARAGRAPH SEPARATOR and a lone CR read as line
/// breaks (yaml-rust2 reads only LF and CR LF as breaks). Every replacement is
/// one character for one, so lines and columns stay where PyYAML counts them.
pub(super) fn normalize(text: &str) -> Cow<'_, str> {
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
/// PyYAML separates tokens with spaces only: a tab is legal inside a quoted
/// scalar, a block scalar's body or a comment, and anywhere else stops the
/// scanner. yaml-rust2 accepts tabs in more places, so the text is checked
/// against the scalars the events found.
#[derive(Default)]
pub(super) struct TabSpans {
    /// Byte ranges inside quoted and block scalars, in text order.
    pub(super) spans: Vec<(usize, usize)>,
    /// A block scalar whose end is where the next event starts.
    pub(super) open: Option<usize>,
}

impl TabSpans {
    pub(super) fn on_event(&mut self, text: &str, event: &Event, at: usize) {
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

    pub(super) fn allows(&self, byte: usize) -> bool {
        let i = self.spans.partition_point(|&(start, _)| start <= byte);
        i > 0 && byte < self.spans[i - 1].1 || self.open.is_some_and(|start| byte >= start)
    }

    /// The first tab before `limit` that PyYAML's scanner would stop at.
    pub(super) fn first_illegal(&self, source: &Source, limit: usize) -> Option<(usize, usize)> {
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
pub(super) fn quoted_end(text: &str, start: usize) -> usize {
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
pub(super) fn first_token(source: &Source) -> (usize, usize) {
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
