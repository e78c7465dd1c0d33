//! The ports a drive goes through, and what crosses them: the worker's
//! request and reply (serde, versioned, so a worker may be on another
//! machine), staging, the judge (the only decider), the event log, the
//! artifact store, human decisions and the publication ledger. Adapters
//! live elsewhere (bl-workers, bl-handoff, bl-store, bl-app).

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::events::{Event, Usage};
use crate::reply::{ReplyRequest, ReplyRuling};
use crate::schedule::{GateSpec, OutputPort, Routes};

/// The operator's stop (SIGINT, SIGTERM), as the controller sees it. A stop
/// is a pause: no attempt starts after it, the attempts in flight are
/// recorded as interrupted (never failed), and the run stays resumable.
pub trait Stop: Send + Sync {
    /// `Some(signal)` once a stop was asked for.
    fn requested(&self) -> Option<i32>;
    /// Called once the stop's record is durable: from then on, ending the
    /// process at once (a second Ctrl-C) loses nothing.
    fn recorded(&self) {}
}

/// A drive nobody stops (tests, and callers with no signals to honour).
pub struct NeverStop;

impl Stop for NeverStop {
    fn requested(&self) -> Option<i32> {
        None
    }
}

/// The provider id of recorded replies (no key, no network).
pub const RECORDED_PROVIDER: &str = "recorded";

/// How a node's turn reaches the worker that takes it: by the node's task
/// for bl's own kinds, by its binding for a connector node. A worker on
/// another machine is one more transport, routed the same way.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Transport {
    /// An agent CLI on this machine (a connector's `local_cli` binding).
    LocalCli,
    /// A connector's `https` binding, through the egress broker.
    Https,
    /// A connector bound to the `recorded` provider: recorded replies.
    Recorded,
    /// bl's built-in sandbox probe.
    Probe,
    /// A command tool in the node's tier.
    Command,
    /// A wasm transform.
    Transform,
    /// A loop package through the loop engine.
    Loop,
    /// A graph package as a child run.
    Subgraph,
    /// A router: nothing runs, its gate decides.
    Router,
}

impl Transport {
    /// The transport a node's turn goes by: its task's, or its binding's.
    pub fn of(task: &Task, binding: Option<&bl_graph::Connection>) -> Transport {
        match task {
            Task::Probe => Transport::Probe,
            Task::Command { .. } => Transport::Command,
            Task::Transform { .. } => Transport::Transform,
            Task::Loop { .. } => Transport::Loop,
            Task::Subgraph { .. } => Transport::Subgraph,
            Task::Route => Transport::Router,
            Task::Connector => match binding {
                Some(b) if b.provider_id == RECORDED_PROVIDER => Transport::Recorded,
                Some(b) if b.transport == "https" => Transport::Https,
                _ => Transport::LocalCli,
            },
        }
    }

    /// As a person reads it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::LocalCli => "local CLI",
            Transport::Https => "https",
            Transport::Recorded => "recorded-replies",
            Transport::Probe => "sandbox probe",
            Transport::Command => "command",
            Transport::Transform => "transform",
            Transport::Loop => "loop",
            Transport::Subgraph => "subgraph",
            Transport::Router => "router",
        }
    }
}

/// What a worker is asked to do, beyond its prompt.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Task {
    /// A connector node: the binding's connector takes the turn.
    Connector,
    /// bl's built-in sandbox probe.
    Probe,
    /// A wasm transform over the staged inputs, writing the declared outputs.
    Transform {
        plugin: String,
        major: u32,
        /// The node's config for the plugin (JSON text).
        config: String,
    },
    /// A command in the node's sandbox tier.
    Command { argv: Vec<String> },
    /// A loop package (by digest) through the loop engine.
    Loop { package: String },
    /// A graph package (by digest) as a child run.
    Subgraph { package: String },
    /// A router with no connection: nothing runs, its gate decides.
    Route,
}

