//! `bl graph console`: approve or reject, from a page, an approval node a
//! run waits on. Seed 000's rules: loopback only; a one-time token in the
//! path, compared in constant time; a decision must come from the page's
//! own origin (Origin checked) as JSON of at most 8 KiB; the decision is
//! bound to the request digest the page was served with, so evidence that
//! changed since refuses it; hardened headers and a CSP that allows only
//! the page's own script, by hash; and the server stops after one
//! recorded decision, or after a quarter of an hour unused.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bl_app::runtime::GraphRuntime;

use crate::{WebError, hardened, holds_token, refused};

/// The largest decision accepted, in bytes.
pub const MAX_BODY: usize = 8 * 1024;

/// How long a console waits for a decision before it stops.
const UNUSED_FOR: Duration = Duration::from_secs(15 * 60);

/// What `bl graph console` serves: one run's pending approvals.
pub struct Console {
    pub dir: PathBuf,
    /// Signs each decision (`bl keys generate`'s private key).
    pub key: Option<PathBuf>,
    /// Drives the run on after a decision, as `bl graph approve` does.
    pub runtime: GraphRuntime,
}

struct Served {
    console: Console,
    token: String,
    decider: Decider,
    decided: AtomicBool,
}

impl crate::Tokened for Served {
    fn token(&self) -> &str {
        &self.token
    }
}

/// Serves `console` at `at.url` until a decision is recorded, `stop`
/// says so, or it has gone unused too long.
pub fn serve_console(
    console: Console,
    at: crate::Loopback,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), WebError> {
    let (listener, token, origin) = at.into_parts();
    let served = Arc::new(Served {
        console,
        token,
        decider: Decider::new(origin),
        decided: AtomicBool::new(false),
    });
    let app = crate::with_body_limits(
        axum::Router::new()
            .route("/{token}/", get(page))
            .route("/{token}/decide", post(decide)),
    )
    .with_state(served.clone());
    let started = Instant::now();
    crate::run_server(listener, app, move || {
        stop() || served.decided.load(Ordering::SeqCst) || started.elapsed() > UNUSED_FOR
    })
}

async fn page(State(served): State<Arc<Served>>, Path(token): Path<String>) -> Response {
    if !holds_token(&*served, &token) {
        return refused(StatusCode::NOT_FOUND, "not found");
    }
    let c = &served.console;
    approvals_page(&c.runtime, &c.dir, format!("/{token}/decide")).await
}

/// The console page for the run at `dir`: what it waits on, with the
/// evidence; decisions are posted to `decide`.
pub(crate) async fn approvals_page(
    runtime: &GraphRuntime,
    dir: &std::path::Path,
    decide: String,
) -> Response {
    let read = {
        let (runtime, dir) = (runtime.clone(), dir.to_path_buf());
        tokio::task::spawn_blocking(move || runtime.pending_approvals(&dir)).await
    };
    let pending = match read {
        Ok(Ok(pending)) => pending,
        Ok(Err(e)) => return (StatusCode::CONFLICT, hardened(), e.to_string()).into_response(),
        Err(_) => {
            return refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the run could not be read",
            );
        }
    };
    let approvals: Vec<bl_pages::ConsoleApproval> = pending
        .iter()
        .map(|p| bl_pages::ConsoleApproval {
            node: &p.node_id,
            request_digest: &p.request_digest,
            evidence: p
                .described
                .iter()
                .map(|e| bl_pages::ConsoleEvidence {
                    digest: &e.digest,
                    producer: &e.producer,
                    name: e.path.as_deref().or(e.port.as_deref()),
                    size: e.size,
                })
                .collect(),
        })
        .collect();
    let title = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    crate::html_page(bl_pages::console_html(&title, &approvals, &decide))
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
    // One decision per console: a second request, even for another node,
    // is refused rather than raced against the first.
    if served.decided.load(Ordering::SeqCst) {
        return refused(
            StatusCode::CONFLICT,
            "this console has taken its decision; start another for the next",
        );
    }
    let c = &served.console;
    let (recorded, answer) = decision(
        &c.runtime,
        &c.dir,
        c.key.clone(),
        &served.decider,
        &headers,
        &body,
    )
    .await;
    if recorded {
        served.decided.store(true, Ordering::SeqCst);
    }
    answer
}

