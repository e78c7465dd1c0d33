//! `bl evidence serve`: the decision evidence plane of seed 004, for an app
//! built on another agent framework (LangGraph). The app asks it, before
//! each consequential action, what the policy says, whether a person
//! approved, and whether the action may be requested, exactly once; then
//! it records what happened. Everything goes through the application
//! layer's `EvidenceStore` (the rules, the signed log); this crate only
//! speaks HTTP, on loopback or a unix socket only its owner may open,
//! behind a bearer token. A person's review
//! arrives signed by a reviewer key the workspace trusts, never on the
//! app's word: the app's token cannot record an approval.
//!
//! Routes (JSON bodies, `Authorization: Bearer <token>`):
//! - `POST /v1/decisions`: a decision's binding (`decision_created`);
//! - `POST /v1/decisions/{op}/policy`: the operator's policy plugin
//!   decides (the app cannot choose it);
//! - `POST /v1/proposals`: both at once, in one durable step (a retry
//!   finds the decision and its policy as they were); with
//!   `"reserve": true`, the reservation too when the policy clears it;
//! - `POST /v1/decisions/{op}/events`: an event from the app;
//! - `POST /v1/reviews`: a signed review;
//! - `GET /v1/decisions/{op}`: where the decision stands;
//! - `GET /v1/decisions`: every decision that waits for a person (paused
//!   for an approval, or awaiting reconciliation), as `bl evidence
//!   console` lists them.
//!
//! Permission to call the tool is the answer to `tool_requested` alone,
//! given once.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bl_app::evidence::{EvidenceError, EvidenceStore, Recorded, SignedReview, unix_now as now};
use bl_core::evidence::{DecisionBinding, EvidenceEvent};
use serde_json::{Value, json};

/// What the service serves and whom it lets in.
pub struct ServeOptions {
    pub store: EvidenceStore,
    pub listener: Listener,
    /// The bearer token the app must send.
    pub token: String,
    /// The policy plugin (a publication policy) and its config: the
    /// operator's choice, never the app's.
    pub policy: (String, String),
    pub plugins: Arc<bl_plugins::PluginHost>,
}

/// Where the service listens.
pub enum Listener {
    /// A loopback address (anything else is refused).
    Loopback(std::net::TcpListener),
    /// A unix socket, its file made owner-only by whoever bound it.
    Socket(std::os::unix::net::UnixListener),
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("evidence serve: {0} is not a loopback address; the service listens on loopback only")]
    NotLoopback(String),
    #[error(transparent)]
    Web(#[from] bl_web::WebError),
}

struct Service {
    store: Mutex<EvidenceStore>,
    policy: (String, String),
    plugins: Arc<bl_plugins::PluginHost>,
}

/// Serves until `stop` says so.
pub fn serve(
    options: ServeOptions,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), ServeError> {
    if let Listener::Loopback(listener) = &options.listener {
        let address = listener.local_addr().ok();
        if !address.is_some_and(|a| a.ip().is_loopback()) {
            return Err(ServeError::NotLoopback(format!("{address:?}")));
        }
    }
    let service = Arc::new(Service {
        store: Mutex::new(options.store),
        policy: options.policy,
        plugins: options.plugins,
    });
    let token = Arc::new(options.token);
    let app = axum::Router::new()
        .route("/v1/decisions", post(create).get(waiting))
        .route("/v1/proposals", post(propose))
        .route("/v1/decisions/{op}", get(show))
        .route("/v1/decisions/{op}/policy", post(policy))
        .route("/v1/decisions/{op}/events", post(event))
        .route("/v1/reviews", post(review))
        .fallback(no_such_route)
        .method_not_allowed_fallback(no_such_method)
        .with_state(service)
        .layer(axum::middleware::from_fn(move |request, next| {
            bl_web::bearer::require(token.clone(), "bl evidence", request, next)
        }));
    match options.listener {
        Listener::Loopback(listener) => bl_web::run_server(listener, app, stop)?,
        Listener::Socket(listener) => bl_web::run_server_on_socket(listener, app, stop)?,
    }
    Ok(())
}

