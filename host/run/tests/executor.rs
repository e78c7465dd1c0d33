//! The executor over in-memory ports: no file, no process, no wasm. Each
//! port is a small scripted fake, so each rule of a drive is seen alone:
//! order and replay, retries, a spending cap, the stop, a panicking task,
//! a worker whose reply never comes.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bl_graph::CompileInput;
use bl_graph::plan::DEFAULT_POLICY_DIGEST;
use bl_run::events::{Event, Usage, Verdict};
use bl_run::executor::{
    Artifacts, Caps, Decisions, Journal, Judge, JudgeFuture, JudgeRequest, Judgement, Ledger,
    MAX_REDRIVES, NeverStop, Ports, Publication, PublishOrder, Ruling, RunEnd, RunError,
    RunSettings, Stage, StageError, StageRequest, StagedInput, Stop, Task, Transport, WORK_GRACE,
    Wire, WireError, WorkFuture, WorkReply, WorkRequest, Worker,
};
use bl_run::projection::{self, NodeState, RunView};
use bl_run::reply::{ReplyRequest, ReplyRuling};
use bl_run::schedule::Schedule;
use serde_json::{Value, json};

/// A chain of command tools: a -> b -> c.
fn chain(max_attempts: u32) -> Schedule {
    schedule_of(chain_manifest(max_attempts))
}

fn chain_manifest(max_attempts: u32) -> Value {
    let node = |id: &str, inputs: Value| {
        json!({
            "id": id, "kind": "tool", "tool_ref": format!("command:echo {id}"),
            "inputs": inputs, "outputs": {"out": "text"},
            "budget": {"max_attempts": max_attempts, "max_wallclock_s": 60},
            "effects": ["read_only"], "isolation": "workspace_only",
        })
    };
    let manifest = json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": "chain", "version": "1.0.0",
        "nodes": [node("a", json!({})), node("b", json!({"in": "text"})), node("c", json!({"in": "text"}))],
        "edges": [
            {"from_node": "a", "from_port": "out", "to_node": "b", "to_port": "in"},
            {"from_node": "b", "from_port": "out", "to_node": "c", "to_port": "in"},
        ],
        "connection_slots": [],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"},
    });
    manifest
}

fn schedule_of(manifest: Value) -> Schedule {
    let graph = bl_graph::lint(&manifest.to_string(), bl_graph::Format::Json).unwrap();
    let plan = bl_graph::compile(
        &graph,
        &CompileInput {
            connections: None,
            available_packages: None,
            policy_digest: DEFAULT_POLICY_DIGEST,
        },
    )
    .unwrap();
    Schedule::of(&graph, &plan)
}

/// The log in memory: appends by key, idempotent as the real one is.
#[derive(Default)]
struct MemoryJournal {
    events: Vec<(String, String, Value)>,
    annex: Vec<(String, String, Value)>,
    /// `node:kind`: the disk is lost when this event is appended, and
    /// every append after fails too (a controller that dies there).
    lost_at: Option<String>,
    lost: bool,
    /// The run's artifact store, which outlives a controller as the log does.
    artifacts: Arc<MemoryArtifacts>,
}

impl Journal for MemoryJournal {
    fn append(&mut self, event: &Event) -> Result<(), RunError> {
        let at = format!(
            "{}:{}",
            event.payload["node_id"].as_str().unwrap_or(""),
            event.kind
        );
        if self.lost || self.lost_at.as_deref() == Some(at.as_str()) {
            self.lost = true;
            return Err(RunError::Journal(format!("the disk is gone at {at}")));
        }
        match self.recorded(&event.key) {
            Some(payload) if payload == event.payload => Ok(()),
            Some(_) => Err(RunError::Journal(format!(
                "{} recorded otherwise",
                event.key
            ))),
            None => {
                let line = (
                    event.key.clone(),
                    event.kind.to_string(),
                    event.payload.clone(),
                );
                self.events.push(line);
                Ok(())
            }
        }
    }

    fn annex(&mut self, event: &Event) -> Result<(), RunError> {
        let line = (
            event.key.clone(),
            event.kind.to_string(),
            event.payload.clone(),
        );
        self.annex.push(line);
        Ok(())
    }

    fn recorded(&self, key: &str) -> Option<Value> {
        self.events
            .iter()
            .chain(&self.annex)
            .find(|(k, _, _)| k == key)
            .map(|(_, _, p)| p.clone())
    }