/// One input an attempt is handed: a producer's published output, staged
/// read-only in the attempt's workspace after its digest was checked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StagedInput {
    pub port: String,
    pub from_node: String,
    pub from_port: String,
    /// Where it lies in the attempt's workspace (relative).
    pub path: String,
    pub digest: String,
    pub size: u64,
    pub kind: String,
}

/// The version of the worker protocol: what [`WorkRequest`] and
/// [`WorkReply`] look like on the wire. A worker on another machine refuses
/// a version it does not speak ([`Wire::open`]).
pub const WORK_PROTOCOL: u32 = 1;

/// What the controller asks a worker to do: one execution of one attempt.
///
/// It carries the workspace contract, so a worker on another machine can
/// honour it: the worker receives `workspace` holding `inputs` (each
/// staged read-only, with the digest it was verified against), and must
/// hand back that workspace with every one of `outputs` written in it,
/// within `deadline`. The controller then judges the workspace and the
/// reply; the worker never says whether the node succeeded.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WorkRequest {
    pub run_id: String,
    pub node_id: String,
    pub attempt: u32,
    pub execution: u32,
    pub round: u32,
    pub prompt: String,
    /// A connector node's binding; `None` for tools and the other kinds.
    pub binding: Option<bl_graph::Connection>,
    pub task: Task,
    /// How the turn reaches its worker (the routing key).
    pub transport: Transport,
    pub isolation: bl_graph::model::Isolation,
    pub deadline: Duration,
    /// The attempt's own workspace, made before the worker starts.
    pub workspace: PathBuf,
    /// The inputs staged in it.
    pub inputs: Vec<StagedInput>,
    /// The outputs the node must publish (relative to the workspace).
    pub outputs: Vec<OutputPort>,
}

/// A plugin that took part in an attempt, recorded with the node's events.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PluginUse {
    /// `gate`, `contract`, `transform` or `policy`.
    pub role: String,
    pub plugin: String,
    /// `sha256:<hex>` of the component's bytes.
    pub component_digest: String,
    /// The component itself, kept with the run so its digest can be checked.
    pub component: std::sync::Arc<Vec<u8>>,
    /// Run unsigned, because the operator allowed this plugin by name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsigned: bool,
}

impl PluginUse {
    pub(crate) fn to_json(&self) -> Value {
        let mut record = json!({"component_digest": self.component_digest, "plugin": self.plugin, "role": self.role});
        if self.unsigned {
            record["unsigned"] = json!(true);
        }
        record
    }
}

/// What came back. The worker never says whether the node succeeded: the
/// controller's gate decides from the reply.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum WorkReply {
    Reply {
        bytes: Vec<u8>,
        /// `None` when the worker does not report tokens.
        usage: Option<Usage>,
        reported_by: String,
        /// Plugins the worker ran (a transform's component).
        plugins: Vec<PluginUse>,
    },
    /// The worker did not produce a reply (non-zero exit, missing CLI,
    /// timeout). Retryable.
    Fault(String),
    /// The worker replied in a form it promised not to (a metered CLI
    /// without its envelope). Never retried.
    Contract(String),
    /// The environment refused the work before it started (a denied
    /// egress destination, a tier this machine cannot provide).
    Denied(String),
    /// The work is not over: it waits for people's decisions on these
    /// approval nodes (a subgraph's child run paused at them, each named by
    /// its path from the child run: `gate`, or `inner/gate` a level down).
    /// The attempt stays open, and the run pauses once nothing else can
    /// move; approving them resumes it, and the attempt takes up its work
    /// where it stopped.
    AwaitingApproval(Vec<String>),
    /// A person rejected an approval the work waited on (in a subgraph's
    /// child run): the node fails as an approval node of its own that was
    /// rejected would, and the run stops in every mode.
    ApprovalRejected(String),
}

impl WorkReply {
    /// A reply with no usage and no plugins.
    pub fn text(bytes: Vec<u8>, reported_by: &str) -> WorkReply {
        WorkReply::Reply {
            bytes,
            usage: None,
            reported_by: reported_by.to_string(),
            plugins: Vec::new(),
        }
    }
}

