//! Recorded replies: a connector that answers from a file instead of a
//! model (bl's cassette for graphs, like the stub runner's for loops). A
//! connection whose `provider_id` is `recorded` takes its turns from it: no
//! key, no network. Each reply may also write files into the attempt's
//! workspace (what the agent would have written); the node is then judged
//! from them like any other.
//!
//! ```json
//! {"api_version": "bl.dev/recorded-replies/v1",
//!  "replies": [{"node_id": "lens-security", "attempt": "*",
//!               "reply": "…", "usage": {"input_tokens": 1200, "output_tokens": 800},
//!               "files": [{"path": "workspace/lens-security.md", "content": "…"}]}]}
//! ```
//!
//! `attempt` is a number or `"*"` (any attempt); an exact attempt wins.

use std::path::{Component, Path};
use std::sync::Arc;

use bl_run::events::Usage;
use bl_run::executor::{WorkFuture, WorkReply, WorkRequest, Worker};
use serde_json::Value;

/// The provider id that selects recorded replies.
pub const PROVIDER: &str = bl_run::executor::RECORDED_PROVIDER;
pub const API_VERSION: &str = "bl.dev/recorded-replies/v1";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    node_id: String,
    /// `None`: any attempt.
    attempt: Option<u32>,
    reply: String,
    usage: Option<Usage>,
    files: Vec<(String, String)>,
}

/// A file of recorded replies, checked when it is read.
#[derive(Debug, Clone)]
pub struct RecordedReplies {
    source: String,
    replies: Arc<Vec<Recorded>>,
}

/// A recordings file that cannot be used: the file, the JSON pointer of
/// the bad value, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecordedError(String);

fn field<'a>(v: &'a Value, key: &str, at: &str) -> Result<&'a Value, RecordedError> {
    v.get(key)
        .ok_or_else(|| RecordedError(format!("{at}: missing field '{key}'")))
}

fn text(v: &Value, key: &str, at: &str) -> Result<String, RecordedError> {
    field(v, key, at)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| RecordedError(format!("{at}/{key}: must be a string")))
}

impl RecordedReplies {
    /// Reads the replies in `text`; errors name `source` and the JSON
    /// pointer of the bad value.
    pub fn parse(source: &str, json: &str) -> Result<Self, RecordedError> {
        let doc: Value = serde_json::from_str(json).map_err(|e| {
            RecordedError(format!(
                "{source}: not valid JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ))
        })?;
        let fail = |why: String| RecordedError(format!("{source}: {why}"));
        let failed = |e: RecordedError| fail(e.0);
        match doc.get("api_version").and_then(Value::as_str) {
            Some(API_VERSION) => {}
            other => {
                return Err(fail(format!(
                    "/api_version: must be \"{API_VERSION}\", found {}",
                    other.map_or("nothing".to_string(), |v| format!("\"{v}\""))
                )));
            }
        }
        let list = doc
            .get("replies")
            .and_then(Value::as_array)
            .ok_or_else(|| fail("/replies: must be a list of replies".into()))?;
        let mut replies = Vec::new();
        for (i, entry) in list.iter().enumerate() {
            let at = format!("/replies/{i}");
            if let Some(unknown) = entry.as_object().and_then(|o| {
                o.keys().find(|k| {
                    !["node_id", "attempt", "reply", "usage", "files"].contains(&k.as_str())
                })
            }) {
                return Err(fail(format!(
                    "{at}/{unknown}: unknown field (known: node_id, attempt, reply, usage, files)"
                )));
            }
            let node_id = text(entry, "node_id", &at).map_err(failed)?;
            let attempt = match entry.get("attempt") {
                None => None,
                Some(Value::String(s)) if s == "*" => None,
                Some(v) => Some(
                    v.as_u64()
                        .filter(|n| *n >= 1)
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| {
                            fail(format!(
                                "{at}/attempt: must be an attempt number (1, 2, …) or \"*\""
                            ))
                        })?,
                ),
            };
            let reply = text(entry, "reply", &at).map_err(failed)?;
            let usage = match entry.get("usage") {
                None | Some(Value::Null) => None,
                Some(u) => {
                    let n = |k: &str| {
                        u.get(k).and_then(Value::as_u64).ok_or_else(|| {
                            fail(format!("{at}/usage/{k}: must be a whole number of tokens"))
                        })
                    };
                    Some(Usage {
                        input_tokens: n("input_tokens")?,
                        output_tokens: n("output_tokens")?,
                        cost_microunits: 0,
                    })
                }
            };
            let mut files = Vec::new();
            if let Some(list) = entry.get("files") {
                let list = list.as_array().ok_or_else(|| {
                    fail(format!("{at}/files: must be a list of {{path, content}}"))
                })?;
                for (j, f) in list.iter().enumerate() {
                    let fat = format!("{at}/files/{j}");
                    let path = text(f, "path", &fat).map_err(failed)?;
                    let inside = !path.is_empty()
                        && Path::new(&path)
                            .components()
                            .all(|c| matches!(c, Component::Normal(_)));
                    if !inside {
                        return Err(fail(format!(
                            "{fat}/path: '{path}' must be a relative path inside the workspace, without '..'"
                        )));
                    }
                    files.push((path, text(f, "content", &fat).map_err(failed)?));
                }
            }
            replies.push(Recorded {
                node_id,
                attempt,
                reply,
                usage,
                files,
            });
        }
        Ok(RecordedReplies {
            source: source.to_string(),
            replies: Arc::new(replies),
        })
    }

    /// The reply for this node's attempt: an exact attempt first, then `*`.
    fn find(&self, node: &str, attempt: u32) -> Option<&Recorded> {
        let of_node = || self.replies.iter().filter(move |r| r.node_id == node);
        of_node()
            .find(|r| r.attempt == Some(attempt))
            .or_else(|| of_node().find(|r| r.attempt.is_none()))
    }

    /// The node ids that have a reply.
    /// The file the replies were read from.
    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.replies.iter().map(|r| r.node_id.as_str())
    }
}