impl Service {
    fn store(&self) -> std::sync::MutexGuard<'_, EvidenceStore> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What was recorded, as the app is told it.
fn recorded_json(recorded: &Recorded) -> Value {
    json!({
        "sequence": recorded.sequence,
        "event_hash": recorded.hash,
        "stage": recorded.stage,
        "retry": recorded.retry,
        "receipt": recorded.receipt,
    })
}

/// The answer to a recording: what was recorded, or why not.
fn answer(outcome: Result<Recorded, EvidenceError>) -> Response {
    match outcome {
        Ok(recorded) => Json(recorded_json(&recorded)).into_response(),
        Err(EvidenceError::Refused {
            operation_id,
            event,
            refusal,
        }) => (
            StatusCode::CONFLICT,
            Json(json!({"refused": {
                "code": refusal.code(),
                "field": refusal.field(),
                "event": event,
                "operation_id": operation_id,
                "message": refusal.to_string(),
            }})),
        )
            .into_response(),
        Err(EvidenceError::Review {
            operation_id,
            refusal,
        }) => (
            StatusCode::FORBIDDEN,
            Json(json!({"refused": {
                "code": "NotAuthority",
                "operation_id": operation_id,
                "message": refusal.to_string(),
            }})),
        )
            .into_response(),
        Err(e @ (EvidenceError::NeedsReview(_) | EvidenceError::Broken(_))) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"error": {"code": "NotRecorded", "message": e.to_string()}})),
        )
            .into_response(),
        // A policy that cannot decide is no answer: fail closed.
        Err(e @ EvidenceError::Policy { .. }) => (
            StatusCode::BAD_GATEWAY,
            Json(json!({"error": {"code": "PolicyError", "message": e.to_string()}})),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"error": {"code": "StoreError", "message": e.to_string()}})),
        )
            .into_response(),
    }
}

fn bad_request(message: String) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"error": {"code": "BadRequest", "message": message}})),
    )
        .into_response()
}

async fn no_such_route(uri: axum::http::Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": {"code": "NoSuchRoute", "message": format!(
            "{} is not part of the evidence API: its routes are under /v1 (see docs/evidence.md)", uri.path()
        )}})),
    )
        .into_response()
}

async fn no_such_method(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        Json(json!({"error": {"code": "NoSuchMethod", "message": format!(
            "{method} {} is not part of the evidence API (see docs/evidence.md for each route's method)", uri.path()
        )}})),
    )
        .into_response()
}

/// The events only a person or the policy may record.
const NOT_FROM_THE_APP: [&str; 5] = [
    "decision_created",
    "policy_evaluated",
    "human_approved",
    "human_rejected",
    "reconciled",
];

const OPERATORS_POLICY: &str =
    "the policy and its config are the operator's (bl evidence serve --policy); send none";

/// 403: what the app may not record or choose.
fn not_from_the_app(event: &str, field: &str, message: String) -> Response {
    (
        StatusCode::FORBIDDEN,
        Json(json!({"refused": {
            "code": "NotFromTheApp",
            "event": event,
            "field": field,
            "message": message,
        }})),
    )
        .into_response()
}

/// A decision's binding from a JSON body, with every field it binds
/// given; or the 400 that names what is wrong.
fn binding(body: Value) -> Result<DecisionBinding, Box<Response>> {
    let binding: DecisionBinding = typed(body)?;
    match binding.blank_field() {
        Some(field) => Err(Box::new(bad_request(format!(
            "the body: `{field}` is empty; a decision is bound to it"
        )))),
        None => Ok(binding),
    }
}

/// A JSON body as `T`, or the 400 that says what is wrong with it.
fn body<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, Box<Response>> {
    serde_json::from_slice(bytes).map_err(|e| Box::new(bad_request(format!("the body: {e}"))))
}

/// A body already read as JSON, as `T`; or the 400 that says why not.
fn typed<T: serde::de::DeserializeOwned>(body: Value) -> Result<T, Box<Response>> {
    serde_json::from_value(body).map_err(|e| Box::new(bad_request(format!("the body: {e}"))))
}

