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
            // sk-…, sk-ant-…, ghp_…, github_pat_…, xox?-…, AKIA…, AIza…, glpat-…, JWTs
            r"\b(sk-[A-Za-z0-9_\-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}|xox[abprs]-[A-Za-z0-9\-]{8,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{20,}|glpat-[A-Za-z0-9_\-]{16,}|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*)",
            r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}",
            // a name that says secret, then `=`, `:` (a JSON key's closing
            // quote allowed) or spaces, then the value
            r#"(?i)\b([A-Za-z0-9_\-]*(key|token|secret|password|passwd|credential)[A-Za-z0-9_\-]*)(["']?\s*[=:]\s*["']?|\s+)([^\s"',;]{8,})"#,
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
        .replace_all(&out, |c: &regex::Captures| {
            // After mere spaces, only what looks like a token (long) is
            // taken for one: "missing key handling" stays as it is.
            let spaced = c[3].trim().is_empty();
            if spaced && c[4].len() < 16 {
                c[0].to_string()
            } else {
                format!("{}{}{REDACTED}", &c[1], &c[3])
            }
        })
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

/// The last lines of `text` (at most [`STDERR_LINES`] and
/// [`STDERR_BYTES`]), blank lines dropped.
pub fn last_lines(text: &str) -> String {
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
    // Redacted whole, then cut: a secret is never cut in two first. A
    // captured tail that lost its start begins mid-line: that line goes.
    let mut stderr = redact(&String::from_utf8_lossy(&result.stderr_tail), secrets);
    if result.truncated
        && let Some(newline) = stderr.find('\n')
    {
        stderr.drain(..=newline);
    }
    let tail = last_lines(&stderr);
    if tail.is_empty() {
        format!("{ended} (it wrote nothing on stderr)")
    } else {
        format!("{ended}; its last words on stderr:\n{tail}")
    }
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
                    token: \"0123456789abcdef\"\n\
                    {\"access_token\":\"abcdefgh12345678\"}\n\
                    x-goog-api-key AIzaSyA-very-secret-value-here\n\
                    session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk";
        let out = redact(text, &known);
        for secret in [
            "hunter2",
            "sk-ant-api03",
            "abcdef123456789",
            "pa55word",
            "0123456789abcdef",
            "abcdefgh12345678",
            "very-secret-value",
            "eyJhbGciOiJIUzI1NiJ9",
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
        let tail = last_lines(&many);
        assert_eq!(tail.lines().count(), STDERR_LINES);
        assert!(
            tail.starts_with("line 31") && tail.ends_with("line 50"),
            "{tail}"
        );
        let long = "x".repeat(10_000);
        assert_eq!(last_lines(&long).len(), STDERR_BYTES);
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
