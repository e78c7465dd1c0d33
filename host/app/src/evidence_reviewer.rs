//! The reviewer's side of the evidence plane: `bl evidence approve`,
//! `reject`, `reconcile` and the console page. What waits for a person is
//! listed from a running service. A person's answer is read from where the
//! decision stands in a running service, bound to everything the rules
//! check (the decision, the identity, the thread, the pause it answers,
//! the tool, the arguments' digest, the policy's version, an expiry),
//! signed with the reviewer's key for that workspace, and submitted. The
//! signature is the authority; the service's token only carries it.

use std::time::Duration;

use bl_core::evidence::{Approval, Review};
use bl_store::SigningKey;
use serde_json::Value;

use crate::error::{AppError, AppResult};
use crate::evidence::{SignedReview, sign_review};

/// A running `bl evidence serve`, as a reviewer reaches it.
pub struct Service {
    /// `http://HOST:PORT/v1` or `unix:PATH`, as `serve` printed it.
    pub url: String,
    pub token: String,
}

/// A reviewer at a service: whose key signs, and which workspace key the
/// reviewer expects the service to sign with (a service signing with
/// another is refused before anything is signed).
pub struct Reviewer {
    pub service: Service,
    /// Its name is the reviewer a review names.
    pub key: SigningKey,
    pub workspace: Option<String>,
}

/// What the reviewer decides.
pub enum Verdict {
    /// Approve the pause the decision is at, for `valid_for` from now.
    Approve {
        valid_for: Duration,
    },
    Reject {
        reason: String,
    },
    /// After `reconciliation_required`: whether the tool did run.
    Reconcile {
        executed: bool,
    },
}

/// Whether the review is signed and submitted, or only shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submit {
    SignAndSubmit,
    /// Built from the decision as it stands, and returned unsigned: what
    /// the reviewer would sign.
    DryRun,
    /// Signed and submitted only if the decision still stands as it did
    /// when it was shown (its [`WaitingDecision::shown`] digest): a
    /// reviewer never signs for what they did not see.
    IfShown(String),
}

/// A review as it was signed and submitted.
pub struct Reviewed {
    /// Exactly what was signed.
    pub review: Review,
    /// The workspace key it was signed for.
    pub workspace: String,
    /// The service's answer (its `stage`, `sequence`, `receipt`); null
    /// for a dry run.
    pub answer: Value,
}

/// What waits for a person at a service.
pub struct Waiting {
    /// The workspace key the service signs with.
    pub workspace: String,
    pub decisions: Vec<WaitingDecision>,
}

/// A decision awaiting an approval (paused at an interrupt) or a
/// reconciliation, as the service states it.
pub struct WaitingDecision {
    /// The service's view (`GET /v1/decisions/{op}`).
    pub view: Value,
    /// The digest of what a review binds in it, to send back with one.
    pub shown: String,
}

impl Reviewer {
    /// The name reviews are signed under.
    pub fn name(&self) -> &str {
        self.key.name()
    }

    /// Every decision that waits for a person.
    pub fn waiting(&self) -> AppResult<Waiting> {
        let listed = self
            .service
            .call(reqwest::Method::GET, "/decisions", None)?;
        let workspace = self.expected_workspace(&listed)?;
        let decisions = match listed.get("decisions") {
            Some(Value::Array(all)) => all
                .iter()
                .map(|view| WaitingDecision {
                    shown: shown_digest(view),
                    view: view.clone(),
                })
                .collect(),
            _ => return Err(not_a_service("/decisions")),
        };
        Ok(Waiting {
            workspace,
            decisions,
        })
    }