impl Worker for RecordedReplies {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let this = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || this.replay(&request))
                .await
                .unwrap_or_else(|e| WorkReply::Fault(format!("recorded-reply task failed: {e}")))
        })
    }
}

impl RecordedReplies {
    fn replay(&self, request: &WorkRequest) -> WorkReply {
        let Some(recorded) = self.find(&request.node_id, request.attempt) else {
            return WorkReply::Fault(format!(
                "{} has no recorded reply for node '{}' attempt {}",
                self.source, request.node_id, request.attempt
            ));
        };
        for (path, content) in &recorded.files {
            let dest = request.workspace.join(path);
            let written = dest
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| {
                    // Never through a link the workspace already holds.
                    match std::fs::symlink_metadata(&dest) {
                        Ok(m) if m.file_type().is_symlink() => std::fs::remove_file(&dest),
                        _ => Ok(()),
                    }
                })
                .and_then(|_| std::fs::write(&dest, content));
            if let Err(e) = written {
                return WorkReply::Fault(format!("cannot write the recorded {path}: {e}"));
            }
        }
        WorkReply::Reply {
            bytes: recorded.reply.as_bytes().to_vec(),
            usage: recorded.usage,
            reported_by: PROVIDER.to_string(),
            plugins: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_recordings_are_refused_with_the_pointer() {
        let bad = |json: &str| {
            RecordedReplies::parse("r.json", json)
                .unwrap_err()
                .to_string()
        };
        assert!(bad("{}").contains("r.json: /api_version"), "{}", bad("{}"));
        let doc =
            |entry: &str| format!(r#"{{"api_version": "{API_VERSION}", "replies": [{entry}]}}"#);
        let e = bad(&doc(
            r#"{"node_id": "a", "reply": "x", "files": [{"path": "../x", "content": ""}]}"#,
        ));
        assert!(e.contains("/replies/0/files/0/path"), "{e}");
        let e = bad(&doc(r#"{"node_id": "a", "reply": "x", "attempt": 0}"#));
        assert!(e.contains("/replies/0/attempt"), "{e}");
        let e = bad(&doc(r#"{"node_id": "a", "reply": "x", "extra": 1}"#));
        assert!(e.contains("/replies/0/extra: unknown field"), "{e}");
    }

    #[test]
    fn an_exact_attempt_wins_over_any() {
        let r = RecordedReplies::parse(
            "r.json",
            &format!(
                r#"{{"api_version": "{API_VERSION}", "replies": [
                {{"node_id": "a", "attempt": "*", "reply": "any"}},
                {{"node_id": "a", "attempt": 2, "reply": "second"}}]}}"#
            ),
        )
        .unwrap();
        assert_eq!(r.find("a", 1).unwrap().reply, "any");
        assert_eq!(r.find("a", 2).unwrap().reply, "second");
        assert!(r.find("b", 1).is_none());
    }
}
