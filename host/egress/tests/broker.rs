//! The broker against real servers on loopback: a DNS server (hickory's
//! wire format) whose answers change between queries, and an HTTP server
//! that answers, redirects, stalls and floods. Loopback is reachable only
//! through the test-only address policy.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bl_egress::{
    AddressPolicy, Broker, BrokerLimits, Credential, CredentialSource, EgressError, MemoryAudit,
    OutboundRequest, Resolver, parse_admitted,
};
use hickory_proto::op::{Message, MessageType};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "sk-test-never-logged-7f3a";

/// A DNS server on loopback: the n-th A query (from 0) is answered with
/// `answers[min(n, last)]`. Counts A queries.
struct DnsServer {
    addr: SocketAddr,
    a_queries: Arc<AtomicUsize>,
}

async fn dns_server(answers: Vec<Ipv4Addr>) -> DnsServer {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let a_queries = Arc::new(AtomicUsize::new(0));
    let counter = a_queries.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        loop {
            let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let Ok(query) = Message::from_bytes(&buf[..n]) else {
                continue;
            };
            let mut reply = Message::new();
            reply
                .set_id(query.id())
                .set_message_type(MessageType::Response)
                .set_op_code(query.op_code())
                .set_recursion_desired(true)
                .set_recursion_available(true)
                .set_authoritative(true);
            reply.add_queries(query.queries().to_vec());
            for q in query.queries() {
                if q.query_type() == RecordType::A {
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    let ip = answers[n.min(answers.len() - 1)];
                    reply.add_answer(Record::from_rdata(q.name().clone(), 0, RData::A(A(ip))));
                }
            }
            let _ = socket.send_to(&reply.to_bytes().unwrap(), peer).await;
        }
    });
    DnsServer { addr, a_queries }
}

/// What the HTTP server saw of one request.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorization: Option<String>,
    body: String,
}

/// An HTTP/1.1 server on loopback. `/v1/chat` echoes; `/to/<url>` redirects
/// there; `/big` sends 2 MiB; `/slow` stalls.
async fn http_server() -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let log = log.clone();
            tokio::spawn(async move {
                let mut data = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    data.extend_from_slice(&buf[..n]);
                    if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&data[..head_end]).to_string();
                let header = |name: &str| {
                    head.lines()
                        .find(|l| l.to_ascii_lowercase().starts_with(&format!("{name}:")))
                        .map(|l| l.split_once(':').unwrap().1.trim().to_string())
                };
                let length: usize = header("content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                while data.len() < head_end + length {
                    let n = stream.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    data.extend_from_slice(&buf[..n]);
                }
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                log.lock().unwrap().push(Seen {
                    path: path.clone(),
                    authorization: header("authorization"),
                    body: String::from_utf8_lossy(&data[head_end..]).to_string(),
                });
                let response = if let Some(target) = path.strip_prefix("/to/") {
                    format!("HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").into_bytes()
                } else if path == "/big" {
                    let mut r = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
                    r.extend(std::iter::repeat_n(b'x', 2 << 20));
                    r
                } else if path == "/slow" {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_vec()
                } else {
                    let body = format!("{{\"echo\":{}}}", data.len() - head_end);
                    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).into_bytes()
                };
                let _ = stream.write_all(&response).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (port, seen)
}

struct FixedCredentials;

impl CredentialSource for FixedCredentials {
    fn credential(&self, name: &str) -> Option<Credential> {
        (name == "TEST_API_KEY").then(|| Credential::new(SECRET.to_string()))
    }
}

/// One admitted connection `id`: a plain-http test endpoint with the
/// `external_write` effect, the credential in TEST_API_KEY, valid until
/// 2099, with `changes` applied.
fn admitted(
    id: &str,
    changes: serde_json::Value,
) -> BTreeMap<String, bl_egress::AdmittedConnection> {
    let mut record = json!({
        "allowed_effect": "external_write", "connection_id": id,
        "credential_env_var_name": "TEST_API_KEY", "endpoint_host": "api.test",
        "endpoint_path": "/v1/chat", "endpoint_scheme": "http",
        "expires_at": "2099-01-01T00:00:00Z", "request_style": "openai_chat",
        "route_policy": {"policy_digest": "sha256:22", "data_class_max": "internal",
            "allowed_providers": ["p"], "allowed_models": ["m"], "allowed_regions": ["r"]}
    });
    for (key, value) in changes.as_object().unwrap() {
        record[key] = value.clone();
    }
    parse_admitted(&json!({ id: record })).unwrap()
}