    /// Reads decision `operation_id` from the service, signs `verdict` on
    /// it and submits it, as `submit` says.
    pub fn review(
        &self,
        operation_id: &str,
        verdict: Verdict,
        now: u64,
        submit: Submit,
    ) -> AppResult<Reviewed> {
        let standing = self.service.call(
            reqwest::Method::GET,
            &format!("/decisions/{}", path_segment(operation_id)),
            None,
        )?;
        let served = self.expected_workspace(&standing)?;
        if let Submit::IfShown(shown) = &submit
            && *shown != shown_digest(&standing)
        {
            return Err(AppError::refused(format!(
                "evidence: {operation_id} changed since it was shown (it is now {}); look again before you decide; nothing was signed",
                stage_of(&standing)
            )));
        }
        let reviewer = self.name().to_string();
        let operation_id = operation_id.to_string();
        let review = match verdict {
            Verdict::Approve { valid_for }
                if valid_for.is_zero() || valid_for > LONGEST_APPROVAL =>
            {
                return Err(AppError::refused(format!(
                    "evidence: an approval holds from 1s to {} days, not {}; nothing was signed",
                    LONGEST_APPROVAL.as_secs() / 86_400,
                    humantime::format_duration(valid_for)
                )));
            }
            Verdict::Approve { .. } if stage_of(&standing) != "awaiting_approval" => {
                return Err(AppError::refused(format!(
                    "evidence: {operation_id} is {}, not waiting for an approval; nothing was signed",
                    stage_of(&standing)
                )));
            }
            Verdict::Approve { valid_for } => {
                let [checkpoint_ns, interrupt_id] = match standing.pointer("/approval_request") {
                    Some(Value::Array(pair)) if pair.len() == 2 => {
                        [&pair[0], &pair[1]].map(|v| v.as_str().unwrap_or_default().to_string())
                    }
                    _ => {
                        return Err(AppError::refused(format!(
                            "evidence: {operation_id} is {}, not waiting for an approval; nothing was signed",
                            stage_of(&standing)
                        )));
                    }
                };
                Review::Approve(Approval {
                    reviewer,
                    tool: text(&standing, "/binding/tool")?,
                    identity: text(&standing, "/binding/identity")?,
                    thread_id: text(&standing, "/binding/thread_id")?,
                    args_digest: text(&standing, "/binding/args_digest")?,
                    policy_id: text(&standing, "/policy/policy_id")?,
                    policy_version: text(&standing, "/policy/version")?,
                    checkpoint_ns,
                    interrupt_id,
                    expires_at: now.saturating_add(valid_for.as_secs()),
                    operation_id,
                })
            }
            Verdict::Reject { reason } => Review::Reject {
                operation_id,
                reviewer,
                reason,
            },
            Verdict::Reconcile { executed } => Review::Reconcile {
                operation_id,
                reviewer,
                executed,
            },
        };
        if submit == Submit::DryRun {
            return Ok(Reviewed {
                review,
                workspace: served,
                answer: Value::Null,
            });
        }
        let signed: SignedReview = sign_review(review.clone(), &served, &self.key);
        let answer = self.service.call(
            reqwest::Method::POST,
            "/reviews",
            Some(serde_json::to_value(&signed).expect("a review is JSON")),
        )?;
        Ok(Reviewed {
            review,
            workspace: served,
            answer,
        })
    }

    /// The workspace key a service's answer names, if it is the one the
    /// reviewer expects.
    fn expected_workspace(&self, answer: &Value) -> AppResult<String> {
        let served = text(answer, "/workspace")?;
        if let Some(expected) = &self.workspace
            && expected.trim() != served
        {
            return Err(AppError::refused(format!(
                "evidence: the service signs with {served}, not the workspace key you gave ({expected}); nothing was signed"
            )));
        }
        Ok(served)
    }
}

/// The longest an approval may hold: a year. Longer is no bound at all.
pub const LONGEST_APPROVAL: Duration = Duration::from_secs(366 * 24 * 60 * 60);

