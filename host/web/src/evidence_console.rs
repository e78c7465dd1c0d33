//! `bl evidence console`: a reviewer's page for an evidence service. It
//! lists what waits for a person there; a click is signed here, with the
//! reviewer's key, exactly as `bl evidence approve | reject | reconcile`
//! sign it, bound to what the card showed (a decision that changed since
//! is refused, nothing signed). The approval console's rules hold:
//! loopback only, a token in the path compared in constant time, the
//! page's own Origin, JSON of at most 8 KiB, one decision at a time,
//! hardened headers and a CSP that allows only the page's script. The
//! server stops on Ctrl-C, or after a quarter of an hour unused.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bl_app::evidence::unix_now;
use bl_app::evidence_reviewer::{Reviewer, Submit, Verdict};
use serde_json::Value;

use crate::console::Decider;
use crate::{WebError, hardened, holds_token, refused};

/// How long the console waits, unused, before it stops.
const UNUSED_FOR: Duration = Duration::from_secs(15 * 60);

/// What `bl evidence console` serves.
pub struct EvidenceConsole {
    /// Who signs, for which service.
    pub reviewer: Reviewer,
    /// How long an approval given here holds.
    pub valid_for: Duration,
}

struct Served {
    console: EvidenceConsole,
    token: String,
    decider: Decider,
    last_used: Mutex<Instant>,
}

impl crate::Tokened for Served {
    fn token(&self) -> &str {
        &self.token
    }
}

impl Served {
    fn used(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn unused_too_long(&self) -> bool {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            > UNUSED_FOR
    }
}

/// Serves `console` at `at.url` until `stop` says so or it has gone
/// unused too long.
pub fn serve_evidence_console(
    console: EvidenceConsole,
    at: crate::Loopback,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), WebError> {
    let (listener, token, origin) = at.into_parts();
    let served = Arc::new(Served {
        console,
        token,
        decider: Decider::new(origin),
        last_used: Mutex::new(Instant::now()),
    });
    let app = crate::with_body_limits(
        axum::Router::new()
            .route("/{token}/", get(page))
            .route("/{token}/decide", post(decide)),
    )
    .with_state(served.clone());
    crate::run_server(listener, app, move || stop() || served.unused_too_long())
}

async fn page(State(served): State<Arc<Served>>, Path(token): Path<String>) -> Response {
    if !holds_token(&*served, &token) {
        return refused(StatusCode::NOT_FOUND, "not found");
    }
    served.used();
    let read = {
        let served = served.clone();
        tokio::task::spawn_blocking(move || served.console.reviewer.waiting()).await
    };
    let waiting = match read {
        Ok(Ok(waiting)) => waiting,
        Ok(Err(e)) => {
            return (StatusCode::BAD_GATEWAY, hardened(), e.to_string()).into_response();
        }
        Err(_) => {
            return refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the service could not be read",
            );
        }
    };
    let cards: Vec<bl_pages::EvidenceCard> = waiting
        .decisions
        .iter()
        .map(|d| bl_pages::EvidenceCard {
            operation_id: text(&d.view, "/operation_id"),
            stage: text(&d.view, "/stage"),
            tool: text(&d.view, "/binding/tool"),
            identity: text(&d.view, "/binding/identity"),
            thread_id: text(&d.view, "/binding/thread_id"),
            args_digest: text(&d.view, "/binding/args_digest"),
            policy: d.view.pointer("/policy/policy_id").map(|_| {
                (
                    text(&d.view, "/policy/policy_id"),
                    text(&d.view, "/policy/version"),
                    text(&d.view, "/policy/reason"),
                )
            }),
            pause: d.view.pointer("/approval_request/1").map(|_| {
                (
                    text(&d.view, "/approval_request/0"),
                    text(&d.view, "/approval_request/1"),
                )
            }),
            shown: &d.shown,
        })
        .collect();
    let valid_for = humantime::format_duration(served.console.valid_for).to_string();
    crate::html_page(bl_pages::evidence_console_html(
        &bl_pages::Reviewing {
            reviewer: served.console.reviewer.name(),
            workspace: &waiting.workspace,
            valid_for: &valid_for,
        },
        &cards,
        &format!("/{token}/decide"),
    ))
}

async fn decide(
    State(served): State<Arc<Served>>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !holds_token(&*served, &token) {
        return refused(StatusCode::NOT_FOUND, "not found");
    }
    served.used();
    let asked = match served.decider.admit(&headers, &body) {
        Ok(asked) => asked,
        Err(refusal) => return *refusal,
    };
    let (Some(op), Some(decision), Some(shown)) = (
        asked["operation_id"].as_str().map(str::to_string),
        asked["decision"].as_str(),
        asked["shown"].as_str().map(str::to_string),
    ) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "a decision names operation_id, decision and shown",
        );
    };
    let verdict = match decision {
        "approved" => Verdict::Approve {
            valid_for: served.console.valid_for,
        },
        "rejected" => Verdict::Reject {
            reason: match asked["reason"].as_str().map(str::trim) {
                Some(reason) if !reason.is_empty() => reason.to_string(),
                _ => "rejected in the evidence console".to_string(),
            },
        },
        "executed" => Verdict::Reconcile { executed: true },
        "not_executed" => Verdict::Reconcile { executed: false },
        _ => {
            return refused(
                StatusCode::BAD_REQUEST,
                "the decision is approved, rejected, executed or not_executed",
            );
        }
    };
    let reviewed = served
        .decider
        .one_at_a_time({
            let served = served.clone();
            move || {
                served
                    .console
                    .reviewer
                    .review(&op, verdict, unix_now(), Submit::IfShown(shown))
            }
        })
        .await;
    match reviewed {
        Err(busy) => *busy,
        Ok(Ok(Ok(done))) => (StatusCode::OK, hardened(), done.summary()).into_response(),
        // The service refused it (or it changed since it was shown): 409;
        // the service could not be reached or failed: 502.
        Ok(Ok(Err(e @ bl_app::AppError::Refused(_)))) => {
            (StatusCode::CONFLICT, hardened(), e.to_string()).into_response()
        }
        Ok(Ok(Err(e))) => (StatusCode::BAD_GATEWAY, hardened(), e.to_string()).into_response(),
        Ok(Err(_)) => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the decision could not be made",
        ),
    }
}
/// The text at `pointer` in `value`, or none.
fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}
