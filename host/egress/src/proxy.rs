//! The allowlist posture's CONNECT proxy. A caged node has no network of
//! its own; the one way out is this proxy, reached through a unix socket
//! bind-mounted into its sandbox. A tunnel is opened only to a `host:port`
//! on the allowlist, only after the host resolved once to addresses the
//! address policy accepts, and only to those pinned addresses.

use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};

use crate::posture::AllowedHost;
use crate::resolve::{AddressPolicy, Resolver, pin};

/// The largest CONNECT request head accepted.
const MAX_HEAD: usize = 8 << 10;

pub struct ConnectProxy {
    allowlist: Vec<AllowedHost>,
    policy: AddressPolicy,
    resolver: Resolver,
}

/// What the proxy decided for one CONNECT, for the caller's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyDecision {
    Tunnel { target: String, pinned: String },
    Refused { target: String, reason: String },
}

impl ConnectProxy {
    pub fn new(allowlist: Vec<AllowedHost>, policy: AddressPolicy, resolver: Resolver) -> Self {
        ConnectProxy {
            allowlist,
            policy,
            resolver,
        }
    }

    /// Binds `socket` (mode 0600) and serves until the task is dropped.
    pub fn bind(socket: &Path) -> std::io::Result<UnixListener> {
        use std::os::unix::fs::PermissionsExt;
        let listener = UnixListener::bind(socket)?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
        Ok(listener)
    }

    pub async fn serve(
        self: Arc<Self>,
        listener: UnixListener,
        decisions: Option<tokio::sync::mpsc::UnboundedSender<ProxyDecision>>,
    ) {
        while let Ok((stream, _)) = listener.accept().await {
            let proxy = self.clone();
            let decisions = decisions.clone();
            tokio::spawn(async move {
                let decision = proxy.handle(stream).await;
                if let Some(sender) = decisions {
                    let _ = sender.send(decision);
                }
            });
        }
    }

    async fn handle(&self, mut client: UnixStream) -> ProxyDecision {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        let head_end = loop {
            let n = match client.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    return refused(&mut client, "-", "the request ended early", 400).await;
                }
                Ok(n) => n,
            };
            head.extend_from_slice(&buf[..n]);
            if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if head.len() > MAX_HEAD {
                return refused(&mut client, "-", "the request head is too long", 431).await;
            }
        };
        let line = String::from_utf8_lossy(&head[..head_end]);
        let mut words = line.lines().next().unwrap_or_default().split_whitespace();
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        if method != "CONNECT" {
            return refused(&mut client, target, "only CONNECT tunnels are offered", 405).await;
        }
        let Ok(wanted) = AllowedHost::parse(target) else {
            return refused(&mut client, target, "not a host:port", 400).await;
        };
        if !target.contains(':') || !self.allowlist.contains(&wanted) {
            return refused(&mut client, target, "not on the egress allowlist", 403).await;
        }
        let url = format!("https://{}:{}/", wanted.host, wanted.port);
        let pinned = match pin(&url, &self.policy, &self.resolver).await {
            Ok(pinned) => pinned,
            Err(e) => return refused(&mut client, target, &e.to_string(), 403).await,
        };
        let mut upstream = None;
        for addr in &pinned.addresses {
            if let Ok(stream) = TcpStream::connect(addr).await {
                upstream = Some((stream, *addr));
                break;
            }
        }
        let Some((mut upstream, addr)) = upstream else {
            return refused(
                &mut client,
                target,
                "no pinned address accepted the connection",
                502,
            )
            .await;
        };
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return ProxyDecision::Refused {
                target: target.to_string(),
                reason: "the client left".into(),
            };
        }
        // Bytes the client sent after the head (a TLS hello) go first.
        if upstream.write_all(&head[head_end..]).await.is_ok() {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
        ProxyDecision::Tunnel {
            target: target.to_string(),
            pinned: addr.to_string(),
        }
    }
}

async fn refused(
    client: &mut UnixStream,
    target: &str,
    reason: &str,
    status: u16,
) -> ProxyDecision {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Bad Gateway",
    };
    let body = format!("bl egress: {reason}\n");
    let _ = client
        .write_all(
            format!(
                "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await;
    ProxyDecision::Refused {
        target: target.to_string(),
        reason: reason.to_string(),
    }
}

/// The sandbox side: relays every TCP connection accepted on `listen` to
/// the unix socket at `socket`, byte for byte, on plain threads. Runs
/// inside the node's network namespace, where `HTTPS_PROXY` points at it.
pub fn bridge(listen: std::net::TcpListener, socket: std::path::PathBuf) {
    for stream in listen.incoming() {
        let Ok(tcp) = stream else { continue };
        let socket = socket.clone();
        std::thread::spawn(move || {
            let Ok(unix) = std::os::unix::net::UnixStream::connect(&socket) else {
                return;
            };
            let (Ok(mut tcp_read), Ok(mut unix_write)) = (tcp.try_clone(), unix.try_clone()) else {
                return;
            };
            let (mut unix_read, mut tcp_write) = (unix, tcp);
            let upstream = std::thread::spawn(move || {
                let _ = std::io::copy(&mut tcp_read, &mut unix_write);
                let _ = unix_write.shutdown(std::net::Shutdown::Write);
            });
            let _ = std::io::copy(&mut unix_read, &mut tcp_write);
            let _ = tcp_write.shutdown(std::net::Shutdown::Write);
            let _ = upstream.join();
        });
    }
}
