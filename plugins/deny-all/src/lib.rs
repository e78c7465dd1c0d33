//! The `deny-all` publication policy: nothing is ever published. The safe
//! default for a graph that has not chosen a policy.

use bl_plugin_sdk::{PluginError, Policy, PublishDecision, PublishRequest};

pub struct DenyAll;

impl Policy for DenyAll {
    type Config = bl_plugin_sdk::serde_json::Value;

    fn decide(
        request: &PublishRequest,
        _config: Self::Config,
    ) -> Result<PublishDecision, PluginError> {
        Ok(PublishDecision::deny(format!(
            "deny-all: {} to {} is not published",
            request.kind, request.target
        )))
    }
}

bl_plugin_sdk::export_policy!(DenyAll);
