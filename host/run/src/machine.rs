//! The scheduling core: seed 000's rules as a state machine with no I/O.
//!
//! The driver asks [`Machine::ready`] what may start, tells the machine
//! when an attempt starts ([`Machine::start`]) and how it ended
//! ([`Machine::finish`]), and records every [`Transition`] the machine
//! returns. The machine never waits, reads a clock or touches a file, so it
//! is property-tested with random graphs and random outcomes.

use std::collections::BTreeSet;

/// The source outcome an edge waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// No `when`: the source must succeed, and a source that failed or was
    /// skipped blocks (an unconditional dependency never turns green).
    Default,
    Succeeded,
    Failed,
    Skipped,
    Terminal,
}

/// How a join node waits for its parents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    AllSelected,
    AllSuccessful,
    AnySuccessful,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    FailClosed,
    ContinueDeclared,
}

#[derive(Debug, Clone)]
pub struct NodeSpec {
    pub id: String,
    /// Attempts per round (at least 1).
    pub max_attempts: u32,
    /// `Some` for a join node.
    pub join: Option<Join>,
    /// An approval node: it waits for a human decision, not a worker.
    pub approval: bool,
    /// `on_failure: {mode: repair, target}`, as an index into the nodes.
    pub repair_target: Option<usize>,
}

#[derive(Debug, Clone)]
pub struct EdgeSpec {
    pub from: usize,
    pub to: usize,
    pub guard: Guard,
    /// For an edge out of a router: the routes (indices) it belongs to.
    /// Empty: taken whatever the router picks. Non-empty: excluded unless
    /// the router's pick is one of them.
    pub routes: Vec<u32>,
}

/// What the machine runs: the plan's nodes and edges, and its policies.
#[derive(Debug, Clone)]
pub struct Spec {
    pub nodes: Vec<NodeSpec>,
    /// Edges between earlier and later nodes of a DAG (validation made sure).
    pub edges: Vec<EdgeSpec>,
    pub fail_mode: FailMode,
    pub repair_budget: u32,
}

impl Spec {
    /// (1 + repair_budget) × Σ max_attempts: no run executes more attempts.
    pub fn execution_bound(&self) -> u64 {
        (1 + u64::from(self.repair_budget))
            * self
                .nodes
                .iter()
                .map(|n| u64::from(n.max_attempts))
                .sum::<u64>()
    }
}

/// Why a node failed, as far as the run is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The node's own bounded outcome (a gate rejection, a worker fault, an
    /// unverified artifact, spent retries): `continue_declared` goes on.
    Outcome,
    /// A control said no (a broken gate, a denied policy, a missing worker,
    /// a rejected approval, a spent cap): the run stops in every mode.
    Stop,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptEnd {
    Succeeded,
    /// A retryable failure: another attempt if the budget allows.
    Rejected,
    /// A failure no retry can fix.
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    Pending,
    Running { attempt: u32 },
    AwaitingApproval,
    Succeeded,
    Failed(Failure),
    Skipped,
}

impl NodeState {
    /// bounded-loops' name for the state.
    pub fn name(self) -> &'static str {
        match self {
            NodeState::Pending => "PENDING",
            NodeState::Running { .. } => "RUNNING",
            NodeState::AwaitingApproval => "AWAITING_APPROVAL",
            NodeState::Succeeded => "SUCCEEDED",
            NodeState::Failed(_) => "FAILED",
            NodeState::Skipped => "SKIPPED",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            NodeState::Succeeded | NodeState::Failed(_) | NodeState::Skipped
        )
    }
}

/// One incoming edge as its target's admission sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incoming {
    pub guard: Guard,
    /// The source's state.
    pub source: NodeState,
    /// An edge of a route its router (which succeeded) did not pick.
    pub routed_away: bool,
}

