//! `graph_approve`: only a person approves. A model's call never records
//! a decision by itself, whatever it sends back (a confirm token is not an
//! approval, seed 004). Confirmed, the call opens the run's approval
//! console on 127.0.0.1 (bl-web's, with a one-time token in its address)
//! and hands back the link: the page shows the evidence and its digest,
//! and a decision is recorded only when a person acts there, signed with
//! the server's key when it has one. The next call reports that decision.
//!
//! An operator who wants agents to decide starts the server with
//! `--agent-approvals`; a decision is then recorded as the agent's
//! (`decided_by_source: agent`, named by the client the session says it
//! is), never as a person's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use bl_app::runtime::{Decision, GraphRuntime, PendingApproval};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// `graph_approve`'s arguments (bounded-loops' shape).
#[derive(Debug, Deserialize, serde::Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveArgs {
    /// The run's name under .bounded-loops/runs, never a path.
    pub run: String,
    /// The approval node.
    pub node_id: String,
    /// `approved` or `rejected`.
    pub decision: String,
    /// false: preview (the evidence and its digest; nothing changes);
    /// true: the one-time link where a person decides (or, on a server
    /// started with --agent-approvals, the decision, recorded as the
    /// agent's).
    #[serde(default)]
    pub confirm: bool,
    /// Only on a server started with --agent-approvals: the token the
    /// preview handed out. Anywhere else a token approves nothing.
    #[serde(default)]
    pub confirm_token: Option<String>,
    /// Where to go on in an answer that came back in pages (its `next_cursor`).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// The approval consoles this server opened, one per run, each until a
/// decision is made there, a quarter of an hour after it opened, or the
/// server stops.
#[derive(Default)]
pub struct Consoles {
    open: Mutex<HashMap<PathBuf, Open>>,
    stopping: Arc<AtomicBool>,
}

struct Open {
    url: String,
    serving: std::thread::JoinHandle<()>,
}

impl Consoles {
    /// The link of the run's console, opened now unless one still serves.
    fn link(&self, dir: &Path, key: Option<PathBuf>) -> Result<String, bl_web::WebError> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(console) = open.get(dir)
            && !console.serving.is_finished()
        {
            return Ok(console.url.clone());
        }
        let at = bl_web::Loopback::bind(0)?;
        let url = at.url.clone();
        let console = bl_web::Console {
            dir: dir.to_path_buf(),
            key,
            runtime: GraphRuntime::default(),
        };
        let stopping = self.stopping.clone();
        let serving = std::thread::spawn(move || {
            let _ = bl_web::serve_console(console, at, move || stopping.load(Ordering::SeqCst));
        });
        open.insert(
            dir.to_path_buf(),
            Open {
                url: url.clone(),
                serving,
            },
        );
        Ok(url)
    }

    /// Stops every console (the session is over) and waits for them.
    pub fn close(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let open = std::mem::take(&mut *self.open.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, console) in open {
            let _ = console.serving.join();
        }
    }
}

fn refused(code: &str, pointer: &str, message: String) -> Value {
    json!({"ok": false, "error": {"code": code, "pointer": pointer, "message": message}})
}

fn decided(node: &str, d: &Decision) -> Value {
    json!({
        "ok": true,
        "node_id": node,
        "decided": {
            "decision": if d.approved { "approved" } else { "rejected" },
            "decided_by": d.decided_by,
            "decided_by_source": d.decided_by_source,
            "decided_at": d.decided_at,
            "repair_round": d.round,
        },
        "by_a_person": d.decided_by_source != "agent",
    })
}

fn evidence(waiting: &PendingApproval) -> Value {
    waiting
        .described
        .iter()
        .map(|e| json!({"digest": e.digest, "producer": e.producer, "port": e.port, "path": e.path, "size": e.size}))
        .collect()
}

/// What the server needs to decide how `graph_approve` answers.
pub struct Approver<'a> {
    pub consoles: &'a Consoles,
    /// Signs decisions made on a console.
    pub key: Option<PathBuf>,
    /// The operator lets agents decide (recorded as theirs).
    pub agent_approvals: bool,
    /// Who the session says its client is.
    pub agent: String,
    /// The server's confirm tokens (an agent's decision needs its preview's).
    pub confirmations: &'a crate::confirm::Confirmations,
    pub now: u64,
}

