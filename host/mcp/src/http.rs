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

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

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
    bl_web::bearer::token_in(file).map_err(|e| McpError::Token(file.to_path_buf(), e))
}

pub use bl_web::bearer::fresh_token;

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
                    bl_web::bearer::require(token.clone(), "bl mcp", request, next)
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