/// Seed 000's admission rule, once every parent has ended: `Some(true)`
/// starts the node, `Some(false)` skips it (its branch was not taken),
/// `None` leaves it PENDING for good. bounded-loops 0.7.6's behaviour
/// where the seed is silent is recorded in tests/corpus/graph-runs/
/// SEMANTICS.md (the 90 guard × mode × parent-outcome runs among them).
///
/// - A plain node: an unconditional edge needs its source SUCCEEDED (a
///   FAILED one blocks for good, a SKIPPED one cascades the skip); a guard
///   that missed, or a route not taken, excludes its edge (from a SKIPPED
///   source, the skip cascades); it starts when nothing blocks or cascades
///   and some edge is selected.
/// - A join: its edges select parents (an unconditional edge whatever its
///   parent became, a guard when it is met); none selected, it is
///   skipped; otherwise its mode decides over the selected parents, and a
///   guard never overrides the mode. The mode unmet, it waits for good
///   behind an unconditional edge from a FAILED parent, and is skipped
///   otherwise.
pub fn admit(join: Option<Join>, incoming: &[Incoming]) -> Option<bool> {
    if incoming.is_empty() {
        return Some(true);
    }
    let met = |e: &Incoming| {
        matches!(
            (e.guard, e.source),
            (Guard::Terminal, _)
                | (Guard::Default | Guard::Succeeded, NodeState::Succeeded)
                | (Guard::Failed, NodeState::Failed(_))
                | (Guard::Skipped, NodeState::Skipped)
        )
    };
    let blocked = |e: &Incoming| {
        !e.routed_away && e.guard == Guard::Default && matches!(e.source, NodeState::Failed(_))
    };
    match join {
        None => {
            let cascades =
                |e: &Incoming| e.source == NodeState::Skipped && (e.routed_away || !met(e));
            if incoming.iter().any(blocked) {
                None
            } else if incoming.iter().any(cascades) {
                Some(false)
            } else {
                Some(incoming.iter().any(|e| !e.routed_away && met(e)))
            }
        }
        Some(mode) => {
            let selected: Vec<NodeState> = incoming
                .iter()
                .filter(|e| !e.routed_away && (e.guard == Guard::Default || met(e)))
                .map(|e| e.source)
                .collect();
            if selected.is_empty() {
                return Some(false);
            }
            let satisfied = match mode {
                Join::AllSelected => true,
                Join::AllSuccessful => selected.iter().all(|s| *s == NodeState::Succeeded),
                Join::AnySuccessful => selected.contains(&NodeState::Succeeded),
            };
            if satisfied {
                Some(true)
            } else if incoming.iter().any(blocked) {
                None
            } else {
                Some(false)
            }
        }
    }
}

/// Whether a node may start before all its parents ended: only an
/// any_successful join over unconditional edges, once one parent
/// succeeded (the seed's one exception, which bounded-loops' causality
/// check allows).
pub fn admits_early(join: Option<Join>, incoming: &[Incoming]) -> bool {
    join == Some(Join::AnySuccessful)
        && incoming
            .iter()
            .all(|e| e.guard == Guard::Default && !e.routed_away)
        && incoming.iter().any(|e| e.source == NodeState::Succeeded)
}

