//! The `tool-policy` publication policy, for the evidence plane's tool
//! calls (`bl evidence serve --policy tool-policy`): a tool named in
//! `allow` may be called; one named in `needs_approval` only once a person
//! approved (the approval named `human`, none of that name rejected);
//! every other tool, and every effect that is not a tool call, is blocked.
//!
//! Config: `{ "allow": ["lookup"], "needs_approval": ["refund"] }`

use bl_plugin_sdk::{PluginError, Policy, PublishDecision, PublishRequest};
use serde::Deserialize;

/// The kind of effect the evidence plane asks about.
pub const TOOL_CALL: &str = "tool-call";
/// The approval a person gives through the evidence plane.
pub const HUMAN: &str = "human";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub needs_approval: Vec<String>,
}

pub struct ToolPolicy;

impl Policy for ToolPolicy {
    type Config = Config;

    fn decide(request: &PublishRequest, config: Config) -> Result<PublishDecision, PluginError> {
        if let Some(both) = config
            .allow
            .iter()
            .find(|t| config.needs_approval.contains(t))
        {
            return Err(PluginError::BadConfig(format!(
                "`{both}` is in both `allow` and `needs_approval`; name it in one"
            )));
        }
        if request.kind != TOOL_CALL {
            return Ok(PublishDecision::deny(format!(
                "only tool calls are decided here, not {}",
                request.kind
            )));
        }
        let tool = &request.target;
        if config.allow.contains(tool) {
            return Ok(PublishDecision::allow(format!("{tool} is allowed")));
        }
        if !config.needs_approval.contains(tool) {
            return Ok(PublishDecision::deny(format!(
                "{tool} is not a tool this policy allows"
            )));
        }
        let human: Vec<_> = request
            .approvals
            .iter()
            .filter(|a| a.name == HUMAN)
            .collect();
        if let Some(rejected) = human.iter().find(|a| !a.approved) {
            return Ok(PublishDecision::deny(format!(
                "{tool} was rejected by {}",
                rejected.approver
            )));
        }
        Ok(if human.is_empty() {
            PublishDecision::deny(format!("{tool} needs a person's approval"))
        } else {
            PublishDecision::allow(format!("{tool} was approved"))
        })
    }
}

bl_plugin_sdk::export_policy!(ToolPolicy);

#[cfg(test)]
mod tests {
    use super::*;
    use bl_plugin_sdk::Approval;

    fn ask(tool: &str, approvals: &[(&str, bool)], config: &str) -> Result<bool, PluginError> {
        let request = PublishRequest {
            effect_key: "op-1".into(),
            kind: TOOL_CALL.into(),
            target: tool.into(),
            payload_digest: "sha256:00".into(),
            approvals: approvals
                .iter()
                .map(|(name, approved)| Approval {
                    name: name.to_string(),
                    approver: "bob".into(),
                    approved: *approved,
                })
                .collect(),
        };
        let config: Config = bl_plugin_sdk::serde_json::from_str(config).unwrap();
        ToolPolicy::decide(&request, config).map(|d| d.allow)
    }

    const CONFIG: &str = r#"{"allow": ["lookup"], "needs_approval": ["refund"]}"#;

    #[test]
    fn allowed_tools_pass_and_unnamed_tools_are_blocked() {
        assert!(ask("lookup", &[], CONFIG).unwrap());
        assert!(!ask("delete", &[], CONFIG).unwrap());
        assert!(!ask("delete", &[(HUMAN, true)], CONFIG).unwrap());
    }

    #[test]
    fn a_tool_needing_approval_passes_only_with_a_human_approval_and_no_rejection() {
        assert!(!ask("refund", &[], CONFIG).unwrap());
        assert!(!ask("refund", &[("other", true)], CONFIG).unwrap());
        assert!(ask("refund", &[(HUMAN, true)], CONFIG).unwrap());
        assert!(!ask("refund", &[(HUMAN, true), (HUMAN, false)], CONFIG).unwrap());
    }

    #[test]
    fn a_tool_in_both_lists_is_a_bad_config() {
        let both = r#"{"allow": ["refund"], "needs_approval": ["refund"]}"#;
        assert!(matches!(
            ask("refund", &[], both),
            Err(PluginError::BadConfig(_))
        ));
    }
}
