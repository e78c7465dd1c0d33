//! Reading a YAML manifest as bounded-loops 0.7 reads it: PyYAML's safe
//! loader over the text, YAML 1.1 scalars (`yes`/`no`/`on`/`off` are
//! booleans, `0x10`, `0o7`, `1_000` and `1:30` are integers, dates are
//! timestamps), one document only, string keys only, duplicate keys refused,
//! and no merge keys (`<<` has no constructor there). Unlike PyYAML, which
//! shares an anchored node among its aliases, the tree here copies it, so a
//! document may hold at most [`MAX_EXPANDED_NODES`] nodes and
//! [`MAX_EXPANDED_BYTES`] bytes of text with its aliases expanded: a few
//! hundred bytes of nested aliases, or a long string aliased many times,
//! are refused, not grown.
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
//!
//! By job: [`prescan`] looks at the raw text before and around the parser
//! (characters, tabs, directives), [`source`] maps positions and renders
//! PyYAML's marks and messages, [`builder`] turns parser events into the
//! [`Node`] tree, and [`scalars`] resolves YAML 1.1 scalars and tags.

mod builder;
mod emit;
mod prescan;

pub use builder::{MAX_EXPANDED_BYTES, MAX_EXPANDED_NODES};
pub use emit::to_yaml;
mod scalars;
mod source;

use std::borrow::Cow;

use yaml_rust2::parser::{Event, Parser};

use crate::doc::{Kind, Node, Pos};
use crate::error::Refusal as ParseError;
use crate::error::RefusalCode;

use builder::*;
use prescan::*;
use scalars::*;
use source::*;

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
            focus: None,
            hints: Vec::new(),
        },
    })
}

pub(super) enum Reread {
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
pub(super) fn indent_quoted(text: &str, line: usize, col: usize) -> Option<String> {
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

pub(super) fn parse_normalized(text: &str) -> Result<Node, Reread> {
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
    fn the_shortcuts_past_the_scalar_patterns_resolve_as_the_patterns_do() {
        // Plain decimals and words skip the patterns; anything else that
        // could be a number still goes through them.
        for v in [
            "0",
            "7",
            "10",
            "007",
            "0_1",
            "1_0",
            "99999999999999999999999999999999999999999",
            "-3",
            "+3",
            ".5",
            ".inf",
            "-.inf",
            ".nan",
            "1:30",
            "2026-01-02",
            "0x1f",
            "0b11",
            "abc",
            "a1",
            "_1",
            "~",
            "yes",
            "Off",
            "1e5",
            "1.0e+5",
            "12abc",
            "",
        ] {
            let shortcut = scalars::resolve_plain(v).map_err(|e| e.to_string());
            let patterns = if v.is_empty() || ["~", "yes", "Off"].contains(&v) {
                shortcut.clone()
            } else if scalars::INT.is_match(v) {
                scalars::yaml_int(v)
                    .map(Kind::Int)
                    .ok_or_else(|| format!("integer out of range: {v}"))
            } else if scalars::FLOAT.is_match(v) {
                Ok(Kind::Float(scalars::yaml_float(v).unwrap_or(f64::NAN)))
            } else if scalars::TIMESTAMP.is_match(v) {
                Ok(Kind::Other("timestamp"))
            } else {
                Ok(Kind::Str(v.to_string()))
            };
            match (&shortcut, &patterns) {
                (Ok(Kind::Float(a)), Ok(Kind::Float(b))) if a.is_nan() => {
                    assert!(b.is_nan(), "{v}")
                }
                _ => assert_eq!(shortcut, patterns, "{v}"),
            }
        }
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
