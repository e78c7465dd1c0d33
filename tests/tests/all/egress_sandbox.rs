//! The allowlist posture on Linux, end to end with real bubblewrap: a caged
//! command has no network but a CONNECT proxy reached through a unix socket
//! bind-mounted into its sandbox. It gets a tunnel to an allowlisted host,
//! a 403 for any other, and no direct connection at all. The servers are on
//! the host's loopback, reachable only through the test-only policy.

use std::sync::Arc;
use std::time::Duration;

use bl_core::{CommandRunner, CommandSpec};
use bl_e2e::{bl_binary, cage_works};
use bl_egress::posture::AllowedHost;
use bl_egress::proxy::ConnectProxy;
use bl_egress::{AddressPolicy, Resolver};
use bl_sandbox::{EgressBridge, Sandbox, Tier};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SCRIPT: &str = r#"
import os, socket, sys
allowed, other = sys.argv[1], sys.argv[2]
assert os.environ["HTTPS_PROXY"] == "http://127.0.0.1:3128", os.environ.get("HTTPS_PROXY")

def tunnel(target, payload):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    status = data.split(b" ")[1].decode()
    rest = b""
    if status == "200":
        s.sendall(payload)
        rest = data.split(b"\r\n\r\n", 1)[1]
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            rest += chunk
    return status, rest.decode()

print("allowed", *tunnel("127.0.0.1:" + allowed, b"ping"))
print("other", tunnel("127.0.0.1:" + other, b"")[0])
try:
    socket.create_connection(("127.0.0.1", int(allowed)), timeout=2)
    print("direct connected")
except OSError:
    print("direct refused")
"#;

#[test]
fn a_caged_command_reaches_only_allowlisted_hosts_through_the_proxy() {
    if !cage_works() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (allowed, other) = runtime.block_on(async {
        let mut ports = Vec::new();
        for _ in 0..2 {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            ports.push(listener.local_addr().unwrap().port());
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
        }
        let allow = vec![AllowedHost::parse(&format!("127.0.0.1:{}", ports[0])).unwrap()];
        let proxy = Arc::new(ConnectProxy::new(
            allow,
            AddressPolicy::allowing_loopback_for_tests(),
            Resolver::with_name_server("127.0.0.1:9".parse().unwrap()),
        ));
        let listener = ConnectProxy::bind(&socket).unwrap();
        tokio::spawn(proxy.serve(listener, None));
        (ports[0], ports[1])
    });

    let workspace = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::new(Tier::ContainerRestricted).with_egress(EgressBridge {
        proxy_socket: socket.clone(),
        bridge_binary: bl_binary(),
    });
    let spec = CommandSpec {
        argv: vec![
            "python3".into(),
            "-c".into(),
            SCRIPT.into(),
            allowed.to_string(),
            other.to_string(),
        ],
        workspace: workspace.path().to_path_buf(),
        workspace_writable: false,
        stdin: Vec::new(),
        timeout: Duration::from_secs(60),
        output_cap: 1 << 20,
        stream: false,
        env: Vec::new(),
        private_dir: None,
        home: None,
    };
    let result = sandbox.run(&spec).unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout_tail);
    let stderr = String::from_utf8_lossy(&result.stderr_tail);
    assert_eq!(result.exit_code, Some(0), "{stdout}{stderr}");
    assert_eq!(
        stdout, "allowed 200 echo:ping\nother 403\ndirect refused\n",
        "{stderr}"
    );

    // The process tier carries the bridge too (a caged agent CLI of a
    // loop reaches its provider through it), with the same answers.
    let process = Sandbox::new(Tier::ProcessRestricted).with_egress(EgressBridge {
        proxy_socket: socket.clone(),
        bridge_binary: bl_binary(),
    });
    let result = process.run(&spec).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&result.stdout_tail),
        "allowed 200 echo:ping\nother 403\ndirect refused\n",
        "{}",
        String::from_utf8_lossy(&result.stderr_tail)
    );
    // An unconfined tier cannot carry it: the bridge is no boundary there.
    let loose = Sandbox::new(Tier::WorkspaceOnly).with_egress(EgressBridge {
        proxy_socket: socket,
        bridge_binary: bl_binary(),
    });
    assert!(loose.run(&spec).is_err());
    drop(runtime);
}