    fn sync(&mut self) -> Result<(), RunError> {
        Ok(())
    }
}

impl MemoryJournal {
    /// The same record on a new disk, for the next controller.
    fn recovered(&mut self) {
        self.lost_at = None;
        self.lost = false;
    }

    /// The log folded, then the annex (as the run's readers fold them).
    fn view(&self) -> RunView {
        projection::project(
            self.events
                .iter()
                .chain(&self.annex)
                .map(|(_, kind, p)| (kind.as_str(), p)),
        )
    }

    fn kinds(&self) -> Vec<String> {
        self.events
            .iter()
            .map(|(_, kind, p)| match p["node_id"].as_str() {
                Some(node) => format!("{node}:{kind}"),
                None => kind.clone(),
            })
            .collect()
    }
}

#[derive(Default)]
struct MemoryArtifacts {
    objects: Mutex<HashMap<String, Vec<u8>>>,
}

impl Artifacts for MemoryArtifacts {
    fn put(&self, bytes: &[u8], _media_type: &str, _attempt: u32) -> Result<String, RunError> {
        let digest = bl_core::Sha256Digest::of(bytes).to_string();
        self.objects
            .lock()
            .unwrap()
            .insert(digest.clone(), bytes.to_vec());
        Ok(digest)
    }

    fn get(&self, digest: &str) -> Result<Vec<u8>, RunError> {
        self.objects
            .lock()
            .unwrap()
            .get(digest)
            .cloned()
            .ok_or_else(|| RunError::Artifacts(format!("{digest} is not stored")))
    }

    fn sync(&self) -> Result<(), RunError> {
        Ok(())
    }
}

struct NoDecisions;

impl Decisions for NoDecisions {
    fn decision(&self, _node: &str, _round: u32, _evidence: &[String]) -> Option<bool> {
        None
    }
}

struct NoLedger;

impl Ledger for NoLedger {
    fn publish(&self, _order: &PublishOrder) -> Result<Publication, RunError> {
        Err(RunError::Ledger("no publish in these graphs".into()))
    }
}

struct MemoryStage;

impl Stage for MemoryStage {
    fn stage(&self, request: &StageRequest) -> Result<(PathBuf, Vec<StagedInput>), StageError> {
        Ok((
            PathBuf::from(format!("/nowhere/{}", request.node_id)),
            Vec::new(),
        ))
    }

    fn kept(&self, _node_id: &str, _workspace: &Path) -> bool {
        true
    }
}

/// What the worker does for a node's turn.
#[derive(Clone)]
enum Turn {
    Reply(Option<Usage>),
    /// A reply after this long (on the paused clock).
    Slow(Duration),
    /// A fault on the node's first turn, a reply after.
    FaultFirst,
    Panic,
    Never,
    /// Waits for approvals of the child run's `gate` on the node's first
    /// this many turns (as a subgraph's child run that pauses), a reply after.
    AwaitingFirst(u32),
}

/// Answers each turn as scripted for its node (a reply by default), and
/// counts the turns.
#[derive(Default)]
struct ScriptedWorker {
    script: HashMap<String, Turn>,
    turns: AtomicU32,
    faulted: Mutex<Vec<String>>,
    /// Each node's turns so far.
    turns_of: Mutex<HashMap<String, u32>>,
}

impl Worker for ScriptedWorker {
    fn work(&self, request: WorkRequest) -> WorkFuture {
        self.turns.fetch_add(1, Ordering::SeqCst);
        assert!(
            matches!(
                request.task,
                Task::Command { .. } | Task::Route | Task::Subgraph { .. }
            ),
            "{:?}",
            request.task
        );
        let turn_of_node = {
            let mut turns = self.turns_of.lock().unwrap();
            let count = turns.entry(request.node_id.clone()).or_default();
            *count += 1;
            *count
        };
        let turn = self
            .script
            .get(&request.node_id)
            .cloned()
            .unwrap_or(Turn::Reply(None));
        let first = !self.faulted.lock().unwrap().contains(&request.node_id);
        if matches!(turn, Turn::FaultFirst) {
            self.faulted.lock().unwrap().push(request.node_id.clone());
        }
        Box::pin(async move {
            match turn {
                Turn::FaultFirst if first => WorkReply::Fault("the agent crashed".into()),
                Turn::FaultFirst => WorkReply::text(b"done".to_vec(), "scripted"),
                Turn::Reply(usage) => WorkReply::Reply {
                    bytes: format!("{} did it", request.node_id).into_bytes(),
                    usage,
                    reported_by: "scripted".into(),
                    plugins: Vec::new(),
                },
                Turn::Slow(delay) => {
                    tokio::time::sleep(delay).await;
                    WorkReply::text(b"slow but done".to_vec(), "scripted")
                }
                Turn::Panic => panic!("the worker's task panicked"),
                Turn::Never => std::future::pending().await,
                Turn::AwaitingFirst(n) if turn_of_node <= n => {
                    WorkReply::AwaitingApproval(vec!["gate".into()])
                }
                Turn::AwaitingFirst(_) => WorkReply::text(b"child run done".to_vec(), "scripted"),
            }
        })
    }
}

