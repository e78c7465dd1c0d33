//! `graph_run` and `graph_resume`: the graph tools that run something.
//! Each previews first (the plan, or what a resume would do) and hands out
//! a confirm token; confirmed with that token, the run starts in the
//! background and the call answers at once with the run's name and state,
//! which `graph_status` then follows. A run started here is stopped (and
//! left resumable) when the client goes. An approval node it reaches
//! waits for a person (see [`crate::approve`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bl_app::graph_run::DriveOptions;
use bl_app::runtime::{GraphRuntime, RunHandle};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::confirm::Confirmations;

/// `graph_run`'s arguments: bounded-loops' `manifest_yaml`, and what bl
/// adds to run it (a preview first, its token, and the files a run of a
/// graph with agent nodes needs, each inside the workspace).
#[derive(Debug, Deserialize, serde::Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphRunArgs {
    /// The graph manifest (graph/v1), as YAML (or JSON) text.
    pub manifest_yaml: String,
    /// false: the plan, and a confirm_token; nothing runs. true: run it,
    /// with that token.
    #[serde(default)]
    pub confirm: bool,
    /// The token the preview handed out (confirm=true only).
    #[serde(default)]
    pub confirm_token: Option<String>,
    /// connections.json binding the graph's slots (inside the workspace).
    #[serde(default)]
    pub connections: Option<String>,
    /// The node prompts, a JSON object by node id (inside the workspace).
    #[serde(default)]
    pub inputs: Option<String>,
    /// Recorded replies to run keyless (inside the workspace).
    #[serde(default)]
    pub recorded: Option<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `graph_resume`'s arguments (bounded-loops' shape, with the token).
#[derive(Debug, Deserialize, serde::Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphResumeArgs {
    /// The run's name under .bounded-loops/runs, never a path.
    pub run: String,
    /// false: what resuming would do, and a confirm_token. true: resume,
    /// with that token.
    #[serde(default)]
    pub confirm: bool,
    /// A new token ceiling for the run.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// A new cost ceiling, in US dollars (a decimal string).
    #[serde(default)]
    pub max_cost_usd: Option<String>,
    /// The token the preview handed out (confirm=true only).
    #[serde(default)]
    pub confirm_token: Option<String>,
    /// The node prompts, when nodes still to run need them (inside the workspace).
    #[serde(default)]
    pub inputs: Option<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// The graph runs this server started, by name.
#[derive(Default)]
pub struct Started {
    runs: Mutex<Vec<(String, RunHandle)>>,
}

impl Started {
    fn add(&self, name: String, run: RunHandle) {
        self.runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, run));
    }

    /// Whether the run `name` started here has not ended yet.
    pub fn is_running(&self, name: &str) -> bool {
        self.runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|(n, run)| n == name && !run.is_finished())
    }

    /// Stops the run `name` at its next step, resumable.
    pub fn cancel(&self, name: &str) {
        for (n, run) in self.runs.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if n == name {
                run.cancel();
            }
        }
    }

    /// The client is gone: each run stops at its next step, resumable.
    pub fn stop(&self) {
        let runs = std::mem::take(&mut *self.runs.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, run) in &runs {
            run.cancel();
        }
        for (_, run) in runs {
            let _ = run.wait();
        }
    }
}

/// What the graph tools work with.
pub struct GraphRuns<'a> {
    pub workspace: &'a Path,
    pub runs_dir: PathBuf,
    pub confirmations: &'a Confirmations,
    pub started: &'a Started,
    /// Resolves a path an agent gave, only inside the workspace.
    pub contained: &'a dyn Fn(&str) -> Result<PathBuf, Value>,
    pub now: u64,
}

/// The sha256 of a file's bytes, to bind a token to what it held.
fn file_digest(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|bytes| bl_core::Sha256Digest::of(&bytes).to_string())
}