pub type WorkFuture = Pin<Box<dyn Future<Output = WorkReply> + Send>>;

/// A request or a reply as it crosses to another machine: the protocol
/// version beside the body, in JSON.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Wire<T> {
    pub version: u32,
    pub body: T,
}

/// Why bytes from the wire were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("not a worker message: {0}")]
    Malformed(String),
    #[error("worker protocol version {0}; this bl speaks version {WORK_PROTOCOL}")]
    Version(u32),
}

impl<T: serde::Serialize + serde::de::DeserializeOwned> Wire<T> {
    /// `body` at this bl's protocol version, as JSON bytes.
    pub fn seal(body: &T) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct Sealed<'a, T> {
            version: u32,
            body: &'a T,
        }
        serde_json::to_vec(&Sealed {
            version: WORK_PROTOCOL,
            body,
        })
        .expect("a worker message serializes")
    }

    /// The body of JSON bytes, refused unless they are of this bl's
    /// protocol version.
    pub fn open(bytes: &[u8]) -> Result<T, WireError> {
        #[derive(serde::Deserialize)]
        struct Versioned {
            version: u32,
        }
        let versioned: Versioned =
            serde_json::from_slice(bytes).map_err(|e| WireError::Malformed(e.to_string()))?;
        if versioned.version != WORK_PROTOCOL {
            return Err(WireError::Version(versioned.version));
        }
        let wire: Wire<T> =
            serde_json::from_slice(bytes).map_err(|e| WireError::Malformed(e.to_string()))?;
        Ok(wire.body)
    }
}

/// What the controller waits beyond a node's deadline for its worker's
/// reply. A local worker ends its own turn at the deadline; a reply that
/// never comes (a remote worker lost) is a fault after this, never a hang.
pub const WORK_GRACE: Duration = Duration::from_secs(30);

/// The worker port: local CLIs today; remote machines later.
pub trait Worker: Send + Sync {
    fn work(&self, request: WorkRequest) -> WorkFuture;
}

/// An input to stage: a producer's published output and the digest the
/// log recorded for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputToStage {
    pub port: String,
    pub from_node: String,
    pub from_port: String,
    /// The producer's declared path (its published copy lies there in the
    /// run's workspace).
    pub source: String,
    pub digest: String,
    pub kind: String,
    pub system_only: bool,
}

/// What staging an attempt is asked for.
#[derive(Debug, Clone)]
pub struct StageRequest {
    pub node_id: String,
    pub attempt: u32,
    pub execution: u32,
    pub round: u32,
    pub inputs: Vec<InputToStage>,
    /// Whether the node is a transform (the only kind that may be handed a
    /// system_only input).
    pub transform: bool,
    /// Whether the node is judged by its outputs' freshness, and so needs
    /// the dispatch marker.
    pub marks_dispatch: bool,
}

/// Why an attempt could not be staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageError {
    /// An input no longer matches its published digest (or must never reach
    /// this node): the run stops.
    Integrity(String),
    /// The workspace could not be made.
    Io(String),
}

/// The staging port: makes an attempt's workspace and hands it its inputs,
/// each re-verified against its published digest, read-only.
pub trait Stage: Send + Sync {
    fn stage(&self, request: &StageRequest) -> Result<(PathBuf, Vec<StagedInput>), StageError>;

    /// Marks the moment the worker is dispatched into `workspace`, in ms
    /// since the epoch, on the clock the workspace's files are stamped
    /// with: an output stamped earlier is stale.
    fn mark_dispatch(&self, _workspace: &std::path::Path) -> u64 {
        now_ms()
    }

    /// Whether `workspace`, which an earlier drive staged for `node_id`,
    /// is still there to be judged again.
    fn kept(&self, node_id: &str, workspace: &std::path::Path) -> bool;
}

/// A declared output as published: where, what, and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedOutput {
    pub port: String,
    pub path: String,
    pub kind: String,
    pub system_only: bool,
    pub digest: String,
    pub size: u64,
    pub bytes: Vec<u8>,
}

