//! `--redact`: what a ledger line may not keep, rewritten before the line
//! is written and hashed (so it can never be applied afterwards).
//!
//! - `paths`: the loop directory becomes `<workspace>`, and any other
//!   absolute path (one that starts a word, follows `=` or a quote) becomes
//!   `<redacted-path>` up to the next space or quote; URLs and relative
//!   paths are kept. Applies to the verdict's detail and every string of
//!   its evidence.
//! - `strict`: as `paths`, and captured output (`tail`) is replaced by the
//!   sha256 of the original.

use crate::ledger::{LedgerLine, Ordered};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    Paths,
    Strict,
}

impl Mode {
    pub fn parse(text: &str) -> Option<Mode> {
        match text {
            "off" => Some(Mode::Off),
            "paths" => Some(Mode::Paths),
            "strict" => Some(Mode::Strict),
            _ => None,
        }
    }
}

pub const REDACTED_PATH: &str = "<redacted-path>";

/// `text` with its absolute paths redacted.
pub fn redact_text(text: &str, loop_dir: &str) -> String {
    let text = if loop_dir.len() > 1 {
        text.replace(loop_dir, "<workspace>")
    } else {
        text.to_string()
    };
    let chars: Vec<char> = text.chars().collect();
    let boundary = |c: char| c.is_whitespace() || matches!(c, '=' | '"' | '\'' | '(' | ',');
    let stop = |c: char| c.is_whitespace() || matches!(c, '"' | '\'');
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts = i == 0 || boundary(chars[i - 1]);
        let unix = chars[i] == '/';
        let windows = chars[i].is_ascii_alphabetic()
            && chars.get(i + 1) == Some(&':')
            && chars.get(i + 2) == Some(&'\\');
        if starts && (unix || windows) {
            out.push_str(REDACTED_PATH);
            while i < chars.len() && !stop(chars[i]) {
                i += 1;
            }
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

fn redact_value(value: &Ordered, mode: Mode, loop_dir: &str, key: Option<&str>) -> Ordered {
    match value {
        Ordered::Json(Value::String(s)) => {
            if mode == Mode::Strict && key == Some("tail") {
                Ordered::Json(Value::String(format!(
                    "sha256:{}",
                    bl_core::sha256_hex(s.as_bytes())
                )))
            } else {
                Ordered::Json(Value::String(redact_text(s, loop_dir)))
            }
        }
        Ordered::Json(other) => Ordered::Json(other.clone()),
        Ordered::Object(pairs) => Ordered::Object(
            pairs
                .iter()
                .map(|(k, v)| (k.clone(), redact_value(v, mode, loop_dir, Some(k))))
                .collect(),
        ),
        Ordered::Array(items) => Ordered::Array(
            items
                .iter()
                .map(|v| redact_value(v, mode, loop_dir, None))
                .collect(),
        ),
    }
}

/// The line as `mode` lets it be written.
pub fn redact_line(line: &LedgerLine, mode: Mode, loop_dir: &str) -> LedgerLine {
    let mut line = line.clone();
    if mode == Mode::Off {
        return line;
    }
    line.verdict.detail = redact_text(&line.verdict.detail, loop_dir);
    line.verdict.evidence = redact_value(&line.verdict.evidence, mode, loop_dir, None);
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_go_urls_and_relative_paths_stay() {
        let loop_dir = "/home/me/loops/a11y";
        assert_eq!(
            redact_text("python3 /tmp/x/paths.py", loop_dir),
            "python3 <redacted-path>"
        );
        assert_eq!(
            redact_text(
                "cwd=/home/me/loops/a11y/.bounded-loops/runs/r1/workspace loop=/home/me/loops/a11y",
                loop_dir
            ),
            "cwd=<workspace>/.bounded-loops/runs/r1/workspace loop=<workspace>"
        );
        assert_eq!(redact_text("/tmp/a b/c", loop_dir), "<redacted-path> b/c");
        assert_eq!(redact_text("'/var/log/x'", loop_dir), "'<redacted-path>'");
        assert_eq!(
            redact_text(r"C:\Users\me url=https://x/a", loop_dir),
            "<redacted-path> url=https://x/a"
        );
        assert_eq!(
            redact_text("seed/check.py and ./a/b", loop_dir),
            "seed/check.py and ./a/b"
        );
    }

    #[test]
    fn strict_replaces_output_by_its_digest_of_the_original() {
        use crate::ledger::*;
        let mut line = crate::ledger::sample_line();
        line.verdict = VerdictRecord {
            passed: false,
            detail: "OS error launching command '/opt/x'".into(),
            evidence: Ordered::object([
                ("cmd", "/opt/x --y".into()),
                ("tail", "at /srv/data\n".into()),
            ]),
        };
        let paths = redact_line(&line, Mode::Paths, "/nowhere");
        assert_eq!(
            paths.verdict.detail,
            "OS error launching command '<redacted-path>'"
        );
        assert_eq!(
            paths.verdict.evidence.to_json()["tail"],
            "at <redacted-path>\n"
        );
        let strict = redact_line(&line, Mode::Strict, "/nowhere");
        assert_eq!(
            strict.verdict.evidence.to_json()["cmd"],
            "<redacted-path> --y"
        );
        assert_eq!(
            strict.verdict.evidence.to_json()["tail"],
            format!("sha256:{}", bl_core::sha256_hex(b"at /srv/data\n"))
        );
        assert_eq!(redact_line(&line, Mode::Off, "/nowhere"), line);
    }
}