/// Decides each attempt as scripted for its node, in order (a pass once
/// the script runs out).
#[derive(Default)]
struct ScriptedJudge {
    script: Mutex<HashMap<String, VecDeque<Ruling>>>,
    /// Nodes whose replies this judge rejects, whatever they say.
    rejects_replies_of: Vec<String>,
    /// A router's node id → the route its gate's verdict picks.
    routes: HashMap<String, &'static str>,
    /// How many times a workspace was judged.
    asked: AtomicU32,
}

impl Judge for ScriptedJudge {
    fn rule_on_reply(&self, request: &ReplyRequest) -> ReplyRuling {
        if self.rejects_replies_of.iter().any(|n| n == request.node_id) {
            return ReplyRuling::Reject(Verdict {
                passed: false,
                reason: format!("the judge will not have {}'s reply", request.node_id),
                evidence_digest: None,
            });
        }
        bl_run::reply::rule(request)
    }

    fn judge(&self, request: JudgeRequest) -> JudgeFuture {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let decision = self
            .script
            .lock()
            .unwrap()
            .get_mut(&request.node_id)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| Ruling::Pass("scripted".into()));
        let route = request
            .routes
            .as_ref()
            .zip(self.routes.get(&request.node_id))
            .and_then(|(routes, name)| routes.index(name));
        Box::pin(std::future::ready(Judgement {
            decision,
            route,
            published: Vec::new(),
            checked: Vec::new(),
            contracts: Default::default(),
            plugins: Vec::new(),
            evidence_digest: None,
        }))
    }
}

/// Asks to stop before anything starts.
struct StoppedAtOnce;

impl Stop for StoppedAtOnce {
    fn requested(&self) -> Option<i32> {
        Some(15)
    }
}

fn settings(caps: Caps) -> RunSettings {
    RunSettings {
        run_id: "graph-run".into(),
        plan_id: "plan".into(),
        concurrency: 2,
        caps,
        prompts: HashMap::new(),
        resume_ordinal: None,
        prices: HashMap::new(),
        gate_grants: HashMap::new(),
        audit_plan: None,
    }
}

/// One drive of `schedule` over the ports, on a paused clock (a timeout
/// passes at once when nothing else can happen).
fn drive(
    schedule: &Schedule,
    settings: &RunSettings,
    journal: &mut MemoryJournal,
    worker: Arc<ScriptedWorker>,
    judge: Arc<ScriptedJudge>,
    stop: Arc<dyn Stop>,
) -> Result<RunEnd, RunError> {
    let mut observer = |_: &Event| {};
    let artifacts = journal.artifacts.clone();
    let mut ports = Ports {
        journal,
        artifacts: &*artifacts,
        decisions: &NoDecisions,
        ledger: &NoLedger,
        worker,
        stage: Arc::new(MemoryStage),
        judge,
        observer: &mut observer,
        stop,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
        .block_on(bl_run::executor::drive(schedule, settings, &mut ports))
}

/// A drive with the default judge, that nobody stops.
fn drive_plain(
    schedule: &Schedule,
    settings: &RunSettings,
    journal: &mut MemoryJournal,
    worker: Arc<ScriptedWorker>,
) -> Result<RunEnd, RunError> {
    drive(
        schedule,
        settings,
        journal,
        worker,
        Arc::new(ScriptedJudge::default()),
        Arc::new(NeverStop),
    )
}

#[test]
fn a_chain_runs_in_order_and_a_second_drive_replays_it_without_a_turn() {
    let schedule = chain(1);
    let mut journal = MemoryJournal::default();
    let worker = Arc::new(ScriptedWorker::default());
    let judge = Arc::new(ScriptedJudge::default());
    let end = drive(
        &schedule,
        &settings(Caps::default()),
        &mut journal,
        worker.clone(),
        judge.clone(),
        Arc::new(NeverStop),
    )
    .unwrap();
    assert_eq!(end, RunEnd::Succeeded);
    assert_eq!(worker.turns.load(Ordering::SeqCst), 3);
    let kinds = journal.kinds();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| x == k)
            .unwrap_or_else(|| panic!("{k} in {kinds:?}"))
    };
    assert!(at("a:node.succeeded") < at("b:node.running"), "{kinds:?}");
    assert!(at("b:node.succeeded") < at("c:node.running"), "{kinds:?}");
    assert_eq!(journal.view().run_state, "SUCCEEDED");

    let recorded = journal.events.len();
    let again = drive(
        &schedule,
        &settings(Caps::default()),
        &mut journal,
        worker.clone(),
        judge,
        Arc::new(NeverStop),
    )
    .unwrap();
    assert_eq!(again, RunEnd::Succeeded);
    assert_eq!(
        worker.turns.load(Ordering::SeqCst),
        3,
        "no turn is taken twice"
    );
    assert_eq!(journal.events.len(), recorded, "nothing is recorded twice");
}

