//! The `outbox-policy` publication policy: an effect may fire only when it
//! is a `local-outbox` write to a path under the configured outbox, every
//! required approval is recorded as approved, and no approval of those
//! names was rejected (a rejection is final).
//!
//! Config: `{ "outbox": "outbox", "required_approvals": ["release"] }`

use bl_plugin_sdk::{PluginError, Policy, PublishDecision, PublishRequest};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub outbox: String,
    pub required_approvals: Vec<String>,
}

/// `target` lies strictly under `outbox`, without `..` or an absolute
/// detour, compared component by component.
pub fn under(outbox: &str, target: &str) -> bool {
    let parts = |p: &str| -> Option<Vec<String>> {
        let mut out = Vec::new();
        for c in p.split('/') {
            match c {
                "" | "." => {}
                ".." => return None,
                c => out.push(c.to_string()),
            }
        }
        Some(out)
    };
    let absolute = |p: &str| p.starts_with('/');
    match (parts(outbox), parts(target)) {
        (Some(o), Some(t)) => {
            absolute(outbox) == absolute(target) && t.len() > o.len() && t.starts_with(&o)
        }
        _ => false,
    }
}

pub struct OutboxPolicy;

impl Policy for OutboxPolicy {
    type Config = Config;

    fn decide(request: &PublishRequest, config: Config) -> Result<PublishDecision, PluginError> {
        if config.required_approvals.is_empty() {
            return Err(PluginError::BadConfig(
                "`required_approvals` is empty; use deny-all or name an approval".into(),
            ));
        }
        if request.kind != "local-outbox" {
            return Ok(PublishDecision::deny(format!(
                "only local-outbox effects are allowed, not {}",
                request.kind
            )));
        }
        if !under(&config.outbox, &request.target) {
            return Ok(PublishDecision::deny(format!(
                "{} is not under the outbox {}",
                request.target, config.outbox
            )));
        }
        for name in &config.required_approvals {
            let recorded: Vec<_> = request
                .approvals
                .iter()
                .filter(|a| &a.name == name)
                .collect();
            if let Some(rejected) = recorded.iter().find(|a| !a.approved) {
                return Ok(PublishDecision::deny(format!(
                    "approval `{name}` was rejected by {}",
                    rejected.approver
                )));
            }
            if recorded.is_empty() {
                return Ok(PublishDecision::deny(format!(
                    "approval `{name}` is not recorded"
                )));
            }
        }
        Ok(PublishDecision::allow(format!(
            "{} is under the outbox and {} approved",
            request.target,
            config.required_approvals.join(", ")
        )))
    }
}

bl_plugin_sdk::export_policy!(OutboxPolicy);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::Approval;

    fn request(target: &str, approvals: &[(&str, bool)]) -> PublishRequest {
        PublishRequest {
            effect_key: "k".into(),
            kind: "local-outbox".into(),
            target: target.into(),
            payload_digest: "sha256:00".into(),
            approvals: approvals
                .iter()
                .map(|(n, ok)| Approval {
                    name: n.to_string(),
                    approver: "ana".into(),
                    approved: *ok,
                })
                .collect(),
        }
    }

    fn decide(r: &PublishRequest) -> PublishDecision {
        bl_plugin_sdk::run_policy::<OutboxPolicy>(
            r,
            r#"{"outbox": "outbox", "required_approvals": ["release"]}"#,
        )
        .unwrap()
    }

    #[test]
    fn allows_only_approved_writes_under_the_outbox() {
        assert!(decide(&request("outbox/report.md", &[("release", true)])).allow);
        assert!(!decide(&request("outbox/report.md", &[])).allow);
        assert!(
            !decide(&request(
                "outbox/report.md",
                &[("release", true), ("release", false)]
            ))
            .allow
        );
        assert!(!decide(&request("outbox/../etc/passwd", &[("release", true)])).allow);
        assert!(!decide(&request("elsewhere/x", &[("release", true)])).allow);
        assert!(!decide(&request("outbox", &[("release", true)])).allow);
    }
}
