//! `bl mcp` driven by rmcp's own client, over stdio, declaring the Tasks
//! extension (SEP-2663): a confirmed `bl_run` or `graph_run` answers with
//! a task handle at once, its result is the run's end (or where it waits
//! for a person), and cancelling the task stops the run. In the stateless
//! 2026-07-28 revision (`server/discover`, no session) a client follows a
//! task by `tasks/get`, whose status message says how far the run is; in
//! the 2025-11-25 revision a client that sends a progress token also gets
//! a progress notification at least every few seconds while the run goes
//! on (the 2026 revision has no channel for them outside a request).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bl_e2e::{bl_binary, repo_root};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, NumberOrString, ProgressNotificationParam, ProgressToken,
    ProtocolVersion, RequestMetaObject, TaskPayload, TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

/// A client that declares tasks and keeps every progress notification,
/// with when it came.
#[derive(Clone, Default)]
struct Watching {
    heard: Arc<Mutex<Vec<(Instant, ProgressNotificationParam)>>>,
}

impl ClientHandler for Watching {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.heard.lock().unwrap().push((Instant::now(), params));
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("rmcp-e2e", "1"),
        )
    }
}

type Client = RunningService<RoleClient, Watching>;

fn arguments(value: Value) -> rmcp::model::JsonObject {
    value.as_object().unwrap().clone()
}

/// The JSON a tool answered (one text block).
fn text_json(result: &rmcp::model::CallToolResult) -> Value {
    let text = &result.content[0].as_text().unwrap().text;
    serde_json::from_str(text).unwrap()
}

/// A call that must answer at once with its result (not a task).
async fn call(client: &Client, tool: &'static str, args: Value) -> Value {
    match client
        .call_tool_once(CallToolRequestParams::new(tool).with_arguments(arguments(args)))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(result) => text_json(&result),
        other => panic!("{tool}: expected a result, got {other:?}"),
    }
}

/// A call that must answer with a task handle, within 100 ms; its id.
async fn task(client: &Client, tool: &'static str, args: Value, progress: &str) -> String {
    let mut meta = RequestMetaObject::default();
    meta.set_progress_token(ProgressToken(NumberOrString::String(
        progress.to_string().into(),
    )));
    let mut params = CallToolRequestParams::new(tool).with_arguments(arguments(args));
    params.meta = Some(meta);
    let asked = Instant::now();
    let response = client.call_tool_once(params).await.unwrap();
    let took = asked.elapsed();
    let CallToolResponse::Task(created) = response else {
        panic!("{tool}: expected a task handle, got {response:?}");
    };
    assert!(
        took < Duration::from_millis(100),
        "{tool}: the task handle took {took:?}"
    );
    assert_eq!(created.task.status, TaskStatus::Working);
    created.task.task_id
}