fn faulting_first(node: &str) -> Arc<ScriptedWorker> {
    Arc::new(ScriptedWorker {
        script: HashMap::from([(node.to_string(), Turn::FaultFirst)]),
        ..Default::default()
    })
}

#[test]
fn a_faulted_attempt_is_retried_within_its_budget_and_fails_beyond_it() {
    let mut journal = MemoryJournal::default();
    let end = drive_plain(
        &chain(2),
        &settings(Caps::default()),
        &mut journal,
        faulting_first("b"),
    )
    .unwrap();
    assert_eq!(end, RunEnd::Succeeded);
    assert_eq!(journal.view().node("b").attempt, 2, "{:?}", journal.kinds());

    let mut journal = MemoryJournal::default();
    let end = drive_plain(
        &chain(1),
        &settings(Caps::default()),
        &mut journal,
        faulting_first("b"),
    )
    .unwrap();
    assert_eq!(end, RunEnd::Failed);
    let view = journal.view();
    assert_eq!(view.node("a").state, "SUCCEEDED");
    assert_eq!(view.node("b").state, "FAILED");
    assert_ne!(
        view.node("c").state,
        "SUCCEEDED",
        "nothing runs past a failure"
    );
}

#[test]
fn a_spent_token_cap_pauses_the_run_before_the_next_turn() {
    let worker = ScriptedWorker {
        script: HashMap::from([(
            "a".to_string(),
            Turn::Reply(Some(Usage {
                input_tokens: 700,
                output_tokens: 400,
                cost_microunits: 0,
            })),
        )]),
        ..Default::default()
    };
    let worker = Arc::new(worker);
    let mut journal = MemoryJournal::default();
    let end = drive(
        &chain(1),
        &settings(Caps {
            max_tokens: Some(1000),
            max_cost_microunits: None,
        }),
        &mut journal,
        worker.clone(),
        Arc::new(ScriptedJudge::default()),
        Arc::new(NeverStop),
    )
    .unwrap();
    assert!(matches!(end, RunEnd::BudgetPaused(_)), "{end:?}");
    assert_eq!(worker.turns.load(Ordering::SeqCst), 1);
    assert_eq!(journal.view().tokens, 1100);
}

#[test]
fn a_stop_before_the_first_turn_starts_nothing_and_the_run_goes_on_after() {
    let schedule = chain(1);
    let worker = Arc::new(ScriptedWorker::default());
    let mut journal = MemoryJournal::default();
    let end = drive(
        &schedule,
        &settings(Caps::default()),
        &mut journal,
        worker.clone(),
        Arc::new(ScriptedJudge::default()),
        Arc::new(StoppedAtOnce),
    )
    .unwrap();
    assert!(
        matches!(end, RunEnd::Interrupted { signal: 15, .. }),
        "{end:?}"
    );
    assert_eq!(worker.turns.load(Ordering::SeqCst), 0);
    assert_eq!(journal.view().run_state, "RUNNING", "stopped, not ended");

    let mut resumed = settings(Caps::default());
    resumed.resume_ordinal = Some(1);
    let end = drive_plain(&schedule, &resumed, &mut journal, worker.clone()).unwrap();
    assert_eq!(end, RunEnd::Succeeded);
    assert_eq!(worker.turns.load(Ordering::SeqCst), 3);
}

