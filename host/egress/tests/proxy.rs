//! The allowlist CONNECT proxy over a real unix socket, tunnelling to a
//! real TCP server on loopback (through the test-only policy) and refusing
//! what is not on the allowlist or resolves to a private address.

use std::sync::Arc;

use bl_egress::posture::AllowedHost;
use bl_egress::proxy::{ConnectProxy, ProxyDecision};
use bl_egress::{AddressPolicy, Resolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn echo_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let _ = stream.write_all(b"echo:").await;
                let _ = stream.write_all(&buf[..n]).await;
            });
        }
    });
    port
}

async fn connect(socket: &std::path::Path, target: &str, then: &[u8]) -> String {
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let mut request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").into_bytes();
    request.extend_from_slice(then);
    stream.write_all(&request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut out),
    )
    .await;
    String::from_utf8_lossy(&out).to_string()
}

#[tokio::test]
async fn tunnels_only_to_allowlisted_hosts_at_acceptable_addresses() {
    let port = echo_server().await;
    let other = echo_server().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = ConnectProxy::bind(&socket).unwrap();
    let allow = vec![
        AllowedHost::parse(&format!("127.0.0.1:{port}")).unwrap(),
        AllowedHost::parse("10.0.0.1:443").unwrap(),
    ];
    // No name server is reachable: only literal addresses are used here.
    let resolver = Resolver::with_name_server("127.0.0.1:9".parse().unwrap());
    let proxy = Arc::new(ConnectProxy::new(
        allow.clone(),
        AddressPolicy::allowing_loopback_for_tests(),
        resolver.clone(),
    ));
    let (sender, mut decisions) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(proxy.serve(listener, Some(sender)));

    // The TLS-hello-like bytes sent right after the head reach the server.
    let reply = connect(&socket, &format!("127.0.0.1:{port}"), b"hello").await;
    assert_eq!(
        reply,
        "HTTP/1.1 200 Connection established\r\n\r\necho:hello"
    );
    assert!(matches!(
        decisions.recv().await,
        Some(ProxyDecision::Tunnel { .. })
    ));

    let reply = connect(&socket, &format!("127.0.0.1:{other}"), b"").await;
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden"), "{reply}");
    assert!(reply.contains("not on the egress allowlist"));

    // On the allowlist, but a private address: the SSRF policy still says no.
    let reply = connect(&socket, "10.0.0.1:443", b"").await;
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden"), "{reply}");
    assert!(reply.contains("10.0.0.1"), "{reply}");

    let mut stream = tokio::net::UnixStream::connect(&socket).await.unwrap();
    stream
        .write_all(b"GET http://example.org/ HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 405"), "{out}");

    // With the production policy even the allowlisted loopback is refused.
    let socket = dir.path().join("production.sock");
    let listener = ConnectProxy::bind(&socket).unwrap();
    let proxy = Arc::new(ConnectProxy::new(
        allow,
        AddressPolicy::production(),
        resolver,
    ));
    tokio::spawn(proxy.serve(listener, None));
    let reply = connect(&socket, &format!("127.0.0.1:{port}"), b"").await;
    assert!(reply.starts_with("HTTP/1.1 403 Forbidden"), "{reply}");
    assert!(reply.contains("loopback"), "{reply}");
}
