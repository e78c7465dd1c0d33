//! Tool nodes with no connection (`tool_ref: command:<argv>`): the command
//! runs in the attempt's workspace, in the sandbox tier the node declares
//! (bubblewrap for the caged tiers), with a scrubbed environment and a
//! fixed PATH. Its stdout is the reply; what it wrote is judged.

use std::time::Duration;

use bl_core::{CommandRunner, CommandSpec};
use bl_run::executor::{Task, WorkFuture, WorkReply, WorkRequest, Worker};
use bl_sandbox::{Sandbox, Subprocess, Tier};

use crate::REPLY_CAP;

/// The PATH a tool's command is looked up in, in and out of a cage.
pub const TOOL_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

#[derive(Default)]
pub struct CommandTool {
    /// What the process tier hides from the command (the run's directory).
    pub hidden: Vec<std::path::PathBuf>,
}

impl Worker for CommandTool {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        let hidden = self.hidden.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || run(&request, hidden))
                .await
                .unwrap_or_else(|e| WorkReply::Fault(format!("tool task failed: {e}")))
        })
    }
}

fn run(request: &WorkRequest, hidden: Vec<std::path::PathBuf>) -> WorkReply {
    let Task::Command { argv } = &request.task else {
        return WorkReply::Fault(format!("node '{}' is not a command tool", request.node_id));
    };
    let tier = crate::tier(request.isolation);
    let spec = CommandSpec {
        argv: argv.clone(),
        workspace: request.workspace.clone(),
        workspace_writable: true,
        stdin: Vec::new(),
        timeout: request.deadline.max(Duration::from_secs(1)),
        output_cap: REPLY_CAP,
        stream: false,
        env: vec![("PATH".into(), TOOL_PATH.into())],
        private_dir: None,
        home: None,
    };
    let result = match tier {
        Tier::WorkspaceOnly => Subprocess.run(&spec),
        tier => Sandbox::new(tier).hiding(hidden).run(&spec),
    };
    let result = match result {
        Ok(r) => r,
        // The tier cannot be provided here, or the program cannot start.
        Err(bl_core::CommandError::Denied(why)) => return WorkReply::Denied(why),
        Err(e) => return WorkReply::Fault(e.to_string()),
    };
    let program = &argv[0];
    if result.timed_out || result.exit_code != Some(0) {
        return WorkReply::Fault(crate::failure::describe(
            program,
            &result,
            request.deadline,
            &[],
        ));
    }
    if result.truncated {
        return WorkReply::Fault(format!("'{program}' wrote more than {REPLY_CAP} bytes"));
    }
    WorkReply::text(result.stdout_tail, &format!("tool:{program}"))
}
