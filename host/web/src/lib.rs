//! bl's pages served live, on loopback only. `bl graph watch` serves the
//! arena of a run that may still be being written (by this process or by
//! another one), kept current by Server-Sent Events that come from the
//! runtime API's `subscribe`: each event once, by its sequence, so that a
//! browser that reconnects with `Last-Event-ID` loses and repeats nothing.
//! `bl graph console` ([`console`]) approves from a page, and `bl
//! evidence console` ([`evidence_console`]) reviews an evidence service's
//! decisions; `bl monitor`
//! ([`monitor`]) serves a project's runs, their arenas and consoles, and
//! starts its graphs. A front end on the application layer, like the CLI.

pub mod bearer;
mod console;
mod evidence_console;
mod monitor;

pub use console::{Console, MAX_BODY, serve_console};
pub use evidence_console::{EvidenceConsole, serve_evidence_console};
pub use monitor::{Monitor, serve_monitor};

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bl_app::runtime::{GraphRuntime, Subscription};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many event streams are served at once; one more is told to wait.
pub const MAX_STREAMS: usize = 8;

/// How long a request's body may take to arrive: a page's request is a
/// few hundred bytes, and a client that trickles one holds a connection.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a stream looks for new events and checkpoints.
const POLL: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("cannot serve on {address}: {source}")]
    Serve {
        address: String,
        source: std::io::Error,
    },
    #[error("cannot make the page's token: {0}")]
    Token(String),
}

/// What `bl graph watch` serves: one run, to whoever holds the token.
pub struct Watch {
    pub dir: PathBuf,
    /// The verifier key text the page checks the checkpoint with.
    pub verifier: Option<String>,
    pub runtime: GraphRuntime,
}

struct Served {
    watch: Watch,
    token: String,
    streams: Arc<Semaphore>,
}

/// Where a page is served: a listener on 127.0.0.1 and a fresh token,
/// 128 random bits in hex, that is part of every path served.
pub struct Loopback {
    listener: std::net::TcpListener,
    token: String,
    /// The page's address, token included.
    pub url: String,
}

impl Loopback {
    /// Listens on 127.0.0.1:`port` (0: any free port).
    pub fn bind(port: u16) -> Result<Loopback, WebError> {
        let failed = |source| WebError::Serve {
            address: format!("127.0.0.1:{port}"),
            source,
        };
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).map_err(failed)?;
        let address = listener.local_addr().map_err(failed)?;
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(|e| WebError::Token(e.to_string()))?;
        let token = hex::encode(bytes);
        Ok(Loopback {
            url: format!("http://{address}/{token}/"),
            listener,
            token,
        })
    }

    /// The listener, the token, and the page's own origin
    /// (`http://127.0.0.1:<port>`), the only one its requests may come from.
    pub(crate) fn into_parts(self) -> (std::net::TcpListener, String, String) {
        let origin = self
            .listener
            .local_addr()
            .map(|a| format!("http://{a}"))
            .unwrap_or_default();
        (self.listener, self.token, origin)
    }
}

/// Serves `watch` at `at.url` until `stop` says so.
pub fn serve(
    watch: Watch,
    at: Loopback,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), WebError> {
    let Loopback {
        listener, token, ..
    } = at;
    let served = Arc::new(Served {
        watch,
        token,
        streams: Arc::new(Semaphore::new(MAX_STREAMS)),
    });
    let app = axum::Router::new()
        .route("/{token}/", get(page))
        .route("/{token}/events", get(events))
        .with_state(served);
    run_server(listener, app, stop)
}

/// Runs `app` on `listener` on a runtime of its own until `stop` says so.
pub fn run_server(
    listener: std::net::TcpListener,
    app: axum::Router,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), WebError> {
    let address = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    block_on_serving(
        address,
        || {
            listener.set_nonblocking(true)?;
            tokio::net::TcpListener::from_std(listener)
        },
        app,
        stop,
    )
}

/// [`run_server`] on a unix socket: only who may open the socket's file
/// reaches the server.
pub fn run_server_on_socket(
    listener: std::os::unix::net::UnixListener,
    app: axum::Router,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), WebError> {
    let address = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
        .unwrap_or_default();
    block_on_serving(
        address,
        || {
            listener.set_nonblocking(true)?;
            tokio::net::UnixListener::from_std(listener)
        },
        app,
        stop,
    )
}

