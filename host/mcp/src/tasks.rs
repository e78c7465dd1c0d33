//! Long calls as tasks (the MCP Tasks extension, SEP-2663). A client that
//! declares the extension gets, for a confirmed `bl_run`, `graph_run` or
//! `graph_resume`, a task handle at once; the task makes the call (preview
//! token, audit record and all, exactly as without tasks) and then follows
//! the run it started until the run ends or waits (for a person, or for a
//! larger budget). Its result is the run's state then. Meanwhile the task's
//! status message says how far the run is, and a client that sent a
//! progress token gets a progress notification at the start, at least
//! every [`HEARTBEAT`], and at the end, so a client that gives up on a
//! silent call never sees one. `tasks/cancel` stops the run at its next
//! step, resumable, as a client that goes away does.
//!
//! A client that does not opt in gets the call's own answer, which returns
//! as soon as the run has started.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskOptions};
use rmcp::{ErrorData, RoleServer};
use serde_json::{Value, json};

use crate::BlServer;

/// The longest a client waits between two progress notifications.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// How often a task looks whether its run has ended.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The tools whose confirmed call starts a run.
const STARTS_A_RUN: [&str; 3] = ["bl_run", "graph_run", "graph_resume"];

/// What a task follows.
enum Following {
    Graph { name: String, dir: PathBuf },
    Loop { run_id: String },
}

/// Whether `request` is a call to make a task of: one that starts a run,
/// confirmed, from a client that declared the extension.
pub(crate) fn wanted(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> bool {
    let confirmed = request
        .arguments
        .as_ref()
        .and_then(|a| a.get("confirm"))
        .and_then(Value::as_bool)
        == Some(true);
    STARTS_A_RUN.contains(&request.name.as_ref())
        && confirmed
        && context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks())
}

/// The task that makes `request` and follows the run it starts.
pub(crate) fn start(
    server: &BlServer,
    request: CallToolRequestParams,
    context: RequestContext<RoleServer>,
) -> CallToolResponse {
    let server = server.clone();
    let progress = context.meta.get_progress_token();
    let peer = context.peer.clone();
    let task = server.tasks.clone().spawn(
        TaskOptions::new()
            // A run takes as long as it takes: the task is kept until
            // the client has read it, not for a fixed time.
            .with_ttl_ms(None)
            .with_poll_interval_ms(500)
            .with_status_message("starting"),
        move |task| {
            Box::pin(async move {
                let tool = request.name.to_string();
                let call =
                    rmcp::handler::server::tool::ToolCallContext::new(&server, request, context);
                let started = match server
                    .tool_router
                    .call(call)
                    .await
                    .map_err(TaskExit::Error)?
                {
                    CallToolResponse::Complete(result) => result,
                    other => {
                        return Err(TaskExit::Error(ErrorData::internal_error(
                            format!("{tool} answered {other:?}, not a result"),
                            None,
                        )));
                    }
                };
                let Some(following) = server.following(&tool, &started) else {
                    // Refused: the call's answer is all.
                    return Ok(started);
                };
                let notifier = Notifier {
                    peer,
                    token: progress,
                    began: Instant::now(),
                };
                server.follow(following, &task, &notifier, started).await
            })
        },
    );
    CallToolResponse::Task(rmcp::model::CreateTaskResult::new(task))
}

/// Sends progress to a client that asked for it (by a progress token).
struct Notifier {
    peer: rmcp::Peer<RoleServer>,
    token: Option<ProgressToken>,
    began: Instant,
}

impl Notifier {
    async fn say(&self, message: &str) {
        let Some(token) = &self.token else { return };
        // Progress only grows: the seconds since the call.
        let param = rmcp::model::ProgressNotificationParam::new(
            token.clone(),
            self.began.elapsed().as_secs_f64(),
        )
        .with_message(message);
        // A client that stopped listening does not stop the run.
        let _ = self.peer.notify_progress(param).await;
    }
}

/// The JSON the call answered (one text block).
fn answered(result: &CallToolResult) -> Value {
    serde_json::to_value(result)
        .ok()
        .and_then(|r| {
            r["content"][0]["text"]
                .as_str()
                .and_then(|t| serde_json::from_str(t).ok())
        })
        .unwrap_or(Value::Null)
}

impl BlServer {
    /// The run a just-made call started, if any.
    fn following(&self, tool: &str, started: &CallToolResult) -> Option<Following> {
        let value = answered(started);
        match tool {
            "bl_run" if value["status"] == "started" => Some(Following::Loop {
                run_id: value["run_id"].as_str()?.to_string(),
            }),
            // A run that ended or paused at once is answered as one
            // followed: by its status.
            "graph_run" | "graph_resume" if value["ok"] == true => {
                let name = value["run"].as_str()?.to_string();
                Some(Following::Graph {
                    dir: self.runs_dir().join(&name),
                    name,
                })
            }
            _ => None,
        }
    }

    fn still_running(&self, following: &Following) -> bool {
        match following {
            Following::Graph { name, .. } => self.graphs.is_running(name),
            Following::Loop { run_id } => self
                .started
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .any(|(id, run)| id == run_id && !run.is_finished()),
        }
    }

