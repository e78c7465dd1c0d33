//! The reviewer's side of the evidence plane: `bl evidence approve`,
//! `reject` and `reconcile`. A person's answer is read from where the
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
    /// `http://HOST:PORT/v1`, as `serve` printed it.
    pub url: String,
    pub token: String,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submit {
    SignAndSubmit,
    /// Built from the decision as it stands, and returned unsigned: what
    /// the reviewer would sign.
    DryRun,
}

/// A review as it was signed and submitted.
pub struct Reviewed {
    /// Exactly what was signed.
    pub review: Review,
    /// The service's answer (its `stage`, `sequence`, `receipt`); null
    /// for a dry run.
    pub answer: Value,
}

/// Reads decision `operation_id` from `service`, signs `verdict` on it
/// with `key` (its name is the reviewer), and submits it. `workspace`, if
/// given, is the verifier key the reviewer expects the service to sign
/// with; a service signing with another is refused before anything is
/// signed.
pub fn review(
    service: &Service,
    operation_id: &str,
    verdict: Verdict,
    key: &SigningKey,
    workspace: Option<&str>,
    now: u64,
    submit: Submit,
) -> AppResult<Reviewed> {
    let standing = service.call(
        reqwest::Method::GET,
        &format!("/decisions/{}", path_segment(operation_id)),
        None,
    )?;
    let served = text(&standing, "/workspace")?;
    if let Some(expected) = workspace
        && expected.trim() != served
    {
        return Err(AppError::refused(format!(
            "evidence: the service signs with {served}, not the workspace key you gave ({expected}); nothing was signed"
        )));
    }
    let reviewer = key.name().to_string();
    let operation_id = operation_id.to_string();
    let review = match verdict {
        Verdict::Approve { valid_for } => {
            let [checkpoint_ns, interrupt_id] = match standing.pointer("/approval_request") {
                Some(Value::Array(pair)) if pair.len() == 2 => {
                    [&pair[0], &pair[1]].map(|v| v.as_str().unwrap_or_default().to_string())
                }
                _ => {
                    return Err(AppError::refused(format!(
                        "evidence: {operation_id} is {}, not waiting for an approval; nothing was signed",
                        standing["stage"]
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
            answer: Value::Null,
        });
    }
    let signed: SignedReview = sign_review(review.clone(), &served, key);
    let answer = service.call(
        reqwest::Method::POST,
        "/reviews",
        Some(serde_json::to_value(&signed).expect("a review is JSON")),
    )?;
    Ok(Reviewed { review, answer })
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
        let failed = |e: &dyn std::fmt::Display| AppError::refused(format!("evidence: {url}: {e}"));
        let (status, text) = match self.url.strip_prefix("unix:") {
            Some(socket) => over_socket(socket, method, path, &self.token, body),
            None => over_tcp(&url, method, &self.token, body),
        }
        .map_err(|e| failed(&e))?;
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(answer);
        }
        let why = answer
            .pointer("/refused/message")
            .or_else(|| answer.pointer("/error/message"))
            .and_then(Value::as_str)
            .map_or_else(|| answer.to_string(), str::to_string);
        let code = answer
            .pointer("/refused/code")
            .or_else(|| answer.pointer("/error/code"))
            .and_then(Value::as_str)
            .unwrap_or("");
        Err(failed(&format!("{status} {code}: {why}")))
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
    let response = request.send()?;
    let status = response.status();
    Ok((status, response.text()?))
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
        let stream = tokio::net::UnixStream::connect(socket).await?;
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