/// What happened, for the event log. Every transition carries the round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Started {
        node: usize,
        attempt: u32,
        round: u32,
    },
    Succeeded {
        node: usize,
        attempt: u32,
        round: u32,
    },
    /// A failed attempt with attempts left: the node will start again.
    Retrying {
        node: usize,
        attempt: u32,
        round: u32,
    },
    Failed {
        node: usize,
        attempt: u32,
        round: u32,
        failure: Failure,
    },
    Skipped {
        node: usize,
        round: u32,
    },
    AwaitingApproval {
        node: usize,
        round: u32,
    },
    Approved {
        node: usize,
        round: u32,
    },
    Rejected {
        node: usize,
        round: u32,
    },
    /// A new repair round begins because `trigger` failed.
    RepairRound {
        round: u32,
        trigger: usize,
        target: usize,
    },
    /// A node reset for the new round, and the state it left.
    Repaired {
        node: usize,
        round: u32,
        left: NodeState,
    },
    /// The run stops starting nodes: a failure under fail_closed, or a stop.
    Halted {
        node: usize,
        round: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Something is running or ready.
    Running,
    /// Waiting for approvals and nothing else.
    Paused,
    Succeeded,
    Failed,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MachineError {
    #[error("node {0} is not ready to start")]
    NotReady(String),
    #[error("node {0} is not running")]
    NotRunning(String),
    #[error("node {0} is not an approval node waiting for a decision")]
    NotAwaiting(String),
}

/// The run's state: every node's, the round, and whether it halted.
#[derive(Debug, Clone)]
pub struct Machine {
    spec: Spec,
    parents: Vec<Vec<usize>>,
    children: Vec<Vec<usize>>,
    states: Vec<NodeState>,
    /// Attempts made this round, per node.
    attempts: Vec<u32>,
    /// The round each node's latest attempt started in: a repair that
    /// resets a running node abandons that attempt, and its end, when it
    /// comes, is ignored.
    started_in: Vec<u32>,
    round: u32,
    halted: bool,
    executions: u64,
    /// Decisions recorded ahead of the node asking, by (node, round).
    early_decisions: Vec<(usize, u32, bool)>,
    /// Pending nodes whose parents changed since they were last looked at:
    /// settling visits only these (a worklist), so a run of n nodes costs
    /// O(n + edges), not O(n²).
    dirty: BTreeSet<usize>,
    /// Pending nodes whose parents admit them, in plan order.
    ready_set: BTreeSet<usize>,
    /// What settling at construction decided, for [`Machine::begin`].
    initial: Vec<Transition>,
    /// The route each succeeded router picked (this round).
    picked: Vec<Option<u32>>,
    /// Each node's wave (its longest path from a root).
    level: Vec<u32>,
    /// Nodes whose skip waits for every earlier wave to settle.
    deferred: BTreeSet<usize>,
    /// Every node before this one (in plan order) has settled this round.
    settled_up_to: usize,
}

impl Machine {
    pub fn new(spec: Spec) -> Machine {
        let n = spec.nodes.len();
        let mut parents = vec![Vec::new(); n];
        let mut children = vec![Vec::new(); n];
        for (i, e) in spec.edges.iter().enumerate() {
            parents[e.to].push(i);
            children[e.from].push(e.to);
        }
        // Nodes come in plan order, parents first: one pass gives the waves.
        let mut level = vec![0u32; n];
        for node in 0..n {
            level[node] = parents[node]
                .iter()
                .map(|&e| level[spec.edges[e].from] + 1)
                .max()
                .unwrap_or(0);
        }
        let mut machine = Machine {
            parents,
            children,
            states: vec![NodeState::Pending; n],
            attempts: vec![0; n],
            started_in: vec![0; n],
            round: 0,
            halted: false,
            executions: 0,
            early_decisions: Vec::new(),
            dirty: (0..n).collect(),
            ready_set: BTreeSet::new(),
            initial: Vec::new(),
            picked: vec![None; n],
            level,
            deferred: BTreeSet::new(),
            settled_up_to: 0,
            spec,
        };
        machine.initial = machine.settle();
        machine
    }

    /// Sets a node's state and marks what must be looked at again.
    fn set(&mut self, node: usize, state: NodeState) {
        self.states[node] = state;
        self.ready_set.remove(&node);
        if state == NodeState::Pending {
            self.dirty.insert(node);
        } else if state.is_terminal() {
            self.dirty.extend(self.children[node].iter().copied());
        }
    }

    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    pub fn state(&self, node: usize) -> NodeState {
        self.states[node]
    }

    pub fn states(&self) -> &[NodeState] {
        &self.states
    }

    pub fn round(&self) -> u32 {
        self.round
    }

    /// The route a succeeded router picked (this round).
    pub fn picked(&self, node: usize) -> Option<u32> {
        self.picked[node]
    }

    /// Attempts `node` has started in the current round.
    pub fn attempts(&self, node: usize) -> u32 {
        self.attempts[node]
    }

    /// Attempts started over the whole run, every round counted.
    pub fn executions(&self) -> u64 {
        self.executions
    }

    /// What `node`'s incoming edges say now.
    fn incoming(&self, node: usize) -> Vec<Incoming> {
        self.parents[node]
            .iter()
            .map(|&e| {
                let edge = &self.spec.edges[e];
                let source = self.states[edge.from];
                Incoming {
                    guard: edge.guard,
                    source,
                    routed_away: source == NodeState::Succeeded
                        && !edge.routes.is_empty()
                        && !self.picked[edge.from].is_some_and(|r| edge.routes.contains(&r)),
                }
            })
            .collect()
    }

    /// Whether a pending node may start (`Some(true)`), is skipped
    /// (`Some(false)`), or waits (`None`, for good when a dependency
    /// blocks it). A node leaves PENDING only once every parent has ended
    /// (bounded-loops' causality rule), so a join's evidence holds every
    /// parent's final state. (Its checker would also let an any_successful
    /// join over unconditional edges start at its first success,
    /// [`admits_early`]; the machine never does.)
    fn admission(&self, node: usize) -> Option<bool> {
        let incoming = self.incoming(node);
        if incoming.iter().any(|e| !e.source.is_terminal()) {
            return None;
        }
        admit(self.spec.nodes[node].join, &incoming)
    }

    /// Settles every pending node whose parents decide it: skips (which
    /// cascade) and approvals that now wait. Returns the transitions.
    ///
    /// A skip is recorded once every earlier wave has settled, as
    /// bounded-loops records it: it walks the waves in order, so a branch
    /// that a finished node rules out is marked skipped only after the rest
    /// of that node's wave has run.
    fn settle(&mut self) -> Vec<Transition> {
        let mut out = Vec::new();
        // A halted run leaves what it did not reach PENDING.
        if self.halted {
            self.dirty.clear();
            return out;
        }
        loop {
            // Skips an earlier wave held back go first once it has settled,
            // in plan order with the rest.
            let frontier = self.frontier();
            let released: Vec<usize> = self
                .deferred
                .iter()
                .copied()
                .filter(|&n| self.level[n] <= frontier)
                .collect();
            for node in released {
                self.deferred.remove(&node);
                self.dirty.insert(node);
            }
            // Children come after their parents in plan order, so taking
            // the lowest first visits a skip's cascade in the same pass.
            let Some(node) = self.dirty.pop_first() else {
                return out;
            };
            if self.states[node] != NodeState::Pending {
                continue;
            }
            match self.admission(node) {
                Some(false) if self.level[node] <= frontier => {
                    self.set(node, NodeState::Skipped);
                    out.push(Transition::Skipped {
                        node,
                        round: self.round,
                    });
                }
                Some(false) => {
                    self.ready_set.remove(&node);
                    self.deferred.insert(node);
                }
                Some(true) => {
                    self.ready_set.insert(node);
                }
                None => {
                    self.ready_set.remove(&node);
                }
            }
        }
    }

    /// The wave of the first node (in plan order) that has not settled:
    /// ended, or waiting for good behind a failed dependency.
    fn frontier(&mut self) -> u32 {
        let n = self.states.len();
        while self.settled_up_to < n && self.settled(self.settled_up_to) {
            self.settled_up_to += 1;
        }
        self.level
            .get(self.settled_up_to)
            .copied()
            .unwrap_or(u32::MAX)
    }

    /// Ended, or pending for good. Asked only of the first node not yet
    /// known to have settled, so every parent (earlier in plan order) has
    /// settled: a pending node that is neither ready nor about to be looked
    /// at again can never move.
    fn settled(&self, node: usize) -> bool {
        let state = self.states[node];
        state.is_terminal()
            || (state == NodeState::Pending
                && !self.ready_set.contains(&node)
                && !self.deferred.contains(&node)
                && !self.dirty.contains(&node))
    }

    fn ask_approval(&mut self, node: usize) -> Vec<Transition> {
        let round = self.round;
        let early = self
            .early_decisions
            .iter()
            .position(|&(n, r, _)| n == node && r == round);
        match early {
            Some(i) => {
                let (_, _, approved) = self.early_decisions.remove(i);
                self.set(node, NodeState::AwaitingApproval);
                let mut out = vec![Transition::AwaitingApproval { node, round }];
                out.extend(self.apply_decision(node, approved));
                out
            }
            None => {
                self.set(node, NodeState::AwaitingApproval);
                vec![Transition::AwaitingApproval { node, round }]
            }
        }
    }

    /// The nodes that may start now, in plan order. Empty once halted.
    pub fn ready(&self) -> Vec<usize> {
        if self.halted {
            return Vec::new();
        }
        self.ready_set.iter().copied().collect()
    }

    /// The first node that may start now, in plan order.
    pub fn first_ready(&self) -> Option<usize> {
        if self.halted {
            return None;
        }
        self.ready_set.first().copied()
    }

    /// Whether `node` may start now (what [`Machine::ready`] lists).
    fn is_ready(&self, node: usize) -> bool {
        !self.halted && self.ready_set.contains(&node)
    }

    /// Records that `node` starts its next attempt. An approval node does
    /// not run: it starts waiting for its decision (in plan order, like
    /// any other node), and a decision recorded early is applied at once.
    pub fn start(&mut self, node: usize) -> Result<Vec<Transition>, MachineError> {
        // One node's check, not the whole ready list: a start is per node.
        if !self.is_ready(node) {
            return Err(MachineError::NotReady(self.spec.nodes[node].id.clone()));
        }
        if self.spec.nodes[node].approval {
            let mut out = self.ask_approval(node);
            out.extend(self.settle());
            return Ok(out);
        }
        self.attempts[node] += 1;
        self.started_in[node] = self.round;
        self.executions += 1;
        let attempt = self.attempts[node];
        self.set(node, NodeState::Running { attempt });
        Ok(vec![Transition::Started {
            node,
            attempt,
            round: self.round,
        }])
    }

    /// Records how `node`'s running attempt, started in `round`, ended. An
    /// attempt a repair abandoned (its node was reset while it ran) changes
    /// nothing.
    pub fn finish(
        &mut self,
        node: usize,
        round: u32,
        end: AttemptEnd,
    ) -> Result<Vec<Transition>, MachineError> {
        self.finish_routed(node, round, end, None)
    }

    /// [`Machine::finish`] for a router: a success takes route `route`, and
    /// the edges of every other route are excluded (what lies beyond them
    /// is skipped, as a guard that missed).
    pub fn finish_routed(
        &mut self,
        node: usize,
        round: u32,
        end: AttemptEnd,
        route: Option<u32>,
    ) -> Result<Vec<Transition>, MachineError> {
        let running = match self.states[node] {
            NodeState::Running { attempt } if self.started_in[node] == round => Some(attempt),
            _ => None,
        };
        let Some(attempt) = running else {
            if round < self.round {
                return Ok(Vec::new());
            }
            return Err(MachineError::NotRunning(self.spec.nodes[node].id.clone()));
        };
        let round = self.round;
        let mut out = Vec::new();
        match end {
            AttemptEnd::Succeeded => {
                self.picked[node] = route;
                self.set(node, NodeState::Succeeded);
                out.push(Transition::Succeeded {
                    node,
                    attempt,
                    round,
                });
            }
            AttemptEnd::Rejected
                if attempt < self.spec.nodes[node].max_attempts && !self.halted =>
            {
                self.set(node, NodeState::Pending);
                out.push(Transition::Retrying {
                    node,
                    attempt,
                    round,
                });
            }
            AttemptEnd::Rejected => out.extend(self.fail(node, attempt, Failure::Outcome)),
            AttemptEnd::Stopped => out.extend(self.fail(node, attempt, Failure::Stop)),
        }
        out.extend(self.settle());
        Ok(out)
    }

    fn fail(&mut self, node: usize, attempt: u32, failure: Failure) -> Vec<Transition> {
        let round = self.round;
        self.set(node, NodeState::Failed(failure));
        let mut out = vec![Transition::Failed {
            node,
            attempt,
            round,
            failure,
        }];
        // A repair begins only from the node's own bounded outcome, under
        // continue_declared, with budget left.
        if failure == Failure::Outcome
            && self.spec.fail_mode == FailMode::ContinueDeclared
            && round < self.spec.repair_budget
            && !self.halted
            && let Some(target) = self.spec.nodes[node].repair_target
        {
            out.extend(self.repair(node, target));
            return out;
        }
        if failure == Failure::Stop || self.spec.fail_mode == FailMode::FailClosed {
            self.halted = true;
            out.push(Transition::Halted { node, round });
        }
        out
    }

    /// Starts the next round: the target and everything reachable from it
    /// are reset to pending, each with a receipt of the state it left.
    fn repair(&mut self, trigger: usize, target: usize) -> Vec<Transition> {
        self.round += 1;
        let round = self.round;
        let mut out = vec![Transition::RepairRound {
            round,
            trigger,
            target,
        }];
        let mut reach = BTreeSet::from([target]);
        let mut stack = vec![target];
        while let Some(n) = stack.pop() {
            for &c in &self.children[n] {
                if reach.insert(c) {
                    stack.push(c);
                }
            }
        }
        // In node-id order, as bounded-loops writes the receipts.
        let mut reach: Vec<usize> = reach.into_iter().collect();
        reach.sort_by(|a, b| self.spec.nodes[*a].id.cmp(&self.spec.nodes[*b].id));
        self.settled_up_to = 0;
        for node in reach {
            let left = self.states[node];
            self.deferred.remove(&node);
            self.set(node, NodeState::Pending);
            self.attempts[node] = 0;
            self.picked[node] = None;
            out.push(Transition::Repaired { node, round, left });
        }
        out
    }

    /// Records a human decision. One that arrives before the node asks is
    /// kept for the current round and honoured when the node gets there.
    pub fn decide(&mut self, node: usize, approved: bool) -> Result<Vec<Transition>, MachineError> {
        if !self.spec.nodes[node].approval {
            return Err(MachineError::NotAwaiting(self.spec.nodes[node].id.clone()));
        }
        match self.states[node] {
            NodeState::AwaitingApproval => {
                let mut out = self.apply_decision(node, approved);
                out.extend(self.settle());
                Ok(out)
            }
            NodeState::Pending => {
                self.early_decisions.push((node, self.round, approved));
                Ok(Vec::new())
            }
            _ => Err(MachineError::NotAwaiting(self.spec.nodes[node].id.clone())),
        }
    }

    fn apply_decision(&mut self, node: usize, approved: bool) -> Vec<Transition> {
        let round = self.round;
        if approved {
            self.set(node, NodeState::Succeeded);
            vec![Transition::Approved { node, round }]
        } else {
            // A rejected approval stops the run in every mode.
            let mut out = vec![Transition::Rejected { node, round }];
            out.extend(self.fail(node, 0, Failure::Stop));
            out
        }
    }

    /// Settles what the start of the run decides (roots that are approval
    /// nodes, edges that exclude); call once before the first `ready`.
    pub fn begin(&mut self) -> Vec<Transition> {
        let mut out = std::mem::take(&mut self.initial);
        out.extend(self.settle());
        out
    }

    pub fn status(&self) -> RunStatus {
        let running = self
            .states
            .iter()
            .any(|s| matches!(s, NodeState::Running { .. }));
        if running || self.first_ready().is_some() {
            return RunStatus::Running;
        }
        if self
            .states
            .iter()
            .any(|s| matches!(s, NodeState::Failed(_)))
        {
            return RunStatus::Failed;
        }
        if self.states.contains(&NodeState::AwaitingApproval) {
            return RunStatus::Paused;
        }
        if self
            .states
            .iter()
            .all(|s| matches!(s, NodeState::Succeeded | NodeState::Skipped))
        {
            RunStatus::Succeeded
        } else {
            // Halted with nodes never reached.
            RunStatus::Failed
        }
    }
}
