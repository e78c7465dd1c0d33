//! `https` connector nodes: one request through the egress broker per
//! attempt. The broker holds the admitted records (`--admitted`): it issues
//! a single-use lease bound to the node's connection and effect, judges and
//! pins the endpoint, adds the credential on its own side, and caps the
//! response. Every decision goes to the run's egress log. The worker only
//! shapes the request (the record's `request_style`) and reads the reply.

use std::sync::Arc;
use std::time::Duration;

use bl_egress::{Broker, EgressError, OutboundRequest};
use bl_run::events::Usage;
use bl_run::executor::{WorkFuture, WorkReply, WorkRequest, Worker};
use serde_json::{Value, json};

pub struct HttpsWorker {
    pub broker: Arc<Broker>,
}

impl Worker for HttpsWorker {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let broker = self.broker.clone();
        Box::pin(async move { send(&broker, &request).await })
    }
}

/// The body an `openai_chat` endpoint takes: the node's prompt as the one
/// user message, to the binding's model.
pub fn openai_chat_body(model: &str, prompt: &str) -> Vec<u8> {
    json!({"messages": [{"content": prompt, "role": "user"}], "model": model})
        .to_string()
        .into_bytes()
}

/// The reply and the usage in an `openai_chat` response; `None` when it is
/// not one.
pub fn read_openai_chat(body: &[u8]) -> Option<(String, Option<Usage>)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let text = v["choices"][0]["message"]["content"].as_str()?.to_string();
    let usage = v.get("usage").and_then(|u| {
        Some(Usage {
            input_tokens: u["prompt_tokens"].as_u64()?,
            output_tokens: u["completion_tokens"].as_u64()?,
            cost_microunits: 0,
        })
    });
    Some((text, usage))
}

async fn send(broker: &Broker, request: &WorkRequest) -> WorkReply {
    let Some(binding) = &request.binding else {
        return WorkReply::Fault(format!("node '{}' has no binding", request.node_id));
    };
    let deadline = request.deadline.max(Duration::from_secs(1));
    let lease = match broker.issue_lease(&binding.connection_id, deadline + Duration::from_secs(5))
    {
        Ok(lease) => lease,
        Err(e) => return WorkReply::Denied(format!("egress broker: {e}")),
    };
    let outbound = OutboundRequest {
        method: "POST".into(),
        content_type: Some("application/json".into()),
        body: openai_chat_body(&binding.model_target, &request.prompt),
    };
    let response = match broker.forward(&lease.id, &lease.effect, outbound).await {
        Ok(r) => r,
        Err(e @ (EgressError::Timeout(_) | EgressError::Http(_))) => {
            return WorkReply::Fault(format!("egress broker: {e}"));
        }
        Err(e) => return WorkReply::Denied(format!("egress broker: {e}")),
    };
    if !(200..300).contains(&response.status) {
        return WorkReply::Fault(format!(
            "{} answered HTTP {}",
            response.url, response.status
        ));
    }
    match read_openai_chat(&response.body) {
        Some((text, usage)) => WorkReply::Reply {
            bytes: text.into_bytes(),
            usage,
            reported_by: format!("https:{}", binding.connection_id),
            plugins: Vec::new(),
        },
        None => WorkReply::Contract(format!(
            "{} did not answer in the openai_chat shape (choices[0].message.content); refusing to store the raw body as the node's reply",
            response.url
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bl_egress::{AddressPolicy, BrokerLimits, MemoryAudit, Resolver};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    struct Key;
    impl bl_egress::CredentialSource for Key {
        fn credential(&self, _: &str) -> Option<bl_egress::Credential> {
            Some(bl_egress::Credential::new("sk-test".into()))
        }
    }

    /// A real HTTP server on loopback that answers one chat request and
    /// hands back what it was sent.
    async fn chat_server() -> (u16, tokio::task::JoinHandle<String>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = socket.read(&mut buf).await.unwrap();
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen);
                if let Some(head) = text.find("\r\n\r\n") {
                    let length: usize = text[..head]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    if seen.len() >= head + 4 + length {
                        break;
                    }
                }
            }
            let body = r#"{"choices":[{"message":{"content":"the reply"}}],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&seen).into_owned()
        });
        (port, served)
    }

    #[tokio::test]
    async fn an_https_node_s_turn_is_one_brokered_request_with_its_usage() {
        let (port, served) = chat_server().await;
        let record = json!({"c1": {
            "allowed_effect": "read_only", "connection_id": "c1",
            "credential_env_var_name": "BL_TEST_KEY", "endpoint_host": format!("127.0.0.1:{port}"),
            "endpoint_path": "/v1/chat/completions", "endpoint_scheme": "http",
            "expires_at": "2099-01-01T00:00:00Z", "request_style": "openai_chat",
            "route_policy": {"policy_digest": "d", "data_class_max": "public",
                "allowed_providers": ["p"], "allowed_models": ["m"], "allowed_regions": ["r"]}
        }});
        let audit = Arc::new(MemoryAudit::default());
        let broker = Broker::new(
            bl_egress::parse_admitted(&record).unwrap(),
            Resolver::with_name_server("127.0.0.1:9".parse().unwrap()),
            AddressPolicy::allowing_loopback_for_tests(),
            BrokerLimits::default(),
            Box::new(Key),
            audit.clone(),
        );
        let worker = HttpsWorker {
            broker: Arc::new(broker),
        };
        let binding = bl_graph::Connection {
            binding_id: "b1".into(),
            slot_id: "s".into(),
            connector_id: "https".into(),
            connector_version: "1".into(),
            connection_id: "c1".into(),
            admission_digest: "a".into(),
            route_policy_digest: "d".into(),
            provider_id: "p".into(),
            model_target: "m-1".into(),
            region: "r".into(),
            fallback: false,
            capabilities: vec![],
            data_class_max: "public".into(),
            allowed_effects: vec![],
            isolation: "workspace_only".into(),
            transport: "https".into(),
            admitted: true,
        };
        let request = WorkRequest {
            run_id: "graph-run".into(),
            node_id: "ask".into(),
            attempt: 1,
            execution: 1,
            round: 0,
            prompt: "what is 2+2?".into(),
            binding: Some(binding),
            task: bl_run::executor::Task::Connector,
            transport: bl_run::executor::Transport::Https,
            isolation: bl_graph::model::Isolation::WorkspaceOnly,
            deadline: Duration::from_secs(10),
            workspace: std::env::temp_dir(),
            inputs: vec![],
            outputs: vec![],
        };
        let reply = worker.work(request).await;
        let WorkReply::Reply { bytes, usage, .. } = reply else {
            panic!("{reply:?}");
        };
        assert_eq!(bytes, b"the reply");
        assert_eq!(
            usage.map(|u| (u.input_tokens, u.output_tokens)),
            Some((12, 3))
        );
        let seen = served.await.unwrap();
        assert!(seen.starts_with("POST /v1/chat/completions"), "{seen}");
        assert!(
            seen.contains("Bearer sk-test"),
            "the broker adds the credential: {seen}"
        );
        assert!(
            seen.contains(r#""model":"m-1""#) && seen.contains("what is 2+2?"),
            "{seen}"
        );
        let kinds: Vec<&str> = audit.events().iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            ["lease.issued", "egress.authorized", "egress.completed"]
        );
    }
}