impl PublishedOutput {
    pub fn to_json(&self) -> Value {
        json!({
            "digest": self.digest, "kind": self.kind, "path": self.path, "port": self.port,
            "size": self.size,
            "visibility": if self.system_only { "system_only" } else { "consumer" },
        })
    }

    /// The outputs a recorded `node.succeeded` published (the inverse of
    /// [`PublishedOutput::to_json`], without the bytes).
    pub fn recorded_in(payload: &Value) -> Vec<PublishedOutput> {
        payload["outputs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|o| PublishedOutput {
                        port: o["port"].as_str().unwrap_or_default().to_string(),
                        path: o["path"].as_str().unwrap_or_default().to_string(),
                        kind: o["kind"].as_str().unwrap_or_default().to_string(),
                        system_only: o["visibility"] == "system_only",
                        digest: o["digest"].as_str().unwrap_or_default().to_string(),
                        size: o["size"].as_u64().unwrap_or_default(),
                        bytes: Vec::new(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// What a judge is asked: the attempt's workspace after the worker's turn.
#[derive(Debug, Clone)]
pub struct JudgeRequest {
    pub node_id: String,
    pub attempt: u32,
    pub round: u32,
    pub workspace: PathBuf,
    /// When the worker was dispatched (ms since the epoch): an output
    /// older than this is stale.
    pub dispatched_ms: u64,
    pub outputs: Vec<OutputPort>,
    pub gate: Option<GateSpec>,
    /// Operator grants for this node's gate plugin.
    pub grants: Vec<String>,
    /// A subgraph's receipt (the reply): the judge verifies the child run.
    pub subgraph_receipt: Option<Vec<u8>>,
    /// A router's routes: the gate plugin's verdict picks one (its `pass`
    /// or `fail` route) instead of failing the node.
    pub routes: Option<Routes>,
}

/// How a judgement came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ruling {
    Pass(String),
    /// A declared output is missing, empty, stale or malformed, or the gate
    /// plugin said no. Retryable.
    Reject(String),
    /// A completion contract broke. Stops the run.
    ContractBroken(String),
    /// The gate could not decide. Stops the run.
    Broken(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub decision: Ruling,
    /// A router's pick, from its gate plugin's verdict.
    pub route: Option<u32>,
    /// The outputs, published (only when the decision is a pass).
    pub published: Vec<PublishedOutput>,
    /// Every declared output's path that was checked.
    pub checked: Vec<String>,
    /// Contract pattern → `pass`/`fail`.
    pub contracts: std::collections::BTreeMap<String, String>,
    pub plugins: Vec<PluginUse>,
    pub evidence_digest: Option<String>,
}

pub type JudgeFuture = Pin<Box<dyn Future<Output = Judgement> + Send>>;

/// The judge port, the only thing that decides an attempt. The controller
/// asks and records; it judges nothing itself.
pub trait Judge: Send + Sync {
    /// What the worker's reply itself shows, asked at once when it comes
    /// in: a connector's structural gate, the sandbox probe's, a loop
    /// node's receipt, a router's pick. [`crate::reply::rule`] is the
    /// standard ruling.
    fn rule_on_reply(&self, request: &ReplyRequest) -> ReplyRuling;
    /// The attempt's workspace once the worker is done: declared outputs
    /// (fresh, non-empty, well-formed), completion contracts, the node's
    /// gate plugin. Never what the worker said.
    fn judge(&self, request: JudgeRequest) -> JudgeFuture;
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("event log: {0}")]
    Journal(String),
    #[error("artifact store: {0}")]
    Artifacts(String),
    #[error("publication ledger: {0}")]
    Ledger(String),
    #[error(
        "the recorded run does not match this plan: {0}; the log is never rewritten, so nothing was changed"
    )]
    Diverged(String),
    /// A node's task panicked or was cancelled: a defect in bl, not the
    /// node's failure.
    #[error("a node's task ended abnormally: {0}")]
    Task(String),
}

/// The event log port. `append` of a key already recorded with the same
/// content is a no-op; with other content it is an error.
pub trait Journal {
    fn append(&mut self, event: &Event) -> Result<(), RunError>;
    /// Records one of bl's own events beside the log, with the same keys
    /// and idempotence: bounded-loops' readers refuse event types they do
    /// not know, so the log itself keeps to theirs.
    fn annex(&mut self, event: &Event) -> Result<(), RunError>;
    /// The payload recorded under `key`, if any.
    fn recorded(&self, key: &str) -> Option<Value>;
    /// Makes every append so far durable (one group commit).
    fn sync(&mut self) -> Result<(), RunError>;
    /// Hands every append so far to the operating system (no fsync): the
    /// controller calls it before work starts and before it waits, so a
    /// killed controller never leaves work running that its log does not
    /// show started.
    fn flush(&mut self) -> Result<(), RunError> {
        Ok(())
    }
}

/// The run's content-addressed artifact store.
pub trait Artifacts {
    fn put(&self, bytes: &[u8], media_type: &str, attempt: u32) -> Result<String, RunError>;
    /// The bytes stored under `digest`, verified against it.
    fn get(&self, digest: &str) -> Result<Vec<u8>, RunError>;
    /// Makes every artifact put so far durable (one group commit); called
    /// before the log is synced, so a durable event never names a lost file.
    fn sync(&self) -> Result<(), RunError>;
}

/// Human decisions, by node and repair round. `evidence` is what the
/// approval is about: the digests of the artifacts its parents produced.
pub trait Decisions {
    fn decision(&self, node: &str, round: u32, evidence: &[String]) -> Option<bool>;
}

/// What the publication ledger did with one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    Fired,
    AlreadyPublished,
    /// Refused: another payload was published under the key, or an
    /// earlier intent needs reconciling.
    Refused(String),
}