    fn cancel(&self, following: &Following) {
        match following {
            Following::Graph { name, .. } => self.graphs.cancel(name),
            Following::Loop { run_id } => {
                for (id, run) in self
                    .started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                {
                    if id == run_id {
                        run.cancel();
                    }
                }
            }
        }
    }

    /// Where the run is now: a line for a person, and the value a task
    /// that ends now answers.
    async fn where_now(&self, following: &Following) -> (String, Value) {
        let looked = match following {
            Following::Graph { name, dir } => {
                let (name, dir) = (name.clone(), dir.clone());
                tokio::task::spawn_blocking(move || graph_now(&name, &dir)).await
            }
            Following::Loop { run_id } => {
                let run_id = run_id.clone();
                let dir = self
                    .started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .find(|(id, _)| *id == run_id)
                    .and_then(|(_, run)| run.ledger().parent().map(Path::to_path_buf));
                tokio::task::spawn_blocking(move || loop_now(&run_id, dir.as_deref())).await
            }
        };
        looked.unwrap_or_else(|e| {
            (
                format!("unknown: {e}"),
                json!({"ok": false, "error": e.to_string()}),
            )
        })
    }

    /// Follows the run until it ends or waits, telling the client how far
    /// it is; stops it when the client cancels the task.
    async fn follow(
        &self,
        following: Following,
        task: &TaskContext,
        notifier: &Notifier,
        started: CallToolResult,
    ) -> Result<CallToolResult, TaskExit> {
        let (line, _) = self.where_now(&following).await;
        task.set_status_message(&line);
        notifier.say(&line).await;
        let mut last_said = Instant::now();
        while self.still_running(&following) {
            tokio::select! {
                () = task.cancelled() => {
                    self.cancel(&following);
                    while self.still_running(&following) {
                        tokio::time::sleep(LOOK_EVERY).await;
                    }
                    return Err(TaskExit::Cancelled);
                }
                () = tokio::time::sleep(LOOK_EVERY) => {}
            }
            if last_said.elapsed() >= HEARTBEAT {
                let (line, _) = self.where_now(&following).await;
                task.set_status_message(&line);
                notifier.say(&line).await;
                last_said = Instant::now();
            }
        }
        let (line, mut value) = self.where_now(&following).await;
        task.set_status_message(&line);
        notifier.say(&line).await;
        // The start's audit record stays with the answer.
        value["started"] = answered(&started);
        let mut result = crate::answer(&value).map_err(TaskExit::Error)?;
        result.meta = started.meta;
        Ok(result)
    }
}

/// A graph run's state, read from its log: a line, and the run's state
/// with how many nodes are in each.
fn graph_now(name: &str, dir: &Path) -> (String, Value) {
    match bl_app::runtime::GraphRuntime::default().status(dir) {
        Ok(status) => {
            let ids: Vec<&str> = status
                .run
                .graph
                .nodes
                .iter()
                .map(|n| n.id.as_str())
                .collect();
            let awaiting = status.view.awaiting(ids.iter().copied());
            let words = bl_app::status_text::state_in_words(&status.view, &awaiting, status.live);
            let projection = status.to_json();
            // How many nodes are in each state: a task's result is not
            // paged, so the nodes themselves are graph_status's to give.
            let mut states = serde_json::Map::new();
            for node in projection["nodes"].as_array().into_iter().flatten() {
                let state = node["state"].as_str().unwrap_or("?").to_string();
                let count = states.get(&state).and_then(Value::as_u64).unwrap_or(0);
                states.insert(state, json!(count + 1));
            }
            let ended: u64 = ["SUCCEEDED", "FAILED", "SKIPPED"]
                .iter()
                .filter_map(|s| states.get(*s).and_then(Value::as_u64))
                .sum();
            let line = format!("run {name}: {words}; {ended} of {} nodes ended", ids.len());
            let value = json!({
                "ok": true, "run": name, "state": projection["run_state"], "in_words": words,
                "nodes": states, "receipt_head_hash": projection["receipt_head_hash"],
                "follow": "graph_status with this run: each node's state",
            });
            (line, value)
        }
        // The run has not written its log yet.
        Err(e) => (
            format!("run {name}: {}", e.message()),
            json!({"ok": false, "run": name, "error": e.message()}),
        ),
    }
}

/// A loop run's state, read from its records.
fn loop_now(run_id: &str, dir: Option<&Path>) -> (String, Value) {
    let summary = dir.and_then(|dir| bl_app::loop_info::loop_run_summary(run_id, dir));
    match summary {
        Some(run) => (
            format!(
                "loop run {run_id}: {}, {} laps",
                run["state"].as_str().unwrap_or("?"),
                run["laps"]
            ),
            json!({"status": run["state"], "run_id": run_id, "laps": run["laps"], "reason": run["reason"]}),
        ),
        None => (
            format!("loop run {run_id}: starting"),
            json!({"status": "RUNNING", "run_id": run_id, "laps": 0, "reason": null}),
        ),
    }
}
