//! The runtime API every front end drives, in-process and typed: the CLI
//! today, the pages, the MCP server and remote workers next.
//! [`GraphRuntime`] starts a run and hands back a [`RunHandle`] at once; it
//! reads a run's status, the approvals it waits for, its artifacts and its
//! verification; it approves or rejects a node only against the request
//! digest the person was shown; and [`Subscription`] follows a run's log
//! from any position, so a watcher that reconnects asks again from the
//! last position it saw and misses nothing.
//!
//! Driving the newcomer's first graph (docs/embedding.md walks it):
//!
//! ```no_run
//! use std::path::Path;
//! use std::time::Duration;
//!
//! use bl_app::graph_run::DriveOptions;
//! use bl_app::runtime::{GraphRuntime, VerifyOptions};
//!
//! fn main() -> Result<(), bl_app::AppError> {
//!     let dir = Path::new("examples/graphs/first-graph");
//!     let runtime = GraphRuntime::new(DriveOptions {
//!         inputs: Some(dir.join("inputs.json")),
//!         recorded: Some(dir.join("replies.json")),
//!         ..Default::default()
//!     });
//!     // Returns at once; the run goes on on its own thread.
//!     let handle = runtime.run(dir.join("graph.yaml"), Some(dir.join("connections.json")), "run");
//!     let mut events = runtime.subscribe(handle.dir(), 0);
//!     while !handle.is_finished() {
//!         for event in events.wait(Duration::from_millis(500))? {
//!             println!("{:>4} {}", event.sequence, event.event_type);
//!         }
//!     }
//!     let driven = handle.wait()?;
//!     println!("stopped: {:?}", driven.end);
//!     // A person looks at what waits, then decides on exactly that.
//!     for pending in runtime.pending_approvals(Path::new("run"))? {
//!         println!("{} waits; it approves {:?}", pending.node_id, pending.evidence);
//!         runtime.approve(Path::new("run"), &pending.node_id, &pending.request_digest, None)?;
//!     }
//!     let report = runtime.verify(Path::new("run"), &VerifyOptions::default())?;
//!     println!("verified: {}", report.ok());
//!     Ok(())
//! }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bl_graph::model::NodeKind;
use bl_run::projection::NodeState;
use serde_json::Value;

use crate::approvals;
use crate::error::AppError;
use crate::graph_run::{self, Approved, DecidedBy, DriveOptions, Driven, RunStatus};

pub use bl_verify::{Options as VerifyOptions, Report as VerifyReport};

pub use crate::stop::{CANCEL_SIGNAL, Cancel};

/// Runs graphs and answers about them. Cheap to clone; every call names
/// the run directory it is about, so one runtime serves many runs.
#[derive(Clone, Debug, Default)]
pub struct GraphRuntime {
    options: DriveOptions,
}

/// A run being driven on its own thread.
pub struct RunHandle {
    dir: PathBuf,
    cancel: Arc<Cancel>,
    thread: JoinHandle<Result<Driven, AppError>>,
}

impl RunHandle {
    /// The run's directory: what `status`, `subscribe` and `approve` take.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Asks the run to stop: no attempt starts after this; the attempts in
    /// flight finish and are kept (their turns are paid for), and the run
    /// is left resumable. A process-wide signal ends them at once instead.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the drive to stop: ended, paused for an approval or a
    /// budget, or stopped.
    pub fn wait(self) -> Result<Driven, AppError> {
        self.thread
            .join()
            .unwrap_or_else(|_| Err(AppError::refused("the run's thread panicked")))
    }
}

/// An approval node waiting for a person, with what a decision on it is
/// bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingApproval {
    pub node_id: String,
    pub round: u64,
    /// The digests of what its parents produced.
    pub evidence: Vec<String>,
    /// The same evidence, in the same order, as a person reads it: which
    /// node made each artifact, its name and its size.
    pub described: Vec<EvidenceEntry>,
    /// What `approve` and `reject` must be given back: it commits to the
    /// plan, the node, the round and the evidence.
    pub request_digest: String,
}

/// A decision on record for an approval node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub approved: bool,
    pub decided_by: String,
    /// `os_user` (a person here), `recorded` (`--decisions`), `agent`
    /// (an agent its operator allowed), or what bounded-loops wrote.
    pub decided_by_source: String,
    pub decided_at: String,
    pub round: u64,
}

