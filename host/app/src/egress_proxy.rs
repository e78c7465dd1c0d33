//! The egress proxy a caged agent reaches the network through under the
//! `allowlist` posture: a CONNECT proxy (production address policy: public
//! addresses only) on a private unix socket, which a bridge inside the cage
//! relays to.

use bl_egress::posture::EgressConfig;

use crate::error::AppError;

fn proxy_error(e: impl std::fmt::Display) -> AppError {
    AppError::Refused(format!("the egress proxy could not start: {e}"))
}

/// A running proxy; it serves for as long as this lives.
pub struct ProxyGuard {
    _dir: tempfile::TempDir,
    pub bridge: bl_sandbox::EgressBridge,
}

/// Serves a CONNECT proxy for `config`'s allowlist (production address
/// policy: public addresses only) on a private unix socket, from a
/// background thread, for as long as the returned guard lives. With
/// `record`, every decision is appended there as a JSON line (when, the
/// `host:port` asked for, and what was decided; never any traffic).
pub fn start_proxy(
    config: &EgressConfig,
    record: Option<&std::path::Path>,
) -> Result<ProxyGuard, AppError> {
    let dir = bl_sandbox::containment::owned_tempdir("bl-egress-").map_err(proxy_error)?;
    let socket = dir.path().join("egress.sock");
    let resolver = bl_egress::Resolver::system().map_err(proxy_error)?;
    let proxy = std::sync::Arc::new(bl_egress::proxy::ConnectProxy::new(
        config.allowed(),
        bl_egress::AddressPolicy::production(),
        resolver,
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(proxy_error)?;
    let listener = {
        let _entered = runtime.enter();
        bl_egress::proxy::ConnectProxy::bind(&socket)
            .map_err(|e| proxy_error(format!("{}: {e}", socket.display())))?
    };
    let record = match record {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| proxy_error(format!("{}: {e}", path.display())))?,
        ),
        None => None,
    };
    std::thread::spawn(move || {
        let Some(mut file) = record else {
            return runtime.block_on(proxy.serve(listener, None));
        };
        let (sender, mut decisions) = tokio::sync::mpsc::unbounded_channel();
        runtime.block_on(async move {
            let writer = async move {
                use std::io::Write;
                while let Some(decision) = decisions.recv().await {
                    let _ = writeln!(file, "{}", decision_line(&decision));
                }
            };
            tokio::join!(proxy.serve(listener, Some(sender)), writer);
        });
    });
    let bridge_binary = std::env::current_exe().map_err(proxy_error)?;
    Ok(ProxyGuard {
        _dir: dir,
        bridge: bl_sandbox::EgressBridge {
            proxy_socket: socket,
            bridge_binary,
        },
    })
}

/// One recorded proxy decision.
fn decision_line(decision: &bl_egress::proxy::ProxyDecision) -> serde_json::Value {
    use bl_egress::proxy::ProxyDecision;
    let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    match decision {
        ProxyDecision::Tunnel { target, pinned } => serde_json::json!({
            "at": at, "decision": "tunnel", "target": target, "pinned": pinned,
        }),
        ProxyDecision::Refused { target, reason } => serde_json::json!({
            "at": at, "decision": "refused", "target": target, "reason": reason,
        }),
    }
}