#[test]
fn a_panicking_task_is_a_task_error_never_a_verdict() {
    let worker = ScriptedWorker {
        script: HashMap::from([("a".to_string(), Turn::Panic)]),
        ..Default::default()
    };
    let mut journal = MemoryJournal::default();
    let end = drive_plain(
        &chain(1),
        &settings(Caps::default()),
        &mut journal,
        Arc::new(worker),
    );
    assert!(matches!(end, Err(RunError::Task(_))), "{end:?}");
    assert_ne!(journal.view().node("a").state, "SUCCEEDED");
}

#[test]
fn a_reply_that_never_comes_is_a_fault_after_the_deadline_and_grace() {
    let worker = ScriptedWorker {
        script: HashMap::from([("b".to_string(), Turn::Never)]),
        ..Default::default()
    };
    let mut journal = MemoryJournal::default();
    let end = drive_plain(
        &chain(1),
        &settings(Caps::default()),
        &mut journal,
        Arc::new(worker),
    )
    .unwrap();
    assert_eq!(end, RunEnd::Failed);
    let view = journal.view();
    assert_eq!(view.node("b").state, "FAILED");
    let reason = view.node("b").reason.unwrap_or_default();
    assert!(
        reason.contains(&format!("{}s of grace", WORK_GRACE.as_secs())),
        "{reason}"
    );
}

#[test]
fn requests_and_replies_cross_the_wire_with_their_version() {
    let request = WorkRequest {
        run_id: "graph-run".into(),
        node_id: "b".into(),
        attempt: 2,
        execution: 1,
        round: 0,
        prompt: "do it".into(),
        binding: None,
        task: Task::Command {
            argv: vec!["echo".into(), "b".into()],
        },
        transport: Transport::Command,
        isolation: bl_graph::model::Isolation::WorkspaceOnly,
        deadline: Duration::from_secs(60),
        workspace: Path::new("/work/b").to_path_buf(),
        inputs: vec![StagedInput {
            port: "in".into(),
            from_node: "a".into(),
            from_port: "out".into(),
            path: "inputs/in".into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size: 3,
            kind: "text".into(),
        }],
        outputs: Vec::new(),
    };
    let bytes = Wire::seal(&request);
    let back: WorkRequest = Wire::open(&bytes).unwrap();
    assert_eq!(Wire::seal(&back), bytes);
    assert_eq!(back.inputs, request.inputs);

    let reply = WorkReply::Fault("lost".into());
    let back: WorkReply = Wire::open(&Wire::seal(&reply)).unwrap();
    assert_eq!(back, reply);

    let mut future: Value = serde_json::from_slice(&bytes).unwrap();
    future["version"] = json!(99);
    let refused = Wire::<WorkRequest>::open(future.to_string().as_bytes()).unwrap_err();
    assert_eq!(refused, WireError::Version(99));
    assert!(matches!(
        Wire::<WorkReply>::open(b"{}"),
        Err(WireError::Malformed(_))
    ));
}

/// triage, a gated router, routes to `fix` (its `fail` route) or `ship`
/// (its `pass` route); each of those is a plain tool.
fn router() -> Schedule {
    let tool = |id: &str| {
        json!({
            "id": id, "kind": "tool", "tool_ref": format!("command:echo {id}"),
            "inputs": {"in": "text"}, "outputs": {"out": "text"},
            "budget": {"max_attempts": 1, "max_wallclock_s": 60},
            "effects": ["read_only"], "isolation": "workspace_only",
        })
    };
    let triage = json!({
        "id": "triage", "kind": "router", "inputs": {}, "outputs": {"out": "text"},
        "routes": {"fail": ["fix"], "pass": ["ship"]}, "default_route": "fail",
        "gate": {"plugin": "files", "config": {}},
        "budget": {"max_attempts": 1, "max_wallclock_s": 60},
        "effects": ["read_only"], "isolation": "workspace_only",
    });
    schedule_of(json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": "router", "version": "1.0.0",
        "extensions": ["artifact-ports"],
        "nodes": [triage, tool("fix"), tool("ship")],
        "edges": [
            {"from_node": "triage", "from_port": "out", "to_node": "fix", "to_port": "in"},
            {"from_node": "triage", "from_port": "out", "to_node": "ship", "to_port": "in"},
        ],
        "connection_slots": [],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"},
    }))
}