/// One artifact an approval would let through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceEntry {
    pub digest: String,
    /// The node that published it.
    pub producer: String,
    /// Its output port, where the graph names one.
    pub port: Option<String>,
    /// Its path in the producer's workspace, where it has one.
    pub path: Option<String>,
    pub size: u64,
    pub media_type: String,
}

impl EvidenceEntry {
    /// What the run's artifact list says of `digest` (nothing known: only
    /// the digest).
    fn of(digest: &str, artifacts: &[Value]) -> EvidenceEntry {
        let row = artifacts.iter().find(|a| a["digest"] == digest);
        let text = |v: &Value| v.as_str().map(str::to_string);
        EvidenceEntry {
            digest: digest.to_string(),
            producer: row
                .and_then(|r| text(&r["producer"]["node_id"]))
                .unwrap_or_default(),
            port: row.and_then(|r| text(&r["port"])),
            path: row.and_then(|r| text(&r["path"])),
            size: row.and_then(|r| r["size"].as_u64()).unwrap_or(0),
            media_type: row.and_then(|r| text(&r["media_type"])).unwrap_or_default(),
        }
    }
}

impl GraphRuntime {
    /// A runtime whose drives take `options` (prompts, caps, keys, roots).
    /// `options.cancel` is per drive and ignored here (each handle has its
    /// own); `options.watch` makes a watcher for each drive.
    pub fn new(options: DriveOptions) -> GraphRuntime {
        GraphRuntime { options }
    }

    fn drive(
        &self,
        dir: PathBuf,
        go: impl FnOnce(DriveOptions) -> Result<Driven, AppError> + Send + 'static,
    ) -> RunHandle {
        let cancel = Arc::new(Cancel::default());
        let mut options = self.options.clone();
        options.cancel = Some(cancel.clone());
        RunHandle {
            dir,
            cancel,
            thread: std::thread::spawn(move || go(options)),
        }
    }

    /// Starts a run of `manifest` (bound by `connections`) into `out`, and
    /// returns at once.
    pub fn run(
        &self,
        manifest: impl Into<PathBuf>,
        connections: Option<PathBuf>,
        out: impl Into<PathBuf>,
    ) -> RunHandle {
        let (manifest, out) = (manifest.into(), out.into());
        self.drive(out.clone(), move |options| {
            graph_run::run(&manifest, connections.as_deref(), &out, &options)
        })
    }

    /// Starts bl's sandbox probe into `out` (a run with no manifest: the
    /// probe node, judged from what the OS denied), and returns at once.
    pub fn run_probe(&self, out: impl Into<PathBuf>) -> RunHandle {
        let out = out.into();
        self.drive(out.clone(), move |options| {
            graph_run::run_probe(&out, &options)
        })
    }

    /// Continues a run that a stop, a crash or a budget left unfinished.
    pub fn resume(&self, dir: impl Into<PathBuf>) -> RunHandle {
        let dir = dir.into();
        self.drive(dir.clone(), move |options| {
            graph_run::resume(&dir, &options)
        })
    }

    /// The run as its log says it stands.
    pub fn status(&self, dir: &Path) -> Result<RunStatus, AppError> {
        graph_run::status(dir)
    }

    /// The approval nodes the run waits on, each with the request digest a
    /// decision must name.
    pub fn pending_approvals(&self, dir: &Path) -> Result<Vec<PendingApproval>, AppError> {
        let status = graph_run::status(dir)?;
        let (run, view) = (&status.run, &status.view);
        let waiting = view.awaiting(run.graph.nodes.iter().map(|n| n.id.as_str()));
        let mut pending = Vec::new();
        for path in waiting {
            // `sub/gate`: the approval node of a subgraph's child run,
            // bound to what it approves there. A child run that cannot be
            // read is left out, not the whole list.
            let Ok((holder, node_id)) = graph_run::decision_run(dir, &path) else {
                continue;
            };
            let child;
            let at = if holder == dir {
                &status
            } else {
                match graph_run::status(&holder) {
                    Ok(read) => {
                        child = read;
                        &child
                    }
                    Err(_) => continue,
                }
            };
            let (run, view) = (&at.run, &at.view);
            let approval = run.graph.node(&node_id);
            // Decided in the child run already: the parent only waits for
            // its resume.
            if approval.is_none_or(|n| n.kind != NodeKind::Approval)
                || view.node(&node_id).state != NodeState::AwaitingApproval
            {
                continue;
            }
            let round = graph_run::repair_round(&holder)?;
            let artifacts = graph_run::artifacts(&holder)?;
            let evidence = approvals::evidence(&run.graph, view, &node_id);
            let described = evidence
                .iter()
                .map(|d| EvidenceEntry::of(d, &artifacts))
                .collect();
            pending.push(PendingApproval {
                described,
                request_digest: approvals::request_digest(
                    &run.plan.plan_id,
                    &node_id,
                    round,
                    &evidence,
                ),
                node_id: path,
                round,
                evidence,
            });
        }
        Ok(pending)
    }

