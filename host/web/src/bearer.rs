//! Bearer tokens for the HTTP APIs bl serves on loopback (`bl mcp --http`,
//! `bl evidence serve`): made fresh or kept in a file only its owner reads,
//! and checked on every request in constant time.

use std::path::Path;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// 32 random bytes, as hex.
pub fn fresh_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

/// The token kept in `file`, or a fresh one written there (mode 0600)
/// when the file does not exist yet.
pub fn token_in(file: &Path) -> std::io::Result<String> {
    match std::fs::read_to_string(file) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let token = fresh_token().map_err(std::io::Error::other)?;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .and_then(|mut f| f.write_all(token.as_bytes()))?;
    Ok(token)
}

/// Lets `request` through only with `Authorization: Bearer <token>`;
/// anything else is answered 401, saying which server (`service`) wants it.
pub async fn require(
    token: Arc<String>,
    service: &'static str,
    request: Request,
    next: Next,
) -> Response {
    let given = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        given.as_bytes(),
        token.as_bytes(),
    )) {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            format!(
                "{service}: this server needs its bearer token (Authorization: Bearer <token>)"
            ),
        )
            .into_response();
    }
    next.run(request).await
}