/// The task's end: its status and, when it completed, the tool's answer.
async fn settled(client: &Client, id: &str) -> (TaskStatus, Value) {
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let got = client
            .get_task(GetTaskParams::new(id.to_string()))
            .await
            .unwrap();
        let status = got.task.status();
        if status.is_terminal() {
            let value = match got.task.payload {
                TaskPayload::Completed { result } => {
                    let result: rmcp::model::CallToolResult =
                        serde_json::from_value(Value::Object(result)).unwrap();
                    text_json(&result)
                }
                other => json!(format!("{other:?}")),
            };
            return (status, value);
        }
        assert!(Instant::now() < until, "task {id} never ended");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn long_calls_are_tasks_that_report_progress_for_clients_that_ask() {
    let workspace = tempfile::tempdir().unwrap();
    let package = workspace.path().join("loops/slow");
    bl_e2e::copy_tree(&repo_root().join("examples/loops/records-shell"), &package);
    // Each of its three turns takes two seconds: longer than a heartbeat.
    let agent = package.join("seed/agent.py");
    let code = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(&agent, format!("import time\ntime.sleep(2)\n{code}")).unwrap();
    bl_e2e::copy_first_graph(workspace.path());

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connect = |lifecycle: ClientLifecycleMode| {
            let mut command = tokio::process::Command::new(bl_binary());
            command.args(["mcp", "--workspace"]).arg(workspace.path());
            let watching = Watching::default();
            async move {
                let client = watching
                    .clone()
                    .serve_with_lifecycle(
                        rmcp::transport::TokioChildProcess::new(command).unwrap(),
                        lifecycle,
                    )
                    .await
                    .unwrap();
                (client, watching)
            }
        };
        let (client, watching) = connect(ClientLifecycleMode::Initialize).await;
        let info = client.peer_info().unwrap();
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
        assert!(info.capabilities.supports_tasks(), "{:?}", info.capabilities);

        // A preview is answered at once, even for a client that takes tasks.
        let preview = call(&client, "bl_run", json!({"loop_dir": "loops/slow", "confirm": false})).await;
        assert_eq!(preview["status"], "not_confirmed", "{preview}");
        let token = preview["confirm_token"].as_str().unwrap();

        let id = task(
            &client,
            "bl_run",
            json!({"loop_dir": "loops/slow", "confirm": true, "confirm_token": token}),
            "loop",
        )
        .await;
        let (status, ended) = settled(&client, &id).await;
        assert_eq!(status, TaskStatus::Completed, "{ended}");
        assert_eq!(ended["status"], "DONE", "{ended}");
        assert_eq!(ended["laps"], 3, "{ended}");
        assert_eq!(ended["started"]["status"], "started", "{ended}");
        // Progress came at the start, at least once a heartbeat while the
        // loop ran (over six seconds), and at the end; and only grew.
        let heard: Vec<(Instant, ProgressNotificationParam)> =
            watching.heard.lock().unwrap().clone();
        // (rmcp's client puts its own progress token on each request.)
        let about_loop: Vec<_> = heard.iter().collect();
        assert!(about_loop.len() >= 3, "{about_loop:?}");
        for pair in about_loop.windows(2) {
            assert!(pair[1].0 - pair[0].0 <= Duration::from_secs(20), "{about_loop:?}");
            assert!(pair[1].1.progress > pair[0].1.progress, "{about_loop:?}");
        }
        let last = about_loop.last().unwrap().1.message.clone().unwrap();
        assert!(last.contains("DONE, 3 laps"), "{last}");

        client.cancel().await.unwrap();

        // The stateless revision: the same tasks, followed by tasks/get.
        let (client, _) = connect(ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        })
        .await;
        assert_eq!(
            client.peer_info().unwrap().protocol_version,
            ProtocolVersion::V_2026_07_28
        );
        // A graph run's task ends where the run waits for a person.
        let manifest = std::fs::read_to_string(workspace.path().join("graph.yaml")).unwrap();
        let run = json!({"manifest_yaml": manifest, "connections": "connections.json",
            "inputs": "inputs.json", "recorded": "replies.json"});
        let preview = call(&client, "graph_run", run.clone()).await;
        let mut confirmed = run.clone();
        confirmed["confirm"] = json!(true);
        confirmed["confirm_token"] = preview["confirm_token"].clone();
        let id = task(&client, "graph_run", confirmed, "graph").await;
        let (status, ended) = settled(&client, &id).await;
        assert_eq!(status, TaskStatus::Completed, "{ended}");
        assert_eq!(ended["state"], "RUNNING", "the log's own word: {ended}");
        assert!(
            ended["in_words"].as_str().unwrap().starts_with("PAUSED, waiting for your decision on review"),
            "{ended}"
        );
        let name = ended["run"].as_str().unwrap();
        let audit = workspace.path().join(".bounded-loops/runs").join(name).join("mcp-audit.jsonl");
        assert!(
            std::fs::read_to_string(audit).unwrap().contains("\"graph_run\""),
            "the call the task made is audited as any call is"
        );
        // Resumed as a task, it waits for the person again.
        let preview = call(&client, "graph_resume", json!({"run": name})).await;
        let id = task(
            &client,
            "graph_resume",
            json!({"run": name, "confirm": true, "confirm_token": preview["confirm_token"]}),
            "resume",
        )
        .await;
        let (status, resumed) = settled(&client, &id).await;
        assert_eq!(status, TaskStatus::Completed, "{resumed}");
        assert_eq!(resumed["started"]["resumed"], true, "{resumed}");
        assert!(
            resumed["in_words"].as_str().unwrap().starts_with("PAUSED, waiting for your decision on review"),
            "{resumed}"
        );

        // Cancelling a task stops its run before the next turn.
        let preview = call(&client, "bl_run", json!({"loop_dir": "loops/slow", "confirm": false, "run_id": "cut"})).await;
        let id = task(
            &client,
            "bl_run",
            json!({"loop_dir": "loops/slow", "confirm": true, "run_id": "cut", "confirm_token": preview["confirm_token"]}),
            "cut",
        )
        .await;
        // Meanwhile tasks/get says how far the run is.
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let got = client.get_task(GetTaskParams::new(id.clone())).await.unwrap();
            let said = got.task.task.status_message.clone().unwrap_or_default();
            if said.starts_with("loop run cut: ") {
                break;
            }
            assert!(Instant::now() < until, "{said}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client
            .cancel_task(CancelTaskParams::new(id.clone()))
            .await
            .unwrap();
        let (status, _) = settled(&client, &id).await;
        assert_eq!(status, TaskStatus::Cancelled);
        let runs = call(&client, "bl_runs", json!({"loop_dir": "loops/slow"})).await;
        let cut = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == "cut")
            .unwrap_or_else(|| panic!("{runs}"));
        assert_eq!(cut["status"], "KILLED", "{runs}");
        let laps = cut["laps"].as_u64().unwrap();
        assert!((1..3).contains(&laps), "the lap in flight was finished, no more: {runs}");
        client.cancel().await.unwrap();
    });
}