async fn create(State(service): State<Arc<Service>>, bytes: axum::body::Bytes) -> Response {
    let binding: DecisionBinding = match body(&bytes).and_then(binding) {
        Ok(b) => b,
        Err(refused) => return *refused,
    };
    let op = binding.operation_id.clone();
    answer(
        service
            .store()
            .record(&op, EvidenceEvent::DecisionCreated(binding), now()),
    )
}

async fn propose(State(service): State<Arc<Service>>, bytes: axum::body::Bytes) -> Response {
    // Read once: whether it names a policy, then as a binding.
    let mut asked: Value = match body(&bytes) {
        Ok(v) => v,
        Err(refused) => return *refused,
    };
    if asked.get("policy").is_some() || asked.get("policy_config").is_some() {
        return not_from_the_app("policy_evaluated", "policy", OPERATORS_POLICY.into());
    }
    // `"reserve": true`: the reservation too, if the decision is cleared.
    let reserve = match asked.as_object_mut().and_then(|o| o.remove("reserve")) {
        None => false,
        Some(Value::Bool(reserve)) => reserve,
        Some(other) => {
            return bad_request(format!(
                "the body: `reserve` is {other}; it is true (take the reservation too, if the decision is cleared) or false"
            ));
        }
    };
    let binding: DecisionBinding = match binding(asked) {
        Ok(b) => b,
        Err(refused) => return *refused,
    };
    let (plugin, config) = &service.policy;
    let plugins = service.plugins.clone();
    let mut store = service.store();
    let op = binding.operation_id.clone();
    let policy = (plugin.as_str(), config.as_str());
    match store.propose(&plugins, binding, policy, reserve, now()) {
        Ok((proposal, reservation)) => with_policy(
            proposal,
            store.decision(&op),
            reserve.then_some(reservation),
        ),
        Err(e) => answer(Err(e)),
    }
}

/// The answer to a proposal: what was recorded, with the policy's verdict
/// (`policy`: its record, or null when none decided) and, when one was
/// asked for, the reservation (`reservation`: what was recorded for it, or
/// null when none was granted by this proposal).
fn with_policy(
    recorded: Recorded,
    decision: Option<&bl_core::evidence::Decision>,
    reservation: Option<Option<Recorded>>,
) -> Response {
    let policy = decision.and_then(|d| d.policy.clone());
    // An approval that has expired unused: the app asks a person again.
    let approval_expired = decision.is_some_and(|d| d.approval_expired(now()));
    let mut body = recorded_json(&recorded);
    body["policy"] = json!(policy);
    body["approval_expired"] = json!(approval_expired);
    if let Some(reservation) = reservation {
        body["reservation"] = reservation.as_ref().map_or(Value::Null, recorded_json);
    }
    Json(body).into_response()
}

async fn event(
    State(service): State<Arc<Service>>,
    Path(op): Path<String>,
    bytes: axum::body::Bytes,
) -> Response {
    // What only a person or the policy may record never comes from the
    // app: refused by its name, before its fields are read (a newcomer is
    // not coached, field by field, towards an event they may never send).
    let mut sent: Value = match body(&bytes) {
        Ok(v) => v,
        Err(refused) => return *refused,
    };
    if let Some(kind) = sent
        .get("event")
        .and_then(Value::as_str)
        .filter(|kind| NOT_FROM_THE_APP.contains(kind))
    {
        return not_from_the_app(
            kind,
            "event",
            format!(
                "{kind} is not recorded on the app's word: decisions are created at /v1/decisions or /v1/proposals, policies decide at /policy, and people sign reviews (bl evidence approve|reject|reconcile)"
            ),
        );
    }
    // A receipt may carry what the tool returned: both are recorded
    // together, so a crash between them never leaves the result unsaid.
    let result_digest = match sent.as_object_mut() {
        Some(fields) if fields.get("event") == Some(&json!("tool_executed")) => {
            fields.remove("result_digest")
        }
        _ => None,
    };
    let event: EvidenceEvent = match typed(sent) {
        Ok(e) => e,
        Err(refused) => return *refused,
    };
    let Some(result_digest) = result_digest else {
        return answer(service.store().record(&op, event, now()));
    };
    match (event, result_digest) {
        (EvidenceEvent::ToolExecuted { ok: true, detail }, Value::String(digest))
            if !digest.trim().is_empty() =>
        {
            match service.store().record_returned(&op, detail, digest, now()) {
                Ok((executed, result)) => {
                    let mut body = recorded_json(&executed);
                    body["result"] = recorded_json(&result);
                    Json(body).into_response()
                }
                Err(e) => answer(Err(e)),
            }
        }
        (EvidenceEvent::ToolExecuted { ok: false, .. }, _) => bad_request(
            "the body: `result_digest` is for a tool that returned (`ok`: true); a tool that raised returned nothing, so send none".into(),
        ),
        (_, other) => bad_request(format!(
            "the body: `result_digest` is {other}; it is the digest of what the tool returned, a non-empty string such as \"sha256:…\""
        )),
    }
}

