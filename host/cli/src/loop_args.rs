//! The flags of `bl run`, shared by the command (one loop) and by
//! `loop_batch` (several side by side, each as its own `bl run DIR`).

use std::path::{Path, PathBuf};

use bl_app::loop_run::LoopRequest;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Path to a loop folder containing loop.yaml. Name several to run
    /// them side by side (each as it would run alone; needs --yes).
    #[arg(required = true, value_name = "LOOP_DIR")]
    pub loop_dirs: Vec<PathBuf>,
    /// Override the runner in loop.yaml's runner.default.
    #[arg(long, value_parser = ["stub", "shell", "python_callable", "claude-code", "codex", "antigravity"])]
    pub runner: Option<String>,
    /// Replace the loop's gate with a command; exit 0 passes, 1 rejects.
    #[arg(long, value_name = "CMD")]
    pub gate_override: Option<String>,
    /// Override bounds.max_iterations (at most 1000).
    #[arg(long)]
    pub max_iterations: Option<u32>,
    /// Skip the confirmation prompt (required when stdin is not a terminal).
    #[arg(long)]
    pub yes: bool,
    /// Keep the scratch workspace after the run.
    #[arg(long)]
    pub keep_workspace: bool,
    /// Persist workspace, ledger and metadata under .bounded-loops/runs/<ID>.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,
    /// Continue the run --run-id names, in its workspace.
    #[arg(long, requires = "run_id")]
    pub resume: bool,
    /// Redact the records before they are written and hashed: off, paths
    /// (absolute paths rewritten) or strict (captured output replaced by
    /// its digest too).
    #[arg(long, value_name = "MODE", default_value = "off", value_parser = ["off", "paths", "strict"])]
    pub redact: String,
    /// With several loops: how many run at once (default: one per CPU).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub jobs: Option<u16>,
}

impl RunArgs {
    /// The use case's request for one of the loops.
    pub fn request(&self, loop_dir: &Path) -> LoopRequest {
        LoopRequest {
            loop_dir: loop_dir.to_path_buf(),
            runner: self.runner.clone(),
            gate_override: self.gate_override.clone(),
            max_iterations: self.max_iterations,
            run_id: self.run_id.clone(),
            resume: self.resume,
            keep_workspace: self.keep_workspace,
            redact: self.redact.clone(),
            cancel: None,
        }
    }

    /// The flags that make `bl run DIR` run one of several loops exactly
    /// as this command would run it alone, confirmed.
    pub fn child_flags(&self, json_out: bool) -> Vec<std::ffi::OsString> {
        // Every field by name, so that a new flag cannot be left out here.
        let RunArgs {
            loop_dirs: _,
            runner,
            gate_override,
            max_iterations,
            yes: _,
            keep_workspace,
            run_id,
            resume,
            redact,
            jobs: _,
        } = self;
        let mut flags: Vec<std::ffi::OsString> =
            vec!["--yes".into(), "--redact".into(), redact.into()];
        let mut valued = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                flags.extend([name.into(), value.into()]);
            }
        };
        valued("--runner", runner.clone());
        valued("--gate-override", gate_override.clone());
        valued("--max-iterations", max_iterations.map(|n| n.to_string()));
        valued("--run-id", run_id.clone());
        for (on, flag) in [
            (*keep_workspace, "--keep-workspace"),
            (*resume, "--resume"),
            (json_out, "--json"),
        ] {
            if on {
                flags.push(flag.into());
            }
        }
        flags
    }
}