#[test]
fn a_router_takes_the_route_its_judge_picks_and_the_other_is_skipped() {
    let judge = ScriptedJudge {
        routes: HashMap::from([("triage".to_string(), "pass")]),
        ..Default::default()
    };
    let worker = Arc::new(ScriptedWorker::default());
    let mut journal = MemoryJournal::default();
    let end = drive(
        &router(),
        &settings(Caps::default()),
        &mut journal,
        worker.clone(),
        Arc::new(judge),
        Arc::new(NeverStop),
    )
    .unwrap();
    assert_eq!(end, RunEnd::Succeeded);
    let view = journal.view();
    assert_eq!(view.node("ship").state, "SUCCEEDED");
    assert_eq!(view.node("fix").state, "SKIPPED");
    let routed = journal
        .events
        .iter()
        .find(|(_, kind, p)| kind == "node.succeeded" && p["node_id"] == "triage")
        .map(|(_, _, p)| p["routed"].clone());
    assert_eq!(routed, Some(json!("pass")));
}

/// The router's first drive, whose controller dies once triage's worker
/// finished its turn and its judge passed it (the disk is lost as the
/// pass is recorded); the record is then recovered for the next one.
fn died_after_triage_was_judged() -> (Arc<ScriptedWorker>, Arc<ScriptedJudge>, MemoryJournal) {
    let worker = Arc::new(ScriptedWorker::default());
    let judge = Arc::new(ScriptedJudge {
        routes: HashMap::from([("triage".to_string(), "pass")]),
        ..Default::default()
    });
    let mut journal = MemoryJournal {
        lost_at: Some("triage:node.succeeded".into()),
        ..Default::default()
    };
    let first = drive(
        &router(),
        &settings(Caps::default()),
        &mut journal,
        worker.clone(),
        judge.clone(),
        Arc::new(NeverStop),
    );
    assert!(matches!(first, Err(RunError::Journal(_))), "{first:?}");
    assert_eq!(worker.turns.load(Ordering::SeqCst), 1);
    assert_eq!(judge.asked.load(Ordering::SeqCst), 1);
    journal.recovered();
    (worker, judge, journal)
}

/// The router's resume after [`died_after_triage_was_judged`].
fn resume_router(
    journal: &mut MemoryJournal,
    worker: &Arc<ScriptedWorker>,
    judge: &Arc<ScriptedJudge>,
) -> RunEnd {
    let mut resumed = settings(Caps::default());
    resumed.resume_ordinal = Some(1);
    drive(
        &router(),
        &resumed,
        journal,
        worker.clone(),
        judge.clone(),
        Arc::new(NeverStop),
    )
    .unwrap()
}

/// A controller that dies after its worker's turn finished leaves that
/// turn marked: the next controller judges it again and never pays for
/// another turn.
#[test]
fn a_finished_turn_a_dead_controller_left_is_judged_again_not_taken_again() {
    let (worker, judge, mut journal) = died_after_triage_was_judged();
    let end = resume_router(&mut journal, &worker, &judge);
    assert_eq!(end, RunEnd::Succeeded, "{:?}", journal.kinds());
    assert_eq!(judge.asked.load(Ordering::SeqCst), 2, "triage judged again");
    assert_eq!(
        worker.turns.load(Ordering::SeqCst),
        2,
        "triage's one turn and ship's: {:?}",
        journal.kinds()
    );
    let view = journal.view();
    assert_eq!(view.node("ship").state, "SUCCEEDED");
    assert_eq!(view.node("fix").state, "SKIPPED");
}

/// A controller that dies again and again while it judges a finished turn
/// again is no reason to give up on that turn: only deaths of executions
/// that ran the worker count against the re-drives.
#[test]
fn deaths_while_a_finished_turn_is_judged_again_do_not_use_up_its_redrives() {
    let (worker, judge, mut journal) = died_after_triage_was_judged();
    for ordinal in 1..=MAX_REDRIVES + 2 {
        journal.lost_at = Some("triage:node.succeeded".into());
        let mut resumed = settings(Caps::default());
        resumed.resume_ordinal = Some(ordinal);
        let end = drive(
            &router(),
            &resumed,
            &mut journal,
            worker.clone(),
            judge.clone(),
            Arc::new(NeverStop),
        );
        assert!(matches!(end, Err(RunError::Journal(_))), "{end:?}");
        journal.recovered();
    }
    let end = resume_router(&mut journal, &worker, &judge);
    assert_eq!(end, RunEnd::Succeeded, "{:?}", journal.kinds());
    assert_eq!(
        worker.turns.load(Ordering::SeqCst),
        2,
        "triage's one turn and ship's"
    );
}