/// A run just started: its end when it ends within a moment (a refusal,
/// or a run that stops at once), else still running and kept to be
/// followed by name.
fn settle(started: &Started, name: &str, run: RunHandle, mut answer: Value) -> Value {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
    while !run.is_finished() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    if !run.is_finished() {
        started.add(name.to_string(), run);
        return answer;
    }
    match run.wait() {
        Ok(driven) => {
            answer["state"] = json!(match &driven.end {
                bl_run::executor::RunEnd::Succeeded => "SUCCEEDED",
                bl_run::executor::RunEnd::Failed => "FAILED",
                bl_run::executor::RunEnd::AwaitingApproval(_) => "AWAITING_APPROVAL",
                bl_run::executor::RunEnd::BudgetPaused(_) => "BUDGET_PAUSED",
                bl_run::executor::RunEnd::Interrupted { .. } => "INTERRUPTED",
            });
            answer
        }
        Err(e) => {
            json!({"ok": false, "run": name, "error": {"code": "graph_integrity", "pointer": "/", "message": e.message()}})
        }
    }
}

impl GraphRuns<'_> {
    /// The file argument `field` names, inside the workspace; refused in
    /// the graph tools' shape, naming the argument.
    fn inside(&self, field: &str, given: &Option<String>) -> Result<Option<PathBuf>, Value> {
        given
            .as_deref()
            .map(|p| {
                (self.contained)(p).map_err(|refused| {
                    // The loop tools' words are about a directory; these
                    // arguments are files.
                    let missing = !self.workspace.join(p).exists()
                        && !refused["message"].as_str().unwrap_or_default().contains("outside");
                    let message = if missing {
                        json!(format!("'{p}' does not exist: {field} names a file inside the workspace ({})", self.workspace.display()))
                    } else {
                        refused["message"].clone()
                    };
                    json!({"ok": false, "error": {"code": "path", "pointer": format!("/{field}"), "message": message}})
                })
            })
            .transpose()
    }

    /// `graph_run`: the plan and a token, or the run started with it.
    pub fn run(&self, args: &GraphRunArgs) -> Value {
        let (connections, inputs, recorded) = match (
            self.inside("connections", &args.connections),
            self.inside("inputs", &args.inputs),
            self.inside("recorded", &args.recorded),
        ) {
            (Ok(c), Ok(i), Ok(r)) => (c, i, r),
            (Err(refused), _, _) | (_, Err(refused), _) | (_, _, Err(refused)) => return refused,
        };
        let roots = [self.workspace.to_path_buf()];
        let compiled =
            bl_app::graph_plan::compile_text(&args.manifest_yaml, connections.as_deref(), &roots);
        let problems = compiled.as_ref().map_or_else(
            |_| Vec::new(),
            |(graph, plan)| crate::run_problems(graph, plan),
        );
        let mut plan = crate::plan_answer(compiled);
        if plan["ok"] != true {
            return plan;
        }
        // What a run refuses before anything runs (a tool it cannot start,
        // nodes it would deny) is said now, with no token the run would
        // then refuse.
        let denials = plan["warnings"].as_array().cloned().unwrap_or_default();
        for (listed, key, why) in [
            (
                &problems,
                "problems",
                "a run refuses this graph before anything runs",
            ),
            (
                &denials,
                "denials",
                "a run would deny these nodes, so it refuses this graph before anything runs",
            ),
        ] {
            if let Some(first) = listed.first() {
                let code = first
                    .get("rule")
                    .cloned()
                    .unwrap_or(json!("graph_run_refused"));
                return json!({"ok": false, "executed": false, "error": {
                    "code": code, "pointer": first["pointer"],
                    "message": format!("{why}: {}", first["message"].as_str().unwrap_or_default()),
                }, key: listed});
            }
        }
        // The token binds the manifest and every file the run would read,
        // as they are now.
        let digest = |p: &Option<PathBuf>| p.as_deref().map(file_digest);
        let bound = json!({
            "manifest": bl_core::Sha256Digest::of(args.manifest_yaml.as_bytes()).to_string(),
            "connections": [&connections, &digest(&connections)],
            "inputs": [&inputs, &digest(&inputs)],
            "recorded": [&recorded, &digest(&recorded)],
        });
        let token = self.confirmations.issue("graph_run", &bound, self.now);
        if !args.confirm {
            plan["executed"] = json!(false);
            plan["confirm_token"] = json!(token);
            plan["how_to_execute"] = json!(
                "call graph_run again with the same arguments, confirm=true and this confirm_token (it holds 15 minutes, once); the run starts in the background and graph_status follows it"
            );
            return plan;
        }
        if let Err(refused) =
            self.confirmations
                .take("graph_run", &bound, args.confirm_token.as_deref(), self.now)
        {
            // Answered with the plan itself (and a fresh token): confirming
            // always follows a preview.
            plan["ok"] = json!(false);
            plan["executed"] = json!(false);
            plan["error"] = json!({"code": "confirm_token", "pointer": "/confirm_token", "message": refused.to_string()});
            plan["confirm_token"] = json!(token);
            return plan;
        }
        let name = match bl_app::graph_run::fresh_run_name() {
            Ok(name) => name,
            Err(e) => {
                return json!({"ok": false, "error": {"code": "graph_run", "pointer": "/", "message": e.message()}});
            }
        };
        // The manifest as the agent gave it, kept beside the runs.
        let kept = self
            .workspace
            .join(".bounded-loops/mcp")
            .join(format!("{name}.yaml"));
        if let Err(e) = std::fs::create_dir_all(kept.parent().unwrap_or(self.workspace))
            .and_then(|()| std::fs::write(&kept, &args.manifest_yaml))
        {
            return json!({"ok": false, "error": {"code": "graph_run", "pointer": "/", "message": format!("{}: {e}", kept.display())}});
        }
        let runtime = GraphRuntime::new(DriveOptions {
            inputs,
            recorded,
            ..Default::default()
        });
        let run = runtime.run(kept.clone(), connections, self.runs_dir.join(&name));
        let answer = json!({
            "ok": true, "executed": true, "run": name, "state": "RUNNING",
            "plan_id": plan["plan_id"],
            "follow": "graph_status with this run: each node's state; an approval node waits for a person (graph_approve)",
        });
        let answer = settle(self.started, &name, run, answer);
        // A run refused before it began leaves nothing behind, not even
        // the manifest kept for it.
        if answer["ok"] == false && !self.runs_dir.join(&name).exists() {
            let _ = std::fs::remove_file(&kept);
        }
        answer
    }

    /// `graph_resume` of the run at `dir` (named `run`).
    pub fn resume(&self, dir: &Path, args: &GraphResumeArgs) -> Value {
        let inputs = match self.inside("inputs", &args.inputs) {
            Ok(inputs) => inputs,
            Err(refused) => return refused,
        };
        let bound = json!({
            "run": args.run, "max_tokens": args.max_tokens, "max_cost_usd": args.max_cost_usd,
            "inputs": [&inputs, &inputs.as_deref().map(file_digest)],
        });
        let token = self.confirmations.issue("graph_resume", &bound, self.now);
        if !args.confirm {
            return json!({
                "ok": true, "preview": true,
                "would": format!("resume run '{}'", args.run),
                "hint": "re-call with confirm=true and this confirm_token to apply",
                "confirm_token": token,
            });
        }
        if let Err(refused) = self.confirmations.take(
            "graph_resume",
            &bound,
            args.confirm_token.as_deref(),
            self.now,
        ) {
            return json!({
                "ok": false,
                "error": {"code": "confirm_token", "pointer": "/confirm_token", "message": refused.to_string()},
                "would": format!("resume run '{}'", args.run),
                "confirm_token": token,
            });
        }
        let runtime = GraphRuntime::new(DriveOptions {
            inputs,
            max_tokens: args.max_tokens,
            max_cost_usd: args.max_cost_usd.clone(),
            ..Default::default()
        });
        let run = runtime.resume(dir);
        let answer = json!({
            "ok": true, "resumed": true, "run": args.run, "state": "RUNNING",
            "follow": "graph_status with this run",
        });
        settle(self.started, &args.run, run, answer)
    }
}
