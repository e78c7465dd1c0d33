//! `bl monitor`: a project's live window, on loopback only, under a token
//! made for this one invocation. It lists the project's runs through the
//! application layer, serves each run's live arena and console (the same
//! handlers `bl graph watch` and `bl graph console` use), and starts a
//! graph or a loop of the project after a preview, by the preview's
//! digest, and shows a loop run's report. Every
//! request that changes anything must come from the page's own origin, as
//! JSON of at most 8 KiB.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bl_app::graph_run::DriveOptions;
use bl_app::monitor::{Project, Started};
use bl_app::runtime::GraphRuntime;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::console::{Decider, approvals_page, decision};
use crate::{MAX_STREAMS, WebError, hardened, holds_token, refused};

/// What `bl monitor` serves: one project.
pub struct Monitor {
    pub project: Project,
    /// How runs started from the page are driven (keys, caps, roots).
    pub options: DriveOptions,
    /// Signs decisions made from a run's console.
    pub key: Option<std::path::PathBuf>,
}

struct Served {
    monitor: Monitor,
    runtime: GraphRuntime,
    token: String,
    decider: Decider,
    streams: Arc<Semaphore>,
    /// The runs started from the page, by name, stopped (what they
    /// recorded kept) when the monitor stops.
    started: Mutex<Vec<(String, Started)>>,
}

impl crate::Tokened for Served {
    fn token(&self) -> &str {
        &self.token
    }
}

/// Serves `monitor` at `at.url` until `stop` says so; then asks the runs
/// it started to stop, and waits for them (their attempts are kept).
pub fn serve_monitor(
    monitor: Monitor,
    at: crate::Loopback,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), WebError> {
    let (listener, token, origin) = at.into_parts();
    let served = Arc::new(Served {
        runtime: GraphRuntime::new(monitor.options.clone()),
        monitor,
        token,
        decider: Decider::new(origin),
        streams: Arc::new(Semaphore::new(MAX_STREAMS)),
        started: Mutex::new(Vec::new()),
    });
    let app = crate::with_body_limits(
        axum::Router::new()
            .route("/{token}/", get(page))
            .route("/{token}/runs.json", get(runs))
            .route("/{token}/manifests.json", get(manifests))
            .route("/{token}/preview", post(preview))
            .route("/{token}/start", post(start))
            .route("/{token}/run/{name}/", get(run_page))
            .route("/{token}/run/{name}/events", get(run_events))
            .route("/{token}/run/{name}/console", get(run_console))
            .route("/{token}/run/{name}/decide", post(run_decide))
            .route("/{token}/loop/{name}/report", get(loop_report)),
    )
    .with_state(served.clone());
    let served_result = crate::run_server(listener, app, stop);
    let started = std::mem::take(&mut *served.started.lock().unwrap_or_else(|e| e.into_inner()));
    for (_, run) in &started {
        run.cancel();
    }
    for (_, run) in started {
        run.wait();
    }
    served_result
}

fn not_found() -> Response {
    refused(StatusCode::NOT_FOUND, "not found")
}

fn json_answer(value: &Value) -> Response {
    let mut headers = hardened();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    (headers, value.to_string()).into_response()
}

/// Runs file work off the server's thread.
async fn blocking<T: Send + 'static>(
    served: &Arc<Served>,
    work: impl FnOnce(&Served) -> T + Send + 'static,
) -> Option<T> {
    let served = served.clone();
    tokio::task::spawn_blocking(move || work(&served))
        .await
        .ok()
}

async fn page(State(served): State<Arc<Served>>, Path(token): Path<String>) -> Response {
    if !holds_token(&*served, &token) {
        return not_found();
    }
    let root = &served.monitor.project.root;
    let title = std::fs::canonicalize(root)
        .unwrap_or_else(|_| root.clone())
        .display()
        .to_string();
    crate::html_page(bl_pages::monitor_html(&title))
}

async fn runs(State(served): State<Arc<Served>>, Path(token): Path<String>) -> Response {
    if !holds_token(&*served, &token) {
        return not_found();
    }
    let listed = blocking(&served, |s| {
        let mut runs = s.monitor.project.runs(&s.runtime);
        // A loop this monitor started and that has not ended is running,
        // which its records alone cannot tell.
        let started = s.started.lock().unwrap_or_else(|e| e.into_inner());
        for run in &mut runs {
            let going = started
                .iter()
                .any(|(name, r)| run["name"] == name.as_str() && !r.is_finished());
            if going && run["state"] == "UNFINISHED" {
                run["state"] = json!("RUNNING");
            }
        }
        runs
    })
    .await;
    match listed {
        Some(runs) => json_answer(&json!(runs)),
        None => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the runs could not be read",
        ),
    }
}

