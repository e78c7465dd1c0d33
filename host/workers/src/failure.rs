//! Why a worker's command failed, in words fit for the run's record: how it
//! ended, then the last lines it wrote on stderr, bounded, with secrets
//! redacted. The operator needs the reason; the log must never keep a key.

use std::sync::OnceLock;
use std::time::Duration;

use bl_core::CommandResult;
use regex::Regex;

/// At most this many of the last stderr lines are kept…
pub const STDERR_LINES: usize = 20;
/// …and at most this many bytes of them.
pub const STDERR_BYTES: usize = 2048;

/// What replaces a secret.
pub const REDACTED: &str = "[redacted]";

/// Names of environment variables whose values are secrets.
fn secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
        "COOKIE",
    ]
    .iter()
    .any(|word| upper.contains(word))
}

/// Secrets' usual shapes: provider keys, bearer and basic credentials,
/// `name=value` pairs whose name says secret, and URLs' user info.
fn patterns() -> &'static [Regex] {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        [
            // sk-…, sk-ant-…, ghp_…, github_pat_…, xox?-…, AKIA…, AIza…, glpat-…
            r"\b(sk-[A-Za-z0-9_\-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|xox[abprs]-[A-Za-z0-9\-]{8,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{20,}|glpat-[A-Za-z0-9_\-]{16,})",
            r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}",
            r#"(?i)\b([A-Za-z0-9_\-]*(key|token|secret|password|passwd|credential)[A-Za-z0-9_\-]*)\s*([=:])\s*["']?[^\s"',;]{4,}"#,
            r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@:]+:[^\s/@]+@",
        ]
        .iter()
        .map(|p| Regex::new(p).expect("a valid pattern"))
        .collect()
    })
}

/// `text` with every secret in it replaced: the values of `known` (what the
/// command was granted under secret names), then anything shaped like one.
pub fn redact(text: &str, known: &[String]) -> String {
    let mut out = text.to_string();
    for value in known.iter().filter(|v| v.len() >= 4) {
        out = out.replace(value.as_str(), REDACTED);
    }
    let [keys, schemes, pairs, userinfo] = patterns() else {
        unreachable!("four patterns")
    };
    out = keys.replace_all(&out, REDACTED).into_owned();
    out = schemes
        .replace_all(&out, format!("$1 {REDACTED}").as_str())
        .into_owned();
    out = pairs
        .replace_all(&out, format!("$1$3{REDACTED}").as_str())
        .into_owned();
    userinfo
        .replace_all(&out, format!("$1{REDACTED}@").as_str())
        .into_owned()
}

/// The values, among `env`, of variables whose names say they are secret.
pub fn secret_values(env: &[(String, String)]) -> Vec<String> {
    env.iter()
        .filter(|(name, _)| secret_name(name))
        .map(|(_, value)| value.clone())
        .collect()
}

/// The last lines of `stderr` (at most [`STDERR_LINES`] and
/// [`STDERR_BYTES`]), blank lines dropped.
pub fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut kept: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for line in lines.iter().rev().take(STDERR_LINES) {
        if bytes + line.len() + 1 > STDERR_BYTES {
            if kept.is_empty() {
                // One line longer than the whole budget: its end.
                let start = line.len() - STDERR_BYTES.min(line.len());
                let start = (start..line.len())
                    .find(|i| line.is_char_boundary(*i))
                    .unwrap_or(line.len());
                kept.push(&line[start..]);
            }
            break;
        }
        bytes += line.len() + 1;
        kept.push(line);
    }
    kept.reverse();
    kept.join("\n")
}

/// Why `program` failed: how it ended, then its stderr's last lines, with
/// `secrets` and anything shaped like a secret redacted.
pub fn describe(
    program: &str,
    result: &CommandResult,
    deadline: Duration,
    secrets: &[String],
) -> String {
    let ended = match (result.timed_out, result.exit_code) {
        (true, _) => format!("'{program}' timed out after {deadline:?}"),
        (_, Some(code)) => format!("'{program}' exited with code {code}"),
        (_, None) => format!("'{program}' was killed by a signal"),
    };
    let tail = stderr_tail(&result.stderr_tail);
    let text = if tail.is_empty() {
        format!("{ended} (it wrote nothing on stderr)")
    } else {
        format!("{ended}; its last words on stderr:\n{tail}")
    };
    redact(&text, secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_by_value_and_by_shape() {
        let known = vec!["hunter2-very-secret".to_string()];
        let text = "login failed for hunter2-very-secret\n\
                    ANTHROPIC_API_KEY=sk-ant-api03-abcdefghijklmnop\n\
                    Authorization: Bearer abcdef123456789\n\
                    fetching https://user:pa55word@example.test/x\n\
                    token: \"0123456789abcdef\"";
        let out = redact(text, &known);
        for secret in [
            "hunter2",
            "sk-ant-api03",
            "abcdef123456789",
            "pa55word",
            "0123456789abcdef",
        ] {
            assert!(!out.contains(secret), "{secret} survived in:\n{out}");
        }
        assert!(out.contains("ANTHROPIC_API_KEY=[redacted]"), "{out}");
        assert!(out.contains("Bearer [redacted]"), "{out}");
        assert!(out.contains("https://[redacted]@example.test/x"), "{out}");
        assert!(out.contains("login failed for [redacted]"), "{out}");
    }

    #[test]
    fn only_the_last_lines_are_kept_within_the_budget() {
        let many: String = (1..=50).map(|i| format!("line {i}\n\n")).collect();
        let tail = stderr_tail(many.as_bytes());
        assert_eq!(tail.lines().count(), STDERR_LINES);
        assert!(
            tail.starts_with("line 31") && tail.ends_with("line 50"),
            "{tail}"
        );
        let long = "x".repeat(10_000);
        assert_eq!(stderr_tail(long.as_bytes()).len(), STDERR_BYTES);
    }

    #[test]
    fn a_failure_says_how_it_ended_and_why() {
        let result = CommandResult {
            exit_code: Some(1),
            stdout_tail: Vec::new(),
            stderr_tail: b"bwrap: Can't mkdir parents for /root/x/run: Permission denied\n"
                .to_vec(),
            timed_out: false,
            truncated: false,
            duration: Duration::ZERO,
        };
        let text = describe("claude", &result, Duration::from_secs(5), &[]);
        assert_eq!(
            text,
            "'claude' exited with code 1; its last words on stderr:\nbwrap: Can't mkdir parents for /root/x/run: Permission denied"
        );
    }
}