    /// Approves `node` as the person saw it (`shown`, the request digest of
    /// [`PendingApproval`]), signed with `key` when given, and drives the
    /// run on until it stops again. Refused, with nothing recorded, when
    /// the evidence changed since it was shown.
    pub fn approve(
        &self,
        dir: &Path,
        node: &str,
        shown: &str,
        key: Option<&Path>,
    ) -> Result<Approved, AppError> {
        self.decide(dir, node, shown, true, key, DecidedBy::Person)
    }

    /// Decides `node` as it waits now, for a person who names the node
    /// rather than a request digest they were shown (the command line).
    /// A decision already on record is answered as recorded; the opposite
    /// one is refused. Prefer [`GraphRuntime::approve`] where the person
    /// was shown what they decide on.
    pub fn decide_named(
        &self,
        dir: &Path,
        node: &str,
        approved: bool,
        key: Option<&Path>,
    ) -> Result<Approved, AppError> {
        graph_run::approve(
            dir,
            node,
            approved,
            None,
            key,
            DecidedBy::Person,
            &self.options,
        )
    }

    /// Rejects `node`, as [`GraphRuntime::approve`] approves it.
    pub fn reject(
        &self,
        dir: &Path,
        node: &str,
        shown: &str,
        key: Option<&Path>,
    ) -> Result<Approved, AppError> {
        self.decide(dir, node, shown, false, key, DecidedBy::Person)
    }

    /// Decides `node` for an agent that its operator allowed to decide
    /// (`bl mcp --agent-approvals`), as it was shown (`shown`); recorded
    /// as the agent's (`decided_by_source: agent`), never as a person's.
    pub fn decide_as_agent(
        &self,
        dir: &Path,
        node: &str,
        shown: &str,
        approved: bool,
        agent: &str,
    ) -> Result<Approved, AppError> {
        self.decide(dir, node, shown, approved, None, DecidedBy::Agent(agent))
    }

    /// The decision on record for `node` in the run's current repair
    /// round, if any.
    /// `node` may be a path into a subgraph's child run (`sub/gate`).
    pub fn decision(&self, dir: &Path, node: &str) -> Result<Option<Decision>, AppError> {
        let (holder, node) = graph_run::decision_run(dir, node)?;
        let round = graph_run::repair_round(&holder)?;
        Ok(
            approvals::recorded(&holder, &node, round)?.map(|d| Decision {
                approved: d.approved,
                decided_by: d.by,
                decided_by_source: d.source,
                decided_at: d.at,
                round,
            }),
        )
    }

    fn decide(
        &self,
        dir: &Path,
        node: &str,
        shown: &str,
        approved: bool,
        key: Option<&Path>,
        by: DecidedBy<'_>,
    ) -> Result<Approved, AppError> {
        let pending = self.pending_approvals(dir)?;
        let Some(waiting) = pending.iter().find(|p| p.node_id == node) else {
            return Err(AppError::refused(format!(
                "node '{node}' of the run in {} is not waiting for a decision; nothing was recorded",
                dir.display()
            )));
        };
        if waiting.request_digest != shown {
            return Err(AppError::refused(format!(
                "what node '{node}' would approve has changed since it was shown ({shown}); it is now {}. Look at it again; nothing was recorded",
                waiting.request_digest
            )));
        }
        // Checked again where it is recorded, on the evidence recorded.
        graph_run::approve(dir, node, approved, Some(shown), key, by, &self.options)
    }

    /// Every artifact the run's log names (see [`graph_run::artifacts`]).
    pub fn artifacts(&self, dir: &Path) -> Result<Vec<Value>, AppError> {
        graph_run::artifacts(dir)
    }