fn broker_over(
    admitted: BTreeMap<String, bl_egress::AdmittedConnection>,
    dns: SocketAddr,
    policy: AddressPolicy,
    limits: BrokerLimits,
    audit: Arc<dyn bl_egress::EgressAudit>,
) -> Broker {
    Broker::new(
        admitted,
        Resolver::with_name_server(dns),
        policy,
        limits,
        Box::new(FixedCredentials),
        audit,
    )
}

fn make_broker(
    host: &str,
    port: u16,
    path: &str,
    dns: SocketAddr,
    policy: AddressPolicy,
    limits: BrokerLimits,
) -> (Broker, Arc<MemoryAudit>) {
    let connection = admitted(
        "c1",
        json!({"endpoint_host": format!("{host}:{port}"), "endpoint_path": path}),
    );
    let audit = Arc::new(MemoryAudit::default());
    let broker = broker_over(connection, dns, policy, limits, audit.clone());
    (broker, audit)
}

fn post(body: &str) -> OutboundRequest {
    OutboundRequest {
        method: "POST".into(),
        content_type: Some("application/json".into()),
        body: body.as_bytes().to_vec(),
    }
}

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;
const PRIVATE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PUBLIC: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

fn loopback() -> AddressPolicy {
    AddressPolicy::allowing_loopback_for_tests()
}

#[tokio::test]
async fn one_request_goes_through_a_lease_with_the_credential_added_by_the_broker() {
    let dns = dns_server(vec![LOOPBACK]).await;
    let (port, seen) = http_server().await;
    let (broker, audit) = make_broker(
        "api.test",
        port,
        "/v1/chat",
        dns.addr,
        loopback(),
        BrokerLimits::default(),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let response = broker
        .forward(&lease.id, "external_write", post("{\"q\":1}"))
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.body, b"{\"echo\":7}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat");
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {SECRET}").as_str())
    );
    assert_eq!(seen[0].body, "{\"q\":1}");

    // The lease is spent.
    let again = broker
        .forward(&lease.id, "external_write", post("{}"))
        .await;
    assert!(
        matches!(
            again,
            Err(EgressError::Lease(bl_egress::LeaseDenial::Consumed(_)))
        ),
        "{again:?}"
    );

    let events = audit.events();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            "lease.issued",
            "egress.authorized",
            "egress.completed",
            "egress.denied"
        ]
    );
    assert_eq!(
        events[1].detail["pinned"],
        json!([format!("127.0.0.1:{port}")])
    );
    let recorded = serde_json::to_string(&events).unwrap();
    assert!(
        !recorded.contains(SECRET),
        "the credential reached an event"
    );
}