async fn manifests(State(served): State<Arc<Served>>, Path(token): Path<String>) -> Response {
    if !holds_token(&*served, &token) {
        return not_found();
    }
    match blocking(&served, |s| s.monitor.project.manifests()).await {
        Some(found) => json_answer(&json!(found)),
        None => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the project could not be read",
        ),
    }
}

async fn preview(
    State(served): State<Arc<Served>>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !holds_token(&*served, &token) {
        return not_found();
    }
    let asked = match served.decider.admit(&headers, &body) {
        Ok(asked) => asked,
        Err(refusal) => return *refusal,
    };
    let Some(manifest) = asked["manifest"].as_str().map(str::to_string) else {
        return refused(StatusCode::BAD_REQUEST, "a preview names a manifest");
    };
    match blocking(&served, move |s| s.monitor.project.preview(&manifest)).await {
        Some(Ok(preview)) => json_answer(&preview),
        Some(Err(e)) => (StatusCode::CONFLICT, hardened(), e.to_string()).into_response(),
        None => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the preview could not be made",
        ),
    }
}

async fn start(
    State(served): State<Arc<Served>>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !holds_token(&*served, &token) {
        return not_found();
    }
    let asked = match served.decider.admit(&headers, &body) {
        Ok(asked) => asked,
        Err(refusal) => return *refusal,
    };
    let (Some(manifest), Some(digest)) = (
        asked["manifest"].as_str().map(str::to_string),
        asked["digest"].as_str().map(str::to_string),
    ) else {
        return refused(
            StatusCode::BAD_REQUEST,
            "a start names the manifest and the digest of its preview",
        );
    };
    let started = blocking(&served, move |s| {
        let (name, run) = s
            .monitor
            .project
            .start(&manifest, &digest, &s.monitor.options)?;
        s.started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name.clone(), run));
        Ok::<_, bl_app::AppError>(name)
    })
    .await;
    match started {
        Some(Ok(name)) => json_answer(&json!({ "run": name })),
        Some(Err(e)) => (StatusCode::CONFLICT, hardened(), e.to_string()).into_response(),
        None => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the run could not be started",
        ),
    }
}

/// The run `name` of the project, when the token holds and it is one.
fn run_dir(served: &Served, token: &str, name: &str) -> Option<std::path::PathBuf> {
    if !holds_token(served, token) {
        return None;
    }
    served.monitor.project.run_dir(name)
}

async fn run_page(
    State(served): State<Arc<Served>>,
    Path((token, name)): Path<(String, String)>,
) -> Response {
    let Some(dir) = run_dir(&served, &token, &name) else {
        return not_found();
    };
    let events = format!("/{token}/run/{name}/events");
    crate::live_arena(&served.runtime, &dir, None, events).await
}

async fn run_events(
    State(served): State<Arc<Served>>,
    Path((token, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(dir) = run_dir(&served, &token, &name) else {
        return not_found();
    };
    crate::event_stream(&served.runtime, &dir, &served.streams, &query, &headers)
}

async fn run_console(
    State(served): State<Arc<Served>>,
    Path((token, name)): Path<(String, String)>,
) -> Response {
    let Some(dir) = run_dir(&served, &token, &name) else {
        return not_found();
    };
    approvals_page(&served.runtime, &dir, format!("/{token}/run/{name}/decide")).await
}

async fn run_decide(
    State(served): State<Arc<Served>>,
    Path((token, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(dir) = run_dir(&served, &token, &name) else {
        return not_found();
    };
    let key = served.monitor.key.clone();
    decision(&served.runtime, &dir, key, &served.decider, &headers, &body)
        .await
        .1
}

/// A loop run's report (as `bl report` writes it), by the package
/// `runs.json` names it under (`?package=`, none for the project's own).
async fn loop_report(
    State(served): State<Arc<Served>>,
    Path((token, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if !holds_token(&*served, &token) {
        return not_found();
    }
    let package = query.get("package").cloned().unwrap_or_default();
    let page = blocking(&served, move |s| {
        let dir = s.monitor.project.loop_run_dir(&package, &name)?;
        Some(bl_app::loop_report::page(&dir))
    })
    .await
    .flatten();
    match page {
        Some(Ok(html)) => crate::html_page(html),
        Some(Err(e)) => (StatusCode::CONFLICT, hardened(), e.to_string()).into_response(),
        None => not_found(),
    }
}