impl Approver<'_> {
    /// `graph_approve` on the run at `dir` (named `run`).
    pub fn answer(&self, run: &str, dir: &Path, args: &ApproveArgs) -> Value {
        let approved = match args.decision.as_str() {
            "approved" => true,
            "rejected" => false,
            _ => {
                return refused(
                    "mcp_approve",
                    "/decision",
                    "decision must be 'approved' or 'rejected'".into(),
                );
            }
        };
        let node = args.node_id.as_str();
        if node.is_empty() {
            return refused(
                "mcp_approve",
                "/node_id",
                "node_id must be a non-empty string".into(),
            );
        }
        let runtime = GraphRuntime::default();
        // A decision on record is reported, whoever made it.
        match runtime.decision(dir, node) {
            Ok(Some(d)) => return decided(node, &d),
            Ok(None) => {}
            Err(e) => return refused("graph_integrity", "/", e.message().to_string()),
        }
        let pending = match runtime.pending_approvals(dir) {
            Ok(pending) => pending,
            Err(e) => return refused("graph_integrity", "/", e.message().to_string()),
        };
        let Some(waiting) = pending.iter().find(|p| p.node_id == node) else {
            return refused(
                "approval_node",
                "/node_id",
                format!("node '{node}' of run '{run}' is not waiting for a decision"),
            );
        };
        // An agent's decision is bound, as any mutation, to the exact
        // preview it follows.
        let bound = json!({"run": run, "node": node, "decision": args.decision, "request_digest": waiting.request_digest});
        let token = self
            .agent_approvals
            .then(|| self.confirmations.issue("graph_approve", &bound, self.now));
        if !args.confirm {
            return json!({
                "ok": true,
                "preview": true,
                "confirm_token": token,
                "would": format!("{} approval node '{node}' in run '{run}'", args.decision),
                "hint": if self.agent_approvals {
                    "re-call with confirm=true to apply; it is recorded as this agent's decision, not a person's"
                } else {
                    "re-call with confirm=true for a one-time link where a person decides; an agent cannot approve"
                },
                "request_digest": waiting.request_digest,
                "evidence": evidence(waiting),
            });
        }
        if self.agent_approvals {
            if let Err(refused_token) = self.confirmations.take(
                "graph_approve",
                &bound,
                args.confirm_token.as_deref(),
                self.now,
            ) {
                // Answered with the preview itself (and a fresh token).
                return json!({
                    "ok": false,
                    "error": {"code": "confirm_token", "pointer": "/confirm_token", "message": refused_token.to_string()},
                    "would": format!("{} approval node '{node}' in run '{run}'", args.decision),
                    "request_digest": waiting.request_digest,
                    "evidence": evidence(waiting),
                    "confirm_token": token,
                });
            }
            return match runtime.decide_as_agent(
                dir,
                node,
                &waiting.request_digest,
                approved,
                &self.agent,
            ) {
                Ok(done) => {
                    let mut answer = match runtime.decision(dir, node) {
                        Ok(Some(d)) => decided(node, &d),
                        _ => json!({"ok": true, "node_id": node}),
                    };
                    answer["run_state"] = json!(done.view.run_state);
                    answer
                }
                Err(e) => refused("graph_integrity", "/", e.message().to_string()),
            };
        }
        // A token a model sends along is not an approval, and is said so.
        let not_an_approval = args.confirm_token.as_ref().map(|_| {
            json!({"code": "not_an_approval", "pointer": "/confirm_token",
                   "message": "a confirm token is not an approval: only a person decides, on the link this answer gives"})
        });
        match self.consoles.link(dir, self.key.clone()) {
            Ok(url) => json!({
                "ok": true,
                "refused": not_an_approval,
                "needs_person": true,
                "console_url": url,
                "node_id": node,
                "request_digest": waiting.request_digest,
                "evidence": evidence(waiting),
                "message": "Only a person approves. Give them this link (it works once, on this machine): it shows the evidence and its digest, and the decision is recorded only when they act there. Nothing was recorded now. Call graph_approve again, or graph_status, to see their decision.",
            }),
            Err(e) => refused("console", "/", e.to_string()),
        }
    }
}