/// Without the reply the mark names (here, a store that lost it), the
/// finished turn cannot be judged again: the worker takes it again, as
/// it did before there was a mark.
#[test]
fn a_finished_turn_whose_reply_is_gone_is_taken_again() {
    let (worker, judge, mut journal) = died_after_triage_was_judged();
    journal.artifacts = Arc::new(MemoryArtifacts::default());
    let end = resume_router(&mut journal, &worker, &judge);
    assert_eq!(end, RunEnd::Succeeded);
    assert_eq!(
        worker.turns.load(Ordering::SeqCst),
        3,
        "triage's turn twice, and ship's"
    );
}

#[test]
fn the_controller_follows_the_judge_on_a_reply_it_would_have_passed() {
    let judge = ScriptedJudge {
        rejects_replies_of: vec!["b".into()],
        ..Default::default()
    };
    let mut journal = MemoryJournal::default();
    let end = drive(
        &chain(1),
        &settings(Caps::default()),
        &mut journal,
        Arc::new(ScriptedWorker::default()),
        Arc::new(judge),
        Arc::new(NeverStop),
    )
    .unwrap();
    assert_eq!(end, RunEnd::Failed);
    let b = journal.view().node("b");
    assert_eq!(b.state, "FAILED");
    let failed = journal
        .events
        .iter()
        .find(|(_, kind, p)| kind == "node.failed" && p["node_id"] == "b")
        .map(|(_, _, p)| p["verdict"]["reason"].clone());
    assert_eq!(failed, Some(json!("the judge will not have b's reply")));
}

#[test]
fn an_attempt_a_dead_controller_left_is_redriven_at_most_three_times() {
    let schedule = chain(1);
    let worker = Arc::new(ScriptedWorker::default());
    let mut journal = MemoryJournal::default();
    for crash in 1..=4u32 {
        journal.lost_at = Some("b:node.succeeded".into());
        let mut resumed = settings(Caps::default());
        resumed.resume_ordinal = (crash > 1).then_some(crash - 1);
        let end = drive_plain(&schedule, &resumed, &mut journal, worker.clone());
        assert!(matches!(end, Err(RunError::Journal(_))), "{end:?}");
        journal.recovered();
        // a once, then b on every drive: the record shows b started and
        // never ended, so each new controller takes b's turn again.
        assert_eq!(worker.turns.load(Ordering::SeqCst), 1 + crash);
    }
    let mut resumed = settings(Caps::default());
    resumed.resume_ordinal = Some(4);
    let end = drive_plain(&schedule, &resumed, &mut journal, worker.clone()).unwrap();
    assert_eq!(end, RunEnd::Failed);
    assert_eq!(
        worker.turns.load(Ordering::SeqCst),
        5,
        "no fifth turn for b"
    );
    let reason = journal.view().node("b").reason.unwrap_or_default();
    assert!(reason.contains("died 4 times"), "{reason}");
}

/// Two roots: `fast` panics at once while `slow` is still at work.
fn two_roots() -> Schedule {
    let tool = |id: &str| {
        json!({
            "id": id, "kind": "tool", "tool_ref": format!("command:echo {id}"),
            "inputs": {}, "outputs": {"out": "text"},
            "budget": {"max_attempts": 1, "max_wallclock_s": 600},
            "effects": ["read_only"], "isolation": "workspace_only",
        })
    };
    schedule_of(json!({
        "api_version": "bounded-loops.dev/graph/v1", "graph_id": "roots", "version": "1.0.0",
        "nodes": [tool("fast"), tool("slow")],
        "edges": [],
        "connection_slots": [],
        "policies": {"data_class": "internal", "fail_mode": "fail_closed"},
    }))
}

