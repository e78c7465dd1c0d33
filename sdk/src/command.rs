//! The `command` capability: run an argv with the workspace as the working
//! directory, inside whatever sandbox tier the operator granted. Calling
//! [`run`] is what makes a plugin request `command`; bl refuses to load it
//! unless the operator grants it.

pub use crate::bindings::gate::bl::plugin::command::{CommandError, CommandOutput, CommandRequest};

impl CommandRequest {
    pub fn new<S: AsRef<str>>(argv: &[S]) -> Self {
        CommandRequest {
            argv: argv.iter().map(|s| s.as_ref().to_string()).collect(),
            stdin: None,
            timeout_ms: None,
        }
    }
}


/// Runs one command. Natively (in unit tests) it runs a plain child process
/// in the directory set by [`crate::testing::with_command_dir`].
pub fn run(request: &CommandRequest) -> Result<CommandOutput, CommandError> {
    #[cfg(target_arch = "wasm32")]
    {
        crate::bindings::gate::bl::plugin::command::run(request)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        crate::testing::run_command_natively(request)
    }
}
