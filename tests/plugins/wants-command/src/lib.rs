//! A gate that runs `cat marker.txt` through the command capability and
//! logs what it saw: loading it without `--grant command --grant log` must
//! fail, naming the capability.

use bl_plugin_sdk::command::{CommandRequest, run};
use bl_plugin_sdk::{PluginError, Verdict, Workspace};

pub struct WantsCommand;

impl bl_plugin_sdk::Gate for WantsCommand {
    type Config = bl_plugin_sdk::serde_json::Value;

    /// `{"argv": [...]}` runs that command instead of the default one.
    fn check(_ws: &dyn Workspace, config: Self::Config) -> Result<Verdict, PluginError> {
        let argv: Vec<String> = match config.get("argv") {
            Some(argv) => bl_plugin_sdk::serde_json::from_value(argv.clone())
                .map_err(|e| PluginError::BadConfig(e.to_string()))?,
            None => [
                "sh",
                "-c",
                "cat marker.txt; echo; env | sort | tr '\\n' ' '",
            ]
            .map(String::from)
            .to_vec(),
        };
        let out =
            run(&CommandRequest::new(&argv)).map_err(|e| PluginError::Capability(e.to_string()))?;
        let text = String::from_utf8_lossy(&out.stdout_tail).into_owned();
        bl_plugin_sdk::log::info("ran", &[("exit", &format!("{:?}", out.exit_code))]);
        Ok(Verdict::pass(text))
    }
}

bl_plugin_sdk::export_gate!(WantsCommand);