impl Reviewed {
    /// What was signed (or, for a dry run, would be), in full, and where
    /// the decision is now: the lines a reviewer is shown.
    pub fn summary(&self) -> String {
        let dry_run = self.answer.is_null();
        let would = if dry_run { "would be " } else { "" };
        let signed = match &self.review {
            Review::Approve(a) => format!(
                "{would}approved {}: {} for {} in thread {}, arguments {}, under policy {} {}, at pause {} / {}, until {}",
                a.operation_id,
                a.tool,
                a.identity,
                a.thread_id,
                a.args_digest,
                a.policy_id,
                a.policy_version,
                a.checkpoint_ns,
                a.interrupt_id,
                humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + Duration::from_secs(a.expires_at)
                )
            ),
            Review::Reject {
                operation_id,
                reason,
                ..
            } => format!("{would}rejected {operation_id}: {reason}"),
            Review::Reconcile {
                operation_id,
                executed,
                ..
            } => format!(
                "{would}reconciled {operation_id}: the tool did {}run",
                if *executed { "" } else { "not " }
            ),
        };
        let by = format!(
            "{would}signed by {} for workspace {}",
            self.review.reviewer(),
            self.workspace
        );
        let after = if dry_run {
            "dry run: nothing was signed or submitted".to_string()
        } else if self.answer["retry"] == Value::Bool(true) {
            format!(
                "{}: now {} (this review was given before; nothing new was recorded)",
                self.review.operation_id(),
                self.answer["stage"].as_str().unwrap_or("?"),
            )
        } else {
            format!(
                "{}: now {} (event {})",
                self.review.operation_id(),
                self.answer["stage"].as_str().unwrap_or("?"),
                self.answer["sequence"]
            )
        };
        format!("{signed}\n{by}\n{after}")
    }
}

/// The digest of what a review binds in a decision's view: the workspace
/// key it is for, the operation, its binding, the pause it waits at, its
/// policy and its stage. Any change to these
/// between showing and signing refuses the review.
pub fn shown_digest(view: &Value) -> String {
    let bound = serde_json::json!({
        "workspace": view.get("workspace"),
        "operation_id": view.get("operation_id"),
        "binding": view.get("binding"),
        "approval_request": view.get("approval_request"),
        "policy": view.get("policy"),
        "stage": view.get("stage"),
    });
    format!(
        "sha256:{}",
        bl_core::canonical::sha256_hex(bl_core::canonical::canonical_json(&bound).as_bytes())
    )
}

/// Where a decision's view says it stands, as words.
fn stage_of(view: &Value) -> &str {
    view["stage"].as_str().unwrap_or("unknown")
}

fn not_a_service(path: &str) -> AppError {
    AppError::refused(format!(
        "evidence: the service's answer to {path} is not what a bl evidence service answers"
    ))
}

fn text(value: &Value, pointer: &str) -> AppResult<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| {
            AppError::refused(format!(
                "evidence: the service's answer has no {pointer}; is it a bl evidence service?"
            ))
        })
}