#[test]
fn a_drive_that_fails_waits_for_the_attempts_in_flight_and_keeps_what_they_did() {
    let worker = Arc::new(ScriptedWorker {
        script: HashMap::from([
            ("fast".to_string(), Turn::Panic),
            ("slow".to_string(), Turn::Slow(Duration::from_secs(120))),
        ]),
        ..Default::default()
    });
    let mut journal = MemoryJournal::default();
    let end = drive_plain(
        &two_roots(),
        &settings(Caps::default()),
        &mut journal,
        worker.clone(),
    );
    assert!(matches!(end, Err(RunError::Task(_))), "{end:?}");
    // The slow turn was not dropped with the drive: it ran to its end, and
    // its spend and success are on record, so a resume never pays again.
    assert_eq!(
        journal.view().node("slow").state,
        "SUCCEEDED",
        "{:?}",
        journal.kinds()
    );
    assert!(journal.kinds().contains(&"slow:node.spend".to_string()));
}

/// A subgraph node `sub` between two tools: `a -> sub -> c`.
fn with_subgraph() -> Schedule {
    let mut manifest = chain_manifest(1);
    manifest["nodes"][1] = json!({
        "id": "sub", "kind": "subgraph", "graph_package": format!("sha256:{}", "ab".repeat(32)),
        "inputs": {"in": "text"}, "outputs": {"out": "text"},
        "budget": {"max_attempts": 1, "max_wallclock_s": 60},
        "effects": ["read_only"], "isolation": "workspace_only",
    });
    manifest["edges"][0]["to_node"] = json!("sub");
    manifest["edges"][1]["from_node"] = json!("sub");
    schedule_of(manifest)
}

/// A subgraph whose child run waits for approvals pauses the run (its
/// attempt open, its node awaiting the child's node by path), and each
/// resume takes the attempt up again: more pauses than a dead controller's
/// re-drives are allowed, as none of them is a death.
#[test]
fn a_subgraph_waiting_on_its_child_pauses_the_run_as_often_as_the_child_does() {
    let schedule = with_subgraph();
    let worker = Arc::new(ScriptedWorker {
        script: HashMap::from([("sub".to_string(), Turn::AwaitingFirst(MAX_REDRIVES + 2))]),
        ..ScriptedWorker::default()
    });
    let mut journal = MemoryJournal::default();
    for pause in 1..=MAX_REDRIVES + 2 {
        let mut resumed = settings(Caps::default());
        resumed.resume_ordinal = (pause > 1).then_some(pause - 1);
        let end = drive_plain(&schedule, &resumed, &mut journal, worker.clone()).unwrap();
        assert_eq!(end, RunEnd::AwaitingApproval(vec!["sub/gate".into()]));
        let view = journal.view();
        assert_eq!(view.node("sub").state, NodeState::AwaitingApproval);
        assert_eq!(
            view.awaiting(["a", "sub", "c"]),
            vec!["sub/gate".to_string()]
        );
        assert_eq!(view.node("c").state, NodeState::Pending);
    }
    let mut resumed = settings(Caps::default());
    resumed.resume_ordinal = Some(MAX_REDRIVES + 2);
    let end = drive_plain(&schedule, &resumed, &mut journal, worker.clone()).unwrap();
    assert_eq!(end, RunEnd::Succeeded);
    let view = journal.view();
    assert_eq!(view.node("sub").state, NodeState::Succeeded);
    assert!(view.awaiting(["a", "sub", "c"]).is_empty());
    // a once, sub once a drive, c once: nothing else was taken again.
    assert_eq!(
        worker.turns.load(Ordering::SeqCst),
        1 + MAX_REDRIVES + 3 + 1
    );
}

/// Only a subgraph's child run may wait for approvals: any other worker
/// that says so breaks its contract, and its node fails.
#[test]
fn a_worker_that_is_no_subgraph_may_not_wait_for_approvals() {
    let schedule = chain(1);
    let worker = Arc::new(ScriptedWorker {
        script: HashMap::from([("b".to_string(), Turn::AwaitingFirst(1))]),
        ..ScriptedWorker::default()
    });
    let mut journal = MemoryJournal::default();
    let end = drive_plain(&schedule, &settings(Caps::default()), &mut journal, worker).unwrap();
    assert_eq!(end, RunEnd::Failed);
    let view = journal.view();
    assert_eq!(view.node("b").state, NodeState::Failed);
    let reason = view.node("b").reason.unwrap_or_default();
    assert!(
        reason.contains("only a subgraph's child run may"),
        "{reason}"
    );
}