/// Serves on the listener `listen` makes, inside a runtime of its own.
fn block_on_serving<L: Accept>(
    address: String,
    listen: impl FnOnce() -> std::io::Result<L>,
    app: axum::Router,
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), WebError> {
    let failed = |source| WebError::Serve {
        address: address.clone(),
        source,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(failed)?;
    runtime.block_on(async move {
        // Made inside the runtime: tokio's listeners need its reactor.
        let listener = listen().map_err(failed)?;
        serve_http1(listener, app, stop).await;
        Ok(())
    })
}

/// A listener connections are accepted from.
trait Accept {
    type Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    fn accept_one(&self) -> impl std::future::Future<Output = std::io::Result<Self::Stream>>;
}

impl Accept for tokio::net::TcpListener {
    type Stream = tokio::net::TcpStream;
    async fn accept_one(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

impl Accept for tokio::net::UnixListener {
    type Stream = tokio::net::UnixStream;
    async fn accept_one(&self) -> std::io::Result<Self::Stream> {
        self.accept().await.map(|(stream, _)| stream)
    }
}

/// At most this many connections are served at once (the event streams
/// and as many again for pages and decisions); more wait to be accepted,
/// so a server's memory stays bounded whatever its clients do.
pub const MAX_CONNECTIONS: usize = 2 * MAX_STREAMS;

/// How long a client has to send a whole request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connections still open at a stop are given to finish.
const CLOSING_GRACE: Duration = Duration::from_secs(30);

/// Serves `app` over HTTP/1 until `stop` says so. A request head that
/// does not arrive within [`HEAD_TIMEOUT`] ends its connection (an idle
/// keep-alive connection too); at a stop, connections finish the response
/// in flight, and any still open after [`CLOSING_GRACE`] (a live event
/// stream) are closed.
async fn serve_http1(
    listener: impl Accept,
    app: axum::Router,
    stop: impl Fn() -> bool + Send + 'static,
) {
    let (closing, closed) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    loop {
        if connections.len() >= MAX_CONNECTIONS {
            // Full: accept nothing more until a connection ends.
            tokio::select! {
                _ = connections.join_next() => {}
                _ = ticks.tick() => {
                    if stop() {
                        break;
                    }
                }
            }
            continue;
        }
        let stream = tokio::select! {
            accepted = listener.accept_one() => match accepted {
                Ok(stream) => stream,
                // Out of descriptors or a reset before accept: back off a
                // moment rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = ticks.tick() => {
                if stop() {
                    break;
                }
                // Reap finished connections so the set stays small.
                while connections.try_join_next().is_some() {}
                continue;
            }
        };
        let service = hyper_util::service::TowerToHyperService::new(app.clone());
        let mut closed = closed.clone();
        connections.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEAD_TIMEOUT);
            let connection =
                builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = closed.changed() => connection.as_mut().graceful_shutdown(),
            }
            let _ = connection.await;
        });
    }
    drop(listener);
    let _ = closing.send(true);
    let _ = tokio::time::timeout(CLOSING_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

/// A server that hands out its pages only under its token.
pub(crate) trait Tokened {
    fn token(&self) -> &str;
}

impl Tokened for Served {
    fn token(&self) -> &str {
        &self.token
    }
}

/// Whether `given` is the token, compared in constant time.
pub(crate) fn holds_token(served: &impl Tokened, given: &str) -> bool {
    let (a, b) = (served.token().as_bytes(), given.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn refused(status: StatusCode, text: &'static str) -> Response {
    (status, hardened(), text).into_response()
}

/// `router` with what every server that takes requests bounds them by:
/// at most [`MAX_BODY`] bytes, arriving within [`BODY_TIMEOUT`].
pub(crate) fn with_body_limits<S: Clone + Send + Sync + 'static>(
    router: axum::Router<S>,
) -> axum::Router<S> {
    router
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            BODY_TIMEOUT,
        ))
}

/// A page, with the hardened headers.
pub(crate) fn html_page(html: String) -> Response {
    let mut headers = hardened();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    (headers, html).into_response()
}

/// Headers every answer carries: nothing is cached, sniffed, framed or
/// referred elsewhere.
pub(crate) fn hardened() -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        // The pages' own policy is in each page; what only a header can
        // say (no framing) and what no page needs, here.
        (
            header::CONTENT_SECURITY_POLICY,
            "frame-ancestors 'none'; base-uri 'none'; form-action 'none'; object-src 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
}

