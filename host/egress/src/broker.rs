//! The broker and its forwarder: one outbound request per lease, to the
//! admitted connection's endpoint only, connected to addresses resolved
//! once and pinned, with the credential added here (never by the node),
//! every redirect hop judged and pinned again, and the response capped in
//! size and time. Every decision is handed to an [`EgressAudit`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::admitted::AdmittedConnection;
use crate::lease::{Lease, LeaseBook, LeaseDenial};
use crate::resolve::{AddressPolicy, PinError, Pinned, Resolver, pin};

/// A credential value. Its `Debug` never shows it, so it cannot reach a
/// log or an error by accident.
pub struct Credential(String);

impl Credential {
    pub fn new(value: String) -> Self {
        Credential(value)
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

/// Where credentials come from, by the name an admitted record gives.
pub trait CredentialSource: Send + Sync {
    fn credential(&self, name: &str) -> Option<Credential>;
}

/// Credentials from the broker process's own environment.
pub struct EnvCredentials;

impl CredentialSource for EnvCredentials {
    fn credential(&self, name: &str) -> Option<Credential> {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .map(Credential)
    }
}

pub use bl_core::egress_audit::{AuditError, EgressAudit, EgressEvent};

/// Keeps events in memory (tests, and callers that copy them elsewhere).
#[derive(Default)]
pub struct MemoryAudit {
    events: std::sync::Mutex<Vec<EgressEvent>>,
}

impl MemoryAudit {
    pub fn events(&self) -> Vec<EgressEvent> {
        self.events.lock().expect("audit lock").clone()
    }
}

impl EgressAudit for MemoryAudit {
    fn record(&self, event: EgressEvent) -> Result<(), AuditError> {
        self.events.lock().expect("audit lock").push(event);
        Ok(())
    }
}

#[derive(Debug, Clone)]
pub struct BrokerLimits {
    /// Largest response body accepted.
    pub response_bytes: usize,
    /// The whole request, redirects included.
    pub timeout: Duration,
    pub max_redirects: usize,
}

impl Default for BrokerLimits {
    fn default() -> Self {
        BrokerLimits {
            response_bytes: 8 << 20,
            timeout: Duration::from_secs(120),
            max_redirects: 5,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    #[error("no admitted connection {0}; admit it in the --admitted file")]
    UnknownConnection(String),
    #[error("admitted connection {connection_id} expired at {expires_at}")]
    ConnectionExpired {
        connection_id: String,
        expires_at: String,
    },
    #[error("{0}")]
    Lease(LeaseDenial),
    #[error("destination refused: {0}")]
    Destination(String),
    #[error("redirect to {location} refused: {reason}")]
    Redirect { location: String, reason: String },
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
    #[error("environment variable {0} holds no credential; set it in the broker's environment")]
    NoCredential(String),
    #[error("the response is larger than {0} bytes")]
    ResponseTooLarge(usize),
    #[error("no response within {0:?}")]
    Timeout(Duration),
    #[error("request failed: {0}")]
    Http(String),
    #[error("the decision could not be recorded, so the request was not sent: {0}")]
    Unrecorded(AuditError),
}

/// What the node asks to send: a body, to its connection's endpoint.
#[derive(Debug, Clone)]
pub struct OutboundRequest {
    pub method: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardedResponse {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    /// The URL that answered (after redirects).
    pub url: String,
}

pub struct Broker {
    admitted: BTreeMap<String, AdmittedConnection>,
    leases: LeaseBook,
    resolver: Resolver,
    policy: AddressPolicy,
    limits: BrokerLimits,
    credentials: Box<dyn CredentialSource>,
    audit: Arc<dyn EgressAudit>,
}

/// An RFC 3339 time (`2027-01-01T00:00:00Z`), as admitted records write it.
fn parse_utc(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text).ok()
}

impl Broker {
    pub fn new(
        admitted: BTreeMap<String, AdmittedConnection>,
        resolver: Resolver,
        policy: AddressPolicy,
        limits: BrokerLimits,
        credentials: Box<dyn CredentialSource>,
        audit: Arc<dyn EgressAudit>,
    ) -> Self {
        Broker {
            admitted,
            leases: LeaseBook::default(),
            resolver,
            policy,
            limits,
            credentials,
            audit,
        }
    }

    fn record(
        &self,
        kind: &'static str,
        connection_id: &str,
        lease_id: Option<&str>,
        detail: Value,
    ) -> Result<(), EgressError> {
        self.audit
            .record(EgressEvent {
                kind,
                connection_id: connection_id.to_string(),
                lease_id: lease_id.map(str::to_string),
                detail,
            })
            .map_err(EgressError::Unrecorded)
    }

    fn connection(&self, id: &str) -> Result<&AdmittedConnection, EgressError> {
        self.admitted
            .get(id)
            .ok_or_else(|| EgressError::UnknownConnection(id.to_string()))
    }

    /// Issues a lease for one request on `connection_id`, with the effect
    /// its admitted record allows, valid for `ttl` (never past the record's
    /// own expiry).
    pub fn issue_lease(&self, connection_id: &str, ttl: Duration) -> Result<Lease, EgressError> {
        let connection = self.connection(connection_id)?;
        let now = SystemTime::now();
        let expires = parse_utc(&connection.expires_at);
        if expires.is_none_or(|e| e <= now) {
            let error = EgressError::ConnectionExpired {
                connection_id: connection_id.to_string(),
                expires_at: connection.expires_at.clone(),
            };
            let _ = self.record(
                "egress.denied",
                connection_id,
                None,
                json!({"reason": error.to_string()}),
            );
            return Err(error);
        }
        let ttl = ttl.min(
            expires
                .and_then(|e| e.duration_since(now).ok())
                .unwrap_or_default(),
        );
        let lease = self
            .leases
            .issue(connection_id, &connection.allowed_effect, ttl, now);
        self.record(
            "lease.issued",
            connection_id,
            Some(&lease.id),
            json!({"effect": lease.effect, "ttl_ms": ttl.as_millis() as u64}),
        )?;
        Ok(lease)
    }

    fn deny(&self, lease: &Lease, error: EgressError) -> EgressError {
        let _ = self.record(
            "egress.denied",
            &lease.connection_id,
            Some(&lease.id),
            json!({"reason": error.to_string()}),
        );
        error
    }

    /// The lease, if it would let a request with `effect` through now
    /// (without using it); a refusal is recorded.
    fn open_lease(&self, lease_id: &str, effect: &str) -> Result<Lease, EgressError> {
        self.leases
            .check(lease_id, effect, SystemTime::now())
            .map_err(|denial| {
                let _ = self.record(
                    "egress.denied",
                    "-",
                    Some(lease_id),
                    json!({"reason": denial.to_string()}),
                );
                EgressError::Lease(denial)
            })
    }

    /// Checks the lease, judges and pins the destination, then uses the
    /// lease. A refused destination leaves the lease usable; of concurrent
    /// callers on one lease, exactly one gets the authorization.
    pub async fn authorize(
        &self,
        lease_id: &str,
        effect: &str,
    ) -> Result<(Lease, Pinned), EgressError> {
        let lease = self.open_lease(lease_id, effect)?;
        let connection = self.connection(&lease.connection_id)?;
        if connection.endpoint_scheme != "https" && !self.policy.allows_plain_http() {
            return Err(self.deny(
                &lease,
                EgressError::Destination("a credential is only ever sent over https".to_string()),
            ));
        }
        let pinned = match pin(&connection.endpoint_url(), &self.policy, &self.resolver).await {
            Ok(pinned) => pinned,
            Err(e) => return Err(self.deny(&lease, EgressError::Destination(e.to_string()))),
        };
        let lease = self
            .leases
            .consume(lease_id, effect, SystemTime::now())
            .map_err(|denial| self.deny(&lease, EgressError::Lease(denial)))?;
        let addresses: Vec<String> = pinned.addresses.iter().map(|a| a.to_string()).collect();
        self.record(
            "egress.authorized",
            &lease.connection_id,
            Some(&lease.id),
            json!({"url": pinned.destination.url, "pinned": addresses, "effect": effect}),
        )?;
        Ok((lease, pinned))
    }

    /// Sends the node's one request through `lease_id` and returns the
    /// response. See the module documentation for what is enforced.
    pub async fn forward(
        &self,
        lease_id: &str,
        effect: &str,
        request: OutboundRequest,
    ) -> Result<ForwardedResponse, EgressError> {
        // The credential must exist before the lease is used: a request
        // refused for want of it leaves the lease usable.
        let open = self.open_lease(lease_id, effect)?;
        let connection = self.connection(&open.connection_id)?;
        let credential = self
            .credentials
            .credential(&connection.credential_env_var_name)
            .ok_or_else(|| {
                self.deny(
                    &open,
                    EgressError::NoCredential(connection.credential_env_var_name.clone()),
                )
            })?;
        let (lease, pinned) = self.authorize(lease_id, effect).await?;
        let timeout = self.limits.timeout;
        let result =
            tokio::time::timeout(timeout, self.follow(&lease, pinned, credential, request))
                .await
                .unwrap_or(Err(EgressError::Timeout(timeout)));
        match result {
            Ok(response) => {
                // The run must know the effect happened; if that cannot be
                // recorded, the caller gets an error rather than a silent
                // success.
                self.record(
                    "egress.completed",
                    &lease.connection_id,
                    Some(&lease.id),
                    json!({"status": response.status, "bytes": response.body.len(), "url": response.url}),
                )?;
                Ok(response)
            }
            Err(error) => Err(self.deny(&lease, error)),
        }
    }

    async fn follow(
        &self,
        lease: &Lease,
        mut pinned: Pinned,
        credential: Credential,
        request: OutboundRequest,
    ) -> Result<ForwardedResponse, EgressError> {
        let origin = origin_of(&pinned.destination.url);
        let mut method = request.method.clone();
        let mut body = Some(request.body.clone());
        for hop in 0..=self.limits.max_redirects {
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .resolve_to_addrs(&pinned.host, &pinned.addresses)
                .no_proxy()
                .build()
                .map_err(|e| EgressError::Http(e.to_string()))?;
            let method_value = reqwest::Method::from_bytes(method.as_bytes())
                .map_err(|e| EgressError::Http(e.to_string()))?;
            let mut builder = client.request(method_value, &pinned.destination.url);
            // The credential goes only to the admitted endpoint's origin.
            if origin_of(&pinned.destination.url) == origin {
                builder = builder.bearer_auth(&credential.0);
            }
            if let Some(bytes) = body.clone() {
                if let Some(content_type) = &request.content_type {
                    builder = builder.header(reqwest::header::CONTENT_TYPE, content_type);
                }
                builder = builder.body(bytes);
            }
            let response = builder
                .send()
                .await
                .map_err(|e| EgressError::Http(without_url_secrets(&e)))?;
            let status = response.status();
            if status.is_redirection()
                && let Some(location) = response.headers().get(reqwest::header::LOCATION)
            {
                if hop == self.limits.max_redirects {
                    return Err(EgressError::TooManyRedirects(self.limits.max_redirects));
                }
                let location = location.to_str().unwrap_or_default().to_string();
                let next = url::Url::parse(&pinned.destination.url)
                    .and_then(|base| base.join(&location))
                    .map_err(|e| EgressError::Redirect {
                        location: location.clone(),
                        reason: e.to_string(),
                    })?;
                pinned = pin(next.as_str(), &self.policy, &self.resolver)
                    .await
                    .map_err(|e: PinError| EgressError::Redirect {
                        location: next.to_string(),
                        reason: e.to_string(),
                    })?;
                let addresses: Vec<String> =
                    pinned.addresses.iter().map(|a| a.to_string()).collect();
                self.record(
                    "egress.redirect",
                    &lease.connection_id,
                    Some(&lease.id),
                    json!({"status": status.as_u16(), "url": pinned.destination.url, "pinned": addresses}),
                )?;
                if !matches!(status.as_u16(), 307 | 308) {
                    method = "GET".to_string();
                    body = None;
                }
                continue;
            }
            return read_capped(response, self.limits.response_bytes).await;
        }
        Err(EgressError::TooManyRedirects(self.limits.max_redirects))
    }
}

fn origin_of(url: &str) -> Option<(String, String, u16)> {
    let url = url::Url::parse(url).ok()?;
    Some((
        url.scheme().to_string(),
        url.host_str()?.to_string(),
        url.port_or_known_default()?,
    ))
}

/// reqwest's error text, which never holds headers (so no credential).
fn without_url_secrets(error: &reqwest::Error) -> String {
    error.to_string()
}

async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<ForwardedResponse, EgressError> {
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(EgressError::ResponseTooLarge(cap));
    }
    let status = response.status().as_u16();
    let url = response.url().to_string();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| EgressError::Http(e.to_string()))?
    {
        if body.len() + chunk.len() > cap {
            return Err(EgressError::ResponseTooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(ForwardedResponse {
        status,
        content_type,
        body,
        url,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_parse_to_the_epoch_seconds() {
        assert_eq!(
            parse_utc("1970-01-01T00:00:00Z"),
            Some(SystemTime::UNIX_EPOCH)
        );
        assert_eq!(
            parse_utc("2027-01-01T00:00:00Z"),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_798_761_600))
        );
        assert_eq!(parse_utc("yesterday"), None);
    }

    #[test]
    fn a_credential_never_prints() {
        let c = Credential::new("sk-live-123".into());
        assert_eq!(format!("{c:?}"), "Credential(<redacted>)");
    }
}