    /// One artifact's bytes, as an agent may read them (see
    /// [`graph_run::artifact_content`]).
    pub fn artifact_content(
        &self,
        dir: &Path,
        digest: &str,
    ) -> Result<graph_run::ArtifactContent, AppError> {
        graph_run::artifact_content(dir, digest)
    }

    /// Verifies the run as `bl verify` does: every hash and link of its
    /// log, its artifacts, its approvals and its checkpoint.
    pub fn verify(&self, dir: &Path, options: &VerifyOptions) -> Result<VerifyReport, AppError> {
        bl_verify::verify(dir, options).map_err(|e| AppError::refused(e.to_string()))
    }

    /// The run's arena: one self-contained page of its graph, states,
    /// artifacts and log, which checks in the browser, against the
    /// checkpoint and `verifier` (a key's `<name>+<id>+<base64>` text),
    /// what it shows (see [`crate::arena`]).
    pub fn arena(&self, dir: &Path, verifier: Option<&str>) -> Result<String, AppError> {
        crate::arena::page(self, dir, verifier)
    }

    /// The coverage table and release verdict of the run's audit plan, as
    /// its arena shows them (see [`crate::arena::audit_coverage`]); None
    /// when the run has no plan.
    pub fn audit_coverage(&self, dir: &Path) -> Result<Option<Value>, AppError> {
        crate::arena::audit_coverage(self, dir)
    }

    /// Writes the arena to `out`, or beside the run as `<run>.arena.html`;
    /// `pubkey` is a verifier key's text or its file. Returns where.
    pub fn write_arena(
        &self,
        dir: &Path,
        out: Option<&Path>,
        pubkey: Option<&str>,
    ) -> Result<PathBuf, AppError> {
        let verifier = pubkey
            .map(crate::keys::read_verifier_key)
            .transpose()?
            .map(|key| key.to_text());
        let page = self.arena(dir, verifier.as_deref())?;
        crate::arena::write_page(&page, dir, "arena", out)
    }

    /// The arena as a live page: `events_url` is given how many events the
    /// page holds and says where the ones after them come from (see
    /// [`Subscription`]). Returns the page and that count.
    pub fn live_arena(
        &self,
        dir: &Path,
        verifier: Option<&str>,
        events_url: &dyn Fn(u64) -> String,
    ) -> Result<(String, u64), AppError> {
        crate::arena::live_page(self, dir, verifier, Some(events_url))
    }

    /// The run's latest checkpoint: its file name and its note.
    pub fn latest_checkpoint(&self, dir: &Path) -> Option<(String, String)> {
        let path = crate::arena::latest_checkpoint(&bl_store::RunDir::new(dir).checkpoints())?;
        let note = std::fs::read_to_string(&path).ok()?;
        Some((path.file_name()?.to_string_lossy().into_owned(), note))
    }

    /// Follows the run's log from after event `after` (0: from the start).
    pub fn subscribe(&self, dir: &Path, after: u64) -> Subscription {
        Subscription {
            log: bl_store::RunDir::new(dir).events(),
            position: after,
            head: bl_store::ChainHead::default(),
            lines: 0,
            seen: Default::default(),
            keyed: Default::default(),
        }
    }
}

/// One event of a run's log, verified in its chain.
#[derive(Debug, Clone)]
pub struct LogEvent {
    /// Its position: 1 for the first event.
    pub sequence: u64,
    pub event_type: String,
    pub payload: Value,
    /// The whole line, as the log holds it.
    pub line: Value,
    /// The line's bytes, as recorded (without its newline): what a
    /// checkpoint's Merkle tree hashes.
    pub raw: String,
}

/// A reader of one run's log that remembers how far it got. The first
/// poll verifies the chain from its start; each later one reads and
/// verifies only what was appended since, from the head it reached.
#[derive(Debug, Clone)]
pub struct Subscription {
    log: PathBuf,
    position: u64,
    /// The chain as verified so far (its byte length among it).
    head: bl_store::ChainHead,
    /// Lines verified so far.
    lines: usize,
    /// A 64-bit hash of each idempotency key verified so far (under this
    /// reader's own random key): a key appended twice is still refused,
    /// in 8 bytes a line rather than the key itself.
    seen: std::collections::HashSet<u64>,
    keyed: std::collections::hash_map::RandomState,
}

/// The most of a log one [`Subscription::poll`] reads (a line longer than
/// this is still read whole).
pub const READ_AHEAD: usize = 1 << 20;