async fn page(State(served): State<Arc<Served>>, Path(token): Path<String>) -> Response {
    if !holds_token(&*served, &token) {
        return refused(StatusCode::NOT_FOUND, "not found");
    }
    let watch = &served.watch;
    let events = format!("/{token}/events");
    live_arena(&watch.runtime, &watch.dir, watch.verifier.clone(), events).await
}

/// A run's live arena page, whose events come from `events` (a path on
/// this server that takes `?after=`).
pub(crate) async fn live_arena(
    runtime: &GraphRuntime,
    dir: &std::path::Path,
    verifier: Option<String>,
    events: String,
) -> Response {
    // A page holds the whole log while it is made: one at a time, so that
    // pages asked for at once cost one log's memory, not one each.
    static MAKING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);
    let Ok(_making) = MAKING.acquire().await else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "the page could not be made",
        );
    };
    // Reading and checking the run is file work: off the server's thread,
    // so that a page being made stalls no stream.
    let (runtime, dir) = (runtime.clone(), dir.to_path_buf());
    let made = tokio::task::spawn_blocking(move || {
        let url = |held: u64| format!("{events}?after={held}");
        runtime.live_arena(&dir, verifier.as_deref(), &url)
    })
    .await;
    match made.unwrap_or_else(|_| {
        Err(bl_app::error::AppError::refused(
            "the page could not be made",
        ))
    }) {
        Ok((html, _)) => html_page(html),
        Err(e) => (StatusCode::CONFLICT, hardened(), e.to_string()).into_response(),
    }
}

/// One reader of the run's log, sending what it reads in order.
struct Stream {
    subscription: Subscription,
    waiting: VecDeque<(u64, String)>,
    checkpoint: Option<String>,
    runtime: GraphRuntime,
    dir: PathBuf,
    ended: bool,
    _permit: OwnedSemaphorePermit,
}

async fn events(
    State(served): State<Arc<Served>>,
    Path(token): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    if !holds_token(&*served, &token) {
        return refused(StatusCode::NOT_FOUND, "not found");
    }
    let watch = &served.watch;
    event_stream(
        &watch.runtime,
        &watch.dir,
        &served.streams,
        &query,
        &headers,
    )
}

/// The run's events as Server-Sent Events, each once by its sequence,
/// from where the browser says it got to; at most as many streams at once
/// as `streams` has permits.
pub(crate) fn event_stream(
    runtime: &GraphRuntime,
    dir: &std::path::Path,
    streams: &Arc<Semaphore>,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Response {
    let Ok(permit) = streams.clone().try_acquire_owned() else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many pages are watching this run; close one",
        );
    };
    // A reconnecting browser says how far it got; a first connection
    // starts after the events its page already holds.
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or(query.get("after").map(String::as_str))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let start = Stream {
        subscription: runtime.subscribe(dir, after),
        waiting: VecDeque::new(),
        checkpoint: None,
        runtime: runtime.clone(),
        dir: dir.to_path_buf(),
        ended: false,
        _permit: permit,
    };
    let stream = futures_util::stream::unfold(start, |mut s| async move {
        if s.ended {
            return None;
        }
        loop {
            if let Some((sequence, line)) = s.waiting.pop_front() {
                let event = Event::default().id(sequence.to_string()).data(line);
                return Some((Ok::<_, Infallible>(event), s));
            }
            let (subscription, polled) = {
                let mut subscription = s.subscription;
                let polled = tokio::task::spawn_blocking(move || {
                    let polled = subscription.poll();
                    (subscription, polled)
                })
                .await;
                match polled {
                    Ok(done) => done,
                    Err(_) => return None,
                }
            };
            s.subscription = subscription;
            match polled {
                Ok(events) if !events.is_empty() => {
                    s.waiting
                        .extend(events.into_iter().map(|e| (e.sequence, e.raw)));
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    s.ended = true;
                    let event = Event::default().event("failure").data(e.to_string());
                    return Some((Ok(event), s));
                }
            }
            if let Some((name, note)) = s.runtime.latest_checkpoint(&s.dir)
                && s.checkpoint.as_deref() != Some(name.as_str())
            {
                s.checkpoint = Some(name);
                return Some((Ok(Event::default().event("checkpoint").data(note)), s));
            }
            tokio::time::sleep(POLL).await;
        }
    });
    let mut response = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    response.headers_mut().extend(hardened());
    response
}
