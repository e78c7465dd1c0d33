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
    match kept_token(file) {
        Ok(Some(token)) => return Ok(token),
        Ok(None) => {}
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

/// The token a client reads from `file` (the server's `--token-file`),
/// held to the rule the server holds it to: one others may read is
/// refused on both sides, not only where it was made.
pub fn token_of(file: &Path) -> std::io::Result<String> {
    kept_token(file)?.ok_or_else(|| {
        std::io::Error::other("it is empty; give the file the server was started with")
    })
}

/// The token in `file`, `None` for an empty file; refused when others may
/// read it (a token others can read is no secret).
fn kept_token(file: &Path) -> std::io::Result<Option<String>> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read_to_string(file)?;
    if std::fs::metadata(file)?.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(
            "others may read it: chmod 600 it, or remove it for a fresh one",
        ));
    }
    let token = text.trim();
    Ok((!token.is_empty()).then(|| token.to_string()))
}

/// Lets `request` through only with `Authorization: Bearer <token>`;
/// anything else is answered 401, saying which server (`service`) wants it.
pub async fn require(
    token: Arc<String>,
    service: &'static str,
    request: Request,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // The scheme's name is case-insensitive (RFC 9110, 11.1).
    let given = header
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .unwrap_or_default();
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        given.as_bytes(),
        token.as_bytes(),
    )) {
        let why = match header {
            None => "no Authorization header",
            Some(_) if given.is_empty() => "the Authorization header is not `Bearer <token>`",
            Some(_) => "the token is not this server's",
        };
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            format!(
                "{service}: {why}; this server needs its bearer token (Authorization: Bearer <token>, the token in its --token-file)"
            ),
        )
            .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_token_file_is_made_for_its_owner_alone_and_one_others_may_read_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("token");
        let made = token_in(&file).unwrap();
        assert_eq!(made.len(), 64);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(token_in(&file).unwrap(), made, "kept, not made again");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = token_in(&file).unwrap_err();
        assert!(refused.to_string().contains("chmod 600"), "{refused}");
        // A client reading it holds it to the same rule.
        let refused = token_of(&file).unwrap_err();
        assert!(refused.to_string().contains("chmod 600"), "{refused}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(token_of(&file).unwrap(), made);
        std::fs::write(&file, "\n").unwrap();
        assert!(token_of(&file).unwrap_err().to_string().contains("empty"));
    }
}
