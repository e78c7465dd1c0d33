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

/// Peers that hang up at every stage (before a head, mid-head, before
/// reading a refusal, mid-tunnel) never stop the proxy: the next peer is
/// served as if nothing happened.
#[tokio::test]
async fn peers_that_hang_up_never_stop_the_proxy_serving_the_others() {
    let port = echo_server().await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = ConnectProxy::bind(&socket).unwrap();
    let proxy = Arc::new(ConnectProxy::new(
        vec![AllowedHost::parse(&format!("127.0.0.1:{port}")).unwrap()],
        AddressPolicy::allowing_loopback_for_tests(),
        Resolver::with_name_server("127.0.0.1:9".parse().unwrap()),
    ));
    tokio::spawn(proxy.serve(listener, None));

    // Connects and leaves at once.
    drop(tokio::net::UnixStream::connect(&socket).await.unwrap());
    // Half a head, then gone.
    let mut half = tokio::net::UnixStream::connect(&socket).await.unwrap();
    half.write_all(b"CONNECT 127.0.0.1:").await.unwrap();
    drop(half);
    // A refused target, and gone before the 403 is read.
    let mut refused = tokio::net::UnixStream::connect(&socket).await.unwrap();
    refused
        .write_all(b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    drop(refused);
    // A tunnel opened, bytes sent, and gone before the reply.
    for _ in 0..20 {
        let mut tunnel = tokio::net::UnixStream::connect(&socket).await.unwrap();
        let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nbye");
        tunnel.write_all(head.as_bytes()).await.unwrap();
        drop(tunnel);
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;

    let reply = connect(&socket, &format!("127.0.0.1:{port}"), b"still").await;
    assert_eq!(
        reply,
        "HTTP/1.1 200 Connection established\r\n\r\necho:still"
    );
}

/// The bridge inside a cage relays TCP to the proxy's socket; peers that
/// hang up, on either side, never stop it relaying for the next one.
#[test]
fn the_bridge_keeps_relaying_after_peers_hang_up() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("upstream.sock");
    let upstream = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // The upstream hangs up on the first two connections, then echoes.
    std::thread::spawn(move || {
        for (i, stream) in upstream.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            if i < 2 {
                drop(stream);
                continue;
            }
            std::thread::spawn(move || {
                let mut buf = [0u8; 64];
                let n = stream.read(&mut buf).unwrap_or(0);
                let _ = stream.write_all(&buf[..n]);
            });
        }
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || bl_egress::proxy::bridge(listener, socket));

    // Two clients whose upstream hangs up, one that leaves at once, and
    // one that writes a lot and leaves without reading.
    for _ in 0..2 {
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        let _ = client.write_all(b"x");
        let mut sink = Vec::new();
        let _ = client.read_to_end(&mut sink);
    }
    drop(std::net::TcpStream::connect(addr).unwrap());
    let mut big = std::net::TcpStream::connect(addr).unwrap();
    let _ = big.write_all(&vec![b'y'; 1 << 20]);
    drop(big);

    let mut client = std::net::TcpStream::connect(addr).unwrap();
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    client.write_all(b"ping").unwrap();
    client.shutdown(std::net::Shutdown::Write).unwrap();
    let mut reply = Vec::new();
    client.read_to_end(&mut reply).unwrap();
    assert_eq!(reply, b"ping");
}