/// Who may decide on a server's page, one decision at a time.
pub(crate) struct Decider {
    /// The page's own origin (`http://127.0.0.1:<port>`).
    origin: String,
    /// A decision is being made: a second one waits for none, it is refused.
    deciding: Arc<AtomicBool>,
}

/// Clears `deciding` when the decision's work ends, however it ends. It
/// is held by the work, not the request: a browser that goes away half
/// way drops its request, while the decision goes on being recorded.
struct Deciding(Arc<AtomicBool>);

impl Drop for Deciding {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Decider {
    pub(crate) fn new(origin: String) -> Decider {
        Decider {
            origin,
            deciding: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The JSON object a request that changes something carries, after
    /// seed 000's checks: it came from the server's own page (a page of
    /// any other origin, or none named, is refused whatever its body
    /// says), as JSON.
    pub(crate) fn admit(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<serde_json::Value, Box<Response>> {
        let no = |status, text| Box::new(refused(status, text));
        if headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) != Some(self.origin.as_str()) {
            return Err(no(
                StatusCode::FORBIDDEN,
                "a request must come from this server's own page",
            ));
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.starts_with("application/json"));
        if !json {
            return Err(no(StatusCode::UNSUPPORTED_MEDIA_TYPE, "a request is JSON"));
        }
        serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .filter(serde_json::Value::is_object)
            .ok_or_else(|| no(StatusCode::BAD_REQUEST, "a request is a JSON object"))
    }

    /// Records a decision with `record`, on a blocking thread, unless
    /// another is being recorded: that one is not raced, this one is
    /// refused. The way stays closed until `record` returns.
    pub(crate) async fn one_at_a_time<T: Send + 'static>(
        &self,
        record: impl FnOnce() -> T + Send + 'static,
    ) -> Result<Result<T, tokio::task::JoinError>, Box<Response>> {
        if self
            .deciding
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Err(Box::new(refused(
                StatusCode::CONFLICT,
                "another decision is being recorded; try again when it is",
            )));
        }
        let deciding = Deciding(self.deciding.clone());
        Ok(tokio::task::spawn_blocking(move || {
            let _deciding = deciding;
            record()
        })
        .await)
    }
}

/// Records the decision a page posted on the run at `dir`, after seed
/// 000's checks (own Origin, JSON, bound to the request digest the page
/// showed); whether it was recorded, and the answer.
pub(crate) async fn decision(
    runtime: &GraphRuntime,
    dir: &std::path::Path,
    key: Option<PathBuf>,
    decider: &Decider,
    headers: &HeaderMap,
    body: &[u8],
) -> (bool, Response) {
    let no = |status, text| (false, refused(status, text));
    let asked = match decider.admit(headers, body) {
        Ok(asked) => asked,
        Err(refusal) => return (false, *refusal),
    };
    let (Some(node), Some(decision), Some(shown)) = (
        asked["node"].as_str().map(str::to_string),
        asked["decision"].as_str().map(str::to_string),
        asked["request_digest"].as_str().map(str::to_string),
    ) else {
        return no(
            StatusCode::BAD_REQUEST,
            "a decision names node, decision and request_digest",
        );
    };
    let approved = match decision.as_str() {
        "approved" => true,
        "rejected" => false,
        _ => {
            return no(
                StatusCode::BAD_REQUEST,
                "the decision is approved or rejected",
            );
        }
    };
    let recorded = decider
        .one_at_a_time({
            let (runtime, dir) = (runtime.clone(), dir.to_path_buf());
            move || {
                let key = key.as_deref();
                if approved {
                    runtime.approve(&dir, &node, &shown, key)
                } else {
                    runtime.reject(&dir, &node, &shown, key)
                }
            }
        })
        .await;
    match recorded {
        Err(busy) => (false, *busy),
        Ok(Ok(Ok(done))) => {
            let text = format!(
                "{decision}: recorded. The run is now {}.",
                done.view.run_state
            );
            (true, (StatusCode::OK, hardened(), text).into_response())
        }
        Ok(Ok(Err(e))) => (
            false,
            (StatusCode::CONFLICT, hardened(), e.to_string()).into_response(),
        ),
        Ok(Err(_)) => no(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the decision could not be made",
        ),
    }
}