#[tokio::test]
async fn a_name_is_resolved_once_and_the_connection_goes_to_the_pinned_address() {
    // DNS rebinding: the first answer passes, every later one is private.
    let dns = dns_server(vec![LOOPBACK, PRIVATE]).await;
    let (port, seen) = http_server().await;
    let (broker, _) = make_broker(
        "rebind.test",
        port,
        "/v1/chat",
        dns.addr,
        loopback(),
        BrokerLimits::default(),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    broker
        .forward(&lease.id, "external_write", post("{}"))
        .await
        .unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(
        dns.a_queries.load(Ordering::SeqCst),
        1,
        "the client resolved again"
    );

    // In production the same trick is pinned to the first (public) answer
    // and never reaches the private one; nothing connects in this test.
    let dns = dns_server(vec![PUBLIC, PRIVATE]).await;
    let (broker, _) = make_broker(
        "rebind.test",
        443,
        "/v1/chat",
        dns.addr,
        AddressPolicy::production(),
        BrokerLimits::default(),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    // Production refuses plain http before resolving anything...
    let refused = broker.authorize(&lease.id, "external_write").await;
    assert!(
        matches!(refused, Err(EgressError::Destination(ref m)) if m.contains("https")),
        "{refused:?}"
    );
    assert_eq!(dns.a_queries.load(Ordering::SeqCst), 0);
    // ...and the pin itself holds the first answer only.
    let pinned = bl_egress::pin(
        "https://rebind.test/v1",
        &AddressPolicy::production(),
        &Resolver::with_name_server(dns.addr),
    )
    .await
    .unwrap();
    assert_eq!(pinned.addresses, [SocketAddr::new(IpAddr::V4(PUBLIC), 443)]);
    let second = bl_egress::pin(
        "https://rebind.test/v1",
        &AddressPolicy::production(),
        &Resolver::with_name_server(dns.addr),
    )
    .await;
    assert!(
        second.is_err(),
        "the private answer must be refused: {second:?}"
    );
}

#[tokio::test]
async fn a_refused_destination_does_not_use_the_lease() {
    let dns = dns_server(vec![PRIVATE, LOOPBACK]).await;
    let (port, seen) = http_server().await;
    let (broker, audit) = make_broker(
        "flaky.test",
        port,
        "/v1/chat",
        dns.addr,
        loopback(),
        BrokerLimits::default(),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let refused = broker
        .forward(&lease.id, "external_write", post("{}"))
        .await;
    assert!(
        matches!(refused, Err(EgressError::Destination(ref m)) if m.contains("10.0.0.1")),
        "{refused:?}"
    );
    assert!(seen.lock().unwrap().is_empty());
    // The same lease still works once the destination is acceptable.
    broker
        .forward(&lease.id, "external_write", post("{}"))
        .await
        .unwrap();
    // A wrong effect is refused without using it either.
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    assert!(broker.authorize(&lease.id, "read_only").await.is_err());
    assert!(broker.authorize(&lease.id, "external_write").await.is_ok());
    assert!(audit.events().iter().any(|e| e.kind == "egress.denied"));
}

#[tokio::test]
async fn redirects_to_private_addresses_are_refused_and_credentials_stay_with_the_origin() {
    let dns = dns_server(vec![LOOPBACK]).await;
    let (port, seen) = http_server().await;
    for target in [
        "http://10.0.0.1/internal".to_string(),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[::ffff:10.0.0.1]/".to_string(),
        "http://0x7f000001.internal/".to_string(),
        "file:///etc/passwd".to_string(),
    ] {
        let (broker, audit) = make_broker(
            "api.test",
            port,
            &format!("/to/{target}"),
            dns.addr,
            loopback(),
            BrokerLimits::default(),
        );
        let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
        let result = broker
            .forward(&lease.id, "external_write", post("{}"))
            .await;
        assert!(
            matches!(result, Err(EgressError::Redirect { .. })),
            "{target}: {result:?}"
        );
        assert_eq!(audit.events().last().unwrap().kind, "egress.denied");
    }
    // A redirect to another origin is followed (it is public here through
    // the test policy) but without the credential.
    let (broker, _) = make_broker(
        "api.test",
        port,
        &format!("/to/http://other.test:{port}/landing"),
        dns.addr,
        loopback(),
        BrokerLimits::default(),
    );
    seen.lock().unwrap().clear();
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let response = broker
        .forward(&lease.id, "external_write", post("{}"))
        .await
        .unwrap();
    assert_eq!(response.status, 200);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].authorization.is_some());
    assert_eq!(seen[1].path, "/landing");
    assert_eq!(
        seen[1].authorization, None,
        "the credential followed a redirect off its origin"
    );
}

#[tokio::test]
async fn responses_are_capped_in_size_and_time() {
    let dns = dns_server(vec![LOOPBACK]).await;
    let (port, _) = http_server().await;
    let limits = BrokerLimits {
        response_bytes: 1 << 20,
        timeout: Duration::from_millis(500),
        max_redirects: 2,
    };
    let (broker, _) = make_broker(
        "api.test",
        port,
        "/big",
        dns.addr,
        loopback(),
        limits.clone(),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let result = broker
        .forward(&lease.id, "external_write", post("{}"))
        .await;
    assert_eq!(result, Err(EgressError::ResponseTooLarge(1 << 20)));

    let (broker, _) = make_broker(
        "api.test",
        port,
        "/slow",
        dns.addr,
        loopback(),
        limits.clone(),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let started = std::time::Instant::now();
    let result = broker
        .forward(&lease.id, "external_write", post("{}"))
        .await;
    assert!(matches!(result, Err(EgressError::Timeout(_))), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // A redirect loop ends at the limit.
    let looping = format!(
        "/to/http://api.test:{port}/to/http://api.test:{port}/to/http://api.test:{port}/v1"
    );
    let (broker, _) = make_broker("api.test", port, &looping, dns.addr, loopback(), limits);
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let result = broker
        .forward(&lease.id, "external_write", post("{}"))
        .await;
    assert_eq!(result, Err(EgressError::TooManyRedirects(2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_a_hundred_concurrent_requests_on_one_lease_exactly_one_goes_through() {
    let dns = dns_server(vec![LOOPBACK]).await;
    let (port, seen) = http_server().await;
    let (broker, _) = make_broker(
        "api.test",
        port,
        "/v1/chat",
        dns.addr,
        loopback(),
        BrokerLimits::default(),
    );
    let broker = Arc::new(broker);
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let start = Arc::new(tokio::sync::Barrier::new(100));
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let broker = broker.clone();
            let id = lease.id.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                broker.forward(&id, "external_write", post("{}")).await
            })
        })
        .collect();
    let mut won = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => won += 1,
            Err(EgressError::Lease(bl_egress::LeaseDenial::Consumed(_))) => {}
            Err(other) => panic!("unexpected: {other:?}"),
        }
    }
    assert_eq!(won, 1);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn unknown_and_expired_connections_get_no_lease() {
    let broker = broker_over(
        admitted("old", json!({"expires_at": "2020-01-01T00:00:00Z"})),
        "127.0.0.1:9".parse().unwrap(),
        AddressPolicy::production(),
        BrokerLimits::default(),
        Arc::new(MemoryAudit::default()),
    );
    assert!(matches!(
        broker.issue_lease("nope", Duration::from_secs(1)),
        Err(EgressError::UnknownConnection(_))
    ));
    assert!(matches!(
        broker.issue_lease("old", Duration::from_secs(1)),
        Err(EgressError::ConnectionExpired { .. })
    ));
}

/// A request refused because the credential's variable is empty leaves the
/// lease usable, and says which variable to set.
#[tokio::test]
async fn a_missing_credential_is_named_and_does_not_use_the_lease() {
    let dns = dns_server(vec![LOOPBACK]).await;
    let (port, seen) = http_server().await;
    let broker = broker_over(
        admitted(
            "c1",
            json!({"credential_env_var_name": "UNSET_KEY", "endpoint_host": format!("api.test:{port}"),
                   "allowed_effect": "read_only"}),
        ),
        dns.addr,
        loopback(),
        BrokerLimits::default(),
        Arc::new(MemoryAudit::default()),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let refused = broker.forward(&lease.id, "read_only", post("{}")).await;
    assert_eq!(refused, Err(EgressError::NoCredential("UNSET_KEY".into())));
    assert!(seen.lock().unwrap().is_empty());
    assert!(
        broker.authorize(&lease.id, "read_only").await.is_ok(),
        "the lease was used"
    );
}

/// A decision that cannot be recorded lets nothing out: the request is not
/// sent when `egress.authorized` fails to reach the run's record.
#[tokio::test]
async fn an_authorization_that_cannot_be_recorded_sends_nothing() {
    struct RefusingAudit;
    impl bl_egress::EgressAudit for RefusingAudit {
        fn record(&self, event: bl_egress::EgressEvent) -> Result<(), bl_egress::AuditError> {
            match event.kind {
                "egress.authorized" => Err(bl_egress::AuditError::Unwritable("disk full".into())),
                _ => Ok(()),
            }
        }
    }
    let dns = dns_server(vec![LOOPBACK]).await;
    let (port, seen) = http_server().await;
    let broker = broker_over(
        admitted(
            "c1",
            json!({"endpoint_host": format!("api.test:{port}"), "allowed_effect": "read_only"}),
        ),
        dns.addr,
        loopback(),
        BrokerLimits::default(),
        Arc::new(RefusingAudit),
    );
    let lease = broker.issue_lease("c1", Duration::from_secs(60)).unwrap();
    let result = broker.forward(&lease.id, "read_only", post("{}")).await;
    assert_eq!(
        result,
        Err(EgressError::Unrecorded(bl_egress::AuditError::Unwritable(
            "disk full".into()
        )))
    );
    assert!(seen.lock().unwrap().is_empty(), "a request left unrecorded");
}