/// An operation id as one URL path segment.
fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Service {
    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> AppResult<Value> {
        let url = format!("{}{path}", self.url.trim_end_matches('/'));
        // A service that cannot be reached, or fails, decided nothing; a
        // refusal is its answer.
        let unanswered =
            |e: &dyn std::fmt::Display| AppError::Undecided(format!("evidence: {url}: {e}"));
        let (status, text) = match self.url.strip_prefix("unix:") {
            Some(socket) => over_socket(socket, method, path, &self.token, body),
            None => over_tcp(&url, method, &self.token, body),
        }
        .map_err(|e| unanswered(&error_chain(&*e)))?;
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(answer);
        }
        // A refusal in JSON names its message; a plain-text answer (the
        // bearer check's) is the message.
        let why = match &answer {
            Value::String(text) => text.trim().to_string(),
            _ => answer
                .pointer("/refused/message")
                .or_else(|| answer.pointer("/error/message"))
                .and_then(Value::as_str)
                .map_or_else(|| answer.to_string(), str::to_string),
        };
        let code = answer
            .pointer("/refused/code")
            .or_else(|| answer.pointer("/error/code"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if status == reqwest::StatusCode::NOT_FOUND && code != "NotCreated" {
            return Err(AppError::refused(format!(
                "evidence: {url}: 404: not an evidence service's API; give --url as `bl evidence serve` printed it (http://127.0.0.1:PORT/v1 or unix:PATH)"
            )));
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(AppError::refused(format!(
                "evidence: {url}: the service refused the token ({why}); give --token-file the file `bl evidence serve` was started with. Nothing was decided"
            )));
        }
        let code = if code.is_empty() {
            String::new()
        } else {
            format!(" {code}")
        };
        let said = format!("evidence: {url}: {status}{code}: {why}");
        Err(if status.is_server_error() {
            AppError::Undecided(said)
        } else {
            AppError::refused(said)
        })
    }
}

type Answered = Result<(reqwest::StatusCode, String), Box<dyn std::error::Error + Send + Sync>>;

fn over_tcp(url: &str, method: reqwest::Method, token: &str, body: Option<Value>) -> Answered {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let mut request = client.request(method, url).bearer_auth(token);
    if let Some(body) = body {
        request = request
            .header("Content-Type", "application/json")
            .body(body.to_string());
    }
    let response = request
        .send()
        .map_err(|e| -> Box<dyn std::error::Error + Send + Sync> {
            if e.is_connect() {
                Box::new(not_listening(&error_chain(&e)))
            } else {
                Box::new(e)
            }
        })?;
    let status = response.status();
    Ok((status, response.text()?))
}

/// Why a service could not be reached, with what to do: nothing listens
/// where the reviewer was told it does.
fn not_listening(cause: &str) -> std::io::Error {
    std::io::Error::other(format!(
        "no evidence service answers there ({cause}); start it with `bl evidence serve`, or give --url as it printed it"
    ))
}

/// The same request to a service on a unix socket (`serve --socket`).
fn over_socket(
    socket: &str,
    method: reqwest::Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> Answered {
    use http_body_util::BodyExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    not_listening(&e.to_string())
                }
                _ => e,
            })?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        let request = hyper::Request::builder()
            .method(method.as_str())
            .uri(format!("/v1{path}"))
            .header("Host", "localhost")
            .header("Authorization", format!("Bearer {token}"))
            .header("Content-Type", "application/json")
            .body(http_body_util::Full::new(bytes_of(body)))?;
        let response =
            tokio::time::timeout(Duration::from_secs(30), sender.send_request(request)).await??;
        let status = reqwest::StatusCode::from_u16(response.status().as_u16())?;
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    })
}

fn bytes_of(body: Option<Value>) -> hyper::body::Bytes {
    hyper::body::Bytes::from(body.map_or_else(String::new, |b| b.to_string()))
}

/// An error with every cause under it ("error sending request …:
/// connection refused"), as one line.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut said = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let text = inner.to_string();
        if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
        cause = inner.source();
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_was_shown_changes_with_what_a_review_binds_and_nothing_else() {
        let view = json!({
            "operation_id": "op", "workspace": "ws",
            "binding": {"tool": "refund", "args_digest": "sha256:aa"},
            "approval_request": ["ns", "i-1"], "stage": "awaiting_approval",
            "policy": {"policy_id": "p", "version": "1"}, "outcomes": 0,
        });
        let shown = shown_digest(&view);
        let mut counted = view.clone();
        counted["outcomes"] = json!(1);
        assert_eq!(shown_digest(&counted), shown);
        for (pointer, changed) in [
            ("/workspace", json!("another")),
            ("/approval_request/1", json!("i-2")),
            ("/binding/args_digest", json!("sha256:bb")),
            ("/policy/version", json!("2")),
            ("/stage", json!("cleared")),
        ] {
            let mut other = view.clone();
            *other.pointer_mut(pointer).unwrap() = changed;
            assert_ne!(shown_digest(&other), shown, "{pointer}");
        }
    }
}