async fn policy(
    State(service): State<Arc<Service>>,
    Path(op): Path<String>,
    bytes: axum::body::Bytes,
) -> Response {
    // The policy is the operator's: an app that names one is refused.
    let asked: Value = if bytes.is_empty() {
        Value::Null
    } else {
        match body(&bytes) {
            Ok(v) => v,
            Err(refused) => return *refused,
        }
    };
    if asked.as_object().is_some_and(|o| !o.is_empty()) {
        return not_from_the_app("policy_evaluated", "policy", OPERATORS_POLICY.into());
    }
    let (plugin, config) = &service.policy;
    let plugins = service.plugins.clone();
    answer(
        service
            .store()
            .evaluate_policy(&plugins, &op, plugin, config, now()),
    )
}

async fn review(State(service): State<Arc<Service>>, bytes: axum::body::Bytes) -> Response {
    let signed: SignedReview = match body(&bytes) {
        Ok(r) => r,
        Err(refused) => return *refused,
    };
    answer(service.store().review(&signed, now()))
}

async fn show(State(service): State<Arc<Service>>, Path(op): Path<String>) -> Response {
    let store = service.store();
    if let Some(broken) = store.broken() {
        return answer(Err(broken));
    }
    match store.decision(&op) {
        Some(d) => Json(view(&store, &op, d)).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {"code": "NotCreated", "message": format!("no decision {op}")}})),
        )
            .into_response(),
    }
}

async fn waiting(State(service): State<Arc<Service>>) -> Response {
    use bl_core::evidence::Stage;
    let store = service.store();
    if let Some(broken) = store.broken() {
        return answer(Err(broken));
    }
    let decisions: Vec<Value> = store
        .decisions()
        .iter()
        .filter(|(_, d)| {
            (d.stage == Stage::AwaitingApproval && d.approval_request.is_some())
                || d.stage == Stage::ReconciliationRequired
        })
        .map(|(op, d)| view(&store, op, d))
        .collect();
    Json(json!({"workspace": store.verifier(), "decisions": decisions})).into_response()
}

/// A decision as a reviewer reads it: enough to sign a review on.
fn view(store: &EvidenceStore, op: &str, d: &bl_core::evidence::Decision) -> Value {
    json!({
        "operation_id": op,
        "workspace": store.verifier(),
        "binding": d.binding,
        "approval_request": d.approval_request,
        "stage": d.stage,
        "policy": d.policy,
        "approval": d.approval,
        // Cleared by an approval that has expired unused: a request for
        // the tool is refused, and the app asks a person again.
        "approval_expired": d.approval_expired(now()),
        "rejected_by": d.rejected_by,
        "rejection_reason": d.rejection_reason,
        // What the app said the model answered (digests), only ever from
        // its own `model_completed` calls.
        "model_outputs": d.model_outputs,
        "tool_results": d.tool_results,
        "outcomes": d.outcomes,
    })
}