/// How often [`Subscription::wait`] looks for new events.
const POLL: Duration = Duration::from_millis(50);

impl Subscription {
    /// The sequence of the last event handed out: subscribe again from it
    /// to carry on where this one stopped.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Every event from where this subscription stands to the end of the
    /// log as it is now, in as many reads as that takes: for readers that
    /// need the whole log at once (a page being made, the metrics).
    pub fn read_to_end(&mut self) -> Result<Vec<LogEvent>, AppError> {
        let mut all = Vec::new();
        loop {
            let more = self.poll()?;
            if more.is_empty() {
                return Ok(all);
            }
            all.extend(more);
        }
    }

    /// The events appended since the last call (none yet: empty), at most
    /// [`READ_AHEAD`] bytes of them (or one line, if a line is longer), so
    /// that a watcher's memory stays bounded however long the log: call
    /// again for the rest. Only whole lines whose chain verifies are
    /// handed out; a line being written waits for the next call, and a
    /// broken chain (or a log that shrank) is an error.
    pub fn poll(&mut self) -> Result<Vec<LogEvent>, AppError> {
        use std::io::Read;
        let refused =
            |e: &dyn std::fmt::Display| AppError::refused(format!("{}: {e}", self.log.display()));
        let mut events = Vec::new();
        // Lines at or before `position` are verified and passed over: a
        // reader that starts late reads on until it has something. Lines
        // the run staged and has not moved into the log yet are read from
        // where they are staged.
        loop {
            let Some(mut file) = bl_store::staged::open_at(&self.log, self.head.verified_len)
                .map_err(|e| refused(&e))?
            else {
                return Ok(events);
            };
            // Read ahead a bounded amount; only a line longer than that
            // makes the read go on, to the end of that line.
            let mut appended = Vec::new();
            let (mut whole, mut at_end) = (0, false);
            while whole == 0 && !at_end {
                let before = appended.len();
                (&mut file)
                    .take(READ_AHEAD as u64)
                    .read_to_end(&mut appended)
                    .map_err(|e| refused(&e))?;
                whole = memchr_last_newline(&appended);
                at_end = appended.len() - before < READ_AHEAD;
            }
            for line in appended[..whole].split(|b| *b == b'\n') {
                if line.is_empty() {
                    continue;
                }
                self.lines += 1;
                bl_store::chain::verify_line(&mut self.head, self.lines, line)
                    .map_err(|e| refused(&e))?;
                let raw = std::str::from_utf8(line)
                    .map_err(|e| refused(&e))?
                    .to_string();
                let line: Value = serde_json::from_slice(line).map_err(|e| refused(&e))?;
                use std::hash::BuildHasher;
                let key = line["idempotency_key"].as_str().unwrap_or_default();
                if !self.seen.insert(self.keyed.hash_one(key)) {
                    return Err(refused(&format!(
                        "line {}: idempotency_key {key} appears twice",
                        self.lines
                    )));
                }
                let sequence = line["sequence"].as_u64().unwrap_or(0);
                if sequence <= self.position {
                    continue;
                }
                events.push(LogEvent {
                    sequence,
                    event_type: line["event_type"].as_str().unwrap_or_default().to_string(),
                    payload: line["payload"].clone(),
                    line,
                    raw,
                });
            }
            // The chain's own key index holds whole keys; this reader
            // keeps only their hashes (above), so a long log costs it 8
            // bytes a line.
            self.head.keys = Default::default();
            if !events.is_empty() || at_end || whole == 0 {
                break;
            }
        }
        if let Some(last) = events.last() {
            self.position = last.sequence;
        }
        Ok(events)
    }

    /// Waits up to `timeout` for at least one new event.
    pub fn wait(&mut self, timeout: Duration) -> Result<Vec<LogEvent>, AppError> {
        wait_for(timeout, || self.poll())
    }
}

/// Polls until something comes or `timeout` passes (then: nothing).
pub(crate) fn wait_for<T>(
    timeout: Duration,
    mut poll: impl FnMut() -> Result<Vec<T>, AppError>,
) -> Result<Vec<T>, AppError> {
    let until = Instant::now() + timeout;
    loop {
        let got = poll()?;
        if !got.is_empty() || Instant::now() >= until {
            return Ok(got);
        }
        std::thread::sleep(POLL);
    }
}

/// The length of `bytes` up to and including its last newline.
pub(crate) fn memchr_last_newline(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |at| at + 1)
}