/// One publish, as the ledger and its publication policy see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishOrder<'a> {
    pub node: &'a str,
    /// The node's `publication_policy`.
    pub policy: &'a str,
    pub payload_digest: &'a str,
    /// What is published: the artifacts of the node's parents (sorted
    /// digests, what the payload digest binds).
    pub upstream: &'a [String],
    /// The same, as files: what a local effect (the outbox) writes.
    pub files: &'a [PublishedFile],
    /// Every approval node that decided before this publish: (id, approved).
    pub approvals: Vec<(String, bool)>,
}

/// The name of the index a publish writes beside its files (no published
/// file takes it).
pub const OUTBOX_INDEX: &str = "manifest.json";

/// One artifact a publish node publishes, with the name it goes by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedFile {
    /// Its declared file name (`plan.json`), or `<port>.md|.json|.txt` for
    /// a reply a plain port declares; prefixed with its producer should two
    /// share a name, or one be named like the index.
    pub name: String,
    pub digest: String,
    pub producer: String,
}

/// What one publish came to: the outcome, the effect key, and the policy
/// plugin that decided (recorded with the node's events).
#[derive(Debug, Clone, PartialEq)]
pub struct Publication {
    pub published: Published,
    pub effect_key: String,
    pub plugins: Vec<PluginUse>,
}

/// The exactly-once publication ledger, with the publication policy that
/// must allow each effect before it fires. Returns what happened and the
/// effect key.
pub trait Ledger {
    fn publish(&self, order: &PublishOrder) -> Result<Publication, RunError>;
}

/// The ports, borrowed for one drive.
pub struct Ports<'a> {
    pub journal: &'a mut dyn Journal,
    pub artifacts: &'a dyn Artifacts,
    pub decisions: &'a dyn Decisions,
    pub ledger: &'a dyn Ledger,
    pub worker: Arc<dyn Worker>,
    pub stage: Arc<dyn Stage>,
    pub judge: Arc<dyn Judge>,
    /// Told about every event as it is recorded (progress output).
    pub observer: &'a mut dyn FnMut(&Event),
    /// Whether the operator asked the run to stop.
    pub stop: Arc<dyn Stop>,
}

/// Milliseconds since the epoch (0 if the clock is before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
