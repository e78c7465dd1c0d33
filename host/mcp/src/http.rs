//! `bl mcp --http ADDR`: the same server over MCP's Streamable HTTP
//! transport (rmcp's), on a loopback address only, behind a bearer token.
//! A request without `Authorization: Bearer <token>` (compared in constant
//! time) is answered 401 before it reaches MCP; rmcp refuses a `Host`
//! that is not loopback (DNS rebinding). Clients that speak the 2026-07-28
//! revision are served statelessly, `server/discover` included; older ones
//! get a session.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq;

use crate::{BlServer, McpConfig, McpError};

/// Where the HTTP server listens and whom it lets in.
pub struct HttpOptions {
    pub address: SocketAddr,
    /// The bearer token every request must carry.
    pub token: String,
}

/// The token kept in `file`, or a fresh one written there (mode 0600)
/// when the file does not exist yet.
pub fn token_in(file: &Path) -> Result<String, McpError> {
    match std::fs::read_to_string(file) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(McpError::Token(file.to_path_buf(), e)),
    }
    let token = fresh_token().map_err(|e| McpError::Start(std::io::Error::other(e)))?;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .and_then(|mut f| f.write_all(token.as_bytes()))
        .map_err(|e| McpError::Token(file.to_path_buf(), e))?;
    Ok(token)
}

/// 32 random bytes, as hex.
pub fn fresh_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

async fn bearer(token: Arc<String>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "bl mcp: this server needs its bearer token (Authorization: Bearer <token>)",
        )
            .into_response();
    }
    next.run(request).await
}

/// Serves MCP over HTTP at `options.address` until `stop` says so;
/// `announce` is told the endpoint's URL once it listens.
pub fn serve_http(
    config: McpConfig,
    options: HttpOptions,
    announce: impl FnOnce(&str),
    stop: impl Fn() -> bool + Send + 'static,
) -> Result<(), McpError> {
    if !options.address.ip().is_loopback() {
        return Err(McpError::NotLoopback(options.address));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(McpError::Start)?;
    let server = BlServer::new(config).map_err(|e| McpError::Start(std::io::Error::other(e)))?;
    let (loops, consoles, graphs) = (
        server.started.clone(),
        server.consoles.clone(),
        server.graphs.clone(),
    );
    let served = runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(options.address)
            .await
            .map_err(McpError::Start)?;
        let at = listener.local_addr().map_err(McpError::Start)?;
        let cancel = tokio_util::sync::CancellationToken::new();
        let mut http = StreamableHttpServerConfig::default();
        http.cancellation_token = cancel.clone();
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            LocalSessionManager::default().into(),
            http,
        );
        let token = Arc::new(options.token);
        let app =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(move |request, next| {
                    bearer(token.clone(), request, next)
                }));
        announce(&format!("http://{at}/mcp"));
        let stopping = async move {
            while !stop() {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            cancel.cancel();
        };
        axum::serve(listener, app)
            .with_graceful_shutdown(stopping)
            .await
            .map_err(McpError::Start)
    });
    crate::stop_started(&loops, &graphs, &consoles);
    served
}
